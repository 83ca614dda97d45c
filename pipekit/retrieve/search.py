"""Ask the index one question: `python -m pipekit search "QUERY"` and `pipekit.Searcher`.

Until this existed, asking anything meant writing a queries file and rerunning stage 05,
which rewrites its outputs.  Here the stage-04 index in `paths.output` answers directly
and no output is written (only, once per index build, the memory-mapped copy from which
the next one-shot command starts fast: pipekit/retrieve/cold.py answers a query or two
from it, and hands this module what it does not cover).  The answer is stage 05's own: the index is loaded and scored
by the stage file's `Index` and `search` (reached through `load_stage(5)` when a search
is made, never at import time), so a result here is the result stage 05 would give for
the same query with the same settings, score for score.

For programs (feeding passages to an LLM, say):

    from pipekit import Searcher
    hits = Searcher("data").search("when is the change freeze", k=5)
    hits[0].citation   # 'handbook/operations/deploys.md › Deploying Lighthouse › Change freezes'
    hits[0].text, hits[0].start_char, hits[0].end_char   # the passage and its span in stage 02's text

Each hit is a `Passage`: its rank and score, the chunk, and everything needed to cite it
(document, heading trail, pages, the character span of the cleaned document it came from)
and to open it (`link`: the document with its heading's anchor or PDF page,
pipekit/retrieve/links.py), and `also`: the same passage in other documents, collapsed onto
it (retrieval.repeats, pipekit/retrieve/repeats.py).  `search(..., paths=["R/**"], formats=["pdf"])` searches part of
the index, each hit scored as without the filter (pipekit/retrieve/filters.py); on the
command line `--in GLOB` and `--format FMT`, and `--json` writes JSON Lines for programs.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipekit.run import io
from pipekit.run.commands import parse_args, run_command, require_output, user_options
from pipekit.run.config import SCHEMA, load_config
from pipekit.run.overrides import recorded_config, search_why_not, unapplied_lines
from pipekit.run.errors import PipelineError
from pipekit.run.io import read_meta
from pipekit.retrieve.filters import ChunkFilter
from pipekit.retrieve.fusion import dense_for
from pipekit.retrieve.links import link as make_link
# (SNIPPET_WORDS and snippet: imported from here by others, as before they moved)
from pipekit.retrieve.passages import (SNIPPET_WORDS, Passage, also_places, print_answer, ranked_passages,  # noqa: F401
                                       result_lines, shortfall_line, snippet, terminal_mark)
from pipekit.retrieve.queries import feedback_of, nothing_found
from pipekit.retrieve.reading import MAX_READ_CHARS, Reading
from pipekit.retrieve.repeats import NONE, repeats_for
from pipekit.retrieve.rows import Records, column_reader, table_reader
from pipekit.retrieve.sections import section_context
from pipekit.retrieve.results import chunk_texts
from pipekit.retrieve.warm import OneQuery
from pipekit.run.stages import get_stage, load_stage

class OutputReader:
    """The part of a stage context that stage 05's Index uses, over an output folder,
    read-only: finding outputs (or saying which command makes them) and notes."""

    def __init__(self, output_dir: Path, options: list[str] = ()):
        self.output_dir = Path(output_dir)
        self.options = list(options)
        self.notes: list[str] = []

    def path(self, name: str) -> Path:
        return self.output_dir / name

    def require(self, name: str, made_by) -> Path:
        return require_output(self.output_dir, name, made_by, self.options)

    def note(self, text: str) -> None:
        self.notes.append(text)


def recorded_link_base(output_dir: Path) -> str | None:
    """documents.link_base as stage 05 last ran with it here (it records it: run/freshness.py)."""
    results = Path(output_dir) / get_stage(5).outputs[0]
    meta = read_meta(results) if results.exists() else None
    return (meta or {}).get("inputs", {}).get("config", {}).get("documents.link_base")


def recorded_settings(output_dir: Path) -> dict:
    """The retrieval settings stage 05 last ran with here (its output records them),
    else config.yaml's defaults: so the API answers as the last stage-05 run did."""
    settings = {k: key.default for k, key in SCHEMA["retrieval"].items()}
    results = Path(output_dir) / get_stage(5).outputs[0]
    meta = read_meta(results) if results.exists() else None
    for name, value in (meta or {}).get("inputs", {}).get("config", {}).items():
        section, _, key = name.partition(".")
        if section == "retrieval":
            settings[key] = value
    return settings


class Searcher:
    """The stage-04 index of an output folder, loaded once, answering queries as stage 05.

    `settings` are the `retrieval` config values to search with (default: those stage 05
    last ran with in this folder).  Loading reads the whole index into memory, as stage
    05 does, and (`keep_texts`, the default) every chunk's text: a search then reads
    nothing from disk and takes about half a millisecond at 12,000 chunks
    (bench/search_speed.py).  Fetching the texts of each search's hits from
    03_chunks.parquet instead (keep_texts=False: less memory, the texts' size, and a faster
    load, for a search or two) decodes a whole row group of 20,000 texts per hit, tens of
    milliseconds each.  `compiled` (the default) ranks a query in one compiled loop where numba
    imports (pipekit/retrieve/compiled.py: the same hits and score bits, in about half the time),
    which costs numba's import and a load of its cached machine code (or a first compile) here.
    """

    def __init__(self, output_dir: str | Path, settings: dict | None = None, options: list[str] = (),
                 keep_texts: bool = True, link_base: str | None = ..., compiled: bool = True):
        self.output_dir = Path(output_dir)
        self.settings = dict(recorded_settings(self.output_dir), **(settings or {}))
        # Links: documents.link_base as given, else as stage 05 last made them here.
        self.link_base = recorded_link_base(self.output_dir) if link_base is ... else link_base
        self._stage = load_stage(5)
        self._ctx = OutputReader(self.output_dir, options)
        self.index = self._stage.Index(self._ctx)
        # Stage 05 reads the postings' tf on first need (section context, feedback, explain);
        # a Searcher lives on (a server) while the pipeline replaces the files under it, so
        # it reads everything now: after loading, a search reads nothing from disk.
        self.index.tf  # noqa: B018 - read for its effect
        self._chunks_03 = self._ctx.require("03_chunks.parquet", get_stage(3))
        if (read_meta(self._chunks_03) or {}).get("fingerprint") != self.index.meta["inputs"]["upstream"]:
            raise PipelineError(f"03_chunks.parquet in {self.output_dir} changed since the index was built: "
                                f"rerun `python 04_indexing.py`")
        # What a citation needs beyond 04_chunks' columns, for every chunk; with keep_texts the
        # texts too (as read: one Arrow buffer per row group, taken from without copying them all).
        # (format and anchor: for filters and links; a 03 file older than them has neither)
        extra = [n for n in ("format", "anchor") if n in io.schema(self._chunks_03).names]
        cited = io.read_table(self._chunks_03, ["heading_path", "start_char", "end_char"] + extra + ["text"] * keep_texts)
        self._texts = cited.column("text") if keep_texts else None
        spans = cited.drop_columns(["text"]) if keep_texts else cited
        # Everything a Passage names, one table: a search takes its hits' rows in one call
        # (a take and a list per column was a tenth of a search at 12,000 chunks).
        named = ("chunk_id", "doc_id", "heading", "page_start", "page_end", "page_label_start", "page_label_end")
        self._cited = pa.table({**{n: self.index.chunks.column(n) for n in named},
                                **{n: spans.column(n) for n in spans.column_names}})
        # ... read from the columns' buffers: Arrow's take and to_pydict cost more in their
        # dispatch than ten rows' values (pipekit/retrieve/rows.py).
        self._readers = {n: column_reader(self._cited.column(n)) for n in self._cited.column_names}
        # All of them at once, with the texts where they are kept: a search's hits (rows.py).
        self._read_cited = table_reader(self._cited.append_column("text", self._texts) if keep_texts else self._cited)
        self._read_texts = column_reader(self._texts) if keep_texts else None
        # One query's hits (the short way): a chunk's citation strings joined into one now, so
        # that a hit's are one decode; its twelve columns read from their buffers (above) were
        # ~65 µs of a 0.37 ms search at 6,761 chunks, now ~20 (rows.Records: the strings again).
        self._records = Records(self._cited, self._texts)  # (and where each kept text is: one take for all)
        self._reading = None  # read(): made on first use
        self.filter = ChunkFilter(self.index.doc_names, self.index.doc_codes,
                                  cited.column("format").combine_chunks() if "format" in extra else None)
        self.index.context = section_context(float(self.settings["section_context"]), self._chunks_03, self.index)
        said = len(self._ctx.notes)
        self.index.dense = dense_for(self.output_dir, self.index, self.settings["dense_weight"], self._ctx.note)
        self.index.repeats = repeats_for(
            self.index, self.settings.get("repeats", "collapse"),
            self._read_texts if keep_texts else (lambda rows: chunk_texts(self._chunks_03, rows)))
        # One query the short way (pipekit/retrieve/warm.py), ranked in one compiled loop where numba
        # imports (`compiled`: a server's, a program's; not the one-shot command's, whose start it would double).
        self._one = OneQuery(self.index, self._stage.DEPTH, compiled)
        for line in self._ctx.notes[said:]:  # (a weight with no vectors to weigh: fusion.no_vectors) said, not swallowed
            warnings.warn(line, UserWarning, stacklevel=2)

    @property
    def analyzer(self):
        return self.index.analyzer

    def search(self, text: str, k: int | None = None, explain: bool = False, paths: list[str] | None = None,
               formats: list[str] | None = None) -> list[Passage]:
        """The k best passages for one query (k defaults to retrieval.top_k), from the
        documents whose doc_id matches one of the globs `paths` and whose format is one of
        `formats` (each None: all), each scored as without the filter."""
        if self._short(text, explain, paths, formats):
            rows, scores, also = self._one.hits(text, self._k(k))
            return self._passages(text, rows, scores, also)
        return self.search_many([text], k, explain, paths, formats)[0]

    def ranking(self, text: str, k: int | None = None, paths: list[str] | None = None,
                formats: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The chunk numbers (rows of 04_chunks, int64) and scores of `search`'s hits, best
        first, without making Passages of them: what bm25s and tantivy return for a query
        (bench/search_speed.py compares like with like)."""
        if self._short(text, False, paths, formats):
            rows, scores, _ = self._one.hits(text, self._k(k))
            return rows, scores
        ranked = self._ranked([text], self._k(k), paths, formats)
        if ranked is None:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        _, c, s, _ = ranked[0]
        return np.asarray(c, dtype=np.int64), np.asarray(s, dtype=np.float64)

    def _short(self, text, explain: bool, paths, formats) -> bool:
        """Whether one query is answered the short way (pipekit/retrieve/warm.py): no
        explanation, filter, feedback or vectors (the settings may be changed between searches)."""
        return (not explain and (paths is None or not _listed(paths, "paths"))  # (None, as a search most often
                and (formats is None or not _listed(formats, "formats"))  # gives them, without two calls)
                and isinstance(text, str) and self.settings["feedback"] == "none" and self.index.dense is None)

    def _k(self, k: int | None) -> int:
        k = int(k or self.settings["top_k"])
        if k <= 0:
            raise PipelineError(f"k must be a whole number > 0; got {k}")
        return k

    def search_many(self, texts: list[str], k: int | None = None, explain: bool = False,
                    paths: list[str] | None = None, formats: list[str] | None = None) -> list[list[Passage]]:
        """The k best passages for each query, as stage 05 ranks them (filters: `search`)."""
        k = self._k(k)
        ranked = self._ranked(texts, k, paths, formats)
        if ranked is None:
            return [[] for _ in texts]
        hits, scored, mask = ranked
        q, c, s, _ = hits
        queries = [(str(i + 1), t) for i, t in enumerate(texts)]
        feedback = feedback_of(self.settings)
        added = [self.index.added_terms(x) for x in scored] if feedback is not None else [None] * len(texts)
        rows = np.asarray(c, dtype=np.int64)
        # (Not with a filter: the parts are found by redoing the unfiltered fusion, whose lists
        # need not hold a hit of the filtered one.)
        fusion = (self.index.dense.explain(self._stage.candidates, self.index, queries, scored, q, c,
                                           max(self._stage.DEPTH, k)).to_pylist()
                  if explain and self.index.dense is not None and mask is None else [None] * len(c))
        # Every query's citation columns, texts (a row group read once, without kept texts) and
        # repeats at once; a query's hits are one run of them, ranked 1, 2, ... (results.collect_answers).
        cols, also = self._read_cited(rows), self._also(hits.also)
        passages = cols.pop("text") if "text" in cols else chunk_texts(self._chunks_03, rows)
        ends = np.searchsorted(q, np.arange(1, len(texts) + 1)).tolist()
        out, at = [], 0
        for qi, (text, end) in enumerate(zip(texts, ends)):
            out.append(ranked_passages(
                text, s[at:end].tolist(), {n: v[at:end] for n, v in cols.items()}, passages[at:end], self.link_base,
                also[at:end], added[qi],
                [self.index.explain(scored[qi], int(c[i])) for i in range(at, end)] if explain else None,
                fusion[at:end]))
            at = end
        return out

    def _ranked(self, texts: list[str], k: int, paths, formats):
        """Stage 05's hit arrays (query#, chunk, score, rank; `.also`: each hit's repeats) for
        `texts` within the filters, each query as scored, and the filters' mask (None: no
        filter); None when the filters leave nothing."""
        paths, formats = _listed(paths, "paths"), _listed(formats, "formats")
        mask = self.filter.mask(paths, formats)
        if mask is not None and not mask.any():
            unmatched = self.filter.unmatched(paths, formats)
            if unmatched:  # a typo, most likely: said, rather than an empty answer
                raise PipelineError("; ".join(unmatched))
            return None  # each matches some document, but none both
        queries = [(str(i + 1), t) for i, t in enumerate(texts)]
        hits, _, scored = self._stage.search(
            self.index, queries, k, max(self._stage.DEPTH, k), threads=1, feedback=feedback_of(self.settings),
            mask=mask, summary=False)
        return hits, scored, mask

    def _passages(self, text: str, rows: np.ndarray, scores: np.ndarray, also: list) -> list[Passage]:
        """One query's hits (rows of the index, best first) as Passages: their citation
        records (joined at load: rows.Records) and texts, their repeats named (`also`: per hit,
        (rows, scores))."""
        # (a separator in a citation field: its columns read one by one)
        cols = self._records(rows) if self._records.ok else self._read_cited(rows)
        texts = (cols.pop("text") if "text" in cols else self._read_texts(rows) if self._read_texts is not None
                 else chunk_texts(self._chunks_03, rows))
        places = [[] for _ in also] if all(a is NONE for a in also) else self._also(also)
        return ranked_passages(text, scores.tolist(), cols, texts, self.link_base, places)

    def _also(self, also: list[tuple[np.ndarray, np.ndarray]]) -> list[list[dict]]:
        """For each hit the places its collapsed repeats are found, as a Passage names them."""
        return also_places(also, self._readers, self.link_base)

    def read(self, chunk_id: str, around: int = 0, section: bool = False, max_chars: int = MAX_READ_CHARS) -> dict:
        """A hit's chunk with `around` passages either side, or its whole level-2 section,
        capped at `max_chars` (pipekit/retrieve/reading.py): text, spans, pages, citation, link."""
        if self._reading is None:
            texts = self._texts if self._texts is not None else io.read_table(self._chunks_03, ["text"]).column("text")
            self._reading = Reading(self._cited, texts, self.index.doc_codes,
                                    lambda doc, fmt, anchor, page: make_link(doc, fmt, anchor, page, self.link_base))
        return self._reading.read(chunk_id, around, section, max_chars)

    def query_terms(self, text: str) -> set[str]:
        return set(self.analyzer.analyze(text))

    def shortfall(self, hits: list[Passage], k: int | None = None, paths: list[str] | None = None,
                  formats: list[str] | None = None, names: tuple[str, str] = ("--in", "--format")) -> str | None:
        """Why `search(…, k, paths=…, formats=…)` gave `hits`, fewer than k (None: it gave k):
        `3 of 10: only 3 passages contain a term of the query`, or what the filters leave.
        A chunk scoring 0 is never a result (SPEC), so a short answer is the collection's or
        the filter's doing; said, because three hits where ten were asked read as a bug.
        `names`: what the caller calls the two filters (the server's tools: paths, formats)."""
        k = int(k or self.settings["top_k"])
        if len(hits) >= k:
            return None
        paths, formats = _listed(paths, "paths"), _listed(formats, "formats")
        mask = self.filter.mask(paths, formats)
        passages, documents = self.filter.kept(mask)
        keeps = (f"{names[0]} and {names[1]} keep" if paths and formats else f"{names[0]} keeps" if paths
                 else f"{names[1]} keeps")
        return shortfall_line(len(hits), k, passages, documents, mask is not None, keeps)


def _listed(value, name: str) -> list[str]:
    """A filter argument as a list: one string is one pattern (not its characters)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not all(isinstance(v, str) for v in value):
        raise PipelineError(f"{name} must be a list of strings; got {value!r}")
    return list(value)


def prompt_queries(prompt: bool = True):
    """Queries typed at a prompt (or piped in, one a line) until an empty line or EOF.
    (No prompt with --json: input() writes it to stdout, which is the JSON's.)"""
    tty = sys.stdin.isatty()
    while True:
        try:
            line = input("query> " if tty and prompt else "")
        except EOFError:
            return
        if not line.strip():
            if tty:
                return
            continue
        yield line.strip()


def main(argv: list[str] | None = None) -> int:
    from pipekit.retrieve import cold

    parser = cold.parser()  # one parser for both paths (cold.py answers a query or two from a mapped copy)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(parser, argv)

    def body():
        cfg = load_config(args.config, args.overrides)
        # (the run's own --sets repeated, as the README advises, get no line: they are in force)
        for line in unapplied_lines("python -m pipekit search", args.overrides, search_why_not, user_options(argv),
                                    cfg, recorded_config(cfg["paths"]["output"])):
            print(line, file=sys.stderr)
        # Queries on the command line: a search or two, so their texts are read per search
        # (a faster start); at the prompt, many: every text is read once, up front.
        # The files the copy for the next search's fast start is made from, as they were before
        # loading (cold.py: written after the answers, if missing or stale, never from a mix of runs).
        before = None if cold.fresh(cfg["paths"]["output"]) else cold.stamps(cfg["paths"]["output"])
        with warnings.catch_warnings(record=True) as said:  # Searcher's notes, each one line here
            warnings.simplefilter("always")
            searcher = Searcher(cfg["paths"]["output"], settings=cfg["retrieval"], options=user_options(argv),
                                keep_texts=not args.queries, compiled=False)  # (no numba: a cold start)
        for w in said:
            print(f"python -m pipekit search: note: {w.message}", file=sys.stderr)
        searcher.link_base = cfg["documents"].get("link_base")  # config.yaml's (and --set's), as every setting here
        # A pattern that matches nothing is most likely a typo: said in one line; the search
        # goes on when another pattern matches (and stops, with that line, when none does).
        mask = searcher.filter.mask(args.paths, args.formats)
        for line in searcher.filter.unmatched(args.paths, args.formats) if mask is None or mask.any() else []:
            print(f"python -m pipekit search: note: {line}", file=sys.stderr)
        if mask is not None and not mask.any() and not searcher.filter.unmatched(args.paths, args.formats):
            # Each filter matches some document, none both: no query can find anything here
            # (Searcher.search returns [] for it; a user is told what each filter matched).
            raise PipelineError(searcher.filter.disjoint(args.paths, args.formats))
        mark = terminal_mark()
        explain = args.explain or cfg["retrieval"]["explain"]
        for text in (args.queries or prompt_queries(prompt=not args.json)):
            hits = searcher.search(text, args.k, explain=explain, paths=args.paths, formats=args.formats)
            terms = searcher.query_terms(text)
            short = (searcher.shortfall(hits, args.k, args.paths, args.formats) if terms else
                     nothing_found(terms).strip()[1:-1])  # stopwords only: said so, not "no passage contains"
            print_answer(text, hits, terms, searcher.analyzer, mark, short, args.json)
        if before is not None:
            cold.write(searcher, before)

    return run_command("search", body)
