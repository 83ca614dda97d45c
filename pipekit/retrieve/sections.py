"""Section context: a chunk is scored with the evidence of the section it sits in.

A chunk answers a question in its own words, but the question is often asked in the
words of the *topic* around it: "start another node script with an ipc channel" asks
for `child_process.fork()`, whose chunks are under "Asynchronous process creation",
where the neighbouring passages say "spawn", "IPC", "child".  BM25 over chunks alone
sees one passage at a time, so a passing mention in an unrelated page can outrank the
right passage of the right topic.  Passage retrieval has long mixed a passage's score
with its surrounding document's (Callan, SIGIR 1994); the unit here is the chunk's
*level-2 section* — the `##` section it belongs to, with everything under it (a page's
text before its first `##` is a section too): on documentation, the topic a reader
skims, neither a single passage nor a whole, many-topic page.

    score(q, c) = (bm25(q, c) + w · bm25(q, S(c))) / (1 + w)

bm25(q, S) is the plain formula over sections as units: a section's term frequencies
are its chunks' added up (as stage 04 counted them: heading and path weights included),
its length theirs added up, N the number of sections, df the sections holding the term,
with the index's k1 and b.  Dividing by 1 + w keeps the scale: a chunk that is its own
section (every BEIR record that fits one chunk) scores exactly as without context, so
when every section is one chunk nothing is computed at all.  Only chunks that contain a
query term are results: context re-weights matches, it never makes a passage without
any of the query's words a result.

On by default (`retrieval.section_context: 0.5` in config.yaml, which has the figures
and the reasons; 0 turns it off).  On 58 questions over the docs of 7 projects
(bench/docs_qa.py; bench/README.md has the table for weights 0.25 to 1 and other
grouping levels) w = 0.5 finds the answering section in the top 3 for 4 more questions
and the right document for 5 more; on the bundled sample, whose questions each ask for
one precise fact, it costs nDCG@10 (0.916 -> 0.909 at the time of writing, README
Exercise 5d): a section that matches broadly lifts the wrong passage.

Cost: the sections are found once per index load (one pass over 03's heading paths),
and every term's section scores once, at the first query (one pass over the postings;
24 bytes a (term, section) pair, kept: twice the postings' memory when sections are mostly
single chunks, about as much again on documentation; a Searcher also keeps the commonest
terms' scores as rows over all sections, at most 16 MB).  A query then
reads its terms' section scores and every matching chunk, so with context it takes the
plain path, not MaxScore's pruned one.  Stage 05, a Searcher's one query, an explanation's
shares and the one-shot `python -m pipekit search` (from the scores in its mapped copy of
the index: `SectionContext.mapped`) all mix the context in through `parts` here.
"""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from pipekit.run.arrays import one_array
from pipekit.run.errors import PipelineError
from pipekit.run.lazy import lazy
from pipekit.chunk.headings import TRAIL_SEPARATOR

# Imported on first use: `python -m pipekit search` mixes the context in from its mapped copy
# (`SectionContext.mapped`, pipekit/retrieve/cold.py) and starts without Arrow (pipekit/run/lazy.py).
pa, pc = lazy("pyarrow"), lazy("pyarrow.compute")

LEVEL = 2  # heading levels that name a section: `#` page title, `##` topic
COMMON_SHARE = 16  # a term in over 1/16 of the sections may get a row over all of them (`keep_common_rows`) ...
COMMON_BYTES = 16 << 20  # ... the most common first, these bytes at most
VIEWS_KEPT = 20_000  # other terms whose pairs' views a Searcher keeps (~350 bytes each); past it, made again


def section_codes(doc_id: pa.Array, heading_path: pa.Array, level: int = LEVEL) -> np.ndarray:
    """Each chunk's section number (0, 1, ... in corpus order): consecutive chunks of one
    document whose heading paths agree on their first `level` entries share a section.
    heading_path keeps empty levels (a page without `#` starts with ""), so the first two
    entries are always the `#` and `##` titles, whatever the page skips."""
    n = len(doc_id)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    top = pc.binary_join(pc.list_slice(pc.fill_null(heading_path, pa.scalar([], heading_path.type)), 0, level),
                         "\x1f")
    keys = pc.binary_join_element_wise(pc.cast(doc_id, pa.string()), pc.fill_null(top, ""), "\x1e")
    new = np.ones(n, dtype=bool)
    if n > 1:
        new[1:] = np.asarray(pc.not_equal(keys.slice(1), keys.slice(0, n - 1)))
    return np.cumsum(new) - 1


class SectionContext:
    """The sections of an index, and per query their BM25 scores (see the module text)."""

    def __init__(self, codes: np.ndarray, index, weight: float):
        self.weight = float(weight)
        self.codes = codes
        self.n = int(codes[-1]) + 1 if len(codes) else 0
        self.length = np.bincount(codes, weights=index.lengths, minlength=self.n)
        self.avgdl = float(self.length.mean()) if self.n else 0.0
        self.k1, self.b = index.stats["k1"], index.stats["b"]
        self.index = index
        self.n_all, self.section_df = self.n, None  # the collection's, when this index is one shard of it
        self._rows = threading.local()  # parts' scratch row, one per thread
        self._pairs = None  # each term's sections and its score in each (`_term_sections`), on first use
        self._evidence = None  # ... and w times the score
        self._common: dict[int, np.ndarray] = {}  # term -> w·score in every section (`keep_common_rows`)
        self._views = None  # a Searcher's: term -> its pairs' views (`keep_common_rows`)
        self._lock = threading.Lock()

    @classmethod
    def mapped(cls, codes: np.ndarray, start: np.ndarray, sections: np.ndarray, scores: np.ndarray,
               weight: float) -> "SectionContext":
        """A context that mixes from section scores made before: `pairs()` of a Searcher's context
        as `python -m pipekit search` maps them from its copy of the index
        (pipekit/retrieve/cold.py), with each chunk's section `codes`. It answers `parts`,
        `rescore` and `term_scores` as the context they were made by does, bit for bit
        (tests/test_cold.py); it has no index, so it neither makes pairs, keeps common rows
        (`keep_common_rows`: a Searcher's) nor shares a collection's statistics. Nothing is
        computed over all pairs here (w times each score is made per query term, the same
        product): a one-shot search reads the pages of its own terms' pairs only. The cold path
        had its own way of mixing (a binary search of each term's sections), a third beside
        stage 05's and the Searcher's (issue 47)."""
        self = cls.__new__(cls)
        self.weight, self.codes = float(weight), codes
        self.n = int(codes[-1]) + 1 if len(codes) else 0
        self.index, self.n_all, self.section_df = None, self.n, None
        self._rows, self._lock, self._common, self._views = threading.local(), threading.Lock(), {}, None
        self._pairs, self._evidence = (start, sections, scores), None
        return self

    def _term_sections(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start, sections, scores): term t's sections are sections[start[t]:start[t+1]],
        ascending, its plain BM25 weight in each scores[...] — all found at once, on first use
        (and `_evidence`, w times each score: see `parts`).

        Per query, grouping a term's postings into sections and scoring them was a fifth of a
        search at 12,000 chunks, the whole of it with context at a third (bench/search_speed.py);
        the same terms are asked again and again.  Each number is the formula's, operation for
        operation as one term's were (elementwise, so the same bits; tests/test_search.py holds
        it to a term-by-term reference).  24 bytes a (term, section) pair: the section as
        NumPy's index type (an int32 index was copied to it by every scatter, ~2 µs a term of
        a query), its score and w times it; fewer pairs than postings (bench/out/links: 624k
        pairs for 925k postings, 15 MB, ~1,240 bytes a chunk, beside the postings' 12 bytes each)."""
        with self._lock:  # stage 05 answers on threads: one builds it, the others wait for it
            if self._pairs is None:
                ix = self.index
                sec = self.codes.astype(np.int32)[ix.chunk]  # postings are in corpus order: sections ascend
                new = np.ones(len(sec), dtype=bool)
                if len(sec) > 1:
                    np.not_equal(sec[1:], sec[:-1], out=new[1:])
                new[ix.indptr[:-1][ix.indptr[:-1] < len(sec)]] = True  # each term's first posting
                at = np.flatnonzero(new)
                start = np.searchsorted(at, ix.indptr)
                ids = sec[at].astype(np.intp)
                # tf: whole numbers, so their sum is exact, in any order, as a float64 sum was.
                tf = np.add.reduceat(ix.tf, at, dtype=np.int64).astype(np.float64) if len(at) else np.zeros(0)
                df = np.diff(start) if self.section_df is None else np.asarray(self.section_df, dtype=np.int64)
                idf = np.log(1 + (self.n_all - df + 0.5) / (df + 0.5))
                norm = self.k1 * (1 - self.b + self.b * self.length / self.avgdl)
                per_pair = np.repeat(idf, np.diff(start))
                scores = per_pair * tf * (self.k1 + 1) / (tf + norm[ids])
                self._evidence = scores * self.weight  # (before _pairs: pairs() reads it unlocked)
                self._pairs = (start, ids, scores)
            return self._pairs

    def facts(self) -> tuple[int, int, np.ndarray]:
        """This index's share of the collection's section statistics: its sections, their
        total length (a whole number: lengths are counts) and each term's section df."""
        ix = self.index
        sec = self.codes.astype(np.int32)[ix.chunk]  # postings are term-major, chunks ascending in a term
        new = np.ones(len(sec), dtype=bool)
        if len(sec) > 1:
            np.not_equal(sec[1:], sec[:-1], out=new[1:])
        new[ix.indptr[:-1][ix.indptr[:-1] < len(sec)]] = True  # each term's first posting
        terms = np.repeat(np.arange(len(ix.df), dtype=np.int32), ix.df)
        return self.n, int(self.length.sum()), np.bincount(terms[new], minlength=len(ix.df))

    def use_collection(self, n: int, total_length: int, section_df: np.ndarray) -> None:
        """Score with the whole collection's sections (every shard's `facts` added up), as one
        index of all of them does: N and avgdl of all sections, each term's df in all of them.
        avgdl as total / n: NumPy's mean of whole numbers is that exact sum over n, to the bit."""
        self.n_all, self.avgdl, self.section_df = n, total_length / n if n else 0.0, section_df
        with self._lock:
            self._pairs, self._common, self._views = None, {}, None  # scored again with these

    def pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start, sections, scores) of every term (`_term_sections`), found on first use."""
        return self._pairs or self._term_sections()

    def term_scores(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        """The sections holding `term` (ascending) and its plain BM25 weight in each."""
        start, sections, scores = self.pairs()
        lo, hi = start[term], start[term + 1]
        return sections[lo:hi], scores[lo:hi]

    def keep_common_rows(self) -> None:
        """Keep, for the terms in over 1/COMMON_SHARE of the sections (the most common first,
        COMMON_BYTES at most), w·score in every section as a row, so that `parts` reads such a
        term's row (said once) where it would scatter and wipe it: ~6 µs of a docs question's
        ~40 (3.2 of its ~6.5 terms; 250 rows, 4.5 MB on the docs folder).  For a Searcher,
        which answers one query at a time for as long as it lives; stage 05 does not keep them.
        The other terms' pairs are kept as views once a query has said them (`_views`: their
        bounds read and the arrays sliced again for every query were ~0.5 µs a term)."""
        start, sections, _ = self.pairs()
        counts = np.diff(start)
        common = np.flatnonzero(counts * COMMON_SHARE > self.n)
        common = common[np.argsort(-counts[common], kind="stable")][:COMMON_BYTES // (8 * max(self.n, 1))]
        rows = {}
        for t in common.tolist():
            lo, hi = start.item(t), start.item(t + 1)
            row = rows[t] = np.zeros(self.n)
            row[sections[lo:hi]] = self._evidence[lo:hi]  # (the values `parts` would scatter)
        self._common, self._views = rows, {}

    def parts(self, term_ids, weights, cols: np.ndarray):
        """Per query term, in query order, w · weight · bm25(term, S(c)) for each chunk c of
        `cols` (0 where its section lacks the term): the section evidence of each term, one
        array at a time (the same array, refilled: use each before asking for the next).

        A term's scores (w · score, made with the pairs, for a term said once; w · weight
        times them for one said more often: the same product, so the same bits) are scattered
        straight into a scratch row over the sections, read at the chunks' sections, and the
        row wiped again (before the part is handed on: the row is clean between parts).  A
        binary search of the chunks' sections in each term's was half a search at 12,000
        chunks; a row per term read in one take of them all and added down in one reduction
        cost more than a take and an add per term (~49 against ~41 µs a docs question,
        bench/README.md, "One query at a time"), the terms' sections concatenated to scatter
        them in one call more still.  The row is one per thread: stage 05 answers batches of
        queries on a thread each, a server on its workers."""
        start, sections, scores = self.pairs()
        evidence, weight = self._evidence, self.weight
        made = evidence is not None  # (a mapped context makes w · score per term: `mapped`)
        ids = term_ids if isinstance(term_ids, list) else np.asarray(term_ids).tolist()
        ws = weights if isinstance(weights, list) else np.asarray(weights, dtype=np.float64).tolist()
        sec = self.codes.take(cols)
        row = getattr(self._rows, "row", None)
        if row is None:
            row = self._rows.row = np.zeros(self.n)
        part, common, views = np.empty(len(cols)), self._common, self._views
        for t, wt in zip(ids, ws):
            kept = common.get(t) if wt == 1.0 else None
            if kept is not None:
                kept.take(sec, out=part, mode="clip")
                yield part
                continue
            got = views.get(t) if views is not None else None
            if got is None:
                lo, hi = start.item(t), start.item(t + 1)
                got = (sections[lo:hi], evidence[lo:hi] if made else None, scores[lo:hi])
                if views is not None:
                    if len(views) >= VIEWS_KEPT:
                        views.clear()
                    views[t] = got
            mine = got[0]
            row[mine] = got[1] if wt == 1.0 and made else got[2] * (weight * wt)
            # (mode="clip": the sections are in range, and NumPy's bounds check took half the time)
            row.take(sec, out=part, mode="clip")
            row[mine] = 0.0
            yield part

    def section_part(self, term_ids, weights, cols: np.ndarray) -> np.ndarray:
        """Per query term (a row each), w · weight · bm25(term, S(c)) for each chunk in `cols`."""
        out = np.empty((len(term_ids), len(cols)))
        for row, part in zip(out, self.parts(term_ids, weights, cols)):
            row[:] = part
        return out

    def rescore(self, term_ids, weights, cols: np.ndarray, vals: np.ndarray) -> np.ndarray:
        """Chunk scores `vals` (of chunks `cols`) with their sections' evidence mixed in: each
        chunk's score plus its query terms' evidence (`parts`) one after another in query
        order, over 1 + w.  Stage 05, a Searcher's one query (pipekit/retrieve/warm.py) and
        an explanation's shares (pipekit/retrieve/results.py) all mix it here."""
        total = None
        for part in self.parts(term_ids, weights, cols):  # term by term: the same sums as ever
            if total is None:
                total = vals + part  # (the first term's sum is the new array: no copy of vals first)
            else:
                total += part
        total = vals.copy() if total is None else total
        total /= 1 + self.weight
        return total


def section_context(weight: float, chunks_03: Path, index) -> SectionContext | None:
    """The context to score with, or None when it changes nothing: weight 0, or every
    section a single chunk (then the mixed score *is* the chunk's own)."""
    from pipekit.run import io  # (Arrow's Parquet reader: the stages' and a Searcher's, never the cold path's)

    if weight <= 0:
        return None
    doc_id = one_array(index.chunks.column("doc_id"))
    if "heading_path" in io.schema(chunks_03).names:  # a file, or a cluster's folder of parts
        paths = one_array(io.read_table(chunks_03, ["heading_path"]).column("heading_path"))
    else:  # a hand-made 03 file with SPEC's `heading` only: its titles, empty levels already dropped
        # (from the file, as heading_path: stage 05 reads 04_chunks' copy only after its queries)
        heading = pc.fill_null(one_array(io.read_table(chunks_03, ["heading"]).column("heading")), "")
        paths = pc.if_else(pc.equal(heading, ""), pa.scalar([], pa.list_(pa.string())),
                           pc.split_pattern(heading, TRAIL_SEPARATOR))
    if len(paths) != len(doc_id):
        raise PipelineError(f"{chunks_03} has {len(paths):,} chunks, the index {len(doc_id):,}: "
                            "rerun `python 04_indexing.py`")
    codes = section_codes(doc_id, paths)
    if len(codes) == 0 or codes[-1] + 1 == len(codes):
        return None
    return SectionContext(codes, index, weight)
