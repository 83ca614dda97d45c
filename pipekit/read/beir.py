"""A BEIR corpus (`corpus.jsonl`): one row per record, `_id`, `title` and `text`.

Unlike a folder of files, a malformed line *does* stop the run: a corpus with a broken line
is a broken corpus, not one bad file, and the message names the file and the line.
"""
from __future__ import annotations

import codecs
import json
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from pipekit.read.documents import COLUMNS
from pipekit.read.walk import _strerror, too_large
from pipekit.run.errors import PipelineError
from pipekit.run.hashing import content_hash


def iter_beir(path: Path, max_bytes: int | None = None, start: int = 0,
              end: int | None = None) -> Iterator[dict]:
    """One `ok` row per record of a BEIR corpus (`{"_id", "title", "text"}` per line);
    a record whose line is longer than `max_bytes` is a `skipped` row, as a big file is.

    `start`/`end`: only the lines that begin in that byte range (`start` a line start), so
    that workers can read a corpus in parts.  Line numbers in errors then count from the
    range's first line: the caller that split the file rescans it whole for the message."""
    path = Path(path)
    seen: set[str] = set()
    for line_no, raw in beir_lines(path, start, end):
        record = _beir_record(path, line_no, raw)
        doc_id = record["_id"]
        if doc_id in seen:
            raise PipelineError(f"{path}, line {line_no}: _id {doc_id!r} appears twice")
        seen.add(doc_id)
        row = dict.fromkeys(COLUMNS)
        row.update(doc_id=doc_id, source=str(path), format="beir", text=record["text"],
                   status="ok", path=[], title=record["title"] or None, encoding="utf-8",
                   n_bytes=len(raw), content_hash=content_hash(raw))
        if max_bytes is not None and len(raw) > max_bytes:
            row.update(text=None, status="skipped", error=too_large(len(raw), max_bytes))
        yield row


def beir_lines(path: Path, start: int = 0, end: int | None = None) -> Iterator[tuple[int, bytes]]:
    """(line number, raw bytes) of each non-blank line of a BEIR corpus that begins in
    [start, end), a UTF-8 BOM taken off the file's first line: what `iter_beir` reads.
    pipekit.read.fastpath.beir_tables cuts and numbers its blocks' lines the same way
    (tests/test_fastpath.py holds the two together)."""
    with open_corpus(path, start) as handle:
        at = start
        for line_no, raw in enumerate(handle, 1):
            if end is not None and at >= end:
                break
            at += len(raw)
            if line_no == 1 and start == 0 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            if not raw.strip():
                continue
            yield line_no, raw


RECORD_SCHEMA = pa.schema([("_id", pa.string()), ("title", pa.string()), ("text", pa.string())])


def read_records(data) -> pa.Table | None:
    """`_id`, `title` and `text` of each JSON object in `data` (bytes or an Arrow buffer),
    read by Arrow's JSON reader in C, or None where it refuses the text."""
    import pyarrow.json as pa_json

    parse = pa_json.ParseOptions(explicit_schema=RECORD_SCHEMA, unexpected_field_behavior="ignore")
    read = pa_json.ReadOptions(block_size=max(len(data), 1 << 16))  # one block: Arrow refuses a row longer than one
    try:
        return pa_json.read_json(pa.BufferReader(data), read_options=read, parse_options=parse)
    except pa.ArrowException:
        return None


def _arrow_record(raw: bytes) -> dict | None:
    """The line's `_id`, `title` and `text` as Arrow's JSON reader reads them (absent keys
    left out), or None if it reads no single object with string values there."""
    table = read_records(raw)
    if table is None or table.num_rows != 1:
        return None
    return {k: v for k, v in table.to_pylist()[0].items() if v is not None}


def open_corpus(path: Path, start: int = 0):
    """The corpus open for reading bytes from `start`, or the error a person reads."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise PipelineError(f"{path}: cannot read: {_strerror(exc)}") from None
    handle.seek(start)
    return handle


def _beir_record(path: Path, line_no: int, raw: bytes) -> dict:
    where = f"{path}, line {line_no}"
    try:
        record = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise PipelineError(f"{where}: not UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise PipelineError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    except (RecursionError, ValueError):
        # JSON that Python's reader gives up on (nesting about a thousand deep, an integer
        # of over 4,300 digits), in some field of the record: Arrow's reader, which stage
        # 01 parses whole blocks with, reads it, so a line does not depend on its neighbours.
        record = _arrow_record(raw)
        if record is None:
            raise PipelineError(f"{where}: not valid JSON (nested too deep or a number too long to read)") from None
    if not isinstance(record, dict):
        raise PipelineError(f"{where}: expected a JSON object, got {type(record).__name__}")
    if "_id" not in record:
        raise PipelineError(f"{where}: no \"_id\" field")
    doc_id = record["_id"]
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or str(doc_id) == "":
        raise PipelineError(f"{where}: \"_id\" must be a non-empty string or integer")
    out = {"_id": str(doc_id)}
    for key in ("title", "text"):
        value = record.get(key, "")
        if value is None:
            value = ""
        if not isinstance(value, str):
            raise PipelineError(f"{where}: \"{key}\" must be a string, got {type(value).__name__}")
        out[key] = value
    for key, value in out.items():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:  # json.loads turns an unpaired \ud800 escape into half a character
            raise PipelineError(f"{where}: \"{key}\" holds an unpaired surrogate escape "
                                f"(\\u{ord(value[exc.start]):04x}), half of a character") from None
    return out
