"""Stage 03 — chunking: cut each cleaned document into the passages the index scores.

A chunk is the unit BM25 ranks and the unit a citation points at, so its boundaries
decide whether an answer can be checked.  This stage reads `02_preprocessed.parquet`
(doc_id, format, path, title, text, outline, page_labels, note) and writes
`03_chunks.parquet`, one row per chunk: chunk_id `<doc_id>#<ordinal>`, heading_path /
heading, the chunk text, the exact span `[start_char, end_char)` of the stage-02 text it
came from, the pages it covers (numbers, and the labels printed on them: pipekit.read.pages),
and its size in words and characters.  A document without text gives no chunk (a BEIR
record's title alone gives one: rule 10); the summary names it and says why.  It also
names a document that makes over a quarter of the index, or has a line of a million
characters (a log or minified file: pipekit/chunk/shares.py), with its share.

How (strategy `heading`, the default):

1. Blocks and their headings come in, each format read by its own structure (SPEC rule 9;
   the readers live in pipekit/): Markdown and converted HTML by CommonMark syntax
   (pipekit.chunk.markdown_blocks, checked against markdown-it-py), a PDF by its outline and
   plain text as paragraphs without any heading syntax (pipekit.chunk.structure).  YAML front
   matter is a block too: text the user wrote, under the title it gives.
2. Each heading opens a section; its heading line opens the section's first chunk.  A
   heading directly followed by a deeper one stays with it.
3. Blocks (paragraphs, list items, quotes, tables, fences ...) are packed greedily up to
   `target`; a block larger than `max` is cut (fences re-fenced, tables repeat their
   header, other blocks between lines, then words, then grapheme clusters).
4. A runt (below `min`) at the end of a heading's text joins its predecessor in that section.

Budget units: `words` are whitespace-separated words, a run of more than 10 characters
without whitespace counting one word per 10; `chars` are code points; `tokens` are
ceil(chars / 4).  What a rule adds (continuation marker, repeated table or CSV header,
re-fencing) counts toward `max`; only a single grapheme cluster, or one CSV record, may
exceed it.  Pages: with `track`, text before the first marker belongs to the page before
it (none if that is page 1), and the marker line itself opens its page.

CSV documents (kept as CSV text by stage 01) are packed record by record, every chunk
starting with the header row (pipekit.chunk.csv_chunks).  Strategy `fixed` ignores structure on
purpose: windows of `target` units with `overlap`, cut at whitespace — the baseline the
heading chunker is compared against.

A rerun chunks only the documents that changed: the others keep their previous chunks,
copied (same `content_hash`, same settings and code of stages 01–03; pipekit/run/incremental.py).

Deliberately not done here: no text is rewritten (chunk text is the source span plus only
what the rules add, so CRLF, tabs, indentation and zero-width characters survive), no
tokenising or stemming (stage 04), no guessing of headings a format does not state (a
PDF without an outline keeps page-only citations; a `#` line in a .txt file is text).
"""
from __future__ import annotations

import pipekit  # first: outside the virtualenv it says how to activate it, not a traceback
import bisect
import re
from itertools import accumulate
from pathlib import PurePosixPath
from typing import Iterator

from pipekit.chunk.csv_chunks import chunk_csv
from pipekit.chunk.doctext import DocText, Settings, count_words, measure, run_units
from pipekit.chunk.markdown_blocks import FENCE_OPEN, MARKER, norm, scan_blocks
from pipekit.read.markdown import front_matter_end, front_matter_title
from pipekit.chunk.structure import place_outline, plain_blocks
from pipekit.chunk.unchunked import NoChunks, reason
from pipekit.chunk.anchors import heading_lines, set_anchors
from pipekit.chunk.headings import heading_path, open_level, plain_heading  # a heading's text, the trail
from pipekit.chunk.shares import ChunkShares, long_lines  # documents that swamp the index
from pipekit.chunk.rows import COLUMNS, PER_CHUNK, finish, schema as _schema  # noqa: F401  (the output's row)


# ---- Packing -------------------------------------------------------------------------


class _Unit:
    """A piece of source that goes into a chunk whole: a block or a piece of one."""

    __slots__ = ("start", "end", "words", "prefix", "suffix", "heading", "path")

    def __init__(self, start, end, words, prefix="", suffix="", heading=False):
        self.start, self.end, self.words = start, end, words
        self.prefix, self.suffix, self.heading = prefix, suffix, heading
        self.path = None  # a heading unit's heading_path



def _pieces(doc: DocText, atoms, cap_first: int, cap: int, prefix: str, suffix: str) -> list[_Unit]:
    """Greedy runs of atoms, each run within its cap (the first may have less room)."""
    out: list[_Unit] = []
    cur_s = cur_e = -1
    cur_w = 0
    limit = cap_first
    fresh = False
    for a, b, w in atoms:
        if not out and cur_s < 0 and doc.size(w, a, b) > cap_first:
            limit, fresh = cap, True  # not even one line fits the room left: start afresh
        if cur_s >= 0 and doc.size(cur_w + w, cur_s, b) > limit:
            out.append(_Unit(cur_s, cur_e, cur_w))
            cur_s, cur_w, limit = -1, 0, cap
        if cur_s < 0:
            cur_s = a
        cur_e, cur_w = b, cur_w + w
    if cur_s >= 0:
        out.append(_Unit(cur_s, cur_e, cur_w))
    for k, u in enumerate(out):
        if k > 0:
            u.prefix = prefix
        if k < len(out) - 1:
            u.suffix = suffix
    if fresh and out:
        out[0].prefix = "fresh"  # a signal to _pack, replaced there
    return out


def _split_block(doc: DocText, block, room: int) -> list[_Unit]:
    """Cut a block larger than max.  A fence is cut between lines and every piece is
    re-fenced with the same fence and info string; a table between rows, every piece
    repeating the header and delimiter rows; anything else between lines."""
    kind, first, end = block[0], block[1], block[2]
    target = doc.s.target
    nl = doc.nl
    lines = doc.lines
    if kind == "fence" and end - first >= 2:
        opening = lines[first].rstrip("\r")
        m = FENCE_OPEN.match(norm(lines[first]))
        closed = block[3] == "closed"
        fence = m.group(1) + m.group(2)
        prefix, suffix = opening + nl, nl + fence
        inner_end = end - 1 if closed else end
        cap = target - doc.extra_size(prefix + suffix)
        cap_first = room - doc.extra_size(suffix)
        # The opening line rides with the first content line, the closing one with the
        # last, so the atoms leave room for both.
        edge = doc.extra_size(prefix) + (doc.extra_size(lines[end - 1]) if closed else 0)
        atoms = list(doc.atoms(first + 1, inner_end, max(1, cap - edge)))
        if not atoms:
            return [_Unit(doc.starts[first], doc.line_end(end - 1), doc.words(doc.starts[first], doc.line_end(end - 1)))]
        open_a = (doc.starts[first], atoms[0][1], atoms[0][2] + count_words(opening))
        atoms[0] = open_a
        if closed:
            la = atoms[-1]
            atoms[-1] = (la[0], doc.line_end(end - 1), la[2] + count_words(lines[end - 1]))
        return _pieces(doc, atoms, max(1, cap_first), max(1, cap), prefix, suffix)
    if kind == "table" and end - first >= 3:
        header = doc.text[doc.starts[first]:doc.line_end(first + 1)] + nl
        head_end = doc.line_end(first + 1)
        # The header repeats whenever it fits in max beside any one row (SPEC rule 3); a
        # rule "header within target/2" left a 31-word header at target 40 / max 60 in 1
        # piece of 15.  Pieces still pack to target; a row too big for that beside the
        # header makes its piece larger, never over max.
        rows = [(doc.starts[j], doc.line_end(j)) for j in range(first + 2, end)]
        rows = [(doc.words(a, b), a, b) for a, b in rows]
        if max(doc.size(w, a, b, header) for w, a, b in rows) <= doc.s.max:
            cap = max(target - doc.extra_size(header), max(doc.size(*r) for r in rows))
            atoms = list(doc.atoms(first + 2, end, cap))
            hw = doc.words(doc.starts[first], head_end)
            atoms[0] = (doc.starts[first], atoms[0][1], atoms[0][2] + hw)
            return _pieces(doc, atoms, max(1, room), cap, header, "")
        # A row that does not fit beside the header: the table is cut between lines like
        # any other block.
    return _pieces(doc, doc.atoms(first, end, max(1, target)), max(1, room), max(1, target), "", "")


def _pack(doc: DocText, units: list, blocks_of: list) -> list[list[_Unit]]:
    """Greedy packing of one section's units into chunks (lists of units)."""
    s = doc.s
    target, mx, mn = s.target, s.max, s.min
    chunks: list[list[_Unit]] = []
    cur: list[_Unit] = []
    cur_w = 0

    def cur_size(extra_w=0, end=None, suffix=""):
        return doc.size(cur_w + extra_w, cur[0].start, cur[-1].end if end is None else end,
                        cur[0].prefix + suffix)

    work = list(zip(units, blocks_of))
    work.reverse()
    while work:
        u, block = work.pop()
        alone = doc.size(u.words, u.start, u.end, u.prefix + u.suffix)
        if alone > mx and block is not None:
            bs, be = doc.starts[block[1]], doc.line_end(block[2] - 1)
            if bs > u.start or be < u.end:
                # Too big with the page-marker lines attached to it: the markers go in units
                # of their own, so a fence within max is still never cut.
                parts = [(u.start, bs), (bs, be), (be, u.end)]
                for k, (a, b) in reversed(list(enumerate(parts))):
                    if k != 1:  # the block keeps its own start: indentation is content
                        a, b = doc.trim(a, b)
                    if a < b:
                        # Marker parts stay "sticky" like a heading line: the page they
                        # open starts the chunk that holds the block's first piece.
                        part = _Unit(a, b, doc.words(a, b), heading=u.heading if k == 1 else "marker")
                        part.path = u.path if k == 1 else None
                        work.append((part, block if k == 1 else None))
                continue
            if not doc.text[u.start:u.end].strip():
                # Only characters Python calls whitespace (a no-break space, a form feed:
                # CommonMark makes a paragraph of them): too big for a tiny max, with no
                # line or word to cut between, so _split_block found no piece (an
                # IndexError on "\xa0\x0c" at target = max = 1).  Nothing to search is lost.
                continue
            tail = []
            while cur and cur[-1].heading == "marker":
                tail.insert(0, cur.pop())
            if cur and not all(x.heading for x in cur):
                chunks.append(cur)
                cur = []
            cur += tail
            cur_w = sum(x.words for x in cur)
            # the room left beside the heading, counting the gap up to the block itself
            room = target - (doc.size(cur_w, cur[0].start, doc.starts[block[1]], cur[0].prefix) if cur else 0)
            if room < max(1, target // 4):  # too little left beside the heading: start afresh
                if cur:
                    chunks.append(cur)
                cur, cur_w, room = [], 0, target
            pieces = _split_block(doc, block, room)
            if u.path is not None:  # a heading line longer than max: its pieces keep its path
                for p in pieces:
                    p.path = u.path
            if pieces and pieces[0].prefix == "fresh":  # its first line does not fit beside the heading
                pieces[0].prefix = ""
                if cur:
                    chunks.append(cur)
                cur, cur_w = [], 0
            if cur and pieces:
                # the heading line opens the block's first piece
                pieces[0].start = cur[0].start
                pieces[0].words += cur_w
                pieces[0].prefix = cur[0].prefix
                paths = [x.path for x in cur if x.path is not None]
                # The piece now holds the heading lines: it carries the last one's path, unless
                # it is itself the first piece of a (too long) heading, the last of the chain
                # — labelling that with the outer heading's path broke rule 1.
                if paths and pieces[0].path is None:
                    pieces[0].path = paths[-1]
                cur, cur_w = [], 0
            for p in pieces[:-1]:
                chunks.append([p])
            cur, cur_w = [pieces[-1]], pieces[-1].words
            if pieces[-1].suffix:
                chunks.append(cur)
                cur, cur_w = [], 0
            continue
        if cur:
            new = cur_size(u.words, u.end, u.suffix)
            # A heading line joins only heading lines before it (a chain), never the
            # pieces of a heading too long to keep whole.
            fits = not cur[-1].suffix and not u.prefix and not (
                u.path is not None and not all(x.heading for x in cur)) and (
                new <= target
                or (new <= mx and (all(x.heading for x in cur) or cur_size() - doc.reserve() < mn)))
            if not fits:
                chunks.append(cur)
                cur, cur_w = [], 0
        cur.append(u)
        cur_w += u.words
        if u.suffix:
            chunks.append(cur)
            cur, cur_w = [], 0
    if cur:
        chunks.append(cur)
    # Rule 5: a runt joins its predecessor, but only under the same heading (this section).
    # A heading's text ends at the section's end and where a deeper heading of the chain
    # opens a chunk (a heading too long for one chunk leaves pieces before it): a runt at
    # either end joins.  A runt holding a heading line joins only heading lines, as in
    # packing — joined to the last piece of a long heading it put that text before a
    # heading inside one chunk (rule 1).
    def holds_heading(chunk):
        return any(x.heading and x.path is not None for x in chunk)

    for k in range(len(chunks) - 1, 0, -1):
        last, prev = chunks[k], chunks[k - 1]
        if k + 1 < len(chunks) and not holds_heading(chunks[k + 1]):
            continue
        lw = sum(x.words for x in last)
        pw = sum(x.words for x in prev)
        # (a runt is judged on its real size; the marker room only guards the ceiling)
        if (doc.size(lw, last[0].start, last[-1].end, last[0].prefix + last[-1].suffix) - doc.reserve() < mn
                # (two pieces of one cut block join back into one: the cut is simply undone)
                and doc.size(lw + pw, prev[0].start, last[-1].end, prev[0].prefix + last[-1].suffix) <= mx
                and (all(x.heading for x in prev) or not holds_heading(last))):
            chunks[k - 1:k + 1] = [prev + last]
    return chunks


def _emit(doc: DocText, chunk: list[_Unit], path: list[str], first_chunk: bool) -> dict:
    start, end = chunk[0].start, chunk[-1].end
    prefix = chunk[0].prefix
    page_start = page_end = None
    if doc.mark_starts and doc.s.page_markers != "keep":
        page_start = doc.page_at(start)
        page_end = doc.page_at(max(start, end - 1))
        if doc.s.page_markers == "track" and page_start is not None:
            k = bisect.bisect_right(doc.mark_starts, start) - 1
            at_marker = k >= 0 and doc.mark_starts[k] == start
            if not at_marker and (k >= 0 or not first_chunk):
                prefix = doc.cont_line(page_start) + prefix
    text = prefix + doc.body(start, end) + chunk[-1].suffix
    return {"heading_path": path, "text": text, "start_char": start, "end_char": end,
            "page_start": page_start, "page_end": page_end}


def _blocks(doc: DocText, fmt: str, base: list[str], outline) -> list:
    """The document's top-level blocks, by its format's own structure (SPEC rule 9)."""
    markers = doc.s.page_markers != "keep"
    if fmt in ("text", "pdf"):  # no heading syntax: paragraphs, and a PDF's outline
        blocks, marks = plain_blocks(doc.lines, markers)
        if fmt == "pdf" and outline:
            blocks = place_outline(doc.lines, blocks, outline)
        doc.set_markers(marks)
        return blocks
    first = front_matter_end(doc.lines)
    blocks, marks = scan_blocks(doc.lines, first, markers)
    doc.set_markers(marks)
    if not first:
        return blocks
    # Front matter is text the user wrote (rule 9): it gets a chunk of its own.  The title
    # it gives heads that chunk and what follows, until the document's own level-1
    # heading (if any) takes over, as it would as the page's `<h1>` on the built site.
    title = None if base else front_matter_title(doc.text)
    return [["front", 0, first, (1, title) if title else None]] + blocks


def _chunk_blocks(doc: DocText, base: list[str], blocks: list) -> list[dict]:
    lines = doc.lines
    track = doc.s.page_markers == "track"
    out: list[dict] = []
    sec_units: list[_Unit] = []
    sec_blocks: list = []
    levels: list[str] = []
    sec_path = heading_path([], list(base))
    heading_only = False
    last_level = 0
    before_path = prev_path = sec_path
    pending = None  # (start, words) of marker lines waiting for the next block

    target = doc.s.target

    def flush():
        first, last = sec_units[0], sec_units[-1]
        if doc.by_words:
            # A word takes at least two characters with its space, so a section of up to
            # 2 x target characters fits without counting anything.
            if (last.end - first.start + 2) // 2 + doc.cont_reserve[0] <= target:
                out.append(_emit(doc, sec_units, sec_path, not out))
                return
            for x in sec_units:
                x.words = doc.words(x.start, x.end)
        if doc.size(sum(x.words for x in sec_units), first.start, last.end) <= target:
            # The whole section fits: one chunk, no packing needed (most sections).
            out.append(_emit(doc, sec_units, sec_path, not out))
            return
        # Heading lines of this section (a chain), by position: a chunk without one (a page
        # marker cut off between them) sits under the heading before it.
        heads_at = [(doc.starts[bl[1]], x.path) for x, bl in zip(sec_units, sec_blocks) if x.path is not None]
        for chunk in _pack(doc, sec_units, sec_blocks):
            # A chain of headings too big for one chunk: each piece under its own heading.
            heads = [x.path for x in chunk if x.path is not None]
            if heads:
                path = heads[-1]
            else:
                before = [p for pos, p in heads_at if pos <= chunk[0].start]
                path = before[-1] if before else (before_path if heads_at else sec_path)
            out.append(_emit(doc, chunk, path, not out))

    for b in blocks:
        kind = b[0]
        if kind == "marker":
            if track:
                ms, me = doc.starts[b[1]], doc.line_end(b[1])
                pending = (pending[0] if pending else ms, (pending[1] if pending else 0) + 4, me)
            continue
        if b[1] == b[2]:  # a PDF outline entry whose title its page does not print
            level, title = b[3]
            path = open_level(levels, level, plain_heading(title), base)
            if sec_units and heading_only and level > last_level:
                sec_units[-1].path = path  # a chain, as for heading lines: the deeper path
            else:
                if sec_units:
                    flush()
                sec_units, sec_blocks, heading_only, before_path = [], [], False, sec_path
            sec_path, last_level = path, level
            continue
        start, end = doc.starts[b[1]], doc.line_end(b[2] - 1)
        u = _Unit(start, end, 0)  # words are counted in flush(), only when needed
        if pending:  # a page marker opens the page: it goes with what follows it
            u.start, pending = pending[0], None
        if kind == "heading" or (kind == "front" and b[3]):
            level, title = b[3]
            if title is None:  # setext: the paragraph lines above the underline
                title = " ".join(norm(lines[j]).strip() for j in range(b[1], b[2] - 1))
            prev_path = sec_path
            path = open_level(levels, level, plain_heading(title), base)
            u.heading = True
            if sec_units and heading_only and level > last_level:
                # "# Guide" directly followed by "## Install": one section, the deeper path.
                sec_units.append(u)
                sec_blocks.append(b)
            else:
                if sec_units:
                    flush()
                sec_units, sec_blocks = [u], [b]
                # Front matter heads its title's section but is no heading line: a heading
                # after it opens its own chunk (rule 9; a code of conduct's front matter and
                # `## Our Pledge` were one chunk, chained as "# Guide" and "## Install" are).
                heading_only = kind == "heading"
                before_path = prev_path
            sec_path = u.path = path
            last_level = level
            continue
        sec_units.append(u)
        sec_blocks.append(b)
        heading_only = False
    if pending:
        ms, w, end = pending
        if sec_units:
            sec_units[-1].end = end
        else:
            sec_units, sec_blocks = [_Unit(ms, end, w)], [None]
    if sec_units:
        flush()
    return out


# ---- Fixed windows -------------------------------------------------------------------


def _chunk_fixed(doc: DocText, base: list[str]) -> list[dict]:
    """Windows of `target` units with `overlap`, cut at whitespace: structure ignored on
    purpose (the baseline), but spans, pages and the ceiling hold as for `heading`."""
    s = doc.s
    marks = []
    if s.page_markers != "keep":
        for i, ln in enumerate(doc.lines):
            if ln.startswith("--- page ") and MARKER.fullmatch(norm(ln)):
                marks.append((i, int(MARKER.fullmatch(norm(ln)).group(1))))
        doc.set_markers(marks)
    cap = s.target
    words: list[tuple[int, int]] = []
    # With strip, words on marker lines are not text; walk the marker spans alongside.
    skip = [(doc.starts[i], doc.starts[i + 1]) for i, _ in marks] if s.page_markers == "strip" else []
    k = 0
    text = doc.text
    for m in re.finditer(r"\S+", text):
        a, b = m.span()
        if skip:
            while k < len(skip) and skip[k][1] <= a:
                k += 1
            if k < len(skip) and skip[k][0] <= a:
                continue
        if doc.size(run_units(b - a), a, b) > cap:
            g0 = a
            import regex  # grapheme clusters (\X), which stdlib `re` cannot find; here: a rare word over max
            for g in regex.finditer(r"\X", text[a:b]):
                gs, ge = a + g.start(), a + g.end()
                if gs > g0 and doc.size(run_units(ge - g0), g0, ge) > cap:
                    words.append((g0, gs))
                    g0 = gs
            words.append((g0, b))
        else:
            words.append((a, b))
    cum = list(accumulate((run_units(b - a) for a, b in words), initial=0))  # budget words so far
    reserve = doc.reserve()
    out = []
    i, n = 0, len(words)
    while i < n:
        j = i
        while j + 1 < n and doc.size(cum[j + 2] - cum[i], words[i][0], words[j + 1][1]) <= cap:
            j += 1
        start, end = words[i][0], words[j][1]
        out.append(_emit(doc, [_Unit(start, end, cum[j + 1] - cum[i])], list(base), not out))
        if j + 1 >= n:
            break
        # The next window starts `overlap` units before this one ends (never before it starts).
        nxt = j + 1
        while nxt - 1 > i and doc.size(cum[j + 1] - cum[nxt - 1], words[nxt - 1][0], end) - reserve <= s.overlap:
            nxt -= 1
        i = max(i + 1, nxt)
    for c in out:
        while c["heading_path"] and c["heading_path"][-1] == "":
            c["heading_path"].pop()
    return out


# ---- The pure entry point ------------------------------------------------------------


def chunk_document(text: str, *, fmt: str = "markdown", title: str | None = None,
                   settings: Settings = Settings(), name: str | None = None,
                   outline: list[dict] | None = None, anchors: list[dict] | None = None) -> list[dict]:
    """Chunks of one stage-02 document: dicts with heading_path, text, start_char,
    end_char, page_start, page_end, `anchor` (pipekit/chunk/anchors.py; `anchors`: stage 01's
    heading ids of HTML and reST) (ordinals, ids and sizes are the caller's).

    fmt "csv": records packed under the header ([name, "rows a–b"] headings);
    fmt "text" and "pdf": paragraphs, no heading syntax; a PDF's `outline`
    ({level, title, page} entries, from stage 01) gives its headings;
    fmt "beir": heading paths start with the record's title; anything else: Markdown."""
    if not text or not text.strip():  # rule 10: a BEIR title alone is still findable (an empty span)
        return [{"heading_path": [title], "text": title, "start_char": 0, "end_char": 0, "page_start": None,
                 "page_end": None}] if fmt == "beir" and (title or "").strip() else []
    doc = DocText(text, settings)
    base = [title or ""] if fmt == "beir" else []
    if fmt == "csv" and settings.strategy == "heading":
        return chunk_csv(doc, name or title or "")
    if settings.strategy == "fixed":
        return _chunk_fixed(doc, base)
    blocks = _blocks(doc, fmt, base, outline)
    chunks = _chunk_blocks(doc, base, blocks)
    set_anchors(chunks, heading_lines(doc, blocks), fmt, anchors)
    return chunks


# ---- The stage -----------------------------------------------------------------------

# The output's columns and the values derived from each chunk (chunk_id, heading, sizes,
# anchor): pipekit/chunk/rows.py, beside the fast path that makes the same rows as columns.


def chunk_partition(section: dict, threads: int, part) -> Iterator:
    """Stage 03 on one partition of 02_preprocessed.parquet: its documents' chunks, in
    order, in record batches of bounded size.  It depends on the partition alone, so the
    engine may run it anywhere (`section`, the plain config dict, travels to workers)."""
    from functools import partial
    from pipekit.run.engine import advance, iter_rows, map_ahead
    from pipekit.chunk.fastpath import ChunkRows, fast_pieces
    from pipekit.read.pages import with_labels

    settings = Settings.from_section(section)
    schema = _schema()
    # 20,000 chunks per written batch: memory stays flat on any corpus size; `missed`: documents without a chunk
    rows, missed = ChunkRows(schema, PER_CHUNK, 20_000, with_labels), NoChunks()
    batches = iter_rows(part, columns=["doc_id", "format", "path", "title", "text", "outline", "content_hash",
                                       "page_labels", "note", "anchors"])
    # Records that are one line and one chunk: made as columns (pipekit/chunk/fastpath.py says which, and why the
    # same), `threads` batches at once: on one thread the second core sat idle through a BEIR corpus's stage 03.
    for batch, pieces in map_ahead(partial(fast_pieces, settings, schema), batches, threads):
        advance(batch.num_rows)
        for a, b, table in pieces:
            if table is not None:
                rows.add_table(table)
            for row in ([] if table is not None else batch.slice(a, b - a).to_pylist()):
                doc_id = row["doc_id"]
                # text popped and let go, chunks once in `rows`: a huge document's written batches are freed
                text = row.pop("text") or ""
                chunks = finish(chunk_document(text, fmt=row["format"] or "markdown", title=row["title"], settings=settings,
                                               name=PurePosixPath(doc_id).name, outline=row["outline"],
                                               anchors=row["anchors"]), doc_id)
                if not chunks:  # rule 10: counted, with its reason, in the summary
                    missed.add(doc_id, reason(text, row["note"]))
                del text
                for i in range(len(chunks)):
                    c, chunks[i] = chunks[i], None
                    c["doc_id"], c["path"], c["format"] = doc_id, row["path"] or [], row["format"]
                    c["content_hash"] = row["content_hash"]
                    rows.add(c, row["page_labels"])
                    # Checked per chunk, not per document: a 400 MB log is 150,000 chunks, and
                    # one batch of them all was one more copy of the whole document.
                    if len(rows) >= rows.size:
                        yield rows.take(), missed.take()
            while len(rows) >= rows.size:
                yield rows.take(), missed.take()
    if len(rows) or missed.total:
        yield rows.take(everything=True), missed.take()


def run(ctx) -> None:
    from pipekit.run.engine import StageFunction
    from pipekit.run.incremental import reuse_parts

    settings = Settings.from_section(ctx.section)
    ctx.keep_freed_memory()  # each batch's buffers reused by the next, not faulted in anew (pipekit/run/malloc.py)
    chunks_out = 0
    # A document chunked last time, with these settings, from the same text keeps its chunks.
    threads = 2 if ctx.engine.kind == "local" else 1  # a cluster's worker process is one core: a batch at a time
    summary = ("doc_id", "end_char")  # what the loop reads of a batch: of copied rows (no chunkless document), all read
    chunker, parts, reused = reuse_parts(ctx, ctx.upstream_parts(), StageFunction(3, "chunk_partition", (ctx.section, threads)),
                                         extras=(None,), summary=summary)
    missed, shares = NoChunks(), ChunkShares()
    for batch, part_missed in ctx.write_partitions("03_chunks.parquet", _schema(), chunker, parts, desc="03 chunking",
                                                   keep=summary, total=ctx.upstream_rows,
                                                   # how much this run reused, for the report's account of its times
                                                   meta={"reused": {"n": reused, "of": ctx.upstream_rows,
                                                                    "unit": "documents"}}):
        chunks_out += batch.num_rows
        missed.merge(part_missed)
        shares.add(batch)  # a document that swamps the index is named below (pipekit/chunk/shares.py)
    shares.finish()
    ctx.note(f"{ctx.upstream_rows:,} documents → {chunks_out:,} chunks "
             f"(strategy {settings.strategy}, target {settings.target} {settings.unit}, max {settings.max})")
    for line in missed.lines():
        ctx.note(line)
    for line in shares.lines(long_lines(ctx.upstream_path, shares.long_line_candidates())):
        ctx.note(line)
    if reused:
        ctx.note(f"{reused:,} unchanged documents: chunks copied from the previous output")


if __name__ == "__main__":
    from pipekit.cli import stage_main

    raise SystemExit(stage_main(3, run, preview_columns=["chunk_id", "heading", "page_start", "page_end", "n_words", "text"]))
