"""Stage 05's index load for a set of queries, up to the first score: one checkout, one process.

    python bench/load_asked.py --out OUT --queries FILE [--checkout PATH] [--all-terms]

What stage 05 does before it scores anything: load the index for these queries (a checkout
that loads only the terms its queries ask, issue 47, is given them; an older one loads every
term) and analyse the queries.  Prints the wall and CPU seconds of that, the postings held
(and their share of all), the row groups of 04_postings decoded, and the process's peak RSS.  `--all-terms`: the queries are one query of every term of
04_terms, the case where loading only what is asked must not cost more than loading it all
(scoring a 200k-term query takes 15 s, which would hide the load in stage 05's own timing).
Run it under `flock /tmp/bench.lock`, checkouts alternating (bench/README.md, "Scale").
"""
from __future__ import annotations

import argparse
import inspect
import json
import resource
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="a folder with stage 04's outputs")
    ap.add_argument("--queries", help="a BEIR queries.jsonl")
    ap.add_argument("--all-terms", action="store_true", help="one query of every term of 04_terms instead")
    ap.add_argument("--checkout", default=str(Path(__file__).resolve().parent.parent))
    args = ap.parse_args()
    sys.path.insert(0, args.checkout)
    import numpy as np
    import pyarrow.parquet as pq

    from pipekit.retrieve.search import OutputReader
    from pipekit.run.stages import load_stage

    if args.all_terms:
        texts = [" ".join(pq.read_table(Path(args.out) / "04_terms.parquet", columns=["term"]).column("term").to_pylist())]
    else:
        texts = [json.loads(line)["text"] for line in open(args.queries, encoding="utf-8") if line.strip()]
    stage = load_stage(5)
    t0, c0 = time.perf_counter(), time.process_time()
    ctx = OutputReader(args.out)
    asks = "queries" in inspect.signature(stage.Index.__init__).parameters
    index = stage.Index(ctx, queries=texts) if asks else stage.Index(ctx)
    scored = index.query_terms(texts)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    total = int(index.df.sum())
    groups = pq.ParquetFile(Path(args.out) / "04_postings.parquet").metadata
    bounds = np.cumsum([0] + [groups.row_group(g).num_rows for g in range(groups.num_row_groups)])
    asked = getattr(index, "asked", None)
    touched = (len(bounds) - 1 if asked is None else  # the row groups holding a run of asked rows
               len({g for lo, hi in zip(asked.lo.tolist(), asked.hi.tolist())
                    for g in range(np.searchsorted(bounds, lo, "right") - 1, np.searchsorted(bounds, hi - 1, "right"))}))
    print(f"{args.checkout}: {len(texts):,} queries ({len(np.unique(np.concatenate([q.ids for q in scored]))):,} terms), "
          f"{'asked terms' if asks else 'every term'}: {len(index.chunk):,} of {total:,} postings held "
          f"({len(index.chunk) / max(total, 1):.1%}), {touched} of {len(bounds) - 1} row groups decoded; "
          f"load + analysis {wall:.2f} s wall, {cpu:.2f} s CPU; peak {peak:,.0f} MB")


if __name__ == "__main__":
    main()
