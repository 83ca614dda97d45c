"""`python -m pipekit show`: schema, row count, provenance and rows of any stage output."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipekit.tools import show
from pipekit.run.io import ParquetSink
from pipekit.run.stages import REPO_ROOT

META = {
    "stage": "03_chunking",
    "fingerprint": "f00dfeed12345678",
    "upstream_file": "02_preprocessed.parquet",
    "written_at": "2026-12-01T08:00:00+00:00",
    "inputs": {"config": {"chunking.target": 400, "chunking.unit": "words"},
               "upstream": "abcabcabcabcabca", "external": None, "code": "c0dec0dec0dec0de"},
    "corpus": {"N": 12, "analyzer": {"stemmer": "english", "stopwords": "none"}},
}


def make_output(path: Path, n: int = 10, meta: dict | None = META) -> Path:
    table = pa.table({
        "chunk_id": [f"doc.md#{i}" for i in range(n)],
        "heading_path": [["Guide", f"Part {i}"] for i in range(n)],
        "text": [("word " * (i * 40)).strip() or "short" for i in range(n)],
        "page_start": pa.array([i if i % 2 else None for i in range(n)], pa.int32()),
        "score": [1.0 / (i + 1) for i in range(n)],
    })
    if meta is None:
        pq.write_table(table, path)
    else:
        sink = ParquetSink(path, table.schema, meta)
        sink.write(table)
        sink.commit()
    return path


def test_prints_schema_rows_and_provenance(tmp_path):
    out = show.show_file(make_output(tmp_path / "03_chunks.parquet"), rows=3, term_width=100)
    assert "10 rows · 5 columns" in out
    # every column with its Arrow type
    for line in ("chunk_id      string", "heading_path  list<element: string>", "page_start    int32",
                 "score         double"):
        assert line in out
    # the provenance record, field by field
    assert "written by" in out and "03_chunking at 2026-12-01T08:00:00+00:00" in out
    assert "02_preprocessed.parquet (fingerprint abcabcabcabcabca)" in out
    assert "chunking.target = 400" in out and 'chunking.unit = "words"' in out
    assert "c0dec0dec0dec0de" in out and "corpus.analyzer.stemmer" in out
    assert "first 3 of 10 rows" in out
    assert "doc.md#2" in out and "doc.md#3" not in out


def test_columns_selects_and_orders(tmp_path):
    out = show.show_file(make_output(tmp_path / "x.parquet"), rows=2, columns=["score", "chunk_id"],
                         term_width=120)
    rows_part = out.split("first 2 of 10 rows")[1]
    header = rows_part.splitlines()[1]
    assert header.split() == ["score", "chunk_id"]
    assert "heading_path" not in rows_part and "Guide" not in rows_part


def test_unknown_column_names_the_real_ones(tmp_path, capsys):
    path = make_output(tmp_path / "x.parquet")
    assert show.main([str(path), "--columns", "chunk_id,nope"]) == 1
    err = capsys.readouterr().err
    assert "'nope'" in err and "chunk_id, heading_path, text, page_start, score" in err
    assert "Traceback" not in err


def test_long_text_is_shortened_with_its_length(tmp_path):
    out = show.show_file(make_output(tmp_path / "x.parquet"), rows=10, columns=["text"], term_width=100)
    longest = "word " * 360
    assert f"({len(longest.strip()):,} chars)" in out
    assert longest.strip() not in out
    assert max(len(line) for line in out.splitlines() if "word" in line) <= 100


def test_wide_rows_fall_back_to_one_field_per_line(tmp_path):
    out = show.show_file(make_output(tmp_path / "x.parquet"), rows=2, term_width=60)
    assert "── row 0" in out and "── row 1" in out
    block = out.split("── row 1")[1]
    assert any(line.split()[:2] == ["chunk_id", "doc.md#1"] for line in block.splitlines())
    assert any(line.split()[:2] == ["page_start", "1"] for line in block.splitlines())


def test_rows_zero_prints_only_schema_and_provenance(tmp_path):
    out = show.show_file(make_output(tmp_path / "x.parquet"), rows=0)
    assert "schema" in out and "provenance" in out
    assert "first" not in out and "doc.md#0" not in out


def test_file_without_provenance_says_so(tmp_path):
    out = show.show_file(make_output(tmp_path / "plain.parquet", meta=None), rows=1)
    assert "not written by a pipeline stage" in out


def test_explain_cells_read_as_term_contributions():
    value = [{"term": "backup", "tf": 3, "df": 2, "idf": 1.9, "norm": 0.8, "contribution": 2.25},
             {"term": "slot", "tf": 1, "df": 1, "idf": 2.5, "norm": 0.8, "contribution": 1.5}]
    assert show.cell(value) == "backup=2.250 + slot=1.500"


def test_missing_stage_output_says_what_to_run(tmp_path, capsys):
    assert show.main([str(tmp_path / "03_chunks.parquet")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "does not exist" in err and "python run_pipeline.py --to 3" in err


def test_not_parquet_is_an_error_not_a_traceback(tmp_path, capsys):
    bad = tmp_path / "05_results.trec"
    bad.write_text("1 Q0 doc 1 2.5 pipekit\n")
    assert show.main([str(bad)]) == 1
    err = capsys.readouterr().err
    assert "not a readable Parquet file" in err and "Traceback" not in err


def test_folder_lists_each_output(tmp_path):
    make_output(tmp_path / "03_chunks.parquet", n=7)
    make_output(tmp_path / "05_results.parquet", n=3, meta={**META, "stage": "05_retrieval"})
    out = show.show_folder(tmp_path)
    lines = out.splitlines()
    chunks = next(line for line in lines if "03_chunks.parquet" in line and "rows" in line)
    results = next(line for line in lines if "05_results.parquet" in line and "rows" in line)
    assert "7 rows" in chunks and "03_chunking" in chunks
    assert "3 rows" in results and "05_retrieval" in results


def test_module_entry_point(tmp_path):
    path = make_output(tmp_path / "03_chunks.parquet", n=4)
    done = subprocess.run([sys.executable, "-m", "pipekit", "show", str(path), "--rows", "1"],
                          cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "4 rows" in done.stdout and "doc.md#0" in done.stdout and "doc.md#1" not in done.stdout
    bad = subprocess.run([sys.executable, "-m", "pipekit", "shwo", str(path)],
                         cwd=REPO_ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown command 'shwo'" in bad.stderr


@pytest.mark.parametrize("n", [0, 1])
def test_tiny_files(tmp_path, n):
    out = show.show_file(make_output(tmp_path / "x.parquet", n=n), rows=5)
    assert f"{n} rows" in out
    assert ("(no rows)" in out) == (n == 0)
