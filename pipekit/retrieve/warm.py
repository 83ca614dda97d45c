"""One question through a loaded `Searcher`, the short way (issue 47): its hits' chunks,
scores and collapsed repeats, exactly as stage 05's `search` ranks them, in far fewer calls.

Stage 05's `search` is written for a list of queries: batches, threads, a document run for
the metrics, repeats collapsed over a ranking `depth + k` deep.  A Searcher asks one
question at a time and reads none of that, yet paid for it: at 6,761 chunks (the docs
folder of bench/docs_qa.py, a query matching ~2,000 of them; k = 10, load 4) one search was ~0.65 ms, of
which ranking 110 chunks and naming the 100 best documents ~60 µs, collapsing repeats
~55 µs, query analysis ~55 µs (bench/README.md, "One query at a time").  Here, for one
query with no filter, feedback, vectors or explanation (the Searcher takes stage 05's path
for those):

- its terms by the analyzer's one-text rule, looked up by `TermIds.few` (plain Python over
  the sorted vocabulary's prefix keys), with no Arrow array made and read back;
- every matching chunk scored by the index's own `scores` (or, without section context,
  `best_candidates` with the same depth stage 05 passes), then the section context mixed in
  by `SectionContext.rescore`: the same functions, so the same candidates and bits;
- only the k best ranked (score descending, then corpus order: the same total order as
  `ranks.rank`, whose first k these are), and no documents named;
- repeats: a repeat is a chunk of another document with the same own section title as a
  hit kept before it (pipekit/retrieve/repeats.py), so when no title of the k best is
  shared by two documents nothing can collapse, and the answer is those k with no repeats
  named: no word sets, no texts (50 of the 58 docs questions at k = 10).  When one is, the
  k are walked as `Repeats.collapse` walks any ranking (each place is decided by the places
  before it alone, so the k best decide the first k); only when one of them does repeat
  another (none of the 58 at k = 10, 8 at k = 50) is the ranking made `depth + k` deep and
  walked by `collapse_answers`, going deeper as stage 05 does, on the same numbers.

What it does not do: several queries at once (stage 05's `search`, batched), filters
(`--in`/`--format`), RM3 feedback, dense fusion, explanations.  tests/test_warm.py holds
every Passage, score bits included, to stage 05's path on the docs questions, the sample
and a folder of repeated passages, with section context on and off, repeats kept and
collapsed, several k.
"""
from __future__ import annotations

import numpy as np

from pipekit.retrieve.ranks import nth_largest, rank
from pipekit.retrieve.repeats import NONE, collapse_answers

EMPTY = (np.zeros(0, np.int64), np.zeros(0, np.float64), [])


class OneQuery:
    """The short way for one Searcher's index (`index`: stage 05's Index, with its context and
    repeats set as the Searcher set them; `depth`: stage 05's DEPTH)."""

    def __init__(self, index, depth: int):
        self.index = index
        self.depth = depth

    def terms(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """Stage 05's `Index.query_terms([text])` ids and weights: the distinct known terms in
        query order, each weighted by how often the query says it."""
        known: dict[int, int] = {}
        for t in self.index._term_ids.few(self.index.analyzer.analyze(text)):  # (`tokens`' rule, as a list)
            if t >= 0:
                known[t] = known.get(t, 0) + 1
        return (np.fromiter(known, dtype=np.int64, count=len(known)),
                np.fromiter(known.values(), dtype=np.float64, count=len(known)))

    def candidates(self, ids: np.ndarray, weights: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """05_retrieval.candidates: the chunks and scores ranking starts from."""
        ix = self.index
        if ix.context is None:
            return ix.best_candidates(ids, depth, weights)
        cols, vals = ix.scores(ids, weights=weights)
        return cols, ix.context.rescore(ids, weights, cols, vals)

    def hits(self, text: str, k: int) -> tuple[np.ndarray, np.ndarray, list]:
        """The k best chunks (int64 rows), their scores and, per hit, its collapsed repeats
        as (rows, scores): what stage 05's `search(index, [(…, text)], k, max(DEPTH, k),
        summary=False)` gives for one query."""
        ix, depth = self.index, max(self.depth, k)
        ids, weights = self.terms(text)
        if len(ids) == 0:
            return EMPTY
        repeats = ix.repeats
        reach = depth + k if repeats is not None else k  # stage 05's: the deeper ranking a collapse may use
        cols, vals = self.candidates(ids, weights, max(reach, depth))
        top = best(cols, vals, k)
        chunks = cols[top].astype(np.int64)
        if repeats is None or _apart(repeats.titles(chunks.tolist()), ix.doc_codes.take(chunks).tolist()):
            return chunks, vals[top], [NONE] * len(chunks)
        # Two documents share a title: walk the k as `Repeats.collapse` walks any ranking (a
        # position is decided by those before it alone); if none repeats another, they stand.
        if len(repeats.collapse(chunks, k)[0]) == len(chunks):
            return chunks, vals[top], [NONE] * len(chunks)

        def deeper(i: int, reach: int) -> tuple:  # stage 05's `one`, for this query
            c, v = self.candidates(ids, weights, max(reach, depth))
            order, docs, doc_scores = rank(c, v, ix.doc_codes, reach, depth)
            return c[order], v[order], docs, doc_scores

        order, docs, doc_scores = rank(cols, vals, ix.doc_codes, reach, depth)
        answers, also = collapse_answers(repeats, [(cols[order], vals[order], docs, doc_scores)], k, reach,
                                         deeper, depth)
        return answers[0][0].astype(np.int64), answers[0][1].astype(np.float64), also[0]


def best(cols: np.ndarray, vals: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k best of `vals` (score descending, then chunk ascending): the first
    k of `ranks.rank`'s order, without its documents."""
    pick = np.arange(len(vals)) if len(vals) <= k else np.flatnonzero(vals >= nth_largest(vals, k))
    return pick[np.lexsort((cols[pick], -vals[pick]))][:k]


def _apart(titles: list[str], docs: list[int]) -> bool:
    """Whether no title is shared by chunks of two documents (then none repeats another)."""
    return len(set(titles)) == len(set(zip(titles, docs)))
