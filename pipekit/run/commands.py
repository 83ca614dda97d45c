"""A command's shell: its arguments, its one-line errors, and a stdout that `| head` may close.

Every command (the five stages, run_pipeline, `python -m pipekit …`) parses `--config` and
`--set` the same way, names the command to run first when an output is missing, prints a
PipelineError as one line with a non-zero exit, and stops quietly when its reader closes
the pipe.  That happens here, once.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Callable

from pipekit.run.errors import PipelineError
from pipekit.run.stages import Stage


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


def preview(path: Path, columns: list[str] | None = None, rows: int = 3, width: int = 48) -> str:
    """The first few rows of an output, long strings shortened: what a learner looks at first.

    Laid out as pandas prints a frame (right-aligned columns, no index), without pandas:
    importing it to print three rows cost each stage run alone a quarter of a second."""
    from pipekit.run import io  # (here: it loads Arrow's Parquet reader, which `search` starts without)

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


def mark_stage_done(label: str) -> None:
    global _STAGE_DONE
    _STAGE_DONE = label


def _to_devnull() -> None:
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # a stdout without a file (captured, replaced)
        pass


class PipeProof:
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


def guard_stdout() -> PipeProof:
    """For a command that runs several stages: from here on a closed stdout only stops the
    printing (`run_pipeline.py | head` ran stage 01 and stopped); the command checks
    `.cut` at its end and reports it with pipe_closed."""
    if not isinstance(sys.stdout, PipeProof):
        sys.stdout = PipeProof(sys.stdout)
    return sys.stdout


class pipe_proof_stdout:
    """`with pipe_proof_stdout() as out:` the body's prints cannot end it; `out.cut` says
    whether the pipe closed meanwhile."""

    def __enter__(self) -> PipeProof:
        self._saved = sys.stdout
        sys.stdout = guard = PipeProof(sys.stdout)
        return guard

    def __exit__(self, kind, exc, tb) -> None:
        sys.stdout = self._saved


def imports_done() -> None:
    """A command's modules are loaded: what they made is put out of the cycle collector's
    reach for good (`gc.freeze`), as the server does before it forks (pipekit/serve/workers.py).

    A one-file rerun of run_pipeline allocates enough containers to set off one full
    collection (14-27 ms in five runs), which walks every tracked object alive: after the
    imports ~35k of them, pyarrow's, NumPy's and pipekit's modules, which live until the
    process ends and hold no garbage.  Frozen, they are not walked, and the rerun's own
    objects no longer add up to a full collection (five runs: none).  What the command makes
    is collected as before, so a cycle the stages leave is freed as it was.  For a command's
    `__main__` only: a test calling main() keeps its collector as it was."""
    import gc

    gc.freeze()


def finish(code: int | None) -> None:
    """End a command that has returned `code`, without Python's teardown of every object.

    A one-file rerun of run_pipeline spent 0.055-0.074 s between main() returning and the
    process ending (0.017 s with this, three runs each, bench/README.md "Reruns on a real
    folder"): the interpreter freeing, one by one, the modules and objects of pyarrow, NumPy
    and the stages, which the system takes back at once anyway.  Everything a normal exit
    does that matters still happens, in its order: outputs are committed before a command
    returns (pipekit/cli.py), threads that would be waited for are waited for (a thread this
    cannot account for sends the process down the normal exit instead), atexit handlers run
    (multiprocessing's: the reading processes' semaphores are released and their fork server
    told to stop, else its resource tracker warns of leaks), and stdout and stderr are
    flushed.  What is skipped is `__del__` of objects still alive at exit: none of
    pipekit's does anything the system would not.  For a command's `__main__` only: a test
    calling main() keeps its process."""
    import atexit
    import threading

    io = sys.modules.get("pipekit.run.io")  # not imported for this: it brings pyarrow
    if io is not None:
        io.settle()  # the replaced outputs' blocks, freed on a thread (io.replace_output)
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        raise SystemExit(code)  # someone's thread: Python's own exit joins it
    run = getattr(atexit, "_run_exitfuncs", None)
    if run is None:  # not CPython
        raise SystemExit(code)
    run()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass  # the reader left (reported already, pipe_closed) or the stream is closed
    os._exit(code if isinstance(code, int) else (0 if code is None else 1))
