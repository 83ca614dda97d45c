"""The rows of 03_chunks.parquet that stage 05's results name, each read once (issue 47).

A result row shows its chunk's id, document, heading, pages, text and link (made from the
document's format and the heading's anchor); the repeats (pipekit/retrieve/repeats.py) read
the first hits' headings while the queries are answered, and some of their texts.  Stage 05 read
those in three passes over 03_chunks, each through every row group its hits fall in (10,000
hits of 1,000 queries touch all 350 groups at a million passages): the headings for the titles,
then the texts, then `format` and `anchor` for the links as two whole columns; and it held
04_chunks' chunk_id, heading and page columns whole (read after the queries) to take the hits'
rows of them.  Those were ~0.6 s of stage 05's 2.5-3 s at a million passages (bench/README.md,
branch q05).

`CitedRows` reads every column a result row cites, at the rows asked, in one pass over their
groups (io.take_table: a group read once for all its columns, one per core), and keeps them:
the first ask (the repeats' titles of the first hits, or the results) reads nearly all the
rows the results then want; a later ask reads only rows not held yet (a collapse's deeper
hits, their repeats).  ~600 bytes a row held (10,000 hits: ~6 MB), where a whole column of
headings was 33 MB.

The values are 04_chunks' own: stage 04 copies chunk_id, doc_id, heading and the page columns
from this very file, converted by pipekit/index/layout.chunk_table, which is applied to the rows
read here too; and stage 05 refuses a 03_chunks other than the one its index was built from
(its fingerprint).  So 05_results.parquet is the same, byte for byte in its values.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from pipekit.index.layout import chunk_table
from pipekit.retrieve.ranks import sorted_unique
from pipekit.run import io

# 03_chunks' columns a result row cites: 04_chunks' citation columns (chunk_table's input) and
# the text, format and anchor (these two made null where an older file lacks them: links.py).
CITED = ("chunk_id", "doc_id", "heading", "page_start", "page_end", "page_label_start", "page_label_end")
SHOWN = CITED + ("text", "format", "anchor")


class CitedRows:
    """Rows of 03_chunks (`path`) with the columns of SHOWN, read when first asked and kept.
    `doc_ids`: every row's doc_id, where the caller holds them (stage 05's Index: 04_chunks'
    own), taken from there rather than read (each string column of 03_chunks read at the hits'
    rows cost ~0.07 s of CPU at a million passages: its 350 row groups decoded).

    While the queries are answered (their postings held: stage 05's peak) only the headings are
    read, for the repeats' titles, and kept (`headings`); a text the repeats compare is read
    alone (`texts`, few).  The rest of a row is read with the results (`table`), after the
    postings are dropped: read along with the titles, the texts and their reads' buffers were
    +30 MB on stage 05's peak at a million passages."""

    def __init__(self, path, doc_ids: pa.ChunkedArray | pa.Array | None = None):
        self.path, self._doc_ids = path, doc_ids
        have = set(io.schema(path).names) - ({"doc_id"} if doc_ids is not None else set())
        self._read_columns = [c for c in SHOWN if c in have]
        self._rows = np.zeros(0, np.int64)  # the rows held whole, ascending
        self._table: pa.Table | None = None  # their SHOWN columns, in that order
        self._heading_rows = np.zeros(0, np.int64)  # the rows whose heading alone is held, ascending
        self._headings = pa.array([], pa.string())  # ... and those headings

    def table(self, rows) -> pa.Table:
        """The rows (numbers, any order, repeats allowed), each with the SHOWN columns."""
        rows = np.asarray(rows, dtype=np.int64)
        self._read(rows)
        return self._table.take(pa.array(np.searchsorted(self._rows, rows)))

    def texts(self, rows) -> list:
        """The rows' texts (Repeats' `texts_of`: only where titles are shared, few)."""
        return io.take_rows(self.path, "text", rows)

    def headings(self, rows) -> list:
        """The rows' heading trails (Repeats' `headings_of`), kept for `table`."""
        rows = np.asarray(rows, dtype=np.int64)
        need = _missing(sorted_unique(rows), self._heading_rows)
        if len(need):
            got = io.take_table(self.path, ["heading"], need).column(0).combine_chunks()
            self._heading_rows, self._headings = _merged(self._heading_rows, self._headings, need, got)
        return self._headings.take(pa.array(np.searchsorted(self._heading_rows, rows))).to_pylist()

    def _read(self, rows: np.ndarray) -> None:
        need = _missing(sorted_unique(rows), self._rows)
        if len(need) == 0 and self._table is not None:
            return
        heads = len(_missing(need, self._heading_rows)) == 0  # every heading held: not read again
        got = io.take_table(self.path, [c for c in self._read_columns if not (heads and c == "heading")], need)
        if heads:
            got = got.append_column("heading", self._headings.take(pa.array(np.searchsorted(self._heading_rows, need))))
        if self._doc_ids is not None:
            got = got.append_column("doc_id", self._doc_ids.take(pa.array(need)))
        got = self._cited(got)
        if self._table is None:
            self._rows, self._table = need, got
        else:
            self._rows, self._table = _merged(self._rows, self._table, need, got)

    def _cited(self, read: pa.Table) -> pa.Table:
        """03's rows as 05_results shows them: the citation columns as 04_chunks holds them."""
        n = read.num_rows
        as_04 = chunk_table(0, read, np.zeros(n, dtype=np.int32))
        cols = {c: as_04.column(c) for c in CITED}
        cols["text"] = read.column("text").cast(pa.string())
        for c in ("format", "anchor"):
            cols[c] = read.column(c) if c in read.column_names else pa.nulls(n, pa.string())
        return pa.table(cols)


def _missing(need: np.ndarray, held: np.ndarray) -> np.ndarray:
    """The rows of `need` (ascending) not in `held` (ascending)."""
    if len(held) == 0:
        return need
    at = np.minimum(np.searchsorted(held, need), len(held) - 1)
    return need[held[at] != need]


def _merged(rows: np.ndarray, values, more: np.ndarray, more_values):
    """Held rows and their values (an Arrow array or table) with more rows (none held yet) joined, ascending."""
    both = np.concatenate([rows, more])
    order = pa.array(np.argsort(both, kind="stable"))
    joined = (pa.concat_tables([values, more_values]) if isinstance(values, pa.Table) else
              pa.concat_arrays([values, more_values]))
    return both.take(order.to_numpy()), joined.take(order)
