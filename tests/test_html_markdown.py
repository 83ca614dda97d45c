"""HTML to Markdown that stays valid (pipekit/read/html_markdown.py): markdown-it-py reads the
converted text back, and every heading of the page outside its navigation must come back
as a heading, every code block as one closed fence."""
from __future__ import annotations

import pytest
from markdown_it import MarkdownIt

from pipekit.read.html_markdown import html_to_markdown
from pipekit.run.stages import load_stage
from test_03_oracle import check_spans, fence_left_open, oracle_headings

chunking = load_stage(3)
MD = MarkdownIt("commonmark").enable("table")

# The layout cell of links is navigation by its role; its class `nav-left` alone is not (a
# word inside a class or id took content for navigation: issue 48).
LAYOUT_PAGE = """<html><head><title>Old manual</title></head><body>
<div class="related"><ul><li><a href="index.html">index</a></li><li><a href="next.html">next</a></li></ul></div>
<div class="sphinxsidebar"><h3>Quick search</h3><h3>This page</h3></div>
<table width="100%" border="0"><tr>
<td valign="top" class="nav-left" role="navigation"><a href="a.html">Other page</a></td>
<td valign="top">
  <h1>The <a href="#top">Reference</a></h1>
  <p>Intro text.</p>
  <h2><a href="/install">Installing</a></h2>
  <ul><li>step one</li><li>step two</li></ul>
  <h2 id="fences">Writing fences<a class="headerlink" href="#fences">¶</a></h2>
  <pre><code class="language-markdown">Open a block with ```python
and close it with ```, or use ```` for four.
# not a heading
</code></pre>
  <h3>After the code</h3>
  <p>Text after the code is text.</p>
  <table><tr><th>key</th><th>value</th></tr><tr><td>a|b</td><td>2</td></tr></table>
</td></tr></table>
<a href="/x"><h2>Wrapped in a link</h2></a>
<article><header><h2>Article heading</h2></header><p>Article body.</p></article>
<aside><h3>Related posts</h3></aside>
<footer><h3>Site footer</h3></footer>
</body></html>"""

CONTENT_HEADINGS = ["The Reference", "Installing", "Writing fences", "After the code",
                    "Wrapped in a link", "Article heading"]


def converted():
    return html_to_markdown(LAYOUT_PAGE)


def test_layout_tables_are_unwrapped_and_headings_come_back_as_headings():
    md, title = converted()
    assert title == "Old manual"
    assert [h[2] for h in oracle_headings(md)] == CONTENT_HEADINGS
    assert "- step one" in md  # the list inside the layout cell is a list again


def test_a_data_table_inside_a_layout_table_stays_a_table():
    md, _ = converted()
    assert "| key | value |" in md and r"a\|b" in md
    assert any(t.type == "table_open" for t in MD.parse(md))


def test_code_with_backticks_gets_a_longer_fence_and_closes():
    md, _ = converted()
    fences = [t for t in MD.parse(md) if t.type == "fence"]
    assert len(fences) == 1 and fences[0].markup == "`````" and fences[0].info == "markdown"
    assert "use ```` for four" in fences[0].content and "# not a heading" in fences[0].content
    assert not fence_left_open(md)


def test_navigation_stays_out():
    md, _ = converted()
    for gone in ("Quick search", "This page", "Other page", "index", "Related posts", "Site footer"):
        assert gone not in md


def test_headings_are_plain_text_without_links_or_permalinks():
    md, _ = converted()
    assert "## Installing" in md and "](/install)" not in md and "¶" not in md


def test_the_converted_page_chunks_with_every_heading_in_a_path():
    md, _ = converted()
    s = chunking.Settings(target=12, max=30, min=0)
    out = chunking.chunk_document(md, fmt="html", settings=s)
    assert check_spans(md, out, s) == []
    reached = {h for c in out for h in c["heading_path"]}
    assert reached >= set(CONTENT_HEADINGS)
    assert not any(fence_left_open(c["text"]) for c in out)


def test_text_that_reads_like_a_tag_does_not_open_an_html_block():
    # Python's manual writes "<script>" in prose (as &lt;script&gt;): left raw, it opened an
    # HTML block that ran to the end of the page and swallowed every heading after it.
    md, _ = html_to_markdown("<dl><dt>&lt;script&gt;</dt><dd>Run a script.</dd></dl>"
                             "<h2>Generic options</h2><p>a &lt; b</p><h2>Environment</h2>")
    assert [h[2] for h in oracle_headings(md)] == ["Generic options", "Environment"]
    assert not any(t.type == "html_block" for t in MD.parse(md)) and "a < b" in md


def test_a_line_of_tildes_in_prose_does_not_open_a_fence():
    # Valgrind's NEWS page underlines titles with ~~~ inside a <p>: read as a fence opener,
    # it turned the rest of the page into code.
    md, _ = html_to_markdown("<p>Release 3.4<br/>~~~~~~~~~~~<br/>Faster.</p><h2>Next</h2>"
                             "<pre>a ~~~ b</pre>")
    assert not fence_left_open(md) and [h[2] for h in oracle_headings(md)] == ["Next"]
    assert "~~~~~~~~~~~" in MD.render(md) and "a ~~~ b" in md


SPHINX_PAGE = """<html><head><title>logging — Logging facility</title></head><body>
<div class="related" role="navigation"><ul><li><a href="index.html" title="General Index">index</a></li></ul></div>
<section id="logging">
<h1>logging — Logging facility<a class="headerlink" href="#logging" title="Link to this heading">¶</a></h1>
<p>See the <a class="reference internal" href="#logger-objects"><span class="std std-ref">Logger Objects</span></a>
section and the <a class="reference external" href="https://docs.python.org/3/howto/logging.html"
title="Logging HOWTO">logging tutorial</a>.</p>
<dl class="py class"><dt class="sig sig-object py" id="logging.Logger">
<em class="property">class </em><span class="sig-name descname">Logger</span>
<a class="headerlink" href="#logging.Logger" title="Link to this definition">¶</a></dt>
<dd><p>Loggers are never instantiated directly.</p></dd></dl>
<table class="docutils"><caption><span class="caption-text">Levels</span>
<a class="headerlink" href="#id1" title="Link to this table">¶</a></caption>
<tr><th>Level</th><th>Value</th></tr><tr><td>DEBUG</td><td>10</td></tr></table>
<section id="logger-objects"><h2>Logger Objects<a class="headerlink" href="#logger-objects">¶</a></h2>
<p>Jump <a href="#top">to the top</a> or read <a href="other.html#x" title="">elsewhere</a>.</p>
</section></section></body></html>"""


def test_permalinks_go_same_page_links_become_text_and_link_titles_go():
    # A reader of a Sphinx page sees no ¶ after headings, definitions and tables unless
    # hovering, a link to a place on the same page is just its words, and a link's
    # tooltip is not on the page; an address to another page stays.
    md, title = html_to_markdown(SPHINX_PAGE)
    assert title == "logging — Logging facility"
    assert "¶" not in md and "](#" not in md and "Link to this" not in md and "Logging HOWTO" not in md
    assert "See the Logger Objects section" in md
    assert "[logging tutorial](https://docs.python.org/3/howto/logging.html)" in md
    assert "read [elsewhere](other.html#x)" in md and "Jump to the top or" in md
    assert [h[2] for h in oracle_headings(md)] == ["logging — Logging facility", "Logger Objects"]
    assert "General Index" not in md  # the navigation bar's link titles went with the bar


def test_attributes_a_reader_does_not_see_stay_out_of_the_text():
    md, _ = html_to_markdown('<p>Read the <abbr title="Portable Document Format">PDF</abbr>.</p>'
                             '<blockquote cite="https://quotes.example/src"><p>Quoted.</p></blockquote>'
                             '<p><a href="https://example.org/" title="Example home">home</a></p>')
    assert md == "Read the PDF.\n> Quoted.\n\n[home](https://example.org/)\n"
    assert [t.type for t in MD.parse(md)][:4] == ["paragraph_open", "inline", "paragraph_close", "blockquote_open"]


def test_text_like_a_tag_is_escaped_outside_code_only():
    md, _ = html_to_markdown("<p>Write &lt;b&gt; or &lt;/p&gt; in text; a &lt; b.</p>"
                             "<p><code>&lt;div&gt;</code> and <kbd>&lt;Enter&gt;</kbd></p>"
                             "<pre>if a &lt;b:\n    &lt;tag&gt;\n</pre>")
    assert r"Write \<b> or \</p> in text; a < b." in md
    assert "`<div>`" in md and "`<Enter>`" in md and "if a <b:\n    <tag>\n" in md
    assert not any(t.type in ("html_block", "html_inline") for t in MD.parse(md))
    for reference in ("&LT;", "&#60;", "&#x3C;"):  # every way a page writes the character
        md, _ = html_to_markdown(f"<p>{reference}script> runs</p><h2>Next</h2>")
        assert md.startswith(r"\<script> runs") and [h[2] for h in oracle_headings(md)] == ["Next"]


def test_a_page_deeper_than_the_converter_reads_is_an_error_not_a_cut_page():
    # html-to-markdown skips what lies below 1024 levels (with a warning), libxml2 stops at
    # 2048 and drops the rest of the page: either way text would vanish without a word.
    with pytest.raises(RecursionError):
        html_to_markdown("<div>" * 1500 + "deep text" + "</div>" * 1500 + "<p>after</p>")
    md, _ = html_to_markdown("<div>" * 200 + "deep text" + "</div>" * 200 + "<p>after</p>")
    assert md == "deep text\n\nafter\n"


def test_empty_and_declared_pages_convert():
    assert html_to_markdown("") == ("\n", None)
    assert html_to_markdown("  \n ") == ("\n", None)
    xhtml = '<?xml version="1.0" encoding="UTF-8"?>\n<html><head><title>X</title></head><body><h1>Hi</h1></body></html>'
    assert html_to_markdown(xhtml) == ("# Hi\n", "X")


def test_underscores_that_could_make_emphasis_are_escaped_and_snake_case_is_not():
    # The Python manual's heading "My class defines __del__ but ..." came back as
    # "My class defines del but ..." (CommonMark's strong emphasis) in the heading path.
    md, _ = html_to_markdown("<h2>Why __del__ is not called</h2><p>snake_case, a__b and _private.</p>"
                             "<p><code>__init__</code></p>")
    assert [h[2] for h in oracle_headings(md)] == ["Why __del__ is not called"]
    assert r"snake_case, a__b and \_private." in md and "`__init__`" in md
    assert not any(t.type in ("strong_open", "em_open") for t in MD.parse(md)[4].children)


def test_text_of_an_unwrapped_link_is_kept_when_the_text_after_it_is_escaped():
    # libxslt's manual: <h3><a name="_REENTRANT">Macro </a>_REENTRANT</h3> came back as
    # "_REENTRANT" alone when the escape rewrote one of the heading's two text nodes.
    md, _ = html_to_markdown('<h3><a name="_REENTRANT">Macro </a>_REENTRANT</h3>'
                             '<p><a href="#x">see </a>&lt;b&gt; now</p>')
    assert [h[2] for h in oracle_headings(md)] == ["Macro _REENTRANT"]
    assert r"see \<b> now" in md


def test_inline_code_colored_word_by_word_is_one_code_span():
    # Sphinx wraps each word of inline code in a span, and a source line break between two of
    # them came back as two code spans around a hard break (`os.chown(fd,`  / `gid)`), on 173
    # of 1,214 pages under /usr/share/doc; the spans are unwrapped before converting.
    md, _ = html_to_markdown('<p>As of 3.3, this is <code class="docutils literal"><span class="pre">os.chown(fd,</span>'
                             '\n<span class="pre">gid)</span></code> and <code class="xref">\n<span class="pre">Engine</span>'
                             '</code> too.</p><pre><span class="k">def</span> <span class="nf">f</span>():\n    '
                             '<span class="k">pass</span>\n</pre>')
    assert md == "As of 3.3, this is `os.chown(fd, gid)` and `Engine` too.\n\n```\ndef f():\n    pass\n```\n"
    # A line break alone at the code's edge was never written; a space there still is.
    assert html_to_markdown('<p>a <code>\n<span>x</span></code> and <code> <span>y</span></code></p>')[0] == "a `x` and ` y`\n"


def test_a_hidden_span_inside_code_stays_out():
    # The converter drops an element marked hidden (or styled): unwrapping it would show its text.
    md, _ = html_to_markdown('<p><code><span class="pre">a</span><span hidden>secret</span>'
                             '<span style="display:none">gone</span><span>b</span></code></p>')
    assert md == "`ab`\n"


@pytest.mark.parametrize("page, title", [
    ("<html><head><title>Head</title></head><body><svg><title>Icon</title></svg><p>x</p></body></html>", "Head"),
    ("<html><head><meta charset='utf-8'></head><body><p>x</p><title>Late</title></body></html>", "Late"),
    ("<svg><title>Icon</title></svg><p>x</p>", "Icon"),
    ("<p>no title</p>", None),
])
def test_the_title_is_the_first_title_element_of_the_page(page, title):
    # Looked for in <head> first (the whole page was read to find it): the same element either way.
    assert html_to_markdown(page)[1] == title


def test_a_section_id_goes_to_the_heading_that_opens_it_only():
    from pipekit.read.html_markdown import convert_html

    page = """<body><section id="intro"><h1>Intro</h1><p>a</p><h2>Second</h2><p>b</p>
    <section id="deep"><div><h3>Deep</h3></div><h4>After</h4></section></section>
    <div id="plain"><p>text</p><h2>Late<a class="headerlink" href="#late">¶</a></h2></div></body>"""
    anchors = convert_html(page)[2]
    assert [(a["title"], a["id"]) for a in anchors] == [
        ("Intro", "intro"), ("Second", ""), ("Deep", "deep"), ("After", ""), ("Late", "plain")]
