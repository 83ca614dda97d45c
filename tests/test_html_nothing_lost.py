"""No HTML text lost without a word (issue 48): navigation is known by structure
(pipekit/read/html_markdown.py), never by a word inside a class or id, and a page whose
converted text is less than half its visible text is named in stage 01's summary with both
sizes (pipekit/read/html.py, 01_documents.py).  The pages here are cut-down copies of real
generators' markup: SQLAlchemy's docs theme, Sphinx's basic layout, Read the Docs, furo,
texinfo (R's manuals), Node's API pages, sphinx-tabs (Flask's docs)."""
from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from pipekit.cli import run_stage
from pipekit.read.html import read_html
from pipekit.read.html_markdown import html_to_markdown
from pipekit.run.config import load_config
from pipekit.run.stages import load_stage

CONTENT = "The select construct builds a SELECT statement from columns and tables. " * 6

# SQLAlchemy 2.1's core/selectable.html and tutorial/orm_related_objects.html in short: the
# section id made from the heading "SELECT and Related Constructs", and the content div's
# class made from the page name, both hold the word `related`.
SQLALCHEMY_PAGE = f"""<html><head><title>SELECT and Related Constructs</title></head>
<body class="wy-body-for-nav">
<div id="docs-container">
<div id="docs-top-navigation-container" class="body-background"><div id="docs-header">
  <div id="docs-version-header">Release: 2.1.9 TOP-BAR-TEXT</div><h1>SQLAlchemy 2.1 Documentation</h1></div></div>
<div id="docs-body-container">
  <div id="fixed-sidebar" class="withsidebar"><div id="docs-sidebar"><h3>Contents</h3>
    <ul><li><a href="#">SIDEBAR-TEXT Selectable Foundational Constructors</a></li></ul></div></div>
  <div id="docs-body" role="main" class="withsidebar tutorial-orm_related_objects">
    <section id="select-and-related-constructs">
      <h1>SELECT and Related Constructs</h1><p>{CONTENT}</p>
      <section id="related-objects"><h2>Working with Related Objects</h2><p>RELATED-SECTION-TEXT</p></section>
    </section>
  </div>
</div>
<div id="docs-bottom-navigation" class="docs-navigation-links, withsidebar">
  <div id="docs-copyright">BOTTOM-BAR-TEXT Copyright the SQLAlchemy authors</div></div>
</div></body></html>"""


def md(html: str) -> str:
    return html_to_markdown(html)[0]


def test_a_related_section_id_and_a_related_content_class_keep_their_text():
    out = md(SQLALCHEMY_PAGE)
    assert CONTENT.strip() in " ".join(out.split())
    assert "# SELECT and Related Constructs" in out and "RELATED-SECTION-TEXT" in out
    # and the theme's header, sidebar and bottom bar (no <nav>, no role) are still navigation
    for gone in ("TOP-BAR-TEXT", "SIDEBAR-TEXT", "BOTTOM-BAR-TEXT"):
        assert gone not in out


def test_the_sphinx_basic_layouts_bars_go_and_content_of_the_same_class_names_stays():
    out = md(f"""<html><body>
<div class="related"><h3>Navigation</h3><ul><li><a href="genindex.html">RELBAR-TEXT</a></li></ul></div>
<div class="document"><div class="documentwrapper"><div class="bodywrapper"><div class="body">
  <section id="x"><h1>Logging</h1><p>{CONTENT}</p>
  <div class="related">RELATED-IN-TEXT: a container directive in the page's own text</div>
  <div class="sidebar-content">SIDEBAR-CONTENT-CLASS</div>
  <aside class="sidebar"><p class="sidebar-title">Hello World!</p><pre>import asyncio</pre></aside>
  <aside class="footnote brackets" id="id2"><p>FOOTNOTE-TEXT</p></aside>
  <footer>ARTICLE-FOOTER</footer>
  </section></div></div></div>
  <div class="sphinxsidebar"><h3>Quick search</h3><p>SPHINXSIDEBAR-TEXT</p></div>
</div>
<div class="footer">FOOTER-TEXT Copyright</div>
<footer>PAGE-FOOTER</footer>
<aside>PAGE-ASIDE</aside>
</body></html>""")
    for gone in ("RELBAR-TEXT", "SPHINXSIDEBAR-TEXT", "FOOTER-TEXT", "PAGE-FOOTER", "PAGE-ASIDE"):
        assert gone not in out
    # A docutils `.. sidebar::` and a footnote are <aside>s in the text: the converter's own
    # cleanup dropped an <aside class="sidebar"> (the Python manual's asyncio page).
    for kept in ("RELATED-IN-TEXT", "SIDEBAR-CONTENT-CLASS", "Hello World!", "import asyncio",
                 "FOOTNOTE-TEXT", "ARTICLE-FOOTER"):
        assert kept in out, kept


def test_nav_and_aria_navigation_go_wherever_they_stand():
    out = md(f"""<html><body><nav>NAV-TEXT</nav><div role="navigation">ROLE-NAV</div>
<div role="search"><form>SEARCH-FORM</form></div>
<main><p>{CONTENT}</p><nav class="contents">LOCAL-TOC</nav>
<section id="navigation-and-sidebar-options"><h2>Navigation and sidebar options</h2><p>OPTIONS-TEXT</p></section>
</main></body></html>""")
    assert CONTENT.strip() in " ".join(out.split())
    for gone in ("NAV-TEXT", "ROLE-NAV", "SEARCH-FORM", "LOCAL-TOC"):
        assert gone not in out
    assert "## Navigation and sidebar options" in out and "OPTIONS-TEXT" in out


def test_nothing_holding_the_main_content_is_navigation():
    # A page that wraps its content in what would otherwise be navigation loses nothing.
    for wrapper in ('<div role="navigation">', "<header>", '<div class="sphinxsidebar">', "<nav>"):
        close = "</" + wrapper[1:].split()[0].rstrip(">") + ">"
        out = md(f"<html><body>{wrapper}<div role='main'><h1>Title</h1><p>{CONTENT}</p></div>{close}</body></html>")
        assert CONTENT.strip() in " ".join(out.split()), wrapper


def test_read_the_docs_footer_outside_the_main_content_goes_though_inside_a_section():
    out = md(f"""<html><body><nav class="wy-nav-side">SIDE-NAV</nav>
<section class="wy-nav-content-wrap"><div class="wy-nav-content"><div class="rst-content">
<div role="navigation" aria-label="Page navigation">BREADCRUMBS</div>
<div role="main" class="document"><section id="a"><h1>Title</h1><p>{CONTENT}</p></section></div>
<footer>RTD-FOOTER Built with Sphinx</footer></div></div></section>
<div class="rst-versions" role="note">VERSIONS-MENU</div></body></html>""")
    assert CONTENT.strip() in " ".join(out.split())
    for gone in ("SIDE-NAV", "BREADCRUMBS", "RTD-FOOTER", "VERSIONS-MENU"):
        assert gone not in out


def test_furo_keeps_the_article_and_drops_its_drawers():
    out = md(f"""<html><body><div class="page"><header class="mobile-header">MOBILE-HEADER</header>
<aside class="sidebar-drawer"><div class="sidebar-container">DRAWER</div></aside>
<div class="main"><div class="content"><div class="article-container">
<article role="main"><section id="s"><h1>Title</h1><p>{CONTENT}</p></section>
<section id="the-footer-and-sidebar"><h2>The footer and sidebar</h2><p>FOOTER-SECTION</p></section></article></div>
<footer><div class="related-pages">NEXT-PAGE</div></footer></div>
<aside class="toc-drawer">TOC-DRAWER</aside></div></div></body></html>""")
    assert CONTENT.strip() in " ".join(out.split())
    for gone in ("MOBILE-HEADER", "DRAWER", "NEXT-PAGE", "TOC-DRAWER"):
        assert gone not in out
    assert "FOOTER-SECTION" in out


def test_texinfo_node_bars_and_nodes_column2_go_by_their_place():
    texinfo = md(f"""<html><body>
<div class="chapter" id="Intro"><div class="header"><p>Next: <a href="#B" accesskey="n" rel="next">NEXT-NODE</a>,
Up: <a href="#Top" accesskey="u" rel="up">UP-NODE</a></p></div>
<h2>1 Introduction</h2><p>{CONTENT}</p><div class="header"><p>HEADER-CLASS-CONTENT</p></div></div></body></html>""")
    assert "NEXT-NODE" not in texinfo and "UP-NODE" not in texinfo
    assert "HEADER-CLASS-CONTENT" in texinfo and CONTENT.strip() in " ".join(texinfo.split())
    node = md(f"""<html><body><div id="content"><div id="column2" class="interior"><ul><li>MODULE-LIST</li></ul></div>
<div id="column1" class="interior"><div id="apicontent"><h2>DNS</h2><p>{CONTENT}</p></div></div></div>
<div id="column2">COLUMN2-ALONE</div></body></html>""")
    assert "MODULE-LIST" not in node and "COLUMN2-ALONE" in node


def test_a_page_opening_with_a_rule_is_not_read_as_front_matter():
    # texinfo's node page: the Next / Up bar (dropped), then <hr>, then the node.  Left as the
    # first line, `---` opened YAML front matter that ran to the page's next rule.
    from pipekit.read.markdown import front_matter_end

    out = md("""<html><body><div class="header"><p>Next: <a href="n.html" rel="next">Simple Example</a></p></div>
<hr><h3 class="section">2.1 The Basics</h3><p>First part.</p><hr><h3>2.2 More</h3><p>Second part.</p></body></html>""")
    assert out.startswith("### 2.1 The Basics") and front_matter_end(out.split("\n")) == 0


def test_hidden_tab_panels_and_forms_keep_their_text():
    # sphinx-tabs (Flask's installation page) hides every panel but the first; ASP.NET pages
    # wrap the whole page in a <form>: the converter dropped both.
    out = md("""<html><body><div role="main"><div class="sphinx-tabs">
<div role="tablist"><button role="tab">macOS/Linux</button><button role="tab">Windows</button></div>
<div role="tabpanel"><pre>$ python3 -m venv .venv</pre></div>
<div role="tabpanel" hidden="true"><pre>&gt; py -3 -m venv .venv</pre></div></div>
<form id="form1"><h2>Form page</h2><p>FORM-TEXT</p><select><option>CHOICE</option></select></form></div></body></html>""")
    assert "py -3 -m venv" in out and "FORM-TEXT" in out and "## Form page" in out and "CHOICE" not in out


# A page whose own content sits where a generator keeps its sidebar (no main content marked):
# the converter drops it, and the row says so with both sizes.
SHRINKING_PAGE = f"""<html><body><div class="sphinxsidebar"><h1>My notes</h1><p>{CONTENT}</p></div>
<p>Short rest.</p></body></html>"""


def test_a_page_that_lost_more_than_half_its_visible_text_says_so_with_both_sizes():
    row = read_html(SHRINKING_PAGE.encode())
    visible = len("".join(("My notes" + CONTENT + "Short rest.").split()))
    assert row["note"] == (f"the converted text keeps {len('Shortrest.')} of the page's {visible:,} "
                           "visible characters: content taken for navigation or lost converting?")
    assert read_html(SQLALCHEMY_PAGE.encode())["note"] is None  # its chrome lies outside its main content


def test_stage_01_summary_names_the_shrunk_page_and_keeps_it_ok(tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "docs").mkdir(parents=True)
    (corpus / "docs" / "notes.html").write_text(SHRINKING_PAGE)
    (corpus / "docs" / "selectable.html").write_text(SQLALCHEMY_PAGE)
    out = tmp_path / "out"
    cfg = load_config(None, [f"documents.input={corpus}", f"paths.output={out}"])
    ctx = run_stage(1, load_stage(1).run, cfg, quiet=True)
    rows = {r["doc_id"]: r for r in pq.read_table(out / "01_documents.parquet").to_pylist()}
    assert rows["docs/notes.html"]["status"] == "ok" and rows["docs/selectable.html"]["note"] is None
    at = ctx.notes.index("1 HTML page read with less than half of its visible text kept "
                         "(was content taken for navigation?):")
    assert ctx.notes[at + 1] == f"ok      docs/notes.html: {rows['docs/notes.html']['note']}"
    assert "keeps 10 of the page's" in ctx.notes[at + 1]
