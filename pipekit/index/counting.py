"""Stage 04's sparse-matrix steps: scipy's for real batches, NumPy's for a handful of chunks.

1. `to_csr`: (row, col, weight) triples -> rows of (col, summed weight), cols ascending —
   counting: a word said twice in a chunk is one entry of weight 2.
2. `to_csc`: rows -> columns (term-major postings), each column's rows in order.
3. `merge_adjacent`: a term's postings of one chunk, side by side after 2, summed into one.
4. `narrow_counts` and `compact`: what keeps the counts small while they are all in memory
   (a count in 2 bytes when the batch's counts fit; words the analyzer drops removed in
   place, a block at a time, instead of into a second copy of every entry).

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
    # Summed in int32 whatever tf's width: two uint16 counts of one term can pass 65,535.
    tf = np.add.reduceat(tf, first, dtype=np.int32)
    # A term's postings now start at the number of groups that begin before its old start
    # (a search in `first`, not a running count over every posting: two int64 copies less).
    return np.searchsorted(first, indptr).astype(indptr.dtype), chunk[first], tf


COUNT_16 = np.iinfo(np.uint16).max
COMPACT_BLOCK = 1 << 20  # entries filtered at a time by `compact` (a few MB of temporaries)


def narrow_counts(counts: np.ndarray) -> np.ndarray:
    """A batch's counts as uint16 when every one fits (nearly always: a word said 65,536
    times in one chunk), else as they are.  Stage 04 holds every count of the corpus at once,
    twice during the CSR -> CSC step: at a million passages, 4 bytes a count was 0.2 GB each
    time.  Sums of counts (a chunk's length, merged postings) are taken in a wider type."""
    if len(counts) and int(counts.max()) <= COUNT_16:
        return counts.astype(np.uint16)
    return counts


def compact(keep: np.ndarray, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """`a[keep]` for each array, written over the array's own front a block at a time (the
    kept entries of a block never land past where the block starts), as views of length
    keep.sum().  Boolean indexing made a second copy of every array while the first was
    alive: stage 04's words-the-analyzer-drops step then held 17 bytes an entry, its peak
    at a million passages after the postings write stopped holding every table."""
    at = 0
    for lo in range(0, len(keep), COMPACT_BLOCK):
        sel = keep[lo:lo + COMPACT_BLOCK]
        n = int(np.count_nonzero(sel))
        for a in arrays:
            a[at:at + n] = a[lo:lo + COMPACT_BLOCK][sel]  # a copy first: the ranges may overlap
        at += n
    return tuple(a[:at] for a in arrays)
