"""A real documentation folder, run after run: what one added, edited or removed file costs.

    python bench/incremental.py --build   # once: gather the folder (below) into bench/corpora/incremental
    python bench/incremental.py           # full run, then one file added, one edited, one removed
    python bench/incremental.py --rounds 3 --baseline /tmp/base   # in turn with an older checkout; medians

The folder is what an engineer points the pipeline at: Debian's Python 3.11 HTML manual
as installed (`apt-get install python3.11-doc`: 530 pages and the Sphinx build's
leftovers, which stage 01 skips), four of R's PDF manuals (`apt-get install r-doc-pdf`)
and the Markdown of bench/docs_qa.py's projects (`python bench/docs_qa.py --build`),
when present.

Each step is one `run_pipeline.py` process, as a user runs it, timed from start to exit.
After each change the output folder is compared with a `--force` run on the same input
(same rows, order, values and provenance): reuse that changed an output would be a bug,
not a speed-up.  Before each timed step the previous runs' writes are flushed to disk
(`os.sync`): a user's edit comes long after the last run's write-back.  The goal (issue
"a changed file costs its own work"): one added file costs at most 10 % of the full run.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from pipekit.run.io import read_meta  # noqa: E402
from pipekit.run.stages import STAGES  # noqa: E402

CORPUS = REPO / "bench" / "corpora" / "incremental"
OUT = REPO / "bench" / "out" / "incremental"
PYTHON_DOC = Path("/usr/share/doc/python3.11/html")
R_MANUALS = Path("/usr/share/R/doc/manual")
PDFS = ("R-intro.pdf", "R-data.pdf", "R-admin.pdf", "R-FAQ.pdf")
MARKDOWN = REPO / "bench" / "corpora" / "docs_qa"
QUESTIONS = ["how do I create a virtual environment with venv", "read a csv file into a data frame",
             "what does the walrus operator do", "configure a proxy for package downloads"]


def build() -> None:
    if not PYTHON_DOC.is_dir():
        raise SystemExit(f"{PYTHON_DOC} is missing: apt-get install python3.11-doc")
    if CORPUS.exists():
        shutil.rmtree(CORPUS)
    shutil.copytree(PYTHON_DOC, CORPUS / "python-3.11", symlinks=False)
    for name in PDFS:
        if (R_MANUALS / name).exists():
            (CORPUS / "r-manuals").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(R_MANUALS / name, CORPUS / "r-manuals" / name)
    if MARKDOWN.is_dir():
        shutil.copytree(MARKDOWN, CORPUS / "markdown")
    files = [p for p in CORPUS.rglob("*") if p.is_file()]
    print(f"{CORPUS.relative_to(REPO)}: {len(files):,} files, {sum(p.stat().st_size for p in files) / 1e6:.1f} MB")


# As a user's Python runs: compiled modules cached in __pycache__.  A sandbox that sets
# PYTHONDONTWRITEBYTECODE (this project's does) recompiles pipekit in every process, about
# 0.15 s that a rerun would be charged and no user pays.
USER_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


EXTRA_SETS: list[str] = []  # --set KEY=VALUE given to this script, passed to every run


def pipeline(out: Path, *args: str, repo: Path = REPO) -> tuple[float, str]:
    sets = ["--set", f"documents.input={CORPUS}", "--set", f"paths.output={out}",
            "--set", f"retrieval.queries={QUESTIONS}", "--set", "retrieval.qrels=null"]
    for kv in EXTRA_SETS:
        sets += ["--set", kv]
    # The previous run's writes reach the disk first, as they have long before a user
    # edits a file: a timed step should not wait for the forced run's write-back.
    os.sync()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "run_pipeline.py", *sets, *args], cwd=repo,
                          capture_output=True, text=True, env=USER_ENV)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"run_pipeline failed:\n{proc.stdout}\n{proc.stderr}")
    # Each stage's own time, from its summary line ("03_chunking: ... in 0.41 s → ...").
    stages = re.findall(r"^(\d\d)_\w+: .* in ([\d.]+) s →", proc.stdout, re.M)
    summary = " ".join(f"{n}:{float(t):.1f}" for n, t in stages) or "all fresh"
    # With indexing.dense_model: how many chunks stage 04 embedded, and how many it copied.
    vec = re.search(r"04_vectors\.parquet: ([\d,]+) chunks embedded .*$", proc.stdout, re.M)
    if vec:
        copied = re.search(r", ([\d,]+) copied from the previous run", vec.group(0))
        summary += f" (vectors: {vec.group(1)} embedded, {copied.group(1) if copied else 0} copied)"
    return seconds, summary


def same_outputs(a: Path, b: Path) -> list[str]:
    """Names of the outputs that differ between two output folders (empty: identical)."""
    differ = []
    for name in [n for s in STAGES for n in s.outputs]:
        x, y = pd.read_parquet(a / name), pd.read_parquet(b / name)
        mx, my = read_meta(a / name), read_meta(b / name)
        same_rows = list(x.columns) == list(y.columns) and len(x) == len(y) and all(
            x[c].map(repr).tolist() == y[c].map(repr).tolist() for c in x.columns)
        if not same_rows or mx["fingerprint"] != my["fingerprint"] or mx["inputs"] != my["inputs"]:
            differ.append(name)
    return differ


ADDED = CORPUS / "markdown" / "notes" / "new.md"
EDITED = CORPUS / "python-3.11" / "library" / "venv.html"
REMOVED = CORPUS / "python-3.11" / "library" / "winsound.html"


def sequence(repo: Path, out: Path) -> list[tuple]:
    """The full run, then one file added, one edited, one removed, in `repo`'s checkout:
    (step, seconds, outputs that differ from a forced run or None, seconds by stage)."""
    runs, forced = out / "runs", out / "forced"
    shutil.rmtree(out, ignore_errors=True)
    ADDED.unlink(missing_ok=True)
    full, per_stage = pipeline(runs, "--force", repo=repo)
    rows = [("full run (--force)", full, None, per_stage)]
    saved_edit, saved_removed = EDITED.read_bytes(), REMOVED.read_bytes()
    try:
        steps = [
            ("one file added (80 bytes of Markdown)",
             lambda: (ADDED.parent.mkdir(parents=True, exist_ok=True),
                      ADDED.write_text("# Notes\n\nThe pager rotates weekly; ask in #ops for a swap.\n"))),
            ("one file edited (venv.html)",
             lambda: EDITED.write_bytes(saved_edit.replace(b"</body>", b"<p>Edited for the bench.</p></body>"))),
            ("one file removed (winsound.html)", lambda: REMOVED.unlink()),
        ]
        for label, change in steps:
            change()
            seconds, per_stage = pipeline(runs, repo=repo)
            pipeline(forced, "--force", repo=repo)
            rows.append((label, seconds, same_outputs(runs, forced), per_stage))
    finally:
        ADDED.unlink(missing_ok=True)
        EDITED.write_bytes(saved_edit)
        REMOVED.write_bytes(saved_removed)
    return rows


def print_rows(title: str, rows: list[tuple]) -> None:
    full = rows[0][1]
    print(f"\n{title}\n{'step':<40} {'seconds':>8} {'of full':>8}  {'equal to --force':<17} seconds by stage")
    for label, seconds, differ, per_stage in rows:
        equal = "" if differ is None else ("yes" if not differ else "NO: " + ", ".join(differ))
        print(f"{label:<40} {seconds:8.2f} {seconds / full:8.1%}  {equal:<17} {per_stage}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", action="store_true", help="gather the folder into bench/corpora/incremental")
    ap.add_argument("--rounds", type=int, default=1, help="run the sequence this often (the median is printed)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting for every run, e.g. indexing.dense_model=wordllama (vectors: what they cost)")
    ap.add_argument("--baseline", type=Path, metavar="PATH",
                    help="another checkout (a `git worktree` of an earlier commit), run in turn with this one")
    args = ap.parse_args()
    EXTRA_SETS.extend(args.set)
    if args.build:
        build()
        return
    if not CORPUS.is_dir():
        raise SystemExit("no folder yet: python bench/incremental.py --build")
    files = sum(1 for p in CORPUS.rglob("*") if p.is_file())
    print(f"folder: {CORPUS.relative_to(REPO)} ({files:,} files); each step one run_pipeline.py process")
    checkouts = [("before", args.baseline.resolve())] if args.baseline else []
    checkouts.append(("this checkout" if args.baseline else "", REPO))
    results: dict[str, list] = {name: [] for name, _ in checkouts}
    for r in range(args.rounds):  # checkouts in turn, so a busy moment weighs on both
        for name, repo in checkouts:
            rows = sequence(repo, OUT / (name.replace(" ", "-") or "this"))
            results[name].append(rows)
            print_rows(f"{name or 'run'} {r + 1} of {args.rounds}" if args.rounds > 1 or name else "", rows)
    if args.rounds > 1 or args.baseline:
        print("\nmedian share of the full run, each step (" + ", ".join(
            f"{name or 'run'}" for name, _ in checkouts) + ")")
        for i, (label, *_) in enumerate(results[checkouts[0][0]][0][1:], start=1):
            shares = [statistics.median(rows[i][1] / rows[0][1] for rows in results[name]) for name, _ in checkouts]
            fulls = [statistics.median(rows[0][1] for rows in results[name]) for name, _ in checkouts]
            print(f"{label:<40} " + "   ".join(f"{s:6.1%} (full {f:.1f} s)" for s, f in zip(shares, fulls)))


if __name__ == "__main__":
    main()
