"""How long one query takes through `pipekit.Searcher` (what `python -m pipekit search` and a
program feeding passages to a language model call), once the index is loaded.

    python bench/search_speed.py OUTPUT_FOLDER [OUTPUT_FOLDER ...] [--queries FILE] [--repeat 3] [--read-texts]

For each output folder (one made by run_pipeline.py) it loads a Searcher, asks every query
of the folder's stage-05 results (or --queries, one a line) one at a time, `--repeat`
times, and prints the median and 90th percentile milliseconds per query, the chunks in
the index, and the machine's load average (a busy machine is slower: say which it was).
With --read-texts the Searcher keeps no texts (keep_texts=False): each search reads its hits'
texts from 03_chunks.parquet, as `python -m pipekit search "QUERY"` does for a query or two.
Prints figures only; the README's search-speed sentence quotes them.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipekit import Searcher  # noqa: E402
from pipekit.run.io import read_table  # noqa: E402


def folder_queries(out: Path) -> list[str]:
    return sorted(set(read_table(out / "05_results.parquet", ["query"]).column("query").to_pylist()))


def timed(searcher: Searcher, queries: list[str], repeat: int) -> list[float]:
    ms = []
    for _ in range(repeat):
        for q in queries:
            t0 = time.perf_counter()
            searcher.search(q)
            ms.append((time.perf_counter() - t0) * 1000)
    return ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--queries", type=Path, help="one query a line (default: the folder's stage-05 queries)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--read-texts", action="store_true", help="keep no texts: read each search's from 03_chunks")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'folder':<44}{'chunks':>9}{'queries':>9}{'load s':>8}{'median ms':>11}{'p90 ms':>9}")
    for out in args.folders:
        t0 = time.perf_counter()
        searcher = Searcher(out, keep_texts=not args.read_texts)
        load = time.perf_counter() - t0
        queries = (args.queries.read_text().split("\n") if args.queries else folder_queries(out))
        queries = [q for q in queries if q.strip()][:300]
        ms = sorted(timed(searcher, queries, args.repeat))
        p90 = ms[int(0.9 * (len(ms) - 1))]
        print(f"{str(out)[-43:]:<44}{searcher.index.stats['N']:>9,}{len(queries):>9}{load:>8.2f}"
              f"{statistics.median(ms):>11.1f}{p90:>9.1f}")


if __name__ == "__main__":
    main()
