"""Stage 04's sparse-matrix steps: scipy's for real batches, NumPy's for a handful of chunks.

1. `to_csr`: (row, col, weight) triples -> rows of (col, summed weight), cols ascending —
   counting: a word said twice in a chunk is one entry of weight 2.
2. `to_csc`: rows -> columns (term-major postings), each column's rows in order.
3. `merge_adjacent`: a term's postings of one chunk, side by side after 2, summed into one.

scipy does both with counting sorts in C, which is what keeps stage 04 linear at a million
chunks.  But importing scipy takes 0.17 s, and a rerun after one added file (stage 04
counts only the new file's chunks, pipekit/run/incremental.py) is about a second in all: a
sixth of it went to loading scipy for a few hundred words.  Below SMALL entries NumPy's
sorts give the same arrays in well under a millisecond; tests/test_04_indexing.py checks
both ways against each other.
"""
from __future__ import annotations

import numpy as np

from pipekit.run.arrays import run_starts

SMALL = 20_000  # entries below which NumPy sorts them (under 2 ms) instead of scipy


def to_csr(rows: np.ndarray, cols: np.ndarray, weights: np.ndarray, shape: tuple[int, int]):
    """(indptr, indices, data) of the matrix with these entries, duplicates summed."""
    if len(rows) >= SMALL:
        from scipy import sparse

        m = sparse.coo_matrix((weights, (rows, cols)), shape=shape).tocsr()
        return m.indptr, m.indices, m.data
    if len(rows) and not (0 <= rows.min() and rows.max() < shape[0] and 0 <= cols.min() and cols.max() < shape[1]):
        raise ValueError(f"an entry lies outside a {shape} matrix")  # as scipy says: the key below would wrap
    key = rows.astype(np.int64) * shape[1] + cols
    order = np.argsort(key, kind="stable")
    key = key[order]
    first = np.flatnonzero(run_starts(key))  # each distinct (row, col): its first entry
    data = np.add.reduceat(weights[order], first) if len(first) else weights[:0]
    indptr = np.zeros(shape[0] + 1, dtype=np.int32)
    np.cumsum(np.bincount(key[first] // shape[1], minlength=shape[0]), out=indptr[1:])
    return indptr, (key[first] % shape[1]).astype(np.int32), data.astype(weights.dtype, copy=False)


def to_csc(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, shape: tuple[int, int]):
    """(col_ptr, rows, data): the same matrix column by column, rows in order within each."""
    if len(indices) >= SMALL:
        from scipy import sparse

        m = sparse.csr_matrix((data, indices, indptr), shape=shape, copy=False).tocsc()
        return m.indptr, m.indices, m.data
    order = np.argsort(indices, kind="stable")  # stable: within a column, rows stay in order
    rows = np.repeat(np.arange(shape[0], dtype=indices.dtype), np.diff(indptr))
    col_ptr = np.zeros(shape[1] + 1, dtype=indptr.dtype)
    np.cumsum(np.bincount(indices, minlength=shape[1]), out=col_ptr[1:])
    return col_ptr, rows[order], data[order]


def merge_adjacent(indptr: np.ndarray, chunk: np.ndarray, tf: np.ndarray):
    """Sum postings of one term in one chunk that sit next to each other (term-major order).

    Two words of a chunk can be one term ("running", "runs" -> "run"); after the CSC
    conversion their postings are neighbours, since within a term chunks stay in order.
    """
    dup = np.zeros(len(chunk), dtype=bool)
    dup[1:] = chunk[1:] == chunk[:-1]
    dup[indptr[:-1][indptr[:-1] < len(chunk)]] = False  # a term's first posting starts a group
    if not dup.any():
        return indptr, chunk, tf
    first = np.flatnonzero(~dup)
    tf = np.add.reduceat(tf, first).astype(np.int32, copy=False)
    # A term's postings now start at the number of groups that begin before its old start
    # (a search in `first`, not a running count over every posting: two int64 copies less).
    return np.searchsorted(first, indptr).astype(indptr.dtype), chunk[first], tf
