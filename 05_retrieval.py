"""Stage 05 — retrieval: score every query against the index, keep the best chunks.

Reads  the stage-04 index (`04_terms`, `04_postings`, `04_chunks`), the chunk texts from
       `03_chunks.parquet`, the queries (`retrieval.queries`) and, if given, the
       judgements (`retrieval.qrels`).
Writes `05_results.parquet` (query_id, query, rank, score, chunk_id, doc_id, heading,
       page_start, page_end, text; with `retrieval.explain` also `explain`, the score
       term by term), `05_results.trec` (the document-level run in TREC format) and,
       with qrels, `05_metrics.parquet` (nDCG@10, AP@100, R@100 per query and `all`).

The idea: since stage 04 stored each posting's BM25 impact, a query's scores are a sum
of slices.  `Index.scores` adds the postings of a query's distinct terms (SPEC counts
each distinct query term once) into one reused accumulator, so a query costs its
postings, never a pass over the whole corpus.  `Index.best_candidates` is the same
answer, found faster for queries with very common terms (MaxScore): score the rarer
terms' chunks first, then look the common terms up only for chunks that can still reach
the top.  Then keep the top k with argpartition; ties go to the chunk earlier in the
corpus.

Metrics are on documents: a document scores its best chunk, as a reader judges "did I
find the right document".  They are computed by ir-measures (trec_eval's conventions)
at depth 100 whatever `top_k` is, so changing top_k never changes the metrics.

What it deliberately does not do: re-rank, expand queries, or read config.yaml's
analyzer settings — queries are analysed exactly as the index recorded.
"""
from __future__ import annotations

import itertools
import textwrap
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipekit import io
from pipekit.analyzer import Analyzer
from pipekit.cli import stage_main
from pipekit.errors import PipelineError
from pipekit.queries import load_qrels, load_queries
from pipekit.stages import get_stage

METRICS = ("nDCG@10", "AP@100", "R@100")
DEPTH = 100  # documents evaluated per query, whatever top_k is
DENSE_SHARE = 16  # a term in more than 1/16 of the chunks is looked up in a dense array ...
DENSE_TERMS = 32  # ... for at most this many terms (8 bytes a chunk each)
QUERY_BATCH = 256  # queries per progress-bar step


class Index:
    """The stage-04 tables loaded for scoring: each term's postings as one slice.

    `chunk[indptr[t]:indptr[t+1]]` are the chunks term t occurs in (in corpus order) and
    `impact[...]` its BM25 weight in each.  Only the two columns scoring needs are read
    (tf only for --explain), a row group at a time into one preallocated array, so
    loading never holds the Arrow table and its NumPy copy at once.
    """

    def __init__(self, ctx):
        t0 = time.perf_counter()
        chunks_path = ctx.require("04_chunks.parquet", get_stage(4))
        metas = [io.read_meta(ctx.require(n, get_stage(4))) for n in get_stage(4).outputs]
        if len({m["fingerprint"] for m in metas}) != 1:
            raise PipelineError("the 04_* files come from different runs: rerun `python 04_indexing.py`")
        self.meta = metas[0]
        self.stats = self.meta["corpus"]
        self.analyzer = Analyzer.from_settings(self.stats["analyzer"])
        terms = io.read_table(ctx.path("04_terms.parquet"), ["term", "df", "idf"])
        self.terms = terms.column("term").combine_chunks()
        self.df = terms.column("df").to_numpy()
        self.idf = terms.column("idf").to_numpy()
        # Postings are sorted by term, so a term's postings start where the previous df ends.
        self.indptr = np.zeros(len(self.df) + 1, dtype=np.int64)
        np.cumsum(self.df, out=self.indptr[1:])
        self._postings_path = ctx.path("04_postings.parquet")
        self.chunk = self._read_column(self._postings_path, "chunk", np.int32, self.indptr[-1])
        self.impact = self._read_column(self._postings_path, "impact", np.float64, self.indptr[-1])
        self._tf = None
        # Each term's largest impact: the most it can add to any chunk's score (for pruning).
        self.max_impact = np.zeros(len(self.df), dtype=np.float64)
        has = self.df > 0
        if has.any():
            self.max_impact[has] = np.maximum.reduceat(self.impact, self.indptr[:-1][has])
        self.chunks = io.read_table(chunks_path)
        self.lengths = self.chunks.column("length").to_numpy()
        # Documents as small integers (first-appearance order): a document's best chunk is
        # then a group-by on ints, not on a million strings.
        docs = pc.dictionary_encode(self.chunks.column("doc_id").combine_chunks())
        self.doc_names = docs.dictionary
        self.doc_codes = np.asarray(docs.indices, dtype=np.int64)
        self._term_ids = None
        self._acc = None
        self._dense: dict[int, np.ndarray] = {}
        self.note = ctx.note
        self.load_seconds = time.perf_counter() - t0
        ctx.note(f"index loaded in {self.load_seconds:.2f} s ({len(self.chunk):,} postings, "
                 f"{len(self.df):,} terms, {len(self.lengths):,} chunks)")

    @property
    def tf(self) -> np.ndarray:
        if self._tf is None:
            self._tf = self._read_column(self._postings_path, "tf", np.int32, self.indptr[-1])
        return self._tf

    @property
    def term_ids(self) -> dict[str, int]:
        if self._term_ids is None:
            self._term_ids = {t: i for i, t in enumerate(self.terms.to_pylist())}
        return self._term_ids

    def query_terms(self, texts: list[str]) -> tuple[list[np.ndarray], list[list[str]]]:
        """Per query: the ids of its distinct analysed terms the index knows (in query
        order), and all its distinct analysed terms."""
        flat, parent = self.analyzer.tokens(texts)
        ids = pc.index_in(flat, value_set=self.terms)  # one hash lookup per query term, in C
        ids = np.asarray(pc.fill_null(ids, -1), dtype=np.int64)
        words = flat.to_pylist()
        per_query: list[list[str]] = [[] for _ in texts]
        known: list[list[int]] = [[] for _ in texts]
        seen = set()
        for q, w, t in zip(parent.tolist(), words, ids.tolist()):  # a few terms per query: cheap
            if (q, w) in seen:
                continue
            seen.add((q, w))
            per_query[q].append(w)
            if t >= 0:
                known[q].append(t)
        return [np.asarray(k, dtype=np.int64) for k in known], per_query

    def best_candidates(self, term_ids: np.ndarray, k: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """A set of (chunk, score) pairs holding the query's exact top `k` chunks and top
        `depth` documents (k <= depth), found without reading most postings of its common terms.

        The bound behind it (MaxScore): a chunk containing none of the query's rarer terms
        scores at most `bound`, the sum of the common terms' largest impacts.  So score the
        rarer terms' chunks on those terms alone (`partial`); the depth-th best document by
        partial score, `floor`, is a lower bound of the final depth-th; a chunk with
        partial + bound < floor cannot make it.  The few left get the common terms looked
        up, heaviest first, each dropped as soon as it cannot make it.  If at least `depth`
        documents then score above `bound`, no chunk outside can beat them: that is the
        answer, ties and all.  If not, a bigger set of rarer terms is tried, and at last
        every posting.
        Zipf's law is why it pays: words like "the" are in nearly every chunk, and a query
        containing one would otherwise touch the whole corpus.
        """
        m = len(term_ids)
        if m > 1:
            # A handful of terms: plain Python lists beat NumPy calls on tiny arrays.
            ids = term_ids.tolist()
            df = self.df[term_ids].tolist()
            weight = self.max_impact[term_ids].tolist()
            by_weight = sorted(range(m), key=weight.__getitem__)
            bounds = list(itertools.accumulate(weight[i] for i in by_weight))
            total = sum(df)
            for j in range(m - 1, 0, -1):  # the j lightest terms are only looked up
                rare = sorted(by_weight[j:])  # in query order
                reach = sum(df[i] for i in rare)
                if reach < depth:
                    continue  # too few chunks to hold `depth` documents
                if reach * 4 > total:
                    break  # reading every posting is about as cheap
                # Margins of 1e-9 keep float rounding (sums in another order) on the safe side.
                bound = bounds[j - 1] * (1 + 1e-9)
                cand, partial = self.scores(term_ids[rare])
                _, floors = best_documents(cand, partial, self.doc_codes, depth)
                if len(floors) < depth:
                    continue
                floor = floors[-1] * (1 - 1e-9)
                keep = partial >= floor - bound
                alive, part = cand[keep], partial[keep]
                if len(rare) > 1:
                    order = np.argsort(alive, kind="stable")
                    alive, part = alive[order], part[order]
                # Resolve the heaviest common term first: it narrows the bound the most.
                for i in range(j - 1, -1, -1):
                    part = part + self._lookup(ids[by_weight[i]], alive)
                    rest = bounds[i - 1] * (1 + 1e-9) if i else 0.0
                    keep = part >= floor - rest
                    alive, part = alive[keep], part[keep]
                # `part` is now each survivor's whole score: its rarer terms in query order,
                # then the common ones heaviest first (the same sum for every chunk of this
                # query, so equal scores stay equal).
                above = part > bound
                if self._n_docs(alive[above]) >= depth:
                    return alive[above], part[above]
        return self.scores(term_ids)

    def _n_docs(self, chunks: np.ndarray) -> int:
        """Distinct documents among sorted chunk numbers."""
        d = self.doc_codes[chunks]
        steps = np.diff(d)
        # A document's chunks are consecutive in corpus order, so its code changes only once.
        if (steps >= 0).all():
            return int(np.count_nonzero(steps)) + (len(d) > 0)
        return len(np.unique(d))

    def _postings_of(self, t) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self.indptr[t], self.indptr[t + 1]
        return self.chunk[lo:hi], self.impact[lo:hi]

    def _dense_row(self, t) -> np.ndarray | None:
        """Term t's impact in every chunk (0 where absent), if t is one of the most common."""
        dense = self._dense.get(int(t))
        if dense is None and self.df[t] * DENSE_SHARE > len(self.lengths) and len(self._dense) < DENSE_TERMS:
            # A term in over 1/DENSE_SHARE of the chunks: one array over all chunks makes each
            # lookup a plain index instead of a binary search in a very long list.
            ch, imp = self._postings_of(t)
            dense = self._dense[int(t)] = np.zeros(len(self.lengths), dtype=np.float64)
            dense[ch] = imp
        return dense

    def _lookup(self, t, cand: np.ndarray) -> np.ndarray:
        """Term t's impact in each of the sorted chunks `cand` (0 where it is absent)."""
        dense = self._dense_row(t)
        if dense is not None:
            return dense[cand]
        ch, imp = self._postings_of(t)
        # Same dtype on both sides, or NumPy would first copy the whole postings list to int64.
        cand = cand.astype(ch.dtype, copy=False)
        pos = np.searchsorted(ch, cand)
        np.minimum(pos, len(ch) - 1, out=pos)
        return np.where(ch[pos] == cand, imp[pos], 0.0)

    def scores(self, term_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The chunks one query touches and their exact scores, in time proportional to
        the query's postings.

        One dense float64 array for the whole corpus, allocated once and reset after each
        query only where that query wrote: a query costs its postings, never a pass over
        every chunk.  Term by term in the query's order, so each chunk's score is the same
        sum in the same order as the plain formula (equal scores stay equal, and ties keep
        corpus order).  A chunk is new to the query while its score is still 0: impacts
        are always > 0 (idf > 0, tf >= 1).
        """
        if len(term_ids) == 1:  # one term: its postings are the answer as they stand
            return self._postings_of(term_ids[0])
        n = len(self.lengths)
        dense = [self._dense_row(t) for t in term_ids]
        if len(dense) > 1 and all(d is not None for d in dense):
            # Every term in a large share of the corpus: add their dense rows, in query order.
            acc = dense[0] + dense[1]
            for d in dense[2:]:
                acc += d
            cols = np.flatnonzero(acc)
            return cols.astype(self.chunk.dtype), acc[cols]
        if int(self.df[term_ids].sum()) * 4 > n:
            # Postings rivalling the corpus in number: one bincount pass (C, adding in the
            # same term order) and a scan of its output beat five NumPy passes per posting.
            parts = [self._postings_of(t) for t in term_ids]
            dense = np.bincount(np.concatenate([p[0] for p in parts]),
                                weights=np.concatenate([p[1] for p in parts]), minlength=n)
            cols = np.flatnonzero(dense)
            return cols.astype(self.chunk.dtype), dense[cols]
        if self._acc is None:
            self._acc = np.zeros(len(self.lengths), dtype=np.float64)
        acc, parts = self._acc, []
        for i, t in enumerate(term_ids):
            lo, hi = self.indptr[t], self.indptr[t + 1]
            ch, imp = self.chunk[lo:hi], self.impact[lo:hi]
            if i == 0:
                acc[ch] = imp
                parts.append(ch)
            else:
                cur = acc[ch]
                parts.append(ch[cur == 0])
                cur += imp
                acc[ch] = cur
        if not parts:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float64)
        cols = np.concatenate(parts) if len(parts) > 1 else parts[0]
        vals = acc[cols]
        acc[cols] = 0
        return cols, vals

    def explain(self, terms: list[str], chunk: int) -> list[dict]:
        """Each query term's share of a chunk's score; the shares add up to the score."""
        k1, b, avgdl = self.stats["k1"], self.stats["b"], self.stats["avgdl"]
        out = []
        for term in sorted(set(terms), key=lambda t: self.term_ids.get(t, -1)):
            t = self.term_ids.get(term)
            if t is None:
                continue
            lo, hi = self.indptr[t], self.indptr[t + 1]
            pos = lo + np.searchsorted(self.chunk[lo:hi], chunk)
            if pos >= hi or self.chunk[pos] != chunk:
                continue
            tf = float(self.tf[pos])
            norm = 1 - b + b * float(self.lengths[chunk]) / avgdl
            out.append({"term": term, "tf": int(tf), "df": int(self.df[t]), "idf": float(self.idf[t]),
                        "norm": norm, "contribution": float(self.impact[pos])})
        return out

    @staticmethod
    def _read_column(path, name: str, dtype, n: int) -> np.ndarray:
        pf = pq.ParquetFile(path)
        if pf.metadata.num_rows != n:
            raise PipelineError(f"{path}: {pf.metadata.num_rows:,} postings where 04_terms.parquet's df "
                                f"adds up to {n:,}: rerun `python 04_indexing.py`")
        out = np.empty(int(n), dtype=dtype)
        at = 0
        for g in range(pf.num_row_groups):
            for piece in pf.read_row_group(g, columns=[name]).column(0).chunks:
                out[at:at + len(piece)] = piece.to_numpy()
                at += len(piece)
        return out


def _sorted_union(parts: list[np.ndarray]) -> np.ndarray:
    if len(parts) == 1:
        return parts[0]  # one term's chunks: already sorted and distinct
    x = np.concatenate(parts)
    x.sort()
    keep = np.ones(len(x), dtype=bool)
    np.not_equal(x[1:], x[:-1], out=keep[1:])
    return x[keep]


def top_k(cols: np.ndarray, vals: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k best (score desc, then chunk asc), without sorting everything."""
    if len(vals) > k:
        part = np.argpartition(-vals, k - 1)[:k]
        threshold = vals[part].min()
        above = np.flatnonzero(vals > threshold)
        # argpartition picks arbitrarily among equal scores at the cut; corpus order must win.
        ties = np.flatnonzero(vals == threshold)
        ties = ties[np.argsort(cols[ties], kind="stable")][: k - len(above)]
        sel = np.concatenate([above, ties])
    else:
        sel = np.arange(len(vals))
    return sel[np.lexsort((cols[sel], -vals[sel]))]


def best_documents(cols, vals, doc_codes, depth: int):
    """Top `depth` documents, each scored by its best chunk (ranked chunks, first per doc)."""
    m = min(len(vals), depth * 4)
    while True:
        order = top_k(cols, vals, m)
        docs = doc_codes[cols[order]]
        _, first = np.unique(docs, return_index=True)
        if len(first) >= depth or m >= len(vals):
            first = np.sort(first)[:depth]
            return docs[first], vals[order][first]
        m = min(len(vals), m * 4)


def search(index: Index, queries: list[tuple[str, str]], top_k_n: int, depth: int, progress=iter):
    """Chunk hits (query#, chunk, score, rank) and the document run {qid: {doc: score}}."""
    t0, cpu0 = time.perf_counter(), time.process_time()
    doc_names, doc_codes = index.doc_names, index.doc_codes
    hits_q, hits_c, hits_s, hits_r = [], [], [], []
    run: dict[str, dict[str, float]] = {}
    term_ids, terms_of = index.query_terms([text for _, text in queries])
    docs_of = []
    for start in progress(range(0, len(queries), QUERY_BATCH)):
        for i in range(start, min(start + QUERY_BATCH, len(queries))):
            cols, vals = index.best_candidates(term_ids[i], top_k_n, depth)
            order = top_k(cols, vals, top_k_n)
            hits_q.append(np.full(len(order), i))
            hits_c.append(cols[order])
            hits_s.append(vals[order])
            hits_r.append(np.arange(1, len(order) + 1))
            docs_of.append(best_documents(cols, vals, doc_codes, depth))
    # Document names for every query at once: one Arrow take, not a thousand.
    if docs_of:
        names = doc_names.take(pa.array(np.concatenate([d for d, _ in docs_of]))).to_pylist()
        scores = np.concatenate([s for _, s in docs_of]).tolist()
    at = 0
    for (qid, _), (docs, _) in zip(queries, docs_of):
        run[qid] = dict(zip(names[at:at + len(docs)], scores[at:at + len(docs)]))
        at += len(docs)
    cat = lambda parts, dt: np.concatenate(parts).astype(dt) if parts else np.zeros(0, dt)
    out = (cat(hits_q, np.int64), cat(hits_c, np.int64), cat(hits_s, np.float64), cat(hits_r, np.int32))
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    index.note(f"queries answered in {seconds:.2f} s, {cpu:.2f} s CPU "
               f"({len(queries) / max(seconds, 1e-9):,.0f} queries/s; index loaded in {index.load_seconds:.2f} s before)")
    return out, run, terms_of


def chunk_texts(path, rows: np.ndarray) -> list[str]:
    """Texts of the given 03_chunks rows, reading only the row groups that hold them,
    one at a time (results spread over a million chunks touch every group)."""
    pf = pq.ParquetFile(path)
    bounds = np.cumsum([0] + [pf.metadata.row_group(g).num_rows for g in range(pf.num_row_groups)])
    rows = np.asarray(rows, dtype=np.int64)
    group_of = np.searchsorted(bounds, rows, side="right") - 1
    out: list[str | None] = [None] * len(rows)
    for g in np.unique(group_of):
        at = np.flatnonzero(group_of == g)
        texts = pf.read_row_group(int(g), columns=["text"]).column("text")
        for i, t in zip(at.tolist(), texts.take(pa.array(rows[at] - bounds[g])).to_pylist()):
            out[i] = t
    return out


def evaluate(qrels, run) -> pa.Table:
    """Per-query and mean metrics with ir-measures (trec_eval conventions)."""
    import ir_measures

    measures = [ir_measures.parse_measure(m) for m in METRICS]
    rows = [(m.query_id, str(m.measure), float(m.value)) for m in ir_measures.iter_calc(measures, qrels, run)]
    agg = ir_measures.calc_aggregate(measures, qrels, run)
    rows += [("all", str(m), float(agg[m])) for m in measures]
    qid, metric, value = zip(*rows) if rows else ((), (), ())
    return pa.table({"query_id": pa.array(qid, pa.string()), "metric": pa.array(metric, pa.string()),
                     "value": pa.array(value, pa.float64())})


def trec_run(queries, run) -> str:
    lines = []
    for qid, _ in queries:
        ranked = sorted(run.get(qid, {}).items(), key=lambda kv: -kv[1])
        lines += [f"{qid} Q0 {doc} {r} {s:.17g} pipekit" for r, (doc, s) in enumerate(ranked, 1)]
    return "\n".join(lines) + ("\n" if lines else "")


def print_results(results: pa.Table, queries, max_queries: int = 8) -> None:
    rows = results.to_pylist()
    by_q: dict[str, list[dict]] = {}
    for r in rows:
        by_q.setdefault(r["query_id"], []).append(r)
    for qid, text in queries[:max_queries]:
        print(f"\n[{qid}] {text}")
        hits = by_q.get(qid, [])
        if not hits:
            print("    (no chunk contains any of its terms)")
        for r in hits[:5]:
            pages = "" if r["page_start"] is None else (
                f" p.{r['page_start']}" + (f"–{r['page_end']}" if r["page_end"] != r["page_start"] else ""))
            where = r["doc_id"] + (f" › {r['heading']}" if r["heading"] else "") + pages
            snippet = textwrap.shorten(" ".join(r["text"].split()), 90, placeholder=" …")
            print(f"  {r['rank']:>2}. {r['score']:7.3f}  {where}\n              {snippet}")
            for e in r.get("explain") or []:
                print(f"              {e['term']:<14} tf={e['tf']:<3} df={e['df']:<6} idf={e['idf']:.3f} "
                      f"norm={e['norm']:.3f} → {e['contribution']:.3f}")
    if len(queries) > max_queries:
        print(f"\n… and {len(queries) - max_queries} more queries in 05_results.parquet")


def run(ctx) -> None:
    sec = ctx.section
    queries = load_queries(sec["queries"])
    qrels = load_qrels(sec["qrels"]) if sec["qrels"] else None  # fail before any work
    index = Index(ctx)
    chunks_03 = ctx.require("03_chunks.parquet", get_stage(3))
    if io.read_meta(chunks_03).get("fingerprint") != index.meta["inputs"]["upstream"]:
        raise PipelineError("03_chunks.parquet changed since the index was built: run `python 04_indexing.py`")
    ctx.upstream_rows = len(queries)

    (q, c, s, r), run_docs, terms_of = search(
        index, queries, sec["top_k"], max(DEPTH, sec["top_k"]),
        progress=lambda it: ctx.progress(it, desc="05 scoring", unit="batch"))
    ch = index.chunks
    take = pa.array(c)
    results = {
        "query_id": pa.array([queries[i][0] for i in q], pa.string()),
        "query": pa.array([queries[i][1] for i in q], pa.string()),
        "rank": pa.array(r, pa.int32()),
        "score": pa.array(s, pa.float64()),
        "chunk_id": ch.column("chunk_id").take(take),
        "doc_id": ch.column("doc_id").take(take),
        "heading": ch.column("heading").take(take),
        "page_start": ch.column("page_start").take(take),
        "page_end": ch.column("page_end").take(take),
        "text": pa.array(chunk_texts(chunks_03, c), pa.string()),
    }
    if sec["explain"]:
        results["explain"] = pa.array([index.explain(terms_of[qi], int(ci)) for qi, ci in zip(q, c)])
    table = pa.table(results)
    ctx.write_table("05_results.parquet", table, {"index": index.meta["fingerprint"]})
    ctx.write_text("05_results.trec", trec_run(queries, run_docs))
    if qrels is not None:
        metrics = evaluate(qrels, run_docs)
        ctx.write_table("05_metrics.parquet", metrics)
        overall = {m: v for qid, m, v in zip(*(metrics.column(n).to_pylist() for n in metrics.column_names))
                   if qid == "all"}
        ctx.note("metrics (documents, depth 100): " + ", ".join(f"{m} {overall[m]:.4f}" for m in METRICS))
    else:
        ctx.remove_output("05_metrics.parquet")
    answered = len(np.unique(q))
    ctx.note(f"{len(queries)} queries, {answered} with results, {len(table)} result rows (top_k={sec['top_k']})")
    if not ctx.quiet:
        print_results(table, queries)


if __name__ == "__main__":
    raise SystemExit(stage_main(5, run, flags={"--explain": "retrieval.explain=true"}, show_preview=False))
