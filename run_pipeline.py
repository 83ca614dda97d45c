"""Run the five stages in order, skipping the ones whose output is still fresh.

    python run_pipeline.py                  # run what is stale, skip what is fresh
    python run_pipeline.py --from 3         # start at stage 03 (earlier ones must exist)
    python run_pipeline.py --force          # run every selected stage regardless, reusing no row
    python run_pipeline.py --status         # say, per stage, fresh or stale and why; run nothing

A stage is fresh when its output exists and what the output's metadata recorded — the
stage's config values, its upstream output's fingerprint, its code, its input files —
is what it would be now.  A stale stage runs, and so does everything after it.

On a large input each stage runs in a child forked from this process after its
imports (pipekit/run/isolate.py): the run's peak is its largest stage's, not what one process
kept of every stage before it.
PIPEKIT_ONE_PROCESS=1 keeps them all in this process (a profiler, a debugger).
"""
from __future__ import annotations

import argparse
import functools
import sys
import time
from datetime import datetime
from pathlib import Path

from pipekit.run.malloc import arrow_on_malloc, release_freed_memory

if __name__ == "__main__":
    from pipekit.read.early import begin_pipeline

    # A BEIR corpus's content hash and its hashing process's server, started on the core the
    # imports below leave idle (pipekit/read/early.py): 0.16-0.32 s of stage 01 at 200k passages.
    begin_pipeline(sys.argv[1:])
    arrow_on_malloc()  # before pyarrow loads: what Arrow frees is handed back between stages (pipekit/run/malloc.py)

from pipekit.cli import run_stage  # noqa: E402 (the imports below load pyarrow)
from pipekit.run.commands import add_common_args, finish, guard_stdout, imports_done, parse_args, pipe_closed, user_options
from pipekit.run.config import load_config
from pipekit.run.engine import make_engine
from pipekit.run.errors import PipelineError
from pipekit.cli import why_stale
from pipekit.run.io import defer_pandas, settle, steady_memory
from pipekit.run.isolate import fits, run_in_child, wanted, worth_a_child
from pipekit.run.overrides import made_with_other_settings
from pipekit.tools.show import human_size
from pipekit.run.stages import STAGES, load_stage


def plan(cfg: dict, first: int, last: int, force: bool, walks: dict | None = None) -> list[tuple[int, list[str]]]:
    """[(stage number, reasons to run it)]; empty reasons mean fresh, skip it.
    `walks` receives stage 01's walk of the input folder, for stage 01 to reuse."""
    out_dir = Path(cfg["paths"]["output"])
    steps, upstream_runs = [], False
    for stage in STAGES[first - 1:last]:
        if force:
            reasons = ["--force"]
        elif upstream_runs:
            reasons = [f"upstream stage {stage.number - 1:02d} runs first"]
        else:
            reasons = why_stale(stage, cfg, out_dir, walks)
        upstream_runs = upstream_runs or bool(reasons)
        steps.append((stage.number, reasons))
    return steps


def describe(path: Path) -> str:
    if not path.exists():
        return "—"
    from pipekit.run import io

    rows = io.row_count(path)  # a file, or a dataset folder (the Dask engine's outputs)
    when = datetime.fromtimestamp(path.stat().st_mtime).strftime("%Y-%m-%d %H:%M:%S")
    return f"{rows:>9,} rows  {human_size(io.output_size(path)):>10}  {when}"


def print_status(cfg: dict, steps) -> None:
    out_dir = Path(cfg["paths"]["output"])
    for number, reasons in steps:
        stage = STAGES[number - 1]
        main = out_dir / stage.outputs[0]
        state = "fresh" if not reasons else "stale"
        print(f"{stage.label:<17} {main.name:<24} {describe(main):<45} {state}")
        for r in reasons:
            print(f"{'':<19}why: {r}")


def main(argv: list[str] | None = None, isolate: bool = False) -> int:
    """The command; `isolate`: each stage in a forked child (pipekit/run/isolate.py), as the
    command line does.  A caller in this process (a test, a notebook) keeps every stage here."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--from", dest="first", type=int, default=1, choices=range(1, 6), metavar="N")
    parser.add_argument("--to", dest="last", type=int, default=5, choices=range(1, 6), metavar="N")
    parser.add_argument("--force", action="store_true", help="run every selected stage even if fresh")
    parser.add_argument("--status", action="store_true", help="print fresh/stale per stage and run nothing")
    parser.add_argument("--explain", action="append_const", const="retrieval.explain=true", dest="overrides",
                        help="same as --set retrieval.explain=true (stage 05 shows each score term by term)")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(parser, argv, "run_pipeline")
    if args.first > args.last:
        parser.error(f"--from {args.first} comes after --to {args.last}")
    out = guard_stdout()  # `| head` cuts the printing, never the run (pipekit/cli.py)
    defer_pandas()  # no stage needs pandas: 0.25 s less a run (pipekit/run/io.py)
    steady_memory()  # jemalloc: no stalls for huge pages (pipekit/run/io.py)
    try:
        cfg = load_config(args.config, args.overrides)
        walks: dict = {}
        steps = plan(cfg, args.first, args.last, args.force, walks)
        if args.status:
            print_status(cfg, steps)
            note = made_with_other_settings(cfg, args.overrides)  # pipekit/run/overrides.py: why all is stale
            if note:
                print(note)
            return 0
        t0 = time.perf_counter()
        engine = make_engine(cfg)  # one cluster for the whole run, started by the first stage that runs
        try:
            for number, reasons in steps:
                stage = STAGES[number - 1]
                if not reasons:
                    print(f"{stage.label}: fresh, skipped")
                    continue
                print(f"{stage.label}: running ({reasons[0]}{', …' if len(reasons) > 1 else ''})")
                body = functools.partial(run_stage, number, load_stage(number).run, cfg, options=user_options(argv),
                                         engine=engine, force=args.force, walk=walks.get(number))
                if isolate and fits(engine) and worth_a_child(stage, cfg):
                    # A child per large stage: what it allocated ends with it, and the run's peak
                    # is the largest stage's, not what one process kept (pipekit/run/isolate.py).
                    run_in_child(body)
                    continue
                body()
                # What the stage freed, handed back before the next one grows: nothing of it is
                # referenced (Arrow's pool holds 0 bytes), but glibc's heaps and Arrow's pool kept
                # 5-15 MB a stage at 200k passages (bench/README.md, "What one process keeps").
                release_freed_memory()
        finally:
            engine.close()
            settle()  # the old outputs' second names gone before main() returns (pipekit/run/io.py)
        print(f"pipeline: done in {time.perf_counter() - t0:.2f} s")
    except PipelineError as exc:
        print(f"run_pipeline: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("run_pipeline: interrupted; outputs of finished stages are kept", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return pipe_closed()
    return pipe_closed("run_pipeline") if out.cut else 0


if __name__ == "__main__":
    imports_done()  # the modules' objects out of the cycle collector's walks (pipekit/run/commands.py)
    finish(main(isolate=wanted()))  # without the interpreter's teardown: 0.05 s of a one-file rerun (pipekit/run/commands.py)
