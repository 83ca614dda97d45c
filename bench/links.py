"""Do hits' links open their passage?  And what does a filter cost a search?  (issue 36)

    python bench/links.py            # builds bench/corpora/links/ once, runs the pipeline, prints the figures
    python bench/links.py --queries 200

A real folder of three formats, gathered into bench/corpora/links/ (git-ignored):
  html/      Python's HTML manual (Debian's python3.11-doc, /usr/share/doc/python3.11/html: Sphinx)
  markdown/  the Markdown docs of two sdists from PyPI (black: MyST for Sphinx; Markdown: MkDocs
             with attribute lists), `pip download --no-binary :all: --no-deps`
  pdf/       R's manuals (Debian's r-doc-pdf; the 3,000-page reference manual left out for time)

Queries: for each format, `--queries` chunks drawn at random (seeded) from that format's chunks,
each asked as eight of its words; every hit of every query (k=10, asked with `--format FMT`
so each format gets its own hits) is judged by an oracle that reads the *source* file, not
pipekit's outputs:

* HTML: lxml parses the page; the link's id must be an element's id (or an `<a name>`), and
  that element must be the hit's own heading: a heading whose text is the hit's last heading,
  or a section/div whose first heading is, or an anchor inside such a heading.
* Markdown: markdown-it-py (CommonMark, front matter skipped) lists the headings; this file's
  own GitHub slug function (written here, apart from pipekit's) numbers duplicates in order and
  lets a `{#id}` attribute list win; the link's slug must be one of them, and its heading's text
  the hit's last heading.
* PDF: pypdfium2 counts the pages; `#page=N` must be a page of the file, and that page must
  hold the passage's first words (the page a viewer opens shows the passage).

A hit with no heading (text before a page's first heading) links to the document alone and is
counted apart.  Latency: `Searcher.search` (index loaded once, texts kept) per query, median and
90th percentile, without a filter, with `--format`, and with an `--in` glob.
"""
from __future__ import annotations

import argparse
import random
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))

CORPUS = BENCH / "corpora" / "links"
SDISTS = [("black", "26.10.1", "docs"), ("Markdown", "3.11.3", "docs")]
PYTHON_HTML = Path("/usr/share/doc/python3.11/html")
R_MANUALS = Path("/usr/share/R/doc/manual")
R_SKIPPED = {"refman.pdf"}


def gather() -> None:
    """bench/corpora/links/{html,markdown,pdf}, once (delete the folder to gather again)."""
    if (CORPUS / ".complete").exists():
        return
    for need, how in ((PYTHON_HTML, "apt-get install python3.11-doc"), (R_MANUALS, "apt-get install r-doc-pdf")):
        if not need.is_dir():
            raise SystemExit(f"{need} is missing: {how}")
    shutil.rmtree(CORPUS, ignore_errors=True)
    shutil.copytree(PYTHON_HTML, CORPUS / "html", symlinks=False)
    (CORPUS / "pdf").mkdir(parents=True)
    for pdf in sorted(R_MANUALS.glob("*.pdf")):
        if pdf.name not in R_SKIPPED:
            shutil.copy(pdf.resolve(), CORPUS / "pdf" / pdf.name)
    cache = BENCH / "corpora" / "links_sdists"
    cache.mkdir(parents=True, exist_ok=True)
    for package, version, folder in SDISTS:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        f"{package}=={version}", "-d", str(cache)], check=True)
        (archive,) = [p for p in cache.glob("*.tar.gz") if p.name.lower() == f"{package.lower()}-{version}.tar.gz"]
        with tarfile.open(archive) as tar:
            for m in tar.getmembers():
                parts = m.name.split("/", 1)
                if len(parts) == 2 and m.isfile() and m.name.endswith(".md") and parts[1].startswith(folder + "/"):
                    target = CORPUS / "markdown" / package.lower() / parts[1]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(tar.extractfile(m).read())
    (CORPUS / ".complete").write_text("gathered\n")


def run_pipeline(out: Path) -> None:
    cfg = out.parent / "links.yaml"
    out.mkdir(parents=True, exist_ok=True)
    cfg.write_text(f"paths:\n  output: {out}\ndocuments:\n  input: {CORPUS}\n"
                   "retrieval:\n  queries: [install packages]\n  qrels: null\n", encoding="utf-8")
    subprocess.run([sys.executable, str(REPO / "run_pipeline.py"), "--config", str(cfg)], check=True,
                   stdout=subprocess.DEVNULL)


# ---- the oracle: reads the sources ---------------------------------------------------------

def words(text: str) -> str:
    return " ".join(re.sub(r"[^\w]+", " ", text.casefold()).split())


def slug(text: str) -> str:
    """GitHub's heading anchor (github-slugger): lower case, drop what is not a letter, digit,
    mark, `_`, `-` or space, then every space a hyphen."""
    out = []
    for ch in text.lower():
        if ch.isalnum() or ch in "_- " or unicodedata_category(ch).startswith("M"):
            out.append("-" if ch == " " else ch)
    return "".join(out)


def unicodedata_category(ch: str) -> str:
    import unicodedata

    return unicodedata.category(ch)


ATTR_ID = re.compile(r"\s*\{[^{}]*#([^\s{}]+)[^{}]*\}\s*$")
ATTR_LIST = re.compile(r"\s*\{:?[^{}]*\}\s*$")


def markdown_anchors(source: str) -> dict[str, str]:
    """anchor -> heading text of every heading markdown-it finds in a Markdown file."""
    from markdown_it import MarkdownIt
    from mdit_py_plugins.front_matter import front_matter_plugin

    tokens = MarkdownIt("commonmark").use(front_matter_plugin).parse(source)
    seen: dict[str, int] = {}
    out: dict[str, str] = {}
    for i, tok in enumerate(tokens):
        if tok.type != "heading_open":
            continue
        inline = tokens[i + 1]
        text = "".join(c.content for c in (inline.children or []) if c.type in ("text", "code_inline"))
        explicit = ATTR_ID.search(text)
        text = ATTR_LIST.sub("", text).strip()
        if explicit:
            anchor = explicit.group(1)
        else:
            base = slug(text)
            anchor, n = base, seen.get(base)
            if n is not None:
                while anchor in seen:
                    n += 1
                    anchor = f"{base}-{n}"
                seen[base] = n
        seen.setdefault(anchor, 0)
        out.setdefault(anchor, text)
    return out


def html_targets(path: Path) -> dict[str, str]:
    """id -> the text of the heading it belongs to ("" when it belongs to none) in one page."""
    from lxml import html as lhtml

    root = lhtml.parse(str(path)).getroot()
    heads = ("h1", "h2", "h3", "h4", "h5", "h6")

    def heading_text(h) -> str:
        return "".join(t for t in h.itertext()).replace("¶", "")

    out: dict[str, str] = {}
    for el in root.iter():
        ident = el.get("id") or (el.get("name") if el.tag == "a" else None)
        if not ident or not isinstance(el.tag, str):
            continue
        text = ""
        if el.tag in heads:
            text = heading_text(el)
        elif el.tag in ("section", "div", "article"):
            first = next(el.iter(*heads), None)
            text = heading_text(first) if first is not None else ""
        else:
            owner = next(el.iterancestors(*heads), None)
            text = heading_text(owner) if owner is not None else ""
        out.setdefault(ident, text)
    return out


def pdf_pages(path: Path) -> list[str]:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(path))
    try:
        return [words(pdf[i].get_textpage().get_text_range()).replace(" ", "") for i in range(len(pdf))]
    finally:
        pdf.close()


MARKER = re.compile(r"^--- page \d+(?: \(cont\.\))? ---\s*", re.M)


def judge(hit, cache: dict) -> str:
    """'ok', 'no heading' (the hit has none: document link), or what is wrong."""
    path_part, _, anchor = hit.link.partition("#")
    source = CORPUS / hit.doc_id
    if hit.format == "pdf":
        pages = cache[hit.doc_id] if hit.doc_id in cache else cache.setdefault(hit.doc_id, pdf_pages(source))
        m = re.fullmatch(r"page=(\d+)", anchor)
        if not m or not 1 <= int(m.group(1)) <= len(pages):
            return f"bad page {anchor!r} ({len(pages)} pages)"
        start = words(MARKER.sub("", hit.text)).replace(" ", "")[:40]
        return "ok" if start and start in pages[int(m.group(1)) - 1] else "page lacks the passage's first words"
    own = hit.heading_path[-1] if hit.heading_path else ""
    if not anchor:
        return "no heading" if not own or hit.format == "markdown" and not own else "heading without anchor"
    if hit.doc_id not in cache:
        cache[hit.doc_id] = (html_targets(source) if hit.format == "html" else
                             markdown_anchors(source.read_text(encoding="utf-8", errors="replace")))
    targets = cache[hit.doc_id]
    if anchor not in targets:
        return "anchor not in the target"
    return "ok" if words(targets[anchor]) == words(own) else f"anchor of another heading ({targets[anchor]!r} != {own!r})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=100, help="queries per format")
    ap.add_argument("--out", default=str(BENCH / "out" / "links"), help="the pipeline's output folder")
    args = ap.parse_args()
    gather()
    out = Path(args.out)
    t0 = time.perf_counter()
    run_pipeline(out)
    print(f"pipeline over {CORPUS}: {time.perf_counter() - t0:.0f} s", flush=True)

    import pyarrow.parquet as pq
    import pipekit

    chunks = pq.read_table(out / "03_chunks.parquet", columns=["format", "text"]).to_pylist()
    searcher = pipekit.Searcher(out)
    rng = random.Random(36)
    cache: dict = {}
    glob = {"html": "html/library/**", "markdown": "markdown/**", "pdf": "pdf/R-*.pdf"}
    timings = {"none": [], "--format": [], "--in": []}
    print(f"{'format':<9} {'hits':>5} {'ok':>6} {'share':>7}  {'no heading':>10}  problems")
    for fmt in ("html", "markdown", "pdf"):
        pool = [c["text"] for c in chunks if c["format"] == fmt and len(c["text"].split()) >= 20]
        verdicts: dict[str, int] = {}
        examples: list[str] = []
        for text in rng.sample(pool, min(args.queries, len(pool))):
            ws = [w for w in MARKER.sub("", text).split() if w.isalpha()]
            start = rng.randrange(max(len(ws) - 8, 1))
            query = " ".join(ws[start:start + 8])
            t = time.perf_counter()
            searcher.search(query, k=10)
            timings["none"].append(time.perf_counter() - t)
            t = time.perf_counter()
            hits = searcher.search(query, k=10, formats=[fmt])
            timings["--format"].append(time.perf_counter() - t)
            t = time.perf_counter()
            searcher.search(query, k=10, paths=[glob[fmt]])
            timings["--in"].append(time.perf_counter() - t)
            for h in hits:
                v = judge(h, cache)
                key = v if v in ("ok", "no heading") else v.split(" (")[0]
                verdicts[key] = verdicts.get(key, 0) + 1
                if key not in ("ok", "no heading") and len(examples) < 3:
                    examples.append(f"{h.link}: {v}")
        judged = sum(n for k, n in verdicts.items() if k != "no heading")
        ok = verdicts.get("ok", 0)
        problems = ", ".join(f"{k} {n}" for k, n in verdicts.items() if k not in ("ok", "no heading")) or "-"
        print(f"{fmt:<9} {judged:>5} {ok:>6} {ok / max(judged, 1):>7.1%}  {verdicts.get('no heading', 0):>10}  {problems}",
              flush=True)
        for e in examples:
            print(f"          e.g. {e}")
    n_chunks = len(chunks)
    print(f"\nsearch latency over {n_chunks:,} chunks, k=10, {len(timings['none'])} queries "
          f"(index loaded in {searcher.index.load_seconds:.2f} s):")
    for name, ts in timings.items():
        ms = sorted(1000 * t for t in ts)
        print(f"  {('filter ' + name) if name != 'none' else 'no filter':<16} median {statistics.median(ms):6.2f} ms,"
              f" 90th percentile {ms[int(0.9 * (len(ms) - 1))]:6.2f} ms")


if __name__ == "__main__":
    main()
