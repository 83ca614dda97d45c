"""SPEC rule 10: nothing findable is dropped, and a document that gives no chunk is counted,
with its reason, in stage 03's summary (stage 01's names a PDF read with nothing to index).
"""
from __future__ import annotations

import json

import fpdf
import pandas as pd

from conftest import pipeline, run_script, write_config
from pipekit.run.stages import load_stage
from pipekit.chunk.unchunked import NoChunks, reason

chunking = load_stage(3)


def test_a_beir_record_with_a_title_and_no_text_gives_its_title_as_a_chunk():
    for text in ("", "  \n"):
        out = chunking.chunk_document(text, fmt="beir", title="Shock waves in nozzles")
        assert out == [{"heading_path": ["Shock waves in nozzles"], "text": "Shock waves in nozzles",
                        "start_char": 0, "end_char": 0, "page_start": None, "page_end": None}]
    assert chunking.chunk_document("", fmt="beir", title="") == []
    assert chunking.chunk_document("", fmt="beir", title=None) == []
    assert chunking.chunk_document("", fmt="markdown", title="A file's title is no record") == []


def test_the_reasons_and_the_account():
    assert reason("", "2 pages; no text layer on any page (scanned or image-only?): nothing to index") \
        == "no text layer (scanned or image-only PDF)"
    assert reason("", "only whitespace (and control characters): nothing left after cleaning") == "only whitespace"
    assert reason(" \n", None) == "only whitespace"
    assert reason("", None) == "empty"
    assert reason("--- page 1 ---\n", None) == "only page markers"
    a, b = NoChunks(shown=2), NoChunks(shown=2)
    a.add("x", "empty")
    b.add("y", "only whitespace")
    b.add("z", "empty")
    a.merge(b)
    a.merge(None)
    assert a.lines() == ["3 documents gave no chunk (2 empty, 1 only whitespace):",
                         "  x: empty", "  y: only whitespace", "  ... and 1 more"]
    assert NoChunks().lines() == []


def image_only_pdf(path):
    pdf = fpdf.FPDF()
    for _ in range(2):
        pdf.add_page()
        pdf.rect(20, 20, 120, 80, style="F")  # a "scan": marks on the page, no text layer
    pdf.output(str(path))
    return path


def test_every_document_without_a_chunk_is_named_with_its_reason(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "empty.md").write_text("", encoding="utf-8")
    (docs / "blank.md").write_text("  \n\n\t\n", encoding="utf-8")
    (docs / "ok.md").write_text("# Fine\n\nText.\n", encoding="utf-8")
    image_only_pdf(docs / "scan.pdf")
    cfg = write_config(tmp_path, documents={"input": str(docs)})
    first = run_script("01_documents.py", "--config", str(cfg)).stdout
    assert "1 read with nothing to index" in first and "scan.pdf: 2 pages; no text layer" in first
    run_script("02_preprocessing.py", "--config", str(cfg))
    third = run_script("03_chunking.py", "--config", str(cfg)).stdout
    assert "3 documents gave no chunk (1 empty, 1 no text layer (scanned or image-only PDF), 1 only whitespace):" in third
    # (each summary line is indented by two spaces, the names by two more)
    for line in ("    blank.md: only whitespace", "    empty.md: empty", "    scan.pdf: no text layer (scanned or image-only PDF)"):
        assert line in third.splitlines()
    assert pd.read_parquet(tmp_path / "out" / "03_chunks.parquet").doc_id.unique().tolist() == ["ok.md"]


def test_a_title_only_record_is_found_and_an_empty_one_is_named(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    records = [{"_id": "t", "title": "Supersonic inlet buzz", "text": ""},
               {"_id": "e", "title": "", "text": ""},
               {"_id": "b", "title": "Boundary layers", "text": "Laminar flow over a flat plate."}]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    cfg = write_config(tmp_path, documents={"input": str(corpus)}, retrieval={"queries": ["inlet buzz"]})
    proc = pipeline(cfg, tmp_path / "out")
    assert "1 document gave no chunk (1 empty):" in proc.stdout and "    e: empty" in proc.stdout.splitlines()
    results = pd.read_parquet(tmp_path / "out" / "05_results.parquet")
    assert results.doc_id.tolist() == ["t"] and results.text.tolist() == ["Supersonic inlet buzz"]


def test_cranfields_two_empty_records_are_counted_and_named(tmp_path, cranfield):
    cfg = write_config(tmp_path, documents={"input": str(cranfield / "corpus.jsonl")})
    for script in ("01_documents.py", "02_preprocessing.py"):
        run_script(script, "--config", str(cfg))
    lines = run_script("03_chunking.py", "--config", str(cfg)).stdout.splitlines()
    at = lines.index("  2 documents gave no chunk (2 empty):")
    assert lines[at + 1:at + 3] == ["    471: empty", "    995: empty"]
