"""Array helpers several stages share: Arrow string buffers as NumPy, run starts of sorted codes,
a column as one array, byte scans without temporaries, zeros in small pages.

Kept at the bottom of the house so that the analyzer (04), the cleaning fast path (02), the
query reader and the ranks (05) and the reuse plan (every stage) use one of each.
"""
from __future__ import annotations

import mmap
import threading

import numpy as np

from pipekit.run.lazy import lazy

pa = lazy("pyarrow")  # imported on first use: `search` starts without Arrow (pipekit/run/lazy.py)


def one_array(column) -> "pa.Array":
    """A column's values as one Array: its only chunk as it is, the chunks combined when
    there are several.  pyarrow's `ChunkedArray.combine_chunks` copies even a column of one
    chunk (pyarrow 26: the 1M-passage bench's 04_chunks headings, 32 MB, held by stage 05
    through its queries for the repeats' titles).  An Array is returned as it is."""
    if not isinstance(column, pa.ChunkedArray):
        return column
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def string_buffers(strings: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, data) of a string (or large_string) array, without copying: value i is the
    UTF-8 bytes data[offsets[i]:offsets[i + 1]].  The offsets index the whole data buffer,
    so an array sliced out of a bigger one has offsets that do not start at 0."""
    width = np.int64 if pa.types.is_large_string(strings.type) else np.int32
    _, offsets_buf, data_buf = strings.buffers()[:3]
    offsets = np.frombuffer(offsets_buf, dtype=width)[strings.offset: strings.offset + len(strings) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return offsets, data


def _plain_strings(strings, reader: str) -> None:
    """Refuse anything but one string or large_string array, naming `reader`: a string_view's
    buffers, or a chunked array's, would be misread by the byte scans here, silently."""
    kind = getattr(strings, "type", None)
    if not (isinstance(strings, pa.Array) and (pa.types.is_string(kind) or pa.types.is_large_string(kind))):
        raise TypeError(f"{reader} reads one string or large_string array, not {type(strings).__name__} "
                        f"of {kind}")


def text_bytes(strings: pa.Array, reader: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bytes, starts, ends) of one string or large_string array, for a scan of every value at
    once with NumPy: value i is bytes[starts[i]:ends[i]] (int64 positions, from 0), no copy.
    `reader` names the caller when the array is of another kind (`_plain_strings`)."""
    _plain_strings(strings, reader)
    if len(strings) == 0:
        return np.zeros(0, np.uint8), np.zeros(0, np.int64), np.zeros(0, np.int64)
    offsets, data = string_buffers(strings)
    lo = int(offsets[0])
    return data[lo:int(offsets[-1])], offsets[:-1].astype(np.int64) - lo, offsets[1:].astype(np.int64) - lo


def rows_with_byte(strings: pa.Array, byte: int) -> np.ndarray:
    """Indices (ascending) of the strings that hold this byte: one NumPy pass over the data.

    A pre-filter for an RE2 scan of a whole column: Arrow's regex (and even its plain
    substring search) reads text at ~0.6 GB/s, a byte comparison at several GB/s, and a
    pattern that needs a `}` or a `]` cannot match a text without one (nor can UTF-8 hide
    an ASCII byte inside another character)."""
    _plain_strings(strings, "rows_with_byte")
    offsets, data = string_buffers(strings)
    lo = int(offsets[0]) if len(offsets) else 0
    hits = np.flatnonzero(data[lo:int(offsets[-1]) if len(offsets) else 0] == byte)
    if len(hits) == 0:
        return np.zeros(0, dtype=np.int64)
    rows = np.searchsorted(offsets, hits + lo, side="right") - 1
    return rows[run_starts(rows)].astype(np.int64, copy=False)


def rows_matching(strings: pa.Array, pattern: str, byte: int) -> np.ndarray:
    """Indices (ascending) of the strings an RE2 `pattern` matches, where every match holds
    `byte`: only the strings with the byte (`rows_with_byte`) are scanned by the regex."""
    import pyarrow.compute as pc

    rows = rows_with_byte(strings, byte)
    if len(rows) == 0:
        return rows
    return rows[np.asarray(pc.fill_null(pc.match_substring_regex(strings.take(rows), pattern), False))]


def run_starts(values: np.ndarray) -> np.ndarray:
    """True where a run of equal values begins in a sorted array (np.diff with prepend,
    but in one ufunc call: this runs a few times per query)."""
    first = np.ones(len(values), dtype=bool)
    np.not_equal(values[1:], values[:-1], out=first[1:])
    return first


# ---- byte scans without temporaries ------------------------------------------------------------

# A thread's scratch arrays hold up to this many bytes each; a larger scan allocates as before.
SCRATCH_BYTES = 8 << 20


class _Scratch(threading.local):
    def __init__(self):
        self.slots: dict[int, np.ndarray] = {}


_SCRATCH = _Scratch()


def scratch(n: int, slot: int, dtype=np.bool_) -> np.ndarray:
    """An uninitialised array of `n` one-byte values (bool, uint8, int8) that this thread
    reuses for every call with the same `slot`: a caller never returns it nor keeps it past
    its own return, only what it computed from it (positions, sums).

    Why: a byte scan of a batch's texts (stages 02 and 03 on a BEIR corpus, 1-2 MB a batch)
    made two or three NumPy temporaries of the batch's size, each above glibc's mmap
    threshold, so each was a fresh mapping whose every page faulted in on first touch and
    went back to the system when freed.  Timed apart over 200k passages' batches, one
    thread: the out-of-range byte scan of stage 02 (`b - 32 >= 95`, then the positions)
    0.097-0.107 s, against 0.009-0.010 s for the same scan into arrays kept from batch to
    batch (or with malloc's thresholds raised, which would have held for the whole process,
    stages 04 and 05 too).  Up to SCRATCH_BYTES a slot (touched pages only count); a larger
    scan gets a new array, as before."""
    if n > SCRATCH_BYTES:
        return np.empty(n, dtype=dtype)
    buf = _SCRATCH.slots.get(slot)
    if buf is None:
        buf = _SCRATCH.slots[slot] = np.empty(SCRATCH_BYTES, dtype=np.uint8)
    return buf[:n].view(dtype)


def odd_bytes(data: np.ndarray) -> np.ndarray:
    """Positions (ascending) of the bytes of a uint8 array outside printable ASCII, 0x20-0x7e:
    control characters, tab and newline, DEL, and every byte of a non-ASCII character."""
    shifted = np.subtract(data, np.uint8(32), out=scratch(len(data), 0, np.uint8))  # below 0x20 wraps to 224-255
    return np.flatnonzero(np.greater_equal(shifted, np.uint8(95), out=scratch(len(data), 1)))


def byte_positions(data: np.ndarray, byte: int) -> np.ndarray:
    """Positions (ascending) of one byte value in a uint8 array."""
    return np.flatnonzero(np.equal(data, np.uint8(byte), out=scratch(len(data), 1)))


_ONES = np.uint64(0x0101010101010101)
_LOW_BYTES = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)  # the first k bytes


def true_counts(flags: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """How many of flags[bounds[i]:bounds[i + 1]] are True, for each i (`flags` a bool array,
    `bounds` ascending positions in [0, len(flags)]): each segment's sum, 0 for an empty one.

    Eight flags at a time: read as one uint64, a multiply by 0x0101...01 puts the sum of its
    eight bytes (each 0 or 1) in its top byte; the groups between two bounds are summed by
    `np.add.reduceat` over int64s, and the bounds' part groups by a mask each.  Stage 03 counts
    every text's words so (the word starts of a batch's bytes): `np.add.reduceat` over the
    bools, cast to int64 an element at a time, was 1.1 s of one thread at a million passages,
    this a fifth of it (bench/README.md, branch s01b)."""
    bounds = np.asarray(bounds, dtype=np.int64)
    if len(bounds) < 2:
        return np.zeros(0, dtype=np.int64)
    whole = len(flags) - len(flags) % 8
    if whole == 0:
        before = np.concatenate(([0], np.cumsum(flags, dtype=np.int64)))
        return np.diff(before[bounds])
    groups = np.ascontiguousarray(flags[:whole]).view("<u8")  # a group's first bytes its low ones, on any machine
    # Into a scratch array (`scratch` says why): a new one of the flags' size each call was
    # faulted in page by page, ~0.4 s of system time at 1M passages in stage 03.
    sums = np.multiply(groups, _ONES, out=scratch(whole, 2, np.uint8).view(np.uint64))
    sums >>= np.uint64(56)
    sums = sums.view(np.int64)
    # prefix(p) = sums[:g].sum() + the first k bytes of group g (p = 8g + k, k up to 8 in the
    # last group) + the flags past the last whole group (fewer than 8).
    at = np.minimum(bounds, whole)
    g = np.minimum(at >> 3, len(groups) - 1)
    part = ((groups[g] & _LOW_BYTES[at - (g << 3)]) * _ONES >> np.uint64(56)).view(np.int64)
    tail = np.concatenate(([0], np.cumsum(flags[whole:], dtype=np.int64)))
    part += tail[np.maximum(bounds - whole, 0)]
    between = np.add.reduceat(sums, g[:-1])  # sums[g[i]:g[i + 1]], but sums[g[i]] where g[i + 1] == g[i]
    if len(g) > 2:
        between[:-1][g[1:-1] == g[:-2]] = 0
    # The last reduceat runs to the array's end: its segment stops at g[-1] instead.
    between[-1] = sums[g[-2]:g[-1]].sum()
    return between + np.diff(part)


def small_page_zeros(shape, dtype) -> np.ndarray:
    """np.zeros(shape, dtype) in the kernel's 4 KiB pages: an anonymous mapping of its own,
    handed back (munmap) when the array and its views are gone.

    NumPy asks for transparent huge pages (madvise) for every array of 4 MB or more, and where
    the kernel compacts memory to find one on the spot (`defrag` = madvise, this bench's
    machine) a first touch can stall for milliseconds: stage 05's coded rows laid out as one
    stack (pipekit/retrieve/pruned.py's RowStack, 96 rows of a million chunks) cost 0.85-1.6 s
    of system time at a million passages in 466 faults, where the same rows made one by one
    (1-2 MB each, under NumPy's threshold) had cost 0.03-0.16 s in ~7,000 (bench/README.md,
    branch `r05`).  Untouched pages stay the OS's zero pages, as np.zeros' do."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes == 0:
        return np.zeros(shape, dtype)
    buffer = mmap.mmap(-1, nbytes)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):  # (where the kernel gives huge pages unasked, too)
        buffer.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(buffer, dtype).reshape(shape)


SMALL_PAGES_FROM = 24 << 20  # bytes from which `large_zeros` gives small pages


def large_zeros(shape, dtype) -> np.ndarray:
    """np.zeros(shape, dtype), in 4 KiB pages (`small_page_zeros`) from SMALL_PAGES_FROM bytes on.

    Stage 05's held postings (chunk, pair codes): at a million passages (66 and 33 MB) NumPy's huge
    pages stalled the index load on compaction now and then (0.9-2.3 s of system time), so they
    went to small pages; at 200k passages (14 and 7 MB) the huge pages found no stall, and small
    pages' eight times as many faults cost ~0.1 s of its load (bench/README.md, branches r05, m05)."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return small_page_zeros(shape, dtype) if nbytes >= SMALL_PAGES_FROM else np.zeros(shape, dtype)
