"""Reusing the previous run's rows for what has not changed: a rerun costs what changed.

Rerunning after a tweak is what this pipeline is for, and on a real folder the tweak a
user makes most often is to the documents themselves.  Without this, adding one 80-byte
Markdown file to a 530-page manual rebuilt everything (104 s for a 77 s first run).
Build tools have the answer (make, DVC, a documentation builder): unchanged inputs cost
nothing.  Here it works at two levels:

- **Files (stage 01).**  Each input file's content hash is recorded beside its size,
  modification time and change time in `01_files.parquet`, one row per listed file.  A
  rerun hashes only the files whose stat changed (or that changed too close to the last
  listing to trust the clock: git's "racily clean" files), and takes the previous row of
  every file whose hash and place are unchanged.  Content, not timestamps, decides:
  `touch` changes nothing, and a file whose bytes changed with its size and mtime put
  back is still seen (its change time moved).
- **Documents (stages 02 and 03).**  Every row carries its source document's
  `content_hash` from stage 01.  Each stage records a *row fingerprint*: the hash of the
  config values and code of every stage up to it, but not of the input files.  When the
  previous output's row fingerprint equals today's, a document whose content hash is
  the one its previous rows were made from gets those rows back, untouched.  A setting
  that changes every document (`chunking.target`) changes the row fingerprint, so the
  stage reruns for all of them.  Copied rows are not decoded and written again: the
  sink copies the row groups they fill as bytes (pipekit/run/parquet_copy.py), so a
  rerun's stages 01-03 cost the documents that changed and the row group each falls in.
- **Counts (stage 04, local engine).**  The term counts of an unchanged document's
  chunks are the previous index's postings, renumbered, with the new chunks' counts put
  in their places: one partition, as a --force run counts it (merged_counts; an index in
  shards by document is cut into runs and merged as a cluster merges partitions).  N,
  avgdl, df and idf are computed anew, since one new chunk changes them all (the postings
  hold counts only: stage 05 computes each BM25 weight, so the merge has no float pass).
- **Vectors (stage 04, either engine, with `indexing.dense_model`).**  Chunks are embedded
  in blocks cut by their chunk ids, and each block of 04_vectors.parquet carries a key
  hashing the model, the embedding code and its texts; a block whose key the previous
  vectors hold is copied from them (pipekit/index/dense.py, `Blocks`): a model folder embeds a
  few chunks a second, so re-embedding a whole folder for one added file cost minutes.

What it deliberately does not do: decide freshness (pipekit/run/freshness.py does, per
stage, and a `--force` run reuses nothing), reuse on a cluster in stage 04 (its counts
live on the workers), or reuse anything in stage 05.
The outputs are exactly those of a `--force` run — same rows, order, values and
provenance — which tests/test_incremental.py checks for every kind of change.
"""
from __future__ import annotations

import bisect
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipekit.run.arrays import run_starts
from pipekit.run.hashing import content_hash, digest, file_hash, hashed_ahead

RACY_NS = 2_000_000_000  # a file changed this close to the last listing is hashed again
NAMES_SHOWN = 3  # paths named per kind of change in `--status`
FEW_RUNS = 8  # stage 04 finds this many reused runs' postings by a scan each, more by one sort


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
        stamp = list(e.stamp) if e.stamp is not None else _stamp(e.path)  # the walk's stat, when it made one
        if stamp is None:
            files[e.doc_id] = [None, None, None, "unreadable"]
            continue
        was = old.get(e.doc_id)
        # Short: a folder of 100k files lists 100k of these.
        where = content_hash(f"{e.path}|{e.format}|{e.guessed}|{e.note}|{e.max_bytes}".encode())
        if was and was[:3] == stamp and max(stamp[1], stamp[2]) < racy_after and was[3].endswith("|" + where):
            # Without the copy it was last time: whether it still is one is decided anew
            # (pipekit/read/walk.py), as the file it copied may have changed or gone.
            files[e.doc_id] = [*stamp, plain_key(was[3])]
            continue
        memo = (str(e.path), *stamp)
        if memo not in _HASHED:  # run_pipeline lists twice (plan, then the stage): hash once
            try:
                # Hashed on a thread while the command imported, if it was (pipekit/read/early.py).
                _HASHED[memo] = hashed_ahead(e.path) or file_hash(e.path)
            except OSError:
                _HASHED[memo] = "unreadable"
        files[e.doc_id] = [*stamp, f"{_HASHED[memo]}|{where}"]
    return {"listed_ns": listed_ns, "files": files}


def plain_key(key: str) -> str:
    """A read file's listing key, `hash|where`, without the `copy of DOC_ID|` that the walk
    puts before the key of a file with the same bytes as one read before it: the copy's
    row names that file, so which file it copies is part of what its row depends on."""
    return "|".join(key.rsplit("|", 2)[-2:])


COPY = "copy of "  # how the walk marks a copy's listing key (pipekit/read/walk.py: read_same_bytes_once)


def content_of(key: str) -> str | None:
    """The content hash in a read file's listing key (None for a skipped or unreadable one)."""
    parts = key.rsplit("|", 2)
    return parts[-2] if len(parts) > 1 and parts[-2] != "unreadable" else None


LISTING_SCHEMA = pa.schema([("doc_id", pa.string()), ("size", pa.int64()), ("mtime_ns", pa.int64()),
                            ("ctime_ns", pa.int64()), ("key", pa.string())])


def listing_table(listing: dict) -> pa.Table:
    """A listing as the rows of 01_files.parquet (its time goes in the file's metadata)."""
    files = listing["files"]
    columns = list(zip(*([d, *v] for d, v in files.items()))) or [()] * 5
    return pa.table([pa.array(c, t.type) for c, t in zip(columns, LISTING_SCHEMA)], schema=LISTING_SCHEMA)


def read_listing(path: Path) -> dict | None:
    """01_files.parquet back as a listing (None when there is none, or it is unreadable)."""
    from pipekit.run.io import parquet_file, read_meta

    try:
        table = parquet_file(path).read()  # not pq.read_table: it imports pandas (0.5 s of a --status)
    except (OSError, pa.ArrowException):
        return None
    listed_ns = (read_meta(path) or {}).get("listed_ns", 0)
    rows = zip(*(table.column(n).to_pylist() for n in LISTING_SCHEMA.names))
    return {"listed_ns": listed_ns, "files": {d: [size, m, c, k] for d, size, m, c, k in rows}}


def keys_of(listing: dict) -> list:
    """The part of a listing that decides freshness (stamps are only a cache of hashes)."""
    return sorted((doc_id, v[3]) for doc_id, v in listing["files"].items())


def _skip_reason(key: str | None) -> str | None:
    """The reason a listing's entry was skipped (list_files writes `skipped: <reason>`), or None."""
    return key[len("skipped: "):] if key and key.startswith("skipped: ") else None


def _inside(folder: str, names: list[str]) -> list[str]:
    return [d for d in names if d.startswith(folder + "/")]


def _shown(names: list[str]) -> str:
    return ", ".join(names[:NAMES_SHOWN]) + (", …" if len(names) > NAMES_SHOWN else "")


def describe_changes(before: dict | None, now: dict) -> str:
    """Why stage 01's input differs, in the user's terms, from two listings:
    `input changed: 1 added (notes/new.md), 0 changed, 0 removed`, and apart from it what a
    setting did to files that did not change on disk: `2 no longer excluded (tables/incidents.csv,
    web/)`, `1 now skipped (big.pdf): file is …, over documents.max_bytes`.

    Why apart: a file that leaves the exclusion changes its listing key from its skip reason
    to its hash, and an excluded folder's one row gives way to its files; counted as file
    changes, a user who had only removed a pattern read `1 changed (tables/incidents.csv),
    1 removed (web)` and looked for what had changed on disk.  So with copies (files of the
    same bytes, read once: pipekit/read/walk.py): a copy whose original went or changed is
    read now, `1 no longer a copy, read now (backup/guide.pdf)`, not `1 changed`."""
    if not before or "files" not in before:
        return "input files changed (the previous output recorded no file list)"
    old, new = before["files"], now["files"]
    added = [d for d in new if d not in old]
    removed = [d for d in old if d not in new]
    changed = [d for d in new if d in old and new[d][3] != old[d][3]]
    unskipped: list[tuple[str, str]] = []  # (name, its old reason)
    skipped: list[tuple[str, str]] = []  # (name, its new reason)
    # Same bytes on disk, but a copy now or no longer one: its row changes, not its file.
    uncopied = [d for d in changed if old[d][3].startswith(COPY) and plain_key(old[d][3]) == new[d][3]]
    copied = [d for d in changed if new[d][3].startswith(COPY) and plain_key(new[d][3]) == plain_key(old[d][3])]
    changed = [d for d in changed if d not in uncopied and d not in copied]
    for d in changed[:]:
        was, is_ = _skip_reason(old[d][3]), _skip_reason(new[d][3])
        if (was is None) != (is_ is None):
            changed.remove(d)
            (unskipped.append((d, was)) if was else skipped.append((d, is_)))
    # A skipped folder is one row; its files take its place when it is no longer skipped.
    for d in removed[:]:
        inner = _inside(d, added)
        if _skip_reason(old[d][3]) and inner:
            removed.remove(d)
            added = [a for a in added if a not in inner]
            unskipped.append((d + "/", _skip_reason(old[d][3])))
    for d in added[:]:
        inner = _inside(d, removed)
        if _skip_reason(new[d][3]) and inner:
            added.remove(d)
            removed = [r for r in removed if r not in inner]
            skipped.append((d + "/", _skip_reason(new[d][3])))

    def part(n_word: str, names: list[str]) -> str:
        return f"{len(names):,} {n_word}" + (f" ({_shown(names)})" if names else "")

    parts = []
    if added or changed or removed or not (unskipped or skipped or uncopied or copied):
        parts.append("input changed: " + ", ".join([part("added", added), part("changed", changed),
                                                     part("removed", removed)]))
    else:
        parts.append("no input file changed on disk")
    if unskipped:
        excluded = all("excluded" in r or "documents.include" in r for _, r in unskipped)
        parts.append(part("no longer excluded" if excluded else "no longer skipped", [d for d, _ in unskipped]))
    if skipped:
        reasons = {r for _, r in skipped}
        how = "now excluded" if all("excluded" in r or "documents.include" in r for r in reasons) else "now skipped"
        parts.append(part(how, [d for d, _ in skipped]) + (f": {reasons.pop()}" if len(reasons) == 1 else ""))
    if uncopied:
        parts.append(part("no longer a copy, read now", uncopied))
    if copied:
        parts.append(part("now a copy of a file read", copied))
    return "; ".join(parts)


def reusable_rows(entries: list, listing: dict, previous_path: Path | None,
                  previous_listing: dict | None) -> list[int]:
    """For each entry, the row of the previous 01 output to take instead of reading the
    file, or -1.  Skipped rows are copied too, though they cost nothing to make: made
    anew, the 562 skipped build files of a Sphinx folder cut the copied rows into
    hundreds of pieces (and the output into as many row groups)."""
    out = [-1] * len(entries)
    if previous_path is None or not previous_listing:
        return out
    old = previous_listing.get("files", {})
    table = read_columns(previous_path, ["doc_id"])
    row_of = {d: i for i, d in enumerate(table.column("doc_id").to_pylist())}
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
    return digest({"upstream": upstream, "config": section, "code": code})


def read_columns(path: Path, columns: list[str]) -> pa.Table:
    from pipekit.run.io import read_table

    return read_table(path, columns)


def doc_starts(ids: pa.Array) -> np.ndarray:
    """Where each document's run of rows begins (every stage writes a document's rows together)."""
    return np.flatnonzero(np.r_[True, np.asarray(pc.not_equal(ids[1:], ids[:-1]).fill_null(True))])


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
        starts = doc_starts(ids)
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
    group kept): runs come in increasing order, so each group is read once.

    Their texts (io.LONG_TEXT columns) are left in the file, nulls here: the rows go to
    a sink that copies their row groups as bytes and reads the texts itself for the few
    rows it encodes, and the stages count other columns of copied rows (on a cluster they
    get only their `keep` columns).  Decompressing 18 MB of texts to throw them away was
    ~30 ms of each of stages 01-03 in a rerun.  `texts=True` reads them.

    `columns`: the only columns the stage reads of copied rows (its summary's: what a
    cluster hands back as `keep`); the others are left in the file too, nulls here, for
    the same reason.  Stage 03's seventeen other columns of 14,600 chunks were read whole
    only to be dropped, 13-28 ms of a one-file rerun; its summary reads doc_id and
    end_char (bench/README.md, "One-file reruns: ... (branch inc6)")."""

    def __init__(self, path: str, texts: bool = False, columns: tuple[str, ...] | None = None):
        from pipekit.run.io import LONG_TEXT, row_groups, schema

        self.path = Path(path)
        self.groups = row_groups(self.path)
        self.firsts = [at for _, _, at, _ in self.groups]
        self._cached: tuple[int, pa.Table] | None = None
        self._files: dict[Path, pq.ParquetFile] = {}  # opened once: reopening per group tripled the reads
        fields = schema(self.path) if self.groups else pa.schema([])
        self.left_out = [] if texts else \
            [f for f in fields if f.name in LONG_TEXT or (columns is not None and f.name not in columns)]
        unread = {f.name for f in self.left_out}
        self._columns = None if not unread else [n for n in fields.names if n not in unread]
        self._names = fields.names

    def _group(self, g: int) -> pa.Table:
        if self._cached is None or self._cached[0] != g:
            f, group, _, n = self.groups[g]
            if f not in self._files:
                from pipekit.run.io import parquet_file

                self._files[f] = parquet_file(f)
            table = self._files[f].read_row_group(group, columns=self._columns)
            for field in self.left_out:  # in its place, so the table has the output's columns
                table = table.add_column(self._names.index(field.name), field, pa.nulls(n, field.type))
            self._cached = (g, table)
        return self._cached[1]

    def slices(self, start: int, stop: int) -> Iterator[pa.Table]:
        while start < stop:
            g = bisect.bisect_right(self.firsts, start) - 1
            _, _, at, n = self.groups[g]
            k = min(stop, at + n) - start
            yield self._group(g).slice(start - at, k)
            start += k

    def take(self, start: int, stop: int) -> Iterator[pa.Table]:
        """Rows [start, stop) as one table (its slices joined, not copied), marked as
        these rows of the previous output: the sink copies the row groups they fill as
        bytes (pipekit/run/io.py, COPIED), not decoded and compressed again."""
        from pipekit.run.io import copied_rows

        pieces = list(self.slices(start, stop))
        if pieces:
            yield copied_rows(pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0], self.path, start,
                              texts=not self.left_out)


@dataclass(frozen=True)
class Reusing:
    """A stage's partition function, run only on the documents that changed; the rows of
    the others are copied from the previous output, in document order.

    A part is `(RowRange, runs)`; `fn` gets a RowRange of upstream rows to make anew.
    `extras` is what the stage yields beside each table (02: its furniture counts, zero
    for copied rows); `columns`, the columns the stage reads of the tables (None: all but
    the texts; PreviousRows).  Picklable, so a Dask worker runs it as it runs `fn`."""

    fn: Callable
    previous: str
    extras: tuple = ()
    columns: tuple[str, ...] | None = None

    def __call__(self, part) -> Iterator:
        from pipekit.run.engine import RowRange, advance

        rows, plan_runs = part
        previous = PreviousRows(self.previous, columns=self.columns)
        for kind, a, b, *n in plan_runs:
            if kind == "new":
                yield from self.fn(RowRange(rows.path, a, b))
                continue
            for table in previous.take(a, b):
                yield (table, *self.extras) if self.extras else table
            advance(n[0])


def reuse_parts(ctx, parts: list, fn, nothing_column: str | None = None, extras: tuple = (),
                summary: tuple[str, ...] | None = None):
    """`(fn, parts)` for ctx.write_partitions, with unchanged documents' rows copied from
    the previous output when it may be reused (else as given).  Also returns how many
    upstream documents were reused, for the stage's summary.  `summary`: the columns the
    stage reads of the tables write_partitions yields (the copied rows' others stay unread)."""
    from pipekit.run.io import read_meta

    previous = ctx.main_output
    meta = read_meta(previous) if previous.exists() and not ctx.force else None
    if not meta or ctx.row_fingerprint is None or meta.get("row_fingerprint") != ctx.row_fingerprint:
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
    return Reusing(fn, str(previous), extras, summary), [(p, runs(plan, p.start, p.stop)) for p in parts], reused


# ---- stage 04: the counts of unchanged chunks ----------------------------------------------

def chunk_runs(current: pa.Table, previous: pa.Table) -> list[tuple]:
    """Stage 04's runs over the chunks of 03_chunks: ("new", a, b) to count, and
    ("old", a, b, s) — chunks a..b-1 are the previous index's s..s+(b-a)-1, made from the
    same document text with the same settings, so their counts are the previous ones.
    Both tables hold doc_id and content_hash per chunk."""
    ids = current.column("doc_id").combine_chunks()
    n = len(ids)
    if n == 0:
        return []
    starts = doc_starts(ids)
    stops = np.r_[starts[1:], n]
    docs = current.take(pa.array(starts)).select(["doc_id", "content_hash"])
    plan = plan_reuse(docs, previous)
    out: list[tuple] = []
    for (a, b), (s, e) in zip(zip(starts.tolist(), stops.tolist()), plan.tolist()):
        if s < 0 or e - s != b - a:  # a changed (or new) document: its chunks are counted
            if out and out[-1][0] == "new" and out[-1][2] == a:
                out[-1] = ("new", out[-1][1], b)
            else:
                out.append(("new", a, b))
        elif out and out[-1][0] == "old" and out[-1][2] == a and out[-1][3] + (a - out[-1][1]) == s:
            out[-1] = ("old", out[-1][1], b, out[-1][3])
        else:
            out.append(("old", a, b, s))
    return out


def previous_counts(postings: pa.Table, terms: pa.Array, lengths: np.ndarray, olds: list[tuple]) -> list[dict]:
    """Stage 04's per-partition counts (terms, col_ptr, chunk, tf, lengths) of each old
    run, cut out of the previous index: its postings are term-major and its term ids
    alphabetical, so a run's postings, kept in order, are already its own term-major
    counts.  One stable sort over all postings finds every run's share (linear in the
    index, however many runs).

    Memory is what this costs, not arithmetic: a rerun's process gets its pages fresh
    from the kernel (after a full run, from the host as well), and the first version
    here, in int64 throughout with a mask and an index array per step, touched ~70 MB
    for 856k postings and took 0.19 s of a one-file rerun, 0.04 s when the pages were
    warm.  So the columns stay in their stored int32, each posting's run is one 16-bit
    look-up in a table by chunk, and a posting of a changed document sorts after every
    run instead of being filtered out first."""
    chunk = _ints(postings.column("chunk"))
    term = _ints(postings.column("term_id"))
    tf = _ints(postings.column("tf"))
    gone = len(olds)  # the run number of a chunk no old run keeps: sorts last
    run_of = np.full(len(lengths), gone, dtype=np.uint16 if gone < 1 << 16 else np.int64)
    for r, (_, a, b, s) in enumerate(olds):
        run_of[s:s + (b - a)] = r
    key = run_of[chunk]
    # An index in shards by document (indexing.shard_chunks) is term-major shard by shard:
    # a run that spans two shards gets its postings in term order (then corpus order,
    # which a stable sort keeps) the slow way, by both keys.
    sharded = len(term) > 1 and bool((term[1:] < term[:-1]).any())
    if len(olds) <= FEW_RUNS:
        # One file changed leaves two or three runs: a scan per run finds its postings
        # in order, where sorting all of them (even NumPy's radix sort of 16-bit keys)
        # took 50 ms of a 0.9 s rerun.
        found = [np.flatnonzero(key == r) for r in range(len(olds))]
        if sharded:
            found = [sel[np.argsort(term[sel], kind="stable")] for sel in found]
    else:
        by_run = np.lexsort((term, key)) if sharded else np.argsort(key, kind="stable")
        bounds = np.r_[0, np.cumsum(np.bincount(key, minlength=gone + 1))]
        found = [by_run[bounds[r]:bounds[r + 1]] for r in range(len(olds))]
    out = []
    for sel, (_, a, b, s) in zip(found, olds):
        t = term[sel]  # ascending: the postings are term-major (or sorted so) and the sort kept their order
        starts = np.flatnonzero(run_starts(t))
        out.append({"terms": terms.take(pa.array(t[starts])), "col_ptr": np.r_[starts, len(t)].astype(np.int64),
                    "chunk": (chunk[sel] - np.int32(s)).astype(np.int32, copy=False), "tf": tf[sel],
                    "lengths": lengths[s:s + (b - a)].astype(np.int64)})
    return out


def merged_counts(postings: pa.Table, terms: pa.Array, lengths: np.ndarray, runs_: list[tuple],
                  new_counts: list[dict]) -> dict | None:
    """Stage 04's counts of the whole corpus as ONE partition: the previous index's
    postings with their chunks renumbered (a removed document's dropped), and the new
    chunks' postings (`new_counts`, one per "new" run, in order) put in their places.

    What a partition merge would give from the runs' own counts (previous_counts), in one
    pass over the postings: the merge copied each posting twice and built a vocabulary per
    run, ~40 ms of a 0.8 s one-file rerun.  None when the previous postings are not in
    term-then-chunk order after renumbering (an index in shards by document): the caller
    takes the runs apart then."""
    term = _ints(postings.column("term_id"))
    chunk = _ints(postings.column("chunk"))
    tf = _ints(postings.column("tf"))
    n = runs_[-1][2] if runs_ else 0
    new_of_old = np.full(len(lengths), -1, dtype=np.int32)
    new_lengths = np.zeros(n, dtype=np.int64)
    for r in runs_:
        if r[0] == "old":
            _, a, b, s = r
            new_of_old[s:s + (b - a)] = np.arange(a, b, dtype=np.int32)
            new_lengths[a:b] = lengths[s:s + (b - a)]
    renumbered = new_of_old[chunk]
    kept = renumbered >= 0
    removed = not kept.all()
    if removed:
        term, renumbered, tf = term[kept], renumbered[kept], tf[kept]
    news = [r for r in runs_ if r[0] == "new"]
    new_names = [c["terms"].cast(terms.type) for c in new_counts]
    # The usual rerun (files added or edited, none removed, no word the index lacks): every
    # previous term keeps its postings and its id, so the terms are the previous ones and
    # only the new postings need placing.  Checked, not assumed: each previous term still
    # has a posting, each new chunk's term is one of them.  The general way below (the
    # union of the terms sorted anew, every posting's term id looked up again) took 15-45 ms
    # of a one-file rerun's stage 04 in a fresh process, for ids that had not moved.
    df = np.bincount(term, minlength=len(terms)) if not removed else None
    if df is not None and bool((df > 0).all()) and \
            all(pc.index_in(names, value_set=terms).null_count == 0 for names in new_names):
        union = terms
    else:
        df = None
        # Every term still in the index, old (with postings left) or new, in Arrow's sort order.
        present = np.bincount(term, minlength=len(terms)) > 0
        names = [terms.filter(pa.array(present))] + new_names
        union = pc.unique(pa.concat_arrays(names)) if len(names) > 1 else names[0]
        union = union.take(pc.sort_indices(union))
        old_ids = np.asarray(pc.index_in(terms, value_set=union).fill_null(-1), dtype=np.int32)
        term = old_ids[term]
    # Term-major, each term's chunks ascending: the renumbering keeps the documents' order.
    # (In place: each temporary of the 835k postings' size is fresh pages in a rerun's process.)
    key = term.astype(np.int64)
    key *= max(n, 1)
    key += renumbered
    if len(key) > 1 and not bool((key[1:] > key[:-1]).all()):
        return None
    add_term, add_chunk, add_tf = [], [], []
    for (_, a, b), counts, names in zip(news, new_counts, new_names):
        ids = np.asarray(pc.index_in(names, value_set=union), dtype=np.int32)
        add_term.append(np.repeat(ids, np.diff(counts["col_ptr"])))
        add_chunk.append(np.asarray(counts["chunk"], dtype=np.int32) + np.int32(a))
        add_tf.append(np.asarray(counts["tf"], dtype=np.int32))
        new_lengths[a:b] = counts["lengths"]
    if add_term:
        t_new, c_new, f_new = (np.concatenate(x) for x in (add_term, add_chunk, add_tf))
        new_key = t_new.astype(np.int64) * max(n, 1) + c_new
        order = np.argsort(new_key, kind="stable")
        at = np.searchsorted(key, new_key[order])
        term = np.insert(term, at, t_new[order])
        renumbered = np.insert(renumbered, at, c_new[order])
        tf = np.insert(tf, at, f_new[order])
    col_ptr = np.zeros(len(union) + 1, dtype=np.int64)
    if df is not None:  # the previous terms' counts plus the new postings', not a count of all again
        df += np.bincount(np.concatenate(add_term), minlength=len(union)) if add_term else 0
    np.cumsum(df if df is not None else np.bincount(term, minlength=len(union)), out=col_ptr[1:])
    return {"terms": union, "col_ptr": col_ptr, "chunk": renumbered.astype(np.int32, copy=False),
            "tf": tf.astype(np.int32, copy=False), "lengths": new_lengths}


def _ints(column: pa.ChunkedArray) -> np.ndarray:
    """An int32 column of the index as NumPy, without a copy when it is one piece."""
    return column.combine_chunks().to_numpy() if column.num_chunks != 1 else column.chunk(0).to_numpy()


def reused_counts(ctx, count_range: Callable, cited: list[str]) -> tuple[list[dict] | None, int]:
    """Stage 04's partition counts with every unchanged chunk's counts taken from the
    previous index (None: count everything).  Stage 04's statistics are global, so only
    the counting is reused: N, avgdl, df and idf are computed anew from
    the merged counts (one partition, merged_counts; or, for an index in shards, one per
    run, merged as a cluster merges its partitions': the same tables, tested).
    On the local engine only: a cluster's counts stay on its workers."""
    from pipekit.run.engine import RowRange, advance, iter_rows
    from pipekit.run.io import read_meta, read_table

    folder = ctx.output_dir
    names = [folder / n for n in ("04_chunks.parquet", "04_terms.parquet", "04_postings.parquet")]
    if ctx.force or ctx.engine.kind != "local" or not all(p.exists() for p in names):
        return None, 0
    if ctx.row_fingerprint is None or \
            any((read_meta(p) or {}).get("row_fingerprint") != ctx.row_fingerprint for p in names):
        return None, 0
    from pipekit.run.io import schema

    if not all("content_hash" in schema(p).names for p in (names[0], ctx.upstream_path)):
        return None, 0
    previous = read_table(names[0], ["doc_id", "content_hash", "length"])
    runs_ = chunk_runs(read_table(ctx.upstream_path, ["doc_id", "content_hash"]), previous)
    olds = [r for r in runs_ if r[0] == "old"]
    if not olds:
        return None, 0
    postings = read_table(names[2], ["term_id", "chunk", "tf"])
    terms = read_table(names[1], ["term"]).column("term").combine_chunks()
    lengths = np.asarray(previous.column("length"))
    news = [count_range(RowRange(str(ctx.upstream_path), a, b)) for _, a, b in (r for r in runs_ if r[0] == "new")]
    merged = merged_counts(postings, terms, lengths, runs_, news)
    if merged is not None:
        advance(sum(b - a for _, a, b, _ in olds))
        # What 04_chunks cites comes from today's 03 rows (the same chunks, by construction).
        merged["meta"] = pa.Table.from_batches(list(iter_rows(RowRange(str(ctx.upstream_path), 0, runs_[-1][2]), cited)))
        return [merged], sum(b - a for _, a, b, _ in olds)
    old_counts = iter(previous_counts(postings, terms, lengths, olds))
    new_counts = iter(news)
    out = []
    for r in runs_:
        if r[0] == "new":
            out.append(next(new_counts))
            continue
        counts = next(old_counts)
        advance(r[2] - r[1])
        # What 04_chunks cites comes from today's 03 rows (the same chunks, by construction).
        counts["meta"] = pa.Table.from_batches(list(iter_rows(RowRange(str(ctx.upstream_path), r[1], r[2]), cited)))
        out.append(counts)
    return out, sum(b - a for _, a, b, _ in olds)
