"""How stage 04 cuts its postings into shards by document, and how a reader puts them together.

A shard is a range of chunks [c0, c1) that starts and ends where a document does, at least
`indexing.shard_chunks` chunks long (the last one: what is left).  04_postings.parquet holds
the shards one after the other, each sorted by term then chunk — each shard a term-major
index of its own chunks, rows [r0, r1) of the table — and the corpus statistics list them
(`corpus.shards`: [c0, c1, r0, r1] each).  Stage 04 records the whole collection's N, avgdl
and idf (dfs_query_then_fetch's "collection-wide statistics", paid once, at indexing), and
stage 05 weighs every posting with them, so a process holding one shard scores its chunks
bit for bit as the whole index does, and a document's chunks are never split between two processes.
A corpus smaller than one shard is one shard: the plain term-major table, as before shards.

`ShardedPostings.read` gives a column of a run of consecutive shards in term-major order:
all of them (the local engine, which holds the whole index) or one worker's (stage 05 on a
cluster, pipekit/retrieve/shards.py).  One shard is read as it lies; several are merged
term by term, each posting moved once to its slot (linear, as stage 04 merges partitions).

What it does not do: decide which worker holds which shard (pipekit/retrieve/shards.py),
or compress anything.  Plain NumPy and Arrow.
"""
from __future__ import annotations

from pathlib import Path

from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipekit.run import io
from pipekit.run.engine import iter_rows
from pipekit.run.errors import PipelineError

READ_ROWS = 1 << 20  # postings decoded at a time while merging shards (4 MB of a column)
BINCOUNT_BLOCK = 1 << 22  # postings counted per chunk at a time (32 MB of int64 temporaries)


# --- stage 04: the rows of 04_chunks.parquet ----------------------------------------------

CHUNK_GROUP = 1 << 17  # rows of 04_chunks written at a time when they are read again (~30 MB)


def chunk_rows(part: tuple, cited: list[str], batch_size: int) -> Iterator[pa.Table]:
    """A partition's rows of 04_chunks.parquet (runs where its counts are), given its
    first chunk's number and its counts: their cited columns as counted ("meta"), or read
    again from the partition of 03_chunks they were counted from ("source"), a group of
    rows at a time."""
    first_chunk, counts = part
    lengths, source = counts["lengths"], counts.get("source")
    if source is None:
        if counts["meta"] is not None:
            yield chunk_table(first_chunk, counts["meta"], lengths)
        return
    names = [c for c in cited if c in io.schema(Path(source.path)).names]
    group, at = [], 0
    for batch in iter_rows(source, names, batch_size=batch_size):
        group.append(batch)
        if sum(b.num_rows for b in group) >= CHUNK_GROUP:
            meta = pa.Table.from_batches(group)
            yield chunk_table(first_chunk + at, meta, lengths[at:at + meta.num_rows])
            group, at = [], at + meta.num_rows
    if group:
        meta = pa.Table.from_batches(group)
        yield chunk_table(first_chunk + at, meta, lengths[at:at + meta.num_rows])


def chunk_table(first_chunk: int, meta: pa.Table, lengths: np.ndarray) -> pa.Table:
    """Rows of 04_chunks.parquet: chunks numbered from first_chunk, their cited columns and lengths."""
    n = len(lengths)
    return pa.table({
        "chunk": pa.array(np.arange(first_chunk, first_chunk + n, dtype=np.int32)),
        **{c: meta.column(c) for c in ("chunk_id", "doc_id", "heading")},
        "page_start": meta.column("page_start").cast(pa.int32()),
        "page_end": meta.column("page_end").cast(pa.int32()),
        # (a batch without labels, as tests build them: the page numbers, as for a PDF without any)
        **{f"page_label_{s}": meta.column(f"page_label_{s}") if f"page_label_{s}" in meta.column_names
           else meta.column(f"page_{s}").cast(pa.string()) for s in ("start", "end")},
        "length": pa.array(lengths.astype(np.int32)),
        "content_hash": meta.column("content_hash") if "content_hash" in meta.column_names
        else pa.nulls(n, pa.string()),
    })


# --- stage 04: where the shards start and end ---------------------------------------------

def chunk_facts(counts: dict) -> dict:
    """What the shard plan needs of one partition's counts: where its documents start
    (positions in the partition), its first and last doc_id (a document may continue in
    the next partition) and each chunk's number of postings (its distinct terms)."""
    n = len(counts["lengths"])
    nnz = counts.get("nnz")  # counts kept by batch know it (04_indexing.count_chunks)
    if nnz is None:
        nnz = np.zeros(n, dtype=np.int32)
        # A block of postings at a time: np.bincount copies its input to int64 first, which over
        # every posting at once was 8 bytes a posting (0.4 GB at a million passages: stage 04's peak).
        for lo in range(0, len(counts["chunk"]), BINCOUNT_BLOCK):
            nnz += np.bincount(counts["chunk"][lo:lo + BINCOUNT_BLOCK], minlength=n).astype(np.int32)
    meta = counts.get("meta")
    if meta is None or n == 0:
        return {"doc_starts": np.zeros(0, np.int64), "first_doc": None, "last_doc": None, "nnz": nnz}
    ids = meta.column("doc_id").combine_chunks()
    new = np.ones(n, dtype=bool)
    if n > 1:
        new[1:] = np.asarray(pc.not_equal(ids.slice(1), ids.slice(0, n - 1)))
    return {"doc_starts": np.flatnonzero(new), "first_doc": ids[0].as_py(), "last_doc": ids[n - 1].as_py(),
            "nnz": nnz}


def plan_shards(facts: list[dict], first_chunk, shard_chunks: int) -> list[list[int]]:
    """[c0, c1, r0, r1] for each shard: cut at the first document start at or after every
    `shard_chunks` chunks, from the partitions' `chunk_facts` in corpus order (their first
    chunks' numbers `first_chunk`).  Depends on the chunks alone, never on the engine or
    the partitions, so every engine writes the same shards."""
    nnz = np.concatenate([np.zeros(0, np.int64)] + [f["nnz"].astype(np.int64) for f in facts])
    rows = np.zeros(len(nnz) + 1, dtype=np.int64)
    np.cumsum(nnz, out=rows[1:])
    n = len(nnz)
    starts, last = [], None
    for f, first in zip(facts, np.asarray(first_chunk, dtype=np.int64).tolist()):
        s = f["doc_starts"]
        if len(s) and s[0] == 0 and last is not None and f["first_doc"] == last:
            s = s[1:]  # the previous partition's last document goes on here: no start
        starts.append(s.astype(np.int64) + first)
        last = f["last_doc"] if f["last_doc"] is not None else last
    starts = np.concatenate(starts) if starts else np.zeros(0, np.int64)
    bounds = [0]
    while bounds[-1] < n:
        at = int(np.searchsorted(starts, bounds[-1] + shard_chunks))
        bounds.append(int(starts[at]) if at < len(starts) else n)
    if len(bounds) == 1:
        bounds.append(0)  # no chunks: one empty shard, so the list is never empty
    return [[a, b, int(rows[a]), int(rows[b])] for a, b in zip(bounds[:-1], bounds[1:])]


def overlap(c0: int, c1: int, first: int, n: int) -> tuple[int, int] | None:
    """Chunks [c0, c1) of the corpus as positions in a partition of n chunks from `first`
    (None: none of them there)."""
    lo, hi = max(c0 - first, 0), min(c1 - first, n)
    return (lo, hi) if lo < hi else None


# --- readers: a run of shards, term-major ----------------------------------------------------

def file_identity(path: Path) -> list[tuple]:
    """(inode, size, mtime) of each file of an output: a file renamed over it changes them."""
    return [(st.st_ino, st.st_size, st.st_mtime_ns) for st in map(Path.stat, io.part_files(path))]


class ShardedPostings:
    """Postings columns of consecutive shards of 04_postings (None: the whole table, one
    shard, as an index written before shards reads), term-major, chunks numbered from the
    first shard's c0."""

    def __init__(self, path: Path, shards: list | None, n_terms: int, whole: bool = True):
        self.path, self.n_terms = Path(path), n_terms
        self.shards = [list(s) for s in shards] if shards else None
        self.whole = whole or self.shards is None  # the table's every row: read as it lies when one shard
        self.first = self.shards[0][0] if self.shards else 0
        self._dfs = None
        # A column read after loading (tf, on first need) must come from the file the rest
        # was loaded from.  The pipeline replaces its outputs by renaming new files over
        # them, so a later read by name finds the next run's postings: a server's old index
        # then failed mid-switch ("could not broadcast (8016,) into (8013,)"), and with equal
        # counts it would have scored with another run's tf, silently.
        self._files = file_identity(self.path)

    @property
    def rows(self) -> int:
        if self.shards is None:
            return io.row_count(self.path)
        return sum(r1 - r0 for _, _, r0, r1 in self.shards)

    def shard_df(self) -> list[np.ndarray]:
        """Each shard's df (postings per term), from its term_id column: found once."""
        if self._dfs is None:
            self._dfs = [np.bincount(self._column("term_id", np.int32, r0, r1), minlength=self.n_terms)
                         for _, _, r0, r1 in self.shards]
        return self._dfs

    def df(self) -> np.ndarray:
        """Postings per term over these shards."""
        return np.sum(self.shard_df(), axis=0) if len(self.shards) > 1 else self.shard_df()[0]

    def read(self, name: str, dtype, n: int, out: np.ndarray, threads: int = 1) -> np.ndarray:
        """Column `name` of these shards' n postings, term-major, into `out`."""
        if file_identity(self.path) != self._files:
            raise PipelineError(f"{self.path} was rewritten since this index was loaded: load the index again")
        if self.rows != n:
            raise PipelineError(f"{self.path}: {self.rows:,} postings where 04_terms.parquet's df adds up to "
                                f"{n:,}: rerun `python 04_indexing.py`")
        if self.whole and (self.shards is None or len(self.shards) == 1):
            return io.read_column(self.path, name, dtype, n, threads, out=out)
        if len(self.shards) == 1:
            _, _, r0, r1 = self.shards[0]
            self._column(name, dtype, r0, r1, out)  # straight into `out`: no second copy of the column
        else:
            # Shard by shard, each term's postings go after those of the shards before it:
            # within a term, chunks stay in corpus order, as one term-major table has them.
            dfs = self.shard_df()
            free = np.zeros(self.n_terms, dtype=np.int64)
            np.cumsum(np.sum(dfs, axis=0)[:-1], out=free[1:])
            for (_, _, r0, r1), df in zip(self.shards, dfs):
                local = np.zeros(self.n_terms, dtype=np.int64)
                np.cumsum(df[:-1], out=local[1:])
                dest = np.repeat(free - local, df)
                dest += np.arange(len(dest), dtype=np.int64)
                out[dest] = self._column(name, dtype, r0, r1)
                free += df
        if name == "chunk" and self.first:
            out -= dtype(self.first)  # chunks numbered from this run's first
        return out

    def _column(self, name: str, dtype, r0: int, r1: int, out: np.ndarray | None = None) -> np.ndarray:
        from pipekit.run.engine import RowRange, iter_rows

        out = np.empty(r1 - r0, dtype=dtype) if out is None else out
        at = 0
        for batch in iter_rows(RowRange(str(self.path), r0, r1), [name], batch_size=READ_ROWS):
            col = batch.column(0).to_numpy(zero_copy_only=False)
            out[at:at + len(col)] = col
            at += len(col)
        return out
