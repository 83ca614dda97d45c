"""Where one warm query's time goes: each step of `Searcher.search`'s short way
(pipekit/retrieve/warm.py) timed on its own, over every question, many times.

    python bench/search_steps.py [OUTPUT_FOLDER] [--queries FILE] [--reps 40] [-k 10] [--pipekit CHECKOUT]
                                 [--no-peer]

OUTPUT_FOLDER defaults to bench/docs_qa.py's index of real documentation (bench/out/docs_qa/ours),
the questions to bench/docs_qa_questions.tsv.  After one warm-up search of each question, every
step is run over all the questions in a loop (`--reps` times, the steps taking turns, so that a
change in the machine's load falls on all of them), from the same inputs each time: a query's
terms (`OneQuery.terms`), the BM25 sums over its matching chunks (`OneQuery.scores`, or stage 05's
`Index.scores` in a checkout without it), the section
context (`SectionContext.rescore`), the k best (`warm.best`), the repeats test
(`Repeats.apart`), all of `OneQuery.hits`, the compiled ranking where the checkout has one
(`Ranker`, pipekit/retrieve/compiled.py: terms to the k best in one call, which `hits` then makes
instead of the four NumPy steps above), `Searcher.ranking`, the Passages of the hits
(`Searcher._passages`) and all of `Searcher.search`; and, where tantivy is installed (not with
`--no-peer`), its whole query in the same loop, as bench/search_speed.py asks it (the query
parsed and the top k found through its Python binding; `+texts` also reads each hit's stored
text and chunk_id), so that the steps stand beside what they are to beat.  Prints each step's microseconds a query,
the least and the first quartile of the reps (the least is the step with the least interference
from other work; time.perf_counter around each call instead inflates steps of a few µs).

Steps are timed alone, on inputs already in the caches, so they add up to less than `hits`
(which also makes new arrays, and collapses repeats for the questions that need it).
`--pipekit CHECKOUT` times another checkout's code (a git worktree) on the same folder, for a
before/after: run it and this one in turns, under `flock /tmp/bench.lock`.  A checkout from
before the section context had one implementation (40167d5) mixes it with `OneQuery.mixed`.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if "--pipekit" in sys.argv:  # another checkout's pipekit
    REPO = Path(sys.argv[sys.argv.index("--pipekit") + 1]).resolve()
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from pipekit import Searcher  # noqa: E402
from pipekit.retrieve import warm  # noqa: E402

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", nargs="?", type=Path, default=HERE / "out" / "docs_qa" / "ours")
    ap.add_argument("--queries", type=Path, default=HERE / "docs_qa_questions.tsv",
                    help="one query a line, or a .tsv's last field")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("-k", type=int, default=10)
    ap.add_argument("--pipekit", type=Path, metavar="CHECKOUT", help="time this checkout's pipekit instead")
    ap.add_argument("--no-peer", action="store_true", help="leave tantivy's whole query out")
    args = ap.parse_args()
    lines = [line for line in args.queries.read_text(encoding="utf-8").splitlines()
             if line.strip() and not line.startswith("#")]
    queries = [line.split("\t")[-1] for line in lines] if args.queries.suffix == ".tsv" else lines
    searcher = Searcher(args.folder)
    one, ix, k = searcher._one, searcher.index, args.k
    if ix.context is None:
        raise SystemExit(f"{args.folder}: no section context to time "
                         "(retrieval.section_context 0, or sections of one chunk each)")
    for q in queries:
        searcher.search(q, k)
    mixed = ((lambda ids, w, c, v: one.mixed(ix.context, ids, w, c, v)) if hasattr(one, "mixed")
             else ix.context.rescore)
    # (BM25 sums: the short way's own call where it has one, else stage 05's `Index.scores`)
    sums = one.scores if hasattr(one, "scores") else (lambda ids, w: ix.scores(ids, weights=w))
    best = ((lambda c, v: warm.best(c, v, k)) if "cols" in warm.best.__code__.co_varnames
            else (lambda c, v: warm.best(v, k)))
    inputs = {}
    for q in queries:  # each step's input, made once
        ids, w = one.terms(q)
        cols, vals = sums(ids, w)
        mixed_vals = mixed(ids, w, cols, vals)
        top = best(cols, mixed_vals)
        inputs[q] = (ids, w, cols, vals, mixed_vals, cols[top].astype(np.int64), one.hits(q, k))
    steps = {
        "terms": lambda q, d: one.terms(q),
        "BM25 sums (scores)": lambda q, d: sums(d[0], d[1]),
        "section context": lambda q, d: mixed(d[0], d[1], d[2], d[3]),
        "the k best": lambda q, d: best(d[2], d[4]),
        "repeats test": lambda q, d: ix.repeats.apart(d[5]),
        "hits (all of the above)": lambda q, d: one.hits(q, k),
        # (a checkout with the compiled ranking: its one call, from the query's terms to the k best)
        **({"compiled (Ranker)": lambda q, d: one.ranker(d[0], d[1], k)} if getattr(one, "ranker", None) else {}),
        "Searcher.ranking": lambda q, d: searcher.ranking(q, k),
        "Passages": lambda q, d: searcher._passages(q, *d[6]),
        "Searcher.search": lambda q, d: searcher.search(q, k),
    }
    from search_speed import peer_tantivy, tantivy_search  # (this checkout's bench, whichever pipekit)
    if peer_tantivy() and not args.no_peer:
        plain, texts = tantivy_search(args.folder, queries, k=k), tantivy_search(args.folder, queries, True, k)
        steps["tantivy (parse + top k)"] = lambda q, d: plain(q)
        steps["tantivy+texts"] = lambda q, d: texts(q)
    us: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.reps):
        for name, step in steps.items():
            t0 = time.perf_counter()
            for q in queries:
                step(q, inputs[q])
            us[name].append((time.perf_counter() - t0) / len(queries) * 1e6)
    print(f"{REPO.name}: {len(queries)} queries x {args.reps}, k = {k}; µs a query, least / first quartile")
    for name, v in us.items():
        print(f"  {name:<26}{min(v):>8.1f}{statistics.quantiles(v, n=4)[0]:>8.1f}")


if __name__ == "__main__":
    main()
