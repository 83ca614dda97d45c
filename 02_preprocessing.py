"""Stage 02 — preprocessing: make every document's text clean and predictable.

Reads  `01_documents.parquet` (only rows with status `ok`).
Writes `02_preprocessed.parquet`: doc_id, source, format, path, title, text (cleaned),
       outline (a PDF's bookmarks, passed on for stage 03).

What "clean" means here, each rule for a reason:
- CRLF and lone CR become LF: the chunker scans lines, and a Windows file must not look
  like one endless line to it.
- Unicode NFC (configurable): "é" typed as one code point and as e + accent must be the
  same term in the index.
- Form feeds become `--- page N ---` lines: that is how plain-text exports mark pages,
  and stage 03 tracks pages by those lines.
- Page furniture goes: a line that repeats at the top or bottom of most pages (a running
  header, a footer, a page number; pipekit/pages.py says how it is recognised) is the
  layout's, not the author's text.  Left in, one manual's running header sat in 70 % of
  its chunks.  The count is in the stage summary.
- Control characters go (tab and newline stay): a stray NUL or escape code breaks
  terminals and Parquet viewers but never carries meaning.
- Trailing spaces go, and runs of blank lines collapse to one: both are noise to the
  chunker, which treats one blank line as a paragraph break.

What it deliberately does not do: touch Markdown structure, code, indentation or line
breaks inside paragraphs (stage 03 needs them), lower-case or strip punctuation (that is
the analyzer's job in stage 04, so chunks stay readable for citation), or drop documents.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Iterator

import pyarrow as pa

from pipekit.cli import stage_main
from pipekit.engine import StageFunction, iter_rows
from pipekit.pages import OUTLINE_TYPE, strip_furniture

COLUMNS = ["doc_id", "source", "format", "path", "title", "text", "outline"]

# C0/C1 controls except tab (\t) and newline (\n); \f is handled first, as a page break.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_TRAILING = re.compile(r"[ \t]+$", re.MULTILINE)
_BLANK_RUNS = re.compile(r"\n{3,}")


def form_feeds_to_markers(text: str) -> str:
    """`page one\\fpage two` -> page markers before each page, as stage 01 writes for PDFs."""
    if "\f" not in text:
        return text
    pages = text.split("\f")
    if not pages[-1].strip():  # a file that ends with a form feed has no page after it
        pages.pop()
    return "\n".join(f"--- page {n} ---\n{page.strip(chr(10))}" for n, page in enumerate(pages, 1))


def clean_text(text: str, unicode_form: str = "NFC") -> str:
    """The whole stage-02 cleaning of one document's text."""
    return clean_document(text, unicode_form)[0]


def clean_document(text: str, unicode_form: str = "NFC") -> tuple[str, int]:
    """(cleaned text, furniture lines removed) of one document."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if unicode_form != "none":
        text = unicodedata.normalize(unicode_form, text)
    text = form_feeds_to_markers(text)
    text, furniture = strip_furniture(text)
    text = _CONTROL.sub("", text)
    text = _TRAILING.sub("", text)
    text = _BLANK_RUNS.sub("\n\n", text)
    return (text.strip("\n") + "\n" if text.strip() else ""), furniture


SCHEMA = pa.schema([("doc_id", pa.string()), ("source", pa.string()), ("format", pa.string()),
                    ("path", pa.list_(pa.string())), ("title", pa.string()), ("text", pa.string()),
                    ("outline", OUTLINE_TYPE)])


def clean_partition(form: str, part) -> Iterator[tuple[pa.Table, int, int]]:
    """Stage 02 on one partition of 01_documents.parquet: its `ok` rows cleaned, batch by
    batch, each with the furniture lines removed and the documents that had any.  It
    depends on the partition alone, so the engine may run it anywhere."""
    for batch in iter_rows(part, ["status"] + COLUMNS):
        rows = batch.to_pydict()
        ok = [i for i, s in enumerate(rows["status"]) if s == "ok"]
        cols = {c: [rows[c][i] for i in ok] for c in COLUMNS}
        texts, furniture, paged = [], 0, 0
        for t in cols["text"]:
            text, removed = clean_document(t or "", form)
            texts.append(text)
            furniture += removed
            paged += removed > 0
        cols["text"] = texts
        yield pa.table(cols, schema=SCHEMA), furniture, paged


def run(ctx) -> None:
    clean = StageFunction(2, "clean_partition", (ctx.section["unicode_form"],))
    kept = furniture = paged = 0
    with ctx.sink("02_preprocessed.parquet", SCHEMA) as out:
        for table, removed, docs in ctx.map_partitions(clean, ctx.upstream_parts(), desc="02 cleaning"):
            out.write(table)
            kept += table.num_rows
            furniture += removed
            paged += docs
    ctx.note(f"{kept:,} ok documents cleaned; {ctx.upstream_rows - kept:,} error/skipped rows left out")
    ctx.note(f"{furniture:,} page furniture lines (running headers, footers, page numbers) "
             f"removed from {paged:,} documents")


if __name__ == "__main__":
    raise SystemExit(stage_main(2, run, preview_columns=["doc_id", "format", "title", "text"]))
