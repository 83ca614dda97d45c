"""run_pipeline: stages run in order, fresh ones are skipped, a change reruns what depends on it."""
from pathlib import Path

import pytest

from pipekit.run.stages import STAGES, load_stage

from conftest import REPO, run_script

OUTPUTS = [name for s in STAGES for name in s.outputs] + ["05_results.trec", "05_metrics.parquet"]


def stamps(out: Path) -> dict:
    return {n: (out / n).stat().st_mtime_ns for n in OUTPUTS if (out / n).exists()}


def pipeline(out: Path, *args: str):
    return run_script("run_pipeline.py", "--set", f"paths.output={out}", *args)


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sample") / "out"
    first = pipeline(out)
    return out, first


def test_first_run_writes_every_output(sample_run):
    out, first = sample_run
    assert set(stamps(out)) == set(OUTPUTS)
    for s in STAGES:
        assert f"{s.label}: running" in first.stdout


def test_each_summary_counts_the_rows_of_the_file_it_names(sample_run):
    # Stage 04 writes 04_chunks on a thread of its own beside 04_terms; its line said the rows
    # of whichever file opened first, 88 or 1,666 on the sample, from run to run.
    import re

    from pipekit.run import io

    out, first = sample_run
    lines = re.findall(r"^(\d\d_\w+): .*?([\d,]+) rows out in [\d.]+ s → (.+)$", first.stdout, re.M)
    assert [label for label, _, _ in lines] == [s.label for s in STAGES]
    for label, rows, path in lines:
        assert int(rows.replace(",", "")) == io.row_count(Path(path)), label


def test_second_run_rewrites_nothing(sample_run):
    out, _ = sample_run
    before = stamps(out)
    second = pipeline(out)
    assert stamps(out) == before
    for s in STAGES:
        assert f"{s.label}: fresh, skipped" in second.stdout


def test_changing_the_chunk_target_reruns_03_to_05_only(sample_run):
    out, _ = sample_run
    before = stamps(out)
    proc = pipeline(out, "--set", "chunking.target=200")
    after = stamps(out)
    for name in ("01_documents.parquet", "02_preprocessed.parquet"):
        assert after[name] == before[name], f"{name} was rewritten"
    for name in ("03_chunks.parquet", "04_postings.parquet", "05_results.parquet"):
        assert after[name] != before[name], f"{name} was not rewritten"
    assert "config chunking.target changed: 400 -> 200" in proc.stdout
    pipeline(out)  # back to the defaults for the next tests


def test_changing_k1_reruns_04_and_05_only(sample_run):
    out, _ = sample_run
    before = stamps(out)
    pipeline(out, "--set", "indexing.k1=1.5")
    after = stamps(out)
    for name in ("01_documents.parquet", "02_preprocessed.parquet", "03_chunks.parquet"):
        assert after[name] == before[name], f"{name} was rewritten"
    for name in ("04_chunks.parquet", "04_terms.parquet", "04_postings.parquet", "05_results.parquet"):
        assert after[name] != before[name], f"{name} was not rewritten"


def test_status_says_why_and_runs_nothing(sample_run):
    out, _ = sample_run
    pipeline(out)
    before = stamps(out)
    proc = pipeline(out, "--status", "--set", "indexing.b=0.5")
    assert stamps(out) == before
    lines = {l.split()[0]: l for l in proc.stdout.splitlines() if l[:2].isdigit()}
    assert lines["03_chunking"].rstrip().endswith("fresh")
    assert lines["04_indexing"].rstrip().endswith("stale")
    assert "config indexing.b changed: 0.75 -> 0.5" in proc.stdout
    assert "upstream stage 04 runs first" in proc.stdout


def test_a_missing_upstream_names_the_stage_to_run(tmp_path):
    proc = run_script("03_chunking.py", "--set", f"paths.output={tmp_path}", check=False)
    assert proc.returncode != 0
    assert f"run `python 02_preprocessing.py --set paths.output={tmp_path}` first" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_from_requires_nothing_more_than_the_upstream(sample_run):
    out, _ = sample_run
    proc = pipeline(out, "--from", "4", "--force")
    assert "01_documents" not in proc.stdout and "04_indexing: running (--force)" in proc.stdout


def test_a_forced_rerun_gives_the_same_rows(sample_run):
    import pyarrow.parquet as pq

    out, _ = sample_run
    pipeline(out)
    before = {n: pq.read_table(out / n) for n in OUTPUTS if n.endswith(".parquet")}
    trec = (out / "05_results.trec").read_text()
    pipeline(out, "--force")
    for name, table in before.items():
        assert pq.read_table(out / name).equals(table), name
    assert (out / "05_results.trec").read_text() == trec


def test_a_closed_pipe_stops_quietly(sample_run):
    import subprocess
    import sys

    out, _ = sample_run
    proc = subprocess.Popen([sys.executable, "05_retrieval.py", "--set", f"paths.output={out}"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # like `| head -0`: gone before the stage prints its first line
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr


def test_one_process_hands_back_what_each_stage_freed(sample_run, monkeypatch):
    # run_pipeline runs every stage in one process: what a stage freed is handed back to
    # the system (glibc's heaps, Arrow's pool) before the next stage grows (issue 47).
    import run_pipeline

    out, _ = sample_run
    events = []
    real_run = run_pipeline.run_stage
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(run_pipeline, "run_stage", lambda number, *a, **k: events.append(("ran", number))
                        or real_run(number, *a, **k))
    monkeypatch.setattr(run_pipeline, "release_freed_memory", lambda: events.append(("released",)))
    assert run_pipeline.main(["--set", f"paths.output={out}", "--from", "4", "--force"]) == 0
    assert events == [("ran", 4), ("released",), ("ran", 5), ("released",)]


def test_stage_05_keeps_freed_memory_from_its_queries_on(sample_run, monkeypatch):
    # Stage 05 keeps what it frees for reuse (malloc.keep_freed_memory) only once its index is
    # loaded, after handing back what the load freed (each row group decoded, then copied out):
    # kept from the stage's start, those buffers stayed under the queries' peak (one run_pipeline
    # process at a million passages: 811-891 MB against 729-789; bench/README.md, branch mem6).
    import run_pipeline

    out, _ = sample_run
    retrieval = load_stage(5)
    events = []
    real_search = retrieval.search

    class Loaded(retrieval.Index):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            events.append("index loaded")

    monkeypatch.chdir(REPO)
    monkeypatch.setattr(retrieval, "Index", Loaded)
    monkeypatch.setattr(retrieval, "keep_freed_memory", lambda **k: events.append(("keep", k)))
    monkeypatch.setattr(retrieval, "search", lambda *a, **k: events.append("search") or real_search(*a, **k))
    assert run_pipeline.main(["--set", f"paths.output={out}", "--from", "5", "--force"]) == 0
    assert events == ["index loaded", ("keep", {"release_first": True}), "search"]
