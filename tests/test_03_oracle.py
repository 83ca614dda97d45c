"""The referee for stage 03: markdown-it-py says where the structure is, these checks say
whether a chunking respects it.  Used by the stage-03 tests (on spans) and by
bench/chunking.py (on text only, so the peers' chunkers are judged by the same rules).

The tests at the bottom show each check catches the violation it names.
"""
from __future__ import annotations

import bisect
import functools
import csv
import io
import re
from collections import Counter

import regex
from markdown_it import MarkdownIt
from mdit_py_plugins.front_matter import front_matter_plugin

from pipekit.run.stages import load_stage

chunking = load_stage(3)

_MD_PLAIN = MarkdownIt("commonmark").enable("table")
# The plugin takes any first line starting with `---` (even `--- page 1 ---`) for front
# matter; YAML front matter is exactly `---`, so only such documents get the plugin.
_MD_FM = MarkdownIt("commonmark").enable("table").use(front_matter_plugin)
_MARKER = re.compile(r"^--- page (\d+) ---[ \t]*\r?$", re.M)
_CONT = re.compile(r"--- page (\d+) \(cont\.\) ---\r?\n")
_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})", re.M)

VIOLATIONS = ("straddles a heading", "# comment taken for a heading", "unbalanced fence",
              "table piece without header", "CSV chunk without header", "chars lost",
              "cut inside a grapheme cluster", "over budget")


# --------------------------------------------------------------------------------------
# What markdown-it sees
# --------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=16)
def tokens(text: str):
    first = text.split("\n", 1)[0].rstrip(" \t\r")
    return (_MD_FM if first == "---" else _MD_PLAIN).parse(text)


def _inline_plain(tok) -> str:
    out = []
    for ch in tok.children or []:
        if ch.type in ("text", "code_inline", "html_inline") and ch.type != "html_inline":
            out.append(ch.content)
        elif ch.type in ("softbreak", "hardbreak"):
            out.append(" ")
    s = " ".join("".join(out).split())
    return s if len(s) <= 256 else s[:255].rstrip() + "…"


def line_starts(text: str) -> list[int]:
    starts = [0]
    for m in re.finditer("\n", text):
        starts.append(m.end())
    return starts


def oracle_blocks(text: str) -> list[tuple[str, int, int]]:
    """Top-level blocks as (kind, first_line, end_line) with trailing blank lines trimmed;
    list items (children of a top-level list) count as top-level blocks."""
    lines = text.split("\n")
    kinds = {"heading_open": "heading", "paragraph_open": "para", "fence": "fence",
             "code_block": "code", "html_block": "html", "table_open": "table",
             "blockquote_open": "quote", "hr": "hr"}
    out = []
    for t in tokens(text):
        if t.map is None:
            continue
        kind = None
        if t.level == 0 and t.type in kinds:
            kind = kinds[t.type]
        elif t.level == 1 and t.type == "list_item_open":
            kind = "item"
        if kind is None:
            continue
        a, b = t.map
        while b > a + 1 and not lines[b - 1].strip(" \t\r"):
            b -= 1
        out.append((kind, a, b))
    return out


def oracle_headings(text: str) -> list[tuple[int, int, str, int]]:
    """Top-level headings as (first_line, level, plain title, end_line)."""
    toks = tokens(text)
    out = []
    for k, t in enumerate(toks):
        if t.type == "heading_open" and t.level == 0:
            out.append((t.map[0], int(t.tag[1]), _inline_plain(toks[k + 1]), t.map[1]))
    return out


def fence_left_open(text: str) -> bool:
    """Does `text` hold a top-level fence that is never closed, as markdown-it reads it?
    (A fenced block's last line is its closing fence: the same character, at least as
    many times, nothing else; one that runs to the end of the text was left open.)"""
    lines = text.split("\n")
    for tk in tokens(text):
        if tk.type != "fence" or tk.level != 0:
            continue
        a, b = tk.map
        last = lines[b - 1].strip(" \t\r") if b - 1 > a else ""
        ch, n = tk.markup[0], len(tk.markup)
        if not (len(last) >= n and last == ch * len(last)):
            return True
    return False


def fence_comment_lines(text: str) -> set[str]:
    """`# ...` lines inside fenced or indented code, stripped: what a naive splitter
    takes for headings."""
    out = set()
    for t in tokens(text):
        if t.type in ("fence", "code_block"):
            for ln in t.content.split("\n"):
                if ln.lstrip().startswith("#"):
                    out.add(ln.strip())
    return out


def front_matter_span(text: str) -> int:
    """Characters of front matter at the start (0 if none), by markdown-it's plugin."""
    for t in tokens(text):
        if t.type == "front_matter":
            return line_starts(text + "\n")[t.map[1]] if t.map[1] < len(line_starts(text)) else len(text)
    return 0


def front_matter_heading(text: str) -> tuple[int, int, str, int] | None:
    """SPEC rule 9 and the title: front matter whose YAML has a plain `title:` heads the
    document like a level-1 heading on its lines, (0, 1, title, end_line); else None."""
    import yaml

    for t in tokens(text):
        if t.type == "front_matter":
            try:
                meta = yaml.safe_load(t.content)
            except yaml.YAMLError:
                return None
            title = meta.get("title") if isinstance(meta, dict) else None
            if isinstance(title, bool) or not isinstance(title, (str, int, float)) or not str(title).split():
                return None
            return (0, 1, " ".join(str(title).split()), t.map[1])
    return None


def measure(text: str, unit: str) -> int:
    return chunking.measure(chunking.count_words(text), len(text), unit)


# --------------------------------------------------------------------------------------
# Span-based checks for our chunks (exact rules 1-8)
# --------------------------------------------------------------------------------------

def check_spans(text: str, chunks: list[dict], settings, fmt: str = "markdown",
                headings: list[tuple[int, int, str, int]] | None = None) -> list[str]:
    """Every way `chunks` break SPEC rules 1, 3, 4, 5, 6, 7 on `text`; [] when none.

    fmt "text" and "pdf" have no heading syntax (rule 9): their headings are `headings`
    ((first_line, level, title, end_line), a PDF's outline as the test placed it), none
    by default, and markdown-it is not asked."""
    problems: list[str] = []
    s = settings
    markers = [(m.start(), m.end(), int(m.group(1))) for m in _MARKER.finditer(text)] \
        if s.page_markers != "keep" else []
    fm = front_matter_span(text) if fmt not in ("csv",) and text.startswith("---") else 0
    # Rule 6: spans in order, not overlapping (fixed: overlapping allowed), text = span + additions
    prev_end = prev_start = -1
    reach = 0  # everything before `reach` is covered (or exempt); front matter too (rule 9)
    for k, c in enumerate(chunks):
        a, b = c["start_char"], c["end_char"]
        if not (0 <= a < b <= len(text)):
            problems.append(f"chunk {k}: bad span {a}..{b}")
            continue
        if s.strategy == "heading" and a < prev_end:
            problems.append(f"chunk {k}: span {a} overlaps previous ending {prev_end}")
        if a < prev_start:
            problems.append(f"chunk {k}: out of order")
        prev_start, prev_end = a, b
        if a > reach and not _exempt(text[reach:a], s):
            problems.append(f"chunk {k}: text before it not in any chunk: {text[reach:a][:40]!r}")
        reach = max(reach, b)
        for p in (a, b):
            if not _grapheme_boundary(text, p):
                problems.append(f"chunk {k}: cut inside a grapheme cluster at {p}")
        body = text[a:b]
        if s.page_markers == "strip":
            body = _MARKER.sub("\x00", body).replace("\x00\r\n", "").replace("\x00\n", "").replace("\x00", "")
        t = c["text"]
        cont = _CONT.match(t)
        if cont:
            if s.page_markers != "track":
                problems.append(f"chunk {k}: continuation marker without track")
            t = t[cont.end():]
        closing = re.search(r"\r?\n {0,3}(`{3,}|~{3,})$", t)
        if t.endswith(body):
            pre, post = t[:len(t) - len(body)], ""
        elif closing and t[:closing.start()].endswith(body):
            pre, post = t[:closing.start() - len(body)], closing.group(0)
        else:
            pre = post = None
            problems.append(f"chunk {k}: text is not its span plus additions")
        if pre is not None:
            if pre and not (_FENCE_LINE.match(pre) and pre.count("\n") == 1) and not _is_table_header(pre) \
                    and not (fmt == "csv" and pre.rstrip("\r\n") == text[:text.find("\n")].rstrip("\r")):
                problems.append(f"chunk {k}: unexpected prefix {pre[:40]!r}")
            if post and not re.fullmatch(r"\r?\n {0,3}(`{3,}|~{3,})", post):
                problems.append(f"chunk {k}: unexpected suffix {post[:40]!r}")
        # Rule 4: the ceiling (a single unbreakable grapheme, or one CSV record, may exceed it)
        if measure(c["text"], s.unit) > s.max:
            core = c["text"].split()
            single = len(core) <= 1 or (len(regex.findall(r"\X", body.strip())) <= 1)
            if not single and not (fmt == "csv" and s.strategy == "heading" and _csv_rows(body, header=k == 0) <= 1):
                problems.append(f"chunk {k}: over budget ({measure(c['text'], s.unit)} > {s.max})")
        # Rule 7: pages
        if markers and s.page_markers in ("track", "strip"):
            k0 = bisect.bisect_right([m[0] for m in markers], a) - 1
            exp = markers[k0][2] if k0 >= 0 else (markers[0][2] - 1 if markers[0][2] > 1 else None)
            if c["page_start"] != exp:
                problems.append(f"chunk {k}: page_start {c['page_start']} != {exp}")
            if s.page_markers == "track" and exp is not None and k > 0 or (k == 0 and k0 >= 0):
                at_marker = k0 >= 0 and markers[k0][0] == a
                want = exp is not None and not at_marker and (k0 >= 0 or k > 0) and s.page_markers == "track"
                if want != bool(cont):
                    problems.append(f"chunk {k}: continuation marker {'missing' if want else 'unexpected'}")
        elif c["page_start"] is not None and s.page_markers == "keep":
            problems.append(f"chunk {k}: page_start set with keep")

    if reach < len(text) and not _exempt(text[reach:], s):
        problems.append(f"text after the last chunk not in any chunk: {text[reach:][:40]!r}")

    if s.strategy == "heading" and fmt != "csv":
        # With track/strip a marker line is a page break, which ends a paragraph like a
        # blank line: the oracle reads the text with marker lines blanked (offsets kept).
        seen = text if s.page_markers == "keep" else _MARKER.sub(lambda m: " " * len(m.group(0)), text)
        plain = fmt in ("text", "pdf")
        problems += _check_structure(seen, chunks, s, 0 if plain else fm, text,
                                     headings=(headings or []) if plain else None)
    if fmt == "csv" and s.strategy == "heading":
        problems += _check_csv(text, chunks)
    return problems


def _exempt(gap: str, s) -> bool:
    """A gap between spans may hold whitespace only (and, with strip, marker lines)."""
    if s.page_markers == "strip":
        gap = _MARKER.sub("", gap)
    return not gap.strip()


def _grapheme_boundary(text: str, p: int) -> bool:
    if p <= 0 or p >= len(text):
        return True
    a = max(0, p - 24)
    pos = a
    for g in regex.finditer(r"\X", text[a:p + 24]):
        pos = a + g.end()
        if pos >= p:
            return pos == p
    return True


def _is_table_header(pre: str) -> bool:
    lines = pre.split("\n")
    return len(lines) == 3 and lines[2] == "" and "|" in lines[0] and re.fullmatch(r"\s*[-:|][-:| \t]*\r?", lines[1]) is not None


def _csv_rows(body: str, header: bool) -> int:
    rows = [r for r in csv.reader(io.StringIO(body, newline="")) if r]
    return len(rows) - (1 if header else 0)


def _check_structure(text: str, chunks: list[dict], s, fm: int, original: str,
                     headings: list | None = None) -> list[str]:
    """Rules 1, 2, 3 (fences and tables) and 5 against markdown-it's reading of `text`
    (or, for text without heading syntax, against the given headings)."""
    problems = []
    real = original
    starts = line_starts(text)
    heads = oracle_headings(text) if headings is None else list(headings)
    if fm:
        virtual = front_matter_heading(original)
        heads = ([virtual] if virtual else []) + heads
    head_pos = [starts[h[0]] for h in heads]
    # expected heading path at each heading
    paths, levels = [], []
    for h in heads:
        del levels[h[1] - 1:]
        levels.extend([""] * (h[1] - 1 - len(levels)))
        levels.append(h[2])
        p = list(levels)
        while p and p[-1] == "":
            p.pop()
        paths.append(p)
    blocks = oracle_blocks(text) if headings is None else []
    for k, c in enumerate(chunks):
        a, b = c["start_char"], c["end_char"]
        # Rule 1: headings inside the span only at its start (a chain of headings)
        inside = [i for i, hp in enumerate(head_pos) if a <= hp < b]
        if inside:
            last = inside[-1]
            lead = text[a:head_pos[inside[0]]]
            if _MARKER.sub("", lead).strip():
                problems.append(f"chunk {k}: content before heading line {heads[inside[0]][0]}")
            if fm and virtual and inside[0] == 0 and len(inside) > 1:
                # Rule 9: front matter is no heading line a deeper heading chains onto.
                problems.append(f"chunk {k}: front matter shares it with the heading at line {heads[1][0]}")
            for i in inside[1:]:
                gap = text[starts[heads[i - 1][3] - 1]:head_pos[i]]
                gap = gap[gap.find("\n") + 1:] if "\n" in gap else ""
                if _MARKER.sub("", gap).strip():
                    problems.append(f"chunk {k}: straddles heading at line {heads[i][0]}")
            expect = paths[last]
        else:
            i = bisect.bisect_right(head_pos, a) - 1
            expect = paths[i] if i >= 0 else []
        got = list(c["heading_path"])
        if got != expect:
            problems.append(f"chunk {k}: heading_path {got} != {expect}")
    # Rule 3: a fence no larger than max is never cut; a cut one is re-fenced
    for kind, f0, f1 in blocks:
        if kind not in ("fence", "table"):
            continue
        fa, fb = starts[f0], min(len(text), starts[f1] - 1 if f1 < len(starts) else len(text))
        touching = [c for c in chunks if c["start_char"] < fb and c["end_char"] > fa]
        if len(touching) > 1:
            block_text = real[fa:fb]
            if measure(block_text, s.unit) <= s.max - _reserve(real, s):
                problems.append(f"{kind} at line {f0} cut though within max")
            closed_src = not fence_left_open(block_text)
            for n, c in enumerate(touching):
                t = _CONT.sub("", c["text"], count=1)
                if kind == "fence":
                    # from the fence's opening on, every piece closes what it opens (the
                    # last piece of a fence the source never closes stays open)
                    if c["start_char"] < fa:
                        lead = real[c["start_char"]:fa]
                        if s.page_markers == "strip":
                            lead = re.sub(r"^--- page \d+ ---[ \t]*\r?\n?", "", lead, flags=re.M)
                        t = t[len(lead):]
                    if (closed_src or n < len(touching) - 1) and fence_left_open(t):
                        problems.append(f"fence at line {f0}: a piece is not re-fenced")
                else:
                    # SPEC rule 3 as written: the header and delimiter repeat in every piece
                    # whenever they fit in max beside a row — any row, since every row must
                    # go in some piece (the continuation-marker room counted, as for all sizes).
                    header = real[fa:starts[f0 + 2]] if f0 + 2 < len(starts) else real[fa:]
                    rows = [real[starts[j]:starts[j + 1] - 1 if j + 1 < len(starts) else len(real)].rstrip("\r")
                            for j in range(f0 + 2, f1)]
                    if not rows or max(measure(header + r, s.unit) for r in rows) + _reserve(real, s) > s.max:
                        continue  # a row does not fit beside the header: cut by lines
                    if not any(tk.type == "table_open" for tk in tokens(t)):
                        problems.append(f"table at line {f0}: a piece without its header")
    # Rule 5: a runt joins its predecessor when both sit in the same section and fit
    skip = s.page_markers != "keep"
    sec_of = [bisect.bisect_right(head_pos, _content_start(text, c["start_char"], skip)) for c in chunks]
    for k in range(1, len(chunks)):
        c, p = chunks[k], chunks[k - 1]
        if measure(c["text"], s.unit) >= s.min or sec_of[k] != sec_of[k - 1]:
            continue
        if k + 1 < len(chunks) and sec_of[k + 1] == sec_of[k]:
            continue  # only a section's last chunk can be a runt
        c_own = _CONT.sub("", c["text"], count=1)
        p_added_close = re.search(r"\n {0,3}(`{3,}|~{3,})$", p["text"]) and not real[:p["end_char"]].endswith(p["text"][-3:])
        c_added_open = not c_own.startswith(real[c["start_char"]:c["start_char"] + 1])
        merged = real[p["start_char"]:c["end_char"]]
        p_span = real[p["start_char"]:p["end_char"]]
        if not p["text"].endswith(p_span):
            continue  # strip mode or a fence piece: sizes are not comparable this simply
        added = p["text"][:len(p["text"]) - len(p_span)]  # continuation marker, repeated header
        size = measure(added + merged, s.unit)
        if size <= s.max - _reserve(real, s) and not p_added_close and not c_added_open:
            problems.append(f"chunk {k}: runt not joined to its predecessor")
    return problems


def _content_start(text: str, a: int, skip_markers: bool = True) -> int:
    """Where a chunk's content starts: past whitespace and page-marker lines."""
    while True:
        m = re.compile(r"[ \t\r\n]*").match(text, a)
        a = m.end()
        mk = _MARKER.match(text, a) if skip_markers else None
        if not mk:
            return a
        a = mk.end()


def _reserve(text: str, s) -> int:
    """Room the chunker keeps for a continuation marker in documents with pages."""
    if s.page_markers != "track":
        return 0
    pages = [int(m.group(1)) for m in _MARKER.finditer(text)]
    if not pages:
        return 0
    first_nl = text.find("\n")
    nl = "\r\n" if first_nl > 0 and text[first_nl - 1] == "\r" else "\n"  # the line end it writes
    probe = f"--- page {max(pages)} (cont.) ---{nl}"
    return measure(probe, s.unit)


def _check_csv(text: str, chunks: list[dict]) -> list[str]:
    problems = []
    header = next(csv.reader(io.StringIO(text, newline="")))
    all_rows = [r for r in csv.reader(io.StringIO(text, newline="")) if r]
    got = []
    for k, c in enumerate(chunks):
        rows = [r for r in csv.reader(io.StringIO(c["text"], newline="")) if r]
        if not rows or rows[0] != header:
            problems.append(f"CSV chunk {k} does not start with the header row")
            continue
        got.extend(rows[1:])
    if got != all_rows[1:]:
        problems.append("CSV records cut, lost or reordered")
    return problems


# --------------------------------------------------------------------------------------
# Text-only checks, the same for every chunker (bench/chunking.py)
# --------------------------------------------------------------------------------------

_JOINERS = regex.compile(r"^[\p{M}\u200d\ufe0f\U0001F3FB-\U0001F3FF]")


def text_violations(source: str, texts: list[str], headings: list[list[str]] | None,
                    max_size: int, unit: str, fmt: str = "markdown") -> Counter:
    """Violations visible in chunk texts alone, so any chunker can be judged."""
    v: Counter = Counter({name: 0 for name in VIOLATIONS})
    comments = fence_comment_lines(source) if fmt != "csv" else set()
    csv_header = source.split("\n", 1)[0].rstrip("\r") if fmt == "csv" else None
    for k, t in enumerate(texts):
        if fmt != "csv":
            # page-marker lines are layout, not content under a heading
            toks = tokens(_MARKER.sub("", _CONT.sub("", t, count=1)))
            seen_content = False
            for tk in toks:
                if tk.level != 0 or tk.type.endswith("_close") or tk.type == "inline":
                    continue
                if tk.type == "heading_open":
                    if seen_content:
                        v["straddles a heading"] += 1
                        break
                else:
                    seen_content = True
            first = t.strip().split("\n", 1)[0].strip() if t.strip() else ""
            if (first in comments and first.startswith("#")) or (
                    headings and any(("# " + h).strip() in comments or h in {c.lstrip("#").strip() for c in comments}
                                     for h in headings[k] if h)):
                v["# comment taken for a heading"] += 1
            if fence_left_open(t):
                v["unbalanced fence"] += 1
            if re.search(r"^\s*\|.*\|\s*$", t, re.M) and not any(tk.type == "table_open" for tk in toks):
                v["table piece without header"] += 1
        else:
            if t.split("\n", 1)[0].rstrip("\r") != csv_header:
                v["CSV chunk without header"] += 1
        if _JOINERS.match(t) or t.endswith("\u200d"):
            v["cut inside a grapheme cluster"] += 1
        if measure(t, unit) > max_size and len(t.split()) > 1 and not (fmt == "csv" and _csv_rows(t, True) <= 1):
            v["over budget"] += 1
    src = Counter(ch for ch in source if not ch.isspace())  # front matter too (rule 9)
    got = Counter(ch for t in texts for ch in t if not ch.isspace())
    v["chars lost"] = sum((src - got).values())
    return v


# --------------------------------------------------------------------------------------
# The checks catch what they name
# --------------------------------------------------------------------------------------

def test_oracle_sees_comment_in_fence_not_as_heading():
    text = "# Title\n\n```sh\n# not a heading\n```\n"
    assert [h[:3] for h in oracle_headings(text)] == [(0, 1, "Title")]
    assert fence_comment_lines(text) == {"# not a heading"}


def test_text_checks_catch_each_violation():
    src = "# A\n\ntext a\n\n## B\n\n```sh\n# c\nx\n```\n\n| h | i |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n"
    bad = ["# A\n\ntext a\n\n## B", "```sh\n# c", "x\n```", "| 3 | 4 |"]
    v = text_violations(src, bad, [["A"], ["A", "B"], ["A", "B", "c"], ["A", "B"]], 3, "words")
    assert v["straddles a heading"] == 1
    assert v["unbalanced fence"] == 2
    assert v["table piece without header"] == 1
    assert v["# comment taken for a heading"] == 1
    assert v["chars lost"] > 0
    assert v["over budget"] >= 1
    v2 = text_violations("a,b\n1,2\n3,4\n", ["a,b\n1,2", "3,4"], None, 100, "words", fmt="csv")
    assert v2["CSV chunk without header"] == 1
    v3 = text_violations("e\u0301x y", ["e", "\u0301x y"], None, 100, "words")
    assert v3["cut inside a grapheme cluster"] == 1


def test_span_checks_catch_a_lost_character_and_a_straddle():
    s = chunking.Settings(target=50, max=100, min=0)
    text = "# A\n\none\n\n# B\n\ntwo\n"
    good = chunking.chunk_document(text, settings=s)
    assert check_spans(text, good, s) == []
    straddle = [{"heading_path": ["A"], "text": text[:-1], "start_char": 0, "end_char": len(text) - 1,
                 "page_start": None, "page_end": None}]
    assert any("straddles" in p or "heading_path" in p for p in check_spans(text, straddle, s))
    lost = [dict(good[0]), dict(good[1])]
    lost[1]["start_char"] += 1
    lost[1]["text"] = lost[1]["text"][1:]
    assert any("not in any chunk" in p for p in check_spans(text, lost, s))


def test_span_checks_catch_front_matter_sharing_a_chunk_with_the_heading_after_it():
    s = chunking.Settings(target=50, max=100, min=0)
    text = "---\ntitle: Code of Conduct\n---\n\n## Our Pledge\n\nWe pledge.\n"
    assert check_spans(text, chunking.chunk_document(text, settings=s), s) == []
    one = [{"heading_path": ["Code of Conduct", "Our Pledge"], "text": text.rstrip(), "start_char": 0,
            "end_char": len(text) - 1, "page_start": None, "page_end": None}]
    assert "chunk 0: front matter shares it with the heading at line 4" in check_spans(text, one, s)


def test_span_checks_want_the_table_header_in_every_piece_when_a_row_fits_beside_it():
    # SPEC rule 3 as written: a 31-word header over target/2 still repeats, since header,
    # delimiter and one row fit in max 60.  Pieces cut between lines without it are caught.
    s = chunking.Settings(target=40, max=60, min=0)
    header = "| " + " ".join(f"h{i}" for i in range(28)) + " |\n|---|\n"
    text = header + "\n".join(f"| row {i} |" for i in range(40)) + "\n"
    starts = line_starts(text)
    cuts = [0, 8, 18, 28, 38, 42]  # line numbers: pieces of a few rows, no header repeated
    by_lines = [{"heading_path": [], "text": text[starts[a]:starts[b] - 1], "start_char": starts[a],
                 "end_char": starts[b] - 1, "page_start": None, "page_end": None}
                for a, b in zip(cuts, cuts[1:])]
    assert "table at line 0: a piece without its header" in check_spans(text, by_lines, s)
    assert check_spans(text, chunking.chunk_document(text, settings=s), s) == []
