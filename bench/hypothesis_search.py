"""The long property search, run before a release: the chunker's property tests with far
more random examples than CI can afford.

    python bench/hypothesis_search.py                     # 40x CI's examples, a fresh seed
    python bench/hypothesis_search.py --seeds 3           # three searches, one after the other
    python bench/hypothesis_search.py --seed 12 -k heading_chunks_keep   # one test, a known seed

CI runs tests/test_03_properties.py under the "ci" profile (tests/conftest.py): derandomized,
so the same examples every run and a red build always means changed code.  This script runs
the same tests under the "search" profile — unseeded, 40 times the examples (20,000 for the
heading-rules test) — and prints, for each failure, the shrunk example and the rules it
breaks.  A failure found here is a bug: fix it and copy the example into
tests/test_03_chunking.py as a plain test, so that CI keeps checking it.  (Three chunker
bugs were found this way; unseeded, the 500-example CI test used to hit them about one run
in twenty, failing at random.)

Nothing is timed: it is here, not in tests/, because it takes minutes, not because it
measures speed.
"""
from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=1, help="searches to run, each with its own seed")
    parser.add_argument("--seed", type=int, help="run one search with this seed (to repeat a finding)")
    parser.add_argument("-k", dest="select", default="", help="pytest -k expression: which property tests")
    args = parser.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else [random.randrange(2**31) for _ in range(args.seeds)]
    failed = 0
    for seed in seeds:
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_03_properties.py",
               f"--hypothesis-seed={seed}"] + (["-k", args.select] if args.select else [])
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "HYPOTHESIS_PROFILE": "search"},
                              capture_output=True, text=True)
        took = time.perf_counter() - t0
        print(f"seed {seed}: {'FAILED' if proc.returncode else 'passed'} in {took:.0f} s  "
              f"(repeat: python bench/hypothesis_search.py --seed {seed})", flush=True)
        if proc.returncode:
            failed += 1
            # The shrunk example and the broken rules are in pytest's failure report.
            lines = proc.stdout.splitlines()
            keep = [l for l in lines if l.startswith(("E ", "FAILED")) or "Falsifying" in l]
            print("\n".join(keep[-60:]) or proc.stdout[-4000:], flush=True)
    print(f"{len(seeds) - failed} of {len(seeds)} searches passed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
