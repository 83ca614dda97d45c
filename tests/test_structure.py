"""Structure by format (SPEC rule 9): plain text and PDF have no heading syntax, a PDF's
outline gives its headings, page furniture leaves the text in stage 02.

pipekit/chunk/structure.py (plain paragraphs, outline placement, CSV records) and
pipekit/read/pages.py (outline reading, furniture) on made text, and end to end on a PDF
generated here with fpdf2: an outline, running headers, page numbers, and a shell
comment printed on a page.
"""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from conftest import run_script, write_config
from pipekit.read.pages import read_outline, strip_furniture
from pipekit.run.stages import load_stage
from pipekit.chunk.csv_chunks import csv_records
from pipekit.chunk.structure import place_outline, plain_blocks, title_key
from test_03_oracle import check_spans

chunking = load_stage(3)
S = chunking.Settings


def para(n, word="word"):
    return " ".join(f"{word}{i}" for i in range(n))


# -- plain text: a `#` line is text --------------------------------------------------------

TXT = "# install the tool first\nthen run it\n\n#!/bin/sh is a shebang\n\n## Not a heading either\n"


def test_plain_blocks_are_paragraphs_and_markers_only():
    lines = ("--- page 1 ---\n" + TXT).split("\n")
    blocks, marks = plain_blocks(lines, markers=True)
    assert [b[:3] for b in blocks] == [["marker", 0, 1], ["para", 1, 3], ["para", 4, 5], ["para", 6, 7]]
    assert marks == [(0, 1)]
    blocks, marks = plain_blocks(lines, markers=False)  # keep: the marker is a text line
    assert [b[:3] for b in blocks] == [["para", 0, 3], ["para", 4, 5], ["para", 6, 7]] and marks == []


@pytest.mark.parametrize("fmt", ["text", "pdf"])
def test_hash_lines_in_plain_text_and_pdf_text_are_not_headings(fmt):
    out = chunking.chunk_document(TXT, fmt=fmt, settings=S(target=4, max=8, min=0))
    assert len(out) >= 2 and all(c["heading_path"] == [] for c in out)
    assert check_spans(TXT, out, S(target=4, max=8, min=0), fmt=fmt) == []
    # the same text as Markdown does have headings: the format decides, not the text
    md = chunking.chunk_document(TXT, fmt="markdown", settings=S(target=4, max=8, min=0))
    assert ["install the tool first"] in [c["heading_path"] for c in md]


# -- outline placement ------------------------------------------------------------------------

PAGED = ("--- page 1 ---\nACME MANUAL\n\n1. Overview\n" + para(30, "ov") + "\n\n1.1 Scope of\nthis manual\n"
         + para(30, "sc") + "\n--- page 2 ---\n" + para(20, "cont") + "\n\nDETAILS\n" + para(30, "de")
         + "\n--- page 3 ---\n" + para(30, "ap") + "\n")
OUTLINE = [{"level": 1, "title": "Overview", "page": 1},
           {"level": 2, "title": "1.1 Scope of this manual", "page": 1},
           {"level": 1, "title": "2 Details", "page": 2},
           {"level": 1, "title": "Appendix", "page": 3},  # not printed on its page
           {"level": 1, "title": "Nowhere", "page": 9}]   # a page the text does not have


def test_title_key_ignores_case_spacing_punctuation_and_section_numbers():
    assert title_key("1.2  Getting Started!") == title_key("getting started") == "gettingstarted"
    assert title_key("Chapter 3: Pumps") == title_key("PUMPS")


def test_outline_entries_are_placed_at_the_lines_that_print_them():
    lines = PAGED.split("\n")
    blocks, _ = plain_blocks(lines, markers=True)
    heads = [b for b in place_outline(lines, blocks, OUTLINE) if b[0] == "heading"]
    assert [(lines[b[1]] if b[2] > b[1] else None, b[2] - b[1], b[3]) for b in heads] == [
        ("1. Overview", 1, (1, "Overview")),
        ("1.1 Scope of", 2, (2, "1.1 Scope of this manual")),  # a title printed over two lines
        ("DETAILS", 1, (1, "2 Details")),
        (None, 0, (1, "Appendix")),  # not printed: a section opens where its page starts
    ]
    assert heads[3][1] == lines.index("--- page 3 ---") + 1


def test_outline_headings_reach_heading_paths_and_keep_every_rule():
    s = S(target=25, max=40, min=0)
    out = chunking.chunk_document(PAGED, fmt="pdf", outline=OUTLINE, settings=s)
    path_of = {}
    for c in out:
        for w in ("ov0", "sc0", "cont0", "de0", "ap0"):
            if w + " " in c["text"]:
                path_of[w] = c["heading_path"]
    assert path_of == {"ov0": ["Overview"], "sc0": ["Overview", "1.1 Scope of this manual"],
                       "cont0": ["Overview", "1.1 Scope of this manual"],  # the section goes on over the page
                       "de0": ["2 Details"], "ap0": ["Appendix"]}
    assert [c["heading_path"] for c in out][0] == []  # the running title before the first entry
    lines = PAGED.split("\n")
    heads = [(lines.index("1. Overview"), 1, "Overview", lines.index("1. Overview") + 1),
             (lines.index("1.1 Scope of"), 2, "1.1 Scope of this manual", lines.index("1.1 Scope of") + 2),
             (lines.index("DETAILS"), 1, "2 Details", lines.index("DETAILS") + 1)]
    paths = {tuple(c["heading_path"]) for c in out if c["start_char"] < PAGED.index("--- page 3 ---")}
    assert ("Appendix",) not in paths
    early = [c for c in out if c["start_char"] < PAGED.index("--- page 3 ---")]
    assert check_spans(PAGED[:PAGED.index("--- page 3 ---")], early, s, fmt="pdf", headings=heads) == []


@pytest.mark.parametrize("mode", ["track", "strip", "keep"])
@pytest.mark.parametrize("unit,target", [("words", 25), ("chars", 150), ("tokens", 40)])
def test_outline_chunks_keep_spans_pages_and_ceilings_in_every_mode(mode, unit, target):
    s = S(target=target, max=target * 2, min=target // 5, unit=unit, page_markers=mode)
    out = chunking.chunk_document(PAGED, fmt="pdf", outline=OUTLINE, settings=s)
    lines = PAGED.split("\n")
    heads = [(lines.index("1. Overview"), 1, "Overview", lines.index("1. Overview") + 1),
             (lines.index("1.1 Scope of"), 2, "1.1 Scope of this manual", lines.index("1.1 Scope of") + 2),
             (lines.index("DETAILS"), 1, "2 Details", lines.index("DETAILS") + 1),
             (lines.index("--- page 3 ---") + 1, 1, "Appendix", lines.index("--- page 3 ---") + 1)]
    assert check_spans(PAGED, out, s, fmt="pdf", headings=heads) == []


def test_a_pdf_without_an_outline_keeps_page_only_citations():
    out = chunking.chunk_document(PAGED, fmt="pdf", settings=S(target=25, max=40, min=0))
    assert all(c["heading_path"] == [] for c in out) and {c["page_start"] for c in out} == {1, 2, 3}


# -- page furniture -----------------------------------------------------------------------------

def _pages(n, header=True, footer=True):
    out = []
    for p in range(1, n + 1):
        top = "Shared MIME-info Database\n" if header and p > 1 else ""
        bottom = f"\nPage {p} of {n}" if footer else ""
        out.append(f"--- page {p} ---\n{top}Body {'abcdefgh'[p]} starts here, in 19{p * 7}.\n"
                   f"{para(10, f'p{p}w')}{bottom}\n")
    return "".join(out)


def test_running_headers_and_page_numbers_are_furniture():
    text, n = strip_furniture(_pages(5))
    assert n == 4 + 5
    assert "Shared MIME-info" not in text and "of 5" not in text
    assert text.count("starts here") == 5  # the first lines of the body stay: they differ


def test_bare_page_numbers_and_roman_numerals_go():
    text = "".join(f"--- page {p} ---\n{num}\nText {'abcdef'[p]} here.\n{para(5, 'xyzuvw'[p])}\n"
                   for p, num in enumerate(["i", "ii", "1", "2", "3"], 1))
    out, n = strip_furniture(text)
    assert n == 5 and "\nii\n" not in out and out.count("Text ") == 5


def test_no_furniture_in_short_documents_or_in_the_middle_of_pages():
    assert strip_furniture(_pages(2)) == (_pages(2), 0)
    # (numbers that do not run with the page are words like any other)
    middle = "".join(f"--- page {p} ---\nTop {p * 7}\nA {'abcdef'[p]}\nSame line in the middle\n"
                     f"B {'uvwxyz'[p]}\nEnd {p * 3}\n" for p in range(1, 6))
    assert strip_furniture(middle) == (middle, 0)


def test_stage_02_counts_what_it_removes():
    pre = load_stage(2)
    text, n = pre.clean_document(_pages(5).replace("\n", "\r\n"))
    assert n == 9 and "Page 3 of 5" not in text and "\r" not in text


# -- CSV records ----------------------------------------------------------------------------------

def test_csv_records_keep_quoted_newlines_inside_one_record():
    lines = 'a,b\n1,"two\nlines"\n\n3,"say ""hi"""\n'.split("\n")
    assert csv_records(lines) == [(0, 1), (1, 3), (4, 5)]


# -- a generated PDF end to end ---------------------------------------------------------------------

def _make_pdf(path):
    fpdf = pytest.importorskip("fpdf", reason="fpdf2 (requirements-dev.txt) writes the test PDF")

    class Doc(fpdf.FPDF):
        def header(self):
            self.set_font("helvetica", "I", 8)
            self.cell(0, 5, "ACME Pump Station Manual - revision 7")
            self.ln(8)

        def footer(self):
            self.set_y(-12)
            self.set_font("helvetica", "", 8)
            self.cell(0, 5, f"Page {self.page_no()}", align="C")

    pdf = Doc(format="A4")
    sections = [("Introduction", 0, "The station moves water uphill. " * 12),
                ("Starting the pumps", 1, "Open the inlet valve before the motor. " * 10),
                ("Configuration file", 0, "# update-mime-database command. DO NOT EDIT!\n"
                                          "Each line names one pump and its limit. " * 6),
                ("Stopping the pumps", 1, "Close the outlet valve first. " * 10)]
    for title, level, body in sections:
        pdf.add_page()
        pdf.start_section(title, level=level)
        pdf.set_font("helvetica", "B", 13)
        pdf.multi_cell(0, 7, title)
        pdf.ln(3)
        pdf.set_font("helvetica", "", 10)
        pdf.multi_cell(0, 5, body)
    pdf.output(str(path))


def test_a_generated_pdf_gets_outline_headings_and_loses_its_furniture(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    _make_pdf(docs / "manual.pdf")
    cfg = write_config(tmp_path, documents={"input": str(docs)}, chunking={"target": 40, "max": 80, "min": 5})
    proc = run_script("run_pipeline.py", "--config", str(cfg), "--to", "3")
    assert "8 page furniture lines" in proc.stdout + proc.stderr  # 4 headers, 4 page numbers
    out = tmp_path / "out"
    row = pq.read_table(out / "01_documents.parquet").to_pylist()[0]
    assert [(e["level"], e["title"], e["page"]) for e in row["outline"]] == [
        (1, "Introduction", 1), (2, "Starting the pumps", 2), (1, "Configuration file", 3),
        (2, "Stopping the pumps", 4)]
    assert "ACME Pump Station Manual" in row["text"]
    cleaned = pq.read_table(out / "02_preprocessed.parquet").to_pylist()[0]["text"]
    assert "ACME Pump Station Manual" not in cleaned and "Page 2" not in cleaned
    assert "# update-mime-database command" in cleaned  # content, not furniture
    chunks = pq.read_table(out / "03_chunks.parquet").to_pylist()
    paths = [c["heading_path"] for c in chunks]
    assert ["Introduction"] in paths and ["Introduction", "Starting the pumps"] in paths
    assert ["Configuration file", "Stopping the pumps"] in paths
    assert not any("update-mime-database" in h for p in paths for h in p)
    for c in chunks:
        assert "ACME Pump" not in c["text"]
        if "Close the outlet valve" in c["text"]:
            assert c["heading_path"] == ["Configuration file", "Stopping the pumps"] and c["page_start"] == 4
    assert check_spans(cleaned, chunks, S(target=40, max=80, min=5), fmt="pdf",
                       headings=_printed(cleaned, row["outline"])) == []


def _printed(text, outline):
    """Where each outline title is printed: (line, level, title, end_line), by plain search."""
    lines = text.split("\n")
    out = []
    for e in outline:
        j = lines.index(e["title"])
        out.append((j, e["level"], e["title"], j + 1))
    return out


def test_read_outline_of_a_pdf_without_one_is_none(tmp_path):
    fpdf = pytest.importorskip("fpdf", reason="fpdf2 (requirements-dev.txt) writes the test PDF")
    import pypdfium2 as pdfium

    pdf = fpdf.FPDF()
    pdf.add_page()
    pdf.set_font("helvetica", "", 10)
    pdf.cell(0, 5, "no bookmarks here")
    path = tmp_path / "plain.pdf"
    pdf.output(str(path))
    doc = pdfium.PdfDocument(str(path))
    try:
        assert read_outline(doc) is None
    finally:
        doc.close()


def _paragraphs_line_by_line(lines, markers):
    """The reference: plain_blocks as a step per line (what it was before issue 15)."""
    from pipekit.chunk.markdown_blocks import MARKER

    blocks, marks, cur = [], [], None
    for i, ln in enumerate(lines):
        if not ln.strip():
            cur = None
        elif markers and ln.startswith("--- page ") and MARKER.fullmatch(ln.rstrip("\r")):
            marks.append((i, int(MARKER.fullmatch(ln.rstrip("\r")).group(1))))
            blocks.append(["marker", i, i + 1, None])
            cur = None
        elif cur is None:
            cur = ["para", i, i + 1, None]
            blocks.append(cur)
        else:
            cur[2] = i + 1
    return blocks, marks


def test_paragraphs_found_from_the_break_lines_are_the_paragraphs_found_line_by_line():
    import random

    rnd = random.Random(15)
    pieces = ["", " ", "\t", "\r", "a", "--- page 3 ---", "--- page 3 ---\r", "--- page x", "--- page 4 ---  ",
              " --- page 2 ---", "\u00a0", "\u3000", "text"]
    for _ in range(5000):
        lines = ["".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 2))) for _ in range(rnd.randint(0, 12))]
        for markers in (True, False):
            assert plain_blocks(lines, markers) == _paragraphs_line_by_line(lines, markers), (lines, markers)
