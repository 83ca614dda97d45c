"""pipekit.chunk.headings: a heading's text as a CommonMark reader shows it.

markdown-it-py is the oracle: for generated headings (hypothesis) and for the headings of
real documentation on this machine, `plain_heading(raw)` must equal the visible text of
markdown-it's rendering of the same heading (its HTML's textContent: text and code, no
tags, no image alt text), whitespace collapsed.  Attribute lists are not CommonMark, so
the oracle is given the heading with its attribute list already removed; the rules for
attribute lists are tested on their own below.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from markdown_it import MarkdownIt
from markdown_it.common.utils import mdTrim

from pipekit.chunk.headings import HEADING_MAX, plain_heading, strip_attribute_list
from pipekit.run.stages import get_stage, load_stage

_MD = MarkdownIt("commonmark")


def rendered(raw: str) -> str:
    """markdown-it's reading of one heading's inline text, as a browser would show it."""
    out = []
    for tok in _MD.parseInline(raw)[0].children or []:
        if tok.type in ("text", "code_inline"):
            out.append(tok.content)
        elif tok.type in ("softbreak", "hardbreak"):
            out.append(" ")
        # image: alt text is not displayed; html_inline: a tag, not text; link_open/close: markup
    s = " ".join("".join(out).split())
    return s if len(s) <= HEADING_MAX else s[: HEADING_MAX - 1].rstrip() + "…"


def expected(raw: str) -> str:
    return rendered(strip_attribute_list(mdTrim(raw)))  # a heading's content is trimmed so


# --------------------------------------------------------------------------------------
# The rules, one by one
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw, text", [
    ("use_directory_urls", "use_directory_urls"),
    ("CURLE_OPERATION_TIMEDOUT", "CURLE_OPERATION_TIMEDOUT"),
    ("The snake_case_name option", "The snake_case_name option"),
    ("_emphasis_ and *more*", "emphasis and more"),
    ("__init__", "init"),                           # CommonMark: strong, as every reader shows it
    ("my__dunder__name", "my__dunder__name"),       # `_` inside a word never opens or closes
    ("foo*bar*baz", "foobarbaz"),                   # `*` may
    ("**Bold** `code_with_stars*` and `a  b`", "Bold code_with_stars* and a b"),
    ("``a `tick` here``", "a `tick` here"),
    ("`` ` ``", "`"),
    ("Fish &amp; chips &#95;x&#95; &#x41; &copy; &nosuch;", "Fish & chips _x_ A © &nosuch;"),
    ("`&amp;` stays", "&amp; stays"),               # no entities inside code
    (r"\*not emphasis\* a\_b", "*not emphasis* a_b"),
    ("[Link *text*](https://x.org \"title\") and <https://y.org>", "Link text and https://y.org"),
    ("Logo ![alt words](logo.png) here", "Logo here"),  # an image shows no text
    ("[ref link][r1] and [shortcut]", "[ref link][r1] and [shortcut]"),  # no definitions: literal
    ("[bad](javascript:alert(1))", "[bad](javascript:alert(1))"),  # not a link in CommonMark
    ("<kbd>Ctrl</kbd>+<kbd>C</kbd> <!-- note -->", "Ctrl+C"),
    ("~~old~~ name", "~~old~~ name"),               # strikethrough is GFM, not CommonMark
    ("*unclosed and closed*", "unclosed and closed"),
    ("***both*** **a*", "both *a"),
])
def test_each_inline_rule_matches_commonmark(raw, text):
    assert plain_heading(raw) == text
    assert rendered(raw) == text  # the oracle agrees, so the expectation is CommonMark's


@pytest.mark.parametrize("raw, text", [
    ("Handling Errors { #handling-errors }", "Handling Errors"),      # MkDocs / Python-Markdown
    ("Handling Errors {#handling-errors}", "Handling Errors"),
    ("Setup {: .note #setup }", "Setup"),                              # kramdown IAL
    ("Install {#install .unnumbered lang=en}", "Install"),             # Pandoc
    ('Options { data-toc-label="Opts" }', "Options"),
    ("`use_directory_urls` { #use_directory_urls }", "use_directory_urls"),
    ("Name (*required*) ## {: #name }", "Name (required)"),           # after closing hashes
    ("A hash style header ### {: #hash }", "A hash style header"),
    ("Learn C# {: #c }", "Learn C#"),               # `#` inside the text is not a closing sequence
    ("`markdown.markdown(text [, **kwargs])` { #markdown data-toc-label='markdown.markdown' }",
     "markdown.markdown(text [, **kwargs])"),
    ("Format {name}", "Format {name}"),             # a bare word is text (format strings, sets)
    ("Sets {a, b}", "Sets {a, b}"),
    (r"Escaped \{#id}", "Escaped {#id}"),
    ("Middle {#id} text", "Middle {#id} text"),     # only at the end
    ("Attached{#id}", "Attached{#id}"),             # needs a space before it
    ("{}", "{}"),
])
def test_attribute_lists_are_dropped_only_when_they_are_one(raw, text):
    assert plain_heading(raw) == text


def test_long_headings_are_cut_with_an_ellipsis_and_whitespace_is_collapsed():
    assert plain_heading("  a \t  b  ") == "a b"
    long = plain_heading("word_" * 100)
    assert len(long) == HEADING_MAX and long.endswith("…") and long.startswith("word_word_")


def test_stage_03_uses_it_and_records_it_as_code():
    chunking = load_stage(3)
    text = "# mkdocs.yml\n\n## use_directory_urls { #use-directory-urls }\n\nBody text here.\n"
    (chunk,) = chunking.chunk_document(text, fmt="markdown")
    assert chunk["heading_path"] == ["mkdocs.yml", "use_directory_urls"]
    assert "pipekit/chunk/" in get_stage(3).code  # a change to the rules (chunk/headings.py) reruns stage 03


# --------------------------------------------------------------------------------------
# markdown-it as the oracle: generated headings
# --------------------------------------------------------------------------------------

# Pieces that exercise every inline rule and the places where they interact: delimiter
# runs inside and around words, code spans of different lengths, brackets with and without
# destinations, autolinks, tags, entities, escapes, attribute-list-like braces, Unicode
# punctuation and spaces (they decide flanking).
_PIECES = ["a", "b", "word", "x_y", "é", "1", "_", "__", "*", "**", "***", "`", "``", "[", "]",
           "(", ")", "](u)", "](<u v>)", '](u "t")', "![", "!", " ", "  ", "\t", "\\", "\\*",
           "\\_", "&amp;", "&#95;", "&#x2A;", "&nbsp;", "&bogus;", "&", "<b>", "</b>", "<",
           ">", "<https://x.y/a_b>", "<a@b.co>", "<!-- c -->", ".", ",", ":", "-", "'", '"',
           "’", "«", "\u00a0", "\u3000", "{#id}", "{ .cls }", "{", "}", "~~", "#", "javascript:x"]


@st.composite
def heading_text(draw):
    return "".join(draw(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=14))).strip(" \t")


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(heading_text())
def test_generated_headings_read_as_markdown_it_reads_them(raw):
    assert plain_heading(raw) == expected(raw)


@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40))
def test_any_text_reads_as_markdown_it_reads_it(raw):
    raw = " ".join(raw.split("\n"))  # a heading is one line
    assert plain_heading(raw) == expected(raw)


# --------------------------------------------------------------------------------------
# markdown-it as the oracle: real headings
# --------------------------------------------------------------------------------------

# Real Markdown documentation on the machine: Node.js's API docs (Debian package
# nodejs-doc), Markdown files shipped inside installed Python packages, and our fixtures.
_REAL_ROOTS = [Path("/usr/share/doc/nodejs"), Path(sys.prefix) / "lib",
               Path(__file__).parent / "fixtures", Path(__file__).parents[1] / "data" / "sample"]


def _real_headings(budget_bytes: int = 2_500_000, underscores: int = 20) -> list[str]:
    """Headings of real Markdown files, smallest files first up to `budget_bytes` (parsing
    the 14 MB of Node.js changelogs with markdown-it would take most of a minute), or on
    until `underscores` headings hold an underscore (at most 4x the budget): which small
    files a machine has depends on what is installed, and with nodejs-doc plus the venv's
    packages the first 2.5 MB held only 5 such headings."""
    files = []
    for root in _REAL_ROOTS:
        for dirpath, dirnames, filenames in os.walk(root):
            files += [Path(dirpath) / f for f in filenames if f.endswith(".md")]
    files.sort(key=lambda p: (p.stat().st_size, str(p)))
    found, used = [], 0
    for path in files:
        used += path.stat().st_size
        if used > 4 * budget_bytes or (used > budget_bytes and sum("_" in h for h in found) >= underscores):
            break
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        toks = _MD.parse(text)
        found += [toks[k + 1].content for k, t in enumerate(toks) if t.type == "heading_open"]
    return found


def test_real_headings_read_as_markdown_it_reads_them():
    heads = _real_headings()
    if len(heads) < 200:
        pytest.skip(f"only {len(heads)} Markdown headings found under {[str(r) for r in _REAL_ROOTS]} "
                    "(apt-get install nodejs-doc supplies thousands)")
    wrong = [(h, plain_heading(h), expected(h)) for h in heads if plain_heading(h) != expected(h)]
    assert not wrong, f"{len(wrong)} of {len(heads)} real headings differ, e.g. {wrong[:5]}"
    assert sum("_" in h for h in heads) > 10  # the set does exercise underscores
