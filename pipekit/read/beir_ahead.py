"""Stage 01 on a BEIR corpus: its first tables made while the listing still hashes the file.

In a fresh output folder no listing vouches for the corpus, so stage 01's context hashes the
whole file (BLAKE2b: 01_files.parquet's key, and through it the stage's fingerprint) before
run() reads a record.  The hash starts on a thread before the imports (pipekit/run/hashing.py
`hash_ahead`), but at a million passages (591 MB) ~1.2 s of it was still left when the
imports were done, and the stage waited with one core idle (bench/README.md, branch s01b).
The records do not depend on that hash; only the output's provenance does, and the output is
opened after the listing.  So the early start (pipekit/read/parallel.py `start_early`, called
between the walk and the hashing) begins the stage's own reading here, on a thread, and its
tables wait in a queue until the stage asks for them.

The stage's `read_partition` takes them only for the same arguments (the whole corpus, the
same `max_bytes` and threads) and only if the file is the one its listing stamped, and still
is (device, inode, size and times as when this reading began); otherwise the reading here is
stopped and the stage reads the file itself, as before.  A malformed line's error comes out
where the stage would have met it, after the tables before it.  Memory: up to AHEAD_BYTES of
tables wait while the stage is still setting up, then AFTER, as the stage's own loop holds.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Callable, Iterator

from pipekit.run.hashing import _identity  # device, inode, size and times: the file as hash_ahead knows it

AHEAD_BYTES = 128 << 20  # tables made before the stage asks (~1 s of reading on a quiet machine; +130 MB at most)
AFTER = 2  # tables made ahead once the stage reads them

# The stage's own table maker: 01_documents.py sets it to `beir_tables` with its schema and
# batch sizes, so that the tables made here are the ones it would make.
tables: Callable | None = None

_RUNNING: "Ahead | None" = None


class _Failed:
    def __init__(self, exc: BaseException):
        self.exc = exc


class Ahead:
    """`make()`'s tables made on a thread of their own, queued; iterated once, in order."""

    def __init__(self, key: tuple, make: Callable[[], Iterator]):
        self.key = key
        self.identity = _identity(key[0])
        self.stamped = False  # the stage's listing stamped the file as it was when reading began (`listed`)
        self._cond = threading.Condition()
        self._queue: deque = deque()
        self._bytes = 0
        self._taken = self._stop = self._done = False
        self._thread = threading.Thread(target=self._run, args=(make,), name="beir-ahead", daemon=True)
        self._thread.start()

    def _full(self) -> bool:
        return len(self._queue) >= AFTER if self._taken else self._bytes >= AHEAD_BYTES

    def _run(self, make) -> None:
        made = None
        try:
            made = make()
            for table in made:
                with self._cond:
                    self._queue.append(table)
                    self._bytes += table.nbytes
                    self._cond.notify_all()
                    while self._full() and not self._stop:
                        self._cond.wait()
                    if self._stop:
                        return
        except BaseException as exc:  # noqa: BLE001 -- handed to the stage, raised where it reads
            with self._cond:
                self._queue.append(_Failed(exc))
        finally:
            if made is not None:
                made.close()  # stopped early: the reader's threads and hashing process end
            with self._cond:
                self._done = True
                self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._queue.clear()
            self._cond.notify_all()

    def __iter__(self) -> Iterator:
        with self._cond:
            self._taken = True
            self._cond.notify_all()
        try:
            while True:
                with self._cond:
                    while not self._queue and not self._done:
                        self._cond.wait()
                    if not self._queue:
                        return
                    item = self._queue.popleft()
                    if not isinstance(item, _Failed):
                        self._bytes -= item.nbytes
                    self._cond.notify_all()
                if isinstance(item, _Failed):
                    raise item.exc
                yield item
        finally:
            self.stop()


def begin(path, max_bytes: int | None, threads: int) -> bool:
    """Start reading the whole corpus at `path` as the stage will (`tables`); True if started.
    A reading begun before and not taken is stopped: one at a time."""
    global _RUNNING
    if tables is None:
        return False
    if _RUNNING is not None:
        _RUNNING.stop()
    key = (str(path), max_bytes, 0, None, threads)
    make = tables
    _RUNNING = Ahead(key, lambda: make(key[0], max_bytes, 0, None, threads=threads))
    return True


def listed(listing: dict | None) -> None:
    """The stage's listing: the reading begun here is used only if it stamped the file as the
    file was when the reading began."""
    if _RUNNING is not None and _RUNNING.identity is not None:
        stamps = [v[:3] for v in ((listing or {}).get("files") or {}).values()]
        _RUNNING.stamped = len(stamps) == 1 and stamps[0] == list(_RUNNING.identity[2:])


def take(path, max_bytes: int | None, start: int, end: int | None, threads: int) -> Iterator | None:
    """The tables begun here for exactly these arguments, if the file is still the one the
    listing stamped; None otherwise (and whatever was begun is stopped)."""
    global _RUNNING
    ahead, _RUNNING = _RUNNING, None
    if ahead is None:
        return None
    if ahead.key != (str(path), max_bytes, start, end, threads) or not ahead.stamped \
            or _identity(path) != ahead.identity:
        ahead.stop()
        return None
    return iter(ahead)
