"""Stage 04's sparse-matrix steps: scipy's for real batches, NumPy's for a handful of chunks.

1. `by_row`: (row, col, weight) triples, one a token, grouped by row (a stable sort, only
   when some were appended out of row order): a CSR whose duplicates are not summed yet.
2. `to_csc`: rows -> columns (term-major postings), each column's rows in order.
3. `merge_adjacent`: a term's postings of one chunk, side by side after 2, summed into one —
   counting: a word said twice in a chunk is one posting of weight 2, and so are two words
   of one chunk that make one term.
4. `narrow_counts`: a count in 2 bytes when the batch's counts fit (they are all held at once).
5. `batch_postings`, `Piece` and `place`: stage 04's counts kept by batch, each batch in term
   space and term-major on its own (1-3 for one batch; in one compiled loop where stage 04's
   compiled loops are built, pipekit/index/compiled_loops.py `term_major`), and any range of terms put together
   from every batch when it is written (`place`): the corpus's postings are held once, as
   the batches', never also as one table (nor as one CSR beside its CSC).
6. `term_slice` and `merge_slices`: stage 04's map/reduce of postings: a partition's slice
   of a range of terms (and of a shard's chunks), and one range merged from every
   partition's slices in corpus order (a cluster's partitions; one, locally).

scipy does 2 with a counting sort in C, which is what keeps stage 04 linear at a million
chunks.  (Step 1 also summed a chunk's repeats, through scipy's COO -> CSR, whose sum sorts
every row's columns: 2.6 s of CPU at a million passages, for sums that 3 makes anyway once
the words are terms.)  But importing scipy takes 0.17 s, and a rerun after one added file
(stage 04 counts only the new file's chunks, pipekit/run/incremental.py) is about a second
in all: a sixth of it went to loading scipy for a few hundred words.  Below SMALL entries
NumPy's sort gives the same arrays in well under a millisecond; tests/test_04_indexing.py
checks both ways against each other.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import NamedTuple

import numpy as np

SMALL = 20_000  # entries below which NumPy sorts them (under 2 ms) instead of scipy


def by_row(rows: np.ndarray, cols: np.ndarray, weights: np.ndarray | None, n_rows: int):
    """(cols, weights, entries per row): the triples in row order, duplicates kept (a row's
    entries in the order given).  Rows come mostly in order (a batch's text runs, then its
    headings' and paths' appended after): a stable sort only when some are not.  `weights`
    None: every entry counts 1 (and None comes back: see `batch_postings`)."""
    rows = rows.astype(np.int32, copy=False)
    if len(rows) > 1 and not (rows[1:] >= rows[:-1]).all():
        order = np.argsort(rows, kind="stable")  # (a merge of the few runs: timsort finds them)
        cols = cols[order]
        weights = None if weights is None else weights[order]
    return cols, weights, np.bincount(rows, minlength=n_rows)


def to_csc(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, shape: tuple[int, int],
           summed: bool = False):
    """(col_ptr, rows, data): the same matrix column by column, rows in order within each
    (entries of one row and column side by side; `summed`: added into one, in int32 —
    two uint16 counts of one term can pass 65,535)."""
    if len(indices) >= SMALL:
        from scipy import sparse

        if summed:
            data = data.astype(np.int32, copy=False)  # (tocsc's arrays are new: `data` is not summed into)
        m = sparse.csr_matrix((data, indices, indptr), shape=shape, copy=False).tocsc()
        if summed:  # (linear: tocsc leaves each column's rows in order, so nothing is sorted again)
            m.sum_duplicates()
        return m.indptr, m.indices, m.data
    order = np.argsort(indices, kind="stable")  # stable: within a column, rows stay in order
    rows = np.repeat(np.arange(shape[0], dtype=indices.dtype), np.diff(indptr))
    col_ptr = np.zeros(shape[1] + 1, dtype=indptr.dtype)
    np.cumsum(np.bincount(indices, minlength=shape[1]), out=col_ptr[1:])
    if summed:
        return merge_adjacent(col_ptr, rows[order], data[order])
    return col_ptr, rows[order], data[order]


def merge_adjacent(indptr: np.ndarray, chunk: np.ndarray, tf: np.ndarray):
    """Sum postings of one term in one chunk that sit next to each other (term-major order).

    Two words of a chunk can be one term ("running", "runs" -> "run"); after the CSC
    conversion their postings are neighbours, since within a term chunks stay in order.
    """
    dup = np.zeros(len(chunk), dtype=bool)
    dup[1:] = chunk[1:] == chunk[:-1]
    dup[indptr[:-1][indptr[:-1] < len(chunk)]] = False  # a term's first posting starts a group
    if not dup.any():
        return indptr, chunk, tf
    first = np.flatnonzero(~dup)
    # Summed in int32 whatever tf's width: two uint16 counts of one term can pass 65,535.
    tf = np.add.reduceat(tf, first, dtype=np.int32)
    # A term's postings now start at the number of groups that begin before its old start
    # (a search in `first`, not a running count over every posting: two int64 copies less).
    return np.searchsorted(first, indptr).astype(indptr.dtype), chunk[first], tf


COUNT_16 = np.iinfo(np.uint16).max


def narrow_counts(counts: np.ndarray | None) -> np.ndarray | None:
    """A batch's counts as uint16 when every one fits (nearly always: a word said 65,536
    times in one chunk), else as they are.  Stage 04 holds every count of the corpus at once
    (a batch's word counts, then its postings' tf): at a million passages, 4 bytes a count
    was 0.2 GB.  Sums of counts (a chunk's length, merged postings) are taken in a wider type.
    None (every count 1, not stored) stays None."""
    if counts is not None and (len(counts) == 0 or int(counts.max()) <= COUNT_16):
        return counts.astype(np.uint16)
    return counts


def batch_postings(term_of_local: np.ndarray, ids: np.ndarray, counts: np.ndarray | None, row_nnz: np.ndarray,
                   n_terms: int, first_row: int = 0, tally: "Tally | None" = None):
    """One batch's counts in term space, term-major: a `Piece` (the terms it holds, each
    one's number of postings in it, the postings' chunks — the batch's rows numbered from
    `first_row` — and their tf), and each row's length.

    `ids` are the batch's word ids, turned into term ids here in place (`term_of_local`:
    each one's term, from the Vocabulary); words the analyzer drops (term -1) leave.
    `counts` None: every entry counts 1 (no heading or path weight above 1: the bench's and
    BEIR's settings), and no count a token was kept, spilled and read back.  A function of
    its batch alone, so two batches are converted at once on two threads: as one CSR of the
    whole corpus this step ran on one core, and concatenating every batch into it first held
    the parts and the whole at once (stage 04's peak at a million passages, bench/README.md).
    With a `tally`, the batch's df and its chunks' numbers of postings are added to it (`Tally`).
    """
    if len(ids) >= SMALL:
        from pipekit.index import compiled  # (not imported for a handful of chunks)

        loops = compiled.loaded()
        if loops is not None:
            return _term_major(loops, term_of_local, ids, counts, row_nnz, n_terms, first_row, tally)
    if ids.flags.writeable:  # (a batch's ids read from Arrow's buffer, not spilled, are not)
        np.take(term_of_local, ids, out=ids, mode="clip")  # every id is in range: "clip" only spares a buffer
    else:
        ids = np.take(term_of_local, ids)
    n = len(row_nnz)
    indptr = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(row_nnz, out=indptr[1:])
    is_term = ids >= 0
    if not is_term.all():
        ids = ids[is_term]
        counts = None if counts is None else counts[is_term]
        kept_before = np.zeros(len(is_term) + 1, dtype=np.int32)  # entries kept before each one
        np.cumsum(is_term, out=kept_before[1:])
        indptr = kept_before[indptr]
        del kept_before
    # A row's length is the sum of its counts (weights included), taken wider than a count:
    # summed over each row's run (the rows are in order), not by a bincount of every entry's
    # row, whose rows and counts NumPy first copied to int64 and float64 (16 bytes an entry).
    if counts is None:  # every entry 1: a row's length is its number of entries
        lengths = np.diff(indptr).astype(np.int64)
        counts = np.ones(len(ids), dtype=np.int32)
    else:
        lengths = row_sums(counts, indptr)
    # (a word's repeats in a chunk, and two words of one term, summed here: counting.by_row)
    col_ptr, chunk, tf = to_csc(indptr, ids, counts, (n, max(n_terms, 1)), summed=True)
    df = np.diff(col_ptr)
    present = np.flatnonzero(df).astype(np.int32)
    chunk = chunk.astype(np.int32, copy=False)
    chunk += np.int32(first_row)
    # merge_adjacent sums in int32; held until written, a count takes 2 bytes where it fits.
    # (each term's start kept: summing the counts before a range's first term, per range and
    # batch, was 0.5 s of a million passages' write)
    if tally is not None:
        tally.df_of_thread()[present] += df[present]
        tally.per_chunk[first_row:first_row + n] += np.bincount(chunk - np.int32(first_row), minlength=n).astype(
            np.int32)
    return Piece(present, df[present], chunk, narrow_counts(tf), col_ptr[np.r_[present, n_terms]]), lengths


class Tally:
    """What the reduce needs of a run's postings, added up as each batch turns term-major
    (`batch_postings`): each term's df (a sum a converting thread, int32; added up in int64 when asked)
    and each chunk's number of postings (int32; chunk numbers as `first_row` gives them).  Taken
    from each batch's postings afterwards (a bincount of its chunks, a scatter-add of its df on
    the thread that collects them) it was ~0.45 s of CPU at a million passages; the compiled loop
    counts both as it places the postings."""

    def __init__(self, n_terms: int, n_chunks: int):
        self.n_terms = n_terms
        self.per_chunk = np.zeros(n_chunks, np.int32)
        self._local = threading.local()
        self._dfs: list[np.ndarray] = []
        self._lock = threading.Lock()

    def df_of_thread(self) -> np.ndarray:
        df = getattr(self._local, "df", None)
        if df is None:
            df = self._local.df = np.zeros(self.n_terms, np.int32)
            with self._lock:
                self._dfs.append(df)
        return df

    @property
    def df(self) -> np.ndarray:
        """Each term's df over every batch tallied."""
        total = np.zeros(self.n_terms, np.int64)
        for df in self._dfs:
            total += df
        return total


_seen = threading.local()  # each converting thread's zeroed count a term (`_term_major`)
_NOTHING = np.zeros(0, np.int32)  # (term_major's tally, where none)


def _term_major(loops, term_of_local, ids, counts, row_nnz, n_terms, first_row, tally=None):
    """`batch_postings` in one compiled loop (pipekit/index/compiled_loops.py `term_major`: the
    same arrays, to the element and the dtype): the scipy way's CSR -> CSC, sum of duplicates
    and the NumPy passes around them took ~1.5 s of CPU at a million passages, and importing
    scipy 0.13 s of each run, while both converting threads waited on its import lock."""
    seen = getattr(_seen, "array", None)
    if seen is None or len(seen) != n_terms:
        seen = _seen.array = np.zeros(n_terms, np.int32)
    weighted = counts is not None
    counts = counts.astype(np.int32, copy=False) if weighted else np.zeros(0, np.int32)
    present, df, starts, chunk, tf, lengths = loops.term_major(
        np.ascontiguousarray(term_of_local, dtype=np.int32), _writable(ids), _writable(counts), weighted,
        row_nnz.astype(np.int64, copy=False), first_row, seen,
        _NOTHING if tally is None else tally.df_of_thread(), _NOTHING if tally is None else tally.per_chunk)
    return Piece(present, df, chunk, narrow_counts(tf), starts), lengths


def _writable(a: np.ndarray) -> np.ndarray:
    """`a` as the compiled loop takes it: int32, C-contiguous, writable (a view of Arrow's
    buffer is read-only: copied)."""
    a = np.ascontiguousarray(a, dtype=np.int32)
    return a if a.flags.writeable else a.copy()


def row_sums(values: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Each row's sum of `values` (int64), rows being the runs values[indptr[i]:indptr[i + 1]]."""
    sums = np.zeros(len(indptr) - 1, dtype=np.int64)
    filled = indptr[1:] > indptr[:-1]
    if filled.any():  # (reduceat sums from each start to the next: an empty row's start would be misread)
        sums[filled] = np.add.reduceat(values, indptr[:-1][filled], dtype=np.int64)
    return sums


class Piece(NamedTuple):
    """One batch's postings, term-major: its terms (ascending), each one's number of
    postings, then every posting's chunk and tf, term after term; `starts` (where each
    term's postings start, and the end) only where `terms_in` will cut it."""
    terms: np.ndarray
    df: np.ndarray
    chunk: np.ndarray
    tf: np.ndarray
    starts: np.ndarray | None = None

    def terms_in(self, lo: int, hi: int) -> "Piece":
        """Its postings of terms lo..hi-1 (views), terms numbered from lo."""
        i, j = np.searchsorted(self.terms, [lo, hi])
        a, z = int(self.starts[i]), int(self.starts[j])
        return Piece(self.terms[i:j] - np.int32(lo), self.df[i:j], self.chunk[a:z], self.tf[a:z])


def place(n_terms: int, pieces):
    """(col_ptr, chunk, tf) of every batch's postings (`Piece`s, in corpus order) as one
    term-major table: a term's postings are its postings in batch 1, then batch 2, ... so
    chunks stay in order within a term, as one CSR -> CSC of the whole corpus gives.  Each
    posting moves once, to a slot from the term's offset: linear.

    `pieces` is a deque, emptied as it is read, so each batch's arrays are freed once
    placed (and their memory reused by the next batch's): the postings are then held
    about once, not as the batches and the whole side by side."""
    df = np.zeros(n_terms, dtype=np.int64)
    for piece in pieces:
        df[piece.terms] += piece.df  # a term appears once per batch: no repeated index
    col_ptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(df, out=col_ptr[1:])
    total = int(col_ptr[-1])
    chunk = np.empty(total, dtype=np.int32)
    tf = np.empty(total, dtype=np.result_type(np.uint16, *(p.tf.dtype for p in pieces)))
    free = col_ptr[:-1].copy()  # each term's next empty slot
    # int32 slots while they fit: int64 ones moved twice the bytes (a 27M-posting shard merged in
    # 0.4-1.5 s instead of 0.3)
    slot = np.int32 if total < 2**31 else np.int64
    # A piece's runs copied by the compiled loop where it is built (compiled_loops.place_runs:
    # 1.2 s of CPU at a million passages this way, in NumPy's fancy indexing), when its arrays
    # have the types it was compiled for (always, from stage 04's own pieces)
    from pipekit.index import compiled  # (imported by then wherever the loops are loaded)

    loops = compiled.loaded() if total >= SMALL else None
    runs = None if loops is None else {np.dtype(np.uint16): loops.place_runs16, np.dtype(np.int32): loops.place_runs32}
    while pieces:
        present, n_of, rows, counts, _ = pieces.popleft()
        run = runs and runs.get(tf.dtype)
        if run is not None and _as_compiled(present, n_of, rows) and _as_compiled(counts, dtype=tf.dtype):
            run(free, present, n_of, rows, counts, chunk, tf)
            continue
        start = np.zeros(len(n_of), dtype=np.int64)
        np.cumsum(n_of[:-1], out=start[1:])
        dest = np.repeat((free[present] - start).astype(slot), n_of)
        dest += np.arange(len(rows), dtype=slot)
        chunk[dest] = rows
        tf[dest] = counts
        free[present] += n_of
        del present, n_of, rows, counts, dest
    return col_ptr, chunk, tf


def _as_compiled(*arrays: np.ndarray, dtype=np.int32) -> bool:
    """Whether the compiled loop takes these arrays as they are: of `dtype`, contiguous, writable."""
    return all(a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable for a in arrays)


def term_slice(lo: int, hi: int, first_chunk: int, chunks: tuple | None, counts: dict) -> dict:
    """A partition's postings of its terms lo..hi-1 (runs where the counts are) in its
    chunks [chunks[0], chunks[1]) (None: all of them: the shard holds the whole
    partition), chunks renumbered after the partitions before it.  Counts kept by batch
    ("pieces") are put together here, for these terms only."""
    if "pieces" in counts:
        col_ptr, chunk, tf = place(hi - lo, deque(p.terms_in(lo, hi) for p in counts["pieces"]))
        df = np.diff(col_ptr)
    else:
        col_ptr = counts["col_ptr"]
        a, z = int(col_ptr[lo]), int(col_ptr[hi])
        chunk, tf, df = counts["chunk"][a:z], counts["tf"][a:z], np.diff(col_ptr[lo:hi + 1])
    if chunks is not None:  # the shard has part of this partition: its chunks' postings, term by term
        keep = (chunk >= chunks[0]) & (chunk < chunks[1])
        df = np.bincount(np.repeat(np.arange(hi - lo), df)[keep], minlength=hi - lo)
        chunk, tf = chunk[keep], tf[keep]
    return {"df": df, "chunk": chunk + np.int32(first_chunk) if first_chunk else chunk, "tf": tf}


def merge_slices(n_terms: int, ids: list[np.ndarray], slices: list[dict]):
    """One term range's postings from every partition's slice, term-major: a term's
    postings are its postings in partition 1, then 2, ... which is corpus order, as one
    run gives.  `ids[i]` are slice i's terms' positions in the range (each once).  Each
    posting moves once, to a slot computed from the range's term offsets (`place`): linear."""
    if len(slices) == 1 and len(ids[0]) == n_terms:  # the local engine: nothing to merge
        return np.concatenate([[0], np.cumsum(slices[0]["df"])]), slices[0]["chunk"], slices[0]["tf"]
    # A slice is a batch's Piece by another name: its terms (positions in the range), their
    # postings' numbers, chunks and tf, so `place` puts them together the same way.
    return place(n_terms, deque(Piece(g, piece["df"], piece["chunk"], piece["tf"]) for g, piece in zip(ids, slices)))
