"""Stage 03's fast path: one-line records chunked a column at a time, exactly as one by one.

Why fast paths exist, and the rule they keep (the same rows as the per-record code, for the
records where that code provably does nothing but the obvious; every other record goes
down the per-record path), is told once in pipekit/read/fastpath.py, beside stages 01 and
02's.  tests/test_fastpath.py draws short records through both paths and compares rows.

Stage 03, `one_chunk` / `single_chunks`: a BEIR record under the `heading` strategy whose
text is ASCII, one line (no newline but a final one), without control characters, that
starts with a letter or digit and whose size in the budget unit is at most `max`.  Its
line is one block (no heading, fence, quote, table, front matter or page marker starts
with a letter or digit, and the other blocks need a second line), so the chunker makes one
section of one unit; a unit within `max` is one chunk — whole when it fits `target`, and
`_pack` keeps a lone unit whole up to `max`.  That chunk is the line: ordinal 0, span
[0, length of the line), heading path [title] (none without one), no pages.  ASCII keeps
the word counts exact: in ASCII, str.split() splits at bytes 9-13, 28-31 and 32, and
`_words` counts over the bytes with the same set.  `ChunkRows` merges these tables with
the per-record chunks in document order and hands them out in batches of exactly the
size the per-record loop wrote, so even the Parquet row groups are the same.

Deliberately not fast-pathed here: a text of several lines (a line may open a heading,
a list or a table: Cranfield's wrapped abstracts are chunked one by one), non-ASCII text,
and strategies other than `heading` (what the other stages leave out, and why, is in
pipekit/read/fastpath.py).

Measured (bench/scale.py --baseline, before/after in one run; cProfile at 200k for where
the time went): bench/README.md, "Scale".
"""
from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipekit.run.arrays import string_buffers, text_bytes

__all__ = ["one_chunk", "single_chunks", "fast_pieces", "ChunkRows", "runs"]

# ---- stage 03: records that are one chunk ----------------------------------------------------

# One line (a newline only at the end), no control character, starting with a letter or digit:
# the rule `ascii_one_line` must agree with (tests/test_fastpath.py draws texts through both).
_ONE_LINE = r"^[A-Za-z0-9][^\n\x00-\x08\x0b-\x1f\x7f]*\n?$"


def runs(mask: np.ndarray) -> Iterator[tuple[int, int, bool]]:
    """(start, end, value) of the runs of equal values in a boolean array."""
    edges = np.flatnonzero(np.diff(mask.view(np.int8))) + 1
    bounds = [0, *edges.tolist(), len(mask)]
    for a, b in zip(bounds[:-1], bounds[1:]):
        yield a, b, bool(mask[a])


def _words(lines: pa.Array, budget: bool = True, low: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(len(s.split()), doctext.count_words(s)) of each ASCII string (a string with other
    characters gets counts of its bytes: one_chunk sizes ASCII texts only).  Words are
    counted with NumPy over the column's bytes (a word starts where a space ends, or where
    its string starts); the budget's count adds (length - 1) // 10 for each word longer than
    10 characters (rare: a URL), from each word's length, its end minus its start.  Arrow's
    split made a string per word (2 s on 200k passages), its regex counts a match at a time
    (1 s each), and an RE2 search for such runs read the texts again (0.2 s at 200k,
    issue 47).  `budget` False: the first count only (returned twice).  `low`: the positions
    of the bytes below 0x20 in the strings' bytes, when the caller has them (`_one_line_scan`)."""
    from pipekit.chunk.doctext import _RUN  # count_words' characters per word in a run without spaces
    from pipekit.run.arrays import scratch, true_counts

    if lines.null_count:
        lines, low = pc.fill_null(lines, ""), None
    n = len(lines)
    offsets, data = string_buffers(lines)
    data = data[offsets[0]:offsets[-1]]
    offsets = offsets - offsets[0]
    # str.isspace() in ASCII: space, \t \n \v \f \r (9-13) and the separators \x1c-\x1f (28-31).
    # The bytes below 0x20 are few (a text's final newline, a tab): they are looked at where
    # they are, not by two more comparisons over every byte (issue 47: 7 passes were 3).
    # The two flag arrays of the bytes' size in scratch arrays (pipekit/run/arrays.py `scratch`):
    # new ones were faulted in page by page in every batch, ~0.4 s of system time at 1M
    # passages, once the reduceat that these counts no longer use stopped raising glibc's
    # mmap threshold as a side effect.
    space = np.equal(data, np.uint8(32), out=scratch(len(data), 3))
    if low is None:
        low = np.flatnonzero(data < 32)
    if len(low):
        byte = data[low]  # minus k wraps below k round to 256 - k and up
        space[low] = ((byte - np.uint8(9)) <= 4) | ((byte - np.uint8(28)) <= 3)
    start = np.invert(space, out=scratch(len(data), 4))
    start[1:] &= space[:-1]
    filled = np.diff(offsets) > 0
    first = offsets[:-1][filled]  # each non-empty string's first byte
    start[first] = ~space[first]
    n_words = true_counts(start, offsets)  # the word starts in each string's bytes
    if not budget or not _has_long_word(space, first, _RUN):
        return n_words, n_words
    # A word ends before a space, before the next string's first byte, or at the data's end.
    end = ~space
    end[:-1] &= space[1:] | start[1:]
    begins, ends = np.flatnonzero(start), np.flatnonzero(end) + 1
    long = np.flatnonzero(ends - begins > _RUN)
    if not len(long):
        return n_words, n_words
    extra = (ends[long] - begins[long] - 1) // _RUN
    rows = np.searchsorted(offsets, begins[long], side="right") - 1
    return n_words, n_words + np.bincount(rows, weights=extra, minlength=n).astype(np.int64)


def _has_long_word(space: np.ndarray, first: np.ndarray, run: int) -> bool:
    """Whether any string holds more than `run` bytes in a row that are not `space`
    (`first`: each non-empty string's first byte, where no run continues from the string
    before).  Runs of 2, 4, 8 ... found by shifted ANDs, on the bytes' flags packed eight to a
    byte (`_shifted`): finding every word's start and end took 0.2 s at 200k passages that
    hold no such word, and the shifted ANDs over one flag a byte 0.5 s of a thread at 1M."""
    if len(space) <= run:
        return False  # no room for run + 1 bytes
    words = -(-len(space) // 64)
    packed = np.zeros(words * 8, dtype=np.uint8)
    packed[:-(-len(space) // 8)] = np.packbits(space, bitorder="little")
    bits = packed.view("<u8")  # bit j of word i: byte 64 i + j, in any machine's byte order
    np.invert(bits, out=bits)  # not a space (the padding too: cut off below)
    if len(space) % 64:
        bits[-1] &= np.uint64((1 << (len(space) % 64)) - 1)
    solid = bits.copy()
    cont = bits
    np.bitwise_and.at(packed, first >> 3, ~(np.uint8(1) << (first & 7).astype(np.uint8)))  # a string's first byte continues no run
    # ahead, bit p: bytes p .. p + width - 1 all continue a run
    ahead, width = cont, 1
    while width * 2 <= run:
        ahead, width = ahead & _shifted(ahead, width), width * 2
    if width < run:
        ahead = ahead & _shifted(ahead, run - width)
    # a byte that is not a space, followed by `run` bytes that continue its run
    return bool((solid & _shifted(ahead, 1)).any())


def _shifted(bits: np.ndarray, k: int) -> np.ndarray:
    """A stream of bits (uint64 words, bit j of word i its bit 64 i + j) moved down by
    `k` < 64: bit p of the result is bit p + k of `bits`, zeros past its end."""
    out = bits >> np.uint64(k)
    out[:-1] |= bits[1:] << np.uint64(64 - k)
    return out


def ascii_one_line(texts: pa.Array) -> np.ndarray:
    """Which texts are ASCII and match `_ONE_LINE`: a letter or digit first, no newline but
    one at the very end, no control character but tabs.  Read from the column's bytes with
    NumPy, as stage 02's `already_clean` is: Arrow's regex read the texts at ~0.5 GB/s
    (0.19 s of stage 03's 0.75 s of column work at 200k passages, issue 47).  One
    comparison finds every byte outside printable ASCII; only those few are looked at."""
    return _one_line_scan(texts)[0]


def _one_line_scan(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """`ascii_one_line`'s picks, and the positions of the bytes below 0x20 in the texts' bytes
    (which `_words` takes as its spaces' odd ones, rather than scan the bytes again)."""
    from pipekit.run.arrays import odd_bytes

    b, starts, ends = text_bytes(texts, "ascii_one_line")
    n = len(starts)
    if n == 0:
        return np.zeros(0, dtype=bool), np.zeros(0, dtype=np.int64)
    filled = ends > starts
    head = b[np.minimum(starts, max(len(b) - 1, 0))] if len(b) else np.zeros(n, dtype=np.uint8)
    lower = head | 0x20  # ASCII letters' lower case; digits and the rest stay apart from a-z
    good = filled & (((head - np.uint8(48)) <= 9) | ((lower - np.uint8(97)) <= 25))
    odd = odd_bytes(b)  # bytes outside 0x20-0x7e, without temporaries of the batch's size
    kind = b[odd]
    at = np.searchsorted(ends, odd, side="right")
    allowed = (kind == 9) | ((kind == 10) & (odd == ends[at] - 1))  # a tab, or the final newline
    good[at[~allowed]] = False
    if texts.null_count:
        good &= np.asarray(texts.is_valid())
    return good, odd[kind < 32]


def _compiled_counts(texts: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(`ascii_one_line`, and where it is True `_words`' two counts) of each text, from stages
    02-03's compiled scan (pipekit/chunk/scan.py: one pass, eight bytes at a time, where the
    plain way reads the bytes five times over), or None where that is not built (yet)."""
    from pipekit.chunk import scan

    b, starts, ends = text_bytes(texts, "ascii_one_line")
    loops = scan.loaded(len(b))
    if loops is None or len(starts) == 0:
        return None
    one_line, n_words, size = scan.one_line_words(loops, b, starts, ends)
    if texts.null_count:
        one_line &= np.asarray(texts.is_valid())
    return one_line, n_words, size


def one_chunk(batch: pa.RecordBatch, settings) -> tuple[np.ndarray, np.ndarray | None]:
    """Which rows of a batch of 02_preprocessed.parquet chunk_document makes exactly one
    chunk of, that chunk being the text's one line (see the module docstring); with the
    unit `words`, also every row's word count (single_chunks' n_words), counted once."""
    n = batch.num_rows
    if settings.strategy != "heading" or n == 0:
        return np.zeros(n, dtype=bool), None
    text = batch.column("text")
    ok = pc.and_(pc.equal(batch.column("format"), "beir"), pc.is_valid(batch.column("path")))
    ok = np.asarray(pc.fill_null(ok, False), dtype=bool)
    counted = _compiled_counts(text) if settings.unit == "words" else None
    if counted is not None:  # the one-line test and both word counts in one compiled pass
        one_line, n_words, size = counted
        ok &= one_line
        return (ok & (size <= settings.max), n_words) if ok.any() else (ok, None)
    one_line, low = _one_line_scan(text)
    ok &= one_line
    if not ok.any():
        return ok, None
    if settings.unit == "words":
        # Counted on the text itself, not on a copy without its final newline: a newline
        # is a space to both counts, so a chosen row's counts are the line's.
        n_words, size = _words(text, low=low)
        return ok & (size <= settings.max), n_words
    line = pc.utf8_rtrim(text, characters="\n")
    chars = pc.fill_null(pc.utf8_length(line), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    size = chars if settings.unit == "chars" else -(-chars // 4)
    return ok & (size <= settings.max), None


def single_chunks(batch: pa.RecordBatch, schema: pa.Schema, n_words: np.ndarray | None = None) -> pa.Table:
    """The stage-03 rows of records that `one_chunk` chose: one chunk each, its text the
    line (`n_words`: their word counts, when one_chunk counted them)."""
    n = batch.num_rows
    doc_id, title = batch.column("doc_id"), batch.column("title")
    # ASCII (one_chunk chose it): the newline trimmed and the characters counted as bytes, no decoding
    text = pc.ascii_rtrim(batch.column("text"), characters="\n")
    n_chars = pc.binary_length(text)
    # A title that is there and not empty, from its offsets (the kernels were 0.05 s at 1M passages)
    has_title = np.diff(string_buffers(title)[0]) > 0
    if title.null_count:
        has_title &= np.asarray(title.is_valid())
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(has_title, out=offsets[1:])
    zeros = np.zeros(n, dtype=np.int64)
    if n_words is None:
        n_words = _words(text, budget=False)[0]
    columns = {
        "chunk_id": pc.binary_join_element_wise(doc_id, "0", "#"), "doc_id": doc_id,
        "ordinal": pa.array(zeros.astype(np.int32)),
        "heading_path": pa.ListArray.from_arrays(pa.array(offsets), title.filter(pa.array(has_title))),
        "heading": pc.fill_null(title, ""), "path": batch.column("path"), "text": text,
        "start_char": pa.array(zeros), "end_char": n_chars.cast(pa.int64()),
        "n_words": pa.array(np.asarray(n_words, dtype=np.int32)), "n_chars": n_chars.cast(pa.int32()),
        "format": batch.column("format"), "content_hash": batch.column("content_hash"),
    }
    # (cast only where a type differs: a cast to its own type was ~10 µs a column, 0.05 s at 1M passages)
    return pa.Table.from_arrays([pa.nulls(n, f.type) if f.name not in columns else columns[f.name]
                                 if columns[f.name].type == f.type else columns[f.name].cast(f.type)
                                 for f in schema], schema=schema)


def fast_pieces(settings, schema: pa.Schema, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, list]:
    """A batch cut into its runs of rows, in order, as (start, end, table): `table` the
    runs' rows made as columns where `one_chunk` chose them, None where the per-record
    chunker must make them.  A function of the batch alone, Arrow kernels and NumPy loops
    that let go of the GIL, so stage 03 makes two batches' at once (engine.map_ahead) and
    keeps the per-record part, and the order, on its own thread."""
    fast_rows, words = one_chunk(batch, settings)
    return batch, [(a, b, single_chunks(batch.slice(a, b - a), schema, None if words is None else words[a:b])
                    if fast else None) for a, b, fast in runs(fast_rows)]


class ChunkRows:
    """Stage 03's chunk rows in document order, added a chunk at a time (the per-document
    chunker, as Python values) or a table at a time (the fast path), and taken out in
    tables of exactly `size` rows: the batches the per-document loop alone would write."""

    def __init__(self, schema: pa.Schema, columns: tuple[str, ...], size: int, with_labels: Callable):
        self.schema, self.columns, self.size, self.with_labels = schema, columns, size, with_labels
        self.tables: list[pa.Table] = []
        self.in_tables = 0
        self._reset([])

    def _reset(self, labels: list) -> None:
        self.cols = {c: [] for c in self.columns}
        self.at, self.labels = [], labels

    def __len__(self) -> int:
        return self.in_tables + len(self.at)

    def add(self, chunk: dict, labels) -> None:
        """One chunk of a document whose page labels are `labels` (the last ones added, or new)."""
        if not self.labels or self.labels[-1] is not labels:
            self.labels.append(labels)
        for k in self.columns:
            self.cols[k].append(chunk[k])
        self.at.append(len(self.labels) - 1)

    def add_table(self, table: pa.Table) -> None:
        self._seal()
        self.tables.append(table)
        self.in_tables += table.num_rows

    def _seal(self) -> None:
        """The chunks added one by one so far, as a table (page labels mapped)."""
        if self.at:
            batch = pa.RecordBatch.from_pydict(self.with_labels(self.cols, self.at, self.labels), schema=self.schema)
            self.tables.append(pa.Table.from_batches([batch]))
            self.in_tables += batch.num_rows
        self._reset(self.labels[-1:])

    def take(self, everything: bool = False) -> pa.Table:
        """The first `size` rows (or all of them), out of the store."""
        self._seal()
        table = pa.concat_tables(self.tables) if self.tables else self.schema.empty_table()
        n = table.num_rows if everything else min(self.size, table.num_rows)
        rest = table.slice(n)
        self.tables, self.in_tables = ([rest], rest.num_rows) if rest.num_rows else ([], 0)
        return table.slice(0, n)  # chunked as added: the writer makes it one row group all the same, without a copy
