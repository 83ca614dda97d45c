"""The plumbing every stage shares: arguments, config, reading upstream, writing, summary.

A stage file defines `run(ctx)` with its own algorithm and ends with
`raise SystemExit(stage_main(N, run))`.  Everything else — `--config`, `--set`, finding
the upstream output (or saying which stage to run first), temp-file-and-rename writes
with provenance metadata, the progress bar, the one-line summary, turning a
PipelineError into one line on stderr and a non-zero exit — happens here, once.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from contextlib import nullcontext
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator

import pyarrow as pa

from . import io
from .config import load_config
from .engine import RowRange, make_engine, progress_bar, row_ranges, watched
from .errors import PipelineError
from .freshness import digest, input_listing, inputs_record
from .incremental import row_fingerprint
from .stages import Stage, get_stage


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
            self.entries, self.listing = walk or input_listing(cfg, self.path(stage.outputs[1]))
        self.inputs = inputs_record(stage, cfg, upstream_fp, self.listing)
        self.fingerprint = digest(self.inputs)
        # What every row depends on besides its own document (pipekit/incremental.py).
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
        back in partition order (see pipekit/engine.py).  With `total` (files, documents)
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
        a dataset folder `name` (pipekit/io.py), renamed into place when the stage
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

    def show(self, printer: Callable[[], None]) -> None:
        """Print with `printer` once the outputs are committed, not during the run: a reader
        who closes the pipe (`05_retrieval.py --explain | head -40`) must not cost the stage
        its outputs, as it did when stage 05 printed its results before the commit."""
        self._shows.append(printer)

    @property
    def main_output(self) -> Path:
        return self.path(self.stage.outputs[0])


def require_output(output_dir: Path, name: str, made_by: Stage, options: list[str] = ()) -> Path:
    """The path of a stage output, or an error saying which command makes it.

    The command keeps the user's --config and --set options: a newcomer who ran
    `04_indexing.py --set paths.output=/tmp/x` and was told to run plain
    `03_chunking.py` wrote into data/ and got the same error again."""
    p = Path(output_dir) / name
    if not p.exists():
        opts = (" " + shlex.join(options)) if options else ""
        raise PipelineError(
            f"no {name} in {output_dir}: run `python {made_by.script}{opts}` first "
            f"(or `python run_pipeline.py --to {made_by.number}{opts}`)")
    return p


def user_options(argv: list[str]) -> list[str]:
    """The --config and --set options of a command line, in order, as typed."""
    out = []
    for i, w in enumerate(argv):
        if w in ("--config", "--set") and i + 1 < len(argv):
            out += [w, argv[i + 1]]
        elif w.startswith(("--config=", "--set=")):
            out += w.split("=", 1)
    return out


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None, name: str | None = None) -> argparse.Namespace:
    """parser.parse_args, with a one-line hint for `--set key value` (a space where `=` belongs).

    argparse alone says "unrecognized arguments: 200", which tells a newcomer nothing
    about the `--set chunking.target` two words before it."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:
        for i, w in enumerate(argv[:-2]):
            if w == "--set" and "=" not in argv[i + 1] and argv[i + 2] in extra:
                print(f"{name or parser.prog}: error: --set takes section.key=VALUE as one word: type "
                      f"--set {shlex.quote(argv[i + 1] + '=' + argv[i + 2])}", file=sys.stderr)
                raise SystemExit(2)
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


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
        outer = isinstance(sys.stdout, _PipeProof)  # a whole command guarded (run_pipeline): it reports
        try:
            with (nullcontext(sys.stdout) if outer else pipe_proof_stdout()) as out:
                run(ctx)
                ctx._commit()
        except BaseException:
            ctx._abort()
            raise
        _mark_stage_done(stage.label)
        if out.cut and not outer:  # reported now that the outputs are safe
            raise BrokenPipeError("stdout closed while the stage ran")
    finally:
        if own:
            engine.close()
    seconds = time.perf_counter() - t0
    if not quiet:
        for printer in ctx._shows:
            printer()
        rows_out = ctx._sinks[0].rows if ctx._sinks else 0
        rows_in = "" if ctx.upstream_rows is None else f"{ctx.upstream_rows:,} rows in → "
        print(f"{stage.label}: {rows_in}{rows_out:,} rows out in {seconds:.2f} s → {ctx.main_output}")
        for n in ctx.notes:
            print(f"  {n}")
    return ctx


def preview(path: Path, columns: list[str] | None = None, rows: int = 3, width: int = 48) -> str:
    """The first few rows of an output, long strings shortened: what a learner looks at first.

    Laid out as pandas prints a frame (right-aligned columns, no index), without pandas:
    importing it to print three rows cost each stage run alone a quarter of a second."""
    names = io.schema(path).names
    columns = [c for c in (columns or names[:6]) if c in names]
    batch = next((b for b in io.iter_batches(path, columns, rows) if b.num_rows), None)  # a dataset's first part may be empty
    if batch is None:
        return "  (no rows)"
    table = [columns] + [[_cell(row[c], width) for c in columns] for row in batch.slice(0, rows).to_pylist()]
    widths = [max(len(r[i]) for r in table) for i in range(len(columns))]
    return "\n".join("  " + " ".join(v.rjust(w) for v, w in zip(r, widths)) for r in table)


def _cell(v, width: int) -> str:
    """One value as the preview shows it: lists in brackets, floats to 6 digits, newlines as ⏎."""
    if isinstance(v, list):
        v = "[" + ", ".join(str(x) for x in v) + "]"
    elif isinstance(v, float):
        v = f"{v:g}"
    v = str(v)
    return (v if len(v) <= width else v[: width - 1] + "…").replace("\n", "⏎")


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="config file (default: config.yaml beside the scripts)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one config key; VALUE is read as YAML (repeatable)")


def stage_main(number: int, run: Callable[[StageContext], None], argv: list[str] | None = None,
               flags: dict[str, str] | None = None, preview_columns: list[str] | None = None,
               show_preview: bool = True) -> int:
    """Command-line entry of a stage. `flags` maps a switch to the --set it stands for.

    Run alone (not from run_pipeline) a stage also prints a preview of its output's first
    rows, because in class the next question is always "what does it look like?"."""
    stage = get_stage(number)
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
    try:
        cfg = load_config(args.config, args.overrides)
        ctx = run_stage(number, run, cfg, options=user_options(argv), force=args.force)
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


def run_command(name: str, body: Callable[[], "int | None"]) -> int:
    """Run a `python -m pipekit NAME` command's body and turn its endings into exit codes:
    a PipelineError is one line on stderr (1), Ctrl-C is 130, a closed pipe is quiet (141).
    One place for it, so compare, search and report cannot drift apart in what they print."""
    try:
        return body() or 0
    except PipelineError as exc:
        print(f"python -m pipekit {name}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return pipe_closed(f"python -m pipekit {name}")


def pipe_closed(name: str | None = None) -> int:
    """`python 05_retrieval.py | head`: the reader left; stop, as `cat` would, with one line
    on stderr saying the output was cut (a reader who saw 40 lines and no error took them
    for all of it). A stage only gets here after its outputs are committed (run_stage).

    Without this Python prints a BrokenPipeError traceback, and another one when it
    flushes stdout at exit; pointing stdout at /dev/null stops the second."""
    _to_devnull()
    who = name or Path(sys.argv[0]).name
    print(f"{who}: output cut: the reader closed stdout (| head?)"
          + (f"; outputs written up to {_STAGE_DONE}" if _STAGE_DONE else ""), file=sys.stderr)
    return 141  # 128 + SIGPIPE, what a shell reports for a command whose pipe closed


# The last stage that committed, so pipe_closed can say which outputs are safe: "the outputs
# were written" read as if every stage had run, when a run had stopped after stage 01.
_STAGE_DONE: str | None = None


def _mark_stage_done(label: str) -> None:
    global _STAGE_DONE
    _STAGE_DONE = label


def _to_devnull() -> None:
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # a stdout without a file (captured, replaced)
        pass


class _PipeProof:
    """stdout while a stage runs: a closed pipe sends the rest to /dev/null instead of
    raising BrokenPipeError inside the stage, which would abort it before its commit.
    The cut is reported (BrokenPipeError again) once the outputs are safe."""

    def __init__(self, stream):
        self._stream, self.cut = stream, False

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self.cut = True
            _to_devnull()
            self._stream = open(os.devnull, "w")
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self.cut = True
            _to_devnull()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def guard_stdout() -> _PipeProof:
    """For a command that runs several stages: from here on a closed stdout only stops the
    printing (`run_pipeline.py | head` ran stage 01 and stopped); the command checks
    `.cut` at its end and reports it with pipe_closed."""
    if not isinstance(sys.stdout, _PipeProof):
        sys.stdout = _PipeProof(sys.stdout)
    return sys.stdout


class pipe_proof_stdout:
    """`with pipe_proof_stdout() as out:` the body's prints cannot end it; `out.cut` says
    whether the pipe closed meanwhile."""

    def __enter__(self) -> _PipeProof:
        self._saved = sys.stdout
        sys.stdout = guard = _PipeProof(sys.stdout)
        return guard

    def __exit__(self, kind, exc, tb) -> None:
        sys.stdout = self._saved
