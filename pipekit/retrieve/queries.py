"""Reading queries and relevance judgements, with errors that point at the line.

Queries: a `.txt` file (one query a line; ids 1, 2, ... in order, blank lines skipped),
a `.tsv` file (`id<TAB>text`), a BEIR `.jsonl` file (`{"_id", "text"}` a line), or an
inline YAML list in config.yaml (strings, or `{id, text}` mappings).
Qrels: TREC (`qid 0 docid rel`, whitespace-separated) or BEIR `.tsv`
(`query-id<TAB>corpus-id<TAB>score` with a header row).

And writing: `trec_run` gives a run in TREC format (what trec_eval and ir-measures read).
`feedback_of` reads how queries are expanded (`retrieval.feedback`) into `Feedback`.

A malformed file stops stage 05 before it writes anything, naming file, line and
problem: a judgement file that half-loads gives metrics that look plausible and are wrong.
"""
from __future__ import annotations

import json
import re
from bisect import bisect_left
from itertools import chain
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipekit.run.lazy import lazy
from pipekit.run.arrays import string_buffers
from pipekit.run.errors import PipelineError

pa, pc = lazy("pyarrow"), lazy("pyarrow.compute")  # imported on first use: `search` starts without Arrow (pipekit/run/lazy.py)


def _lines(path: Path):
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise PipelineError(f"{path}: file not found") from None
    except UnicodeDecodeError as exc:
        raise PipelineError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return enumerate(text.splitlines(), 1)


def load_queries(spec) -> list[tuple[str, str]]:
    """[(query_id, text), ...] from a file path or an inline list."""
    if isinstance(spec, list):
        out = []
        for i, item in enumerate(spec, 1):
            if isinstance(item, str):
                out.append((str(i), item))
            elif isinstance(item, dict) and "text" in item:
                out.append((str(item.get("id", i)), str(item["text"])))
            else:
                raise PipelineError(f"retrieval.queries item {i}: expected a string or {{id, text}}; got {item!r}")
        return _check_unique(out, "retrieval.queries")
    path = Path(spec)
    suffix = path.suffix.lower()
    out = []
    if suffix == ".jsonl":
        for n, line in _lines(path):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise PipelineError(f"{path} line {n}: not valid JSON ({exc.msg})") from None
            if not isinstance(rec, dict) or "_id" not in rec or "text" not in rec:
                raise PipelineError(f"{path} line {n}: a BEIR query needs \"_id\" and \"text\"")
            out.append((str(rec["_id"]), str(rec["text"])))
    elif suffix == ".tsv":
        for n, line in _lines(path):
            if not line.strip():
                continue
            qid, tab, text = line.partition("\t")
            if not tab or not qid.strip():
                raise PipelineError(f"{path} line {n}: expected `id<TAB>query text`")
            out.append((qid.strip(), text.strip()))
    elif suffix in (".txt", ""):
        for n, line in _lines(path):
            if line.strip():
                out.append((str(len(out) + 1), line.strip()))
    else:
        raise PipelineError(f"{path}: queries must be a .txt, .tsv or .jsonl file")
    return _check_unique(out, str(path))


def _check_unique(queries, where):
    seen = set()
    for qid, _ in queries:
        if qid in seen:
            raise PipelineError(f"{where}: query id {qid!r} appears twice")
        seen.add(qid)
    if not queries:
        raise PipelineError(f"{where}: no queries")
    return queries


def load_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """{query_id: {doc_id: relevance}} from TREC or BEIR qrels."""
    path = Path(path)
    qrels: dict[str, dict[str, int]] = {}
    for n, line in _lines(path):
        # BEIR files are tab-separated (a doc_id may hold spaces); TREC ones use any whitespace.
        fields = [f.strip() for f in line.split("\t")] if "\t" in line else line.split()
        if not any(fields):
            continue
        if n == 1 and fields[0].lower() in ("query-id", "query_id", "qid"):
            continue  # the BEIR header row
        if len(fields) == 4:
            qid, _, doc, rel = fields
        elif len(fields) == 3:
            qid, doc, rel = fields
        else:
            raise PipelineError(f"{path} line {n}: expected `qid 0 docid rel` (TREC) or "
                                f"`query-id<TAB>corpus-id<TAB>score` (BEIR); got {len(fields)} fields")
        try:
            value = int(float(rel))
        except ValueError:
            raise PipelineError(f"{path} line {n}: relevance {rel!r} is not a number") from None
        qrels.setdefault(qid, {})[doc] = value
    if not qrels:
        raise PipelineError(f"{path}: no judgements")
    return qrels


_TO_ESCAPE = re.compile(r"[\s%]")  # \s in a str pattern is str.isspace's whitespace, Unicode's included


def trec_field(name: str) -> str:
    """A query or document id as one TREC field: whitespace (a file name with a space)
    would split it, so whitespace and `%` are written %-escaped, as in a URL.  (Found by
    one regex search in C: a run file has a line per document and query, 100,000 of them
    for 1,000 queries, and checking them a character at a time in Python took 0.3 s.)"""
    return _TO_ESCAPE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), name)


def trec_run(queries, run: dict) -> str:
    """A run {qid: {doc: score}} in TREC run format, queries in the given order, each
    query's documents best first (what trec_eval and ir-measures read).

    Every line is made by one %-format of the whole run, in C: an f-string a line, with a
    regular expression call a document, was 0.3 s of stage 05's 2.5 s at 200k passages (1,000
    queries, 100,000 lines).  The names are searched for what needs escaping all at once:
    ids that need none (nearly all) are written as they are.  A query's documents come best
    first already (stage 05's `rank` names them in that order): checked in C, and only a run
    that is not is sorted, by a key a document (of 0.12-0.17 s here, the sort and the items
    unpacked a line were 0.05-0.08 s).  Ties keep the run's order either way (a stable sort)."""
    qids, docs, ranks, scores = [], [], [], []
    for qid, _ in queries:
        got = run.get(qid, {})
        names, values = list(got), list(got.values())
        if values != sorted(values, reverse=True):  # (not best first: sorted, ties in the run's order)
            ranked = sorted(got.items(), key=lambda kv: -kv[1])
            names, values = [d for d, _ in ranked], [v for _, v in ranked]
        if names:
            docs += names
            scores += values
            qids += [trec_field(qid)] * len(names)
            ranks += range(1, len(names) + 1)
    if _TO_ESCAPE.search("".join(docs)):
        docs = [trec_field(d) for d in docs]
    return ("%s Q0 %s %d %.17g pipekit\n" * len(docs)) % tuple(chain.from_iterable(zip(qids, docs, ranks, scores)))


@dataclass(frozen=True)
class Feedback:
    """RM3's settings (`retrieval.feedback: rm3` and the `feedback_*` keys)."""
    docs: int = 5  # first-pass chunks the relevance model is built from
    terms: int = 50  # its heaviest terms kept
    query_weight: float = 0.7  # λ: the original query's share of the interpolation


def feedback_noise(terms, analyzer, df: np.ndarray, docs: int) -> np.ndarray:
    """Which index terms RM3 may not add (bool per term id): stopwords (the `questions`
    list, analysed as the index analyses, so `does` is `doe`) and bare numbers.

    On the sample RM3 added `what` and `how` (every question says them, so the top
    chunks of any question share them) and `05`, `00`, `2025` (clock times and dates in
    the runbooks): words that pull the second query toward whatever mentions a time.
    A number earns its place when it is rare: in no more chunks than feedback reads (a
    port or an error code the top chunks name, not the `00` of every clock time). A
    stopword never does; one the query says keeps its own weight anyway."""
    from pipekit.index.analyzer import STOPLISTS, Analyzer

    stems = Analyzer(stemmer=analyzer.stemmer, stopwords="none").analyze(" ".join(sorted(STOPLISTS["questions"])))
    stop = np.asarray(pc.is_in(terms, value_set=pa.array(sorted(set(stems)), pa.string())))
    number = np.asarray(pc.match_substring_regex(terms, r"^[0-9]+$"))
    return stop | (number & (df > docs))


def chunk_major(tf: np.ndarray, chunk: np.ndarray, indptr: np.ndarray, chunks: int, terms: int):
    """The postings chunk by chunk (indptr, term ids, tf) from the index's term-major ones, for
    feedback, which needs a chunk's terms: one linear CSC -> CSR pass."""
    from scipy import sparse  # here, not at the top: 0.16 s of import a run without feedback never needs

    m = sparse.csc_matrix((tf, chunk, indptr), shape=(chunks, max(terms, 1))).tocsr()
    return m.indptr, m.indices, m.data


def feedback_of(sec: dict) -> Feedback | None:
    """The feedback settings of config's `retrieval` section (None: the plain formula)."""
    if sec["feedback"] == "none":
        return None
    return Feedback(sec["feedback_docs"], sec["feedback_terms"], sec["feedback_query_weight"])


# _KEEP_BYTES[n]: the n high bytes of a uint64 set, the rest 0
_KEEP_BYTES = np.array([0] + [(1 << 64) - (1 << (64 - 8 * n)) for n in range(1, 9)], dtype=np.uint64)


def prefix_keys(strings: pa.Array) -> np.ndarray:
    """Each string's first 8 UTF-8 bytes as one big-endian uint64, shorter ones padded with
    0: strings in byte order have keys in the same order (ties where the first 8 bytes
    agree).  Read straight from the Arrow buffers, a few NumPy passes, no Python strings."""
    if not (pa.types.is_string(strings.type) or pa.types.is_large_string(strings.type)):
        strings = strings.cast(pa.string())
    offsets, data = string_buffers(strings)
    if len(strings) == 0 or len(data) == 0:  # nothing, or only empty strings
        return np.zeros(len(strings), dtype=np.uint64)
    at = offsets[:-1, None] + np.arange(8, dtype=offsets.dtype)  # each string's first 8 byte positions
    # (past its end they are the next string's bytes, or clipped to the last: masked off below)
    first8 = data.take(at, mode="clip").view(">u8").ravel().astype(np.uint64)
    return first8 & _KEEP_BYTES[np.minimum(np.diff(offsets), 8)]


FEW_WORDS = 32  # a query's words up to this many are looked up in plain Python (TermIds._few)


class TermIds:
    """Each word's term id in an index's terms, -1 if the index lacks it.  Stage 04 writes
    the terms sorted, so a search over them finds them; pc.index_in hashes every term of the
    index again on each call: tens of ms at 200k terms, which each single search through
    pipekit.Searcher would pay.  Terms not in order (`sorted` False) fall back to that.

    The search is over `prefix_keys` (made once, 1.6 MB at 200k terms): a word whose first
    8 bytes begin no term is not a term, and one whose first 8 bytes begin exactly one term
    is that term if the two strings are equal (one Arrow comparison for all of them).  Only
    a word sharing its first 8 bytes with several terms ("understand", "understood") is
    bisected among those, one Arrow value at a time.  Before, every term became a Python
    string and every word was searched for among them: ~36 ms of stage 05's 1,000 queries at
    200k terms, now 13-18 cold and ~3 warm; a Searcher's first query paid the 16 ms of the
    first part alone."""

    def __init__(self, terms: pa.Array):
        self.terms = terms
        self.sorted: bool | None = None  # checked on the first call
        self._keys: np.ndarray | None = None
        self._bytes = None  # (offsets, memoryview of the bytes) of the terms, for _found

    def __call__(self, words: pa.Array) -> np.ndarray:
        terms = self.terms
        if self.sorted is None:
            self.sorted = len(terms) < 2 or pc.all(pc.less(terms[:-1], terms[1:])).as_py()
        if not self.sorted or len(terms) == 0:  # not sorted: one hash lookup per word, in C
            return np.asarray(pc.fill_null(pc.index_in(words, value_set=terms), -1), dtype=np.int64)
        if self._keys is None:
            self._keys = prefix_keys(terms)
        if len(words) <= FEW_WORDS:
            return self._few(words.to_pylist())
        keys = prefix_keys(words)
        lo = np.searchsorted(self._keys, keys, side="left")
        hi = np.searchsorted(self._keys, keys, side="right")
        ids = np.full(len(words), -1, dtype=np.int64)
        one = np.flatnonzero(hi - lo == 1)
        if len(one):
            same = np.asarray(pc.equal(terms.take(pa.array(lo[one])), words.take(pa.array(one))))
            ids[one[same]] = lo[one[same]]
        several = np.flatnonzero(hi - lo > 1)
        for i, a, b, w in zip(several.tolist(), lo[several].tolist(), hi[several].tolist(),
                              words.take(pa.array(several, pa.int64())).to_pylist()):
            # Python's str order is UTF-8's byte order, the order stage 04 sorted the terms in
            j = bisect_left(terms, w, a, b, key=lambda term: term.as_py())
            ids[i] = j if j < b and terms[j].as_py() == w else -1
        return ids

    def few(self, words: list[str]) -> list[int]:
        """`self(words)` for a Python list of words, as a list (one query's: no Arrow array
        of them is made to be read back, pipekit/retrieve/warm.py)."""
        if self.sorted and self._keys is not None and len(words) <= FEW_WORDS:
            return self._found(words)
        return self(pa.array(words, pa.string())).tolist()

    def _few(self, words: list[str]) -> np.ndarray:
        return np.array(self._found(words), dtype=np.int64)

    def _found(self, words: list[str]) -> list[int]:
        """The same search for one query's few words, in plain Python: the Arrow path's
        calls (keys, two takes, a comparison) cost ~10 µs each whatever the words' number,
        a fifth of a Searcher's search at 12,000 chunks (bench/search_speed.py).  A term is
        compared as bytes of the vocabulary's buffer: an Arrow scalar per word cost ~1 µs."""
        raw = [w.encode() for w in words]
        # A word's key as prefix_keys makes it: its first 8 bytes, big-endian, 0-padded.
        keys = np.array([int.from_bytes(b[:8].ljust(8, b"\0"), "big") for b in raw], dtype=np.uint64)
        lo = self._keys.searchsorted(keys, side="left").tolist()
        hi = self._keys.searchsorted(keys, side="right").tolist()
        if self._bytes is None:
            offsets, data = string_buffers(self.terms)
            self._bytes = (offsets, memoryview(data))
        offsets, data = self._bytes
        term = lambda j: data[offsets.item(j):offsets.item(j + 1)]  # noqa: E731 (a view: no copy)
        ids = []
        for b, a, z in zip(raw, lo, hi):
            # Python's bytes order is UTF-8's, the order stage 04 sorted the terms in.
            j = a if z - a <= 1 else bisect_left(range(z), b, a, z, key=lambda j: term(j).tobytes())
            ids.append(j if j < z and term(j) == b else -1)
        return ids


@dataclass(frozen=True)
class QueryTerms:
    """A query as it is scored: score(c) = Σ weights[i] · impact(ids[i], c).

    Without feedback each weight is qtf(t,q) and this is SPEC's plain formula.  With
    feedback the weights are the expanded query's and terms the text never said may join
    (`Index.expand` in 05_retrieval.py).  Here, not in the stage file, so that workers'
    answers holding them unpickle anywhere (a stage file is no importable module)."""
    ids: np.ndarray  # int64 term ids the index knows: the text's in query order, then feedback's
    weights: np.ndarray  # float64 multiplier of each term's impact
    qtf: dict  # every analysed term of the text (known to the index or not) -> times it occurs
    from_feedback: np.ndarray | None = None  # the part of each weight feedback gave (None: no feedback)


def nothing_found(terms) -> str:
    """What to say when a query has no result: `search "the of and"` said no passage held
    any of its terms, as if the corpus lacked them, when the analyzer had left no term."""
    if not terms:
        return ("    (every word of it is a stopword or a single letter, so there is nothing to search "
                "for: indexing.stopwords decides which words are stopwords, indexing.single_letters "
                "whether a lone capital such as R counts)")
    return "    (no passage contains any of its terms)"
