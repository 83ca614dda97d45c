"""Word (.docx) and EPUB through stages 01 -> 03: is the structure kept, is anything lost,
does container markup leak, how fast is it; and the Word converter candidates compared.

    python bench/formats_office.py SOURCE_DIR... [--real DIR]... [--keep DIR]
    python bench/formats_office.py --memory BIG.docx

SOURCE_DIR: folders of reStructuredText or Markdown documents (e.g. a project's docs/
from its sdist: `pip download --no-binary :all: --no-deps flask==3.0.3 -d /tmp/sdists`).
Each document is rendered by pandoc into a .docx and an .epub; the oracle is pandoc's own
reading of the SOURCE (`pandoc -t json`): its headers (and the title it promotes), table
cells, list items and words.  --real DIR: Word files made by Word (python-docx's sdist
holds some under tests/test_files); their oracle is lxml on word/document.xml (paragraphs
whose style is a heading or Title, and every w:t run's words), independent of mammoth.

Printed, per format: files read ok / files; source headings found in some chunk's
heading_path (target >= 95 %); distinct source words found in the document's chunks
(>= 95 %); chunks holding container markup (`<w:`, `<?xml`, `xmlns`, `<!DOCTYPE`: 0);
stage 01's reader speed (MB of .docx/.epub per CPU second, in this process).  Then the
Word candidates on the same .docx files: lxml -> our HTML path (what stage 01 runs,
pipekit/read/wordml.py), mammoth -> our HTML path (what it ran before), python-docx and
docx2python, each with the smallest structure-keeping adapter (headings by style, list
paragraphs by numbering, table cells), scored against the same oracle; the two that write
Markdown also on list items at their depth and kind, link addresses, footnotes and words.

Needs pandoc on PATH and requirements-bench.txt (mammoth, python-docx, docx2python).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

WORD = re.compile(r"[^\W_]+")
MARKUP = re.compile(r"<w:|<\?xml|xmlns|<!DOCTYPE|<html|<body", re.I)
LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")


def norm(text: str) -> str:
    """Text compared as its words: markup, escapes and punctuation do not count."""
    return " ".join(w.lower() for w in WORD.findall(text))


# --------------------------------------------------------------------------- the oracle


def stringify(node) -> str:
    """Pandoc JSON inlines (or blocks) as plain text."""
    if isinstance(node, list):  # spaces between pieces: extra ones never change a word
        return " ".join(stringify(n) for n in node)
    if not isinstance(node, dict):
        return ""
    t, c = node.get("t"), node.get("c")
    if t == "Str":
        return c
    if t in ("Space", "SoftBreak", "LineBreak"):
        return " "
    if t in ("Code", "CodeBlock", "Math"):
        return " " + c[-1] + " "
    if t in ("RawInline", "RawBlock", "Note"):
        return ""
    if t == "Link" or t == "Image":
        return stringify(c[1])
    if t in ("Quoted", "Cite"):
        return stringify(c[1])
    if t in ("Span", "Div"):
        return stringify(c[1])
    return stringify(c) if isinstance(c, list) else ""


def walk(node, found: dict, depth: int = 0) -> None:
    if isinstance(node, list):
        for n in node:
            walk(n, found, depth)
        return
    if not isinstance(node, dict):
        return
    t, c = node.get("t"), node.get("c")
    if t == "Header":
        found["headings"].append(stringify(c[2]))
    elif t in ("BulletList", "OrderedList"):
        for item in (c if t == "BulletList" else c[1]):
            if item:
                found["items"].append(stringify(item[0]))
                # The item with its nesting depth and kind: "fruit" at 0, "apple" at 1, numbered.
                found["nested"].append((stringify(item[0]), depth, t == "OrderedList"))
        walk(c, found, depth + 1)
        return
    elif t == "Table":
        cells = []
        _cells(c, cells)
        found["cells"] += cells
    elif t == "Link" and re.match(r"(?i)https?:|mailto:", c[2][0]):
        found["links"].append(c[2][0])  # an address in the document, not a place on its page
    elif t == "Note":
        found["notes"].append(stringify(c))
    if isinstance(c, (list, dict)):
        walk(c, found, depth)


def _cells(node, out: list) -> None:
    """Every cell's text in a pandoc Table node (any pandoc 2.10+ table layout)."""
    if isinstance(node, list):
        # A Cell is [attr, alignment, rowspan, colspan, blocks].
        if len(node) == 5 and isinstance(node[1], dict) and node[1].get("t", "").startswith("Align") \
                and isinstance(node[4], list):
            out.append(stringify(node[4]))
            return
        for n in node:
            _cells(n, out)
    elif isinstance(node, dict) and isinstance(node.get("c"), list):
        _cells(node["c"], out)


def oracle_from_source(src: Path) -> dict:
    fmt = "rst" if src.suffix == ".rst" else "markdown"
    ast = json.loads(subprocess.run(["pandoc", "-f", fmt, "-t", "json", str(src)], capture_output=True,
                                    text=True, check=True, timeout=120).stdout)
    found = {"headings": [], "items": [], "cells": [], "nested": [], "links": [], "notes": [], "words": set()}
    title = ast.get("meta", {}).get("title")
    if title:
        found["headings"].append(stringify(title.get("c")))
    walk(ast["blocks"], found)
    found["words"] = set(norm(stringify(ast["blocks"]) + " " + " ".join(found["headings"])).split())
    found["raw"] = src.read_text(encoding="utf-8", errors="replace")
    return found


def oracle_from_docx(path: Path) -> dict:
    """Headings by style (styles.xml names) and words of every w:t, read with lxml."""
    from lxml import etree

    w = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
    safe = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)
    with zipfile.ZipFile(path) as z:
        body = etree.fromstring(z.read("word/document.xml"), safe)
        names = {}
        if "word/styles.xml" in z.namelist():
            for s in etree.fromstring(z.read("word/styles.xml"), safe).iter(f"{w}style"):
                name = s.find(f"{w}name")
                names[s.get(f"{w}styleId")] = (name.get(f"{w}val") if name is not None else "")
    found = {"headings": [], "items": [], "cells": [], "words": set()}
    for p in body.iter(f"{w}p"):
        style = p.find(f"{w}pPr/{w}pStyle")
        name = names.get(style.get(f"{w}val"), "") if style is not None else ""
        text = "".join(t.text or "" for t in p.iter(f"{w}t"))
        if re.fullmatch(r"(?i)heading [1-9]|title", name) and text.strip():
            found["headings"].append(text)
    # A paragraph's runs joined as they are ("P" + "3" is the word P3), paragraphs apart.
    paragraphs = ("".join(t.text or "" for t in p.iter(f"{w}t")) for p in body.iter(f"{w}p"))
    found["words"] = set(norm(" ".join(paragraphs)).split())
    return found


# --------------------------------------------------------------------------- the pipeline


def run_stages(folder: Path, out: Path) -> None:
    for script in ("01_documents.py", "02_preprocessing.py", "03_chunking.py"):
        subprocess.run([sys.executable, script, "--set", f"documents.input={folder}",
                        "--set", f"paths.output={out}"], cwd=HERE, check=True, capture_output=True,
                       timeout=3600)


def reader_speed(folder: Path) -> tuple[float, int]:
    """MB per CPU second of stage 01's reader over the folder's files, and the bytes read."""
    from pipekit.read.documents import read_document
    from pipekit.read.walk import list_inputs

    entries = [e for e in list_inputs(folder, max_bytes=512 * 10**6) if e.skip is None]
    start = time.process_time()
    for e in entries:
        read_document(e)
    seconds = time.process_time() - start
    size = sum(e.n_bytes for e in entries)
    return size / 1e6 / max(seconds, 1e-9), size


def score(folder: Path, out: Path, oracles: dict[str, dict]) -> dict:
    import pandas as pd

    docs = pd.read_parquet(out / "01_documents.parquet")
    chunks = pd.read_parquet(out / "03_chunks.parquet")
    heads = found_h = words = found_w = markup = 0
    for doc_id, oracle in oracles.items():
        mine = chunks[chunks.doc_id == doc_id]
        paths = {norm(h) for p in mine.heading_path for h in p}
        tokens = set(norm(" ".join(mine.text) + " " + " ".join(mine.heading)).split())
        want = [norm(h) for h in oracle["headings"] if norm(h)]
        heads += len(want)
        found_h += sum(h in paths for h in want)
        if "-v" in sys.argv:
            for h in want:
                if h not in paths:
                    print(f"    heading missing: {doc_id}: {h!r}")
        words += len(oracle["words"])
        found_w += len(oracle["words"] & tokens)
        # Markup the source document itself holds (an HTML template's <!doctype html> in
        # a tutorial) is content; only markup the source never wrote is container markup.
        markup += sum(any(m.group() not in oracle.get("raw", "") for m in MARKUP.finditer(t)) for t in mine.text)
    return {"files": len(docs), "ok": int((docs.status == "ok").sum()), "heads": heads, "found_h": found_h,
            "words": words, "found_w": found_w,
            "markup": markup, "chunks": len(chunks)}


def report(label: str, s: dict, mbps: float, size: int) -> None:
    pct = lambda a, b: f"{100 * a / b:5.1f} %" if b else "  n/a"  # noqa: E731
    print(f"{label:<14} files {s['ok']}/{s['files']} read ok, {size / 1e6:.1f} MB; "
          f"headings in heading_path {pct(s['found_h'], s['heads'])} ({s['found_h']}/{s['heads']}); "
          f"source words in chunks {pct(s['found_w'], s['words'])} ({s['found_w']:,}/{s['words']:,}); "
          f"chunks with container markup {s['markup']}/{s['chunks']}; reader {mbps:.2f} MB/s")


# --------------------------------------------------------------------------- Word candidates


ITEM = re.compile(r"( *)([-*+]|\d+[.)]) (.*)")
HREF = re.compile(r"\]\((\S+?)\)")
AUTOLINK = re.compile(r"<((?:https?|ftp|mailto):[^>\s]+)>")
AUTOMAIL = re.compile(r"<([^>\s:@]+@[^>\s]+)>")

# The style map stage 01 gave mammoth before pipekit/read/wordml.py replaced it: Title as
# h1, Heading 7-9 as h6, code paragraphs as one <pre>, code runs as <code>.
MAMMOTH_STYLE_MAP = "\n".join(
    [f"p[style-name='{t}'] => h1:fresh" for t in ("Title", "title")]
    + [f"p[style-name='{h} {n}'] => h6:fresh" for h in ("Heading", "heading") for n in (7, 8, 9)]
    + [f"p[style-name='{s}'] => pre:separator('\\n')"
       for s in ("Source Code", "HTML Preformatted", "Plain Text", "Macro Text", "Code")]
    + [f"r[style-name='{s}'] => code" for s in ("Verbatim Char", "HTML Code")]
)


def from_markdown(md: str) -> dict:
    """What a Markdown candidate kept: headings, list items (with depth and kind, from the
    indentation of their markers), table cells, link addresses and the words."""
    # A link whose text is its address is written as an autolink, <https://...> or <me@host>.
    links = HREF.findall(md) + AUTOLINK.findall(md) + ["mailto:" + m for m in AUTOMAIL.findall(md)]
    plain = LINK.sub(r"\1", md)  # a link as its text, as the others give it
    lines = plain.splitlines()
    items, nested, indents = [], [], []
    for line in lines:
        m = ITEM.match(line)
        if not m:
            continue
        indent = len(m.group(1))
        while indents and indents[-1] >= indent and indents[-1] != indent:
            indents.pop()
        if not indents or indents[-1] < indent:
            indents.append(indent)
        items.append(m.group(3))
        nested.append((m.group(3), len(indents) - 1, m.group(2)[0].isdigit()))
    return {"headings": [m.group(1) for m in map(re.compile(r"#{1,6} (.*)").match, lines) if m],
            "items": items, "nested": nested, "links": links, "text": plain, "markdown": md,
            "cells": [c for line in lines if line.startswith("|") for c in line.strip("|").split("|")]}


def candidate_lxml(path: Path) -> dict:
    from pipekit.read.docx import read_docx

    return from_markdown(read_docx(path.read_bytes())["text"])


def candidate_mammoth(path: Path) -> dict:
    """mammoth (docx -> HTML) into the same HTML path: what stage 01 ran before."""
    import mammoth

    from pipekit.read.html_markdown import html_to_markdown

    with path.open("rb") as f:
        html = mammoth.convert_to_html(f, style_map=MAMMOTH_STYLE_MAP, include_embedded_style_map=False,
                                       external_file_access=False,
                                       convert_image=mammoth.images.img_element(lambda image: {})).value
    return from_markdown(html_to_markdown(f"<html><body>{html}</body></html>")[0])


def candidate_python_docx(path: Path) -> dict:
    import docx
    from docx.table import Table

    out = {"headings": [], "items": [], "cells": []}
    for block in docx.Document(str(path)).iter_inner_content():
        if isinstance(block, Table):
            for row in block.rows:
                out["cells"] += [cell.text for cell in row.cells]
            continue
        name = block.style.name if block.style is not None else ""
        if re.fullmatch(r"(?i)heading [1-9]|title", name):
            out["headings"].append(block.text)
        elif block._p.pPr is not None and block._p.pPr.numPr is not None or name.startswith("List"):
            out["items"].append(block.text)
    return out


def candidate_docx2python(path: Path) -> dict:
    from docx2python import docx2python

    with docx2python(str(path), html=True) as result:
        body = result.body
    out = {"headings": [], "items": [], "cells": []}
    for table in body:
        cells = [cell for row in table for cell in row]
        for cell in cells:
            for para in cell:
                m = re.fullmatch(r"<h\d>(.*)</h\d>", para, re.S)
                if m:
                    out["headings"].append(m.group(1))
                m = re.match(r"\s*(?:--|\d+\)|[a-z]+\)|[ivx]+\))\t(.*)", para, re.S)
                if m:
                    out["items"].append(m.group(1))
            if len(cells) > 1:
                out["cells"].append(" ".join(cell))
    return out


CANDIDATES = {"lxml -> HTML path (stage 01)": candidate_lxml, "mammoth -> HTML path": candidate_mammoth,
              "python-docx": candidate_python_docx, "docx2python": candidate_docx2python}
KEYS = ("headings", "items", "cells", "nested", "links", "notes", "words")


def compare_word(files: list[tuple[Path, dict]]) -> None:
    """Each candidate's share of the oracle's headings, list items, table cells, list items at
    their depth and kind (nested), link addresses, footnote texts and words; n/a where the
    adapter cannot say (python-docx and docx2python hand over no nesting, links or notes
    without a converter of our own around them)."""
    print("\nWord candidates on the same .docx files (oracle: pandoc's reading of the source):")
    size = sum(p.stat().st_size for p, _ in files)
    markdowns = {}
    for name, fn in CANDIDATES.items():
        tally = {k: [0, 0] for k in KEYS}
        start = time.process_time()
        outputs = [(fn(p), o) for p, o in files]
        seconds = time.process_time() - start
        markdowns[name] = [got.get("markdown") for got, _ in outputs]
        for got, oracle in outputs:
            for key in ("headings", "items", "cells"):
                have = {norm(x) for x in got[key]}
                prefixes = {" ".join(h.split()[:8]) for h in have}
                for want in (norm(x) for x in oracle[key]):
                    if not want:
                        continue
                    tally[key][1] += 1
                    tally[key][0] += want in have or " ".join(want.split()[:8]) in prefixes
            if "nested" in got:
                have = {(" ".join(norm(t).split()[:8]), d, o) for t, d, o in got["nested"]}
                for t, d, o in oracle["nested"]:
                    if norm(t):
                        tally["nested"][1] += 1
                        tally["nested"][0] += (" ".join(norm(t).split()[:8]), d, o) in have
            if "links" in got:
                have = set(got["links"])
                tally["links"][1] += len(oracle["links"])
                tally["links"][0] += sum(u in have for u in oracle["links"])
            if "text" in got:
                text = norm(got["text"])
                for note in oracle["notes"]:
                    tally["notes"][1] += 1
                    tally["notes"][0] += " ".join(norm(note).split()[:8]) in text
                words = set(text.split())
                tally["words"][1] += len(oracle["words"])
                tally["words"][0] += len(oracle["words"] & words)
        cols = "; ".join(f"{k} {100 * a / b:5.1f} % ({a}/{b})" if b else f"{k} n/a" for k, (a, b) in tally.items())
        print(f"  {name:<28} {cols}; {size / 1e6 / max(seconds, 1e-9):.2f} MB/s")
    ours, before = markdowns["lxml -> HTML path (stage 01)"], markdowns["mammoth -> HTML path"]
    same = sum(a == b for a, b in zip(ours, before))
    print(f"  lxml and mammoth write the same Markdown on {same} of {len(files)} files")


MEMORY_PROBE = """
import resource, sys, time
sys.path.insert(0, sys.argv[1])
import formats_office as bench
from pipekit.read.docx import read_docx
import mammoth
from pathlib import Path
from pipekit.read.html_markdown import html_to_markdown
html_to_markdown("<html><body><p>warm</p></body></html>")  # the converter's own start-up is not the reader's
path = Path(sys.argv[3])
reader = {"lxml": lambda p: read_docx(p.read_bytes()), "mammoth": bench.candidate_mammoth}[sys.argv[2]]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.process_time()
reader(path)
seconds = time.process_time() - start
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024, seconds)
"""


def memory(path: Path) -> None:
    """Peak RSS each Word reader adds on one (large) .docx, each in a fresh process (imports done first)."""
    xml = sum(i.file_size for i in zipfile.ZipFile(path).infolist() if i.filename.endswith((".xml", ".rels")))
    print(f"\n{path.name}: {path.stat().st_size / 1e6:.2f} MB, {xml / 1e6:.2f} MB of XML parts")
    for name in ("lxml", "mammoth"):
        out = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(Path(__file__).parent), name, str(path)],
                             capture_output=True, text=True, check=True, cwd=HERE, timeout=600).stdout.split()
        print(f"  {name:<8} +{float(out[0]):.0f} MB peak RSS, {path.stat().st_size / 1e6 / float(out[1]):.2f} MB/s")


# --------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sources", nargs="*", type=Path)
    ap.add_argument("--real", action="append", type=Path, default=[], help="a folder of real .docx files")
    ap.add_argument("--keep", type=Path, help="render into this folder (kept) instead of a temporary one")
    ap.add_argument("-v", action="store_true", help="name every heading not found")
    ap.add_argument("--memory", type=Path, help="a large .docx: peak memory of each Word reader on it, then stop")
    args = ap.parse_args()
    if args.memory:
        memory(args.memory)
        return
    work = args.keep or Path(tempfile.mkdtemp(prefix="formats_office-"))
    sources = sorted(p for root in args.sources for p in root.rglob("*")
                     if p.suffix in (".rst", ".md") and "_build" not in p.parts)
    oracles: dict[str, dict] = {}
    for fmt in ("docx", "epub"):
        (work / fmt).mkdir(parents=True, exist_ok=True)
    failed = 0
    for src in sources:
        root = next(r for r in args.sources if src.is_relative_to(r))
        # The sdist's folder too: two projects' docs/index.rst must not share a name.
        stem = "__".join(src.relative_to(root.parent.parent).with_suffix("").parts)
        try:
            oracle = oracle_from_source(src)
            for fmt in ("docx", "epub"):
                target = work / fmt / f"{stem}.{fmt}"
                if not target.exists():
                    subprocess.run(["pandoc", "-f", "rst" if src.suffix == ".rst" else "markdown", str(src),
                                    "-o", str(target)], check=True, capture_output=True, timeout=120)
        except (subprocess.SubprocessError, json.JSONDecodeError):
            failed += 1
            continue
        oracles[stem] = oracle
    print(f"{len(sources)} source documents, {len(oracles)} rendered by pandoc ({failed} pandoc could not)")
    for fmt in ("docx", "epub"):
        out = work / f"out-{fmt}"
        run_stages(work / fmt, out)
        mbps, size = reader_speed(work / fmt)
        report(fmt, score(work / fmt, out, {f"{k}.{fmt}": v for k, v in oracles.items()}), mbps, size)
    for real in args.real:
        files = sorted(real.rglob("*.docx"))
        if not files:
            continue
        out = work / f"out-real-{real.name}"
        folder = work / f"real-{real.name}"
        folder.mkdir(exist_ok=True)
        for f in files:
            (folder / f.name).write_bytes(f.read_bytes())
        run_stages(folder, out)
        mbps, size = reader_speed(folder)
        report(f"docx (Word)", score(folder, out, {f.name: oracle_from_docx(f) for f in files}), mbps, size)
    compare_word([(work / "docx" / f"{k}.docx", v) for k, v in oracles.items()])
    print(f"\nrendered files in {work}")


if __name__ == "__main__":
    main()
