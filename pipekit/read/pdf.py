"""PDF files: the text of each page through PDFium, a `--- page N ---` line before each.

The outline (bookmarks) and the printed page labels come along (pipekit/read/pages.py), so
stage 03 can give a PDF its heading trail and every chunk the page a reader would cite.
"""
from __future__ import annotations

import re

from pipekit.read.pages import read_outline
from pipekit.read.text import Unreadable


def read_pdf(data: bytes) -> dict:
    """Text of each page after a `--- page N ---` line, N the physical page from 1."""
    if not data:
        raise Unreadable("empty PDF file (0 bytes)")
    if b"%PDF-" not in data[:1024]:
        raise Unreadable("not a PDF: no %PDF- header (a misnamed file?)")
    import pypdfium2 as pdfium  # imported late: only PDF folders pay for it

    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise Unreadable("encrypted PDF: it needs a password to open") from None
        cut = "" if b"%EOF" in data[-2048:] else "truncated (no %EOF at the end), "
        raise Unreadable(f"corrupt PDF: {cut}PDFium could not open it ({_pdfium_reason(exc)})") from None
    try:
        pages, empty, failed = [], [], []
        for index in range(len(pdf)):
            try:
                pages.append(_page_text(pdf, index))
            except pdfium.PdfiumError:
                pages.append("")
                failed.append(index + 1)
            if not pages[-1].strip():
                empty.append(index + 1)
        labels = [pdf.get_page_label(i) for i in range(len(pdf))]
        title = (pdf.get_metadata_value("Title") or "").strip() or None
        outline = read_outline(pdf)  # the PDF's own headings, for stage 03's heading_path
    finally:
        pdf.close()
    notes = [f"{len(pages)} page{'s' if len(pages) != 1 else ''}"]
    if failed:
        notes.append(f"pages {_ranges(failed)} could not be read")
    if pages and len(empty) == len(pages):
        # An image-only PDF is a real document we cannot read yet (no OCR here); an empty
        # text keeps it out of the chunks without calling it broken.
        notes.append("no text layer on any page (scanned or image-only?): nothing to index")
        text = ""
    else:
        if empty:
            notes.append(f"no text on page{'s' if len(empty) > 1 else ''} {_ranges(empty)}")
        pages = join_identifier_wraps(pages)
        text = "".join(f"--- page {n} ---\n{_ends_line(t)}" for n, t in enumerate(pages, 1))
    if outline:
        notes.append(f"outline of {len(outline)} entr{'ies' if len(outline) != 1 else 'y'}")
    return {"text": text, "title": title, "note": "; ".join(notes),
            "page_labels": labels if any(labels) else None, "outline": outline}


def _page_text(pdf, index: int) -> str:
    page = pdf[index]
    try:
        textpage = page.get_textpage()
        try:
            text = textpage.get_text_range()
            lines = text.replace("\f", "\n").split("\r\n")
            if len(text) == textpage.count_chars():  # else offsets are not char indexes
                lines = _mark_paragraphs(lines, textpage)
        finally:
            textpage.close()
    finally:
        page.close()
    # PDFium ends lines with CRLF, an artefact of the extractor rather than of the file;
    # a form feed inside a page would become a false page marker in stage 02.  Where a
    # word was hyphenated across two lines PDFium joins it and leaves U+FFFE at the
    # break ("manip\ufffeulation"): left in, it would split the word into two terms.
    return "\n".join(lines).replace("\r", "\n").replace("\ufffe", "")


# A gap between two lines this much larger than the page's usual line pitch is a
# paragraph break (or a heading, or a new column).
_PARAGRAPH_GAP = 1.3
_MIN_LINES_FOR_PITCH = 4


def _mark_paragraphs(lines: list[str], textpage) -> list[str]:
    """Insert a blank line where the page leaves a vertical gap between two lines.

    PDFium gives one text line per printed line and no paragraph breaks, so a page came
    out as one long paragraph: stage 03 could only cut it between lines, mid-thought.
    The layout still shows the paragraphs — more space between them than between lines —
    so we measure each line's baseline (one loose character box per line: cheap) and
    turn the wide gaps into the blank lines a Markdown or text file would have had.
    """
    bottoms, offset = [], 0
    for line in lines:
        bottom = None
        if line.strip():
            first = offset + (len(line) - len(line.lstrip()))
            left, bottom_y, right, top = textpage.get_charbox(first, loose=True)
            bottom = bottom_y if top > bottom_y else None
        bottoms.append(bottom)
        offset += len(line) + 2  # the CRLF PDFium generated between lines
    pitches = [a - b for a, b in zip(bottoms, bottoms[1:]) if a is not None and b is not None and a > b]
    if len(pitches) < _MIN_LINES_FOR_PITCH - 1:
        return lines
    usual = sorted(pitches)[len(pitches) // 2]
    out, previous = [], None
    for line, bottom in zip(lines, bottoms):
        if bottom is not None and previous is not None and out and out[-1].strip():
            drop = previous - bottom
            if drop > _PARAGRAPH_GAP * usual or drop < -usual:  # a wide gap, or up to a new column
                out.append("")
        out.append(line)
        previous = bottom if bottom is not None else previous
    return out


# A line that ends inside an identifier: `R_` then `LIBS_USER`, `install.` then `packages`.
# The word before the break and the first word after it, with no space on either side.
_WRAPPED = re.compile(r"(?<![\w.])(\w[\w.]*)([_.])\n(\w+)")  # (from a run's start: linear)
_DOTTED = re.compile(r"\w+(?:\.\w+)+")


def join_identifier_wraps(pages: list[str]) -> list[str]:
    """Join a line break the typesetter put inside an identifier, as PDFium joins a
    hyphenated word (U+FFFE above).  Left split, `R_LIBS_USER` was indexed as `r` and
    `libs_user`, and `install.packages` as two words, so the name a reader searches for
    was never in the index.

    The rule, for a line that ends right after a word character and `_` or `.`, with the
    next line starting right on a word character:
    - `_` after a letter or digit: joined.  No prose word ends in an underscore; an
      identifier does when a manual lets lines break after it (Texinfo and LaTeX's
      \\texttt do).  A name that ends in `__` is whole (`__CYGWIN__` then `FreeBSD`, a list).
    - `.`: joined only when the document shows the joined name elsewhere on one line and
      the next word does not start with a capital.  A sentence ends with a period at a
      line's end all the time — `packages.` then `Then`, `etc.` then `and`, `macOS.` then
      `sessionInfo()`, `R.` then `Wilks` — and neither the next word's look nor its `(`
      tells those from `install.` then `packages`: on R's manuals the document's own
      spelling does (R-admin: 25 joins, each a name, an address or a
      version, `R_` / `LIBS_USER` among them).
    Breaks across pages (a page marker between) and after a space are never joined."""
    whole = "\n".join(pages)
    if "_\n" not in whole and ".\n" not in whole:
        return pages
    dotted = set(_DOTTED.findall(whole))

    def join(m: re.Match) -> str:
        before, sep, after = m.groups()
        if sep == "_" and before.endswith("_"):
            return m.group(0)
        if sep == "." and (after[0].isupper() or f"{before}.{after}" not in dotted):
            return m.group(0)
        return f"{before}{sep}{after}"

    return [_WRAPPED.sub(join, page) if ("_\n" in page or ".\n" in page) else page for page in pages]


def _pdfium_reason(exc: Exception) -> str:
    match = re.search(r"PDFium: ([^)]*)", str(exc))
    return match.group(1).rstrip(".").lower() if match else str(exc)


def _ends_line(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


def _ranges(numbers: list[int]) -> str:
    """[1, 2, 3, 7] -> "1-3, 7": a note stays one short line for a 600-page scan."""
    spans, start = [], numbers[0]
    for prev, cur in zip(numbers, numbers[1:] + [None]):
        if cur != prev + 1:
            spans.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = cur
    return ", ".join(spans)
