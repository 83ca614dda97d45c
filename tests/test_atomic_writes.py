"""A stage killed mid-write leaves its previous output whole, and the next run completes.

Stage 04 is started as a user starts it (`python 04_indexing.py --config ...`) with one
change: a tiny wrapper makes pyarrow's ParquetWriter pause right after it has written
its first row group.  At that moment the stage is provably in the middle of writing (a
half-written Parquet file sits in the output folder), so the signal lands mid-write on
every run — a test that hoped to catch a write window by polling would pass or fail by
timing.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pipekit.run.io import read_meta
from pipekit.run.stages import get_stage

from conftest import REPO
OUTPUTS = get_stage(4).outputs

# Runs a stage script as __main__, pausing inside the first ParquetWriter.write_table.
PAUSING_RUNNER = r"""
import os, runpy, sys, threading, time
import pipekit.run.io

flag = os.environ["PAUSE_FLAG"]
original = pipekit.run.io.ParquetSink.write

# Pauses the stage itself (the main thread, where Ctrl-C lands) once its first batch is in
# the temp file: Parquet's encoding runs on a writer thread, so pausing there would leave
# the stage running on, and an interrupted stage rightly waits for the batch in flight.
# Only the main thread's writes pause: stage 04 writes 04_chunks on a thread of its own,
# and when that write came first the stage waited on a thread asleep for 600 s.
def write_then_pause(self, *args, **kwargs):
    original(self, *args, **kwargs)
    self._finish_in_flight()
    if threading.current_thread() is threading.main_thread() and not os.path.exists(flag):
        open(flag, "w").close()
        time.sleep(600)

pipekit.run.io.ParquetSink.write = write_then_pause
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


@pytest.fixture()
def indexed(tmp_path):
    """A finished run up to stage 04 on the bundled sample: (config path, output folder)."""
    if not (REPO / "run_pipeline.py").exists():
        pytest.skip("needs run_pipeline.py")
    out = tmp_path / "out"
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"paths": {"output": str(out)},
                                   "documents": {"input": str(REPO / "data" / "sample")},
                                   "retrieval": {"queries": ["page the secondary"], "qrels": None}}))
    proc = subprocess.run([sys.executable, "run_pipeline.py", "--config", str(cfg), "--to", "4"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return cfg, out


def snapshot(out: Path) -> dict:
    return {name: (pq.read_table(out / name), read_meta(out / name)) for name in OUTPUTS}


def k1_of(meta: dict) -> float:
    return meta["inputs"]["config"]["indexing.k1"]


def default_sigint() -> None:
    """Ctrl-C reaches the stage as it would from a terminal: a suite started in the
    background (`pytest ... &` in a script) inherits SIGINT ignored, and a Python that
    starts with SIGINT ignored never raises KeyboardInterrupt — the test then hung."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    die_with_parent()


def die_with_parent() -> None:
    """Linux: the paused stage gets SIGKILL when the test process dies (pytest killed, a
    crash), so not even that leaves it sleeping in its pause under init."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@pytest.fixture()
def started():
    """The processes a test starts, killed at its teardown whatever happened: a test whose
    assertion failed before its own kill left the stage sleeping in its 600 s pause,
    reparented to init, one more each failing run."""
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def start_paused(started: list, cfg: Path, tmp_path: Path, *overrides: str) -> subprocess.Popen:
    """Start stage 04 (listed in `started`, so teardown kills it) and return once it is
    inside its first write."""
    flag = tmp_path / "paused"
    args = [sys.executable, "-c", PAUSING_RUNNER, "04_indexing.py", "--config", str(cfg)]
    for o in overrides:
        args += ["--set", o]
    proc = subprocess.Popen(args, cwd=REPO, env={**os.environ, "PAUSE_FLAG": str(flag)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)
    started.append(proc)
    deadline = time.monotonic() + 120
    while not flag.exists():
        if proc.poll() is not None:
            raise AssertionError(f"stage 04 ended before writing: {proc.communicate()[1]}")
        assert time.monotonic() < deadline, "stage 04 never started writing"
        time.sleep(0.02)
    return proc


def temp_files(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if ".tmp" in p.name)


def test_sigkill_mid_write_leaves_the_previous_index_and_the_next_run_completes(indexed, tmp_path, started):
    cfg, out = indexed
    before = snapshot(out)
    assert {k1_of(meta) for _, meta in before.values()} == {1.2}

    proc = start_paused(started, cfg, tmp_path, "indexing.k1=1.5")
    partial = temp_files(out)
    assert partial and all(p.name.startswith("04_") for p in partial)  # written beside the output
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    # The previous output is whole: same rows, same metadata, nothing half-replaced.
    after = snapshot(out)
    for name in OUTPUTS:
        assert after[name][0].equals(before[name][0]), name
        assert after[name][1] == before[name][1], name
    # The killed run's temp file is a truncated Parquet file nobody will mistake for output.
    with pytest.raises(Exception):
        pq.read_table(partial[0])

    rerun = subprocess.run([sys.executable, "04_indexing.py", "--config", str(cfg), "--set", "indexing.k1=1.5"],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert {k1_of(meta) for _, meta in snapshot(out).values()} == {1.5}
    assert not any(p.exists() for p in partial)  # the dead run's temp file was swept
    rest = subprocess.run([sys.executable, "run_pipeline.py", "--config", str(cfg), "--set", "indexing.k1=1.5"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert rest.returncode == 0, rest.stderr
    assert (out / "05_results.parquet").exists()


def test_ctrl_c_mid_write_removes_the_temp_file_and_keeps_the_previous_index(indexed, tmp_path, started):
    cfg, out = indexed
    before = snapshot(out)
    proc = start_paused(started, cfg, tmp_path, "indexing.b=0.5")
    assert temp_files(out)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode != 0 and "previous output is unchanged" in stderr
    assert temp_files(out) == []  # an interrupted stage cleans up after itself
    after = snapshot(out)
    assert all(after[n][0].equals(before[n][0]) and after[n][1] == before[n][1] for n in OUTPUTS)


# Runs stage 05 as __main__, pausing when it starts the metrics: by then it has written its
# TREC run (05_results.trec) and not yet finished.
PAUSING_05 = r"""
import os, runpy, sys, time
import ir_measures

def pause(*args, **kwargs):
    open(os.environ["PAUSE_FLAG"], "w").close()
    time.sleep(600)

ir_measures.iter_calc = pause
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_sigkill_after_the_trec_run_is_written_leaves_the_previous_one(indexed, tmp_path, started):
    cfg, out = indexed
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("1 0 report.txt 1\n")
    first = subprocess.run([sys.executable, "05_retrieval.py", "--config", str(cfg), "--set", f"retrieval.qrels={qrels}"],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    trec = (out / "05_results.trec").read_bytes()
    assert trec.count(b"\n") > 1

    flag = tmp_path / "paused"
    proc = subprocess.Popen([sys.executable, "-c", PAUSING_05, "05_retrieval.py", "--config", str(cfg),
                             "--set", f"retrieval.qrels={qrels}", "--set", "retrieval.queries=[on-call rotation]"],
                            cwd=REPO, env={**os.environ, "PAUSE_FLAG": str(flag)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=die_with_parent)
    started.append(proc)
    deadline = time.monotonic() + 120
    while not flag.exists():
        if proc.poll() is not None:
            raise AssertionError(f"stage 05 ended before its metrics: {proc.communicate()[1]}")
        assert time.monotonic() < deadline, "stage 05 never reached its metrics"
        time.sleep(0.02)
    # The new run (another query) is written, beside the output, not over it ...
    pending = [p for p in temp_files(out) if p.name.startswith("05_results.trec")]
    assert len(pending) == 1 and pending[0].read_bytes() != trec
    assert (out / "05_results.trec").read_bytes() == trec
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    # ... and a killed run leaves the previous one whole.
    assert (out / "05_results.trec").read_bytes() == trec


def test_an_error_on_the_writer_thread_reaches_the_stage_and_leaves_no_temp_file(tmp_path, monkeypatch):
    """Batches are encoded on a thread of their own (pipekit/run/io.py); a failure there (a full
    disk) must still stop the stage, with its own message, and leave nothing behind."""
    from pipekit.run import io

    def disk_full(self, table, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", disk_full)
    sink = io.ParquetSink(tmp_path / "x.parquet", pa.schema([("n", pa.int32())]), meta={})
    sink.write(pa.table({"n": pa.array([1, 2, 3], pa.int32())}))  # handed over, not yet failed
    with pytest.raises(OSError, match="No space left"):
        sink.write(pa.table({"n": pa.array([4], pa.int32())}))
    sink.abort()
    assert list(tmp_path.iterdir()) == []
    # A stage failing for its own reason while a write fails too: abort reports nothing
    # of its own (the stage's error is the one a person must see) and cleans up.
    sink = io.ParquetSink(tmp_path / "y.parquet", pa.schema([("n", pa.int32())]), meta={})
    sink.write(pa.table({"n": pa.array([1], pa.int32())}))
    sink.abort()
    assert list(tmp_path.iterdir()) == []
