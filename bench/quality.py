"""Retrieval quality on every BEIR collection in ../shared/data: ours four ways beside bm25s.

    python bench/quality.py [--data ../shared/data] [--heading-weights 1,2,3,4,5] [--set KEY=VALUE ...]

For each collection (a folder with beir/corpus.jsonl, queries.jsonl, qrels.tsv) it runs
`run_pipeline.py` (outputs in bench/out/quality/<collection>) four ways:

- plain     heading_weight 1, section_context 0, feedback none: SPEC's plain formula
- heading   the configured heading_weight and section_context, feedback none (the defaults)
- feedback  heading_weight 1, section_context 0, feedback rm3
- both      the configured heading_weight and section_context, feedback rm3

and bm25s (method lucene, k1 1.2, b 0.75, Snowball English stemmer, English stopwords,
title + text: what bench/cranfield.py runs), all evaluated by ir-measures on documents.
It prints nDCG@10, AP@100 and R@100 per collection, each variant's ratio to bm25s and to
plain, how many collections each variant improves over plain, and the published
Pyserini BM25 flat figures where there are some.  The bundled sample (data/sample) gets
our rows too (no peer: it is not a BEIR collection).

`--heading-weights 1,2,3,4,5` instead prints, feedback off, each weight's figures on every
collection and the sample: how config.yaml's default was chosen.  `--set` passes a config
override to every run (e.g. `--set retrieval.feedback_docs=10`).  Needs requirements-bench.txt.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from cranfield import peer_bm25s  # noqa: E402  (bm25s with the same analyzer, evaluated alike)
from pipekit.run.config import load_config  # noqa: E402

METRICS = ("nDCG@10", "AP@100", "R@100")
# Published BM25 "flat" nDCG@10 (Pyserini / Anserini, Lucene analyzer, k1 0.9, b 0.4): each
# collection's README under ../shared/data quotes it.
PYSERINI = {"scifact": 0.6789, "nfcorpus": 0.3218}


def collections(data: Path) -> dict[str, Path]:
    return {p.parent.name: p for p in sorted(data.glob("*/beir")) if (p / "corpus.jsonl").exists()}


def ours(name: str, beir: Path | None, sets: list[str]) -> tuple[dict, float]:
    """One pipeline run; stages whose inputs did not change since the last run are skipped."""
    out = REPO / "bench" / "out" / "quality" / name
    cmd = [sys.executable, "run_pipeline.py", "--set", f"paths.output={out}", "--set", "retrieval.top_k=10"]
    if beir is not None:
        cmd += ["--set", f"documents.input={beir / 'corpus.jsonl'}",
                "--set", f"retrieval.queries={beir / 'queries.jsonl'}",
                "--set", f"retrieval.qrels={beir / 'qrels.tsv'}"]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    wall = time.perf_counter() - t0
    m = pq.read_table(out / "05_metrics.parquet").to_pandas()
    return m[m.query_id == "all"].set_index("metric")["value"].to_dict(), wall


def row(label: str, figures: dict, ref: dict | None = None, extra: str = "") -> str:
    cells = [f"{figures[m]:8.4f}" if m in figures else f"{'—':>8}" for m in METRICS]
    ratios = [f"{figures[m] / ref[m]:6.3f}x" if ref and m in figures and ref.get(m) else f"{'':>7}"
              for m in METRICS]
    return f"  {label:<24}" + " ".join(cells) + "   " + " ".join(ratios) + extra


def sweep(cols: dict[str, Path], weights: list[int], extra: list[str]) -> None:
    print("heading_weight sweep, feedback none (nDCG@10 / AP@100 / R@100; ratio to weight 1 in brackets)")
    targets = {**cols, "sample": None}
    table: dict[str, dict[int, dict]] = {}
    for name, beir in targets.items():
        table[name] = {}
        for w in weights:
            table[name][w], _ = ours(name, beir, [f"indexing.heading_weight={w}", "retrieval.feedback=none", *extra])
        base = table[name][weights[0]]
        print(f"\n{name}")
        for w in weights:
            print(row(f"heading_weight {w}", table[name][w], base))
    print("\nmean ratio to the first weight over the collections above (nDCG@10, AP@100, R@100):")
    for w in weights:
        ratios = [[table[n][w][m] / table[n][weights[0]][m] for n in targets] for m in METRICS]
        worst = min(table[n][w]["nDCG@10"] / table[n][weights[0]]["nDCG@10"] for n in targets)
        print(f"  heading_weight {w}: " + " ".join(f"{sum(r) / len(r):6.3f}x" for r in ratios)
              + f"   worst nDCG@10 ratio {worst:.3f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--heading-weights", help="comma-separated weights: print the sweep instead")
    parser.add_argument("--set", action="append", default=[], dest="sets", metavar="KEY=VALUE")
    args = parser.parse_args()
    cols = collections(args.data)
    if not cols:
        raise SystemExit(f"no BEIR collection (*/beir/corpus.jsonl) under {args.data}")
    if args.heading_weights:
        return sweep(cols, [int(w) for w in args.heading_weights.split(",")], args.sets)

    cfg = load_config(None, args.sets)
    hw = cfg["indexing"]["heading_weight"]
    fb = cfg["retrieval"]
    sc = fb["section_context"]
    variants = {  # name: overrides; ordered so that stage 04 reruns only when the weight changes
        "plain": [f"indexing.heading_weight=1", "retrieval.feedback=none", "retrieval.section_context=0"],
        "feedback": [f"indexing.heading_weight=1", "retrieval.feedback=rm3", "retrieval.section_context=0"],
        "heading": [f"indexing.heading_weight={hw}", "retrieval.feedback=none", f"retrieval.section_context={sc}"],
        "both": [f"indexing.heading_weight={hw}", "retrieval.feedback=rm3", f"retrieval.section_context={sc}"],
    }
    print(f"defaults: heading_weight {hw}, section_context {sc}, feedback {fb['feedback']}; rm3 runs with docs {fb['feedback_docs']}, "
          f"terms {fb['feedback_terms']}, query weight {fb['feedback_query_weight']}")
    print(f"  {'':<24}" + " ".join(f"{m:>8}" for m in METRICS) + "   ratio to bm25s (plain for the sample)")
    results: dict[str, dict[str, dict]] = {}
    for name, beir in {**cols, "sample": None}.items():
        res = results[name] = {}
        for v, sets in variants.items():
            res[v], res[v + " wall"] = ours(name, beir, [*sets, *args.sets])
        if beir is not None:
            # bm25s with our stop list, so the plain formula can be compared digit for digit
            res["bm25s"] = peer_bm25s(beir, "both" if cfg["indexing"]["stopwords"] == "english" else "questions")
        ref = res.get("bm25s") or res["plain"]
        print(f"\n{name}")
        for v in ("plain", "heading", "feedback", "both"):
            label = f"ours {v}" + (" (default)" if v == "heading" and fb["feedback"] == "none" else "")
            print(row(label, res[v], ref, f"   {res[v + ' wall']:5.1f} s"))
        if "bm25s" in res:
            print(row("bm25s lucene 1.2/0.75", res["bm25s"], ref))
        if name in PYSERINI:
            print(row("Pyserini BM25 flat", {"nDCG@10": PYSERINI[name]}, ref))

    beir_names = list(cols)
    print("\nover the BEIR collections: mean ratio to bm25s, and collections improved over plain / bm25s")
    for v in ("plain", "heading", "feedback", "both"):
        cells = []
        for m in METRICS:
            ratio = sum(results[n][v][m] / results[n]["bm25s"][m] for n in beir_names) / len(beir_names)
            up = sum(results[n][v][m] > results[n]["plain"][m] for n in beir_names)
            beat = sum(results[n][v][m] > results[n]["bm25s"][m] for n in beir_names)
            cells.append(f"{m} {ratio:.3f}x ({up}/{len(beir_names)} > plain, {beat} > bm25s)")
        print(f"  {v:<9} " + "; ".join(cells))
    print("  feedback vs the defaults (heading): R@100 higher on "
          f"{sum(results[n]['both']['R@100'] > results[n]['heading']['R@100'] for n in beir_names)}"
          f"/{len(beir_names)} collections with both on")


if __name__ == "__main__":
    main()
