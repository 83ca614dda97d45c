"""The row a chunk becomes in 03_chunks.parquet: its columns and the values derived from it.

Stage 03's chunker (03_chunking.py) decides each chunk's span, heading path and pages;
`finish` adds what follows from those (chunk_id, ordinal, heading, sizes), and `schema` is
the table they are written as.  The fast path (pipekit/chunk/fastpath.py) makes the same
rows a column at a time, to this schema.
"""
from __future__ import annotations

from pipekit.chunk.headings import TRAIL_SEPARATOR


COLUMNS = ("chunk_id", "doc_id", "ordinal", "heading_path", "heading", "path", "text", "start_char", "end_char",
           "page_start", "page_end", "page_label_start", "page_label_end", "n_words", "n_chars", "format", "content_hash", "anchor")
PER_CHUNK = tuple(c for c in COLUMNS if not c.startswith("page_label"))  # labels are mapped per batch


def schema():
    """03_chunks.parquet's schema, in COLUMNS' order (pyarrow imported here: a stage file
    is imported by tests and tools that never write a chunk)."""
    import pyarrow as pa

    return pa.schema([
        ("chunk_id", pa.string()), ("doc_id", pa.string()), ("ordinal", pa.int32()),
        ("heading_path", pa.list_(pa.string())), ("heading", pa.string()),
        ("path", pa.list_(pa.string())), ("text", pa.string()),
        ("start_char", pa.int64()), ("end_char", pa.int64()),
        ("page_start", pa.int32()), ("page_end", pa.int32()),
        ("page_label_start", pa.string()), ("page_label_end", pa.string()),  # what the pages print
        ("n_words", pa.int32()), ("n_chars", pa.int32()), ("format", pa.string()),
        ("content_hash", pa.string()),  # the source document's (stage 01): what a rerun compares
        ("anchor", pa.string()),  # the id of the chunk's heading where it is read: a hit's link opens it
    ])


def finish(chunks: list[dict], doc_id: str) -> list[dict]:
    """Add chunk_id, ordinal, heading, n_words, n_chars (the columns derived from a chunk)."""
    for k, c in enumerate(chunks):
        c["chunk_id"] = f"{doc_id}#{k}"
        c["ordinal"] = k
        c["heading"] = TRAIL_SEPARATOR.join(h for h in c["heading_path"] if h)
        c["n_words"] = len(c["text"].split())
        c["n_chars"] = len(c["text"])
        c.setdefault("anchor", None)  # CSV, fixed windows, BEIR: no heading to link to
    return chunks
