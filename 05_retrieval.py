"""Stage 05 — retrieval: score every query against the index, keep the best chunks.

Reads  the stage-04 index (`04_terms`, `04_postings`, `04_chunks`), the chunk texts from
       `03_chunks.parquet`, the queries (`retrieval.queries`) and, if given, the
       judgements (`retrieval.qrels`).
Writes `05_results.parquet` (query_id, query, rank, score, chunk_id, doc_id, heading,
       page_start, page_end, page_label_start, page_label_end, text, link — where the passage
       opens, pipekit/retrieve/links.py; also — the same passage elsewhere; with
       `retrieval.explain` also `explain`, the score term by term), `05_results.trec`
       (the document-level run in TREC format) and, with qrels of documents in the index,
       `05_metrics.parquet` (nDCG@10, AP@100, R@100 per query and `all`), also appended to the run history `05_history.parquet` (pipekit/tools/history.py).

The idea: stage 04 counted, this stage scores: a query's score for a chunk is a sum of one number per
distinct query term, its BM25 weight ("impact"; from tf, idf and the chunk's length as it is summed,
pipekit/retrieve/bm25.py) times qtf, how often the query says it (SPEC; `QueryTerms`: ids and weights).
`Index.scores` is that sum done plainly: every posting of every term.  `Index.best_candidates`
gives the same top results while reading far fewer postings (MaxScore):

1. score a few promising chunks exactly; the depth-th best document among them is a
   floor no result can be under;
2. the lightest terms, whose largest impacts add up to less than the floor, cannot lift
   a chunk there on their own: only the other ("heavy") terms' postings are read;
3. the light terms are looked up for the chunks still in the race, heaviest first,
   dropping those that can no longer reach the floor (which rises as it goes).

Zipf's law is why it pays: the words in nearly every chunk carry the least weight, so
they end up light and are never read in full.  A query weight (qtf) only scales a term's
impacts and its bound, so the pruning holds for any positive weights.  The k best chunks and
the 100 best documents are then one sort of what is left; ties go to the chunk earlier in the
corpus.  Once built on a machine, one compiled call does all that for a query (the same
chunks, the same score bits: pipekit/retrieve/pruned.py), where NumPy made ~30.  Queries are
answered in batches on a thread per core (NumPy and the compiled loop let the others run);
each answer depends on its query alone, so the results never depend on threads.  On a
cluster (`engine.kind: dask`) each worker holds a part of the index (stage 04's shards by
document) and answers every batch on it (`shard_partition`); the client merges the parts'
answers and writes (pipekit/retrieve/shards.py).

Metrics are on documents: a document scores its best chunk, as a reader judges "did I find
the right document".  They are computed by ir-measures (trec_eval's conventions) over the
documents of the best 100 chunks (top_k's, when more): exactly what 05_results.parquet gives
at top_k >= 100 (issue 37: the 100 best documents reached past the file's last row), and a
smaller top_k never changes them.  Turning hits into rows, metrics and the terminal preview
is plumbing: pipekit/retrieve/results.py.

With `retrieval.section_context` above 0 (0.5 in config.yaml), a chunk's score is mixed with
its level-2 section's, BM25 over sections as units (pipekit/retrieve/sections.py): a question is
often asked in the words of the topic around the passage that answers it.  A corpus whose
sections are single chunks (BEIR records) scores exactly as without it.

With `retrieval.feedback: rm3`, each query is answered twice (`Index.expand`): its best
few chunks give a relevance model, whose heaviest terms join the query with small weights
(pseudo-relevance feedback, RM3), and the expanded query is scored like any other.

With `retrieval.repeats: collapse` (the default), a passage of another document under the same
title with nearly the same words as a higher hit (Node's all.html beside its module pages, an
.rst source beside its HTML) is named on that hit (`also`) and its place filled from further
down (pipekit/retrieve/repeats.py); the metrics still count every copy as its document.

With vectors in the index (`indexing.dense_model`) and `retrieval.dense_weight` w > 0, the
BM25 candidates are fused with the query's cosine to every chunk (pipekit/retrieve/fusion.py):
(1 − w)·BM25 + w·cosine, each divided by the best of its own top 100, so a passage that
answers in other words than the question's can still rank (`candidates`, then `fuse`).

Public pieces (other tools reuse them): `Index(ctx, queries=None)` (given the queries, only
their terms' postings: pipekit/retrieve/asked.py), `Index.query_terms(texts)` -> [QueryTerms],
`Index.expand(q, Feedback)`, `Index.best_candidates(ids, depth, weights)`, `Index.scores(ids,
at_least, weights)`, `Index.explain(q, chunk)`, `rank(...)` (pipekit/retrieve/ranks.py), and
`search(index, queries, top_k, depth, feedback=...)` which does all of it for a list.

What it deliberately does not do: re-rank, expand queries unless asked, or read
config.yaml's analyzer settings — queries are analysed exactly as the index recorded.
"""
from __future__ import annotations

import pipekit  # first: outside the virtualenv it says how to activate it, not a traceback
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from pipekit.run import io
from pipekit.index.analyzer import Analyzer
from pipekit.index.layout import ShardedPostings
from pipekit.cli import stage_main
from pipekit.run.errors import PipelineError
from pipekit.tools.history import metric_line, record_run
from pipekit.run.io import cores
from pipekit.run.malloc import keep_freed_memory, release_freed_memory
from pipekit.retrieve.queries import (Feedback, QueryTerms, TermIds, chunk_major, feedback_noise, feedback_of, load_qrels,
                                      load_queries, trec_run)
from pipekit.retrieve.shards import answer as shard_answer, on_shards
from pipekit.retrieve.results import (METRICS, added_terms, also_column, collect_answers, evaluate,
                             explain_rows, judged_in_index, print_results, results_table, termless_queries)
from pipekit.retrieve.asked import AskedPostings, read_chunks, rows_only as only_rows
from pipekit.retrieve.cited import CitedRows
from pipekit.retrieve import bm25
from pipekit.retrieve.fusion import dense_for
from pipekit.retrieve.filters import filtered_candidates
from pipekit.retrieve.links import hit_links, with_link
from pipekit.retrieve.ranks import (BINCOUNT_SHARE, KeptSums, TopPostings, common_term_rows, document_codes, masked,
                                    nth_best_document, rank, row_lookup, row_postings, sorted_unique)
from pipekit.retrieve.repeats import collapse_answers, repeats_for
from pipekit.retrieve.pruned import BitStack, RowStack, ranker
from pipekit.run.arrays import large_zeros, one_array, run_starts
from pipekit.retrieve.sections import section_context
from pipekit.run.stages import get_stage

DEPTH = 100  # documents evaluated per query, whatever top_k is
UNREAD_04 = ("chunk", "content_hash")  # 04_chunks columns the Index does not hold, and those stage 05 reads of its hits'
LATER_04 = ("chunk_id", "heading", "page_start", "page_end", "page_label_start", "page_label_end")  # rows alone (cited.py)
DENSE_SHARE = 16  # a term in over 1/16 of the chunks gets an array over all chunks for lookups ...
DENSE_TERMS = 96  # ... for at most this many terms (a 1-2 byte code a chunk each: ranks.common_term_rows)
ROWS_ONLY_SHARE = 4  # ... and one in over 1/4 is held only so, never as postings too (-96 MB at 1M passages)
SMALL_QUERY = 4096  # a query with fewer postings is scored in full: pruning would not pay
SEED_SAMPLE = 16384  # postings of one term looked at for the floor, at most
CUT_PAYS = 8  # cut lists are looked up again: worth it only when they keep 1/8 or less
SEARCH_SWAP = 2  # searching the chunks for the postings pays once they are 2x as many
SAFE_UP, SAFE_DOWN = 1 + 1e-9, 1 - 1e-9  # bounds nudged so float rounding never prunes a result
QUERY_BATCH = 16  # queries per progress-bar step and per task of a thread (small: threads end together)
THREADS_PAY = 500_000  # postings a query's terms hold, on average, before a second thread pays (search)


class Index:
    """The stage-04 tables loaded for scoring, each term's postings as one slice: `chunk[indptr[t]:
    indptr[t+1]]` are the chunks term t occurs in (in corpus order), `tf[...]` its count in each (`weigh`)."""

    asked = None  # with `queries`: the postings held are only their terms' (pipekit/retrieve/asked.py)
    weigh = None  # the held postings and their weights (pipekit/retrieve/bm25.py)
    _whole: dict = {}  # term -> coded row, for the terms held only as rows (`rows_only`)
    _bits = False  # rows_only with the queries known (no rm3): common terms looked up by bits (`_dense_rows`)

    def __init__(self, ctx, postings: bool = True, queries: list[str] | None = None, rows_only: bool = False, later=()):
        # postings=False: no scoring (a client whose workers score: shards.py); rows_only, later: ROWS_ONLY_SHARE, LATER_04.
        t0 = time.perf_counter()
        chunks_path = ctx.require("04_chunks.parquet", get_stage(4))
        metas = [io.read_meta(ctx.require(n, get_stage(4))) for n in get_stage(4).outputs]
        if len({m["fingerprint"] for m in metas}) != 1:
            raise PipelineError("the 04_* files come from different runs: rerun `python 04_indexing.py`")
        self.meta, self.stats = metas[0], metas[0]["corpus"]
        self.analyzer = Analyzer.from_settings(self.stats["analyzer"])
        terms = io.read_table(ctx.path("04_terms.parquet"), ["term", "df", "idf"])
        self.terms = terms.column("term").combine_chunks()
        self._term_ids = TermIds(self.terms)  # a word's term id, by binary search (pipekit/retrieve/queries.py)
        self.df, self.idf = terms.column("df").to_numpy(), terms.column("idf").to_numpy()
        # Postings are sorted by term, so a term's postings start where the previous df ends.
        self.indptr = np.zeros(len(self.df) + 1, dtype=np.int64)
        np.cumsum(self.df, out=self.indptr[1:])
        self._postings_path = ctx.path("04_postings.parquet")
        # Postings cut into shards by document are merged here term by term (pipekit/index/layout.py).
        self._shards = ShardedPostings(self._postings_path, self.stats.get("shards"), len(self.df))
        if postings and queries is not None and (self._shards.shards is None or len(self._shards.shards) == 1):
            self._scored = (list(queries), self.query_terms(queries))  # analysed once (200k stems: 0.63 s)
            ids = [q.ids for q in self._scored[1]]
            apart = only_rows(self.df, ids, self.stats["N"], DENSE_SHARE, DENSE_TERMS, ROWS_ONLY_SHARE) if rows_only else ()
            self.asked = AskedPostings(self.df, ids, self._shards.first, apart)
            self.indptr = self.asked.indptr  # every other term's run is empty
        self._tf, self._forward, self._noise, self._bits = None, None, None, rows_only and self.asked is not None
        # Not the columns nothing reads (at 1M passages the hashes alone were 19 MB of 100).
        self.chunks, self.read_later = read_chunks(self, chunks_path, UNREAD_04, later)  # (read_later(): the rest)
        if postings:
            self.__dict__.update(self._derived(self.chunks, large_zeros))  # (4 KiB pages when large: a huge one can stall)
            self._dense = dict(zip(self.dense_ids.tolist(), self.dense))
            self._seeds = TopPostings(self._postings_of)  # each term's floor seeds, found once
        self.small_query = SMALL_QUERY  # tests lower it, so their small corpora take the pruned path
        self.context = None  # the chunks' sections, when retrieval.section_context is on (pipekit/retrieve/sections.py)
        self.dense = None  # the chunks' vectors, when the index has them and retrieval.dense_weight > 0 (pipekit/retrieve/fusion.py)
        self.repeats = None  # with retrieval.repeats: collapse, what finds them (pipekit/retrieve/repeats.py)
        self.note, self.load_seconds = ctx.note, time.perf_counter() - t0
        held = (f" of the {self.asked.terms:,} asked" if self.asked is not None else "") + (
            f", {len(self._whole)} terms as rows only" if self._whole else "")
        ctx.note(f"index loaded in {self.load_seconds:.2f} s ({int(self.indptr[-1]):,} postings{held}, "
                 f"{len(self.df):,} terms, {self.stats['N']:,} chunks)")

    def _derived(self, chunks: pa.Table, zeros) -> dict:
        """What scoring needs beyond the terms, by name: built here, or for one part of the index
        on a worker (pipekit/retrieve/shards.py).  Documents become small integers (first-appearance
        order): a document's best chunk is then a group-by on ints, not on a million strings."""
        doc_names, doc_codes = document_codes(one_array(chunks.column("doc_id")))
        self.lengths = chunks.column("length").to_numpy()
        largest_tf = io.column_max(self._postings_path, "tf")  # held as 2 bytes a posting where an impact was 8:
        self.weigh = bm25.Weights(self.idf, self.stats, self.lengths, largest_tf)  # weighed as they are used
        self.row_stack = RowStack(len(self.lengths), min(DENSE_TERMS, len(self.df)), zeros)  # (rows as the compiled loop reads them)
        self.chunk, tf, self._whole = (  # (asked: each row-only term coded as its rows are read)
            self.asked.postings(self._postings_path, len(self.lengths), cores(), zeros, self.weigh.tf_dtype,
                                self.weigh, self.row_stack.zeros) if self.asked is not None else
            (self._read_column("chunk", np.int32, zeros), self._read_column("tf", self.weigh.tf_dtype, zeros), {}))
        self.weigh.hold(self.chunk, tf)  # (tf and length as one code, pipekit/retrieve/bm25.py)
        max_impact = self.weigh.largest(self.indptr, self._whole)  # the most a term adds
        dense_ids, dense = self._dense_rows(self.row_stack.zeros)
        return {"lengths": self.lengths, "doc_names": doc_names, "doc_codes": doc_codes, "chunk": self.chunk, "_tf": None,
                "weigh": self.weigh, "max_impact": max_impact, "dense_ids": dense_ids, "dense": dense,
                "_sums": KeptSums(len(self.lengths))}  # (`scores`' sums over every chunk, a thread's own)

    @property
    def tf(self) -> np.ndarray:
        if self._tf is None:  # (the held postings' counts; an Index loaded without them reads them)
            self._tf = self.weigh.counts() if self.weigh is not None else self._read_column("tf", np.int32)
        return self._tf

    def _read_column(self, name: str, dtype, zeros=np.empty) -> np.ndarray:
        if self.asked is not None:  # (a single table: only an index of several shards is read whole)
            return self.asked.read(self._postings_path, name, dtype, cores(), zeros)
        n = int(self.indptr[-1])
        return self._shards.read(name, dtype, n, zeros((n,), dtype), cores())

    def drop_postings(self) -> None:
        """The postings and rows forgotten once the queries are answered (~130 MB at 1M passages)."""
        self.chunk = self._tf = self._forward = self.weigh = self._sums = self.row_stack = self.bit_stack = None
        self._dense, self._seeds, self._whole = {}, None, {}
        release_freed_memory()

    def query_terms(self, texts: list[str]) -> list["QueryTerms"]:
        """Each query as scored: its distinct analysed terms the index knows (in query order), each
        weighted by qtf, how many times the query says it (SPEC; Lucene, Anserini and bm25s count
        a repeated term each time: "flow ... flow" asks for flow twice as hard)."""
        if self.asked is not None and texts == self._scored[0]:
            return list(self._scored[1])  # the queries it was loaded for
        flat, parent = self.analyzer.tokens(texts)
        ids = self._term_ids(flat) if self.asked is None else self.asked.check(self._term_ids(flat))
        qtf: list[dict[str, int]] = [{} for _ in texts]
        known: list[dict[int, int]] = [{} for _ in texts]
        for q, w, t in zip(parent.tolist(), flat.to_pylist(), ids.tolist()):  # a few terms per query: cheap
            qtf[q][w] = qtf[q].get(w, 0) + 1  # dicts keep first-seen order: query order
            if t >= 0:
                known[q][t] = known[q].get(t, 0) + 1
        return [QueryTerms(np.fromiter(k, dtype=np.int64, count=len(k)),
                           np.fromiter(k.values(), dtype=np.float64, count=len(k)), f)
                for k, f in zip(known, qtf)]

    def best_candidates(self, term_ids: np.ndarray, depth: int,
                        weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """A set of (chunk, score) pairs, chunks in corpus order, that holds the query's
        exact top `depth` documents and so its top k <= depth chunks — found while reading
        few of the postings of its common terms (MaxScore, the module docstring's three
        steps: `_floor`; the light terms, whose bounds add up to less than the floor, apart
        from the heavy ones, read in full by `_reaching`; the light terms looked up for the
        chunks still in the race).  The score is Σ weight·impact over the terms (weights:
        qtf, or the expanded query's; None: all 1)."""
        m = len(term_ids)
        w = np.ones(m) if weights is None else np.asarray(weights, dtype=np.float64)
        df = self.df[term_ids].tolist()
        if sum(df) <= self.small_query:  # too few postings for pruning to pay
            return self.scores(term_ids, weights=w)
        floor = self._floor(term_ids, w, df, depth)
        if floor <= 0:  # fewer than `depth` documents contain a query term: score them all
            return self.scores(term_ids, weights=w)
        # A term's bound is its largest impact times its weight in the query.
        weight, light, bound = (self.max_impact[term_ids] * w).tolist(), [], 0.0
        for i in sorted(range(m), key=weight.__getitem__):
            if (bound + weight[i]) * SAFE_UP >= floor:
                break
            light.append(i)
            bound += weight[i]
        heavy = [i for i in range(m) if i not in light]  # in query order
        need = floor - bound * SAFE_UP  # what the heavy terms alone must give a chunk
        cand, part = self._reaching(term_ids[heavy], w[heavy], need)
        ids, wl = term_ids.tolist(), w.tolist()
        for i in reversed(light):  # heaviest light term first: it narrows the most
            # (Raising the floor before each lookup stopped paying once a common term's lookup
            # became a plain index into its row: 0.85x the time without it. bench/README.md.)
            bound -= weight[i]
            part = part + self._lookup(ids[i], cand, wl[i])
            keep = part >= floor - max(bound, 0.0) * SAFE_UP
            cand, part = masked(keep, cand, part)
        # `part` summed heavy terms first (which are heavy depends on the rest of the index): summed
        # again in query order, as `scores` does, a chunk scores the same bits on every path and
        # shard (pipekit/retrieve/shards.py); a tenth of this method's time.
        return cand, self._looked_up(term_ids, w, cand) if light else part

    def _floor(self, term_ids: np.ndarray, w: np.ndarray, df: list[int], depth: int) -> float:
        """A lower bound of the query's depth-th best document score (0 if it has fewer).

        Any chunks scored exactly will do, so take the likeliest: each of the rarest terms'
        2·depth highest-impact postings, until they cover 2·depth chunks.  A very long list
        is sampled (every n-th posting) first: a bound from a sample is still a bound.
        A term's seeds depend on the term alone: found once, kept (ranks.TopPostings).
        """
        by_df = sorted(range(len(df)), key=df.__getitem__)
        want = 2 * depth
        while True:
            parts, reach = [], 0
            for i in by_df:
                ch = self._seeds(int(term_ids[i]), want, SEED_SAMPLE)
                parts.append(ch)
                reach += len(ch)
                if reach >= want:
                    break
            cand = parts[0] if len(parts) == 1 else sorted_unique(np.concatenate(parts))
            floor = nth_best_document(cand, self._looked_up(term_ids, w, cand), self.doc_codes, depth)
            if floor > 0 or reach < want or want > sum(df):
                break
            want *= 8  # documents of many chunks: 2·depth chunks were fewer than depth documents
        return floor * SAFE_DOWN

    def _reaching(self, term_ids: np.ndarray, w: np.ndarray, need: float) -> tuple[np.ndarray, np.ndarray]:
        """The chunks (in corpus order) whose score on these terms alone is >= need, with
        that score — reading of each long list only the postings that could get there.

        Take the terms heaviest first.  A chunk whose first term in that order is t can
        add at most the later terms' largest impacts to t's own, so t must give it at
        least `need - later`: a cut that skips most of a common term's postings.
        """
        if len(term_ids) == 1:
            return self.scores(term_ids, need, weights=w)
        weight = (self.max_impact[term_ids] * w).tolist()
        later = sum(weight)
        parts, kept, total = [], 0, int(self.df[term_ids].sum())
        for i in sorted(range(len(weight)), key=weight.__getitem__, reverse=True):
            later -= weight[i]
            # On the unweighted impacts (no pass to multiply the list), a hair lower: the
            # exact scores below decide, the cut only has to keep every chunk that could pass.
            cut = (need - later * SAFE_UP) / w[i] * SAFE_DOWN
            ch, imp = self._postings_of(term_ids[i], cut)  # (a row-only term's: cut on its codes already)
            parts.append(ch[imp >= cut] if cut > 0 else ch)
            kept += len(parts[-1])
            if kept * CUT_PAYS > total:  # the cuts keep too much (and will only keep more): add the lists whole
                return self.scores(term_ids, need, weights=w)
        cand = sorted_unique(np.concatenate(parts))
        score = self._looked_up(term_ids, w, cand)
        return masked(score >= need, cand, score)

    def _looked_up(self, term_ids, w, cand: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
        """`start` (or 0) plus each term's weighted impact in the sorted chunks `cand`, added
        in the order given (query order, as everywhere, so equal scores stay equal)."""
        score = np.zeros(len(cand)) if start is None else start.copy()
        for t, wt in zip(np.asarray(term_ids).tolist(), np.asarray(w).tolist()):
            score += self._lookup(t, cand, wt)  # in place: the same sums, no new array each time
        return score

    def _postings_of(self, t, at_least: float = 0.0, sample: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Term t's chunks and weights (with `sample`: every n-th posting of a list longer than it, weighed alone)."""
        row = self._whole.get(int(t)) if self._whole else None
        if row is not None:  # held only as its row: the same postings decoded (those >= at_least, if > 0)
            ch, imp = row_postings(row, self.chunk.dtype, at_least)
            step = len(ch) // sample if 0 < sample < len(ch) else 1
            return ch[::step], imp[::step]
        lo, hi = self.indptr.item(t), self.indptr.item(t + 1)
        step = (hi - lo) // sample if 0 < sample < hi - lo else 1
        return self.chunk[lo:hi:step], self.weigh.held(t, slice(lo, hi, step))

    def _dense_rows(self, zeros=np.zeros) -> tuple[np.ndarray, list]:
        """The ids of the terms in over 1/DENSE_SHARE of the chunks, and their rows (ranks.common_term_rows); where
        the compiled loop will answer (`_bits`), those whose postings are held get bits instead (pruned.BitStack)."""
        held, n = np.diff(self.indptr), len(self.lengths)  # df, or 0 for a term not asked or held only as a row (`_whole`)
        self.bit_stack = BitStack.instead_of_rows(self, held, DENSE_SHARE, DENSE_TERMS) if self._bits else None
        most = len(self._whole) if self.bit_stack is not None else DENSE_TERMS  # (bits: the rows only's alone, coded already)
        return common_term_rows(held, n, self._postings_of, DENSE_SHARE, most, zeros, self._whole)

    def _lookup(self, t, cand: np.ndarray, w: float = 1.0) -> np.ndarray:
        """Term t's impact times w in each of the sorted chunks `cand` (0 where it is absent)."""
        dense = self._dense.get(t)  # (a term held only as a row has one: only held postings below)
        out = row_lookup(dense, cand) if dense is not None else bm25.looked_up(
            self.weigh, t, self.indptr.item(t), self.indptr.item(t + 1), cand, SEARCH_SWAP)
        return out if w == 1.0 else out * w  # qtf 1, the usual case, costs no pass

    def scores(self, term_ids: np.ndarray, at_least: float = 0.0,
               weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Every chunk these terms touch, in corpus order, with its exact score on them
        (Σ weight·impact; weights None: all 1) — only those scoring >= at_least, if that
        is > 0.  Time in proportion to the postings.

        Term by term in the query's order, so each chunk's score is the same sum in the
        same order as the plain formula (equal scores stay equal, ties keep corpus order).
        """
        if len(term_ids) == 0:
            return np.zeros(0, dtype=self.chunk.dtype), np.zeros(0, dtype=np.float64)
        w = ([1.0] * len(term_ids) if weights is None else weights if isinstance(weights, list)
             else np.asarray(weights, dtype=np.float64).tolist())
        parts, postings, whole = [], 0, self._whole  # each held term as (t, weight), each row-only one as (None, row)
        for t, wt in zip(term_ids, w):
            if whole and t in whole:  # held only as its coded row: summed over every chunk
                parts.append((None, (whole[t][0], whole[t][1] if wt == 1.0 else whole[t][1] * wt)))
                continue
            parts.append((t, wt))
            postings += self.indptr.item(t + 1) - self.indptr.item(t)
        lead = next((i for i, p in enumerate(parts) if p[0] is None), len(parts))
        if len(parts) == 1:  # one term: its postings are the answer as they stand
            cols, vals = (bm25.gathered(self.weigh, self.indptr, parts, self.chunk.dtype) if lead else
                          row_postings(parts[0][1], self.chunk.dtype))
        elif postings * BINCOUNT_SHARE > len(self.lengths) or lead < len(parts):
            # Postings rivalling the corpus in number: added in query order into an array over all chunks, a
            # thread's own, kept across queries (ranks.KeptSums: no array of the corpus's size made per query).
            cols, vals = self._sums([p if p[0] is None else bm25.gathered(self.weigh, self.indptr, [p], self.chunk.dtype)
                                     for p in parts], at_least)
            return cols.astype(self.chunk.dtype), vals
        else:
            # Fewer: merge the sorted lists (a stable sort keeps a chunk's postings in query order) and
            # add up each chunk's run: bincount over run numbers adds left to right, as promised
            # above (np.add.reduceat adds a run pairwise, and took twice as long).
            ch, imp = bm25.gathered(self.weigh, self.indptr, parts, self.chunk.dtype)
            order = np.argsort(ch, kind="stable")
            ch, imp = ch.take(order), imp.take(order)
            first = run_starts(ch)
            cols, vals = ch[first], np.bincount(np.cumsum(first) - 1, weights=imp)
        if at_least > 0:
            cols, vals = masked(vals >= at_least, cols, vals)
        return cols, vals

    @property
    def forward(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The postings chunk by chunk (indptr, term ids, tf), for feedback: made on first use."""
        if self._forward is None:
            self._forward = chunk_major(self.tf, self.chunk, self.indptr, len(self.lengths), len(self.df))
        return self._forward

    def expand(self, q: "QueryTerms", fb: "Feedback") -> "QueryTerms":
        """RM3 pseudo-relevance feedback: the query, plus the words its best chunks use.

        1. First pass: the query's `fb.docs` best chunks and their scores.
        2. Relevance model: P(t|R) = Σ_c P(c|q)·tf(t,c)/|c|, with P(c|q) each chunk's score
           over the scores' sum — a term weighs what it weighs in those chunks, the best
           chunk the most.
        3. Its `fb.terms` heaviest terms (ties: term order), renormalised to sum 1.
        4. weight(t) = λ·qtf(t) + (1 − λ)·|q|·P(t|R), λ = `fb.query_weight`, |q| = Σ qtf.
           That is RM3's interpolation of the query model qtf/|q| with P(t|R), times |q|:
           a constant factor, which keeps scores on the plain formula's scale.
        A query whose first pass finds nothing comes back as it was.
        """
        if len(q.ids) == 0:
            return q
        cols, vals = self.best_candidates(q.ids, fb.docs, q.weights)
        if len(cols) == 0:
            return q
        order, _, _ = rank(cols, vals, self.doc_codes, fb.docs, fb.docs)
        top, score = cols[order], vals[order]
        indptr, term_of, tf = self.forward
        lo, hi = indptr[top], indptr[top + 1]
        at = np.concatenate([np.arange(a, b) for a, b in zip(lo.tolist(), hi.tolist())])
        share = np.repeat(score / score.sum() / self.lengths[top], hi - lo) * tf[at]
        terms, which = np.unique(term_of[at], return_inverse=True)
        model = np.bincount(which, weights=share)
        if self._noise is None:  # stopwords and common numbers never join (pipekit/retrieve/queries.py)
            self._noise = feedback_noise(self.terms, self.analyzer, self.df, fb.docs)
        model[self._noise[terms] & ~np.isin(terms, q.ids)] = 0
        keep = np.lexsort((terms, -model))[:fb.terms]
        keep = keep[model[keep] > 0]
        terms, model = terms[keep], model[keep] / model[keep].sum()
        lam, size = fb.query_weight, float(q.weights.sum())
        weight = dict(zip(q.ids.tolist(), (lam * q.weights).tolist()))  # query order first
        added = dict(zip(terms.tolist(), ((1 - lam) * size * model).tolist()))
        for t, a in added.items():
            weight[t] = weight.get(t, 0.0) + a
        ids = [t for t, v in weight.items() if v > 0]  # λ = 0 can zero an original term
        return QueryTerms(np.asarray(ids, dtype=np.int64), np.asarray([weight[t] for t in ids]), q.qtf,
                          np.asarray([added.get(t, 0.0) for t in ids]))

    def scorer(self, q: "QueryTerms"):
        """The exact score of any sorted chunks for q (for the fusion: a chunk only the cosine
        found gets its BM25 part like any other, not 0 for missing BM25's list)."""
        return lambda chunks: self._looked_up(q.ids, q.weights, chunks)

    def added_terms(self, q: "QueryTerms") -> list[tuple[str, float]]:
        """The terms feedback added to a query (the text never says them), heaviest first."""
        return added_terms(self.terms, q)

    def explain(self, q: "QueryTerms", chunk: int) -> list[dict]:
        """Each query term's share of a chunk's score, adding up to it (pipekit/retrieve/results.py)."""
        return explain_rows(self, q, chunk)


def candidates(index: Index, q: QueryTerms, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """BM25's chunks and scores for a query: enough to hold its top `depth` documents."""
    if index.context is None:
        return index.best_candidates(q.ids, depth, q.weights)
    # Every matching chunk (pruning's bounds know no sections), then its section's evidence.
    cols, vals = index.scores(q.ids, weights=q.weights)
    return cols, index.context.rescore(q.ids, q.weights, cols, vals)


def search(index: Index, queries: list[tuple[str, str]], top_k_n: int, depth: int, progress=None,
           threads: int | None = None, feedback: Feedback | None = None, mask: np.ndarray | None = None,
           summary: bool = True):
    """Chunk hits (query#, chunk, score, rank), the document run {qid: {doc: score}}, and
    each query as it was scored (`QueryTerms`: with `feedback`, the expanded query).
    `mask` (a bool per chunk, `search --in/--format`) keeps the others out before ranking,
    each chunk scored as without it (pipekit/retrieve/filters.py).

    Threads pay only for long queries (NumPy lets another thread run, Python does not:
    bench/scale.py).  `summary=False`: no timing note and no document run (a Searcher's query).
    """
    t0, cpu0 = time.perf_counter(), time.process_time() if summary else 0.0
    doc_names, doc_codes = index.doc_names, index.doc_codes
    scored = index.query_terms([text for _, text in queries])
    if feedback is not None:
        index.forward  # built here, once: the threads below only read it
    batches = [range(s, min(s + QUERY_BATCH, len(queries))) for s in range(0, len(queries), QUERY_BATCH)]

    fusion = index.dense  # BM25 fused with the cosine of the query's vector and each chunk's
    vecs = fusion.embed([text for _, text in queries]) if fusion is not None else None
    # Repeats collapsed: chunks ranked `reach` deep, past k, so the next passage fills a repeat's place.
    repeats = getattr(index, "repeats", None)
    reach = depth + top_k_n if repeats is not None else top_k_n
    # The best chunks in one compiled call: no section, filter or vector (pipekit/retrieve/pruned.py; its GIL let go)
    ranked = ranker(index, summary) if fusion is None and mask is None and index.context is None else None

    def one(i: int, reach: int, top=None) -> tuple:
        """Query i's ranked chunks (`reach` of them), their scores, its documents and theirs."""
        qvec = vecs[i] if fusion is not None else None
        if mask is not None:
            cols, vals = filtered_candidates(index, scored[i], depth, mask, fusion, qvec)
        else:  # (with vectors, the fused lists are each `depth` long, whatever the reach)
            got = ranked(scored[i].ids, scored[i].weights, max(reach, depth)) if ranked is not None else None
            cols, vals = got or candidates(index, scored[i], depth if fusion is not None else max(reach, depth))
            if fusion is not None:  # the union of both top lists, each score over its best, mixed
                top = fusion.top(vecs[i:i + 1], depth)[0] if top is None else top
                cols, vals = fusion.fuse(cols, vals, qvec, top, depth, index.scorer(scored[i]))
        order, docs, doc_scores = rank(cols, vals, doc_codes, reach, depth)
        return cols[order], vals[order], docs, doc_scores

    def answer(batch: range) -> list[tuple]:
        out, tops = [], fusion.top(vecs[batch.start:batch.stop], depth) if fusion is not None else None
        for i in batch:
            if feedback is not None:  # a second query, answered like the first
                scored[i] = index.expand(scored[i], feedback)
            out.append(one(i, reach, tops[i - batch.start] if tops is not None else None))
        return out

    workers = threads or min(cores(), len(batches))
    if threads is None and fusion is None and scored:  # (vectors: a cosine block is NumPy's, threads pay)
        postings = index.df[np.concatenate([q.ids for q in scored])].sum() if len(index.df) else 0
        workers = workers if postings >= THREADS_PAY * len(scored) else 1
    progress = progress or (lambda it, total: it)
    with ThreadPoolExecutor(workers) as pool:  # map() hands the batches back in order (one worker: in this thread)
        answers = [a for batch in progress((pool.map if workers > 1 else map)(answer, batches), len(batches)) for a in batch]
    if summary and repeats is not None and workers > 1:  # the query threads' freed heaps handed back before the repeats
        release_freed_memory()  # read titles and texts (1M passages: +30-60 MB under them; 200k, one thread: +15 MB)
    answers, also = collapse_answers(repeats, answers, top_k_n, reach, one, depth)
    out, run = collect_answers(queries, answers, doc_names if summary else None, also)
    if not summary:
        return out, run, scored
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    passes = " (two passes each: rm3 feedback)" if feedback is not None else ""
    index.note(f"queries answered{passes} in {seconds:.2f} s, {cpu:.2f} s CPU on {workers} thread{'s' * (workers > 1)} "
               f"({len(queries) / max(seconds, 1e-9):,.0f} queries/s; index loaded in {index.load_seconds:.2f} s before)")
    return out, run, scored


def shard_partition(output_dir: str, fingerprint: str, shards: list, whole: bool, mixing: tuple, job):
    """On a worker: one job on one part of the index, the shards it holds (pipekit/retrieve/shards.py)."""
    return shard_answer(Index, candidates, output_dir, fingerprint, shards, whole, mixing, job)


def run(ctx) -> None:
    sec = ctx.section
    queries = load_queries(sec["queries"])
    qrels = load_qrels(sec["qrels"]) if sec["qrels"] else None  # fail before any work
    here, feedback, depth = ctx.engine.kind == "local", feedback_of(sec), max(DEPTH, sec["top_k"])
    mixing = (sec["section_context"], sec["dense_weight"])  # what a worker scores with, beside the index
    asked = [text for _, text in queries] if feedback is None else None  # (rm3 adds terms from the results)
    # The asked terms' postings only, the commonest as rows alone (not for explain or sections); a cluster's workers score
    index = Index(ctx, here or sec["explain"], asked, here and not sec["explain"] and not sec["section_context"], LATER_04)
    chunks_03 = ctx.require("03_chunks.parquet", get_stage(3))
    if io.read_meta(chunks_03).get("fingerprint") != index.meta["inputs"]["upstream"]:
        raise PipelineError("03_chunks.parquet changed since the index was built: run `python 04_indexing.py`")
    ctx.upstream_rows = len(queries)
    index.context = section_context(sec["section_context"], chunks_03, index) if here or sec["explain"] else None
    if index.context is not None:
        ctx.note(f"section context {sec['section_context']}: {index.context.n:,} sections of {len(index.lengths):,} chunks")
    index.dense = dense_for(ctx.output_dir, index, sec["dense_weight"], ctx.note) if here or sec["explain"] else None
    cited = CitedRows(chunks_03, index.chunks.column("doc_id"))  # the hits' rows of 03_chunks, read once (cited.py)
    index.repeats = repeats_for(index, sec["repeats"], cited.texts, cited.headings)  # (titles too)

    keep_freed_memory(release_first=True)  # the queries' many short-lived arrays reused, not the load's (malloc.py)
    if here:  # on a thread per core, a bar over batches of queries
        bar = lambda it, total: ctx.progress(it, total=total, desc="05 scoring", unit="batch")
        hits, run_docs, scored = search(index, queries, sec["top_k"], depth, bar, feedback=feedback)
    else:  # batches of queries on every part of the index, each part held by one worker (pipekit/retrieve/shards.py)
        hits, run_docs, scored = on_shards(ctx, index, Index, queries, sec["top_k"], depth, feedback, mixing)
    if here and not sec["explain"]:  # every score is in `hits` and `run_docs`: the postings can go
        index.drop_postings()
    q, c, s, r = hits
    explain = [index.explain(scored[qi], int(ci)) for qi, ci in zip(q, c)] if sec["explain"] else None
    rows, links_of = cited.table(c), lambda rows: hit_links(rows, ctx.cfg["documents"].get("link_base"))
    table = with_link(results_table(queries, rows, (q, c, s, r), explain), links_of(rows))
    table = table.append_column("also", also_column(getattr(hits, "also", []), cited.table, links_of))
    if sec["explain"] and index.dense is not None:  # each hit's BM25 part, cosine part and fused score
        table = table.append_column("fusion", index.dense.explain(candidates, index, queries, scored, q, c, depth))
    ctx.write_table("05_results.parquet", table, {"index": index.meta["fingerprint"]})
    ctx.write_text("05_results.trec", trec_run(queries, run_docs))
    # Judgements of documents this index lacks: named, not scored as misses (results.judged_in_index)
    judged = judged_in_index(qrels, index.chunks.column("doc_id"), sec["qrels"]) if qrels is not None else None
    if judged is not None and judged.qrels:
        metrics = evaluate(judged.qrels, run_docs)
        ctx.write_table("05_metrics.parquet", metrics, judged.meta)
        previous = record_run(ctx, metrics, queries)  # 05_history.parquet: what the next run compares with
        ctx.note("metrics (documents, depth 100): " + metric_line(metrics, METRICS, previous))
    else:  # no judgements, or none of this index's documents (said below)
        ctx.remove_output("05_metrics.parquet")
    for line in judged.lines if judged is not None else []:
        ctx.note(line)
    answered = len(np.unique(q))
    ctx.note(f"{len(queries)} queries, {answered} with results, {len(table)} result rows (top_k={sec['top_k']})")
    added = [index.added_terms(x) for x in scored[:8]] if feedback is not None else None
    termless = termless_queries(index.analyzer, queries, ctx.note)
    ctx.show(lambda: print_results(table, queries, added, termless=termless))  # after the commit: `| head` costs no output


if __name__ == "__main__":
    raise SystemExit(stage_main(5, run, flags={"--explain": "retrieval.explain=true"}, show_preview=False))
