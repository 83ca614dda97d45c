"""Stage 01 — documents: one row per input document, read or accounted for.

Reads  `documents.input`: a folder (walked recursively, in sorted order), one file, or a
       BEIR corpus `.jsonl` (`_id`, `title`, `text` per line).  `documents.include` and
       `documents.exclude` are glob patterns on paths relative to the input;
       `documents.hidden` decides whether dot-files and dot-folders are read.
       Nothing outside the input is read unless `documents.follow_links` says so, and no
       file larger than `documents.max_bytes` is read at all.
Writes `01_files.parquet`: the files listed, with their content hashes (what the next run
       compares: a file unchanged since is not read again, its row is copied).
       `01_documents.parquet`: doc_id, source, format, text, status, error, path, title,
       encoding, page_labels, note, n_bytes, outline — one row per file (per record
       for BEIR).

What a row says:
- `status` is `ok` (text holds the document), `error` (it could not be read: `error`
  names the problem — binary, undecodable, encrypted or corrupt PDF, permission denied)
  or `skipped` (deliberately not read: `error` says why — unsupported format, hidden,
  excluded, a symlink loop, a dangling link, a named pipe, an extensionless file that
  is not text, a symlink leading out of the input, a file over `documents.max_bytes`,
  a second name for a file already read, a copy of one already read (the same bytes:
  the first in sorted order is read, the others name it)).  A hidden or excluded *folder* is one skipped row, not entered.  A bad
  file never stops the run, because one broken file in a folder of thousands must not
  cost the other thousands.
- `format` is markdown, text, pdf, html, rst, csv, docx, epub, notebook, python or beir; for a
  skipped file, its extension.
- Jupyter notebooks (.ipynb) and Python sources (.py) arrive as Markdown: a notebook's cells
  (never its JSON; text outputs with `documents.notebook_outputs`), a module's docstrings
  under headings that are their qualified names (pipekit/read/notebook.py, python.py).
- Word (.docx) and EPUB arrive as Markdown too, by the HTML path (pipekit/read/docx.py,
  epub.py): a zip bomb is refused unread, and their XML never expands an entity.
- PDFs get a `--- page N ---` line before each page (N physical, from 1), so stage 03
  can tell every chunk its pages; the PDF's own page labels go to `page_labels`, and
  its outline (bookmarks: level, title, page) to `outline`, from which stage 03 takes
  the chunks' headings.
- HTML arrives as Markdown, so headings, lists, tables and code keep their structure;
  so does reStructuredText, read by docutils (section titles at the levels it gives).
- A documentation generator's build output (a Sphinx or MkDocs folder, known by its
  marker files) is read for its pages only: `_sources/` (a raw copy of every page, which
  outranked the pages themselves), `_static/`, the index and search pages are `skipped`
  rows saying what they are (`documents.build_files: true` reads them).
- A source tree's tests folder (named tests, test or testing and holding test code; not
  `documents.input` itself) is `skipped` file by file: read, test docstrings outranked the
  docs beside them (pipekit/read/source_tests.py; `documents.test_files: true` reads them).
- CSV keeps its original text: stage 03 cuts between its records and must be able to
  point at exact character spans.  A malformed CSV (ragged rows, an unclosed quote) is
  still `ok` — its text is readable — with the problem in `note`.
- Files without an extension (README, LICENSE) are read as plain text if they are text.
- Symlinks: a link whose target lies inside the input is read, once — a file reached by
  two names is one document (read under its own name, the link's name noted); one that
  leads outside is a `skipped` row naming its target, because a search index is shared
  and pasted into prompts, and a link to `/etc` or a home folder must not widen what it
  holds without the user asking (`documents.follow_links: true`).
- `documents.max_bytes`: one 5 GB log would take the machine down in stages 02–04, so a
  larger file is a `skipped` row naming its size and the key to raise, never a crash.
- The summary counts how many files were read through symlinks and, by reason, how many
  were skipped (outside, too large, hidden, unknown format, ...), and names the files read
  with nothing to index (a PDF without a text layer: `ok`, but it gives no chunk).
- `encoding` is the codec the bytes were decoded with; `note` holds what a careful
  reader would mention (a detected encoding, a PDF without a text layer, a ragged CSV).
- A rerun reads only what changed: a file whose content hash and place are as
  `01_files.parquet` recorded gets its previous row back, unread (pipekit/run/incremental.py;
  only files whose size or times moved are hashed again).  The output is a `--force`
  run's, row for row.

What it deliberately does not do: clean the text (stage 02 normalises line ends, Unicode
and control characters, so every format is cleaned by the same rules), guess structure
that is not marked up (a PDF without an outline has no headings), run OCR, or follow links out
of HTML.  A malformed BEIR line does stop the stage, with file, line and problem: a
corpus with a broken record is a broken corpus, not one unreadable document.

The readers themselves live in `pipekit/read/`; this file is the stage's loop.  The files
are read on every core (`engine.workers`), in processes, as no reader shares a core well
(pipekit/read/parallel.py); the rows are the same, in the same order, as one process reads.
"""
from __future__ import annotations

import pipekit  # first: outside the virtualenv it says how to activate it, not a traceback
import sys

if __name__ == "__main__":  # run alone: reading starts while the imports below load (pipekit/read/early.py)
    from pipekit.read.early import begin

    begin(sys.argv[1:])

from collections import Counter  # noqa: E402 (below: the imports the early start overlaps)
from functools import partial
from pathlib import Path
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from pipekit.cli import stage_main
from pipekit.run.commands import finish
from pipekit.run.engine import StageFunction, advance, line_ranges
from pipekit.read import beir_ahead
from pipekit.read.fastpath import beir_tables
from pipekit.run.incremental import PreviousRows, listing_table, read_listing, reusable_rows
from pipekit.run.errors import PipelineError
from pipekit.run.io import read_meta
from pipekit.read.pages import ANCHORS_TYPE, OUTLINE_TYPE
from pipekit.read.beir import iter_beir
from pipekit.read.documents import COLUMNS
from pipekit.read.parallel import Readers, workers_wanted
from pipekit.read.walk import SKIP_REASONS, list_inputs
from pipekit.chunk.unchunked import NO_TEXT_LAYER
from pipekit.read.html import SHRUNK

SCHEMA = pa.schema([
    ("doc_id", pa.string()),
    ("source", pa.string()),
    ("format", pa.string()),
    ("text", pa.string()),
    ("status", pa.string()),
    ("error", pa.string()),
    ("path", pa.list_(pa.string())),
    ("title", pa.string()),
    ("encoding", pa.string()),
    ("page_labels", pa.list_(pa.string())),
    ("note", pa.string()),
    ("n_bytes", pa.int64()),
    ("outline", OUTLINE_TYPE),
    ("content_hash", pa.string()),
    ("anchors", ANCHORS_TYPE),  # HTML and reST: each heading's id, for the link to a passage
])
assert tuple(SCHEMA.names) == COLUMNS

# Rows are written in batches so memory holds one batch of texts, not the corpus; each
# batch is one Parquet row group, and 512-row groups made every later reader slower.
BATCH_ROWS = 4096
BATCH_CHARS = 32 * 1024 * 1024
# Files arrive one document at a time from the reading processes: handed on every ~4 MB of
# text, so the writer thread encodes them while the files after them are read.  At 32 MB the
# Python manual's 25 MB of Markdown was one batch, encoded (and the table built) after its
# last page, with both cores' reading done: 0.05-0.1 s more of stage 01's wall time.
FILE_BATCH_CHARS = 4 * 1024 * 1024
PROBLEMS_SHOWN = 10
FILES_PER_PART = 256  # files per task on a cluster, at most
# The columns run()'s summary reads of the rows: all a cluster hands back, and all that is read
# of an unchanged file's copied row (its other columns stay in the file: pipekit/run/incremental.py).
SUMMARY = ("doc_id", "status", "format", "error", "note")
# How the early start reads a BEIR corpus before run() (pipekit/read/beir_ahead.py): as here.
beir_ahead.tables = partial(beir_tables, schema=SCHEMA, max_rows=BATCH_ROWS, max_chars=BATCH_CHARS)


def input_partitions(section: dict, rows_per_part: int | None, entries: list | None = None,
                     previous: tuple[str, list[int]] | None = None, workers: int = 1) -> list[tuple]:
    """The input, listed and cut into the parts the engine reads (anywhere):
    ("files", entries, reuse, workers) or ("beir", path, max_bytes, start byte, end byte, threads).
    `rows_per_part` None is one part (the local engine reads the input in one pass, as a
    stream).  `previous` is (01 output of the last run, its row for each entry or -1):
    a file unchanged since then is not read again, its row is copied.  `workers`: the
    processes that read a part's files (pipekit/read/parallel.py)."""
    if entries is None:
        entries = list_inputs(Path(section["input"]), section["include"], section["exclude"],
                              section["hidden"], section["follow_links"], section["max_bytes"],
                              build_files=section["build_files"], test_files=section["test_files"])
    if len(entries) == 1 and entries[0].format == "beir":
        path, max_bytes = str(entries[0].path), section["max_bytes"]
        # Two blocks of records at once where there are two cores (one parsed while the
        # other is hashed): stage 01 on one core left the second idle through a corpus.
        threads = min(workers, 2)
        if rows_per_part is None:
            return [("beir", path, max_bytes, 0, None, threads)]
        return [("beir", path, max_bytes, a, b, threads) for a, b in line_ranges(path, rows_per_part)]
    # Files vary from bytes to megabytes (a PDF): small groups even when records are many.
    step = max(len(entries) if rows_per_part is None else min(rows_per_part, FILES_PER_PART), 1)
    path, rows = previous if previous else (None, [-1] * len(entries))
    return [("files", tuple(entries[i:i + step]), (path, tuple(rows[i:i + step])), workers)
            for i in range(0, len(entries), step)]


def read_partition(part: tuple) -> Iterator[pa.Table]:
    """The stage-01 rows of one part, in order (one row per entry), as tables of bounded size."""
    if part[0] == "beir":
        # Columns, not a dict per record: iter_beir's rows, in the same batches (pipekit/read/fastpath.py);
        # begun while the listing hashed the file, when it was (pipekit/read/beir_ahead.py).
        for table in beir_ahead.take(*part[1:]) or beir_tables(Path(part[1]), part[2], part[3], part[4], SCHEMA,
                                                               BATCH_ROWS, BATCH_CHARS, part[5]):
            advance(table.num_rows)
            yield table
        return
    entries, (previous, rows) = part[1], part[2]
    old = PreviousRows(previous, columns=SUMMARY) if previous else None  # copied rows: what run() reads of them
    k = 0
    # The files are read on `workers` processes when there is enough to read (a rerun that
    # reads one changed file starts none); the rows come back in the entries' order.
    with Readers(part[3]) as readers:
        while k < len(entries):
            # A run of files read now, then a run of unchanged files whose rows are copied.
            j = k
            while j < len(entries) and rows[j] < 0:
                j += 1
            for batch in batches(_counted(readers.read(entries[k:j])), max_chars=FILE_BATCH_CHARS):
                yield pa.Table.from_pylist(batch, schema=SCHEMA)
            k = j
            while j < len(entries) and rows[j] >= 0 and rows[j] - rows[k] == j - k:
                j += 1
            if j > k:
                yield from old.take(rows[k], rows[k] + j - k)
                advance(j - k)
                k = j


def _counted(rows: Iterable[dict]) -> Iterator[dict]:
    for row in rows:
        yield row
        advance()


def batches(rows: Iterable[dict], max_rows: int = BATCH_ROWS,
            max_chars: int = BATCH_CHARS) -> Iterator[list[dict]]:
    """Group rows into lists bounded by row count and by total text size."""
    batch, chars = [], 0
    for row in rows:
        batch.append(row)
        chars += len(row["text"] or "")
        if len(batch) >= max_rows or chars >= max_chars:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


class Tally:
    """Counts by status and format, and the first problems by name, for the summary.

    Kept apart from the rows so that a corpus of millions of records costs a few
    counters here, not a second copy of its doc_ids.  What the walk decided is counted
    too: how many files came through symlinks, and why files were skipped (a user who
    finds a document missing from the results looks here first).
    """

    def __init__(self, shown: int = PROBLEMS_SHOWN):
        self.statuses: Counter = Counter()
        self.formats: Counter = Counter()
        self.reasons: Counter = Counter()
        self.linked = 0
        self.problems: list[str] = []
        self.shown = shown
        # Read, but nothing to index: a PDF without a text layer is `ok` (not broken) and
        # gave no chunk without a word said until its note reached the summary.
        self.blank = 0
        self.blank_named: list[str] = []
        # An HTML page whose converted text is less than half its visible text (issue 48: ten
        # SQLAlchemy pages lost 384,000 characters to the navigation filter, all `ok`, unsaid).
        self.shrunk = 0
        self.shrunk_named: list[str] = []

    def add(self, row: dict) -> None:
        self.statuses[row["status"]] += 1
        if row["status"] == "ok":
            self.formats[row["format"]] += 1
        elif len(self.problems) < self.shown:
            self.problems.append(f"{row['status']:7} {row['doc_id']}: {row['error']}")

    @property
    def total(self) -> int:
        return sum(self.statuses.values())

    def add_table(self, table: pa.Table) -> None:
        """`add` for a table of rows: counts in Arrow, only the problem rows in Python."""
        status = table.column("status")
        ok = pc.equal(status, "ok")
        n_ok = pc.sum(ok).as_py() or 0
        all_ok = n_ok == table.num_rows
        # Filter the few columns counted, never the table: a reuse run passes whole copied
        # tables through here, and filtering them copied every text (18 MB on the bench's folder).
        for v in pc.value_counts(table.column("format") if all_ok else table.column("format").filter(ok)).to_pylist():
            self.formats[v["values"]] += v["counts"]
        self.statuses["ok"] += n_ok
        if not all_ok:
            for row in table.select(["status", "doc_id", "error", "format"]).filter(pc.invert(ok)).to_pylist():
                self.add(row)
        # Only rows with a note can be counted below: a BEIR corpus's tables have none.  This
        # runs on the thread every table passes through, and each Arrow call there lets go of
        # the GIL and waits to get it back from the reading threads (up to 5 ms a switch): at
        # 1M passages py-spy saw that thread ~2 s in this method, most of it waiting.
        if "note" in table.column_names and table.column("note").null_count < table.num_rows:
            blank = table.select(["doc_id", "note"]).filter(
                pc.and_(ok, pc.fill_null(pc.match_substring(table.column("note"), NO_TEXT_LAYER), False)))
            self.blank += blank.num_rows
            room = max(0, self.shown - len(self.blank_named))
            self.blank_named += [f"ok      {r['doc_id']}: {r['note']}" for r in blank.slice(0, room).to_pylist()]
            shrunk = table.select(["doc_id", "note"]).filter(
                pc.and_(ok, pc.fill_null(pc.match_substring(table.column("note"), SHRUNK), False)))
            self.shrunk += shrunk.num_rows
            room = max(0, self.shown - len(self.shrunk_named))
            self.shrunk_named += [f"ok      {r['doc_id']}: {r['note']}" for r in shrunk.slice(0, room).to_pylist()]

    def walked(self, entry, row: dict) -> None:
        if row["status"] == "ok" and entry.via_link:
            self.linked += 1
        if row["status"] == "skipped":
            # An extensionless file that turned out not to be text is of an unknown format.
            self.reasons[entry.reason or ("unknown format" if entry.guessed else "too large")] += 1

    def lines(self) -> list[str]:
        counts = ", ".join(f"{self.statuses[s]:,} {s}" for s in ("ok", "error", "skipped") if self.statuses[s])
        if self.formats:
            counts += " (" + ", ".join(f"{n:,} {f}" for f, n in sorted(self.formats.items())) + ")"
        out = [counts or "no input files"]
        if self.linked:
            out.append(f"{self.linked:,} read through a symlink (the file itself or a folder above it)")
        if self.reasons:
            out.append("skipped: " + ", ".join(f"{self.reasons[r]:,} {text}" for r, text in SKIP_REASONS.items()
                                               if self.reasons[r]))
        hidden = self.statuses["error"] + self.statuses["skipped"] - len(self.problems)
        more = [f"... and {hidden:,} more: status != 'ok' in 01_documents.parquet"] if hidden > 0 else []
        if self.blank:
            more.append(f"{self.blank:,} read with nothing to index (no text layer: scanned or image-only PDFs?)")
            more += self.blank_named
            if self.blank > len(self.blank_named):
                more.append(f"... and {self.blank - len(self.blank_named):,} more: see `note` in 01_documents.parquet")
        if self.shrunk:
            more.append(f"{self.shrunk:,} HTML page{'s' * (self.shrunk > 1)} read with less than half of "
                        f"{'their' if self.shrunk > 1 else 'its'} visible text kept (was content taken for navigation?):")
            more += self.shrunk_named
            if self.shrunk > len(self.shrunk_named):
                more.append(f"... and {self.shrunk - len(self.shrunk_named):,} more: see `note` in 01_documents.parquet")
        return out + self.problems + more


def run(ctx) -> None:
    tally = Tally()
    if ctx.listing is None:  # the input is missing: list_inputs says so, in its words
        list_inputs(Path(ctx.section["input"]))
    entries, previous = ctx.entries, None
    one_corpus = len(entries) == 1 and entries[0].format == "beir"  # its records are read anew, all
    if not ctx.force and not one_corpus and ctx.main_output.exists() and (meta := read_meta(ctx.main_output)) \
            and meta.get("row_fingerprint") == ctx.row_fingerprint:
        rows = reusable_rows(entries, ctx.listing, ctx.main_output, read_listing(ctx.path("01_files.parquet")))
        previous = (str(ctx.main_output), rows)
        reused = sum(r >= 0 for r in rows)
    # Files are read on every core here (engine.workers, null: all); on a cluster each
    # worker reads its part in its own process.
    workers = workers_wanted(ctx.cfg["engine"]["workers"]) if ctx.engine.kind == "local" else 1
    parts = input_partitions(ctx.section, ctx.engine.rows_per_part(0), entries, previous, workers)
    # A BEIR corpus read in parts: each part checks its own _ids, and here we check them
    # across parts (one set, as the single pass keeps).  Any problem is then reported by
    # rereading the corpus in one pass: the same message, with the line number in the file.
    split_beir = len(parts) > 1 and parts[0][0] == "beir"
    # The walk's verdicts (symlinks, skip reasons) stay here with the entries; the rows
    # come back one per entry, in order, so each is matched to its entry by position.
    beir = bool(parts) and parts[0][0] == "beir"
    walked = iter([] if beir else entries)
    seen: set[str] = set()
    try:
        # On a cluster each worker writes its part of the output; these columns come back.
        for table in ctx.write_partitions("01_documents.parquet", SCHEMA, StageFunction(1, "read_partition"),
                                          parts, desc="01 reading", keep=SUMMARY,
                                          total=None if beir else len(entries), unit="file",
                                          # how much this run reused, for the report's account of its times
                                          meta={"reused": {"n": reused if previous else 0, "of": len(entries),
                                                           "unit": "files"}}):
            tally.add_table(table)
            if parts[0][0] == "files":
                for status in table.column("status").to_pylist():
                    tally.walked(next(walked), {"status": status})
            if split_beir:
                ids = table.column("doc_id").to_pylist()
                seen.update(ids)
                if len(seen) < tally.total:
                    raise PipelineError("an _id appears twice")
    except PipelineError:
        if not split_beir:
            raise
        for _ in iter_beir(Path(parts[0][1]), parts[0][2]):
            pass
        raise
    if not tally.total:
        # Empty is a mistake (a wrong path, files not copied yet), not a corpus: carried on,
        # every later stage ran on nothing and stage 05 reported an nDCG of 0.
        kind = "file" if Path(ctx.section["input"]).is_file() else "folder"
        raise PipelineError(f"documents.input: the {kind} {ctx.section['input']} holds no documents to read")
    for line in tally.lines():
        ctx.note(line)
    if previous and reused:
        ctx.note(f"{reused:,} unchanged files: rows copied from the previous output, not read again")
    # What the next run compares: each file's content hash, and the stamp that saves rehashing it.
    ctx.write_table("01_files.parquet", listing_table(ctx.listing), {"listed_ns": ctx.listing["listed_ns"]})


if __name__ == "__main__":
    finish(stage_main(1, run, preview_columns=["doc_id", "format", "status", "title", "error"]))
