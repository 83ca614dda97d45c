"""Stage 05's queries ranked in one compiled call each (numba, built ahead of time), where
`Index.best_candidates` made ~30 NumPy calls.

At 200k passages stage 05 answered its 1,000 bench queries in ~0.68 s, ~690 µs a query, and a
profile put nearly all of it in the calls, not the arithmetic: `_reaching`, `_floor`, `_lookup`
and `masked`, each a NumPy call over a few thousand numbers (bench/README.md, branch `rank`).
`TopChunks` gives the same chunks and the same score bits from one call of `top_chunks`
(pipekit/retrieve/pruned_loops.py: MaxScore term at a time, then the survivors scored exactly
in query order), handed to `rank` as the NumPy path's candidates are: so 05_results, the run
file and the metrics are the same (tests/test_05_pruned.py).

Where it is used: stage 05's local query phase for a query without section context, filter or
dense vectors (`search`'s `one`, and rm3's first pass), on an index whose postings are held as
pair codes (bm25.Weights) and whose coded rows lie in a `RowStack`.  Everything else takes the
NumPy path, as does every query until the module is built.  Once it is built, stage 05 loads
its index for it: a common term whose postings are held gets bits for its lookups (`BitStack`,
1.5 bits a chunk) rather than a coded row beside them (8-16 bits a chunk: ranks.common_term_rows),
which the NumPy path needed and the loop does not (stage 05 alone at 1M: -45 MB at its peak).

How it is built and loaded: pipekit/run/aot.py, as stage 04's word cutter is: numba's pycc
compiles the loops into an extension module kept in `pipekit/retrieve/__pycache__` (or
~/.cache/pipekit), named by a hash of the loops' source, numba's and Python's versions; stage 05
imports it in a millisecond, without numba (whose import and compiler add ~140 MB and ~0.5 s
to a process: stage 05's peak is the run's).  The first stage 05 on an index of at least
LEAST_CHUNKS chunks starts the build (a process of its own, ~13 s of one core) and ranks in
NumPy meanwhile; where it cannot be built, one warning and NumPy always.  Its wrapper releases
the GIL, so two query threads rank side by side.
"""
from __future__ import annotations

import threading

import numpy as np

from pipekit.retrieve.ranks import commonest, sorted_unique
from pipekit.run.aot import Ahead
from pipekit.run.arrays import small_page_zeros

BUILT = Ahead("pipekit.retrieve.pruned_loops", "pipekit_rank", "stage 05's compiled ranking", "ranking in NumPy")
LEAST_CHUNKS = 50_000  # chunks from which the module is worth building (the tests' and the sample's never build it)
# Each query thread's scratch over the chunks: acc (the sums, zeroed again), hits (the chunks
# touched, then the candidates at its front), part (the candidates' sums).  They are the growth
# of stage 05's query phase, the stage's peak (at 1M passages two threads, 8 + 4 + 8 bytes a
# chunk each where pages are touched): the candidates are compacted in hits, not copied to a
# fourth array, and neither a scan of many sums nor the floor's refinement copies them all out
# (pruned_loops.scanned, nth_best; bench/README.md, branch m05).
SCRATCH = (np.float64, np.int32, np.float64)


class RowStack:
    """Coded rows (ranks.coded_row: a code per chunk) laid out as the rows of one 2D array per
    code type, so that the compiled loop can be handed all of them at once.  `zeros` is the
    allocator the rows are made with (`most` of each type, then plain arrays); a stack's pages
    are the OS's zero pages until a row is written, so the unused rows cost nothing.  A stack
    is in 4 KiB pages (`small_page_zeros`), as the rows were when each was an array of its own:
    NumPy's huge pages for it cost ~1 s of system time at a million passages (compaction)."""

    def __init__(self, n: int, most: int, zeros=np.zeros):
        self.n, self.most, self._zeros = n, most, zeros
        self.stacks: dict = {}
        self.at: dict[int, int] = {}  # id of a row handed out -> its place (>= 0: uint8 rows, <= -2: uint16)
        self._lock = threading.Lock()

    def zeros(self, shape, dtype):
        dtype = np.dtype(dtype)
        if shape != (self.n,) or dtype not in (np.uint8, np.uint16):
            return self._zeros(shape, dtype)
        with self._lock:
            stack = self.stacks.get(dtype)
            if stack is None:
                stack = self.stacks[dtype] = small_page_zeros((self.most, self.n), dtype)
            used = sum(1 for r in self.at.values() if (r >= 0) == (dtype == np.uint8))
            if used == self.most:
                return self._zeros(shape, dtype)
            row = stack[used]
            self.at[id(row)] = used if dtype == np.uint8 else -2 - used
            return row

    def stack(self, dtype) -> np.ndarray:
        got = self.stacks.get(np.dtype(dtype))
        return got if got is not None else np.zeros((0, self.n), dtype)


class BitStack:
    """A few common terms' postings marked a bit a chunk, for the compiled loop's lookups: row i of
    `bits` has bit c & 63 of word c >> 6 set where term terms[i] is in chunk c, and `before[i, w]`
    counts its postings in the chunks before word w, so the posting of chunk c is found in O(1)
    (`before` plus the bits set below c's in its word) and its pair code read there.

    Why: a term in over 1/DENSE_SHARE of the chunks got a coded row over every chunk for its
    lookups (ranks.common_term_rows), beside its postings: 1-2 bytes a chunk, 59 terms of the
    bench's queries at a million passages, ~60 MB, most of what the stage held beyond its
    postings.  Its bits and counts are 1.5 bits a chunk (~11 MB), a lookup as cheap as a row's
    (bench/README.md, branch m05).  Only where the compiled loop answers the queries
    (`by_bits`): the NumPy path looks such a term up in its postings (a binary search), slower."""

    def __init__(self, n: int, terms: np.ndarray, indptr: np.ndarray, chunk: np.ndarray):
        words = (n + 63) >> 6
        self.at = {t: i for i, t in enumerate(terms.tolist())}  # term -> its row
        self.bits = small_page_zeros((len(terms), words), np.uint64)
        self.before = small_page_zeros((len(terms), words), np.int32)
        flags = np.zeros(words * 64, dtype=bool)
        for i, t in enumerate(terms.tolist()):
            ch = chunk[indptr[t]:indptr[t + 1]]
            flags[ch] = True
            self.bits[i] = np.packbits(flags, bitorder="little").view("<u8")  # (chunk 8j + k: bit k of byte j)
            flags[ch] = False
            self.before[i, 1:] = np.cumsum(_bits_set(self.bits[i, :-1]), dtype=np.int64)

    @classmethod
    def instead_of_rows(cls, index, held: np.ndarray, share: int, most: int):
        """For stage 05's Index (its held postings `held` a term): the terms ranks.common_term_rows
        would give rows beside their postings (in over 1/share of the chunks, `most` with the rows
        only), as bits, where the compiled loop will answer (`by_bits`); else None (rows then)."""
        n = len(index.lengths)
        if not by_bits(n):
            return None
        return cls(n, commonest(held, n, share, max(most - len(index._whole), 0)), index.indptr, index.chunk)

    @classmethod
    def empty(cls, n: int) -> "BitStack":
        return cls(n, np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int32))


_BYTE_BITS = np.array([bin(b).count("1") for b in range(256)], dtype=np.uint8)


def _bits_set(words: np.ndarray) -> np.ndarray:
    """Each uint64's number of bits set (np.bitwise_count where NumPy has it: 2.0 on; requirements
    allow 1.26, so a byte table otherwise)."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(words)
    return _BYTE_BITS[words.view(np.uint8)].reshape(len(words), 8).sum(axis=1, dtype=np.uint8)


def by_bits(n: int) -> bool:
    """Will stage 05's local queries on an index of n chunks be answered by the compiled loop (its
    module built: never waited for), so that its common terms' lookups can be bits (BitStack)?"""
    return (n >= LEAST_CHUNKS or BUILT.module is not None) and BUILT.built() is not None


class TopChunks:
    """`top_chunks` over stage 05's Index: its held postings (chunk, pair codes), its coded rows
    (`RowStack`), each term's weights by code (`Weights.table`), each thread's scratch."""

    SAMPLE = 16384  # postings of one term looked at for its seeds, at most (stage 05's SEED_SAMPLE)

    def __init__(self, index, loops):
        self.index, self.loops = index, loops
        self.n = len(index.lengths)
        self.rows = index.row_stack
        self.bits = getattr(index, "bit_stack", None) or BitStack.empty(self.n)
        self.arrays = (np.ascontiguousarray(index.indptr, dtype=np.int64), index.chunk, index.weigh.codes,
                       self.rows.stack(np.uint8), self.rows.stack(np.uint16))
        self.no_table = np.zeros(len(index.weigh.pair_tf))  # (a row-only term's: never read)
        self._scratch = threading.local()

    @classmethod
    def of(cls, index, loops):
        """A TopChunks for `index`, or None where its arrays are not the loop's (no pair codes,
        chunks not int32, rows not stacked): the NumPy path then."""
        weigh = getattr(index, "weigh", None)
        if (loops is None or weigh is None or weigh.codes is None or getattr(index, "row_stack", None) is None
                or index.chunk.dtype != np.int32 or not index.chunk.flags.c_contiguous):
            return None
        return cls(index, loops)

    def seeds(self, ids: np.ndarray, want: int) -> np.ndarray:
        """Chunks likely to score high, for the loop's first floor: the rarest terms' `want` best
        postings each (found once a term, kept: ranks.TopPostings), until they are `want`
        (`Index._floor`'s seeds, a chunk's score here being enough: `rank` needs the best chunks)."""
        index = self.index
        df = index.df[ids].tolist()
        parts, got = [], 0
        for i in sorted(range(len(df)), key=df.__getitem__):
            parts.append(index._seeds(int(ids[i]), want, self.SAMPLE))
            got += len(parts[-1])
            if got >= want:
                break
        seeds = parts[0] if len(parts) == 1 else sorted_unique(np.concatenate(parts))
        return seeds.astype(np.int32, copy=False)

    def __call__(self, ids: np.ndarray, weights: np.ndarray, reach: int):
        """The chunks (ascending, as the index's chunks) that hold the reach best of the query
        (terms `ids` in query order, query weights `weights`), every chunk tied with the reach-th
        too, and their exact scores; None where a term's row is not in the stack (NumPy then)."""
        index = self.index
        m = len(ids)
        if m == 0:
            return np.zeros(0, dtype=index.chunk.dtype), np.zeros(0)
        term = ids.astype(np.int64)  # (a copy: a row-only term's becomes -1)
        rowat, bitat = np.full(m, -1, np.int64), np.full(m, -1, np.int64)
        voff = np.zeros(m, np.int64)
        values, at = [], 0
        whole, dense, stacked, table, bits = index._whole, index._dense, self.rows.at, index.weigh.table, self.bits.at
        tables = []  # each term's weights by pair code, made once a term and kept (bm25.Weights.table)
        for q, t in enumerate(ids.tolist()):
            row = dense.get(t)
            if row is not None and id(row[0]) in stacked:
                rowat[q], voff[q] = stacked[id(row[0])], at
                values.append(row[1])
                at += len(row[1])
            if whole and t in whole:
                if rowat[q] == -1:
                    return None
                term[q] = -1
            tables.append(self.no_table if term[q] == -1 else table(t))
            bitat[q] = bits.get(t, -1)
        w = np.asarray(weights, dtype=np.float64)
        scratch = getattr(self._scratch, "arrays", None)
        if scratch is None:
            # (in 4 KiB pages, as the stacks: the loop touches hits and part only as far as a query's
            # chunks and candidates reach, and a huge page's fault can stall on compaction)
            scratch = self._scratch.arrays = tuple(small_page_zeros((self.n,), t) for t in SCRATCH)
        cols, vals = self.loops.top_chunks(
            reach, self.seeds(ids, 2 * reach), term, rowat, w, index.max_impact[ids] * w, np.stack(tables),
            np.concatenate(values) if values else np.zeros(1), voff,
            *self.arrays, bitat, self.bits.bits, self.bits.before, *scratch)
        return cols.astype(index.chunk.dtype), vals


def ranker(index, build: bool):
    """A TopChunks for stage 05's `index` when the module is loaded (`build`: the index is large
    enough to start its build if it is not there), else None."""
    if len(index.lengths) < LEAST_CHUNKS and BUILT.module is None:
        return None
    loops = BUILT.load(wait=False) if build else BUILT.built()
    return TopChunks.of(index, loops)
