"""A one-file rerun's fixed costs (issue 47): how a command ends, how an output is replaced,
how stage 04/05 find the C library.  Each test checks what the cut must keep, not only that
it is fast: every line printed, exit codes, atexit handlers, a waited-for thread; the old
output intact until the rename, the new one after, no second name left behind."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pipekit.run import io, malloc
from conftest import REPO

ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=REPO,
                          timeout=60)


def test_finish_ends_with_the_code_after_atexit_and_flushed_output_but_no_teardown():
    proc = run_python(
        "import atexit, sys\n"
        "from pipekit.run.commands import finish, guard_stdout\n"
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
        "class Teardown:\n"
        "    def __del__(self):\n"
        "        print('teardown ran', flush=True)\n"
        "kept = Teardown()\n"
        "guard_stdout()\n"
        "sys.stdout.write('no newline, never flushed')\n"
        "sys.stderr.write('to stderr')\n"
        "finish(3)\n"
        "print('not reached')\n")
    assert proc.returncode == 3
    assert proc.stdout.startswith("no newline, never flushed")
    assert "atexit ran" in proc.stdout
    assert "not reached" not in proc.stdout
    assert "teardown ran" not in proc.stdout  # the interpreter's teardown is what finish skips
    assert proc.stderr == "to stderr"


def test_finish_waits_for_a_running_thread_as_a_normal_exit_does():
    proc = run_python(
        "import threading, time\n"
        "from pipekit.run.commands import finish\n"
        "threading.Thread(target=lambda: (time.sleep(0.3), print('thread done', flush=True))).start()\n"
        "finish(0)\n")
    assert proc.returncode == 0
    assert proc.stdout == "thread done\n"


def test_run_pipeline_keeps_its_exit_codes_and_its_output(tmp_path):
    out = tmp_path / "out"
    ok = subprocess.run([sys.executable, "run_pipeline.py", "--set", f"paths.output={out}"], cwd=REPO,
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.rstrip().splitlines()[-1].startswith("pipeline: done in")
    assert (out / "05_results.parquet").exists()
    assert not [p.name for p in out.iterdir() if ".tmp-" in p.name or ".old-" in p.name]
    bad = subprocess.run([sys.executable, "run_pipeline.py", "--set", f"paths.output={out}",
                          "--set", "chunking.target=-5"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1
    assert "chunking.target" in bad.stderr


def test_the_old_output_is_unlinked_off_the_stage_thread_and_readers_keep_it(tmp_path, monkeypatch):
    target, tmp = tmp_path / "03_chunks.parquet", tmp_path / "03_chunks.parquet.tmp-1"
    target.write_bytes(b"old" * 1000)
    tmp.write_bytes(b"new")
    unlinked_on = []
    real_unlink = os.unlink

    def unlink(path, *a, **k):
        unlinked_on.append((Path(path).name, threading.current_thread() is threading.main_thread()))
        return real_unlink(path, *a, **k)

    monkeypatch.setattr(os, "unlink", unlink)
    with open(target, "rb") as reader:  # a search server holding the previous index
        io.replace_output(tmp, target)
        io.settle()
        assert reader.read() == b"old" * 1000
    assert target.read_bytes() == b"new"
    assert not tmp.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["03_chunks.parquet"]
    assert unlinked_on == [(f"03_chunks.parquet.old-freed-{os.getpid()}", False)]


def test_without_hard_links_the_output_is_replaced_by_the_rename_alone(tmp_path, monkeypatch):
    target, tmp = tmp_path / "04_terms.parquet", tmp_path / "04_terms.parquet.tmp-1"
    target.write_bytes(b"old")
    tmp.write_bytes(b"new")

    def no_links(*a, **k):
        raise PermissionError("no hard links on this file system")

    monkeypatch.setattr(os, "link", no_links)
    io.replace_output(tmp, target)
    io.settle()
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["04_terms.parquet"]


def test_killed_between_the_second_name_and_the_rename_the_old_output_stands_and_is_swept(tmp_path):
    # the temp file of a run long gone (no process has that id), as the killed run's own is
    target, tmp = tmp_path / "02_preprocessed.parquet", tmp_path / "02_preprocessed.parquet.tmp-999999999"
    target.write_bytes(b"old")
    tmp.write_bytes(b"new")
    # The process dies inside the commit, after the hard link and before the rename.
    proc = run_python(
        "import os\n"
        "from pathlib import Path\n"
        "from pipekit.run import io\n"
        "os.replace = lambda *a, **k: os._exit(9)\n"
        f"io.replace_output(Path({str(tmp)!r}), Path({str(target)!r}))\n")
    assert proc.returncode == 9
    assert target.read_bytes() == b"old"
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("02_preprocessed.parquet.old-freed-")]
    assert len(aside) == 1 and aside[0].read_bytes() == b"old"  # the second name, left by the kill
    io.sweep_orphans(target)  # what the next run does before it writes (the pid is dead)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["02_preprocessed.parquet"]
    assert target.read_bytes() == b"old"


def test_the_c_library_is_found_without_a_subprocess(monkeypatch):
    def no_subprocess(*a, **k):
        raise AssertionError("a subprocess (ldconfig) started to find the C library")

    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    malloc._libc.cache_clear()
    try:
        if sys.platform != "linux":
            pytest.skip("mallopt is glibc's")
        assert malloc.keep_freed_memory()
        malloc.release_freed_memory()
    finally:
        malloc._libc.cache_clear()


def test_a_run_returns_with_the_old_outputs_second_names_gone(tmp_path, monkeypatch):
    # The old outputs are unlinked on threads while the next stage runs; a caller of main()
    # (a test, a notebook) still finds only the outputs when it returns, however slow the unlink.
    import time

    import run_pipeline

    out = tmp_path / "out"
    assert run_pipeline.main(["--set", f"paths.output={out}", "--to", "2"]) == 0
    real_unlink = os.unlink

    def slow_unlink(path, *a, **k):
        if ".old-freed-" in str(path):
            time.sleep(0.3)
        return real_unlink(path, *a, **k)

    monkeypatch.setattr(os, "unlink", slow_unlink)
    assert run_pipeline.main(["--set", f"paths.output={out}", "--to", "2", "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["01_documents.parquet", "01_files.parquet",
                                                     "02_preprocessed.parquet"]


@pytest.mark.parametrize("script", ["run_pipeline.py", "02_preprocessing.py"])
def test_a_command_puts_what_its_imports_made_out_of_the_collectors_walks(tmp_path, script):
    """run_pipeline and a stage run as commands freeze their modules' objects (gc.freeze,
    pipekit.run.commands.imports_done): a full collection in a one-file rerun walked every
    one of them, 14-27 ms.  A stage's main called with argv (as tests do) leaves the
    collector alone: only the command line freezes its process."""
    probe = ("import atexit, gc, runpy, sys\n"
             "atexit.register(lambda: print('frozen', gc.get_freeze_count(), flush=True))\n"
             f"sys.argv = [{script!r}, '--status' if {script!r} == 'run_pipeline.py' else '--force',"
             f" '--set', 'paths.output={tmp_path}']\n"
             f"runpy.run_path({script!r}, run_name='__main__')\n")
    proc = run_python(probe)
    frozen = int(proc.stdout.rsplit("frozen ", 1)[1].split()[0])
    assert frozen > 10_000, proc.stdout + proc.stderr  # ~35k after run_pipeline's imports
    called = run_python(
        "import gc, sys\n"
        "from pipekit.run.stages import load_stage\n"
        "stage = load_stage(2)\n"
        f"code = stage.stage_main(2, stage.run, argv=['--set', 'paths.output={tmp_path}'])\n"
        "print('frozen', gc.get_freeze_count(), 'code', code)\n")
    assert called.stdout.rsplit("frozen ", 1)[1].split()[:3] == ["0", "code", "1"], called.stdout + called.stderr


def test_a_footer_read_again_is_parsed_once_and_a_rewritten_file_read_by_its_own(tmp_path, monkeypatch):
    # io.parquet_file hands pyarrow the metadata it made of the same footer bytes before; a
    # file written again in place (same name, same size, another footer) is read anew.
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    write = lambda values, note: pq.write_table(  # noqa: E731
        pa.table({"n": pa.array(values, pa.int64())}).replace_schema_metadata({io.META_KEY: note}), path)
    write([1, 2, 3], b'{"run": "a"}')
    first = io.parquet_file(path)
    assert first.read().column("n").to_pylist() == [1, 2, 3]
    parsed = []
    real = pq.ParquetFile.__init__
    monkeypatch.setattr(pq.ParquetFile, "__init__",
                        lambda self, source, **kw: parsed.append(kw.get("metadata") is None) or real(self, source, **kw))
    assert io.read_meta(path) == {"run": "a"} and io.row_count(path) == 3 and io.schema(path).names == ["n"]
    assert io.read_table(path).column("n").to_pylist() == [1, 2, 3]
    assert parsed and not any(parsed)  # every open after the first took the parsed footer
    write([7, 8, 9], b'{"run": "b"}')  # the same size, in place
    assert io.read_table(path).column("n").to_pylist() == [7, 8, 9]
    assert io.read_meta(path) == {"run": "b"}
    assert parsed[-2] is True  # the new footer, parsed
    path.write_bytes(b"not parquet at all")
    with pytest.raises(io.PipelineError):
        io.read_table(path)
    assert io.read_meta(path) is None
