"""Stage 01 on real folders, on one core and on every core: MB/s by format (issue 47).

    python bench/stage01_cores.py                          # this checkout, engine.workers 1 and 2
    python bench/stage01_cores.py --baseline /tmp/base01   # and an older checkout (a `git worktree`), in turn

Each run is one `python 01_documents.py --force` process, as a user runs the stage, timed from
start to exit (start-up, listing, hashing, reading and writing included).  MB/s is the bytes of
the folder's files of that format read `ok` (stage 01's `n_bytes`) over that wall time.  A
checkout without the parallel read ignores `engine.workers` on the local engine: its rows
are its one-core figure, run twice.  The folders, each mostly one format:

  python-html  Python 3.11's HTML manual (apt-get install python3.11-doc; Sphinx's leftovers
               skipped by stage 01, as by default)
  r-pdf        R's PDF manuals (apt-get install r-doc-pdf), *.pdf only
  docs_qa      bench/docs_qa.py's Markdown (python bench/docs_qa.py --build)
  docs_qa2     its second set, reStructuredText (python bench/docs_qa.py --collection docs_qa2 --build)

`--cpu` adds each cell's CPU seconds (the stage and the processes it starts, `perf stat -e
task-clock`), least and most over the runs: less at the mercy of the neighbours than the wall time.
Each process runs as a user's Python does, with compiled modules cached (`--as-sandbox`: as
this sandbox's, which recompiles them in every process).  Best of `--runs` (default 2) per cell: the machine is shared, and the least disturbed run is
the closest to the stage's own cost.  Nothing here is a test; the figures go to bench/README.md.

    python bench/stage01_cores.py --readers     # each reader on 1 thread, 2 threads, 2 processes

`--readers` asks the question that chose processes (pipekit/read/parallel.py): each format's
reader (`read_document` on the folder's files of that format, already in memory's page cache)
run in this process alone, on two threads, and on two worker processes, wall time of each.
Two threads are only faster if the reader lets go of the GIL; PDFium is not thread-safe, so its
two threads share a lock (what a lock around it would give the stage).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
FOLDERS = {
    "python-html": (Path("/usr/share/doc/python3.11/html"), "html", []),
    "r-pdf": (Path("/usr/share/R/doc/manual"), "pdf", ["*.pdf"]),
    "docs_qa": (REPO / "bench" / "corpora" / "docs_qa", "markdown", []),
    "docs_qa2": (REPO / "bench" / "corpora" / "docs_qa2", "rst", []),
}


# As a user's Python runs: compiled modules cached in __pycache__ (bench/incremental.py does the
# same).  This sandbox sets PYTHONDONTWRITEBYTECODE, so each stage process compiled pipekit's
# modules from source again (the stage's and the fork server's imports), which no user pays.
# `--as-sandbox` keeps the variable, for figures comparable with session 19's.
USER_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV = USER_ENV


CPU = False  # --cpu: also the CPU of the stage's whole process tree (Linux perf)


def stage01(repo: Path, folder: Path, include: list[str], workers: int, out: Path) -> tuple[float, float | None]:
    """(wall seconds, CPU seconds of the process and every process it started, or None)."""
    args = [sys.executable, "01_documents.py", "--force", "--set", f"documents.input={folder}",
            "--set", f"paths.output={out}", "--set", f"engine.workers={workers}"]
    if include:
        args += ["--set", f"documents.include={include}"]
    if CPU:
        # task-clock counts the fork server and its workers too, which the process's own
        # rusage does not (the server is not waited for).
        args = ["perf", "stat", "-x,", "-e", "task-clock", *args]
    t0 = time.perf_counter()
    proc = subprocess.run(args, cwd=repo, capture_output=True, text=True, env=ENV)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{repo}: stage 01 failed on {folder}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    cpu = float(proc.stderr.strip().splitlines()[-1].split(",")[0]) / 1000 if CPU else None
    return seconds, cpu


def megabytes(out: Path, fmt: str) -> float:
    t = pq.read_table(out / "01_documents.parquet", columns=["format", "status", "n_bytes"])
    ok = pc.and_(pc.equal(t["format"], fmt), pc.equal(t["status"], "ok"))
    return (pc.sum(t["n_bytes"].filter(ok)).as_py() or 0) / 1e6


def readers(runs: int) -> None:
    import threading
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

    sys.path.insert(0, str(REPO))
    from pipekit.read.documents import read_document
    from pipekit.read.parallel import _context
    from pipekit.read.walk import list_inputs

    lock = threading.Lock()

    def locked(entry):
        with lock:
            return read_document(entry)

    print(f"{'folder':<12} {'format':<9} {'MB':>6} {'1 thread':>9} {'2 threads':>10} {'2 processes':>12}")
    for name, (folder, fmt, include) in FOLDERS.items():
        if not folder.is_dir():
            continue
        entries = [e for e in list_inputs(folder, include, [], False, False, 1 << 29)
                   if e.format == fmt and e.skip is None and e.error is None]
        mb = sum(e.n_bytes for e in entries) / 1e6
        one = locked if fmt == "pdf" else read_document
        times = {}
        with ProcessPoolExecutor(2, mp_context=_context()) as procs:
            list(procs.map(read_document, entries[:2]))  # started and warm: its start is not the reader's
            for _ in range(runs):
                for label, run in (("1 thread", lambda: [read_document(e) for e in entries]),
                                   ("2 threads", lambda: list(ThreadPoolExecutor(2).map(one, entries))),
                                   ("2 processes", lambda: list(procs.map(read_document, entries, chunksize=4)))):
                    t0 = time.perf_counter()
                    run()
                    times[label] = min(times.get(label, 1e9), time.perf_counter() - t0)
        print(f"{name:<12} {fmt:<9} {mb:6.1f} " + " ".join(
            f"{times[k]:{w}.2f} s" for k, w in (("1 thread", 7), ("2 threads", 8), ("2 processes", 10))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", type=Path, metavar="PATH", help="an older checkout, run in turn with this one")
    ap.add_argument("--only", default=",".join(FOLDERS), help="folders, comma-separated: " + ", ".join(FOLDERS))
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--workers", default="1,2", help="engine.workers values (default 1,2)")
    ap.add_argument("--readers", action="store_true", help="each reader on 1 thread, 2 threads (PDF: locked), 2 processes")
    ap.add_argument("--as-sandbox", action="store_true",
                    help="keep PYTHONDONTWRITEBYTECODE (modules compiled in every process, as session 19 measured)")
    ap.add_argument("--cpu", action="store_true",
                    help="also the CPU seconds of each run's process tree (perf stat), least to most")
    args = ap.parse_args()
    global ENV, CPU
    ENV = dict(os.environ) if args.as_sandbox else USER_ENV
    CPU = args.cpu
    if args.readers:
        readers(args.runs)
        return
    checkouts = ([("before", args.baseline.resolve())] if args.baseline else []) + [("this checkout", REPO)]
    print(f"{'folder':<12} {'format':<9} {'MB':>6}  {'checkout':<14} {'workers':>7} {'seconds':>8} {'MB/s':>6}")
    for name in args.only.split(","):
        folder, fmt, include = FOLDERS[name]
        if not folder.is_dir():
            print(f"{name:<12} missing: {folder}")
            continue
        best: dict[tuple[str, int], float] = {}
        cpus: dict[tuple[str, int], list[float]] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(args.runs):  # checkouts and worker counts in turn, so a busy moment weighs on all
                for label, repo in checkouts:
                    for workers in map(int, args.workers.split(",")):
                        s, cpu = stage01(repo, folder, include, workers, Path(tmp) / "out")
                        best[label, workers] = min(best.get((label, workers), s), s)
                        cpus.setdefault((label, workers), []).append(cpu)
            mb = megabytes(Path(tmp) / "out", fmt)
        for (label, workers), s in best.items():
            cpu = "" if not CPU else f"  CPU s {min(cpus[label, workers]):.2f}-{max(cpus[label, workers]):.2f}"
            print(f"{name:<12} {fmt:<9} {mb:6.1f}  {label:<14} {workers:>7} {s:8.2f} {mb / s:6.1f}{cpu}")


if __name__ == "__main__":
    main()
