"""Two checkouts, the same inputs: are their outputs the same table for table?

    python bench/same_outputs.py --baseline /tmp/before                # sample and Cranfield, local and Dask
    python bench/same_outputs.py --baseline /tmp/before --input PATH   # any folder or corpus.jsonl too
    python bench/same_outputs.py --baseline /tmp/before --dropped 04_postings.parquet:impact

For a change that moves code and must not change what it computes (issue 33's regrouping of
pipekit/), run the pipeline with `--force` in both checkouts on the same input, with each
engine, and compare every output: the same columns, rows, order and values.  Provenance
metadata is left out of the comparison on purpose: it records the code's hash, which a
move changes by design.  `05_history.parquet` keeps each run's time and fingerprint: set aside too.
Prints one line per (input, engine) and exits 1 if any table differs.
`--dropped FILE:COLUMN` (repeatable): a column the change removes on purpose (04_postings'
`impact`, issue 47's `tfpost`: stage 05 computes the weight) is left out of the baseline's table
before comparing, and the line says so; every other column must still be identical.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "data"  # --shared for a checkout elsewhere (a git worktree)
# 05_history.parquet's columns that record when and from which code a run was made:
# its time, and its fingerprint, which hashes the code (the provenance, set aside above).
HISTORY_ASIDE = ("time", "fingerprint")


def run(repo: Path, out: Path, sets: list[str]) -> float:
    args = [sys.executable, "run_pipeline.py", "--force", "--set", f"paths.output={out}"]
    for kv in sets:
        args += ["--set", kv]
    t0 = time.perf_counter()
    proc = subprocess.run(args, cwd=repo, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{repo}: run_pipeline failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return time.perf_counter() - t0


def tables(out: Path) -> dict[str, object]:
    found = {}
    for p in sorted(out.iterdir()):
        if p.suffix == ".parquet" or (p.is_dir() and p.name.endswith(".parquet")):
            t = pq.read_table(p)
            t = t.replace_schema_metadata(None)
            if p.name.startswith("05_history"):
                t = t.drop_columns([c for c in t.column_names if c in HISTORY_ASIDE])
            found[p.name] = t
        elif p.suffix == ".trec":
            found[p.name] = p.read_text()
    return found


def compare(a: Path, b: Path, dropped: list[str] = ()) -> list[str]:
    ta, tb = tables(a), tables(b)
    for item in dropped:
        name, column = item.rsplit(":", 1)
        if name in ta and column in ta[name].column_names and column not in tb.get(name, ta[name]).column_names:
            ta[name] = ta[name].drop_columns([column])
    differ = sorted(set(ta) ^ set(tb))
    for name in sorted(set(ta) & set(tb)):
        x, y = ta[name], tb[name]
        if isinstance(x, str):
            same = x == y
        else:
            same = x.schema.remove_metadata() == y.schema.remove_metadata() and x.equals(y)
        if not same:
            differ.append(name)
    return differ


def inputs(extra: list[str], shared: Path) -> list[tuple[str, list[str]]]:
    # Absolute paths, the same for both checkouts: `source` and the history record them.
    data = REPO / "data"
    cases = [("sample", [f"documents.input={data / 'sample'}", f"retrieval.queries={data / 'queries.txt'}",
                         f"retrieval.qrels={data / 'qrels.tsv'}"])]
    cran = shared / "cranfield" / "beir"
    if cran.is_dir():
        cases.append(("cranfield", [f"documents.input={cran / 'corpus.jsonl'}",
                                    f"retrieval.queries={cran / 'queries.jsonl'}",
                                    f"retrieval.qrels={cran / 'qrels.tsv'}"]))
    else:
        print(f"cranfield: skipped ({cran} is absent)")
    for path in extra:
        cases.append((path, [f"documents.input={path}", "retrieval.qrels=null"]))
    return cases


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", type=Path, required=True, help="the other checkout (git worktree add PATH REV)")
    ap.add_argument("--input", action="append", default=[], help="another documents.input to compare on")
    ap.add_argument("--engines", default="local,dask", help="comma-separated engine.kind values")
    ap.add_argument("--shared", type=Path, default=SHARED, help="the folder holding cranfield/beir")
    ap.add_argument("--dropped", action="append", default=[], metavar="FILE:COLUMN",
                    help="a column this checkout no longer writes: left out of the baseline's table")
    args = ap.parse_args(argv)
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for label, sets in inputs(args.input, args.shared):
            for engine in args.engines.split(","):
                s = sets + [f"engine.kind={engine}"] + (["engine.workers=2"] if engine == "dask" else [])
                a, b = Path(tmp, "a", label.replace("/", "_"), engine), Path(tmp, "b", label.replace("/", "_"), engine)
                # Both write to the same folder, then move aside: the history records paths.output.
                out = Path(tmp, "out")
                ta = run(args.baseline.resolve(), out, s)
                a.parent.mkdir(parents=True, exist_ok=True)
                out.rename(a)
                tb = run(REPO, out, s)
                b.parent.mkdir(parents=True, exist_ok=True)
                out.rename(b)
                differ = compare(a, b, args.dropped)
                bad += bool(differ)
                n = len(tables(a))
                aside = f" (without the baseline's {', '.join(args.dropped)})" if args.dropped else ""
                print(f"{label:<12} {engine:<6} {n} outputs, {'identical' if not differ else 'DIFFER: ' + ', '.join(differ)}"
                      f"{aside}  (baseline {ta:.1f} s, this checkout {tb:.1f} s)", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
