"""The walk: which files under `documents.input` stage 01 reads, and why not the others.

Stage 01 promises that every input file is accounted for: read as a careful person would
read it, or given a row that says why not.  This module is the first half of that promise:
`list_inputs` walks `documents.input` (sorted, deterministic, no hangs on symlink loops,
never out of the folder through a symlink unless `documents.follow_links`, each file once
however many links lead to it) and decides, before anything is opened, which files are
skipped and why (hidden, excluded, unknown format, over `documents.max_bytes`, a
documentation generator's build leftovers: pipekit/read/build_output.py, a source tree's
tests: pipekit/read/source_tests.py).  The second half,
one file into one row, is pipekit/read/documents.py with a module per format beside it.
"""
from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pipekit.read import build_output, source_tests
from pipekit.run.errors import PipelineError
from pipekit.run.globs import translate

FORMATS = {
    ".md": "markdown", ".markdown": "markdown",
    ".txt": "text",
    ".pdf": "pdf",
    ".html": "html", ".htm": "html", ".xhtml": "html",
    ".csv": "csv", ".tsv": "csv",
    ".rst": "rst", ".rest": "rst",
    ".docx": "docx", ".epub": "epub",  # zips of XML: pipekit/read/zipped.py measures what they inflate to
    ".ipynb": "notebook", ".py": "python",  # cells / docstrings as Markdown sections (pipekit/read/notebook.py, python.py)
}

_HIDDEN_HINT = "set documents.hidden: true to read it"

# documents.max_bytes is set for the stages' ~8x a document's size.  Converting HTML
# builds a tree of Python objects, ~60x the page's size (a 10 MB page peaked at 600 MB),
# so an HTML file counts that many times more against the limit.  reStructuredText's
# docutils tree is as heavy: a 709 kB file of Python's docs peaked at +47 MB (~66x).
# Python's `ast` tree is as heavy too: ~33-70x the source (pandas' frame.py, 725 kB: +24 MB).
_SIZE_WEIGHT = {"html": 8, "rst": 8, "python": 8}


@dataclass
class InputEntry:
    """One thing found under `documents.input`: a file to read, or a reason not to."""

    path: Path            # as found under the root (symlinks not resolved)
    doc_id: str           # POSIX path relative to the root; the file name for a one-file root
    folders: list[str]    # ancestor folder names relative to the root, outermost first
    skip: str | None = None   # reason for a `skipped` row; None means "read it"
    error: str | None = None  # reason for an `error` row found while walking (unlistable folder)
    format: str = ""      # our format name, or the bare extension for unsupported files
    n_bytes: int = 0
    guessed: bool = False  # no extension: read as text only if the content is text
    reason: str | None = None  # the kind of skip, for stage 01's counts (one of SKIP_REASONS)
    via_link: bool = False  # reached through a symlink (the file's own name or a folder above it)
    max_bytes: int | None = None  # read at most this much; a file grown past it since the walk is skipped
    note: str | None = None  # said about the file by the walk (the other names it was reached by)
    key: tuple | None = field(default=None, repr=False)  # (device, inode): one file, however reached
    # [size, mtime_ns, ctime_ns] as the walk's stat saw the file: the listing's stamp, which
    # decides whether it is hashed again (pipekit/run/incremental.py), without a second stat.
    stamp: list | None = field(default=None, repr=False)
    # documents.* settings a reader takes (documents.notebook_outputs): carried with the
    # entry because a cluster's worker gets the entries and nothing else of the config.
    options: dict = field(default_factory=dict, repr=False)


# The kinds of `skipped` row, as stage 01's summary counts them.
SKIP_REASONS = {
    "outside": "outside documents.input (symlink not followed)",
    "too large": "larger than documents.max_bytes",
    "hidden": "hidden",
    "unknown format": "of an unknown format",
    "excluded": "excluded by documents.include/exclude",
    "duplicate": "a second name for a file already read (symlink)",
    "copy": "a copy of a file already read (same bytes)",
    "link": "dangling or looping symlinks",
    "other": "not regular files or .jsonl files inside a folder",
    "build": "documentation build files (a generator's leftovers beside its pages; documents.build_files)",
    "tests": "in a source tree's tests folder (documents.test_files)",
}



# --------------------------------------------------------------------------- walking


def input_listing(cfg: dict, previous_listing: Path,
                  walked: Callable[[list], None] | None = None) -> tuple[list, dict | None]:
    """The walk stage 01 does and its listing of the files it will read, content hashes
    taken from the previous output's record where the files' stamps say they can be.
    The freshness check calls it too (through pipekit/cli.py), so both see the same files.
    `walked(entries)` is called between the walk and the hashing (stage 01 starts its
    reading processes there: pipekit/read/parallel.py, `start_early`)."""
    # Here, not at the top: the readers' processes import this module for InputEntry, and
    # pipekit.run.incremental brings pyarrow and NumPy (~0.15 s of the fork server's start).
    from pipekit.run.incremental import list_files, read_listing

    sec = cfg["documents"]
    root = Path(sec["input"])
    if not root.exists():
        return [], None
    entries = list_inputs(root, sec["include"], sec["exclude"], sec["hidden"],
                          sec["follow_links"], sec["max_bytes"], build_files=sec["build_files"],
                          test_files=sec["test_files"])
    if walked is not None:
        walked(entries)
    listing = list_files(entries, read_listing(previous_listing))
    read_same_bytes_once(entries, listing)
    for e in entries:
        e.options = {k: sec[k] for k in READER_OPTIONS}
    return entries, listing


# The documents.* keys a format's reader is given (pipekit/read/documents.py passes them on).
READER_OPTIONS = ("notebook_outputs",)


def list_inputs(root: Path, include: list[str] = (), exclude: list[str] = (),
                hidden: bool = False, follow_links: bool = False,
                max_bytes: int | None = None, *, build_files: bool = False,
                test_files: bool = True) -> list[InputEntry]:
    """Every file under `root` (or `root` itself when it is a file), sorted by path.

    Hidden files get a `skipped` row each, but a hidden *folder* gets a single skipped
    row and is not entered: the spec says every input file is accounted for, yet a
    `.git` folder holds thousands of objects nobody means as documents, and one row
    saying "hidden folder, not read" accounts for all of them without burying the
    real documents.  The same holds for folders matched by `documents.exclude`.

    Symlinks: one whose target lies inside the root is read, once (see `_Walk`); one that
    leads out of it is a `skipped` row naming its target unless `follow_links`.  A file
    larger than `max_bytes` is a `skipped` row naming its size and the key.

    Documentation build output (pipekit/read/build_output.py): inside a folder recognised as
    a Sphinx or MkDocs build by its marker files, the generator's leftovers (`_sources/`,
    `_static/`, `genindex.html`, the search page, ...) get a `skipped` row each, unless
    `build_files`.  Each file, not one row a folder as for hidden ones: they are few
    enough, and a user looking for `_downloads/x.pdf` finds its own row and reason.

    A source tree's tests (pipekit/read/source_tests.py): below `root`, a folder named like
    a test suite that holds test code is one, and every file under it gets a `skipped` row,
    unless `test_files`.  A row a file, as for build files: `tests/test_x.py` is where a
    user looks for it.  `root` itself is never one: pointed at a tests folder, it is read.
    """
    root = Path(root)
    try:
        root_stat = root.stat()
    except FileNotFoundError:
        raise PipelineError(f"documents.input: {root} does not exist") from None
    except OSError as exc:
        raise PipelineError(f"documents.input: cannot open {root}: {exc.strerror}") from None
    if not stat.S_ISDIR(root_stat.st_mode):
        # A file named explicitly is read whatever include/exclude/hidden/links say: the
        # user pointed at it.  Its size still counts: a crash is no answer to a big file.
        return [_file_entry(root, root.name, [], root_stat, [], [], in_folder=False, max_bytes=max_bytes)]
    walk = _Walk(root, root_stat, [_Glob(p) for p in include], [_Glob(p) for p in exclude],
                 hidden, follow_links, max_bytes, build_files, test_files)
    entries = walk.run()
    entries.sort(key=lambda e: e.doc_id.split("/"))
    _read_each_file_once(entries)
    return entries


class _Walk:
    """The folder walk of `list_inputs`.

    An explicit stack, not recursion: a deeply nested tree must not hit Python's recursion
    limit.  Each frame carries the (device, inode) of its ancestors, which is how a symlink
    pointing back up the tree is recognised instead of followed forever.

    Symlinks are where a walk can leave the folder the user named: a link to `/etc` or to a
    home folder made an earlier version index /etc/shadow as a document.  So every link is
    resolved first; a target outside the root is a `skipped` row unless `follow_links`
    (the default of find, ripgrep and git alike).  A linked folder is entered only after
    every real folder has been walked, and not at all if its target was walked already:
    `latest -> releases/v2` then costs one row, not a second copy of every file in v2.
    """

    def __init__(self, root: Path, root_stat: os.stat_result, include: list["_Glob"],
                 exclude: list["_Glob"], hidden: bool, follow_links: bool, max_bytes: int | None,
                 build_files: bool = False, test_files: bool = True):
        self.root = root
        self.build_files, self.test_files = build_files, test_files
        self.root_real = os.path.realpath(root)
        self.include, self.exclude = include, exclude
        self.hidden, self.follow_links, self.max_bytes = hidden, follow_links, max_bytes
        root_key = (root_stat.st_dev, root_stat.st_ino)
        # A frame: folder, its path parts, ancestors' keys, reached via a link, the build
        # folder it lies in (or None), inside a leftover folder what that folder is, and
        # inside a tests folder the reason its files are skipped.
        self.stack = [(root, [], frozenset({root_key}), False, None, None, None)]
        self.deferred: list = []  # linked folders, entered once the real ones are all walked
        self.walked = {root_key: ""}  # folder (device, inode) -> the doc_id it was walked as
        self.entries: list[InputEntry] = []

    def run(self) -> list[InputEntry]:
        while self.stack or self.deferred:
            if not self.stack:
                self._enter_linked(*self.deferred.pop(0))
                continue
            self._list(*self.stack.pop())
        return self.entries

    def _inside(self, real: str) -> bool:
        return real == self.root_real or real.startswith(self.root_real.rstrip(os.sep) + os.sep)

    def _enter_linked(self, path, rel, ancestors, key, entry, build=None, left=None, tests=None) -> None:
        if key in self.walked:
            entry.format, entry.reason = "symlink", "duplicate"
            where = self.walked[key]
            entry.skip = (f"symlink to a folder already read as {where or 'the input folder'}/: "
                          "its files are read once, there")
            self.entries.append(entry)
            return
        self.walked[key] = entry.doc_id
        self.stack.append((path, rel, ancestors | {key}, True, build, left, tests))

    def _list(self, folder: Path, parts: list[str], ancestors: frozenset, via_link: bool,
              build: build_output.Build | None = None, left: str | None = None,
              tests: str | None = None) -> None:
        try:
            # The scan's entries know whether each name is a symlink (from the directory
            # itself): one system call a file instead of two.  Not their stat(): on Windows
            # it has no inode, and (device, inode) is how loops and duplicates are found.
            with os.scandir(folder) as it:
                found = sorted(it, key=lambda d: d.name)
            names = [d.name for d in found]
        except OSError as exc:
            if not parts:
                raise PipelineError(f"documents.input: cannot list {folder}: {exc.strerror}") from None
            self.entries.append(InputEntry(folder, "/".join(parts), parts[:-1], format="folder",
                                           error=f"cannot list folder: {_strerror(exc)}", via_link=via_link))
            return
        if not self.build_files and left is None:
            build = build_output.recognise(str(folder), set(names), "/".join(parts), len(parts)) or build
        if not self.test_files and tests is None and parts and (marker := source_tests.recognise(parts[-1], names)):
            tests = source_tests.reason("/".join(parts), marker)
        for found_entry, name in zip(found, names):
            path = folder / name
            rel = parts + [name]
            doc_id = "/".join(rel)
            what = left if left is not None or build is None else \
                build_output.leftover(build, "/".join(rel[build.depth:]))
            is_link = found_entry.is_symlink()
            entry = InputEntry(path, doc_id, list(parts), via_link=via_link or is_link)
            if name.startswith(".") and not self.hidden:
                is_dir = _is_dir_quiet(path)
                entry.format = "folder" if is_dir else _extension(name)
                entry.skip = f"hidden {'folder' if is_dir else 'file'}, not read ({_HIDDEN_HINT})"
                entry.reason = "hidden"
                self.entries.append(entry)
                continue
            try:
                st = found_entry.stat()  # Path.stat's call, without making the path a string again
            except OSError as exc:
                is_link = is_link and os.path.islink(path)  # a link removed since the listing: gone, not dangling
                entry.format = "symlink" if is_link else _extension(name)
                entry.skip, entry.error = _stat_problem(path, is_link, exc)
                entry.reason = "link" if entry.skip else None
                self.entries.append(entry)
                continue
            if is_link and not self.follow_links:
                target = os.path.realpath(path)
                if not self._inside(target):
                    entry.format = "folder" if stat.S_ISDIR(st.st_mode) else _extension(name)
                    entry.reason = "outside"
                    entry.skip = (f"symlink to {target}, outside documents.input: not followed "
                                  "(set documents.follow_links: true to read it)")
                    self.entries.append(entry)
                    continue
            if stat.S_ISDIR(st.st_mode):
                key = (st.st_dev, st.st_ino)
                pattern = _first_match(self.exclude, doc_id, is_dir=True)
                if key in ancestors:
                    entry.format, entry.reason = "symlink", "link"
                    target = os.readlink(path) if is_link else "a bind mount"
                    entry.skip = f"symlink loop: {doc_id} -> {target} leads back to a folder it is in"
                elif pattern:
                    entry.format, entry.reason = "folder", "excluded"
                    entry.skip = f"folder excluded by documents.exclude pattern {pattern!r}"
                elif is_link:
                    self.deferred.append((path, rel, ancestors, key, entry, build, what, tests))
                    continue
                elif key in self.walked:  # a real folder met again inside a linked one
                    entry.format, entry.reason = "folder", "duplicate"
                    entry.skip = f"folder already read as {self.walked[key] or 'the input folder'}/"
                else:
                    self.walked[key] = doc_id
                    self.stack.append((path, rel, ancestors | {key}, via_link, build, what, tests))
                    continue
                self.entries.append(entry)
            elif stat.S_ISREG(st.st_mode) and what is not None:
                entry.format, entry.reason, entry.n_bytes = _extension(name), "build", st.st_size
                entry.skip = build_output.reason(build, what)
                self.entries.append(entry)
            elif stat.S_ISREG(st.st_mode) and tests is not None:
                entry.format, entry.reason, entry.n_bytes = _extension(name), "tests", st.st_size
                entry.skip = tests
                self.entries.append(entry)
            elif stat.S_ISREG(st.st_mode):
                file = _file_entry(path, doc_id, list(parts), st, self.include, self.exclude,
                                   in_folder=True, max_bytes=self.max_bytes)
                file.via_link = entry.via_link
                self.entries.append(file)
            else:
                # Opening a FIFO blocks until someone writes to it: never open what is not
                # a regular file.
                entry.format, entry.reason = _extension(name), "other"
                entry.skip = f"not a regular file ({_file_kind(st.st_mode)})"
                self.entries.append(entry)


def _read_each_file_once(entries: list[InputEntry]) -> None:
    """A file reached by two names (`notes.md` and a link to it) is one document.

    It is read under the name reached without a link when there is one, else under the
    first name in sorted order; each other name reached through a link gets a `skipped`
    row pointing at it, and the document's `note` lists those names.  Two hard links are
    not told apart here: they hold the same bytes, so `read_same_bytes_once` reads the
    first and gives the other a row naming it, as for any copy.
    """
    readers: dict[tuple, InputEntry] = {}
    for e in entries:  # sorted: the first direct name wins, else the first linked one
        if e.key is None or e.skip is not None or e.error is not None:
            continue
        first = readers.get(e.key)
        if first is None or (first.via_link and not e.via_link):
            readers[e.key] = e
    for e in entries:
        first = readers.get(e.key) if e.key is not None and e.skip is None and e.error is None else None
        if first is None or first is e or not e.via_link:
            continue
        e.skip = f"same file as {first.doc_id} (reached through a symlink): read once, as {first.doc_id}"
        e.reason = "duplicate"
        also = f"also reached as {e.doc_id}"
        first.note = f"{first.note}, {e.doc_id}" if first.note else also


def read_same_bytes_once(entries: list[InputEntry], listing: dict) -> None:
    """A file with the same bytes as one listed before it is a `skipped` row naming that one.

    A real folder holds copies: the same PDF manual under `downloads/` and `manuals/`, a
    page saved twice.  Read twice, each copy's chunks doubled the document's weight in
    every score (two hits of one passage in the top 10) and its terms' df.  The first
    copy in sorted doc_id order is read, not the shortest path: stage 01 writes rows in
    that order, so the row that is read always comes before the rows that name it, and
    which copy is read never depends on anything but the names.  Equal means equal size
    and equal content hash (64 bits of BLAKE2b: among a million files a chance collision
    is about 3 in 10^8).

    Not deduplicated: empty files (every 0-byte file has the same bytes, yet `__init__.py`
    and `TODO.md` are different documents, each giving its own no-chunk line in stage
    03's summary: nothing to read twice, so nothing is saved), files skipped or failed
    for another reason, and extensionless files (read only if their content is text, so
    one cannot vouch for a copy that is).  The copy's listing key names the file it
    copies: its row is that name, so when that file changes or goes, the copy's row is
    made again (read, or naming the next copy) and every other row is reused.  The file
    read says nothing of its copies (a symlink's target notes its other names): its row
    would then change, and the file be read again, each time a copy came or went.
    """
    from pipekit.run.incremental import COPY, content_of

    files = listing["files"]
    first_of: dict[tuple, str] = {}
    for e in entries:  # sorted by doc_id: the first of each set of copies is read
        stamp = files.get(e.doc_id)
        if e.skip is not None or e.error is not None or e.guessed or not stamp or not stamp[0]:
            continue
        content = content_of(stamp[3])
        if content is None:
            continue
        first = first_of.setdefault((stamp[0], content), e.doc_id)
        if first == e.doc_id:
            continue
        e.skip, e.reason = f"same bytes as {first}: read once, as {first}", "copy"
        stamp[3] = f"{COPY}{first}|{stamp[3]}"


def _file_entry(path: Path, doc_id: str, folders: list[str], st: os.stat_result,
                include: list["_Glob"], exclude: list["_Glob"], in_folder: bool,
                max_bytes: int | None = None) -> InputEntry:
    ext = _suffix(path.name).lower()
    entry = InputEntry(path, doc_id, folders, format=FORMATS.get(ext, ext.lstrip(".")), n_bytes=st.st_size,
                       max_bytes=max_bytes, key=(st.st_dev, st.st_ino), stamp=[st.st_size, st.st_mtime_ns, st.st_ctime_ns])
    if ext == ".jsonl" and not in_folder:
        entry.format = "beir"  # SPEC: a .jsonl documents.input is a BEIR corpus; iter_beir reads it
        return entry
    pattern = _first_match(exclude, doc_id, is_dir=False)
    if include and not _first_match(include, doc_id, is_dir=False):
        entry.skip, entry.reason = "not matched by any documents.include pattern", "excluded"
    elif pattern:
        entry.skip, entry.reason = f"excluded by documents.exclude pattern {pattern!r}", "excluded"
    elif ext == ".jsonl":
        # Its records would need doc_ids of their own, clashing with the files' ones.
        entry.skip = ("a .jsonl file inside a folder is not read; point documents.input at it "
                      "to read it as a BEIR corpus")
        entry.reason = "other"
    elif ext and ext not in FORMATS:
        entry.skip = f"format {ext!r} is not supported (readable: {', '.join(sorted(FORMATS))})"
        entry.reason = "unknown format"
    elif max_bytes is not None and st.st_size > max_bytes // _SIZE_WEIGHT.get(entry.format, 1):
        entry.skip, entry.reason = too_large(st.st_size, max_bytes, entry.format), "too large"
    elif not ext:
        # README, LICENSE, TODO, Makefile: extensionless files are usually text worth
        # reading.  read_document looks at the content before claiming it.
        entry.format = "text"
        entry.guessed = True
    return entry


def too_large(size: int, max_bytes: int, fmt: str = "") -> str:
    """The skip reason of a file over the limit: its size, the limit, and the key to raise."""
    weight = _SIZE_WEIGHT.get(fmt, 1)
    limit = f"documents.max_bytes ({_human(max_bytes)})"
    if weight > 1:
        limit = (f"documents.max_bytes / {weight} ({_human(max_bytes // weight)}; converting "
                 f"{fmt.upper()} takes ~{8 * weight}x its size in memory)")
    return (f"{_human(size)} ({size:,} bytes) is larger than {limit}: not read, so that one "
            "document cannot exhaust memory; raise documents.max_bytes to read it")


def _human(n: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _stat_problem(path: Path, is_link: bool, exc: OSError) -> tuple[str | None, str | None]:
    """(skip, error) for a name we cannot stat: a broken link is skipped, the rest is an error."""
    if is_link and isinstance(exc, FileNotFoundError):
        return f"dangling symlink: target {os.readlink(path)} does not exist", None
    if is_link and exc.errno == errno.ELOOP:  # a chain of links that never reaches a file
        return f"symlink loop: {os.readlink(path)} never resolves to a file", None
    if isinstance(exc, FileNotFoundError):
        return None, "file disappeared while the folder was being read"
    return None, _strerror(exc)


def _is_dir_quiet(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def _extension(name: str) -> str:
    """The `format` value of a file we do not read: ours if known, else the bare extension."""
    ext = _suffix(name).lower()
    return FORMATS.get(ext, ext.lstrip("."))


def _suffix(name: str) -> str:
    """`PurePath(name).suffix` of a file name, without making a path of it: the walk asks it
    of every file, and a Path per name was a tenth of listing a 1,400-file folder."""
    i = name.rfind(".")
    return name[i:] if 0 < i < len(name) - 1 else ""


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISFIFO, "named pipe"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return kind
    return "special file"


def _strerror(exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return "permission denied"
    return (exc.strerror or str(exc)).lower()


class _Glob:
    """A gitignore-flavoured glob matched against a POSIX path relative to the root.

    `*` and `?` stay inside one folder, `**` crosses folders, a pattern without `/`
    matches a name at any depth (`*.csv`, `drafts`), a leading `/` anchors it at the
    root, and a trailing `/` makes it match folders only.  `dir/**` also matches the
    folder itself, so excluding it prunes the whole subtree in one row.
    """

    def __init__(self, pattern: str):
        self.pattern = pattern
        body = pattern.strip()
        self.dirs_only = body.endswith("/")
        body = body.rstrip("/")
        if body.startswith("/"):
            body = body.lstrip("/")
        elif "/" not in body:
            body = "**/" + body
        self.regex = re.compile(translate(body))

    def matches(self, rel: str, is_dir: bool) -> bool:
        if self.dirs_only and not is_dir:
            return False
        return self.regex.match(rel) is not None


def _first_match(globs: list[_Glob], rel: str, is_dir: bool) -> str | None:
    for glob in globs:
        if glob.matches(rel, is_dir):
            return glob.pattern
    return None
