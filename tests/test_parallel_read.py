"""Stage 01's files read on worker processes (pipekit/read/parallel.py): the rows a serial read
gives, in the entries' order, with a failing file reported in its row whatever failed."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from pipekit.read import documents, parallel
from pipekit.read.documents import read_document
from pipekit.read.parallel import DIED, Readers
from pipekit.read.walk import list_inputs

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"


def _folder(tmp_path: Path) -> Path:
    """The sample (Markdown, text, CSV, HTML, a good and a corrupt PDF) with Word, EPUB, a
    notebook and reST beside it: every reader, and a file each reader fails on."""
    root = tmp_path / "docs"
    shutil.copytree(REPO / "data" / "sample", root)
    for name in ("guide.docx", "guide.epub"):
        shutil.copy(FIXTURES / "office" / name, root / name)
    notebook = next((FIXTURES / "notebooks").glob("*.ipynb"))
    shutil.copy(notebook, root / notebook.name)
    (root / "intro.rst").write_text("Intro\n=====\n\nSome *text*.\n\nPart\n----\n\nMore.\n")
    (root / "broken.docx").write_bytes(b"PK\x03\x04 not a zip")
    (root / "binary.md").write_bytes(bytes(range(256)) * 40)
    (root / "deep.html").write_text("<div>" * 5000 + "x" + "</div>" * 5000)
    return root


def _entries(root: Path):
    return list_inputs(root, [], [], False)


def _crash_on_crash_md(entry):
    """A reader whose process dies on one file, as a native reader's crash would."""
    if entry.doc_id.endswith("crash.md"):
        os._exit(7)
    return read_document(entry)


def test_rows_on_two_processes_are_the_serial_rows_in_order(tmp_path, monkeypatch):
    # One file a task: rows of later tasks often arrive before earlier ones.
    monkeypatch.setattr(parallel, "TASK_FILES", 1)
    entries = _entries(_folder(tmp_path))
    serial = [read_document(e) for e in entries]
    with Readers(2, pool_seconds=0) as readers:
        rows = list(readers.read(entries))
        assert readers.pool is not None  # read on the workers, not here
    assert [r["doc_id"] for r in rows] == [e.doc_id for e in entries]
    assert rows == serial
    by_id = {r["doc_id"]: r for r in rows}
    # the failing files became rows naming the problem (read on a worker)
    assert by_id["field-guide-2023.pdf"]["status"] == "error" and "corrupt PDF" in by_id["field-guide-2023.pdf"]["error"]
    assert by_id["broken.docx"]["status"] == "error"
    assert by_id["binary.md"]["status"] == "error"
    assert by_id["deep.html"]["status"] == "error" and "nested" in by_id["deep.html"]["error"]
    assert by_id["guide.docx"]["status"] == by_id["intro.rst"]["status"] == "ok"


def test_a_worker_that_dies_costs_its_file_one_error_row_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setattr(parallel, "TASK_FILES", 3)
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(12):
        (root / f"{i:02d}.md").write_text(f"# Page {i}\n\nText {i}.\n")
    (root / "05-crash.md").write_text("# Crash\n")
    entries = _entries(root)
    with Readers(2, pool_seconds=0, read=_crash_on_crash_md) as readers:
        rows = list(readers.read(entries))
    assert [r["doc_id"] for r in rows] == [e.doc_id for e in entries]
    crashed = next(r for r in rows if r["doc_id"] == "05-crash.md")
    assert (crashed["status"], crashed["error"], crashed["format"]) == ("error", DIED, "markdown")
    others = [r for r in rows if r["doc_id"] != "05-crash.md"]
    assert others == [read_document(e) for e in entries if e.doc_id != "05-crash.md"]


def test_a_reader_that_raises_gives_an_error_row_naming_the_exception(tmp_path, monkeypatch):
    (tmp_path / "a.md").write_text("# A\n")
    (tmp_path / "b.md").write_text("# B\n")

    def broken(data: bytes) -> dict:
        raise KeyError("a reader's bug")

    monkeypatch.setitem(documents._READERS, "markdown", broken)
    rows = [read_document(e) for e in _entries(tmp_path)]
    assert [(r["doc_id"], r["status"]) for r in rows] == [("a.md", "error"), ("b.md", "error")]
    assert rows[0]["error"] == "the markdown reader failed (KeyError: \"a reader's bug\")"
    assert rows[0]["text"] is None


def test_little_to_read_starts_no_process(tmp_path):
    # A rerun that reads one changed file must not pay for starting the pool.
    (tmp_path / "new.md").write_text("# New\n\nOne added file.\n")
    entries = _entries(tmp_path)
    with Readers(2) as readers:
        rows = list(readers.read(entries))
        assert readers.pool is None
    assert rows == [read_document(e) for e in entries]


@pytest.mark.parametrize("setting, expected", [(1, 1), (3, 3)])
def test_workers_wanted_takes_the_setting(setting, expected):
    assert parallel.workers_wanted(setting) == expected


def test_workers_wanted_null_is_every_core_this_process_may_use():
    assert parallel.workers_wanted(None) == len(os.sched_getaffinity(0))


def _markdown_folder(tmp_path: Path, n: int = 12) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(n):
        (root / f"{i:02d}.md").write_text(f"# Page {i}\n\n" + "Text. " * (50 * i + 1) + "\n")
    return root


def test_one_task_in_flight_when_its_files_fill_the_byte_budget(tmp_path, monkeypatch):
    # IN_FLIGHT_BYTES bounds the files read ahead (large PDFs must not wait eight at once);
    # a task is still sent when nothing else is in flight, so nothing waits forever.
    monkeypatch.setattr(parallel, "TASK_FILES", 2)
    monkeypatch.setattr(parallel, "IN_FLIGHT_BYTES", 1)
    entries = _entries(_markdown_folder(tmp_path))
    futures, ahead = [], []

    class Counting(parallel.ProcessPoolExecutor):
        def submit(self, fn, *args):
            ahead.append(sum(not f.done() for f in futures))  # tasks still in flight at this one's start
            futures.append(super().submit(fn, *args))
            return futures[-1]

    monkeypatch.setattr(parallel, "ProcessPoolExecutor", Counting)
    with Readers(2, pool_seconds=0) as readers:
        rows = list(readers.read(entries))
    assert rows == [read_document(e) for e in entries]
    assert ahead == [0] * 6  # six tasks of two files, one after another


def test_without_a_process_pool_the_files_are_read_here(tmp_path, monkeypatch):
    def no_semaphores(*args, **kwargs):
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(parallel, "ProcessPoolExecutor", no_semaphores)
    entries = _entries(_markdown_folder(tmp_path, 4))
    with Readers(2, pool_seconds=0) as readers:
        rows = list(readers.read(entries))
        assert readers.workers == 1 and readers.pool is None
    assert rows == [read_document(e) for e in entries]


def test_the_fork_server_starts_when_the_walk_finds_enough_to_read():
    # start_early (called by the stage between its walk and its hashing) starts the server only
    # for as much reading as the pool is started for, and only with more than one worker: a
    # folder of a few pages, or engine.workers 1, starts nothing.  In a process of its own, as
    # the fork server is one per process.
    code = """
import os
from pathlib import Path
from multiprocessing import forkserver
from pipekit.read.parallel import POOL_SECONDS, start_early
from pipekit.read.walk import InputEntry

def page(n_bytes):
    return InputEntry(Path("x.html"), "x.html", [], format="html", n_bytes=n_bytes)

server = lambda: forkserver._forkserver._forkserver_pid
assert not start_early([page(10_000)], 2) and server() is None
assert not start_early([page(100_000_000)], 1) and server() is None
assert start_early([page(10_000)] * 2000, 2)
os.kill(server(), 0)  # running
print("ok")
"""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "ok", proc.stderr


def test_the_workers_do_not_import_the_script_that_started_the_run(tmp_path):
    # multiprocessing runs the starting script again in each worker as `__mp_main__`: for
    # 01_documents.py that was pyarrow, pipekit.cli and the engine, 0.3-0.45 s a worker before its
    # first file.  The script here notes each process that imports it; only its own may.
    import subprocess
    import sys

    docs = _markdown_folder(tmp_path)
    imported = tmp_path / "imported.txt"
    script = tmp_path / "start.py"
    script.write_text(f"""
import os
with open({str(imported)!r}, "a") as f:
    f.write(f"{{os.getpid()}}\\n")
if __name__ == "__main__":
    from pathlib import Path
    from pipekit.read.documents import read_document
    from pipekit.read.parallel import Readers
    from pipekit.read.walk import list_inputs
    entries = list_inputs(Path({str(docs)!r}), [], [], False)
    with Readers(2, pool_seconds=0) as readers:
        rows = list(readers.read(entries))
        assert readers.pool is not None  # read on a worker
    assert rows == [read_document(e) for e in entries]
    print(os.getpid())
""")
    proc = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    assert imported.read_text().split() == [proc.stdout.strip()]
