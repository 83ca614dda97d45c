"""The loops of stage 04's compiled word cutter, compiled ahead of time by numba (`build`):
pipekit/index/compiled.py says what they are for, when they are built and how they are loaded
(an extension module, without numba), and holds them to the plain way.

`cut_field` reads one field's texts (a batch's chunk texts, headings or folder names): each run
of ASCII letters and digits is a token, keyed as it is read (a hash, and its first 16 bytes
lower-cased as two integers), then numbered in an open-addressing table, a new
word's bytes added to the word buffer: first appearance numbers the words, as
`pc.dictionary_encode` does.  Texts that are not ASCII come pre-cut (RE2's runs, the analyzer's
plain way for them, their bytes after the texts' in `source`): their runs are keyed and numbered
the same way, in their place among the texts.  `by_row` then puts the tokens in row order (a
counting sort, stable: a chunk's text words, then its heading's, then its folders', as
`counting.by_row`'s stable argsort does).

How it is written, for speed (bench/README.md, branch `tok`, has the figures):
- tokens are keyed a block at a time (BLOCK), then numbered: a rare word's slot is a cache
  miss, and looked up as each token was cut the misses came one after the other (the cutting's
  branches keep the CPU from running ahead); numbered from a block of keys, they overlap;
- one body, helpers only of numbers (`step`, `keys_of`): a compiled helper given arrays, called
  or inlined, counts their references at every call (atomic operations), which made the loop
  2-4x slower;
- a table slot holds a word's first 16 bytes and length (SLOT): nearly every word is compared
  there, without reading the word buffer (one cache line, not three);
- an ASCII run's ends are found in a bit a byte (`alnum_bits`, eight bytes a step with no
  branch), 64 bytes a read and a count of trailing zeros, and its key is read 8 bytes at a time
  (`eight`: one unaligned load from the text's own bytes): byte by byte, a branch on each byte's class ended each word and its separators
  unpredictably (count_words -21 % of CPU on 1M's batches, bench/README.md, branch `k04`).
Buffers are a thread's own and kept between batches (compiled.py's `_Scratch`); `cut_field`
grows one (twice the size, its contents copied) when `cut_texts` stops for it, and returns the
buffers, so the caller keeps whichever array comes back.  No fastmath, no parallel: the words'
bytes are compared, never trusted to a hash.
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.cpython.unsafe.numbers import trailing_zeros as cttz
from numba.extending import intrinsic

M1 = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit constants (golden ratio, murmur3's finaliser)
M2 = np.uint64(0xFF51AFD7ED558CCD)
SHIFT_MIX = np.uint64(33)
LOW = np.uint64(0xFFFFFFFF)
ONE = np.uint64(1)
SLOT = 4  # uint64s a table slot: the hash's high 32 bits and the word's number + 1 (0: empty),
# its first 8 bytes, the next 8 (zeros past its end: a word's bytes are never 0) and its length
BLOCK = 256  # tokens keyed before they are numbered
# Eight bytes at once (SWAR), for the bits of an ASCII text's letters and digits (`alnum_bits`):
# added to a byte of at most 0x7F, none of these carries into the next byte.
B20, H80, L7F = np.uint64(0x2020202020202020), np.uint64(0x8080808080808080), np.uint64(0x7F7F7F7F7F7F7F7F)
A_FROM, Z_PAST = np.uint64(0x1F1F1F1F1F1F1F1F), np.uint64(0x0505050505050505)  # >= 'a', > 'z' (of a byte | 0x20)
D_FROM, D_PAST = np.uint64(0x5050505050505050), np.uint64(0x4646464646464646)  # >= '0', > '9'
GATHER = np.uint64(0x0102040810204080)  # each byte's low bit, times this, lands in the top byte
LOWS = np.array([0] + [(1 << (8 * n)) - 1 for n in range(1, 8)] + [(1 << 64) - 1], dtype=np.uint64)  # n low bytes


@numba.njit(inline="always")
def step(h, key0, key1, block, k, b):
    """The key so far after byte k of a word is b: its bytes as little-endian 8-byte blocks,
    the first two kept (key0, key1), every full one folded into the hash."""
    block |= np.uint64(b) << np.uint64(8 * (k & 7))
    if k & 7 == 7:
        if k == 7:
            key0 = block
        elif k == 15:
            key1 = block
        h = (h ^ block) * M1
        block = np.uint64(0)
    return h, key0, key1, block


@numba.njit(inline="always")
def keys_of(h, key0, key1, block, length):
    """(hash, first 8 bytes, next 8 bytes) of a word of `length` bytes keyed by `step`."""
    if length & 7:
        if length < 8:
            key0 = block
        elif length < 16:
            key1 = block
        h = (h ^ block) * M1
    return finished(h, length), key0, key1


@numba.njit(inline="always")
def finished(h, length):
    """The hash of a word of `length` bytes whose 8-byte blocks were folded into h."""
    h ^= np.uint64(length)
    h ^= h >> SHIFT_MIX  # (murmur3's finaliser: the slot is the hash's low bits)
    h *= M2
    h ^= h >> SHIFT_MIX
    return h


@intrinsic
def _load8(typingctx, array, i):
    """array[i:i + 8] (a uint8 array's bytes) as one little-endian uint64, in one unaligned load:
    no copy of the bytes into uint64s (4 MB a field and thread, touched afresh)."""
    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        return builder.load(builder.bitcast(builder.gep(data, [args[1]]), ir.IntType(64).as_pointer()), align=1)
    return types.uint64(array, types.int64), codegen


@numba.njit(inline="always")
def eight(source, i):
    """Bytes i..i + 7 of `source` as one little-endian integer, zeros past its end."""
    if i + 8 <= len(source):
        return _load8(source, i)
    w = np.uint64(0)
    for k in range(max(len(source) - i, 0)):
        w |= np.uint64(source[i + k]) << np.uint64(8 * k)
    return w


@numba.njit(inline="always")
def sixty_four(bits, i):
    """Bits i..i + 63 of a bit string (`bits`, bit i of bits[i >> 6]) as one integer, bit i lowest."""
    q, r = i >> 6, np.uint64(i & 63)
    return (bits[q] >> r) | ((bits[q + 1] << ONE) << (np.uint64(63) - r))


@numba.njit
def alnum_bits(source, bits):
    """bits: bit i set where byte i of `source` is an ASCII letter or digit, clear after its end
    (to the end of `bits`).  Eight bytes a step, no branch: a byte's high bit is cleared before
    the compares (none carries into its neighbour) and keeps a byte past 0x7F out."""
    n_bytes = len(source)
    nq = (n_bytes + 7) >> 3
    acc = np.uint64(0)
    for q in range(nq):
        w = eight(source, 8 * q)  # (zeros past the end: no letter)
        x = w & L7F
        y = x | B20
        a = (((y + A_FROM) & ~(y + Z_PAST)) | ((x + D_FROM) & ~(x + D_PAST))) & ~w & H80
        acc |= (((a >> np.uint64(7)) * GATHER) >> np.uint64(56)) << np.uint64(8 * (q & 7))
        if q & 7 == 7:
            bits[q >> 3] = acc
            acc = np.uint64(0)
    at = (nq + 7) >> 3
    if nq & 7:
        bits[nq >> 3] = acc
    for k in range(at, len(bits)):
        bits[k] = 0


@numba.njit
def grown(array, need):
    """`array`, or a copy at least twice as long when it holds fewer than `need` elements."""
    if len(array) >= need:
        return array
    bigger = np.empty(max(need, 2 * len(array)), array.dtype)
    bigger[:len(array)] = array
    return bigger


@numba.njit
def rehashed(table, starts, words, n_words):
    """A table twice as large holding the first n_words words (keyed again from their bytes)."""
    table = np.zeros(2 * len(table), np.uint64)
    mask = np.uint64(len(table) // SLOT - 1)
    for w in range(n_words):
        a, length = starts[w], starts[w + 1] - starts[w]
        h = key0 = key1 = block = np.uint64(0)
        for k in range(length):
            h, key0, key1, block = step(h, key0, key1, block, k, words[a + k])
        h, key0, key1 = keys_of(h, key0, key1, block, length)
        at = np.int64(h & mask) * SLOT
        while table[at] != 0:
            at = (at + SLOT) % len(table)
        table[at], table[at + 1], table[at + 2], table[at + 3] = (h & ~LOW) | np.uint64(w + 1), key0, key1, length
    return table


@numba.njit
def cut_field(offsets, source, bits, plain, pre_ptr, pre_offsets, rows, capitals,
              table, starts, words, n_words, ids, tok_rows, n_tok):
    """One field's tokens added after the n_tok before (ids: word numbers; tok_rows: rows),
    its new words after the n_words before (word w's bytes: words[starts[w]:starts[w + 1]]).

    Text t (bytes source[offsets[t]:offsets[t + 1]], row rows[t]): when plain[t] (ASCII), its
    maximal [A-Za-z0-9] runs, lower-cased; a run of one character is dropped, but with
    `capitals` a lone B-Z other than I, kept as that capital (analyzer.py's `_ascii_piece`);
    else its pre-cut runs source[pre_offsets[r]:pre_offsets[r + 1]], r in
    pre_ptr[t]..pre_ptr[t + 1], as they are.  Returns the buffers (grown ones are new
    arrays) and the two counts.

    The work is `cut_texts`'; this loop only grows the buffers where it stops for them and
    goes on from there (buffers replaced inside the loop over the bytes would be counted
    references at every step)."""
    t, at = 0, -1
    if len(bits):  # (no plain text, no bits: the caller passes none)
        alnum_bits(source, bits)
    keys = np.empty((BLOCK + 1, 3), np.uint64)  # a block's tokens: hash, first 8 bytes, next 8 (and one spare)
    spans = np.empty((BLOCK, 3), np.int64)  # and where their bytes are: start, length, fold
    while True:
        while 2 * SLOT * (n_words + BLOCK) > len(table):  # room for a block of new words, half full
            table = rehashed(table, starts, words, n_words)
        t, at, n_words, n_tok = cut_texts(t, at, offsets, source, bits, plain, pre_ptr, pre_offsets, rows, capitals,
                                          table, starts, words, n_words, ids, tok_rows, n_tok, keys, spans)
        if t == len(offsets) - 1:
            return table, starts, words, ids, tok_rows, n_words, n_tok
        if at < 0:  # room for text t: its most tokens (each takes 2 bytes, a lone capital and its
            # separator; a pre-cut run is one) and bytes
            if plain[t]:
                most, size = (offsets[t + 1] - offsets[t] + 1) // 2, offsets[t + 1] - offsets[t]
            else:
                most, size = pre_ptr[t + 1] - pre_ptr[t], pre_offsets[pre_ptr[t + 1]] - pre_offsets[pre_ptr[t]]
            ids, tok_rows = grown(ids, n_tok + BLOCK + most), grown(tok_rows, n_tok + BLOCK + most)
            starts = grown(starts, n_words + BLOCK + most + 2)
            words = grown(words, starts[n_words] + size)


@numba.njit
def cut_texts(t, at, offsets, source, bits, plain, pre_ptr, pre_offsets, rows, capitals,
              table, starts, words, n_words, ids, tok_rows, n_tok, keys, spans):
    """`cut_field`'s work from text t (from its byte or pre-cut run `at`, or its start: -1),
    until the texts end or a buffer is full: (the text to go on from, where in it, n_words,
    n_tok).  Up to BLOCK tokens are keyed (1.), then numbered (2.); a text is started only
    with room for all it can give and a block (`cut_field` makes it), a block only with room
    in the table for all its tokens as new words, so every stop is between two blocks."""
    n_texts = len(offsets) - 1
    mask = np.uint64(len(table) // SLOT - 1)
    while True:
        # 1. Key up to BLOCK tokens (stop: 1 the texts ended, 2 a text needs room).
        m = mb = stop = 0  # (mb: the block's bytes so far)
        while m < BLOCK:
            if at < 0:
                if t == n_texts:
                    stop = 1
                    break
                if plain[t]:
                    most, size, at = (offsets[t + 1] - offsets[t] + 1) // 2, offsets[t + 1] - offsets[t], offsets[t]
                else:
                    most, size, at = (pre_ptr[t + 1] - pre_ptr[t],
                                      pre_offsets[pre_ptr[t + 1]] - pre_offsets[pre_ptr[t]], pre_ptr[t])
                if (n_tok + BLOCK + most > min(len(ids), len(tok_rows)) or n_words + BLOCK + most + 2 > len(starts)
                        or starts[n_words] + mb + size > len(words)):
                    at = -1
                    stop = 2
                    break
            if plain[t]:
                # The run's start and end from the bits of letters and digits (64 bytes a read, a
                # count of trailing zeros each: no branch a byte), its key from its bytes read 8 at
                # a time (lower-cased: a letter's or digit's bit 0x20 set), as `step` keys them.
                i, end = at, offsets[t + 1]
                found = sixty_four(bits, i)
                while found == 0 and i < end:
                    i += 64
                    found = sixty_four(bits, i)
                i += np.int64(cttz(found))  # (64 where none: i passes the end)
                if i >= end:
                    t, at = t + 1, -1
                    continue
                # A run goes on while a read is all ones (64 bytes of letters): asked as "was the
                # last read 64?", not "is the length a multiple of 64?", which a run of exactly 64
                # or 128 bytes (a SHA-256 in hex) answered yes forever.
                ones = np.int64(cttz(~sixty_four(bits, i)))
                length = ones
                while ones == 64:
                    ones = np.int64(cttz(~sixty_four(bits, i + length)))
                    length += ones
                length = min(length, end - i)  # (the next text may start with a letter)
                at, fold = i + length, 32
                key0 = (eight(source, i) | B20) & LOWS[min(length, 8)]
                key1 = (eight(source, i + 8) | B20) & LOWS[min(max(length - 8, 0), 8)]
                h = key0 * M1
                h16 = (h ^ key1) * M1
                h = h16 if length > 8 else h
                k = 16
                while k < length:
                    h = (h ^ ((eight(source, i + k) | B20) & LOWS[min(length - k, 8)])) * M1
                    k += 8
                if length == 1:
                    c = source[i]
                    if not (capitals and 66 <= c <= 90 and c != 73):
                        continue
                    key0, fold = np.uint64(c), 0  # a lone capital, a name, keeps its case
                    h = key0 * M1
                keys[m, 0], keys[m, 1], keys[m, 2] = finished(h, length), key0, key1
            else:
                if at == pre_ptr[t + 1]:
                    t, at = t + 1, -1
                    continue
                i, length, fold = pre_offsets[at], pre_offsets[at + 1] - pre_offsets[at], 0
                h = key0 = key1 = block = np.uint64(0)
                for k in range(length):
                    h, key0, key1, block = step(h, key0, key1, block, k, source[i + k])
                at += 1
                keys[m, 0], keys[m, 1], keys[m, 2] = keys_of(h, key0, key1, block, length)
            spans[m, 0], spans[m, 1], spans[m, 2] = i, length, fold
            tok_rows[n_tok + m] = rows[t]
            m += 1
            mb += length
        # 2. Number them: an earlier word's number if its bytes are equal (compared in the slot
        # up to 16 bytes), else the next number, the word's bytes added after the others.
        # First each token's slot read once, in a loop of independent reads: their cache misses
        # (a rare word's slot, in a table of megabytes) overlap, where in the loop below each
        # waited behind the branches of the one before (28 % of this loop's time on that read).
        touched = np.uint64(0)
        for p in range(m):
            touched ^= table[np.int64(keys[p, 0] & mask) * SLOT]
        keys[BLOCK, 0] = touched  # (kept, so that the reads are not dropped as unused)
        for p in range(m):
            h, key0, key1 = keys[p, 0], keys[p, 1], keys[p, 2]
            i, length, fold = spans[p, 0], spans[p, 1], spans[p, 2]
            tag = h & ~LOW
            slot = np.int64(h & mask) * SLOT
            while True:
                entry = table[slot]
                if entry == 0:
                    w = n_words
                    table[slot], table[slot + 1] = tag | np.uint64(w + 1), key0
                    table[slot + 2], table[slot + 3] = key1, length
                    first = starts[w]
                    for k in range(length):
                        words[first + k] = source[i + k] | fold
                    n_words += 1
                    starts[n_words] = first + length
                    break
                if (entry & ~LOW == tag and table[slot + 1] == key0 and table[slot + 2] == key1
                        and table[slot + 3] == np.uint64(length)):
                    w = np.int64(entry & LOW) - 1
                    a = starts[w]  # (a word past 16 bytes: the rest of its bytes compared)
                    k = 16
                    while k < length and words[a + k] == source[i + k] | fold:
                        k += 1
                    if k >= length:
                        break
                slot = (slot + SLOT) & (len(table) - 1)  # (a power of 2)
            ids[n_tok + p] = w
        n_tok += m
        if stop:
            return (n_texts if stop == 1 else t), -1, n_words, n_tok
        if 2 * SLOT * (n_words + BLOCK) > len(table):
            return t, at, n_words, n_tok


@numba.njit
def by_row(ids, tok_rows, n_tok, field_ends, field_weights, n_rows, weighted):
    """(ids, counts, entries per row): the first n_tok tokens in row order, a row's in the order
    they came (fields in order, each field's rows ascending: a stable counting sort), new arrays
    of their own; counts (int32) the weight of each token's field, only if `weighted` (else
    empty).  Entries per row are int64, as np.bincount gives them.

    Each field's tokens come in ascending rows (its texts are cut in order), so a row's tokens
    are a run of each field's: they are merged run by run, read and written in order, where
    each token sent to its row's next place (a counting sort) wrote all over the batch's array.
    A field whose rows are not ascending is put in order by the counting sort."""
    nnz = np.zeros(n_rows, np.int64)
    ordered = runs = True  # (the tokens in row order; each field's)
    last = last_of_field = -1
    f = 0
    for t in range(n_tok):
        while t >= field_ends[f]:
            f += 1
            last_of_field = -1
        r = tok_rows[t]
        nnz[r] += 1
        ordered &= r >= last
        runs &= r >= last_of_field
        last = last_of_field = r
    out = np.empty(n_tok, np.int32)
    counts = np.empty(n_tok if weighted else 0, np.int32)
    if runs and not ordered:
        n_fields = len(field_ends)
        at = np.empty(n_fields, np.int64)  # each field's next token
        for g in range(n_fields):
            at[g] = 0 if g == 0 else field_ends[g - 1]
        p = 0
        for r in range(n_rows):
            for g in range(n_fields):
                t, end = at[g], min(field_ends[g], n_tok)
                while t < end and tok_rows[t] == r:
                    out[p] = ids[t]
                    if weighted:
                        counts[p] = field_weights[g]
                    p += 1
                    t += 1
                at[g] = t
        return out, counts, nnz
    nxt = np.empty(n_rows, np.int64)  # each row's next place
    total = 0
    for r in range(n_rows):
        nxt[r] = total
        total += nnz[r]
    f = 0
    for t in range(n_tok):
        while t >= field_ends[f]:
            f += 1
        p = t
        if not ordered:
            r = tok_rows[t]
            p = nxt[r]
            nxt[r] = p + 1
        out[p] = ids[t]
        if weighted:
            counts[p] = field_weights[f]
    return out, counts, nnz


@numba.njit
def term_major(term_of_local, ids, counts, weighted, row_nnz, first_row, seen, df_sum, per_chunk):
    """One batch's tokens (word ids in row order, row r's next row_nnz[r]; counts only if
    `weighted`) in term space and term-major: counting.batch_postings' arrays, the same ones
    scipy's CSR -> CSC and sum of duplicates give.  Returns (terms present, ascending; each
    one's postings; where each one's postings start, and the end; each posting's chunk, from
    first_row; its tf, summed in int32; each row's length, its counts summed, in int64).

    `seen` is a zeroed int32 array of a count per term, the caller's, kept between batches
    (zeroed again here for the terms met): a fresh one each batch was a page fault each 4 KB.
    A term's postings stay in row order (rows are read in order, each placed after the ones
    before: a stable counting sort), so a word said twice in a chunk, or two words of one term,
    are neighbours and summed into one posting.  Where they are not empty (counting.Tally), each
    term's df is added to df_sum[term] and each chunk's number of postings to per_chunk[chunk]."""
    n_rows, n_tok = len(row_nnz), len(ids)
    lengths = np.zeros(n_rows, np.int64)
    terms = np.empty(n_tok, np.int32)
    present = np.empty(min(n_tok, len(seen)), np.int32)
    n_present = kept = t = 0
    for r in range(n_rows):
        for _ in range(row_nnz[r]):
            term = term_of_local[ids[t]]
            terms[t] = term
            if term >= 0:
                lengths[r] += counts[t] if weighted else 1
                if seen[term] == 0:
                    present[n_present] = term
                    n_present += 1
                seen[term] += 1
                kept += 1
            t += 1
    present = present[:n_present]
    if len(seen) <= 16 * n_present:  # the terms in order: a scan of every term, or a sort of the ones met
        n = 0
        for term in range(len(seen)):
            if seen[term]:
                present[n] = term
                n += 1
    else:
        present.sort()
    # Each present term's first slot, then its next one (`seen` turned into a cursor).
    at = 0
    for i in range(n_present):
        term = present[i]
        c = seen[term]
        seen[term] = at
        at += c
    rows = np.empty(kept, np.int32)
    tfs = np.empty(kept if weighted else 0, np.int32)
    t = 0
    for r in range(n_rows):
        for _ in range(row_nnz[r]):
            term = terms[t]
            if term >= 0:
                p = seen[term]
                seen[term] = p + 1
                rows[p] = r
                if weighted:
                    tfs[p] = counts[t]
            t += 1
    # Each term's run: a row's neighbours summed into one posting (the cursor ends at the run's end).
    chunk = np.empty(kept, np.int32)
    tf = np.empty(kept, np.int32)
    df = np.empty(n_present, np.int32)
    starts = np.empty(n_present + 1, np.int32)
    a = n = 0
    for i in range(n_present):
        term = present[i]
        z = seen[term]
        seen[term] = 0
        starts[i] = n
        last = -1
        for p in range(a, z):
            w = tfs[p] if weighted else 1
            if rows[p] == last:
                tf[n - 1] += w
            else:
                last = rows[p]
                chunk[n] = last + first_row
                tf[n] = w
                n += 1
        df[i] = n - starts[i]
        a = z
    if len(df_sum):
        for i in range(n_present):
            df_sum[present[i]] += df[i]
    if len(per_chunk):
        for p in range(n):
            per_chunk[chunk[p]] += 1
    starts[n_present] = n
    return present, df, starts, chunk[:n].copy(), tf[:n].copy(), lengths


@numba.njit
def place_runs(free, present, n_of, rows, counts, chunk, tf):
    """counting.place's step for one piece: term present[i]'s n_of[i] postings (the next ones of
    `rows` and `counts`, a run) copied to chunk and tf from that term's next free slot, which
    moves on past them.  A run in, a run out: copies, where NumPy's way made each posting's
    slot (np.repeat, an arange) and scattered them one by one."""
    a = 0
    for i in range(len(present)):
        term, n = present[i], n_of[i]
        d = free[term]
        for k in range(n):
            chunk[d + k] = rows[a + k]
            tf[d + k] = counts[a + k]
        free[term] = d + n
        a += n


def build(folder: str, name: str) -> None:
    """Compile `cut_field`, `by_row`, `term_major` and `place_runs` into the extension module `name` in `folder`, with the
    argument types compiled.py passes (pipekit/run/aot.py: each releases the GIL while it runs,
    so the two counting threads do not take turns)."""
    from numba import types as T

    from pipekit.run.aot import compile_module

    def a(dtype, readonly=False):
        return T.Array(dtype, 1, "C", readonly=readonly)

    i64, i32, u64, u8 = a(T.int64), a(T.int32), a(T.uint64), a(T.uint8)
    compile_module(folder, name, [
        ("cut_field", T.Tuple([u64, i64, u8, i32, i32, T.int64, T.int64])(
            i64, a(T.uint8, True), u64, a(T.boolean), i64, i64, i32, T.boolean, u64, i64, u8, T.int64, i32, i32,
            T.int64),
         cut_field.py_func),
        ("by_row", T.Tuple([i32, i32, i64])(i32, i32, T.int64, i64, i64, T.int64, T.boolean), by_row.py_func),
        ("term_major", T.Tuple([i32, i32, i32, i32, i32, i64])(i32, i32, i32, T.boolean, i64, T.int64, i32, i32, i32),
         term_major.py_func),
        # (a piece's counts and the range's tf are uint16 while every count fits, else int32)
        ("place_runs16", T.void(i64, i32, i32, i32, a(T.uint16), i32, a(T.uint16)), place_runs.py_func),
        ("place_runs32", T.void(i64, i32, i32, i32, i32, i32, i32), place_runs.py_func)])
