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
the query's terms and add" (times each term's qtf, which only the query knows).  What a
chunk's terms are: its heading line counted `heading_weight` times (a query naming a
section finds passages that never repeat the section's name, and a heading, a few words
naming the subject, can outweigh a passing mention), then its text, plus its folder
names counted `path_weight` times (a heading line's attribute list `{ #id }` is markup
and is not indexed).  A weight counts in tf *and* in the length |c|, as if
the words were written out that many times (BM25F's field weighting), so the formula
above holds as written over those counts; `heading_weight: 1` is the plain formula.

The counting is per batch (`count_batch`: a batch in, its sparse counts out, against
batch-local word ids; the Vocabulary only keeps each batch's dictionary), and one global
step (`build_index_blocks` after the loop) maps words to terms and sums: the split a
map/reduce engine needs.

How it stays fast (a million passages in well under a minute, bench/scale.py): chunks
are cut into words a batch at a time on whole Arrow columns; each batch numbers its own
distinct words and is counted against those numbers (a sparse-matrix build: scipy sums
duplicate (chunk, word) pairs in C); only at the end is each distinct word of the corpus
analysed once (stopwords, stem) and the counts relabelled with term ids; the term-major
postings are one CSR -> CSC conversion, which is linear; impacts are computed and
written a block of terms at a time.  No Python loop ever runs per token.  Memory is the
postings (int32 chunk and tf, float64 impact), never the text: each batch's text is
dropped once it is counted.

On a cluster (`engine.kind: dask`) the counting is a map and the rest a reduce: each
partition of 03_chunks is counted on a worker (`count_partition`: the same counting, its
own vocabulary), `merge_counts` moves every partition's postings into the global term
order (chunks renumbered after the partitions before them: one run's order), and N,
avgdl, df, idf and the impacts are computed once, from the merged counts, so the index is
the one a single run builds.  The local engine counts the whole file as one partition.

What it deliberately does not do: compress postings, prune terms, or keep positions —
the index stays three plain tables anyone can open in pandas.
"""
from __future__ import annotations

import pipekit  # first: outside the virtualenv it says how to activate it, not a traceback
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy import sparse

from pipekit.analyzer import Analyzer
from pipekit.cli import stage_main
from pipekit.engine import StageFunction, iter_rows
from pipekit.headings import drop_heading_attribute_lists
from pipekit.malloc import release_freed_memory

INDEXED_COLUMNS = ["chunk_id", "doc_id", "heading", "path", "text", "page_start", "page_end"]
BATCH = 8192  # chunks analysed together: big enough that Arrow kernels dominate, small enough to stay flat
TAKE_BLOCK = 1 << 20  # postings renumbered at a time (8 MB of temporaries)


def indexed_runs(analyzer: Analyzer, batch: pa.RecordBatch,
                 heading_weight: int = 1) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """What the analyzer sees for each chunk: its heading line, then its text (as runs, with
    the chunk each came from and how many times it counts; cut separately, which spares
    copying every text once more).  A heading run counts `heading_weight` times: a chunk's
    heading names its subject in a few words, which its text need not repeat.  The text's
    heading lines lose their attribute lists (`{ #id .class }`): markup, not words a
    reader sees, as the heading column already has it."""
    words, rows = analyzer.runs(drop_heading_attribute_lists(batch.column("text")))
    weights = np.ones(len(words), dtype=np.int32)
    if heading_weight == 0:
        return words, rows, weights
    h_words, h_rows = analyzer.runs(batch.column("heading"))
    if len(h_words) == 0:
        return words, rows, weights
    return (pa.concat_arrays([words, h_words]), np.concatenate([rows, h_rows]),
            np.concatenate([weights, np.full(len(h_rows), heading_weight, dtype=np.int32)]))


def path_tokens(analyzer: Analyzer, paths: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Lower-cased runs of each chunk's folder names, with the chunk each belongs to."""
    folders = pc.list_flatten(paths)
    owner = np.asarray(pc.list_parent_indices(paths), dtype=np.int64)
    words, folder_of_word = analyzer.runs(folders)
    return words, owner[folder_of_word]


class Vocabulary:
    """Word ids batch by batch, turned into term ids once, at the end.

    Each batch numbers its own distinct words (one hash pass in Arrow) and is counted
    against those local ids.  Only when every batch is in are the local dictionaries
    merged and each distinct word of the corpus analysed once (length, stopwords, stem
    depend on the word alone): a million passages repeat a few hundred thousand words,
    and only those ever reach Python or Snowball.  Looking words up in a growing global
    table per batch instead cost as much again as the tokenizing.
    """

    def __init__(self, analyzer: Analyzer):
        self.analyzer = analyzer
        self.dictionaries: list[pa.Array] = []
        self.size = 0  # local ids handed out so far, over all batches

    def encode_batch(self, words: pa.Array) -> np.ndarray:
        """Batch-local word ids, offset so that they are unique across batches."""
        encoded = pc.dictionary_encode(words)
        ids = np.asarray(encoded.indices, dtype=np.int32) + np.int32(self.size)
        self.dictionaries.append(encoded.dictionary)
        self.size += len(encoded.dictionary)
        return ids

    def term_of_local(self) -> tuple[pa.Array, np.ndarray]:
        """The sorted terms, and for each local word id its term's index (-1: not a term)."""
        words = pc.dictionary_encode(pa.concat_arrays(self.dictionaries)) if self.dictionaries else None
        self.dictionaries = []
        if words is None or len(words.dictionary) == 0:
            return pa.array([], pa.string()), np.zeros(0, dtype=np.int32)
        terms = pc.dictionary_encode(self.analyzer.terms_of_words(words.dictionary))
        # Alphabetical term ids (Arrow sorts UTF-8 bytes, which is code-point order): a sorted table reads better.
        order = np.asarray(pc.sort_indices(terms.dictionary))
        rank = np.empty(len(order) + 1, dtype=np.int32)
        rank[order] = np.arange(len(order), dtype=np.int32)
        rank[-1] = -1  # where the analyzer dropped the word
        term_index = np.asarray(pc.fill_null(terms.indices, len(order)), dtype=np.int64)
        term_of_word = rank[term_index]
        return terms.dictionary.take(pa.array(order)), term_of_word[np.asarray(words.indices)]


def count_batch(vocab: Vocabulary, batch: pa.RecordBatch, path_weight: int, heading_weight: int = 1):
    """Word counts of one batch of chunks: rows are chunks, columns local word ids (CSR).

    A heading or path word adds its weight, not 1, to its count: the chunk's length is the
    sum of its counts, so the weights lengthen the chunk too, as repeating the words would
    (BM25F's way of weighting a field; the length normalisation then stays consistent)."""
    analyzer = vocab.analyzer
    words, rows, weights = indexed_runs(analyzer, batch, heading_weight)
    if path_weight > 0 and "path" in batch.schema.names:
        p_words, p_rows = path_tokens(analyzer, batch.column("path"))
        if len(p_words):
            words = pa.concat_arrays([words, p_words])
            rows = np.concatenate([rows, p_rows])
            weights = np.concatenate([weights, np.full(len(p_rows), path_weight, dtype=np.int32)])
    start = vocab.size
    cols = vocab.encode_batch(words) - np.int32(start)
    # COO -> CSR sums duplicate (chunk, word) entries: that sum *is* the word's frequency.
    shape = (batch.num_rows, max(vocab.size - start, 1))
    counts = sparse.coo_matrix((weights, (rows.astype(np.int32), cols)), shape=shape).tocsr()
    return counts.indices.astype(np.int32, copy=False) + np.int32(start), counts.data.astype(np.int32, copy=False), \
        np.diff(counts.indptr)


def merge_adjacent(indptr: np.ndarray, chunk: np.ndarray, tf: np.ndarray):
    """Sum postings of one term in one chunk that sit next to each other (term-major order).

    Two words of a chunk can be one term ("running", "runs" -> "run"); after the CSC
    conversion their postings are neighbours, since within a term chunks stay in order.
    """
    dup = np.zeros(len(chunk), dtype=bool)
    dup[1:] = chunk[1:] == chunk[:-1]
    dup[indptr[:-1][indptr[:-1] < len(chunk)]] = False  # a term's first posting starts a group
    if not dup.any():
        return indptr, chunk, tf
    first = np.flatnonzero(~dup)
    tf = np.add.reduceat(tf, first).astype(np.int32, copy=False)
    # A term's postings now start at the number of groups that begin before its old start
    # (a search in `first`, not a running count over every posting: two int64 copies less).
    return np.searchsorted(first, indptr).astype(indptr.dtype), chunk[first], tf


def idf_of(df: np.ndarray, n_chunks: int) -> np.ndarray:
    return np.log1p((n_chunks - df + 0.5) / (df + 0.5))


def impacts(idf_t: np.ndarray, tf: np.ndarray, norm_c: np.ndarray, k1: float) -> np.ndarray:
    """SPEC's BM25 term weight for postings with these idf, tf and chunk norms (float64)."""
    tfv = tf.astype(np.float64)
    return idf_t * tfv * (k1 + 1) / (tfv + norm_c)


def build_index(batches, analyzer: Analyzer, k1: float, b: float, path_weight: int, progress=iter,
                heading_weight: int = 1):
    """All of stage 04 without the I/O: chunk batches in, the three tables out."""
    terms, blocks, chunks, stats = build_index_blocks(batches, analyzer, k1, b, path_weight, progress,
                                                      heading_weight)
    postings = pa.concat_tables([POSTINGS_SCHEMA.empty_table(), *blocks])
    return terms, postings, chunks, stats


def build_index_blocks(batches, analyzer: Analyzer, k1: float, b: float, path_weight: int, progress=iter,
                       heading_weight: int = 1):
    """`build_index` with the postings as an iterator of tables, one block of terms each,
    so the float64 impacts of a million chunks never sit in memory all at once."""
    counts = count_chunks(batches, analyzer, path_weight, progress, heading_weight)
    return finish_index(counts, analyzer, k1, b, path_weight, heading_weight)


def count_partition(section: dict, part) -> Iterator[dict]:
    """The map step: the term counts of one partition of 03_chunks.parquet (a worker may
    run it; `section` is the plain config dict, which travels)."""
    analyzer = Analyzer(stemmer=section["stemmer"], stopwords=section["stopwords"])
    yield count_chunks(iter_rows(part, INDEXED_COLUMNS, batch_size=BATCH), analyzer, section["path_weight"],
                       heading_weight=section["heading_weight"])


def count_chunks(batches, analyzer: Analyzer, path_weight: int, progress=iter, heading_weight: int = 1) -> dict:
    """Term counts of a run of chunk batches, term-major: for each of the (sorted) terms
    its chunks (numbered from 0 in this run) and tf, plus each chunk's length."""
    vocab = Vocabulary(analyzer)
    indices, data, row_nnz, meta_cols = [], [], [], []
    for batch in progress(batches):
        ids, counts, nnz = count_batch(vocab, batch, path_weight, heading_weight)
        indices.append(ids)
        data.append(counts)
        row_nnz.append(nnz)
        meta_cols.append(batch.select(["chunk_id", "doc_id", "heading", "page_start", "page_end"]))
    # One statement each: a concatenation holds its parts and the whole, never two lists' worth.
    cat = lambda parts, dt: np.concatenate(parts).astype(dt, copy=False) if parts else np.zeros(0, dt)
    indices = cat(indices, np.int32)
    data = cat(data, np.int32)
    row_nnz = cat(row_nnz, np.int64)
    release_freed_memory()  # the loop's freed arrays: held, they raised the peak by ~20% (pipekit/malloc.py)
    n = len(row_nnz)
    terms, term_of_local = vocab.term_of_local()
    n_terms = len(terms)
    # Local word id -> term id, in place, a block at a time: one np.take over all of them
    # first copied the ids to int64 and buffered its output (+0.6 GB at 1M passages: the
    # stage's peak).  Every id is in range, so "clip" changes nothing but the buffering.
    for at in range(0, len(indices), TAKE_BLOCK):
        block = indices[at:at + TAKE_BLOCK]
        np.take(term_of_local, block, out=block, mode="clip")
    # Words the analyzer drops (stopwords, one letter) leave the matrix; rows shrink.
    is_term = indices >= 0
    if not is_term.all():
        kept = np.concatenate([[0], np.cumsum(is_term)])
        row_nnz = np.diff(kept[np.concatenate([[0], np.cumsum(row_nnz)])])
        indices = indices[is_term]
        data = data[is_term]
    del is_term
    nnz = len(indices)
    # int32 positions while they fit (scipy keeps int32 indices only if indptr is int32 too).
    idx_t = np.int32 if nnz < 2**31 - 1 else np.int64
    indptr = np.zeros(n + 1, dtype=idx_t)
    np.cumsum(row_nnz, out=indptr[1:])
    lengths = np.zeros(n, dtype=np.int64)
    nonempty = row_nnz > 0
    if nnz:
        lengths[nonempty] = np.add.reduceat(data, indptr[:-1][nonempty]).astype(np.int64)

    # Term-major order: CSR -> CSC moves each posting once (a counting sort, so within a
    # term the chunks stay in corpus order). The chunk-major copy is dropped right after.
    csr = sparse.csr_matrix((data, indices, indptr), shape=(n, max(n_terms, 1)), copy=False)
    del data, indices
    csc = csr.tocsc()
    del csr
    col_ptr, chunk_of, tf_of = merge_adjacent(csc.indptr, csc.indices, csc.data)
    del csc
    return {"terms": terms, "col_ptr": col_ptr[:n_terms + 1], "chunk": chunk_of, "tf": tf_of,
            "lengths": lengths, "meta": pa.Table.from_batches(meta_cols) if meta_cols else None}


def merge_counts(parts: list[dict]) -> dict:
    """The reduce step: the counts of consecutive partitions as if counted in one run.

    Terms are the sorted union; a term's postings are its postings in partition 1, then
    in partition 2, ... (chunks renumbered after the chunks before them), which is the
    corpus order one run gives.  Each partition's postings move once, to a slot computed
    from the global term offsets: linear, no sort."""
    if len(parts) == 1:
        return parts[0]
    names = pc.unique(pa.concat_arrays([p["terms"] for p in parts]))
    terms = names.take(pc.sort_indices(names))  # code-point order, as one run's vocabulary sorts
    df = np.zeros(len(terms), dtype=np.int64)
    global_of = []
    for p in parts:
        g = np.asarray(pc.index_in(p["terms"], value_set=terms), dtype=np.int64)
        df[g] += np.diff(p["col_ptr"])  # a term appears once per partition: no repeated index
        global_of.append(g)
    col_ptr = np.zeros(len(terms) + 1, dtype=np.int64)
    np.cumsum(df, out=col_ptr[1:])
    chunk = np.empty(int(col_ptr[-1]), dtype=np.int32)
    tf = np.empty(int(col_ptr[-1]), dtype=np.int32)
    free = col_ptr[:-1].copy()  # each term's next empty slot
    first_chunk = 0
    for p, g in zip(parts, global_of):
        local_df = np.diff(p["col_ptr"]).astype(np.int64)
        dest = np.repeat(free[g] - p["col_ptr"][:-1], local_df) + np.arange(len(p["chunk"]), dtype=np.int64)
        chunk[dest] = p["chunk"] + first_chunk
        tf[dest] = p["tf"]
        free[g] += local_df
        first_chunk += len(p["lengths"])
    metas = [p["meta"] for p in parts if p["meta"] is not None]
    return {"terms": terms, "col_ptr": col_ptr, "chunk": chunk, "tf": tf,
            "lengths": np.concatenate([p["lengths"] for p in parts]),
            "meta": pa.concat_tables(metas) if metas else None}


def finish_index(counts: dict, analyzer: Analyzer, k1: float, b: float, path_weight: int, heading_weight: int = 1):
    """N, avgdl, df and idf from the (merged) counts; the three tables, postings lazily."""
    terms, col_ptr, chunk_of, tf_of, lengths = (counts[k] for k in ("terms", "col_ptr", "chunk", "tf", "lengths"))
    n, n_terms, nnz = len(lengths), len(terms), len(chunk_of)
    df = np.diff(col_ptr).astype(np.int64)[:n_terms]
    idf = idf_of(df, n)
    avgdl = float(lengths.mean()) if n else 0.0
    # With no terms at all avgdl is 0; there are then no postings to normalise either.
    norm = k1 * (1 - b + b * lengths / avgdl) if avgdl > 0 else np.zeros(n)

    def posting_blocks(target: int = 1 << 21):
        t0 = 0
        while t0 < n_terms:
            # Whole terms per block, about `target` postings each (one very common term alone).
            t1 = int(np.searchsorted(col_ptr, col_ptr[t0] + target, side="right"))
            t1 = min(max(t1 - 1, t0 + 1), n_terms)
            lo, hi = int(col_ptr[t0]), int(col_ptr[t1])
            term_of = np.repeat(np.arange(t0, t1, dtype=np.int32), df[t0:t1])
            chunk = chunk_of[lo:hi]
            tf = tf_of[lo:hi]
            yield pa.table({
                "term_id": pa.array(term_of, pa.int32()),
                "chunk": pa.array(chunk.astype(np.int32, copy=False)),
                "tf": pa.array(tf.astype(np.int32, copy=False)),
                "impact": pa.array(impacts(idf[term_of], tf, norm[chunk], k1), pa.float64()),
            })
            t0 = t1

    term_table = pa.table({
        "term_id": pa.array(np.arange(n_terms, dtype=np.int32)),
        "term": terms,
        "df": pa.array(df.astype(np.int32)),
        "idf": pa.array(idf, pa.float64()),
    })
    chunks = counts["meta"]
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
             "n_postings": int(nnz), "analyzer": analyzer.settings(), "path_weight": path_weight,
             "heading_weight": heading_weight}
    return term_table, posting_blocks(), chunk_table, stats


POSTINGS_SCHEMA = pa.schema([("term_id", pa.int32()), ("chunk", pa.int32()), ("tf", pa.int32()),
                             ("impact", pa.float64())])


def run(ctx) -> None:
    sec = ctx.section
    analyzer = Analyzer(stemmer=sec["stemmer"], stopwords=sec["stopwords"])
    # Map: counts per partition (the local engine: one, the whole file); reduce: here.
    parts = ctx.map_partitions(StageFunction(4, "count_partition", (sec,)), ctx.upstream_parts(few=True),
                               desc="04 counting")
    terms, postings, chunks, stats = finish_index(merge_counts(list(parts)), analyzer,
                                                  sec["k1"], sec["b"], sec["path_weight"], sec["heading_weight"])
    meta = {"corpus": stats}
    ctx.write_table("04_chunks.parquet", chunks, meta)
    ctx.write_table("04_terms.parquet", terms, meta)
    with ctx.sink("04_postings.parquet", POSTINGS_SCHEMA, meta) as sink:
        for block in postings:
            sink.write(block)
    ctx.note(f"N={stats['N']:,} chunks, {stats['n_terms']:,} terms, {stats['n_postings']:,} postings, "
             f"avgdl={stats['avgdl']:.1f}, k1={stats['k1']}, b={stats['b']}, heading_weight={stats['heading_weight']}, "
             f"analyzer={stats['analyzer']}")


if __name__ == "__main__":
    raise SystemExit(stage_main(4, run, preview_columns=["chunk", "chunk_id", "heading", "length"]))
