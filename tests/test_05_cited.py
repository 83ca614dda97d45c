"""Stage 05's hits read once (pipekit/retrieve/cited.py, io.take_table) give what the plain reads gave.

Before, stage 05 took its result rows' citation columns from 04_chunks read whole, their texts,
titles and links' format and anchor from 03_chunks in three passes.  `CitedRows` reads every
column a result row shows, at the rows asked, in one pass, and keeps them: any order of asks,
rows in any order, repeated or already held, must give the plain reads' values.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings, strategies as st

from pipekit.index.layout import chunk_table
from pipekit.retrieve.cited import CITED, CitedRows
from pipekit.run import io


def chunks_03(path, n: int, group: int, labels: bool = True, links: bool = True, parts: int = 1):
    """A 03_chunks-like file (or a dataset of `parts` part files) of n rows; its table."""
    rng = np.random.default_rng(n * 7 + group)
    page = [None if i % 5 == 0 else int(v) for i, v in enumerate(rng.integers(1, 40, n))]
    cols = {
        "chunk_id": [f"d{i // 3}#{i % 3}" for i in range(n)],
        "doc_id": [f"d{i // 3}" for i in range(n)],
        "heading": pa.array([None if i % 7 == 0 else f"Guide › Part {i % 4}" for i in range(n)], pa.string()),
        "text": [" ".join(["word"] * int(rng.integers(0, 9))) + f" {i}" for i in range(n)],
        "page_start": pa.array(page, pa.int32()),
        "page_end": pa.array(page, pa.int32()),
    }
    if labels:
        cols["page_label_start"] = cols["page_label_end"] = pa.array([None if p is None else f"p{p}" for p in page], pa.string())
    if links:
        cols["format"] = ["pdf" if i % 2 else "markdown" for i in range(n)]
        cols["anchor"] = pa.array([None if i % 3 else f"part-{i % 4}" for i in range(n)], pa.string())
    table = pa.table(cols)
    if parts == 1:
        pq.write_table(table, path, row_group_size=group)
    else:
        path.mkdir()
        cuts = np.linspace(0, n, parts + 1).astype(int)
        for p in range(parts):
            pq.write_table(table.slice(cuts[p], cuts[p + 1] - cuts[p]), path / f"part-{p:05d}.parquet",
                           row_group_size=group)
    return table


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 120), st.integers(1, 30), st.integers(1, 3), st.data())
def test_take_table_is_the_whole_tables_take(tmp_path_factory, n, group, parts, data):
    path = tmp_path_factory.mktemp("t") / "03_chunks.parquet"
    whole = chunks_03(path, n, group, parts=min(parts, n))
    rows = np.asarray(data.draw(st.lists(st.integers(0, n - 1), max_size=3 * n)), dtype=np.int64)
    columns = data.draw(st.lists(st.sampled_from(whole.column_names), min_size=1, unique=True))
    got = io.take_table(path, columns, rows, threads=data.draw(st.integers(1, 3)))
    assert got.equals(whole.select(columns).take(pa.array(rows)))
    assert io.take_rows(path, columns[0], rows) == whole.column(columns[0]).take(pa.array(rows)).to_pylist()


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 90), st.integers(1, 25), st.booleans(), st.booleans(), st.booleans(), st.data())
def test_cited_rows_are_04_chunks_rows_and_03_texts_whatever_the_asks(tmp_path_factory, n, group, labels, links, held,
                                                                       data):
    path = tmp_path_factory.mktemp("c") / "03_chunks.parquet"
    whole = chunks_03(path, n, group, labels, links)
    as_04 = chunk_table(0, whole, np.zeros(n, dtype=np.int32))  # what stage 04 writes of these rows
    cited = CitedRows(path, as_04.column("doc_id") if held else None)  # (held: the Index's doc_id, not read)
    for _ in range(data.draw(st.integers(1, 4))):  # asks one after another: held rows, new ones, both
        rows = np.asarray(data.draw(st.lists(st.integers(0, n - 1), max_size=2 * n)), dtype=np.int64)
        if data.draw(st.booleans()):  # the repeats' titles first, as stage 05 asks them
            assert cited.headings(rows) == as_04.column("heading").take(pa.array(rows)).to_pylist()
        got = cited.table(rows)
        at = pa.array(rows)
        for c in CITED:
            assert got.column(c).combine_chunks().equals(as_04.column(c).take(at).combine_chunks()), c
        assert got.column("text").to_pylist() == whole.column("text").take(at).to_pylist()
        for c in ("format", "anchor"):
            want = whole.column(c).take(at).to_pylist() if links else [None] * len(rows)
            assert got.column(c).to_pylist() == want, c
        assert cited.texts(rows) == got.column("text").to_pylist()
        assert cited.headings(rows) == as_04.column("heading").take(at).to_pylist()


def test_cited_rows_read_each_row_once(tmp_path, monkeypatch):
    # The headings the repeats' titles read (while the queries' postings are held: only they)
    # are not read again for the results; the rest of a row is read once, with them.
    path = tmp_path / "03_chunks.parquet"
    whole = chunks_03(path, 50, 4)
    asked = []
    real = io.take_table
    monkeypatch.setattr(io, "take_table", lambda p, cols, rows, *a: asked.append((cols, rows.tolist())) or real(p, cols, rows, *a))
    cited = CitedRows(path, whole.column("doc_id"))
    cited.headings(np.array([30, 2, 17, 2]))
    cited.table(np.array([17, 2, 30]))
    cited.table(np.array([30, 2]))  # all held: nothing read
    cited.table(np.array([49, 2, 0]))  # only 0 and 49, their headings with them
    rest = [c for c in ("chunk_id", "page_start", "page_end", "page_label_start", "page_label_end", "text",
                        "format", "anchor")]
    assert asked == [(["heading"], [2, 17, 30]), (rest, [2, 17, 30]), (["chunk_id", "heading"] + rest[1:], [0, 49])]
