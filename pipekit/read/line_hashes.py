"""Each BEIR record's `content_hash`, made in one compiled call a block (or in a process of its own).

A record's `content_hash` is 64 bits of BLAKE2b of its line (pipekit/run/hashing.py).  Called
from Python once a line, hashlib costs ~1.3 us a line here and keeps the GIL for inputs under
2,048 bytes (a record's line is ~600): at 1M passages 1.5-1.9 s of GIL that stage 01's other
threads (the block reader, the `_id` check, the cut into tables, the Parquet writer's Python)
waited behind, however many threads hashed.

The way it is done where it can be: **one compiled call a block** (pipekit/read/hash_loops.py,
BLAKE2b written out for numba and compiled ahead of time by pipekit/run/aot.py, as stages 04
and 05 load theirs), on the block's own thread, with the GIL let go: ~1.15 us a line, beside
the parse and the writer, and no second process, no copy of the bytes, no round trip.  Its
digests are hashlib's, byte for byte (tests/test_line_hashes.py draws lines of every length
through both).  The first large corpus on a machine starts its build (~15-30 s of one core, in
a process of its own); until it is there, and where it cannot be built (no C compiler, no
numba), the way before:

**the hashing process** (`LineHasher`), forked from the fork server stage 01's file readers
use (pipekit/read/workers.py: the script is not imported there, nor Arrow): it is sent a
block's place in the corpus and its line bounds, reads the bytes itself with `os.pread` (from
the page cache: the stage read them a moment before), and sends back 8 bytes a line.  Either
way `hex_column` turns the digests into the column in NumPy.

A process costs its start (a fork of the server, ~10 ms once it runs; the server itself
~0.1 s when stage 01 did not start it for its readers) and a round trip a block, so it is
used only for a range of at least `PROCESS_BYTES` and where the stage has two threads (a
second core).  Where it cannot start or dies, the block's lines are hashed in the thread
that asks, as before: the values do not depend on where they were made.

What it does not do: hash the corpus file as a whole (the listing's hash, pipekit/read/walk.py),
or lines that go the line-by-line path (pipekit/read/fastpath.py `_python_block`, which
hashes each line where it reads it).
"""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from pipekit.run.hashing import HASHING_PROCESS_BYTES, compiled_lines, file_line_digests, line_digests

PROCESS_BYTES = HASHING_PROCESS_BYTES  # (pipekit/run/hashing.py: early.py reads it without NumPy and Arrow)
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


_loops = None  # False: the compiled hashes off, as on a machine that cannot build them (the tests set it)


def loops(length: int | None = None):
    """The compiled line hashes if they are built on this machine (imported now), else None;
    for a range of `length` bytes worth it (`PROCESS_BYTES`) their build is started meanwhile,
    in a process of its own (pipekit/run/aot.py), and the next run has them."""
    if _loops is False:
        return None
    built = compiled_lines()
    module = built.built()
    if module is None and length is not None and length >= PROCESS_BYTES:
        built.load(wait=False)
    return module


def digests(data, starts: np.ndarray, ends: np.ndarray):
    """The 8-byte BLAKE2b digest of each line data[starts[i]:ends[i]], joined (bytes, or a
    uint8 array from the compiled call: `hex_column` takes either)."""
    module = None if _loops is False else compiled_lines().module  # (loaded by `loops`, or by its build's end)
    if module:
        out = np.empty(8 * len(starts), dtype=np.uint8)
        module.line_digests(np.asarray(data, dtype=np.uint8), np.ascontiguousarray(starts, dtype=np.int64),
                            np.ascontiguousarray(ends, dtype=np.int64), out)
        return out
    return line_digests(data, starts.tolist(), ends.tolist())


def hex_column(joined, rows: np.ndarray | None = None) -> pa.Array:
    """The digests as `content_hash` writes them (16 hex digits each), as an Arrow string
    column: the digests of `rows` only, when given."""
    d = np.frombuffer(joined, dtype=np.uint8).reshape(-1, 8)
    if rows is not None:
        d = d[rows]
    out = np.empty((len(d), 16), dtype=np.uint8)
    out[:, 0::2], out[:, 1::2] = _HEX[d >> 4], _HEX[d & 15]
    offsets = np.arange(0, 16 * len(d) + 1, 16, dtype=np.int32)
    return pa.StringArray.from_buffers(len(d), pa.py_buffer(offsets), pa.py_buffer(out))


AHEAD = 4  # blocks asked for ahead of the one being parsed: the process's queue, 2 MB each


def asked_ahead(hasher: "LineHasher", blocks, ahead: int = AHEAD):
    """Each block (a tuple whose [1:5] are its offset, bytes, line starts and ends) with its
    hashes asked for, `ahead` blocks before it is handed on: the process works on the next
    blocks while this one is parsed, not only on the two the stage has in flight."""
    from collections import deque

    queue = deque()
    for block in blocks:
        queue.append((*block, hasher.submit(*block[1:5])))
        if len(queue) > ahead:
            yield queue.popleft()
    yield from queue


class LineHasher:
    """`submit(offset, data, starts, ends)` hashes a block's lines in the hashing process;
    `result(made, data, starts, ends)` gives its digests (made here if the process failed)."""

    def __init__(self, path):
        from concurrent.futures import ProcessPoolExecutor
        from pipekit.read.workers import ReadersContext

        self.path = str(path)
        self.pool = ProcessPoolExecutor(1, mp_context=ReadersContext())

    @classmethod
    def start(cls, path, length: int | None) -> "LineHasher | None":
        """A hasher for a range of `length` bytes (None: to the file's end), or None where a
        process is not worth it or cannot start (no semaphores in a sandbox, no fork server
        on this system) and where the compiled hashes are built (`loops`): the lines are then
        hashed in the stage's threads."""
        if length is None:
            try:
                length = os.path.getsize(path)
            except OSError:
                return None
        if length < PROCESS_BYTES or loops(length) is not None:
            return None
        try:
            return cls(path)
        except (OSError, ImportError, NotImplementedError, ValueError):
            return None

    def submit(self, offset: int, data, starts: np.ndarray, ends: np.ndarray):
        bounds = np.concatenate([starts, ends]).astype(np.int64).tobytes()
        try:
            return self.pool.submit(file_line_digests, self.path, int(offset), len(data), bounds)
        except Exception:  # a broken pool (its process died): this block is hashed where it is asked for
            return None

    @staticmethod
    def result(made, data, starts: np.ndarray, ends: np.ndarray) -> bytes:
        if made is not None:
            # Not yet begun (the process still starting, or behind): hashed here instead of
            # waited for, so a thread never idles behind the process.
            if made.done() or not made.cancel():
                try:
                    return made.result()
                except Exception:  # the process died, or the file changed: the stage's own bytes decide
                    pass
        return digests(data, starts, ends)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
