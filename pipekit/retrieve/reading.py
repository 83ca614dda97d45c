"""Reading more than a hit: the passages around a chunk, or its whole section.

A search hit is one chunk, a few hundred words cut where the chunker's budget ran out.
Whoever asked (a person, an LLM agent) often needs what surrounds it: the sentence that
began in the previous passage, the table that continues in the next, or the whole
`##` section the hit sits in (LangChain's ParentDocumentRetriever and LlamaIndex's
auto-merging retriever return the enclosing section for this reason).  This module
answers `read(chunk_id, around=N)` and `read(chunk_id, section=True)` from the chunks
an index already holds: nothing is read from disk, and no path a caller names is ever
opened, because a chunk id is looked up among the indexed chunks, never joined to a
folder.

Neighbours are chunks of the same document (a document's chunks are consecutive rows, in
order); the section is the chunk's level-2 section as section context defines it
(pipekit/retrieve/sections.py: consecutive chunks whose heading paths agree on `#` and
`##`).  A section can be a whole manual chapter, so what is returned is capped: the
passages nearest the hit are kept until the cap, and the answer says which passages of
how many it holds and the chunk ids to read on from.

What it does not do: stitch the passages back into the exact stage-02 text (each
chunk's text is returned as indexed, joined by a blank line; `start_char`/`end_char`
give the span of the document they cover), or read across documents.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipekit.chunk.headings import TRAIL_SEPARATOR
from pipekit.read.pages import cite_pages
from pipekit.run.errors import PipelineError
from pipekit.retrieve.sections import section_codes

MAX_AROUND = 20           # passages each side: past this a caller wants the section, or the file
MAX_READ_CHARS = 24_000   # ~6,000 words: room in a model's context beside the question and other hits


def chunk_row(chunk_ids: pa.ChunkedArray | pa.Array, chunk_id: str) -> int:
    """The row of `chunk_id`, or a PipelineError a caller can act on."""
    if not isinstance(chunk_id, str) or not chunk_id:
        raise PipelineError(f"chunk_id must be a chunk id from a search hit (like 'guide.md#3'); got {chunk_id!r}")
    row = pc.index(chunk_ids, pa.scalar(chunk_id, pa.string())).as_py()
    if row < 0:
        raise PipelineError(f"no chunk {chunk_id!r} in this index (chunk ids come from search hits, "
                            f"and an index rebuilt since may have renumbered a changed document's chunks)")
    return row


def document_rows(doc_codes: np.ndarray, row: int) -> tuple[int, int]:
    """[first, end) rows of the document holding `row`: a document's chunks are consecutive."""
    code = doc_codes[row]
    return int(np.searchsorted(doc_codes, code, "left")), int(np.searchsorted(doc_codes, code, "right"))


def nearest_within(lo: int, hi: int, row: int, sizes: np.ndarray, cap: int) -> tuple[int, int]:
    """The widest [first, end) run inside [lo, hi) around `row` whose sizes add up to at
    most `cap`, growing one passage at a time on alternate sides (the hit itself always
    stays, whatever its size): what a reader of the hit needs first is what is next to it."""
    first, end, total = row, row + 1, int(sizes[row])
    while first > lo or end < hi:
        grew = False
        for side in ("before", "after"):
            if side == "before" and first > lo and total + sizes[first - 1] <= cap:
                first, total, grew = first - 1, total + int(sizes[first - 1]), True
            elif side == "after" and end < hi and total + sizes[end] <= cap:
                end, total, grew = end + 1, total + int(sizes[end]), True
        if not grew:
            break
    return first, end


def common_trail(paths: list[list[str]]) -> list[str]:
    """The heading levels every returned passage shares: the part they all sit under."""
    shared = list(paths[0] or [])
    for p in paths[1:]:
        p = p or []
        n = 0
        while n < min(len(shared), len(p)) and shared[n] == p[n]:
            n += 1
        shared = shared[:n]
    return shared


class Reading:
    """Reads passages around chunks of one loaded index (a Searcher's tables, shared, not copied).

    `cited` holds every chunk's chunk_id, doc_id, heading_path, page columns and spans in
    corpus order; `texts` their texts; `doc_codes` each chunk's document number."""

    def __init__(self, cited: pa.Table, texts: pa.ChunkedArray, doc_codes: np.ndarray, link):
        self.cited = cited
        self.texts = texts
        self.doc_codes = np.asarray(doc_codes)
        self.link = link  # (doc_id, format, anchor, page_start) -> the passage's link
        self._sections: np.ndarray | None = None
        self._sizes: np.ndarray | None = None

    @property
    def sections(self) -> np.ndarray:
        if self._sections is None:  # once per index: one pass over the heading paths
            self._sections = section_codes(self.cited.column("doc_id"), self.cited.column("heading_path"))
        return self._sections

    @property
    def sizes(self) -> np.ndarray:
        if self._sizes is None:
            self._sizes = np.asarray(pc.fill_null(pc.utf8_length(self.texts), 0).to_numpy(zero_copy_only=False))
        return self._sizes

    def read(self, chunk_id: str, around: int = 0, section: bool = False, max_chars: int = MAX_READ_CHARS) -> dict:
        """The chunk with `around` passages either side in its document, or (`section`) its
        whole level-2 section; capped at `max_chars`, nearest passages first, and says so."""
        if isinstance(around, bool) or not isinstance(around, int) or not 0 <= around <= MAX_AROUND:
            raise PipelineError(f"around must be a whole number from 0 to {MAX_AROUND} (passages each side of "
                                f"the chunk); got {around!r}")
        if not isinstance(section, bool):
            raise PipelineError(f"section must be true or false; got {section!r}")
        row = chunk_row(self.cited.column("chunk_id"), chunk_id)
        lo, hi = document_rows(self.doc_codes, row)
        if section:
            codes = self.sections[lo:hi]
            inside = np.flatnonzero(codes == self.sections[row]) + lo
            lo, hi = int(inside[0]), int(inside[-1]) + 1  # a section's chunks are consecutive too
        else:
            lo, hi = max(lo, row - around), min(hi, row + around + 1)
        first, end = nearest_within(lo, hi, row, self.sizes, max_chars)
        return self._answer(chunk_id, row, first, end, lo, hi, section, max_chars)

    def _answer(self, chunk_id: str, row: int, first: int, end: int, lo: int, hi: int, section: bool,
                max_chars: int) -> dict:
        rows = self.cited.slice(first, end - first).to_pylist()
        texts = self.texts.slice(first, end - first).to_pylist()
        passages = [{"chunk_id": r["chunk_id"], "heading": r["heading"] or "", "start_char": r["start_char"],
                     "end_char": r["end_char"], "page_start": r["page_start"], "page_end": r["page_end"],
                     "text": t or ""} for r, t in zip(rows, texts)]
        trail = common_trail([r["heading_path"] for r in rows])
        starts = [r for r in rows if r["page_start"] is not None]
        ends = [r for r in rows if r["page_end"] is not None]
        pages = cite_pages(starts[0]["page_start"] if starts else None, ends[-1]["page_end"] if ends else None,
                           starts[0]["page_label_start"] if starts else None,
                           ends[-1]["page_label_end"] if ends else None)
        heading = TRAIL_SEPARATOR.join(t for t in trail if t)
        doc_id = rows[0]["doc_id"]
        hit = rows[row - first]
        out = {
            "chunk_id": chunk_id, "doc_id": doc_id, "format": hit.get("format"),
            "heading_path": trail, "heading": heading,
            "start_char": rows[0]["start_char"], "end_char": rows[-1]["end_char"],
            "page_start": starts[0]["page_start"] if starts else None,
            "page_end": ends[-1]["page_end"] if ends else None,
            "page_label_start": starts[0]["page_label_start"] if starts else None,
            "page_label_end": ends[-1]["page_label_end"] if ends else None,
            "citation": doc_id + (f" › {heading}" if heading else "") + (f", {pages}" if pages else ""),
            "link": self.link(doc_id, hit.get("format"), hit.get("anchor"), hit["page_start"]),
            "text": "\n\n".join(p["text"] for p in passages),
            "passages": passages,
            "truncated": (first, end) != (lo, hi),
        }
        if out["truncated"]:
            # Where the cap fell, and the ids to continue from: an agent can read on, one call a side.
            ids = self.cited.column("chunk_id")
            more = [f"before: {ids[first - 1].as_py()!r}"] * (first > lo) + [f"after: {ids[end].as_py()!r}"] * (end < hi)
            out["note"] = (f"capped at {max_chars:,} characters: passages {first - lo + 1}–{end - lo} of the "
                           f"{hi - lo} in the {'section' if section else 'range asked for'}, those nearest "
                           f"{chunk_id}; read on from {' and '.join(more)}")
        return out
