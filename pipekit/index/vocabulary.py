"""Stage 04's vocabulary: each batch's words numbered in the corpus's word list while the
next batches are counted, each distinct word analysed once, sorted term ids at the end.

Each batch numbers its own distinct words (one hash pass in Arrow, on a counting thread)
and is counted against those local ids.  Each batch's dictionary is then numbered in the
corpus's list of distinct words on a thread of its own beside the counting
(pipekit/index/wordtable.py: a hash table of the words so far, kept between batches, so a
batch hashes only its own ~86k words), which gives the batch its map from local ids to word
numbers; the words seen for the first time are analysed then (length, stopwords, stem
depend on the word alone: a million passages repeat a few hundred thousand words, and only
those ever reach Python or Snowball).  When the last batch is in, what is left is sorting
the terms and one gather per batch.

Why beside the counting: done once at the end (every batch's dictionary encoded as one
chunked array) it was 0.65 s at 200k passages and 1.4 s at a million on one core while
the other waited, and it held every batch's dictionary until then (0.12 GB at a million
passages: 122 batches x 86k words).  Why a table kept between batches: Arrow keeps none,
so each fold hashed the word list so far again (`dictionary_encode` of the list and 8
batches' dictionaries: 3.3 s of CPU at a million passages); the kept table took ~12 ms a
batch.  Looking each *token* up in a growing table instead cost as much again as the
tokenizing (session 16); here only each batch's distinct words are.  Where the counting's
compiled loops are loaded (a large corpus), the table is theirs (wordtable.CompiledWordTable:
the same numbers, half the CPU of NumPy's probing, which was 1.46 s at a million passages on
this thread while the counting threads waited for it).

Where the counting's compiled loops count a batch, its counting thread keeps its own table
from batch to batch (compiled.KeptWords): the batch's dictionary is then only the words new to
that thread (`NewWords`), and its ids number the thread's words, so the vocabulary keeps a map
a thread (its words' numbers in the corpus's list, extended batch by batch) and gives every
batch of that thread the same map of terms.  A corpus's vocabulary stops growing early, so most
batches bring a few new words, where each brought ~86k to be looked up again: the fold's CPU at
a million passages 1.0 -> 0.35 s (bench/README.md, branch `v04`).

The exact way stays, for a hash two words share (WordTable checks, and says so): from that
batch on, the batches are folded `every` at a time by one `dictionary_encode` of the list so
far followed by their dictionaries (Arrow's chunks share one dictionary, the list's words
first, keeping their numbers).

What it does not do: decide what a term is (pipekit/index/analyzer.py).
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipekit.index import compiled
from pipekit.index.compiled import NewWords
from pipekit.index.wordtable import Collision, CompiledWordTable, WordTable

FOLD_EVERY = 8  # batches' dictionaries folded at a time the exact way (~8 MB waiting)


class _Owned(NamedTuple):
    """maps[k] of a batch whose ids number its counting thread's kept words (compiled.KeptWords):
    that thread's map from its words to the corpus's, the same for all its batches."""
    owner: int


class Vocabulary:
    """Batches' words in, sorted terms and each batch's map to them out (module docstring).

    `add` takes a batch's dictionary and gives its number; `finish` gives the sorted terms;
    `term_of_batch(k)` then gives batch k's term index of each local word (-1: not a term).
    With a `spill` (pipekit/index/spill.py) the batches' maps wait there, not in memory."""

    def __init__(self, analyzer, every: int = FOLD_EVERY, spill=None, table: WordTable | None = None):
        self.analyzer, self.every, self.spill = analyzer, max(every, 1), spill
        # The corpus's distinct words so far, first seen first: in the table while it serves
        # (None once two words shared a hash; `table` lets a test choose the hash).  Chosen at
        # the first fold: the compiled one where the counting's compiled loops are loaded by
        # then (they are for a large corpus; a small rerun never loads them), else NumPy's.
        self.table, self.exact = table, False
        self._words = pa.array([], pa.string())
        self.word_terms: list[pa.Array] = []  # each fold's new words' terms (null: dropped)
        self.pending: list[tuple[int, pa.Array]] = []  # (batch, dictionary) not folded yet
        self.maps: list = []  # batch k: each local id's number in `words` (or where the spill has it, or _Owned)
        # A counting thread's kept words (NewWords): each one's number in `words`, in pieces as
        # its batches come (its ids number them), and once finished, each one's term.
        self.owned: dict[int, list[np.ndarray]] = {}
        self.owned_terms: dict[int, np.ndarray] = {}
        self._owned_lock = threading.Lock()
        self.term_of_word: np.ndarray | None = None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="vocabulary")
        self._folding = None

    def add(self, dictionary: pa.Array | NewWords) -> int:
        """Take a batch's distinct words (its local ids number them), or its counting thread's new
        words (NewWords: its ids number the thread's words); the batch's number."""
        k = len(self.maps)
        self.maps.append(None)
        self.pending.append((k, dictionary))
        if len(self.pending) >= (self.every if self.exact else 1):
            self._wait()  # one fold at a time: each builds on the word list of the one before
            pending, self.pending = self.pending, []
            self._folding = self._pool.submit(self._fold, pending)
        return k

    def _wait(self) -> None:
        if self._folding is not None:
            folding, self._folding = self._folding, None
            folding.result()

    @property
    def words(self) -> pa.Array:
        return self.table.words if self.table is not None else self._words

    def _fold(self, pending: list[tuple[int, pa.Array]]) -> None:
        """Number the pending batches' words after the words seen before, and analyse the new ones."""
        if self.table is None and not self.exact:  # the first fold: which table
            loops = compiled.loaded()
            self.table = CompiledWordTable(loops) if loops is not None else WordTable()
        while pending and self.table is not None:
            (k, dictionary), n = pending[0], len(self.table)
            try:
                m = self.table.number(_words_of(dictionary))
            except Collision:  # from this batch on, the exact way
                self._words, self.table, self.exact = self.table.words, None, True
                break
            pending = pending[1:]
            self._keep(k, dictionary, m)
            self.word_terms.append(self.analyzer.terms_of_words(self.table.words.slice(n)))
        if pending:
            self._fold_exact(pending)

    def _fold_exact(self, pending: list[tuple[int, pa.Array]]) -> None:
        """`_fold` by one `dictionary_encode` of the word list and the batches' dictionaries."""
        n = len(self.words)
        dictionaries = [_words_of(d) for _, d in pending]
        dictionaries = [d.cast(pa.string()) if d.type != pa.string() else d for d in dictionaries]
        known = [self.words] if n else []  # (Arrow drops an empty chunk from the result)
        encoded = pc.dictionary_encode(pa.chunked_array([*known, *dictionaries], pa.string()))
        # One dictionary for every chunk, the list's words first and in place (what Arrow's
        # chunked encode does); an Arrow that did otherwise (or a batch without words) is
        # asked word by word instead.
        same = encoded.num_chunks == len(known) + len(dictionaries) > 0
        if same:
            words = encoded.chunks[0].dictionary
            same = all(c.dictionary.equals(words) for c in encoded.chunks[1:]) and (
                not n or np.array_equal(np.asarray(encoded.chunks[0].indices), np.arange(n)))
        if same:
            maps = [np.asarray(c.indices, dtype=np.int32) for c in encoded.chunks[len(known):]]
        else:
            union = pc.unique(pa.concat_arrays([pa.array([], pa.string()), *dictionaries]))
            words = pa.concat_arrays([self.words, union.filter(pc.invert(pc.is_in(union, value_set=self.words)))])
            maps = [np.asarray(pc.index_in(d, value_set=words), dtype=np.int32) for d in dictionaries]
        del encoded
        for (k, d), m in zip(pending, maps):
            self._keep(k, d, m)
        self.word_terms.append(self.analyzer.terms_of_words(words.slice(n)))
        self._words = words

    def _keep(self, k: int, dictionary, m: np.ndarray) -> None:
        """Batch k's map from its words to the corpus's: its own, or its thread's words' (NewWords)."""
        if not isinstance(dictionary, NewWords):
            self.maps[k] = self.spill.put(m) if self.spill is not None else m
            return
        pieces = self.owned.setdefault(dictionary.owner, [])
        if sum(len(p) for p in pieces) != dictionary.first:  # (a thread's batches come in its order)
            raise RuntimeError(f"batch {k}: its thread's new words start at {dictionary.first}, "
                               f"not after the {sum(len(p) for p in pieces)} numbered before")
        pieces.append(m.astype(np.int32, copy=False))
        self.maps[k] = _Owned(dictionary.owner)

    def finish(self) -> pa.Array:
        """The sorted terms (once every batch is added)."""
        self._wait()
        if self.pending:
            pending, self.pending = self.pending, []
            self._fold(pending)
        self._pool.shutdown()
        word_terms = pa.concat_arrays([pa.array([], pa.string()), *self.word_terms])
        self.word_terms = []
        terms = pc.dictionary_encode(word_terms)
        # Alphabetical term ids (Arrow sorts UTF-8 bytes, which is code-point order): a sorted table reads better.
        order = np.asarray(pc.sort_indices(terms.dictionary))
        rank = np.empty(len(order) + 1, dtype=np.int32)
        rank[order] = np.arange(len(order), dtype=np.int32)
        rank[-1] = -1  # where the analyzer dropped the word
        self.term_of_word = rank[np.asarray(pc.fill_null(terms.indices, len(order)), dtype=np.int64)]
        return terms.dictionary.take(pa.array(order))

    def term_of_batch(self, k: int) -> np.ndarray:
        """Batch k's term index of each of its local word ids (-1: not a term); once per batch."""
        m, self.maps[k] = self.maps[k], None
        if m is None:  # a batch without words
            return np.zeros(0, dtype=np.int32)
        if isinstance(m, _Owned):  # every batch of that thread: its words' terms, made once
            with self._owned_lock:
                terms = self.owned_terms.get(m.owner)
                if terms is None:
                    pieces = self.owned.pop(m.owner)
                    terms = self.owned_terms[m.owner] = self.term_of_word[
                        np.concatenate([np.zeros(0, np.int32), *pieces])]
            return terms
        if not isinstance(m, np.ndarray):
            m = self.spill.get(m)
        return self.term_of_word[m]


def _words_of(dictionary) -> pa.Array:
    return dictionary.words if isinstance(dictionary, NewWords) else dictionary
