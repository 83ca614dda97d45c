"""Cranfield: our pipeline beside bm25s for each analyzer setting, and our wall time.

    python bench/cranfield.py [--collection ../shared/data/cranfield/beir]

For each of none / stopwords / stemmer / both it runs `run_pipeline.py` (outputs in
bench/out/cranfield-<setting>) and bm25s (method lucene, k1 1.2, b 0.75, the same
stopword list and Snowball stemmer, title + text) and prints nDCG@10, AP@100 and R@100,
both evaluated by ir-measures on documents.  Needs requirements-bench.txt.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipekit.index.analyzer import STOPLISTS  # noqa: E402
from pipekit.retrieve.queries import load_qrels, load_queries  # noqa: E402

SETTINGS = {  # name: (stemmer, stopwords)
    "none": ("none", "none"),
    "stopwords": ("none", "english"),
    "stemmer": ("english", "none"),
    "both": ("english", "english"),
    "questions": ("english", "questions"),  # the default stop list (config.yaml says why)
}
METRICS = ("nDCG@10", "AP@100", "R@100")


def ours(collection: Path, name: str) -> tuple[dict, float]:
    stemmer, stopwords = SETTINGS[name]
    out = REPO / "bench" / "out" / f"cranfield-{name}"
    cmd = [sys.executable, "run_pipeline.py", "--force",
           "--set", f"paths.output={out}",
           "--set", f"documents.input={collection / 'corpus.jsonl'}",
           "--set", f"retrieval.queries={collection / 'queries.jsonl'}",
           "--set", f"retrieval.qrels={collection / 'qrels.tsv'}",
           "--set", f"indexing.stemmer={stemmer}", "--set", f"indexing.stopwords={stopwords}",
           # The plain formula, as bm25s computes it: this compares like with like (the
           # heading weight, section context and feedback are bench/quality.py's subject).
           "--set", "indexing.heading_weight=1", "--set", "retrieval.feedback=none",
           "--set", "retrieval.section_context=0"]
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    m = pq.read_table(out / "05_metrics.parquet").to_pandas()
    return m[m.query_id == "all"].set_index("metric")["value"].to_dict(), wall


def peer_bm25s(collection: Path, name: str) -> dict:
    import bm25s
    import ir_measures
    import Stemmer

    stemmer, stopwords = SETTINGS[name]
    docs = [json.loads(l) for l in (collection / "corpus.jsonl").open()]
    corpus = [f"{d.get('title', '')} {d.get('text', '')}" for d in docs]
    stem = Stemmer.Stemmer("english") if stemmer == "english" else None
    stop = sorted(STOPLISTS[stopwords]) if stopwords != "none" else None
    retriever = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    retriever.index(bm25s.tokenize(corpus, stopwords=stop, stemmer=stem, show_progress=False),
                    show_progress=False)
    queries = load_queries(str(collection / "queries.jsonl"))
    q_tokens = bm25s.tokenize([t for _, t in queries], stopwords=stop, stemmer=stem, show_progress=False)
    idx, scores = retriever.retrieve(q_tokens, k=100, show_progress=False)
    run = {qid: {docs[int(i)]["_id"]: float(s) for i, s in zip(idx[n], scores[n]) if s > 0}
           for n, (qid, _) in enumerate(queries)}
    measures = [ir_measures.parse_measure(m) for m in METRICS]
    agg = ir_measures.calc_aggregate(measures, load_qrels(collection / "qrels.tsv"), run)
    return {str(m): agg[m] for m in measures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--collection", type=Path, default=REPO.parent / "shared/data/cranfield/beir")
    args = parser.parse_args()
    print(f"{'analyzer':<10} {'system':<8} " + " ".join(f"{m:>8}" for m in METRICS) + "   wall (s)")
    for name in SETTINGS:
        mine, wall = ours(args.collection, name)
        theirs = peer_bm25s(args.collection, name)
        print(f"{name:<10} {'ours':<8} " + " ".join(f"{mine[m]:8.4f}" for m in METRICS) + f"   {wall:8.2f}")
        print(f"{'':<10} {'bm25s':<8} " + " ".join(f"{theirs[m]:8.4f}" for m in METRICS))


if __name__ == "__main__":
    main()
