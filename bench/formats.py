"""Do the formats stage 01 writes as Markdown keep their structure and their words?  Measured
on real files through stages 01 -> 02 -> 03 as the pipeline runs them, one format at a time.

    python bench/formats.py --build /tmp/formats_corpus   # sdists from PyPI, unpacked
    python bench/formats.py /tmp/formats_corpus [--out /tmp/formats_out] [--only notebook] [--outputs]

`--build` downloads the source distributions in SDISTS (`pip download --no-binary :all:
--no-deps`) and unpacks each into FOLDER/<sdist>/: nbsphinx's documentation is 29 real
notebooks (Markdown, code and raw cells of many kinds), nbconvert's tests and docs 23
more (outputs of every kind: images, HTML, errors with ANSI colours, widgets,
attachments); all six are Python projects.
The measurement runs run_pipeline.py --to 3 on FOLDER (only the files of the formats
measured: documents.include) and prints, per format:

  files     read ok / files of the format (the rest: error rows, with their reasons);
  headings  headings an oracle independent of our reader finds in the source, found in
            the heading_path of some chunk of the same document (target >= 95 %);
  extra     heading_path entries no oracle heading has (a bogus heading made from a
            docstring's underline or a notebook's JSON would show here);
  words     the source's words (each counted as often as it occurs) found as often in
            the document's chunks (target >= 95 %);
  markup    chunks holding the container's markup (notebook JSON keys or a base64 run:
            target 0; `--outputs` keeps text outputs, to check no image comes with them);
            for Python, distinctive lines of function bodies (code is not indexed: 0);
  MB/s      the format's reader (pipekit.read.documents.read_document) on all its files,
            in this process, MB of source per CPU second.

The oracles:
  notebook  nbformat reads the file; markdown-it-py (CommonMark) parses each Markdown cell
            alone, as Jupyter renders it; its headings' inline text are the headings, the
            text, code and fence contents of its tokens are the words.
  python    `ast` on the file; the qualified names of classes and functions that have a
            docstring and are not inside a function body, under the module's dotted name
            (compared dot-joined with the chunk's heading_path); the words of those
            docstrings and the module's.

Each format is one function `measure_<format>(docs, chunks, files) -> dict` registered in
MEASURES: a new format (docx, epub, ...) adds its oracle there and prints in the same table.
"""
from __future__ import annotations

import argparse
import ast
import inspect
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

SDISTS = ["nbsphinx==0.9.8", "nbconvert==7.16.4", "requests==2.32.3", "flask==3.1.3", "attrs==26.1.0", "click==8.5.1"]
WORD = re.compile(r"[^\W_]+")
NOTEBOOK_JSON = re.compile(r'"(?:cell_type|outputs|source|metadata|execution_count|nbformat|attachments)"\s*:')
BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{200,}={0,2}")  # an embedded image or attachment


def build(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for spec in SDISTS:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:",
                            "--no-deps", spec, "-d", tmp], check=True)
        for sdist in sorted(Path(tmp).glob("*.tar.gz")):
            with tarfile.open(sdist) as tar:
                tar.extractall(folder, filter="data")
            print(f"unpacked {sdist.name}")


def words(text: str) -> Counter:
    return Counter(w.lower() for w in WORD.findall(text))


def share(found: int, total: int) -> str:
    return f"{found:,}/{total:,} ({100 * found / total:.1f} %)" if total else "0/0"


# ---- notebook ----------------------------------------------------------------------------


def notebook_oracle(path: Path) -> tuple[list[str], Counter]:
    """(headings, words) of a notebook's Markdown cells, as markdown-it-py reads each cell."""
    import nbformat
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark")
    nb = nbformat.read(path, as_version=4)
    headings, counts = [], Counter()
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        tokens = md.parse(re.sub(r"data:[\w/+.-]+;base64,[A-Za-z0-9+/=\s]*", "", cell.source))
        for i, tok in enumerate(tokens):
            if tok.type == "heading_open":
                headings.append(" ".join(inline_text(tokens[i + 1]).split()))
            if tok.type == "inline":
                counts += words(inline_text(tok))
            elif tok.type in ("fence", "code_block", "html_block"):
                counts += words(tok.content)
    return headings, counts


def inline_text(tok) -> str:
    """What a reader sees of an inline token: text and code spans (images' alt text not)."""
    return "".join(c.content if c.type in ("text", "code_inline", "html_inline") else " "
                   for c in tok.children or [] if c.type in ("text", "code_inline", "html_inline", "softbreak", "hardbreak"))


def measure_notebook(docs: pd.DataFrame, chunks: pd.DataFrame, files: list[Path]) -> dict:
    heads = found_heads = extra = 0
    total_words = found_words = markup = 0
    for doc_id, row in docs.iterrows():
        mine = chunks[chunks.doc_id == doc_id]
        headings, counts = notebook_oracle(Path(row.source))
        in_paths = {h for p in mine.heading_path for h in p}
        heads += len(headings)
        found_heads += sum(h in in_paths for h in headings)
        extra += len(in_paths - set(headings) - {""})
        have = words("\n".join(mine.text))
        total_words += sum(counts.values())
        found_words += sum(min(n, have[w]) for w, n in counts.items())
        markup += int((mine.text.str.contains(NOTEBOOK_JSON) | mine.text.str.contains(BASE64_RUN)).sum())
    return {"headings": share(found_heads, heads), "extra": extra, "words": share(found_words, total_words),
            "markup": f"{markup} chunks with notebook JSON keys or base64 runs"}


# ---- python ------------------------------------------------------------------------------


def dotted_module(doc_id: str) -> str:
    """The module's import name from its path: trailing identifier folders, not src/."""
    *folders, name = doc_id.split("/")
    stem = name[:-3] if name.endswith(".py") else name
    parts = [] if stem == "__init__" else [stem]
    while folders and folders[-1].isidentifier() and folders[-1] != "src":
        parts.insert(0, folders.pop())
    return ".".join(parts) or stem


def python_oracle(path: Path, module: str) -> tuple[list[str], Counter, set[str]]:
    """(dotted qualified names with a docstring, words of every such docstring and the
    module's, the distinctive lines of function bodies: what must not reach a chunk)."""
    source = path.read_bytes()
    tree = ast.parse(source)
    names, counts, body = [], Counter(), set()
    lines = source.decode("utf-8", "replace").splitlines()
    doc = _docstring(tree)
    if doc:
        counts += words(doc)
    parent: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parent[child] = node
    for node in ast.walk(tree):
        if not isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        chain, up = [node.name], parent.get(node)
        inside_function = False
        while up is not None:
            if isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                inside_function = True
                break
            if isinstance(up, ast.ClassDef):
                chain.insert(0, up.name)
            up = parent.get(up)
        doc = _docstring(node)
        if doc and not inside_function:
            names.append(".".join([module, *chain]))
            counts += words(doc)
        if not isinstance(node, ast.ClassDef):
            for stmt in node.body[1 if doc else 0:]:
                body.update(ln.strip() for ln in lines[stmt.lineno - 1:stmt.end_lineno])
    # A body line counts when it is long enough to be distinctive and no docstring quotes it.
    docs_text = "\n".join(filter(None, (_docstring(n) for n in ast.walk(tree) if isinstance(n, _DOCUMENTED))))
    body = {ln for ln in body if len(ln) >= 30 and ln not in docs_text}
    return names, counts, body


_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _docstring(node) -> str | None:
    body = getattr(node, "body", [])
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return inspect.cleandoc(body[0].value.value).strip() or None
    return None


def measure_python(docs: pd.DataFrame, chunks: pd.DataFrame, files: list[Path]) -> dict:
    heads = found_heads = extra = 0
    total_words = found_words = leaked = body_lines = 0
    for doc_id, row in docs.iterrows():
        mine = chunks[chunks.doc_id == doc_id]
        names, counts, body = python_oracle(Path(row.source), dotted_module(doc_id))
        trails = {".".join(p) for p in mine.heading_path}
        heads += len(names)
        found_heads += sum(n in trails for n in names)
        # An undocumented class above documented methods is a heading on purpose: not extra.
        ancestors = {n.rsplit(".", k)[0] for n in names for k in range(1, n.count(".") + 1)}
        extra += len(trails - set(names) - ancestors - {dotted_module(doc_id)})
        have = words("\n".join(mine.text))
        total_words += sum(counts.values())
        found_words += sum(min(n, have[w]) for w, n in counts.items())
        shown = {ln.strip() for t in mine.text for ln in t.splitlines()}
        body_lines += len(body)
        leaked += len(body & shown)
    return {"headings": share(found_heads, heads), "extra": extra, "words": share(found_words, total_words),
            "markup": f"{leaked} of {body_lines:,} distinctive code-body lines in chunks"}


MEASURES = {"notebook": ("*.ipynb", measure_notebook), "python": ("*.py", measure_python)}


def reader_speed(files: list[Path]) -> str:
    """MB per CPU second of read_document over the files (CPU time: a busy shared machine
    slows the wall clock, not the work; the files are read once before, so the cache is warm)."""
    from pipekit.read.walk import list_inputs
    from pipekit.read.documents import read_document

    entries = [e for f in files for e in list_inputs(f)]
    for f in files:
        f.read_bytes()
    start = time.process_time()
    for e in entries:
        read_document(e)
    seconds = time.process_time() - start
    size = sum(f.stat().st_size for f in files)
    return f"{size / 1e6 / seconds:.1f} MB per CPU second ({size / 1e6:.1f} MB in {seconds:.2f} s)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--build", action="store_true", help="download and unpack SDISTS into FOLDER first")
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "formats_out")
    ap.add_argument("--only", choices=sorted(MEASURES), action="append")
    ap.add_argument("--outputs", action="store_true", help="documents.notebook_outputs=true (text outputs kept)")
    args = ap.parse_args()
    if args.build:
        build(args.folder)
    formats = args.only or sorted(MEASURES)
    globs = "[" + ", ".join(f'"{MEASURES[f][0]}"' for f in formats) + "]"
    subprocess.run([sys.executable, str(HERE / "run_pipeline.py"), "--to", "3", "--set", f"documents.input={args.folder}",
                    "--set", f"paths.output={args.out}", "--set", f"documents.include={globs}",
                    "--set", f"documents.notebook_outputs={str(args.outputs).lower()}"],
                   check=True, stdout=subprocess.DEVNULL)
    docs = pd.read_parquet(args.out / "01_documents.parquet")
    chunks = pd.read_parquet(args.out / "03_chunks.parquet", columns=["doc_id", "heading_path", "text"])
    for fmt in formats:
        rows = docs[docs.format == fmt]
        ok = rows[rows.status == "ok"].set_index("doc_id")
        files = [Path(s) for s in ok.source]
        figures = {"files": f"{len(ok):,} read ok / {len(rows):,}"}
        figures.update(MEASURES[fmt][1](ok, chunks[chunks.doc_id.isin(ok.index)], files))
        figures["MB/s"] = reader_speed(files)
        print(fmt)
        for key, value in figures.items():
            print(f"  {key:9} {value}")
        for _, bad in rows[rows.status != "ok"].head(5).iterrows():
            print(f"  {bad.status:9} {bad.doc_id}: {bad.error}")


if __name__ == "__main__":
    main()
