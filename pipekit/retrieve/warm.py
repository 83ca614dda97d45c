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

- its terms word by word: the analyzer's one-text rule takes each ASCII word on its own,
  so a word's term ids, once looked up (`TermIds.few`), are kept for the next query that
  says it (a word's analysis, not a query's answer: nothing a query finds is kept);
- every matching chunk scored by the index's own `scores` (or, without section context,
  `best_candidates` with the same depth stage 05 passes), then the section context mixed in
  by `SectionContext.rescore`, stage 05's own (its term scores made when the Searcher loads);
- only the k best ranked (score descending, then corpus order: the same total order as
  `ranks.rank`, whose first k these are), found by one partition, and no documents named;
- where numba imports (a Searcher's default, `compiled`), those three steps (the sums, the
  context, the k best) are one call of a compiled loop instead (pipekit/retrieve/compiled.py:
  the same operations in the same order, so the same hits and score bits, in about half the
  time); the NumPy steps stay for a ranking made deeper by a collapse, a query without context
  whose postings stage 05 would prune, and a platform without numba;
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
collapsed, several k; and each piece (a query's terms from kept words, `best`)
to what it replaces, on random input.  What is left of a search's time and why the peers
stay ahead: bench/README.md, "One warm query: one section context, and the floor of NumPy calls"
and "One warm query: the one-shot search's section context, and where the floor is"."""
from __future__ import annotations

import re

import numpy as np

from pipekit.retrieve.ranks import BINCOUNT_SHARE, nth_largest, rank, summed
from pipekit.retrieve.repeats import NONE, collapse_answers

EMPTY = (np.zeros(0, np.int64), np.zeros(0, np.float64), [])
# An ASCII query's words: the analyzer's one-text rule (Analyzer._ascii_terms) takes each
# maximal run of ASCII letters and digits on its own (lower-cased or not, stopword or not,
# stemmed), so a query's terms are its words' terms one after another (tests/test_warm.py).
WORD = re.compile(r"[A-Za-z0-9]+")
WORDS_KEPT = 50_000  # words whose term ids are kept (~200 bytes each); past it, forgotten and found again
PARTITION_PAYS = 500  # values per hit up to which `best` partitions them all (nth_largest's blocks past it)
TERMS_KEPT = 20_000  # terms whose postings are kept (views, and their weights: 8 bytes a posting); past it, forgotten


class OneQuery:
    """The short way for one Searcher's index (`index`: stage 05's Index, with its context and
    repeats set as the Searcher set them; `depth`: stage 05's DEPTH)."""

    def __init__(self, index, depth: int, compiled: bool = False):
        self.index = index
        self.depth = depth
        self._words: dict[str, tuple[int, ...]] = {}  # a word -> its known terms' ids (`terms`)
        self._postings: dict[int, tuple] = {}  # a term -> views of its postings and their number (`scores`)
        # compiled: the ranking in one compiled loop (pipekit/retrieve/compiled.py) where numba
        # imports; the NumPy steps below stay for a deep ranking (a collapse) and where it does not.
        self.ranker = ranker(index) if compiled else None
        if index.context is not None and self.ranker is None:
            index.context.keep_common_rows()  # (the section scores now, not at the first query)

    def terms(self, text: str) -> tuple[list[int], list[float]]:
        """Stage 05's `Index.query_terms([text])` ids and weights (as lists): the distinct known
        terms in query order, each weighted by how often the query says it.

        An ASCII query's words are looked up one by one, each word's terms kept (not a query's
        results: the same word in another query is the same terms).  Analysing a query and
        looking its words up in the vocabulary was ~23 µs a docs question; from kept words it
        is ~5, of words never seen ~38 (each analysed on its own)."""
        if not text.isascii():
            return self._counted(t for t in self.index._term_ids.few(self.index.analyzer.analyze(text)) if t >= 0)
        words, kept, ids = WORD.findall(text), self._words, []
        for w in words:
            got = kept.get(w)
            if got is None:  # words not seen yet: analysed one by one, looked up together
                found = [kept.get(w) for w in words]
                new = self._learn({w for w, got in zip(words, found) if got is None})
                ids = [t for w, got in zip(words, found) for t in (got if got is not None else new[w])]
                break
            ids += got
        if len(set(ids)) == len(ids):  # (each term said once: most queries)
            return ids, [1.0] * len(ids)
        return self._counted(ids)

    def _learn(self, words: set[str]) -> dict[str, tuple[int, ...]]:
        """Each word's known terms' ids, kept (all forgotten once WORDS_KEPT are)."""
        words = sorted(words)
        terms = [self.index.analyzer.analyze(w) for w in words]
        ids = iter(self.index._term_ids.few([t for ts in terms for t in ts]))  # (one look-up for all)
        new = {w: tuple(i for i in [next(ids) for _ in ts] if i >= 0) for w, ts in zip(words, terms)}
        if len(self._words) + len(new) > WORDS_KEPT:
            self._words.clear()
        if len(new) <= WORDS_KEPT:
            self._words.update(new)
        return new

    @staticmethod
    def _counted(ids) -> tuple[list[int], list[float]]:
        known: dict[int, int] = {}
        for t in ids:
            known[t] = known.get(t, 0) + 1  # dicts keep first-seen order: query order
        return list(known), [float(n) for n in known.values()]

    def candidates(self, ids: list[int], weights: list[float], depth: int) -> tuple[np.ndarray, np.ndarray]:
        """05_retrieval.candidates: the chunks (as NumPy's index type) and scores ranking starts from."""
        ix = self.index
        if ix.context is None:
            return ix.best_candidates(np.asarray(ids, dtype=np.int64), depth, np.asarray(weights, dtype=np.float64))
        cols, vals = self.scores(ids, weights)
        return cols, ix.context.rescore(ids, weights, cols, vals)

    def scores(self, ids: list[int], weights: list[float]) -> tuple[np.ndarray, np.ndarray]:
        """Stage 05's `Index.scores(ids, weights=weights)`: every chunk the terms touch (as
        NumPy's index type, not the index's int32) and its BM25 sum, the same bits.

        A docs question's postings (~2,700 for 6 terms) rival the chunks in number, so stage 05
        sums them with one bincount (`ranks.summed`, in query order) and keeps the chunks that
        scored; here the same call on the same parts, without what a Searcher's one query pays
        around it: each term's postings' views are kept (two `.item` bounds and two slices a
        term were ~1.7 µs of a question), and the chunks stay int64 (the cast to int32, and
        back for every take at them, ~1.5 µs).  Fewer postings (merged, not counted), one term
        or terms held only as rows: `Index.scores` itself (which way a sum is made changes no
        bit: both add each chunk's impacts in query order)."""
        ix, kept, parts, postings = self.index, self._postings, [], 0
        if len(ids) > 1 and not ix._whole:
            for t, wt in zip(ids, weights):
                got = kept.get(t)
                if got is None:
                    got = self._keep(t)
                parts.append(got[0] if wt == 1.0 else (got[0][0], got[0][1] * wt))
                postings += got[1]
            n = len(ix.lengths)
            if postings * BINCOUNT_SHARE > n:
                dense = summed(n, parts)
                cols = (dense != 0.0).nonzero()[0]  # (over bools: nonzero over floats took 4x as long;
                # 0.0, not 0: a Python int is promoted first, ~0.3 µs)
                return cols, dense.take(cols)
        cols, vals = ix.scores(ids, weights=weights)
        return cols.astype(np.intp), vals

    def _keep(self, t: int) -> tuple:
        """Term t's postings as ((chunks, impacts), their number), kept (all forgotten once TERMS_KEPT
        are): its weights computed once (pipekit/retrieve/bm25.py), not at every query that says it."""
        if len(self._postings) >= TERMS_KEPT:
            self._postings.clear()
        chunks, impacts = self.index._postings_of(t)
        got = self._postings[t] = ((chunks, impacts), len(chunks))
        return got

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
        if self.ranker is not None and (ix.context is not None or self._exhaustive(ids)):
            chunks, scores = self.ranker(ids, weights, k)  # (the same k, scores and order: compiled.py)
            cols = None
        else:
            cols, vals = self.candidates(ids, weights, max(reach, depth))
            top = best(vals, k)  # (cols ascend: their order settles ties)
            chunks, scores = cols[top].astype(np.int64, copy=False), vals[top]
        if repeats is None or repeats.apart(chunks):
            return chunks, scores, [NONE] * len(chunks)
        # Two documents share a title: walk the k as `Repeats.collapse` walks any ranking (a
        # position is decided by those before it alone); if none repeats another, they stand.
        if len(repeats.collapse(chunks, k)[0]) == len(chunks):
            return chunks, scores, [NONE] * len(chunks)

        def deeper(i: int, reach: int) -> tuple:  # stage 05's `one`, for this query
            c, v = self.candidates(ids, weights, max(reach, depth))
            order, docs, doc_scores = rank(c, v, ix.doc_codes, reach, depth)
            return c[order], v[order], docs, doc_scores

        if cols is None:
            cols, vals = self.candidates(ids, weights, max(reach, depth))
        order, docs, doc_scores = rank(cols, vals, ix.doc_codes, reach, depth)
        answers, also = collapse_answers(repeats, [(cols[order], vals[order], docs, doc_scores)], k, reach,
                                         deeper, depth)
        return answers[0][0].astype(np.int64), answers[0][1].astype(np.float64), also[0]

    def _exhaustive(self, ids: list[int]) -> bool:
        """Whether stage 05 scores every chunk these terms touch (no section context): when
        their postings are too few for its pruning (`Index.best_candidates`) to pay.  The
        compiled loop scores exhaustively; above that, the pruned NumPy path stays."""
        indptr = self.index.indptr
        return sum(indptr.item(t + 1) - indptr.item(t) for t in ids) <= self.index.small_query


def best(vals: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k best of `vals` (score descending, then position ascending): the
    first k of `ranks.rank`'s order, without its documents, for scores of chunks in corpus
    order (as stage 05's candidates are: position order is chunk order)."""
    n = len(vals)
    if n <= k:
        pick = np.arange(n)
    else:
        # The k-th best by one partition of them all, up to PARTITION_PAYS values a hit: below
        # that nth_largest's block maxima cost more than they save (2,000 values, k = 10:
        # 8.6 µs against 20.6).  Every value tied with it stays in: corpus order settles ties.
        if n < PARTITION_PAYS * k:
            # (np.partition is this copy and the method behind Python wrappers: ~1 µs more)
            part = vals.copy()
            part.partition(n - k)
            cut = part[n - k]
        else:
            cut = nth_largest(vals, k)
        pick = (vals >= cut).nonzero()[0]  # (the method: np.flatnonzero's wrapper is ~1 µs more)
    # (a stable sort of the scores alone keeps ties in position order: lexsort with the chunks took
    # longer; the method, as np.argsort's wrappers cost ~1 µs: 11.1 -> 9.2 µs with the partition's)
    return pick[(-vals.take(pick)).argsort(kind="stable")[:k]]


def ranker(index):
    """The compiled ranking for `index` (pipekit/retrieve/compiled.py), compiled or loaded from
    numba's cache now, so that no user's query is the first; None where numba does not import
    (a platform without its wheels) or cannot compile here (say, no cache folder it may write:
    a note says so), and the NumPy path answers, the same bits."""
    try:
        from pipekit.retrieve.compiled import Ranker  # (imports numba: ~0.45 s, never on the one-shot path)

        made = Ranker(index)
        made.warm_up()
    except ImportError:
        return None
    except Exception as exc:  # (numba's own errors, whatever their class: the NumPy path is always there)
        index.note(f"the compiled ranking is off ({type(exc).__name__}: {exc}); searching the NumPy way")
        return None
    return made
