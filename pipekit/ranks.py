"""Order statistics over scored chunks, for stage 05: which chunks and documents are best.

A document scores its best chunk, and a document's chunks are consecutive in corpus
order, so "the n-th best document" and "the depth best documents" come from runs of
equal document codes.  Ties are settled by corpus order, never by chance.  Stage 05's
pruned scorer uses `nth_best_document` for its floor; `rank` turns a query's scored
chunks into its results.  Plain NumPy; nothing here reads or writes.
"""
from __future__ import annotations

import numpy as np


def run_starts(values: np.ndarray) -> np.ndarray:
    """True where a run of equal values begins in a sorted array (np.diff with prepend,
    but in one ufunc call: this runs a few times per query)."""
    first = np.ones(len(values), dtype=bool)
    np.not_equal(values[1:], values[:-1], out=first[1:])
    return first


def nth_best_document(cols: np.ndarray, vals: np.ndarray, doc_codes: np.ndarray, n: int) -> float:
    """The n-th best document's score among chunks `cols` (in corpus order), 0 if fewer."""
    if len(vals) < n:
        return 0.0
    docs = doc_codes[cols]
    # A document's chunks are consecutive in corpus order: its best is a max over one run.
    starts = np.flatnonzero(run_starts(docs))
    best = np.maximum.reduceat(vals, starts) if len(starts) < len(vals) else vals
    return float(np.partition(best, len(best) - n)[len(best) - n]) if len(best) >= n else 0.0


def rank(cols: np.ndarray, vals: np.ndarray, doc_codes: np.ndarray, k: int, depth: int):
    """Positions of the k best chunks (score desc, then corpus order), and the `depth`
    best documents with their scores (a document scores its best chunk); k <= depth."""
    pick, n = np.arange(len(vals)), 4 * depth
    while len(pick) > n:
        # argpartition finds the n best without sorting the rest; every chunk tied with
        # the n-th stays in, so that corpus order, not chance, settles the tie.
        cut = vals[np.argpartition(vals, len(vals) - n)[len(vals) - n]]
        pick = np.flatnonzero(vals >= cut)
        if len(np.unique(doc_codes[cols[pick]])) >= depth:
            break
        n *= 4  # documents of many chunks: n chunks were fewer than depth documents
        pick = np.arange(len(vals))
    order = pick[np.lexsort((cols[pick], -vals[pick]))]
    docs = doc_codes[cols[order]]
    _, first = np.unique(docs, return_index=True)  # each document's best chunk
    first = np.sort(first)[:depth]
    return order[:k], docs[first], vals[order[first]]
