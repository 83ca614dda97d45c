"""Search within part of the index: `--in GLOB` (a doc_id pattern) and `--format FMT`.

A filter is a mask over the chunks, applied *before* ranking: the k best passages of the
matching documents, each scored exactly as it is without the filter — the collection's
own BM25 statistics (N, avgdl, every idf), the same section context, the same fusion
with the vectors' cosine (each part divided by the best of the whole collection's list,
as unfiltered) — and never a chunk outside the mask.  Filtering the k best *after*
ranking, as a masked retriever elsewhere does, returns fewer than k (or nothing) when the
matching documents rank below the others, and a "top-k over a masked array" fills the
gap with score-0 chunks; neither happens here: a chunk scoring 0 is never a result
(SPEC), so a filter that matches fewer passages than k returns fewer.

Globs match the whole doc_id: `*` and `?` stay within one folder, `**` crosses folders
(`R/**` everything under R/, `**/*.pdf` every PDF, `**/install*`), `[abc]` a class; a
pattern ending in `/` is a folder (`web/` = `web/**`).  Several `--in` (or `--format`)
are alternatives; `--in` and `--format` together must both hold.

Cost: a filtered query scores every posting of its terms (MaxScore's pruning bounds the
collection's best documents, which the filter may exclude), then drops the masked ones:
milliseconds at these sizes (bench/links.py times both).

What was kept is said, not left to be guessed from an empty answer: `unmatched` names a
pattern or format that matches no document, `disjoint` says what each filter matched when
each matches some document but none matches both (`--in 'flask-html/**' --format pdf` said
"no passage contains any of its terms"), and `kept` counts the passages and documents a
filter leaves (for "3 of 10" lines: pipekit/retrieve/search.py).

Not done: filters on heading or page, or negation (`--in` lists what to keep).
"""
from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipekit.run.errors import PipelineError
from pipekit.run.globs import translate
from pipekit.retrieve.fusion import near_top, top_chunks
from pipekit.retrieve.ranks import masked


def glob_regex(pattern: str) -> re.Pattern:
    """A doc_id glob as a regular expression over the whole doc_id (see the module text);
    read as documents.include/exclude read theirs (pipekit/run/globs.py)."""
    p = pattern.strip()
    if p.endswith("/"):
        p += "**"
    return re.compile(translate(p), re.S)


class ChunkFilter:
    """Which chunks a search may return: `mask(paths, formats)` over the index's chunks."""

    def __init__(self, doc_names: pa.Array, doc_codes: np.ndarray, formats: pa.Array | None):
        self.doc_names = doc_names.to_pylist()  # each document once: globs run per document, not per chunk
        self.doc_codes = doc_codes
        self.formats = pc.dictionary_encode(formats) if formats is not None else None
        self._masks: dict[tuple, np.ndarray] = {}

    def unmatched(self, paths=(), formats=()) -> list[str]:
        """One line per pattern or format that matches no document of the index."""
        lines = []
        for p in paths or ():
            rx = glob_regex(p)
            if not any(rx.fullmatch(d) for d in self.doc_names):
                example = f" (doc_ids look like {self.doc_names[0]!r})" if self.doc_names else ""
                lines.append(f"--in {p!r} matches no document of this index{example}")
        known = sorted(self.formats.dictionary.to_pylist()) if self.formats is not None else []
        for f in formats or ():
            if f not in known:
                lines.append(f"--format {f!r}: no document of this index has that format (it has: {', '.join(known)})")
        return lines

    def _doc_formats(self) -> np.ndarray:
        """Each document's format, as an index into self.formats' dictionary (a document has one)."""
        out = np.zeros(len(self.doc_names), dtype=np.int64)
        out[self.doc_codes] = np.asarray(self.formats.indices)
        return out

    def disjoint(self, paths=(), formats=()) -> str:
        """What each of `--in` and `--format` matched, when each matches some document and no
        document matches both: `--in 'web/**' matches 5 documents (html 3, markdown 2);
        --format pdf matches 2 (e.g. 'field-guide.pdf')`."""
        rxs = [glob_regex(p) for p in paths]
        in_docs = np.fromiter((any(rx.fullmatch(d) for rx in rxs) for d in self.doc_names), bool, len(self.doc_names))
        names, of_doc = self.formats.dictionary.to_pylist(), self._doc_formats()
        kinds, counts = np.unique(of_doc[in_docs], return_counts=True)
        by_format = ", ".join(f"{names[f]} {n:,}" for f, n in sorted(zip(kinds.tolist(), counts.tolist()),
                                                                      key=lambda fn: (-fn[1], names[fn[0]])))
        wanted = np.isin(of_doc, [i for i, n in enumerate(names) if n in set(formats)])
        example = self.doc_names[int(np.flatnonzero(wanted)[0])]
        plural = lambda n: f"{n:,} document{'s' * (n != 1)}"
        return (f"no document matches both --in and --format: --in {' or '.join(map(repr, paths))} matches "
                f"{plural(int(in_docs.sum()))} ({by_format}); --format {' or '.join(formats)} matches "
                f"{plural(int(wanted.sum()))} (e.g. {example!r})")

    def kept(self, mask: np.ndarray | None) -> tuple[int, int]:
        """(passages, documents) a mask keeps (None: the whole index)."""
        if mask is None:
            return len(self.doc_codes), len(self.doc_names)
        return int(mask.sum()), int(np.unique(self.doc_codes[mask]).size)

    def mask(self, paths=(), formats=()) -> np.ndarray | None:
        """A bool per chunk (True: may be returned), or None for no filter at all.  Kept per
        filter: a program asking many questions within one folder runs the globs over every
        document once, not once a question."""
        if not paths and not formats:
            return None
        key = (tuple(paths or ()), tuple(formats or ()))
        if key not in self._masks:
            self._masks[key] = self._mask(*key)
        return self._masks[key]

    def _mask(self, paths: tuple, formats: tuple) -> np.ndarray:
        keep = np.ones(len(self.doc_codes), dtype=bool)
        if paths:
            rxs = [glob_regex(p) for p in paths]
            docs = np.fromiter((any(rx.fullmatch(d) for rx in rxs) for d in self.doc_names), bool, len(self.doc_names))
            keep &= docs[self.doc_codes]
        if formats:
            if self.formats is None:
                raise PipelineError("03_chunks.parquet has no `format` column: rerun `python 03_chunking.py`")
            names = np.asarray(pc.is_in(self.formats.dictionary, value_set=pa.array(list(formats), pa.string())), bool)
            keep &= names[np.asarray(self.formats.indices)]
        return keep


def filtered_candidates(index, q, depth: int, mask: np.ndarray, fusion=None, qvec=None):
    """Stage 05's candidates for query `q` (QueryTerms) among the chunks in `mask`, scored as
    without the mask: every matching chunk's BM25 (and section context), then, with
    vectors, the fusion over the masked BM25 and cosine top lists, each part divided by
    the best of the *whole* collection's list, so a chunk's fused score is what it is
    unfiltered."""
    cols, vals = index.scores(q.ids, weights=q.weights)
    if index.context is not None:
        vals = index.context.rescore(q.ids, q.weights, cols, vals)
    best_bm25 = float(vals.max()) if len(vals) else 0.0
    cols, vals = masked(mask[cols], cols, vals)
    if fusion is None:
        return cols, vals
    # As Dense.top: BLAS's rounded cosines find the few near the top, `cosines` (exact, the
    # fusion's own) decide; so the best cosine and every member's are the unfiltered search's.
    rough = fusion.rough(np.asarray(qvec)[None])[:, 0]
    near = np.sort(near_top(rough, 1))
    best_cos = float(fusion.chunk_cosines(near, qvec).max()) if len(near) else 0.0
    allowed = np.flatnonzero(mask)
    near = np.sort(allowed[near_top(rough[allowed], depth)])
    exact = fusion.chunk_cosines(near, qvec)
    top = near[top_chunks(near, exact, depth)]
    order = np.argsort(top)
    return fusion.fuse(cols, vals, qvec, (top[order], fusion.chunk_cosines(top[order], qvec)), depth,
                       index.scorer(q), best=(best_bm25, best_cos))
