"""Paged documents: a PDF's outline, its printed page labels, and the furniture printed
on every page.

Three things a reader of a PDF sees that its text layer does not say:

* `read_outline` (stage 01): the outline (bookmarks) is the PDF's own table of contents,
  the one structure it states outright.  Stage 01 keeps it as {level, title, page}
  entries in the `outline` column; stage 03 (pipekit.chunk.structure.place_outline) turns
  them into the headings of the chunks' heading_path.
* `strip_furniture` (stage 02): running headers, footers and page numbers repeat at the
  top or bottom of most pages.  Left in, a running header ("Shared MIME-info Database")
  sat in 70 % of one manual's chunks, matching every query that names the manual, and
  bare page numbers were indexed as terms.  They are recognised by repetition, not by
  position alone: a line is furniture when it is among the first or last lines of more
  than half of the pages, counting "Page 3 of 9" on page 3 and "Page 4 of 9" on page 4
  as one line (a number that runs with the page), and any page number printed at the
  very top or bottom of a page as one.
* `label_pages` (stage 03) and `cite_pages` (every citation): the label printed on a
  page is what a reader looks up.  A manual's page 74 is often the PDF's page 102 (roman
  front matter, a title page "T-1"); stage 01 keeps the PDF's labels (`page_labels`),
  stage 03 gives each chunk the labels of its first and last page, and a citation says
  the label, with the physical page beside it where the two differ.

Deliberately not done: furniture in documents of one or two pages (nothing repeats
enough to tell it from content), or in the middle of a page (a repeated line there is
content: a table header, a refrain); page labels guessed from the numbers a page prints
(a PDF that states no labels is cited by its physical pages, never by a guess).
"""
from __future__ import annotations

import re

from pipekit.run.lazy import lazy

pa, pc = lazy("pyarrow"), lazy("pyarrow.compute")  # imported on first use: `search` starts without Arrow (pipekit/run/lazy.py)
# NumPy too: stage 01's reading processes import this module for the PDF outline, and use none of the three.
np = lazy("numpy")

__all__ = ["read_outline", "strip_furniture", "FurnitureFinder", "FurnitureDropper", "OUTLINE_TYPE", "ANCHORS_TYPE",
           "label_pages", "with_labels", "cite_pages"]


def __getattr__(name: str):
    # The two column types are made on first use (PEP 562), not at import: making them
    # imports pyarrow, which `search` does without (pipekit/run/lazy.py).
    if name == "OUTLINE_TYPE":  # the `outline` column of stages 01 and 02
        return pa.list_(pa.struct([("level", pa.int32()), ("title", pa.string()), ("page", pa.int32())]))
    # The `anchors` column of stages 01 and 02, beside the outline because it is its kin: for a
    # format whose headings carry ids that the Markdown text cannot hold (HTML, reST), each
    # heading's title and id in document order; stage 03 gives each chunk its heading's id
    # (pipekit/chunk/anchors.py), which a hit's link opens.  (Here, not in documents.py: stage 02
    # carries it and should not import every reader for one type.)
    if name == "ANCHORS_TYPE":
        return pa.list_(pa.struct([("title", pa.string()), ("id", pa.string())]))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_MAX_OUTLINE = 10_000  # entries read; a malformed outline may loop or be enormous


def read_outline(pdf) -> list[dict] | None:
    """{level (1 = top), title, page (physical, from 1)} per outline entry with a page,
    in outline order; None when the PDF has no outline.  `pdf` is a pypdfium2 document."""
    out = []
    try:
        for k, item in enumerate(pdf.get_toc()):
            if k >= _MAX_OUTLINE:
                break
            dest = item.get_dest()
            index = dest.get_index() if dest is not None else None
            title = " ".join((item.get_title() or "").split())
            if index is None or index < 0 or not title:
                continue  # an entry pointing at a URL or at nothing has no place in the text
            out.append({"level": item.level + 1, "title": title, "page": index + 1})
    except Exception:  # noqa: BLE001 — a broken outline costs the headings, not the document
        return out or None
    return out or None


def label_pages(pages: pa.Array, doc_of: np.ndarray, labels: pa.Array) -> pa.Array:
    """The label printed on each page: `pages` (ints, nullable) are physical page numbers
    from 1, `doc_of[i]` the position in `labels` (list<string>, nullable: each document's
    labels by physical page) of page i's document.  A document without labels (text paged
    by form feeds, a PDF that states none), a page past its list or an empty label: the
    page number as a string, so a citation always has something to print; no page: null.
    One gather over the batch, not a Python loop over chunks."""
    pages = pages.cast(pa.int64())
    number = pages.cast(pa.string())
    labels = labels.cast(pa.list_(pa.string()))
    if len(pages) == 0 or pc.all(pc.is_null(labels)).as_py():
        return number
    doc_of = np.asarray(doc_of, dtype=np.int64)
    offsets = labels.offsets.to_numpy(zero_copy_only=False).astype(np.int64)  # into labels.values
    n_labels = pc.fill_null(pc.list_value_length(labels), 0).to_numpy(zero_copy_only=False)
    page = pc.fill_null(pages, 0).to_numpy(zero_copy_only=False)
    inside = (page >= 1) & (page <= n_labels[doc_of])  # a null page is 0: outside
    at = np.where(inside, offsets[doc_of] + page - 1, 0)
    values = labels.values
    if len(values) == 0:
        return number
    printed = pc.take(values, pa.array(at))
    use = pc.and_(pa.array(inside), pc.fill_null(pc.greater(pc.utf8_length(printed), 0), False))
    return pc.if_else(use, printed, number)


def with_labels(cols: dict, at: list[int], labels: list) -> dict:
    """Stage 03's batch columns `cols` with page_label_start and page_label_end added:
    chunk i's pages read in `labels[at[i]]`, the page labels of its document."""
    labels = pa.array(labels, pa.list_(pa.string()))
    at = np.asarray(at, dtype=np.int64)
    for side in ("start", "end"):
        cols[f"page_label_{side}"] = label_pages(pa.array(cols[f"page_{side}"], pa.int32()), at, labels)
    return cols


def cite_pages(start: int | None, end: int | None, label_start: str | None = None,
               label_end: str | None = None) -> str:
    """`p.74` or `p.74–75` by the printed labels, with the physical pages beside them
    where they differ: `p.74 (PDF page 102)`, `p.ii–1 (PDF pages 4–7)`; "" without pages."""
    if start is None:
        return ""
    end = start if end is None else end
    first = label_start or str(start)
    last = label_end or str(end)
    out = f"p.{first}" + (f"–{last}" if end != start else "")
    if (first, last) != (str(start), str(end)):
        out += f" (PDF page {start})" if end == start else f" (PDF pages {start}–{end})"
    return out


_MARKER_LINE = re.compile(r"--- page \d+ ---[ \t]*$")
# Stage 02's `--- page N ---` and stage 03's `--- page N (cont.) ---`, as whole lines.
_ANY_MARKER_LINE = re.compile(r"^--- page \d+(?: \(cont\.\))? ---[ \t]*(?:\r?\n|\Z)", re.M)


def passage_text(text: str) -> str:
    """A chunk's text as a reader's snippet shows it: without its page-marker lines.
    The markers say where pages begin (the citation says it: `p.57–58`); a snippet that
    opened `--- page 57 (cont.) ---` spent its first words on that, not on the passage."""
    return _ANY_MARKER_LINE.sub("", text) if "--- page " in text else text
_DIGITS = re.compile(r"\d+")
_ROMAN = re.compile(r"[ivxlcdm]+", re.I)
_EDGE = 2            # lines at the top and at the bottom of a page that may be furniture
_MIN_PAGES = 3       # fewer pages than this: nothing repeats enough to be sure
_SHARE = 0.5         # a line is furniture when it is at an edge of more than half the pages


def _keys(line: str, page: int, outer: bool) -> tuple[str, ...]:
    """What a line at a page edge may repeat as: its own words, and, when a number in it
    runs with the page (page 4 says 4 or 5, page 5 says 5 or 6), its words with that
    number masked, the offset kept ("Page 3 of 9" on page 3 and "Page 4 of 9" on page 4
    are one line; "Body of report 1998" on every page is not masked).  The outermost
    line of a page that starts or ends with such a number is a page-numbered line
    whatever its words (texinfo's "Chapter 2: Handling 3" changes with each chapter)."""
    s = " ".join(line.split())
    out = [s]
    if outer and (s.isdigit() or _ROMAN.fullmatch(s)):
        out.append("#bare")  # a bare page number, roman in the front matter (i, ii) or not
    if outer:
        words = s.split()
        out += [f"#at{int(w) - page:+d}" for w in {words[0], words[-1]} if w.isdigit() and len(w) <= 5]
    for m in _DIGITS.finditer(s):
        if len(m.group()) <= 5:
            offset = int(m.group()) - page
            out.append(f"{s[:m.start()]}#{offset:+d}#{s[m.end():]}")
    return tuple(out)


def strip_furniture(text: str) -> tuple[str, int]:
    """`text` (stage-02 text, pages after `--- page N ---` lines) without the lines that
    repeat at the top or bottom of most pages, and how many lines went."""
    lines = text.split("\n")
    marks = [i for i, ln in enumerate(lines) if ln.startswith("--- page ") and _MARKER_LINE.match(ln)]
    if len(marks) < _MIN_PAGES:
        return text, 0
    edges: list[list[tuple[int, tuple[str, ...]]]] = []  # per page: (line, keys) at its edges
    for k, m in enumerate(marks):
        end = marks[k + 1] if k + 1 < len(marks) else len(lines)
        body = [i for i in range(m + 1, end) if lines[i].strip()]
        if body:
            outer = (body[0], body[-1])
            edges.append([(i, _keys(lines[i], k + 1, i in outer))
                          for i in sorted(set(body[:_EDGE] + body[-_EDGE:]))])
    if len(edges) < _MIN_PAGES:
        return text, 0
    pages_with: dict[str, int] = {}
    for page in edges:
        for key in {key for _, keys in page for key in keys}:
            pages_with[key] = pages_with.get(key, 0) + 1
    furniture = {k for k, n in pages_with.items() if n > _SHARE * len(edges)}
    if not furniture:
        return text, 0
    drop = {i for page in edges for i, keys in page if furniture.intersection(keys)}
    return "\n".join(ln for i, ln in enumerate(lines) if i not in drop), len(drop)


# ---- the same furniture rule over a document too large to split into lines at once ------
#
# Stage 02 cleans a document over 8 MB a slice at a time.  `strip_furniture` needs the
# whole text as a list of lines (a 100 MB text made 1.4 million strings), so for those
# documents it runs in two passes over the lines as they stream past: the first finds the
# furniture (what repeats at the edges of most pages), the second drops it.  Between the
# passes only the repeated keys' counts and, per page, the positions of its edge lines
# are kept: a few integers a page.  The result is exactly strip_furniture's.


class FurnitureFinder:
    """Pass one: feed every line in order (`add`), then `furniture()`."""

    def __init__(self):
        self.i = -1              # index of the last line fed
        self.page = 0            # pages opened so far (k + 1 of strip_furniture)
        self.first: list = []    # the open page's first two non-blank lines (i, line)
        self.last: list = []     # and its last two
        self.pages_with: dict[str, int] = {}
        self.edges: list[tuple[int, int, bool]] = []  # (line, page, outer) of every edge line
        self.edge_pages = 0      # pages with a body (len(edges) of strip_furniture)

    def add(self, lines: list[str]) -> None:
        for ln in lines:
            self.i += 1
            if ln.startswith("--- page ") and _MARKER_LINE.match(ln):
                self._close()
                self.page += 1
                continue
            if self.page and ln.strip():
                if len(self.first) < _EDGE:
                    self.first.append((self.i, ln))
                self.last.append((self.i, ln))
                if len(self.last) > _EDGE:
                    del self.last[0]

    def _close(self) -> None:
        if not self.first:
            return
        outer = (self.first[0][0], self.last[-1][0])
        body = dict(self.first + self.last)  # at most four lines, the same line once
        keys = set()
        for i in sorted(body):
            self.edges.append((i, self.page, i in outer))
            keys.update(_keys(body[i], self.page, i in outer))
        for key in keys:
            self.pages_with[key] = self.pages_with.get(key, 0) + 1
        self.edge_pages += 1
        self.first, self.last = [], []

    def furniture(self) -> tuple[set, list]:
        """The furniture keys and the edge lines to test against them (both empty when
        the document has too few pages for anything to repeat)."""
        self._close()
        if self.page < _MIN_PAGES or self.edge_pages < _MIN_PAGES:
            return set(), []
        found = {k for k, n in self.pages_with.items() if n > _SHARE * self.edge_pages}
        return found, (self.edges if found else [])


class FurnitureDropper:
    """Pass two: the same lines fed again (`keep`) come back without the furniture."""

    def __init__(self, furniture: set, edges: list):
        self.furniture, self.edges = furniture, edges
        self.next = 0            # the next edge line to test
        self.i = 0               # index of the first line of the next batch
        self.removed = 0

    def keep(self, lines: list[str]) -> list[str]:
        end = self.i + len(lines)
        drop = []
        edges = self.edges
        while self.next < len(edges) and edges[self.next][0] < end:
            i, page, outer = edges[self.next]
            if self.furniture.intersection(_keys(lines[i - self.i], page, outer)):
                drop.append(i - self.i)
            self.next += 1
        self.i = end
        if not drop:
            return lines
        self.removed += len(drop)
        gone = set(drop)
        return [ln for k, ln in enumerate(lines) if k not in gone]
