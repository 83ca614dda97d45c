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
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pyarrow as pa

from pipekit.run.arrays import string_buffers

Reader = Callable[[np.ndarray], list]


def column_reader(column: pa.Array | pa.ChunkedArray) -> Reader:
    """A function from row numbers (an int64 array) to those rows' Python values."""
    if isinstance(column, pa.ChunkedArray):
        chunks = [c for c in column.chunks if len(c)]
        if len(chunks) != 1:  # row groups: each its own reader (combining them would copy the column)
            return _chunked([_array_reader(c) for c in chunks], [len(c) for c in chunks])
        column = chunks[0]
    return _array_reader(column)


def _chunked(readers: list[Reader], lengths: list[int]) -> Reader:
    ends = np.cumsum(lengths)

    def read(at: np.ndarray) -> list:
        which = np.searchsorted(ends, at, side="right").tolist()
        starts = [0] + ends[:-1].tolist()
        return [readers[w](np.array([r - starts[w]]))[0] for w, r in zip(which, at.tolist())]
    return read


def _array_reader(arr: pa.Array) -> Reader:
    t = arr.type
    valid = np.asarray(arr.is_valid()) if arr.null_count else None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        offsets, data = string_buffers(arr)
        buf = memoryview(data)

        def strings(at: np.ndarray) -> list:
            ends = offsets[1:]  # (the value after each: a view, not `at + 1`, a new array)
            got = [str(buf[a:b], "utf-8") for a, b in zip(offsets.take(at).tolist(), ends.take(at).tolist())]
            return got if valid is None else [s if ok else None for s, ok in zip(got, valid.take(at).tolist())]
        return strings
    if pa.types.is_integer(t) and arr.buffers()[1] is not None:
        values = np.frombuffer(arr.buffers()[1], dtype=t.to_pandas_dtype())[arr.offset:arr.offset + len(arr)]

        def numbers(at: np.ndarray) -> list:
            got = values.take(at).tolist()
            return got if valid is None else [v if ok else None for v, ok in zip(got, valid.take(at).tolist())]
        return numbers
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and (
            pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)):
        width = np.int64 if pa.types.is_large_list(t) else np.int32
        offsets = np.frombuffer(arr.buffers()[1], dtype=width)[arr.offset:arr.offset + len(arr) + 1]
        items = _array_reader(arr.values)  # the offsets index the whole child array

        def lists(at: np.ndarray) -> list:
            spans = list(zip(offsets.take(at).tolist(), offsets[1:].take(at).tolist()))
            flat = items(np.array([i for a, b in spans for i in range(a, b)], dtype=np.int64))
            out, k = [], 0
            for a, b in spans:
                out.append(flat[k:k + b - a])
                k += b - a
            return out if valid is None else [v if ok else None for v, ok in zip(out, valid.take(at).tolist())]
        return lists
    return lambda at: arr.take(pa.array(at, pa.int64())).to_pylist()
