"""Stage 04's term ranges' arrays, used again by a later range once nothing refers to them.

The local engine writes 04_postings a term range of about a million postings at a time
(04_indexing.RANGE_POSTINGS): each range is put together in arrays of its own (its chunks and
tf, `counting.place`; its term ids and tf as int32 for the table, `shard_postings`), handed to
the Parquet writer as a table, and freed once written.  Freed, and handed back to the system
after each range (the heap's holes raised the stage's peak), the next range's arrays were
faulted in again page by page: ~14 bytes a posting, ~0.75 GB of fresh pages at a million
passages.  Kept instead (`Arrays`), a range's arrays are the pages an earlier range used
(its chunks, its tf as held and as int32; its term ids are still np.repeat's: written into a
kept array by a running sum they took 3 ms a range against 0.4 with the faults).

When is an array free again?  Its table may wait in the writer's queue, and pyarrow's
`pa.array` of a NumPy array shares its memory, holding a reference to it (or to a view of
it, which holds the array).  So an array is handed out again only when its reference count
says that nobody but this keeper holds it: no view, no table, no Arrow buffer.  Nothing is
ever overwritten while it is read; at worst an array still held is not reused, and a new one
is made as before.

At most `keep` arrays are kept: about what the ranges in flight at once hold anyway (two
being put together, one waiting, one being written), so the peak is theirs, not more.  A
range larger than every free array gets a new one, which replaces the smallest free one.
"""
from __future__ import annotations

import sys
import threading

import numpy as np


class Arrays:
    """`empty(n, dtype)`: like np.empty, from arrays kept for reuse (module docstring)."""

    def __init__(self, keep: int):
        self.keep = keep
        self._kept: list[np.ndarray] = []
        self._lock = threading.Lock()
        self.reused = self.made = 0  # (counted for the tests)

    def _free(self, i: int) -> bool:
        # Referred to by the list and by getrefcount's argument only: nobody else holds it.
        return sys.getrefcount(self._kept[i]) == 2

    def empty(self, n: int, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        with self._lock:
            fits, smaller = None, None
            for i in range(len(self._kept)):
                if self._kept[i].dtype != dtype or not self._free(i):
                    continue
                size = len(self._kept[i])
                if size >= n and (fits is None or size < len(self._kept[fits])):
                    fits = i  # the smallest free array that holds n
                elif size < n and (smaller is None or size < len(self._kept[smaller])):
                    smaller = i
            if fits is not None:
                self.reused += 1
                return self._kept[fits][:n]
            self.made += 1
            array = np.empty(n, dtype=dtype)
            if smaller is not None:
                self._kept[smaller] = array  # (the smaller one is freed)
            elif len(self._kept) < self.keep:
                self._kept.append(array)
            return array[:n]

