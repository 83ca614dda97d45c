"""Where a stage's work runs: in this process (`local`) or on a Dask cluster (`dask`).

A stage cuts its input into *partitions* (a range of upstream rows, a group of input
files, a byte range of a BEIR corpus, a batch of queries) and hands them, with a
function that turns one partition into an iterable of results, to
`ctx.engine.map_partitions(fn, parts)`.  It gets the results back **in partition
order**, so the rows it writes are the same rows in the same order whichever engine ran
them: the engine decides where the work happens, never what it gives.

- `local` (the default) calls `fn(part)` here and yields its results as they come: a
  stage run on one whole-input partition streams exactly as it did before engines
  existed, so the default run pays nothing for them.
- `dask` submits one task per partition to a dask.distributed cluster — one started
  for the run (`engine.address: null`, `engine.workers` processes, its dashboard link
  printed) or a running scheduler (`engine.address: tcp://HOST:PORT`).  A task's
  results come back as one list; at most a few tasks per worker are in flight, so the
  client holds a bounded number of partitions however large the corpus.  A stage's
  main output need not travel at all: `map_to_parts` has each task write its
  partition's rows to a part file of a dataset folder itself (pipekit/run/io.py) and send
  back only what the stage's summary needs.  A worker that
  dies mid-task is not an error: the scheduler runs its tasks again elsewhere (Dask's
  own retry), and since a partition's result depends on the partition alone, the output
  is unchanged.  A scheduler that cannot be reached is one line naming its address,
  after `engine.timeout` seconds at most, never a hang.

Functions shipped to workers must be picklable by reference, and a stage file is not an
importable module (its name starts with a digit): `StageFunction(3, "chunk_partition")`
names the function instead, and the worker imports the stage file itself through
`load_stage` from its own checkout (which must be the same code at the same path as the
client's, like the data: see README, "Running on a cluster").
"""
from __future__ import annotations

import os
import re
import socket
import sys
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator
from urllib.parse import urlparse

import pyarrow as pa

from pipekit.run.errors import PipelineError
from pipekit.run.io import PART, ParquetSink, parquet_file, row_groups

IN_FLIGHT_PER_WORKER = 2  # tasks queued per worker: enough to keep it busy, few enough to bound client memory


# --- functions a worker can run ------------------------------------------------------------

@dataclass(frozen=True)
class StageFunction:
    """`load_stage(stage).<name>(*args, part)`, picklable: what a worker is sent."""

    stage: int
    name: str
    args: tuple = ()

    def __call__(self, part) -> Iterable:
        from pipekit.run.stages import load_stage

        return getattr(load_stage(self.stage), self.name)(*self.args, part)


@dataclass(frozen=True)
class Listed:
    """Run a partition function to the end on the worker: its results travel as one list
    (a generator cannot be pickled; stage 05's warming task is one too)."""

    fn: Callable

    def __call__(self, part) -> list:
        return list(self.fn(part))


@dataclass(frozen=True)
class Written:
    """What the client gets instead of a table a worker wrote to its part file: the row
    count, which is all stages 02 and 03 ask of it."""

    num_rows: int


@dataclass(frozen=True)
class _WrittenPart:
    """Run a partition function on the worker and write what it yields to the partition's
    part file of a dataset (`folder/part-0000N.parquet`, through a temp file renamed into
    place, so a task Dask reruns after its worker died writes the part whole again).

    Each item is a table, or a tuple whose first element is one (the stage's summary
    after it).  The client gets the items back with each table replaced by its `keep`
    columns (01 counts statuses and checks ids), or by `Written(rows)` if it keeps none."""

    fn: Callable
    folder: str
    schema: pa.Schema
    meta: dict
    keep: tuple = ()

    def __call__(self, indexed) -> list:
        index, part = indexed
        out = []
        # The stage's temp folder is never made here: a task still running when its stage
        # failed (and removed the folder) must not bring the folder back as a leftover.
        sink = ParquetSink(Path(self.folder) / PART.format(index), self.schema, self.meta, make_folder=False)
        try:
            for item in self.fn(part):
                table = item[0] if isinstance(item, tuple) else item
                sink.write(table)
                small = table.select(list(self.keep)) if self.keep else Written(table.num_rows)
                out.append((small, *item[1:]) if isinstance(item, tuple) else small)
            sink.commit()
        except BaseException:
            sink.abort()
            raise
        return out


# --- partitions of a Parquet file ----------------------------------------------------------

@dataclass(frozen=True)
class RowRange:
    """Rows [start, stop) of a Parquet file: one partition of a stage's upstream output."""

    path: str
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start


def row_ranges(path, n_rows: int, rows_per_part: int | None) -> list[RowRange]:
    """The file's rows cut into ranges of `rows_per_part` (None: one range, the whole file)."""
    step = max(n_rows if rows_per_part is None else rows_per_part, 1)
    return [RowRange(str(path), a, min(a + step, n_rows)) for a in range(0, n_rows, step)] or \
        [RowRange(str(path), 0, 0)]


def iter_rows(part: RowRange, columns: list[str] | None = None,
              batch_size: int = 2048) -> Iterator[pa.RecordBatch]:
    """The record batches of one row range of an output (a file, or a dataset folder:
    the range may span part files), reading only the row groups that hold it, the next
    batch read ahead while the stage works on this one (`read_ahead`)."""
    return read_ahead(_range_batches(part, columns, batch_size))


_END = object()


def read_ahead(items: Iterator) -> Iterator:
    """`items`, the next one made on a thread of its own while this one is used: Parquet
    decodes outside the GIL, so a stage computing on one core no longer waits for its
    input between batches.  One item ahead at most: memory holds one batch more."""
    with ThreadPoolExecutor(1, thread_name_prefix="read-ahead") as pool:
        items = iter(items)
        pending = pool.submit(next, items, _END)
        while True:
            item = pending.result()
            if item is _END:
                return
            pending = pool.submit(next, items, _END)
            yield item


def drain(items: Iterable) -> int:
    """Run `items` to its end holding none of them; how many there were.  For a writer's
    results a stage has no use for: `list(...)` of them kept every table written alive
    until the stage ended (stage 04's postings: the whole index a second time)."""
    n = 0
    for n, _ in enumerate(items, 1):
        pass
    return n


def map_ahead(fn, items: Iterable, workers: int = 2) -> Iterator:
    """fn(item) for each item, in order, computed on `workers` threads: a stage whose work
    is Arrow kernels and NumPy loops (which let go of the GIL) uses every core it is given.
    At most `workers` items are in flight, so memory holds that many batches, never the
    input (Executor.map would take every item at once)."""
    if workers <= 1:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(workers, thread_name_prefix="map-ahead") as pool:
        pending = deque()
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _range_batches(part: RowRange, columns: list[str] | None, batch_size: int) -> Iterator[pa.RecordBatch]:
    if part.stop <= part.start:
        return
    wanted: dict[Path, list[int]] = {}
    first = None
    for f, g, at, n in row_groups(Path(part.path)):
        if at + n > part.start and at < part.stop:
            wanted.setdefault(f, []).append(g)
            first = at if first is None else first
    skip, want = part.start - (first or 0), len(part)
    for f, groups in wanted.items():
        pf = parquet_file(f, pre_buffer=False)
        for batch in pf.iter_batches(batch_size=batch_size, columns=columns, row_groups=groups):
            if skip >= batch.num_rows:
                skip -= batch.num_rows
                continue
            batch = batch.slice(skip, want)
            skip, want = 0, want - batch.num_rows
            if batch.num_rows:
                yield batch
            if want <= 0:
                return


def line_ranges(path, lines_per_part: int, sample_bytes: int = 1 << 20) -> list[tuple[int, int]]:
    """A text file (a BEIR corpus) cut into byte ranges of about `lines_per_part` lines,
    each starting at a line start: workers read a range each, and nobody reads the file
    twice to count its lines — the mean line length of its first megabyte sets the size."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        head = fh.read(sample_bytes)
        mean = len(head) / max(head.count(b"\n"), 1)
        step = max(int(mean * lines_per_part), 1)
        bounds = [0]
        for at in range(step, size, step):
            if at < bounds[-1]:
                continue
            fh.seek(at - 1)
            fh.readline()  # to the end of the line holding byte at-1: the next line starts a range
            if bounds[-1] < fh.tell() < size:
                bounds.append(fh.tell())
    bounds.append(size)
    return list(zip(bounds[:-1], bounds[1:]))


# --- the engines ---------------------------------------------------------------------------

class LocalEngine:
    """Everything in this process, one partition after another."""

    kind = "local"
    workers = 1

    def __init__(self, partition_rows: int | None = None):
        self.partition_rows = partition_rows

    def rows_per_part(self, n_rows: int, few: bool = False) -> int | None:
        """Rows per partition: None (one partition, the whole input, streamed), unless
        engine.partition_rows asks for more (tests do, to cut the sample); always None
        for `few` (a stage whose partitions must be merged: one needs no merge).  Counting
        stage 04 as one partition per core on threads was tried: at 200k chunks no faster
        on this 2-core machine and a quarter more peak memory (the merge's copies)."""
        return None if few else self.partition_rows

    def map_partitions(self, fn: Callable[[Any], Iterable], parts: list, progress=None) -> Iterator:
        for part in parts:
            yield from fn(part)

    def submit(self, fn: Callable, arg, worker: str | None = None) -> Any:
        """`fn(arg)`, now: here a result is its own handle (see DaskEngine.submit)."""
        return fn(arg)

    def spread(self, n: int) -> list:
        """Where to start n tasks that each load something to keep (see DaskEngine.spread): here."""
        return [None] * n

    def where(self, handles: list) -> list:
        """The worker holding each handle's result (see DaskEngine.where): here."""
        return [None] * len(handles)

    def chains(self, chains: list[list[tuple[Callable, Any]]], workers: list | None = None) -> list[list]:
        """Each chain's calls `fn(arg)` in order (see DaskEngine.chains): here, one after another."""
        return [[fn(arg) for fn, arg in chain] for chain in chains]

    def fetch(self, handles: list, progress=None) -> list:
        return list(handles)

    def share(self, value) -> Any:
        return value

    def run_everywhere(self, fn: Callable, *args) -> None:
        """`fn(*args)` in every process that ran partitions: this one."""
        fn(*args)

    def close(self) -> None:
        pass


class DaskEngine:
    """Partitions as tasks on a dask.distributed cluster; results back in partition order."""

    kind = "dask"

    def __init__(self, address: str | None, workers: int, partition_rows: int | None,
                 timeout: float, quiet: bool = False):
        self.address = address
        self.n_workers = workers
        self.partition_rows_set = partition_rows
        self.partition_rows = partition_rows or DEFAULT_DASK_PARTITION_ROWS
        self.timeout = timeout
        self.quiet = quiet
        self._client = None
        self._cluster = None

    # The cluster starts (or is connected to) at the first partition map, not before: a
    # run whose stages are all fresh never pays for one.
    @property
    def client(self):
        if self._client is None:
            self._connect()
        return self._client

    @property
    def workers(self) -> int:
        return max(len(self.client.scheduler_info().get("workers", {})), 1)

    def rows_per_part(self, n_rows: int, few: bool = False) -> int:
        """engine.partition_rows (default 50,000).  `few`, when that key is not set: one
        partition a worker — each analyses its own vocabulary and the reduce merges them,
        so a second one per worker repeats that work (counting 1M passages as 4 partitions
        took 20.0 CPU s, as 2 took 18.8) — but no more than FEW_MAX_ROWS each, which bounds
        a task's memory."""
        if few and self.partition_rows_set is None:
            return min(max(-(-n_rows // self.workers), 1), FEW_MAX_ROWS)
        return self.partition_rows

    def _connect(self) -> None:
        from distributed import Client

        if self.address is None:
            self._cluster = local_cluster(self.n_workers)
            self._client = Client(self._cluster)
            if not self.quiet:
                print(f"dask: started a local cluster of {self.n_workers} worker processes; "
                      f"dashboard {self._client.dashboard_link}{dashboard_note()}")
            return
        check_reachable(self.address, self.timeout)
        try:
            self._client = Client(self.address, timeout=self.timeout)
        except (OSError, TimeoutError) as exc:
            raise PipelineError(f"cannot reach the Dask scheduler at {self.address} "
                                f"within {self.timeout:g} s (engine.address): {exc}") from None
        try:
            self._client.wait_for_workers(1, timeout=self.timeout)
        except (OSError, TimeoutError):
            self.close()
            raise PipelineError(f"the Dask scheduler at {self.address} has no workers after {self.timeout:g} s: "
                                f"start some with `dask worker {self.address}`") from None
        self._check_same_code()
        if not self.quiet:
            print(f"dask: connected to {self.address} ({self.workers} workers); "
                  f"dashboard {self._client.dashboard_link}")
            untuned = sum(not tuned for tuned in self._client.run(_tuned).values())
            if untuned:
                print(f"dask: {untuned} of the workers run with Dask's default profiler, monitors and "
                      "memory trimming, which slow the stages by about a fifth: start them with "
                      "DASK_CONFIG=pipekit/dask-workers.yaml")

    def _check_same_code(self) -> None:
        """Workers run their own checkout's stage files: one with other code would give
        other outputs, silently.  Compare the stages' code hashes before any task runs."""
        try:
            theirs = self._client.run(code_hashes)
        except Exception as exc:
            missing = missing_module(exc)
            if missing is None:
                raise
            self.close()
            raise PipelineError(cannot_import(f"the Dask workers at {self.address}", missing)) from None
        ours = code_hashes()
        for worker, hashes in sorted(theirs.items()):
            if hashes != ours:
                differ = ", ".join(f"{k}" for k in ours if hashes.get(k) != ours[k])
                self.close()
                raise PipelineError(f"the Dask worker {worker} runs other code than this checkout "
                                    f"({differ} differ): start the workers from the same version")

    def submit(self, fn: Callable, arg, worker: str | None = None) -> Any:
        """`fn(arg)` as a task whose result stays on the worker that made it: a handle
        (a Dask future) that later tasks take as their argument, or inside one (a tuple,
        a list) — the scheduler runs them where the data is, and moves only what they
        need.  Stage 04 keeps each partition's counts so (see its `run`): a reduce that
        gathered every posting here made this process the cluster's bottleneck.
        `worker` (from `spread`) is where to run it if that worker is still there."""
        if worker is None:
            return self.client.submit(fn, arg, pure=False)
        return self.client.submit(fn, arg, pure=False, workers=[worker], allow_other_workers=True)

    def spread(self, n: int) -> list:
        """A worker for each of n tasks that load what later tasks use (stage 05's parts of
        the index), one each in turn: Dask alone may start two on one idle worker, which
        then holds two parts while another holds none."""
        workers = sorted(self.client.scheduler_info().get("workers", {})) or [None]
        return [workers[i % len(workers)] for i in range(n)]

    def fetch(self, handles: list, progress=None) -> list:
        """The results of `submit` handles, here, in their order (a bar counts them done)."""
        from distributed import as_completed

        bar = progress(total=len(handles)) if progress else None
        try:
            for future in as_completed(handles):
                if future.status == "error":
                    self._raise(future.exception())
                if bar is not None:
                    bar.update(1)
            return self.client.gather(handles)
        finally:
            if bar is not None:
                bar.close()

    def where(self, handles: list) -> list:
        """The worker holding each handle's result now (None: nowhere yet)."""
        who = self.client.who_has(handles)
        return [next(iter(who.get(h.key, ())), None) for h in handles]

    def chains(self, chains: list[list[tuple[Callable, Any]]], workers: list | None = None) -> list[list]:
        """Each chain's calls `fn(arg)` as tasks, in order, one task of a chain at a time (its
        next sent when the last is back), every chain at once, chain c's on `workers[c]` while
        that worker is there; the results by chain.

        Stage 05 runs each part of its index's jobs so, on the worker holding the part: a job
        run elsewhere would load a second part there.  Its jobs take the part's load result,
        which alone should keep them there, but Dask's scheduler may count tasks with few,
        small dependencies as "root-ish" and queue them to any free worker (is_rootish), and
        its work stealing may hand a job waiting on a busy worker to an idle one.  A task
        naming a worker is never root-ish; one at a time, none waits to be stolen; and if that
        worker is lost, Dask runs it where the part's load runs again (a loose restriction)."""
        from distributed import as_completed

        out = [[None] * len(chain) for chain in chains]
        started = {}
        done = as_completed()

        def submit(c: int, i: int) -> None:
            fn, arg = chains[c][i]
            w = workers[c] if workers else None
            future = self.client.submit(fn, arg, pure=False, **({"workers": [w], "allow_other_workers": True}
                                                                if w else {}))
            started[future.key] = (c, i)
            done.add(future)

        for c, chain in enumerate(chains):
            if chain:
                submit(c, 0)
        for future in done:
            if future.status == "error":
                self._raise(future.exception())
            c, i = started.pop(future.key)
            out[c][i] = future.result()
            future.release()
            if i + 1 < len(chains[c]):
                submit(c, i + 1)
        return out

    def share(self, value) -> Any:
        """`value` on every worker once, as a handle tasks take (not once per task)."""
        return self.client.scatter(value, broadcast=True, hash=False)

    def map_to_parts(self, fn: Callable[[Any], Iterable], parts: list, folder: Path, schema: pa.Schema,
                     meta: dict, keep: tuple = (), progress=None) -> Iterator:
        """`map_partitions`, with partition i's tables written by its worker to
        `folder/part-0000i.parquet` (see _WrittenPart): only summaries come back."""
        return self._gather(_WrittenPart(fn, str(folder), schema, meta, tuple(keep)), list(enumerate(parts)),
                            progress)

    def map_partitions(self, fn: Callable[[Any], Iterable], parts: list, progress=None) -> Iterator:
        return self._gather(Listed(fn), parts, progress)

    def _gather(self, task: Callable[[Any], list], parts: list, progress=None) -> Iterator:
        """`task(part)` for every part as a Dask task, a bounded window at a time; each
        task's list of results yielded in partition order."""
        client = self.client
        window = IN_FLIGHT_PER_WORKER * self.workers + 1
        todo = iter(parts)
        pending: deque = deque()
        bar = progress(total=len(parts)) if progress else None
        try:
            for part in todo:
                pending.append(client.submit(task, part, pure=False))
                if len(pending) >= window:
                    break
            while pending:
                future = pending.popleft()
                try:
                    results = future.result()
                except Exception as exc:
                    self._raise(exc)
                future.release()
                nxt = next(todo, None)
                if nxt is not None:
                    pending.append(client.submit(task, nxt, pure=False))
                if bar is not None:
                    bar.update(1)
                yield from results
        finally:
            if pending:
                client.cancel(list(pending))
            if bar is not None:
                bar.close()

    def _raise(self, exc: BaseException):
        """A task's failure, told the way a user can act on it when we know how."""
        from distributed import KilledWorker

        if isinstance(exc, KilledWorker):
            # Dask has already rerun it on other workers; each died (out of memory, mostly).
            raise PipelineError(f"a task killed every worker that ran it ({exc}): lower "
                                "engine.partition_rows, or give the workers more memory") from None
        missing = missing_module(exc)
        if missing is None:
            raise exc
        raise PipelineError(cannot_import(f"the Dask scheduler or a worker at {self.address or 'the local cluster'}",
                                          missing)) from None

    def run_everywhere(self, fn: Callable, *args) -> None:
        """`fn(*args)` on every worker (stage 05 has them drop its index); none if never connected."""
        if self._client is not None:
            self._client.run(fn, *args)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


# Dask's defaults for its workers cost our tasks a fifth of their time, so
# pipekit/dask-workers.yaml changes them (the cluster a run starts reads it; README says
# how to give it to workers you start):
# - each worker's statistical profiler (for the dashboard's Profile page) samples the
#   running task's stack every 10 ms: stage 04's tasks at 1M passages ran 15-25 % slower
#   (counting 14.7 -> 12.7 s, shards 5.5 -> 4.2 s).  Our tasks are few and long; where
#   their time goes is cProfile's question, asked of one partition;
# - workers start with MALLOC_TRIM_THRESHOLD_=65536, so that freed memory goes back to
#   the OS at once; that also pins glibc's mmap threshold at 128 KB, so every NumPy array
#   above it is a fresh mapping whose pages fault in again, and stage 04's workers spent
#   20-40 % of their time in the kernel (stage 04 at 1M: 18.7 -> 16.2 s).  The file sets
#   the thresholds glibc's own adaptive ones grow to (mmap 32 MB, trim twice that), as
#   the local engine's process has them; stage 04 hands its freed memory back itself
#   (pipekit/run/malloc.py);
# - a worker's event loop wakes every 20 ms to time itself, checks its memory every
#   100 ms and reads the machine's counters every 500 ms; each wake takes the GIL from
#   the task.  At 1 s / 1 s / 2 s stage 03 at 1M ran 0.6-1.3 s faster in five of five
#   alternating pairs (17-19 s).  The cost: a worker outgrowing its memory limit is
#   paused or restarted up to a second later.
WORKER_SETTINGS = Path(__file__).parents[1] / "dask-workers.yaml"  # beside the package, where users point DASK_CONFIG


def worker_config() -> dict:
    """pipekit/dask-workers.yaml as dotted keys, for dask.config.set (which would replace
    a whole nested section given as one)."""
    import yaml

    def leaves(tree: dict, prefix: str = "") -> Iterator[tuple[str, Any]]:
        for key, value in tree.items():
            if isinstance(value, dict):
                yield from leaves(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}", value

    return dict(leaves(yaml.safe_load(WORKER_SETTINGS.read_text())))


def _tuned() -> bool:
    """Does this worker run with pipekit/dask-workers.yaml's settings (its config, and the
    environment its nanny started it with)?"""
    import dask

    env = ".pre-spawn-environ."
    return all(os.environ.get(key.split(env)[1]) == str(value) if env in key else dask.config.get(key) == value
               for key, value in worker_config().items())


def local_cluster(n_workers: int, dashboard_address: str = ":0"):
    """The cluster `engine.address: null` starts (bench/engine.py starts the same).

    Processes, one thread each: the stages' Python loops hold the GIL, so only processes
    put the other cores to work.  Logs only at CRITICAL: at shutdown a worker whose
    heartbeat meets the closing scheduler logs a StreamClosedError traceback at ERROR (a
    README command printed one on a loaded machine), and a task's real failure reaches
    us as its exception.  The workers get pipekit/dask-workers.yaml's settings (their
    nannies pass on the config in force when they are made)."""
    import logging

    import dask
    from distributed import LocalCluster

    with dask.config.set(worker_config()):
        return LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                            dashboard_address=dashboard_address, silence_logs=logging.CRITICAL)


def code_hashes() -> dict[str, str]:
    """Each stage's code hash (what freshness records), as computed where this runs."""
    from pipekit.run.hashing import code_hash
    from pipekit.run.stages import STAGES

    return {stage.label: code_hash(stage) for stage in STAGES}


# How a ModuleNotFoundError reads once Dask has turned it into text, quoted once or more.
_NO_MODULE = re.compile(r"""No module named \\*['"]([\w.]+)\\*['"]""")


def missing_module(exc: BaseException) -> str | None:
    """The module a scheduler or worker could not import while unpickling a task, if that
    is what went wrong.  Dask hands it back in several forms, so look along the chain of
    causes, at each exception and at its text: a task's own ModuleNotFoundError; one as the
    cause of another; and, from `client.run` (the code check every run starts with), only its
    repr inside a plain Exception, `Exception('ModuleNotFoundError("No module named
    \'pipekit\'")')` — which the one-line message missed, so a run on workers started as
    README said died with a 40-line traceback."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            return exc.name
        for text in (str(exc), *(a for a in exc.args if isinstance(a, str))):
            found = _NO_MODULE.search(text)
            if found:
                return found.group(1)
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def cannot_import(who: str, missing: str) -> str:
    """One line for processes of the cluster that lack a module: this checkout, or a package."""
    if missing.split(".")[0] == "pipekit" or missing.startswith("stage_"):
        return (f"{who} cannot import {missing!r}: start the scheduler and the workers from the root of "
                "this repository's checkout with DASK_CONFIG=pipekit/dask-workers.yaml (README, \"Running on "
                "a cluster\"), or with the checkout on PYTHONPATH")
    return (f"{who} cannot import {missing!r}: install the packages there that this checkout's "
            "requirements.txt lists, as here")


def dashboard_note() -> str:
    try:
        import bokeh  # noqa: F401  (the dashboard's web pages need it; dask runs without)
    except ImportError:
        return " (served once bokeh is installed: pip install 'bokeh>=3.1')"
    return ""


def check_reachable(address: str, timeout: float) -> None:
    """One TCP connect to the scheduler, so a wrong address fails at once with its name.

    dask's own Client keeps retrying a refused connection until its timeout; a plain
    connect says "refused" in milliseconds and "no answer" after `timeout` seconds."""
    url = urlparse(address if "://" in address else f"tcp://{address}")
    if url.scheme not in ("tcp", "tls") or not url.hostname or not url.port:
        raise PipelineError(f"engine.address must be null or tcp://HOST:PORT; got {address!r}")
    try:
        socket.create_connection((url.hostname, url.port), timeout=timeout).close()
    except socket.timeout:
        raise PipelineError(f"cannot reach the Dask scheduler at {address}: no answer "
                            f"within {timeout:g} s (engine.timeout)") from None
    except OSError as exc:
        raise PipelineError(f"cannot reach the Dask scheduler at {address}: "
                            f"{exc.strerror or exc}") from None


def make_engine(cfg: dict, quiet: bool = False):
    """The engine the config asks for (a Dask cluster is only started when first used)."""
    sec = cfg["engine"]
    if sec["kind"] == "local":
        return LocalEngine(sec["partition_rows"])
    return DaskEngine(sec["address"], sec["workers"] or os.cpu_count() or 1,
                      sec["partition_rows"], sec["timeout"], quiet)


DEFAULT_DASK_PARTITION_ROWS = 50_000  # documents or chunks per task (see README's sizing note)
FEW_MAX_ROWS = 1_000_000  # chunks per stage-04 task at most: ~1 GB of a worker's memory


_bar = None  # the local engine's progress bar while a stage runs with a person watching


def advance(n: int = 1) -> None:
    """Tell the progress bar that `n` more units (files, documents) are done.

    Called from inside partition functions, which yield tables of many rows: counting
    tables, stage 01 on 530 HTML pages was one silent minute.  On a Dask worker there is
    no bar (the client counts finished partitions), so this does nothing there."""
    if _bar is not None:
        _bar.update(n)


_tokens = 0  # word pieces embedded under the bar shown now (`advance_tokens`)


def advance_tokens(n: int) -> None:
    """Count `n` more word pieces embedded on the bar (stage 04 with a model folder): a long
    chunk's windows cost more than a short chunk, so chunks/s alone moves with the texts, the
    word pieces embedded are the work."""
    global _tokens
    if _bar is not None:
        _tokens += n
        _bar.set_postfix_str(f"{_tokens:,} tokens embedded", refresh=False)


def tell(message: Callable[[int], str]) -> None:
    """Print `message(units left)` above the progress bar, when one is shown: a forecast
    ("about 7 min") for the person watching it.  Never in logs or pipes, as the bar."""
    if _bar is not None:
        _bar.write(message(_bar.total - _bar.n), file=sys.stderr)


def watched(total: int, desc: str, unit: str, quiet: bool = False):
    """A context in which `advance` moves a bar of `total` units, shown when stderr is a
    terminal (a person is watching) and never in CI logs or pipes."""
    import contextlib

    @contextlib.contextmanager
    def bar():
        global _bar, _tokens
        _tokens = 0
        if quiet or not sys.stderr.isatty():
            yield
            return
        from tqdm import tqdm

        _bar = tqdm(total=total, desc=desc, unit=unit, leave=False, file=sys.stderr, smoothing=0.1)
        try:
            yield
        finally:
            _bar.close()
            _bar = None

    return bar()


def progress_bar(quiet: bool, desc: str, unit: str = "partition"):
    """A factory of tqdm bars over partitions when a person is watching, else None."""
    if quiet or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return lambda total: tqdm(total=total, desc=desc, unit=unit, leave=False, file=sys.stderr)
