"""Run history: every evaluated stage-05 run's metrics, kept side by side.

Stage 05 with judgements prints nDCG@10, and the next run overwrites 05_metrics.parquet:
after a tweak a student had to remember the old figure, and nobody could see which
queries moved.  So each such run appends its metrics (per query and `all`) to
`05_history.parquet` in `paths.output`, with the run's number, time, stage-05
fingerprint, the config values that made it (every stage's, as recorded in the
outputs it read) and those that differ from the run before.  Stage 05 then prints
`nDCG@10 0.9147 (was 0.9008, +0.0139)`, and `python -m pipekit compare` shows the
queries that moved most between any two runs.

The table is rewritten whole (old rows plus the new run's) through the stage's own
atomic writer: it is committed with the stage's other outputs or not at all.  It is a
record, not an input: no stage reads it, and it never makes a stage stale.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipekit.run import io
from pipekit.run.errors import PipelineError
from pipekit.run.overrides import as_yaml
from pipekit.run.stages import STAGES

HISTORY = "05_history.parquet"
SCHEMA = pa.schema([
    ("run", pa.int32()),
    ("time", pa.timestamp("ms", tz="UTC")),
    ("fingerprint", pa.string()),
    ("query_id", pa.string()),
    ("query", pa.string()),
    ("metric", pa.string()),
    ("value", pa.float64()),
    ("changed", pa.list_(pa.string())),
    ("config", pa.string()),
])


def read_history(output_dir: Path) -> pa.Table:
    """The history table of an output folder (empty when no evaluated run has been kept)."""
    path = Path(output_dir) / HISTORY
    if not path.exists():
        return SCHEMA.empty_table()
    table = io.read_table(path)
    missing = [n for n in SCHEMA.names if n not in table.column_names]
    if missing:
        raise PipelineError(f"{path} lacks column(s) {', '.join(missing)}: it is not a run history "
                            f"(move it away to start a new one)")
    return table.select(SCHEMA.names).cast(SCHEMA)


def run_config(ctx) -> dict:
    """Every config value the run's results depend on: each upstream stage's section as
    its output recorded it (what really made the chunks and the index, whatever
    config.yaml says now), then stage 05's own."""
    values: dict = {}
    for stage in STAGES[:ctx.stage.number - 1]:
        meta = io.read_meta(ctx.path(stage.outputs[0])) or {}
        values.update(meta.get("inputs", {}).get("config", {}))
    values.update(ctx.inputs["config"])
    return values


def config_changes(before: dict, after: dict) -> list[str]:
    """`key: old -> new` for each value that differs, keys in config order."""
    keys = list(after) + [k for k in before if k not in after]
    return [f"{k}: {as_yaml(before.get(k, '<unset>'))} -> {as_yaml(after.get(k, '<unset>'))}"
            for k in keys if before.get(k, "<unset>") != after.get(k, "<unset>")]


class Run:
    """One run of the history: its number, time, fingerprint, config and metrics."""

    def __init__(self, table: pa.Table):
        first = table.slice(0, 1).to_pylist()[0]
        self.number: int = first["run"]
        self.time: datetime = first["time"]
        self.fingerprint: str = first["fingerprint"]
        self.changed: list[str] = first["changed"] or []
        self.config: dict = json.loads(first["config"])
        cols = [table.column(n).to_pylist() for n in ("query_id", "query", "metric", "value")]
        self.values: dict[tuple[str, str], float] = {(q, m): v for q, _, m, v in zip(*cols)}
        self.queries: dict[str, str] = {q: t for q, t, _, _ in zip(*cols) if t is not None}
        # In the order stage 05 reports them (its `all` rows): nDCG@10 first.
        self.metrics: list[str] = list(dict.fromkeys(m for q, m in zip(cols[0], cols[2]) if q == "all"))

    def value(self, query_id: str, metric: str) -> float | None:
        return self.values.get((query_id, metric))

    def same_queries(self, queries: dict[str, str]) -> bool:
        """Whether this run asked exactly these queries (ids and texts): only then are
        its figures a "before" (query 1 of another file is another question)."""
        return self.queries == queries

    @property
    def label(self) -> str:
        return f"run {self.number} ({self.time:%Y-%m-%d %H:%M:%S} UTC, fingerprint {self.fingerprint})"


def runs(history: pa.Table) -> list[Run]:
    """The history's runs, oldest first."""
    if history.num_rows == 0:
        return []
    numbers = history.column("run").to_numpy()
    order = np.argsort(numbers, kind="stable")
    numbers = numbers[order]
    history = history.take(pa.array(order))
    starts = np.flatnonzero(np.r_[True, numbers[1:] != numbers[:-1], True])
    return [Run(history.slice(a, b - a)) for a, b in zip(starts[:-1], starts[1:])]


def record_run(ctx, metrics: pa.Table, queries: list[tuple[str, str]]) -> Run | None:
    """Append this run's metrics to the history (committed with the stage's outputs) and
    return the previous run, if there is one, for the summary line's `(was …)`."""
    old = read_history(ctx.output_dir)
    previous = runs(old)[-1] if old.num_rows else None
    if previous is not None:
        previous.comparable = previous.same_queries({q: t for q, t in queries
                                                     if q in set(metrics.column("query_id").to_pylist())})
    config = run_config(ctx)
    changed = config_changes(previous.config, config) if previous else []
    number = (previous.number + 1) if previous else 1
    text = dict(queries)
    qids = metrics.column("query_id").to_pylist()
    n = metrics.num_rows
    new = pa.table({
        "run": pa.array([number] * n, pa.int32()),
        "time": pa.array([datetime.now(timezone.utc).replace(microsecond=0)] * n, SCHEMA.field("time").type),
        "fingerprint": pa.array([ctx.fingerprint] * n, pa.string()),
        "query_id": metrics.column("query_id"),
        "query": pa.array([text.get(q) for q in qids], pa.string()),
        "metric": metrics.column("metric"),
        "value": metrics.column("value"),
        "changed": pa.array([changed] * n, SCHEMA.field("changed").type),
        "config": pa.array([json.dumps(config, sort_keys=True, default=str)] * n, pa.string()),
    }, schema=SCHEMA)
    ctx.write_table(HISTORY, pa.concat_tables([old, new]))
    return previous


def metric_line(metrics: pa.Table, names, previous: Run | None) -> str:
    """`nDCG@10 0.9147 (was 0.9008, +0.0139), …` — the `was` part only with a previous run."""
    overall = {m: v for q, m, v in zip(*(metrics.column(c).to_pylist() for c in ("query_id", "metric", "value")))
               if q == "all"}
    # A mean over other queries is not a "before": say so rather than print a false change.
    same = previous is not None and getattr(previous, "comparable", True)
    parts = []
    for m in names:
        part = f"{m} {overall[m]:.4f}"
        was = previous.value("all", m) if same else None
        if was is not None:
            part += f" (was {was:.4f}, {overall[m] - was:+.4f})"
        parts.append(part)
    other = f" (run {previous.number}, the one before, had other queries: not compared)" if previous and not same else ""
    return ", ".join(parts) + other
