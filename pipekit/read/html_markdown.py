"""HTML to Markdown that stays valid Markdown, so stage 03 finds the page's structure, and
whose text is the text a reader of the page sees.

Stage 01 parses the page with lxml (libxml2, in C), cleans the tree (below), and hands the
cleaned page to html-to-markdown (a Rust converter) to write CommonMark.  The converter
already writes what real pages need: a code block fenced with one backtick more than the
longest run inside it (a fence around code holding ``` closed early, and a language
reference lost 7 of its 11 section headings to one), `|` escaped in table cells, a text
line that would read as markup (`# 5 reasons`, `1. x`, `- y`, a plain-text `~~~`
underline that opened a fence on Valgrind's NEWS page) escaped.  The markdownify +
BeautifulSoup converter this replaces did the same in pure Python at 1.0 MB per CPU
second on the Python manual; this one at 9.5 (bench/html_converters.py).

What the cleaning does, each rule for a failure seen on real pages:

* Navigation is not the document, and is known by structure, never by a word inside a class
  or id (a section id made from a heading, `select-and-related-constructs`, or a body class
  made from a page name took whole pages): `<nav>` and ARIA navigation / search regions
  anywhere; the page's own `<header>`, `<footer>`, `<aside>` (ARIA banner, contentinfo,
  complementary) outside its main content (`<main>`, `<article>`, role=main; without one,
  outside any article or section: inside, they are the article's own, and a docutils
  `.. sidebar::` or footnote is an `<aside>` in the text); and the sidebars and bars of
  documentation generators that carry no such mark, by the generator's exact class or id
  and place (GENERATOR_CLASSES, GENERATOR_IDS: Sphinx, Read the Docs, SQLAlchemy's theme,
  pydata, MkDocs, Node, texinfo, Doxygen, Javadoc).  Nothing holding the main content is
  ever navigation.  Script, style, embeds, `<title>` (taken for the title column), a
  `<select>`'s choices and comments go too; a tab panel written `hidden` (sphinx-tabs) stays.
* No text lost without a word: `convert_html` also returns the page's visible characters
  (its main content's, else its body's, after the landmarks and before the generators'
  chrome go), which stage 01 compares with the converted text (pipekit/read/html.py).
* Code is its text: the syntax-colouring spans inside `<pre>` and `<code>` (a third of a Sphinx
  page's elements) are unwrapped first, so the walks and the converter skip them, and inline
  code the source broke between two spans is one code span, not two around a hard line break
  (`_plain_code`; a span the converter would drop, `hidden` or styled, stays).
* Layout tables.  Old pages lay out the whole page in a `<table>`; converted as a data
  table, every heading, list and paragraph inside became one escaped table cell (all 36
  headings of two such pages lost).  A table that holds headings, lists, code, block
  quotes or other tables is layout: it is unwrapped into its cells' content, in order.
  A table of plain cells is data and stays a GFM table.
* Headings read as text: `## [Install](/install)` put the address into the heading path,
  so links inside a heading become their text, and a link wrapped around a heading lets
  go of it.
* Links as a reader sees them: a permalink (Sphinx's `<a class="headerlink" href="#x">¶</a>`
  after every heading, definition, table and code block; MkDocs' the same) is decoration
  and goes; a link to an anchor of the same page (`href="#..."`) becomes its text, since
  `[os.path](#module-os.path)` is only a place on the page already being read; a link's
  tooltip title goes (`[text](url "title")` put Sphinx's "Link to this heading" or the
  target's full name into the text).  Other links stay `[text](url)`: the address is
  information, and stage 04 and the snippets read links as their text (pipekit/index/link_text.py).
* An image is its alt text: its address is not searchable content, and a saved page's
  inline `data:` images are tens of kilobytes of base64 in one "word".
* Text that reads like a tag (`<script>` in the Python manual's prose, `&lt;script&gt;` in
  the HTML) is escaped as `\\<`: left raw at a line start, it opened an HTML block that ran to
  the end of the page and took 9 section headings with it.  Likewise `_` that could open or
  close emphasis (`__del__` in a heading became a bold "del" in the heading path); inside
  a word (`snake_case`) it never does and stays plain.  The converter escapes neither, so
  such text is marked in the tree and escaped after converting.

Not done: CSS (`display: none` by class), JavaScript-built pages.  A form's text stays (the
converter's own cleanup, which dropped every `<form>` and, by class words, an `<aside>`,
`<header>` or `<footer>` in the text, is off).  A page nested
deeper than the parser (2048 levels) or the converter (1024) goes is not cut short in
silence: RecursionError, which stage 01 reports as an error row.

`html_to_markdown(html)` returns (markdown, title from `<title>`); `convert_html(html)` also
the page's headings with the id a link to each opens (`heading_ids`: the heading's own `id`,
an `<a id|name>` inside it, the `id` of the section it opens (Sphinx's `<section id>`), or its
permalink's `#target`), in document order: stage 03 gives each chunk its heading's id
(pipekit/chunk/anchors.py), never as text in the Markdown, which the reader does not see.
"""
from __future__ import annotations

import functools
import re

__all__ = ["convert_html", "html_to_markdown", "GENERATOR_CLASSES", "GENERATOR_IDS", "navigation", "parse_html"]

# Elements whose text is not the document: code, styling, embeds, and the <title> (already
# taken for the title column).  Not <head> as a whole: in a page whose </head> is missing, a
# parser may leave body content there.  Not <nav> or <aside>: they are navigation (below),
# dropped only outside the page's main content.
_DROP_TAGS = ("script", "style", "noscript", "template", "iframe", "object", "embed", "svg", "canvas",
              "title", "meta", "link", "select", "datalist")


def _body_child(el) -> bool:
    parent = el.getparent()
    return parent is not None and parent.tag == "body"


def _node_bar(el) -> bool:
    return el.xpath("boolean(.//a[@rel='next' or @rel='prev' or @rel='up'])")


def _beside_column1(el) -> bool:
    parent = el.getparent()
    return parent is not None and any(s.get("id") == "column1" for s in parent.iterchildren("div"))


def _anywhere(el) -> bool:
    return True


# The sidebars, header and footer bars of documentation generators that mark them with no
# <nav>, <header>, <footer> or ARIA role: a <div> of the generator's exact class or id (a
# whole class, never a word inside one) and, where the name is a common one, in the place the
# generator puts it.  Never a word inside a class or id: under that rule SQLAlchemy's section
# id `select-and-related-constructs` and body class `tutorial-orm_related_objects` were
# navigation, and 10 of its pages lost 384,000 characters (all of core/selectable.html's
# 1.9 MB) with status `ok`.
GENERATOR_CLASSES = {
    # Sphinx's basic layout (alabaster, classic, nature, python-docs-theme, Flask's): the
    # sidebar, and the related-links bars and footer that are children of <body>
    "sphinxsidebar": _anywhere, "related": _body_child, "footer": _body_child,
    "rst-versions": _anywhere,  # Read the Docs' version menu
    # pydata-sphinx-theme's sidebars, MkDocs Material's, Bootstrap's navbar (MkDocs' themes)
    "bd-sidebar-primary": _anywhere, "bd-sidebar-secondary": _anywhere, "md-sidebar": _anywhere,
    "navbar": _anywhere,
    # GNU texinfo (R's manuals): the Next / Previous / Up bar above each node
    "header": _node_bar, "nav-panel": _node_bar,
    # Javadoc 8 and older
    "topNav": _anywhere, "subNav": _anywhere, "bottomNav": _anywhere, "skipNav": _anywhere,
}
GENERATOR_IDS = {
    # SQLAlchemy's (zzzeeksphinx: also Alembic's and Mako's) header, sidebars and bottom bar
    "docs-top-navigation-container": _anywhere, "fixed-sidebar": _anywhere, "docs-sidebar": _anywhere,
    "narrow-index-nav": _anywhere, "docs-narrow-top-navigation": _anywhere,
    "docs-bottom-navigation": _anywhere,
    "column2": _beside_column1,  # Node's list of modules beside the page
    "side-nav": _anywhere, "nav-tree": _anywhere, "nav-path": _anywhere,  # Doxygen's tree and breadcrumbs
}
# ARIA landmarks that are navigation wherever they stand, and those that are the page's own
# header, footer or sidebar only outside its main content (inside, they are an article's own,
# as <header>, <footer> and <aside> are).
_NAV_ROLES = ("navigation", "search")
_PAGE_ROLES = ("banner", "contentinfo", "complementary")
_SECTIONING = ("article", "main", "section")


class _Page:
    """What the navigation rules ask of a parsed page, found once: its elements with a role
    (one XPath scan: a test per element in Python cost more than the parse) and its main
    content (<main>, <article>, role=main), which nothing around it may be taken from."""

    def __init__(self, root):
        self.root = root
        # A walk testing each element's attribute, not XPath's `//*[@role]`: 0.18 s against 0.26 on
        # the Python manual's 498 pages, same elements in the same order.
        self.roles = [(el, role.strip().lower()) for el in root.iter() if (role := el.get("role")) is not None]
        self.mains = list(root.iter("main", "article")) + [el for el, r in self.roles if r == "main"]
        self.holds_main = set(self.mains)
        for m in self.mains:
            self.holds_main.update(m.iterancestors())


_LAYOUT_CONTENT = ("h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "dl", "pre", "blockquote", "table")
_TABLE_PARTS = ("caption", "thead", "tbody", "tfoot", "tr", "td", "th")
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_PERMALINK = re.compile(r"[\s¶§#🔗]*")
# Text outside code that holds `<` before a letter, `/`, `!` or `?`: what CommonMark could
# read as a tag.  Code (pre, code, kbd, samp, tt) is written literally and needs no escape.
_CODE_TAGS = ("pre", "code", "kbd", "samp", "tt")
_TAG_LIKE = re.compile(r"<(?=[A-Za-z/!?])")
# Text holds a `<` only where the source wrote it as a character reference (a raw `<`
# before a letter is a tag to the parser): pages without one skip the text-node scan.
_LT_REFERENCE = re.compile(r"&(?:lt|LT|#0*60(?![0-9])|#[xX]0*3[cC](?![0-9a-fA-F]))")
# Underscores that could open or close emphasis: a run with no letter or digit on one
# side.  Text must stay unescaped for snake_case (underscores inside a word never make
# emphasis), but the Python manual's heading "My class defines __del__ but ..." was read
# as "My class defines **del** ..." (8 headings of 4,365 cited wrongly, and missed).
_UNDERSCORES = re.compile(r"_+")
# Noncharacters stand for an escaped `<` and `_` through the converter (which would escape a
# backslash written into the tree); one already in the page is dropped first.
_LT_MARK, _UNDERSCORE_MARK = "\ufdd0", "\ufdd1"
_BLANK_RUNS = re.compile(r"\n{3,}")
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>")
_LEADING_RULES = re.compile(r"\A(?:[ \t]*(?:(?:-[ \t]*){3,}|(?:\*[ \t]*){3,}|(?:_[ \t]*){3,})(?:\n+|\Z))+")


def html_to_markdown(html: str) -> tuple[str, str | None]:
    markdown, title, _, _ = convert_html(html)
    return markdown, title


def convert_html(html: str) -> tuple[str, str | None, list[dict], int]:
    """(markdown, title, heading ids, the page's visible characters): see the module docstring."""
    import html_to_markdown as h2m
    from lxml import etree

    root = parse_html(html)
    if root is None:
        return "\n", None, [], 0
    _plain_code(root)
    title_el = _first_title(root)
    title = " ".join(_text(title_el).split()) or None if title_el is not None else None
    _mark_heading_ids(root)  # before cleaning: it drops the permalinks and anchors that say them
    visible = _clean(root, escape_lt=_LT_REFERENCE.search(html) is not None)
    anchors = heading_ids(root)
    result = h2m.convert(etree.tostring(root, method="html", encoding="unicode"), _options())
    if any(str(w.kind) == "depth_limit_exceeded" for w in result.warnings):
        raise RecursionError("HTML nested deeper than the converter reads")
    markdown = (result.content or "").replace(_LT_MARK, "\\<").replace(_UNDERSCORE_MARK, "\\_")
    # A rule above all text separates nothing, and a page that opened with `---` read as YAML
    # front matter up to its next rule (texinfo puts an <hr> under each node's Next/Up bar).
    if "\n\n\n" in markdown:  # 23 of the manual's 498 pages: the regex's scan of the rest cost 0.17 s
        markdown = _BLANK_RUNS.sub("\n\n", markdown)
    markdown = _LEADING_RULES.sub("", markdown.strip())
    return markdown.strip() + "\n", title, anchors, visible


def _first_title(root):
    """The page's first <title> in document order, looked for in <head> first.

    `next(root.iter("title"))` read the whole page: lxml's iterator finds the element after the
    one it hands out before handing it out, so it scanned the body for a second <title> (0.1 s
    of the Python manual's 498 pages, 2 % of converting them).  <head> is the first child of
    <html> in every tree libxml2 builds from a page with a head, and all of it precedes the body
    in document order, so a <title> inside it is the page's first."""
    head = root[0] if len(root) else None
    if head is not None and head.tag == "head":
        found = next(head.iter("title"), None)
        if found is not None:
            return found
    return next(root.iter("title"), None)


def text_chars(markdown: str) -> int:
    """Characters of converted text, as visible_chars counts a page's: no white space, and a
    link's address left out (the page shows its text only)."""
    return len("".join(_LINK_ADDRESS.sub("]", markdown).split()))


_LINK_ADDRESS = re.compile(r"\]\([^)\s]*(?:\s+\"[^\"]*\")?\)")


_ANCHOR = "data-pipekit-anchor"  # where a heading keeps its id through the cleaning
_SECTION_TAGS = ("section", "div", "article")


# Spans that say something to the converter: what it drops (`hidden`, a `display: none` style).
_TELLING_SPANS = "descendant-or-self::span[@hidden or @style]"  # not `//span[...]`: 2.5x the time
_KEPT_SPAN = "pipekit-span"


def _line_break_only(text: str | None) -> bool:
    # White space holding a line break, alone at a code span's edge beside a span: the converter
    # dropped it there (`<code>\n<span>x</span>` was `x`), and kept spaces and tabs (` x`).
    return text is not None and ("\n" in text or "\r" in text) and not text.strip()


def _plain_code(root) -> None:
    """Code's syntax-colouring spans unwrapped into its text, first of all.

    Sphinx and Pygments wrap every word of code in a `<span class>`: of the Python manual's
    989,000 elements, 321,000 are spans inside `<pre>` or `<code>`.  The converter writes code
    as its text, so they carry nothing, yet every walk here and the converter's own parse paid
    for each.  One more thing follows from the unwrapping: an inline `<code>` that the source
    wraps between two spans (`<span>os.chown(fd,</span>\n<span>gid)</span>`) was written as two
    code spans around a hard line break (``os.chown(fd,`  ⏎ `gid)``), a break the page never
    shows and a phrase no longer one; unwrapped, its text is one code span, `os.chown(fd, gid)`,
    as a reader sees it.  A line break alone before the first span or after the last was never
    written (the converter drops such a node at a code span's edge), and still is not.  A span
    the converter would drop (`hidden`, a style) is kept, so its text stays out."""
    from lxml import etree

    telling = root.xpath(_TELLING_SPANS)
    for span in telling:
        span.tag = _KEPT_SPAN
    for el in root.iter("pre", "code"):
        if not len(el):
            continue
        if el.tag == "code":
            first, last = el[0], el[-1]
            if first.tag == "span" and _line_break_only(el.text):
                el.text = None
            if last.tag == "span" and _line_break_only(last.tail):
                last.tail = None
        etree.strip_tags(el, "span")
    for span in telling:
        span.tag = "span"


def _mark_heading_ids(root) -> None:
    # The sections holding an earlier heading, in document order: a heading opens a section
    # only if none did before it.  Asking each section for its first heading instead
    # (`next(outer.iter(...))`) read on to the one after it (lxml's iterator finds the next
    # match before handing one out): 0.18 -> 0.16 s on the Python manual's pages.
    opened: set = set()
    for h in root.iter(*_HEADINGS):
        outers = list(h.iterancestors(*_SECTION_TAGS))
        found = _heading_id(h, outers, opened)
        opened.update(outers)
        if found:
            h.set(_ANCHOR, found)


def _heading_id(h, outers: list, opened: set) -> str | None:
    """The id a link to heading `h` opens, as generators give it: its own (MkDocs, rustdoc,
    most hand-written pages), an anchor inside it (`<h3><a name="x">`, Doxygen, old pages),
    the section it opens (Sphinx: `<section id="x"><h2>`, older `<div class="section" id>`),
    or, last, the target of its permalink (`<a class="headerlink" href="#x">`).  `outers`:
    its section, div and article ancestors, nearest first; `opened`: those an earlier
    heading is in."""
    if h.get("id"):
        return h.get("id")
    for a in h.iter("a"):
        if a.get("id") or a.get("name"):
            return a.get("id") or a.get("name")
    for outer in outers:
        if outer.get("id"):
            # Only a section this heading opens: the id of one that an earlier heading
            # opens would send the reader to that earlier heading.
            return outer.get("id") if outer not in opened else None
    for a in h.iter("a"):
        href = (a.get("href") or "").strip()
        if href.startswith("#") and len(href) > 1:
            return href[1:]
    return None


def heading_ids(root) -> list[dict]:
    """{title, id} per heading left in the cleaned page, in document order ("" for no id)."""
    out = []
    for h in root.iter(*_HEADINGS):
        title = " ".join(_text(h).replace(_LT_MARK, "<").replace(_UNDERSCORE_MARK, "_").split())
        if title:
            out.append({"title": title, "id": h.attrib.pop(_ANCHOR, "")})
    return out


def parse_html(html: str):
    """The page's element tree (lxml.etree), or None for a page with no markup or text."""
    from lxml import etree

    if _LT_MARK in html or _UNDERSCORE_MARK in html:
        html = html.replace(_LT_MARK, "").replace(_UNDERSCORE_MARK, "")
    # lxml refuses a str that declares its encoding (XHTML pages start so); it is decoded.
    html = _XML_DECLARATION.sub("", html, count=1)
    parser = etree.HTMLParser(remove_comments=True, remove_pis=True, huge_tree=True)
    root = etree.fromstring(html, parser)
    # libxml2 stops at 2048 levels and drops the rest of the page; a cut page is no answer.
    if any(e.level == etree.ErrorLevels.FATAL and e.type == etree.ErrorTypes.ERR_RESOURCE_LIMIT
           for e in parser.error_log):
        raise RecursionError("HTML nested deeper than the parser reads")
    return root


def navigation(root) -> list:
    """The elements of a parsed page that are site navigation (see the module docstring);
    script, style and embeds are not counted here."""
    page = _Page(root)
    return landmarks(page) + generator_chrome(page)


def landmarks(page: _Page) -> list:
    """<nav> and ARIA navigation anywhere; the page's own <header>, <footer>, <aside> and their
    ARIA roles: outside the main content when the page marks it (Read the Docs wraps its page
    footer in a <section>), else outside any article or section.  Never one holding the main
    content."""
    found = list(page.root.iter("nav")) + [el for el, r in page.roles if r in _NAV_ROLES]
    scope = set(page.mains)
    for el in list(page.root.iter("header", "footer", "aside")) + \
            [el for el, r in page.roles if r in _PAGE_ROLES]:
        inside = (any(a in scope for a in el.iterancestors()) if scope
                  else next(el.iterancestors(*_SECTIONING), None) is not None)
        if not inside:
            found.append(el)
    return [el for el in found if el not in page.holds_main]


def generator_chrome(page: _Page) -> list:
    """The documentation generators' own sidebars and bars (GENERATOR_CLASSES, GENERATOR_IDS),
    never one that holds the page's main content."""
    found = []
    for el in page.root.iter("div"):
        cls, ident = el.get("class"), el.get("id")
        rule = GENERATOR_IDS.get(ident) if ident else None
        if rule is None and cls:
            rule = next((GENERATOR_CLASSES[c] for c in cls.split() if c in GENERATOR_CLASSES), None)
        if rule is not None and el not in page.holds_main and rule(el):
            found.append(el)
    return found


# Elements are dropped or unwrapped by renaming them, then removed by lxml in one C pass
# each (strip_elements keeps the text after an element, strip_tags its content): moving
# text between Python proxies element by element cost more than the parse.
_DROP, _UNWRAP = "pipekit-drop", "pipekit-unwrap"


def _clean(root, escape_lt: bool = True) -> int:
    """Clean the tree for the converter; returns the page's visible text in characters
    (`visible_chars`), measured after the landmarks went and before the generators' chrome."""
    from lxml import etree

    etree.strip_elements(root, *_DROP_TAGS, with_tail=False)
    page = _Page(root)
    for el in landmarks(page):
        el.tag = _DROP
    etree.strip_elements(root, _DROP, with_tail=False)
    visible = visible_chars(root, [m for m in page.mains if m.tag != _DROP])
    for el in generator_chrome(page):
        el.tag = _DROP
    etree.strip_elements(root, _DROP, with_tail=False)
    # A tab panel's text is the page's, shown on one click: sphinx-tabs writes every panel but
    # the first `hidden`, and the converter drops hidden elements (Flask's installation page
    # lost its Windows commands).
    for el, role in page.roles:
        if role == "tabpanel" and "hidden" in el.attrib:
            del el.attrib["hidden"]
    _unwrap_layout_tables(root)
    _plain_headings(root)
    _reader_links(root)
    _images_as_alt_text(root)
    etree.strip_elements(root, _DROP, with_tail=False)
    etree.strip_tags(root, _UNWRAP)
    _mark_markup_like_text(root, escape_lt)
    return visible


def visible_chars(root, mains: list) -> int:
    """Characters (not counting white space) of the page's main content (`mains`, the outermost
    of them) where the page marks it, else of its <body>: what stage 01 compares the converted
    text with."""
    from lxml import etree

    inner = set(mains)
    regions = [m for m in mains if not any(a in inner for a in m.iterancestors())] or \
        [next(root.iter("body"), root)]
    return sum(len("".join(etree.tostring(r, method="text", encoding="unicode", with_tail=False).split()))
               for r in regions)


def _text(el) -> str:
    return "".join(el.itertext())


def _unwrap_layout_tables(root) -> None:
    """Tables that hold document structure become plain blocks of their cells' content."""
    for table in [t for t in root.iter("table") if next(t.iterdescendants(*_LAYOUT_CONTENT), None) is not None]:
        for el in list(table.iter(*_TABLE_PARTS)):
            if next(el.iterancestors("table")) is table:
                el.tag = "div"  # a cell's content stays a block of its own, in order
                el.attrib.clear()
        table.tag = "div"
        table.attrib.clear()


def _plain_headings(root) -> None:
    """Headings read as text: links inside become their words, permalinks go; a link
    wrapped around a heading lets go of it."""
    for h in root.iter(*_HEADINGS):
        for a in list(h.iter("a")):
            a.tag = _DROP if _PERMALINK.fullmatch(_text(a)) else _UNWRAP
        for outer in h.iterancestors("a"):
            outer.tag = _UNWRAP


def _reader_links(root) -> None:
    """Permalinks go, same-page anchor links become their text, link titles go."""
    # A walk of the <a> elements with plain string tests, not XPath's `//a[@href or @class]`
    # and a split of every class: most links are neither (0.2 s of 0.5 on the Python manual).
    for a in root.iter("a"):
        href, cls = a.get("href"), a.get("class")
        if href is None and cls is None:
            continue
        href = href.strip() if href else ""
        permalink = cls is not None and "headerlink" in cls and "headerlink" in cls.split()
        if permalink or (href[:1] == "#" and _PERMALINK.fullmatch(_text(a))):
            a.tag = _DROP
        elif href[:1] == "#":
            a.tag = _UNWRAP
        elif a.get("title") is not None:
            del a.attrib["title"]


def _images_as_alt_text(root) -> None:
    for img in root.iter("img"):
        alt = " ".join((img.get("alt") or "").split())
        if alt:
            img.tail = alt + (img.tail or "")
        img.tag = _DROP


def _mark_markup_like_text(root, escape_lt: bool) -> None:
    """Outside code, `<` that could open a tag and `_` that could make emphasis become
    marks that the output turns into `\\<` and `\\_`."""
    # One walk over the elements, testing each .text and .tail with `in` and only a text that
    # holds a `_` (or `<`) for a code ancestor (lxml's C filter): half the time of XPath's
    # `//text()[contains(., '_')][not(ancestor::pre or ...)]` (0.35 s against 0.69 on the
    # Python manual), which built each text node's string value to test it.  The whole .text /
    # .tail is rewritten: after strip_tags one of them can be several adjacent text nodes, and
    # writing back one node's text dropped the rest ("Macro _REENTRANT", a heading of libxslt's
    # manual, became "_REENTRANT").
    from lxml import etree

    for el in root.iter(etree.Element):  # elements only: a comment's .text is not the page's
        text = el.text
        if text and ("_" in text or (escape_lt and "<" in text)) and el.tag not in _CODE_TAGS \
                and next(el.iterancestors(*_CODE_TAGS), None) is None:
            if (new := _marked(text, escape_lt)) != text:
                el.text = new
        tail = el.tail
        if tail and ("_" in tail or (escape_lt and "<" in tail)) and next(el.iterancestors(*_CODE_TAGS), None) is None:
            if (new := _marked(tail, escape_lt)) != tail:
                el.tail = new


def _marked(text: str, escape_lt: bool) -> str:
    text = _UNDERSCORES.sub(_mark_emphasis_underscores, text) if "_" in text else text
    return _TAG_LIKE.sub(_LT_MARK, text) if escape_lt else text


def _mark_emphasis_underscores(m: re.Match) -> str:
    """A run of `_` with a letter or digit on both sides stays (`snake_case`: CommonMark
    never makes emphasis inside a word); any other could open or close it."""
    text, i, j = m.string, m.start(), m.end()
    if 0 < i and j < len(text) and text[i - 1].isalnum() and text[j].isalnum():
        return m.group()
    return _UNDERSCORE_MARK * (j - i)


@functools.lru_cache(maxsize=1)
def _options():
    import html_to_markdown as h2m

    # escape_asterisks: a literal `*args` must not become emphasis; underscores stay plain
    # (snake_case names are everywhere in manuals, and `_` inside a word is never emphasis).
    # compact_tables: cells unpadded, so a table costs its text, not its widest cell's width.
    # No abbreviation expansions, no blockquote `cite` addresses: like link titles, they are
    # attributes a reader of the page does not see in its text.
    # preprocessing off: the converter's own cleanup drops a <form> with all it holds (ASP.NET
    # pages wrap the whole page in one) and, by words in their classes, an <aside>, <header>
    # or <footer> of class `sidebar`, `nav`, `menu` or `toc`: the Python manual's asyncio page
    # lost its "Hello World!" sidebar, a docutils `.. sidebar::` in the text.  Navigation is
    # decided here, by structure (the choices of a <select> went with _DROP_TAGS).
    return h2m.ConversionOptions(extract_metadata=False, bullets="-", escape_asterisks=True,
                                 escape_underscores=False, compact_tables=True,
                                 expand_abbreviations=False, include_blockquote_citations=False,
                                 preprocessing=h2m.PreprocessingOptions(enabled=False))
