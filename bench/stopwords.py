"""Which stoplist for questions: Lucene's 33 words (`english`) against those plus the words
that make a sentence a question (`questions`: how, what, do, can, i, …), on every collection
we have, with and without RM3 feedback, and what RM3 adds.

    python bench/stopwords.py [--data ../shared/data]
    python bench/docs_qa.py --set indexing.stopwords=questions   # the documentation questions

For each BEIR collection under --data and the bundled sample it runs `run_pipeline.py`
(outputs in bench/out/stopwords/<collection>-<stoplist>, config.yaml's defaults otherwise)
and prints nDCG@10 / AP@100 / R@100, the ratio of `questions` to `english`, and how many of
the sample's queries still carry a question word after analysis.  Prints figures only;
config.yaml's `indexing.stopwords` comment quotes the last run.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from pipekit.index.analyzer import QUESTION_WORDS, Analyzer  # noqa: E402

METRICS = ("nDCG@10", "AP@100", "R@100")
STOPLISTS = ("english", "questions")


def run(name: str, beir: Path | None, stoplist: str, feedback: str) -> dict:
    out = REPO / "bench" / "out" / "stopwords" / f"{name}-{stoplist}"
    cmd = [sys.executable, "run_pipeline.py", "--set", f"paths.output={out}",
           "--set", f"indexing.stopwords={stoplist}", "--set", f"retrieval.feedback={feedback}"]
    if beir is not None:
        cmd += ["--set", f"documents.input={beir / 'corpus.jsonl'}", "--set", f"retrieval.queries={beir / 'queries.jsonl'}",
                "--set", f"retrieval.qrels={beir / 'qrels.tsv'}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    m = pq.read_table(out / "05_metrics.parquet").to_pandas()
    return m[m.query_id == "all"].set_index("metric")["value"].to_dict()


def question_words_left(queries: list[str]) -> float:
    """Share of queries whose analysed terms (Lucene's list) still hold a question word."""
    lucene = Analyzer(stopwords="english")
    stems = set(lucene.analyze(" ".join(sorted(QUESTION_WORDS))))
    return sum(bool(stems & set(lucene.analyze(q))) for q in queries) / max(len(queries), 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    args = ap.parse_args()
    targets = {p.parent.name: p for p in sorted(args.data.glob("*/beir")) if (p / "corpus.jsonl").exists()}
    targets["sample"] = None
    print(f"{'collection':<11}{'feedback':<9}" + "".join(f"{s + ' ' + m:>20}" for s in STOPLISTS for m in METRICS)
          + "   questions/english nDCG@10")
    for name, beir in targets.items():
        for fb in ("none", "rm3"):
            res = {s: run(name, beir, s, fb) for s in STOPLISTS}
            cells = "".join(f"{res[s][m]:>20.4f}" for s in STOPLISTS for m in METRICS)
            print(f"{name:<11}{fb:<9}{cells}   {res['questions']['nDCG@10'] / res['english']['nDCG@10']:.3f}x")
    sample = [line for line in (REPO / "data" / "queries.txt").read_text().splitlines() if line.strip()]
    print(f"\nsample queries still holding a question word under Lucene's list: {question_words_left(sample):.0%}")


if __name__ == "__main__":
    main()
