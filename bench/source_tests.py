"""Documentation questions over whole source trees: a project's tests read, left out, or weighed down.

    python bench/source_tests.py              # unpacks the sdists the first time, then the table
    python bench/source_tests.py --per-question

Why: stage 01 reads `.py` files (their docstrings) and a source distribution ships its tests
beside its docs.  Over a folder holding the attrs sdist, "what does attrs frozen=True do"
had three test docstrings for its top 3.  This bench decides `documents.test_files`'
default (pipekit/read/source_tests.py says what a tests folder is).

The folder: three projects' whole source distributions, as `pip download --no-deps
--no-binary :all:` fetches them and a user unpacks them (src/, tests/, docs/, README,
CHANGES, ...): attrs 26.1.0, click 8.5.1, jinja2 3.1.6, unpacked into
bench/out/source_tests/corpus/ (git-ignored; the archives are taken from
bench/corpora/docs_qa_sdists when `bench/docs_qa.py --build` left them there, else fetched).
Their tests folders hold Python (attrs, click, jinja2), templates and fixtures (jinja2's
tests/res).

The questions (bench/source_tests_questions.tsv): 24, eight a project, each answered by one
section of the project's docs (Markdown or reST), checked and scored by bench/docs_qa.py's
referee: section hit@1 / hit@3 (distinct sections), document hit@3 (distinct documents).
Also counted: how many of the top 3 distinct sections are from a tests folder.

The systems, all ours with config.yaml's defaults otherwise:
- tests read: `documents.test_files=true`;
- tests left out: `documents.test_files=false` (their files are `skipped` rows);
- tests weighed down (x0.5, x0.25): the "read" run's 50 best chunks a question, each test
  chunk's score multiplied by the weight, re-sorted.  A weight below 1 only lowers test
  chunks, so the other chunks keep their order and the top 3 after re-sorting is exact
  as long as the 50 hold 3 sections that are not tests (checked: the table says if not).
  Term statistics (df, avgdl) still count the tests, as they would with a weight in the index.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import docs_qa  # noqa: E402  (the referee and the runner: bench/docs_qa.py)

PROJECTS = (("attrs", "26.1.0"), ("click", "8.5.1"), ("jinja2", "3.1.6"))
QUESTIONS = REPO / "bench" / "source_tests_questions.tsv"
OUT = REPO / "bench" / "out" / "source_tests"
CORPUS = OUT / "corpus"
CACHES = (REPO / "bench" / "corpora" / "docs_qa_sdists", OUT / "sdists")
WEIGHTS = (0.5, 0.25)


def build() -> None:
    """Unpack each project's sdist whole into CORPUS/<name>-<version>/."""
    CORPUS.mkdir(parents=True, exist_ok=True)
    for name, version in PROJECTS:
        if (CORPUS / f"{name}-{version}").is_dir():
            continue
        archive = next((c / f"{name}-{version}.tar.gz" for c in CACHES if (c / f"{name}-{version}.tar.gz").is_file()), None)
        if archive is None:
            CACHES[1].mkdir(parents=True, exist_ok=True)
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                            f"{name}=={version}", "-d", str(CACHES[1])], check=True)
            archive = CACHES[1] / f"{name}-{version}.tar.gz"
        with tarfile.open(archive) as tar:
            tar.extractall(CORPUS, filter="data")
        print(f"unpacked {archive.name} -> {(CORPUS / f'{name}-{version}').relative_to(REPO)}")


def test_documents() -> set[str]:
    """The doc_ids stage 01 leaves out as a tests folder's (the rule the default applies)."""
    from pipekit.read.walk import list_inputs

    return {e.doc_id for e in list_inputs(CORPUS, test_files=False) if e.reason == "tests"}


def ranking(qs: list[dict], out: Path) -> dict:
    """Per question, (doc_id, trail key, heading shown, score) of each result, best first."""
    chunks = pq.read_table(out / "03_chunks.parquet", columns=["chunk_id", "heading_path"]).to_pydict()
    trail = dict(zip(chunks["chunk_id"], chunks["heading_path"]))
    res = pq.read_table(out / "05_results.parquet", columns=["query_id", "rank", "chunk_id", "doc_id", "score"]).to_pandas()
    ranked = {q["id"]: [] for q in qs}
    for row in res.sort_values(["query_id", "rank"]).itertuples():
        path = [t for t in trail[row.chunk_id] if t]
        ranked[row.query_id].append((row.doc_id, docs_qa.trail_key(path), path[-1] if path else "", row.score))
    return ranked


def run(qs: list[dict], name: str, overrides: list[str], force: bool) -> dict:
    docs_qa.run_ours(qs, name, overrides, force, "question")
    return ranking(qs, OUT / re.sub(r"[^\w]+", "-", name).strip("-"))


def weighed(ranked: dict, tests: set[str], weight: float) -> dict:
    return {q: sorted(hits, key=lambda h: -h[3] * (weight if h[0] in tests else 1.0)) for q, hits in ranked.items()}


def tests_in_top3(ranked: dict, tests: set[str]) -> tuple[float, int]:
    """Mean number of the first 3 distinct sections that are a tests folder's, and the
    number of questions with at least one."""
    counts = []
    for hits in ranked.values():
        seen = []
        for d, k, _, _ in hits:
            if (d, k) not in seen:
                seen.append((d, k))
            if len(seen) == 3:
                break
        counts.append(sum(d in tests for d, _ in seen))
    return sum(counts) / len(counts), sum(c > 0 for c in counts)


def hits(qs: list[dict], sc: dict) -> dict:
    """Per metric, each question's 0/1 (the order of `qs`)."""
    per = [sc["per"][q["id"]] for q in qs]
    return {"hit@1": [s == 1 for s, _ in per], "hit@3": [s is not None and s <= 3 for s, _ in per],
            "doc@3": [d is not None and d <= 3 for _, d in per]}


def difference(qs: list[dict], a: dict, b: dict, rounds: int = 10_000) -> dict:
    """b - a per metric, with a paired bootstrap's 95 % interval (questions resampled)."""
    import numpy as np

    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(qs), size=(rounds, len(qs)))
    out = {}
    for metric, was in hits(qs, a).items():
        diff = np.array(hits(qs, b)[metric], float) - np.array(was, float)
        means = diff[picks].mean(axis=1)
        out[metric] = (diff.mean(), *np.percentile(means, [2.5, 97.5]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--force", action="store_true", help="rerun every stage")
    ap.add_argument("--per-question", action="store_true", help="print each question's ranks")
    args = ap.parse_args()
    build()
    docs_qa.CORPUS, docs_qa.OUT, docs_qa.QUESTIONS = CORPUS, OUT, QUESTIONS
    qs = docs_qa.questions()
    docs_qa.validate(qs)
    tests = test_documents()
    print(f"folder: {', '.join(f'{n} {v}' for n, v in PROJECTS)} sdists ({CORPUS.relative_to(REPO)}); "
          f"{len(tests)} files in tests folders; {len(qs)} questions, every section found once in its document")
    read = run(qs, "tests read", ["documents.test_files=true"], args.force)
    short = [q for q, hits in read.items() if len({(d, k) for d, k, _, _ in hits if d not in tests}) < 3]
    if short:
        print(f"the weighed-down rows are not exact for {', '.join(short)}: fewer than 3 sections that are not tests "
              f"in their {docs_qa.DEPTH} results")
    share = sum(d in tests for hits in read.values() for d, *_ in hits) / sum(len(h) for h in read.values())
    print(f"tests read: {share:.0%} of the {docs_qa.DEPTH} best chunks of a question are a tests folder's")
    rows = [("tests read (test_files: true)", read),
            ("tests left out (test_files: false)", run(qs, "tests left out", ["documents.test_files=false"], args.force))]
    rows += [(f"tests weighed down x{w}", weighed(read, tests, w)) for w in WEIGHTS]
    cols = ("section hit@1", "section hit@3", "document hit@3")
    print(f"{'system':<38}" + "".join(f"{c:>16}" for c in cols) + f"{'tests in top 3':>16}{'questions':>11}")
    scores = []
    for name, ranked in rows:
        sc = docs_qa.score(qs, {q: [h[:3] for h in hits] for q, hits in ranked.items()})
        mean, n = tests_in_top3(ranked, tests)
        scores.append(sc)
        print(f"{name:<38}" + "".join(f"{sc[c]:>16.3f}" for c in cols) + f"{mean:>16.2f}{n:>11}")
    print(f"(over {len(qs)} questions; one question is {1 / len(qs):.3f}; 'tests in top 3': mean number of the "
          "first 3 distinct sections from a tests folder, and the questions with at least one)")
    print("\nagainst tests read, paired bootstrap over the questions (95 % interval):")
    for (name, _), sc in zip(rows[1:], scores[1:]):
        print(f"  {name:<36}" + "   ".join(f"{c} {d:+.3f} ({lo:+.3f} .. {hi:+.3f})"
                                          for c, (d, lo, hi) in difference(qs, scores[0], sc).items()))
    if args.per_question:
        print(f"{'question':<10}" + "".join(f"{name[:24]:>26}" for name, _ in rows) + "   (section rank / document rank)")
        for q in qs:
            print(f"{q['id']:<10}" + "".join(f"{'/'.join(str(x or '-') for x in sc['per'][q['id']]):>26}" for sc in scores))


if __name__ == "__main__":
    main()
