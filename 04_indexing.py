"""Stage 04 — indexing: count every term of every chunk, and BM25's statistics.

Reads  `03_chunks.parquet`.
Writes three tables that together are the index, each carrying the corpus statistics
(N, avgdl, k1, b, the analyzer settings) in its metadata:
- `04_terms.parquet`    term_id, term, df, idf            (one row per distinct term)
- `04_postings.parquet` term_id, chunk, tf                (one row per term in a chunk,
                        sorted by term then chunk: a term's postings are one slice —
                        within each shard by document, when indexing.shard_chunks cuts
                        the corpus into several: pipekit/index/layout.py)
- `04_chunks.parquet`   chunk, chunk_id, doc_id, heading, page_start, page_end, page_label_start,
                        page_label_end (what a citation prints), length
(On a cluster the chunks and the postings are folders of part files, read in name order.)
With `indexing.dense_model` set, also `04_vectors.parquet`: chunk, vector (one L2-normalised
float32 vector per chunk, its heading trail and text embedded by the model, pipekit/index/dense.py),
windows (a chunk longer than a model folder's window: its later windows' vectors), which
stage 05 fuses with BM25; the model's name and file hashes are recorded with the rest.

The idea: 04 counts, 05 scores.  BM25's score is a sum over query terms of a number that
depends only on the term and the chunk (SPEC's formula):

    weight(t, c) = idf(t) · tf·(k1+1) / (tf + k1·(1 − b + b·|c|/avgdl))
    idf(t)       = ln(1 + (N − df + 0.5) / (df + 0.5))

and everything it is made of is counted here: tf (the postings), |c| (04_chunks' length),
df and idf (04_terms), N and avgdl (the metadata).  Retrieval is then "gather the postings
of the query's terms, weigh and add" (times each term's qtf, which only the query knows):
stage 05 computes the weight as it sums (pipekit/retrieve/bm25.py), as Lucene and tantivy
do.  Stored here, a float64 a posting, it was the largest thing this stage wrote and stage
05 held, and one added file moved avgdl and with it every stored weight.  What a
chunk's terms are: its heading line counted `heading_weight` times (a query naming a
section finds passages that never repeat the section's name, and a heading, a few words
naming the subject, can outweigh a passing mention), then its text, plus its folder
names counted `path_weight` times (a heading line's attribute list `{ #id }` is markup
and is not indexed).  A weight counts in tf *and* in the length |c|, as if
the words were written out that many times (BM25F's field weighting), so the formula
above holds as written over those counts; `heading_weight: 1` is the plain formula.

The counting is per batch (`count_batch`: a batch in, its sparse counts out, against
word ids of its own, so two batches are counted at once on two threads; the Vocabulary
numbers each batch's dictionary in the corpus's word list beside them, a hash table kept
between batches: pipekit/index/wordtable.py; where the compiled loops count, each thread
keeps its own words from batch to batch too, and a batch's dictionary is only the words new
to its thread: compiled.KeptWords), and one step
at the end of a partition (`count_chunks`) maps words to terms and sums: the split a
map/reduce engine needs.

How it stays fast (a million passages in well under a minute, bench/scale.py): chunks
are cut into words a batch at a time on whole Arrow columns; each batch numbers its own
distinct words and its tokens are kept against those numbers, in chunk order (a word's
repeats in a chunk are summed when the batch turns term-major: pipekit/index/counting.py,
scipy's counting sort in C, or NumPy's for a handful of chunks so that a small rerun does
not load scipy); each distinct word of the corpus is
analysed once (stopwords, stem: pipekit/index/vocabulary.py), and at the end each batch's
counts are relabelled with term ids and turned term-major on their own (two batches at
once); a range of terms is put together from every batch when it is written.  No Python loop ever runs per token.  Memory is not the postings: each
batch's counts wait in a spill file in the output folder (pipekit/index/spill.py), as a
search engine's indexer flushes its segments; what is held is the vocabulary, a few
numbers a chunk and the term range being written.  Never the text: each batch's text is
dropped once it is counted, and what 04_chunks cites is read again from 03_chunks when it
is written.

The stage is a map, a small reduce and a shuffle (`run`), whatever the engine:
1. map: each partition of 03_chunks is counted (`count_partition`, its own vocabulary)
   where it runs, and its counts stay there; only its vocabulary travels (`vocabulary`:
   its terms, their df in it, its chunks' lengths: a few MB, no postings);
2. reduce (`Plan`): the sorted union of the terms, df, N, avgdl, idf, term ranges of
   about equal postings, and the shards by document (`layout.plan_shards`: ranges of whole documents
   of at least indexing.shard_chunks chunks, which stage 05 on a cluster holds apart);
3. each partition writes its rows of 04_chunks (`chunk_rows`; locally on a thread of its own
   while the postings are written: in line it was one core's work); for each shard by document
   in turn, each term range takes every partition's slice of its terms and of the shard's
   chunks (`term_slice`), merges them in corpus order (`merge_slices`) and writes its
   postings (`shard_postings`).
The local engine has one partition and one term range, so nothing is merged or moved; on
a cluster (`engine.kind: dask`) each partition's counts stay in a worker's memory and each
term range of each shard is a part file of 04_postings.parquet, written by a worker: no
posting passes through the client, and the index is the one a single run builds, row
for row.

What it deliberately does not do: compress postings, prune terms, or keep positions —
the index stays three plain tables anyone can open in pandas.
"""
from __future__ import annotations

import pipekit  # first: outside the virtualenv it says how to activate it, not a traceback
if __name__ == "__main__":  # (before pyarrow loads) run alone, Arrow on glibc's heap, as run_pipeline's child has it:
    # Arrow's own mimalloc faulted in fresh huge pages here, 0.5-1.4 s of system time at 200k passages
    # and 1.3-1.6 s at a million, and a 45 MB higher peak at 200k (bench/README.md, branch v04)
    from pipekit.run.malloc import arrow_on_malloc

    arrow_on_malloc()
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipekit.index import compiled, counting
from pipekit.index.counting import merge_slices, term_slice  # noqa: F401 (term_slice: a StageFunction by name)
from pipekit.index import dense
from pipekit.index import layout
from pipekit.index.spill import Spill, SpilledPiece
from pipekit.index.vocabulary import Vocabulary
from pipekit.run import io
from pipekit.index.analyzer import Analyzer
from pipekit.cli import stage_main
from pipekit.run.engine import StageFunction, advance, drain, iter_rows, map_ahead, progress_bar, watched
from pipekit.chunk.headings import drop_heading_attribute_lists
from pipekit.run.incremental import reused_counts
from pipekit.index.link_text import drop_link_destinations
from pipekit.run.malloc import few_arenas, release_freed_memory

# What the counting reads of 03_chunks: the fields it counts (indexed_fields) and doc_id (the shard
# plan's); what 04_chunks cites is read again when it is written (chunk_rows).  The cited columns
# read here too, for nothing, were 0.4 s of CPU at a million passages.
INDEXED_COLUMNS = ["doc_id", "heading", "path", "text"]
CITED = ["chunk_id", "doc_id", "heading", "page_start", "page_end", "page_label_start", "page_label_end",
         "content_hash"]
BATCH = 8192  # chunks analysed together: big enough that Arrow kernels dominate, small enough to stay flat
RANGE_POSTINGS = 1 << 20  # postings of a term range put together at once by the local engine (~6 MB):
# at 2M two ranges in flight raised the peak at 200k passages by ~70 MB, for 0.2 s less CPU at 1M
COUNTING_THREADS = 2  # batches counted at once by the local engine (count_chunks)


def indexed_fields(batch: pa.RecordBatch, path_weight: int, heading_weight: int = 1) -> list[tuple]:
    """What the analyzer sees for each chunk, field by field in the order its words are
    counted: (strings, the chunk of each or None for one a chunk, how many times a word of
    it counts).  The text, then the heading line, then the folder names: a heading's run
    counts `heading_weight` times (a chunk's heading names its subject in a few words, which
    its text need not repeat), a folder's `path_weight` times.  The text's heading lines
    lose their attribute lists (`{ #id .class }`): markup, not words a reader sees, as the
    heading column already has it; and its links are their text
    (pipekit/index/link_text.py): the words of `[text](url "title")`'s address and title are
    not words of the passage.  (Fields are cut separately, which spares copying every text
    once more; the heading's words are appended after the text's and find their chunk's
    place when the tokens are put in chunk order.)"""
    fields = [(drop_link_destinations(drop_heading_attribute_lists(batch.column("text"))), None, 1)]
    if heading_weight != 0:
        fields.append((batch.column("heading"), None, heading_weight))
    if path_weight > 0 and "path" in batch.schema.names:
        paths = batch.column("path")
        fields.append((pc.list_flatten(paths), np.asarray(pc.list_parent_indices(paths), dtype=np.int64),
                       path_weight))
    return fields


def indexed_runs(analyzer: Analyzer, fields: list[tuple]) -> tuple[pa.Array, np.ndarray, np.ndarray | None]:
    """The fields' runs end to end, with the chunk each came from and how many times it
    counts: None where every run counts once (no field weighing more than 1 gave a run)."""
    words, rows, weights = [], [], []
    for strings, owner, weight in fields:
        w, r = analyzer.runs(strings)
        words.append(w)
        rows.append(r if owner is None else owner[r])
        weights.append(weight)
    if not any(w != 1 and len(r) for w, r in zip(weights, rows)):
        return pa.concat_arrays(words), np.concatenate(rows), None
    return (pa.concat_arrays(words), np.concatenate(rows),
            np.concatenate([np.full(len(r), w, dtype=np.int32) for w, r in zip(weights, rows)]))


def count_batch(analyzer: Analyzer, batch: pa.RecordBatch, path_weight: int, heading_weight: int = 1, kept=None):
    """Word counts of one batch of chunks: its distinct words (an Arrow dictionary), then
    rows are chunks, columns the words' numbers in that dictionary (CSR: the column of
    each entry, its count, the entries per row; a word said twice in a chunk is two
    entries, summed when the batch's postings are made).  A function of the batch alone, so
    batches can be counted on two threads at once.

    A heading or path word adds its weight, not 1, to its count: the chunk's length is the
    sum of its counts, so the weights lengthen the chunk too, as repeating the words would
    (BM25F's way of weighting a field; the length normalisation then stays consistent).
    Counts None: every token counts 1 (no weight above 1), and none is kept (4 bytes a token
    in the batch, 2 spilled and read back: 0.13 GB of the spill file at a million passages)."""
    fields = indexed_fields(batch, path_weight, heading_weight)
    # The three steps below in one compiled pass over the bytes, the same arrays (numba:
    # pipekit/index/compiled.py; None while it loads, where it cannot, or for a small batch).
    # `kept`: each counting thread keeps its table, and a batch's dictionary is only the words
    # new to its thread (compiled.KeptWords).
    counted = compiled.count_words(fields, analyzer.capitals, batch.num_rows, kept=kept)
    if counted is not None:
        return counted
    words, rows, weights = indexed_runs(analyzer, fields)  # cut
    encoded = pc.dictionary_encode(words)  # numbered: one hash pass numbers the batch's distinct words
    cols = np.asarray(encoded.indices, dtype=np.int32)
    # Counted: one entry a token, in chunk order (a CSR whose repeats are not summed yet): a
    # word's count in a chunk is summed once it is a term (counting.merge_adjacent), as two words
    # that make one term are; summed here too, through scipy, it cost 2.6 s at a million passages.
    ids, counts, nnz = counting.by_row(rows, cols, weights, batch.num_rows)
    return encoded.dictionary, ids, counts, nnz


def idf_of(df: np.ndarray, n_chunks: int) -> np.ndarray:
    return np.log1p((n_chunks - df + 0.5) / (df + 0.5))


def count_partition(section: dict, threads: int, pieces: bool, spill_to: str | None, part) -> dict:
    """The map step: the term counts of one partition of 03_chunks.parquet (a worker may
    run it; `section` is the plain config dict, which travels), on `threads` threads.
    What 04_chunks cites is read again from the partition when 04_chunks is written
    (`chunk_rows`): held through the counting, those columns were 218 MB of stage 04's
    peak at a million passages; only doc_id stays (the shard plan needs it first).
    `spill_to`: a folder where the counts wait on disk (pipekit/index/spill.py)."""
    analyzer = Analyzer(stemmer=section["stemmer"], stopwords=section["stopwords"],
                        single_letters=section["single_letters"])
    counts = count_chunks(iter_rows(part, INDEXED_COLUMNS, batch_size=BATCH), analyzer, section["path_weight"],
                          heading_weight=section["heading_weight"], threads=threads, cited=["doc_id"],
                          pieces=pieces, spill=Spill(spill_to) if spill_to and pieces else None)
    counts["source"] = part
    return counts


def count_chunks(batches, analyzer: Analyzer, path_weight: int, progress=iter, heading_weight: int = 1,
                 threads: int = COUNTING_THREADS, cited: list[str] = CITED, pieces: bool = False,
                 spill: Spill | None = None) -> dict:
    """Term counts of a run of chunk batches, term-major: for each of the (sorted) terms
    its chunks (numbered from 0 in this run) and tf ("col_ptr", "chunk", "tf"), plus each
    chunk's length, and the batches' `cited` columns ("meta": what 04_chunks prints, when
    nobody reads them again).  With `pieces`, the postings stay as each batch's
    (counting.Piece, "pieces") with each term's df and each chunk's number of postings
    ("nnz"): `term_slice` puts a range of terms together when it is written, so the
    corpus's postings are never held twice (as the batches' and as one table).  With a
    `spill` file too, each batch's counts wait in it, not in memory, from the moment they
    are counted (its word counts) and converted (its postings): what is held then grows
    with the vocabulary and the chunks, not with the postings (pipekit/index/spill.py)."""
    if not pieces:
        spill = None  # (one table of the corpus is made in memory anyway)
    # Each batch's words are numbered in the corpus's word list a few batches at a time,
    # beside the counting (pipekit/index/vocabulary.py), each new word analysed once.
    vocab = Vocabulary(analyzer, spill=spill)
    parts, meta_cols = deque(), []
    kept = compiled.KeptWords()  # each counting thread's words, kept between its batches

    # Two batches counted at once: Arrow's kernels and NumPy's loops let go of the GIL,
    # and on one thread stage 04 left the second core idle while the first cut words.
    def count(batch):
        dictionary, ids, counts, nnz = count_batch(analyzer, batch, path_weight, heading_weight, kept)
        counts = counting.narrow_counts(counts)  # 2 bytes a count while they fit (None: all 1)
        if spill is not None:
            ids, counts = spill.put(ids), None if counts is None else spill.put(counts)
        return batch, dictionary, ids, counts, nnz

    for batch, dictionary, ids, counts, nnz in map_ahead(count, progress(batches), threads):
        advance(batch.num_rows)  # the local engine's bar (a cluster counts partitions instead)
        parts.append((vocab.add(dictionary), ids, counts, nnz))
        meta_cols.append(batch.select([c for c in cited if c in batch.schema.names]))
    kept = None  # (the closure reads it: the threads' tables freed here, where the counting ran on this thread)
    terms = vocab.finish()
    n_terms = len(terms)
    # Each batch into term space and term-major order on its own (two at once), each
    # batch's word ids freed as it is converted.  One CSR of the corpus (every batch
    # concatenated: parts and whole alive at once) and its CSC side by side were 2.4
    # copies of the postings on one core (bench/README.md, session 20).
    firsts = np.concatenate([[0], np.cumsum([len(p[3]) for p in parts])]).astype(np.int64)

    def taken():
        for first in firsts[:-1].tolist():
            yield first, parts.popleft()

    def convert(item):
        first, (k, ids, counts, nnz) = item
        if spill is not None:
            # (read for the last time: their pages go back at once, for the postings put next)
            ids, counts = spill.take(ids), None if counts is None else spill.take(counts)
        # (what the reduce needs of the batch, its terms' df and its chunks' numbers of postings,
        # added to the tally as it turns term-major, before its postings go to the spill file)
        piece, n = counting.batch_postings(vocab.term_of_batch(k), ids, counts, nnz, n_terms, first, tally)
        return (SpilledPiece(spill, piece) if spill is not None else piece), n

    tally = counting.Tally(n_terms, int(firsts[-1])) if pieces else None
    batch_pieces, lengths = deque(), []
    for piece, n in map_ahead(convert, taken(), threads):
        batch_pieces.append(piece)
        lengths.append(n)
    vocab = None  # (the closure above reads it: freed, not deleted)
    # The counting's freed memory, handed back once, between the phases: not batch by batch
    # (each batch's temporaries are the next batch's, and handed back they were faulted in
    # again: 580-620k page faults at a million passages, 119-170k this way), but here, so
    # the write does not hold the counting's holes under its peak (+25-35 MB kept to the end).
    release_freed_memory()
    lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    counts = {"terms": terms, "lengths": lengths,
              "meta": pa.Table.from_batches(meta_cols) if meta_cols else None}
    if pieces:  # kept by batch: each term range of the postings is put together when it is written
        return {**counts, "pieces": list(batch_pieces), "df": tally.df, "nnz": tally.per_chunk}
    col_ptr, chunk_of, tf_of = counting.place(n_terms, batch_pieces)
    return {**counts, "col_ptr": col_ptr, "chunk": chunk_of, "tf": tf_of}


def vocabulary(counts: dict) -> dict:
    """What the reduce needs of a partition's counts: its terms, each one's df in the
    partition, and its chunks' lengths — a few MB, never the postings; and where its
    documents start and its chunks' numbers of postings, which place the shards."""
    df = counts["df"] if "pieces" in counts else np.diff(counts["col_ptr"])
    return {"terms": counts["terms"], "df": df, "lengths": counts["lengths"], **layout.chunk_facts(counts)}


class Plan:
    """The reduce: corpus statistics from every partition's vocabulary, and how the
    postings are cut into shards.

    Terms are the sorted union of the partitions' terms (code-point order, as one run's
    vocabulary sorts); df the sum of the partitions' df; N, avgdl and each chunk's
    length from all the partitions' lengths.  Chunks are numbered in partition order, so
    partition p's chunks start after the chunks of the partitions before it: one run's
    numbering.  Shard s holds terms [bounds[s], bounds[s+1]), whole terms of about equal
    postings: each is written by the worker that merges it, from every partition's
    slice of that term range."""

    def __init__(self, vocabs: list[dict], k1: float, b: float, n_shards: int = 1):
        if len(vocabs) == 1:  # one partition (the local engine): its terms are the terms
            self.terms = vocabs[0]["terms"]
            self.global_ids = [np.arange(len(self.terms), dtype=np.int64)]
        else:
            names = pc.unique(pa.concat_arrays([v["terms"] for v in vocabs]))
            self.terms = names.take(pc.sort_indices(names))
            # Both sides sorted the same way, so each partition's global ids increase.
            self.global_ids = [np.asarray(pc.index_in(v["terms"], value_set=self.terms), dtype=np.int64)
                               for v in vocabs]
        self.df = np.zeros(len(self.terms), dtype=np.int64)
        for g, v in zip(self.global_ids, vocabs):
            self.df[g] += v["df"]  # a term appears once per partition: no repeated index
        self.sizes = sizes = [len(v["lengths"]) for v in vocabs]
        self.first_chunk = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        lengths = np.concatenate([v["lengths"] for v in vocabs]) if vocabs else np.zeros(0, np.int64)
        n = self.n_chunks = len(lengths)
        self.idf = idf_of(self.df, n)
        self.k1, self.b = k1, b
        self.avgdl = float(lengths.mean()) if n else 0.0
        col_ptr = np.concatenate([[0], np.cumsum(self.df)])
        cuts = np.searchsorted(col_ptr, np.linspace(0, col_ptr[-1], max(n_shards, 1) + 1)[1:-1])
        self.bounds = np.unique(np.concatenate([[0], cuts, [len(self.terms)]])).astype(np.int64)
        if len(self.bounds) == 1:  # no terms: still one (empty) shard, so the output exists
            self.bounds = np.array([0, 0], dtype=np.int64)

    def shard(self, s: int, p: int) -> tuple[int, int]:
        """Partition p's local terms that fall in shard s: a range, as both are sorted."""
        lo, hi = np.searchsorted(self.global_ids[p], self.bounds[s:s + 2])
        return int(lo), int(hi)

    def term_table(self) -> pa.Table:
        return pa.table({
            "term_id": pa.array(np.arange(len(self.terms), dtype=np.int32)),
            "term": self.terms,
            "df": pa.array(self.df.astype(np.int32)),
            "idf": pa.array(self.idf, pa.float64()),
        })


def shard_postings(shard: tuple) -> Iterator[pa.Table]:
    """One shard of 04_postings.parquet: its term range merged from every partition's
    slice, a block of whole terms (about 2M postings) at a time.  Counts only: the BM25
    weight of a posting is stage 05's to compute, from its tf, its term's idf and its
    chunk's length (pipekit/retrieve/bm25.py)."""
    t0, n_terms, ids, slices = shard
    # (a slice still to be made, on the local engine: `run` defers it to here)
    col_ptr, chunk_of, tf_of = merge_slices(n_terms, ids, [s() if callable(s) else s for s in slices])
    df = np.diff(col_ptr)
    target, u = 1 << 21, 0
    while u < n_terms:
        # Whole terms per block, about `target` postings each (one very common term alone).
        v = int(np.searchsorted(col_ptr, col_ptr[u] + target, side="right"))
        v = min(max(v - 1, u + 1), n_terms)
        lo, hi = int(col_ptr[u]), int(col_ptr[v])
        term_of = np.repeat(np.arange(u, v, dtype=np.int32), df[u:v])
        chunk, tf = chunk_of[lo:hi], tf_of[lo:hi]
        term_of += np.int32(t0)  # (in place: a block's temporaries are the write's peak at 200k passages)
        yield pa.table({
            "term_id": pa.array(term_of),
            "chunk": pa.array(chunk.astype(np.int32, copy=False)),
            "tf": pa.array(tf.astype(np.int32, copy=False)),
        })
        del term_of
        u = v


def ranges_postings(shards: list) -> Iterator[pa.Table]:
    """The local engine's term ranges in order (`shard_postings` of each), two made at once:
    putting a range together is NumPy passes that let go of the GIL, and made one at a time
    they left the second core to the Parquet writer alone."""
    for tables in map_ahead(lambda shard: list(shard_postings(shard)), shards, COUNTING_THREADS):
        yield from tables


def chunk_rows(part: tuple) -> Iterator[pa.Table]:
    """A partition's rows of 04_chunks.parquet, given its first chunk's number and its counts:
    their cited columns as counted, or read again from 03_chunks (pipekit/index/layout.py)."""
    return layout.chunk_rows(part, CITED, BATCH)


def vector_rows(spec: str, heading_weight: int, previous: str | None, windows: bool, part: tuple) -> Iterator[tuple]:
    """A partition's rows of 04_vectors.parquet, given its first chunk's number, its rows of
    03_chunks and its blocks' sizes: each chunk's heading trail and text embedded by the
    model (pipekit/index/dense.py), one row per chunk (a long chunk's later windows in it), in chunk order; blocks of
    chunks the `previous` vectors already hold are copied from them."""
    first_chunk, rows, sizes = part
    batches = iter_rows(rows, ["heading", "text"], batch_size=BATCH)
    return dense.vector_rows(spec, batches, first_chunk, sizes, heading_weight, previous, windows)


def shard_of(plan: Plan, s: int, parts: list, slice_of=None, shard: list | None = None) -> tuple:
    """Term range s's argument: its first term, its number of terms, each partition's terms'
    positions in it, and each partition's slice (`slice_of(fn, counts)`: made
    where the counts are, on a cluster) — of the chunks of `shard` ([c0, c1, ...] of
    pipekit/index/layout.py; None: all), from the partitions that hold some of them."""
    t0, t1 = int(plan.bounds[s]), int(plan.bounds[s + 1])
    ids, slices = [], []
    for p, counts in enumerate(parts):
        first, n = int(plan.first_chunk[p]), int(plan.sizes[p])
        chunks = None if shard is None else layout.overlap(shard[0], shard[1], first, n)
        if shard is not None and (chunks is None or chunks == (0, n)):
            if chunks is None:
                continue  # none of this partition's chunks are in the shard
            chunks = None
        lo, hi = plan.shard(s, p)
        ids.append(plan.global_ids[p][lo:hi] - t0)
        fn = StageFunction(4, "term_slice", (lo, hi, first, chunks))
        slices.append(slice_of(fn, counts) if slice_of else fn(counts))
    return t0, t1 - t0, ids, slices


def corpus_stats(plan: Plan, analyzer: Analyzer, b: float, path_weight: int, heading_weight: int) -> dict:
    return {"N": plan.n_chunks, "avgdl": plan.avgdl, "k1": plan.k1, "b": b, "n_terms": len(plan.terms),
            "n_postings": int(plan.df.sum()), "analyzer": analyzer.settings(), "path_weight": path_weight,
            "heading_weight": heading_weight}


def index_in_process(parts: list[dict], analyzer: Analyzer, k1: float, b: float, path_weight: int,
                     heading_weight: int = 1, n_shards: int = 1):
    """Map, reduce and shards all here, from partitions' counts: the three tables (and
    the stats).  What a cluster does, in one process: tests compare the two."""
    plan = Plan([vocabulary(c) for c in parts], k1, b, n_shards)
    chunks = pa.concat_tables([CHUNKS_SCHEMA.empty_table()] + [
        t for p, c in enumerate(parts) for t in chunk_rows((int(plan.first_chunk[p]), c))])
    blocks = [t for s in range(len(plan.bounds) - 1)
              for t in shard_postings(shard_of(plan, s, parts))]
    postings = pa.concat_tables([POSTINGS_SCHEMA.empty_table(), *blocks])
    return plan.term_table(), postings, chunks, corpus_stats(plan, analyzer, b, path_weight, heading_weight)


def build_index(batches, analyzer: Analyzer, k1: float, b: float, path_weight: int, progress=iter,
                heading_weight: int = 1):
    """All of stage 04 without the I/O: chunk batches in, the three tables out."""
    counts = count_chunks(batches, analyzer, path_weight, progress, heading_weight)
    return index_in_process([counts], analyzer, k1, b, path_weight, heading_weight)


POSTINGS_SCHEMA = pa.schema([("term_id", pa.int32()), ("chunk", pa.int32()), ("tf", pa.int32())])
CHUNKS_SCHEMA = pa.schema([("chunk", pa.int32()), ("chunk_id", pa.string()), ("doc_id", pa.string()),
                           ("heading", pa.string()), ("page_start", pa.int32()), ("page_end", pa.int32()),
                           ("page_label_start", pa.string()), ("page_label_end", pa.string()),
                           ("length", pa.int32()), ("content_hash", pa.string())])


def meta_model(ctx) -> str:
    """The model's name as stage 04 records it (pipekit/index/dense.py identity)."""
    return (ctx.inputs.get("external") or {}).get("model", "?")


def write_postings(ctx, engine, plan: Plan, stats: dict, counts: list, meta: dict) -> None:
    """04_terms, then 04_postings: shard by shard (one: the whole corpus), each in term ranges."""
    ctx.write_table("04_terms.parquet", plan.term_table(), meta)
    one = len(stats["shards"]) == 1
    # Here a range's slice is made when its postings are written, not all ranges' first.
    slice_of = (lambda fn, c: partial(fn, c)) if engine.kind == "local" else engine.submit
    shards = [shard_of(plan, s, counts, slice_of, None if one else shard)
              for shard in stats["shards"] for s in range(len(plan.bounds) - 1)]
    write = StageFunction(4, "shard_postings", ())
    if engine.kind == "local":  # the term ranges, two made at once, as one partition (one file)
        write, shards = StageFunction(4, "ranges_postings", ()), [shards]
    drain(ctx.write_partitions("04_postings.parquet", POSTINGS_SCHEMA, write, shards, desc="04 postings", meta=meta))


def run(ctx) -> None:
    sec, engine = ctx.section, ctx.engine
    few_arenas(COUNTING_THREADS)  # one malloc heap a core, not one a thread (pipekit/run/malloc.py)
    # Freed arrays stay in malloc's heaps for the next batch, handed back only between the
    # counting and the write (count_chunks) and at the end: memory touched afresh is what costs
    # here (a page fault, in a virtual machine the host's too).  Where the process ends with
    # the stage, glibc's mmap threshold is raised too, so a large buffer is reused, not mapped
    # anew each batch (ctx.keep_freed_memory; bench/README.md, branch faults).
    ctx.keep_freed_memory()
    analyzer = Analyzer(stemmer=sec["stemmer"], stopwords=sec["stopwords"], single_letters=sec["single_letters"])
    k1, b = sec["k1"], sec["b"]
    if sec["dense_model"] is not None:
        dense.model_files(sec["dense_model"])  # a missing or unreadable model stops the stage before any work
    parts = ctx.upstream_parts(few=True)  # the local engine: one, the whole file
    # Map: each partition is counted where it runs and its counts stay there (on a
    # cluster, in that worker's memory); only its vocabulary and lengths come here.  A
    # rerun counts only the chunks of changed documents: the others' counts are the
    # previous index's, renumbered, with the new chunks' put in their places: one partition
    # (pipekit/run/incremental.py, merged_counts).
    # A cluster's worker process is one core (engine.py starts one thread a worker), so its
    # partitions are counted on one thread: two there only oversubscribed the machine.
    threads = COUNTING_THREADS if engine.kind == "local" else 1
    # The local engine's counts wait in a file in the output folder (pipekit/index/spill.py), not
    # in memory: there they made the stage's peak grow with the postings.  (A cluster's workers
    # keep theirs in memory: that is where a cluster holds them.)
    spill_to = str(ctx.output_dir) if engine.kind == "local" else None
    count = StageFunction(4, "count_partition", (sec, threads, True, spill_to))
    with watched(ctx.upstream_rows if engine.kind == "local" else 0, "04 counting", "chunk", ctx.quiet):
        # (a rerun merges its new chunks' counts into the previous index's as one table)
        counts, reused = reused_counts(ctx, StageFunction(4, "count_partition", (sec, threads, False, None)), CITED)
        counts = counts or [engine.submit(count, part) for part in parts]
    vocabs = engine.fetch([engine.submit(StageFunction(4, "vocabulary"), c) for c in counts],
                          progress_bar(ctx.quiet, "04 counting"))
    # Reduce: N, avgdl, df and idf, here, from a few MB; then the postings, shard by shard,
    # each merged and weighted by the worker that writes it (one shard here, when local).
    # The local engine's postings are put together a term range of ~RANGE_POSTINGS at a
    # time (term_slice), so only one range is ever held besides the batches' counts.
    n_postings = sum(int(v["df"].sum()) for v in vocabs)
    ranges = len(parts) if engine.kind != "local" else max(len(parts), -(-n_postings // RANGE_POSTINGS))
    plan = Plan(vocabs, k1, b, n_shards=ranges)
    stats = corpus_stats(plan, analyzer, b, sec["path_weight"], sec["heading_weight"])
    # Shards by document (pipekit/index/layout.py): stage 05 on a cluster holds them apart.
    stats["shards"] = layout.plan_shards(vocabs, plan.first_chunk, sec["shard_chunks"])
    meta = {"corpus": stats}
    first = plan.first_chunk.tolist()
    # Each written table is dropped once written: list() of them held every table to the
    # end, and for the postings that was the whole index again (20 bytes a posting: 0.7 GB
    # of stage 04's 1.5 GB peak at a million passages, bench/README.md).
    chunk_file = partial(drain, ctx.write_partitions("04_chunks.parquet", CHUNKS_SCHEMA, StageFunction(4, "chunk_rows"),
                                                     [(first[p], c) for p, c in enumerate(counts)], desc="04 chunks",
                                                     meta=meta))
    # Locally, 04_chunks (read again from 03_chunks, then written) on a thread of its own while
    # the postings are put together and written: in line it was one core's work with the
    # other idle, 1.2 s at a million passages (bench/README.md, branch s04g).
    with ThreadPoolExecutor(1, thread_name_prefix="04-chunks") as beside:
        chunks_done = beside.submit(chunk_file) if engine.kind == "local" else None
        if chunks_done is None:
            chunk_file()
        write_postings(ctx, engine, plan, stats, counts, meta)
        if chunks_done is not None:
            chunks_done.result()  # (its error, if it failed)
    # The counts, freed and handed back: run_pipeline.py runs stage 05 in this process next,
    # and the counting threads' malloc arenas kept what they had freed (+30 MB at 200k passages).
    del counts
    release_freed_memory()
    if sec["dense_model"] is None:
        ctx.remove_output(dense.VECTORS)  # an older run's vectors are not this index's
    else:  # with a model, each chunk's vector too, embedded where its partition is (a worker, on a cluster);
        # chunk numbers are 03's row numbers (whatever partitions the counts came from, reused or not)
        t0 = time.perf_counter()
        starts = dense.block_starts(io.read_table(parts[0].path, ["chunk_id"]).column("chunk_id").to_pylist())
        # An unchanged block is copied from the previous vectors (not with --force), on a cluster
        # too: its workers read the previous file in the output folder they write to (dense.Blocks).
        reuse = not ctx.force and ctx.path(dense.VECTORS).exists()
        previous = str(ctx.path(dense.VECTORS)) if reuse else None
        copied = sum(item[1] for item in ctx.write_partitions(
            dense.VECTORS, dense.vectors_schema(dense.model_dim(sec["dense_model"])),
            StageFunction(4, "vector_rows", (sec["dense_model"], sec["heading_weight"], previous, sec["dense_windows"])),
            [(p.start, p, dense.block_sizes(starts, p.start, p.stop)) for p in dense.block_parts(parts, starts)],
            desc="04 vectors", meta=meta, total=stats["N"], unit="chunk"))  # a bar of chunks: count, chunks/s, ETA
        took = time.perf_counter() - t0
        ctx.note(f"{dense.VECTORS}: {stats['N'] - copied:,} chunks embedded by {meta_model(ctx)} in {took:.1f} s "
                 f"({(stats['N'] - copied) / max(took, 1e-9):,.0f} chunks/s)"
                 + (f", {copied:,} copied from the previous run (unchanged blocks)" if copied else ""))
    if reused:
        ctx.note(f"{reused:,} chunks of unchanged documents: counts taken from the previous index, "
                 f"statistics computed anew")
    ctx.note(f"N={stats['N']:,} chunks, {stats['n_terms']:,} terms, {stats['n_postings']:,} postings, "
             f"avgdl={stats['avgdl']:.1f}, k1={stats['k1']}, b={stats['b']}, heading_weight={stats['heading_weight']}, "
             f"analyzer={stats['analyzer']}")


if __name__ == "__main__":
    raise SystemExit(stage_main(4, run, preview_columns=["chunk", "chunk_id", "heading", "length"]))
