"""`python -m pipekit search "QUERY"` from a cold start: a memory-mapped copy of the index.

A one-shot search used to load what a Searcher serving thousands of queries loads: pyarrow,
the stage-05 file and its imports, every posting, every chunk's citation columns, each
term's section scores (one pass over all postings) and the common terms' rows over all
chunks, to answer one question.  That took 0.71-0.95 s and 220 MB on the docs folder of
bench/docs_qa.py (6,761 chunks), of which importing Arrow's libraries alone was ~0.3 s on
this machine (`python -X importtime`; issue 47).

Here the index is one file beside it, `04_index.mmap`: the sorted vocabulary, each term's
postings (chunk, impact), each term's section scores, each chunk's document code and
section, and the citation columns and texts of every chunk, as flat arrays behind a JSON
header.  It is mapped, not read: a query touches the pages of its own terms' postings and
its hits' rows, and the process imports NumPy, never pyarrow (the shared modules name it
through pipekit/run/lazy.py).  The answer is computed as stage 05's Searcher computes it,
step for step on the same numbers (tests/test_cold.py holds every Passage, score bits
included, to `Searcher.search`'s on many queries, with section context on and off, repeats
collapsed and kept, several k and `--json`):

- a query's terms by the analyzer's own one-text rule, looked up in the sorted vocabulary;
- every chunk holding one of them scored as stage 05's `Index.scores` sums (query order,
  the same branches: one term, a bincount over all chunks, or a merge of sorted lists).
  The Searcher's pruned MaxScore path scores its survivors with the same sums in the same
  order, and keeps every chunk that can reach its top documents, so ranking the whole set
  gives the same hits;
- the section context mixed in by `SectionContext.rescore` itself (`SectionContext.mapped`:
  the section scores the Searcher computed when it wrote the file, the same float64 values);
- `ranks.rank`, `repeats.collapse_answers` with the same `Repeats`, the same `Passage`.

Freshness: the file records the size, modification time and inode of each file it was made
from (03_chunks and the three 04_* files) and the index's fingerprint; a search first stats
those files, and any difference (stage 03 or 04 ran again, or a file was replaced) means the
file is not used.  The file is written by the full path (a `Searcher`, search.py) when it is
missing or stale, through a temporary file and a rename, so a reader never maps half of one;
a folder it cannot write to just keeps the full path.

What this path does not do, and leaves to the full one (search.py's `main`, same output):
the prompt (no query given: many queries, for which loading once pays), `--explain`,
`--in`/`--format` filters, RM3 feedback, dense vectors (`retrieval.dense_weight` > 0), a
query with a character outside ASCII (the analyzer's Arrow path), an index whose
03_chunks or 04_* are dataset folders (a cluster's parts), and an index too big to copy
(over COPY_MAX_BYTES).
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import sys
from bisect import bisect_left
from pathlib import Path

import numpy as np

from pipekit.run.commands import add_common_args, parse_args, run_command, user_options
from pipekit.run.errors import PipelineError

DESCRIPTION = 'Ask the index one question: `python -m pipekit search "QUERY"` and `pipekit.Searcher`.'
CACHE = "04_index.mmap"
SOURCES = ("03_chunks.parquet", "04_chunks.parquet", "04_terms.parquet", "04_postings.parquet")
MAGIC = b"PIPEKIT-INDEX-MMAP-1\n"
ALIGN = 64
COPY_MAX_BYTES = 4 << 30  # an index whose copy would be larger is searched the full way only
DEPTH = 100  # as 05_retrieval.DEPTH: documents ranked per query, whatever k is (tests/test_cold.py checks)
# The citation columns a Passage names: from 04_chunks, then from 03_chunks (format and anchor where 03 has them).
CITED_04 = ("chunk_id", "doc_id", "heading", "page_start", "page_end", "page_label_start", "page_label_end")
CITED_03 = ("start_char", "end_char", "format", "anchor", "text")
STRINGS = {"chunk_id", "doc_id", "heading", "page_label_start", "page_label_end", "format", "anchor", "text",
           "heading_path"}  # (heading_path: each row's list as JSON, a string)


def fresh(output_dir: Path) -> bool:
    """Whether the folder holds a copy made from its index files as they are now."""
    return ColdIndex.open(output_dir) is not None


def stamps(output_dir: Path) -> dict | None:
    """(size, mtime_ns, inode) of each file the copy is made from; None if one is missing or
    is a folder of parts (a cluster's output: not copied)."""
    out = {}
    for name in SOURCES:
        try:
            st = os.stat(Path(output_dir) / name)
        except OSError:
            return None
        if not os.path.isfile(Path(output_dir) / name):
            return None
        out[name] = [st.st_size, st.st_mtime_ns, st.st_ino]
    return out


# --- writing: from a loaded Searcher ---------------------------------------------------------

def write(searcher, before: dict | None) -> Path | None:
    """Write the copy of `searcher`'s index beside it (None: not written).  `before`: the
    sources' stamps taken before the Searcher loaded them; if they changed meanwhile (a stage
    ran), nothing is written, since the arrays may be of either version."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from pipekit.run import io
    from pipekit.retrieve.sections import section_context

    out_dir = searcher.output_dir
    if before is None or stamps(out_dir) != before:
        return None
    ix = searcher.index
    if len(ix.terms) > 1 and not pc.all(pc.less(ix.terms[:-1], ix.terms[1:])).as_py():
        return None  # terms out of order (a hand-made index): looked up by hashing, the full way
    n = len(ix.lengths)
    arrays: dict[str, np.ndarray] = {}
    _strings(arrays, "term", ix.terms)
    arrays["indptr"] = ix.indptr.astype(np.int64)
    arrays["chunk"] = ix.chunk
    arrays["impact"] = ix.weigh.all(ix.indptr)  # (weighed once here, as stage 05 weighs them)
    arrays["doc_codes"] = ix.doc_codes.astype(np.int64)
    chunks_03 = searcher._chunks_03
    names03 = io.schema(chunks_03).names
    cols03 = [c for c in CITED_03 if c in names03] + ["heading_path"]
    t03 = io.read_table(chunks_03, cols03)
    for name in CITED_04:
        _column(arrays, name, ix.chunks.column(name))
    for name in cols03:
        if name == "heading_path":  # a list of strings a row: its JSON, read back with json.loads
            rows = t03.column(name).to_pylist()
            _strings(arrays, name, pa.array([None if r is None else json.dumps(r, ensure_ascii=False) for r in rows],
                                            pa.large_string()))
        else:
            _column(arrays, name, t03.column(name))
    # The sections and each term's section scores, whatever weight a search gives them
    # (the scores do not depend on it: SectionContext applies the weight per query).
    context = section_context(1.0, chunks_03, ix)
    if context is not None:
        start, sections, scores = context.pairs()
        arrays["section_codes"] = context.codes.astype(np.int64)
        arrays["section_start"] = start.astype(np.int64)
        arrays["section_ids"] = sections.astype(np.int32)  # (NumPy's index type in memory: 4 bytes a pair here)
        arrays["section_scores"] = scores
    size = sum(a.nbytes for a in arrays.values())
    if size > COPY_MAX_BYTES:
        return None
    header = {"stamps": before, "fingerprint": ix.meta.get("fingerprint"), "analyzer": ix.stats["analyzer"],
              "chunks": n, "documents": int(len(ix.doc_names)), "columns": [c for c in CITED_04 + tuple(cols03)],
              "arrays": {}}
    at = 0
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        arrays[name] = a
        header["arrays"][name] = [a.dtype.str, int(a.size), at]
        at += -(-a.nbytes // ALIGN) * ALIGN
    head = json.dumps(header).encode()
    body_at = -(-(len(MAGIC) + 8 + len(head)) // ALIGN) * ALIGN
    target = out_dir / CACHE
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(MAGIC + len(head).to_bytes(8, "little") + head)
            f.write(b"\0" * (body_at - f.tell()))
            for name, a in arrays.items():
                f.seek(body_at + header["arrays"][name][2])
                f.write(a.tobytes())
        if stamps(out_dir) != before:  # a stage ran while this was written
            tmp.unlink(missing_ok=True)
            return None
        os.replace(tmp, target)
    except OSError:  # a folder this process may not write to: the full path stays the way
        tmp.unlink(missing_ok=True)
        return None
    return target


def _strings(arrays: dict, name: str, col) -> None:
    """A string column as offsets (int64, from 0), UTF-8 bytes and, with nulls, validity."""
    import pyarrow as pa

    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    arr = arr.cast(pa.large_string())
    n = len(arr)
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64)[arr.offset:arr.offset + n + 1] if n else np.zeros(1, np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if n and bufs[2] is not None else np.zeros(0, np.uint8)
    arrays[f"{name}.o"] = offsets - offsets[0]
    arrays[f"{name}.d"] = data[int(offsets[0]):int(offsets[-1])]
    if arr.null_count:
        arrays[f"{name}.v"] = np.asarray(arr.is_valid()).astype(np.uint8)


def _column(arrays: dict, name: str, col) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc

    if name in STRINGS:
        return _strings(arrays, name, col)
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    arrays[f"{name}.i"] = np.asarray(pc.fill_null(arr, 0).to_numpy(zero_copy_only=False)).astype(np.int64)
    if arr.null_count:
        arrays[f"{name}.v"] = np.asarray(arr.is_valid()).astype(np.uint8)


# --- reading ------------------------------------------------------------------------------------

class ColdIndex:
    """The mapped copy of one output folder's index, answering as a Searcher does."""

    def __init__(self, path: Path, mm: mmap.mmap, header: dict, body_at: int):
        from pipekit.index.analyzer import Analyzer

        self.path, self._mm, self.header = path, mm, header
        self.analyzer = Analyzer.from_settings(header["analyzer"])
        self.n_chunks, self.n_documents = header["chunks"], header["documents"]
        self.columns = header["columns"]
        self._a = {name: np.frombuffer(mm, dtype=np.dtype(dt), count=count, offset=body_at + at)
                   for name, (dt, count, at) in header["arrays"].items()}
        self._term_bytes = self._a["term.d"]
        self._term_at = self._a["term.o"]
        self.n_terms = len(self._term_at) - 1

    @classmethod
    def open(cls, output_dir: Path) -> "ColdIndex | None":
        """The folder's copy, or None when there is none or it is not of these exact files."""
        path = Path(output_dir) / CACHE
        try:
            with open(path, "rb") as f:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            return None
        try:
            if mm[:len(MAGIC)] != MAGIC:
                return None
            size = int.from_bytes(mm[len(MAGIC):len(MAGIC) + 8], "little")
            header = json.loads(mm[len(MAGIC) + 8:len(MAGIC) + 8 + size])
            if header.get("stamps") != stamps(output_dir):
                return None  # stage 03 or 04 wrote since the copy was made: never answer from it
            return cls(path, mm, header, -(-(len(MAGIC) + 8 + size) // ALIGN) * ALIGN)
        except (ValueError, KeyError, TypeError):
            return None

    # --- a query ------------------------------------------------------------------------------
    def _term(self, word: str) -> int:
        """A word's term id (-1: not in the index), by bisection of the sorted vocabulary
        (Python's str order is UTF-8's byte order, the order stage 04 sorted the terms in)."""
        b, at, data = word.encode(), self._term_at, self._term_bytes
        key = lambda i: data[at[i]:at[i + 1]].tobytes()  # noqa: E731
        j = bisect_left(range(self.n_terms), b, key=key)
        return j if j < self.n_terms and key(j) == b else -1

    def query_terms(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """Stage 05's QueryTerms of one ASCII text: its distinct known terms in query order,
        each weighted by how often the query says it (`Index.query_terms`)."""
        known: dict[int, int] = {}
        for w in self.analyzer.analyze(text):
            t = self._term(w)
            if t >= 0:
                known[t] = known.get(t, 0) + 1
        return (np.fromiter(known, dtype=np.int64, count=len(known)),
                np.fromiter(known.values(), dtype=np.float64, count=len(known)))

    def scores(self, ids: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every chunk the terms touch, in corpus order, with Σ weight·impact summed as
        05_retrieval.Index.scores sums it (term by term in query order)."""
        chunk, impact, indptr = self._a["chunk"], self._a["impact"], self._a["indptr"]
        if len(ids) == 0:
            return np.zeros(0, dtype=chunk.dtype), np.zeros(0, dtype=np.float64)
        parts = []
        for t, wt in zip(ids.tolist(), weights.tolist()):
            lo, hi = int(indptr[t]), int(indptr[t + 1])
            parts.append((chunk[lo:hi], impact[lo:hi] if wt == 1.0 else impact[lo:hi] * wt))
        if len(parts) == 1:
            return parts[0]
        from pipekit.retrieve.ranks import BINCOUNT_SHARE, summed  # (stage 05's rule and sum, as `search` imports `rank`)

        if sum(len(p[0]) for p in parts) * BINCOUNT_SHARE > self.n_chunks:
            dense = summed(self.n_chunks, parts)
            cols = np.flatnonzero(dense != 0)
            return cols.astype(chunk.dtype), dense[cols]
        from pipekit.run.arrays import run_starts

        ch = np.concatenate([p[0] for p in parts])
        imp = np.concatenate([p[1] for p in parts])
        order = np.argsort(ch, kind="stable")
        ch, imp = ch.take(order), imp.take(order)
        first = run_starts(ch)
        return ch[first], np.bincount(np.cumsum(first) - 1, weights=imp)

    def context(self, weight: float):
        """The section context to mix in with `weight` (None: the copy holds no sections, as
        a Searcher would mix none): stage 05's own `SectionContext`, on the mapped scores."""
        if weight <= 0 or "section_codes" not in self._a:
            return None
        from pipekit.retrieve.sections import SectionContext

        a = self._a
        return SectionContext.mapped(a["section_codes"], a["section_start"], a["section_ids"], a["section_scores"],
                                     weight)

    def search(self, text: str, k: int, settings: dict, link_base: str | None):
        """The k best passages for `text`, as `Searcher.search(text, k)` gives them."""
        from pipekit.retrieve.passages import ranked_passages
        from pipekit.retrieve.ranks import rank
        from pipekit.retrieve.repeats import collapse_answers

        k = int(k or settings["top_k"])
        if k <= 0:
            raise PipelineError(f"k must be a whole number > 0; got {k}")
        ids, weights = self.query_terms(text)
        depth = max(DEPTH, k)
        context = self.context(float(settings["section_context"]))
        doc_codes = self._a["doc_codes"]
        repeats = self._repeats() if settings.get("repeats", "collapse") == "collapse" else None
        reach = depth + k if repeats is not None else k

        def one(i: int, reach: int) -> tuple:
            cols, vals = self.scores(ids, weights)
            if context is not None:
                vals = context.rescore(ids, weights, cols, vals)
            order, docs, doc_scores = rank(cols, vals, doc_codes, reach, depth)
            return cols[order], vals[order], docs, doc_scores

        answers, also = collapse_answers(repeats, [one(0, reach)], k, reach, one, depth)
        c, s = answers[0][0].astype(np.int64), answers[0][1].astype(np.float64)
        read = {n: self.reader(n) for n in self.columns}
        cols = {n: r(c) for n, r in read.items()}
        places = self._also([a for per_query in also for a in per_query], read, link_base)
        return ranked_passages(text, s.tolist(), cols, cols["text"], link_base, places)

    def _repeats(self):
        from pipekit.retrieve.repeats import Repeats

        return Repeats(self.reader("text"), self._a["doc_codes"], self.reader("heading"))

    def _also(self, also: list, read: dict, link_base: str | None) -> list[list[dict]]:
        """Searcher._also: each hit's collapsed repeats as a Passage names them."""
        from pipekit.retrieve.passages import also_places

        return also_places(also, read, link_base)

    def reader(self, name: str):
        """Rows (an int64 array) of a column -> their Python values, as Arrow's to_pylist gives them."""
        a = self._a
        valid = a.get(f"{name}.v")
        if f"{name}.o" in a:
            offsets, data = a[f"{name}.o"], a[f"{name}.d"]
            as_json = name == "heading_path"

            def values(rows: np.ndarray) -> list:
                got = [data[lo:hi].tobytes().decode() for lo, hi in
                       zip(offsets.take(rows).tolist(), offsets.take(rows + 1).tolist())]
                if as_json:
                    got = [json.loads(g) for g in got]
                return got if valid is None else [g if ok else None for g, ok in zip(got, valid.take(rows).tolist())]
        else:
            ints = a[f"{name}.i"]

            def values(rows: np.ndarray) -> list:
                got = ints.take(rows).tolist()
                return got if valid is None else [g if ok else None for g, ok in zip(got, valid.take(rows).tolist())]
        return values


# --- the command ----------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    """`python -m pipekit search`'s arguments (both paths parse them here)."""
    p = argparse.ArgumentParser(
        prog="python -m pipekit search", description=DESCRIPTION,
        epilog="With no QUERY, asks at a prompt (or reads one query a line from a pipe).")
    p.add_argument("queries", nargs="*", metavar="QUERY", help="one or more queries (quote each)")
    p.add_argument("-k", type=int, default=None, metavar="N",
                   help="results per query (default: retrieval.top_k)")
    p.add_argument("--explain", action="store_true", help="each result's score term by term")
    p.add_argument("--json", action="store_true",
                   help="JSON Lines on stdout, one hit a line (query, rank, score, chunk_id, doc_id, format, "
                        "heading_path, pages, start_char, end_char, text, citation, link, also: the same passage in "
                        "other documents); nothing else")
    p.add_argument("--in", dest="paths", action="append", default=[], metavar="GLOB",
                   help="only documents whose doc_id matches GLOB (`*` within a folder, `**` across "
                        "folders; repeatable: any of them)")
    p.add_argument("--format", dest="formats", action="append", default=[], metavar="FMT",
                   help="only documents of this format (markdown, html, pdf, rst, text, csv, ...; repeatable)")
    add_common_args(p)
    return p


def fast_enough(args, cfg: dict) -> bool:
    """Whether this path answers the command as the full one would (see the module text)."""
    sec = cfg["retrieval"]
    return bool(args.queries) and not (args.explain or sec["explain"] or args.paths or args.formats) \
        and sec["feedback"] == "none" and not sec["dense_weight"] and all(q.isascii() for q in args.queries)


def main(argv: list[str] | None = None) -> int | None:
    """The command's exit code, or None when this path does not answer it (`fast_enough`,
    no fresh copy): then search.py's does (pipekit/__main__.py), and writes the copy."""
    from pipekit.run.config import load_config
    from pipekit.run.overrides import search_why_not, unapplied_lines

    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(parser(), argv)
    try:
        cfg = load_config(args.config, args.overrides)
    except PipelineError:
        cfg = None  # said by the full path, in its words
    index = ColdIndex.open(Path(cfg["paths"]["output"])) if cfg is not None and fast_enough(args, cfg) else None
    if index is None:
        return None

    def body():
        # (recorded_config reads every stage output's metadata with Arrow: only when a --set may need it)
        if any(search_why_not(key) for key in _keys(args.overrides)):
            from pipekit.run.overrides import recorded_config

            for line in unapplied_lines("python -m pipekit search", args.overrides, search_why_not,
                                        user_options(argv), cfg, recorded_config(cfg["paths"]["output"])):
                print(line, file=sys.stderr)
        answer(index, args, cfg)

    return run_command("search", body)


def _keys(overrides) -> list[str]:
    from pipekit.run.overrides import override_keys

    return override_keys(overrides)


def answer(index: ColdIndex, args, cfg: dict) -> None:
    """search.py's loop over the queries, with this index (the same lines, the same JSON)."""
    from pipekit.retrieve.passages import print_answer, shortfall_line, terminal_mark
    from pipekit.retrieve.queries import nothing_found

    mark = terminal_mark()
    link_base = cfg["documents"].get("link_base")
    for text in args.queries:
        hits = index.search(text, args.k, cfg["retrieval"], link_base)
        terms = set(index.analyzer.analyze(text))
        k = int(args.k or cfg["retrieval"]["top_k"])
        short = (shortfall_line(len(hits), k, index.n_chunks, index.n_documents, False, "") if terms else
                 nothing_found(terms).strip()[1:-1])
        print_answer(text, hits, terms, index.analyzer, mark, short, args.json)
