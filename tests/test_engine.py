"""engine.kind=dask: the same outputs as the local engine, on a LocalCluster of 2 worker processes.

One cluster serves the module (starting one takes seconds); runs connect to it with
engine.address, and cut their input into small partitions (engine.partition_rows) so
that every stage really runs as many tasks spread over both workers.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipekit.run.config import load_config
from pipekit.run.errors import ConfigError
from pipekit.run.io import read_meta
from pipekit.run.stages import STAGES

from conftest import REPO, assert_same_outputs, pipeline, run_script, write_config

distributed = pytest.importorskip("distributed")

OUTPUTS = [n for s in STAGES for n in s.outputs] + ["05_metrics.parquet"]


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, silence_logs=50) as lc:
        with distributed.Client(lc) as client:
            yield lc.scheduler_address, client


def status(config: Path, out: Path, *sets: str) -> str:
    args = ["run_pipeline.py", "--config", str(config), "--set", f"paths.output={out}", "--status"]
    for s in sets:
        args += ["--set", s]
    # Strip the times and sizes: two runs differ in those, never in fresh/stale and why.
    return "\n".join(line.split()[0] + " " + line.split()[-1] if not line.startswith(" ") else line.strip()
                     for line in run_script(*args).stdout.splitlines())


def sample_config(folder: Path) -> Path:
    return write_config(folder, documents={"input": str(REPO / "data" / "sample")},
                        retrieval={"queries": str(REPO / "data" / "queries.txt"),
                                   "qrels": str(REPO / "data" / "qrels.tsv")})


def cranfield_config(folder: Path, beir: Path) -> Path:
    return write_config(folder, documents={"input": str(beir / "corpus.jsonl")},
                        retrieval={"queries": str(beir / "queries.jsonl"), "qrels": str(beir / "qrels.tsv")})


# --------------------------------------------------------------------------------- config

@pytest.mark.parametrize("override, message", [
    ("engine.kind=spark", "engine.kind must be local or dask"),
    ("engine.address=localhost", "engine.address must be null (start a local cluster) or tcp://HOST:PORT"),
    ("engine.workers=0", "engine.workers must be null (one per core) or a whole number > 0"),
    ("engine.timeout=-1", "engine.timeout must be a number of seconds > 0"),
])
def test_bad_engine_keys_name_the_key_and_what_it_accepts(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(None, [override, "engine.kind=dask"] if "kind" not in override else [override])


def test_an_address_with_the_local_engine_is_refused_not_ignored():
    with pytest.raises(ConfigError, match="engine.address is tcp://h:8786 but engine.kind is local"):
        load_config(None, ["engine.address=tcp://h:8786"])


# ------------------------------------------------------------------------ identical outputs

def test_sample_on_two_workers_equals_the_local_engine(tmp_path, cluster):
    address, _ = cluster
    cfg = sample_config(tmp_path)
    pipeline(cfg, tmp_path / "local")
    proc = pipeline(cfg, tmp_path / "dask", "engine.kind=dask", f"engine.address={address}",
                    "engine.partition_rows=3")
    assert f"dask: connected to {address}" in proc.stdout
    # This fixture's workers keep Dask's default profiler and trimming: the run says what they cost.
    assert "2 of the workers run with Dask's default profiler, monitors and memory trimming" in proc.stdout
    assert "DASK_CONFIG=pipekit/dask-workers.yaml" in proc.stdout
    assert "on 2 workers (" in proc.stdout  # stage 05's queries were answered there
    assert_same_outputs(tmp_path / "local", tmp_path / "dask")
    # 01-03 were written by the workers, a part file per partition (16 files, 15 cleaned,
    # by 3): folders; the local engine's are single files.  Both forms read the same above.
    for name, parts in (("01_documents.parquet", 6), ("02_preprocessed.parquet", 6), ("03_chunks.parquet", 5)):
        assert (tmp_path / "local" / name).is_file(), name
        assert len(list((tmp_path / "dask" / name).glob("part-*.parquet"))) == parts, name
    # 04: each partition's chunk rows and each term-range shard of the postings were written
    # by the worker that made them (88 chunks by 3: 30 parts); the term table by the client.
    assert len(list((tmp_path / "dask" / "04_chunks.parquet").glob("part-*.parquet"))) == 30
    assert len(list((tmp_path / "dask" / "04_postings.parquet").glob("part-*.parquet"))) > 1
    assert (tmp_path / "dask" / "04_terms.parquet").is_file()
    # Freshness does not depend on the engine: each folder is fresh under the other engine.
    dask_sets = ("engine.kind=dask", f"engine.address={address}")
    assert status(cfg, tmp_path / "dask") == status(cfg, tmp_path / "local", *dask_sets)
    assert "stale" not in status(cfg, tmp_path / "dask")
    changed = status(cfg, tmp_path / "dask", "indexing.k1=1.5", *dask_sets)
    assert changed == status(cfg, tmp_path / "local", "indexing.k1=1.5")
    assert "config indexing.k1 changed: 1.2 -> 1.5" in changed
    # --explain, on either engine:
    for out, sets in ((tmp_path / "local", ()), (tmp_path / "dask", dask_sets)):
        run_script("05_retrieval.py", "--config", str(cfg), "--set", f"paths.output={out}", "--explain",
                   *[w for s in sets for w in ("--set", s)])
    x, y = (pd.read_parquet(tmp_path / d / "05_results.parquet") for d in ("local", "dask"))
    assert x["explain"].map(repr).tolist() == y["explain"].map(repr).tolist() and len(x) == 140


def test_cranfield_on_two_workers_equals_the_local_engine(tmp_path, cluster, cranfield):
    address, _ = cluster
    cfg = cranfield_config(tmp_path, cranfield)
    pipeline(cfg, tmp_path / "local")
    pipeline(cfg, tmp_path / "dask", "engine.kind=dask", f"engine.address={address}",
             "engine.partition_rows=150")
    assert_same_outputs(tmp_path / "local", tmp_path / "dask")
    assert len(pd.read_parquet(tmp_path / "dask" / "01_documents.parquet")) == 1400  # 10 partitions of 150
    # RM3 feedback on the workers: each query's second pass there too, the same answers.
    for out, sets in ((tmp_path / "local", ()), (tmp_path / "dask", (f"engine.address={address}", "engine.kind=dask"))):
        run_script("05_retrieval.py", "--config", str(cfg), "--set", f"paths.output={out}",
                   "--set", "retrieval.feedback=rm3", *[w for s in sets for w in ("--set", s)])
    assert_same_outputs(tmp_path / "local", tmp_path / "dask")
    assert (pd.read_parquet(tmp_path / "dask" / "05_results.parquet")["query"].nunique()) == 225


def _held_by_this_worker() -> int:
    from pipekit.retrieve import resident

    return len(resident._HELD)


def test_stage_05_on_the_workers_with_feedback_equals_local_and_lets_the_index_go(tmp_path, cluster):
    """Queries in batches, RM3's two passes on the workers (the sample is one shard: one part,
    on one of them): the outputs are the local engine's, and when the stage ends no worker
    holds the index."""
    import re

    address, client = cluster
    cfg = sample_config(tmp_path)
    for name, sets in (("local", []), ("dask", ["engine.kind=dask", f"engine.address={address}"])):
        proc = pipeline(cfg, tmp_path / name, "retrieval.feedback=rm3", *sets)
    batches = re.search(r"queries answered in [\d.]+ s on 2 workers \(the index's 1 shard as 1 part; (\d+) batches",
                        proc.stdout)
    assert batches and int(batches.group(1)) >= 4, proc.stdout
    assert_same_outputs(tmp_path / "local", tmp_path / "dask")
    assert set(client.run(_held_by_this_worker).values()) == {0}


def test_a_duplicate_beir_id_in_another_partition_is_the_same_error(tmp_path, cluster):
    address, _ = cluster
    lines = [json.dumps({"_id": f"d{i}", "title": "", "text": f"passage {i}"}) for i in range(40)]
    lines[33] = json.dumps({"_id": "d2", "title": "", "text": "again"})
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(lines) + "\n")
    cfg = write_config(tmp_path, documents={"input": str(corpus)})
    local = run_script("01_documents.py", "--config", str(cfg), check=False)
    dask = run_script("01_documents.py", "--config", str(cfg), "--set", "engine.kind=dask",
                      "--set", f"engine.address={address}", "--set", "engine.partition_rows=5", check=False)
    assert local.returncode == dask.returncode == 1
    assert "line 34: _id 'd2' appears twice" in local.stderr
    assert dask.stderr.splitlines()[-1] == local.stderr.splitlines()[-1]
    assert not list((tmp_path / "out").glob("01_documents.parquet*"))


def test_links_sizes_and_skip_reasons_are_the_same_on_the_workers(tmp_path, cluster):
    """The walk (documents.follow_links, documents.max_bytes) stays on the client; its
    verdicts must still reach the rows the workers read and the summary's counts."""
    import os

    address, _ = cluster
    outside, docs = tmp_path / "outside", tmp_path / "docs"
    for path, text in ((outside / "shadow", "secret\n"), (docs / "guide.md", "# Guide\n\nInstall.\n"),
                       (docs / ".env", "SECRET=1"), (docs / "image.xyz", "?"),
                       (docs / "huge.md", "# Big\n\n" + "word " * 1000), (docs / "notes.md", "# Notes\n\nok\n"),
                       (docs / ".drafts" / "plan.md", "# Plan\n")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    os.symlink(outside / "shadow", docs / "shadow.txt")
    os.symlink("guide.md", docs / "again.md")
    os.symlink(".drafts/plan.md", docs / "plan.md")
    beir = tmp_path / "corpus.jsonl"
    beir.write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": "w " * (10 if i % 3 else 400)}) + "\n"
                            for i in range(12)))
    summaries = {}
    for name, source in (("walk", docs), ("beir", beir)):
        (tmp_path / name).mkdir()
        cfg = write_config(tmp_path / name, documents={"input": str(source), "max_bytes": 500})
        dask_sets = ["--set", "engine.kind=dask", "--set", f"engine.address={address}",
                     "--set", "engine.partition_rows=2"]
        outs = {}
        for engine, sets in (("local", []), ("dask", dask_sets)):
            out = tmp_path / name / engine
            proc = run_script("01_documents.py", "--config", str(cfg), "--set", f"paths.output={out}", *sets)
            outs[engine] = ([line for line in proc.stdout.splitlines() if "ok," in line or "skipped:" in line
                             or "symlink (" in line],
                            pd.read_parquet(out / "01_documents.parquet"))
        (lines, x), (dask_lines, y) = outs["local"], outs["dask"]
        assert lines == dask_lines and "skipped" in " ".join(lines), name
        assert x.map(repr).equals(y.map(repr)), name
        summaries[name] = "\n".join(lines)
    assert "1 read through a symlink" in summaries["walk"]
    assert ("skipped: 1 outside documents.input (symlink not followed), 1 larger than documents.max_bytes, "
            "2 hidden, 1 of an unknown format, 1 a second name for a file already read (symlink)") in summaries["walk"]
    assert "8 ok, 4 skipped (8 beir)" in summaries["beir"]


def _exact_05(out: Path) -> tuple:
    """Stage 05's results, run file and metrics, each value as exact text (repr)."""
    return (pd.read_parquet(out / "05_results.parquet").map(repr).to_dict("list"),
            (out / "05_results.trec").read_text(), pd.read_parquet(out / "05_metrics.parquet").map(repr).to_dict("list"))


def test_stage_05_on_parts_of_a_sharded_index_equals_local_bit_for_bit(tmp_path, cluster):
    """The sample indexed in four shards by document (indexing.shard_chunks=20): stage 05 on
    the two workers holds it as 2 parts (one per worker) or 3, with RM3; the results, the run
    file and the metrics are the local engine's to the last bit, and no worker holds a part
    when the stage has ended."""
    address, client = cluster
    cfg = sample_config(tmp_path)
    sharded = ("indexing.shard_chunks=20", "retrieval.feedback=rm3")
    pipeline(cfg, tmp_path / "local", *sharded)
    local = _exact_05(tmp_path / "local")
    # Stage 04 on the workers, in partitions of 3 chunks (a shard takes pieces of many, a
    # document may straddle two): the same shards, row for row.
    pipeline(cfg, tmp_path / "dask", *sharded, "engine.kind=dask", f"engine.address={address}",
             "engine.partition_rows=3")
    assert_same_outputs(tmp_path / "local", tmp_path / "dask")
    shards = [read_meta(tmp_path / d / "04_postings.parquet")["corpus"]["shards"] for d in ("local", "dask")]
    assert shards[0] == shards[1] and len(shards[0]) == 4
    for parts in ("null", "3"):
        sets = (*sharded, "engine.kind=dask", f"engine.address={address}", f"engine.shards={parts}")
        proc = run_script("05_retrieval.py", "--config", str(cfg), "--set", f"paths.output={tmp_path / 'local'}",
                          *[w for s in sets for w in ("--set", s)])
        assert f"the index's 4 shards as {2 if parts == 'null' else 3} parts" in proc.stdout
        assert _exact_05(tmp_path / "local") == local
    assert set(client.run(_held_by_this_worker).values()) == {0}


# ----------------------------------------------------------------------- faults and clean-up

def test_a_worker_killed_during_stage_05_changes_nothing(tmp_path, cluster):
    """SIGKILL a worker holding a part of the index once both parts are loaded: Dask loads
    that part again on the other worker (the part's jobs take its load's result) and the
    stage ends with the local engine's results, bit for bit."""
    from pipekit.cli import run_stage
    from pipekit.run.engine import DaskEngine
    from pipekit.run.stages import load_stage

    address, client = cluster
    cfg_path = sample_config(tmp_path)
    sharded = ["indexing.shard_chunks=20", "retrieval.feedback=rm3"]
    pipeline(cfg_path, tmp_path / "out", *sharded)
    local = _exact_05(tmp_path / "out")
    cfg = load_config(cfg_path, [f"paths.output={tmp_path / 'out'}", *sharded])
    cfg["engine"].update(kind="dask", address=address)
    engine = DaskEngine(address, 2, None, 10.0, quiet=True)
    plain, killed = engine.fetch, []

    def killing_after_the_load(handles, progress=None):
        got = plain(handles, progress)
        if not killed:  # the first fetch is the parts' loads: each worker now holds one
            holders = {w for ws in client.who_has(handles).values() for w in ws}
            assert len(holders) == 2, holders
            victim = sorted(holders)[0]
            pid = client.run(os.getpid, workers=[victim])[victim]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        return got

    engine.fetch = killing_after_the_load
    try:
        ctx = run_stage(5, load_stage(5).run, cfg, quiet=True, engine=engine)
    finally:
        engine.close()
    assert killed
    assert _exact_05(tmp_path / "out") == local
    assert any("the index's 4 shards as 2 parts" in n for n in ctx.notes)
    client.wait_for_workers(2, timeout=60)
    assert killed[0] not in set(client.run(os.getpid).values())



def test_a_worker_killed_during_stage_03_changes_nothing(tmp_path, cluster, cranfield):
    """SIGKILL one of the two workers once stage 03's first partition is back: the
    nanny starts a new one, the scheduler runs the lost tasks again, the output is the same."""
    from pipekit.cli import run_stage
    from pipekit.run.engine import DaskEngine
    from pipekit.run.stages import load_stage

    address, client = cluster
    cfg_path = cranfield_config(tmp_path, cranfield)
    run_script("run_pipeline.py", "--config", str(cfg_path), "--set", f"paths.output={tmp_path / 'local'}",
               "--to", "3")
    cfg = load_config(cfg_path, [f"paths.output={tmp_path / 'local'}"])
    for n in (1, 2):  # the dask run starts from the same stage-02 output
        (tmp_path / "dask").mkdir(exist_ok=True)
        target = tmp_path / "dask" / STAGES[n - 1].outputs[0]
        target.write_bytes((tmp_path / "local" / STAGES[n - 1].outputs[0]).read_bytes())
    cfg["paths"]["output"] = str(tmp_path / "dask")
    cfg["engine"].update(kind="dask", address=address, partition_rows=40)

    before = set(client.run(os.getpid).values())
    killed = []
    engine = DaskEngine(address, 2, 40, 10.0, quiet=True)
    plain = engine._gather  # under map_partitions and map_to_parts (03's workers write their parts)

    def holding():
        # A worker "holds" a task it is running or a finished result not yet gathered: killing
        # it loses either, so the scheduler must run that task again. Looking only at running
        # tasks was flaky: a Cranfield partition chunks in milliseconds, and under load both
        # workers were often between tasks (the next ones still queued on the scheduler).
        running, results = client.processing(), client.has_what()
        return {w: len(running.get(w, ())) + len(results.get(w, ())) for w in set(running) | set(results)}

    def killing_one_worker(task, parts, progress=None):
        for i, item in enumerate(plain(task, parts, progress)):
            if not killed:
                deadline = time.monotonic() + 30
                while not any((held := holding()).values()) and time.monotonic() < deadline:
                    time.sleep(0.01)  # the window's next tasks are still being assigned
                victim = max(held, key=held.get)
                assert held[victim], "no worker holds a task: the kill would test nothing"
                pid = client.run(os.getpid, workers=[victim])[victim]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            yield item

    engine._gather = killing_one_worker
    try:
        run_stage(3, load_stage(3).run, cfg, quiet=True, engine=engine)
    finally:
        engine.close()
    assert killed and killed[0] in before
    client.wait_for_workers(2, timeout=60)
    assert killed[0] not in set(client.run(os.getpid).values())
    a = pd.read_parquet(tmp_path / "local" / "03_chunks.parquet")
    b = pd.read_parquet(tmp_path / "dask" / "03_chunks.parquet")
    assert len(a) > 1000 and a.map(repr).equals(b.map(repr))
    # The workers wrote the output as part files, one per partition; whatever the killed
    # worker had half-written is gone, and so is the temp folder they were written in.
    parts = sorted(p.name for p in (tmp_path / "dask" / "03_chunks.parquet").iterdir())
    assert parts == [f"part-{i:05d}.parquet" for i in range(-(-len(pd.read_parquet(
        tmp_path / "local" / "02_preprocessed.parquet", columns=["doc_id"])) // 40))]
    assert sorted(p.name for p in (tmp_path / "dask").iterdir()) == [
        "01_documents.parquet", "02_preprocessed.parquet", "03_chunks.parquet"]


def test_an_unreachable_scheduler_is_one_line_naming_it(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    cfg = sample_config(tmp_path)
    t0 = time.perf_counter()
    proc = run_script("run_pipeline.py", "--config", str(cfg), "--set", "engine.kind=dask",
                      "--set", f"engine.address={address}", "--set", "engine.timeout=5", check=False)
    assert proc.returncode == 1 and time.perf_counter() - t0 < 60
    assert proc.stderr.strip().splitlines() == [
        f"run_pipeline: error: cannot reach the Dask scheduler at {address}: Connection refused"]
    assert not (tmp_path / "out" / "01_documents.parquet").exists()


def test_a_local_cluster_run_prints_its_dashboard_and_leaves_no_process(tmp_path):
    psutil = pytest.importorskip("psutil")
    tag = uuid.uuid4().hex
    env = dict(os.environ, PIPEKIT_TEST_RUN=tag)  # inherited by every process the run starts
    cfg = sample_config(tmp_path)
    proc = pipeline(cfg, tmp_path / "dask", "engine.kind=dask", "engine.workers=2", env=env)
    assert "dask: started a local cluster of 2 worker processes; dashboard http://" in proc.stdout
    pipeline(cfg, tmp_path / "local")
    assert_same_outputs(tmp_path / "local", tmp_path / "dask")

    def leftovers():
        found = []
        for p in psutil.process_iter(["pid"]):
            try:
                if p.environ().get("PIPEKIT_TEST_RUN") == tag:
                    found.append(p.info["pid"])
            except (psutil.Error, OSError):
                pass
        return found

    deadline = time.time() + 10  # workers exit right after the run; allow the OS a moment
    while leftovers() and time.time() < deadline:
        time.sleep(0.5)
    assert leftovers() == []


def _pretend_other_code(restore: bool = False) -> None:
    """Run on a worker: its stage-03 code hash differs from the client's (or is restored)."""
    import pipekit.run.engine as engine

    if restore:
        engine.code_hashes = engine._real_code_hashes
        return
    engine._real_code_hashes = real = engine.code_hashes
    engine.code_hashes = lambda: {**real(), "03_chunking": "0" * 16}


def test_workers_running_other_code_are_refused_before_any_task(cluster):
    from pipekit.run.engine import DaskEngine
    from pipekit.run.errors import PipelineError

    address, client = cluster
    client.run(_pretend_other_code)
    try:
        engine = DaskEngine(address, 2, None, 10.0, quiet=True)
        with pytest.raises(PipelineError, match=r"the Dask worker tcp://\S+ runs other code than this checkout "
                                                r"\(03_chunking differ\)"):
            engine.workers
        engine.close()
    finally:
        client.run(_pretend_other_code, restore=True)
    ok = DaskEngine(address, 2, None, 10.0, quiet=True)
    assert ok.workers == 2
    ok.close()


def test_results_come_back_in_partition_order_with_one_bar_step_per_partition(cluster):
    from pipekit.run.engine import DaskEngine, LocalEngine

    address, _ = cluster
    steps = []

    class Bar:
        def __init__(self, total):
            steps.append(("total", total))

        def update(self, n):
            steps.append(("update", n))

        def close(self):
            steps.append(("close",))

    parts = [5, 0, 3, 40, 1, 7, 2, 9, 4, 6, 8]  # more partitions than the in-flight window
    engine = DaskEngine(address, 2, None, 10.0, quiet=True)
    try:
        got = list(engine.map_partitions(range, parts, progress=Bar))
    finally:
        engine.close()
    assert got == list(LocalEngine().map_partitions(range, parts)) == [i for p in parts for i in range(p)]
    assert steps == [("total", len(parts))] + [("update", 1)] * len(parts) + [("close",)]


def test_the_cluster_a_run_starts_does_not_sample_its_workers_stacks_nor_trim_their_memory():
    """Dask's stack sampler (10 ms, for the dashboard) and its MALLOC_TRIM_THRESHOLD_ slowed
    stage 04's tasks by a fifth: the cluster started for a run takes pipekit/dask-workers.yaml
    instead; a default one has both (so the check can fail); a worker started by hand with
    DASK_CONFIG pointing at the file gets the same settings."""
    import dask

    from pipekit.run.engine import _tuned, local_cluster

    env = lambda: (os.environ.get("MALLOC_TRIM_THRESHOLD_"), os.environ.get("MALLOC_MMAP_THRESHOLD_"))  # noqa: E731
    # A nanny sets its variables in its own process's environment too (this module's
    # cluster fixture did), and a variable set there wins over the config: start each
    # cluster from an environment without them, and put them back at the end.
    saved = {k: os.environ.get(k) for k in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")}

    def clear():
        for k in saved:
            os.environ.pop(k, None)

    try:
        clear()
        with distributed.LocalCluster(n_workers=1, processes=True, dashboard_address=":0", silence_logs=50) as lc, \
                distributed.Client(lc) as client:
            assert list(client.run(_tuned).values()) == [False]
            assert list(client.run(env).values()) == [("65536", None)]
            clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
            worker = subprocess.Popen(
                [sys.executable, "-m", "dask", "worker", lc.scheduler_address, "--nworkers", "1", "--nthreads", "1"],
                cwd=REPO, env=dict(clean, DASK_CONFIG="pipekit/dask-workers.yaml", PYTHONPATH=str(REPO)),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                client.wait_for_workers(2, timeout=60)
                assert sorted(client.run(_tuned).values()) == [False, True]
            finally:
                worker.terminate()
                worker.wait(timeout=30)
        clear()
        with local_cluster(1) as lc, distributed.Client(lc) as client:
            assert list(client.run(_tuned).values()) == [True]
            assert list(client.run(env).values()) == [("67108864", "33554432")]
            assert list(client.run(lambda dask_worker: "profile" in dask_worker.periodic_callbacks).values()) == [False]
            assert list(client.run(lambda: dask.config.get("distributed.admin.tick.interval")).values()) == ["1s"]
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def test_a_rerun_on_the_workers_reuses_unchanged_rows_and_equals_a_forced_local_run(tmp_path, cluster):
    """Files added, edited and removed between two Dask runs: the second copies what it
    can (on the workers, from the part files of the first) and writes what --force writes."""
    import shutil

    address, _ = cluster
    docs = tmp_path / "docs"
    shutil.copytree(REPO / "data" / "sample", docs)
    cfg = write_config(tmp_path, documents={"input": str(docs)},
                       retrieval={"queries": str(REPO / "data" / "queries.txt"), "qrels": str(REPO / "data" / "qrels.tsv")})
    dask = ("engine.kind=dask", f"engine.address={address}", "engine.partition_rows=3")
    pipeline(cfg, tmp_path / "dask", *dask)
    (docs / "notes.md").write_text("# Notes\n\nThe pager rotates weekly.\n", encoding="utf-8")
    (docs / "report.txt").unlink()
    readme = docs / "handbook" / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8") + "\nOne more line.\n", encoding="utf-8")
    rerun = pipeline(cfg, tmp_path / "dask", *dask).stdout
    assert "input changed: 1 added (notes.md), 1 changed (handbook/README.md), 1 removed (report.txt)" in rerun
    assert "14 unchanged files: rows copied" in rerun
    assert "13 unchanged documents: chunks copied" in rerun
    pipeline(cfg, tmp_path / "forced", args=("--force",))
    assert_same_outputs(tmp_path / "dask", tmp_path / "forced")
    # Then a rename, new bytes under the old size and mtime, and a chunking setting at once.
    (docs / "notes.md").rename(docs / "pager-notes.md")
    page = docs / "tables" / next(p.name for p in (docs / "tables").iterdir() if p.suffix == ".csv")
    st, data = page.stat(), page.read_bytes()
    page.write_bytes(data.replace(b"a", b"e", 1))
    os.utime(page, ns=(st.st_atime_ns, st.st_mtime_ns))
    rerun = pipeline(cfg, tmp_path / "dask", *dask, "chunking.target=150").stdout
    assert "1 added (pager-notes.md), 1 changed (tables/" in rerun and "1 removed (notes.md)" in rerun
    assert "unchanged documents: chunks copied" not in rerun  # a new target: every document rechunked
    pipeline(cfg, tmp_path / "forced", "chunking.target=150", args=("--force",))
    assert_same_outputs(tmp_path / "dask", tmp_path / "forced")


def test_threads_loading_a_stage_at_once_all_get_it_whole():
    """A worker running partitions on several threads loads the stage module from each:
    without the lock in load_stage, the second thread got it registered but not executed."""
    code = ("import threading\n"
            "from pipekit.run.stages import load_stage\n"
            "barrier, got = threading.Barrier(4), []\n"
            "def load():\n"
            "    barrier.wait()\n"
            "    got.append(hasattr(load_stage(4), 'count_partition'))\n"
            "threads = [threading.Thread(target=load) for _ in range(4)]\n"
            "[t.start() for t in threads]; [t.join() for t in threads]\n"
            "print(got)\n")
    for _ in range(3):
        proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert proc.stdout.strip() == "[True, True, True, True]", proc.stdout + proc.stderr


def test_map_ahead_keeps_order_and_takes_only_a_few_items_ahead():
    """Stage 04 counts its batches with map_ahead: results in input order, whatever thread
    finishes first, and never more than `workers` items taken from the input ahead of the
    consumer (a corpus's batches are not all read at once)."""
    import time

    from pipekit.run.engine import map_ahead

    taken = []

    def items():
        for i in range(20):
            taken.append(i)
            yield i

    slow_first = lambda i: (time.sleep(0.02 if i % 3 == 0 else 0), i * i)[1]
    out = []
    for value in map_ahead(slow_first, items(), workers=3):
        assert len(taken) <= len(out) + 3
        out.append(value)
    assert out == [i * i for i in range(20)]
    assert list(map_ahead(lambda i: -i, iter(range(5)), workers=1)) == [0, -1, -2, -3, -4]

