"""Render scripts/sample_pdf.txt into the bundled sample PDF, data/sample/field-guide.pdf.

The sample corpus needs a real multi-page PDF with a text layer, made from our own
words so that it can be committed and so that tests know what each page says.  The
source text has one page per form-feed-separated block; each block becomes exactly one
PDF page (the script stops if a block overflows its page, since the page tests rely on
that mapping).  A short line standing alone as a paragraph, without a full stop, is set
as a heading and gets an outline entry (a bookmark), which stage 03 turns into the
chunks' heading_path.  Every page after the cover has a running header, and every page
a page number at the bottom: the furniture stage 02 removes.

The PDF is deterministic: a fixed creation date, so regenerating it with the same fpdf2
version gives the same bytes and the pipeline sees no change.  It carries a Title in
its metadata and page labels (the cover is "i", the pages after it 1, 2, 3 ...) so the
reader's title and page_labels columns have something real to show.

    python scripts/make_sample_pdf.py            # rewrites data/sample/field-guide.pdf

fpdf2 is a dev dependency (requirements-dev.txt); the pipeline itself only reads PDFs.
"""
from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path

from fpdf import FPDF

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "scripts" / "sample_pdf.txt"
TARGET = REPO / "data" / "sample" / "field-guide.pdf"
CREATED = datetime(2026, 1, 15, 9, 0, tzinfo=timezone.utc)
AUTHOR = "Harbor Lane Operations"
RUNNING_HEADER = "Harbor Lane Operations - on-call pocket guide"


def pages_of(text: str) -> list[list[str]]:
    """Pages (split at form feeds) of paragraphs (split at blank lines)."""
    pages = []
    for block in text.split("\f"):
        paragraphs = [" ".join(p.split()) for p in block.split("\n\n")]
        pages.append([p for p in paragraphs if p])
    return [p for p in pages if p]


def is_heading(paragraph: str) -> bool:
    return len(paragraph) <= 60 and not paragraph.endswith((".", ":", ",", ";", "?", "!"))


class _Guide(FPDF):
    """Pages after the cover carry a running header and every page a page number: the
    page furniture stage 02 must recognise and leave out of the text."""

    def header(self):
        if self.page_no() > 1:
            self.set_font("helvetica", "I", 9)
            self.cell(0, 6, RUNNING_HEADER, align="R")
            self.ln(10)

    def footer(self):
        self.set_y(-15)
        self.set_font("helvetica", "", 9)
        self.cell(0, 8, str(self.page_no()), align="C")


def render(pages: list[list[str]], title: str) -> FPDF:
    pdf = _Guide(format="A4")
    pdf.set_creation_date(CREATED)
    pdf.set_title(title)
    pdf.set_author(AUTHOR)
    pdf.set_margins(22, 22, 22)
    pdf.set_auto_page_break(True, margin=22)
    for number, paragraphs in enumerate(pages, 1):
        pdf.add_page()
        if number == 1:
            pdf.set_page_label("r")
        elif number == 2:
            pdf.set_page_label("D", label_start=1)
        for i, paragraph in enumerate(paragraphs):
            if is_heading(paragraph):
                size = 18 if number == 1 and i == 0 else 14
                # each heading is an outline entry (a bookmark): the title at the top
                # level, the sections below it
                pdf.start_section(paragraph, level=0 if size == 18 else 1)
                pdf.set_font("helvetica", "B", size)
                pdf.multi_cell(0, size * 0.5, paragraph)
                pdf.ln(2)
            else:
                pdf.set_font("helvetica", "", 11)
                pdf.multi_cell(0, 5.5, paragraph)
                pdf.ln(3)
        if pdf.page != number:
            raise SystemExit(f"page {number} of {SOURCE.name} does not fit on one PDF page; "
                             "shorten it or split it with a form feed")
    return pdf


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--out", type=Path, default=TARGET)
    args = parser.parse_args(argv)
    pages = pages_of(args.source.read_text(encoding="utf-8"))
    title = pages[0][0]
    pdf = render(pages, title)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(args.out))
    print(f"wrote {args.out} ({len(pages)} pages, {args.out.stat().st_size:,} bytes, title {title!r})",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
