"""CSV files: kept as their own lines, with the dialect and any malformation said in the note.

Stage 03 cuts between records and must give exact spans into the text, so the reader never
re-serialises the table (pipekit/chunk/csv_chunks.py reads it with the dialect sniffed here).
"""
from __future__ import annotations

import csv
import io

from pipekit.read.text import decode_text

_SNIFF_BYTES = 64 * 1024


def read_csv(data: bytes) -> dict:
    """The CSV's own text, untouched, with its dialect and any problems in the note.

    A malformed CSV (ragged rows, a quote never closed) is still an `ok` row: its text
    is readable and searchable, and refusing it would hide a document the user has.
    The note says what is wrong so that odd chunk boundaries have an explanation.
    """
    text, encoding, note = decode_text(data)
    described = describe_csv(text)
    return {"text": text, "encoding": encoding, "note": f"{note}; {described}" if note else described}


def sniff_csv_dialect(text: str) -> type[csv.Dialect] | csv.Dialect:
    """The dialect of a CSV text, sniffed on whole lines of its first 64 KiB; `excel` if unsure."""
    sample = text[:_SNIFF_BYTES]
    if len(text) > _SNIFF_BYTES and "\n" in sample:
        sample = sample[: sample.rindex("\n")]  # a record cut in half misleads the sniffer
    try:
        return csv.Sniffer().sniff(sample, delimiters=",;\t|")
    except csv.Error:
        return csv.excel


def describe_csv(text: str) -> str:
    dialect = sniff_csv_dialect(text)
    problems, header_len, records, ragged = [], None, 0, 0
    reader = csv.reader(io.StringIO(text, newline=""), dialect, strict=True)
    try:
        for row in reader:
            if not row:
                continue
            if header_len is None:
                header_len = len(row)
                continue
            records += 1
            if len(row) != header_len:
                ragged += 1
                if ragged <= 3:  # the first few say where to look; the count says how bad
                    problems.append(f"line {reader.line_num}: {len(row)} fields, header has {header_len}")
    except csv.Error as exc:
        problems.append(f"parsing stopped at line {reader.line_num}: {exc}")
    if ragged > 3:
        problems.insert(0, f"{ragged} records with the wrong number of fields")
    desc = (f"csv: delimiter {dialect.delimiter!r}, quotechar {dialect.quotechar!r}, "
            f"header of {header_len or 0} fields, {records} record{'s' if records != 1 else ''}")
    return desc + ("; malformed: " + "; ".join(problems) if problems else "")
