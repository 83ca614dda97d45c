"""Stage 01's files read on every core: `read_document` for each entry, rows in the entries' order.

Why processes, reader by reader (measured on this 2-core machine, bench/README.md "Stage 01 on
both cores"): html-to-markdown (Rust) holds the GIL through a whole conversion, so two threads
converted the Python manual in the wall time of one; lxml lets go of it only while parsing;
PDFium (pypdfium2) is not thread-safe at all, and a lock around it would make threads serial
for PDFs; docutils and mammoth are pure Python.  So each worker is a process of its own, with
its own PDFium, and no reader needs a lock.

The workers are forked from a fork server started for the run (`forkserver`, not `fork`):
stage 01's process holds threads (the Parquet writer, Arrow's pools, the progress bar) that a
plain fork would copy mid-lock into the child.  Starting the server and its imports costs about
0.2 s (it imports the readers, not Arrow), begun as soon as the walk knows the files in a run that
reads them all (`start_early`, beside the hashing); a run with little to read (a rerun that reads
one changed file) reads in this process and starts nothing: the work is estimated from each file's size and its format's
measured speed (`_MB_PER_S`), and only more than `POOL_SECONDS` of it goes to the pool.

Run alone with every file to read, stage 01 submits its first tasks before it imports Arrow
(`HeadStart`, from pipekit/read/early.py): those workers are forked from the stage's process
while it still has one thread, and their rows are used only where they are the rows the stage's
own walk and listing call for.

Files travel in tasks of consecutive entries (`_tasks`: ~50 ms of estimated work or 64 files),
so a folder of small Markdown files does not pay one round trip per file; a bounded number of
tasks are in flight (`IN_FLIGHT` per worker), so memory holds a few tasks' texts, never the
folder's, and the rows come back in order whichever worker finished first.

Nothing is lost to a worker: `read_document` turns any reader's exception into an `error` row
naming the file and the exception.  A worker that dies (a native reader crashing, the memory
killer) breaks the pool; the files of the task being waited for are then read again one at a
time, each in a process of its own, and the one whose process dies again gets an `error` row
saying so; the other tasks go to a fresh pool.

A worker does not import the script that started the run.  multiprocessing's `spawn` and
`forkserver` run it again in every worker as `__mp_main__`, for functions defined there; the
readers are all importable by name, and 01_documents.py's own imports (pyarrow, pipekit.cli and
the engine: 0.3-0.45 s of CPU a worker, both workers at once, while the stage waited for its first
row) were the workers' whole start-up.  So the workers are started with the script left out
(pipekit/read/workers.py); a reader given from `__main__` (a test's, a script's own) gets the usual start.
One cost of processes remains, said here so nobody is surprised: memory peaks at about
`workers` documents converting at once, not one.

Not done here: choosing the worker count (the stage passes `engine.workers`, null: every
core) or reading on a Dask cluster (each cluster worker reads its part in its own process).
"""
from __future__ import annotations

import os
import sys
from collections import deque
from itertools import chain
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from pipekit.read.documents import READER_MODULES, failed_row, read_document
from pipekit.read.walk import InputEntry

if TYPE_CHECKING:  # (annotations only: the pool itself is imported when first wanted)
    from concurrent.futures import ProcessPoolExecutor

# multiprocessing and the process pool are imported when a pool is first wanted: a rerun that
# reads one changed file here paid 7.8 ms for them (`python -X importtime`: subprocess, locale,
# the pool's machinery), a twentieth of its stage 01.  `parallel.ProcessPoolExecutor` and
# `parallel.BrokenProcessPool` are still this module's names (tests replace the first).
_LAZY = {"ProcessPoolExecutor": ("concurrent.futures", "ProcessPoolExecutor"),
         "BrokenProcessPool": ("concurrent.futures.process", "BrokenProcessPool")}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = getattr(__import__(module, fromlist=[attr]), attr)
    globals()[name] = value  # found as a plain global from now on (and replaceable by a test)
    return value


def _lazy(name: str):
    return globals()[name] if name in globals() else __getattr__(name)


# One core's reading speed by format, MB/s (stage 01's readers on the Python manual, R's PDF
# manuals, docs_qa's Markdown and docs_qa2's reST, bench/README.md): only to tell a run worth
# the pool's start from one that is not, and to cut tasks of similar work.
_MB_PER_S = {"markdown": 30.0, "text": 30.0, "csv": 30.0, "python": 5.0, "notebook": 5.0,
             "html": 8.0, "epub": 3.0, "pdf": 3.0, "docx": 1.0, "rst": 0.5}
POOL_SECONDS = 1.0   # estimated work below which the files are read here, with no pool started
TASK_SECONDS = 0.05  # estimated work of one task: enough to hide the round trip (~0.3 ms)
TASK_FILES = 64
IN_FLIGHT = 4        # tasks queued per worker: a large PDF in one does not stall the others
IN_FLIGHT_BYTES = 256 * 1024 * 1024  # files' bytes in flight at most, beyond the first task
DIED = "the reading process ended while reading this file (a crash in a native reader, or out of memory?)"


def workers_wanted(setting: int | None) -> int:
    """`engine.workers` as stage 01 reads it on the local engine: null is every core this
    process may use."""
    if setting:
        return setting
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def estimated_seconds(entry: InputEntry) -> float:
    """One core's time to read `entry`, roughly: 0 for a row the walk already decided."""
    if entry.skip is not None or entry.error is not None:
        return 0.0
    return entry.n_bytes / 1e6 / _MB_PER_S.get(entry.format, 30.0)


def start_early(entries: list[InputEntry], workers: int) -> bool:
    """Start the fork server now, if `entries` hold enough reading for the pool (the estimate
    `Readers.read` makes): True if it was started.

    The server's start (an interpreter and the readers' imports, ~0.2 s) is otherwise waited
    for at the first file, with the second core idle; started when the walk is done, it runs
    beside the hashing of the files, the fingerprints and the stage's set-up.  The stage asks
    only when every file will be read (`--force`, or no previous output): a rerun reads what
    changed and starts nothing.  A server started and then not used costs its start, once,
    and ends with the stage's process."""
    if _HEAD is not None:
        return True  # reading began before the imports (HeadStart): its workers need no server
    if len(entries) == 1 and entries[0].format == "beir" and entries[0].skip is None:
        # Read in the stage's process: the server only forks the lines' hashing process.
        from pipekit.read import beir_ahead
        from pipekit.read.workers import start_hashing_server

        started = start_hashing_server(entries[0].n_bytes, workers)
        # Its records read from now on, while the listing hashes the file (beir_ahead.py says why).
        return beir_ahead.begin(entries[0].path, entries[0].max_bytes, min(workers, 2)) or started
    if workers <= 1 or sum(map(estimated_seconds, entries)) < POOL_SECONDS:
        return False
    try:
        from multiprocessing import forkserver

        _context()  # the preload list, which the server takes at its start
        forkserver.ensure_running()
    except (OSError, ImportError, NotImplementedError):
        return False  # Readers will find the same and read here
    return True


class Readers:
    """`read(entries)`: their rows, in order, read on up to `workers` processes.  A context
    manager: the pool, started at the first run worth it, is shut down on leaving."""

    def __init__(self, workers: int, pool_seconds: float = POOL_SECONDS,
                 read: Callable[[InputEntry], dict] = read_document):
        # `read` is for tests (a reader that crashes its process); it must be importable by
        # name, as anything sent to a worker.
        self.workers, self.pool_seconds, self.reader = workers, pool_seconds, read
        self.pool: ProcessPoolExecutor | None = None
        self._head: HeadStart | None = None

    def __enter__(self) -> "Readers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None

    def read(self, entries: list[InputEntry]) -> Iterator[dict]:
        entries = list(entries)
        # A head start's pool is running already: its start is paid, its rows maybe read.
        ahead = _HEAD is not None and self.reader is read_document
        if self.workers > 1 and (ahead or sum(map(estimated_seconds, entries)) >= self.pool_seconds):
            try:
                self._start()
            except (OSError, ImportError, NotImplementedError):
                # No process pool where the system gives no semaphores (a sandbox without
                # /dev/shm): the files are read here, as with engine.workers 1.
                self.workers = 1
            else:
                yield from self._pooled(_tasks(entries))
                return
        for entry in entries:
            yield self.reader(entry)

    def _start(self) -> ProcessPoolExecutor:
        if self.pool is None and self.reader is read_document:
            self._head = _take_head_start(self.workers)
            self.pool = self._head and self._head.pool
        if self.pool is None:
            self.pool = _lazy("ProcessPoolExecutor")(self.workers, mp_context=_context(self.reader))
        return self.pool

    def _pooled(self, tasks: Iterable[list[InputEntry]]) -> Iterator[dict]:
        # This process reads nothing itself: reading here too while the pool starts (half a
        # second) was tried, but a task it took (a 3 s PDF) stopped it feeding the pool, and
        # a native reader's crash here would end the stage.
        tasks, pending = iter(tasks), deque()
        if self._head is not None:  # tasks submitted before the stage's imports (HeadStart)
            tasks, pending = self._head.adopt(tasks)
            self._head = None
        window, waiting = IN_FLIGHT * self.workers, None
        while True:
            # At most `window` tasks and IN_FLIGHT_BYTES of files in flight (one task always): a
            # folder of large PDFs must not hold eight of them read at once, waiting their turn.
            while len(pending) < window and (waiting := waiting or next(tasks, None)) is not None:
                if pending and sum(_bytes(t) for t, _ in pending) + _bytes(waiting) > IN_FLIGHT_BYTES:
                    break
                pending.append((waiting, self._start().submit(_read_task, self.reader, waiting)))
                waiting = None
            if not pending:
                return
            task, future = pending.popleft()
            try:
                rows = future.result()
            except _lazy("BrokenProcessPool"):
                # Which task's file killed the pool is unknown: every task in flight failed with
                # it.  The one waited for is read file by file, alone; the others start again.
                self.close()
                rows = [_alone(self.reader, entry) for entry in task]
                pending = deque((t, self._start().submit(_read_task, self.reader, t)) for t, _ in pending)
            yield from rows


# ---- the head start: reading begun before the stage imports Arrow (pipekit/read/early.py)

_HEAD: "HeadStart | None" = None


class HeadStart:
    """The pool and its first tasks, submitted while stage 01's process is still importing.

    Stage 01 run alone spent its first ~0.4 s on one core (the interpreter, pyarrow, the
    walk, the hashing of every file) before a page was read; the tasks submitted here keep
    the second core reading meanwhile.  How the workers start depends on the process:

    - with one thread (stage 01's script before its imports: no Arrow, no writer thread yet,
      `/proc/self/task` says so) they are forked from it at once, on this thread: a fork of a
      ~30 MB interpreter takes milliseconds, where the fork server first starts an interpreter
      and imports the readers (~0.2 s, the first page waited for it);
    - otherwise (a process with threads, which a plain fork would copy mid-lock) from the fork
      server, as `Readers` starts them, submitted on a thread so that the server's start does
      not hold up the caller.

    A row read ahead is used only where it is provably the one `Readers.read` would make
    now: its task holds entries equal to the stage's walk (every field: a file the hashing
    found to be a copy, or one whose size changed, is not) and, file by file, the bytes it
    read are the ones the stage's listing hashed (`listed`): a file changed between the two
    is read again.  Tasks that do not match are dropped, their rows unread."""

    def __init__(self, workers: int, entries: list[InputEntry], seconds: float):
        import threading

        self.workers, self.listing = workers, None
        self.tasks: list[list[InputEntry]] = []
        for task in _tasks(entries):  # the first tasks, `seconds` of estimated work
            self.tasks.append(task)
            if sum(estimated_seconds(e) for t in self.tasks for e in t) >= seconds or \
                    sum(map(_bytes, self.tasks)) >= IN_FLIGHT_BYTES:
                break
        self.futures: list = []
        self.pool = None
        self.method = "fork" if _one_thread() else "forkserver"
        self.thread = threading.Thread(target=self._submit, name="pipekit-head-start", daemon=True)
        if self.method == "fork":
            self._submit()  # forks before any thread exists: the executor's own starts after
        else:
            self.thread.start()

    def _submit(self) -> None:
        try:
            if self.method == "fork":
                import multiprocessing

                context = multiprocessing.get_context("fork")
            else:
                context = _context(read_document)
            self.pool = _lazy("ProcessPoolExecutor")(self.workers, mp_context=context)
            for task in self.tasks:
                self.futures.append(self.pool.submit(_read_task, read_document, task))
        except Exception:  # no semaphores, no fork server: Readers finds the same and reads here
            self.futures.clear()

    def join(self) -> None:
        if self.thread.ident is not None:  # started (the fork server's way)
            self.thread.join()

    def adopt(self, tasks: Iterator[list[InputEntry]]) -> tuple[Iterator[list[InputEntry]], deque]:
        """(the tasks still to submit, the submitted ones to wait for), for `Readers._pooled`."""
        pending: deque = deque()
        for task, future in zip(self.tasks, self.futures):
            mine = next(tasks, None)
            if mine is None:
                break
            if mine != task or self.listing is None:
                return chain([mine], tasks), pending  # from here on, the stage's own tasks
            pending.append((task, _Checked(future, task, self.listing)))
        return tasks, pending


class _Checked:
    """A task's future whose rows are kept only where the listing hashed the bytes they read."""

    def __init__(self, future, task: list[InputEntry], listing: dict):
        self.future, self.task, self.listing = future, task, listing

    def result(self) -> list[dict]:
        from pipekit.run.incremental import content_of  # (the stage has imported Arrow by now)

        rows = self.future.result()
        files = self.listing["files"]
        for i, (entry, row) in enumerate(zip(self.task, rows)):
            key = (files.get(entry.doc_id) or [None] * 4)[3]
            listed = content_of(key) if key else None
            if row.get("content_hash") is None or row["content_hash"] != listed:
                rows[i] = read_document(entry)  # changed since, or a row with no bytes to vouch for it
        return rows


def begin_head_start(workers: int, entries: list[InputEntry], seconds: float = 1.0) -> bool:
    """Submit the first `seconds` of estimated reading now, if there is enough for the pool."""
    global _HEAD
    if _HEAD is not None or workers <= 1 or sum(map(estimated_seconds, entries)) < POOL_SECONDS:
        return False
    _HEAD = HeadStart(workers, entries, seconds)
    # A stage that fails before it takes the rows (a bad output folder) must not wait, as it
    # exits, for the tasks read ahead: 4.6 s against 1.6 for the same error on the manual.
    # Registered where concurrent.futures registers the wait (run in reverse order: first).
    import threading

    getattr(threading, "_register_atexit", __import__("atexit").register)(_drop_head_start)
    return True


def _drop_head_start() -> None:
    head = _HEAD
    if head is not None and head.pool is not None:
        # Their rows are nobody's: the workers end now, mid-file (cancelling alone still waited
        # for the tasks already queued to them, 1.2 s).
        processes = list((getattr(head.pool, "_processes", None) or {}).values())
        head.pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()


def listed(listing: dict | None) -> None:
    """The stage's listing, which a head start's rows are checked against (HeadStart), and
    so are a BEIR corpus's tables read ahead (pipekit/read/beir_ahead.py)."""
    if _HEAD is not None:
        _HEAD.listing = listing
    if "pipekit.read.beir_ahead" in sys.modules:
        sys.modules["pipekit.read.beir_ahead"].listed(listing)


def _take_head_start(workers: int) -> "HeadStart | None":
    global _HEAD
    head, _HEAD = _HEAD, None
    if head is None:
        return None
    head.join()
    if head.pool is None or not head.futures or head.workers != workers or head.listing is None:
        if head.pool is not None:
            head.pool.shutdown(wait=False, cancel_futures=True)
        return None
    return head


def _one_thread() -> bool:
    """True if this process runs one thread, native ones counted (Linux: /proc/self/task)."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False  # no /proc: assume threads, and use the fork server


def _bytes(task: list[InputEntry]) -> int:
    return sum(e.n_bytes for e in task)


def _tasks(entries: list[InputEntry]) -> Iterator[list[InputEntry]]:
    task, work = [], 0.0
    for entry in entries:
        task.append(entry)
        work += estimated_seconds(entry)
        if work >= TASK_SECONDS or len(task) >= TASK_FILES:
            yield task
            task, work = [], 0.0
    if task:
        yield task


def _read_task(read: Callable[[InputEntry], dict], entries: list[InputEntry]) -> list[dict]:
    return [read(entry) for entry in entries]


def _alone(read: Callable[[InputEntry], dict], entry: InputEntry) -> dict:
    """`entry` read in a process of its own: its row, or an error row if that process dies too."""
    with _lazy("ProcessPoolExecutor")(1, mp_context=_context(read)) as pool:
        try:
            return pool.submit(_read_task, read, [entry]).result()[0]
        except _lazy("BrokenProcessPool"):
            return failed_row(entry, DIED)


def _context(read: Callable | None = read_document):
    # A reader defined in the script itself needs the script in the worker to be found by name.
    import multiprocessing

    from pipekit.read.workers import ReadersContext

    light = read is None or getattr(read, "__module__", None) != "__main__"
    ctx = ReadersContext() if light else multiprocessing.get_context("forkserver")
    # Imported once in the server, before it forks each worker: a worker starts with the readers
    # loaded (pipekit.read.documents imports each at its format's first file, which a rerun
    # reading one Markdown file needs), and with the HTML path's two libraries, which the readers
    # import on first use (the common heavy format; ~20 ms here rather than in every worker).
    # The server starts while the stage waits for it, so the readers' modules import neither
    # pyarrow nor NumPy (tests/test_startup.py): 0.45 -> 0.2 s of CPU before the first file is read.
    ctx.set_forkserver_preload(["pipekit.read.documents", *READER_MODULES, "lxml.etree", "html_to_markdown"])
    return ctx
