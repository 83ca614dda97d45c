"""Stage 02 — preprocessing: make every document's text clean and predictable.

Reads  `01_documents.parquet` (only rows with status `ok`).
Writes `02_preprocessed.parquet`: doc_id, source, format, path, title, text (cleaned),
       outline and page_labels (a PDF's bookmarks and printed page labels), note (stage
       01's, plus "only whitespace" when cleaning left nothing), passed on for stage 03,
       which cites the labels and says why a document gave no chunk.

What "clean" means here, each rule for a reason:
- CRLF and lone CR become LF: the chunker scans lines, and a Windows file must not look
  like one endless line to it.
- Unicode NFC (configurable): "é" typed as one code point and as e + accent must be the
  same term in the index.
- Form feeds become `--- page N ---` lines: that is how plain-text exports mark pages,
  and stage 03 tracks pages by those lines.
- Page furniture goes: a line that repeats at the top or bottom of most pages (a running
  header, a footer, a page number; pipekit/read/pages.py says how it is recognised) is the
  layout's, not the author's text.  Left in, one manual's running header sat in 70 % of
  its chunks.  The count is in the stage summary.
- Control characters go (tab and newline stay): a stray NUL or escape code breaks
  terminals and Parquet viewers but never carries meaning.
- Trailing spaces go, and runs of blank lines collapse to one: both are noise to the
  chunker, which treats one blank line as a paragraph break.

Memory: a document larger than 8 MB is cleaned a few megabytes at a time
(`clean_large`), from its UTF-8 bytes in the Arrow column to the cleaned UTF-8 bytes
written out, cutting only where no rule looks across the cut; the result is exactly
`clean_text`'s (tests/test_02_preprocessing.py checks it on generated texts).  Rule by
rule on the whole string, a 100 MB log peaked at 16x its size.  A large document with
pages (form feeds, `--- page N ---` lines) is read by slices twice (`clean_large_paged`):
once to find its furniture, which compares its pages, once to clean it without.

A rerun cleans only the documents that changed: one whose stage-01 `content_hash` is
the one its previous row was cleaned from, with the same settings and code of stages 01
and 02, gets that row back (pipekit/run/incremental.py; `--force` cleans everything).

What it deliberately does not do: touch Markdown structure, code, indentation or line
breaks inside paragraphs (stage 03 needs them), lower-case or strip punctuation (that is
the analyzer's job in stage 04, so chunks stay readable for citation), or drop documents.
"""
from __future__ import annotations

import pipekit  # first: outside the virtualenv it says how to activate it, not a traceback
import re
import unicodedata
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipekit.run.arrays import string_buffers
from pipekit.cli import stage_main
from pipekit.run.engine import StageFunction, advance, iter_rows
from pipekit.read.fastpath import ahead_unless, clean_texts
from pipekit.run.incremental import reuse_parts
from pipekit.read.pages import ANCHORS_TYPE, OUTLINE_TYPE, FurnitureDropper, FurnitureFinder, strip_furniture
from pipekit.chunk.unchunked import ONLY_WHITESPACE

COLUMNS = ["doc_id", "source", "format", "path", "title", "text", "outline", "content_hash", "page_labels", "note",
           "anchors"]

# C0/C1 controls except tab (\t) and newline (\n); \f is handled first, as a page break.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_TRAILING = re.compile(r"[ \t]+$", re.MULTILINE)
_BLANK_RUNS = re.compile(r"\n{3,}")


def form_feeds_to_markers(text: str) -> str:
    """`page one\\fpage two` -> page markers before each page, as stage 01 writes for PDFs."""
    if "\f" not in text:
        return text
    pages = text.split("\f")
    if not pages[-1].strip():  # a file that ends with a form feed has no page after it
        pages.pop()
    return "\n".join(f"--- page {n} ---\n{page.strip(chr(10))}" for n, page in enumerate(pages, 1))


def emptied(note: str | None, raw: str | None, cleaned: str) -> str | None:
    """Stage 01's note, plus why a text that was not empty is empty now: stage 03 names
    every document that gives no chunk, with its reason (SPEC rule 10)."""
    if cleaned or not raw:
        return note
    said = f"{ONLY_WHITESPACE} (and control characters): nothing left after cleaning"
    return f"{note}; {said}" if note else said


def clean_text(text: str, unicode_form: str = "NFC") -> str:
    """The whole stage-02 cleaning of one document's text."""
    return clean_document(text, unicode_form)[0]


def clean_document(text: str, unicode_form: str = "NFC") -> tuple[str, int]:
    """(cleaned text, furniture lines removed) of one document."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if unicode_form != "none":
        text = unicodedata.normalize(unicode_form, text)
    text = form_feeds_to_markers(text)
    text, furniture = strip_furniture(text)
    text = _CONTROL.sub("", text)
    text = _TRAILING.sub("", text)
    text = _BLANK_RUNS.sub("\n\n", text)
    return (text.strip("\n") + "\n" if text.strip() else ""), furniture


# --------------------------------------------------------------------------------------
# The same rules on a document too large to copy whole
# --------------------------------------------------------------------------------------

# A document this large (UTF-8 bytes) is cleaned a slice at a time.  `clean_text` makes a
# whole new string per rule, and a Python string may take up to 4 bytes a character: a
# 100 MB log peaked at 16x its size here.  Slices keep each copy to a few megabytes.
LARGE = 8 * 1024 * 1024
SLICE = 4 * 1024 * 1024
_WINDOW = 64 * 1024


def slice_ranges(data: np.ndarray, size: int = SLICE):
    """[start, end) byte ranges of about `size` UTF-8 bytes, cut only where no rule looks
    across the cut: just after a newline, or between two printable ASCII characters (no
    line end, no trailing space, no character an accent could compose with is split)."""
    n, pos = len(data), 0
    while pos < n:
        cut = n
        look = pos + size
        while look < n:
            window = data[look:look + _WINDOW]
            nl = np.flatnonzero(window == 10)
            if len(nl):
                cut = look + int(nl[0]) + 1
                break
            printable = (window >= 0x21) & (window <= 0x7E)
            pair = np.flatnonzero(printable[:-1] & printable[1:])
            if len(pair):
                cut = look + int(pair[0]) + 1
                break
            look += _WINDOW - 1
        yield pos, cut
        pos = cut


class _Cleaned:
    """Where the cleaned slices go: the last two rules (blank runs, the ends of the
    document) need what came before, so they are applied here, across slices."""

    def __init__(self, capacity: int):
        # One buffer of about the input's size, written in place: a growing stream
        # (pa.BufferOutputStream) copied itself on every doubling, 1.8x the text at the end.
        self.buf = np.empty(capacity, dtype=np.uint8)
        self.size = 0
        self.held = 0            # newlines at the end of what was written, not yet written
        self.started = False     # nothing written yet: leading newlines are dropped
        self.content = False     # anything but whitespace written (else the text is "")

    def add(self, piece: str) -> None:
        piece = _BLANK_RUNS.sub("\n\n", _TRAILING.sub("", _CONTROL.sub("", piece)))
        body = piece.lstrip("\n")
        self.held = min(2, self.held + len(piece) - len(body))
        core = body.rstrip("\n")
        if not core:
            return
        if self.started:
            self.write(b"\n" * self.held)
        self.write(core.encode("utf-8"))
        self.started, self.held = True, len(body) - len(core)
        self.content = self.content or bool(core.strip())

    def write(self, data: bytes) -> None:
        end = self.size + len(data)
        if end > len(self.buf):  # grown past the input (NFKC): rare, so by half
            grown = np.empty(max(end, len(self.buf) * 3 // 2), dtype=np.uint8)
            grown[:self.size] = self.buf[:self.size]
            self.buf = grown
        self.buf[self.size:end] = np.frombuffer(data, dtype=np.uint8)
        self.size = end

    def finish(self) -> pa.Buffer:
        if not self.content:
            return pa.py_buffer(b"")
        self.write(b"\n")
        return pa.py_buffer(self.buf[:self.size])


def clean_large(data: np.ndarray, unicode_form: str = "NFC", size: int = SLICE) -> pa.Buffer:
    """`clean_text` of the UTF-8 bytes `data` (a numpy uint8 view), a slice at a time,
    returned as UTF-8; the whole document never exists as one Python string.  Only for a
    text without pages (`has_pages` false): page furniture is found by comparing pages."""
    sink = _Cleaned(len(data) + 1024)
    for a, b in slice_ranges(data, size):
        piece = data[a:b].tobytes().decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
        if unicode_form != "none":
            piece = unicodedata.normalize(unicode_form, piece)
        sink.add(piece)
    return sink.finish()


class _FormFeeds:
    """`form_feeds_to_markers` on a text that arrives in pieces: each piece's converted
    text.  A page's leading and trailing newlines go; the last page goes if it is only
    whitespace, so a page's marker waits until the page holds something else, or another
    form feed shows it is not the last (a page still waiting at the end simply goes)."""

    def __init__(self):
        self.page = 1
        self.pending: list[str] | None = []  # the open page while it is only whitespace
        self.lead = True                     # at the page's start: newlines there go
        self.held = 0                        # trailing newlines, written if text follows

    def feed(self, piece: str) -> str:
        parts = piece.split("\f")
        out = [self._text(parts[0])]
        for part in parts[1:]:
            if self.pending is not None:  # a page of whitespace, but not the last one
                out.append(self._open())
            self.page += 1
            self.pending, self.lead, self.held = [], True, 0
            out.append(self._text(part))
        return "".join(out)

    def _text(self, s: str) -> str:
        if self.pending is None:
            return self._body(s)
        self.pending.append(s)
        return self._open() if s.strip() else ""

    def _open(self) -> str:
        raw, self.pending = "".join(self.pending), None
        return ("\n" if self.page > 1 else "") + f"--- page {self.page} ---\n" + self._body(raw)

    def _body(self, s: str) -> str:
        if self.lead:
            s = s.lstrip("\n")
            if not s:
                return ""
            self.lead = False
        core = s.rstrip("\n")
        if not core:
            self.held += len(s)
            return ""
        out = "\n" * self.held + core
        self.held = len(s) - len(core)
        return out


def _line_batches(pieces: Iterator[str]) -> Iterator[tuple[list[str], bool]]:
    """The lines of the pieces joined ("".join(pieces).split("\n")), a piece's worth at
    a time, with True on the last batch (its last line has no newline after it)."""
    rest = ""
    for piece in pieces:
        lines = (rest + piece).split("\n")
        rest = lines.pop()
        if lines:
            yield lines, False
    yield [rest], True


def clean_large_paged(data: np.ndarray, unicode_form: str = "NFC", size: int = SLICE) -> tuple[pa.Buffer, int]:
    """`clean_document` of the UTF-8 bytes `data` of a text with pages, a slice at a time:
    (cleaned UTF-8, furniture lines removed).  Page furniture is what repeats across
    pages, so the slices are read twice: once to find it (pipekit.read.pages.FurnitureFinder),
    once to clean the text without it; neither pass holds the document's lines."""
    form_feeds = sum(data[a:a + (1 << 24)].tobytes().count(b"\f") for a in range(0, len(data), 1 << 24))

    def pieces():
        ff = _FormFeeds() if form_feeds else None
        for a, b in slice_ranges(data, size):
            piece = data[a:b].tobytes().decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
            if unicode_form != "none":
                piece = unicodedata.normalize(unicode_form, piece)
            yield ff.feed(piece) if ff else piece

    finder = FurnitureFinder()
    for lines, _ in _line_batches(pieces()):
        finder.add(lines)
    dropper = FurnitureDropper(*finder.furniture())
    # Room for a `--- page N ---` line per form feed: a text of short pages without
    # furniture outgrows its input, and growing the buffer copies it (2.5x it at once).
    sink = _Cleaned(len(data) + 24 * (form_feeds + 1) + 1024)
    for lines, last in _line_batches(pieces()):
        kept = dropper.keep(lines)
        if kept:
            sink.add("\n".join(kept) + ("" if last else "\n"))
    return sink.finish(), dropper.removed


def has_pages(data: np.ndarray, window: int = 1 << 24) -> bool:
    """A form feed or a `--- page ` line anywhere in the UTF-8 bytes, a window at a time."""
    for a in range(0, len(data), window):
        part = data[a:a + window + 8].tobytes()  # overlapping by a marker's length but one
        if b"\f" in part or b"--- page " in part:
            return True
    return False


def utf8_view(texts: pa.Array, i: int) -> np.ndarray:
    """The UTF-8 bytes of value i of a string column, without copying them."""
    offsets, data = string_buffers(texts)
    return data[int(offsets[i]):int(offsets[i + 1])]


# --------------------------------------------------------------------------------------
# The stage
# --------------------------------------------------------------------------------------


SCHEMA = pa.schema([("doc_id", pa.string()), ("source", pa.string()), ("format", pa.string()),
                    ("path", pa.list_(pa.string())), ("title", pa.string()), ("text", pa.string()),
                    ("outline", OUTLINE_TYPE), ("content_hash", pa.string()),
                    ("page_labels", pa.list_(pa.string())), ("note", pa.string()),
                    ("anchors", ANCHORS_TYPE)])  # carried for stage 03: each heading's id (HTML, reST)


def clean_partition(form: str, threads: int, part) -> Iterator[tuple[pa.Table, int, int]]:
    """Stage 02 on one partition of 01_documents.parquet: its `ok` rows cleaned, table by
    table, each with the furniture lines removed and the documents that had any.  It
    depends on the partition alone, so the engine may run it anywhere."""
    batches = iter_rows(part, ["status"] + COLUMNS)
    # `threads` batches of ordinary documents cleaned at once (their scans are Arrow's, which
    # let go of the GIL: on one thread the second core sat idle through a BEIR corpus).  A
    # batch holding a large document is cleaned here, alone, after those before it: one
    # large document in flight, as on one thread (pipekit/read/fastpath.py, ahead_unless).
    for batch, tables in ahead_unless(lambda b: list(clean_batch(form, b)), batches, threads,
                                      alone=lambda b: _ok_and_large(b)[1].any()):
        advance(batch.num_rows)
        yield from clean_batch(form, batch) if tables is None else tables


def _ok_and_large(batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
    """Which rows are `ok`, and which of those are larger than LARGE (UTF-8 bytes).  A batch
    whose texts hold LARGE bytes or fewer together has no large one: told from its offsets
    with no kernel call, since this runs on the stage's thread for every batch, where each
    call that lets go of the GIL waited to get it back (0.4-0.7 s at 1M passages)."""
    offsets, _ = string_buffers(batch.column("text"))
    if len(offsets) < 2 or int(offsets[-1]) - int(offsets[0]) <= LARGE:
        return None, np.zeros(batch.num_rows, dtype=bool)
    ok = np.asarray(pc.fill_null(pc.equal(batch.column("status"), "ok"), False))
    return ok, ok & (np.asarray(pc.binary_length(batch.column("text")).fill_null(0)) > LARGE)


def clean_batch(form: str, batch: pa.RecordBatch) -> Iterator[tuple[pa.Table, int, int]]:
    """One batch of 01_documents.parquet cleaned: (table, furniture lines, documents with furniture)."""
    ok, large = _ok_and_large(batch)
    if ok is None:
        ok = np.asarray(pc.fill_null(pc.equal(batch.column("status"), "ok"), False))
    whole = bool(ok.all()) and not large.any()  # one run of ordinary documents: no walk row by row
    ok, large = ok.tolist(), large.tolist()
    batch = batch.select(COLUMNS)
    # Runs of ordinary documents together; each large one alone, by slices, written
    # straight from the cleaned bytes, so it is never a Python string at all.  Slices
    # of the batch, not a filtered copy: that copy was one more whole document.
    k, n = 0, batch.num_rows
    while k < n:
        if not ok[k]:
            k += 1
            continue
        if large[k]:
            view = utf8_view(batch.column("text"), k)
            if has_pages(view):
                text, removed = clean_large_paged(view, form)
            else:
                text, removed = clean_large(view, form), 0
            row = batch.slice(k, 1).select([c for c in COLUMNS if c != "text"]).to_pydict()
            offsets = pa.py_buffer(np.array([0, text.size], dtype=np.int32))
            row["text"] = pa.StringArray.from_buffers(1, offsets, text)
            del text, view
            yield pa.table(row, schema=SCHEMA), removed, int(removed > 0)
            k += 1
            continue
        j = n if whole else k + 1
        while j < n and ok[j] and not large[j]:
            j += 1
        # Texts that are clean already (short ASCII records, mostly) are finished as a
        # column; the others go through clean_document one by one (pipekit/read/fastpath.py).
        run = batch.slice(k, j - k)
        texts, notes, furniture, paged = clean_texts(run.column("text"), run.column("note"),
                                                     lambda t, n: _clean_one(t, n, form))
        cols = {c: texts if c == "text" else notes if c == "note" else run.column(c) for c in COLUMNS}
        yield pa.Table.from_arrays(list(cols.values()), schema=SCHEMA), furniture, paged
        k = j


def _clean_one(raw: str | None, note: str | None, form: str) -> tuple[str, str | None, int]:
    """(cleaned text, note, furniture lines removed) of one ordinary document."""
    text, removed = clean_document(raw or "", form)
    return text, emptied(note, raw, text), removed


def run(ctx) -> None:
    ctx.keep_freed_memory()  # each batch's buffers reused by the next, not faulted in anew (pipekit/run/malloc.py)
    threads = 2 if ctx.engine.kind == "local" else 1  # a cluster's worker process is one core: a batch at a time
    clean = StageFunction(2, "clean_partition", (ctx.section["unicode_form"], threads))
    # A document cleaned last time from the same stage-01 row is not cleaned again; of its
    # copied rows nothing is read but their number (the loop below counts rows).
    clean, parts, reused = reuse_parts(ctx, ctx.upstream_parts(), clean, nothing_column="status", extras=(0, 0),
                                       summary=())
    kept = furniture = paged = 0
    for table, removed, docs in ctx.write_partitions("02_preprocessed.parquet", SCHEMA, clean, parts,
                                                     desc="02 cleaning", total=ctx.upstream_rows):
        kept += table.num_rows
        furniture += removed
        paged += docs
    ctx.note(f"{kept:,} ok documents cleaned; {ctx.upstream_rows - kept:,} error/skipped rows left out")
    if reused:
        ctx.note(f"{reused:,} unchanged documents: rows copied from the previous output "
                 f"(the furniture count below is of the {kept - reused:,} cleaned now)")
    ctx.note(f"{furniture:,} page furniture lines (running headers, footers, page numbers) "
             f"removed from {paged:,} documents")


if __name__ == "__main__":
    raise SystemExit(stage_main(2, run, preview_columns=["doc_id", "format", "title", "text"]))
