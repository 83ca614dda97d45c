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
