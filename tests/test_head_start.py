"""Stage 01's head start (pipekit/read/early.py, parallel.HeadStart): files read before the stage
imports Arrow, their rows used only where they are the rows the stage would read now."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipekit.read import early, parallel
from pipekit.read.documents import read_document
from pipekit.read.parallel import Readers
from pipekit.read.walk import list_inputs
from pipekit.run.incremental import list_files

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_head_left(monkeypatch):
    # Every file counts as enough work for the pool; no head start leaks between tests.
    monkeypatch.setattr(parallel, "POOL_SECONDS", 0.0)
    monkeypatch.setattr(parallel, "TASK_FILES", 2)
    monkeypatch.setattr(parallel, "_HEAD", None)
    yield
    head = parallel._HEAD
    if head is not None:
        head.join()
        if head.pool is not None:
            head.pool.shutdown(wait=True, cancel_futures=True)


def _pages(root: Path, n: int = 8) -> Path:
    root.mkdir()
    for i in range(n):
        (root / f"p{i}.html").write_text(f"<html><body><h1>Page {i}</h1><p>Words of page {i}.</p></body></html>")
    return root


def _walk(root: Path):
    return list_inputs(root, [], [], False)


def _wait(head) -> None:
    head.join()
    for f in head.futures:
        f.result()


def test_rows_read_ahead_are_used_by_the_stage_and_equal_a_serial_read(tmp_path):
    root = _pages(tmp_path / "docs")
    assert parallel.begin_head_start(2, _walk(root), seconds=100.0)
    head = parallel._HEAD
    _wait(head)
    entries = _walk(root)  # the stage's own walk, later
    parallel.listed(list_files(entries, None))
    with Readers(2, pool_seconds=0) as readers:
        rows = list(readers.read(entries))
        assert readers.pool is head.pool  # the head start's workers, not a second pool
    assert parallel._HEAD is None
    assert len(head.futures) == len(head.tasks) > 1
    assert rows == [read_document(e) for e in entries]


def test_a_file_changed_after_it_was_read_ahead_is_read_again(tmp_path):
    root = _pages(tmp_path / "docs")
    assert parallel.begin_head_start(2, _walk(root), seconds=100.0)
    _wait(parallel._HEAD)
    # Same size, other words: the entries still match, only the bytes tell.
    (root / "p3.html").write_text("<html><body><h1>Page 3</h1><p>Words of edit 3.</p></body></html>")
    entries = _walk(root)
    parallel.listed(list_files(entries, None))  # the stage's listing hashes the new bytes
    with Readers(2, pool_seconds=0) as readers:
        rows = {r["doc_id"]: r for r in readers.read(entries)}
    assert "edit 3" in rows["p3.html"]["text"]
    assert rows["p3.html"] == read_document(next(e for e in entries if e.doc_id == "p3.html"))


def test_when_the_stage_walks_other_entries_its_own_rows_follow(tmp_path):
    root = _pages(tmp_path / "docs")
    assert parallel.begin_head_start(2, _walk(root), seconds=100.0)
    _wait(parallel._HEAD)
    (root / "p0b.html").write_text("<html><body><p>A page added after the head start.</p></body></html>")
    (root / "p5.html").unlink()
    entries = _walk(root)
    parallel.listed(list_files(entries, None))
    with Readers(2, pool_seconds=0) as readers:
        rows = list(readers.read(entries))
    assert [r["doc_id"] for r in rows] == [e.doc_id for e in entries]
    assert rows == [read_document(e) for e in entries]


def test_without_the_stage_listing_nothing_read_ahead_is_used(tmp_path):
    root = _pages(tmp_path / "docs")
    assert parallel.begin_head_start(2, _walk(root), seconds=100.0)
    head = parallel._HEAD
    entries = _walk(root)
    with Readers(2, pool_seconds=0) as readers:
        rows = list(readers.read(entries))
        assert readers.pool is not head.pool
    assert rows == [read_document(e) for e in entries]


def _cfg_args(root: Path, out: Path, *more: str) -> list[str]:
    return ["--set", f"documents.input={root}", "--set", f"paths.output={out}", "--set", "engine.workers=2", *more]


def test_begin_reads_ahead_only_when_the_run_reads_every_file(tmp_path):
    root, out = _pages(tmp_path / "docs"), tmp_path / "out"
    assert early.begin(_cfg_args(root, out))  # no previous output: every file is read
    _wait(parallel._HEAD)
    head, parallel._HEAD = parallel._HEAD, None
    head.pool.shutdown(wait=True)
    out.mkdir()
    (out / "01_documents.parquet").write_bytes(b"")
    assert not early.begin(_cfg_args(root, out))  # a rerun: the stage reads what changed, here
    assert parallel._HEAD is None
    assert early.begin(_cfg_args(root, out, "--force"))
    _wait(parallel._HEAD)


def test_begin_never_raises_and_leaves_errors_to_the_stage(tmp_path):
    root, out = _pages(tmp_path / "docs"), tmp_path / "out"
    assert not early.begin(_cfg_args(root, out, "--set", "documents.nonsense=1"))
    assert not early.begin(_cfg_args(tmp_path / "missing", out))
    assert not early.begin(_cfg_args(root, out, "--set", "engine.workers=1"))
    assert not early.begin(["--config", str(tmp_path / "nowhere.yaml"), "--set", "paths.output=["])
    assert not early.begin(_cfg_args(root, out, "--help"))
    assert parallel._HEAD is None


def test_stage_01_alone_reads_ahead_and_writes_the_rows_of_a_run_without(tmp_path):
    # A script run: rows read before the imports, the output the same as reading them after.
    root = _pages(tmp_path / "docs", 40)
    env = {k: v for k, v in os.environ.items()}
    probe = ("import runpy, sys; from pipekit.read import parallel; parallel.POOL_SECONDS = 0.0; "
             "seen = []; adopt = parallel.HeadStart.adopt; "
             "parallel.HeadStart.adopt = lambda self, t: (lambda r: (seen.append(len(r[1])), seen.append(self.method), r)[2])(adopt(self, t)); "
             "sys.argv = sys.argv[1:]; "
             "import atexit; atexit.register(lambda: print('ADOPTED', seen, file=sys.stderr)); "
             "runpy.run_path('01_documents.py', run_name='__main__')")
    outs = {}
    for name, head in (("ahead", "true"), ("plain", "false")):
        out = tmp_path / name
        cmd = [sys.executable, "-c", probe, "01_documents.py", "--force", *_cfg_args(root, out)]
        if head == "false":
            cmd = [sys.executable, "01_documents.py", "--force", *_cfg_args(root, out)]
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        if head == "true":
            assert "ADOPTED [" in proc.stderr and "ADOPTED []" not in proc.stderr, proc.stderr
            adopted, method = proc.stderr.split("ADOPTED [")[1].split("]")[0].split(", ")
            assert int(adopted) > 0
            assert method == "'fork'"  # the script has one thread before its imports: workers forked from it
        outs[name] = pq.read_table(out / "01_documents.parquet")
    assert outs["ahead"].equals(outs["plain"])


def test_a_head_start_leaves_the_fork_server_unstarted():
    # Its workers are forked from the stage's process; the server start_early would start for
    # the stage's walk (an interpreter and the readers' imports) would be CPU for nothing.
    code = """
from pathlib import Path
from multiprocessing import forkserver
from pipekit.read import parallel
from pipekit.read.walk import InputEntry

pages = [InputEntry(Path("/nonexistent/x%d.html" % i), "x%d.html" % i, [], format="html", n_bytes=100_000) for i in range(200)]
assert parallel.begin_head_start(2, pages)
assert parallel._HEAD.method == "fork"
assert parallel.start_early(pages, 2)
assert forkserver._forkserver._forkserver_pid is None
parallel._HEAD.pool.shutdown(wait=True, cancel_futures=True)
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "ok", proc.stderr


def test_rows_nobody_takes_are_not_waited_for_at_exit(tmp_path, monkeypatch):
    # A stage that fails before it takes the rows read ahead ends at once: the workers are
    # ended mid-task, not waited for through the tasks queued to them.
    root = tmp_path / "docs"
    root.mkdir()
    page = "<html><body>" + "<p>some <b>words</b> here</p>" * 12_000 + "</body></html>"
    for i in range(40):
        (root / f"p{i:02d}.html").write_text(page)
    monkeypatch.setattr(parallel, "TASK_FILES", 64)
    monkeypatch.setattr(parallel, "TASK_SECONDS", 100.0)  # one task of all 40 pages (seconds of work)
    assert parallel.begin_head_start(2, _walk(root), seconds=100.0)
    head = parallel._HEAD
    head.join()
    processes = list(head.pool._processes.values())
    time.sleep(0.3)  # the task is being read
    t0 = time.perf_counter()
    parallel._drop_head_start()
    for p in processes:
        p.join(10)
    assert time.perf_counter() - t0 < 1.0
    assert not any(p.is_alive() for p in processes)
