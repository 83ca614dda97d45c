"""Stage 04 — indexing: count every term of every chunk and precompute BM25.

Reads  `03_chunks.parquet`.
Writes three tables that together are the index, each carrying the corpus statistics
(N, avgdl, k1, b, the analyzer settings) in its metadata:
- `04_terms.parquet`    term_id, term, df, idf            (one row per distinct term)
- `04_postings.parquet` term_id, chunk, tf, impact        (one row per term in a chunk,
                        sorted by term then chunk: a term's postings are one slice)
- `04_chunks.parquet`   chunk, chunk_id, doc_id, heading, page_start, page_end, length

The idea: BM25's score is a sum over query terms of a number that depends only on the
term and the chunk (SPEC's formula):

    impact(t, c) = idf(t) · tf·(k1+1) / (tf + k1·(1 − b + b·|c|/avgdl))
    idf(t)       = ln(1 + (N − df + 0.5) / (df + 0.5))

so we compute it once per posting here, and retrieval becomes "gather the postings of
the query's terms and add".  What a chunk's terms are: its heading line and its text
(a query naming a section finds passages that never repeat the section's name), plus
its folder names counted `path_weight` times.

How it stays fast: chunks are analysed a batch at a time on whole Arrow columns;
counting is a sparse-matrix build (scipy sums duplicate (chunk, term) pairs in C); the
term-major postings are a CSR -> CSC conversion, which is linear.  No Python loop ever
runs per token, and only the distinct words of a batch pass through Python once.

What it deliberately does not do: compress postings, prune terms, or keep positions —
the index stays three plain tables anyone can open in pandas.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy import sparse

from pipekit.analyzer import Analyzer
from pipekit.cli import stage_main

BATCH = 8192  # chunks analysed together: big enough that Arrow kernels dominate, small enough to stay flat


def indexed_texts(batch: pa.RecordBatch) -> pa.Array:
    """What the analyzer sees for each chunk: its heading line, then its text."""
    heading = pc.fill_null(batch.column("heading"), "")
    text = pc.fill_null(batch.column("text"), "")
    return pc.binary_join_element_wise(heading, text, "\n")


def path_tokens(analyzer: Analyzer, paths: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Terms of each chunk's folder names, with the chunk each belongs to."""
    folders = pc.list_flatten(paths)
    owner = np.asarray(pc.list_parent_indices(paths), dtype=np.int64)
    terms, folder_of_term = analyzer.tokens(folders)
    return terms, owner[folder_of_term]


class Vocabulary:
    """Term -> id, growing batch by batch. Only distinct words of a batch touch Python."""

    def __init__(self):
        self.ids: dict[str, int] = {}

    def encode(self, terms: pa.Array) -> np.ndarray:
        encoded = pc.dictionary_encode(terms)
        local = [self.ids.setdefault(w, len(self.ids)) for w in encoded.dictionary.to_pylist()]
        return np.asarray(local, dtype=np.int64)[np.asarray(encoded.indices, dtype=np.int64)]

    def sorted_terms(self) -> tuple[list[str], np.ndarray]:
        """Terms in alphabetical order, and old id -> new id (a sorted table reads better)."""
        terms = sorted(self.ids)
        remap = np.empty(len(terms), dtype=np.int64)
        remap[[self.ids[t] for t in terms]] = np.arange(len(terms))
        return terms, remap


def count_batch(analyzer: Analyzer, vocab: Vocabulary, batch: pa.RecordBatch,
                path_weight: int) -> sparse.csr_matrix:
    """Term frequencies of one batch of chunks: rows are chunks, columns term ids."""
    terms, rows = analyzer.tokens(indexed_texts(batch))
    weights = np.ones(len(terms), dtype=np.int64)
    if path_weight > 0 and "path" in batch.schema.names:
        p_terms, p_rows = path_tokens(analyzer, batch.column("path"))
        terms = pa.concat_arrays([terms, p_terms]) if len(p_terms) else terms
        rows = np.concatenate([rows, p_rows])
        weights = np.concatenate([weights, np.full(len(p_rows), path_weight, dtype=np.int64)])
    cols = vocab.encode(terms) if len(terms) else np.zeros(0, dtype=np.int64)
    # COO -> CSR sums duplicate (chunk, term) entries: that sum *is* the term frequency.
    shape = (batch.num_rows, max(len(vocab.ids), 1))
    return sparse.coo_matrix((weights, (rows, cols)), shape=shape).tocsr()


def bm25_impacts(tf: sparse.csr_matrix, k1: float, b: float):
    """idf per term, length per chunk, and the BM25 impact of every posting (SPEC)."""
    n_chunks = tf.shape[0]
    lengths = np.asarray(tf.sum(axis=1)).ravel().astype(np.int64)
    avgdl = float(lengths.mean()) if n_chunks else 0.0
    df = np.bincount(tf.indices, minlength=tf.shape[1]).astype(np.int64)
    idf = np.log1p((n_chunks - df + 0.5) / (df + 0.5))
    row_of = np.repeat(np.arange(n_chunks), np.diff(tf.indptr))
    tfv = tf.data.astype(np.float64)
    # With no terms at all avgdl is 0; there are then no postings to normalise either.
    norm = k1 * (1 - b + b * lengths[row_of] / avgdl) if avgdl > 0 else np.zeros(0)
    impact = idf[tf.indices] * tfv * (k1 + 1) / (tfv + norm)
    return df, idf, lengths, avgdl, impact


def build_index(batches, analyzer: Analyzer, k1: float, b: float, path_weight: int, progress=iter):
    """All of stage 04 without the I/O: chunk batches in, the three tables out."""
    vocab = Vocabulary()
    pieces, meta_cols = [], []
    for batch in progress(batches):
        pieces.append(count_batch(analyzer, vocab, batch, path_weight))
        meta_cols.append(batch.select(["chunk_id", "doc_id", "heading", "page_start", "page_end"]))
    n_terms = len(vocab.ids)
    # Earlier batches knew fewer terms: widen them all to the final vocabulary, then stack.
    pieces = [sparse.csr_matrix((p.data, p.indices, p.indptr), shape=(p.shape[0], n_terms))
              for p in pieces]
    tf = sparse.vstack(pieces, format="csr") if pieces else sparse.csr_matrix((0, n_terms), dtype=np.int64)
    terms, remap = vocab.sorted_terms()
    tf = sparse.csr_matrix((tf.data, remap[tf.indices], tf.indptr), shape=tf.shape)
    df, idf, lengths, avgdl, impact = bm25_impacts(tf, k1, b)

    # Term-major order: CSR -> CSC moves each posting once. Carry the posting's position
    # through the conversion (as 1-based data, since a 0 could be dropped as "empty").
    order = sparse.csr_matrix((np.arange(1, tf.nnz + 1), tf.indices, tf.indptr), shape=tf.shape).tocsc()
    perm = order.data - 1
    term_of = np.repeat(np.arange(n_terms, dtype=np.int32), np.diff(order.indptr))
    postings = pa.table({
        "term_id": pa.array(term_of, pa.int32()),
        "chunk": pa.array(order.indices.astype(np.int32)),
        "tf": pa.array(tf.data[perm].astype(np.int32)),
        "impact": pa.array(impact[perm], pa.float64()),
    })
    term_table = pa.table({
        "term_id": pa.array(np.arange(n_terms, dtype=np.int32)),
        "term": pa.array(terms, pa.string()),
        "df": pa.array(df.astype(np.int32)),
        "idf": pa.array(idf, pa.float64()),
    })
    chunks = pa.Table.from_batches(meta_cols) if meta_cols else None
    n = tf.shape[0]
    chunk_table = pa.table({
        "chunk": pa.array(np.arange(n, dtype=np.int32)),
        "chunk_id": chunks.column("chunk_id") if chunks else pa.array([], pa.string()),
        "doc_id": chunks.column("doc_id") if chunks else pa.array([], pa.string()),
        "heading": chunks.column("heading") if chunks else pa.array([], pa.string()),
        "page_start": chunks.column("page_start").cast(pa.int32()) if chunks else pa.array([], pa.int32()),
        "page_end": chunks.column("page_end").cast(pa.int32()) if chunks else pa.array([], pa.int32()),
        "length": pa.array(lengths.astype(np.int32)),
    })
    stats = {"N": n, "avgdl": avgdl, "k1": k1, "b": b, "n_terms": n_terms,
             "n_postings": int(tf.nnz), "analyzer": analyzer.settings(), "path_weight": path_weight}
    return term_table, postings, chunk_table, stats


def run(ctx) -> None:
    sec = ctx.section
    analyzer = Analyzer(stemmer=sec["stemmer"], stopwords=sec["stopwords"])
    columns = ["chunk_id", "doc_id", "heading", "path", "text", "page_start", "page_end"]
    batches = ctx.iter_upstream(columns, batch_size=BATCH)
    n_batches = -(-ctx.upstream_rows // BATCH)
    terms, postings, chunks, stats = build_index(
        batches, analyzer, sec["k1"], sec["b"], sec["path_weight"],
        progress=lambda it: ctx.progress(it, total=n_batches, desc="04 indexing", unit="batch"))
    meta = {"corpus": stats}
    ctx.write_table("04_chunks.parquet", chunks, meta)
    ctx.write_table("04_terms.parquet", terms, meta)
    ctx.write_table("04_postings.parquet", postings, meta)
    ctx.note(f"N={stats['N']:,} chunks, {stats['n_terms']:,} terms, {stats['n_postings']:,} postings, "
             f"avgdl={stats['avgdl']:.1f}, k1={stats['k1']}, b={stats['b']}, analyzer={stats['analyzer']}")


if __name__ == "__main__":
    raise SystemExit(stage_main(4, run, preview_columns=["chunk", "chunk_id", "heading", "length"]))
