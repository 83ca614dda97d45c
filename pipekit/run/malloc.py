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
import functools
import os
import sys

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -2, -3, -8  # from glibc's malloc.h


@functools.lru_cache(maxsize=None)
def _libc() -> ctypes.CDLL:
    """The C library's functions, as the process already has them loaded (`dlopen(NULL)`: the
    program and every library it loaded, the C library among them; on Linux and macOS alike).
    Not `find_library("c")`: it runs `ldconfig -p` in a subprocess, a fork of the whole
    process (7 ms with 240 MB resident, more on a loaded machine), which every one-file rerun
    paid in stage 04 for nothing.  A C library without mallopt or malloc_trim (musl, macOS)
    raises AttributeError at the call, as before."""
    return ctypes.CDLL(None)


def keep_freed_memory(mmap_threshold: int = 1 << 30, top_pad: int = 64 << 20, release_first: bool = False) -> bool:
    """True if glibc took the settings.  `release_first`: what was freed so far handed back
    before (release_freed_memory), so that only what is freed from now on is kept.

    Stage 05 keeps from its query phase on, not from its start: its index load frees large
    buffers (each row group decoded, then copied out), and kept from the start they stayed in
    the process under the queries' peak; with Arrow on glibc's heap (arrow_on_malloc) one
    run_pipeline process at a million passages peaked at 811-891 MB, and 729-789 MB when the
    load's leftovers were handed back first (bench/README.md, branch mem6)."""
    if release_first:
        release_freed_memory()
    try:
        mallopt = _libc().mallopt
    except (OSError, AttributeError):
        return False
    return all(mallopt(opt, value) == 1 for opt, value in (
        (M_MMAP_THRESHOLD, mmap_threshold), (M_TRIM_THRESHOLD, mmap_threshold), (M_TOP_PAD, top_pad)))


_ENDS_WITH_STAGE = False  # set by stage_ends_process: this process ends when its stage does


def stage_ends_process() -> None:
    """Say that this process ends with the stage it runs: a stage's own command line
    (cli.stage_main), or run_pipeline's child for a large stage (pipekit/run/isolate.py)."""
    global _ENDS_WITH_STAGE
    _ENDS_WITH_STAGE = True


def keep_for_the_stage() -> bool:
    """keep_freed_memory() where the process ends with its stage; True if glibc took it.

    Stages 02 to 04 free and allocate arrays of the same few sizes batch after batch, and Arrow
    on glibc's malloc (arrow_on_malloc: run_pipeline's children) gets each buffer over glibc's
    mmap threshold as a fresh mapping, faulted in page by page and unmapped when freed: in
    a virtual machine whose freed memory goes back to the host, a fault costs the host's
    too (at a million passages, Arrow on malloc: stage 02 110-120k page faults, 36k kept;
    stage 03 235k, 45k; stage 04 144-189k, 111-113k; each stage's peak +0-20 MB;
    bench/README.md, branch faults).  What is kept then ends with the process.  Not in a
    process that runs more stages after it (run_pipeline on small inputs, a test calling
    main()): the settings stay for the process's life, and stage 05 keeps only from its
    queries on (its load's buffers, kept, stayed under its peak)."""
    return keep_freed_memory() if _ENDS_WITH_STAGE else False


def few_arenas(n: int) -> bool:
    """At most `n` malloc arenas from now on (glibc's default: 8 per core); True if glibc took it.

    Each thread that allocates gets an arena of its own while there are fewer than the
    maximum, and an arena's freed memory serves only the threads using it: stage 04's
    counting, vocabulary, read-ahead and writer threads each kept a heap, which
    `release_freed_memory` handed back and the next batch faulted in again (at 200k
    passages 365-381k page faults and 1.45-1.54 s of system time; with 2 arenas 246-274k and
    1.16-1.17 s, the peak no higher).  Threads created before the call keep theirs."""
    try:
        return _libc().mallopt(M_ARENA_MAX, n) == 1
    except (OSError, AttributeError):
        return False


def arrow_on_malloc() -> bool:
    """Arrow's buffers from glibc's malloc (Arrow's "system" pool) in this process, so that
    `release_freed_memory`'s malloc_trim hands back what Arrow freed; True if it took.

    Arrow's C++ default pool is its bundled mimalloc, which the Parquet reader and writer and
    the compute kernels allocate from even when pyarrow's own pool is another
    (io.steady_memory sets jemalloc there).  mimalloc keeps freed pages for the thread that
    freed them, and its `release_unused()` collects only the calling thread's heap: in one
    run_pipeline process 68-81 MB of it stayed resident after stages 03 and 04 at 200k
    passages (branch mem5), under stage 04's peak.  On glibc's heap it is handed back after
    each stage: the process's peak at 200k fell from 400-419 to 352-383 MB (328-359 with
    stage 05's later keep_freed_memory; its time not settled on a loaded machine) (jemalloc for
    both pools instead: 380-399 MB, its freed pages kept for its decay; mimalloc with
    MIMALLOC_PURGE_DELAY=0: +10 s of CPU at a million passages, branch mem5).  At a million
    passages the peak is stage 05's loaded index, not a leftover: no lower.

    Arrow reads ARROW_DEFAULT_MEMORY_POOL once, when pyarrow is imported: this sets it, imports
    pyarrow, and puts the environment back, so processes this one starts (stage 01's hashing
    process, Dask workers: each a stage of its own) keep Arrow's default.  Nothing when pyarrow
    is imported already (a test calling main()) or the user chose a pool."""
    if "pyarrow" in sys.modules or os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return False
    os.environ["ARROW_DEFAULT_MEMORY_POOL"] = "system"
    try:
        import pyarrow as pa
    finally:
        del os.environ["ARROW_DEFAULT_MEMORY_POOL"]
    return pa.default_memory_pool().backend_name == "system"


def release_freed_memory() -> None:
    """Hand back to the system the memory freed so far: glibc's heap and Arrow's pool.

    glibc returns only the top of its heap by itself; the holes a loop of mid-sized arrays
    leaves once they are freed stay in the process.  After stage 04's counting loop (its
    per-batch arrays concatenated and dropped) they were 0.15 GB at 300k passages, and
    Arrow's pool kept another 40 MB: RSS the later, bigger steps then added to.
    """
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    try:
        _libc().malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: nothing to trim
