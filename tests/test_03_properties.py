"""Stage 03 under hypothesis: generated Markdown (headings of both kinds, fences with `#`
comments, indented code, tables, lists with nested fences, quotes with lazy lines, HTML,
long lines, text without spaces, page markers, CRLF, front matter) and generated CSV.

Rule 2 is checked block by block against markdown-it-py; rules 1, 3, 4, 5, 6 and 7 by
tests/test_03_oracle.check_spans on every generated document.
"""
from __future__ import annotations

import csv
import io
import os

from hypothesis import given, settings, strategies as st

from pipekit.chunk import markdown_blocks
from pipekit.read.markdown import front_matter_end
from pipekit.run.stages import load_stage
from test_03_oracle import check_spans, front_matter_span, oracle_blocks

chunking = load_stage(3)


def examples(ci: int) -> int:
    """This test's example count: `ci` under the CI profile (max_examples 100, derandomized:
    the same examples every run), scaled up by the "search" profile (tests/conftest.py)."""
    return ci * settings.default.max_examples // 100

WORDS = ["alpha", "beta", "gamma", "delta", "install", "config", "page", "the", "of", "x",
         "café", "naïve", "e\u0301t\u00e9", "👩\u200d👩\u200d👧", "🇫🇷", "a\u200bb", "tab\there",
         "日本語のテキスト", "#tag", "*", "1.", "|", "a|b", "<b>", "`x`"]
TITLE_WORDS = ["Intro", "Setup", "Install", "Usage", "API", "FAQ", "Notes", "*Bold*", "`code`",
               "[Link](http://x.org)", "café", "Zürich", "v2.0"]
CJK = "日本語のテキストは空白なしで続きます。"

word = st.sampled_from(WORDS)
title = st.lists(st.sampled_from(TITLE_WORDS), min_size=1, max_size=4).map(" ".join)


@st.composite
def line_of(draw, min_w=1, max_w=12):
    # Bulk words come from one drawn Random: a draw per word made generation the slowest
    # part of the suite; the structure (which blocks, how joined) is still drawn directly.
    r = draw(st.randoms(use_true_random=False))
    return " ".join(r.choice(WORDS) for _ in range(r.randint(min_w, max_w)))


@st.composite
def atx(draw):
    level = draw(st.integers(1, 6))
    close = draw(st.sampled_from(["", "", " #", " ###"]))
    return "#" * level + " " + draw(title) + close


@st.composite
def setext(draw):
    return draw(title) + "\n" + draw(st.sampled_from(["===", "---", "=", "-----"]))


@st.composite
def paragraph(draw):
    lines = draw(st.lists(line_of(), min_size=1, max_size=3))
    kind = draw(st.integers(0, 9))
    if kind == 0:  # a long line
        lines.append(draw(line_of(60, 250)))
    elif kind == 1:  # text with no spaces at all
        lines.append(CJK * draw(st.integers(5, 40)))
    return "\n".join(l if not l.startswith(("#", "*", "1.", "|", "<", "`")) else "w " + l for l in lines)


FENCE_LINES = ["# comment, not a heading", "## also not", "x = 1", "---", "===", "",
               "    indented", "| a | b |", "> not a quote", "- not an item", "long " * 30]


@st.composite
def fence(draw):
    ch = draw(st.sampled_from(["`", "~"]))
    n = draw(st.integers(3, 5))
    info = draw(st.sampled_from(["", "python", "sh", "bash title=x"]))
    r = draw(st.randoms(use_true_random=False))
    body = [r.choice(FENCE_LINES) for _ in range(draw(st.sampled_from([0, 1, 3, 8, 20, 45])))]
    close = ch * (n + draw(st.integers(0, 2)))
    return "\n".join([ch * n + info, *body, close])


@st.composite
def indented(draw):
    return "\n".join("    " + l for l in draw(st.lists(st.sampled_from(["# indented comment", "x = 2", "y"]), min_size=1, max_size=4)))


@st.composite
def table(draw):
    cols = draw(st.integers(1, 3))
    header = "| " + " | ".join(draw(title).replace("|", "") for _ in range(cols)) + " |"
    delim = "|" + "|".join(draw(st.sampled_from(["---", ":--", "--:", ":-:"])) for _ in range(cols)) + "|"
    r = draw(st.randoms(use_true_random=False))
    rows = ["| " + " | ".join(r.choice(["1", "two", "3 4 5", "café", "x"]) for _ in range(cols)) + " |"
            for _ in range(draw(st.sampled_from([0, 1, 4, 12, 40])))]
    return "\n".join([header, delim, *rows])


@st.composite
def listing(draw):
    ordered = draw(st.booleans())
    items = []
    for k in range(draw(st.integers(1, 4))):
        marker = f"{k + 1}." if ordered else "-"
        item = f"{marker} {draw(line_of())}"
        extra = draw(st.integers(0, 3))
        pad = " " * (len(marker) + 1)
        if extra == 1:
            item += f"\n{pad}```\n{pad}# comment in an item\n{pad}```"
        elif extra == 2:
            item += f"\n{pad}{draw(line_of())}"
        elif extra == 3:
            item += f"\n{draw(line_of())}"  # a lazy continuation line
        items.append(item)
    return "\n".join(items)


@st.composite
def quote(draw):
    q = f"> # {draw(title)}\n> {draw(line_of())}"
    if draw(st.booleans()):
        q += f"\n{draw(line_of())}"  # lazy
    return q


html = st.sampled_from(["<div>\n# inside html\n</div>", "<!-- a comment\n# still a comment\n-->",
                        "<details>\n<summary>More</summary>\n\n# after html\n</details>"])
hr = st.sampled_from(["***", "* * *", "___"])

block = st.one_of(atx(), atx(), setext(), paragraph(), paragraph(), paragraph(), fence(), fence(),
                  indented(), table(), listing(), quote(), html, hr)


@st.composite
def markdown_doc(draw, markers=False):
    blocks = draw(st.lists(block, min_size=1, max_size=14))
    parts = []
    page = 1
    if markers and draw(st.booleans()):
        parts.append("--- page 1 ---\n")
    for k, b in enumerate(blocks):
        parts.append(b)
        if markers and draw(st.integers(0, 3)) == 0:
            page += 1
            parts.append(f"\n--- page {page} ---")
        parts.append(draw(st.sampled_from(["\n\n", "\n\n", "\n", "\n\n\n"])))
    text = "".join(parts)
    if draw(st.integers(0, 5)) == 0:
        text = "---\ntitle: Generated\ntags: [a, b]\n---\n" + text
    if draw(st.integers(0, 6)) == 0:
        text = text.replace("\n", "\r\n")
    return text


@st.composite
def budget(draw, strategy="heading"):
    unit = draw(st.sampled_from(["words", "chars", "tokens"]))
    scale = {"words": 1, "chars": 6, "tokens": 2}[unit]
    target = draw(st.integers(15, 120)) * scale
    mx = target + draw(st.integers(0, 2)) * target // 2
    mn = draw(st.integers(0, target // 3))
    overlap = draw(st.integers(0, target - 1)) if strategy == "fixed" else 0
    return chunking.Settings(strategy=strategy, target=target, max=mx, min=mn, unit=unit,
                             overlap=overlap, page_markers=draw(st.sampled_from(["track", "strip", "keep"])))


OURS_TO_ORACLE = {"heading": "heading", "para": "para", "fence": "fence", "code": "code", "html": "html",
                  "table": "table", "quote": "quote", "item": "item", "hr": "hr"}


def our_blocks(text: str):
    lines = text.split("\n")
    first = front_matter_end(lines)
    blocks, _ = markdown_blocks.scan_blocks(lines, first, markers=False)
    return [(OURS_TO_ORACLE[b[0]], b[1], b[2]) for b in blocks]


def test_ci_draws_the_same_examples_every_run():
    # Unseeded, the heading-rules test failed about one CI run in twenty on unchanged code.
    # Under the CI profile the examples are fixed, so a red build means the code changed.
    if os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci":
        assert settings.default.derandomize and settings.default.database is None
        assert settings.default.max_examples == 100  # examples() scales from this


# -- Rule 2: the scanner finds the blocks markdown-it finds ---------------------------------

@settings(max_examples=examples(400))
@given(markdown_doc())
def test_scanner_finds_the_blocks_markdown_it_finds(text):
    assert our_blocks(text) == oracle_blocks(text)


# -- Rules 1, 3, 4, 5, 6, 7 together on 500 generated documents ------------------------------

@settings(max_examples=examples(500))
@given(markdown_doc(markers=True), budget())
def test_heading_chunks_keep_every_rule(text, s):
    chunks = chunking.chunk_document(text, settings=s)
    assert check_spans(text, chunks, s) == []


@settings(max_examples=examples(150))
@given(markdown_doc(markers=True), budget(strategy="fixed"))
def test_fixed_windows_keep_spans_pages_and_ceiling(text, s):
    chunks = chunking.chunk_document(text, settings=s)
    assert check_spans(text, chunks, s) == []


@settings(max_examples=examples(150))
@given(markdown_doc(markers=False), budget())
def test_text_without_markers_chunks_the_same_in_every_page_mode(text, s):
    outs = [chunking.chunk_document(text, settings=chunking.Settings(**{**s.__dict__, "page_markers": m}))
            for m in ("track", "strip", "keep")]
    assert outs[0] == outs[1] == outs[2]


# -- Rule 9: front matter never shares a chunk with the heading after it -----------------------

@st.composite
def front_matter_then_heading(draw):
    """Front matter (with a title or none, short or long enough to be cut), directly or
    after a blank line followed by a heading of any level, then a generated document."""
    r = draw(st.randoms(use_true_random=False))
    # (plain words: how a YAML title with Markdown in it should read is another question)
    plain = st.lists(st.sampled_from(["Intro", "Setup", "Usage", "API", "café", "v2.0"]), min_size=1, max_size=3)
    lines = ["title: " + " ".join(draw(plain))] if draw(st.booleans()) else []
    lines += [f"key{k}: " + " ".join(r.choice(WORDS[:8]) for _ in range(r.randint(1, 40)))
              for k in range(draw(st.integers(0, 6)))]
    heading = draw(st.one_of(atx(), setext()))
    return "---\n" + "\n".join(lines) + "\n---\n" + draw(st.sampled_from(["", "\n"])) + heading + \
        "\n\n" + draw(markdown_doc())


@settings(max_examples=examples(150))
@given(front_matter_then_heading(), budget())
def test_front_matter_never_shares_a_chunk_with_the_heading_after_it(text, s):
    chunks = chunking.chunk_document(text, settings=s)
    end = front_matter_span(text)
    heading_at = end + len(text[end:]) - len(text[end:].lstrip("\n"))
    assert end > 0 and not any(c["start_char"] < end and c["end_char"] > heading_at for c in chunks)
    assert check_spans(text, chunks, s) == []


# -- CSV ---------------------------------------------------------------------------------------

cell = st.one_of(st.sampled_from(["1", "two", "3.5", "café", "", "x y z"]),
                 st.lists(word, min_size=1, max_size=8).map(" ".join),
                 st.sampled_from(["with, comma", "line one\nline two", 'say "hi"', "multi\nline\nvalue"]))


@st.composite
def csv_doc(draw):
    cols = draw(st.integers(1, 4))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([f"col{k}" for k in range(cols)])
    r = draw(st.randoms(use_true_random=False))
    cells = ["1", "two", "3.5", "café", "", "x y z", "with, comma", "line one\nline two", 'say "hi"',
             "multi\nline\nvalue", "alpha beta gamma delta " * 3]
    for _ in range(draw(st.sampled_from([0, 1, 5, 30, 120]))):
        w.writerow([r.choice(cells) for _ in range(cols)])
    return buf.getvalue()


@settings(max_examples=examples(150))
@given(csv_doc(), budget())
def test_csv_chunks_start_with_the_header_and_keep_records_whole(text, s):
    chunks = chunking.chunk_document(text, fmt="csv", settings=s, name="data.csv")
    assert check_spans(text, chunks, s, fmt="csv") == []
    for c in chunks[1:] if len(chunks) > 1 else chunks:
        assert c["heading_path"][0] == "data.csv"


# -- Rule 9: the same generated text read as plain text has no headings, and keeps rules 4-7 ---

@settings(max_examples=examples(150))
@given(markdown_doc(markers=True), budget())
def test_plain_text_chunks_have_no_headings_and_keep_every_rule(text, s):
    chunks = chunking.chunk_document(text, fmt="text", settings=s)
    assert all(c["heading_path"] == [] for c in chunks)
    assert check_spans(text, chunks, s, fmt="text") == []


# -- The tiniest budgets: blocks of characters Python calls whitespace ----------------------

# A no-break space or a form feed makes a CommonMark paragraph, yet has no line or word to
# cut between: at target = max = 1 such a block once raised an IndexError in _pack.
SPACES = st.lists(st.sampled_from(["\xa0", "\x0c", "\u2003", " ", "\n", "# h\n", "x", "\t"]), max_size=12).map("".join)


@settings(max_examples=examples(200))
@given(SPACES, st.integers(1, 3), st.sampled_from(["words", "chars", "tokens"]),
       st.sampled_from(["track", "strip", "keep"]))
def test_whitespace_blocks_chunk_at_the_smallest_budget(text, size, unit, markers):
    s = chunking.Settings(strategy="heading", target=size, max=size, min=0, unit=unit, overlap=0,
                          page_markers=markers)
    chunks = chunking.chunk_document(text, settings=s)
    assert check_spans(text, chunks, s) == []


def test_a_no_break_space_and_a_form_feed_under_a_heading_at_budget_one():
    s = chunking.Settings(strategy="heading", target=1, max=1, min=0, unit="chars", overlap=0,
                          page_markers="track")
    chunks = chunking.chunk_document("# h\n\xa0\x0c", settings=s)
    assert [c["heading_path"] for c in chunks] == [["h"], ["h"]]
    assert all(c["text"].strip() for c in chunks)  # the heading's pieces; nothing of only spaces
