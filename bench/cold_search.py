"""How long one `python -m pipekit search "QUESTION"` process takes from a cold start, and its
peak memory: the one-shot command (an agent's tool call, a shell user's question).

    python bench/cold_search.py [OUTPUT_FOLDER] [--runs 10] [--baseline CHECKOUT] [--json]

OUTPUT_FOLDER defaults to bench/docs_qa.py's index of real documentation (bench/out/docs_qa/ours:
`python bench/docs_qa.py --build`, then `python bench/docs_qa.py`).  Each run is a new process
asking one of the docs_qa questions (bench/docs_qa_questions.tsv, the i-th for run i, the same
for every checkout), its stdout thrown away; the wall time is from starting the process to its
exit, the peak RSS the kernel's (`wait4`'s ru_maxrss) for that process alone.  With --baseline
the other checkout's command runs on the same folder in turn with ours (run i of each back to
back), so a change in the machine's load falls on both alike.  The first run of ours after an
index build writes the memory-mapped copy (pipekit/retrieve/cold.py): it is made before the clock
starts, and its own time is printed apart.  Prints the median and spread per checkout, and the
load average before and after (a busy machine is slower: say which it was).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "bench" / "out" / "docs_qa" / "ours"
QUESTIONS = REPO / "bench" / "docs_qa_questions.tsv"


def questions() -> list[str]:
    lines = QUESTIONS.read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[-1] for line in lines if line.strip() and not line.startswith("#")]


def one(checkout: Path, out: Path, question: str, extra: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one search process run from `checkout`."""
    cmd = [sys.executable, "-m", "pipekit", "search", question, "--set", f"paths.output={out}", *extra]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=checkout, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode()
    proc.stderr.close()
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} (in {checkout}) failed:\n{err[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", nargs="?", type=Path, default=DOCS)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--baseline", type=Path, metavar="CHECKOUT", help="also time another checkout's command")
    ap.add_argument("--json", action="store_true", help="ask for --json output (JSON Lines) instead of the text")
    args = ap.parse_args()
    out = args.folder.resolve()
    if not (out / "04_postings.parquet").exists():
        raise SystemExit(f"no index in {out}: `python bench/docs_qa.py --build`, then `python bench/docs_qa.py`")
    extra = ["--json"] if args.json else []
    qs = questions()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {out}")
    copy = out / "04_index.mmap"
    had = copy.exists()
    first = one(REPO, out, qs[-1], extra)  # writes the copy if it is missing or stale
    print(f"first search of ours {'(copy there already)' if had else '(writes the copy)'}: "
          f"{first[0]:.2f} s, {first[1]:.0f} MB; copy {copy.stat().st_size / 1e6:.1f} MB" if copy.exists() else
          f"first search of ours: {first[0]:.2f} s, {first[1]:.0f} MB; no copy written")
    who = {"ours": REPO} | ({f"at {args.baseline.name}": args.baseline.resolve()} if args.baseline else {})
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in who}
    for i in range(args.runs):
        for name, checkout in who.items():
            got[name].append(one(checkout, out, qs[i % len(qs)], extra))
    print(f"{'who':<22}{'runs':>5}{'median s':>10}{'min s':>8}{'max s':>8}{'peak MB':>9}")
    for name, runs in got.items():
        wall = [w for w, _ in runs]
        print(f"{name:<22}{len(runs):>5}{statistics.median(wall):>10.3f}{min(wall):>8.3f}{max(wall):>8.3f}"
              f"{statistics.median([m for _, m in runs]):>9.0f}")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
