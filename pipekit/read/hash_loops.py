"""The loop of stage 01's compiled line hashes, compiled ahead of time by numba (`build`):
pipekit/read/line_hashes.py says what it is for, when it is built and how it is loaded (an
extension module, without numba), and holds it to hashlib's values.

`line_digests` is BLAKE2b (RFC 7693) with an 8-byte digest and no key, as
`hashlib.blake2b(line, digest_size=8)` computes it, over each line data[starts[i]:ends[i]] of a
block, in one call: the 8 digest bytes of line i go to out[8 * i: 8 * i + 8].  The values are
fixed by the outputs (`content_hash`, 64 bits of BLAKE2b, is what a rerun compares with the
last run's), so this is the same function, not a faster one of another name; the tests compare
it with hashlib on lines of every length around the 128-byte block and on empty ones.

How it is written, for speed: one body (a compiled helper given arrays counts their references
at every call, pipekit/index/compiled_loops.py says so), the mixing function `g` of numbers only
and inlined, the message words read as little-endian 8-byte loads of the block's bytes (a line's
last part block copied into a zeroed buffer first: BLAKE2b pads it with zeros), every value a
uint64 (numba types a uint64 mixed with a signed integer as a float).
"""
from __future__ import annotations

import numba
import numpy as np

IV = np.array([0x6A09E667F3BCC908, 0xBB67AE8584CAA73B, 0x3C6EF372FE94F82B, 0xA54FF53A5F1D36F1,
               0x510E527FADE682D1, 0x9B05688C2B3E6C1F, 0x1F83D9ABFB41BD6B, 0x5BE0CD19137E2179], dtype=np.uint64)
SIGMA = np.array([
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
    [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
    [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
    [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
    [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
    [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
    [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
    [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
    [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
], dtype=np.int64)
# The parameter block's first word for an 8-byte digest, no key, fanout and depth 1 (RFC 7693 2.5).
PARAM = np.uint64(0x01010000 | 8)
ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
R32, R24, R16, R63 = np.uint64(32), np.uint64(24), np.uint64(16), np.uint64(63)
L32, L40, L48, L1 = np.uint64(32), np.uint64(40), np.uint64(48), np.uint64(1)
EIGHT = np.uint64(8)
BYTE = np.uint64(0xFF)


@numba.njit(inline="always")
def half(a, b, c, d, x, r1, l1, r2, l2):
    """One half of BLAKE2b's mixing function G: a word of the message added, two rotations."""
    a = a + b + x
    d ^= a
    d = (d >> r1) | (d << l1)
    c = c + d
    b ^= c
    b = (b >> r2) | (b << l2)
    return a, b, c, d


@numba.njit(inline="always")
def g(a, b, c, d, x, y):
    """BLAKE2b's mixing function G on four words of the state and two of the message."""
    a, b, c, d = half(a, b, c, d, x, R32, L32, R24, L40)
    return half(a, b, c, d, y, R16, L48, R63, L1)


# The twelve rounds written out, each G's message words named by SIGMA (as RFC 7693's macros
# expand them): with the words' indices constants, the sixteen words stay in registers; looked
# up in SIGMA at run time, each was a load, and the loop took 1.48 us a 590-byte line against
# 1.15 written out (hashlib, called per line from Python: 1.37).
_COLUMNS = [(0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15),
            (0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14)]
_ROUNDS = "\n".join(
    f"            v{a}, v{b}, v{c}, v{d} = g(v{a}, v{b}, v{c}, v{d}, m{SIGMA[r % 10, 2 * i]}, m{SIGMA[r % 10, 2 * i + 1]})"
    for r in range(12) for i, (a, b, c, d) in enumerate(_COLUMNS))
_SOURCE = '''
def line_digests(data, starts, ends, out):
    """out[8i:8i+8] = blake2b(data[starts[i]:ends[i]], digest_size=8).digest() for every i."""
    h = np.empty(8, dtype=np.uint64)
    m = np.empty(16, dtype=np.uint64)
    last = np.zeros(128, dtype=np.uint8)  # a line's final block, padded with zeros
    for i in range(len(starts)):
        a, e = starts[i], ends[i]
        n = e - a
        for k in range(8):
            h[k] = IV[k]
        h[0] ^= PARAM
        done = 0
        while True:
            final = n - done <= 128
            if final:
                for k in range(128):
                    last[k] = 0
                for k in range(n - done):
                    last[k] = data[a + done + k]
                for j in range(16):
                    w = np.uint64(0)
                    for k in range(8):
                        w |= np.uint64(last[8 * j + k]) << np.uint64(8 * k)
                    m[j] = w
                counter = np.uint64(n)
            else:
                base = a + done
                for j in range(16):
                    w = np.uint64(0)
                    for k in range(8):
                        w |= np.uint64(data[base + 8 * j + k]) << np.uint64(8 * k)
                    m[j] = w
                counter = np.uint64(done + 128)
            v0, v1, v2, v3, v4, v5, v6, v7 = h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
            m0, m1, m2, m3, m4, m5, m6, m7 = m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]
            m8, m9, m10, m11, m12, m13, m14, m15 = m[8], m[9], m[10], m[11], m[12], m[13], m[14], m[15]
            v8, v9, v10, v11, v12, v13, v14, v15 = IV[0], IV[1], IV[2], IV[3], IV[4], IV[5], IV[6], IV[7]
            v12 ^= counter  # (the counter's high word stays 0: a line is under 2^64 bytes)
            if final:
                v14 ^= ALL
{rounds}
            h[0] ^= v0 ^ v8
            h[1] ^= v1 ^ v9
            h[2] ^= v2 ^ v10
            h[3] ^= v3 ^ v11
            h[4] ^= v4 ^ v12
            h[5] ^= v5 ^ v13
            h[6] ^= v6 ^ v14
            h[7] ^= v7 ^ v15
            if final:
                break
            done += 128
        d = h[0]
        for k in range(8):
            out[8 * i + k] = np.uint8((d >> np.uint64(8 * k)) & BYTE)
    return out
'''
_made: dict = dict(globals())
exec(compile(_SOURCE.format(rounds=_ROUNDS), __file__ + ":line_digests", "exec"), _made)
line_digests = numba.njit(nogil=True)(_made["line_digests"])


def build(folder: str, name: str) -> None:
    """Compile `line_digests` into the extension module `name` in `folder`, with the argument
    types line_hashes.py passes (pipekit/run/aot.py: it releases the GIL while it runs, so the
    block threads hash beside the parse and the writer)."""
    from numba import types as T

    from pipekit.run.aot import compile_module

    def a(dtype, readonly=False):
        return T.Array(dtype, 1, "C", readonly=readonly)

    compile_module(folder, name, [
        ("line_digests", a(T.uint8)(a(T.uint8, True), a(T.int64), a(T.int64), a(T.uint8)), line_digests.py_func),
    ])
