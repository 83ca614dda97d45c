"""The loop of stage 03's byte scan, compiled ahead of time by numba (`build`):
pipekit/chunk/scan.py says what it decides, when it is built and how it is loaded (an
extension module, without numba), and holds it to the plain NumPy scans.

`one_line_words` reads each text of a batch once, eight bytes at a time (`words`: the column's
buffer as uint64 from its first 8-aligned byte; the bytes of a word outside the text read as
spaces): is the text one ASCII line as fastpath's `_ONE_LINE` says, and its words as
`str.split()` counts them and as the budget counts them (a run of more than 10 characters one
word per 10).  A text that qualifies has no byte below 0x20 but tabs and its final newline, so
its whitespace is exactly its bytes <= 0x20; a text that does not qualify gets counts nobody
reads.  A word's bytes are classified together with the usual tricks on bytes below 0x80
(whether any byte is 0x80 or more is kept aside: such a text is not ASCII): `(x | H) - k * L`
keeps each byte's high bit exactly where that byte is >= k, with no borrow from one byte into
the next.  Word starts are counted from each word's 8 flags (bit j: byte j is not whitespace)
by a table of 512, the runs of non-spaces by two tables of 256; only a text with a run over 10 is
read again, a byte at a time, for its long words' extra units.

How it is written, for speed (bench/README.md, branch `c23`, has the figures): no branch in
the loop over a text's words (the rare bytes a rule looks at are only noted there, and looked
at afterwards); no running length carried from word to word (a chain of table reads that was
most of the loop's time: each word's runs are told from its neighbours' flags instead); one
body, no helper given arrays (pipekit/index/compiled_loops.py says why); no fastmath, no
parallel: stage 03 scans two batches at once on two threads, each call releasing the GIL
(pipekit/run/aot.py).
"""
from __future__ import annotations

import numba
import numpy as np

H = np.uint64(0x8080808080808080)  # each byte's high bit
L = np.uint64(0x0101010101010101)  # each byte's low bit
GATHER = np.uint64(0x0102040810204080)  # (bits at 8j) * GATHER >> 56: bit j of the top byte
ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
SPACES = np.uint64(0x2020202020202020)
RUN = 10  # doctext._RUN: characters per budget word in a run without whitespace


@numba.njit
def _tables():
    """(word starts, leading run, trailing run) of each 8-bit flag pattern (bit j: byte j is not
    whitespace), the first given the flag of the byte before in bit 8."""
    starts = np.zeros(512, np.int64)
    lead = np.zeros(256, np.int64)
    tail = np.zeros(256, np.int64)
    for m in range(512):
        n = 0
        for j in range(8):
            before = (m >> 8) & 1 if j == 0 else (m >> (j - 1)) & 1
            if (m >> j) & 1 and not before:
                n += 1
        starts[m] = n
    for m in range(256):
        j = 0
        while j < 8 and (m >> j) & 1:
            j += 1
        lead[m] = j
        j = 7
        while j >= 0 and (m >> j) & 1:
            j -= 1
        tail[m] = 7 - j
    return starts, lead, tail


@numba.njit(nogil=True)
def one_line_words(data, words, shift, starts, ends):
    """(ok, n_words, budget words) of each text data[starts[i]:ends[i]]: `ok` True where the text
    is ASCII, starts with a letter or digit, and holds no byte below 0x20 but tabs and a newline
    as its last byte, nor DEL; the counts are exact where `ok` is.  `words`: data's bytes from
    `shift` on as uint64 (data[shift + 8 k:shift + 8 k + 8] is words[k])."""
    n = len(starts)
    ok = np.zeros(n, np.bool_)
    n_words = np.zeros(n, np.int64)
    budget = np.zeros(n, np.int64)
    start_of, lead, tail = _tables()
    n_full = len(words)
    for i in range(n):
        s, e = starts[i], ends[i]
        if s >= e:
            continue
        head = data[s]
        low = head | 0x20
        if not (48 <= head <= 57 or 97 <= low <= 122):
            continue
        good = True
        prev = 0  # 1: the byte before is not whitespace
        run = 0
        long = False
        count = 0
        last = e - 1 if data[e - 1] == 10 else e  # (a final newline: a space, as the words count it)
        if s >= shift and last <= shift + 8 * n_full:
            # The words that hold the text's bytes, those outside it (and its final newline)
            # read as spaces.  Runs of non-spaces across words are told from each word's flags and
            # its two neighbours' (no running length carried from word to word: that chain of
            # table reads was most of the loop's time): a run over 10 bytes spans two words (one's
            # trailing run and the next's leading one), or three with all of the middle one, or
            # holds two whole words.
            first_k, last_k = (s - shift) >> 3, (last - 1 - shift) >> 3
            head_keep = ALL << np.uint64(8 * ((s - shift) & 7))
            tail_keep = ALL >> np.uint64(8 * (7 - ((last - 1 - shift) & 7)))
            high = odd = np.uint64(0)
            m_p = m_pp = 0
            for k in range(first_k, last_k + 1):
                x = words[k]
                keep = (head_keep if k == first_k else ALL) & (tail_keep if k == last_k else ALL)
                x = (x & keep) | (SPACES & ~keep)
                high |= x
                odd |= (~((x | H) - L * np.uint64(0x20)) & H) | (~(((x ^ (L * np.uint64(0x7F))) | H) - L) & H)
                m = np.int64(((((x | H) - L * np.uint64(0x21)) & H) >> np.uint64(7)) * GATHER >> np.uint64(56))
                count += start_of[m | ((m_p >> 7) << 8)]
                long |= (tail[m_p] + lead[m] > RUN) | ((m_p == 255) & (tail[m_pp] + 8 + lead[m] > RUN))
                m_pp, m_p = m_p, m
            if high & H:  # not ASCII
                continue
            if odd:  # a byte below 0x20 or DEL: only tabs may be there
                for p in range(s, last):
                    b = data[p]
                    if b == 127 or (b < 32 and b != 9):
                        good = False
                        break
        else:  # (a text at the very start or end of the buffer, outside `words`: a byte at a time)
            for p in range(s, e):
                b = data[p]
                if b >= 127 or (b < 32 and b != 9 and not (b == 10 and p == e - 1)):
                    good = False
                    break
                if b > 32:
                    if not prev:
                        count += 1
                    run += 1
                    long |= run > RUN
                    prev = 1
                else:
                    run = 0
                    prev = 0
        if not good:
            continue
        ok[i] = True
        n_words[i] = count
        extra = 0
        if long:  # (rare: a URL, a hash) each run's length, a byte at a time
            run = 0
            for q in range(s, e + 1):
                if q < e and data[q] > 32:
                    run += 1
                else:
                    if run > RUN:
                        extra += (run - 1) // RUN
                    run = 0
        budget[i] = count + extra
    return ok, n_words, budget


def build(folder: str, name: str) -> None:
    """Compile `one_line_words` into the extension module `name` in `folder`, with the argument
    types pipekit/chunk/scan.py passes (pipekit/run/aot.py: it releases the GIL while it runs,
    so stage 03's two threads scan at once)."""
    from numba import types as T

    from pipekit.run.aot import compile_module

    def a(dtype, readonly=False):
        return T.Array(dtype, 1, "C", readonly=readonly)

    u8, u64, i64, b1 = a(T.uint8, True), a(T.uint64, True), a(T.int64), a(T.boolean)
    compile_module(folder, name, [
        ("one_line_words", T.Tuple([b1, i64, i64])(u8, u64, T.int64, i64, i64), one_line_words.py_func)])
