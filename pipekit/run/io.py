"""Parquet in and out: provenance metadata on every file, atomic writes.

Every output carries one key-value entry, `pipekit`, holding JSON that says which stage
wrote it, with which config values, from which upstream output (by fingerprint), with
which code.  run_pipeline compares that record with the present to decide whether a
stage is fresh, and `python -m pipekit show FILE` prints it.

Writes go to `<name>.tmp-<pid>` beside the target and are renamed over it only when
the stage has finished: a run killed half-way (Ctrl-C, OOM, a signal) leaves the
previous output whole and readable, never a truncated Parquet file.

A rerun's rows copied from the previous output (`copied_rows`) are written as the bytes
of the row groups they fill, not decoded and compressed again (ParquetSink, with
pipekit/run/parquet_copy.py): an output with texts is written in row groups of about
GROUP_BYTES, so a change re-encodes one or two of them.

An output is one Parquet file (the local engine) or a *dataset*: a folder of part files
`part-00000.parquet`, `part-00001.parquet`, ... whose rows, read in name order, are the
output's rows (the Dask engine: each worker writes its partitions' rows itself, so no
row travels through the client).  Every part carries the same `pipekit` record.  All
the readers here take either form, and so do `pandas.read_parquet` and DuckDB
(`'data/03_chunks.parquet/*.parquet'`).
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipekit.run.errors import PipelineError

META_KEY = b"pipekit"
LONG_TEXT = frozenset({"text"})  # columns holding whole documents or chunks: written plain
DISTINCT = frozenset({"chunk"})  # columns whose values rarely repeat: no dictionary, no codec
# (stage 04's chunk numbers: snappy kept 100 % of their bytes in every row group, and compressing
# them was a fifth of writing 04_postings: 1.2 s of one thread at a million passages, the write
# phase's one serial chain; bench/README.md, branch `w04`)
# LONG_TEXT columns' codec; the rest keep Parquet's default, snappy.  None: stages 01-03 each
# write the texts once and the next stage reads them once, and compressing them was the
# largest item of the writer (LZ4, the codec before: 0.27 s of CPU of 0.43 s to write 200k
# passages' 01_documents, against 0.06 s plain; its decoding 84 ms a read, where snappy's
# took 579).  The price is disk: LZ4 kept 66 % of the bench's synthetic texts (a 200k
# corpus's 01-03 outputs 79-85 MB each, 115-121 MB plain); every stage's CPU, stage 05's
# reads of its hits' texts and the trade measured: bench/README.md, "Scale" (issue 47).
TEXT_CODEC = "none"
# Row groups of an output with a LONG_TEXT column hold about this many bytes (decoded), so
# a rerun copies unchanged groups as bytes (COPIED, below) and encodes again only the few
# a change falls in: a group is copied whole or not at all.  Written as one group, stage
# 01's 18 MB of text made one added file re-encode all of it (~50 ms a stage); 2 MB groups
# cost a full run nothing measurable (8 groups where there were 1-3).
GROUP_BYTES = 2 << 20
# Schema metadata on a table of a previous output's rows (`copied_rows`): [output, first
# row, rows, whether its LONG_TEXT columns hold the texts or nulls in their place].
# ParquetSink copies the row groups those rows fill as bytes.
COPIED = b"pipekit.copied"


class _PandasNotYet:
    """An import finder that says pandas is missing, for the moment `defer_pandas` needs."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "pandas":
            raise ImportError("pandas deferred: pipekit.run.io.defer_pandas")
        return None


def defer_pandas() -> None:
    """Keep pyarrow from importing pandas until something asks for a DataFrame.

    The first time pyarrow turns any list or NumPy array into an Arrow array it imports
    pandas, only to ask whether the object is a Series: 0.25 s of every stage process (a
    fifth of a rerun that adds one file, whose stages never touch pandas).  pyarrow tries
    that import once, so it is made to fail once, here: pyarrow remembers "no pandas" for
    that check, and still imports pandas the moment a DataFrame is asked for (`to_pandas`,
    `Table.from_pandas`; from then on it recognises Series again).  Only the scripts call
    this, before their first Arrow array: their own code never gives pyarrow a pandas
    object, so the check answers the same without pandas.  A library user's process
    (Searcher in a notebook) is left as pyarrow made it."""
    if "pandas" in sys.modules:
        return  # already loaded: the check costs nothing
    sys.meta_path.insert(0, _PandasNotYet)
    try:
        pa.array([0])  # pyarrow's one look for pandas happens now, and finds none
    finally:
        sys.meta_path.remove(_PandasNotYet)


def steady_memory() -> None:
    """Give Arrow's buffers to jemalloc rather than pyarrow's default, mimalloc.

    mimalloc asks the kernel for transparent huge pages, and where the kernel compacts
    memory to find them on the spot (`defrag` = madvise, the default of many distributions
    and of this bench's machine) a fault can stall for milliseconds: the same rerun of
    bench/incremental.py that adds one file took 0.83 to 1.54 s, the spread all system
    time (0.16 to 0.89 s).  With jemalloc (4 KiB pages) it took 0.85 to 1.05 s, system time
    0.22 to 0.34 s.  Only the scripts call this, before a stage reads anything; a user who
    chose a pool (ARROW_DEFAULT_MEMORY_POOL) keeps it, and a pyarrow built without jemalloc
    keeps its default; so does a run_pipeline process, whose Arrow allocates from glibc's
    malloc (malloc.arrow_on_malloc: with 4 KiB pages too, and handed back after each stage)."""
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL") or pa.default_memory_pool().backend_name == "system":
        return
    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except (NotImplementedError, pa.ArrowException):
        pass


PART = "part-{:05d}.parquet"  # a dataset's part files: zero-padded, so name order is row order


def part_files(path: Path) -> list[Path]:
    """The Parquet files holding an output's rows, in row order: the file itself, or a
    dataset folder's part files (temp files of a run still writing are not parts)."""
    path = Path(path)
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.name.startswith("part-") and p.name.endswith(".parquet"))
    return [path]


# Footers parsed in this process, by their bytes (the few last used): parquet_file.
_FOOTERS: dict[bytes, pq.FileMetaData] = {}
_FOOTERS_KEPT = 16
_FOOTERS_LOCK = threading.Lock()


def parquet_file(f, **options) -> pq.ParquetFile:
    """`pq.ParquetFile(f, **options)`, its footer parsed once a process for the same bytes.

    A one-file rerun opened its outputs 83 times (provenance, row groups, columns, rows,
    rows copied), and pyarrow parses the whole footer at every open: ~0.3 ms for a text
    output's 13 row groups of 18 columns, against ~0.02 ms to read the footer's bytes
    (a few tens of KB) and hand pyarrow the metadata it made of the same bytes before
    (bench/README.md, "One-file reruns: ... (branch inc6)").  Keyed by the bytes, not by
    the file: the same bytes are the same metadata wherever they are read, so a file
    rewritten since is read through its own footer; and they are read through the handle
    pyarrow then reads, so a file replaced meanwhile cannot pair one file's footer with
    another's metadata."""
    source = pa.OSFile(str(f))
    footer = None
    try:
        size = source.size()
        if size >= 12:
            source.seek(size - 8)
            tail = source.read(8)
            n = int.from_bytes(tail[:4], "little")
            if tail[4:] == b"PAR1" and n + 12 <= size:
                source.seek(size - 8 - n)
                footer = source.read(n)
        with _FOOTERS_LOCK:
            known = _FOOTERS.pop(footer, None) if footer is not None else None
            if known is not None:
                _FOOTERS[footer] = known  # the last used, last out
        opened = pq.ParquetFile(source, metadata=known, **options)
    except BaseException:
        source.close()
        raise
    if footer is not None and known is None:
        with _FOOTERS_LOCK:
            _FOOTERS[footer] = opened.metadata
            while len(_FOOTERS) > _FOOTERS_KEPT:
                del _FOOTERS[next(iter(_FOOTERS))]
    return opened


def row_groups(path: Path) -> list[tuple[Path, int, int, int]]:
    """Every row group of an output, file by file: (file, group, first row, rows), the
    first row counted across the whole output.  A dataset's footers only are read."""
    out, at = [], 0
    for f in part_files(path):
        md = parquet_file(f).metadata
        for g in range(md.num_row_groups):
            n = md.row_group(g).num_rows
            out.append((f, g, at, n))
            at += n
    return out


def column_max(path: Path, name: str) -> int | None:
    """The largest value of a numeric column, from its row groups' statistics (the footers
    only; None when a group has none, or the output has no rows)."""
    largest = None
    for f in part_files(path):
        md = parquet_file(f).metadata  # (the footer stage 05's other reads of the file parse: once)
        i = md.schema.to_arrow_schema().get_field_index(name)
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            if rg.num_rows == 0:
                continue
            stats = rg.column(i).statistics
            if stats is None or not stats.has_min_max:
                return None
            largest = stats.max if largest is None else max(largest, stats.max)
    return largest


def output_size(path: Path) -> int:
    """Bytes on disk of an output, a file or a dataset folder."""
    return sum(f.stat().st_size for f in part_files(path))


def read_meta(path: Path) -> dict | None:
    """The provenance record of an output, or None if it has none (or is unreadable).
    A dataset's parts all carry the same record: the first one's is read."""
    files = part_files(path) if Path(path).exists() else [path]
    if not files:
        return None
    try:
        meta = parquet_file(files[0]).metadata.metadata or {}
    except (OSError, pa.ArrowException):
        return None
    raw = meta.get(META_KEY)
    return json.loads(raw) if raw else None


def copied_rows(table: pa.Table, output: Path, start: int, texts: bool = True) -> pa.Table:
    """`table`, rows [start, start + len) of a previous `output`, marked so (COPIED) for
    the sink that writes them again: it copies the row groups they fill as bytes.
    `texts=False`: the table's LONG_TEXT columns are nulls, the texts still in `output`;
    the sink reads them there for any row it encodes.  A sink that cannot copy (another
    schema, rows that are not those of the mark) encodes the rows as any others."""
    marked = dict(table.schema.metadata or {})
    marked[COPIED] = json.dumps([str(output), int(start), table.num_rows, bool(texts)]).encode()
    return table.replace_schema_metadata(marked)


def read_table(path: Path, columns: list[str] | None = None) -> pa.Table:
    try:
        # ParquetFile, not pq.read_table: that one imports pyarrow.dataset first, which
        # cost each stage ~0.4 s before reading a single row.
        files = part_files(path)
        if len(files) == 1:
            return parquet_file(files[0]).read(columns=columns)
        if not files:
            raise OSError("the dataset folder holds no part files")
        return pa.concat_tables(parquet_file(f).read(columns=columns) for f in files)
    except (OSError, pa.ArrowException) as exc:
        raise PipelineError(f"cannot read {path}: {exc}") from None


def iter_batches(path: Path, columns: list[str] | None = None,
                 batch_size: int = 2048) -> Iterator[pa.RecordBatch]:
    """Stream a Parquet file so memory stays flat however large it is."""
    try:
        # pre_buffer=False: the default keeps every row group read so far in memory, so a
        # "streaming" read of a 1M-row file grew to 500 MB instead of staying near 190.
        for f in part_files(path):
            yield from parquet_file(f, pre_buffer=False).iter_batches(batch_size=batch_size, columns=columns)
    except (OSError, pa.ArrowException) as exc:
        raise PipelineError(f"cannot read {path}: {exc}") from None


def sweep_orphans(path: Path) -> None:
    """Delete `<name>.tmp-<pid>` files left by runs that were killed (their pid is gone).

    A SIGKILL gives a stage no chance to clean up; without this, every killed run of a
    large stage would leave a big dead file beside its output for ever."""
    for tmp in [*path.parent.glob(f"{path.name}.tmp-*"), *path.parent.glob(f"{path.name}.old-*")]:
        pid = tmp.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            _remove(tmp)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def replace_output(tmp: Path, target: Path) -> None:
    """Move a finished output (file or dataset folder) over the previous one, whatever
    form that had.  Same form, a file: one atomic rename.  Otherwise (a folder, or a file
    replaced by a folder) the old one is renamed aside first and deleted after: readers
    see the old output or the new, and a run killed between the two renames leaves
    `<name>.old-<pid>`, which the next run sweeps, and the new output already in place."""
    if not (target.is_dir() or tmp.is_dir()) or not target.exists():
        _replace_file(tmp, target)
        return
    old = target.with_name(f"{target.name}.old-{os.getpid()}")
    _remove(old)
    os.replace(target, old)
    os.replace(tmp, target)
    _remove(old)


# Old outputs being unlinked on a thread of their own (`_replace_file`); `settle` waits for them.
_FREEING: list[threading.Thread] = []


def _replace_file(tmp: Path, target: Path) -> None:
    """One atomic rename of a finished file over the previous output, as before; only the
    freeing of the old file's blocks is taken off the stage's path.

    Renamed over, an 8-11 MB output is unlinked inside the rename, and the file system frees
    its blocks there: 5.8-6.7 ms a rename, against 0.1-0.3 ms for a small file (`strace -T`,
    a one-file rerun of the bench folder, four such files a run).  So the old file gets a
    second name first (a hard link, `<name>.old-freed-<pid>`), the rename then only drops a
    name, and the second name is unlinked on a thread while the next stage starts.  The
    rename is still the one step that switches old for new: a crash before it leaves the old
    output in place, after it the new (the extra name is swept by the next run, as every
    `.old-<pid>`).  Where hard links fail (a file system without them, a name already
    taken), the plain rename."""
    aside = target.with_name(f"{target.name}.old-freed-{os.getpid()}")
    try:
        os.link(target, aside)
    except OSError:
        os.replace(tmp, target)
        return
    try:
        os.replace(tmp, target)
    finally:  # renamed or not, the second name goes: the target holds the old file or the new
        freeing = threading.Thread(target=_unlink_quietly, args=(aside,), name="pipekit-free-old-output")
        freeing.start()
        _FREEING[:] = [t for t in _FREEING if t.is_alive()] + [freeing]  # a server commits for days


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass  # gone already (swept by another run), or not ours to remove: the next run's sweep


def settle() -> None:
    """Wait until the old outputs replaced so far are unlinked (before a command ends)."""
    while _FREEING:
        _FREEING.pop().join()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, it is someone else's
        return True
    return True


def parquet_schema(schema: pa.Schema) -> pq.ParquetSchema:
    """The Parquet schema our writer makes of an Arrow schema: asked of Parquet itself, by
    writing the schema's empty table to memory, rather than spelled out type by type here."""
    buf = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), buf)
    return pq.ParquetFile(pa.BufferReader(buf.getvalue())).metadata.schema


def leaf_columns(written: pq.ParquetSchema) -> list[str]:
    """Every Parquet column path of a schema as written (`parquet_schema`), as Parquet names
    them (a list's values are `<name>.list.element`, a map's `<name>.key_value.key`, ...):
    per-column options name these, and a column a compression dict leaves out is written
    uncompressed."""
    return [written.column(i).path for i in range(len(written))]


# A previous output at least this large has its pages handed back while the new one is written
# (`OldPages`); a smaller one (a folder's outputs, 19 MB a stage) keeps them for its reruns.
OLD_PAGES_BYTES = 32 << 20


class OldPages:
    """The page cache of the output a sink replaces, handed back to the kernel as the new
    output grows (posix_fadvise DONTNEED, as many bytes as have been written), so that the
    new file's pages are the ones just let go of, not new ones.

    On this project's machine (a VM whose balloon hands free memory back to the host) a page
    of page cache never used before costs a fault in the host: writing a 300 MB file took
    1.5-2.0 s of system time, and 0.09-0.11 s where the same amount of an older file's pages
    were dropped just before each write (bench/README.md, branch s01).  The previous output
    was freed anyway, but only at the commit, after the new one had been written into new
    pages.  Its bytes stay on disk untouched, and it stays the output until the rename: a run
    that fails or is interrupted leaves it in place, only read from disk the next time.
    The advice never changes a byte read; where there is no posix_fadvise, nothing happens."""

    def __init__(self, fd: int, size: int):
        self.fd, self.size, self.dropped = fd, size, 0

    @classmethod
    def of(cls, path: Path) -> "OldPages | None":
        if not hasattr(os, "posix_fadvise"):
            return None
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:  # none yet (a first run), or a dataset folder's (Dask): left alone
            return None
        try:
            info = os.fstat(fd)
            if stat.S_ISREG(info.st_mode) and info.st_size >= OLD_PAGES_BYTES:
                return cls(fd, info.st_size)
        except OSError:
            pass
        os.close(fd)
        return None

    def drop_to(self, written: int) -> None:
        """The old file's first `written` bytes handed back (those not handed back before)."""
        end = min(written, self.size)
        if end > self.dropped:
            try:
                os.posix_fadvise(self.fd, self.dropped, end - self.dropped, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass
            self.dropped = end

    def close(self) -> None:
        os.close(self.fd)


class ParquetSink:
    """Write record batches to a temp file; `commit()` renames it over the target."""

    def __init__(self, path: Path, schema: pa.Schema, meta: dict, make_folder: bool = True):
        self.path = Path(path)
        self.tmp = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}")
        if make_folder:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        sweep_orphans(self.path)
        metadata = dict(schema.metadata or {})
        metadata[META_KEY] = json.dumps(meta, sort_keys=True, default=str).encode()
        self.schema = schema.with_metadata(metadata)
        self.rows = 0
        # A document's text is one value of up to documents.max_bytes: Parquet's defaults
        # copied it three more times while writing it (a dictionary attempt, then min and
        # max statistics of the column), which made stage 01 peak at 11x a 100 MB log.
        # Texts are never filtered on nor repeated, so neither is of any use for them.
        # A posting's chunk (and its float64 impact, which stage 04 stored until issue 47) are
        # nearly all distinct: Parquet tried a dictionary for them in every row group, gave up
        # when it overflowed and wrote them plain anyway, which made writing 27M postings
        # take 3.2 s instead of 1.4 (and the file 15 % larger).  Repetitive columns (term_id,
        # tf, doc_id) keep their dictionaries.
        # Options name Parquet's leaf columns, each under its field (the name before the dot).
        options = {}
        # The Parquet schema, asked of Parquet once a sink (~1 ms): its options need it, and
        # a rerun's copy (`_source`) compares the previous output's with it.
        self._written = None
        if any(n in LONG_TEXT or n in DISTINCT for n in schema.names):
            self._written = parquet_schema(schema)
            leaves = [(c, c.split(".")[0]) for c in leaf_columns(self._written)]
            options["use_dictionary"] = [c for c, f in leaves if f not in LONG_TEXT | DISTINCT]
            if any(n in LONG_TEXT for n in schema.names):
                options["write_statistics"] = [c for c, f in leaves if f not in LONG_TEXT]
            # Texts are most of every byte stages 01-03 write and stages 02-05 read back:
            # written as they are (TEXT_CODEC), the other columns compressed but DISTINCT's.
            options["compression"] = {c: TEXT_CODEC if f in LONG_TEXT else "none" if f in DISTINCT else "snappy"
                                      for c, f in leaves}
        self._writer = pq.ParquetWriter(self.tmp, self.schema, **options)
        # Encoding and compressing a batch (Parquet's C++, which lets go of the GIL) runs on
        # a thread of its own while the stage makes the next batch: the stages compute on
        # one core, and writing was a fifth of a 200k-passage run.  One batch in flight at
        # most, so memory holds at most one batch more than writing in line did.
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="parquet-sink")
        self._in_flight = None
        self._fd, self._synced = None, 0  # the file's bytes whose write-back has been started (`_write`)
        self._old = OldPages.of(self.path)  # the previous output's cached pages, handed back as this one grows
        # Text outputs: rows gather until they fill a group of ~GROUP_BYTES (else as given).
        self._group_bytes = GROUP_BYTES if any(n in LONG_TEXT for n in schema.names) else None
        self._pending: list[pa.Table] = []
        self._pending_bytes = 0
        # The output's row groups in order: ("encoded", rows) written by the writer above,
        # ("copied", file, footer group) taken as bytes from a previous output at close.
        self._pieces: list[tuple] = []
        self._sources: dict[str, list] = {}
        # Copied rows that continue each other (a stage yields a run of them per document
        # group), gathered before their groups are chosen: rows 0-89 and 90-5257 of the
        # previous output fill its first group between them, and taken apart that group
        # was encoded again.  [output, start, stop, texts, tables]
        self._run: list | None = None

    def __enter__(self) -> "ParquetSink":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # Only close here: the rename happens when the whole stage has succeeded.
        if exc_type is None:
            self.close()

    def write(self, data: pa.RecordBatch | pa.Table) -> None:
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        if data.num_rows == 0:
            return
        mark = (data.schema.metadata or {}).get(COPIED)
        # Cast so a batch built from Python lists (int64, string) lands in the declared schema;
        # only then: Table.cast rebuilt the table under the schema's provenance metadata even
        # when every column already had its type, ~0.9 ms a batch (0.085 s of stage 02 at 200k
        # passages).  The writer keeps its own schema's metadata either way.
        table = data.select(self.schema.names)
        if not table.schema.equals(self.schema, check_metadata=False):
            table = table.cast(self.schema)
        self.rows += data.num_rows
        mark = json.loads(mark) if mark else None
        if mark and not mark[3]:
            if mark[2] != data.num_rows:
                raise PipelineError(f"{self.path.name}: {data.num_rows:,} copied rows marked as {mark[2]:,}")
            if not self._group_bytes:  # no copying here: the rows as they are, texts and all
                table = self._previous(mark[0], mark[1], mark[1] + mark[2])
        if mark and self._group_bytes:
            output, start, rows, texts = mark
            run = self._run
            if run and (run[0], run[2], run[3]) == (output, start, texts):
                run[2] += rows
                run[4].append(table)
                return
            self._end_run()
            self._run = [output, start, start + rows, texts, [table]]
        else:
            self._end_run()
            self._add(table)

    def _end_run(self) -> None:
        if self._run:
            output, start, stop, texts, tables = self._run
            self._run = None
            self._copy(pa.concat_tables(tables) if len(tables) > 1 else tables[0], output, start, stop - start, texts)

    def _add(self, table: pa.Table) -> None:
        """Rows to encode: at once, or (a text output) once they fill a group."""
        self._pending.append(table)
        self._pending_bytes += table.nbytes
        if not self._group_bytes or self._pending_bytes >= self._group_bytes:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        table = pa.concat_tables(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending, self._pending_bytes = [], 0
        options = {}
        if self._group_bytes:
            groups = -(-table.nbytes // self._group_bytes)
            options["row_group_size"] = max(1, -(-table.num_rows // groups))
        self._finish_in_flight()  # rows land in the order they were given
        self._in_flight = self._thread.submit(self._write, table, options)
        self._pieces.append(("encoded", table.num_rows))

    def _write(self, table: pa.Table, options: dict) -> None:
        """Encode a batch, then have the disk start on the bytes written so far (without
        waiting: parquet_copy.start_writeback).  The fsync at close must wait for every byte,
        and it used to be the only write-back: ~1 s of each of stages 01-03 at a million
        passages (400 MB each), while the next batches were being made."""
        self._writer.write_table(table, **options)
        from pipekit.run.parquet_copy import start_writeback

        if self._fd is None:
            self._fd = os.open(self.tmp, os.O_RDONLY)
        size = os.fstat(self._fd).st_size
        start_writeback(self._fd, self._synced, size - self._synced)
        self._synced = size
        if self._old is not None:
            if self._run or self._sources or any(p[0] == "copied" for p in self._pieces):
                self._old.close()  # a rerun copies the previous output's groups: their pages stay
                self._old = None
            else:
                self._old.drop_to(size)

    def _previous(self, output: str, start: int, stop: int) -> pa.Table:
        """Rows [start, stop) of a previous output, texts and all, in this sink's schema."""
        pieces = []
        for f, g, first, n in row_groups(Path(output)):
            lo, hi = max(start, first), min(stop, first + n)
            if lo < hi:
                pieces.append(parquet_file(f).read_row_group(g).slice(lo - first, hi - lo))
        return pa.concat_tables(pieces).select(self.schema.names).cast(self.schema)

    def _copy(self, table: pa.Table, output: str, start: int, rows: int, texts: bool = True) -> None:
        """Rows [start, start + rows) of a previous output: each row group of it they fill
        is copied as bytes at close; rows of a group they fill in part are encoded (with
        the new rows beside them, as one group: a rerun does not split the output into
        ever more groups).  A whole group is encoded too when only a few rows wait to be:
        alone they would make a small group of their own, one more each rerun."""
        groups = self._source(output) if rows == table.num_rows else []
        if not groups:
            self._add(table if texts else self._previous(output, start, start + rows))
            return
        stop = start + rows
        for path, group, first, n in groups:
            lo, hi = max(start, first), min(stop, first + n)
            if lo >= hi:
                continue
            whole = (lo, hi) == (first, first + n)
            if whole and (not self._pending or self._pending_bytes >= self._group_bytes // 2):
                self._flush()
                self._pieces.append(("copied", path, group))
            else:
                self._add(table.slice(lo - start, hi - lo) if texts else self._previous(output, lo, hi))

    def _source(self, output: str) -> list:
        """A previous output's row groups that can be copied as bytes: (file, footer group,
        first row, rows); empty when none can (another schema, page indexes...)."""
        if output not in self._sources:
            from pipekit.run import parquet_copy

            found, at = [], 0
            try:
                ours = self._written or parquet_schema(self.schema)
                for f in part_files(Path(output)):
                    # Parquet's schema, not Arrow's: Arrow's equality ignores the names of a
                    # list's parts, and a group whose chunks say `path.list.item` under a
                    # footer saying `path.list.element` reads as nulls in other readers.
                    if not parquet_file(f).metadata.schema.equals(ours):
                        raise parquet_copy.Unsupported("another schema")
                    with parquet_copy.no_collection():
                        groups = parquet_copy.row_groups(parquet_copy.read_footer(f))
                    for group in groups:
                        parquet_copy.span(group)  # raises if the group cannot be copied
                        n = parquet_copy.num_rows(group)
                        found.append((f, group, at, n))
                        at += n
            except (OSError, parquet_copy.Unsupported):
                found = []
            self._sources[output] = found
        return self._sources[output]

    def _finish_in_flight(self) -> None:
        """Wait for the batch being written; its error, if any, is raised here, in the stage."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            in_flight.result()

    def close(self) -> None:
        if self._writer is not None:
            try:
                self._end_run()
                self._flush()
                self._finish_in_flight()
            finally:
                self._thread.shutdown()
                self._close_files()
            self._writer.close()
            self._writer = None
            if any(p[0] == "copied" for p in self._pieces):
                self._splice()  # fsyncs what it writes
                return
            with open(self.tmp, "rb") as fh:
                os.fsync(fh.fileno())

    def _splice(self) -> None:
        """The output's row groups in order, from the encoded file and the previous output,
        as bytes, into the file that becomes the output.  The encoded file's footer gives
        the output's schema and provenance (this run's)."""
        from pipekit.run import parquet_copy

        with parquet_copy.no_collection():
            footer = parquet_copy.read_footer(self.tmp)
        encoded = iter(parquet_copy.row_groups(footer))
        pieces = []
        for piece in self._pieces:
            if piece[0] == "copied":
                pieces.append((piece[1], piece[2]))
                continue
            rows = piece[1]
            while rows > 0:  # the writer may have cut one table into several groups
                group = next(encoded)
                pieces.append((self.tmp, group))
                rows -= parquet_copy.num_rows(group)
        spliced = self.path.with_name(f"{self.path.name}.tmp-spliced-{os.getpid()}")  # swept if killed
        try:
            with parquet_copy.no_collection():
                parquet_copy.splice(spliced, pieces, footer)
            os.replace(spliced, self.tmp)
        finally:
            spliced.unlink(missing_ok=True)

    def commit(self) -> None:
        self.close()
        replace_output(self.tmp, self.path)

    def abort(self) -> None:
        self._pending, self._pieces, self._run = [], [], None
        try:
            if self._writer is not None:
                try:
                    self._finish_in_flight()
                except Exception:
                    pass  # the stage is failing already: its own error is the one to report
                finally:
                    self._thread.shutdown()
                    self._writer.close()
        finally:
            self._writer = None
            self._close_files()
            self.tmp.unlink(missing_ok=True)

    def _close_files(self) -> None:
        """The new file's descriptor (its write-back) and the old output's (OldPages), closed."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._old is not None:
            self._old.close()
            self._old = None


class DatasetSink:
    """A dataset output whose part files other processes write (Dask workers, each with a
    ParquetSink of its own into `tmp`): this side makes the temp folder, counts the rows
    the parts report, and on `commit()` renames the folder over the target.

    A worker killed mid-part leaves a `part-N.parquet.tmp-PID` file; the task's rerun
    writes the part whole elsewhere, and commit deletes the leftovers, so the folder
    that lands holds the parts and nothing else."""

    def __init__(self, path: Path, n_parts: int):
        self.path = Path(path)
        self.tmp = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        sweep_orphans(self.path)
        _remove(self.tmp)
        self.tmp.mkdir()
        self.n_parts = n_parts
        self.rows = 0

    def close(self) -> None:
        pass

    def commit(self) -> None:
        wanted = {PART.format(i) for i in range(self.n_parts)}
        have = {p.name for p in self.tmp.iterdir()}
        if not wanted <= have:
            raise PipelineError(f"{self.path}: part files missing after the stage ran: "
                                f"{', '.join(sorted(wanted - have)[:3])}")
        for name in have - wanted:
            _remove(self.tmp / name)
        fd = os.open(self.tmp, os.O_RDONLY)
        try:
            os.fsync(fd)  # the parts' names, not only their bytes, must be on disk before the rename
        finally:
            os.close(fd)
        replace_output(self.tmp, self.path)

    def abort(self) -> None:
        # Renamed aside before it is deleted: a worker whose task was cancelled but still
        # runs may create its part in the folder while rmtree empties it, and rmtree then
        # leaves the folder behind (seen in CI).  Under another name no worker finds it;
        # a part it then opens fails for want of the folder (workers never make it).
        aside = self.path.with_name(f"{self.path.name}.old-{os.getpid()}")
        try:
            os.replace(self.tmp, aside)
        except OSError:
            aside = self.tmp
        _remove(aside)


MAX_THREADS = 4  # beyond a few, threads mostly wait for each other (Python runs one at a time)


def cores() -> int:
    """Threads for work that NumPy and Arrow do outside the GIL: one per core, a few at most."""
    return min(os.cpu_count() or 1, MAX_THREADS)


def row_count(path: Path) -> int:
    return sum(parquet_file(f).metadata.num_rows for f in part_files(path))


def schema(path: Path) -> pa.Schema:
    """The columns of an output, a file or a dataset folder (its parts share one schema)."""
    return parquet_file(part_files(path)[0]).schema_arrow


def thread_readers():
    """`reader(file)`: a ParquetFile of that file for the calling thread, opened on its first
    use there and kept.  A ParquetFile is not shared across threads; one a row group was
    what the readers below opened before, and opening parses the whole footer: 03_chunks'
    is 640 KB at 1M passages (350 row groups of 18 columns), ~15 ms an open, so stage 05's
    10,000 hit texts took 1.5 s, most of it re-reading that footer (issue 47)."""
    local = threading.local()

    def reader(f) -> pq.ParquetFile:
        readers = local.__dict__.setdefault("readers", {})
        if f not in readers:
            readers[f] = parquet_file(f)
        return readers[f]

    return reader


def read_column(path: Path, name: str, dtype, n: int, threads: int = 1, out: np.ndarray | None = None) -> np.ndarray:
    """One numeric column of n rows into one preallocated NumPy array (`out`, or a new
    one), a row group at a time on `threads` threads: loading never holds the Arrow
    table and its copy at once."""
    out = np.empty(int(n), dtype=dtype) if out is None else out
    reader = thread_readers()

    def fill(group) -> None:
        f, g, at, _ = group
        for piece in reader(f).read_row_group(g, columns=[name]).column(0).chunks:
            out[at:at + len(piece)] = piece.to_numpy()
            at += len(piece)

    # Row groups decode and copy outside the GIL: one thread per core fills its share.
    with ThreadPoolExecutor(max(threads, 1)) as pool:
        list(pool.map(fill, row_groups(path)))
    return out


def take_rows(path: Path, column: str, rows, threads: int | None = None) -> list:
    """Values of one column at the given row numbers, in that order (`take_table`)."""
    return take_table(path, [column], rows, threads).column(0).to_pylist()


def take_table(path: Path, columns: list[str], rows, threads: int | None = None) -> pa.Table:
    """Columns at the given row numbers, in that order (repeats allowed), reading only the row
    groups that hold them (rows spread over a million touch every group), one per core at a
    time: a group's decoding lets go of the GIL, and stage 05's top 10 of 1,000 queries read
    every text of the corpus to keep 10,000.  Several columns of a row are one read of its group
    (stage 05's hits: their texts, titles and citations, pipekit/retrieve/results.py)."""
    groups = row_groups(path)
    bounds = np.array([at for _, _, at, _ in groups] + [sum(n for *_, n in groups)], dtype=np.int64)
    rows = np.asarray(rows, dtype=np.int64)
    order = None if len(rows) < 2 or bool((rows[1:] >= rows[:-1]).all()) else np.argsort(rows, kind="stable")
    ascending = rows if order is None else rows[order]
    cuts = np.searchsorted(ascending, bounds)  # group g's rows: ascending[cuts[g]:cuts[g + 1]]
    reader = thread_readers()

    def part(g: int) -> pa.Table:
        f, k, start, _ = groups[g]
        table = reader(f).read_row_group(k, columns=columns)
        return table.take(pa.array(ascending[cuts[g]:cuts[g + 1]] - start))

    held = [g for g in range(len(groups)) if cuts[g + 1] > cuts[g]]
    # Each thread holds one group's columns at a time: memory grows with the threads, not the groups.
    with ThreadPoolExecutor(max(1, min(threads or cores(), len(held)))) as pool:
        parts = list(pool.map(part, held))
    if not parts:
        return schema(path).empty_table().select(columns)
    table = pa.concat_tables(parts)
    if order is None:
        return table
    back = np.empty(len(rows), dtype=np.int64)
    back[order] = np.arange(len(rows))
    return table.take(pa.array(back))
