"""Repeated passages in a ranking, on real documentation: how many top-3 places a repeat of a
higher hit takes, with `retrieval.repeats: keep` (before issue 48) and `collapse`.

    python bench/duplicates.py --build    # once: gather the documents (below) into bench/corpora/duplicates
    python bench/duplicates.py            # index them (once) and print the table
    python bench/duplicates.py --pairs    # also the Jaccard of every cross-document pair among each
                                          # question's top 20 (what SIMILAR was chosen from)
    python bench/duplicates.py --beir     # BEIR metrics on the collapsed ranking and on every copy
    python bench/duplicates.py --speed    # a search's milliseconds, keep against collapse

The documents are the two kinds of repetition issue 48 met:
- an aggregate page: Node.js's API reference as Debian installs it (`apt-get install
  nodejs-doc`, /usr/share/doc/nodejs/api): `all.html` holds every module page, beside them;
- source beside build: SQLAlchemy's sdist (`pip download --no-deps --no-binary :all:
  sqlalchemy`), whose doc/build/ holds each page's .rst source and doc/ its Sphinx HTML.
`--build` copies the HTML of the first and the doc/ folder of the second under
bench/corpora/duplicates/ (git-ignored), read with config.yaml's defaults (so the Sphinx
build's leftovers, `_sources/` and the like, are skipped; its pages and doc/build/'s .rst
sources are read).  `--beir` instead prints the BEIR collections' metrics computed on the
collapsed ranking beside those on every copy (bench/quality.py's indexes).

What counts as a repeat here is decided without the analyzer pipekit collapses with, so
the count is not the rule judging itself: a hit repeats a higher one from another document
when their words (lower-cased letter and digit runs, in order) match at difflib's ratio
>= 0.8 (SequenceMatcher: twice the matched words over both lengths).
"""
from __future__ import annotations

import argparse
import difflib
import itertools
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
import pipekit  # noqa: E402  (after the path: the repository's pipekit)
from pipekit.retrieve.repeats import repeats_for  # noqa: E402
CORPUS = REPO / "bench" / "corpora" / "duplicates"
OUT = Path("/tmp/pipekit-duplicates")
NODE = Path("/usr/share/doc/nodejs/api")
SDIST = Path("/tmp/sqla")

QUESTIONS = [
    "read a file line by line",
    "spawn a child process and read its output",
    "create an HTTP server that returns JSON",
    "hash a string with sha256",
    "resolve a promise after a delay",
    "get the directory name of the current module",
    "handle uncaught exceptions",
    "define a one to many relationship",
    "connection string for postgresql with create_engine",
    "eager load a collection with selectinload",
    "rollback a session after an error",
    "insert many rows at once",
    "what is a hybrid property",
    "declare a table with a composite primary key",
]
REPEAT = 0.8  # difflib ratio from which a hit repeats a higher one (the oracle, above)
WORDS = re.compile(r"[a-z0-9]+")


def build() -> None:
    if not NODE.joinpath("all.html").exists():
        raise SystemExit(f"no {NODE}/all.html: apt-get update && apt-get install -y nodejs-doc")
    tars = sorted(SDIST.glob("sqlalchemy-*.tar.gz"))
    if not tars:
        raise SystemExit(f"no SQLAlchemy sdist in {SDIST}: "
                         f"pip download --no-deps --no-binary :all: sqlalchemy -d {SDIST}")
    if CORPUS.exists():
        shutil.rmtree(CORPUS)
    (CORPUS / "nodejs").mkdir(parents=True)
    for f in NODE.glob("*.html"):
        shutil.copy2(f, CORPUS / "nodejs" / f.name)
    with tarfile.open(tars[-1]) as tar:
        top = tar.getnames()[0].split("/")[0]
        members = [m for m in tar.getmembers() if m.name.startswith(f"{top}/doc/") and m.isfile()]
        tar.extractall(CORPUS / "unpacked", members=members, filter="data")
    shutil.move(str(CORPUS / "unpacked" / top / "doc"), str(CORPUS / "sqlalchemy"))
    shutil.rmtree(CORPUS / "unpacked")
    print(f"{CORPUS}: {sum(1 for _ in CORPUS.rglob('*') if _.is_file())} files")


def index() -> None:
    if (OUT / "04_chunks.parquet").exists():
        return
    subprocess.run([sys.executable, "run_pipeline.py", "--set", f"paths.output={OUT}", "--set",
                    f"documents.input={CORPUS}", "--set", "retrieval.qrels=null", "--set", "retrieval.queries=[placeholder]"], cwd=REPO, check=True)


def words(text: str) -> list[str]:
    return WORDS.findall(text.lower())


def repeats_in(hits) -> int:
    """Hits among these that repeat a higher one of another document (the oracle)."""
    n = 0
    for i, h in enumerate(hits):
        w = words(h.text)
        if any(o.doc_id != h.doc_id and difflib.SequenceMatcher(None, words(o.text), w, autojunk=False).ratio() >= REPEAT
               for o in hits[:i]):
            n += 1
    return n


def pairs(searcher) -> None:
    """Every cross-document pair among each question's top 20 (kept): Jaccard of the analysed
    term sets (what pipekit compares) against the oracle's ratio, most alike first."""
    rep = repeats_for(searcher.index, "collapse", searcher._read_texts)
    row = {c: i for i, c in enumerate(searcher.index.chunks.column("chunk_id").to_pylist())}
    seen = {}
    for q in QUESTIONS:
        hits = searcher.search(q, 20)
        rows = [row[h.chunk_id] for h in hits]
        sets, titles = rep.term_sets(rows), rep.titles(rows)
        for (i, a), (j, b) in itertools.combinations(enumerate(sets), 2):
            if hits[i].doc_id == hits[j].doc_id:
                continue
            key = tuple(sorted((hits[i].chunk_id, hits[j].chunk_id)))
            if key in seen:
                continue
            inter = len(a & b)
            ratio = difflib.SequenceMatcher(None, words(hits[i].text), words(hits[j].text), autojunk=False).ratio()
            seen[key] = (inter / max(len(a) + len(b) - inter, 1), ratio, titles[i] == titles[j])
    js = np.array([v[0] for v in seen.values()])
    rs = np.array([v[1] for v in seen.values()])
    ts = np.array([v[2] for v in seen.values()], bool)
    print(f"\n{len(js)} cross-document pairs among the questions' top 20 (kept):")
    print("  Jaccard     pairs  same title   of those, oracle ratio >= 0.8 / >= 0.95")
    for lo, hi in [(0, .2), (.2, .4), (.4, .5), (.5, .6), (.6, .7), (.7, .8), (.8, .9), (.9, .95), (.95, 1.01)]:
        m = (js >= lo) & (js < hi)
        print(f"  {lo:.2f}-{min(hi, 1):.2f}  {int(m.sum()):>6}  {int((m & ts).sum()):>10}   "
              f"{int((rs[m & ts] >= REPEAT).sum()):>6} / {int((rs[m & ts] >= 0.95).sum())}")
    # The pairs around the threshold: same title from 0.5 (copies cut apart, distinct sections
    # alike), other titles from 0.8 (distinct sections a title guard keeps apart).
    gap = sorted(((j, r, t, k) for k, (j, r, t) in seen.items() if (0.5 if t else 0.8) <= j < 0.9), reverse=True)
    for j, r, t, k in gap:
        print(f"  J={j:.3f} ratio={r:.3f} {'same title' if t else 'other title'}  {k[0]}  |  {k[1]}")


def beir(data: Path) -> None:
    """What collapsing would do to the BEIR metrics if they were computed on the collapsed
    ranking (each query's 100 best passages, a copy's document dropped) rather than on every
    copy (the published figures: hits and their repeats).  Needs bench/quality.py's indexes."""
    import ir_measures

    from pipekit.retrieve.queries import load_qrels, load_queries

    measures = [ir_measures.parse_measure(m) for m in ("nDCG@10", "AP@100", "R@100")]
    print(f"\n{'collection':<10} {'ranking':<26} nDCG@10   AP@100    R@100   queries with a repeat in their top 10 / 100")
    for name in ("cranfield", "nfcorpus", "scifact"):
        out, beir_dir = REPO / "bench" / "out" / "quality" / name, data / name / "beir"
        if not (out / "04_chunks.parquet").exists():
            print(f"{name:<10} (no index: run python bench/quality.py first)")
            continue
        queries = load_queries(str(beir_dir / "queries.jsonl"))
        qrels = load_qrels(str(beir_dir / "qrels.tsv"))
        judged = set(qrels)
        queries = [(qid, text) for qid, text in queries if qid in judged]
        answers = pipekit.Searcher(out, settings={"repeats": "collapse", "feedback": "none"}).search_many([t for _, t in queries], 100)
        runs = {"collapsed (copies dropped)": {}, "every copy (published)": {}}
        top10 = top100 = 0
        for (qid, _), hits in zip(queries, answers):
            for label, with_copies in (("collapsed (copies dropped)", False), ("every copy (published)", True)):
                run = runs[label].setdefault(qid, {})
                for h in hits:
                    for doc, score in [(h.doc_id, h.score)] + ([(a["doc_id"], a["score"]) for a in h.also] if with_copies else []):
                        run[doc] = max(run.get(doc, score), score)
            top10 += any(h.also for h in hits[:10])
            top100 += any(h.also for h in hits)
        for label, run in runs.items():
            agg = ir_measures.calc_aggregate(measures, qrels, run)
            print(f"{name:<10} {label:<26} " + "   ".join(f"{agg[m]:.4f}" for m in measures)
                  + (f"   {top10} / {top100} of {len(queries)}" if "every" in label else ""))


def speed(folders: list[Path], repeat: int = 5) -> None:
    """Milliseconds per search (k 10, warm), keep against collapse, taking turns."""
    import statistics
    import time

    for folder in folders:
        if not (folder / "04_chunks.parquet").exists():
            continue
        searchers = {s: pipekit.Searcher(folder, settings={"repeats": s, "feedback": "none"}) for s in ("keep", "collapse")}
        questions = QUESTIONS if folder == OUT else \
            pq.read_table(folder / "05_results.parquet", columns=["query"]).column("query").unique().to_pylist()[:200]
        times = {s: [] for s in searchers}
        for _ in range(repeat):
            for name, searcher in searchers.items():
                for q in questions:
                    t0 = time.perf_counter()
                    searcher.search(q, 10)
                    times[name].append((time.perf_counter() - t0) * 1000)
        load = os.getloadavg()[0]
        print(f"{folder.name:<24} {len(searchers['keep'].index.lengths):>7,} chunks  "
              + "  ".join(f"{n} {statistics.median(t):.2f} ms (p90 {sorted(t)[int(0.9 * len(t))]:.2f})"
                          for n, t in times.items()) + f"   load {load:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--pairs", action="store_true")
    ap.add_argument("--beir", action="store_true", help="the BEIR metrics on the collapsed ranking and on every copy")
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--speed", action="store_true", help="milliseconds per search, keep against collapse")
    args = ap.parse_args()
    if args.build:
        build()
        return
    if args.beir:
        beir(args.data)
        return
    if args.speed:
        index()
        speed([OUT] + [REPO / "bench" / "out" / "quality" / c for c in ("cranfield", "scifact", "nfcorpus")])
        return
    if not CORPUS.exists():
        raise SystemExit("no documents: python bench/duplicates.py --build")
    index()
    kept = pipekit.Searcher(OUT, settings={"repeats": "keep"})
    collapsed = pipekit.Searcher(OUT, settings={"repeats": "collapse"})
    print(f"{'question':<52} keep  collapse  (top-3 places taken by a repeat of a higher hit)")
    total = [0, 0]
    for q in QUESTIONS:
        before, after = kept.search(q, 3), collapsed.search(q, 3)
        b, a = repeats_in(before), repeats_in(after)
        total[0] += b
        total[1] += a
        named = sum(len(h.also) for h in after)
        print(f"{q:<52} {b:>4}  {a:>8}   {len(after)} hits, {named} other places named")
        for h in after:
            print(f"      {h.citation[:100]}" + "".join(f"\n        also {x['citation'][:96]}" for x in h.also))
    hit_q = sum(1 for q in QUESTIONS if repeats_in(kept.search(q, 3)))
    print(f"\nrepeats in the top 3: keep {total[0]} places ({hit_q} of {len(QUESTIONS)} questions), "
          f"collapse {total[1]}")
    if args.pairs:
        pairs(kept)


if __name__ == "__main__":
    main()
