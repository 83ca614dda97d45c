"""Each chunk's anchor: the id its own heading has where the document is read, so that a
hit's link (pipekit/retrieve/links.py) opens the passage, not the top of the page.

* Markdown: the slug GitHub gives the heading (lower-cased, punctuation dropped but `-` and
  `_`, each space a `-`; a repeated slug gets `-1`, `-2`, ... in document order), unless
  the heading states its own id in an attribute list (`## Install {#setup}`, as MkDocs,
  Pandoc and Hugo read it): that one wins.
* HTML and reST: the id the page gives the heading (or the section it opens), which stage
  01's converters keep beside the Markdown they write (`anchors`: title and id per heading,
  pipekit/read/html_markdown.py and rst.py).  They are matched to the headings stage 03
  finds in order and by their words, so a heading the converter wrote that the chunker does
  not see as one (inside a list item, say) costs that heading its anchor, not the ones after.
* Anything else (PDF: its link is a page; plain text, CSV, BEIR records): no anchor.

A chunk's own heading is the last heading line that starts before the chunk ends: a chunk
never straddles a heading (SPEC rule 1), so all its text sits under that one.  A chunk
before any heading (front matter, a page's preamble) has none.

Deliberately not here: the link itself (the document's path or `documents.link_base`, a
PDF's page) is built when a hit is returned, from this column; nothing is written into the
chunk's text, which stays the source span (SPEC rule 6).
"""
from __future__ import annotations

import bisect
import re

from pipekit.chunk.headings import plain_heading
from pipekit.chunk.markdown_blocks import norm

ANCHORED = ("markdown", "html", "rst")  # the formats whose headings have ids where they are read

# An attribute list's id: `{#setup}`, `{: #setup .wide}`, at the end of the heading line.
_EXPLICIT_ID = re.compile(r"\{:?[^{}]*?(?<![^\s{:])#([^\s{}#\"'=]+)[^{}]*\}[ \t#]*$")
# What GitHub's slugger drops: anything but letters, digits, `_`, `-` and spaces.
_NOT_SLUG = re.compile(r"[^\w\- ]")
_LOOKAHEAD = 8  # converter headings skipped, at most, to find the next one that matches


def github_slug(title: str) -> str:
    """GitHub's anchor for a heading's displayed text, before duplicates are numbered."""
    return _NOT_SLUG.sub("", title.lower()).replace(" ", "-")


def explicit_id(raw_title: str) -> str | None:
    """The `#id` of a heading's attribute list (`Install {#setup}` -> `setup`), or None."""
    if "{" not in raw_title:
        return None
    m = _EXPLICIT_ID.search(raw_title.rstrip())
    return m.group(1) if m else None


def heading_lines(doc, blocks: list) -> list[tuple[int, str]]:
    """(start offset, raw title) of every heading line among stage 03's blocks, in order
    (a PDF's outline entries, which are no lines of the text, are left out)."""
    out = []
    for b in blocks:
        if b[0] != "heading" or b[1] == b[2]:
            continue
        title = b[3][1]
        if title is None:  # setext: the paragraph lines above the underline
            title = " ".join(norm(doc.lines[j]).strip() for j in range(b[1], b[2] - 1))
        out.append((doc.starts[b[1]], title))
    return out


def markdown_anchors(raw_titles: list[str]) -> list[str | None]:
    """GitHub's anchor of each heading of one document, duplicates numbered in order."""
    seen: dict[str, int] = {}
    out: list[str | None] = []
    for raw in raw_titles:
        own = explicit_id(raw)
        if own is not None:
            seen.setdefault(own, 0)
            out.append(own)
            continue
        base = github_slug(plain_heading(raw))
        slug = base
        while slug in seen:  # as github-slugger: `a`, `a-1`, `a-2`, skipping any taken already
            seen[base] += 1
            slug = f"{base}-{seen[base]}"
        seen[slug] = 0
        out.append(slug or None)
    return out


def _key(title: str) -> str:
    return "".join(c for c in title.casefold() if c.isalnum())


def given_anchors(raw_titles: list[str], given: list[dict]) -> list[str | None]:
    """The converter's id for each heading stage 03 found, matched in order by its words."""
    out: list[str | None] = []
    j = 0
    for raw in raw_titles:
        key = _key(plain_heading(raw))
        found = None
        for k in range(j, min(j + _LOOKAHEAD, len(given))):
            if _key(given[k]["title"] or "") == key:
                found, j = given[k]["id"] or None, k + 1
                break
        out.append(found)
    return out


def set_anchors(chunks: list[dict], headings: list[tuple[int, str]], fmt: str, given: list[dict] | None) -> None:
    """Give each chunk (dicts with start_char/end_char) its `anchor` (see the module text)."""
    if fmt not in ANCHORED or not headings:
        for c in chunks:
            c["anchor"] = None
        return
    titles = [t for _, t in headings]
    anchors = markdown_anchors(titles) if fmt == "markdown" else given_anchors(titles, given or [])
    starts = [p for p, _ in headings]
    for c in chunks:
        k = bisect.bisect_left(starts, c["end_char"]) - 1  # the last heading starting before the chunk ends
        c["anchor"] = anchors[k] if k >= 0 and c["end_char"] > c["start_char"] else None
