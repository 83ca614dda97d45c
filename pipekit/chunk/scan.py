"""Stage 03's byte scan in one compiled pass a batch, where the plain way makes five NumPy passes
(numba, compiled ahead of time: pipekit/chunk/scan_loops.py).

Stage 03's `one_chunk` (pipekit/chunk/fastpath.py) asks of each record of a batch: is it one
ASCII line, and how many words does it hold (split's count and the budget's)?  The plain way
answers with NumPy over the column's bytes: a scan for bytes outside printable ASCII, a space
flag, word starts, their counts per text (`true_counts`) and a test for runs of more than ten
non-spaces (`_has_long_word`), each a pass over every byte into arrays of the batch's size:
0.8 s of CPU at a million passages.  The loop reads each byte once, eight at a time, and keeps
nothing of the batch's size: 0.3 s, the same answers (tests/test_scan.py holds it to the plain
scans on drawn texts, at every alignment of the texts' bytes; bench/README.md, branch `c23`).

Where the loop comes from, as for stage 04's words and stage 05's ranking (pipekit/run/aot.py):
numba's pycc builds it once a machine into an extension module beside this file, named by a
hash of scan_loops.py, numba's and Python's versions; a stage imports it in a millisecond,
without numba.  The first batch of at least LEAST_BYTES starts the build (in a process of its
own, ~6 s of one core); until it is there, and where it cannot be built (no numba, no C
compiler: a warning says so once), the plain NumPy scans answer.  A small rerun never loads it.
"""
from __future__ import annotations

import functools

import numpy as np

LEAST_BYTES = 256 << 10  # a batch's text bytes from which the loop is worth loading or building (a BEIR batch: ~1.2 MB)
_loops = None  # False: the loop off, as on a machine that cannot build it; the tests may set a module


@functools.lru_cache(maxsize=None)
def built():
    """The module's handle (pipekit/run/aot.py, imported only when a batch is large enough)."""
    from pipekit.run.aot import Ahead

    return Ahead("pipekit.chunk.scan_loops", "pipekit_scan", "stage 03's compiled byte scan", "scanning the plain way")


def loaded(nbytes: int):
    """The compiled loop for a batch of `nbytes` bytes of text: imported when it is built, or its
    build started (not waited for) when it is not; None meanwhile, where it cannot be built, and
    for a batch under LEAST_BYTES (a one-file rerun imports nothing for it): the plain scans."""
    if _loops is not None:
        return _loops or None
    return built().load(wait=False) if nbytes >= LEAST_BYTES else None


def _words_view(data: np.ndarray) -> tuple[np.ndarray, int]:
    """(data's bytes from its first 8-aligned address on, as uint64; that address's index in data)."""
    shift = -data.ctypes.data % 8
    if len(data) <= shift:
        return np.zeros(0, np.uint64), 0
    full = (len(data) - shift) // 8
    return _read_only(data[shift:shift + 8 * full].view(np.uint64)), shift


def _read_only(data: np.ndarray) -> np.ndarray:
    """`data` as a read-only array, as Arrow's buffers are: the loop is compiled for one signature."""
    if data.flags.writeable:
        data = data.view()
        data.flags.writeable = False
    return data


def one_line_words(loops, data: np.ndarray, starts: np.ndarray, ends: np.ndarray):
    """(one ASCII line, split's word count, the budget's word count) of each text
    data[starts[i]:ends[i]]; the counts are exact where the first is True."""
    data = _read_only(data)
    words, shift = _words_view(data)
    return loops.one_line_words(data, words, shift, np.ascontiguousarray(starts, np.int64),
                                np.ascontiguousarray(ends, np.int64))
