"""Stage 01's HTML reader page by page: where its CPU goes, and whether a change moved its output.

    python bench/html_pages.py --phases                      # CPU by phase, Python manual, best of 3
    python bench/html_pages.py --phases --checkout /tmp/old  # the same for an older checkout
    python bench/html_pages.py --compare /tmp/old            # every page's row, old against this one

`--phases` times `convert_html` on the Python manual's pages (python3.11-doc, Sphinx's leftovers
left out as stage 01 leaves them) with each of its steps wrapped: process time, not wall (the
machine is shared), the best of `--rounds` rounds.  `other` is what no wrapped step holds:
serialising the cleaned tree, the title, lxml's strip passes, the regexes on the Markdown.

`--compare` runs `read_html` (what stage 01 stores: text, title, anchors, note, encoding) on
every .html / .htm file under /usr/share/doc (apt-get install python3.11-doc nodejs-doc
python-flask-doc r-doc-html) and /tmp/sqla_html (SQLAlchemy's sdist, see bench/html_kept.py),
once with each checkout's pipekit in a process of its own, and sorts the pages: identical,
differing only in white space and backticks (the same characters otherwise, in the same order:
a code span joined or split, a line broken elsewhere), or otherwise (listed).

Nothing here is a test; the figures go to bench/README.md ("Stage 01 on both cores").
"""
from __future__ import annotations

import argparse
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MANUAL = Path("/usr/share/doc/python3.11/html")
TOPS = (Path("/usr/share/doc"), Path("/tmp/sqla_html"))
STEPS = ("parse_html", "_plain_code", "_mark_heading_ids", "_Page", "landmarks", "visible_chars", "generator_chrome",
         "_unwrap_layout_tables", "_plain_headings", "_reader_links", "_images_as_alt_text",
         "_mark_markup_like_text", "heading_ids")


def phases(checkout: Path, rounds: int) -> None:
    sys.path.insert(0, str(checkout))
    import html_to_markdown as h2m
    from pipekit.read import html_markdown as hm
    from pipekit.read.text import decode_text
    from pipekit.read.walk import list_inputs

    entries = [e for e in list_inputs(MANUAL) if e.format == "html" and e.skip is None and e.error is None]
    texts = [decode_text(Path(e.path).read_bytes(), None)[0] for e in entries]
    spent: dict[str, float] = {}

    def wrapped(name, f):
        def timed(*a, **k):
            t = time.process_time()
            try:
                return f(*a, **k)
            finally:
                spent[name] = spent.get(name, 0.0) + time.process_time() - t
        return timed

    for name in STEPS:
        if hasattr(hm, name):
            setattr(hm, name, wrapped(name, getattr(hm, name)))
    h2m.convert = wrapped("html-to-markdown", h2m.convert)
    best: dict[str, float] = {}
    for _ in range(rounds):
        spent.clear()
        t = time.process_time()
        for text in texts:
            hm.convert_html(text)
        spent["total"] = time.process_time() - t
        spent["other"] = 2 * spent["total"] - sum(spent.values())
        for k, v in spent.items():
            best[k] = min(best.get(k, 1e9), v)
    mb = sum(e.n_bytes for e in entries) / 1e6
    print(f"{checkout}: {len(texts)} pages, {mb:.1f} MB; CPU s, best of {rounds}")
    for k, v in sorted(best.items(), key=lambda kv: -kv[1]):
        print(f"  {k:<24} {v:6.2f}" + (f"   {mb / v:.1f} MB per CPU second" if k == "total" else ""))


def pages() -> list[str]:
    found = []
    for top in TOPS:
        for folder, dirs, files in os.walk(top):
            dirs.sort()
            found += [os.path.join(folder, f) for f in sorted(files)
                      if f.endswith((".html", ".htm")) and os.path.isfile(os.path.join(folder, f))]
    return found


def dump(checkout: Path, out: Path) -> None:
    """read_html's row of every page, with `checkout`'s pipekit (run in a process of its own)."""
    code = f"""
import pickle, sys
sys.path.insert(0, {str(checkout)!r})
from pathlib import Path
from pipekit.read.html import read_html
rows = {{}}
for p in pickle.load(open({str(out)!r}, "rb")):
    try:
        rows[p] = read_html(Path(p).read_bytes())
    except Exception as exc:
        rows[p] = ("error", type(exc).__name__, str(exc))
pickle.dump(rows, open({str(out)!r}, "wb"))
"""
    subprocess.run([sys.executable, "-c", code], check=True)


def compare(baseline: Path) -> None:
    names = pages()
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for checkout in (baseline, REPO):
            out = Path(tmp) / f"{len(rows)}.pkl"
            out.write_bytes(pickle.dumps(names))
            dump(checkout.resolve(), out)
            rows.append(pickle.loads(out.read_bytes()))
    old, new = rows

    def bare(text: str) -> str:  # no white space, backticks or block-quote marks
        return re.sub(r"[\s`]", "", re.sub(r"(?m)^[ \t]*(?:> ?)+", "", text))

    same = spaced = 0
    other = []
    for p in names:
        a, b = old[p], new[p]
        if a == b:
            same += 1
        elif isinstance(a, dict) and isinstance(b, dict) and all(a[k] == b[k] for k in a if k != "text") \
                and bare(a["text"]) == bare(b["text"]):
            spaced += 1
        else:
            other.append(p)
    print(f"{len(names):,} pages: {same:,} identical, {spaced:,} differ only in white space and backticks, "
          f"{len(other):,} otherwise")
    for p in other[:20]:
        print("  ", p)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phases", action="store_true", help="CPU by phase on the Python manual")
    ap.add_argument("--checkout", type=Path, default=REPO, help="whose pipekit --phases times (default: this one)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compare", type=Path, metavar="BASELINE", help="an older checkout whose rows to compare")
    args = ap.parse_args()
    if args.phases:
        phases(args.checkout.resolve(), args.rounds)
    if args.compare:
        compare(args.compare)
    if not (args.phases or args.compare):
        ap.print_help()


if __name__ == "__main__":
    main()
