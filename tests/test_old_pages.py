"""A sink hands back the page cache of the output it replaces as it writes (io.OldPages).

The advice (posix_fadvise DONTNEED) changes no byte anyone reads; what must hold is where
it is given: only the previous output's own bytes, never more of them than the new file has
grown to, never for a small output (a folder's, which its reruns read again), never once a
rerun copies the previous output's groups, and the previous output intact whatever happens
to the new one.  Outputs are made small here (io.OLD_PAGES_BYTES, io.GROUP_BYTES).
"""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipekit.run import io
from pipekit.run.incremental import PreviousRows


def rows(start: int, stop: int, tag: str = "v1") -> pa.Table:
    ids = [f"doc{i:05d}" for i in range(start, stop)]
    return pa.table({"doc_id": ids, "text": [f"{tag} text of {d} " * 40 for d in ids],
                     "n": pa.array(range(start, stop), pa.int64())})


@pytest.fixture
def advised(monkeypatch):
    """Every DONTNEED given, as (inode, offset, length); outputs count as large from 64 KB."""
    monkeypatch.setattr(io, "OLD_PAGES_BYTES", 64 << 10)
    monkeypatch.setattr(io, "GROUP_BYTES", 32 << 10)
    calls = []
    real = os.posix_fadvise

    def record(fd, offset, length, advice):
        if advice == os.POSIX_FADV_DONTNEED:
            calls.append((os.fstat(fd).st_ino, offset, length))
        return real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", record)
    return calls


def write(path, tables, run: str, commit: bool = True) -> io.ParquetSink:
    sink = io.ParquetSink(path, tables[0].schema.remove_metadata(), {"run": run})
    for t in tables:
        sink.write(t)
    sink.commit() if commit else sink.abort()
    return sink


def test_the_previous_output_is_handed_back_as_the_new_one_grows(tmp_path, advised):
    out = tmp_path / "02_preprocessed.parquet"
    write(out, [rows(0, 600)], "first")
    assert advised == []  # nothing to replace on a first run
    old_inode, old_size = out.stat().st_ino, out.stat().st_size
    write(out, [rows(i, i + 100, "v2") for i in range(0, 600, 100)], "second")
    assert advised and {ino for ino, _, _ in advised} == {old_inode}  # only the old file's pages
    # In order, each range after the one before, never past the old file's end.
    assert advised[0][1] == 0
    assert all(a[1] + a[2] == b[1] for a, b in zip(advised, advised[1:]))
    assert advised[-1][1] + advised[-1][2] <= old_size
    # The new output is what it would be without the advice.
    assert pq.ParquetFile(out).read().equals(rows(0, 600, "v2").cast(pq.read_schema(out).remove_metadata()))
    assert io.read_meta(out) == {"run": "second"}


def test_a_small_previous_output_keeps_its_pages(tmp_path, advised, monkeypatch):
    monkeypatch.setattr(io, "OLD_PAGES_BYTES", 1 << 30)
    out = tmp_path / "03_chunks.parquet"
    write(out, [rows(0, 600)], "first")
    write(out, [rows(0, 600, "v2")], "second")
    assert advised == []


def test_a_failed_write_leaves_the_previous_output_as_it_was(tmp_path, advised):
    out = tmp_path / "01_documents.parquet"
    write(out, [rows(0, 600)], "first")
    before = out.read_bytes()
    write(out, [rows(i, i + 100, "v2") for i in range(0, 600, 100)], "second", commit=False)
    assert advised  # its pages were handed back as the new file grew...
    assert out.read_bytes() == before  # ...and it is still the output, every byte
    assert not list(tmp_path.glob("*.tmp-*"))


def test_a_rerun_that_copies_the_previous_groups_stops_handing_them_back(tmp_path, advised):
    out = tmp_path / "02_preprocessed.parquet"
    write(out, [rows(0, 600)], "first")
    previous = PreviousRows(str(out))
    tables = [*previous.take(0, 300), rows(5000, 5001, "new"), *previous.take(300, 600)]
    advised.clear()
    sink = write(out, tables, "second")
    assert any(p[0] == "copied" for p in sink._pieces)  # (the rerun did copy groups as bytes)
    assert advised == []
    expected = pa.concat_tables([rows(0, 300), rows(5000, 5001, "new"), rows(300, 600)])
    got = pq.ParquetFile(out).read()
    assert got.equals(expected.cast(got.schema))


def test_no_fadvise_no_advice(tmp_path, monkeypatch):
    monkeypatch.setattr(io, "OLD_PAGES_BYTES", 64 << 10)
    out = tmp_path / "02_preprocessed.parquet"
    write(out, [rows(0, 600)], "first")
    monkeypatch.delattr(os, "posix_fadvise")
    assert io.OldPages.of(out) is None
    write(out, [rows(0, 600, "v2")], "second")
    assert pq.ParquetFile(out).read().column("text")[0].as_py().startswith("v2")
