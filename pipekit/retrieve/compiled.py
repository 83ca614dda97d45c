"""One warm query's ranking in one compiled loop (numba): BM25 is a sum over the query terms'
postings, the section context a sum over the terms' sections, the answer the k largest.

A Searcher's one query (pipekit/retrieve/warm.py) ranks in NumPy: a bincount over the query's
postings joined term by term, the chunks that scored, each term's section evidence scattered,
taken and added, a partition and a sort of the best.  Each step is one fast call over ~2,000
numbers, but a docs question makes ~40 of them and ~30 Python frames, and at a few µs each
that floor (~60-85 µs a ranking, bench/README.md "One warm query: where the last 20 % goes")
stayed above tantivy's and bm25s-numba's, which rank in compiled loops.  Here the same steps
are written as the plain loops they are and compiled once by numba (a ranking in one call):

1. every posting of every query term, term by term in query order, adds its weight (times
   the term's qtf) to its chunk's sum, which starts at 0.0: each chunk gets ((0 + a) + b) + c,
   the additions of stage 05's bincount over the postings joined in query order (`ranks.summed`),
   so the same float64 bits.  `touched` marks which blocks of 64 chunks got a posting;
2. the chunks that scored, in corpus order: the touched blocks read in order (a scan of every
   chunk when the query is common, as NumPy's `nonzero` is; a few blocks when it is rare);
3. with section context (pipekit/retrieve/sections.py), term by term in query order, each
   scored chunk adds w · qtf · bm25(term, its section) (0.0 where the section lacks the term,
   as `SectionContext.parts` adds it), then every score is divided by 1 + w:
   `SectionContext.rescore`'s operations in its order;
4. the k best by score, ties to the earlier chunk (`warm.best`'s order): each scored chunk
   that beats the k-th so far is placed among them by insertion; a k near the number scored
   sorts them all (a stable sort of the negated scores, `best`'s own way).

No fastmath: every operation is the IEEE one NumPy makes, in the same order, so a ranking here
is the NumPy path's to the bit (tests/test_compiled.py, hypothesis over random indexes and the
docs questions).  Scratch arrays are a thread's own (`Ranker`), zeroed again as they are read.

Cost, at a Searcher's load: numba's import (0.25-0.45 s) and its first call, which loads numba's
lowering registry (~0.6 s more) and the machine code that `cache=True` keeps beside this file
(`__pycache__`, or numba's user-wide cache directory when that is not writable; `NUMBA_CACHE_DIR`
moves it), or compiles it the first time on a machine (~7-9 s at a load of 5 on this 2-core
machine; bench/README.md, "the ranking in one compiled loop").  A Searcher makes that first
call at load (`Ranker.warm_up`), so that a user's first query is not the slow one.  The one-shot `python -m pipekit search` never imports this module (its cold
start is 0.2 s: pipekit/retrieve/cold.py), nor does stage 05 (its batches are thread-parallel
NumPy over whole query sets).  Memory: each asked term's postings weighed once into one
float64 array beside the postings (8 bytes a posting at most, as the NumPy path's kept weights),
and per thread three arrays over the chunks and one over the sections (~25 bytes a chunk).

Four functions, not one body, and a fifth for the hits: numba compiled the one body to half the
speed, and the insertion loop 8x slower while one variable held either the sort's array or its
own (bench/README.md names what else was tried).
"""
from __future__ import annotations

import threading

import numba
import numpy as np

BLOCK = 64  # chunks a `touched` flag covers
SORT_ALL = 16  # a k of at least 1/16 of the chunks scored sorts them all instead of inserting


@numba.njit(cache=True, nogil=True)
def ranked(k, ids, qtf, indptr, chunk, weight, mix, w, codes, start, sections, scores,
           sums, touched, cols, vals, slot):
    """The k best chunks of a query (terms `ids`, each said `qtf` times) and their scores.

    Postings: term t's chunks are chunk[indptr[t]:indptr[t+1]] (ascending), its BM25 weight in
    each weight[...].  Section context (`mix`, weight `w`): chunk c's section is codes[c], term
    t's sections sections[start[t]:start[t+1]] and its plain BM25 score in each scores[...].
    The rest is scratch: sums (zeros, one a chunk), touched (False, one a BLOCK), cols and vals
    (one a chunk), slot (zeros, one a section); each is left as it was found."""
    bm25_sums(ids, qtf, indptr, chunk, weight, sums, touched)
    m = scored(sums, touched, cols, vals)
    if mix:
        mix_sections(ids, qtf, w, codes, start, sections, scores, m, cols, vals, slot)
    return best_k(k, m, cols, vals)


@numba.njit(cache=True, nogil=True)
def bm25_sums(ids, qtf, indptr, chunk, weight, sums, touched):
    """1. Each posting's weight (times its term's qtf) added to its chunk's sum, term by term in query order."""
    for q in range(len(ids)):
        t, times = ids[q], qtf[q]
        for p in range(indptr[t], indptr[t + 1]):
            c = chunk[p]
            sums[c] += weight[p] * times  # (x · 1.0 is x: a term said once adds its weight as is)
            touched[c // BLOCK] = True


@numba.njit(cache=True, nogil=True)
def scored(sums, touched, cols, vals):
    """2. The chunks that scored, in corpus order, and their sums, in cols[:m] and vals[:m]
    (m returned); the sums and flags wiped for the next query."""
    m = 0
    n = len(sums)
    for b in range(len(touched)):
        if touched[b]:
            touched[b] = False
            for c in range(b * BLOCK, min(b * BLOCK + BLOCK, n)):
                # Every chunk written, the count moved only for one that scored: no branch on the
                # sum (a third of a block scores, in no order a predictor learns).
                cols[m] = c
                vals[m] = sums[c]
                m += sums[c] != 0.0
                sums[c] = 0.0
    return m


@numba.njit(cache=True, nogil=True)
def mix_sections(ids, qtf, w, codes, start, sections, scores, m, cols, vals, slot):
    """3. Section context: each scored chunk (the first m of cols) gets, term by term in query
    order, the term's evidence in its section (w · qtf · its BM25 score there, 0.0 where the
    section lacks it), then its score over 1 + w.

    The scored chunks' sections ascend, so they are numbered 1, 2, ... as they come (`slot`,
    0 for every other section, wiped again after); each term's pairs write its evidence into a
    small table, a row per term and a column per numbered section (column 0 takes the sections
    nothing scored in, unread), and the terms' rows are added to the chunks one term at a time:
    each chunk's additions in query order, as `SectionContext.rescore` makes them, and the
    chunks' additions independent of each other (one chunk's terms added in one loop wait on
    each other: ~3x slower)."""
    terms = len(ids)
    section = np.empty(m, np.int64)  # each scored chunk's section's number
    numbered, last = 0, -1
    for i in range(m):
        s = codes[cols[i]]
        numbered += s != last  # (no branch: sections change at no pattern a predictor learns)
        last = s
        slot[s] = numbered
        section[i] = numbered
    table = np.zeros((terms, numbered + 1))
    for q in range(terms):
        t, times = ids[q], w * qtf[q]  # (w · qtf first, as `SectionContext.parts` multiplies)
        for j in range(start[t], start[t + 1]):
            table[q, slot[sections[j]]] = scores[j] * times
    for q in range(terms):
        for i in range(m):
            vals[i] += table[q, section[i]]
    scale = 1 + w
    for i in range(m):
        vals[i] /= scale
        slot[codes[cols[i]]] = 0


@numba.njit(cache=True, nogil=True)
def best_k(k, m, cols, vals):
    """4. The k best of the first m: score descending, then the earlier chunk (positions ascend
    with the chunks).  Each that beats the k-th so far is placed among them by insertion; a k
    near m sorts them all (a stable sort: ties stay in chunk order)."""
    kept = min(k, m)
    if kept * SORT_ALL >= m:
        return taken(np.argsort(-vals[:m], kind="mergesort")[:kept], cols, vals)
    top = np.empty(kept, np.int64)
    held = 0
    for i in range(m):
        v = vals[i]
        if held == kept and not v > vals[top[kept - 1]]:
            continue  # not better than the k-th: a tie goes to the earlier chunk, held already
        if held < kept:
            j = held
            held += 1
        else:
            j = kept - 1  # the k-th falls out
        while j > 0 and vals[top[j - 1]] < v:  # after every held score >= v
            top[j] = top[j - 1]
            j -= 1
        top[j] = i
    return taken(top, cols, vals)


@numba.njit(cache=True, nogil=True)
def taken(top, cols, vals):
    """The chunks and scores at positions `top`.  (Its own function: with the sort's array and
    the insertion's in one variable, numba compiled the insertion loop 8x slower.)"""
    best = np.empty(len(top), np.int64)
    score = np.empty(len(top), np.float64)
    for i in range(len(top)):
        best[i] = cols[top[i]]
        score[i] = vals[top[i]]
    return best, score


class Ranker:
    """`ranked` over one Searcher's index (stage 05's `Index`, its `context` set or None):
    the postings' weights, weighed once per asked term, and each thread's scratch."""

    def __init__(self, index):
        self.index = index
        indptr = np.ascontiguousarray(index.indptr, dtype=np.int64)
        chunk = np.ascontiguousarray(index.chunk)
        self.weight = np.zeros(len(chunk))  # (pages the OS maps as terms are weighed)
        self.weighed: set[int] = set()
        self.n = len(index.lengths)
        context = index.context
        if context is not None:
            start, sections, scores = context.pairs()
            mix = (True, float(context.weight), np.ascontiguousarray(context.codes, dtype=np.int64),
                   np.ascontiguousarray(start, dtype=np.int64), np.ascontiguousarray(sections, dtype=np.int64),
                   np.ascontiguousarray(scores, dtype=np.float64))
            self.sections = context.n
        else:  # (arrays of the same types, never read: one compiled loop for both)
            none = np.zeros(0, np.int64)
            mix = (False, 0.0, none, none, none, np.zeros(0))
            self.sections = 0
        self.arrays = (indptr, chunk, self.weight, *mix)  # (`ranked`'s arguments after the query's)
        self._scratch = threading.local()

    def __call__(self, ids: list[int], qtf: list[float], k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k best chunks (int64) and their scores for these terms (distinct, in query order) and qtf."""
        weighed = self.weighed
        for t in ids:
            if t not in weighed:  # its weights (pipekit/retrieve/bm25.py, as stage 05 weighs them), once
                lo, hi = self.arrays[0].item(t), self.arrays[0].item(t + 1)
                self.weight[lo:hi] = self.index.weigh.held(t, slice(lo, hi))
                weighed.add(t)  # (after the weights: another thread reads them once it sees t here)
        scratch = getattr(self._scratch, "arrays", None)
        if scratch is None:
            scratch = self._scratch.arrays = (np.zeros(self.n), np.zeros(self.n // BLOCK + 1, np.bool_),
                                              np.empty(self.n, np.int64), np.empty(self.n),
                                              np.zeros(self.sections, np.int64))
        return ranked(k, np.array(ids, np.int64), np.array(qtf, np.float64), *self.arrays, *scratch)

    def warm_up(self) -> None:
        """Compile (or load from numba's cache) the loop for this index's array types, with no terms."""
        self([], [], 1)
