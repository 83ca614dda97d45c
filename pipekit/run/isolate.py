"""run_pipeline's stages, each in a forked child of the process that imported everything once.

Why: one `run_pipeline.py` process kept, from stage to stage, what each stage had freed but
its allocators had not handed back (glibc's heaps, Arrow's pools, the counting threads'
arenas), and the next stage grew on top of it: at a million passages one process peaked at
722-736 MB where the largest stage alone (05) peaks at 569 MB, and it was slower than the
five stages run as five processes (bench/README.md, issue 47).  Five processes pay the
imports five times (pyarrow, NumPy and the stages' modules: ~0.3-0.5 s each).  A fork pays
them once: the parent imports, plans and waits; each stage runs in a child that starts as a
copy of the parent (its pages shared until written) and ends with everything it allocated.
The peak of the run is the largest stage's; `wait4()` (bench/scale.py) counts the children.

What a user sees stays what one process showed: the parent prints each stage's "running"
line, the child prints the stage's own lines and summary to the same stdout and stderr,
and what ended the child comes back to the parent through a pipe, to be raised there:
a PipelineError is the same one-line error and exit 1, Ctrl-C the same message and 130, a
closed stdout the same 141 and its note of the last stage that committed.

Which stages: each whose input is large (`worth_a_child`: a child costs a small stage ~0.05 s).
Where no stage is forked (`wanted`, `fits`, and run_pipeline's `main(isolate=False)`):
- no `os.fork` (Windows);
- the Dask engine: its client's connections and threads do not survive a fork, and the
  stages' work runs on the cluster's workers anyway, not in this process;
- `main()` called in-process (tests, a notebook): their monkeypatches and captured
  sys.stdout (pytest's capsys) live in this process's objects; a child's writes to a
  replaced sys.stdout would be lost with the child.  Only the command line isolates;
- `PIPEKIT_ONE_PROCESS=1`: one process, as before, for a profiler that does not follow
  children (py-spy without --subprocesses, pyinstrument) or a debugger.

Fork safety, what the parent has when it forks: its imports (frozen out of the collector,
commands.imports_done), no stage's threads (each stage joins its own before it returns),
and from `begin_pipeline` (pipekit/read/early.py) a BEIR corpus's hashing thread, whose
result the parent hands the child through a pipe (`_hashes_to_child`: stage 01 reads the
records meanwhile), and maybe the fork server of stage 01's hashing process, which the
child adopts (`_adopt_fork_server`).  Arrow's thread pools, jemalloc
and glibc's malloc reset themselves in a forked child (their at-fork handlers); logging's
locks too (Python's).
"""
from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
from pathlib import Path
from typing import Callable

from pipekit.run import malloc
from pipekit.run.errors import PipelineError

OPT_OUT = "PIPEKIT_ONE_PROCESS"
# The child's report is written whole before it ends, into the pipe's buffer (64 KiB on Linux,
# 16 KiB on macOS): one write that never waits for the parent, which reads it after.
REPORT_BYTES = 16000


def wanted() -> bool:
    """May this command run its stages in forked children (the platform, the user's switch)?
    The engine is checked per run (`fits`)."""
    return hasattr(os, "fork") and os.environ.get(OPT_OUT, "") in ("", "0")


def fits(engine) -> bool:
    """A local engine runs its stage in the process that calls it: that process can be a child."""
    return getattr(engine, "kind", None) == "local"


# A stage whose input is smaller than this runs in the parent.  A child costs a small stage
# more than it saves: it starts on a heap of its own (every page it allocates faulted in
# anew) and imports again what the stage before it had imported; a one-file rerun of the
# docs folder (bench/incremental.py, inputs of 19 MB a stage) took 1.63 s forked against
# 1.33 s in one process (medians of ten, bench/README.md, branch fork), and what a small
# stage leaves in the parent is small too.  At 200k passages a stage's input is 60-120 MB.
CHILD_BYTES = 32 << 20


def worth_a_child(stage, cfg: dict) -> bool:
    """Run `stage` in a child?  When its input is large (CHILD_BYTES, or the environment's
    PIPEKIT_CHILD_BYTES): the upstream stage's outputs, or stage 01's input file, or for a
    folder stage 01's last output (none yet: a child, the folder is unknown).  The run's last
    stage too: in this process it peaked 30 MB higher at 200k (284 MB, two runs, against
    252-255 MB forked; bench/README.md, branch fork)."""
    from pipekit.run import io

    limit = int(os.environ.get("PIPEKIT_CHILD_BYTES", CHILD_BYTES))
    out = Path(cfg["paths"]["output"])
    if stage.upstream is not None:
        return sum(io.output_size(out / n) for n in stage.upstream.outputs if (out / n).exists()) >= limit
    source = Path(cfg["documents"]["input"])
    if source.is_file():
        return source.stat().st_size >= limit
    previous = out / stage.outputs[0]
    return not previous.exists() or io.output_size(previous) >= limit


def run_in_child(body: Callable[[], object]) -> None:
    """`body()` in a forked child; here, once the child has ended, what ended it raised again:
    nothing when it returned, else its PipelineError, KeyboardInterrupt, BrokenPipeError or
    SystemExit.  A bug's traceback is printed by the child, and this raises SystemExit(1)."""
    hashes = _hashes_pending()
    for stream in (sys.stdout, sys.stderr):  # else what is buffered is written twice, once by each
        stream.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller
        os.close(read_end)
        _hashes_from_parent(hashes)
        _child(body, write_end)
    os.close(write_end)
    _hashes_to_child(hashes)
    report, status, interrupted = _wait(pid, read_end)
    _raise(report, status)
    if interrupted:  # the stage had committed when Ctrl-C came: the run stops before the next
        raise KeyboardInterrupt


# ---- the child ----------------------------------------------------------------------------

def _child(body: Callable[[], object], write_end: int) -> None:
    code, report = 1, {"outcome": "crash"}
    try:
        malloc.stage_ends_process()  # its stage may keep what it frees (malloc.keep_for_the_stage)
        _die_with_parent()
        _one_interrupt()
        _adopt_fork_server()
        try:
            body()
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # committed: a Ctrl-C now is the parent's to report
            code, report = 0, {"outcome": "ok"}
        except PipelineError as exc:
            report = {"outcome": "error", "error": _picklable(exc)}
        except KeyboardInterrupt:
            code, report = 130, {"outcome": "interrupted"}
        except BrokenPipeError:
            code, report = 141, {"outcome": "pipe"}
        except SystemExit as exc:
            report = {"outcome": "exit", "code": exc.code}
        except BaseException:  # noqa: BLE001 - a bug: its traceback, printed as Python would
            import traceback

            traceback.print_exc()
        _end(report)
        data = pickle.dumps(report)
        if len(data) > REPORT_BYTES:  # an error of many lines: its first ones
            report["error"] = PipelineError(str(report.get("error", ""))[:REPORT_BYTES // 8])
            data = pickle.dumps(report)
        os.write(write_end, data)
    finally:
        os._exit(code)


def _end(report: dict) -> None:
    """What a process's normal exit does that matters, as commands.finish does it: the old
    outputs' second names unlinked (io.settle), the stage's leftover threads joined and
    their exit hooks run (a process pool's), atexit's handlers, stdout and stderr flushed.
    Then the parent learns whether stdout was cut and which stage committed last."""
    from pipekit.run import commands

    io = sys.modules.get("pipekit.run.io")
    if io is not None:
        io.settle()
    shutdown = getattr(threading, "_shutdown", None)  # CPython: what exit does with threads
    if shutdown is not None:
        shutdown()
    import atexit

    run = getattr(atexit, "_run_exitfuncs", None)
    if run is not None:
        run()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass
    report["cut"] = bool(getattr(sys.stdout, "cut", False))
    report["stage_done"] = commands._STAGE_DONE


def _picklable(exc: PipelineError) -> PipelineError:
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - an error type of odd arguments: its line is what matters
        return PipelineError(str(exc))


def _die_with_parent() -> None:
    """Linux: the child is stopped when run_pipeline is killed (SIGTERM, SIGKILL), as one
    process would have been, instead of running on alone."""
    parent = os.getppid()
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # killed before the line above
        os._exit(1)


def _one_interrupt() -> None:
    """The first SIGINT raises KeyboardInterrupt, the ones after it are ignored: Ctrl-C reaches
    the whole process group, and the parent forwards what it gets (for a `kill -INT` of the
    parent alone); a second one inside the stage's abort would leave its temp files."""
    def handler(signum, frame):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, handler)


def _adopt_fork_server() -> None:
    """Stage 01's hashing process comes from a fork server the parent may have started
    early (pipekit/read/early.py).  The child reaches it through what it inherited (the
    socket's address, the liveness pipe), but multiprocessing checks the server with
    `waitpid`, which only its parent may call: in the child that raises ChildProcessError.
    So the child checks it by signal 0 instead, and starts its own only if it is gone."""
    fs = sys.modules.get("multiprocessing.forkserver")
    server = getattr(fs, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    if pid is None:
        return
    try:
        os.kill(pid, 0)
        alive = True
    except OSError:
        alive = False
    if not alive:  # forget it: the child starts a server of its own if it needs one
        server._forkserver_pid = server._forkserver_address = server._forkserver_alive_fd = None
        return
    from multiprocessing import resource_tracker

    server.ensure_running = resource_tracker.ensure_running  # the instance's check; the server runs


# A BEIR corpus's content hash runs on a thread begin_pipeline started (pipekit/read/early.py)
# and a thread does not survive a fork.  Waiting for it before the fork held stage 01 back:
# at a million passages the hash ends ~1 s after the imports, and stage 01 reads its records
# while it runs (pipekit/read/beir_ahead.py).  So the child gets the hash through a pipe when
# the parent's thread has it, and waits for it only where the listing asks (`hashed_ahead`).

def _hashes_pending() -> list[tuple[tuple, int, int]]:
    """(the file's identity, read end, write end) of each hash still running here."""
    hashing = sys.modules.get("pipekit.run.hashing")
    ahead = getattr(hashing, "_AHEAD", {})
    return [(key, *os.pipe()) for key, (done, _) in list(ahead.items()) if not done.is_set()]


def _hashes_to_child(pending: list) -> None:
    """The parent: each hash written to its pipe by a thread once done ("" if it failed)."""
    hashing = sys.modules.get("pipekit.run.hashing")
    for key, read_end, write_end in pending:
        os.close(read_end)
        done, box = hashing._AHEAD[key]

        def send(done=done, box=box, write_end=write_end) -> None:
            done.wait()
            try:
                os.write(write_end, (box[0] if box else "").encode())
            finally:
                os.close(write_end)

        threading.Thread(target=send, name="pipekit-hash-to-child", daemon=True).start()


class _HashFromParent:
    """In the child, the Event `hashed_ahead` waits on: set when the parent's pipe ends."""

    def __init__(self, read_end: int, box: list):
        self.read_end, self.box = read_end, box

    def is_set(self) -> bool:
        return self.read_end is None

    def wait(self) -> None:
        if self.read_end is None:
            return
        data = b""
        while part := os.read(self.read_end, 64):
            data += part
        os.close(self.read_end)
        self.read_end = None
        if data:
            self.box.append(data.decode())


def _hashes_from_parent(pending: list) -> None:
    """The child: each running hash's entry now waits on its pipe instead of the lost thread."""
    hashing = sys.modules.get("pipekit.run.hashing")
    for key, read_end, write_end in pending:
        os.close(write_end)
        box: list = []
        hashing._AHEAD[key] = (_HashFromParent(read_end, box), box)


# ---- the parent ---------------------------------------------------------------------------

def _wait(pid: int, read_end: int) -> tuple[dict | None, int, bool]:
    """The child's report (None if it died without one), its wait status, and whether Ctrl-C
    came meanwhile.  Ctrl-C here is passed on to the child and the wait goes on: the child
    aborts its outputs, and its report says it was interrupted.  The report is read once the
    child has ended, from the pipe's buffer, not up to the pipe's end: a process the stage
    started and left running would hold its copy of the pipe open."""
    interrupted = False
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except KeyboardInterrupt:
            interrupted = True
            _forward(pid)
    os.set_blocking(read_end, False)
    chunks = []
    try:
        while chunk := os.read(read_end, REPORT_BYTES):
            chunks.append(chunk)
    except BlockingIOError:
        pass
    finally:
        os.close(read_end)
    data = b"".join(chunks)
    return (pickle.loads(data) if data else None), status, interrupted


def _forward(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        pass


def _raise(report: dict | None, status: int) -> None:
    from pipekit.run import commands

    if report is None:  # killed (the OOM killer, a segfault): this process ends the same way
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
        if sig:
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        raise SystemExit(os.waitstatus_to_exitcode(status) or 1)
    if report.get("stage_done"):
        commands.mark_stage_done(report["stage_done"])
    if report.get("cut") and hasattr(sys.stdout, "cut"):
        sys.stdout.cut = True  # commands.PipeProof: the command reports it at its end
    outcome = report["outcome"]
    if outcome == "ok":
        return
    if outcome == "error":
        raise report["error"]
    if outcome == "interrupted":
        raise KeyboardInterrupt
    if outcome == "pipe":
        raise BrokenPipeError("stdout closed while the stage ran")
    if outcome == "exit":
        raise SystemExit(report["code"])
    raise SystemExit(1)  # a bug: the child printed its traceback
