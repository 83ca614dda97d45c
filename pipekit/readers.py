"""Reading the user's documents: walk the input, turn each file into one stage-01 row.

Stage 01 promises that every input file is accounted for: read as a careful person would
read it, or given a row that says why not.  This module is that promise in code:

* `list_inputs` walks `documents.input` (sorted, deterministic, no hangs on symlink
  loops, never out of the folder through a symlink unless `documents.follow_links`, each
  file once however many links lead to it) and decides, before anything is opened, which
  files are skipped and why (hidden, excluded, unknown format, over `documents.max_bytes`,
  a documentation generator's build leftovers: pipekit/build_output.py);
* `read_document` turns one listed file into a row of the stage-01 columns, never
  raising for a bad file: the problem becomes `status="error"` and a one-line message;
* `iter_beir` yields one row per record of a BEIR `corpus.jsonl`, where a malformed line
  *does* stop the run (a corpus with a broken line is a broken corpus, not one bad file).

Formats: Markdown and plain text as decoded; PDF per page through PDFium with a
`--- page N ---` line before each page, and its outline (bookmarks) in `outline`; HTML converted to Markdown so that stage 03's
heading, list, table and code rules apply; reStructuredText converted to Markdown by docutils
(pipekit/rst.py), sections as headings, for the same reason; CSV kept as its original lines (stage 03
cuts between records and must give exact spans into the text, so we never re-serialise).
"""
from __future__ import annotations

import codecs
import csv
import errno
import io
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator


from pipekit import build_output
from pipekit.errors import PipelineError
from pipekit.html_markdown import html_to_markdown
from pipekit.incremental import content_hash
from pipekit.markdown_blocks import front_matter_title
from pipekit.pages import read_outline

COLUMNS = ("doc_id", "source", "format", "text", "status", "error", "path", "title",
           "encoding", "page_labels", "note", "n_bytes", "outline", "content_hash")

FORMATS = {
    ".md": "markdown", ".markdown": "markdown",
    ".txt": "text",
    ".pdf": "pdf",
    ".html": "html", ".htm": "html", ".xhtml": "html",
    ".csv": "csv", ".tsv": "csv",
    ".rst": "rst", ".rest": "rst",
}

_HIDDEN_HINT = "set documents.hidden: true to read it"

# documents.max_bytes is set for the stages' ~8x a document's size.  Converting HTML
# builds a tree of Python objects, ~60x the page's size (a 10 MB page peaked at 600 MB),
# so an HTML file counts that many times more against the limit.  reStructuredText's
# docutils tree is as heavy: a 709 kB file of Python's docs peaked at +47 MB (~66x).
_SIZE_WEIGHT = {"html": 8, "rst": 8}


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


# The kinds of `skipped` row, as stage 01's summary counts them.
SKIP_REASONS = {
    "outside": "outside documents.input (symlink not followed)",
    "too large": "larger than documents.max_bytes",
    "hidden": "hidden",
    "unknown format": "of an unknown format",
    "excluded": "excluded by documents.include/exclude",
    "duplicate": "a second name for a file already read (symlink)",
    "link": "dangling or looping symlinks",
    "other": "not regular files or .jsonl files inside a folder",
    "build": "documentation build files (a generator's leftovers beside its pages; documents.build_files)",
}


class Unreadable(Exception):
    """A file we looked at and could not read; its message goes into the `error` column."""


# --------------------------------------------------------------------------- walking


def list_inputs(root: Path, include: list[str] = (), exclude: list[str] = (),
                hidden: bool = False, follow_links: bool = False,
                max_bytes: int | None = None, *, build_files: bool = False) -> list[InputEntry]:
    """Every file under `root` (or `root` itself when it is a file), sorted by path.

    Hidden files get a `skipped` row each, but a hidden *folder* gets a single skipped
    row and is not entered: the spec says every input file is accounted for, yet a
    `.git` folder holds thousands of objects nobody means as documents, and one row
    saying "hidden folder, not read" accounts for all of them without burying the
    real documents.  The same holds for folders matched by `documents.exclude`.

    Symlinks: one whose target lies inside the root is read, once (see `_Walk`); one that
    leads out of it is a `skipped` row naming its target unless `follow_links`.  A file
    larger than `max_bytes` is a `skipped` row naming its size and the key.

    Documentation build output (pipekit/build_output.py): inside a folder recognised as
    a Sphinx or MkDocs build by its marker files, the generator's leftovers (`_sources/`,
    `_static/`, `genindex.html`, the search page, ...) get a `skipped` row each, unless
    `build_files`.  Each file, not one row a folder as for hidden ones: they are few
    enough, and a user looking for `_downloads/x.pdf` finds its own row and reason.
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
                 hidden, follow_links, max_bytes, build_files)
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
                 build_files: bool = False):
        self.root = root
        self.build_files = build_files
        self.root_real = os.path.realpath(root)
        self.include, self.exclude = include, exclude
        self.hidden, self.follow_links, self.max_bytes = hidden, follow_links, max_bytes
        root_key = (root_stat.st_dev, root_stat.st_ino)
        # A frame: folder, its path parts, ancestors' keys, reached via a link, the build
        # folder it lies in (or None) and, inside a leftover folder, what that folder is.
        self.stack = [(root, [], frozenset({root_key}), False, None, None)]
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

    def _enter_linked(self, path, rel, ancestors, key, entry, build=None, left=None) -> None:
        if key in self.walked:
            entry.format, entry.reason = "symlink", "duplicate"
            where = self.walked[key]
            entry.skip = (f"symlink to a folder already read as {where or 'the input folder'}/: "
                          "its files are read once, there")
            self.entries.append(entry)
            return
        self.walked[key] = entry.doc_id
        self.stack.append((path, rel, ancestors | {key}, True, build, left))

    def _list(self, folder: Path, parts: list[str], ancestors: frozenset, via_link: bool,
              build: build_output.Build | None = None, left: str | None = None) -> None:
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
                st = path.stat()
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
                    self.deferred.append((path, rel, ancestors, key, entry, build, what))
                    continue
                elif key in self.walked:  # a real folder met again inside a linked one
                    entry.format, entry.reason = "folder", "duplicate"
                    entry.skip = f"folder already read as {self.walked[key] or 'the input folder'}/"
                else:
                    self.walked[key] = doc_id
                    self.stack.append((path, rel, ancestors | {key}, via_link, build, what))
                    continue
                self.entries.append(entry)
            elif stat.S_ISREG(st.st_mode) and what is not None:
                entry.format, entry.reason, entry.n_bytes = _extension(name), "build", st.st_size
                entry.skip = build_output.reason(build, what)
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
    two names the user made on purpose, and are both read, as before.
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


def _file_entry(path: Path, doc_id: str, folders: list[str], st: os.stat_result,
                include: list["_Glob"], exclude: list["_Glob"], in_folder: bool,
                max_bytes: int | None = None) -> InputEntry:
    ext = path.suffix.lower()
    entry = InputEntry(path, doc_id, folders, format=_extension(path.name), n_bytes=st.st_size,
                       max_bytes=max_bytes, key=(st.st_dev, st.st_ino))
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
    ext = Path(name).suffix.lower()
    return FORMATS.get(ext, ext.lstrip("."))


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
        self.regex = re.compile(self._translate(body))

    @staticmethod
    def _translate(glob: str) -> str:
        out, i = [], 0
        while i < len(glob):
            if glob.startswith("**/", i):
                out.append("(?:.*/)?")
                i += 3
            elif glob.startswith("/**", i) and i + 3 == len(glob):
                out.append("(?:/.*)?")
                i += 3
            elif glob.startswith("**", i):
                out.append(".*")
                i += 2
            elif glob[i] == "*":
                out.append("[^/]*")
                i += 1
            elif glob[i] == "?":
                out.append("[^/]")
                i += 1
            elif glob[i] == "[" and "]" in glob[i + 2:]:
                end = glob.index("]", i + 2)
                inner = glob[i + 1:end]
                if inner.startswith("!"):
                    inner = "^" + inner[1:]
                out.append("[" + inner.replace("\\", "\\\\") + "]")
                i = end + 1
            else:
                out.append(re.escape(glob[i]))
                i += 1
        return "".join(out) + r"\Z"

    def matches(self, rel: str, is_dir: bool) -> bool:
        if self.dirs_only and not is_dir:
            return False
        return self.regex.match(rel) is not None


def _first_match(globs: list[_Glob], rel: str, is_dir: bool) -> str | None:
    for glob in globs:
        if glob.matches(rel, is_dir):
            return glob.pattern
    return None


# --------------------------------------------------------------------------- one file


def read_document(entry: InputEntry) -> dict:
    """The stage-01 row for one listed file.  Never raises for a bad file."""
    row = dict.fromkeys(COLUMNS)
    row.update(doc_id=entry.doc_id, source=str(entry.path), format=entry.format,
               path=list(entry.folders), n_bytes=entry.n_bytes)
    if entry.skip is not None:
        # The reason goes into `error` too: it is the one column a reader checks to learn
        # why a document has no text.
        row.update(status="skipped", error=entry.skip)
        return row
    if entry.error is not None:
        row.update(status="error", error=entry.error)
        return row
    if entry.format == "beir":
        raise ValueError(f"{entry.doc_id} is a BEIR corpus: read it with iter_beir")
    try:
        if entry.guessed and _looks_binary(entry.path):
            row.update(status="skipped", format="", error="no file extension and the content is not text")
            return row
        cap = None if entry.max_bytes is None else entry.max_bytes // _SIZE_WEIGHT.get(entry.format, 1)
        data = _read_capped(entry.path, cap)
        if data is None:  # it grew past the limit after the walk measured it
            size = entry.path.stat().st_size
            row.update(status="skipped", error=too_large(size, entry.max_bytes, entry.format), n_bytes=size)
            return row
        row["n_bytes"] = len(data)
        row["content_hash"] = content_hash(data)
        row.update(_READERS[entry.format](data))
        del data  # the bytes are the text's size again: not kept while the row lives on
        row["status"] = "ok"
        if entry.guessed:
            row["note"] = "; ".join(filter(None, ["no file extension: read as plain text", row["note"]]))
        if entry.note:
            row["note"] = "; ".join(filter(None, [row["note"], entry.note]))
    except Unreadable as exc:
        if entry.guessed:  # we only guessed it was text: not being text is no error
            row.update(status="skipped", format="", error=f"no file extension and the content is not text ({exc})")
        else:
            row.update(status="error", error=str(exc), text=None)
    except OSError as exc:
        row.update(status="error", error=f"cannot read file: {_strerror(exc)}", text=None)
    return row


def _read_capped(path: Path, max_bytes: int | None) -> bytes | None:
    """The file's bytes, or None if it holds more than max_bytes."""
    if max_bytes is None:
        return path.read_bytes()
    with path.open("rb") as handle:
        data = handle.read(max_bytes + 1)
    return None if len(data) > max_bytes else data


def _looks_binary(path: Path, sniff: int = 8192) -> bool:
    """A NUL in the first 8 KiB: git's test, so a 2 GB extensionless binary is not read whole."""
    with path.open("rb") as handle:
        return b"\x00" in handle.read(sniff)


def read_text_file(data: bytes) -> dict:
    text, encoding, note = decode_text(data)
    return {"text": text, "encoding": encoding, "note": note}


def read_markdown(data: bytes) -> dict:
    """A text file whose YAML front matter may name its title."""
    row = read_text_file(data)
    row["title"] = front_matter_title(row["text"])
    return row


# ---- encodings

_BOMS = (  # UTF-32 first: its little-endian BOM begins with UTF-16's
    (codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"),
)
# C0 and C1 control characters other than the whitespace ones (tab, LF, VT, FF, CR).
_CONTROL = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f]")
# Text is text even with a stray control character (a NUL from a crashed editor);
# when more than a tenth of it is control characters, nobody wrote it to be read.
_MAX_CONTROL_SHARE = 0.10
# Legacy single-byte code pages charset-normalizer cannot tell apart on Western text:
# for "Le café était très chaud", cp1257 (Baltic) scored better than cp1252 and turned
# "très" into "trčs".  So when cp1252 (or Latin-1) is among its candidates and scores
# within _NEAR_TIE of the best, we take it: Windows-1252 is what Western users' legacy
# files are in.  The price, a real Baltic or Central European file read as cp1252, is
# paid only when that decoding is just as plausible; Cyrillic, Greek and CJK texts never
# offer cp1252 as a candidate.  Detection of 8-bit code pages on short text stays a guess,
# which is why the note says "detected": re-saving such a file as UTF-8 removes the doubt.
_PREFERRED_LEGACY = ("cp1252", "latin_1", "iso8859_15")
_NEAR_TIE = 0.06


def decode_text(data: bytes, declared: str | None = None) -> tuple[str, str, str | None]:
    """(text, encoding, note) for a text file's bytes; raises Unreadable when it is not text.

    The order is the one that cannot be fooled: a byte-order mark is a statement by the
    writer; valid UTF-8 is almost never an accident for non-ASCII text; an encoding the
    document declares (HTML's <meta charset>) comes next; only then do we guess, with
    charset-normalizer.  The recorded encoding is the Python codec that decodes the file
    as it is on disk (BOM included: `utf-8-sig`, `utf-16`, `utf-32`).
    """
    for bom, codec in _BOMS:
        if data.startswith(bom):
            try:
                return _checked(data.decode(codec), codec, None, data)
            except UnicodeDecodeError as exc:
                raise Unreadable(f"undecodable: starts with a {codec} byte-order mark but byte "
                                 f"{exc.start} is not valid {codec}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad_at = exc.start
    else:
        return _checked(text, "utf-8", None, data)
    if b"\x00" in data:
        raise Unreadable(_not_text(data))
    mostly = _mostly_utf8(data)
    if mostly is not None:
        text, bad = mostly
        return _checked(text, "utf-8", f"{bad} invalid UTF-8 sequence{'s' if bad > 1 else ''} "
                        f"(first at byte {bad_at}) replaced by U+FFFD", data)
    if declared:
        try:
            return _checked(data.decode(declared), codecs.lookup(declared).name,
                            f"not UTF-8; decoded as the declared charset {declared}", data)
        except (LookupError, UnicodeDecodeError):
            pass
    codec = _detect(data)
    try:
        text = data.decode(codec) if codec else None
    except UnicodeDecodeError:  # charset-normalizer judges samples; the whole file may disagree
        text = None
    if text is None:
        raise Unreadable(f"undecodable: not UTF-8 (invalid byte at offset {bad_at}) and no "
                         "other encoding fits")
    return _checked(text, codec, f"not UTF-8; encoding {codec} detected by charset-normalizer", data)


_NON_ASCII = re.compile("[^\x00-\x7f]")


def _mostly_utf8(data: bytes) -> tuple[str, int] | None:
    """(text, number of bad sequences) when the bytes are UTF-8 with a few bad ones.

    A UTF-8 file with one stray Windows-1252 byte pasted in, or cut off in the middle of
    a character, is still a UTF-8 file: handing it to the detector instead would decode
    every one of its good accented letters as mojibake.  The test: valid multi-byte
    sequences outnumber the invalid ones ten to one (a real cp1252 file forms valid
    UTF-8 sequences only by accident, so it has next to none).
    """
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd")
    good = len(_NON_ASCII.findall(text)) - bad
    return (text, bad) if good >= 10 * bad else None


def _checked(text: str, encoding: str, note: str | None, data: bytes) -> tuple[str, str, str | None]:
    controls = len(_CONTROL.findall(text))
    if controls and controls > _MAX_CONTROL_SHARE * len(text):
        raise Unreadable(_not_text(data))
    if "\x00" in text:
        nuls = text.count("\x00")
        extra = f"contains {nuls} NUL character{'s' if nuls > 1 else ''} (removed by stage 02)"
        note = f"{note}; {extra}" if note else extra
    return text, encoding, note


def _not_text(data: bytes) -> str:
    """Why bytes are not text, in words: binary (and what kind, when its first bytes say
    so), or UTF-16 text that lost its byte-order mark, which a re-save fixes."""
    if _looks_utf16(data[:4096]):
        return ("not readable as text: it looks like UTF-16 without a byte-order mark "
                "(every other byte is NUL): re-save it with one, or as UTF-8")
    kind = next((name for magic, name in _MAGIC if data.startswith(magic)), None)
    why = "NUL bytes" if b"\x00" in data else "mostly control characters"
    return f"binary file ({kind + ': ' if kind else ''}{why}), not text"


# The first bytes of the binary files most often found renamed or mislabelled in a
# documents folder: naming the kind tells the user what they copied by mistake.
_MAGIC = (
    (b"\x7fELF", "an ELF executable or library"), (b"MZ", "a Windows executable or DLL"),
    (b"\xcf\xfa\xed\xfe", "a Mach-O executable"), (b"\xca\xfe\xba\xbe", "a Mach-O or Java class file"),
    (b"PK\x03\x04", "a ZIP archive (also .docx, .xlsx, .jar)"), (b"\x1f\x8b", "gzip-compressed data"),
    (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
    (b"SQLite format 3\x00", "an SQLite database"), (b"\xd0\xcf\x11\xe0", "an old Microsoft Office file"),
)


def _looks_utf16(sample: bytes) -> bool:
    """True when the bytes read as UTF-16 text (either byte order), not merely hold many NULs.

    The old test, "most bytes of one parity are NUL", called /bin/ls UTF-16: an executable
    is full of zero runs, so both parities are mostly NUL.  Text in UTF-16 has NUL in one
    parity only (the high byte of Latin letters), never in the other, and decodes without
    U+0000 and with next to no control characters."""
    sample = sample[: len(sample) // 2 * 2]
    if len(sample) < 8:
        return False
    for high, codec in ((sample[1::2], "utf-16-le"), (sample[0::2], "utf-16-be")):
        low = sample[0::2] if codec == "utf-16-le" else sample[1::2]
        if high.count(0) < 0.5 * len(high) or low.count(0) > 0.02 * len(low):
            continue
        try:
            text = sample.decode(codec)
        except UnicodeDecodeError:  # a lone surrogate at the cut is not evidence
            text = sample[:-2].decode(codec, errors="replace")
        if "\x00" not in text and len(_CONTROL.findall(text)) <= 0.02 * len(text):
            return True
    return False


def _detect(data: bytes) -> str | None:
    from charset_normalizer import from_bytes  # imported late: it is slow to import

    matches = list(from_bytes(data))
    if not matches:
        return None
    best = matches[0]
    for codec in _PREFERRED_LEGACY:
        for match in matches:
            if match.encoding == codec and match.chaos <= best.chaos + _NEAR_TIE:
                return codec
    return best.encoding


# ---- PDF

def read_pdf(data: bytes) -> dict:
    """Text of each page after a `--- page N ---` line, N the physical page from 1."""
    if not data:
        raise Unreadable("empty PDF file (0 bytes)")
    if b"%PDF-" not in data[:1024]:
        raise Unreadable("not a PDF: no %PDF- header (a misnamed file?)")
    import pypdfium2 as pdfium  # imported late: only PDF folders pay for it

    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise Unreadable("encrypted PDF: it needs a password to open") from None
        cut = "" if b"%EOF" in data[-2048:] else "truncated (no %EOF at the end), "
        raise Unreadable(f"corrupt PDF: {cut}PDFium could not open it ({_pdfium_reason(exc)})") from None
    try:
        pages, empty, failed = [], [], []
        for index in range(len(pdf)):
            try:
                pages.append(_page_text(pdf, index))
            except pdfium.PdfiumError:
                pages.append("")
                failed.append(index + 1)
            if not pages[-1].strip():
                empty.append(index + 1)
        labels = [pdf.get_page_label(i) for i in range(len(pdf))]
        title = (pdf.get_metadata_value("Title") or "").strip() or None
        outline = read_outline(pdf)  # the PDF's own headings, for stage 03's heading_path
    finally:
        pdf.close()
    notes = [f"{len(pages)} page{'s' if len(pages) != 1 else ''}"]
    if failed:
        notes.append(f"pages {_ranges(failed)} could not be read")
    if pages and len(empty) == len(pages):
        # An image-only PDF is a real document we cannot read yet (no OCR here); an empty
        # text keeps it out of the chunks without calling it broken.
        notes.append("no text layer on any page (scanned or image-only?): nothing to index")
        text = ""
    else:
        if empty:
            notes.append(f"no text on page{'s' if len(empty) > 1 else ''} {_ranges(empty)}")
        text = "".join(f"--- page {n} ---\n{_ends_line(t)}" for n, t in enumerate(pages, 1))
    if outline:
        notes.append(f"outline of {len(outline)} entr{'ies' if len(outline) != 1 else 'y'}")
    return {"text": text, "title": title, "note": "; ".join(notes),
            "page_labels": labels if any(labels) else None, "outline": outline}


def _page_text(pdf, index: int) -> str:
    page = pdf[index]
    try:
        textpage = page.get_textpage()
        try:
            text = textpage.get_text_range()
            lines = text.replace("\f", "\n").split("\r\n")
            if len(text) == textpage.count_chars():  # else offsets are not char indexes
                lines = _mark_paragraphs(lines, textpage)
        finally:
            textpage.close()
    finally:
        page.close()
    # PDFium ends lines with CRLF, an artefact of the extractor rather than of the file;
    # a form feed inside a page would become a false page marker in stage 02.  Where a
    # word was hyphenated across two lines PDFium joins it and leaves U+FFFE at the
    # break ("manip\ufffeulation"): left in, it would split the word into two terms.
    return "\n".join(lines).replace("\r", "\n").replace("\ufffe", "")


# A gap between two lines this much larger than the page's usual line pitch is a
# paragraph break (or a heading, or a new column).
_PARAGRAPH_GAP = 1.3
_MIN_LINES_FOR_PITCH = 4


def _mark_paragraphs(lines: list[str], textpage) -> list[str]:
    """Insert a blank line where the page leaves a vertical gap between two lines.

    PDFium gives one text line per printed line and no paragraph breaks, so a page came
    out as one long paragraph: stage 03 could only cut it between lines, mid-thought.
    The layout still shows the paragraphs — more space between them than between lines —
    so we measure each line's baseline (one loose character box per line: cheap) and
    turn the wide gaps into the blank lines a Markdown or text file would have had.
    """
    bottoms, offset = [], 0
    for line in lines:
        bottom = None
        if line.strip():
            first = offset + (len(line) - len(line.lstrip()))
            left, bottom_y, right, top = textpage.get_charbox(first, loose=True)
            bottom = bottom_y if top > bottom_y else None
        bottoms.append(bottom)
        offset += len(line) + 2  # the CRLF PDFium generated between lines
    pitches = [a - b for a, b in zip(bottoms, bottoms[1:]) if a is not None and b is not None and a > b]
    if len(pitches) < _MIN_LINES_FOR_PITCH - 1:
        return lines
    usual = sorted(pitches)[len(pitches) // 2]
    out, previous = [], None
    for line, bottom in zip(lines, bottoms):
        if bottom is not None and previous is not None and out and out[-1].strip():
            drop = previous - bottom
            if drop > _PARAGRAPH_GAP * usual or drop < -usual:  # a wide gap, or up to a new column
                out.append("")
        out.append(line)
        previous = bottom if bottom is not None else previous
    return out


def _pdfium_reason(exc: Exception) -> str:
    match = re.search(r"PDFium: ([^)]*)", str(exc))
    return match.group(1).rstrip(".").lower() if match else str(exc)


def _ends_line(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


def _ranges(numbers: list[int]) -> str:
    """[1, 2, 3, 7] -> "1-3, 7": a note stays one short line for a 600-page scan."""
    spans, start = [], numbers[0]
    for prev, cur in zip(numbers, numbers[1:] + [None]):
        if cur != prev + 1:
            spans.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = cur
    return ", ".join(spans)


# ---- HTML

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.I)


def read_html(data: bytes) -> dict:
    """HTML converted to Markdown (pipekit/html_markdown.py); `<title>` becomes the title."""
    declared = _META_CHARSET.search(data[:4096])
    text, encoding, note = decode_text(data, declared.group(1).decode("ascii") if declared else None)
    try:
        markdown, title = html_to_markdown(text)
    except RecursionError:
        raise Unreadable("HTML nested too deeply to convert") from None
    except Exception as exc:  # noqa: BLE001 — a parser bug on one page must not stop the folder
        raise Unreadable(f"HTML could not be converted ({type(exc).__name__}: {exc})") from None
    return {"text": markdown, "title": title, "encoding": encoding, "note": note}


# ---- reStructuredText


def read_rst(data: bytes) -> dict:
    """reST converted to Markdown (pipekit/rst.py); the first section's title is the title.

    When docutils itself fails (its transforms raise on some self-referring substitutions,
    found by fuzzing), the file is still text a person wrote: it is kept as plain text,
    format `text`, with the failure in `note`, rather than an error row with no text."""
    from pipekit.rst import rst_to_markdown  # imported late: only folders with .rst pay for docutils

    text, encoding, note = decode_text(data)
    try:
        markdown, title = rst_to_markdown(text)
    except Exception as exc:  # noqa: BLE001 — RecursionError included: a deep nesting is still text
        problem = " ".join(str(exc).split())
        problem = problem if len(problem) <= 100 else problem[:99] + "…"
        failed = f"docutils could not convert it ({type(exc).__name__}: {problem}): read as plain text"
        return {"text": text, "format": "text", "encoding": encoding,
                "note": f"{note}; {failed}" if note else failed}
    return {"text": markdown, "title": title, "encoding": encoding, "note": note}


# ---- CSV

_SNIFF_BYTES = 64 * 1024


def read_csv(data: bytes) -> dict:
    """The CSV's own text, untouched, with its dialect and any problems in the note.

    A malformed CSV (ragged rows, a quote never closed) is still an `ok` row: its text
    is readable and searchable, and refusing it would hide a document the user has.
    The note says what is wrong so that odd chunk boundaries have an explanation.
    """
    text, encoding, note = decode_text(data)
    described = describe_csv(text)
    return {"text": text, "encoding": encoding, "note": f"{note}; {described}" if note else described}


def sniff_csv_dialect(text: str) -> type[csv.Dialect] | csv.Dialect:
    """The dialect of a CSV text, sniffed on whole lines of its first 64 KiB; `excel` if unsure."""
    sample = text[:_SNIFF_BYTES]
    if len(text) > _SNIFF_BYTES and "\n" in sample:
        sample = sample[: sample.rindex("\n")]  # a record cut in half misleads the sniffer
    try:
        return csv.Sniffer().sniff(sample, delimiters=",;\t|")
    except csv.Error:
        return csv.excel


def describe_csv(text: str) -> str:
    dialect = sniff_csv_dialect(text)
    problems, header_len, records, ragged = [], None, 0, 0
    reader = csv.reader(io.StringIO(text, newline=""), dialect, strict=True)
    try:
        for row in reader:
            if not row:
                continue
            if header_len is None:
                header_len = len(row)
                continue
            records += 1
            if len(row) != header_len:
                ragged += 1
                if ragged <= 3:  # the first few say where to look; the count says how bad
                    problems.append(f"line {reader.line_num}: {len(row)} fields, header has {header_len}")
    except csv.Error as exc:
        problems.append(f"parsing stopped at line {reader.line_num}: {exc}")
    if ragged > 3:
        problems.insert(0, f"{ragged} records with the wrong number of fields")
    desc = (f"csv: delimiter {dialect.delimiter!r}, quotechar {dialect.quotechar!r}, "
            f"header of {header_len or 0} fields, {records} record{'s' if records != 1 else ''}")
    return desc + ("; malformed: " + "; ".join(problems) if problems else "")


_READERS = {
    "markdown": read_markdown,
    "text": read_text_file,
    "pdf": read_pdf,
    "html": read_html,
    "csv": read_csv,
    "rst": read_rst,
}


# --------------------------------------------------------------------------- BEIR


def iter_beir(path: Path, max_bytes: int | None = None, start: int = 0,
              end: int | None = None) -> Iterator[dict]:
    """One `ok` row per record of a BEIR corpus (`{"_id", "title", "text"}` per line);
    a record whose line is longer than `max_bytes` is a `skipped` row, as a big file is.

    `start`/`end`: only the lines that begin in that byte range (`start` a line start), so
    that workers can read a corpus in parts.  Line numbers in errors then count from the
    range's first line: the caller that split the file rescans it whole for the message."""
    path = Path(path)
    seen: set[str] = set()
    for line_no, raw in beir_lines(path, start, end):
        record = _beir_record(path, line_no, raw)
        doc_id = record["_id"]
        if doc_id in seen:
            raise PipelineError(f"{path}, line {line_no}: _id {doc_id!r} appears twice")
        seen.add(doc_id)
        row = dict.fromkeys(COLUMNS)
        row.update(doc_id=doc_id, source=str(path), format="beir", text=record["text"],
                   status="ok", path=[], title=record["title"] or None, encoding="utf-8",
                   n_bytes=len(raw), content_hash=content_hash(raw))
        if max_bytes is not None and len(raw) > max_bytes:
            row.update(text=None, status="skipped", error=too_large(len(raw), max_bytes))
        yield row


def beir_lines(path: Path, start: int = 0, end: int | None = None) -> Iterator[tuple[int, bytes]]:
    """(line number, raw bytes) of each non-blank line of a BEIR corpus that begins in
    [start, end), a UTF-8 BOM taken off the file's first line: what `iter_beir` reads,
    and pipekit.fastpath.beir_tables too, so both see the same lines under the same numbers."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise PipelineError(f"{path}: cannot read: {_strerror(exc)}") from None
    with handle:
        handle.seek(start)
        at = start
        for line_no, raw in enumerate(handle, 1):
            if end is not None and at >= end:
                break
            at += len(raw)
            if line_no == 1 and start == 0 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            if not raw.strip():
                continue
            yield line_no, raw


def _beir_record(path: Path, line_no: int, raw: bytes) -> dict:
    where = f"{path}, line {line_no}"
    try:
        record = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise PipelineError(f"{where}: not UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise PipelineError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(record, dict):
        raise PipelineError(f"{where}: expected a JSON object, got {type(record).__name__}")
    if "_id" not in record:
        raise PipelineError(f"{where}: no \"_id\" field")
    doc_id = record["_id"]
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or str(doc_id) == "":
        raise PipelineError(f"{where}: \"_id\" must be a non-empty string or integer")
    out = {"_id": str(doc_id)}
    for key in ("title", "text"):
        value = record.get(key, "")
        if value is None:
            value = ""
        if not isinstance(value, str):
            raise PipelineError(f"{where}: \"{key}\" must be a string, got {type(value).__name__}")
        out[key] = value
    return out
