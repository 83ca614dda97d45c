"""run_pipeline runs each stage in a forked child (pipekit/run/isolate.py): what a user sees and
what the stages write stay what one process (PIPEKIT_ONE_PROCESS=1) showed and wrote.

Everything that forks runs in a subprocess of its own: a child forked from pytest's process
would run pytest's exit handlers when it ends."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from pipekit.run.io import read_meta
from pipekit.run.stages import STAGES

from conftest import REPO
from test_atomic_writes import PAUSING_RUNNER, default_sigint

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork: run_pipeline keeps one process")

OUTPUTS = [name for s in STAGES for name in s.outputs]
ONE = {"PIPEKIT_ONE_PROCESS": "1"}
CHILD = {"PIPEKIT_CHILD_BYTES": "0"}  # every stage in a child, however small its input


def pipeline(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "run_pipeline.py", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})}, **kw)


def tables(out: Path) -> dict:
    return {n: pq.read_table(out / n) for n in OUTPUTS if (out / n).exists()}


def plain(text: str) -> str:
    """Output with its timings (and the rates made of them) taken out."""
    return re.sub(r"[\d,]+(\.\d+)? (s|queries/s)\b", "T", text)


def python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_forked_stages_write_and_print_what_one_process_does(tmp_path):
    forked = pipeline("--set", f"paths.output={tmp_path / 'a'}", env=CHILD)
    one = pipeline("--set", f"paths.output={tmp_path / 'b'}", env=ONE)
    assert forked.returncode == one.returncode == 0, forked.stderr + one.stderr
    assert plain(forked.stdout).replace("/a/", "/b/") == plain(one.stdout)
    assert forked.stderr == one.stderr
    a, b = tables(tmp_path / "a"), tables(tmp_path / "b")
    assert set(a) == set(OUTPUTS) and set(a) == set(b)
    for name in OUTPUTS:
        assert a[name].equals(b[name]), name
    assert (tmp_path / "a" / "05_results.trec").read_text() == (tmp_path / "b" / "05_results.trec").read_text()
    assert not [p.name for p in (tmp_path / "a").iterdir() if ".tmp-" in p.name or ".old-" in p.name]
    rerun = pipeline("--set", f"paths.output={tmp_path / 'a'}")  # the forked run's outputs are fresh
    assert rerun.stdout.count("fresh, skipped") == 5


def test_a_beir_corpus_read_by_a_child_with_the_parents_hashing_server(tmp_path):
    # Over 16 MB (hashing.HASHING_PROCESS_BYTES): run_pipeline starts the hash and the fork
    # server of stage 01's hashing process before its imports; the child uses both.
    corpus = tmp_path / "corpus.jsonl"
    words = " ".join(f"w{i}" for i in range(90))
    with corpus.open("w") as f:
        for i in range(50_000):
            f.write(f'{{"_id": "d{i}", "title": "t{i % 97}", "text": "{words} x{i}"}}\n')
    assert corpus.stat().st_size > 16 << 20
    common = ["--to", "2", "--set", f"documents.input={corpus}", "--force"]
    forked = pipeline(*common, "--set", f"paths.output={tmp_path / 'a'}", env=CHILD)
    one = pipeline(*common, "--set", f"paths.output={tmp_path / 'b'}", env=ONE)
    assert forked.returncode == one.returncode == 0, forked.stderr + one.stderr
    assert forked.stderr == one.stderr == ""
    for name in STAGES[0].outputs + STAGES[1].outputs:
        assert pq.read_table(tmp_path / "a" / name).equals(pq.read_table(tmp_path / "b" / name)), name


def test_a_forked_child_adopts_the_parents_fork_server():
    # multiprocessing checks its fork server with waitpid, which only the server's parent may
    # call: without the adoption a child's process pool failed with ChildProcessError.
    proc = python(
        "import os\n"
        "from concurrent.futures import ProcessPoolExecutor\n"
        "from multiprocessing import forkserver\n"
        "from pipekit.read.workers import HASHING_PRELOAD, ReadersContext\n"
        "from pipekit.run import isolate\n"
        "ReadersContext().set_forkserver_preload(list(HASHING_PRELOAD))\n"
        "forkserver.ensure_running()\n"
        "server = forkserver._forkserver._forkserver_pid\n"
        "for adopt in (False, True):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        code = 2\n"
        "        try:\n"
        "            if adopt:\n"
        "                isolate._adopt_fork_server()\n"
        "            with ProcessPoolExecutor(1, mp_context=ReadersContext()) as pool:\n"
        "                code = 0 if pool.submit(abs, -7).result() == 7 else 3\n"
        "            code = code if forkserver._forkserver._forkserver_pid == server else 4\n"
        "        except ChildProcessError:\n"
        "            code = 5\n"
        "        os._exit(code)\n"
        "    print(adopt, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n")
    assert proc.stdout.split("\n")[:2] == ["False 5", "True 0"], proc.stderr


def test_a_hash_still_running_at_the_fork_reaches_the_child(tmp_path):
    # The parent does not wait for begin_pipeline's hash before it forks (stage 01 reads its
    # records meanwhile): the child's listing gets it through a pipe when the thread is done.
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "text": "a"}\n')
    proc = python(
        "import sys, threading, time\n"
        "from pipekit.run import hashing\n"
        "from pipekit.run.errors import PipelineError\n"
        "from pipekit.run.isolate import run_in_child\n"
        "gate = threading.Event()\n"
        "real = hashing.file_hash\n"
        "def slow(path, **kw):\n"
        "    gate.wait()\n"
        "    return real(path, **kw)\n"
        "hashing.file_hash = slow\n"
        f"path = {str(corpus)!r}\n"
        "hashing.hash_ahead(path)\n"
        "threading.Timer(0.5, gate.set).start()  # done only after the fork\n"
        "def body():\n"
        "    done = next(iter(hashing._AHEAD.values()))[0]\n"
        "    print('running at the fork' if not done.is_set() else 'done at the fork', flush=True)\n"
        "    got = hashing.hashed_ahead(path)\n"
        "    if got != real(path):\n"
        "        raise PipelineError(f'child got {got!r}')\n"
        "run_in_child(body)\n"
        "print('same hash')\n")
    assert proc.stdout.splitlines() == ["running at the fork", "same hash"], proc.stdout + proc.stderr


def test_what_ends_the_child_is_raised_in_the_parent():
    proc = python(
        "import os, sys\n"
        "from pipekit.run.errors import ConfigError, PipelineError\n"
        "from pipekit.run.isolate import run_in_child\n"
        "parent = os.getpid()\n"
        "def ends(exc):\n"
        "    def body():\n"
        "        assert os.getpid() != parent\n"
        "        print('child ran', flush=True)\n"
        "        if exc is not None:\n"
        "            raise exc\n"
        "    return body\n"
        "gate_r, gate_w = os.pipe()\n"
        "def leaves_a_process():  # a process holding its copy of the report's pipe until this returns\n"
        "    if os.fork() == 0:\n"
        "        quiet = os.open(os.devnull, os.O_WRONLY)\n"
        "        os.dup2(quiet, 1), os.dup2(quiet, 2)\n"
        "        os.read(gate_r, 1)\n"
        "        os._exit(0)\n"
        "run_in_child(leaves_a_process)\n"
        "print('returned before the process it left')\n"
        "os.write(gate_w, b'x')\n"
        "for exc in (None, ConfigError('bad key'), PipelineError('no input'), KeyboardInterrupt(),\n"
        "            BrokenPipeError(), SystemExit(3), RuntimeError('a bug')):\n"
        "    try:\n"
        "        run_in_child(ends(exc))\n"
        "        print('returned')\n"
        "    except BaseException as got:\n"
        "        print(type(got).__name__, got)\n")
    assert proc.stdout.splitlines() == [
        "returned before the process it left",
        "child ran", "returned",
        "child ran", "ConfigError bad key",
        "child ran", "PipelineError no input",
        "child ran", "KeyboardInterrupt ",
        "child ran", "BrokenPipeError stdout closed while the stage ran",
        "child ran", "SystemExit 3",
        "child ran", "SystemExit 1"]
    assert "Traceback" in proc.stderr and "RuntimeError: a bug" in proc.stderr  # the bug's, from the child


@pytest.mark.parametrize("case", ["no documents", "missing upstream", "a bug"])
def test_a_stage_failing_in_its_child_says_what_one_process_said(tmp_path, case):
    (tmp_path / "empty").mkdir()
    args = {"no documents": ["--set", f"documents.input={tmp_path / 'empty'}"],
            "missing upstream": ["--from", "3"],
            "a bug": ["--set", "chunking.target=oops"]}[case]
    if case == "a bug":  # a stage's body that raises what no stage means to raise
        run = ["-c", "import runpy, sys\n"
                     "from pipekit.run import stages\n"
                     "real = stages.load_stage\n"
                     "def load(n):\n"
                     "    m = real(n)\n"
                     "    if n == 3:\n"
                     "        def run(ctx):\n"
                     "            raise RuntimeError('boom in stage 03')\n"
                     "        m.run = run\n"
                     "    return m\n"
                     "stages.load_stage = load\n"
                     "sys.argv = sys.argv[1:]\n"
                     "runpy.run_path('run_pipeline.py', run_name='__main__')\n", "run_pipeline.py"]
        args = []
    else:
        run = ["run_pipeline.py"]

    def go(out: str, env: dict):
        return subprocess.run([sys.executable, *run, "--set", f"paths.output={tmp_path / out}", *args], cwd=REPO,
                              capture_output=True, text=True, timeout=300, env={**os.environ, **env})

    forked, one = go("a", CHILD), go("b", ONE)
    assert forked.returncode == one.returncode == 1
    assert plain(forked.stdout).replace("/a", "/b") == plain(one.stdout)
    if case == "a bug":
        assert "RuntimeError: boom in stage 03" in forked.stderr and "Traceback" in forked.stderr
        assert "04_indexing" not in forked.stdout  # the run stopped there
    else:
        assert forked.stderr.replace("/a", "/b") == one.stderr
        assert forked.stderr.startswith("run_pipeline: error: ")


@pytest.mark.skipif(sys.platform != "linux", reason="POSIX signals, prctl")
@pytest.mark.parametrize("to", ["the process group", "run_pipeline alone"])
def test_ctrl_c_in_a_child_stage_leaves_its_previous_output_and_exits_130(tmp_path, to):
    out = tmp_path / "out"
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"paths": {"output": str(out)},
                                   "documents": {"input": str(REPO / "data" / "sample")},
                                   "retrieval": {"queries": ["page the secondary"], "qrels": None}}))
    assert pipeline("--config", str(cfg), "--to", "4").returncode == 0
    before = {n: (pq.read_table(out / n), read_meta(out / n)) for n in STAGES[3].outputs}

    # run_pipeline from stage 04 on, paused in stage 04's first write on its main thread
    # (tests/test_atomic_writes.py pauses stage 04 run alone the same way).
    flag = tmp_path / "paused"
    proc = subprocess.Popen([sys.executable, "-c", PAUSING_RUNNER, "run_pipeline.py", "--config", str(cfg),
                             "--from", "4", "--set", "indexing.b=0.5"], cwd=REPO,
                            env={**os.environ, **CHILD, "PAUSE_FLAG": str(flag)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=default_sigint)
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "stage 04 never started writing"
            time.sleep(0.02)
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert len(children) == 1  # the stage runs in a child
        child = int(children[0])
        assert any(".tmp-" in p.name for p in out.iterdir())  # mid-write
        if to == "the process group":  # what a terminal's Ctrl-C does
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert stderr.endswith("run_pipeline: interrupted; outputs of finished stages are kept\n"), stderr
    assert "Traceback" not in stderr
    assert "04_indexing: running" in stdout and "05_retrieval" not in stdout
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)  # the child ended with the run
    assert not [p.name for p in out.iterdir() if ".tmp-" in p.name]
    for name, (table, meta) in before.items():
        assert pq.read_table(out / name).equals(table) and read_meta(out / name) == meta, name


def test_which_stages_get_a_child(tmp_path):
    from pipekit.run.isolate import CHILD_BYTES, worth_a_child
    from pipekit.run.stages import get_stage

    out, docs = tmp_path / "out", tmp_path / "docs"
    docs.mkdir()
    cfg = {"paths": {"output": str(out)}, "documents": {"input": str(docs)}}
    assert worth_a_child(get_stage(1), cfg)  # a folder read for the first time: unknown, large
    out.mkdir()
    (out / "01_documents.parquet").write_bytes(b"x" * 1000)
    assert not worth_a_child(get_stage(1), cfg)  # its last output was small
    assert not worth_a_child(get_stage(2), cfg)
    with (out / "01_documents.parquet").open("r+b") as f:
        f.truncate(CHILD_BYTES)  # (sparse: the size is what counts)
    assert worth_a_child(get_stage(2), cfg)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(b"{}\n")
    assert not worth_a_child(get_stage(1), {**cfg, "documents": {"input": str(corpus)}})
