"""Which HTML -> Markdown converter for stage 01: speed and structure fidelity measured on
the same pages, the Python manual (Debian's python3.11-doc, Sphinx build leftovers left
out as stage 01 leaves them out).

    python bench/html_converters.py                 # every page (498, 47 MB)
    python bench/html_converters.py --every 5       # one page in five
    python bench/html_converters.py --before /tmp/old-checkout   # + that checkout's converter

Candidates (the peers are in requirements-bench.txt; a missing one is skipped):
  pipekit            pipekit/read/html_markdown.py of this checkout: lxml cleans, html-to-markdown writes
  before             --before PATH: that checkout's pipekit/read/html_markdown.py (markdownify + BeautifulSoup)
  html-to-markdown   the Rust converter alone, on the raw page
  markdownify-rs     the Rust port of markdownify alone, on the raw page
  lxml+markdownify-rs  pipekit's lxml cleaning, markdownify-rs writing
and, for the parser alone, lxml and selectolax (Lexbor) parsing each page.

Figures per candidate: CPU seconds and MB of HTML per CPU second (process time, so the
other processes of a shared machine do not count); then, through stages 02 and 03 as
bench/structure.py runs them: h1-h3 outside navigation that reach a chunk's heading_path,
chunks with a fence never closed, chunks still holding a `¶`, a same-page link `](#`, or a
link title, and chunks with a heading path.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "bench"))
sys.path.insert(0, str(HERE / "tests"))

PYTHON_DOC = Path("/usr/share/doc/python3.11/html")
LEFTOVERS = ("_sources/", "_static/", "_images/", "_downloads/", "genindex", "search.html", "py-modindex.html")


def pages(every: int) -> list[Path]:
    found = sorted(p for p in PYTHON_DOC.rglob("*.html")
                   if not any(s in p.relative_to(PYTHON_DOC).as_posix() for s in LEFTOVERS))
    return found[::every]


def module_from(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def candidates(before: Path | None) -> dict:
    """name -> function(html text) -> markdown; a candidate whose package is missing is left out."""
    from pipekit.read import html_markdown

    out = {"pipekit": lambda h: html_markdown.html_to_markdown(h)[0]}
    if before is not None:
        # pipekit/read/ since the split into rooms; pipekit/ in older checkouts
        found = [p for p in (before / "pipekit" / "read" / "html_markdown.py", before / "pipekit" / "html_markdown.py")
                 if p.exists()]
        old = module_from(found[0], "_before_html_markdown")
        out["before"] = lambda h: old.html_to_markdown(h)[0]
    import html_to_markdown as h2m

    plain = h2m.ConversionOptions(extract_metadata=False)
    out["html-to-markdown"] = lambda h: h2m.convert(h, plain).content or ""
    try:
        import markdownify_rs
    except ImportError:
        print("markdownify-rs not installed (pip install -r requirements-bench.txt): left out")
    else:
        from lxml import etree

        def cleaned_rs(h: str) -> str:
            root = html_markdown.parse_html(h)
            if root is None:
                return ""
            html_markdown._clean(root)
            md = markdownify_rs.markdownify(etree.tostring(root, method="html", encoding="unicode"),
                                            heading_style="atx", bullets="-")
            # the escapes pipekit's cleaning marks in the tree, written as pipekit writes them
            return md.replace(html_markdown._LT_MARK, "\\<").replace(html_markdown._UNDERSCORE_MARK, "\\_")

        out["markdownify-rs"] = lambda h: markdownify_rs.markdownify(h, heading_style="atx", bullets="-")
        out["lxml+markdownify-rs"] = cleaned_rs
    return out


def parsers() -> dict:
    from lxml import etree

    out = {"lxml (libxml2)": lambda h: etree.fromstring(h, etree.HTMLParser())}
    try:
        from selectolax.lexbor import LexborHTMLParser
    except ImportError:
        print("selectolax not installed (pip install -r requirements-bench.txt): left out")
    else:
        out["selectolax (Lexbor)"] = LexborHTMLParser
    return out


def fidelity(markdowns: list[str], htmls: list[str]) -> dict:
    import structure
    from pipekit.run.stages import load_stage
    from test_03_oracle import fence_left_open

    st2, st3 = load_stage(2), load_stage(3)
    f = dict.fromkeys(("heads", "reached", "chunks", "open", "pilcrow", "anchor", "titled", "headed"), 0)
    for md, html in zip(markdowns, htmls):
        _, chunks, _ = structure.chunk(st2, st3, md, "html")
        in_paths = {structure.norm(h) for c in chunks for h in c["heading_path"]}
        want = structure.heading_texts(html)
        f["heads"] += len(want)
        f["reached"] += sum(w in in_paths for w in want)
        f["chunks"] += len(chunks)
        for c in chunks:
            f["open"] += fence_left_open(c["text"])
            f["pilcrow"] += "¶" in c["text"]
            f["anchor"] += structure._SAME_PAGE_LINK.search(c["text"]) is not None
            f["titled"] += structure._LINK_TITLE.search(c["text"]) is not None
            f["headed"] += bool(c["heading_path"])
    return f


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--every", type=int, default=1, help="take one page in N")
    ap.add_argument("--before", type=Path, help="a checkout whose pipekit/read/html_markdown.py to add")
    ap.add_argument("--speed-only", action="store_true", help="skip the fidelity figures (stages 02-03)")
    ap.add_argument("--only", help="comma-separated converter names to run (default: all)")
    args = ap.parse_args()
    files = pages(args.every)
    if not files:
        sys.exit(f"no pages under {PYTHON_DOC} (apt-get install -y python3.11-doc)")
    htmls = [p.read_bytes().decode("utf-8") for p in files]
    mb = sum(len(p.read_bytes()) for p in files) / 1e6
    print(f"{len(files)} pages of {PYTHON_DOC}, {mb:.1f} MB\n")
    print(f"{'parser':22s} {'CPU s':>7s} {'MB/s':>6s}")
    for name, parse in parsers().items():
        t0 = time.process_time()
        for h in htmls:
            parse(h)
        cpu = time.process_time() - t0
        print(f"{name:22s} {cpu:7.2f} {mb / cpu:6.1f}")
    print(f"\n{'converter':22s} {'CPU s':>7s} {'MB/s':>6s}  {'h1-h3 in heading_path':>23s} {'open fences':>11s} "
          f"{'¶':>5s} {'](#':>6s} {'titles':>6s} {'chunks with heading':>20s}")
    for name, convert in candidates(args.before).items():
        if args.only and name not in args.only.split(","):
            continue
        t0 = time.process_time()
        markdowns = [convert(h) for h in htmls]
        cpu = time.process_time() - t0
        line = f"{name:22s} {cpu:7.2f} {mb / cpu:6.1f}"
        if not args.speed_only:
            f = fidelity(markdowns, htmls)
            line += (f"  {f['reached']:>7,}/{f['heads']:,} {100 * f['reached'] / max(1, f['heads']):5.1f} % "
                     f"{f['open']:>11} {f['pilcrow']:>5} {f['anchor']:>6} {f['titled']:>6} "
                     f"{f['headed']:>9,}/{f['chunks']:,} {100 * f['headed'] / max(1, f['chunks']):4.1f} %")
        print(line, flush=True)


if __name__ == "__main__":
    main()
