"""A growing set of distinct words, each numbered first-seen-first, kept between calls.

Stage 04's vocabulary numbers every batch's distinct words (an Arrow dictionary of ~86k
words at 8,192 passages) in the corpus's word list.  Arrow keeps no hash table between
calls, so numbering a batch's words against the list meant hashing the whole list again
(`pc.dictionary_encode` of the list and the batch's words, or `pc.index_in`): at a
million passages, 3.3 s of CPU on 15 folds of 8 batches, each hashing ~200k words again.
Here the table stays: `number(words)` hashes only the batch's words.

How, in NumPy: each word's UTF-8 bytes become a 64-bit hash (`word_hashes`: the bytes read
8 at a time as integers, with the length, through a multiply-xorshift mix), and an
open-addressing table of the hashes (linear probing, at most half full) gives each one's
number.  Every probe is one vectorised step over all the words still looking, so a
batch is a few NumPy passes, not a Python loop per word.

A hash is not the word: two words may share one (at a million distinct words, about one
chance in 30 million).  So the answer is checked, never trusted: a word found under its
hash must equal the word stored there (one Arrow comparison of the batch's found words),
and the batch's new words must have distinct hashes.  If either check fails, `number`
raises `Collision` before changing anything, and the caller numbers words the exact way
(pipekit/index/vocabulary.py does, for that batch and every later one).

`CompiledWordTable` does the same with stage 04's compiled word cutter, where it is loaded
(pipekit/index/compiled.py): a batch's dictionary is fed to its `cut_field` as texts of one
pre-cut run each, so its words are looked up and numbered in a table kept between batches,
their bytes compared in the table's slots, never a hash trusted (no Collision).  The NumPy
probing above was 1.46 s of CPU at a million passages (123 batches of ~86k words, ~140 ns a
word) on the vocabulary's thread, which the counting threads waited for (bench/README.md,
branch `w04`).

What it does not do: decide what a word is or what term it makes (pipekit/index/analyzer.py),
or shrink (the words are held until the stage ends, as the word list was).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipekit.run.arrays import string_buffers

_M1 = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit constants (golden ratio, murmur3's finaliser)
_M2 = np.uint64(0xFF51AFD7ED558CCD)
_M3 = np.uint64(0xC4CEB9FE1A85EC53)
_LOW = np.array([(1 << (8 * n)) - 1 for n in range(8)] + [(1 << 64) - 1], dtype=np.uint64)  # n low bytes


class Collision(Exception):
    """Two different words met under one hash: number them the exact way instead."""


def word_hashes(words: pa.Array) -> np.ndarray:
    """A 64-bit hash of each string's UTF-8 bytes and length (uint64; null counts as "")."""
    return _read(words)[0]


def _read(words: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(hash, first 8 bytes, next 8 bytes, length) of each string: the bytes as little-endian
    integers, zero past the string's end, so that a word of up to 16 bytes *is* its three
    numbers (what `number` compares)."""
    n = len(words)
    if n == 0:
        z = np.zeros(0, dtype=np.uint64)
        return z, z, z, np.zeros(0, dtype=np.int64)
    offsets, data = string_buffers(words)
    lo, hi = int(offsets[0]), int(offsets[-1])
    # The bytes with 16 zeros after them, read as one unaligned uint64 at any offset: each word's
    # next 8 bytes in one gather, the bytes past its end masked off.
    padded = np.zeros(hi - lo + 16, dtype=np.uint8)
    padded[:hi - lo] = data[lo:hi]
    as_words = np.ndarray(shape=(hi - lo + 9,), dtype=np.uint64, buffer=padded, strides=(1,))
    starts = offsets[:-1].astype(np.int64) - lo
    lengths = np.diff(offsets).astype(np.int64)
    first = as_words[starts] & _LOW[np.minimum(lengths, 8)]
    second = as_words[starts + 8] & _LOW[np.clip(lengths - 8, 0, 8)]
    h = _mix((lengths.astype(np.uint64) * _M1) ^ first)
    h = _mix(h ^ second)
    live = np.flatnonzero(lengths > 16)
    at = 16
    while len(live):  # 8 bytes a round, over the (few) words that still have some
        left = lengths[live] - at
        k = as_words[starts[live] + at] & _LOW[np.minimum(left, 8)]
        h[live] = _mix(h[live] ^ k)
        at += 8
        live = live[left > 8]
    return _mix(h ^ (h >> np.uint64(31))), first, second, lengths


def _mix(h: np.ndarray) -> np.ndarray:
    h *= _M2
    h ^= h >> np.uint64(33)
    h *= _M3
    h ^= h >> np.uint64(29)
    return h


class WordTable:
    """Distinct words numbered 0, 1, ... in the order first given (module docstring).

    `number(words)` takes distinct words (a batch's dictionary) and gives each one's number,
    numbering the new ones after every word seen before; `words` is every word so far."""

    def __init__(self, capacity: int = 1 << 16, hashes=None):
        self._hash_of = hashes  # instead of word_hashes (tests give a weak one, to see collisions caught)
        self._chunks: list[pa.Array] = []  # the words, as they came: `words` joins them when asked
        self._joined = pa.array([], pa.string())
        # Each word's first 16 bytes and length, by number (grown by doubling): a word found
        # under its hash is checked against them, and only one longer than 16 bytes against its text.
        self._n = 0
        self._first = np.zeros(1024, dtype=np.uint64)
        self._second = np.zeros(1024, dtype=np.uint64)
        self._length = np.zeros(1024, dtype=np.int64)
        # The table: slot -> (hash, number + 1), one row a slot, so a probe reads one cache line (0: empty)
        self._bits = max(int(capacity - 1).bit_length(), 4)
        self._table = np.zeros((1 << self._bits, 2), dtype=np.uint64)

    def __len__(self) -> int:
        return self._n

    @property
    def words(self) -> pa.Array:
        """Every word so far, by number."""
        if self._chunks:
            self._joined = pa.concat_arrays([self._joined, *self._chunks])
            self._chunks = []
        return self._joined

    def _slots(self, h: np.ndarray) -> np.ndarray:
        return (h >> np.uint64(64 - self._bits)).astype(np.int64)  # the mix's best bits: its top ones

    def _find(self, h: np.ndarray) -> np.ndarray:
        """The number stored under each hash, -1 where none is."""
        found = np.full(len(h), -1, dtype=np.int64)
        slot = self._slots(h)
        live = np.arange(len(h))
        mask = (1 << self._bits) - 1
        while len(live):  # one probe a round for every hash still looking
            s = slot[live]
            row = np.take(self._table, s, axis=0)  # (numpy's fancy indexing of rows is 20x slower)
            used = row[:, 1] > 0
            hit = used & (row[:, 0] == h[live])
            found[live[hit]] = row[hit, 1].astype(np.int64) - 1
            going = used & ~hit  # an empty slot ends the search: not there
            live = live[going]
            slot[live] = (s[going] + 1) & mask
        return found

    def _insert(self, h: np.ndarray, ids: np.ndarray) -> None:
        """Store distinct hashes not in the table yet, under these numbers."""
        slot = self._slots(h)
        live = np.arange(len(h))
        mask = (1 << self._bits) - 1
        tag = ids.astype(np.uint64) + np.uint64(1)
        flat = self._table.reshape(-1)  # (a view: slot s's hash at 2s, its number + 1 at 2s + 1)
        while len(live):
            s = slot[live]
            free = flat[2 * s + 1] == 0
            claim, at = live[free], s[free]
            flat[2 * at + 1] = tag[claim]  # several may claim one slot: one of them gets it
            won = flat[2 * at + 1] == tag[claim]
            flat[2 * at[won]] = h[claim[won]]
            live = np.concatenate([live[~free], claim[~won]])
            slot[live] = (slot[live] + 1) & mask

    def _grow(self, n: int) -> None:
        """Room for n words, the table at most half full (short probes)."""
        if n > len(self._length):
            size = max(n, 2 * len(self._length))
            for name in ("_first", "_second", "_length"):
                old = getattr(self, name)
                new = np.zeros(size, dtype=old.dtype)
                new[:self._n] = old[:self._n]
                setattr(self, name, new)
        if 2 * n <= (1 << self._bits):
            return
        used = np.flatnonzero(self._table[:, 1] > 0)
        rows = np.take(self._table, used, axis=0)
        self._bits = int(2 * n - 1).bit_length()
        self._table = np.zeros((1 << self._bits, 2), dtype=np.uint64)
        self._insert(rows[:, 0], rows[:, 1].astype(np.int64) - 1)

    def number(self, words: pa.Array) -> np.ndarray:
        """Each of these distinct words' number (int64), the new ones numbered after the
        words before; raises Collision (nothing changed) if a hash is shared."""
        if isinstance(words, pa.ChunkedArray):
            words = words.combine_chunks()
        if words.type != pa.string():
            words = words.cast(pa.string())
        words = pc.fill_null(words, "")
        h, first, second, length = _read(words)
        if self._hash_of is not None:
            h = self._hash_of(words)
        found = self._find(h)
        old = np.flatnonzero(found >= 0)
        at = found[old]
        same = ((self._first[at] == first[old]) & (self._second[at] == second[old])
                & (self._length[at] == length[old]))
        long = np.flatnonzero(same & (length[old] > 16))  # equal in 16 bytes and length: the rest, in Arrow
        if len(long):
            stored = pa.chunked_array([self.words]).take(pa.array(at[long])).combine_chunks()
            same[long] = np.asarray(pc.equal(stored, words.take(pa.array(old[long]))))
        if not same.all():
            raise Collision("a word found under another word's hash")
        new = np.flatnonzero(found < 0)
        if len(np.unique(h[new])) != len(new):
            raise Collision("two new words with one hash")
        if len(new):
            n = self._n
            found[new] = np.arange(n, n + len(new))
            self._grow(n + len(new))
            self._insert(h[new], found[new])
            self._first[n:n + len(new)] = first[new]
            self._second[n:n + len(new)] = second[new]
            self._length[n:n + len(new)] = length[new]
            self._n = n + len(new)
            self._chunks.append(words.take(pa.array(new)))
        return found.astype(np.int32)


_NO_BITS = np.zeros(0, np.uint64)  # (cut_field's bits of ASCII texts: none here, every word pre-cut)


class CompiledWordTable:
    """`WordTable`'s `number`, `words` and `len` through the compiled loops (module docstring):
    the same numbers, to the element.  `loops`: compiled.py's loaded module."""

    def __init__(self, loops):
        self._loops = loops
        self._table = np.zeros(4 * 1024, np.uint64)  # (cut_field's table: 4 uint64s a slot, grown as needed)
        self._starts = np.zeros(1024, np.int64)  # word w's bytes: _bytes[_starts[w]:_starts[w + 1]]
        self._bytes = np.empty(1 << 16, np.uint8)
        self._ids = np.empty(1024, np.int32)  # (scratch: a batch's numbers, and the row of each)
        self._rows = np.empty(1024, np.int32)
        self._n = 0
        self._words = pa.array([], pa.string())  # words 0.._joined as an Arrow array (made when asked)

    def __len__(self) -> int:
        return self._n

    @property
    def words(self) -> pa.Array:
        """Every word so far, by number."""
        if len(self._words) < self._n:
            n, n0 = self._n, len(self._words)
            offsets = self._starts[n0:n + 1]
            new = pa.StringArray.from_buffers(n - n0, pa.py_buffer((offsets - offsets[0]).astype(np.int32)),
                                              pa.py_buffer(self._bytes[int(offsets[0]):int(offsets[-1])].copy()))
            self._words = pa.concat_arrays([self._words, new]) if n0 else new
        return self._words

    def number(self, words: pa.Array) -> np.ndarray:
        """Each of these distinct words' number (int32), the new ones numbered after the words
        before, in the order given."""
        if isinstance(words, pa.ChunkedArray):
            words = words.combine_chunks()
        if words.type != pa.string():
            words = words.cast(pa.string())
        words = pc.fill_null(words, "")
        n = len(words)
        if n == 0:
            return np.zeros(0, np.int32)
        offsets, data = string_buffers(words)
        lo, hi = int(offsets[0]), int(offsets[-1])
        # Each word a text of one run, as they are (not ASCII-cut: `plain` False, no case folded).
        runs = offsets.astype(np.int64) - lo
        source = data[lo:hi]
        source.flags.writeable = False  # (the type cut_field was compiled for: Arrow's buffers are read-only)
        (self._table, self._starts, self._bytes, self._ids, self._rows, self._n, _) = self._loops.cut_field(
            runs, source, _NO_BITS, np.zeros(n, np.bool_), np.arange(n + 1, dtype=np.int64), runs,
            np.zeros(n, np.int32), False, self._table, self._starts, self._bytes, self._n,
            self._ids, self._rows, 0)
        return self._ids[:n].copy()
