"""Questions over real documentation: does the right *section* come back, ours beside the
usual RAG recipe, on the same files in the same run.

    python bench/docs_qa.py --build      # once: gather the documentation (see below)
    python bench/docs_qa.py              # the table
    python bench/docs_qa.py --path-evidence   # also ours with each way of indexing the path
    python bench/docs_qa.py --context-evidence   # also ours with each section-context weight
    python bench/docs_qa.py --collection docs_qa2 --build   # the second set (below), then
    python bench/docs_qa.py --collection docs_qa2           # its table
    python bench/docs_qa.py --collection docs_qa3 --build   # the third set (below), likewise

The documentation (bench/docs_qa_sources.tsv, pinned versions): Node.js's API reference as
Debian installs it (`apt-get install nodejs-doc`, /usr/share/doc/nodejs/api) and the
Markdown `docs/` folders of six source distributions on PyPI (attrs, black, hatch, pip,
Python-Markdown, pymdown-extensions), which `--build` fetches with `pip download` and
unpacks into bench/corpora/docs_qa/<project>/ (git-ignored).  Seven projects, ~350 files,
~6 MB; Markdown of several dialects (CommonMark, MyST, MkDocs with attribute lists and
front matter, setext headings).

The questions (bench/docs_qa_questions.tsv): 58, written by hand, paraphrased as a new user
would type them (mostly without the section's own words), each answered by one section of
one document.  Before anything runs, every question's section is looked up in its document
(markdown-it-py reads the headings) and must exist there exactly once.

The second set (--collection docs_qa2; bench/docs_qa2_sources.tsv, docs_qa2_questions.tsv,
bench/corpora/docs_qa2): six other projects' docs, so a default tuned on the first set is
checked on documentation it never saw: the reStructuredText/Sphinx docs of Flask, pytest and
Jinja and the Markdown (MyST, MkDocs) docs of Click, structlog and Copier; 49 questions
written the same way, some pasted error messages and bare keywords among them.  A .rst
document's sections are its section titles as docutils reads them (SPEC rule 9: the
underline styles' order decides the levels, so no line pattern can): the referee parses it
with docutils (pipekit/read/rst.py's `parse`, which lets Sphinx's roles and directives
through as text) and takes each title's text, then compares it as it compares a Markdown
heading: the words, lower-cased.  Both systems get a .rst document as the Markdown
stage 02 makes of it, so the recipe's header splitter sees docutils' sections as headings.

The third set (--collection docs_qa3; bench/docs_qa3_sources.tsv, docs_qa3_questions.tsv,
bench/corpora/docs_qa3, issue 46): five projects neither earlier set saw, the reST/Sphinx docs
of coverage.py, Alembic and nox and the Markdown (MkDocs) docs of mkdocstrings and Griffe; 49
questions in a user's words (a symptom, a tool they already use, a warning pasted), written
before any system ran on them, so that a rule chosen on the first two sets meets docs and
questions it was not tuned on.

The systems, both given the same cleaned text (stage 02's output, so the same files):
- ours: `run_pipeline.py` with config.yaml's defaults (only the input, output folder and
  queries set), 50 results a question;
- the recipe: LangChain's MarkdownHeaderTextSplitter (h1-h6, headers kept in the text) then
  RecursiveCharacterTextSplitter (chunk_size 1000, chunk_overlap 200: LangChain's RAG
  tutorial), indexed by bm25s with its defaults (method lucene, k1 1.5, b 0.75) and the
  same English stopwords and Snowball stemmer as ours.

Scores, per system: section hit@1 and hit@3 — is the answering section among the first
1 / 3 distinct sections of the ranking (a section is a document and its heading trail; a
result's section is its chunk's heading trail: ours `heading_path`, the recipe's header
metadata); document hit@3 — is the answering document among the first 3 distinct
documents.  Headings are compared as the words a reader sees (markdown-it's rendering,
lower-cased, an attribute list at the end dropped), the same function for every system,
so neither is judged by its own idea of a heading; a trail matches when it ends with the
question's section trail.

Needs requirements-bench.txt (bm25s, PyStemmer, langchain-text-splitters, markdown-it-py).
"""
from __future__ import annotations

import argparse
import gzip
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


BENCH = REPO / "bench"
SOURCES = BENCH / "docs_qa_sources.tsv"
QUESTIONS = BENCH / "docs_qa_questions.tsv"
CORPUS = BENCH / "corpora" / "docs_qa"
OUT = BENCH / "out" / "docs_qa"
DEPTH = 50  # results kept a question

# The question sets (--collection; bench/hybrid.py --collections): each its own sources,
# questions, documents and output folder, named <set>_sources.tsv and so on.
COLLECTIONS = ("docs_qa", "docs_qa2", "docs_qa3")


def use(collection: str) -> None:
    """Point SOURCES, QUESTIONS, CORPUS and OUT at one question set.  Module-level names,
    not arguments, because bench/hybrid.py drives run_ours/answerable through them; it calls
    this before each set, one set at a time."""
    global SOURCES, QUESTIONS, CORPUS, OUT
    if collection not in COLLECTIONS:
        raise SystemExit(f"no question set {collection!r}; there are: {', '.join(COLLECTIONS)}")
    SOURCES, QUESTIONS = BENCH / f"{collection}_sources.tsv", BENCH / f"{collection}_questions.tsv"
    CORPUS, OUT = BENCH / "corpora" / collection, BENCH / "out" / collection


# How a user names each project in a question (the table's second half).
PROJECT_WORDS = {"nodejs": "node", "attrs": "attrs", "black": "black", "hatch": "hatch", "pip": "pip",
                 "python-markdown": "python markdown", "pymdown-extensions": "pymdown",
                 "flask": "flask", "pytest": "pytest", "jinja": "jinja", "click": "click",
                 "structlog": "structlog", "copier": "copier", "coverage": "coverage", "alembic": "alembic",
                 "nox": "nox", "mkdocstrings": "mkdocstrings", "griffe": "griffe"}

# Ways of indexing the source path that --path-evidence compares (name: --set overrides).
PATH_VARIANTS = {
    "no path terms (path_weight 0)": ["indexing.path_weight=0"],
    "folders x2 (path_weight 2)": ["indexing.path_weight=2"],
}

# Section-context weights that --context-evidence compares (retrieval.section_context).
CONTEXT_WEIGHTS = (0.25, 0.5, 0.75, 1.0)


# --------------------------------------------------------------------------------------
# Files: sources, questions, the corpus
# --------------------------------------------------------------------------------------


def read_tsv(path: Path) -> list[list[str]]:
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        rows.append(line.split("\t"))
    return rows


def sources() -> list[dict]:
    """One dict a project; `formats` the suffixes its documents end with (.md when the
    line has no sixth field: the first set is Markdown only)."""
    out = []
    for r in read_tsv(SOURCES):
        src = dict(zip(("name", "kind", "package", "version", "folder"), r))
        src["formats"] = tuple(r[5].split()) if len(r) > 5 else (".md",)
        out.append(src)
    return out


def documents(folder: Path):
    """The documents under a folder the referee can read (Markdown and reST)."""
    return [p for p in folder.rglob("*") if p.suffix in (".md", ".rst") and p.is_file()]


def questions() -> list[dict]:
    out = []
    for r in read_tsv(QUESTIONS):
        if len(r) != 4:
            raise SystemExit(f"{QUESTIONS}: expected 4 tab-separated fields, got {r!r}")
        out.append(dict(zip(("id", "doc", "section", "question"), r)))
    return out


def build() -> None:
    """Gather every source's documents (its `formats`) into CORPUS/<name>/..."""
    CORPUS.mkdir(parents=True, exist_ok=True)
    cache = BENCH / "corpora" / "docs_qa_sdists"
    cache.mkdir(parents=True, exist_ok=True)
    for src in sources():
        dest = CORPUS / src["name"]
        if dest.exists():
            shutil.rmtree(dest)
        n = 0
        if src["kind"] == "debian":
            folder = Path(src["folder"])
            if not folder.is_dir():
                raise SystemExit(f"{folder} is missing: install it with `apt-get install {src['package']}`")
            # Debian compresses the larger pages (Node 18's nodejs-doc: 4 .md, 60 .md.gz).
            for f in sorted([*folder.rglob("*.md"), *folder.rglob("*.md.gz")]):
                target = dest / folder.name / f.relative_to(folder).with_suffix("" if f.suffix == ".gz" else ".md")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_bytes())
                n += 1
        else:
            spec = f"{src['package']}=={src['version']}"
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                            "--no-binary", ":all:", spec, "-d", str(cache)], check=True)
            norm = re.sub(r"[-_.]+", "[-_.]", src["package"])
            (archive,) = [p for p in cache.iterdir()
                          if re.fullmatch(f"(?i){norm}-{re.escape(src['version'])}\\.tar\\.gz", p.name)]
            with tarfile.open(archive) as tar:
                for m in tar.getmembers():
                    parts = m.name.split("/", 1)
                    if len(parts) < 2 or not m.isfile() or not m.name.endswith(src["formats"]):
                        continue
                    rel = parts[1]
                    if not rel.startswith(src["folder"].rstrip("/") + "/"):
                        continue
                    target = dest / rel
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(tar.extractfile(m).read())
                    n += 1
        print(f"{src['name']:<20} {n:4d} {'/'.join(src['formats'])} files -> {dest.relative_to(REPO)}")


def check_corpus() -> None:
    missing = [s["name"] for s in sources() if not (CORPUS / s["name"]).is_dir()]
    if missing:
        raise SystemExit(
            f"the documentation of {', '.join(missing)} is not in {CORPUS.relative_to(REPO)}.\n"
            f"Gather it with:  python bench/docs_qa.py --collection {CORPUS.name} --build\n"
            "(Node.js's docs come from Debian: `apt-get install nodejs-doc`; the others are "
            "downloaded from PyPI as source distributions by pip.)")


# --------------------------------------------------------------------------------------
# The referee: headings as a reader sees them, the same for every system
# --------------------------------------------------------------------------------------

_MD = None


def _md():
    global _MD
    if _MD is None:
        from markdown_it import MarkdownIt
        from mdit_py_plugins.front_matter import front_matter_plugin
        _MD = MarkdownIt("commonmark").use(front_matter_plugin)
    return _MD


# An attribute list `{ #id .class }` / `{: #id }` at the end, and closing hashes before it.
_REF_ATTRS = re.compile(r"\s*\{:?\s*[#.][^{}]*\}\s*$|\s*\{:?\s*\w[\w-]*=[^{}]*\}\s*$")


def shown(title: str) -> str:
    """A heading's text as a reader sees it: markdown-it's rendering (text and code, no
    markup), whitespace collapsed, an attribute list at the end dropped."""
    t = _REF_ATTRS.sub("", title)
    t = re.sub(r"\s+#+\s*$", "", t)
    text = []
    for tok in (_md().parseInline(t)[0].children or []):
        if tok.type in ("text", "code_inline"):
            text.append(tok.content)
        elif tok.type in ("softbreak", "hardbreak"):
            text.append(" ")
    return " ".join("".join(text).split())


def words(text: str) -> tuple[str, ...]:
    """The one comparison of headings, for every system and format: the words of the text
    a reader sees, lower-cased (underscores are part of words)."""
    return tuple(re.findall(r"\w+", text.lower()))


def title_key(title: str) -> tuple[str, ...]:
    """A Markdown heading's words as a reader sees them."""
    return words(shown(title))


def trail_key(titles) -> tuple:
    return tuple(k for k in (title_key(t) for t in titles if t) if k)


def document_sections(text: str) -> list[tuple]:
    """Every heading's trail (keys) in a Markdown document, as markdown-it reads it."""
    toks = _md().parse(text)
    levels: list = []
    out = []
    for k, t in enumerate(toks):
        if t.type == "heading_open" and t.level == 0:
            lvl = int(t.tag[1])
            del levels[lvl - 1:]
            levels.extend([()] * (lvl - 1 - len(levels)))
            levels.append(title_key(toks[k + 1].content))
            out.append((tuple(x for x in levels if x), shown(toks[k + 1].content)))
    return out


def rst_sections(text: str) -> list[tuple]:
    """Every section title's trail (keys) in a reST document, as docutils reads it, and the
    title as shown (docutils' text of it, whitespace collapsed).  Not through `shown`: a
    title's text is already what a reader sees, and Markdown would read `__init__` in it as
    bold "init"."""
    from docutils import nodes

    from pipekit.read.rst import parse

    out = []

    def walk(node, trail):
        for child in node.children:
            if not isinstance(child, nodes.section):
                continue
            if child.children and isinstance(child[0], nodes.title):
                text = " ".join(child[0].astext().split())
                here = trail + ((words(text),) if words(text) else ())
                out.append((here, text))
            else:
                here = trail
            walk(child, here)

    walk(parse(text), ())
    return out


def sections_of(path: Path) -> list[tuple]:
    text = path.read_text(encoding="utf-8")
    return rst_sections(text) if path.suffix == ".rst" else document_sections(text)


def mismatch(q: dict) -> str | None:
    """Why a question does not match its document (None: its section is there, exactly
    once; the question then carries its trail key and the section as shown)."""
    path = CORPUS / q["doc"]
    if not path.is_file():
        return f"{q['id']}: no document {q['doc']}"
    # The question's own section text read as its document's format reads a title.
    as_read = words if path.suffix == ".rst" else title_key
    want = tuple(k for k in map(as_read, q["section"].split(" › ")) if k)
    q["key"] = want
    found = [(s, t) for s, t in sections_of(path) if s[-len(want):] == want]
    if len(found) != 1:
        return f"{q['id']}: section {q['section']!r} found {len(found)} times in {q['doc']}"
    q["shown"] = found[0][1]
    return None


def validate(qs: list[dict]) -> None:
    """Every question's section exists in its document, exactly once."""
    problems = [p for p in map(mismatch, qs) if p]
    if problems:
        raise SystemExit("questions file does not match the documents:\n  " + "\n  ".join(problems))


def answerable(qs: list[dict]) -> list[dict]:
    """The questions whose section is in this machine's documents.  A source pinned to a
    version (the sdists) must hold every one of its questions' sections; Debian's Node.js
    docs are whatever version the machine has (Node 18's cli.md has no
    `--max-old-space-size` section), so a question of theirs that is missing is left out,
    and said so, instead of stopping the bench."""
    unpinned = {s["name"] for s in sources() if s["version"] == "-"}
    missing = {q["id"]: p for q in qs if (p := mismatch(q))}
    validate([q for q in qs if q["id"] in missing and q["doc"].split("/")[0] not in unpinned])
    for problem in missing.values():
        print(f"left out {problem} (this machine's version)")
    return [q for q in qs if q["id"] not in missing]


# --------------------------------------------------------------------------------------
# The systems: each returns, per question, its ranked (doc_id, heading trail) results
# --------------------------------------------------------------------------------------


def write_questions(qs: list[dict], style: str) -> Path:
    path = OUT / f"questions-{style}.tsv"
    path.write_text("".join(f"{q['id']}\t{q[style]}\n" for q in qs), encoding="utf-8")
    return path


def read_ranking(qs: list[dict], out: Path) -> dict:
    """Per question, ours's results as (doc_id, heading trail key, heading shown)."""
    chunks = pq.read_table(out / "03_chunks.parquet", columns=["chunk_id", "heading_path"]).to_pydict()
    trail = dict(zip(chunks["chunk_id"], chunks["heading_path"]))
    res = pq.read_table(out / "05_results.parquet", columns=["query_id", "rank", "chunk_id", "doc_id"]).to_pandas()
    ranked = {q["id"]: [] for q in qs}
    for row in res.sort_values(["query_id", "rank"]).itertuples():
        path = [t for t in trail[row.chunk_id] if t]
        ranked[row.query_id].append((row.doc_id, trail_key(path), path[-1] if path else ""))
    return ranked


def run(cmd: list[str], cwd: Path = REPO) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    return time.perf_counter() - t0


def run_ours(qs: list[dict], name: str, overrides: list[str], force: bool, style: str,
             repo: Path = REPO) -> tuple[dict, float]:
    out = OUT / re.sub(r"[^\w]+", "-", name).strip("-")
    queries = write_questions(qs, style)
    cmd = [sys.executable, "run_pipeline.py", "--set", f"paths.output={out}",
           "--set", f"documents.input={CORPUS}", "--set", f"retrieval.queries={queries}",
           "--set", "retrieval.qrels=null", "--set", f"retrieval.top_k={DEPTH}"]
    for o in overrides:
        cmd += ["--set", o]
    if force:
        cmd.append("--force")
    wall = run(cmd, cwd=repo)
    return read_ranking(qs, out), wall


def _stem(doc_id: str) -> str:
    return doc_id.rsplit("/", 1)[-1].rsplit(".", 1)[0]


# Other ways of indexing the source path, made by rewriting the `path` column of ours's
# chunks (stage 04 indexes whatever that column holds), then running stages 04 and 05.
PATH_REWRITES = {
    "file name only": lambda path, doc_id: [_stem(doc_id)],
    "folders and file name": lambda path, doc_id: list(path) + [_stem(doc_id)],
    "folders below the top one": lambda path, doc_id: list(path)[1:],
}


def run_path_rewrite(qs: list[dict], name: str, rewrite, style: str) -> tuple[dict, float]:
    import pyarrow as pa

    src, out = OUT / "ours", OUT / ("path-" + re.sub(r"[^\w]+", "-", name).strip("-"))
    out.mkdir(parents=True, exist_ok=True)
    table = pq.read_table(src / "03_chunks.parquet")
    paths = [rewrite(p, d) for p, d in zip(table.column("path").to_pylist(), table.column("doc_id").to_pylist())]
    i = table.schema.get_field_index("path")
    table = table.set_column(i, table.schema.field(i), pa.array(paths, table.schema.field(i).type))
    pq.write_table(table, out / "03_chunks.parquet")  # the schema keeps the stage's metadata
    sets = ["--set", f"paths.output={out}", "--set", f"retrieval.queries={write_questions(qs, style)}",
            "--set", "retrieval.qrels=null", "--set", f"retrieval.top_k={DEPTH}"]
    wall = run([sys.executable, "04_indexing.py", *sets]) + run([sys.executable, "05_retrieval.py", *sets])
    return read_ranking(qs, out), wall


def run_recipe(qs: list[dict], cleaned: Path, style: str, strip_headers: bool = True) -> tuple[dict, float, int]:
    import bm25s
    import Stemmer
    from langchain_text_splitters import MarkdownHeaderTextSplitter, RecursiveCharacterTextSplitter

    t0 = time.perf_counter()
    docs = pq.read_table(cleaned, columns=["doc_id", "text"]).to_pydict()
    levels = [("#" * n, f"h{n}") for n in range(1, 7)]
    headers = MarkdownHeaderTextSplitter(levels, strip_headers=strip_headers)
    recursive = RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200)
    texts, meta = [], []
    for doc_id, text in zip(docs["doc_id"], docs["text"]):
        for piece in recursive.split_documents(headers.split_text(text)):
            texts.append(piece.page_content)
            md = piece.metadata
            path = [md[f"h{n}"] for n in range(1, 7) if f"h{n}" in md]
            meta.append((doc_id, trail_key(path), path[-1] if path else ""))
    stem = Stemmer.Stemmer("english")
    stop = "en"  # bm25s's own English list, as its README does
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords=stop, stemmer=stem, show_progress=False),
                    show_progress=False)
    q_tokens = bm25s.tokenize([q[style] for q in qs], stopwords=stop, stemmer=stem, show_progress=False)
    idx, scores = retriever.retrieve(q_tokens, k=min(DEPTH, len(texts)), show_progress=False)
    ranked = {q["id"]: [meta[int(i)] for i, s in zip(idx[n], scores[n]) if s > 0] for n, q in enumerate(qs)}
    return ranked, time.perf_counter() - t0, len(texts)


# --------------------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------------------


def first_hit(items, hit):
    """(1-based rank, item) of the first distinct item for which hit() holds, else (None, None)."""
    seen = set()
    for it in items:
        if it in seen:
            continue
        seen.add(it)
        if hit(it):
            return len(seen), it
    return None, None


def score(qs: list[dict], ranked: dict) -> dict:
    """Section hit@1/@3 (distinct sections), document hit@3 (distinct documents), and how
    often the section found in the top 3 is cited with its heading as a reader sees it."""
    s1 = s3 = d3 = shown = 0
    per = {}
    for q in qs:
        res = ranked[q["id"]]
        key = q["key"]
        titles = {(d, k): t for d, k, t in reversed(res)}  # the title each system shows, first seen
        sec, item = first_hit([(d, k) for d, k, _ in res], lambda r: r[0] == q["doc"] and r[1][-len(key):] == key)
        doc, _ = first_hit([d for d, _, _ in res], lambda d: d == q["doc"])
        s1 += sec == 1
        s3 += sec is not None and sec <= 3
        shown += sec is not None and sec <= 3 and titles[item] == q["shown"]
        d3 += doc is not None and doc <= 3
        per[q["id"]] = (sec, doc)
    n = len(qs)
    return {"section hit@1": s1 / n, "section hit@3": s3 / n, "document hit@3": d3 / n,
            "cited as shown@3": shown / n, "per": per}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--collection", default="docs_qa", choices=COLLECTIONS,
                    help="which question set (docs_qa: the first seven projects; docs_qa2: six others)")
    ap.add_argument("--build", action="store_true", help="gather the documentation into bench/corpora/<collection>")
    ap.add_argument("--path-evidence", action="store_true", help="also run ours with each way of indexing the path")
    ap.add_argument("--context-evidence", action="store_true",
                    help="also run ours with each retrieval.section_context weight")
    ap.add_argument("--force", action="store_true", help="rerun every stage of ours")
    ap.add_argument("--per-question", action="store_true", help="print each question's ranks")
    ap.add_argument("--baseline", type=Path, metavar="PATH",
                    help="also run ours from another checkout (e.g. main) with its defaults")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="also run ours with these config overrides (repeatable; one extra row)")
    args = ap.parse_args()
    use(args.collection)
    if args.build:
        build()
        return
    check_corpus()
    qs = answerable(questions())
    for q in qs:  # the same questions as many users type them into a search over many projects
        q["named"] = f"{PROJECT_WORDS[q['doc'].split('/')[0]]} {q['question']}"
    OUT.mkdir(parents=True, exist_ok=True)
    n_files = len(documents(CORPUS))
    print(f"corpus: {n_files} documents of {len(sources())} projects ({CORPUS.relative_to(REPO)}); "
          f"{len(qs)} questions, every section found once in its document")
    cleaned = OUT / "ours" / "02_preprocessed.parquet"
    for style, title in (("question", "questions as written"),
                         ("named", "the same questions with the project's name in front (\"hatch ...\", \"node ...\")")):
        rows = []
        ours, wall = run_ours(qs, "ours", [], args.force, style)
        n_chunks = pq.read_metadata(OUT / "ours" / "03_chunks.parquet").num_rows
        rows.append((f"ours (defaults, {n_chunks:,} chunks)", score(qs, ours), wall))
        recipe, rwall, n_pieces = run_recipe(qs, cleaned, style)
        rows.append((f"recipe (LangChain+bm25s, {n_pieces:,} chunks)", score(qs, recipe), rwall))
        kept, kwall, n_kept = run_recipe(qs, cleaned, style, strip_headers=False)
        rows.append((f"recipe, headers kept in text ({n_kept:,})", score(qs, kept), kwall))
        if args.baseline:
            ranked, w = run_ours(qs, f"baseline {args.baseline}", [], args.force, style, repo=args.baseline)
            rows.append((f"ours at {args.baseline}", score(qs, ranked), w))
        if args.set:
            ranked, w = run_ours(qs, "ours, " + " ".join(args.set), args.set, args.force, style)
            rows.append(("ours, " + " ".join(args.set), score(qs, ranked), w))
        if args.path_evidence:
            for name, sets in PATH_VARIANTS.items():
                ranked, w = run_ours(qs, name, sets, args.force, style)
                rows.append((f"ours, {name}", score(qs, ranked), w))
            for name, rewrite in PATH_REWRITES.items():
                ranked, w = run_path_rewrite(qs, name, rewrite, style)
                rows.append((f"ours, {name}", score(qs, ranked), w))
        if args.context_evidence:
            for w in CONTEXT_WEIGHTS:
                ranked, wall = run_ours(qs, f"context {w}", [f"retrieval.section_context={w}"], args.force, style)
                rows.append((f"ours, section_context {w}", score(qs, ranked), wall))
        report(title, qs, rows, args.per_question)


def report(title: str, qs: list[dict], rows: list, per_question: bool) -> None:
    cols = ("section hit@1", "section hit@3", "document hit@3", "cited as shown@3")
    print(f"\n== {title}")
    print(f"{'system':<46}" + "".join(f"{c:>18}" for c in cols) + f"{'seconds':>9}")
    for name, sc, w in rows:
        print(f"{name:<46}" + "".join(f"{sc[c]:>18.3f}" for c in cols) + f"{w:>9.1f}")
    ours_sc, rec_sc = rows[0][1], rows[1][1]
    print(f"ours - recipe: section hit@3 {ours_sc['section hit@3'] - rec_sc['section hit@3']:+.3f}, "
          f"document hit@3 {ours_sc['document hit@3'] - rec_sc['document hit@3']:+.3f} "
          f"(over {len(qs)} questions; one question is {1 / len(qs):.3f})")
    if per_question:
        print(f"{'question':<12}" + "".join(f"{name[:22]:>24}" for name, _, _ in rows) + "   (section rank / document rank)")
        for q in qs:
            cells = []
            for _, sc, _ in rows:
                s, d = sc["per"][q["id"]]
                cells.append(f"{s or '-'}/{d or '-'}")
            print(f"{q['id']:<12}" + "".join(f"{c:>24}" for c in cells))

if __name__ == "__main__":
    main()
