"""BM25's term weight, computed where it is used: stage 05, a Searcher, the cold copy (issue 47).

SPEC's score is a sum over the query's terms of one number per (term, chunk):

    weight(t, c) = idf(t) · tf·(k1+1) / (tf + norm(c)),   norm(c) = k1·(1 − b + b·|c|/avgdl)

Stage 04 used to compute it for every posting and store it (04_postings' `impact`, float64).
Lucene and tantivy store what the weight is made of instead (tf, and a length norm per
document) and compute it as they score, and so does pipekit now: stage 04 counts, stage 05
scores.  What that gave (bench/README.md, "Postings keep tf"):

- stage 04 writes 4 bytes a posting less than 12 (and no float pass over every posting);
- stage 05 holds a posting's tf (1-2 bytes) where it held 8, and one norm per chunk;
- a rerun after one added file no longer recomputes every posting's weight (one new chunk
  moves avgdl, so it moved every stored impact).

The weight is this module's alone: every caller (stage 05's Index, its workers, the
Searcher's short way, the cold copy's writer, explain) computes it here, with the operations
stage 04 used, in its order — idf·tf, then ·(k1+1), then /(tf + norm) — elementwise IEEE
operations, so the same inputs give the same bits whether a term's weights are computed for
all its postings, a block of terms at once (idf gathered per posting) or a few positions
(tests/test_bm25.py holds them to stage 04's old code, bit for bit).  Plain NumPy: the cold
search imports it without Arrow.
"""
from __future__ import annotations

import numpy as np

BLOCK = 1 << 20  # postings weighed at a time when every term's are (`largest`, `all_weights`): 8 MB of float64


def chunk_norms(k1: float, b: float, avgdl: float, lengths: np.ndarray) -> np.ndarray:
    """Each chunk's length norm k1·(1 − b + b·|c|/avgdl), float64 (computed as stage 04
    computed it).  With no terms at all avgdl is 0 and there are no postings to weigh: zeros."""
    if avgdl > 0:
        return k1 * (1 - b + b * lengths / avgdl)
    return np.zeros(len(lengths))


def weights(idf, tf: np.ndarray, norm: np.ndarray, k1: float) -> np.ndarray:
    """SPEC's BM25 term weight of postings with these tf and chunk norms (`norm`: each
    posting's chunk's), for one term (`idf` a number) or per posting (`idf` an array)."""
    tfv = tf.astype(np.float64)
    out = np.multiply(idf, tfv)
    out *= k1 + 1
    tfv += norm
    out /= tfv
    return out


def tf_dtype(largest: int | None) -> type:
    """The narrowest unsigned integer that holds every tf up to `largest` (None: not known)."""
    if largest is None or largest >= 1 << 16:
        return np.int32
    return np.uint8 if largest < 1 << 8 else np.uint16


def blocks(indptr: np.ndarray, held: np.ndarray):
    """Runs of the held terms (ids ascending, each run of postings non-empty) of about BLOCK
    postings each, whole terms: (their ids, first posting, end) — the postings of terms that
    follow each other in id order lie side by side in the held arrays."""
    if len(held) == 0:
        return
    starts = indptr[held]
    i = 0
    while i < len(held):
        j = int(np.searchsorted(starts, starts[i] + BLOCK, side="left"))
        j = max(j, i + 1)
        yield held[i:j], int(starts[i]), int(indptr[held[j - 1] + 1])
        i = j


def block_weights(terms: np.ndarray, lo: int, hi: int, indptr, idf, tf, chunk, norm, k1) -> np.ndarray:
    """The weights of postings [lo, hi), the runs of `terms` (a `blocks` block)."""
    term_of = np.repeat(terms, np.diff(indptr)[terms])
    return weights(idf.take(term_of), tf[lo:hi], norm.take(chunk[lo:hi]), k1)


class Weights:
    """An index's weights: its terms' idf, its chunks' norms (from their lengths and the corpus
    statistics stage 04 recorded: k1, b, avgdl) and k1, for stage 05's Index and its workers."""

    def __init__(self, idf: np.ndarray, stats: dict, lengths: np.ndarray):
        self.idf, self.k1 = idf, stats["k1"]
        self.norm = chunk_norms(self.k1, stats["b"], stats["avgdl"], lengths)

    def __call__(self, t: int, chunk: np.ndarray, tf: np.ndarray) -> np.ndarray:
        """Term t's weight in each of these postings (its chunks, and its tf in each)."""
        return weights(self.idf[t], tf, self.norm.take(chunk), self.k1)

    def largest(self, indptr: np.ndarray, tf: np.ndarray, chunk: np.ndarray, rows: dict) -> np.ndarray:
        return largest(indptr, self.idf, tf, chunk, self.norm, self.k1, rows)

    def all(self, indptr: np.ndarray, tf: np.ndarray, chunk: np.ndarray) -> np.ndarray:
        return all_weights(indptr, self.idf, tf, chunk, self.norm, self.k1)


def largest(indptr: np.ndarray, idf, tf, chunk, norm, k1, rows: dict) -> np.ndarray:
    """Each term's largest weight (0 for a term whose postings are not held): over its held
    postings, or for a term held only as a coded row (`rows`: term -> (codes, values)), its values."""
    out = np.zeros(len(indptr) - 1, dtype=np.float64)
    held = np.flatnonzero(np.diff(indptr) > 0)
    for terms, lo, hi in blocks(indptr, held):
        w = block_weights(terms, lo, hi, indptr, idf, tf, chunk, norm, k1)
        out[terms] = np.maximum.reduceat(w, indptr[terms] - lo)
    out[list(rows)] = [values.max() for _, values in rows.values()]
    return out


def all_weights(indptr: np.ndarray, idf, tf, chunk, norm, k1) -> np.ndarray:
    """Every held posting's weight, in the held order (the cold copy stores them)."""
    out = np.zeros(int(indptr[-1]), dtype=np.float64)
    held = np.flatnonzero(np.diff(indptr) > 0)
    for terms, lo, hi in blocks(indptr, held):
        out[lo:hi] = block_weights(terms, lo, hi, indptr, idf, tf, chunk, norm, k1)
    return out
