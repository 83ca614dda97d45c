"""Stage 03 beside the peers: throughput on a real Markdown corpus, scaling, and the rule
violations each chunker makes on the hand-made fixtures in tests/fixtures/chunking/.

    python bench/chunking.py --build     # once: collect the corpus into bench/corpora/markdown/
    python bench/chunking.py             # the tables (see bench/README.md)

The corpus is real documentation Markdown already on the machine, gathered offline: every
`*.md` file under the roots below (on Debian/Ubuntu `apt-get install nodejs-doc` supplies
/usr/share/doc/nodejs, ~14 MB of Node.js API docs), plus the Markdown long descriptions
(`METADATA` files) of the installed Python packages.  It must reach 20 MB.

Peers, all configured to the same ceiling in characters (their native unit):
  LangChain  MarkdownHeaderTextSplitter (headers h1-h6, kept in the text) then
             RecursiveCharacterTextSplitter.from_language(MARKDOWN)
  chonkie    RecursiveChunker with the markdown recipe (bundled, offline), character tokenizer
  LlamaIndex MarkdownNodeParser (it has no size limit at all)
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

CORPUS = REPO / "bench" / "corpora" / "markdown"
FIXTURES = REPO / "tests" / "fixtures" / "chunking"
ROOTS = ["/usr/share", "/usr/lib", "/usr/local", "/opt", str(Path(sys.prefix) / "lib"),
         str(Path.home() / ".rustup"), str(Path.home() / ".pyenv"), str(Path.home() / ".cargo")]
# CPU time of this process: other jobs on a shared machine skew wall time, and every
# chunker here is single-threaded, so CPU seconds compare them fairly.
clock = time.process_time
MAX_CHARS = 1000     # the ceiling every chunker gets
TARGET_CHARS = 800   # ours packs to this, cuts only above MAX_CHARS


def build(min_mb: float = 20.0) -> None:
    """Copy every *.md under ROOTS (and package METADATA) into CORPUS, deduplicated."""
    import hashlib

    CORPUS.mkdir(parents=True, exist_ok=True)
    seen, total, n = set(), 0, 0
    paths = []
    for root in ROOTS:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(".md") or (f == "METADATA" and dirpath.endswith(".dist-info")):
                    paths.append(Path(dirpath) / f)
    for p in paths:
        try:
            data = p.read_bytes()
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if p.name == "METADATA":  # the long description follows the first blank line
            text = text.split("\n\n", 1)[1] if "\n\n" in text else ""
        h = hashlib.sha1(text.encode()).hexdigest()
        if not text.strip() or h in seen:
            continue
        seen.add(h)
        (CORPUS / f"{n:06d}.md").write_text(text, encoding="utf-8")
        n += 1
        total += len(text.encode())
    print(f"{n} documents, {total / 1e6:.1f} MB in {CORPUS}")
    if total < min_mb * 1e6:
        sys.exit(f"only {total / 1e6:.1f} MB: install nodejs-doc (apt-get install nodejs-doc) or add roots")


def load_corpus() -> list[str]:
    if not CORPUS.exists():
        sys.exit(f"no corpus in {CORPUS}: run `python bench/chunking.py --build` first")
    return [p.read_text(encoding="utf-8") for p in sorted(CORPUS.glob("*.md"))]


# -- the chunkers: text -> (list of chunk texts, list of heading lists or None) -------------

def make_ours():
    from pipekit.run.stages import load_stage

    ch = load_stage(3)
    s = ch.Settings(target=TARGET_CHARS, max=MAX_CHARS, min=100, unit="chars")

    def run(text, fmt="markdown"):
        out = ch.chunk_document(text, fmt=fmt, settings=s, name="fixture.csv")
        return [c["text"] for c in out], [c["heading_path"] for c in out]
    return run


def make_baseline(repo: Path):
    """Stage 03 of another checkout (`--baseline PATH`), to compare a change in one run."""
    import importlib.util

    def make():
        saved = {k: v for k, v in sys.modules.items() if k == "pipekit" or k.startswith("pipekit.")}
        for k in saved:
            del sys.modules[k]
        sys.path.insert(0, str(repo))
        try:
            spec = importlib.util.spec_from_file_location("baseline_03", repo / "03_chunking.py")
            ch = importlib.util.module_from_spec(spec)
            sys.modules["baseline_03"] = ch
            spec.loader.exec_module(ch)
        finally:
            sys.path.pop(0)
            for k in [k for k in sys.modules if k == "pipekit" or k.startswith("pipekit.")]:
                sys.modules[f"baseline_{k}"] = sys.modules.pop(k)
            sys.modules.update(saved)
        s = ch.Settings(target=TARGET_CHARS, max=MAX_CHARS, min=100, unit="chars")

        def run(text, fmt="markdown"):
            out = ch.chunk_document(text, fmt=fmt, settings=s, name="fixture.csv")
            return [c["text"] for c in out], [c["heading_path"] for c in out]
        return run
    return make


def make_langchain():
    from langchain_text_splitters import (Language, MarkdownHeaderTextSplitter,
                                          RecursiveCharacterTextSplitter)

    heads = [("#" * k, f"h{k}") for k in range(1, 7)]
    md = MarkdownHeaderTextSplitter(heads, strip_headers=False)
    rc = RecursiveCharacterTextSplitter.from_language(Language.MARKDOWN, chunk_size=MAX_CHARS, chunk_overlap=0)

    def run(text, fmt="markdown"):
        docs = rc.split_documents(md.split_text(text))
        return [d.page_content for d in docs], [[v for k, v in sorted(d.metadata.items())] for d in docs]
    return run


def make_chonkie():
    from chonkie import RecursiveChunker

    try:
        ck = RecursiveChunker.from_recipe("markdown", lang="en", tokenizer="character", chunk_size=MAX_CHARS)
        make_chonkie.recipe = "markdown recipe"
    except Exception as exc:  # the recipe needs the hub when it is not bundled
        ck = RecursiveChunker(tokenizer="character", chunk_size=MAX_CHARS)
        make_chonkie.recipe = f"default rules ({type(exc).__name__})"

    def run(text, fmt="markdown"):
        return [c.text for c in ck.chunk(text)], None
    return run


def make_llamaindex():
    from llama_index.core import Document
    from llama_index.core.node_parser import MarkdownNodeParser

    p = MarkdownNodeParser()

    def run(text, fmt="markdown"):
        nodes = p.get_nodes_from_documents([Document(text=text)])
        return [n.get_content() for n in nodes], [[v for k, v in sorted(n.metadata.items()) if k.startswith("header")] for n in nodes]
    return run


PEERS = {"ours (03_chunking)": make_ours, "LangChain header+recursive": make_langchain,
         "chonkie RecursiveChunker": make_chonkie, "LlamaIndex MarkdownNodeParser": make_llamaindex}


def throughput(run, texts, repeats: int) -> float:
    mb = sum(len(t.encode()) for t in texts) / 1e6
    times = []
    for _ in range(repeats):
        t0 = clock()
        for t in texts:
            run(t)
        times.append(clock() - t0)
    return mb / statistics.median(times)


def fixtures():
    for p in sorted(FIXTURES.iterdir()):
        if p.is_file():
            fmt = "csv" if p.suffix == ".csv" else "markdown"
            yield p.name, p.read_bytes().decode("utf-8"), fmt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default=None, help="run only chunkers whose name contains this")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="also time stage 03 of this other checkout (before/after a change)")
    args = ap.parse_args()
    if args.baseline:
        PEERS[f"baseline ours ({args.baseline})"] = make_baseline(args.baseline.resolve())
    if args.build:
        build()
        return
    from test_03_oracle import VIOLATIONS, text_violations

    texts = load_corpus()
    mb = sum(len(t.encode()) for t in texts) / 1e6
    print(f"corpus: {len(texts)} Markdown documents, {mb:.1f} MB ({CORPUS.relative_to(REPO)})")
    print(f"budget: max {MAX_CHARS} characters for all; ours packs to {TARGET_CHARS}\n")
    runs = {name: make() for name, make in PEERS.items() if not args.only or args.only in name}
    rates = {}
    for name, run in runs.items():
        rates[name] = throughput(run, texts, args.repeats)
        print(f"  {name:32s} {rates[name]:7.1f} MB/s  (CPU time, median of {args.repeats})", flush=True)
    if "chonkie RecursiveChunker" in runs:
        print(f"  (chonkie used its {make_chonkie.recipe})")

    if "ours (03_chunking)" in runs:
        print("\nours, time per MB on a corpus slice and its repeats:")
        base = []
        size = 0
        for t in texts:
            base.append(t)
            size += len(t)
            if size > 1.2e6:
                break
        for k in (1, 4, 16):
            sl = base * k
            smb = sum(len(t.encode()) for t in sl) / 1e6
            ts = []
            for _ in range(3):
                t0 = clock()
                for t in sl:
                    runs["ours (03_chunking)"](t)
                ts.append(clock() - t0)
            print(f"  {k:2d}x  {smb:6.1f} MB  {statistics.median(ts) / smb * 1000:6.1f} ms/MB")
        # one document 16x longer: the scan stays linear within a document too
        big = "\n\n".join(base)
        for k in (1, 4, 16):
            doc = "\n\n".join([big] * k)
            t0 = clock()
            runs["ours (03_chunking)"](doc)
            el = clock() - t0
            print(f"  one document {k:2d}x  {len(doc.encode()) / 1e6:6.1f} MB  {el / (len(doc.encode()) / 1e6) * 1000:6.1f} ms/MB")

    print("\nrule violations on tests/fixtures/chunking (text-only checks, same for all):")
    totals = {name: Counter() for name in runs}
    for fname, text, fmt in fixtures():
        for name, run in runs.items():
            chunk_texts, heads = run(text, fmt)
            totals[name] += text_violations(text, chunk_texts, heads, MAX_CHARS, "chars", fmt=fmt)
    names = list(runs)
    short = {n: n.split()[0] for n in names}
    print("  " + f"{'violation':32s}" + "".join(f"{short[n]:>12s}" for n in names))
    for v in VIOLATIONS:
        print("  " + f"{v:32s}" + "".join(f"{totals[n][v]:12d}" for n in names))


if __name__ == "__main__":
    main()
