"""HTML to Markdown that stays valid Markdown, so stage 03 finds the page's structure.

Stage 01 converts HTML to Markdown (with markdownify) and stage 03 reads the result by
CommonMark's rules: a heading, list or code block survives only if the Markdown written
for it parses back as one.  Real pages broke that in four ways, each fixed here before or
during the conversion:

* Layout tables.  Old pages lay out the whole page in a `<table>`; converted as a data
  table, every heading, list and paragraph inside became one escaped table cell (all 36
  headings of two such pages lost).  A table that holds headings, lists, code, block
  quotes or other tables is layout: it is unwrapped into its cells' content, in order.
  A table of plain cells is data and stays a GFM table.
* Code containing backticks.  A ``` fence around code that itself holds ``` (a Markdown
  tutorial, a language reference) closes early, and the rest of the page is read as code
  — a language reference lost 7 of its 11 section headings.  Every code block is fenced
  with one backtick more than the longest run inside it (at least three).
* Headings that are links, or that carry a permalink (Sphinx's `¶`, a `#` anchor):
  `## [Install](/install)` puts the address into the heading path.  Links inside a
  heading become their text; permalink symbols go.
* Text that looks like markup: `<script>` in a manual's prose (`&lt;script&gt;` in the
  HTML) is escaped, or it would open a raw HTML block that swallows the rest of the page;
  so is a run of `~~~` or ``` in prose (a plain-text underline in Valgrind's NEWS page),
  or it would open a fence.
* Navigation: `<nav>`, ARIA navigation / banner / contentinfo / complementary regions,
  `<aside>`, a page-level `<header>` or `<footer>` (one inside `<article>`, `<main>` or
  `<section>` is the article's own and stays), and the sidebars, related-links bars and
  breadcrumbs of documentation generators (by class or id) are not the document.

`html_to_markdown(html)` returns (markdown, title from `<title>`).
"""
from __future__ import annotations

import functools
import re
import warnings

__all__ = ["html_to_markdown", "NAV_CLASSES", "is_navigation"]

# Elements whose text is not the document: code, styling, site navigation, embeds, and
# the <title> (already taken for the title column).  Not <head> as a whole: html.parser
# builds no implied structure, so in a page whose </head> is missing the whole body sits
# inside <head>, and dropping it dropped the document.
_DROP_TAGS = ("script", "style", "noscript", "template", "nav", "aside", "iframe", "object",
              "embed", "svg", "canvas", "title", "meta", "link")
_NAV_ROLES = ("navigation", "banner", "contentinfo", "complementary", "search")
# class or id words that documentation generators (Sphinx, Doxygen, MkDocs, Javadoc,
# GNU texinfo) give their navigation: matched as whole words of the attribute.
NAV_CLASSES = re.compile(
    r"(?:^|[\s_-])(?:sphinxsidebar|sidebar|sidenav|nav|navbar|navigation|breadcrumbs?|related|"
    r"skip-?links?|topbar|footer)(?:$|[\s_-])", re.I)
_SECTIONING = ("article", "main", "section")
_LAYOUT_CONTENT = ("h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "dl", "pre", "blockquote", "table")
_PERMALINK = re.compile(r"[\s¶§#🔗]*")
_BACKTICKS = re.compile(r"`+")
_TAG_LIKE = re.compile(r"<(?=[A-Za-z/!?])")
_FENCE_LIKE = re.compile(r"(?<![~`])([~`])(?=\1\1)")


def is_navigation(tag) -> bool:
    """Is this element site navigation (see the module docstring)?"""
    name = tag.name
    if name in ("nav", "aside"):
        return True
    attrs = tag.attrs or {}
    if attrs.get("role") in _NAV_ROLES:
        return True
    if name in ("header", "footer"):
        return tag.find_parent(_SECTIONING) is None
    if name in ("div", "ul", "section", "table", "td", "span", "p"):
        words = " ".join(attrs.get("class") or []) + " " + (attrs.get("id") or "")
        return bool(words.strip()) and NAV_CLASSES.search(words) is not None
    return False


def html_to_markdown(html: str) -> tuple[str, str | None]:
    from bs4 import BeautifulSoup, Comment, MarkupResemblesLocatorWarning

    with warnings.catch_warnings():
        # A page whose whole text looks like a URL or a file name is still a page: bs4's
        # "did you mean to open this?" warning only confused the stage's output.
        warnings.simplefilter("ignore", MarkupResemblesLocatorWarning)
        soup = BeautifulSoup(html, "html.parser")
    title = None
    if soup.title is not None:
        title = " ".join(soup.title.get_text().split()) or None
    for tag in soup.find_all(_DROP_TAGS):
        tag.decompose()
    for tag in soup.find_all(is_navigation):
        if not tag.decomposed:
            tag.decompose()
    for comment in soup.find_all(string=lambda s: isinstance(s, Comment)):
        comment.extract()
    _unwrap_layout_tables(soup)
    _plain_headings(soup)
    markdown = _converter().convert_soup(soup)
    return re.sub(r"\n{3,}", "\n\n", markdown).strip() + "\n", title


def _unwrap_layout_tables(soup) -> None:
    """Tables that hold document structure become plain blocks of their cells' content."""
    for table in soup.find_all("table"):
        if table.decomposed or not table.find(_LAYOUT_CONTENT):
            continue
        for el in table.find_all(("caption", "thead", "tbody", "tfoot", "tr", "td", "th")):
            if el.find_parent("table") is table:
                el.name = "div"  # a cell's content stays a block of its own, in order
                el.attrs = {}
        table.name = "div"
        table.attrs = {}


def _plain_headings(soup) -> None:
    """Headings read as text: links inside become their words, permalinks go; a link
    wrapped around a heading lets go of it."""
    headings = soup.find_all(("h1", "h2", "h3", "h4", "h5", "h6"))
    for h in headings:
        for a in h.find_all("a"):
            if _PERMALINK.fullmatch(a.get_text()):
                a.decompose()
            else:
                a.unwrap()
        outer = h.find_parent("a")
        if outer is not None:
            outer.unwrap()


@functools.lru_cache(maxsize=1)
def _converter():
    import markdownify

    class Converter(markdownify.MarkdownConverter):
        # A `|` inside a cell would split it into two columns.
        def convert_td(self, el, text, parent_tags):
            return super().convert_td(el, text.replace("|", r"\|"), parent_tags)

        def convert_th(self, el, text, parent_tags):
            return super().convert_th(el, text.replace("|", r"\|"), parent_tags)

        # An image is its alt text: its address is not searchable content, and a saved
        # page's inline `data:` images are tens of kilobytes of base64 in one "word".
        def convert_img(self, el, text, parent_tags):
            return " ".join((el.get("alt") or "").split())

        # A paragraph that begins "# 5 reasons" must not become a heading in stage 03, and
        # text that reads like a tag (a manual's "<script>" or "<tool>", written &lt;...
        # in the HTML) must not become raw HTML: a `<script>` line opened an HTML block
        # that ran to the end of a page and took 9 of its section headings with it.
        def escape(self, text, parent_tags):
            text = markdownify.re_escape_misc_hashes.sub(r"\1\\\2", super().escape(text, parent_tags))
            if "~~~" in text or "```" in text:  # a line of ~~~ in prose would open a fence
                text = _FENCE_LIKE.sub(r"\\\1", text)
            return _TAG_LIKE.sub(r"\\<", text) if "<" in text else text

        # The fence is longer than any backtick run in the code, or the code closes it.
        def convert_pre(self, el, text, parent_tags):
            out = super().convert_pre(el, text, parent_tags)
            if not out:
                return out
            longest = max((len(m) for m in _BACKTICKS.findall(text)), default=0)
            if longest < 3:
                return out
            fence = "`" * (longest + 1)
            head, _, rest = out.partition("```")
            body, _, tail = rest.rpartition("```")
            return head + fence + body + fence + tail

    return Converter(heading_style="atx", bullets="-", table_infer_header=True,
                     escape_underscores=False, code_language_callback=_code_language)


def _code_language(el) -> str | None:
    for node in (el, el.find("code")):
        for cls in (node.get("class") or []) if node is not None else []:
            if cls.startswith(("language-", "lang-")):
                return cls.split("-", 1)[1]
    return None
