"""What a worker process loads once and keeps for the tasks that follow: stage 05's index.

Stage 05 on a cluster sends batches of queries to the workers as tasks, and each task
needs the whole index.  Loading it per task would cost more than the queries; sending it
with the tasks would pickle a gigabyte each time.  So each worker process keeps what it
loaded (`held`: one entry, keyed by the index's folder and fingerprint, so a rebuilt
index is never answered from the old one) until the stage tells every worker to let go
(`release`, at its end, also when it fails).

Loading is also shared between the workers of one machine.  The index's derived arrays
(postings, their bounds, the dense rows of common terms, chunk lengths and documents)
cost seconds of CPU to decode and build, and two workers building them at once on a
2-core machine took twice as long as the client alone (20 s against 10 s at 1M
passages).  `shared_arrays` builds them once per machine — the first process to ask
builds while the others wait on a lock — into `.npy` and Arrow files in shared memory
(/dev/shm), and every process memory-maps them: the others load in milliseconds, and
the machine holds one copy, not one per worker.  (The Parquet files themselves cannot
be mapped: their pages are compressed and encoded; these are the decoded arrays.)
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from pipekit.run.errors import PipelineError

_HELD: dict = {}  # (key, shard) -> value: a worker holds one index at a time, whole or some of its shards


def held(key, load: Callable[[], Any], shard=None):
    """This process's value for `key` (and `shard`: one of several parts of one index, as
    pipekit/retrieve/shards.py holds them), loaded on first use; another key replaces all."""
    if (key, shard) not in _HELD:
        if any(k != key for k, _ in _HELD):
            _HELD.clear()  # the old index goes before the new one loads: never two in memory
        _HELD[(key, shard)] = load()
    return _HELD[(key, shard)]


def release(tag: str | None = None) -> None:
    """Drop what this process holds, and the machine's shared arrays for `tag`
    (removing a mapped file is safe: processes still mapping it keep their pages)."""
    _HELD.clear()
    if tag is not None:
        for root in _roots():
            shutil.rmtree(root / _name(tag), ignore_errors=True)
        _lock_path(tag).unlink(missing_ok=True)


def _name(tag: str) -> str:
    return f"pipekit-{os.getuid() if hasattr(os, 'getuid') else 0}-{tag}"


def _lock_path(tag: str) -> Path:
    """One lock per tag in one place, whichever folder ends up holding the arrays."""
    return Path(tempfile.gettempdir()) / f"{_name(tag)}.lock"


def shared_tag(output_dir, fingerprint: str) -> str:
    """A name for one index's shared arrays: its folder and its fingerprint."""
    return hashlib.sha1(f"{Path(output_dir).resolve()}\0{fingerprint}".encode()).hexdigest()[:16]


def _roots() -> list[Path]:
    shm = Path("/dev/shm")
    return ([shm] if os.access(shm, os.W_OK) else []) + [Path(tempfile.gettempdir())]


def shared_dir(tag: str, size: int = 0) -> Path:
    """Where `tag`'s arrays are (or, if nowhere yet, go): shared memory when it has room
    for `size` bytes, else the temp folder (on disk, but still one copy in the page
    cache).  A container's /dev/shm is often 64 MB: filling it would fail the stage."""
    name = _name(tag)
    roots = _roots()
    for root in roots:
        if (root / name).exists():
            return root / name
    in_memory = len(roots) > 1 and shutil.disk_usage(roots[0]).free > size * 1.1
    return (roots[0] if in_memory else roots[-1]) / name


def shared_arrays(tag: str, build: Callable[[Callable], dict], size: int = 0) -> dict:
    """`build(zeros)`'s arrays (NumPy or Arrow, by name, about `size` bytes), built by one
    process per machine and memory-mapped read-only by each one that asks.  `zeros(shape, dtype)` allocates
    an array in the shared folder itself, for one too big to build and then copy there
    (stage 05's dense rows: 600 MB at 1M passages).  A folder appears whole or not at all
    (written aside, then renamed), so one a killed builder left half-written is never read."""
    import fcntl  # POSIX only, as /dev/shm: imported here so that stage 05 still loads elsewhere

    with open(_lock_path(tag), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first builds; the others wait here, then map
        folder = shared_dir(tag, size)  # decided under the lock: where a builder put them, if one did
        if not folder.exists():
            aside = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
            shutil.rmtree(aside, ignore_errors=True)
            aside.mkdir()
            made = []

            def zeros(shape, dtype):
                made.append(np.lib.format.open_memmap(aside / f"z{len(made)}.npy", "w+", dtype, shape))
                return made[-1]

            try:
                for name, value in build(zeros).items():
                    if any(value is m for m in made):
                        value.flush()
                        os.rename(value.filename, aside / f"{name}.npy")
                    elif isinstance(value, np.ndarray):
                        np.save(aside / f"{name}.npy", value)
                    else:
                        with pa.OSFile(str(aside / f"{name}.arrow"), "wb") as sink, \
                                pa.ipc.new_file(sink, pa.schema([(name, value.type)])) as writer:
                            writer.write_batch(pa.record_batch([value], names=[name]))
                del made[:]
                os.rename(aside, folder)
            except BaseException:
                shutil.rmtree(aside, ignore_errors=True)
                raise
    out = {}
    try:
        for path in sorted(folder.iterdir()):
            if path.suffix == ".npy":
                # A plain ndarray view of the map: NumPy's memmap subclass slows every slice.
                out[path.stem] = np.load(path, mmap_mode="r").view(np.ndarray)
            else:
                out[path.stem] = pa.ipc.open_file(pa.memory_map(str(path))).read_all().column(0).combine_chunks()
    except FileNotFoundError:
        raise PipelineError(f"{folder} vanished while it was being mapped: another run with the same index "
                            "released it; run stage 05 again") from None
    return out


def worker_index(index_class, output_dir, tag: str, mixing: tuple):
    """Stage 05's Index on a worker: the machine's shared arrays, and with section context
    the chunks' documents and headings that its sections are found from (pipekit/retrieve/sections.py);
    `mixing` is (retrieval.section_context, retrieval.dense_weight).  With a dense weight
    the chunks' vectors too (pipekit/retrieve/fusion.py: each worker holds its own copy)."""
    from pipekit.run import io
    from pipekit.retrieve.fusion import dense_for
    from pipekit.retrieve.sections import section_context

    context, dense_weight = mixing
    files = WorkerOutputs(output_dir)
    index = index_class(files, shared=tag)
    if context > 0:
        index.chunks = io.read_table(files.path("04_chunks.parquet"), ["doc_id", "heading"])
    index.context = section_context(context, files.path("03_chunks.parquet"), index)
    index.dense = dense_for(output_dir, index, dense_weight)
    return index


class WorkerOutputs:
    """What stage 05's Index uses of a stage context, on a worker: the output folder
    (which every worker must see at the client's path) and notes, kept for the client."""

    def __init__(self, output_dir):
        self.output_dir = Path(output_dir)
        self.notes: list[str] = []

    def path(self, name: str) -> Path:
        return self.output_dir / name

    def require(self, name: str, made_by) -> Path:
        p = self.path(name)
        if not p.exists():
            raise PipelineError(f"no {name} in {self.output_dir} on this worker: the workers must see "
                                "paths.output at the same path as the client (README, \"Running on a cluster\")")
        return p

    def note(self, text: str) -> None:
        self.notes.append(text)


# --- stage 05's queries on the workers ------------------------------------------------------

QUERY_PARTS_PER_WORKER = 4  # batches a worker answers: enough to even out, few enough that each pays its trip


def query_parts(queries: list, workers: int) -> list[tuple[int, list]]:
    """The queries cut into batches, each with the number of its first query."""
    step = max(-(-len(queries) // (QUERY_PARTS_PER_WORKER * max(workers, 1))), 1)
    return [(i, queries[i:i + step]) for i in range(0, len(queries), step)]


def _answer(ctx, fingerprint: str, top_k: int, depth: int, feedback, context: tuple):
    from pipekit.run.engine import StageFunction

    return StageFunction(5, "answer_partition", (str(ctx.output_dir), fingerprint, top_k, depth, feedback, context))


def warm_workers(ctx, queries: list, top_k: int, depth: int, feedback, context: tuple = (0.0, 0.0)):
    """Have a worker start loading the index (its machine's shared copy) at once, by
    answering the first query, while this process reads its own share of the index: the
    two overlap instead of following each other (~0.4 s of a 6 s stage at 1M passages).
    The handle goes to `on_workers`, which waits for it.  None when there is nothing to do."""
    if not queries or ctx.engine.kind == "local":
        return None
    from pipekit.run import io
    from pipekit.run.engine import Listed
    from pipekit.run.stages import get_stage

    fingerprint = io.read_meta(ctx.require("04_postings.parquet", get_stage(4)))["fingerprint"]
    return ctx.engine.submit(Listed(_answer(ctx, fingerprint, top_k, depth, feedback, context)), (0, queries[:1]))


def on_workers(ctx, queries: list, fingerprint: str, top_k: int, depth: int, feedback, context: tuple = (0.0, 0.0),
               warm=None):
    """Stage 05's `search` for all queries, batch by batch wherever the engine runs
    `answer_partition`: the same hits, document run and scored queries as one call.
    Every process that loaded the index lets it go when this ends, even on an error."""
    fn = _answer(ctx, fingerprint, top_k, depth, feedback, context)
    tag = shared_tag(ctx.output_dir, fingerprint)
    t0 = time.perf_counter()
    hits, run, scored, loads = [], {}, [], []
    try:
        for first, (q, c, s, r), part_run, part_scored, load in ctx.map_partitions(
                fn, query_parts(queries, ctx.engine.workers), desc="05 scoring"):
            hits.append((q + first, c, s, r))
            run.update(part_run)
            scored.extend(part_scored)
            loads.append(load)
        if warm is not None:
            ctx.engine.fetch([warm])  # done before the index is let go; its error, if any, told
    except BaseException:
        with contextlib.suppress(Exception):  # the error that stopped the stage is the one to tell
            if warm is not None:
                ctx.engine.fetch([warm])  # still loading, it would hold the index after the release
            ctx.engine.run_everywhere(release, tag)
        release(tag)
        raise
    ctx.engine.run_everywhere(release, tag)
    release(tag)
    ctx.note(f"queries answered in {time.perf_counter() - t0:.2f} s on {ctx.engine.workers} workers "
             f"({len(hits)} batches; a worker loaded the index in {max(loads, default=0):.2f} s at most)")
    cat = lambda i, dt: np.concatenate([h[i] for h in hits]).astype(dt) if hits else np.zeros(0, dt)
    return (cat(0, np.int64), cat(1, np.int64), cat(2, np.float64), cat(3, np.int32)), run, scored
