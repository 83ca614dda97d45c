"""The postings of the terms a set of queries asks for, and no others (stage 05, issue 47).

Stage 05 knows every query before it scores, and a term no query has is never looked up:
its postings need not be in memory.  On the bench's 1M-passage corpus its 1,000 queries ask
2,427 of 200k terms, 48 % of the 54M postings (650 MB as the index held them then, chunk int32 +
a float64 impact; 270 MB with the uint8 tf held now); 50 questions ask ~20 %, nine tenths of it the commonest terms' (counted;
bench/README.md, "Stage 05 loads only what its queries ask").

04_postings is term-major, so a term's postings are one run of rows, where the df of the
terms before it says (04_terms).  `AskedPostings` reads those runs, row group by row group
on a thread per core, into arrays that hold only them, and gives the index an `indptr` over
those arrays in which every other term's run is empty.  Asked terms next to each other are
one run: when every term is asked, a row group is copied in one slice, as a whole read does.

What it does not do: read less than a row group (04_postings has no page index, and
pyarrow reads no row range below a group: a group that holds one asked posting is decoded
whole, so time falls only where whole groups are skipped), or answer a term it was not
built for: `check` refuses it, rather than score it as absent from every chunk.  A
Searcher and a server load every term: they do not know their queries yet.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipekit.retrieve.ranks import coded_row, commonest
from pipekit.run import io
from pipekit.run.errors import PipelineError

BATCH_ROWS = 1 << 16  # rows of a group decoded at a time: a whole group's Arrow buffers, freed, stayed resident
# (jemalloc's) under stage 05's peak: 493-525 -> 470-492 MB at 1M passages (bench/README.md, s05m)
SLICES = 1024  # runs in a row group up to which each is a slice copied (~1 µs); past it one mask (~5 ms a group)


def rows_only(df: np.ndarray, term_ids: list, n: int, share: int, most: int, only: int) -> np.ndarray:
    """Of the asked terms (`term_ids`, each query's) that get a coded row (in over 1/`share` of
    the `n` chunks, the `most` commonest: ranks.common_term_rows), those in over 1/`only` of
    them: held as rows alone (`AskedPostings.postings`), their postings never beside them.
    Why not every row's term: a row answers a cut or a sum in a pass over all n chunks where the
    postings take one over df; past n/`only` postings the two cost about the same."""
    asked = np.zeros(len(df), dtype=bool)
    for ids in term_ids:
        asked[np.asarray(ids, dtype=np.int64)] = True
    common = commonest(np.where(asked, df, 0), n, share, most)
    return common[df[common] * only > n]


def read_chunks(holder, path: Path, unread=(), later=()):
    """04_chunks' columns but `unread`, those in `later` left out: (table, read_later), where
    `read_later()` sets `holder.chunks` to that table with them joined, in the file's order.
    Stage 05 needs only doc_id and length while it scores; chunk_id and the page columns, read
    after the queries, were ~30 MB as Arrow holds them at 1M passages and as much again of the
    read's freed buffers, under its peak (bench/README.md, branch s05m).  Stage 05 now never reads
    them whole: its hits' rows come from 03_chunks (pipekit/retrieve/cited.py); `read_later` is
    for a caller that wants the whole table after all."""
    names = [n for n in io.schema(path).names if n not in unread]

    def read_later() -> None:
        table = holder.chunks
        missing = [n for n in names if n not in table.column_names]
        if missing:
            more = io.read_table(path, missing)
            holder.chunks = pa.table({n: (more if n in missing else table).column(n) for n in names},
                                     metadata=table.schema.metadata)

    return io.read_table(path, [n for n in names if n not in later]), read_later


class AskedPostings:
    """The asked terms' runs of rows in a term-major postings file, and where each lands."""

    def __init__(self, df: np.ndarray, term_ids, first: int = 0, apart=()):
        """`term_ids`: the asked terms, an array or a list of arrays (each query's);
        `first`: the number of the file's first chunk (the held chunks count from it);
        `apart`: asked terms whose postings are handed over whole, term by term, by
        `read_columns` (stage 05 codes them as rows), never held in the arrays."""
        df = np.asarray(df, dtype=np.int64)
        self.held = np.zeros(len(df), dtype=bool)
        for ids in term_ids if isinstance(term_ids, list) else [term_ids]:
            self.held[np.asarray(ids, dtype=np.int64)] = True
        self.first = int(first)
        self.terms = int(self.held.sum())
        start = np.zeros(len(df) + 1, dtype=np.int64)  # each term's first row in the file
        np.cumsum(df, out=start[1:])
        self.rows = int(start[-1])
        runs = self.held.copy()
        self.apart = np.asarray(apart, dtype=np.int64)
        if len(self.apart) and not self.held[self.apart].all():
            raise ValueError("a term handed over apart must be asked")
        runs[self.apart] = False
        self.apart = np.sort(self.apart[df[self.apart] > 0])
        self.apart_lo, self.apart_hi = start[self.apart], start[self.apart + 1]
        self.indptr = np.zeros(len(df) + 1, dtype=np.int64)  # ... and in the held arrays
        np.cumsum(np.where(runs, df, 0), out=self.indptr[1:])
        t = np.flatnonzero(runs & (df > 0))
        lo, hi = start[t], start[t + 1]
        # Runs that touch are one: t and t+1 both asked lie side by side in the file.
        first = np.ones(len(t), dtype=bool)
        first[1:] = lo[1:] != hi[:-1]
        last = np.ones(len(t), dtype=bool)
        last[:-1] = first[1:]
        self.lo, self.hi = lo[first], hi[last]
        self.dest = np.zeros(len(self.lo), dtype=np.int64)  # where each run starts in the held arrays
        np.cumsum((self.hi - self.lo)[:-1], out=self.dest[1:])

    @property
    def n(self) -> int:
        """Postings held."""
        return int(self.indptr[-1])

    def check(self, term_ids: np.ndarray) -> np.ndarray:
        """The term ids (-1: unknown), or an error for a term whose postings were not read
        (a query the index was not loaded for)."""
        ids = np.asarray(term_ids, dtype=np.int64)
        missing = ids[(ids >= 0) & ~self.held[np.maximum(ids, 0)]]
        if len(missing):
            raise PipelineError(f"this index holds the postings of {self.terms:,} terms only (those of the queries "
                                f"it was loaded for); term {int(missing[0])} is not one of them: load it whole")
        return term_ids

    def postings(self, path: Path, n: int, threads: int = 1, zeros=np.empty, tf_type=np.int32,
                 weigh=None, row_zeros=None) -> tuple[np.ndarray, np.ndarray, dict]:
        """The held postings' chunk and tf (as `tf_type`), and each `apart` term as a coded row of
        its weights over the `n` chunks ({term: (codes, values)}, ranks.coded_row; `weigh(t, chunk,
        tf)`: its weights there, pipekit/retrieve/bm25.py), coded as its last row group comes in
        (its codes made by `row_zeros`, or `zeros`: pipekit/retrieve/pruned.py's RowStack)."""
        rows: dict[int, tuple] = {}
        keep = lambda t, arrays: rows.__setitem__(t, coded_row(arrays[0], weigh(t, *arrays), n, row_zeros or zeros))
        chunk, tf = self.read_columns(path, {"chunk": np.int32, "tf": tf_type}, threads, zeros, keep)
        return chunk, tf, rows

    def read(self, path: Path, name: str, dtype, threads: int = 1, zeros=np.empty) -> np.ndarray:
        """Column `name` of the held postings (term-major, as the file orders them)."""
        return self.read_columns(path, {name: dtype}, threads, zeros)[0]

    def read_columns(self, path: Path, columns: dict, threads: int = 1, zeros=np.empty,
                     whole=None) -> list[np.ndarray]:
        """Columns {name: dtype} of the held postings, each row group decoded once for all of
        them; and each `apart` term's rows of those columns handed to `whole(t, arrays)` as
        soon as its last row group is in (on the reading thread), then forgotten: a term in
        most chunks is never in memory as postings beside what `whole` makes of it."""
        if io.row_count(path) != self.rows:
            raise PipelineError(f"{path}: {io.row_count(path):,} postings where 04_terms.parquet's df adds up to "
                                f"{self.rows:,}: rerun `python 04_indexing.py`")
        names = list(columns)
        outs = [zeros((self.n,), dtype) for dtype in columns.values()]
        reader = io.thread_readers()
        groups = io.row_groups(path)
        pieces: dict[int, list] = {}  # apart term (index in self.apart) -> its parts read so far
        lock = threading.Lock()

        def fill(group) -> None:
            f, g, at, rows = group
            # The runs this group holds rows of: [i, j), clipped to the group; the apart terms [ai, aj).
            i = int(np.searchsorted(self.hi, at, side="right"))
            j = int(np.searchsorted(self.lo, at + rows, side="left"))
            ai = int(np.searchsorted(self.apart_hi, at, side="right"))
            aj = int(np.searchsorted(self.apart_lo, at + rows, side="left"))
            if i >= j and ai >= aj:
                return  # no asked term here: the group is never decoded
            for batch in reader(f).iter_batches(BATCH_ROWS, row_groups=[g], columns=names, use_threads=False):
                self._take_batch(batch, at, outs, pieces, lock)
                at += batch.num_rows
            for k in range(ai, aj):
                with lock:  # complete once every column has every row of the term
                    got = pieces.get(k)  # (None: the other thread, whose part came last, took it)
                    if got is None or sum(len(v) for _, _, v in got) < len(outs) * int(self.apart_hi[k] - self.apart_lo[k]):
                        continue
                    del pieces[k]
                parts = [[v for c2, _, v in sorted(got, key=lambda p: (p[0], p[1])) if c2 == c]
                         for c in range(len(outs))]
                arrays = [p[0] if len(p) == 1 else np.concatenate(p) for p in parts]
                if "chunk" in names and self.first:
                    arrays[names.index("chunk")] -= arrays[names.index("chunk")].dtype.type(self.first)
                whole(int(self.apart[k]), arrays)

        # Row groups decode and copy outside the GIL: one thread per core fills its share.
        with ThreadPoolExecutor(max(threads, 1)) as pool:
            list(pool.map(fill, groups))
        if "chunk" in names and self.first:
            out = outs[names.index("chunk")]
            out -= out.dtype.type(self.first)  # chunks numbered from this index's first
        return outs

    def _take_batch(self, batch, at: int, outs: list, pieces: dict, lock) -> None:
        """A batch of a row group's rows (at..at + its rows): the held runs' rows copied into
        `outs`, each apart term's kept in `pieces` (column, first row, values)."""
        rows = batch.num_rows
        i = int(np.searchsorted(self.hi, at, side="right"))
        j = int(np.searchsorted(self.lo, at + rows, side="left"))
        ai = int(np.searchsorted(self.apart_hi, at, side="right"))
        aj = int(np.searchsorted(self.apart_lo, at + rows, side="left"))
        for c, out in enumerate(outs):
            values = batch.column(c).to_numpy()
            if i < j:
                self._fill_runs(values, out, i, j, at, rows)
            for k in range(ai, aj):
                lo, hi = int(self.apart_lo[k]), int(self.apart_hi[k])
                a, b = max(lo, at), min(hi, at + rows)
                with lock:
                    pieces.setdefault(k, []).append((c, a, values[a - at:b - at].copy()))

    def _fill_runs(self, values: np.ndarray, out: np.ndarray, i: int, j: int, at: int, rows: int) -> None:
        """Copy the held runs [i, j) of a row group (its rows at..at+rows: `values`) into `out`."""
        lo = np.maximum(self.lo[i:j], at) - at
        hi = np.minimum(self.hi[i:j], at + rows) - at
        d0 = int(self.dest[i] + (at + lo[0] - self.lo[i]))
        if j - i <= SLICES:
            for a, b in zip(lo.tolist(), hi.tolist()):
                out[d0:d0 + b - a] = values[a:b]
                d0 += b - a
        else:
            # Many short runs (rare terms side by side): one pass with a mask beats a
            # Python slice a run; the group's held rows are consecutive in `out`.
            edge = np.zeros(rows + 1, dtype=np.int8)
            edge[lo], edge[hi] = 1, -1  # (runs never touch: no position is both)
            keep = np.cumsum(edge[:-1], dtype=np.int8).view(bool)
            np.compress(keep, values, out=out[d0:d0 + int((hi - lo).sum())])
