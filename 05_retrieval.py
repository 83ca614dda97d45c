"""Stage 05 — retrieval: score every query against the index, keep the best chunks.

Reads  the stage-04 index (`04_terms`, `04_postings`, `04_chunks`), the chunk texts from
       `03_chunks.parquet`, the queries (`retrieval.queries`) and, if given, the
       judgements (`retrieval.qrels`).
Writes `05_results.parquet` (query_id, query, rank, score, chunk_id, doc_id, heading,
       page_start, page_end, text; with `retrieval.explain` also `explain`, the score
       term by term), `05_results.trec` (the document-level run in TREC format) and,
       with qrels, `05_metrics.parquet` (nDCG@10, AP@100, R@100 per query and `all`).

The idea: since stage 04 stored each posting's BM25 impact, a query's scores are a sum
of slices.  Put the queries in a sparse matrix Q (query × term, 1 where the query has
the term: SPEC counts each distinct query term once) and the postings in W (term ×
chunk, impacts): Q @ W is every query's score for every chunk it touches, computed by
scipy in C, touching only candidate chunks — never a dense pass over the corpus.  Then
keep the top k of each row with argpartition; ties go to the chunk earlier in the corpus.

Metrics are on documents: a document scores its best chunk, as a reader judges "did I
find the right document".  They are computed by ir-measures (trec_eval's conventions)
at depth 100 whatever `top_k` is, so changing top_k never changes the metrics.

What it deliberately does not do: re-rank, expand queries, or read config.yaml's
analyzer settings — queries are analysed exactly as the index recorded.
"""
from __future__ import annotations

import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from scipy import sparse

from pipekit import io
from pipekit.analyzer import Analyzer
from pipekit.cli import stage_main
from pipekit.errors import PipelineError
from pipekit.queries import load_qrels, load_queries
from pipekit.stages import get_stage

METRICS = ("nDCG@10", "AP@100", "R@100")
DEPTH = 100  # documents evaluated per query, whatever top_k is
QUERY_BATCH = 256  # queries scored per sparse product: bounds the candidate matrix's memory


class Index:
    """The stage-04 tables loaded for scoring: W (term × chunk impacts) and lookups."""

    def __init__(self, ctx):
        chunks_path = ctx.require("04_chunks.parquet", get_stage(4))
        metas = [io.read_meta(ctx.require(n, get_stage(4))) for n in get_stage(4).outputs]
        if len({m["fingerprint"] for m in metas}) != 1:
            raise PipelineError("the 04_* files come from different runs: rerun `python 04_indexing.py`")
        self.meta = metas[0]
        self.stats = self.meta["corpus"]
        self.analyzer = Analyzer.from_settings(self.stats["analyzer"])
        terms = io.read_table(ctx.path("04_terms.parquet"))
        postings = io.read_table(ctx.path("04_postings.parquet"), ["chunk", "tf", "impact"])
        self.chunks = io.read_table(chunks_path)
        self.term_ids = {t: i for i, t in enumerate(terms.column("term").to_pylist())}
        self.df = terms.column("df").to_numpy()
        self.idf = terms.column("idf").to_numpy()
        # Postings are sorted by term, so a term's postings start where the previous df ends.
        indptr = np.concatenate([[0], np.cumsum(self.df, dtype=np.int64)])
        shape = (len(self.df), self.stats["N"])
        self.W = sparse.csr_matrix((postings.column("impact").to_numpy(),
                                    postings.column("chunk").to_numpy(), indptr), shape=shape)
        self.tf = postings.column("tf").to_numpy()
        self.lengths = self.chunks.column("length").to_numpy()

    def query_matrix(self, texts: list[str]) -> tuple[sparse.csr_matrix, list[list[str]]]:
        """One row per query, 1 for each distinct analysed term the index knows."""
        flat, parent = self.analyzer.tokens(texts)
        words = flat.to_pylist()
        rows, cols, seen = [], [], set()
        per_query = [[] for _ in texts]
        for q, w in zip(parent.tolist(), words):  # a few terms per query: cheap
            if (q, w) in seen:
                continue
            seen.add((q, w))
            per_query[q].append(w)
            if w in self.term_ids:
                rows.append(q)
                cols.append(self.term_ids[w])
        Q = sparse.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(texts), len(self.df)))
        return Q, per_query

    def explain(self, terms: list[str], chunk: int) -> list[dict]:
        """Each query term's share of a chunk's score; the shares add up to the score."""
        k1, b, avgdl = self.stats["k1"], self.stats["b"], self.stats["avgdl"]
        out = []
        for term in sorted(set(terms), key=lambda t: self.term_ids.get(t, -1)):
            t = self.term_ids.get(term)
            if t is None:
                continue
            lo, hi = self.W.indptr[t], self.W.indptr[t + 1]
            pos = lo + np.searchsorted(self.W.indices[lo:hi], chunk)
            if pos >= hi or self.W.indices[pos] != chunk:
                continue
            tf = float(self.tf[pos])
            norm = 1 - b + b * float(self.lengths[chunk]) / avgdl
            out.append({"term": term, "tf": int(tf), "df": int(self.df[t]), "idf": float(self.idf[t]),
                        "norm": norm, "contribution": float(self.W.data[pos])})
        return out


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
    doc_names, doc_codes = np.unique(index.chunks.column("doc_id").to_numpy(zero_copy_only=False),
                                     return_inverse=True)
    hits_q, hits_c, hits_s, hits_r = [], [], [], []
    run: dict[str, dict[str, float]] = {}
    terms_of: list[list[str]] = []
    for start in progress(range(0, len(queries), QUERY_BATCH)):
        batch = queries[start:start + QUERY_BATCH]
        Q, per_query = index.query_matrix([text for _, text in batch])
        terms_of.extend(per_query)
        scores = (Q @ index.W).tocsr()
        for i in range(len(batch)):
            lo, hi = scores.indptr[i], scores.indptr[i + 1]
            cols, vals = scores.indices[lo:hi], scores.data[lo:hi]
            keep = vals > 0  # SPEC: a chunk scoring 0 is not a result
            cols, vals = cols[keep], vals[keep]
            order = top_k(cols, vals, top_k_n)
            hits_q.append(np.full(len(order), start + i))
            hits_c.append(cols[order])
            hits_s.append(vals[order])
            hits_r.append(np.arange(1, len(order) + 1))
            docs, dscores = best_documents(cols, vals, doc_codes, depth)
            run[batch[i][0]] = {str(doc_names[d]): float(s) for d, s in zip(docs, dscores)}
    cat = lambda parts, dt: np.concatenate(parts).astype(dt) if parts else np.zeros(0, dt)
    return (cat(hits_q, np.int64), cat(hits_c, np.int64), cat(hits_s, np.float64),
            cat(hits_r, np.int32)), run, terms_of


def chunk_texts(path, rows: np.ndarray) -> list[str]:
    """Texts of the given 03_chunks rows, reading only the row groups that hold them."""
    pf = pq.ParquetFile(path)
    bounds = np.cumsum([0] + [pf.metadata.row_group(g).num_rows for g in range(pf.num_row_groups)])
    group_of = np.searchsorted(bounds, rows, side="right") - 1
    texts = {int(g): pf.read_row_group(int(g), columns=["text"]).column("text") for g in np.unique(group_of)}
    return [texts[int(g)][int(r - bounds[g])].as_py() for g, r in zip(group_of, rows)]


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
