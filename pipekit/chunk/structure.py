"""The structure of documents that have no Markdown syntax: plain text and PDF.

Stage 03 chunks every format the same way: a list of top-level blocks
`[kind, first_line, end_line, info]` (end exclusive) comes in, sections open at the
"heading" blocks, and the blocks are packed into chunks.  pipekit.chunk.markdown_blocks finds
those blocks in Markdown (and HTML, which stage 01 converts to Markdown); this module
finds them where the structure is not written as syntax (SPEC rule 9; CSV, whose
structure is records, has pipekit.chunk.csv_chunks):

* `plain_blocks`: plain text and PDF text are paragraphs separated by blank lines, and
  nothing else.  A line starting with `#` there is text: a `# install the tool first`
  note in a .txt file, or a shell script printed in a PDF, is not a heading.
* `place_outline`: a PDF's outline (its bookmarks, which stage 01 reads) is where its
  headings are.  Each entry is placed on its page — at the line that holds its title
  when the page shows it, else where the page (or the entry before it) starts — and
  becomes a heading block there.

Deliberately not done: guessing headings from font sizes or short lines in a PDF without
an outline (a wrong guess puts a chunk under a heading the document does not have; such a
PDF keeps page-only citations), or reading Markdown syntax in a .txt file.
"""
from __future__ import annotations

import re

from pipekit.chunk.markdown_blocks import MARKER

__all__ = ["plain_blocks", "place_outline", "title_key"]


def plain_blocks(lines: list[str], markers: bool) -> tuple[list, list]:
    """Paragraphs (runs of non-blank lines) as ["para", first, end, None] blocks, and the
    page-marker lines [(i, N)].  With `markers`, a `--- page N ---` line is a page break:
    it ends the paragraph and is a ["marker", i, i + 1, None] block of its own (stage 03
    attaches it to the block after it); without, it is a line of text like any other."""
    # Only the lines that may end a paragraph are visited one by one: a log of a million
    # lines without a blank one is one paragraph, and a step per line was a third of the
    # time stage 03 spent on it.  (`not ln or ln.isspace()` is `not ln.strip()`, uncopied.)
    breaks = [i for i, ln in enumerate(lines)
              if not ln or ln.isspace() or (markers and ln.startswith("--- page "))]
    breaks.append(len(lines))
    blocks: list = []
    marks: list = []
    first = 0  # the first line of the paragraph being read
    for i in breaks:
        mark = None
        if i < len(lines) and lines[i].startswith("--- page "):
            mark = MARKER.fullmatch(lines[i].rstrip("\r"))
            if mark is None and lines[i].strip():
                continue  # "--- page x" that is no marker: a line of text like any other
        if first < i:
            blocks.append(["para", first, i, None])
        if mark is not None:
            marks.append((i, int(mark.group(1))))
            blocks.append(["marker", i, i + 1, None])
        first = i + 1
    return blocks, marks


# A title as it is compared with a printed line: case, spacing and punctuation vary
# between a bookmark and the page ("1.2  Getting Started" vs "Getting started"), and
# so does the section number, which one of the two often leaves out.
_NUMBERING = re.compile(r"^\s*(?:(?:chapter|section|part|appendix)\s+)?(?:\d+(?:\.\d+)*|[ivxlc]+|[a-z])[.):]?\s+", re.I)
_NOT_WORD = re.compile(r"\W+")
_WRAP_LINES = 3  # a title printed over up to this many lines is still found


def title_key(s: str) -> str:
    """What must match between an outline title and a line: letters and digits only,
    case-folded, without a leading section number."""
    return _NOT_WORD.sub("", _NUMBERING.sub("", s).casefold())


def _find_title(lines: list[str], lo: int, hi: int, title: str) -> tuple[int, int] | None:
    """Lines [j, j + k) within [lo, hi) that print `title`, or None."""
    key = title_key(title)
    full = _NOT_WORD.sub("", title.casefold())
    if not key:
        return None
    for j in range(lo, hi):
        got = ""
        for k in range(_WRAP_LINES):
            if j + k >= hi:
                break
            part = lines[j + k]
            if not part.strip():
                break
            got = (got + " " + part) if got else part
            gk = title_key(got)
            if gk == key or _NOT_WORD.sub("", got.casefold()) == full:
                return j, j + k + 1
            if not gk or not key.startswith(gk):
                break
    return None


def place_outline(lines: list[str], blocks: list, outline: list[dict] | None) -> list:
    """`blocks` (from plain_blocks) with a heading block for each outline entry.

    `outline` holds {level (1 = top), title, page (physical, from 1)} in outline order.
    Entries are placed in page order; within a page each one is searched for after the
    one before it, so two entries on one page keep their order.  A found title becomes
    ["heading", j, j + k, (level, title)] over the lines that print it (the paragraph
    around it is split); one not found becomes a zero-width ["heading", j, j, ...] at
    the start of its page, or right after the entry placed before it on that page."""
    if not outline:
        return blocks
    pages: dict[int, tuple[int, int]] = {}  # page -> [first line of its text, end)
    starts = [(i, int(m.group(1))) for i, ln in enumerate(lines)
              if ln.startswith("--- page ") and (m := MARKER.fullmatch(ln.rstrip("\r")))]
    for k, (i, page) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(lines)
        pages.setdefault(page, (i + 1, end))
    entries = sorted((e for e in outline if e.get("page") in pages and (e.get("title") or "").strip()),
                     key=lambda e: e["page"])  # stable: outline order within a page
    cuts: list[tuple[int, int, int, str]] = []  # (first, end, level, title)
    last_page, after = None, 0
    for e in entries:
        lo, hi = pages[e["page"]]
        if e["page"] != last_page:
            last_page, after = e["page"], lo
        title = " ".join(e["title"].split())
        found = _find_title(lines, after, hi, title)
        a, b = found if found else (after, after)
        cuts.append((a, b, max(1, int(e["level"])), title))
        after = b
    return _insert_headings(blocks, cuts)


def _insert_headings(blocks: list, cuts: list) -> list:
    """Blocks with the heading cuts (sorted by line) inserted, paragraphs split around them."""
    out: list = []
    k = 0
    for b in blocks:
        kind, first, end = b[0], b[1], b[2]
        # headings that sit before this block (in a gap of blank lines, or zero-width at its start)
        while k < len(cuts) and (cuts[k][0] < first or cuts[k][0] == cuts[k][1] == first):
            a, e, level, title = cuts[k]
            out.append(["heading", a, e, (level, title)])
            k += 1
        if kind != "para" or k >= len(cuts) or cuts[k][0] >= end:
            out.append(b)
            continue
        pos = first
        while k < len(cuts) and cuts[k][0] < end:
            a, e, level, title = cuts[k]
            if a > pos:
                out.append(["para", pos, a, None])
            out.append(["heading", a, e, (level, title)])
            pos = max(pos, e)
            k += 1
        if pos < end:
            out.append(["para", pos, end, None])
    for a, e, level, title in cuts[k:]:
        out.append(["heading", a, e, (level, title)])
    return out
