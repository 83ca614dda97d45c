"""A few rows of an Arrow column as Python values, read from its buffers: a Searcher's hits.

A search names its ten hits' citation columns (chunk_id, doc_id, heading, pages, span,
heading trail, format, anchor) and texts.  `Table.take(rows).to_pydict()` did that in two
Arrow calls, but each column costs ~5 µs of Arrow's function dispatch whatever the number
of rows: 0.06-0.1 ms of twelve columns, a sixth of a search at 12,000 chunks
(bench/search_speed.py).  Here a column is read straight from its buffers, as NumPy views
(nothing is copied at load: the index's memory stays what it was): a string is its bytes
decoded, a number an item of an array, a list of strings its run of the child strings.

The values are what `to_pylist()` gives (tests/test_search.py compares every row of real
columns).  Not for many rows: per value this is Python, where Arrow's take is C.  Types
other than strings, integers and lists of strings (none of 03's or 04's citation columns)
are read by Arrow's take.

`table_reader` reads a table's columns at the same rows in one call (a Searcher's hit):
the rows and the rows after them (a string's end is the next one's start) are one array
made once for every column, so a string column is one take of its offsets, not two; a
column without nulls reads no validity, and one of nulls only (a docs folder's page
columns) nothing at all.  Each NumPy call costs ~1 µs whatever the ten rows: twelve
columns read one by one were ~70 µs of a 0.45 ms search (issue 47).

`Records` goes further for a Searcher's one query: a chunk's citation strings joined into
one at load, so that a hit's fields are one decode and a split (its text is still read
from its own column).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pyarrow as pa

from pipekit.run.arrays import string_buffers

Reader = Callable[[np.ndarray], list]
# A column's values from (rows, rows then rows + 1, as one array): see the module text.
Part = Callable[[np.ndarray, np.ndarray], list]


def column_reader(column: pa.Array | pa.ChunkedArray) -> Reader:
    """A function from row numbers (an int64 array) to those rows' Python values."""
    part = _part(column)
    return lambda at: part(at, _both(at))


def table_reader(table: pa.Table) -> Callable[[np.ndarray], dict[str, list]]:
    """A function from row numbers (an int64 array) to {column name: those rows' values}."""
    parts = {n: _part(table.column(n)) for n in table.column_names}

    def read(at: np.ndarray) -> dict[str, list]:
        both = _both(at)
        return {n: part(at, both) for n, part in parts.items()}
    return read


SEP, ITEM = "\x1f", "\x1e"  # between a record's strings; before each item of a heading trail
_SEP = SEP.encode()


class Records:
    """A Searcher's citation columns read for one query's hits: a chunk's strings are one
    string made at load (`SEP` between them, the trail's items each after an `ITEM`), its
    string's bounds, numbers and nulls one row of an int64 array, so the hits' are one take,
    one decode and one split, where twelve columns were twelve reads (`table_reader`: ~65 µs
    of a 0.37 ms search, ~20 here).

    With `texts` (a Searcher's kept texts, as read: a buffer per row group) a chunk's row
    also says where its text is (row group, start, end), so the same take finds the texts
    too (`text` in the answer): reading them on their own was ~10 µs of ten hits, a lookup
    of their row groups and a take per group.

    What it costs: the same strings again and seven numbers (ten with texts), 272 bytes a
    chunk on the docs folder (1.8 MB; 296 with texts), 149 at 200k passages (30 MB, 0.3 s
    to make).  A tuple of Python values per chunk, made at load, was faster to read but 760
    and 490 bytes a chunk (98 MB and 2 s at 200k): Python's objects, not the text, are what
    weigh (bench/README.md).  `ok` is False when a value holds a separator (or a trail a
    null item): then the caller reads the columns (`table_reader`)."""

    STRINGS = ("chunk_id", "doc_id", "heading", "page_label_start", "page_label_end", "format", "anchor")
    ORDER = ("chunk_id", "doc_id", "heading_path") + STRINGS[2:]  # a record's strings, in its order
    NUMBERS = ("page_start", "page_end", "start_char", "end_char")
    # The numbers as they are in `numbers`' places 2-5; a null's bit is 1 << its place here.
    NULLABLE = ("page_start", "page_end", "start_char", "end_char", "page_label_start", "page_label_end", "format")

    def __init__(self, table: pa.Table, texts: pa.ChunkedArray | pa.Array | None = None):
        import pyarrow.compute as pc

        n = table.num_rows
        self.texts = None  # the texts' buffers, one a row group (None: no texts read here)
        col = lambda name: (table.column(name) if name in table.column_names  # noqa: E731
                            else pa.chunked_array([pa.nulls(n, pa.string())]))
        strings = [col(name) for name in self.STRINGS]
        trail = col("heading_path") if "heading_path" in table.column_names else None
        items = pc.list_flatten(trail) if trail is not None else pa.array([], pa.string())
        self.ok = items.null_count == 0 and not any(
            len(c) and pc.any(pc.match_substring(c, sep)).as_py() for c in strings + [items] for sep in (SEP, ITEM))
        if not self.ok:
            return
        joined = pc.fill_null(pc.binary_join(trail, ITEM), "") if trail is not None else pa.nulls(n, pa.string())
        # ITEM before every item: [] is "", [""] is ITEM, so a trail reads back as it was.
        trail_text = pc.if_else(pc.greater(pc.fill_null(pc.list_value_length(trail), 0), 0),
                                pc.binary_join_element_wise("", joined, ITEM), "") if trail is not None else joined
        parts = [pc.fill_null(c, "") for c in strings[:2]] + [pc.fill_null(trail_text, "")] + \
            [pc.fill_null(c, "") for c in strings[2:]]
        blob = pc.binary_join_element_wise(*parts, SEP)
        if isinstance(blob, pa.ChunkedArray):  # (row groups: one array, its offsets 64-bit past 2 GB)
            blob = blob.cast(pa.large_string()).combine_chunks() if blob.num_chunks != 1 else blob.chunk(0)
        offsets, data = string_buffers(blob)
        self.data = memoryview(data)
        self._blob = blob  # (owns the buffer the view above reads)
        # A row: where the chunk's string starts and ends, its four numbers, its null bits
        # (one take and one list for all of a query's hits).
        groups = [] if texts is None or texts.null_count or len(texts) != n else (
            texts.chunks if isinstance(texts, pa.ChunkedArray) else [texts])  # (a text a row, none null)
        numbers = np.zeros((n, 10 if groups else 7), dtype=np.int64)
        numbers[:, 0], numbers[:, 1] = offsets[:-1], offsets[1:]
        if groups:
            at, self.texts = 0, []
            for g, strings in enumerate(groups):
                bounds, data = string_buffers(strings)
                numbers[at:at + len(strings), 7:] = np.stack([np.full(len(strings), g), bounds[:-1], bounds[1:]], 1)
                self.texts.append(memoryview(data))
                at += len(strings)
            self._groups = groups  # (own the buffers the views above read)
        for j, name in enumerate(self.NUMBERS):
            if name in table.column_names:
                numbers[:, 2 + j] = pc.fill_null(table.column(name), 0).to_numpy()
        nulls = numbers[:, 6]
        # Columns of nulls only (a folder without PDFs: its pages) read as such, with no bits
        # looked at; the bits say which rows of the others are null.
        self.all_null, self.some_null = [], []
        for bit, name in enumerate(self.NULLABLE):
            missing = table.column(name).null_count if name in table.column_names else n
            if missing == n:
                self.all_null.append(name)
            elif missing:
                self.some_null.append((bit, name))
                nulls |= np.asarray(pc.is_null(table.column(name))).astype(np.int64) << bit
        self.numbers = numbers

    def __call__(self, rows: np.ndarray) -> dict[str, list]:
        """{column name: the rows' values}, as `table_reader` gives them (but for a null heading
        or anchor, which are "", and a heading trail's null, which is []: a Passage makes no
        difference between them)."""
        m = len(rows)
        if m == 0:
            return {name: [] for name in self.ORDER + self.NUMBERS + ("text",) * (self.texts is not None)}
        taken = self.numbers.take(rows, axis=0).T.tolist()
        starts, ends, numbers, nulls, texts = taken[0], taken[1], taken[2:6], taken[6], self.texts
        data = self.data
        # The rows' strings as one: one decode and one split for all (a decode, a split and a
        # tuple a hit were 2.4 µs each).
        fields = str(_SEP.join([data[a:b] for a, b in zip(starts, ends)]), "utf-8").split(SEP)
        cols = {name: fields[j::8] for j, name in enumerate(self.ORDER)}
        cols["heading_path"] = [t.split(ITEM)[1:] for t in cols["heading_path"]]
        cols.update(zip(self.NUMBERS, numbers))
        for name in self.all_null:
            cols[name] = [None] * m
        for bit, name in self.some_null:
            cols[name] = [None if z >> bit & 1 else v for v, z in zip(cols[name], nulls)]
        if texts is not None:
            cols["text"] = [str(texts[g][a:b], "utf-8") for g, a, b in zip(*taken[7:])]
        return cols


def _both(at: np.ndarray) -> np.ndarray:
    both = np.empty(2 * len(at), dtype=np.int64)
    both[:len(at)] = at
    np.add(at, 1, out=both[len(at):])
    return both


def _part(column: pa.Array | pa.ChunkedArray) -> Part:
    if isinstance(column, pa.ChunkedArray):
        chunks = [c for c in column.chunks if len(c)]
        if len(chunks) != 1:  # row groups: each its own reader (combining them would copy the column)
            return _chunked([_array_part(c) for c in chunks], [len(c) for c in chunks])
        column = chunks[0]
    return _array_part(column)


def _chunked(parts: list[Part], lengths: list[int]) -> Part:
    ends = np.cumsum(lengths)
    starts = [0] + ends[:-1].tolist()

    def read(at: np.ndarray, both: np.ndarray) -> list:
        out = [None] * len(at)
        which = np.searchsorted(ends, at, side="right")
        for w in sorted(set(which.tolist())):  # the row groups the rows are in, each read once
            mine = np.flatnonzero(which == w)
            local = at.take(mine) - starts[w]
            for i, v in zip(mine.tolist(), parts[w](local, _both(local))):
                out[i] = v
        return out
    return read


def _array_part(arr: pa.Array) -> Part:
    t = arr.type
    if len(arr) and arr.null_count == len(arr):  # nulls only (pages of a folder without PDFs): nothing to read
        return lambda at, both: [None] * len(at)
    valid = np.asarray(arr.is_valid()) if arr.null_count else None

    def with_nulls(got: list, at: np.ndarray) -> list:
        return got if valid is None else [v if ok else None for v, ok in zip(got, valid.take(at).tolist())]

    if pa.types.is_string(t) or pa.types.is_large_string(t):
        offsets, data = string_buffers(arr)
        buf = memoryview(data)

        def strings(at: np.ndarray, both: np.ndarray) -> list:
            o, m = offsets.take(both).tolist(), len(at)
            return with_nulls([str(buf[a:b], "utf-8") for a, b in zip(o[:m], o[m:])], at)
        return strings
    if pa.types.is_integer(t) and arr.buffers()[1] is not None:
        values = np.frombuffer(arr.buffers()[1], dtype=t.to_pandas_dtype())[arr.offset:arr.offset + len(arr)]
        return lambda at, both: with_nulls(values.take(at).tolist(), at)
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and (
            pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)):
        width = np.int64 if pa.types.is_large_list(t) else np.int32
        offsets = np.frombuffer(arr.buffers()[1], dtype=width)[arr.offset:arr.offset + len(arr) + 1]
        items = _array_part(arr.values)  # the offsets index the whole child array

        def lists(at: np.ndarray, both: np.ndarray) -> list:
            o, m = offsets.take(both).tolist(), len(at)
            spans = list(zip(o[:m], o[m:]))
            inner = np.array([i for a, b in spans for i in range(a, b)], dtype=np.int64)
            flat = items(inner, _both(inner))
            out, k = [], 0
            for a, b in spans:
                out.append(flat[k:k + b - a])
                k += b - a
            return with_nulls(out, at)
        return lists
    return lambda at, both: arr.take(pa.array(at, pa.int64())).to_pylist()
