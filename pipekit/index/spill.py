"""Stage 04's counts kept on disk instead of in memory: a temporary file of plain arrays.

Stage 04 numbers its terms only once every batch is counted (the sorted vocabulary), and
writes its postings a term range at a time once every batch is in term space: until then
each batch's counts must be kept somewhere.  Kept in memory they made the stage's peak grow
with the corpus (0.33 GB of word counts at the end of the counting, then 0.33 GB of
term-major postings through the write, at a million passages), where a search engine's
indexer (tantivy's per-thread heap budget, Lucene's segments flushed to disk) holds a
bounded buffer and merges from files.

`Spill` is an unnamed file in the output folder (gone when it is closed or the process
dies: nothing to sweep): arrays are appended from any thread (`put`, a reserved offset and
`os.pwrite`) and read back whole or in part (`get`, `os.preadv` straight into a new NumPy
array).  Plain reads, not mmap: a mapped file's pages count in the process's RSS as they
are touched, and the page cache that serves these reads does not.  The written pages are
usually never written back at all: the file is unlinked, and dropped before the kernel's
writeback delay (30 s) at the sizes measured (bench/README.md).

`SpilledPiece` is a batch's term-major postings (counting.Piece) in such a file: its terms
are found with a sample of every SAMPLE-th term kept in memory and one block read, so a
term range's slice of a batch costs a few small reads besides its postings.

The cost is disk (or page cache) while the stage runs: 4-6 bytes a token (a batch keeps each
one, its repeats summed when it turns term-major; its count only where some token counts more
than once), 4 a posting, 12 a batch's term, about 0.6 GB at a million passages; a batch's
tokens are read once, when it turns term-major, and their pages handed back then (`take`):
by those sizes about 0.3 GB of it in pages at a time, not 0.6, and the later pages reuse them.

What it does not do: compress, or outlive the stage (the index files are stage 04's output).
"""
from __future__ import annotations

import ctypes
import functools
import os
import sys
import tempfile
import threading
from typing import NamedTuple

import numpy as np

from pipekit.index.counting import Piece

SAMPLE = 256  # terms of a spilled batch per block found by its in-memory sample (1 KB read a search)


class Stored(NamedTuple):
    """Where an array lies in a Spill: its byte offset, dtype and length."""
    offset: int
    dtype: str
    n: int


class Spill:
    """An unnamed temporary file in `folder` holding arrays (see the module docstring)."""

    def __init__(self, folder):
        self._file = tempfile.TemporaryFile(dir=folder, prefix=".spill-")
        self._fd = self._file.fileno()
        self._lock = threading.Lock()
        self._end = 0
        # Where os.pwrite/os.preadv are missing (Windows), one thread at a time seeks.
        self._positioned = hasattr(os, "pwrite") and hasattr(os, "preadv")

    @property
    def size(self) -> int:
        return self._end

    def put(self, array: np.ndarray) -> Stored:
        """Append `array` (any thread): where it lies."""
        array = np.ascontiguousarray(array)
        view = memoryview(array).cast("B") if array.nbytes else memoryview(b"")
        with self._lock:
            at = self._end
            self._end += len(view)
            if not self._positioned:
                self._file.seek(at)
                self._file.write(view)
        if self._positioned:
            done = 0
            while done < len(view):  # (a regular file takes it whole; a short write goes on)
                done += os.pwrite(self._fd, view[done:], at + done)
        return Stored(at, array.dtype.str, len(array))

    def get(self, stored: Stored, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Elements lo..hi-1 of a stored array, read into a new array."""
        dtype = np.dtype(stored.dtype)
        hi = stored.n if hi is None else hi
        out = np.empty(max(hi - lo, 0), dtype=dtype)
        if not out.nbytes:
            return out
        view, at = memoryview(out).cast("B"), stored.offset + lo * dtype.itemsize
        if not self._positioned:
            with self._lock:
                self._file.seek(at)
                if self._file.readinto(view) != len(view):
                    raise EOFError(f"spill file ends before byte {at + len(view):,}")
            return out
        done = 0
        while done < len(view):
            got = os.preadv(self._fd, [view[done:]], at + done)
            if got <= 0:
                raise EOFError(f"spill file ends before byte {at + len(view):,}")
            done += got
        return out

    def take(self, stored: Stored) -> np.ndarray:
        """A stored array read for the last time: its pages handed back to the kernel now
        (a hole punched where it lay), not when the file is closed.  Page cache freed and
        soon allocated again (the next batches' postings put here, the index written) is
        cheap where new pages are dear: in a virtual machine whose free memory goes back to
        the host, a page touched afresh costs the host's fault too (bench/README.md, branch
        faults).  The bytes of neighbouring arrays in the pages at its ends are kept."""
        out = self.get(stored)
        if out.nbytes:
            _punch(self._fd, stored.offset, out.nbytes)
        return out

    def close(self) -> None:
        self._file.close()


def _punch(fd: int, offset: int, length: int) -> bool:
    """fallocate(PUNCH_HOLE | KEEP_SIZE) of bytes offset..offset+length-1; True if done.  Only
    the pages wholly inside go; a page the range shares is zeroed in the range alone.  A
    no-op where it is missing (not Linux; a file system without holes)."""
    fallocate = _fallocate()
    if fallocate is None:
        return False
    return fallocate(fd, 0x02 | 0x01, ctypes.c_long(offset), ctypes.c_long(length)) == 0  # PUNCH_HOLE | KEEP_SIZE


@functools.lru_cache(maxsize=None)
def _fallocate():
    if not sys.platform.startswith("linux"):
        return None
    try:
        fallocate = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    fallocate.restype = ctypes.c_int
    return fallocate


class SpilledPiece:
    """A batch's `counting.Piece` in a Spill: `terms_in` as Piece has it, read from the file.

    A batch's chunks are a few thousand consecutive numbers (stage 04's BATCH): each posting's
    chunk is stored as its distance from the batch's first, in 2 bytes where they fit, and
    made an int32 chunk number again when read: 0.11 GB less written to the file and read back
    at a million passages (54M postings)."""

    def __init__(self, spill: Spill, piece: Piece):
        self.spill = spill
        self.sample = piece.terms[::SAMPLE].copy()  # every SAMPLE-th term: which block to read
        self.chunk_dtype, self.base = piece.chunk.dtype, 0
        chunk = piece.chunk
        if len(chunk):
            low, high = int(chunk.min()), int(chunk.max())
            if high - low <= np.iinfo(np.uint16).max:
                self.base = low
                chunk = np.empty(len(chunk), dtype=np.uint16)
                np.subtract(piece.chunk, low, out=chunk, casting="unsafe")  # (in range: checked above)
        # (df is not stored: the starts give it)
        self.refs = Piece(spill.put(piece.terms), None, spill.put(chunk), spill.put(piece.tf),
                          spill.put(piece.starts))
        self.df_dtype = piece.df.dtype
        self._found = (-1, 0)  # the last search's term and place: a range starts where the one before ended

    def _find(self, term: int) -> int:
        """np.searchsorted(terms, term) with the terms on disk: one block of SAMPLE read."""
        if term == self._found[0]:
            return self._found[1]
        k = int(np.searchsorted(self.sample, term, side="right"))
        at = 0
        if k:
            base = (k - 1) * SAMPLE
            block = self.spill.get(self.refs.terms, base, min(base + SAMPLE, self.refs.terms.n))
            at = base + int(np.searchsorted(block, term))
        self._found = (term, at)
        return at

    def terms_in(self, lo: int, hi: int) -> Piece:
        """Its postings of terms lo..hi-1, terms numbered from lo (counting.Piece.terms_in)."""
        i, j = self._find(lo), self._find(hi)
        get, refs = self.spill.get, self.refs
        starts = get(refs.starts, i, j + 1)  # (one read: both ends of the postings, and each term's df)
        a, z = int(starts[0]), int(starts[-1])
        terms = get(refs.terms, i, j)
        terms -= np.int32(lo)
        chunk = get(refs.chunk, a, z)
        if chunk.dtype != self.chunk_dtype:  # distances from the batch's first chunk
            chunk = np.add(chunk, self.base, dtype=self.chunk_dtype)
        return Piece(terms, np.diff(starts).astype(self.df_dtype), chunk, get(refs.tf, a, z))
