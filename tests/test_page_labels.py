"""Printed page labels: 03_chunks and 05_results carry the labels printed on a chunk's first
and last page (SPEC: `page_label_start`, `page_label_end`), and every citation prints them,
with the physical page beside them where the two differ.

The oracle is pypdf, a second reader of a PDF's /PageLabels (stage 01 reads them with
PDFium): the labels of every chunk must be the ones pypdf reads for its pages.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import fpdf
import pypdf

from conftest import pipeline, run_script, write_config
from pipekit.read.pages import cite_pages, label_pages

R_INTRO = Path("/usr/share/R/doc/manual/R-intro.pdf")  # Debian's r-doc-pdf: T-1, T-2, i, ii, ..., 1, 2, ...

WORDS = "probe region vote window quorum site alarm shift handover runbook".split()


def labelled_pdf(path: Path, pages: int = 9) -> Path:
    """A title page "T-1", "T-2", roman front matter, then arabic pages from 1 (as the R
    manuals are labelled); each page a paragraph of 22 words, so a chunk of 60 words
    holds two pages."""
    pdf = fpdf.FPDF()
    pdf.set_font("helvetica", size=11)
    for n in range(1, pages + 1):
        pdf.add_page()
        if n == 1:
            pdf.set_page_label("D", "T-", 1)
        elif n == 3:
            pdf.set_page_label("r", "", 1)
        elif n == 5:
            pdf.set_page_label("D", "", 1)
        pdf.multi_cell(0, 6, f"Page {n}: " + " ".join(WORDS[(n * 7 + i) % len(WORDS)] for i in range(20)) + ".")
    pdf.output(str(path))
    return path


def test_label_pages_reads_each_page_in_its_documents_labels():
    labels = pa.array([["T-1", "i", "", "1"], None, ["a"]], pa.list_(pa.string()))
    pages = pa.array([1, 2, 3, 4, 5, None, 2, 1, 1], pa.int32())
    docs = np.array([0, 0, 0, 0, 0, 0, 1, 2, 2])
    assert label_pages(pages, docs, labels).to_pylist() == [
        "T-1", "i",
        "3",   # an empty label: the page number, so a citation has something to print
        "1",
        "5",   # past the document's labels: its number
        None,  # no page, no label
        "2",   # a document without labels (a form-feed text): its page numbers
        "a", "a"]
    assert label_pages(pa.array([], pa.int32()), np.array([], int), pa.array([], pa.list_(pa.string()))).to_pylist() == []


def test_a_citation_prints_the_label_and_the_physical_page_where_they_differ():
    assert cite_pages(None, None) == ""
    assert cite_pages(3, 3) == cite_pages(3, 3, "3", "3") == "p.3"
    assert cite_pages(3, 4, "3", "4") == "p.3–4"
    assert cite_pages(102, 102, "74", "74") == "p.74 (PDF page 102)"
    assert cite_pages(4, 7, "ii", "1") == "p.ii–1 (PDF pages 4–7)"


def test_chunks_results_and_citations_carry_the_labels_the_pages_print(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    pdf_path = labelled_pdf(docs / "manual.pdf")
    (docs / "report.txt").write_text("\f".join(f"page {n} of the report: quorum lost in region {n}.\n"
                                               for n in range(1, 4)), encoding="utf-8")
    (docs / "notes.md").write_text("# Notes\n\nA quorum note without pages.\n", encoding="utf-8")
    cfg = write_config(tmp_path, documents={"input": str(docs)},
                       chunking={"target": 60, "max": 90, "min": 0},
                       retrieval={"queries": ["quorum vote window", "handover runbook"], "top_k": 50})
    out = tmp_path / "out"
    proc = pipeline(cfg, out)
    chunks = pd.read_parquet(out / "03_chunks.parquet")
    printed = pypdf.PdfReader(pdf_path).page_labels
    assert printed[:6] == ["T-1", "T-2", "i", "ii", "1", "2"]  # the fixture is what it says

    manual = chunks[chunks.doc_id == "manual.pdf"]
    assert len(manual) >= 4 and (manual.page_start != manual.page_end).any()
    for c in manual.itertuples():
        assert (c.page_label_start, c.page_label_end) == (printed[int(c.page_start) - 1], printed[int(c.page_end) - 1])
    report = chunks[chunks.doc_id == "report.txt"]
    assert len(report) and all(c.page_label_start == str(int(c.page_start)) and c.page_label_end == str(int(c.page_end))
                               for c in report.itertuples())
    notes = chunks[chunks.doc_id == "notes.md"]
    assert notes.page_label_start.isna().all() and notes.page_label_end.isna().all()

    results = pd.read_parquet(out / "05_results.parquet")
    assert set(results.doc_id) >= {"manual.pdf", "report.txt", "notes.md"}
    joined = results.merge(chunks, on="chunk_id", suffixes=("", "_03"))
    for side in ("start", "end"):
        col = f"page_label_{side}"
        assert joined[col].fillna("-").tolist() == joined[f"{col}_03"].fillna("-").tolist()
    # Stage 05's printed results and `python -m pipekit search` cite the label, and the PDF's page.
    hit = joined[(joined.doc_id == "manual.pdf") & (joined.page_start == joined.page_end)
                 & (joined.page_start >= 5)].iloc[0]
    page = int(hit.page_start)
    cite = f"p.{hit.page_label_start} (PDF page {page})"
    assert cite == f"p.{page - 4} (PDF page {page})"  # arabic 1 is the fifth page
    shown = run_script("-m", "pipekit", "search", hit.query, "-k", "50", "--set", f"paths.output={out}").stdout
    assert cite in shown
    assert "(PDF page" in proc.stdout


def test_every_chunk_of_the_r_manual_carries_the_labels_its_pdf_prints(tmp_path):
    # The real case: R's manual is labelled T-1, T-2, i, ii, ..., then 1, 2, ... (113 pages).
    if not R_INTRO.exists():
        pytest.skip(f"{R_INTRO} is not installed (apt-get install r-doc-pdf)")
    cfg = write_config(tmp_path, documents={"input": str(R_INTRO)})
    for script in ("01_documents.py", "02_preprocessing.py", "03_chunking.py"):
        run_script(script, "--config", str(cfg))
    chunks = pd.read_parquet(tmp_path / "out" / "03_chunks.parquet")
    printed = pypdf.PdfReader(R_INTRO).page_labels
    paged = chunks.dropna(subset=["page_start"])
    assert len(paged) == len(chunks) > 100
    got = list(zip(paged.page_label_start, paged.page_label_end))
    want = [(printed[int(a) - 1], printed[int(b) - 1]) for a, b in zip(paged.page_start, paged.page_end)]
    assert got == want
    assert {"T-1", "i", "1"} <= set(paged.page_label_start)
