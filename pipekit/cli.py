"""One stage run: its context, its commit-or-abort, its summary — the stages wired to the plumbing.

A stage file defines `run(ctx)` with its own algorithm and ends with
`raise SystemExit(stage_main(N, run))`.  Everything else — `--config`, `--set`, finding
the upstream output (or saying which stage to run first), temp-file-and-rename writes
with provenance metadata, the progress bar, the one-line summary, turning a
PipelineError into one line on stderr and a non-zero exit — happens here, once.

This is the one module that knows both the plumbing (pipekit/run/) and two pieces of the
stages' machinery the fingerprints need: stage 01's walk of its input folder
(pipekit/read/walk.py) and stage 04's model identity (pipekit/index/dense.py).  The
plumbing itself never imports a stage's machinery; it is handed these from here.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import nullcontext
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator

import pyarrow as pa

from pipekit.run import io
from pipekit.run.config import load_config
from pipekit.run.engine import RowRange, make_engine, progress_bar, row_ranges, watched
from pipekit.run.commands import (PipeProof, add_common_args, imports_done, mark_stage_done, parse_args, pipe_closed,
                                  pipe_proof_stdout, preview, require_output, user_options)
from pipekit.run.errors import PipelineError
from pipekit.run.malloc import keep_for_the_stage, stage_ends_process
from pipekit.index.dense import identity
from pipekit.read.walk import input_listing
from pipekit.run import freshness
from pipekit.run.freshness import inputs_record
from pipekit.run.hashing import digest
from pipekit.run.incremental import row_fingerprint
from pipekit.run.stages import Stage, get_stage


def model_identity(stage: Stage, cfg: dict) -> dict | None:
    """Stage 04's model as its output records it (None for other stages or BM25 alone)."""
    spec = cfg["indexing"].get("dense_model") if stage.number == 4 else None
    return identity(spec) if spec else None


def why_stale(stage: Stage, cfg: dict, output_dir: Path, walks: dict | None = None) -> list[str]:
    """Reasons the stage must run (pipekit/run/freshness.py), with stage 01's walk and stage
    04's model brought in.  `walks`: where stage 01's walk is left for the run that follows
    (run_pipeline), so a folder of thousands of files is walked once per run, not once to
    judge and again to read."""
    def walk(previous: Path) -> tuple:
        made = input_listing(cfg, previous)
        if walks is not None:
            walks[1] = made
        return made

    return freshness.why_stale(stage, cfg, output_dir, walk, model_identity(stage, cfg))


class StageContext:
    """What a stage's run() may use. Outputs become visible only when the stage succeeds."""

    def __init__(self, stage: Stage, cfg: dict, quiet: bool = False, options: list[str] = (), engine=None,
                 force: bool = False, walk: tuple | None = None):
        self.stage = stage
        self.options = list(options)  # the user's --config/--set, repeated in "run this first" hints
        self.engine = engine if engine is not None else make_engine(cfg, quiet)
        self.cfg = cfg
        self.section = cfg[stage.section]
        self.output_dir = Path(cfg["paths"]["output"])
        self.quiet = quiet
        self.force = force  # `--force`: make every row anew, reuse nothing from the last run
        self.notes: list[str] = []
        self._shows: list[Callable[[], None]] = []
        self.upstream_rows: int | None = None
        # Recorded in the output: with the file's modification time (when it was finished)
        # it gives the stage's duration, which the report shows.
        self.started_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        self._sinks: list[io.ParquetSink] = []
        self._texts: list[tuple[Path, Path]] = []
        upstream_fp = upstream_rows_fp = None
        self.listing = None
        if stage.upstream is not None:
            self.upstream_path = self.require(stage.upstream.outputs[0], stage.upstream)
            upstream_meta = io.read_meta(self.upstream_path) or {}
            upstream_fp, upstream_rows_fp = upstream_meta.get("fingerprint"), upstream_meta.get("row_fingerprint")
        else:
            self.upstream_path = None
            # Stage 01's inputs are files: listed (and hashed where they changed) once, here,
            # or just before by run_pipeline's freshness check (`walk`), which is then reused.
            # A run that reads every file starts stage 01's reading processes as soon as the
            # walk knows the files, beside the hashing (pipekit/read/parallel.py, start_early).
            early = None
            if walk is None and self.engine.kind == "local" and (force or not self.path(stage.outputs[0]).exists()):
                from pipekit.read.parallel import start_early, workers_wanted  # stage 01's own (the readers)

                early = lambda entries: start_early(entries, workers_wanted(cfg["engine"]["workers"]))  # noqa: E731
            self.entries, self.listing = walk or input_listing(cfg, self.path(stage.outputs[1]), early)
            if "pipekit.read.parallel" in sys.modules:  # rows read ahead are checked against it (early.py)
                sys.modules["pipekit.read.parallel"].listed(self.listing)
        self.inputs = inputs_record(stage, cfg, upstream_fp, self.listing, model_identity(stage, cfg))
        self.fingerprint = digest(self.inputs)
        # What every row depends on besides its own document (pipekit/run/incremental.py).
        # An upstream output without one (made by hand, or by older code) vouches for no row:
        # then nothing is reused downstream of it.
        self.row_fingerprint = None if stage.upstream and upstream_rows_fp is None else \
            row_fingerprint(upstream_rows_fp, self.inputs["config"], self.inputs["code"])

    # --- reading -------------------------------------------------------------------------
    def path(self, name: str) -> Path:
        return self.output_dir / name

    def require(self, name: str, made_by: Stage) -> Path:
        """The path of another stage's output, or an error saying which command makes it."""
        return require_output(self.output_dir, name, made_by, self.options)

    def read_upstream(self, columns: list[str] | None = None) -> pa.Table:
        table = io.read_table(self.upstream_path, columns)
        self.upstream_rows = table.num_rows
        return table

    def iter_upstream(self, columns: list[str] | None = None,
                      batch_size: int = 2048) -> Iterator[pa.RecordBatch]:
        self.upstream_rows = io.row_count(self.upstream_path)
        return io.iter_batches(self.upstream_path, columns, batch_size)

    def upstream_parts(self, few: bool = False) -> list[RowRange]:
        """The upstream output's rows as partitions for `map_partitions`: one range per
        engine.partition_rows rows (with the local engine by default: the whole file).
        `few=True` is for a stage whose partitions cost extra work each and a merge (04:
        every partition analyses its own vocabulary): the local engine then always takes
        the whole file, a cluster no more than two partitions per worker — unless
        engine.partition_rows asks for smaller ones (memory per task).  The upstream
        output may be a file or a dataset folder: a range may span its part files."""
        n = self.upstream_rows = io.row_count(self.upstream_path)
        return row_ranges(self.upstream_path, n, self.engine.rows_per_part(n, few))

    def map_partitions(self, fn, parts: list, desc: str | None = None, total: int | None = None,
                       unit: str = "doc"):
        """`fn(part)` for every partition, wherever the engine runs it; the results come
        back in partition order (see pipekit/run/engine.py).  With `total` (files, documents)
        the local engine's bar counts what `fn` reports through engine.advance."""
        desc = desc or self.stage.label
        if self.engine.kind == "local" and total is not None:
            return self._watched(self.engine.map_partitions(fn, parts), total, desc, unit)
        if len(parts) == 1 and self.engine.kind == "local":  # one streaming partition: count what it yields
            return self.progress(self.engine.map_partitions(fn, parts), desc=desc, unit="batch")
        return self.engine.map_partitions(fn, parts, progress=progress_bar(self.quiet, desc))

    def _watched(self, items: Iterable, total: int, desc: str, unit: str) -> Iterator:
        with watched(total, desc, unit, self.quiet):
            yield from items

    def write_partitions(self, name: str, schema: pa.Schema, fn, parts: list, desc: str | None = None,
                         keep: tuple[str, ...] = (), meta: dict | None = None, total: int | None = None,
                         unit: str = "doc") -> Iterator:
        """`map_partitions` whose tables (each result is a table, or a tuple starting with
        one) become the output `name`; the results are yielded for the stage's summary.

        The local engine writes them here to one Parquet file and yields them whole.  A
        cluster writes them where they are made: each task its partition's part file of
        a dataset folder `name` (pipekit/run/io.py), renamed into place when the stage
        succeeds; the rows never travel to this process, and each table comes back as
        its `keep` columns only (or just its row count): what the summary reads."""
        if not hasattr(self.engine, "map_to_parts"):
            sink = self.sink(name, schema, meta)
            for item in self.map_partitions(fn, parts, desc, total, unit):
                sink.write(item[0] if isinstance(item, tuple) else item)
                yield item
            return
        sink = io.DatasetSink(self.path(name), len(parts))
        self._sinks.append(sink)
        for item in self.engine.map_to_parts(fn, parts, sink.tmp, schema, self._meta(meta), keep,
                                             progress=progress_bar(self.quiet, desc or self.stage.label)):
            sink.rows += (item[0] if isinstance(item, tuple) else item).num_rows
            yield item

    # --- writing -------------------------------------------------------------------------
    def _meta(self, extra: dict | None) -> dict:
        up = self.stage.upstream
        return {
            "stage": self.stage.label,
            "fingerprint": self.fingerprint,
            "inputs": self.inputs,
            "upstream_file": up.outputs[0] if up else None,
            "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "started_at": self.started_at,
            "row_fingerprint": self.row_fingerprint,
            **(extra or {}),
        }

    def sink(self, name: str, schema: pa.Schema, meta: dict | None = None) -> io.ParquetSink:
        s = io.ParquetSink(self.path(name), schema, self._meta(meta))
        self._sinks.append(s)
        return s

    def write_table(self, name: str, table: pa.Table, meta: dict | None = None) -> None:
        self.sink(name, table.schema, meta).write(table)

    def write_text(self, name: str, text: str) -> None:
        target = self.path(name)
        tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
        tmp.write_text(text, encoding="utf-8")
        self._texts.append((tmp, target))

    def remove_output(self, name: str) -> None:
        """Drop a stale optional output (05_metrics.parquet when qrels are turned off)."""
        self.path(name).unlink(missing_ok=True)

    def _commit(self) -> None:
        # Close every file first, then rename them together: a reader never sees a new
        # 04_postings.parquet beside an old 04_terms.parquet for longer than a few renames.
        for s in self._sinks:
            s.close()
        for s in self._sinks:
            s.commit()
        for tmp, target in self._texts:
            os.replace(tmp, target)

    def _abort(self) -> None:
        for s in self._sinks:
            s.abort()
        for tmp, _ in self._texts:
            tmp.unlink(missing_ok=True)

    # --- telling the user ----------------------------------------------------------------
    def progress(self, iterable: Iterable, total: int | None = None, desc: str | None = None,
                 unit: str = "it"):
        """A tqdm bar when a person is watching (stderr is a terminal), silence otherwise."""
        if self.quiet or not sys.stderr.isatty():
            return iterable
        from tqdm import tqdm

        return tqdm(iterable, total=total, desc=desc or self.stage.label, unit=unit,
                    leave=False, file=sys.stderr)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def keep_freed_memory(self) -> bool:
        """What the stage frees kept for its next batch, not handed back, where the process
        ends with the stage (pipekit/run/malloc.py, keep_for_the_stage); True if it is."""
        return keep_for_the_stage()

    def show(self, printer: Callable[[], None]) -> None:
        """Print with `printer` once the outputs are committed, not during the run: a reader
        who closes the pipe (`05_retrieval.py --explain | head -40`) must not cost the stage
        its outputs, as it did when stage 05 printed its results before the commit."""
        self._shows.append(printer)

    @property
    def main_output(self) -> Path:
        return self.path(self.stage.outputs[0])


def run_stage(number: int, run: Callable[[StageContext], None], cfg: dict,
              quiet: bool = False, options: list[str] = (), engine=None, force: bool = False,
              walk: tuple | None = None) -> StageContext:
    """Run one stage's body with commit-or-abort around it, then print its summary.

    `engine`: one shared by several stages (run_pipeline starts a cluster once per run);
    without it the stage makes its own from the config and closes it when done.
    `walk`: stage 01's input walk, when the caller has just made it (`why_stale`)."""
    stage = get_stage(number)
    own = engine is None
    engine = make_engine(cfg, quiet) if own else engine
    t0 = time.perf_counter()
    try:
        ctx = StageContext(stage, cfg, quiet=quiet, options=options, engine=engine, force=force, walk=walk)
        outer = isinstance(sys.stdout, PipeProof)  # a whole command guarded (run_pipeline): it reports
        try:
            with (nullcontext(sys.stdout) if outer else pipe_proof_stdout()) as out:
                run(ctx)
                ctx._commit()
        except BaseException:
            ctx._abort()
            raise
        mark_stage_done(stage.label)
        if out.cut and not outer:  # reported now that the outputs are safe
            raise BrokenPipeError("stdout closed while the stage ran")
    finally:
        if own:
            engine.close()
    seconds = time.perf_counter() - t0
    if not quiet:
        for printer in ctx._shows:
            printer()
        # The main output's rows, not the first sink's: stage 04 opens 04_chunks on a thread of
        # its own beside 04_terms, and "rows out" named whichever opened first (88 or 1,666 on
        # the sample, run to run).
        main = [s for s in ctx._sinks if s.path == ctx.main_output] or ctx._sinks[:1]
        rows_out = main[0].rows if main else 0
        rows_in = "" if ctx.upstream_rows is None else f"{ctx.upstream_rows:,} rows in → "
        print(f"{stage.label}: {rows_in}{rows_out:,} rows out in {seconds:.2f} s → {ctx.main_output}")
        for n in ctx.notes:
            print(f"  {n}")
    return ctx


def stage_main(number: int, run: Callable[[StageContext], None], argv: list[str] | None = None,
               flags: dict[str, str] | None = None, preview_columns: list[str] | None = None,
               show_preview: bool = True) -> int:
    """Command-line entry of a stage. `flags` maps a switch to the --set it stands for.

    Run alone (not from run_pipeline) a stage also prints a preview of its output's first
    rows, because in class the next question is always "what does it look like?"."""
    stage = get_stage(number)
    if argv is None:  # the stage's command line (a test passes argv): its modules are loaded
        imports_done()  # out of the cycle collector's walks (pipekit/run/commands.py)
        stage_ends_process()  # so its stage may keep what it frees (pipekit/run/malloc.py)
    parser = argparse.ArgumentParser(prog=stage.script, description=(sys.modules.get("__main__").__doc__ or "").split("\n")[0])
    add_common_args(parser)
    parser.add_argument("--force", action="store_true",
                        help="make every row anew (by default unchanged files and documents keep their rows)")
    for flag, setting in (flags or {}).items():
        parser.add_argument(flag, action="append_const", const=setting, dest="overrides",
                            help=f"same as --set {setting}")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(parser, argv, stage.label)
    io.defer_pandas()
    io.steady_memory()  # jemalloc: no stalls for huge pages (pipekit/run/io.py)
    try:
        cfg = load_config(args.config, args.overrides)
        ctx = run_stage(number, run, cfg, options=user_options(argv), force=args.force)
        io.settle()  # the replaced outputs' second names gone before this returns (io.replace_output)
        if show_preview:
            print(f"first rows of {ctx.main_output.name}:\n{preview(ctx.main_output, preview_columns)}")
    except PipelineError as exc:
        print(f"{stage.label}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{stage.label}: interrupted; the previous output is unchanged", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return pipe_closed(stage.label)
    return 0
