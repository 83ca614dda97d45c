"""A real cluster, started as README's "On several machines" says: `dask scheduler` and two
`dask worker` processes, each its own process started by its command from the checkout's root.

tests/test_engine.py runs the stages on a LocalCluster, whose processes inherit this one's
sys.path; the `dask` command's do not (it puts its own bin folder first, not the current
folder), so a cluster started as README said could not import `pipekit` and the run died with a
40-line traceback, the one-line message meant for that case missing Dask's wrapping of it.
Here: the README's commands, bound to 127.0.0.1, give the local engine's outputs; processes
started without pipekit's config file give one line; and every form in which Dask hands back a
missing module is recognised.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, assert_same_outputs
from pipekit.run.engine import DaskEngine, code_hashes, missing_module
from pipekit.run.errors import PipelineError

distributed = pytest.importorskip("distributed")

README_ADDRESS = "tcp://10.0.0.5:8786"


def readme_commands() -> list[list[str]]:
    """The sh block of "On several machines", as words: scheduler, worker, pipeline."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("**On several machines.**", 1)[1].split("\n\n**", 1)[0]
    block = re.search(r"^```sh\n(.*?)^```", section, re.S | re.M).group(1)
    return [shlex.split(line) for line in block.splitlines() if line.strip()]


def split_env(words: list[str]) -> tuple[dict, list[str]]:
    """Leading NAME=value words (the command's environment) apart from the command."""
    env = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        name, value = words[0].split("=", 1)
        env[name] = value
        words = words[1:]
    return env, words


def clean_environment() -> dict:
    """This environment, without what would make pipekit importable or configure Dask: a new
    terminal on a machine of the cluster."""
    return {k: v for k, v in os.environ.items()
            if k != "PYTHONPATH" and not k.startswith(("DASK_", "MALLOC_"))}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Processes:
    """Commands started as a user would, each in a session of its own (a worker's nanny starts
    the worker process: stopping the session stops both); all stopped at the end."""

    def __init__(self, logs: Path):
        self.logs, self.started = logs, []
        logs.mkdir(parents=True, exist_ok=True)

    def start(self, words: list[str], env: dict, name: str) -> subprocess.Popen:
        dask = Path(sys.executable).with_name("dask")  # this Python's `dask` command
        if words[0] == "dask" and dask.exists():
            words = [str(dask), *words[1:]]
        log = open(self.logs / f"{name}.log", "w")
        proc = subprocess.Popen(words, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        self.started.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen) -> None:
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        try:  # the nanny's worker process, if it outlived the nanny
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def stop_all(self) -> None:
        for proc in self.started:
            self.stop(proc)

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]


def listening(port: int, procs: Processes, name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{name} did not listen on 127.0.0.1:{port} within {timeout:g} s\n{procs.log(name)}")


def wait_for_workers(address: str, n: int, procs: Processes, timeout: float = 90) -> None:
    with distributed.Client(address, timeout=30) as client:
        try:
            client.wait_for_workers(n, timeout=timeout)
        except TimeoutError:
            raise AssertionError(f"{n} workers did not join {address}\n"
                                 + "\n".join(procs.log(f) for f in sorted(os.listdir(procs.logs)))) from None


def pipekit_importable_by_dask() -> bool:
    """Would a process that, like `dask`, does not put the current folder on its path find a
    pipekit anyway (installed with `pip install -e`, or on PYTHONPATH)?"""
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('pipekit') is None)"
    return subprocess.run([sys.executable, "-P", "-c", probe], cwd=REPO, env=clean_environment(),
                          timeout=60).returncode == 0


def test_the_readme_cluster_commands_run_as_written_and_give_the_local_engines_outputs(tmp_path):
    scheduler, worker, run = readme_commands()
    sched_env, sched = split_env(scheduler)
    work_env, work = split_env(worker)
    run_env, run = split_env(run)
    # The commands as the README gives them (what the substitutions below rely on).
    assert sched[:2] == ["dask", "scheduler"] and "--port" in sched, sched
    assert work[:3] == ["dask", "worker", README_ADDRESS], work
    assert run[:2] == ["python", "run_pipeline.py"] and f"engine.address={README_ADDRESS}" in run, run
    assert sched_env == work_env == {"DASK_CONFIG": "pipekit/dask-workers.yaml"} and run_env == {}

    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    # Only the address changes, and every server binds 127.0.0.1 alone.
    local = ["--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"]
    sched = [w if w != "8786" else str(port) for w in sched] + local
    work = [w.replace(README_ADDRESS, address) for w in work] + local
    run = [sys.executable if w == "python" else w.replace(README_ADDRESS, address) for w in run]
    procs = Processes(tmp_path / "logs")
    try:
        procs.start(sched, {**clean_environment(), **sched_env}, "scheduler")
        listening(port, procs, "scheduler")
        for i in (1, 2):
            procs.start(work, {**clean_environment(), **work_env}, f"worker{i}")
        wait_for_workers(address, 2, procs)
        # partition_rows=3: the sample's 16 files as several tasks, so both workers write parts.
        dask = subprocess.run([*run, "--set", f"paths.output={tmp_path / 'dask'}", "--set", "engine.partition_rows=3"],
                              cwd=REPO, env=clean_environment(), capture_output=True, text=True, timeout=300)
        assert dask.returncode == 0, dask.stdout[-3000:] + dask.stderr[-3000:] + procs.log("worker1")
        assert f"dask: connected to {address} (2 workers)" in dask.stdout
        assert "default profiler" not in dask.stdout  # the workers took pipekit/dask-workers.yaml's settings
        # A worker process its nanny restarts (killed, out of memory) takes the file's path again.
        with distributed.Client(address, timeout=30) as client:
            killed = sorted(client.run(os.getpid).values())[0]
            os.kill(killed, signal.SIGKILL)
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                try:
                    pids = set(client.run(os.getpid).values())
                except Exception:  # the scheduler may still list the killed worker for a moment
                    pids = set()
                if len(pids) == 2 and killed not in pids:
                    break
                time.sleep(0.5)
            else:
                raise AssertionError(f"the killed worker was not restarted\n{procs.log('worker1')}")
            assert list(client.run(code_hashes).values()) == [code_hashes()] * 2
    finally:
        procs.stop_all()
    local_run = subprocess.run([sys.executable, "run_pipeline.py", "--set", f"paths.output={tmp_path / 'local'}"],
                               cwd=REPO, env=clean_environment(), capture_output=True, text=True, timeout=300)
    assert local_run.returncode == 0, local_run.stderr
    assert_same_outputs(tmp_path / "local", tmp_path / "dask")
    assert len(list((tmp_path / "dask" / "01_documents.parquet").glob("part-*.parquet"))) > 1


def test_a_scheduler_or_workers_that_cannot_import_pipekit_are_one_line(tmp_path):
    """Started from the checkout's root without DASK_CONFIG (as README said before): the
    workers fail the code check every run starts with (Dask hands that back as the text of a
    ModuleNotFoundError inside a plain Exception), the scheduler fails to unpickle the first
    task; each is one line naming the fix, never a traceback."""
    if pipekit_importable_by_dask():
        pytest.skip("pipekit is importable here without the checkout on sys.path (pip install -e, or "
                    "PYTHONPATH): a scheduler or worker cannot lack it")
    scheduler, worker, _ = readme_commands()
    sched_env, sched = split_env(scheduler)
    work_env, work = split_env(worker)
    local = ["--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"]
    procs = Processes(tmp_path / "logs")
    fix = ("cannot import 'pipekit': start the scheduler and the workers from the root of this repository's "
           "checkout with DASK_CONFIG=pipekit/dask-workers.yaml (README, \"Running on a cluster\"), or with "
           "the checkout on PYTHONPATH")
    try:
        # (scheduler with the file, worker without), (scheduler without, worker with)
        for case, (s_env, w_env, who) in enumerate((
                (sched_env, {}, "the Dask workers at"), ({}, work_env, "the Dask scheduler or a worker at"))):
            port = free_port()
            address = f"tcp://127.0.0.1:{port}"
            procs.start([w if w != "8786" else str(port) for w in sched] + local,
                        {**clean_environment(), **s_env}, f"scheduler{case}")
            listening(port, procs, f"scheduler{case}")
            procs.start([w.replace(README_ADDRESS, address) for w in work] + local,
                        {**clean_environment(), **w_env}, f"worker{case}")
            wait_for_workers(address, 1, procs)
            proc = subprocess.run([sys.executable, "run_pipeline.py", "--set", "engine.kind=dask",
                                   "--set", f"engine.address={address}", "--set", f"paths.output={tmp_path / 'out'}"],
                                  cwd=REPO, env=clean_environment(), capture_output=True, text=True, timeout=300)
            assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-3000:]
            assert proc.stderr == f"run_pipeline: error: {who} {address} {fix}\n", proc.stderr[-3000:]
            procs.stop_all()
            procs.started.clear()
    finally:
        procs.stop_all()


NO_PIPEKIT = "No module named 'pipekit'"


@pytest.mark.parametrize("form", [
    "plain", "cause", "context", "text", "text-twice", "args",
])
def test_every_form_of_a_missing_module_is_the_one_line_message(form):
    plain = ModuleNotFoundError(NO_PIPEKIT, name="pipekit")
    if form == "plain":
        exc = plain
    elif form in ("cause", "context"):
        try:
            try:
                raise plain
            except ModuleNotFoundError as inner:
                if form == "cause":
                    raise Exception("Error during deserialization of the task graph") from inner
                raise RuntimeError("could not unpickle the task")
        except Exception as outer:
            exc = outer
    elif form == "text":  # what `client.run` raised on workers started as README said
        exc = Exception(repr(plain))
    elif form == "text-twice":
        exc = Exception(repr(Exception(repr(plain))))
    else:
        exc = RuntimeError("task failed", str(plain))
    assert missing_module(exc) == "pipekit"
    engine = DaskEngine("tcp://127.0.0.1:1", 1, None, 1.0, quiet=True)
    with pytest.raises(PipelineError) as got:
        engine._raise(exc)
    assert str(got.value) == ("the Dask scheduler or a worker at tcp://127.0.0.1:1 cannot import 'pipekit': start "
                              "the scheduler and the workers from the root of this repository's checkout with "
                              "DASK_CONFIG=pipekit/dask-workers.yaml (README, \"Running on a cluster\"), or with "
                              "the checkout on PYTHONPATH")
    assert "\n" not in str(got.value)


def test_a_missing_package_is_named_and_other_failures_are_left_alone():
    engine = DaskEngine(None, 1, None, 1.0, quiet=True)
    with pytest.raises(PipelineError, match=r"^the Dask scheduler or a worker at the local cluster cannot import "
                                            r"'wordllama': install the packages there that this checkout's "
                                            r"requirements.txt lists, as here$"):
        engine._raise(Exception(repr(ModuleNotFoundError("No module named 'wordllama'"))))
    other = ValueError("a module named in a document's text is no import error")
    assert missing_module(other) is None
    with pytest.raises(ValueError) as got:
        engine._raise(other)
    assert got.value is other
