"""The index in shards by document (issue 38): stage 04 lays them out, stage 05 answers from them.

The bundled sample (88 chunks) is indexed with `indexing.shard_chunks=20`: four shards, each
a range of whole documents.  Stage 05 then runs as on a cluster — every batch of queries to
every part, the client merging — in this process (`InProcessParts`: the Dask engine's calls,
each done here at once), with 1, 2 and 4 parts, and its outputs are compared with the local
engine's bit for bit.  tests/test_engine.py does the same on a real 2-worker cluster, and
kills a worker mid-stage.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipekit.cli import run_stage
from pipekit.index.layout import plan_shards
from pipekit.run.config import load_config
from pipekit.run.engine import LocalEngine
from pipekit.run.io import read_meta
from pipekit.run.stages import load_stage

from conftest import REPO, run_script, write_config

SHARDED = "indexing.shard_chunks=20"


class InProcessParts(LocalEngine):
    """The local engine under another name: stage 05 then takes the cluster's path (parts of
    the index, jobs, merge) with every job run here, at once."""

    kind = "parts"


def build(folder, *sets: str):
    cfg = write_config(folder, documents={"input": str(REPO / "data" / "sample")},
                       retrieval={"queries": str(REPO / "data" / "queries.txt"),
                                  "qrels": str(REPO / "data" / "qrels.tsv")})
    args = ["run_pipeline.py", "--config", str(cfg), "--to", "4", "--set", SHARDED]
    for s in sets:
        args += ["--set", s]
    run_script(*args)
    return cfg


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shards")
    return build(folder), folder / "out"


@pytest.fixture(scope="module")
def sample_dense(tmp_path_factory):
    pytest.importorskip("wordllama")
    folder = tmp_path_factory.mktemp("shards-dense")
    return build(folder, "indexing.dense_model=wordllama"), folder / "out"


def stage_05(cfg, out, engine, *sets: str, prune: bool = False) -> dict:
    """Stage 05 in this process; its results, run file and metrics, each as exact text."""
    stage = load_stage(5)
    small = stage.SMALL_QUERY
    stage.SMALL_QUERY = 0 if prune else small  # 88 chunks: prune even tiny queries, so that path is tested
    try:
        run_stage(5, stage.run, load_config(cfg, [f"paths.output={out}", SHARDED, *sets]), quiet=True, engine=engine)
    finally:
        stage.SMALL_QUERY = small
    results = pd.read_parquet(out / "05_results.parquet")
    assert len(results) > 100 and results["query"].nunique() == 14  # a comparison that could fail
    return {"results": results.map(repr).to_dict("list"), "trec": (out / "05_results.trec").read_text(),
            "metrics": pd.read_parquet(out / "05_metrics.parquet").map(repr).to_dict("list")}


# ------------------------------------------------------------------------------ the layout

def test_stage_04_writes_shards_of_whole_documents_each_term_major(sample):
    _, out = sample
    shards = read_meta(out / "04_postings.parquet")["corpus"]["shards"]
    chunks = pd.read_parquet(out / "04_chunks.parquet")
    postings = pd.read_parquet(out / "04_postings.parquet")  # pandas still reads the one whole table
    assert len(shards) == 4 and shards[0][0] == 0 and shards[-1][1] == len(chunks) == 88
    assert shards[-1][3] == len(postings)
    for c0, c1, r0, r1 in shards:
        assert c1 - c0 >= 20 or c1 == 88  # at least shard_chunks, cut where a document starts
        assert c0 == 0 or chunks["doc_id"][c0] != chunks["doc_id"][c0 - 1]
        rows = postings.iloc[r0:r1]
        assert rows["chunk"].between(c0, c1 - 1).all()
        assert rows.sort_values(["term_id", "chunk"]).index.tolist() == rows.index.tolist()
    # The same postings as a one-shard index: only their order differs.
    whole = pd.read_parquet(out / "04_postings.parquet").sort_values(["term_id", "chunk"], ignore_index=True)
    (out.parent / "one").mkdir()
    build(out.parent / "one", "indexing.shard_chunks=1000")  # (the later --set wins)
    plain = pd.read_parquet(out.parent / "one" / "out" / "04_postings.parquet")
    assert whole.map(repr).equals(plain.map(repr))


def test_shards_start_at_documents_across_partitions():
    # Two partitions: doc "b" goes on from the first into the second, so no shard starts there.
    facts = [{"doc_starts": np.array([0, 2]), "first_doc": "a", "last_doc": "b", "nnz": np.ones(4, np.int32)},
             {"doc_starts": np.array([0, 3]), "first_doc": "b", "last_doc": "c", "nnz": np.full(5, 2, np.int32)}]
    assert plan_shards(facts, [0, 4], 3) == [[0, 7, 0, 10], [7, 9, 10, 14]]
    assert plan_shards(facts, [0, 4], 100) == [[0, 9, 0, 14]]


def test_a_shards_scores_are_the_whole_indexs_bit_for_bit(sample):
    """Each shard loaded alone scores its chunks as the whole index scores them: the same
    chunks, the same bits (stage 04 put the collection's N, avgdl and idf in every impact)."""
    from pipekit.retrieve.shards import load_part
    from pipekit.retrieve.search import OutputReader

    cfg, out = sample
    stage = load_stage(5)
    whole = stage.Index(OutputReader(out))
    shards = whole.stats["shards"]
    queries = whole.query_terms(["sort the incidents by severity", "install the package with pip",
                                 "page three of the report table"])
    fingerprint = whole.meta["fingerprint"]
    for shard in shards:
        part = load_part(stage.Index, str(out), fingerprint, [shard], False, (0.0, 0.0))
        assert part.stats["N"] == whole.stats["N"]  # the collection's, not the shard's
        for q in queries:
            cols, vals = whole.scores(q.ids, weights=q.weights)
            inside = (cols >= shard[0]) & (cols < shard[1])
            p_cols, p_vals = part.scores(q.ids, weights=q.weights)
            assert inside.any() or len(p_cols) == 0
            assert np.array_equal(p_cols + shard[0], cols[inside])
            assert p_vals.tobytes() == vals[inside].tobytes()


# --------------------------------------------------------------- local = 1 part = several

@pytest.mark.parametrize("sets", [(), ("retrieval.feedback=rm3",), ("retrieval.section_context=0",)],
                         ids=["plain", "rm3", "no-context"])
def test_local_equals_one_part_equals_several(sample, tmp_path, sets):
    cfg, out = sample
    local = stage_05(cfg, out, LocalEngine(), *sets, prune=True)
    for parts in (1, 2, 4):
        got = stage_05(cfg, out, InProcessParts(), *sets, f"engine.shards={parts}", prune=True)
        assert got == local, f"{parts} parts"


def test_local_equals_several_parts_with_vectors_and_feedback(sample_dense):
    cfg, out = sample_dense
    for sets in ((), ("retrieval.feedback=rm3",)):
        local = stage_05(cfg, out, LocalEngine(), *sets)
        for parts in (1, 3):
            assert stage_05(cfg, out, InProcessParts(), *sets, f"engine.shards={parts}") == local, (sets, parts)


def test_a_rerun_reuses_the_counts_of_a_sharded_index_and_equals_a_forced_run(tmp_path):
    """Stage 04 takes an unchanged document's counts from the previous index, whose postings
    are term-major shard by shard: the rerun still writes what --force writes."""
    import yaml

    from test_incremental import rerun_and_force, reused, sample_copy

    docs, cfg = sample_copy(tmp_path, settle=True)
    cfg.write_text(yaml.safe_dump({**yaml.safe_load(cfg.read_text()), "indexing": {"shard_chunks": 20}}))
    last = sorted(p for p in docs.rglob("*.md"))[-1]
    out = rerun_and_force(tmp_path, cfg, lambda: last.write_text(last.read_text() + "\n\nOne more line.\n"))
    assert len(read_meta(tmp_path / "out" / "04_postings.parquet")["corpus"]["shards"]) == 4
    assert 0 < reused(out, "04_indexing") < 88


def test_parts_are_runs_of_shards_of_about_equal_postings():
    from pipekit.retrieve.shards import groups

    four = [[0, 25, 0, 100], [25, 50, 100, 201], [50, 75, 201, 300], [75, 100, 300, 400]]
    assert groups(four, 2) == [four[:2], four[2:]]  # a part a worker: half the postings each
    assert groups(four, 4) == [[s] for s in four]
    assert groups(four, 9) == [[s] for s in four]  # never more parts than shards
    assert groups(four, 1) == [four]
    assert [len(g) for g in groups(four, 3)] in ([1, 1, 2], [1, 2, 1], [2, 1, 1])
