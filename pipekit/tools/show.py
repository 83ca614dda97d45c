"""`python -m pipekit show PATH`: look inside any stage output without writing code.

For a learner the Parquet files are the lesson's evidence, so the viewer prints the
three things that explain a file: its schema (what each column holds), its size (rows,
bytes), and its provenance (which stage wrote it, when, from which config values and
upstream output — the record run_pipeline judges freshness by).  Then a few rows.

Rows are printed as a table when they fit the terminal and one field per line when
they do not: 03_chunks has fourteen columns, and a fourteen-column table wrapped by
the terminal is unreadable.  Long text is shortened (its full length is given), so a
400-word chunk does not scroll the schema off the screen.

PATH may also be a folder (`data`): then each Parquet file in it gets one line.  A
stage output written by a Dask cluster is itself a folder of part files (a dataset,
pipekit/run/io.py): it is shown as one output, its rows those of all its parts.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipekit.run.errors import PipelineError
from pipekit.run.io import output_size, part_files, read_meta, row_count

CELL = 60  # characters of a cell shown in a table; more is shortened with its length noted


# ---------------------------------------------------------------- reading


def open_parquet(path: Path) -> pq.ParquetFile:
    if not path.exists():
        hint = ""
        if path.suffix == ".parquet" and path.name[:2].isdigit():
            hint = f": run `python run_pipeline.py --to {int(path.name[:2])}` first"
        raise PipelineError(f"{path} does not exist{hint}")
    files = part_files(path)
    if not files:
        raise PipelineError(f"{path} is a folder")
    try:
        return [pq.ParquetFile(f) for f in files]
    except (OSError, pa.ArrowException) as exc:
        raise PipelineError(f"{path} is not a readable Parquet file ({exc})") from None


def is_dataset(path: Path) -> bool:
    """A folder of part files: one output written by a cluster, not a folder of outputs."""
    return path.is_dir() and bool(part_files(path))


def head(pfs: list[pq.ParquetFile], rows: int, columns: list[str] | None) -> pa.Table:
    """The first `rows` rows, reading no more row groups (or part files) than needed."""
    names = pfs[0].schema_arrow.names
    if columns:
        unknown = [c for c in columns if c not in names]
        if unknown:
            raise PipelineError(f"no column {', '.join(map(repr, unknown))}; columns are: {', '.join(names)}")
    schema = pfs[0].schema_arrow if not columns else pa.schema([pfs[0].schema_arrow.field(c) for c in columns])
    got, batches = 0, []
    for pf in pfs:
        if got >= rows:
            break
        for batch in pf.iter_batches(batch_size=rows - got, columns=columns):
            batches.append(batch)
            got += batch.num_rows
            break
    return pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()


# ---------------------------------------------------------------- formatting


def human_size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n} B"  # unreachable


def cell(value, width: int = CELL) -> str:
    """One value as one short line: whitespace collapsed, long text shortened."""
    if value is None:
        return "null"
    if value == "":
        return '""'  # an empty heading is a fact worth seeing, not a blank
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        # explain: [{term, tf, ..., contribution}] reads best as term=contribution pairs
        if all("term" in v and "contribution" in v for v in value):
            text = " + ".join(f"{v['term']}={v['contribution']:.3f}" for v in value)
        else:
            text = json.dumps(value, ensure_ascii=False, default=str)
    elif isinstance(value, (list, dict)):
        text = json.dumps(value, ensure_ascii=False, default=str)
    else:
        text = str(value)
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    suffix = f" … ({len(text):,} chars)" if isinstance(value, str) else " …"
    return flat[: max(width - len(suffix), 10)].rstrip() + suffix


def schema_lines(schema: pa.Schema) -> list[str]:
    width = max((len(f.name) for f in schema), default=0)
    return [f"  {f.name:<{width}}  {f.type}{'' if f.nullable else '  not null'}" for f in schema]


def stamp_text(stamp: dict) -> str:
    """A queries/qrels file's stamp as a reader wants it. Stamps were sizes and times and
    are content hashes now (pipekit/run/freshness.py); `show` crashed on the new ones, so it
    reads whichever it finds."""
    if stamp.get("missing"):
        return "missing"
    if "hash" in stamp:
        return f"content {stamp['hash']}"
    return f"{stamp['size']:,} bytes" if isinstance(stamp.get("size"), int) else "?"


def flatten(obj, prefix: str = "") -> list[tuple[str, str]]:
    """Nested provenance JSON as (dotted key, value) pairs, in a stable order."""
    if isinstance(obj, dict) and obj:
        out = []
        for key in obj:
            out += flatten(obj[key], f"{prefix}.{key}" if prefix else str(key))
        return out
    if isinstance(obj, list) and obj and all(isinstance(v, dict) and "file" in v for v in obj):
        # stage 05's stamps of the queries/qrels files: the file names are what a reader wants
        return [(f"{prefix}[{i}]", f"{v['file']}  ({stamp_text(v)})") for i, v in enumerate(obj)]
    return [(prefix, json.dumps(obj, ensure_ascii=False, default=str) if not isinstance(obj, str) else obj)]


def provenance_lines(meta: dict | None) -> list[str]:
    """The `pipekit` record as labelled lines: who wrote it, from what, with which settings."""
    if meta is None:
        return ["  (none: this file was not written by a pipeline stage)"]
    meta = dict(meta)
    inputs = dict(meta.pop("inputs", None) or {})
    pairs = []
    if "stage" in meta or "written_at" in meta:
        pairs.append(("written by", f"{meta.pop('stage', '?')} at {meta.pop('written_at', '?')}"))
    if "fingerprint" in meta:
        pairs.append(("fingerprint", str(meta.pop("fingerprint"))))
    upstream_file = meta.pop("upstream_file", None)
    upstream_fp = inputs.pop("upstream", None)
    if upstream_file or upstream_fp:
        pairs.append(("upstream", f"{upstream_file or '?'} (fingerprint {upstream_fp})"))
    else:
        pairs.append(("upstream", "none (first stage)"))
    if "code" in inputs:
        pairs.append(("code hash", str(inputs.pop("code"))))
    if "external" in inputs:
        external = inputs.pop("external")
        if isinstance(external, str):  # stage 01: one digest of the input files' names, sizes, mtimes
            pairs.append(("input files", f"digest {external} (names, sizes, modification times)"))
        elif external is not None:
            pairs += [(k.replace("external", "input files", 1), v) for k, v in flatten(external, "external")]
    for key, value in (inputs.pop("config", None) or {}).items():
        pairs.append(("config", f"{key} = {json.dumps(value, ensure_ascii=False, default=str)}"))
    pairs += flatten(inputs, "inputs") if inputs else []
    pairs += flatten(meta) if meta else []
    width = min(max(len(k) for k, _ in pairs), 36)
    out, last = [], None
    for key, value in pairs:
        # the config block reads as a list: label it once
        label = "" if key == last == "config" else key
        out.append(f"  {label:<{width}}  {value}")
        last = key
    return out


def table_lines(table: pa.Table, term_width: int) -> list[str]:
    """Rows as a table if it fits `term_width`, otherwise one `column  value` line per field."""
    names = table.column_names
    rows = table.to_pylist()
    if not rows:
        return ["  (no rows)"]
    cells = [[cell(r[n]) for n in names] for r in rows]
    widths = [max(len(n), *(len(c[i]) for c in cells)) for i, n in enumerate(names)]
    if sum(widths) + 2 * len(widths) + 6 <= term_width:
        fmt = lambda vals: "  " + "  ".join(f"{v:<{w}}" for v, w in zip(vals, widths))
        return [fmt(names).rstrip(), fmt(["-" * w for w in widths])] + \
               [fmt(c).rstrip() for c in cells]
    name_w = max(len(n) for n in names)
    value_w = max(term_width - name_w - 6, 30)
    out = []
    for i, r in enumerate(rows):
        out.append(f"  ── row {i} " + "─" * max(term_width - 14, 10))
        for n in names:
            out.append(f"  {n:<{name_w}}  {cell(r[n], value_w)}")
    return out


# ---------------------------------------------------------------- commands


def show_file(path: Path, rows: int = 5, columns: list[str] | None = None,
              term_width: int | None = None) -> str:
    term_width = term_width or shutil.get_terminal_size((100, 24)).columns
    pfs = open_parquet(path)
    n_rows = sum(pf.metadata.num_rows for pf in pfs)
    n_groups = sum(pf.metadata.num_row_groups for pf in pfs)
    table = head(pfs, rows, columns)
    parts = f" in {len(pfs)} part files (a dataset folder)" if path.is_dir() else ""
    out = [f"{path}",
           f"  {n_rows:,} rows · {len(pfs[0].schema_arrow)} columns · {human_size(output_size(path))}"
           f" · {n_groups} row group{'s' if n_groups != 1 else ''}{parts}",
           "", "schema"]
    out += schema_lines(pfs[0].schema_arrow)
    out += ["", "provenance (Parquet key-value metadata `pipekit`)"]
    out += provenance_lines(read_meta(path))
    if rows > 0:
        shown = min(rows, n_rows)
        out += ["", f"first {shown:,} of {n_rows:,} rows" +
                (f" (columns {', '.join(columns)})" if columns else "")]
        out += table_lines(table, term_width)
    return "\n".join(out)


def show_folder(path: Path) -> str:
    files = sorted(path.glob("*.parquet"))
    if not files:
        raise PipelineError(f"{path} holds no Parquet files: run `python run_pipeline.py` first")
    width = max(len(f.name) for f in files)
    out = [f"{path}"]
    for f in files:
        try:
            n_rows = row_count(f)
        except (OSError, pa.ArrowException):
            out.append(f"  {f.name:<{width}}  (not readable)")
            continue
        meta = read_meta(f) or {}
        out.append(f"  {f.name:<{width}}  {n_rows:>10,} rows  {human_size(output_size(f)):>10}  "
                   f"{meta.get('stage', '?'):<16} {meta.get('written_at', '')}")
    out.append(f"(details: python -m pipekit show {path / files[0].name})")
    return "\n".join(out)


def columns_arg(text: str) -> list[str]:
    cols = [c.strip() for c in text.split(",") if c.strip()]
    if not cols:
        raise argparse.ArgumentTypeError("give column names separated by commas, e.g. chunk_id,heading")
    return cols


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipekit show",
        description="Print a stage output: schema, row count, provenance metadata and the first rows.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=textwrap.dedent("""\
            examples:
              python -m pipekit show data/03_chunks.parquet
              python -m pipekit show data/05_results.parquet --rows 3 --columns rank,score,chunk_id
              python -m pipekit show data            # one line per Parquet file in the folder"""))
    parser.add_argument("path", type=Path, help="a Parquet file, or a folder of them")
    parser.add_argument("--rows", type=int, default=5, metavar="N", help="rows to print (default 5; 0 for none)")
    parser.add_argument("--columns", type=columns_arg, default=None, metavar="a,b",
                        help="only these columns, in this order")
    # Accepted so that a habit from the other commands gets one line saying it does nothing
    # here, not argparse's usage block: show prints the file it is given, as it was written.
    parser.add_argument("--config", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--set", dest="overrides", action="append", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from pipekit.run.overrides import unapplied_lines

    why = "show prints the file it is given, as its stage wrote it"
    options = [w for o in args.overrides for w in ("--set", o)]
    for line in unapplied_lines("python -m pipekit show", args.overrides, lambda key: why, options):
        print(line, file=sys.stderr)
    if args.config:
        print(f"python -m pipekit show: --config not applied ({why})", file=sys.stderr)
    try:
        if args.path.is_dir() and not is_dataset(args.path):
            print(show_folder(args.path))
        else:
            print(show_file(args.path, args.rows, args.columns))
    except PipelineError as exc:
        print(f"show: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `... | head` closed the pipe: not an error for the user
        return 0
    return 0
