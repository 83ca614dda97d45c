"""pipekit/read/beir_ahead.py: a BEIR corpus's tables read while stage 01's listing hashes the
file are the tables the stage makes itself; they are used only for the same arguments and the
same file, a bad line's error comes out as the stage's own, and a stage run that took them
writes what a run without them writes."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipekit.cli import run_stage
from pipekit.read import beir_ahead, fastpath
from pipekit.run.config import load_config
from pipekit.run.errors import PipelineError
from pipekit.run.stages import load_stage

S1 = load_stage(1)  # sets beir_ahead.tables, as the stage's command does


def _corpus(tmp_path: Path, n: int = 9000, bad_at: int | None = None) -> Path:
    lines = [json.dumps({"_id": f"d{i}", "title": f"t {i}" if i % 3 else "", "text": "word " * (i % 40)})
             for i in range(n)]
    if bad_at is not None:
        lines[bad_at] = '{"_id": "x", "text": '
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _listing(path: Path) -> dict:
    st = os.stat(path)
    return {"files": {path.name: [st.st_size, st.st_mtime_ns, st.st_ctime_ns, "hash|where"]}}


def _plain(path: Path) -> list[pa.Table]:
    return list(fastpath.beir_tables(path, None, 0, None, S1.SCHEMA, S1.BATCH_ROWS, S1.BATCH_CHARS, 2))


def test_tables_read_ahead_are_the_stages(tmp_path, monkeypatch):
    monkeypatch.setattr(beir_ahead, "AHEAD_BYTES", 1 << 16)  # the reading waits for the stage after one table
    path = _corpus(tmp_path)
    assert beir_ahead.begin(path, None, 2)
    beir_ahead.listed(_listing(path))
    ahead = beir_ahead.take(str(path), None, 0, None, 2)
    assert ahead is not None
    got, want = list(ahead), _plain(path)
    assert [t.num_rows for t in got] == [t.num_rows for t in want] and len(want) > 1
    assert pa.concat_tables(got).equals(pa.concat_tables(want))
    assert beir_ahead.take(str(path), None, 0, None, 2) is None  # taken once


def test_not_taken_for_other_arguments_another_listing_or_a_changed_file(tmp_path):
    path = _corpus(tmp_path, n=50)
    beir_ahead.begin(path, None, 2)
    beir_ahead.listed(_listing(path))
    assert beir_ahead.take(str(path), 1000, 0, None, 2) is None  # another max_bytes
    beir_ahead.begin(path, None, 2)
    beir_ahead.listed(_listing(path))
    assert beir_ahead.take(str(path), None, 0, 100, 2) is None  # a part of the corpus
    beir_ahead.begin(path, None, 2)
    beir_ahead.listed({"files": {path.name: [1, 2, 3, "hash|where"]}})  # the listing stamped another file
    assert beir_ahead.take(str(path), None, 0, None, 2) is None
    beir_ahead.begin(path, None, 2)
    assert beir_ahead.take(str(path), None, 0, None, 2) is None  # no listing seen
    beir_ahead.begin(path, None, 2)
    beir_ahead.listed(_listing(path))
    with path.open("a") as f:  # changed after the reading began
        f.write(json.dumps({"_id": "late", "text": "x"}) + "\n")
    assert beir_ahead.take(str(path), None, 0, None, 2) is None


def test_a_bad_line_is_reported_where_and_as_the_stage_reports_it(tmp_path, monkeypatch):
    monkeypatch.setattr(fastpath, "BLOCK_BYTES", 1 << 14)  # many blocks: tables come before the bad one
    path = _corpus(tmp_path, bad_at=8500)

    def read(tables) -> tuple[int, str]:
        rows = 0
        with pytest.raises(PipelineError) as err:
            for t in tables:
                rows += t.num_rows
        return rows, str(err.value)

    plain = read(fastpath.beir_tables(path, None, 0, None, S1.SCHEMA, S1.BATCH_ROWS, S1.BATCH_CHARS, 2))
    beir_ahead.begin(path, None, 2)
    beir_ahead.listed(_listing(path))
    assert read(beir_ahead.take(str(path), None, 0, None, 2)) == plain
    assert plain[0] > 0 and "line 8501" in plain[1]


def test_a_stage_run_that_took_them_writes_the_same(tmp_path, monkeypatch):
    path = _corpus(tmp_path)
    taken = []
    take = beir_ahead.take
    monkeypatch.setattr(beir_ahead, "take", lambda *a: taken.append(r := take(*a)) or r)

    def run(out: Path) -> pa.Table:
        cfg = load_config(None, [f"documents.input={path}", f"paths.output={out}"])
        run_stage(1, S1.run, cfg, quiet=True, force=True)
        return pq.read_table(out / "01_documents.parquet")

    ahead = run(tmp_path / "ahead")
    assert taken and taken[-1] is not None
    monkeypatch.setattr(beir_ahead, "tables", None)  # no early start: the stage reads the file itself
    plain = run(tmp_path / "plain")
    assert taken[-1] is None
    assert ahead.equals(plain)
