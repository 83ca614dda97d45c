"""Does real documents' structure reach the chunks?  SPEC rule 9 measured on documentation
installed on this machine, through stages 01 -> 02 -> 03 as the pipeline runs them.

    python bench/structure.py                       # this checkout
    python bench/structure.py --repo /work/main     # another checkout, for before/after
    python bench/structure.py --only html           # one format (pdf, html, markdown)

Inputs (Debian documentation packages; `apt-get install -y python3-doc git-doc camlidl-doc
docbook-xsl-doc-pdf shared-mime-info libtasn1-doc`): every PDF (also `.pdf.gz`) under
/usr/share/doc, and every HTML page under /usr/share/doc and /usr/share/gtk-doc (the Python
and Git manuals, Node.js's API docs, Valgrind's and libxslt's table-layout pages ...).

Figures:
  PDF   outline entries (with a page) whose title reaches some chunk's heading_path;
        furniture lines stage 02 removed; `#` lines of PDF text taken for headings.
  HTML  h1-h3 outside navigation (the elements pipekit/read/html_markdown.py treats as
        navigation) whose text is in some chunk's heading_path, and chunks whose text
        holds a fence that is never closed (markdown-it reads the rest as code); stage 01's
        read_html speed (MB of HTML per CPU second); chunks still holding link markup a
        reader never sees (a `¶` permalink, a `](#...)` link to the same page, a link
        title) and chunks with a heading path.
  Markdown  documents of bench/corpora/markdown (see bench/chunking.py --build) with YAML
        front matter, and the front-matter characters no chunk covers.
"""
from __future__ import annotations

import argparse
import gzip
import importlib.util
import inspect
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
HTML_ROOTS = ["/usr/share/doc", "/usr/share/gtk-doc"]
PDF_ROOT = Path("/usr/share/doc")
VERBOSE = "-v" in sys.argv


def load(repo: Path):
    """The repo's stage 01 readers, stage 02 cleaning and stage 03 chunker."""
    sys.path.insert(0, str(repo))
    sys.path.insert(0, str(repo / "tests"))
    for name in list(sys.modules):
        if name == "pipekit" or name.startswith(("pipekit.", "stage_")):
            del sys.modules[name]
    from types import SimpleNamespace

    try:  # pipekit regrouped by stage (issue 33): one module per format
        from pipekit.read.html import read_html
        from pipekit.read.pdf import read_pdf
        from pipekit.run.stages import load_stage
    except ImportError:  # an older checkout: every reader in pipekit/readers.py
        from pipekit.readers import read_html, read_pdf
        from pipekit.stages import load_stage
    readers = SimpleNamespace(read_html=read_html, read_pdf=read_pdf)
    return readers, load_stage(2), load_stage(3)


def mine(name: str):
    """A module of this checkout's pipekit, whatever checkout is measured: the outline, the
    navigation rules and the front-matter reader define what is counted, before and after."""
    # pipekit's modules live in rooms (pipekit/read/, pipekit/chunk/ ...) since the split
    [path] = (HERE / "pipekit").rglob(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def norm(s: str) -> str:
    """Heading text compared without spacing (HTML puts spaces around inline code: `a , b`)."""
    return "".join(s.replace("¶", "").split()).casefold()


def chunk(st2, st3, text: str, fmt: str, outline=None) -> tuple[str, list[dict], int]:
    clean = getattr(st2, "clean_document", None)
    text, furniture = clean(text) if clean else (st2.clean_text(text), 0)
    kw = {"outline": outline} if "outline" in inspect.signature(st3.chunk_document).parameters else {}
    return text, st3.chunk_document(text, fmt=fmt, settings=st3.Settings(), **kw), furniture


def pdfs():
    seen = set()
    for p in sorted(PDF_ROOT.rglob("*.pdf")) + sorted(PDF_ROOT.rglob("*.pdf.gz")):
        data = p.read_bytes()
        data = gzip.decompress(data) if p.suffix == ".gz" else data
        if data not in seen:  # the same manual installed by several packages counts once
            seen.add(data)
            yield p, data


def bench_pdf(readers, st2, st3) -> None:
    print("PDF (outline titles reaching heading_path; furniture removed in stage 02)")
    print(f"  {'file':44s} {'pages':>5s} {'outline':>7s} {'reached':>7s} {'furniture':>9s} {'# heads':>7s}")
    tot = [0, 0, 0]
    for path, data in pdfs():
        row = readers.read_pdf(data)
        outline = row.get("outline") or []
        if not outline:  # the old reader kept none: read it here, to count what it lost
            import pypdfium2 as pdfium

            doc = pdfium.PdfDocument(data)
            try:
                outline = mine("pages").read_outline(doc) or []
            finally:
                doc.close()
        text, chunks, furniture = chunk(st2, st3, row["text"], "pdf", row.get("outline"))
        in_paths = {norm(h) for c in chunks for h in c["heading_path"]}
        reached = sum(norm(e["title"]) in in_paths for e in outline)
        hash_heads = sum(1 for c in chunks for h in c["heading_path"]
                         if any(ln.lstrip().startswith("#") and norm(ln.lstrip("# ")) == norm(h)
                                for ln in text.split("\n")))
        pages = row["note"].split(" ")[0]
        print(f"  {str(path.relative_to(PDF_ROOT)):44.44s} {pages:>5s} {len(outline):7d} {reached:7d} "
              f"{furniture:9d} {hash_heads:7d}")
        tot[0] += len(outline)
        tot[1] += reached
        tot[2] += furniture
    share = 100 * tot[1] / tot[0] if tot[0] else 0
    print(f"  {'all':44s} {'':5s} {tot[0]:7d} {tot[1]:7d} {tot[2]:9d}   ({share:.1f} % of outline titles reached)")


def heading_texts(html: str) -> list[str]:
    """h1-h3 of the page outside navigation, as a reader sees their text (parsed with lxml,
    navigation as this checkout's pipekit/read/html_markdown.py defines it)."""
    import copy

    from lxml import etree

    nav = mine("html_markdown")
    root = nav.parse_html(html)
    if root is None:
        return []
    skipped = set(nav.navigation(root)) | set(root.iter(*nav._DROP_TAGS))
    out = []
    for h in root.iter("h1", "h2", "h3"):
        if any(p in skipped for p in h.iterancestors()):
            continue
        h = copy.deepcopy(h)
        h.tail = None
        for a in h.iter("a"):  # a permalink (`#`, `¶`) is decoration, not the heading
            if nav._PERMALINK.fullmatch("".join(a.itertext())):
                a.tag = "bench-drop"
        etree.strip_elements(h, "bench-drop", with_tail=False)
        text = norm(" ".join(h.itertext()))
        if text:
            out.append(text)
    return out


def html_pages(limit: int) -> list[Path]:
    files, seen = [], set()
    for root in HTML_ROOTS:
        for p in sorted(Path(root).rglob("*.html")):
            real = p.resolve()
            if real not in seen and p.is_file():  # python3.11-doc links to python3.11's pages
                seen.add(real)
                files.append(p)
    return files[:limit]


_SAME_PAGE_LINK = re.compile(r"\]\(#")
_LINK_TITLE = re.compile(r"\]\([^()\s]*\s+\"[^\"\n]*\"\)")


def bench_html(readers, st2, st3, limit: int) -> None:
    sys.path.insert(0, str(HERE / "tests"))
    from test_03_oracle import fence_left_open

    files = html_pages(limit)
    if not files:
        print("HTML: no pages found (apt-get install -y python3-doc git-doc)")
        return
    heads = reached = chunks_n = open_fences = pages_hit = 0
    pilcrows = anchors = titled = headed = 0
    n_bytes = convert_s = 0.0
    t0 = time.perf_counter()
    for p in files:
        data = p.read_bytes()
        c0 = time.process_time()
        row = readers.read_html(data)
        convert_s += time.process_time() - c0
        n_bytes += len(data)
        _, chunks, _ = chunk(st2, st3, row["text"], "html")
        in_paths = {norm(h) for c in chunks for h in c["heading_path"]}
        want = heading_texts(data.decode("utf-8", "replace"))
        got = sum(norm(w) in in_paths for w in want)
        if VERBOSE and got < len(want):
            print(f"  missing in {p}: {[w for w in want if norm(w) not in in_paths][:5]}")
        heads += len(want)
        reached += got
        pages_hit += got < len(want)
        chunks_n += len(chunks)
        open_fences += sum(fence_left_open(c["text"]) for c in chunks)
        pilcrows += sum("¶" in c["text"] for c in chunks)
        anchors += sum(_SAME_PAGE_LINK.search(c["text"]) is not None for c in chunks)
        titled += sum(_LINK_TITLE.search(c["text"]) is not None for c in chunks)
        headed += sum(bool(c["heading_path"]) for c in chunks)
    el = time.perf_counter() - t0
    print(f"\nHTML ({len(files)} pages of {', '.join(HTML_ROOTS)}; {el:.0f} s)")
    print(f"  stage 01 read_html: {n_bytes / 1e6:.1f} MB in {convert_s:.1f} s CPU "
          f"({n_bytes / 1e6 / max(convert_s, 1e-9):.1f} MB/s)")
    print(f"  h1-h3 outside navigation: {heads:,}; in a heading_path: {reached:,} "
          f"({100 * reached / max(1, heads):.1f} %); pages missing one or more: {pages_hit}")
    print(f"  chunks: {chunks_n:,}; with an unbalanced fence: {open_fences}")
    print(f"  chunks holding a ¶: {pilcrows}; a same-page link `](#`: {anchors}; a link title: {titled}; "
          f"with a heading_path: {headed:,} ({100 * headed / max(1, chunks_n):.1f} %)")


def bench_front_matter(st3) -> None:
    front_matter_end = mine("markdown_blocks").front_matter_end

    corpus = HERE / "bench" / "corpora" / "markdown"
    files = sorted(corpus.glob("*.md"))
    if not files:
        print("\nMarkdown: no corpus (python bench/chunking.py --build)")
        return
    docs = lost_docs = lost_chars = 0
    for p in files:
        text = p.read_text(encoding="utf-8")
        lines = text.split("\n")
        end = front_matter_end(lines)
        if not end:
            continue
        docs += 1
        fm_end = sum(len(ln) + 1 for ln in lines[:end])
        chunks = st3.chunk_document(text, settings=st3.Settings())
        covered = [0] * fm_end
        for c in chunks:
            for k in range(c["start_char"], min(c["end_char"], fm_end)):
                covered[k] = 1
        lost = sum(1 for k in range(fm_end) if not covered[k] and not text[k].isspace())
        lost_docs += lost > 0
        lost_chars += lost
    print(f"\nMarkdown ({len(files)} documents of {corpus.relative_to(HERE)})")
    print(f"  with front matter: {docs}; front matter not covered by any chunk: {lost_docs} documents, "
          f"{lost_chars:,} characters")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", type=Path, default=HERE, help="checkout whose stages to measure")
    ap.add_argument("--html-limit", type=int, default=10_000)
    ap.add_argument("--only", choices=("pdf", "html", "markdown"), help="measure one format")
    ap.add_argument("-v", action="store_true", help="name the headings that did not arrive")
    args = ap.parse_args()
    readers, st2, st3 = load(args.repo.resolve())
    print(f"stages of {args.repo.resolve()}\n")
    if args.only in (None, "pdf"):
        bench_pdf(readers, st2, st3)
    if args.only in (None, "html"):
        bench_html(readers, st2, st3, args.html_limit)
    if args.only in (None, "markdown"):
        bench_front_matter(st3)


if __name__ == "__main__":
    main()
