"""Run history and `python -m pipekit compare`: three evaluated runs, side by side."""
import re

import pyarrow.parquet as pq
import pytest

from pipekit.tools.history import HISTORY, read_history, runs
from pipekit.run.io import read_meta

from conftest import run_script

METRICS = ("nDCG@10", "AP@100", "R@100")


def metrics_of(out):
    m = pq.read_table(out / "05_metrics.parquet").to_pandas()
    return {(q, k): v for q, k, v in zip(m.query_id, m.metric, m.value)}


def pipeline(out, *args, check=True):
    return run_script("run_pipeline.py", "--set", f"paths.output={out}", *args, check=check)


def compare(out, *args, check=True):
    return run_script("-m", "pipekit", "compare", "--set", f"paths.output={out}", *args, check=check)


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory):
    """Default settings, then chunking.target=200, then the default target with k1=1.5."""
    out = tmp_path_factory.mktemp("history") / "out"
    steps = [(), ("--set", "chunking.target=200"), ("--set", "indexing.k1=1.5")]
    seen = []
    for args in steps:
        proc = pipeline(out, *args)
        seen.append({"stdout": proc.stdout, "metrics": metrics_of(out),
                     "fingerprint": read_meta(out / "05_results.parquet")["fingerprint"]})
    return out, seen


def test_each_evaluated_run_appends_its_metrics(three_runs):
    out, seen = three_runs
    all_runs = runs(read_history(out))
    assert [r.number for r in all_runs] == [1, 2, 3]
    for run, step in zip(all_runs, seen):
        assert run.values == step["metrics"]  # every query and `all`, every metric, exactly
        assert run.fingerprint == step["fingerprint"]
        assert run.queries["1"] == "when is the change freeze"
    assert all_runs[0].time <= all_runs[1].time <= all_runs[2].time
    # what differed from the run before, as the configs that made each run's outputs say
    assert all_runs[0].changed == []
    assert all_runs[1].changed == ["chunking.target: 400 -> 200"]
    assert all_runs[2].changed == ["chunking.target: 200 -> 400", "indexing.k1: 1.2 -> 1.5"]
    assert all_runs[2].config["indexing.k1"] == 1.5 and all_runs[2].config["chunking.target"] == 400


def test_the_summary_line_says_what_it_was(three_runs):
    _, seen = three_runs
    assert "(was" not in seen[0]["stdout"]
    for before, now in zip(seen, seen[1:]):
        for m in METRICS:
            old, new = before["metrics"][("all", m)], now["metrics"][("all", m)]
            assert f"{m} {new:.4f} (was {old:.4f}, {new - old:+.4f})" in now["stdout"]


def test_a_skipped_stage_or_a_run_without_qrels_adds_nothing(three_runs, tmp_path):
    out, _ = three_runs
    import shutil

    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    before = read_history(copy)
    proc = pipeline(copy, "--set", "indexing.k1=1.5")  # the last run's settings: all fresh
    assert "05_retrieval: fresh, skipped" in proc.stdout
    pipeline(copy, "--set", "indexing.k1=1.5", "--set", "retrieval.qrels=null")
    assert read_history(copy).equals(before)
    # and the history never makes a stage stale
    assert "stale" not in pipeline(copy, "--status", "--set", "indexing.k1=1.5",
                                   "--set", "retrieval.qrels=null").stdout


def test_compare_defaults_to_the_last_two_runs(three_runs):
    out, seen = three_runs
    text = compare(out).stdout
    a, b = seen[1]["metrics"], seen[2]["metrics"]
    assert text.splitlines()[0].startswith("A = run 2 (")
    assert text.splitlines()[1].startswith("B = run 3 (")
    assert "config A -> B: chunking.target: 200 -> 400" in text
    assert "indexing.k1: 1.2 -> 1.5" in text
    # the mean row, then the queries: most-moved first, by nDCG@10 then AP@100 then R@100
    mean = next(l for l in text.splitlines() if l.startswith("all "))
    assert f"{a[('all', 'nDCG@10')]:.3f} -> {b[('all', 'nDCG@10')]:.3f}" in mean
    queries = {q for q, _ in b if q != "all"}
    moved = [q for q in queries if any(abs(b[(q, m)] - a[(q, m)]) > 1e-9 for m in METRICS)]
    assert moved, "the two runs should differ on some query"
    expected = sorted(moved, key=lambda q: tuple(-abs(b[(q, m)] - a[(q, m)]) for m in METRICS))
    assert f"queries that moved most: {len(moved)} of {len(queries)}" in text
    rows = text.split("queries that moved most", 1)[1].splitlines()[1:]
    listed = [r.split()[0] for r in rows if r and r.split()[0] in queries]
    assert listed == expected[:10]
    texts = {r["query_id"]: r["query"] for r in read_history(out).to_pylist() if r["query"]}
    for q in listed:  # each row shows its figures and the query's text
        row = next(r for r in rows if r.split()[0] == q)
        d = b[(q, "nDCG@10")] - a[(q, "nDCG@10")]
        assert f"{a[(q, 'nDCG@10')]:.3f} -> {b[(q, 'nDCG@10')]:.3f} {d:+.3f}" in row
        assert row.endswith(texts[q])


def test_compare_any_two_runs_by_number_or_fingerprint(three_runs):
    out, seen = three_runs
    text = compare(out, "1", "3").stdout
    # runs 1 and 3 share the chunk target: only k1 differs
    assert "config A -> B: indexing.k1: 1.2 -> 1.5" in text and "chunking.target" not in text
    by_fp = compare(out, seen[0]["fingerprint"][:8], "-1").stdout
    assert by_fp == text
    listing = compare(out, "--list").stdout.splitlines()
    assert len(listing) == 4 and listing[3].split()[0] == "3"
    assert f"{seen[2]['metrics'][('all', 'nDCG@10')]:.4f}" in listing[3]


def test_compare_errors_are_one_line(three_runs, tmp_path):
    out, _ = three_runs
    proc = compare(out, "7", "1", check=False)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert "no run 7: the history holds runs 1 to 3" in proc.stderr
    empty = compare(tmp_path / "nothing", check=False)
    assert empty.returncode == 1 and "compare needs two" in empty.stderr
    assert not (tmp_path / "nothing").exists()  # compare writes nothing


def test_the_history_table_is_documented_and_typed(three_runs):
    out, _ = three_runs
    schema = pq.read_schema(out / HISTORY)
    assert schema.names == ["run", "time", "fingerprint", "query_id", "query", "metric", "value",
                            "changed", "config"]
    assert pq.ParquetFile(out / HISTORY).metadata.num_rows == 3 * 15 * 3  # runs × (14 queries + all) × metrics


def test_a_fingerprint_prefix_of_digits_is_found_as_a_prefix():
    """'75696666' was read as run number 75,696,666 and reported missing (a real failure:
    about one fingerprint in 40 starts with eight decimal digits)."""
    from types import SimpleNamespace

    from pipekit.tools.compare import pick

    runs = [SimpleNamespace(number=1, fingerprint="a1b2c3d4e5f60718"),
            SimpleNamespace(number=2, fingerprint="7569666612abcdef")]
    assert pick(runs, "75696666").number == 2
    assert pick(runs, "2").number == 2 and pick(runs, "-2").number == 1
    with pytest.raises(Exception, match="no run 3"):
        pick(runs, "3")
    with pytest.raises(Exception, match="no run 7"):  # a short number is a run number, never a prefix
        pick(runs, "7")
