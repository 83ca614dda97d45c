"""Fast paths for collections of many short records: the per-record rules, a batch at a time.

A BEIR corpus is hundreds of thousands of one-paragraph records.  Stages 01–03 handle a
record in Python (a dict per row, six regex passes to clean it, a Markdown scan, a line
table and a packer to chunk it), and on 200,000 synthetic passages that was ~13 s of a
21 s run, for records with nothing to clean and nothing to split.  The rules are right;
only their cost per record is the problem.  This module makes the same rows with Arrow
and NumPy over whole columns, *for the records where the per-record rules provably do
nothing but the obvious*, and sends every other record down the per-record path.  Each
function says which records qualify and why its result is exactly the slow path's;
tests/test_fastpath.py draws short records (ASCII and not, titles or none, blank lines,
control characters, CRs, trailing spaces, long words) through both and compares rows.

Stage 01, `beir_tables`: the same lines as `readers.beir_lines` (cut on b"\n", numbered the
same way), read in blocks of whole lines.  A block whose non-blank lines are each one JSON
object from `{` to `}`, valid UTF-8, with a non-empty string `_id` and string (or absent)
`title` and `text`, is parsed by Arrow's JSON reader in C, on a thread of its own while
its lines are hashed (in a process of their own on a large corpus with a second core:
pipekit/read/line_hashes.py), two blocks at once (the `_id` check across blocks stays in order);
json.loads and a dict per line cost 0.6 s of stage 01's 1.2 s at 200,000 passages.  Any other block goes line by line: json.loads, and `readers._beir_record`
for a line of another shape, which converts it (an integer `_id`, a null title) or raises
its exact message.  Where the two readers disagree, Arrow's is the stricter (a key given
twice, a number too large for a double, a lone surrogate: json.loads takes them, Arrow
refuses), and a refusal only sends the block down the line-by-line path; the lines
tests/test_fastpath.py tries come out as `iter_beir` makes them.

Stage 02, `clean_texts`: a text that is ASCII (NFC, NFKC and NFD all leave ASCII alone),
holds no control character (so no CR, no form feed), no `--- page ` (no page, so no
furniture), no space or tab before a line end or at the end, no three newlines in a row,
does not start with a newline and holds something besides whitespace: every rule of
`clean_document` leaves it unchanged except the last, which strips the newlines at its
end and adds one.  Those texts are found by NumPy over the column's bytes and finished by
one Arrow expression; the rest are cleaned one by one.  Stage 02 cleans two batches at once
(`ahead_unless`), a batch holding a large document alone.

Deliberately not fast-pathed: anything with non-ASCII text (Unicode normalisation and
Unicode whitespace are the per-record code's to decide), a text of several lines in stage
03 (a line may open a heading, a list or a table: Cranfield's wrapped abstracts are
chunked one by one, cleaned as a column), files (one file is one document of any size and
structure), and strategies other than `heading`.

Measured (bench/scale.py --baseline, before/after in one run; cProfile at 200k for where
the time went): bench/README.md, "Scale".
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


__all__ = ["beir_tables", "clean_texts", "already_clean", "ahead_unless"]


# ---- stage 01: a BEIR corpus into columns ---------------------------------------------------

BLOCK_BYTES = 2 << 20  # corpus bytes per Arrow parse: at 200k passages 1.2 s and 215 MB, 8 MB blocks 1.3 s and 290 MB
SPARE_ROOM = 64 << 10  # a new block buffer's room past BLOCK_BYTES, for the part line a block carries over
_BOM = b"\xef\xbb\xbf"
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")  # an escape json.loads may leave as half a character


def beir_tables(path: Path, max_bytes: int | None, start: int, end: int | None, schema: pa.Schema,
                max_rows: int, max_chars: int, threads: int = 1) -> Iterator[pa.Table]:
    """`iter_beir`'s rows as tables of `max_rows` rows or `max_chars` characters of text
    (whichever comes first, as 01_documents.batches cuts them), built as columns.

    The corpus is read in blocks of whole lines.  A block whose every non-blank line is one
    JSON object of the usual shape is parsed by Arrow's JSON reader in C, on another thread
    while its lines are hashed (by the hashing process, when there is one); any other block goes line by line through json.loads and
    `_beir_record`, which converts what it accepts and raises its exact message.

    `threads` blocks are made at once (engine.map_ahead, order kept): Arrow's parse and
    kernels let go of the GIL, so one block's parse runs beside another's hashing.  What
    depends on the blocks before (an `_id` seen twice, a line-by-line block, the cut into
    tables) stays on this thread, in order."""
    from concurrent.futures import ThreadPoolExecutor
    from functools import partial
    from pipekit.read.line_hashes import LineHasher, asked_ahead
    from pipekit.run.engine import map_ahead

    path = Path(path)
    seen: set[str] = set()
    cutter = _Batches(max_rows, max_chars)
    threads = max(int(threads), 1)
    # The lines' hashes in a process of their own where there is a second core: they keep
    # the GIL (pipekit/read/line_hashes.py).  Asked for a few blocks ahead of their parse.
    hasher = LineHasher.start(path, None if end is None else end - start) if threads > 1 else None
    spare: list[np.ndarray] = []  # blocks' buffers done with, for the next blocks (`_line_blocks`)
    blocks = _line_blocks(path, start, end, spare)
    if hasher is not None:
        blocks = asked_ahead(hasher, blocks)
    try:
        # One parse thread per block in flight: a block waiting on its parse never waits for another's.
        with ThreadPoolExecutor(threads) as pool:
            made = partial(_arrow_block, pool, path, max_bytes=max_bytes, schema=schema)
            for block, parsed in map_ahead(lambda b: (b, made(*b[2:])), blocks, threads):
                first_line, _, data, starts, ends = block[:5]
                if parsed is None:
                    table, lengths = _python_block(path, data, starts, ends, first_line, seen, max_bytes, schema), None
                else:
                    table, listed, rows, lengths = parsed
                    _check_seen(path, seen, listed, rows, first_line)
                yield from cutter.add(table, lengths)
                # Nothing made from the block points into its bytes (Arrow's parse and the
                # line-by-line path copy what they keep): its buffer serves a later block.
                spare.append(data.base if data.base is not None else data)
                del block, parsed, data
        yield from cutter.rest()
    finally:
        if hasher is not None:
            hasher.close()


def _check_seen(path: Path, seen: set, listed: list, rows: np.ndarray, first_line: int) -> None:
    """Add a block's ids to those seen, stopping at the first seen before (in the block or
    an earlier one) with `iter_beir`'s message: on this thread, the blocks in order.

    Two passes over the ids when none repeats (a disjointness test, then the update, whose
    growth tells a repeat inside the block), not three: at 1M passages the third
    (`set(listed)`) was ~0.2 s of this thread, which the other threads' work waits behind."""
    from pipekit.run.errors import PipelineError

    before = len(seen)
    if seen.isdisjoint(listed):
        seen.update(listed)
        if len(seen) - before == len(listed):
            return
        seen.difference_update(listed)  # as it was: none of these was in it
    for i, doc_id in enumerate(listed):  # the first id seen before, for the message
        if doc_id in seen:
            raise PipelineError(f"{path}, line {first_line + int(rows[i])}: _id {doc_id!r} appears twice")
        seen.add(doc_id)


def _line_blocks(path: Path, start: int, end: int | None,
                 spare: list | None = None) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]:
    """(number of the block's first line, its offset in the file, its bytes, line starts,
    line ends) for blocks of whole lines that begin in [start, end), as `beir_lines` numbers
    and cuts them (on b"\n" only; the file's BOM, when `start` is 0, left out of its first line).

    Each block is read into a NumPy array of its own, after the part line the block before
    left (`readinto`, one copy of each byte): reading a block, joining it to that part line
    and slicing off the next one copied each block three times, each into a fresh 2 MB
    buffer that costs its page faults (at 200k passages, timed apart: the reads 0.15 s, the
    joins 0.10, the slices 0.08, on the thread every other one waits for).

    `spare`: buffers the caller is done with (a block's bytes, once its table is made),
    taken for the next blocks instead of new ones.  On this kind of machine a fresh page
    costs a fault, and the host's (its memory handed back when freed): a new 2 MB buffer a
    block touched every byte of the corpus in pages never used before.  Only the caller
    says when a buffer is free; the one holding the part line carried over is not taken."""
    from pipekit.read.beir import open_corpus

    with open_corpus(path, start) as handle:
        at, tail, line_no, last = start, np.empty(0, dtype=np.uint8), 1, False
        while not last:
            # A line longer than a block is read on into a buffer twice as large, so a long
            # line costs a few copies of itself, not one per block it spans.
            want = len(tail) + max(BLOCK_BYTES, len(tail))
            buf = _spare_buffer(spare, want, tail)
            buf[:len(tail)] = tail
            got = handle.readinto(memoryview(buf)[len(tail):want]) or 0
            last = not got
            # Only the new bytes are searched: the part line before holds no newline.
            newline = np.flatnonzero(buf[len(tail):len(tail) + got] == 10) + len(tail)
            data = buf[:len(tail) + got]
            if not last and len(newline) == 0:
                tail = data
                continue
            cut = len(data) if last else int(newline[-1]) + 1
            ends = newline + 1
            if last and cut > (int(ends[-1]) if len(ends) else 0):
                ends = np.append(ends, cut)  # the file's last line, without a newline
            starts = np.concatenate([[0], ends[:-1]]).astype(np.int64) if len(ends) else ends
            if end is not None:
                inside = at + starts < end
                if not inside.all():
                    starts, ends, last = starts[inside], ends[inside], True
            if line_no == 1 and start == 0 and len(starts) and data[:len(_BOM)].tobytes() == _BOM:
                starts[0] = min(len(_BOM), int(ends[0]))
            if len(starts):
                # Only the range's lines: handed to Arrow, a line past `end` could complete
                # an object the last line in range leaves open.
                yield line_no, at, data[:int(ends[-1])], starts, ends
            line_no += len(starts)
            tail, at = data[cut:], at + cut


def _spare_buffer(spare: list | None, size: int, tail: np.ndarray) -> np.ndarray:
    """A buffer of at least `size` bytes: a spare one large enough (not the one `tail` lies
    in), else a new one with room for a block and a part line."""
    for i, buf in enumerate(spare or ()):
        if len(buf) >= size and tail.base is not buf:
            return spare.pop(i)
    return np.empty(max(size, BLOCK_BYTES + SPARE_ROOM), dtype=np.uint8)


def _arrow_block(pool, path, data: np.ndarray, starts, ends, hashed=None, *, max_bytes, schema):
    """(the block's table parsed by Arrow, its ids as a list, each id's line in the block,
    its texts' lengths in characters), or None where json.loads' reading might differ.  A
    function of the block alone (the ids seen before are checked by the caller, in order),
    so blocks may be made on threads.  `hashed`: the block's lines' digests being made in
    the hashing process (pipekit/read/line_hashes.py); None: they are made here.

    Only a block that is valid UTF-8, whose non-blank lines each run from `{` to `}` (so a
    line is one object: an object spread over lines, or two on one line, is left to the
    line-by-line path) and whose every `_id` is a non-empty string, `title` and `text`
    strings or absent.  Arrow's reader refuses a number where the schema says string, a key
    given twice, a control character in a string and a lone surrogate, so those blocks
    fall back too, and `_beir_record` words the error as before."""
    import codecs
    from pipekit.read.beir import read_records
    from pipekit.read.line_hashes import LineHasher, digests, hex_column

    buf = np.asarray(data, dtype=np.uint8)
    body_end = ends - (buf[ends - 1] == 10)  # the line without its newline (and without a CR before it)
    body_end -= (body_end > starts) & (buf[np.maximum(body_end - 1, 0)] == 13)
    filled = body_end > starts
    record = filled & (buf[np.minimum(starts, len(buf) - 1)] == 123) & (buf[np.maximum(body_end - 1, 0)] == 125)
    for i in np.flatnonzero(filled & ~record):  # only blank lines (spaces, tabs) may be neither
        if buf[starts[i]:ends[i]].tobytes().strip():
            return None
    if not record.any():
        return _table({}, 0, schema), [], record, None  # blank lines only
    if buf.max(initial=0) >= 128:  # ASCII is UTF-8: only a block with other bytes is decoded to check
        try:
            codecs.utf_8_decode(memoryview(buf), "strict", True)
        except UnicodeDecodeError:
            return None
    parsing = pool.submit(read_records, pa.py_buffer(buf).slice(int(starts[0])))
    rows = np.flatnonzero(record)
    r_starts, r_ends = starts[rows], ends[rows]
    if hashed is None:
        hashes = hex_column(digests(buf, r_starts, r_ends))
    else:  # every line's digest was asked for: the records' are kept
        hashes = hex_column(LineHasher.result(hashed, buf, starts, ends), None if len(rows) == len(starts) else rows)
    parsed = parsing.result()  # None: whatever Arrow refuses, the line-by-line path words it
    if parsed is None or parsed.num_rows != len(rows):
        return None
    ids, titles, texts = (parsed.column(k).combine_chunks() for k in ("_id", "title", "text"))
    if ids.null_count or pc.any(pc.equal(pc.binary_length(ids), 0)).as_py():
        return None
    table = _beir_table(path, ids, titles, texts, r_ends - r_starts, hashes, max_bytes, schema)
    # The lengths the cut into tables needs, here on the block's thread, not on the one
    # every block passes through (where, at 1M passages, it waited 1.6 s for the GIL).
    return table, ids.to_pylist(), rows, _text_lengths(table)


def _python_block(path, data: bytes, starts, ends, first_line: int, seen: set, max_bytes, schema) -> pa.Table:
    """The block line by line: json.loads for each record, `_beir_record` for any line of
    another shape (it converts an integer `_id` or a null title, or raises its exact message)."""
    from pipekit.run.errors import PipelineError
    from pipekit.read.beir import _beir_record
    from pipekit.run.hashing import content_hash

    data = data.tobytes() if isinstance(data, np.ndarray) else data
    loads = json.loads
    ids, titles, texts, sizes, hashes = [], [], [], [], []
    for i, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):
        raw = data[a:b]
        if not raw.strip():
            continue
        line_no = first_line + i
        try:
            rec = loads(raw.decode("utf-8"))
        except (ValueError, RecursionError):  # not UTF-8, not JSON, or too deep: _beir_record says which
            rec = None
        if not (type(rec) is dict and type(doc_id := rec.get("_id")) is str and doc_id
                and type(title := rec.get("title", "")) is str and type(text := rec.get("text", "")) is str
                and not _SURROGATE.search(raw)):
            rec = _beir_record(path, line_no, raw)  # converts what it accepts, raises on the rest
            doc_id, title, text = rec["_id"], rec["title"], rec["text"]
        if doc_id in seen:
            raise PipelineError(f"{path}, line {line_no}: _id {doc_id!r} appears twice")
        seen.add(doc_id)
        ids.append(doc_id)
        titles.append(title)
        texts.append(text)
        sizes.append(len(raw))
        hashes.append(content_hash(raw))
    return _beir_table(path, ids, titles, texts, np.array(sizes, dtype=np.int64), hashes, max_bytes, schema)


def _beir_table(path, ids, titles, texts, sizes: np.ndarray, hashes: list, max_bytes, schema) -> pa.Table:
    """Stage 01's rows of a block's records (each column an Arrow array or a list): an
    empty or null title is none, a missing text empty, and a record whose line is over
    `max_bytes` a `skipped` row without its text, as a big file is."""
    from pipekit.read.walk import too_large

    n = len(sizes)
    ids, titles, texts = (x if isinstance(x, pa.Array) else pa.array(x, pa.string()) for x in (ids, titles, texts))
    texts = pc.fill_null(texts, "")
    status, error = pa.array(["ok"] * n, pa.string()), pa.nulls(n, pa.string())
    over = sizes > max_bytes if max_bytes is not None else np.zeros(n, dtype=bool)
    if over.any():
        mask = pa.array(over)
        texts = pc.if_else(mask, pa.scalar(None, pa.string()), texts)
        status = pc.if_else(mask, "skipped", status)
        error = pa.array([too_large(s, max_bytes) if o else None for s, o in zip(sizes.tolist(), over.tolist())],
                         pa.string())
    columns = {
        "doc_id": ids, "source": pa.array([str(path)] * n, pa.string()), "format": pa.array(["beir"] * n, pa.string()),
        "text": texts, "status": status, "error": error,
        "path": pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], pa.string())),
        "title": pc.if_else(pc.fill_null(pc.equal(titles, ""), True), pa.scalar(None, pa.string()), titles),
        "encoding": pa.array(["utf-8"] * n, pa.string()), "n_bytes": pa.array(sizes, pa.int64()),
        "content_hash": hashes if isinstance(hashes, pa.Array) else pa.array(hashes, pa.string()),
    }
    return _table(columns, n, schema)


def _table(columns: dict, n: int, schema: pa.Schema) -> pa.Table:
    return pa.Table.from_arrays([columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in schema],
                                schema=schema)


def _text_lengths(table: pa.Table) -> np.ndarray:
    """Each row's text length in characters (0 for none), as 01_documents.batches counts it."""
    return np.asarray(pc.fill_null(pc.utf8_length(table.column("text")), 0), dtype=np.int64)


class _Batches:
    """Blocks of rows re-cut into the tables 01_documents.batches makes: a table ends at the
    row that brings it to `max_rows` rows or to `max_chars` characters of text."""

    def __init__(self, max_rows: int, max_chars: int):
        self.max_rows, self.max_chars = max_rows, max_chars
        self.pending: list[pa.Table] = []
        self.rows = self.chars = 0

    def add(self, table: pa.Table, lengths: np.ndarray | None = None) -> Iterator[pa.Table]:
        """The tables complete with `table`'s rows; `lengths`: its texts' lengths in
        characters (`_text_lengths`), when the block's thread made them."""
        lengths = _text_lengths(table) if lengths is None else lengths
        total = np.concatenate([[0], np.cumsum(lengths)])  # characters before each row
        i, n = 0, table.num_rows
        while i < n:
            by_rows = i + self.max_rows - self.rows
            by_chars = int(np.searchsorted(total, total[i] + self.max_chars - self.chars, side="left"))
            cut = min(by_rows, max(by_chars, i + 1))
            if cut > n:
                self.pending.append(table.slice(i))
                self.rows += n - i
                self.chars += int(total[n] - total[i])
                return
            self.pending.append(table.slice(i, cut - i))
            yield self._emit()
            i = cut

    def rest(self) -> Iterator[pa.Table]:
        if self.rows:
            yield self._emit()

    def _emit(self) -> pa.Table:
        # Its blocks' slices as they are, not combined: the writer takes a column in chunks,
        # and combining copied every text once more into fresh memory (its pages faulted in).
        table = pa.concat_tables(self.pending)
        self.pending, self.rows, self.chars = [], 0, 0
        return table


# ---- stage 02: texts that are clean already -------------------------------------------------

# Anything one of clean_document's rules would change, in an ASCII text (RE2 syntax: `$`
# is the end of the text only, `^` its start).  `already_clean` finds the same with NumPy;
# this pattern is the rule it must agree with (tests/test_fastpath.py draws texts through both).
_NEEDS_CLEANING = r"[\x00-\x08\x0b-\x1f\x7f]|[ \t]\n|[ \t]$|\n\n\n|^\n|--- page "
_PAGE = np.frombuffer(b"--- page ", dtype=np.uint8)


def already_clean(texts: pa.Array) -> np.ndarray:
    """Which texts clean_document leaves as they are but for the newlines at their end:
    ASCII, no `_NEEDS_CLEANING` match, and something besides whitespace.

    Read from the column's bytes with NumPy, not by RE2: Arrow's regex (and its substring
    search) read ~0.4 GB/s, 0.4 s of stage 02's 1.2 s at 200k passages; a byte comparison
    over the whole buffer reads several GB/s.  One comparison finds every byte outside
    printable ASCII (so control characters, non-ASCII, tabs and newlines), one every `-`;
    the rules are then checked at those few positions only (a newline's neighbours, a
    dash's next eight bytes), and each position is mapped to its text."""
    from pipekit.run.arrays import byte_positions, odd_bytes, text_bytes

    b, starts, ends = text_bytes(texts, "already_clean")
    n = len(starts)
    if n == 0:
        return np.zeros(0, dtype=bool)
    dirty = np.zeros(n, dtype=bool)
    # Bytes outside 0x20-0x7e, found without a temporary of the batch's size (arrays.scratch says why).
    odd = odd_bytes(b)
    kind = b[odd]
    dirty[np.searchsorted(ends, odd[(kind != 9) & (kind != 10)], side="right")] = True  # control, DEL, non-ASCII
    nl = odd[kind == 10]
    at = np.searchsorted(ends, nl, side="right")
    first = nl == starts[at]                                                   # ^\n
    before = b[np.maximum(nl - 1, 0)]
    spaced = ~first & ((before == 32) | (before == 9))                         # [ \t]\n
    two = nl + 2 < ends[at]
    three = two & (b[np.minimum(nl + 1, len(b) - 1)] == 10) & (b[np.minimum(nl + 2, len(b) - 1)] == 10)  # \n\n\n
    dirty[at[first | spaced | three]] = True
    filled = ends > starts
    last = b[np.maximum(ends - 1, 0)] if len(b) else np.zeros(n, dtype=np.uint8)
    dirty |= filled & ((last == 32) | (last == 9))                             # [ \t]$
    dash = byte_positions(b, 45)
    if len(dash):
        at = np.searchsorted(ends, dash, side="right")
        page = dash + len(_PAGE) <= ends[at]
        for k, byte in enumerate(_PAGE.tolist()):
            page &= b[np.minimum(dash + k, len(b) - 1)] == byte                # --- page
        dirty[at[page]] = True
    if texts.null_count:
        dirty |= np.asarray(texts.is_null())
    # Something besides whitespace: here only space, tab and newline are whitespace left.
    dirty |= ~filled | np.asarray(pc.fill_null(pc.ascii_is_space(texts), True))
    return ~dirty


def _final_newline(texts: pa.Array) -> pa.Array:
    """text.strip("\\n") + "\\n" for texts that do not start with a newline.  Where no text ends
    in a newline (a BEIR record's text, nearly always) there is nothing to strip, and the texts
    are only joined to one: trimming first copied every text once more (0.16 -> 0.10 s of one
    thread over the 1M corpus's batches, issue 47, branch c23)."""
    from pipekit.run.arrays import string_buffers

    offsets, data = string_buffers(texts)
    # Each text's last byte; an empty text's is the one before it (or the buffer's last): it
    # can only make the texts trimmed for nothing.
    if len(data) and (data[offsets[1:] - 1] == 10).any():
        texts = pc.utf8_rtrim(texts, characters="\n")
    return pc.binary_join_element_wise(texts, "\n", "")


def clean_texts(texts: pa.Array, notes: pa.Array,
                clean_one: Callable[[str | None, str | None], tuple[str, str | None, int]]):
    """(texts, notes, furniture lines, documents with furniture) of stage 02 for a run of
    ordinary documents: the clean ones by one Arrow expression, the others by
    `clean_one(text, note) -> (text, note, furniture lines)`, one at a time."""
    fast = already_clean(texts)
    out = _final_newline(texts)
    slow = np.flatnonzero(~fast)
    if not len(slow):
        return out, notes, 0, 0
    cleaned = [clean_one(t, n) for t, n in zip(texts.take(slow).to_pylist(), notes.take(slow).to_pylist())]
    mask = pa.array(~fast)
    out = pc.replace_with_mask(out, mask, pa.array([c[0] for c in cleaned], pa.string()))
    notes = pc.replace_with_mask(notes, mask, pa.array([c[1] for c in cleaned], pa.string()))
    return out, notes, sum(c[2] for c in cleaned), sum(c[2] > 0 for c in cleaned)


def ahead_unless(fn: Callable, items: Iterator, workers: int, alone: Callable) -> Iterator[tuple]:
    """(item, fn(item)) for each item, in order, fn on `workers` threads at once as
    engine.map_ahead does, except an item for which `alone(item)` is true: it comes back as
    (item, None) once every item before it is done, and no item after it is taken until the
    caller asks for the next, so the caller works on it with nothing else in flight.

    Stage 02: a batch of short documents is Arrow's scans (two at once use both cores), a
    batch holding a document over 8 MB is cleaned by slices to bound the peak, and two of
    those at once would hold two large documents where one thread held one."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    if workers <= 1:
        for item in items:
            yield (item, None) if alone(item) else (item, fn(item))
        return
    with ThreadPoolExecutor(workers, thread_name_prefix="clean-ahead") as pool:
        pending: deque = deque()
        for item in items:
            if alone(item):
                while pending:
                    yield pending.popleft().result()
                yield item, None
                continue
            pending.append(pool.submit(lambda x: (x, fn(x)), item))
            if len(pending) >= workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
