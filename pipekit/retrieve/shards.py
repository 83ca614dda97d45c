"""Stage 05 on a cluster with the index in shards by document: each worker holds only its part.

Stage 04 cuts its postings into shards, ranges of whole documents (pipekit/index/layout.py); a
worker weighs its postings with the collection's N, avgdl and idf, recorded by stage 04.  Here stage 05 groups them into
`engine.shards` parts (null: one per worker), gives each part to one worker, which loads it
once from the Parquet files and keeps it (pipekit/retrieve/resident.py's `held`, keyed by
the part), and sends every batch of queries to every part, as Elasticsearch's
dfs_query_then_fetch asks every shard and merges on a coordinator:

1. `load`: each part is loaded and reports its share of the section statistics (sections,
   their total length, each term's section df); the client adds them up, so that section
   context (pipekit/retrieve/sections.py) scores with the whole collection's sections.
2. `first` (RM3 only): each part's best `feedback_docs` chunks per query, with their terms,
   tf and lengths; the client takes the best of all of them and expands each query with
   Index.expand itself (the relevance model needs only those chunks and the global df).
3. `score`: each part scores the (expanded) queries on its chunks and returns its best:
   every chunk scoring at least its depth-th best *document* (a document's score is its
   best chunk's, and a document lies in one part).  That holds the part's k <= depth best
   chunks and each of its depth best documents' best chunk, so the client, ranking what all
   parts returned with the same `rank`, gets the local engine's k chunks and its documents.
   With vectors, a part returns the union of its BM25 top `depth` and its cosine top `depth`
   (Dense.union_scores: each member's BM25 score, looked up if the BM25 list missed it, and
   cosine); the client takes the best `depth` of each list over all parts and fuses them
   as Dense.fuse does (each score over the best of its own global list).
A chunk's score is the same bits in any part (stage 05 sums a chunk's terms in query
order, cosines row by row), and ties go to corpus order, which is the order of the parts:
results, run file and metrics are the local engine's, bit for bit.

Each part is loaded by a task of its own (started on a worker of its own: engine.spread),
whose result (`Held`) names it and reports its size; the part's jobs take that result as
their argument and name its worker, one job a part at a time (engine.chains says why), so
they run where the part is.  A worker lost mid-stage loses nothing: Dask runs the load of
each part it held again on another worker, from the Parquet files, and the jobs follow.
Measured (bench/engine.py --shards, 1M passages): one worker peaked at 1.62 GB, each of two
at 0.98 GB at most, the outputs identical; bench/README.md has the 100M table.

What it does not do: query-time statistics rounds (the collection's BM25 statistics are
stage 04's, in 04_terms and the metadata; its section statistics are gathered once), or a cluster-backed `Searcher`
(README, "Running on a cluster", says what that would take).
"""
from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipekit.index.layout import ShardedPostings
from pipekit.index.dense import windows_of
from pipekit.retrieve.fusion import Dense, default_weight, scaled, top_chunks
from pipekit.retrieve.ranks import TopPostings, nth_best_document, rank
from pipekit.retrieve.resident import WorkerOutputs, held, index_tag, query_parts, release
from pipekit.retrieve.repeats import collapse_answers
from pipekit.retrieve.results import collect_answers
from pipekit.run import io
from pipekit.run.arrays import run_starts
from pipekit.run.errors import PipelineError


def groups(shards: list, n: int) -> list[list]:
    """The index's shards in `n` runs of consecutive shards (fewer if there are fewer
    shards), of about equal postings: what each worker holds."""
    n = max(min(n, len(shards)), 1)
    rows = np.cumsum([s[3] - s[2] for s in shards])
    # Each cut after the shard whose end is nearest the next 1/n of the postings.
    cuts = [int(np.abs(rows - at).argmin()) + 1 for at in np.linspace(0, rows[-1], n + 1)[1:-1]]
    bounds = sorted({0, len(shards), *[min(max(c, 1), len(shards) - 1) for c in cuts]})
    return [shards[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def dense_spec(meta: dict, weight: float | None) -> tuple[str, float] | None:
    """(model, weight) when the index has vectors and the weight is above 0 (as fusion.dense_for)."""
    spec = (meta.get("inputs", {}).get("config", {}) or {}).get("indexing.dense_model")
    if spec is None:
        return None
    weight = default_weight(spec) if weight is None else weight
    return (spec, weight) if weight > 0 else None


# --- on a worker ---------------------------------------------------------------------------

def _rows(path: Path, c0: int, c1: int, columns: list[str]) -> pa.Table:
    """Rows [c0, c1) of an output (a file or a folder of parts)."""
    from pipekit.run.engine import RowRange, iter_rows

    batches = list(iter_rows(RowRange(str(path), c0, c1), columns, batch_size=1 << 16))
    return pa.Table.from_batches(batches) if batches else io.read_table(path, columns).slice(0, 0)


def load_part(index_class, output_dir: str, fingerprint: str, part: list, whole: bool, mixing: tuple):
    """Stage 05's Index over the shards `part` only: their postings (term-major, chunks
    numbered from the part's first), their chunks' lengths and documents, their sections,
    their vectors.  Built as Index builds itself, from the part's rows of each file."""
    from pipekit.retrieve.sections import SectionContext, section_codes

    t0 = time.perf_counter()
    files = WorkerOutputs(output_dir)
    postings = files.require("04_postings.parquet", None)
    ix = index_class.__new__(index_class)
    ix.meta = io.read_meta(files.require("04_chunks.parquet", None))
    if {ix.meta["fingerprint"], io.read_meta(postings)["fingerprint"]} != {fingerprint}:
        raise PipelineError("the 04_* files changed while stage 05 ran: run it again")
    ix.stats = ix.meta["corpus"]
    c0, c1 = part[0][0], part[-1][1]
    ix._postings_path, ix._shards = postings, ShardedPostings(postings, part, ix.stats["n_terms"], whole)
    ix.df = ix._shards.df().astype(np.int64)
    # The collection's idf (04_terms), with its N and avgdl in each chunk's norm (Index._derived):
    # a posting's weight is computed here as the whole index computes it, the same bits.
    ix.idf = io.read_table(files.require("04_terms.parquet", None), ["idf"]).column("idf").to_numpy()
    ix.indptr = np.zeros(len(ix.df) + 1, dtype=np.int64)
    np.cumsum(ix.df, out=ix.indptr[1:])
    ix._tf = ix._forward = ix._noise = None
    chunks = _rows(files.path("04_chunks.parquet"), c0, c1, ["doc_id", "length", "heading"])
    ix.__dict__.update(ix._derived(chunks, np.zeros))
    ix._dense = dict(zip(ix.dense_ids.tolist(), ix.dense))
    ix._seeds = TopPostings(ix._postings_of)
    ix.small_query = sys.modules[index_class.__module__].SMALL_QUERY
    ix.first, ix.note = c0, files.note
    ix.doc_first = np.flatnonzero(run_starts(ix.doc_codes)) + c0  # each document's first chunk: its key
    ix.context = ix.dense = None
    if mixing[0] > 0 and len(chunks):
        chunks_03 = files.path("03_chunks.parquet")
        if "heading_path" in io.schema(chunks_03).names:
            paths = _rows(chunks_03, c0, c1, ["heading_path"]).column("heading_path").combine_chunks()
        else:  # SPEC's `heading` only: its titles (as sections.section_context reads such a file)
            from pipekit.chunk.headings import TRAIL_SEPARATOR

            heading = pc.fill_null(chunks.column("heading").combine_chunks(), "")
            paths = pc.if_else(pc.equal(heading, ""), pa.scalar([], pa.list_(pa.string())),
                               pc.split_pattern(heading, TRAIL_SEPARATOR))
        # Built whatever this part's sections are: whether context is on is the collection's
        # question (one multi-chunk section anywhere), answered by the client from the loads' Held.
        ix.context = SectionContext(section_codes(chunks.column("doc_id").combine_chunks(), paths), ix, mixing[0])
    dense = dense_spec(ix.meta, mixing[1])
    if dense is not None:
        path = files.path("04_vectors.parquet")
        try:  # a long chunk's later windows (pipekit/index/dense.py), numbered from the part's first chunk
            table = _rows(path, c0, c1, ["vector", "windows"])
            extra, owner = windows_of(table.column("windows"))
            windows = (extra, owner) if len(extra) else None
        except (KeyError, pa.ArrowInvalid, PipelineError):  # vectors from before windows
            table, windows = _rows(path, c0, c1, ["vector"]), None
        vectors = table.column("vector").combine_chunks()
        dim = vectors.type.list_size
        ix.dense = Dense(np.ascontiguousarray(vectors.flatten().to_numpy(zero_copy_only=False).reshape(-1, dim),
                                              dtype=np.float32), *dense, windows)
    ix.load_seconds = time.perf_counter() - t0
    return ix


@dataclass(frozen=True)
class Held:
    """What a part's load task gives Dask: the name of the part a worker now holds (in
    resident.held), its load time and section facts, and its size in memory as its own
    (`__sizeof__`).  The part's jobs take it as their argument, so Dask runs them where it
    is and never moves them (that would move as many bytes); if its worker is lost, Dask runs
    the load again on another worker, from the Parquet files, and the jobs follow it there."""

    start: int
    nbytes: int
    load_seconds: float
    facts: tuple | None
    single: bool

    def __sizeof__(self) -> int:
        return self.nbytes


def answer(index_class, candidates, output_dir: str, fingerprint: str, part: list, whole: bool, mixing: tuple,
           job):
    """One job on the part of the index this worker holds: "load" it (the Held that its
    other jobs take), or (held, "first", queries, docs) / (held, "score", queries, ...)."""
    from pipekit.run.malloc import keep_freed_memory

    keep_freed_memory()
    key = (index_tag(output_dir, fingerprint), mixing)
    ix = held(key, lambda: load_part(index_class, output_dir, fingerprint, part, whole, mixing), part=part[0][0])
    if job == "load":
        size = sum(v.nbytes for v in ix.__dict__.values() if isinstance(v, np.ndarray))
        single = ix.context is None or ix.context.n == len(ix.lengths)
        vec = ix.dense.vectors.nbytes + (ix.dense.extra.nbytes if ix.dense.extra is not None else 0) \
            if ix.dense is not None else 0
        return Held(part[0][0], size + vec, ix.load_seconds,
                    None if ix.context is None else ix.context.facts(), single)
    if job[1] == "first":
        return [_first_pass(ix, q, job[3]) for q in job[2]]
    _, _, queries, vecs, depth, collection = job
    if ix.context is not None:
        if collection is None:
            ix.context = None  # every section of the collection is one chunk: context changes nothing
        else:
            ix.context.use_collection(*collection)
    tops = ix.dense.top(vecs, depth) if ix.dense is not None else None
    out = []
    for i, q in enumerate(queries):
        cols, vals = candidates(ix, q, depth)
        if ix.dense is not None:
            union, bm25, cos, in_b, in_d = ix.dense.union_scores(cols, vals, vecs[i], tops[i], depth, ix.scorer(q))
            out.append((union + ix.first, bm25, cos, in_b, in_d, ix.doc_first[ix.doc_codes[union]]))
            continue
        floor = nth_best_document(cols, vals, ix.doc_codes, depth)
        keep = np.flatnonzero(vals >= floor)
        out.append((cols[keep] + ix.first, vals[keep], ix.doc_first[ix.doc_codes[cols[keep]]]))
    return out


def _first_pass(ix, q, docs: int) -> tuple:
    """RM3's first pass on this part: its `docs` best chunks (in corpus order) and scores,
    with what the relevance model reads of them: lengths, terms and tf."""
    if len(q.ids) == 0:
        return np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64), \
            np.zeros(0, np.int64)
    cols, vals = ix.best_candidates(q.ids, docs, q.weights)
    keep = np.sort(top_chunks(cols, vals, docs))
    top = cols[keep].astype(np.int64)
    indptr, term_of, tf = ix.forward
    lo, hi = indptr[top], indptr[top + 1]
    at = np.concatenate([np.arange(a, b) for a, b in zip(lo.tolist(), hi.tolist())] or [np.zeros(0, np.int64)])
    return top + ix.first, vals[keep], ix.lengths[top], hi - lo, term_of[at], tf[at]


# --- on the client -------------------------------------------------------------------------

def _same(value):
    return value


class FirstPass:
    """What Index.expand reads of an index, given by the parts' merged first passes: the
    best chunks of every part (positions 0.. in corpus order) as its candidates, their
    terms as the forward index, their lengths, and the collection's feedback noise."""

    def __init__(self, passes: list[tuple], noise: np.ndarray):
        cat = lambda i, dt: np.concatenate([p[i] for p in passes]).astype(dt) if passes else np.zeros(0, dt)
        self.vals, self.lengths = cat(1, np.float64), cat(2, np.int64)
        sizes = cat(3, np.int64)
        self.forward = (np.concatenate([[0], np.cumsum(sizes)]), cat(4, np.int64), cat(5, np.float64))
        self.doc_codes = np.arange(len(self.vals))  # each its own: expand only takes the best chunks
        self._noise = noise

    def best_candidates(self, term_ids, depth, weights=None):
        return np.arange(len(self.vals)), self.vals


def _merge(answers: list[tuple], top_k: int, depth: int, fusion: tuple | None):
    """One query's answer from every part's: (chunks, scores, documents as their first
    chunks, document scores), ranked as the local engine ranks all its candidates."""
    cat = lambda i: np.concatenate([a[i] for a in answers])
    if fusion is None:
        chunks, vals, keys = cat(0), cat(1), cat(2)
    else:  # Dense.fuse over the collection's two top lists, from every part's members
        chunks, bm25, cos, in_b, in_d, keys = (cat(i) for i in range(6))
        b_top = chunks[in_b][top_chunks(chunks[in_b], bm25[in_b], depth)]
        d_top = chunks[in_d][top_chunks(chunks[in_d], cos[in_d], depth)]
        in_b, in_d = np.isin(chunks, b_top), np.isin(chunks, d_top)
        member = np.flatnonzero(in_b | in_d)
        chunks, bm25, cos, in_b, in_d, keys = (x[member] for x in (chunks, bm25, cos, in_b, in_d, keys))
        w = fusion[1]
        vals = (1 - w) * scaled(bm25, bm25[in_b].max() if in_b.any() else 0.0) + \
            w * scaled(cos, cos[in_d].max() if in_d.any() else 0.0)
        keep = np.flatnonzero(vals > 0)
        chunks, vals, keys = chunks[keep], vals[keep], keys[keep]
    # Documents as codes in order of first appearance (keys ascend: parts are in corpus order).
    first, codes = np.unique(keys, return_inverse=True)
    order, docs, doc_scores = rank(np.arange(len(chunks)), vals, codes.astype(np.int64), top_k, depth)
    return chunks[order], vals[order], first[docs], doc_scores


def on_shards(ctx, index, index_class, queries: list, top_k: int, depth: int, feedback, mixing: tuple):
    """Stage 05's `search` for all queries on the parts of the index the workers hold: the
    same hits, document run and scored queries as the local engine's."""
    from pipekit.retrieve.queries import feedback_noise
    from pipekit.run.engine import StageFunction

    engine, t0 = ctx.engine, time.perf_counter()
    shards = index.stats.get("shards") or [[0, index.stats["N"], 0, index.stats["n_postings"]]]
    parts = groups(shards, ctx.cfg["engine"].get("shards") or engine.workers)
    fingerprint = index.meta["fingerprint"]
    tasks = [StageFunction(5, "shard_partition", (str(ctx.output_dir), fingerprint, p, len(parts) == 1, mixing))
             for p in parts]
    batches = query_parts(queries, engine.workers)
    fusion = dense_spec(index.meta, mixing[1])

    def each_part(job_of) -> list[list]:
        """job_of(batch) on every part (taking its Held), for every batch, a part's jobs one
        at a time (engine.chains says why), the parts at once: results[batch][part]."""
        got = engine.chains([[(task, (h, *job_of(b))) for b in batches] for task, h in zip(tasks, loaded)],
                            engine.where(loaded))
        return [[got[p][i] for p in range(len(parts))] for i in range(len(batches))]

    try:
        # Each part loaded on a worker of its own (while there are enough), then kept there.
        loaded = [engine.submit(task, "load", w) for task, w in zip(tasks, engine.spread(len(tasks)))]
        facts = engine.fetch(loaded)
        collection = None
        if not all(f.single for f in facts):  # a section of several chunks somewhere: context is on
            n, total = sum(f.facts[0] for f in facts), sum(f.facts[1] for f in facts)
            # A task's result, not a broadcast: a worker lost later gets it again from the task.
            collection = engine.submit(_same, (n, total, np.sum([f.facts[2] for f in facts], axis=0)))
        scored = index.query_terms([text for _, text in queries])
        if feedback is not None:
            noise = feedback_noise(index.terms, index.analyzer, index.df, feedback.docs)
            passes = each_part(lambda b: ("first", scored[b[0]:b[0] + len(b[1])], feedback.docs))
            for (start, batch), got in zip(batches, passes):
                for j in range(len(batch)):
                    scored[start + j] = index_class.expand(FirstPass([g[j] for g in got], noise), scored[start + j],
                                                           feedback)
        vecs = Dense(None, *fusion).embed([text for _, text in queries]) if fusion else None
        # With repeats collapsed the client ranks chunks past k (as the local engine: `reach`),
        # so each part ranks that deep (with vectors the fused lists stay `depth` long).
        repeats = getattr(index, "repeats", None)
        reach = depth + top_k if repeats is not None else top_k
        part_depth = depth if fusion else max(reach, depth)
        results = each_part(lambda b: ("score", scored[b[0]:b[0] + len(b[1])],
                                       vecs[b[0]:b[0] + len(b[1])] if fusion else None, part_depth, collection))
    finally:
        with contextlib.suppress(Exception):  # the error that stopped the stage is the one to tell
            engine.run_everywhere(release)
        release()
    answers = [_merge([g[j] for g in got], reach, depth, fusion)
               for (_, batch), got in zip(batches, results) for j in range(len(batch))]
    # Repeats collapsed on the client, as the local engine does; a query whose collapses use
    # up its `reach` chunks stays short here (the local engine ranks it deeper): it would
    # take more repeats among a query's best than the depth of its ranking.
    answers, also = collapse_answers(repeats, answers, top_k, reach, depth=depth, by_chunk=True)
    hits, run = collect_answers(queries, answers, index.chunks.column("doc_id").combine_chunks(), also)
    # What crossed the network for the scores, per batch: each query's terms and weights
    # (and vector) to every part, each part's best chunks back (bench/README.md's table).
    out = len(parts) * (sum(q.ids.nbytes + q.weights.nbytes for q in scored) + (vecs.nbytes if fusion else 0))
    back = sum(a.nbytes for got in results for g in got for hit in g for a in hit)
    ctx.note(f"queries answered in {time.perf_counter() - t0:.2f} s on {engine.workers} workers "
             f"(the index's {len(shards)} shard{'s' * (len(shards) > 1)} as {len(parts)} part{'s' * (len(parts) > 1)}; "
             f"{len(batches)} batches of queries; "
             f"a part loaded in {max(f.load_seconds for f in facts):.2f} s at most; per batch "
             f"{out / max(len(batches), 1) / 1024:,.0f} KB of queries out, {back / max(len(batches), 1) / 1024:,.0f} KB of hits back)")
    return hits, run, scored
