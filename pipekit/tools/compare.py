"""`python -m pipekit compare [A B]`: what changed between two evaluated runs.

Reads `05_history.parquet` in `paths.output` (stage 05 appends every run with
judgements to it) and prints, for runs A and B (default: the last two), the config
values that differ, the mean metrics side by side, and the queries whose metrics moved
most — the question after every tweak is not "is the mean higher?" but "which
questions did it help, and which did it hurt?".  A run is named by its number (as
`--list` prints them; negative counts from the end: -1 is the last) or by the start of
its fingerprint.  Writes nothing.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipekit.run.commands import add_common_args, parse_args, run_command, user_options
from pipekit.run.config import load_config
from pipekit.run.overrides import compare_why_not, unapplied_lines
from pipekit.run.errors import PipelineError
from pipekit.tools.history import HISTORY, Run, config_changes, read_history, runs

MOVED = 1e-9  # a change smaller than this is float noise, not a moved query


def pick(all_runs: list[Run], name: str) -> Run:
    """A run by number (negative from the end) or by fingerprint prefix.  A prefix may be
    all digits (one fingerprint in 40 starts with eight): a number of six digits or more
    that no run has is tried as a prefix before it is called missing (a short one is a
    run number: `7` must not pick the run whose fingerprint happens to start with 7)."""
    try:
        n = int(name)
    except ValueError:
        n = None
    if n is not None:
        if n < 0 and -n <= len(all_runs):
            return all_runs[n]
        for r in all_runs:
            if r.number == n:
                return r
    found = [r for r in all_runs if r.fingerprint.startswith(name)] if n is None or len(name) >= 6 else []
    if len(found) == 1:
        return found[0]
    if n is not None and not found:
        raise PipelineError(f"no run {n}: the history holds runs {all_runs[0].number} to {all_runs[-1].number}")
    raise PipelineError(f"{'no run' if not found else 'several runs'} with fingerprint {name!r}; "
                        f"`python -m pipekit compare --list` lists them")


def moved_queries(a: Run, b: Run) -> list[tuple[str, dict[str, tuple[float, float]]]]:
    """Queries in both runs whose metrics changed, most moved first: by the first
    metric's change (nDCG@10), then the next ones'."""
    metrics = [m for m in b.metrics if m in a.metrics]
    rows = []
    for q in common_queries(a, b):
        pairs = {m: (a.value(q, m), b.value(q, m)) for m in metrics}
        if any(x is None or y is None for x, y in pairs.values()):
            continue
        if any(abs(y - x) > MOVED for x, y in pairs.values()):
            rows.append((q, pairs))
    rows.sort(key=lambda r: tuple(-abs(y - x) for x, y in r[1].values()))
    return rows


def common_queries(a: Run, b: Run) -> list[str]:
    """Query ids both runs asked, with the same text (query 1 of another file is another question)."""
    return [q for q, text in b.queries.items() if a.queries.get(q) == text]


def compare_lines(a: Run, b: Run, top: int = 10) -> list[str]:
    lines = [f"A = {a.label}", f"B = {b.label}", ""]
    changes = config_changes(a.config, b.config)
    lines += ["config A -> B: " + ("none (the same settings: a rerun, or the inputs changed)" if not changes
                                   else changes[0])]
    lines += [" " * 15 + c for c in changes[1:]]
    metrics = [m for m in b.metrics if m in a.metrics]
    header = f"{'query':<9}" + "".join(f"{m + ' A -> B':>24}" for m in metrics)
    both = common_queries(a, b)
    only = (len(a.queries) - len(both)) + (len(b.queries) - len(both))
    mean = "   (the mean)" if not only else "   (the means of different queries: not comparable)"
    lines += ["", header, f"{'all':<9}" + "".join(f"{fmt_move(a.value('all', m), b.value('all', m)):>24}"
                                            for m in metrics) + mean]
    moved = moved_queries(a, b)
    lines += ["", f"queries that moved most: {len(moved)} of {len(both)}"]
    if not both:
        lines.append("  none: no query is in both runs")
    elif not moved:
        lines.append("  none: every query scores the same in both runs")
    for q, pairs in moved[:top]:
        text = b.queries.get(q) or a.queries.get(q) or ""
        lines.append(f"{q:<9}" + "".join(f"{fmt_move(x, y):>24}" for x, y in pairs.values()) + f"   {text}")
    if len(moved) > top:
        lines.append(f"… and {len(moved) - top} more (--top {len(moved)} shows them all)")
    if only:
        lines.append(f"{only} queries are in one run only (the queries changed): not compared")
    return lines


def fmt_move(x: float | None, y: float | None) -> str:
    if x is None or y is None:
        return "—"
    return f"{x:.3f} -> {y:.3f} {y - x:+.3f}"


def list_lines(all_runs: list[Run]) -> list[str]:
    first = all_runs[0].metrics[0] if all_runs else "nDCG@10"
    lines = [f"{'run':>4}  {'time (UTC)':<19}  {'fingerprint':<16}  {first + ' (all)':>13}  changed from the run before"]
    for r in all_runs:
        v = r.value("all", first)
        lines.append(f"{r.number:>4}  {r.time:%Y-%m-%d %H:%M:%S}  {r.fingerprint:<16}  "
                     f"{'—' if v is None else f'{v:.4f}':>13}  {'; '.join(r.changed) or '—'}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipekit compare", description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="*", metavar="RUN", help="two runs (number, -1 = last, or fingerprint "
                        "prefix); default: the last two")
    parser.add_argument("--top", type=int, default=10, metavar="N", help="queries shown (default 10)")
    parser.add_argument("--list", action="store_true", help="list the runs in the history and compare nothing")
    add_common_args(parser)
    args = parse_args(parser, argv)

    def body():
        cfg = load_config(args.config, args.overrides)
        for line in unapplied_lines("python -m pipekit compare", args.overrides, compare_why_not,
                                    user_options(sys.argv[1:] if argv is None else argv)):
            print(line, file=sys.stderr)
        out = Path(cfg["paths"]["output"])
        all_runs = runs(read_history(out))
        if args.list:
            print("\n".join(list_lines(all_runs)) if all_runs else f"no runs in {out / HISTORY} yet")
            return 0
        if len(args.runs) not in (0, 2):
            raise PipelineError("give two runs to compare, or none for the last two")
        if len(all_runs) < (2 if not args.runs else 1):
            raise PipelineError(
                f"{out / HISTORY} holds {len(all_runs)} run{'s' * (len(all_runs) != 1)}: compare needs two. "
                f"Stage 05 adds one each time it runs with judgements (retrieval.qrels): change a setting "
                f"and run `python run_pipeline.py` again")
        a, b = (pick(all_runs, n) for n in args.runs) if args.runs else all_runs[-2:]
        print("\n".join(compare_lines(a, b, args.top)))

    return run_command("compare", body)
