"""Ask glibc's malloc to keep freed memory for reuse instead of handing it straight back.

By default a NumPy temporary of more than 128 KB is a fresh mmap: every page of it is
faulted in on first touch and returned to the system when the array is freed.  Stage 05
makes tens of thousands of such temporaries (a few per query term), and in a virtual
machine a page fault is expensive: raising the mmap and trim thresholds made its query
phase ~10% faster on the 1M-passage bench corpus (bench/scale.py).  The cost is that the
process keeps up to the thresholds of freed memory until it exits.

A no-op where glibc is not the allocator (macOS, Windows, musl).
"""
from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # from glibc's malloc.h


def keep_freed_memory(mmap_threshold: int = 1 << 30, top_pad: int = 64 << 20) -> bool:
    """True if glibc took the settings."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return all(mallopt(opt, value) == 1 for opt, value in (
        (M_MMAP_THRESHOLD, mmap_threshold), (M_TRIM_THRESHOLD, mmap_threshold), (M_TOP_PAD, top_pad)))
