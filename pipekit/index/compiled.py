"""Stage 04's words cut and numbered in one compiled pass (numba), where the plain way makes ~20.

`count_batch` (04_indexing.py) cuts a batch's fields into runs (pipekit/index/analyzer.py:
~15 NumPy passes over the bytes for ASCII texts, RE2 for the rest), numbers the runs by their
first appearance (`pc.dictionary_encode`, Arrow's string hash) and puts the tokens in chunk
order (`counting.by_row`: a stable argsort, for the heading and path words appended after the
text).  At a million passages that was ~46 % of the stage's busy thread time (py-spy, session
26), and each pass made a fresh array of the batch's size: on this machine memory touched fresh
costs a page fault each 4 KB, memory reused nearly nothing (bench/README.md, "The machine
today").  `count_words` gives exactly what those three steps give, the batch's distinct words
(an Arrow string array, in first-appearance order), each token's word number (int32, in chunk
order), the counts (None when every token counts 1) and the entries per chunk, from two loops
(pipekit/index/compiled_loops.py):

1. `cut_field`, once per field in `count_batch`'s order (the text, the heading line, the folder
   names): each ASCII text's runs found in a bit a byte (a letter or digit: the field's bytes
   classed eight at a time), each run keyed as it is read (lower-cased), the
   keys looked up a block at a time in an open-addressing table (a word's bytes compared, never
   its hash trusted), a new word numbered next and its bytes added to the word buffer.  A text that is not ASCII is cut the plain way
   (the analyzer's RE2 split) and its runs are numbered in its place among the texts: the words'
   order, hence their numbers, is the plain way's in a mixed batch too;
2. `by_row`: the tokens in chunk order, a stable counting sort into arrays of the batch's own.

The table, the word buffer and the token buffers are each counting thread's own (`_Scratch`),
kept between batches and grown when one needs more: only what a batch returns (its dictionary,
ids, counts, entries per chunk: held, spilled) is new memory.

Where the loops come from: numba compiles them ahead of time (numba's pycc) into an extension
module kept beside this file (`__pycache__`, or ~/.cache/pipekit where that is not writable),
named by a hash of compiled_loops.py, numba's version and Python's: a stage imports it like any
module, in a millisecond and without numba (pipekit/run/aot.py: the build, its place and its
loading, shared with stage 05's compiled ranking).  Compiled the way `@njit` compiles them in the
stage's own process instead, numba's import and its compiler's registries added ~140 MB to
stage 04's memory (LLVM, numba's typing tables: 230 MB resident before the first batch, 63
without), and stage 04 must stay well under stage 05's peak; built ahead, nothing is added.
The first batch of at least `LEAST_BYTES` of text on a machine starts the build (~15 s of one
core, in a process of its own), and batches are counted the plain way until the module is
there (so a small rerun, one added file, never builds it, and no counting thread waits for it).
Where it cannot be built (no numba, no C compiler), a note says so once and every batch is
counted the plain way.  Both ways give the same arrays, to the element
(tests/test_04_compiled.py), so which batch took which way never shows in the index.
"""
from __future__ import annotations

import itertools
import threading
from typing import NamedTuple

import numpy as np

from pipekit.index.analyzer import _as_string_array, _regex_runs
from pipekit.run.aot import Ahead
from pipekit.run.arrays import string_buffers
from pipekit.run.lazy import lazy

pa, pc = lazy("pyarrow"), lazy("pyarrow.compute")

LEAST_BYTES = 1 << 20  # a batch's text bytes from which the loops are worth building (a full batch: ~4.8 MB)
# Built, kept and loaded by pipekit/run/aot.py, the machinery stage 05's compiled ranking shares.
BUILT = Ahead("pipekit.index.compiled_loops", "pipekit_words", "stage 04's compiled word cutter",
              "counting the plain way")
NO_BITS = np.zeros(0, np.uint64)  # (cut_field's bits where no text is ASCII: none made)
_loops = None  # False: the loops off, as on a machine that cannot build them (the tests set it)


def load(wait: bool = True):
    """The compiled loops (an extension module), imported, or built first (in a process of its
    own, on a thread that waits for it: `wait` False returns None meanwhile); None where they
    cannot be built."""
    return None if _loops is False else BUILT.load(wait)


def loaded():
    """The compiled loops if they are built on this machine already (imported now), else None:
    never starts a build (a small rerun does not build them)."""
    return None if _loops is False else BUILT.built()


class _Scratch:
    """A counting thread's buffers, kept between its batches (grown by the loops as needed).
    Sized for a batch of 8,192 passages (~86k distinct words, ~520k tokens); SCALE
    shrinks them (tests: every buffer grown from almost nothing)."""

    SCALE = 1

    def __init__(self):
        k = self.SCALE
        self.table = np.zeros(max(4 * ((1 << 18) // k), 8), np.uint64)  # 4 uint64s a slot, half full
        self.starts = np.zeros(max((1 << 17) // k, 2), np.int64)
        self.words = np.empty(max((1 << 20) // k, 1), np.uint8)
        self.ids = np.empty(max((1 << 19) // k, 1), np.int32)
        self.rows = np.empty(max((1 << 19) // k, 1), np.int32)
        self.bits = np.empty(max((1 << 17) // k, 3), np.uint64)  # a bit a byte: a letter or digit

    def bits_of(self, source: np.ndarray) -> np.ndarray:
        """`cut_field`'s `bits` for these bytes (a bit a byte, which the loop fills; three words
        spare), in a kept buffer."""
        n = len(source) // 64 + 3
        if len(self.bits) < n:
            self.bits = np.empty(max(n, 2 * len(self.bits)), np.uint64)
        return self.bits[:n]


_scratch = threading.local()
_owners = itertools.count()  # (a kept table's number: the vocabulary keeps a map from each one's words)


class NewWords(NamedTuple):
    """A batch's dictionary where its counting thread keeps its words (`KeptWords`): only the
    words the thread met for the first time in it, which are the thread's words first..first +
    len(words); the batch's ids number the thread's words (`owner`: which thread's)."""
    words: object  # pa.Array
    owner: int
    first: int


class KeptWords:
    """One counting run's word tables, a counting thread's own kept across its batches.

    Each batch started with an empty table (zeroed: 8 MB a batch) and numbered its own ~86k
    distinct words, every one inserted afresh, copied out as its dictionary, and numbered again
    in the corpus's word list by the vocabulary (pipekit/index/vocabulary.py).  A corpus's
    vocabulary stops growing early (~200k words at 200k passages and at a million here), so a
    thread that keeps its table finds nearly every word of a later batch in it: the batch's
    dictionary is only its new words (`NewWords`), and its ids number the thread's words.
    A run's own object (a thread's table from another run is never read): held by the run,
    freed with it.

    A vocabulary that never stops growing (identifiers, numbers, hashes, many languages) would
    make each thread's table a copy of it, beside the vocabulary's own: from MOST words on, a
    thread starts a new table (a new owner to the vocabulary), so a table stays bounded
    (~32 MB) and a corpus whose words level off keeps one table a thread."""

    MOST = 1 << 19  # words a thread's table keeps before it starts again (~200k here at any size)

    def __init__(self):
        self._local = threading.local()

    def scratch(self) -> _Scratch:
        s = getattr(self._local, "buffers", None)
        if s is None or s.n_words >= self.MOST:
            s = self._local.buffers = _Scratch()
            s.n_words, s.owner = 0, next(_owners)
        return s


def count_words(fields: list, capitals: bool, n_rows: int, least: int | None = None, kept: KeptWords | None = None):
    """(dictionary, ids, counts, entries per row) of a batch's `fields`, as count_batch's plain
    way gives them, or None where the compiled loops are not (yet) loaded, or the batch holds
    fewer than `least` (LEAST_BYTES) bytes of text.  `fields`: (strings, row of each string or None for
    one a row, weight) in the order their words are counted.  With `kept`, the thread's table is
    kept from its batch before: the dictionary is a `NewWords`, and the ids number the thread's words."""
    columns = [(_as_string_array(strings), rows, weight) for strings, rows, weight in fields]
    if sum(a.nbytes for a, _, _ in columns) < (LEAST_BYTES if least is None else least):
        return None
    loops = load(wait=False)
    if loops is None:
        return None
    if kept is not None:
        s = kept.scratch()
        n_words = first = s.n_words
    else:
        s = getattr(_scratch, "buffers", None)
        if s is None:
            s = _scratch.buffers = _Scratch()
        s.table[:] = 0
        n_words = first = 0
    n_tok = 0
    ends, weights = [], []
    for arr, rows, weight in columns:
        offsets, data = string_buffers(arr)
        if len(arr) and offsets[-1] > offsets[0]:  # (an empty text has no run, either way)
            offsets, source, plain, pre_ptr, pre_offsets = _source(arr, offsets, data, capitals)
            bits = s.bits_of(source) if plain.any() else NO_BITS
            rows = np.arange(len(arr), dtype=np.int32) if rows is None else rows.astype(np.int32)
            s.table, s.starts, s.words, s.ids, s.rows, n_words, n_tok = loops.cut_field(
                offsets, source, bits, plain, pre_ptr, pre_offsets, rows, capitals,
                s.table, s.starts, s.words, n_words, s.ids, s.rows, n_tok)
        ends.append(n_tok)
        weights.append(weight)
    # Counts are kept only where a token counts more than once (count_batch's rule): some field
    # weighing more than 1 gave a token.
    firsts = [0] + ends[:-1]
    weighted = any(w != 1 and e > f for w, f, e in zip(weights, firsts, ends))
    ids, counts, nnz = loops.by_row(s.ids, s.rows, n_tok, np.array(ends, np.int64), np.array(weights, np.int64),
                                    n_rows, weighted)
    starts = s.starts[first:n_words + 1]
    dictionary = pa.StringArray.from_buffers(n_words - first, pa.py_buffer((starts - starts[0]).astype(np.int32)),
                                             pa.py_buffer(s.words[int(starts[0]):int(starts[-1])].copy()))
    if kept is not None:
        s.n_words = n_words
        dictionary = NewWords(dictionary, s.owner, first)
    return dictionary, ids, counts if weighted else None, nnz


def _source(arr, offsets, data, capitals: bool):
    """(offsets, source, plain, pre_ptr, pre_offsets) for `cut_field`: the texts' bytes (text t's
    source[offsets[t]:offsets[t + 1]]), which are ASCII (cut by the loop), and the others' runs,
    cut the analyzer's plain way (RE2) and put after the texts' bytes in `source`, text t's being
    runs pre_ptr[t]..pre_ptr[t + 1] (source[pre_offsets[r]:pre_offsets[r + 1]])."""
    lo, hi = int(offsets[0]), int(offsets[-1])
    offsets = offsets.astype(np.int64) - lo
    source = data[lo:hi]
    n = len(arr)
    ascii_ = pc.string_is_ascii(arr)
    if pc.all(ascii_).as_py():
        return offsets, _read_only(source), np.ones(n, np.bool_), np.zeros(n + 1, np.int64), np.zeros(1, np.int64)
    plain = np.asarray(ascii_)
    slow = np.flatnonzero(~plain)
    runs, parent = _regex_runs(arr.take(pa.array(slow)), capitals)
    pre_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(slow[parent], minlength=n), out=pre_ptr[1:])
    run_offsets, run_data = string_buffers(runs)
    a, z = int(run_offsets[0]), int(run_offsets[-1])
    pre_offsets = run_offsets.astype(np.int64) + (hi - lo - a)
    # (a copy of the batch's bytes: only for a field with a text that is not ASCII)
    return offsets, _read_only(np.concatenate([source, run_data[a:z]])), plain, pre_ptr, pre_offsets


def _read_only(data: np.ndarray) -> np.ndarray:
    """`data`, read-only as Arrow's buffers are: numba compiles a loop once for each kind of
    array it is given."""
    data.flags.writeable = False
    return data
