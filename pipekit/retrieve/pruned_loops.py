"""The loops of stage 05's compiled ranking, compiled ahead of time by numba (`build`):
pipekit/retrieve/pruned.py says what they are for, when they are used, and how they are built
and loaded (an extension module, without numba: pipekit/run/aot.py).

`top_chunks` gives the chunks that hold a query's `reach` best (every chunk tied with the
reach-th too), in corpus order, with their exact scores: what `rank` needs of stage 05's
candidates, from one call where `Index.best_candidates` made ~30 NumPy calls.  MaxScore, term
at a time, as the stage file's docstring tells it:

A. terms heaviest bound first (a term's bound: its largest weight times its query weight),
   each term's postings (or its coded row) added into `acc`, a sum over the chunks (the chunks
   it touches listed in `hits`); once `reach` chunks are touched and the terms left could not
   lift an untouched chunk to the reach-th best sum so far (a floor: a sum of some terms is at
   most the chunk's score, weights being positive), no term adds chunks any more;
B. the chunks still in the race are sorted; each lighter term is looked up in them (its coded
   row, its bits (pruned.BitStack: a popcount gives the posting's place), or a galloping search
   in its postings from where the previous chunk's search ended), and
   a chunk that can no longer reach the floor is dropped;
C. the chunks left are scored exactly: term by term in query order, each chunk's sum from
   0.0, each weight times the term's query weight: ((0 + a) + b) + c, the additions of the
   NumPy path (`Index.scores`' add.at, `_looked_up`), so the same float64 bits; those under the
   reach-th score are dropped (ties stay: corpus order settles them in `rank`).
When no term can be skipped (few postings, or a floor too low), every term is added in query
order instead and those sums are the scores.

A weight is the term's table over the (tf, length) pair codes (bm25.Weights' table, the same
bits as the formula on each posting), so the loop reads 2 bytes a posting, never a float64.
The tables are made once a term and kept by `Weights.table` (handed in, one row a query term):
made in the loop, each call computed every pair's weight for every term again (one division a
pair: 1,365 pairs at the bench's 1M passages, up to 65,536 on a corpus of long chunks).
Bounds are nudged (SAFE_UP, SAFE_DOWN) so that float rounding never prunes a result, as the NumPy
path nudges them.  No fastmath, no parallel: each thread calls it on its own queries (the GIL is
released), with its own scratch (`acc` zeros, left zeroed again).
"""
from __future__ import annotations

import numba
import numpy as np

SAFE_UP, SAFE_DOWN = 1 + 1e-9, 1 - 1e-9  # (stage 05's own: 05_retrieval.py)
SCAN_SHARE = 16  # chunks touched, as a share of all, from which they are found by a scan rather than sorted


@numba.njit(inline="always")
def row_code(rows8, rows16, r, c):
    """Chunk c's code in coded row r (>= 0: rows8[r]; <= -2: rows16[-r - 2])."""
    if r >= 0:
        return np.int64(rows8[r, c])
    return np.int64(rows16[-r - 2, c])


@numba.njit(inline="always")
def ones(x):
    """The number of bits set in the uint64 x (a popcount, by halves: SWAR)."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@numba.njit(inline="always")
def found(chunk, lo, hi, c):
    """The first position in chunk[lo:hi] (ascending) holding a chunk >= c: galloping from lo
    (the chunks looked up ascend, so the next is usually a few postings on), then a binary
    search in the last stride."""
    step = 1
    while lo + step < hi and chunk[lo + step] < c:
        lo += step
        step <<= 1
    if lo < hi and chunk[lo] >= c:
        return lo
    top = min(lo + step, hi)
    lo += 1
    while lo < top:
        mid = (lo + top) >> 1
        if chunk[mid] < c:
            lo = mid + 1
        else:
            top = mid
    return lo


@numba.njit
def top_chunks(reach, seeds, term, rowat, w, bound, tables, vals, voff, indptr, chunk,
               codes, rows8, rows16, bitat, bits, before, acc, hits, part):
    """(chunks, scores): the chunks holding the query's `reach` best, ascending, and their exact scores.

    Query term q (in query order): postings chunk[indptr[term[q]]:indptr[term[q] + 1]] with pair
    codes in `codes` (term[q] -1: held only as a row), its weight by code tables[q] (bm25.Weights'
    table, kept there from query to query: the same bits as the formula); rowat[q] its coded
    row (-1: none), whose weight at code k > 0 is vals[voff[q] + k]; w[q] its query weight,
    bound[q] its largest weight times w[q].  seeds: ascending chunks likely to score high (each
    rare term's best postings: ranks.TopPostings), scored first for a floor.  acc: zeros over
    the chunks; hits: int32 over the chunks; part: float64 over the chunks (scratch, each thread's
    own; hits touched as far as the chunks a query touches, part as far as its candidates:
    `SCRATCH` in pruned.py says why no more)."""
    m = len(term)
    n = len(acc)
    order = np.argsort(-bound, kind="mergesort")  # heaviest first, ties in query order
    after = np.zeros(m + 1)  # after[j]: the bounds of order[j:] added up
    for j in range(m - 1, -1, -1):
        after[j] = after[j + 1] + bound[order[j]]
    floor = 0.0
    ns = len(seeds)
    if ns >= reach:  # 0. the seeds scored exactly: the reach-th best of them is a floor
        part[:ns] = 0.0
        for q in range(m):
            add_term(q, term, rowat, w, tables, vals, voff, indptr, chunk, codes, rows8, rows16, bitat, bits, before,
                     seeds, part, ns)
        floor = np.partition(part[:ns], ns - reach)[ns - reach] * SAFE_DOWN
    nh = 0
    j = 0
    raised = False
    # A. heaviest terms first into acc while the terms left could lift an untouched chunk to the
    # floor; a chunk not touched yet is taken only if this term's weight there can get it there
    while j < m and after[j] * SAFE_UP >= floor:
        q = order[j]
        times = w[q]
        cut = (floor - after[j + 1] * SAFE_UP) * SAFE_DOWN
        held = term[q] >= 0  # its postings, else every chunk's code in its row (the test is hoisted out of the loop)
        lo = indptr[term[q]] if held else 0
        r, at = rowat[q], voff[q]
        for i in range(indptr[term[q] + 1] - lo if held else n):
            if held:
                c = np.int64(chunk[lo + i])
                x = tables[q, codes[lo + i]] * times
            else:
                c = np.int64(i)
                k = row_code(rows8, rows16, r, c)
                if k == 0:
                    continue
                x = vals[at + k] * times
            if acc[c] == 0.0:
                if x < cut:
                    continue
                hits[nh] = c
                nh += 1
            acc[c] += x
        j += 1
        if j < m and nh >= 2 * reach and not raised and after[j] * SAFE_UP >= floor:
            # a higher floor, once: the best sums so far scored exactly
            raised = True
            floor = max(floor, refined(reach, term, rowat, w, tables, vals, voff, indptr, chunk, codes, rows8, rows16,
                                       bitat, bits, before, acc, hits, nh, part))
    if floor == 0.0:  # nothing could be cut: every term was added whole
        return exact_all(reach, term, rowat, w, tables, vals, voff, indptr, chunk, codes, rows8, rows16,
                         acc, hits, nh, part, order)
    # B. the chunks that can still reach the floor (compacted in place at the front of hits, the
    # others' sums zeroed), in corpus order
    k = 0
    for i in range(nh):
        c = hits[i]
        if acc[c] + after[j] * SAFE_UP >= floor:
            hits[k] = c
            k += 1
        else:
            acc[c] = 0.0
    cand = hits[:k]
    # Looked up, each term costs a chunk left the steps of a galloping search over the postings
    # between two chunks (a row: one read); added whole, its postings (a row: every chunk): when
    # the lookups would cost more, add them whole.
    looks, whole = 0.0, float(n)
    for q in range(m):
        size = n if term[q] < 0 else indptr[term[q] + 1] - indptr[term[q]]
        looks += 1.0 if rowat[q] != -1 or bitat[q] != -1 else 2.0 * np.log2(size / max(k, 1) + 2.0)
        whole += size
    if k * looks > whole:
        for i in range(k):
            acc[cand[i]] = 0.0
        return exhaustive(reach, term, rowat, w, tables, vals, voff, indptr, chunk, codes, rows8, rows16,
                          acc, hits, -1, part)
    ascending(cand, n, part.view(np.int32))  # (part is free until the sums: the sort's other half)
    for i in range(k):
        c = cand[i]
        part[i] = acc[c]  # (the heavier terms' partial sum, in their order: a bound only)
        acc[c] = 0.0
    # ... the lighter terms looked up in them, a chunk that can no longer reach the floor dropped
    for jj in range(j, m):
        add_term(order[jj], term, rowat, w, tables, vals, voff, indptr, chunk, codes, rows8, rows16, bitat, bits, before,
                 cand, part, k)
        left = after[jj + 1] * SAFE_UP
        kept = 0
        for i in range(k):
            if part[i] + left >= floor:
                cand[kept] = cand[i]
                part[kept] = part[i]
                kept += 1
        k = kept
    # C. the survivors' exact scores, term by term in query order
    part[:k] = 0.0
    for q in range(m):
        add_term(q, term, rowat, w, tables, vals, voff, indptr, chunk, codes, rows8, rows16, bitat, bits, before,
                 cand, part, k)
    return best_of(reach, cand[:k], part[:k])


@numba.njit
def refined(reach, term, rowat, w, tables, vals, voff, indptr, chunk, codes, rows8, rows16, bitat, bits, before,
            acc, hits, nh, part):
    """A floor from the chunks with the 2·reach best sums so far (hits[:nh], sums in acc), scored
    exactly (every term looked up): the reach-th best of them.  The heavier terms' sums pick far
    better chunks than the rarest term's best postings do (the seeds): at 1M passages a query of
    three common terms, whose best chunks hold two of them, got a floor of 1.56 from its seeds and
    ~2.9 from these.  The want-th best sum found without a copy of all nh (`nth_best`); part[:k]
    holds the chosen chunks' scores."""
    want = 2 * reach
    cut = nth_best(acc, hits, nh, want)
    cand = np.empty(4 * want, np.int32)
    k = 0
    for i in range(nh):
        if acc[hits[i]] >= cut and k < 4 * want:  # (ties past 4·want left out: any chunks give a floor)
            cand[k] = hits[i]
            k += 1
    cand = cand[:k]
    ascending(cand, len(acc), np.empty(k, np.int32))
    part[:k] = 0.0
    for q in range(len(term)):
        add_term(q, term, rowat, w, tables, vals, voff, indptr, chunk, codes, rows8, rows16, bitat, bits, before,
                 cand, part, k)
    return np.partition(part[:k], k - reach)[k - reach] * SAFE_DOWN


@numba.njit
def add_term(q, term, rowat, w, tables, vals, voff, indptr, chunk, codes, rows8, rows16, bitat, bits, before,
             cand, part, k):
    """Term q's weight (times w[q]) added to part[i] for each of the ascending chunks cand[:k]
    that hold it: from its coded row when it has one; else, with its bits (bitat[q] >= 0: row
    bitat[q] of bits and before, pruned.BitStack), at the posting the chunk's bit says it has
    (its place: the postings before its 64 chunks, plus the bits below its own); else by a
    galloping search in its postings that starts where the previous chunk's ended."""
    times = w[q]
    r = rowat[q]
    if r != -1:
        at = voff[q]
        for i in range(k):
            code = row_code(rows8, rows16, r, cand[i])
            if code != 0:
                part[i] += vals[at + code] * times
        return
    t = term[q]
    b = bitat[q]
    if b != -1:
        first = indptr[t]
        one = np.uint64(1)
        for i in range(k):
            c = cand[i]
            word = bits[b, c >> 6]
            bit = np.uint64(c & 63)
            if (word >> bit) & one:
                part[i] += tables[q, codes[first + before[b, c >> 6] + ones(word & ((one << bit) - one))]] * times
        return
    lo, hi = indptr[t], indptr[t + 1]
    for i in range(k):
        c = cand[i]
        lo = found(chunk, lo, hi, c)
        if lo == hi:
            break
        if chunk[lo] == c:
            part[i] += tables[q, codes[lo]] * times


@numba.njit
def exact_all(reach, term, rowat, w, tables, vals, voff, indptr, chunk, codes, rows8, rows16,
              acc, hits, nh, part, order):
    """No floor, so no cut: every term was added whole into acc (hits[:nh] the chunks touched),
    heaviest first.  In query order that is every chunk's exact score; else they are added
    again in query order (`exhaustive`).  Then the reach best kept; acc left zeroed."""
    for j in range(len(term)):
        if order[j] != j:
            for i in range(nh):
                acc[hits[i]] = 0.0
            return exhaustive(reach, term, rowat, w, tables, vals, voff, indptr, chunk, codes, rows8, rows16,
                              acc, hits, nh, part)
    return gathered(reach, acc, hits, nh, part)


@numba.njit
def exhaustive(reach, term, rowat, w, tables, vals, voff, indptr, chunk, codes, rows8, rows16, acc, hits, nh, part):
    """Every chunk's exact score: every term's postings (or row) added into acc (zeros) in query
    order, each chunk's sum from 0.0; then the reach best kept; acc left zeroed.  hits[:nh]:
    every chunk a term touches (nh -1: not known, found by a scan)."""
    n = len(acc)
    for q in range(len(term)):
        times = w[q]
        if term[q] >= 0:
            t = term[q]
            for p in range(indptr[t], indptr[t + 1]):
                acc[chunk[p]] += tables[q, codes[p]] * times
        else:
            r, at = rowat[q], voff[q]
            for c in range(n):
                k = row_code(rows8, rows16, r, c)
                if k != 0:
                    acc[c] += vals[at + k] * times
    return gathered(reach, acc, hits, nh, part)


@numba.njit
def gathered(reach, acc, hits, nh, part):
    """The chunks with a sum in acc (hits[:nh], or nh -1: not known) and their sums, acc zeroed
    as it is read; the reach best kept.  Many (over 1/SCAN_SHARE of the chunks) or not known:
    found by a scan of acc."""
    if 0 <= nh and nh * SCAN_SHARE <= len(acc):
        for i in range(nh):
            part[i] = acc[hits[i]]
            acc[hits[i]] = 0.0
        return best_of(reach, hits[:nh], part[:nh])
    return scanned(reach, acc)


@numba.njit
def ascending(keys, n_chunks, spare):
    """keys sorted in place (chunk numbers below n_chunks): a radix sort, 11 bits a pass (a
    comparison sort of a few thousand cost ~10 ns a key in its branches); `spare`: int32 scratch
    of at least len(keys), the passes' other half."""
    k = len(keys)
    if k < 64:
        keys.sort()
        return
    src, dst = keys, spare[:k]
    shift = 0
    while (n_chunks - 1) >> shift > 0 or shift == 0:
        count = np.zeros(2049, np.int64)
        for i in range(k):
            count[((src[i] >> shift) & 2047) + 1] += 1
        for b in range(2048):
            count[b + 1] += count[b]
        for i in range(k):
            d = (src[i] >> shift) & 2047
            dst[count[d]] = src[i]
            count[d] += 1
        src, dst = dst, src
        shift += 11
    if src is not keys:
        keys[:] = src


@numba.njit
def scanned(reach, acc):
    """The chunks with a sum in acc (those != 0: every weight is > 0), the reach best kept, found
    by scans of acc in corpus order, acc zeroed by the last: `best_of` over acc itself, where the
    sums first copied out with their chunks touched 12 bytes a chunk of each thread's scratch at a
    million passages (bench/README.md, branch m05)."""
    n = len(acc)
    cut = reach_cut(reach, acc)
    kept = 0
    for c in range(n):
        kept += acc[c] >= cut and acc[c] != 0.0
    out, score = np.empty(kept, np.int64), np.empty(kept)
    kept = 0
    for c in range(n):
        v = acc[c]
        if v >= cut and v != 0.0:
            out[kept] = c
            score[kept] = v
            kept += 1
        acc[c] = 0.0
    return out, score


@numba.njit
def nth_best(acc, hits, nh, want):
    """The want-th largest of acc[hits[:nh]] (want <= nh), without a copy of all nh: the least
    of `want` blocks' maxima is at most it, so only the sums at or above that are partitioned
    (`reach_cut`'s way)."""
    per = nh // want
    low = np.inf
    for b in range(want):
        most = acc[hits[b * per]]
        for i in range(b * per + 1, b * per + per):
            most = max(most, acc[hits[i]])
        low = min(low, most)
    k = 0
    for i in range(nh):
        k += acc[hits[i]] >= low
    some = np.empty(k)
    k = 0
    for i in range(nh):
        v = acc[hits[i]]
        if v >= low:
            some[k] = v
            k += 1
    return np.partition(some, k - want)[k - want]


@numba.njit(inline="always")
def reach_cut(reach, values):
    """The reach-th largest of the nonzero values, or -1.0 when there are no more than reach (all
    kept).  Among many, the least of `reach` blocks' maxima (at most the reach-th largest: each
    block's maximum is a value of its own) drops most before the partition (ranks.nth_largest's
    way): the values at or above it counted first, then copied, never an array of all n (8 MB at
    1M passages, a query)."""
    n = len(values)
    if n <= reach:
        return -1.0
    per = n // reach
    low = np.inf
    for b in range(reach):
        most = values[b * per]
        for i in range(b * per + 1, b * per + per):
            most = max(most, values[i])
        low = min(low, most)
    k = 0
    for i in range(n):
        k += values[i] >= low and values[i] != 0.0
    if k < reach:  # (fewer nonzero than reach: all of them)
        return -1.0
    some = np.empty(k)
    k = 0
    for i in range(n):
        if values[i] >= low and values[i] != 0.0:
            some[k] = values[i]
            k += 1
    return np.partition(some, k - reach)[k - reach]


@numba.njit
def best_of(reach, cols, scores):
    """The chunks whose score is at least the reach-th best (all of them when fewer), as copies
    (scores are > 0: `reach_cut`'s nonzero ones are all of them)."""
    n = len(cols)
    cut = reach_cut(reach, scores)
    kept = 0
    for i in range(n):
        kept += scores[i] >= cut
    out, score = np.empty(kept, np.int64), np.empty(kept)
    kept = 0
    for i in range(n):
        if scores[i] >= cut:
            out[kept] = cols[i]
            score[kept] = scores[i]
            kept += 1
    if kept > 1:  # in corpus order, as the NumPy path's candidates (a few: reach and its ties)
        by = np.argsort(out)
        return out[by], score[by]
    return out, score


def build(folder: str, name: str) -> None:
    """Compile `top_chunks` into the extension module `name` in `folder`, with the argument types
    pruned.py passes (pipekit/run/aot.py: it releases the GIL while it runs, so stage 05's two
    query threads rank side by side)."""
    from numba import types as T

    from pipekit.run.aot import compile_module

    def a(dtype, dims=1):
        return T.Array(dtype, dims, "C")

    i64, i32, f64 = a(T.int64), a(T.int32), a(T.float64)
    compile_module(folder, name, [
        ("top_chunks", T.Tuple([i64, f64])(
            T.int64, i32, i64, i64, f64, f64, a(T.float64, 2), f64, i64, i64, i32, a(T.uint16),
            a(T.uint8, 2), a(T.uint16, 2), i64, a(T.uint64, 2), a(T.int32, 2), f64, i32, f64), top_chunks.py_func)])
