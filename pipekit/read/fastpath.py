"""Fast paths for collections of many short records: the per-record rules, a batch at a time.

A BEIR corpus is hundreds of thousands of one-paragraph records.  Stages 01–03 handle a
record in Python (a dict per row, six regex passes to clean it, a Markdown scan, a line
table and a packer to chunk it), and on 200,000 synthetic passages that was ~13 s of a
21 s run, for records with nothing to clean and nothing to split.  The rules are right;
only their cost per record is the problem.  This module makes the same rows with Arrow
and NumPy over whole columns, *for the records where the per-record rules provably do
nothing but the obvious*, and sends every other record down the per-record path.  Each
function says which records qualify and why its result is exactly the slow path's;
tests/test_fastpath.py draws short records (ASCII and not, titles or none, blank lines,
control characters, CRs, trailing spaces, long words) through both and compares rows.

Stage 01, `beir_tables`: the same lines (`readers.beir_lines`), each parsed by json.loads
once; a record of the usual shape (an object whose `_id` is a non-empty string, `title`
and `text` strings or absent) goes straight into columns; any other line is handed to
`readers._beir_record`, which converts it (an integer `_id`, a null title) or raises its
exact message.  What went is the dict per row and Table.from_pylist's walk over it.

Stage 02, `clean_texts`: a text that is ASCII (NFC, NFKC and NFD all leave ASCII alone),
holds no control character (so no CR, no form feed), no `--- page ` (no page, so no
furniture), no space or tab before a line end or at the end, no three newlines in a row,
does not start with a newline and holds something besides whitespace: every rule of
`clean_document` leaves it unchanged except the last, which strips the newlines at its
end and adds one.  That is one Arrow expression; the rest are cleaned one by one.

Deliberately not fast-pathed: anything with non-ASCII text (Unicode normalisation and
Unicode whitespace are the per-record code's to decide), a text of several lines in stage
03 (a line may open a heading, a list or a table: Cranfield's wrapped abstracts are
chunked one by one, cleaned as a column), files (one file is one document of any size and
structure), and strategies other than `heading`.

Measured (bench/scale.py --baseline, before/after in one run; cProfile at 200k for where
the time went): bench/README.md, "Scale".
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


__all__ = ["beir_tables", "clean_texts", "already_clean"]


# ---- stage 01: a BEIR corpus into columns ---------------------------------------------------

def beir_tables(path: Path, max_bytes: int | None, start: int, end: int | None, schema: pa.Schema,
                max_rows: int, max_chars: int) -> Iterator[pa.Table]:
    """`iter_beir`'s rows as tables of `max_rows` rows or `max_chars` characters of text
    (whichever comes first, as 01_documents.batches cuts them), built as columns."""
    from pipekit.run.hashing import content_hash
    from pipekit.run.errors import PipelineError
    from pipekit.read.beir import _beir_record, beir_lines

    from pipekit.read.walk import too_large
    path = Path(path)
    seen: set[str] = set()
    loads = json.loads
    ids, titles, texts, sizes, hashes, skipped = [], [], [], [], [], []
    chars = 0
    for line_no, raw in beir_lines(path, start, end):
        try:
            rec = loads(raw.decode("utf-8"))
        except ValueError:  # UnicodeDecodeError and JSONDecodeError: _beir_record says which
            rec = None
        if not (type(rec) is dict and type(doc_id := rec.get("_id")) is str and doc_id
                and type(title := rec.get("title", "")) is str and type(text := rec.get("text", "")) is str):
            rec = _beir_record(path, line_no, raw)  # converts what it accepts, raises on the rest
            doc_id, title, text = rec["_id"], rec["title"], rec["text"]
        if doc_id in seen:
            raise PipelineError(f"{path}, line {line_no}: _id {doc_id!r} appears twice")
        seen.add(doc_id)
        if max_bytes is not None and len(raw) > max_bytes:
            skipped.append((len(ids), too_large(len(raw), max_bytes)))
            text = None
        ids.append(doc_id)
        titles.append(title or None)
        texts.append(text)
        sizes.append(len(raw))
        hashes.append(content_hash(raw))
        chars += len(text or "")
        if len(ids) >= max_rows or chars >= max_chars:
            yield _beir_table(path, ids, titles, texts, sizes, hashes, skipped, schema)
            ids, titles, texts, sizes, hashes, skipped = [], [], [], [], [], []
            chars = 0
    if ids:
        yield _beir_table(path, ids, titles, texts, sizes, hashes, skipped, schema)


def _beir_table(path, ids, titles, texts, sizes, hashes, skipped, schema) -> pa.Table:
    n = len(ids)
    status, error = ["ok"] * n, [None] * n
    for i, message in skipped:
        status[i], error[i] = "skipped", message
    columns = {
        "doc_id": pa.array(ids, pa.string()), "source": pa.array([str(path)] * n, pa.string()),
        "format": pa.array(["beir"] * n, pa.string()), "text": pa.array(texts, pa.string()),
        "status": pa.array(status, pa.string()), "error": pa.array(error, pa.string()),
        "path": pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], pa.string())),
        "title": pa.array(titles, pa.string()), "encoding": pa.array(["utf-8"] * n, pa.string()),
        "n_bytes": pa.array(sizes, pa.int64()), "content_hash": pa.array(hashes, pa.string()),
    }
    return pa.Table.from_arrays([columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in schema],
                                schema=schema)


# ---- stage 02: texts that are clean already -------------------------------------------------

# Anything one of clean_document's rules would change, in an ASCII text (RE2 syntax: `$`
# is the end of the text only, `^` its start).
_NEEDS_CLEANING = r"[\x00-\x08\x0b-\x1f\x7f]|[ \t]\n|[ \t]$|\n\n\n|^\n|--- page "


def already_clean(texts: pa.Array) -> np.ndarray:
    """Which texts clean_document leaves as they are but for the newlines at their end."""
    ok = pc.and_(pc.string_is_ascii(texts), pc.invert(pc.match_substring_regex(texts, _NEEDS_CLEANING)))
    ok = pc.and_(ok, pc.match_substring_regex(texts, r"[^ \t\n]"))  # not only whitespace
    return np.asarray(pc.fill_null(ok, False), dtype=bool)


def _final_newline(texts: pa.Array) -> pa.Array:
    """text.strip("\\n") + "\\n" for texts that do not start with a newline."""
    return pc.binary_join_element_wise(pc.utf8_rtrim(texts, characters="\n"), "\n", "")


def clean_texts(texts: pa.Array, notes: pa.Array,
                clean_one: Callable[[str | None, str | None], tuple[str, str | None, int]]):
    """(texts, notes, furniture lines, documents with furniture) of stage 02 for a run of
    ordinary documents: the clean ones by one Arrow expression, the others by
    `clean_one(text, note) -> (text, note, furniture lines)`, one at a time."""
    fast = already_clean(texts)
    out = _final_newline(texts)
    slow = np.flatnonzero(~fast)
    if not len(slow):
        return out, notes, 0, 0
    cleaned = [clean_one(t, n) for t, n in zip(texts.take(slow).to_pylist(), notes.take(slow).to_pylist())]
    mask = pa.array(~fast)
    out = pc.replace_with_mask(out, mask, pa.array([c[0] for c in cleaned], pa.string()))
    notes = pc.replace_with_mask(notes, mask, pa.array([c[1] for c in cleaned], pa.string()))
    return out, notes, sum(c[2] for c in cleaned), sum(c[2] > 0 for c in cleaned)
