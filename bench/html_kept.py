"""How much of each HTML page's text stage 01 keeps: our converter's Markdown against an
oracle that knows nothing of our navigation rules, page by page.

    python bench/html_kept.py                      # every collection found on this machine
    python bench/html_kept.py --collection python  # one of them
    python bench/html_kept.py --folder DIR         # any folder of .html pages
    python bench/html_kept.py --before /tmp/old    # + that checkout's converter, side by side

Two oracles, both the page's text as lxml reads it, without what no reader sees as text
(`<script>`, `<style>`, `<noscript>`, `<template>`, `<svg>`, `<iframe>`, `<object>`, `<embed>`,
`<canvas>`, an element `hidden` or `display: none`; a tab panel written `hidden` is shown on
one click and stays):

  page     issue 48's: the `<body>` without `<nav>`, `<header>`, `<footer>`, and without the
           elements whose ARIA role says the same (navigation, banner, contentinfo, search:
           Sphinx marks its related-links bar, sidebar and footer so, as `<div>`s).  It cannot
           know a generator's sidebar that carries no such mark (SQLAlchemy's theme, texinfo's
           Next/Previous/Up bars, Node's module list, Python's footer), so a page of little text
           beside a big sidebar falls below 99 % without a word lost: the figure to read is
  content  the same, within the page's main content where the page marks it (`<main>`,
           `<article>`, role=main; nothing of our rules); on a page without such a mark (Node,
           texinfo), the body without the blocks of text found on at least half the
           collection's pages (and 5 or more): the site's own chrome, whatever carries it.
  bare     the page oracle without the generators' chrome as pipekit knows it (GENERATOR_CLASSES,
           GENERATOR_IDS of pipekit/read/html_markdown.py): not independent, but it shows what
           is lost beside those bars, on pages whose main content is not marked.
Pages below the threshold (99 %) by the content oracle are listed with the words they lost,
so a person can tell whose fault it is.

Kept is counted in characters of words (`\\w+`), as a multiset: for each word, min(times in
ours, times in the oracle) times its length, over the oracle's total.  Words, because our
Markdown adds markup (`#`, `|`, `[text](url)`, backslash escapes, fences) that is not text
lost or gained; a multiset, because a page that repeats a sentence must keep it each time.
Backslash escapes are undone first (`\\_\\_del\\_\\_` is the word `__del__`), and the oracle
puts a break at each block element's edges, as the Markdown puts a line break there
(`<li>one</li><li>two</li>` is two words on the page, not `onetwo`).

Collections (each skipped, with how to get it, when absent):
  python      Python's manual: apt-get install -y python3.11-doc
  sqlalchemy  SQLAlchemy's built HTML docs, shipped in its sdist under doc/: pip download
              --no-deps --no-binary :all: sqlalchemy -d /tmp/sqla && tar xzf /tmp/sqla/*.tar.gz -C /tmp/sqla
  node        Node's API docs: apt-get install -y nodejs-doc
  flask       Flask's docs (Debian's Sphinx build): apt-get install -y python-flask-doc
  r           R's manuals (texinfo): apt-get install -y r-doc-html
Sphinx's build leftovers (`_sources/`, `_static/`, genindex, search) are left out, as stage
01 leaves them out; `_modules/` (highlighted source pages) is read, as stage 01 reads it.
Speed is bench/html_converters.py's to measure (this one reads each page three times).
"""
from __future__ import annotations

import argparse
import glob
import importlib.util
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

COLLECTIONS = {
    "python": ["/usr/share/doc/python3.11/html"],
    "sqlalchemy": sorted(glob.glob("/tmp/sqla*/sqlalchemy-*/doc")),
    "node": ["/usr/share/doc/nodejs/api"],
    "flask": ["/usr/share/doc/python-flask-doc/html"],
    "r": ["/usr/share/doc/r-doc-html/manual"],
}
LEFTOVERS = ("_sources/", "_static/", "_images/", "_downloads/", "genindex", "search.html",
             "py-modindex.html")
ORACLE_DROPS = ("nav", "header", "footer", "script", "style", "noscript", "template", "svg", "iframe",
                "object", "embed", "canvas", "title")
ORACLE_ROLES = ("navigation", "banner", "contentinfo", "search")
DISPLAY_NONE = re.compile(r"display\s*:\s*none", re.I)
BLOCKS = ("p", "div", "li", "td", "th", "tr", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6", "pre",
          "br", "table", "ul", "ol", "dl", "section", "article", "blockquote", "hr", "main", "aside",
          "caption", "figure", "figcaption", "details", "summary", "body", "button")
WORD = re.compile(r"\w+")
SEP = "\ue000"  # where a block element starts or ends, so blocks can be told apart
MD_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")


def oracle_segments(html: str) -> tuple[list[str], list[str] | None, list[str]]:
    """(the page oracle's blocks of text, the main content's or None for a page marking none,
    the body's without the generators' chrome as pipekit knows it)."""
    from lxml import etree

    from pipekit.read.html_markdown import _Page, generator_chrome, parse_html

    root = parse_html(html)
    if root is None:
        return [], None, []
    body = next(root.iter("body"), root)
    etree.strip_elements(body, *ORACLE_DROPS, with_tail=False)
    for el in body.xpath("//*[@role or @hidden or @style]"):
        role = (el.get("role") or "").strip().lower()
        hidden = "hidden" in el.attrib and role != "tabpanel"
        if role in ORACLE_ROLES or hidden or DISPLAY_NONE.search(el.get("style") or ""):
            el.tag = "oracle-drop"
    etree.strip_elements(body, "oracle-drop", with_tail=False)
    for el in body.iter(*BLOCKS):
        el.text = SEP + (el.text or "")
        el.tail = SEP + (el.tail or "")
    mains = body.xpath("//main | //article | //*[@role='main']")
    outer = [m for m in mains if not any(a in mains for a in m.iterancestors())]
    main = [s for m in outer for s in blocks(m)] if outer else None
    page = blocks(body)
    for el in generator_chrome(_Page(root)):
        el.tag = "oracle-drop"
    etree.strip_elements(body, "oracle-drop", with_tail=False)
    return page, main, blocks(body)


def blocks(el) -> list[str]:
    from lxml import etree

    text = etree.tostring(el, method="text", encoding="unicode", with_tail=False)
    return [s for s in (" ".join(part.split()) for part in text.split(SEP)) if s]


def site_chrome(segments: list[list[str]]) -> set[str]:
    """The blocks of text found on at least half the pages of a collection (and on 5 or more)."""
    df = Counter(s for page in segments for s in set(page))
    least = max(5, len(segments) / 2)
    return {s for s, n in df.items() if n >= least}


def words(text: str) -> Counter:
    return Counter(WORD.findall(text))


def kept(ours: Counter, oracle: Counter) -> tuple[int, int]:
    """(characters of the oracle's words ours holds too, characters of the oracle's words)."""
    total = sum(len(w) * n for w, n in oracle.items())
    both = sum(len(w) * min(n, ours.get(w, 0)) for w, n in oracle.items())
    return both, total


def lost_sample(ours: Counter, oracle: Counter, n: int = 8) -> str:
    gone = Counter({w: c - ours.get(w, 0) for w, c in oracle.items() if c > ours.get(w, 0)})
    return " ".join(w for w, _ in sorted(gone.items(), key=lambda x: -x[1] * len(x[0]))[:n])


def load_converter(checkout: Path):
    spec = importlib.util.spec_from_file_location("_before_html_markdown",
                                                  checkout / "pipekit" / "read" / "html_markdown.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.html_to_markdown


def pages(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.html")
                  if not any(s in p.relative_to(folder).as_posix() for s in LEFTOVERS))


def share(rows: list, i: int) -> tuple[float, float, int, object]:
    """(all pages' kept share, the least page's, pages below the threshold, the least page) of
    rows' (kept, total) pair at index i."""
    ratios = [(r[i][0] / r[i][1] if r[i][1] else 1.0, r) for r in rows]
    least = min(ratios, key=lambda x: x[0])
    total = sum(r[i][0] for r in rows) / max(1, sum(r[i][1] for r in rows))
    return total, least[0], ratios, least[1]


def measure(name: str, folder: Path, converters: dict, threshold: float, shown: int) -> None:
    from pipekit.read.html import read_html

    files = pages(folder)
    mb = sum(p.stat().st_size for p in files) / 1e6
    print(f"\n{name}: {len(files)} pages of {folder}, {mb:.1f} MB")
    datas = [p.read_bytes() for p in files]
    segments = [oracle_segments(d.decode("utf-8", errors="replace")) for d in datas]
    chrome = site_chrome([page for page, main, _ in segments if main is None])
    oracles = [(words(" ".join(page)),
                words(" ".join(main if main is not None else [s for s in page if s not in chrome])),
                words(" ".join(bare)))
               for page, main, bare in segments]
    marked = sum(main is not None for _, main, _ in segments)
    print(f"  content oracle: the main content on {marked} pages, the body without the {len(chrome)} "
          f"blocks repeated on half the others on {len(files) - marked}")
    for c, convert in converters.items():
        rows = []
        for p, data, (page, content, bare) in zip(files, datas, oracles):
            md = read_html(data)["text"] if convert is None else convert(data.decode("utf-8", errors="replace"))[0]
            ours = words(MD_ESCAPE.sub(r"\1", md))
            rows.append((kept(ours, page), kept(ours, content), p, ours, content, kept(ours, bare)))
        for label, i in (("page", 0), ("bare", 5), ("content", 1)):
            total, least, ratios, worst = share(rows, i)
            below = sorted(((r, row) for r, row in ratios if r < threshold), key=lambda x: x[0])
            print(f"  {c:7s} {label:8s} {100 * total:6.2f} % of the oracle's characters kept; {len(below)} of "
                  f"{len(rows)} pages below {100 * threshold:.0f} %, the least {100 * least:.2f} % "
                  f"({worst[2].relative_to(folder)})")
        for r, row in below[:shown]:
            (both, total), p, ours, oracle = row[1], row[2], row[3], row[4]  # by the content oracle
            print(f"    {100 * r:6.2f} %  {both:>9,} of {total:>9,}  {p.relative_to(folder)}"
                  f"   lost: {lost_sample(ours, oracle)}")
        if len(below) > shown:
            print(f"    ... and {len(below) - shown} more")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--collection", action="append", choices=sorted(COLLECTIONS),
                    help="one collection (repeatable; default: every one found)")
    ap.add_argument("--folder", type=Path, action="append", help="a folder of .html pages to measure")
    ap.add_argument("--before", type=Path, help="a checkout whose converter to measure beside this one")
    ap.add_argument("--threshold", type=float, default=0.99, help="list pages below this share (0.99)")
    ap.add_argument("--shown", type=int, default=15, help="pages listed per collection")
    args = ap.parse_args()
    converters = {"ours": None}  # None: the reader stage 01 calls, bytes in
    if args.before:
        converters["before"] = load_converter(args.before)
    todo = [(f.name, f) for f in args.folder or []]
    for name in args.collection or ([] if args.folder else COLLECTIONS):
        found = [Path(f) for f in COLLECTIONS[name] if Path(f).is_dir()]
        if not found:
            print(f"\n{name}: not on this machine, left out (see the docstring for how to get it)")
        todo += [(name, f) for f in found[:1]]
    for name, folder in todo:
        measure(name, folder, converters, args.threshold, args.shown)


if __name__ == "__main__":
    main()
