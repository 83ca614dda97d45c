"""The floor of a stage that carries records through: reading its input Parquet and writing
its output, with nothing in between (issue 47, branch `s23`).

    python bench/parquet_floor.py bench/corpora/n200000/out-s23 --stage 2 --runs 3
    python bench/parquet_floor.py bench/corpora/n200000/out-s23 --stage 3 --runs 3

OUT must hold a run's 01_documents, 02_preprocessed and 03_chunks.  For stage N the
stage's own output (already written there) is first read into memory, outside the clock;
then, timed, in this process:

- `read`: the stage's input read as the stage reads it (engine.iter_rows over the whole
  file, the columns it asks for, 2,048-row batches, read ahead on a thread), nothing done;
- `write`: the output's rows written as the stage writes them (io.ParquetSink with the
  output's schema: the same codecs, dictionaries, statistics, row groups and write-back),
  the sink closed (its fsync), in the tables the stage yields (02: one per input batch;
  03: 20,000 rows);
- `read+write`: both, an output table written as each input batch's rows are read
  (the stage's loop without its work);
- `process`: read+write as a process of its own (`--one`), from the interpreter's start:
  the imports of Python, pyarrow and the two pipekit modules the loop needs, the loop, the
  end (less the output's preload, which the child times and the parent takes off).  The stage's own process (`0N_*.py --config ... --force`) above this figure is its
  work, its other imports, its provenance and its summary.

The written file goes to OUT/floor-N.parquet.tmp-PID and is deleted.  Timings are wall
seconds (and CPU of this process), the best and the range of `--runs`; run it under the
bench lock.  Nothing here is a test; the figures go to bench/README.md.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

INPUTS = {2: ("01_documents.parquet", ["status", "doc_id", "source", "format", "path", "title", "text", "outline",
                                       "content_hash", "page_labels", "note", "anchors"]),
          3: ("02_preprocessed.parquet", ["doc_id", "format", "path", "title", "text", "outline", "content_hash",
                                          "page_labels", "note", "anchors"])}
OUTPUTS = {2: "02_preprocessed.parquet", 3: "03_chunks.parquet"}
PER_TABLE = {2: None, 3: 20_000}  # rows per table the stage yields (None: one per input batch)


def output_table(out: Path, stage: int):
    import pyarrow.parquet as pq

    return pq.ParquetFile(out / OUTPUTS[stage]).read()


def loop(out: Path, stage: int, read: bool, table=None) -> None:
    """The stage's input read (`read`) and/or `table` written (None: nothing written)."""
    from pipekit.run import io
    from pipekit.run.engine import iter_rows, row_ranges

    name, columns = INPUTS[stage]
    source = out / name
    step = PER_TABLE[stage]
    sink = io.ParquetSink(out / f"floor-{stage}.parquet", table.schema, {"floor": stage}) if table is not None else None
    try:
        if read:
            at = written = 0
            for batch in iter_rows(row_ranges(source, io.row_count(source), None)[0], columns):
                at += batch.num_rows
                if sink is None:
                    continue
                while at - written >= (step or 1):  # whole tables only, as the stage yields them
                    size = step or at - written
                    sink.write(table.slice(written, size))
                    written += size
            if sink is not None and written < table.num_rows:
                sink.write(table.slice(written))
        elif sink is not None:
            for a in range(0, table.num_rows, step or 2048):
                sink.write(table.slice(a, step or 2048))
        if sink is not None:
            sink.close()
    finally:
        if sink is not None:
            sink.tmp.unlink(missing_ok=True)


def timed(fn) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--stage", type=int, choices=(2, 3), default=2)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--one", action="store_true", help="read+write once, nothing printed (the `process` figure)")
    a = p.parse_args()
    t0 = time.perf_counter()
    table = output_table(a.out, a.stage)  # outside the clock, in both modes
    if a.one:
        print(time.perf_counter() - t0)  # the parent takes it off this process's wall
        loop(a.out, a.stage, True, table)
        return
    loop(a.out, a.stage, True)  # imports and the page cache warmed once, outside the clock
    figures = {}
    for what, r, w in (("read", True, None), ("write", False, table), ("read+write", True, table)):
        figures[what] = [timed(lambda: loop(a.out, a.stage, r, w)) for _ in range(a.runs)]
    procs = []
    for _ in range(a.runs):
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, __file__, str(a.out), "--stage", str(a.stage), "--one"], check=True,
                              capture_output=True, text=True)
        procs.append((time.perf_counter() - t0 - float(done.stdout.split()[0]), float("nan")))
    figures["process"] = procs
    print(f"stage {a.stage:02d} floor, {a.out} ({a.runs} runs): wall s best [range], CPU s of the best")
    for what, runs in figures.items():
        best = min(runs)
        walls = [w for w, _ in runs]
        print(f"  {what:11s} {best[0]:6.2f} s  [{min(walls):.2f}-{max(walls):.2f}]  CPU {best[1]:.2f} s")


if __name__ == "__main__":
    main()
