"""Reusing the previous run's rows for what has not changed: a rerun costs what changed.

Rerunning after a tweak is what this pipeline is for, and on a real folder the tweak a
user makes most often is to the documents themselves.  Without this, adding one 80-byte
Markdown file to a 530-page manual rebuilt everything (104 s for a 77 s first run).
Build tools have the answer (make, DVC, a documentation builder): unchanged inputs cost
nothing.  Here it works at two levels:

- **Files (stage 01).**  Each input file's content hash is recorded beside its size,
  modification time and change time in `01_files.parquet`, one row per listed file.  A rerun hashes only the
  files whose stat changed (or that changed too close to the last listing to trust the
  clock: git's "racily clean" files), and takes the previous row of every file whose
  hash and place are unchanged.  Content, not timestamps, decides: `touch` changes
  nothing, and a file whose bytes changed with its size and mtime put back is still
  seen (its change time moved).
- **Documents (stages 02 and 03).**  Every row carries its source document's
  `content_hash` from stage 01.  Each stage records a *row fingerprint*: the hash of the
  config values and code of every stage up to it, but not of the input files.  When the
  previous output's row fingerprint equals today's, a document whose content hash is
  the one its previous rows were made from gets those rows back, untouched.  A setting
  that changes every document (`chunking.target`) changes the row fingerprint, so the
  stage reruns for all of them.

What it deliberately does not do: decide freshness (pipekit/freshness.py does, per
stage, and a `--force` run reuses nothing), or reuse in stages 04 and 05, whose
statistics (N, avgdl, df) are global: one new chunk changes every score.
The outputs are exactly those of a `--force` run — same rows, order, values and
provenance — which tests/test_incremental.py checks for every kind of change.
"""
from __future__ import annotations

import bisect
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

RACY_NS = 2_000_000_000  # a file changed this close to the last listing is hashed again
NAMES_SHOWN = 3  # paths named per kind of change in `--status`


def content_hash(data: bytes) -> str:
    """A short fingerprint of a file's (or a BEIR record's) bytes: 64 bits of BLAKE2b.

    Stages 02 and 03 carry it on each row, so a rerun can tell, document by document,
    whether the rows it made last time still stand."""
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def file_hash(path: Path, block: int = 1 << 20) -> str:
    """`content_hash` of a file's bytes, read a megabyte at a time (a corpus may be GBs)."""
    h = hashlib.blake2b(digest_size=8)
    with open(path, "rb") as fh:
        while chunk := fh.read(block):
            h.update(chunk)
    return h.hexdigest()


# ---- stage 01: the listing of input files ------------------------------------------------

def _stamp(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns]


_HASHED: dict[tuple, str] = {}


def list_files(entries: list, previous: dict | None) -> dict:
    """What stage 01 will read, as `{"listed_ns": ..., "files": {doc_id: [size, mtime_ns,
    ctime_ns, key]}}`: written to 01_files.parquet, compared by the next run.

    `key` is what decides whether a file's row can be reused: its content hash joined
    with everything else its row depends on (where it is, how it is read).  A skipped or
    unlistable entry is never read, so its key is its reason.  `previous` is the last
    run's listing: a file whose stamp is unchanged keeps its recorded hash unread,
    unless it changed within RACY_NS of that listing (two writes in one clock tick
    leave the same stamp)."""
    old = (previous or {}).get("files", {})
    racy_after = (previous or {}).get("listed_ns", 0) - RACY_NS
    listed_ns = time.time_ns()
    files = {}
    for e in entries:
        if e.skip is not None or e.error is not None:
            files[e.doc_id] = [None, None, None, f"{'skipped' if e.skip else 'error'}: {e.skip or e.error}"]
            continue
        stamp = _stamp(e.path)
        if stamp is None:
            files[e.doc_id] = [None, None, None, "unreadable"]
            continue
        was = old.get(e.doc_id)
        # Short: a folder of 100k files lists 100k of these.
        where = content_hash(f"{e.path}|{e.format}|{e.guessed}|{e.note}|{e.max_bytes}".encode())
        if was and was[:3] == stamp and max(stamp[1], stamp[2]) < racy_after and was[3].endswith("|" + where):
            files[e.doc_id] = was
            continue
        memo = (str(e.path), *stamp)
        if memo not in _HASHED:  # run_pipeline lists twice (plan, then the stage): hash once
            try:
                _HASHED[memo] = file_hash(e.path)
            except OSError:
                _HASHED[memo] = "unreadable"
        files[e.doc_id] = [*stamp, f"{_HASHED[memo]}|{where}"]
    return {"listed_ns": listed_ns, "files": files}


LISTING_SCHEMA = pa.schema([("doc_id", pa.string()), ("size", pa.int64()), ("mtime_ns", pa.int64()),
                            ("ctime_ns", pa.int64()), ("key", pa.string())])


def listing_table(listing: dict) -> pa.Table:
    """A listing as the rows of 01_files.parquet (its time goes in the file's metadata)."""
    files = listing["files"]
    columns = list(zip(*([d, *v] for d, v in files.items()))) or [()] * 5
    return pa.table([pa.array(c, t.type) for c, t in zip(columns, LISTING_SCHEMA)], schema=LISTING_SCHEMA)


def read_listing(path: Path) -> dict | None:
    """01_files.parquet back as a listing (None when there is none, or it is unreadable)."""
    from .io import read_meta

    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException):
        return None
    listed_ns = (read_meta(path) or {}).get("listed_ns", 0)
    rows = zip(*(table.column(n).to_pylist() for n in LISTING_SCHEMA.names))
    return {"listed_ns": listed_ns, "files": {d: [size, m, c, k] for d, size, m, c, k in rows}}


def keys_of(listing: dict) -> list:
    """The part of a listing that decides freshness (stamps are only a cache of hashes)."""
    return sorted((doc_id, v[3]) for doc_id, v in listing["files"].items())


def describe_changes(before: dict | None, now: dict) -> str:
    """`input changed: 1 added (notes/new.md), 0 changed, 0 removed`, from two listings."""
    if not before or "files" not in before:
        return "input files changed (the previous output recorded no file list)"
    old, new = before["files"], now["files"]
    added = [d for d in new if d not in old]
    removed = [d for d in old if d not in new]
    changed = [d for d in new if d in old and new[d][3] != old[d][3]]

    def part(n_word: str, names: list[str]) -> str:
        shown = ", ".join(names[:NAMES_SHOWN]) + (", …" if len(names) > NAMES_SHOWN else "")
        return f"{len(names):,} {n_word}" + (f" ({shown})" if names else "")

    return "input changed: " + ", ".join([part("added", added), part("changed", changed), part("removed", removed)])


def reusable_rows(entries: list, listing: dict, previous_path: Path | None,
                  previous_listing: dict | None) -> list[int]:
    """For each entry, the row of the previous 01 output to take instead of reading the
    file, or -1.  Only files that were read (status ok or error) are reused: a skipped
    row costs nothing to make again."""
    out = [-1] * len(entries)
    if previous_path is None or not previous_listing:
        return out
    old = previous_listing.get("files", {})
    table = read_columns(previous_path, ["doc_id", "content_hash"])
    row_of = {d: i for i, (d, h) in enumerate(zip(table.column("doc_id").to_pylist(),
                                                   table.column("content_hash").to_pylist())) if h is not None}
    for k, e in enumerate(entries):
        was = old.get(e.doc_id)
        if was and was[3] == listing["files"][e.doc_id][3] and e.doc_id in row_of:
            out[k] = row_of[e.doc_id]
    return out


# ---- stages 02 and 03: documents whose rows still stand -----------------------------------

def row_fingerprint(upstream: str | None, section: dict, code: str) -> str:
    """What a stage's rows depend on besides their own document: every setting and line
    of code from stage 01 to this one.  Equal row fingerprints + equal content hash =
    equal rows."""
    from .freshness import digest

    return digest({"upstream": upstream, "config": section, "code": code})


def read_columns(path: Path, columns: list[str]) -> pa.Table:
    from .io import read_table

    return read_table(path, columns)


def plan_reuse(upstream: pa.Table, previous: pa.Table, nothing: np.ndarray | None = None) -> np.ndarray:
    """For each upstream document, the rows [start, stop) of the previous output made from
    it, or start = -1 when it must be made again.  Vectorised: a million documents cost
    a few array operations, not a million dictionary look-ups.

    `upstream` and `previous` hold doc_id and content_hash; the previous output's rows of
    one document are consecutive (every stage writes documents in order).  `nothing`
    marks upstream rows the stage makes no rows from (stage 02 drops error rows): they
    are "reused" as zero rows."""
    n = upstream.num_rows
    plan = np.full((n, 2), -1, dtype=np.int64)
    ids = previous.column("doc_id")
    if previous.num_rows:
        ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
        starts = np.flatnonzero(np.r_[True, np.asarray(pc.not_equal(ids[1:], ids[:-1]).fill_null(True))])
        stops = np.r_[starts[1:], previous.num_rows]
        doc = pc.take(ids, pa.array(starts))
        digest = pc.take(previous.column("content_hash"), pa.array(starts))
        at = pc.index_in(upstream.column("doc_id"), value_set=doc)
        found = np.asarray(at.is_valid())
        pos = np.asarray(at.fill_null(0), dtype=np.int64)
        same = found & np.asarray(pc.equal(pc.take(digest, pa.array(pos)),
                                           upstream.column("content_hash")).fill_null(False))
        plan[same, 0], plan[same, 1] = starts[pos[same]], stops[pos[same]]
    if nothing is not None:
        plan[nothing] = (0, 0)
    return plan


def runs(plan: np.ndarray, start: int, stop: int) -> tuple:
    """Rows [start, stop) of a plan as runs: ("new", a, b) — upstream rows to make again —
    and ("old", s, e, n) — previous rows to copy, made from n documents.  Consecutive
    reused documents whose previous rows are consecutive too make one run."""
    out: list = []
    for i in range(start, stop):
        s, e = int(plan[i, 0]), int(plan[i, 1])
        last = out[-1] if out else None
        if s < 0:
            if last and last[0] == "new" and last[2] == i:
                out[-1] = ("new", last[1], i + 1)
            else:
                out.append(("new", i, i + 1))
        elif last and last[0] == "old" and (last[2] == s or e == s):
            out[-1] = ("old", last[1], max(last[2], e), last[3] + 1)
        else:
            out.append(("old", s, e, 1))
    return tuple(out)


class PreviousRows:
    """Rows of a previous output by position, read a row group at a time (and the last
    group kept): runs come in increasing order, so each group is read once."""

    def __init__(self, path: str):
        from .io import row_groups

        self.groups = row_groups(Path(path))
        self.firsts = [at for _, _, at, _ in self.groups]
        self._cached: tuple[int, pa.Table] | None = None

    def _group(self, g: int) -> pa.Table:
        if self._cached is None or self._cached[0] != g:
            f, group, _, _ = self.groups[g]
            self._cached = (g, pq.ParquetFile(f).read_row_group(group))
        return self._cached[1]

    def take(self, start: int, stop: int) -> Iterator[pa.Table]:
        while start < stop:
            g = bisect.bisect_right(self.firsts, start) - 1
            _, _, at, n = self.groups[g]
            k = min(stop, at + n) - start
            yield self._group(g).slice(start - at, k)
            start += k


@dataclass(frozen=True)
class Reusing:
    """A stage's partition function, run only on the documents that changed; the rows of
    the others are copied from the previous output, in document order.

    A part is `(RowRange, runs)`; `fn` gets a RowRange of upstream rows to make anew.
    `extras` is what the stage yields beside each table (02: its furniture counts, zero
    for copied rows).  Picklable, so a Dask worker runs it as it runs `fn`."""

    fn: Callable
    previous: str
    extras: tuple = ()

    def __call__(self, part) -> Iterator:
        from .engine import RowRange, advance

        rows, plan_runs = part
        previous = PreviousRows(self.previous)
        for kind, a, b, *n in plan_runs:
            if kind == "new":
                yield from self.fn(RowRange(rows.path, a, b))
                continue
            for table in previous.take(a, b):
                yield (table, *self.extras) if self.extras else table
            advance(n[0])


def reuse_parts(ctx, parts: list, fn, nothing_column: str | None = None, extras: tuple = ()):
    """`(fn, parts)` for ctx.write_partitions, with unchanged documents' rows copied from
    the previous output when it may be reused (else as given).  Also returns how many
    upstream documents were reused, for the stage's summary."""
    from .io import read_meta

    previous = ctx.main_output
    meta = read_meta(previous) if previous.exists() and not ctx.force else None
    if not meta or meta.get("row_fingerprint") != ctx.row_fingerprint:
        return fn, parts, 0
    columns = ["doc_id", "content_hash"] + ([nothing_column] if nothing_column else [])
    upstream = read_columns(ctx.upstream_path, columns)
    nothing = None
    if nothing_column:
        nothing = ~np.asarray(pc.fill_null(pc.equal(upstream.column(nothing_column), "ok"), False))
    plan = plan_reuse(upstream, read_columns(previous, ["doc_id", "content_hash"]), nothing)
    reused = int(np.count_nonzero(plan[:, 0] >= 0) - (np.count_nonzero(nothing) if nothing is not None else 0))
    if reused == 0:
        return fn, parts, 0
    return Reusing(fn, str(previous), extras), [(p, runs(plan, p.start, p.stop)) for p in parts], reused
