"""Two moments that wall-clock benches on a shared machine blur: when stage 01's first page is
read, and what a splice's fsync waits for (issue 47, branch `inc4`).

    python bench/start_and_commit.py --first-page --baseline /tmp/base22 --runs 4
    python bench/start_and_commit.py --splice bench/out/incremental/this/runs/01_documents.parquet --runs 8

`--first-page`: one `01_documents.py --force` process on Python's HTML manual (as
bench/stage01_cores.py runs it, engine.workers 2), under `strace -f -ttt -e
trace=openat,execve,exit_group`: seconds from the start until a reading process first opens a
page, until the stage's process opens pyarrow's library, until the last page is opened, and to
the end.  strace slows every traced call (the imports' opens most), so read the columns against
each other, this checkout beside `--baseline`, in turn, not as the stage's own times.

`--splice FILE`: FILE's row groups spliced into a new file and fsync'd, as a rerun's
ParquetSink does (pipekit/run/parquet_copy.py), with each group's writeback started after its
copy (`start_writeback`, the code) and without (the call made a no-op), in turn, after an
`os.sync()` each: milliseconds, median of `--runs`.  Nothing here is a test; the figures go to
bench/README.md.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MANUAL = Path("/usr/share/doc/python3.11/html")
USER_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def first_page(repo: Path) -> tuple[float, float, float, float]:
    out = Path(tempfile.mkdtemp())
    log = out.with_suffix(".strace")
    try:
        subprocess.run(["strace", "-f", "-ttt", "-e", "trace=openat,execve,exit_group", "-o", str(log),
                        sys.executable, "01_documents.py", "--force", "--set", f"documents.input={MANUAL}",
                        "--set", f"paths.output={out}", "--set", "engine.workers=2"],
                       cwd=repo, env=USER_ENV, capture_output=True, check=True)
        lines = [line.split(None, 2) for line in log.read_text().splitlines()]
        main, t0 = lines[0][0], float(lines[0][1])
        pages = [float(t) for pid, t, call in lines
                 if pid != main and call.startswith("openat") and f"{MANUAL}/" in call and '.html"' in call]
        arrow = [float(t) for pid, t, call in lines if pid == main and call.startswith("openat") and "pyarrow/lib" in call]
        end = float([t for pid, t, _ in lines if pid == main][-1])
        return pages[0] - t0, (arrow[0] - t0) if arrow else float("nan"), pages[-1] - t0, end - t0
    finally:
        shutil.rmtree(out, ignore_errors=True)
        log.unlink(missing_ok=True)


def splice_ms(source: Path, runs: int) -> dict[str, list[float]]:
    sys.path.insert(0, str(REPO))
    from pipekit.run import parquet_copy

    footer = parquet_copy.read_footer(source)
    groups = parquet_copy.row_groups(footer)
    real = parquet_copy.start_writeback
    times: dict[str, list[float]] = {"with writeback": [], "without": []}
    target = Path(tempfile.mkdtemp()) / "spliced.parquet"
    try:
        for _ in range(runs):
            for name in times:
                parquet_copy.start_writeback = real if name == "with writeback" else (lambda fd, start, n: None)
                os.sync()
                t0 = time.perf_counter()
                parquet_copy.splice(target, [(source, g) for g in groups], footer)
                times[name].append((time.perf_counter() - t0) * 1000)
                target.unlink()
    finally:
        parquet_copy.start_writeback = real
        shutil.rmtree(target.parent, ignore_errors=True)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--first-page", action="store_true")
    ap.add_argument("--baseline", type=Path, help="an older checkout for --first-page, run in turn")
    ap.add_argument("--splice", type=Path, metavar="FILE", help="a Parquet output to splice")
    ap.add_argument("--runs", type=int, default=4)
    args = ap.parse_args()
    if args.first_page:
        repos = ([args.baseline.resolve()] if args.baseline else []) + [REPO]
        got: dict[Path, list] = {r: [] for r in repos}
        for _ in range(args.runs):
            for r in repos:
                got[r].append(first_page(r))
        for r, rows in got.items():
            cols = [statistics.median(c) for c in zip(*rows)]
            print(f"{r}: first page {cols[0]:.2f} s, pyarrow opened {cols[1]:.2f} s, last page {cols[2]:.2f} s, "
                  f"end {cols[3]:.2f} s (medians of {args.runs}; first pages {' '.join(f'{x[0]:.2f}' for x in rows)})")
    if args.splice:
        for name, ms in splice_ms(args.splice, args.runs).items():
            print(f"{name:<15} median {statistics.median(ms):5.1f} ms  ({' '.join(f'{x:.0f}' for x in ms)})")


if __name__ == "__main__":
    main()
