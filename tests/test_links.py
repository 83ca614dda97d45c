"""Links read as their text (pipekit/index/link_text.py): stage 04 indexes no link destination or
title, and the snippets of `pipekit search` and stage 05's printed results show the
link's text, not its Markdown."""
import pyarrow as pa
import pytest

from pipekit.index.analyzer import Analyzer
from pipekit.index.link_text import drop_link_destinations, link_text
from pipekit.retrieve.results import print_results
from pipekit.run.arrays import rows_with_byte
from pipekit.retrieve.search import snippet
from test_04_indexing import build, chunks

# (Markdown, what a reader sees)
READ_AS_TEXT = [
    ('See [the cookbook](../howto/logging-cookbook.html#recipes "Logging Cookbook") now.',
     "See the cookbook now."),
    ("[a](x.html)[b](y.html), [c](<with space.html>) and [d](u(1).html)", "ab, c and d"),
    ("![a diagram](img/pump.png) and [![the logo](logo.svg)](https://example.org/home)",
     "a diagram and the logo"),
    ("Use [the guide][guide-ref].\n[guide-ref]: https://example.org/guide 'Guide'\n", "Use [the guide][guide-ref].\n\n"),
    ("[a long\nlink text](../using/configure.html#opt) wraps", "a long\nlink text wraps"),
    ("[nested [brackets] kept](https://example.org/n)", "nested [brackets] kept"),
]
# Text that only looks like a link, or whose address is what the reader sees
LEFT_ALONE = [
    "handlers[event](payload) and matrix[0][1]",  # code: a call on a subscript, a 2-D index
    "r'(?P<year>[0-9][0-9])' and footnotes [1][2]",  # no reference links without their definitions
    "[not a\n\nlink](x) across a blank line",
    r"\[escaped](not-a-link)",
    "<https://example.org/autolink> shows its address",
    "[^1]: a footnote's text stays",
    "[Note]: this is prose after a bracketed word",
]


@pytest.mark.parametrize("markdown, seen", READ_AS_TEXT)
def test_links_read_as_their_text(markdown, seen):
    assert link_text(markdown) == seen
    assert drop_link_destinations(pa.array([markdown])).to_pylist() == [seen]  # Arrow's RE2 agrees


@pytest.mark.parametrize("markdown", LEFT_ALONE)
def test_what_is_not_a_link_is_left_alone(markdown):
    assert link_text(markdown) == markdown
    assert drop_link_destinations(pa.array([markdown])).to_pylist() == [markdown]


def test_only_rows_with_links_change_and_nulls_stay():
    texts = pa.array(["plain", None, "[x](http://a.example/y)", ""])
    assert drop_link_destinations(texts).to_pylist() == ["plain", None, "x", ""]
    assert drop_link_destinations(pa.array([], pa.string())).to_pylist() == []


def test_rows_with_byte_finds_each_text_holding_it_once():
    """The byte pre-filter the link and attribute-list scans stand on: sliced arrays (whose
    offsets do not start at 0), nulls, empty texts, large strings, several hits in a text."""
    texts = pa.array(["x]", None, "", "a]b]c", "none", "]", "é]"])
    assert rows_with_byte(texts, ord("]")).tolist() == [0, 3, 5, 6]
    assert rows_with_byte(texts.slice(2, 3), ord("]")).tolist() == [1]
    assert rows_with_byte(texts.cast(pa.large_string()), ord("]")).tolist() == [0, 3, 5, 6]
    assert rows_with_byte(texts, ord("}")).tolist() == []
    assert rows_with_byte(pa.array([], pa.string()), ord("]")).tolist() == []
    for other in (pa.chunked_array([texts]), texts.cast(pa.string_view())):
        with pytest.raises(TypeError, match="one string or large_string array"):
            rows_with_byte(other, ord("]"))
    batch = [f"[link {i}](https://x/{i})" if i % 7 == 0 else f"plain {i}" for i in range(50)]
    assert drop_link_destinations(pa.array(batch)).to_pylist() == [link_text(t) for t in batch]


def test_link_destinations_and_titles_are_not_indexed():
    texts = ['Read [the pump manual](https://vendor.example/downloads/pumpmanual.pdf "Vendor PDF") first.',
             "[cookbook]: https://recipes.example/soup\nSee [soup][cookbook].",
             "handlers[event](payload) is code"]
    tf, *_ = build(chunks(*texts))
    terms = {t for t, _ in tf}
    assert not terms & {"https", "vendor", "example", "downloads", "pumpmanual", "pdf", "recipes"}
    assert {("pump", 0), ("manual", 0), ("soup", 1)} <= set(tf)
    assert ("payload", 2) in tf  # not a link: still indexed


def test_snippets_show_link_text():
    text = ("The [pump manual](https://vendor.example/pumpmanual.pdf \"Vendor PDF\") says to prime the "
            "[impeller](#impeller) before the first start.")
    shown = snippet(text, {"prime"}, Analyzer("none", "none"))
    assert shown == ("The pump manual says to **prime** the impeller before the first start.")


def test_stage_05_printed_results_show_link_text(capsys):
    row = {"query_id": "q1", "rank": 1, "score": 2.5, "chunk_id": "a.md#0", "doc_id": "a.md", "heading": "Setup",
           "page_start": None, "page_end": None, "page_label_start": None, "page_label_end": None,
           "text": "Prime the [impeller](https://vendor.example/parts/impeller.html \"Impeller part\") first."}
    results = pa.Table.from_pylist([row], schema=pa.schema([
        ("query_id", pa.string()), ("rank", pa.int32()), ("score", pa.float64()), ("chunk_id", pa.string()),
        ("doc_id", pa.string()), ("heading", pa.string()), ("page_start", pa.int32()), ("page_end", pa.int32()),
        ("page_label_start", pa.string()), ("page_label_end", pa.string()), ("text", pa.string())]))
    print_results(results, [("q1", "prime impeller")])
    out = capsys.readouterr().out
    assert "Prime the impeller first." in out and "vendor.example" not in out
