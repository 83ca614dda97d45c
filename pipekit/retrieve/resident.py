"""What a worker process loads once and keeps for the tasks that follow: its part of stage 05's index.

Stage 05 on a cluster sends batches of queries to the parts of the index as tasks
(pipekit/retrieve/shards.py), and each task needs its part loaded.  Loading it per task
would cost more than the queries; sending it with the tasks would pickle a gigabyte each
time.  So each worker process keeps what it loaded (`held`: keyed by the index's folder and
fingerprint, `index_tag`, so a rebuilt index is never answered from the old one, and by
the part) until the stage tells every worker to let go (`release`, at its end, also when it
fails).  A worker may hold several parts of one index (more parts than workers, or one
taken over from a lost worker), never parts of two indexes.

An earlier version held the whole index once per machine, its decoded arrays in shared
memory (/dev/shm) mapped by every worker of the machine: one copy a machine, but never
more index than one machine holds.  Parts by document replaced it (issue 38).

What it does not do: decide which worker holds which part (Dask does, from where each
part's load task ran: pipekit/retrieve/shards.py).
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable

from pipekit.run.errors import PipelineError

_HELD: dict = {}  # (key, part) -> value: a worker holds parts of one index at a time


def held(key, load: Callable[[], Any], part=None):
    """This process's value for `key` and `part` (one of several parts of one index, as
    pipekit/retrieve/shards.py holds them), loaded on first use; another key replaces all."""
    if (key, part) not in _HELD:
        if any(k != key for k, _ in _HELD):
            _HELD.clear()  # the old index goes before the new one loads: never two in memory
        _HELD[(key, part)] = load()
    return _HELD[(key, part)]


def release() -> None:
    """Drop what this process holds."""
    _HELD.clear()


def index_tag(output_dir, fingerprint: str) -> str:
    """A name for one index: its folder and its fingerprint."""
    return hashlib.sha1(f"{Path(output_dir).resolve()}\0{fingerprint}".encode()).hexdigest()[:16]


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


QUERY_PARTS_PER_WORKER = 4  # batches a worker answers: enough to even out, few enough that each pays its trip


def query_parts(queries: list, workers: int) -> list[tuple[int, list]]:
    """The queries cut into batches, each with the number of its first query."""
    step = max(-(-len(queries) // (QUERY_PARTS_PER_WORKER * max(workers, 1))), 1)
    return [(i, queries[i:i + step]) for i in range(0, len(queries), step)]
