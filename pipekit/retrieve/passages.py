"""A search's answer as a reader gets it: `Passage` (a hit, ready to cite) and the lines the
terminal shows for a query's hits (`result_lines`, with each passage's `snippet`).

Apart from pipekit/retrieve/search.py (which imports them from here, so `from
pipekit.retrieve.search import Passage` still works) because `python -m pipekit search
"QUERY"` answers from a memory-mapped index without loading Arrow, the stage-05 file or
a Searcher (pipekit/retrieve/cold.py, issue 47), and prints its hits with these same
functions: one Passage and one page of output, whichever path found them.  Nothing here
imports pyarrow unless a passage holds a letter or digit outside ASCII (the analyzer's
Arrow path then decides which words to mark).  Not here: finding the hits.
"""
from __future__ import annotations

import textwrap
import unicodedata
from dataclasses import dataclass, field, fields

import numpy as np

from pipekit.index.link_text import link_text
from pipekit.retrieve.links import link_list
from pipekit.read.pages import cite_pages, passage_text
from pipekit.retrieve.queries import nothing_found

SNIPPET_WORDS = 28  # words of a passage shown around its densest run of query terms


@dataclass(frozen=True)
class Passage:
    """One result, ready to cite: where it is, what it says, how it scored."""

    query: str
    rank: int
    score: float
    chunk_id: str
    doc_id: str
    heading: str
    heading_path: list[str]
    page_start: int | None  # physical pages, from 1
    page_end: int | None
    page_label_start: str | None  # the labels printed on them (SPEC: what a reader looks up)
    page_label_end: str | None
    start_char: int  # the span [start_char, end_char) of the document's stage-02 text
    end_char: int
    text: str
    format: str | None = None  # the document's (stage 01)
    link: str | None = None  # where the passage opens: doc_id#anchor, doc_id#page=N (pipekit/retrieve/links.py)
    explain: list[dict] | None = field(default=None, compare=False)
    # With retrieval.feedback: the terms feedback added to the query, heaviest first.
    added: list[tuple[str, float]] | None = field(default=None, compare=False)
    # With dense vectors and explain: the BM25 part, the cosine part and the fused score (pipekit/retrieve/fusion.py).
    fusion: dict | None = field(default=None, compare=False)
    # The same passage in other documents (retrieval.repeats: collapse; pipekit/retrieve/repeats.py),
    # best first: each {chunk_id, doc_id, heading, page_start, page_end, score, citation, link}.
    also: list[dict] = field(default_factory=list)

    @property
    def pages(self) -> str:
        """`p.74`, or `p.74 (PDF page 102)` where the printed label is not the physical page."""
        return cite_pages(self.page_start, self.page_end, self.page_label_start, self.page_label_end)

    @property
    def citation(self) -> str:
        """`document › heading trail, p.3–4`: what a reader needs to find the passage."""
        where = self.doc_id + (f" › {self.heading}" if self.heading else "")
        return where + (f", {self.pages}" if self.pages else "")

    def to_dict(self) -> dict:
        # Field by field, not dataclasses.asdict: asdict copies every value recursively, and
        # that was a third of a served search's time (pipekit/serve). Lists are copied, so
        # the dict can be changed without changing the Passage.
        d = {}
        for name in _PASSAGE_FIELDS:
            v = getattr(self, name)
            if isinstance(v, list):  # heading_path, explain, added, also
                v = [dict(e) if isinstance(e, dict) else e for e in v]
            elif isinstance(v, dict):  # fusion
                v = dict(v)
            d[name] = v
        d["citation"] = self.citation
        return d

    def to_json(self) -> dict:
        """`search --json`'s record: every field a program needs to cite and open the passage
        (explain, feedback and fusion parts only when they were asked for)."""
        d = self.to_dict()
        for name in ("explain", "added", "fusion"):
            if d[name] is None:
                del d[name]
        return d


_PASSAGE_FIELDS = tuple(f.name for f in fields(Passage))  # once: dataclasses.fields() per hit was a tenth of to_dict


def ranked_passages(query: str, scores: list[float], cols: dict[str, list], texts: list[str],
                    link_base: str | None, also: list[list[dict]], added=None, explain: list | None = None,
                    fusion: list | None = None) -> list[Passage]:
    """One query's hits as Passages, ranked 1, 2, ... in the order given: `cols` are their
    citation columns by name (chunk_id, doc_id, heading, heading_path, page_start, page_end,
    page_label_start, page_label_end, start_char, end_char, and format and anchor where the
    index has them: a Searcher's readers or the cold path's), `texts` their texts, `also`
    each one's repeats as `also_places` names them; explain and fusion one item per hit."""
    none = [None] * len(scores)
    fmt, anchor = cols.get("format", none), cols.get("anchor", none)
    explain, fusion = explain or none, fusion or none
    chunk_id, doc_id, heading, trail = cols["chunk_id"], cols["doc_id"], cols["heading"], cols["heading_path"]
    start, end, p0, p1 = cols["start_char"], cols["end_char"], cols["page_start"], cols["page_end"]
    l0, l1 = cols["page_label_start"], cols["page_label_end"]
    links = link_list(doc_id, fmt, anchor, p0, link_base)
    out = []
    new, fill = object.__new__, object.__setattr__
    for i, score in enumerate(scores):
        # A frozen dataclass's __init__ sets each of its 20 fields through object.__setattr__:
        # 3.6 µs a Passage, a twentieth of a warm search of 10 hits (bench/search_speed.py).
        # Giving it its __dict__ whole (a dict display: 1.8 µs, where update(**fields) was 3.1)
        # makes the same object (tests/test_warm.py), still frozen after.
        p = new(Passage)
        fill(p, "__dict__", {
            "query": query, "rank": i + 1, "score": score, "chunk_id": chunk_id[i], "doc_id": doc_id[i],
            "heading": heading[i] or "", "heading_path": list(trail[i] or []), "page_start": p0[i],
            "page_end": p1[i], "page_label_start": l0[i], "page_label_end": l1[i], "start_char": start[i],
            "end_char": end[i], "text": texts[i], "format": fmt[i], "link": links[i], "explain": explain[i],
            "added": added, "fusion": fusion[i], "also": also[i]})
        out.append(p)
    return out


def snippet(text: str, terms: set[str], analyzer, words: int = SNIPPET_WORDS,
            mark=lambda w: f"**{w}**", plain=lambda w: w) -> str:
    """The passage's densest run of `words` words in query terms, those words marked.

    A word is marked when one of its analysed terms is a query term, so `freezes` is
    marked for the query `freeze` exactly when the index matched them.  Links show as their
    text (`[the cookbook](../howto/x.html "Cookbook")` as `the cookbook`), as a reader sees
    them and as stage 04 indexed them."""
    tokens = link_text(passage_text(text)).split()  # the passage, not its page-marker lines
    if not tokens:
        return ""
    hit = _marked(tokens, terms, analyzer)
    n = min(words, len(tokens))
    window = np.convolve(hit.astype(np.int32), np.ones(n, dtype=np.int32), mode="valid")
    start = int(np.argmax(window)) if hit.any() else 0
    shown = [mark(t) if h else plain(t) for t, h in zip(tokens[start:start + n], hit[start:start + n])]
    return ("… " if start > 0 else "") + " ".join(shown) + (" …" if start + n < len(tokens) else "")


def result_lines(passages: list[Passage], terms: set[str], analyzer, mark, short: str | None = None) -> list[str]:
    """A query's hits as the terminal shows them; `short`: why there are fewer than k
    (Searcher.shortfall), said after them (or, with none, instead of the plain "none")."""
    lines = []
    if passages and passages[0].added is not None:
        new = passages[0].added
        lines.append("    feedback added: " + (", ".join(f"{t} {w:.3f}" for t, w in new[:8]) if new else "nothing")
                     + (f" … and {len(new) - 8} more" if len(new) > 8 else ""))
    if not passages:
        lines.append(nothing_found(terms) if not terms or not short else f"    ({short})")
    for p in passages:
        lines.append(f"  {p.rank:>2}. {p.score:7.3f}  {p.citation}")
        lines += textwrap.wrap(snippet(p.text, terms, analyzer, mark=mark), 100,
                               initial_indent=" " * 13, subsequent_indent=" " * 13)
        if p.link:
            lines.append(" " * 13 + f"↗ {p.link}")
        for a in p.also:  # the same passage elsewhere, collapsed onto this hit (pipekit/retrieve/repeats.py)
            lines.append(" " * 13 + f"also in {a['citation']}" + (f"  ↗ {a['link']}" if a["link"] else ""))
        if p.fusion is not None:
            from pipekit.retrieve.fusion import fusion_line  # (loads the dense machinery: only when fused)

            lines.append(fusion_line(p.fusion, 13))
        for e in p.explain or []:
            # As stage 05 prints it: qtf, and with feedback the weight (0 qtf: feedback added it).
            weight = f" w={e['weight']:.3f}" if e["weight"] != e["qtf"] else ""
            lines.append(f"             {e['term']:<14} qtf={e['qtf']}{weight} tf={e['tf']:<3} df={e['df']:<6} "
                         f"idf={e['idf']:.3f} norm={e['norm']:.3f} → {e['contribution']:.3f}")
    if passages and short:
        lines.append(f"    ({short})")
    return lines


def _marked(tokens: list[str], terms: set[str], analyzer) -> np.ndarray:
    """Whether each whitespace token of a passage has an analysed term among `terms`.

    In plain Python, token by token by the analyzer's one-text rule (`Analyzer.analyze`),
    when the query is ASCII (its terms are) and each token can be put in ASCII with the same
    chance of a match (`_in_ascii`); by the analyzer's Arrow column path otherwise."""
    hit = np.zeros(len(tokens), dtype=bool)
    if not terms:
        return hit
    plain = [_in_ascii(t) for t in tokens] if all(t.isascii() for t in terms) else [None]
    if None not in plain:
        seen: dict[str, bool] = {}
        for i, t in enumerate(plain):
            if t not in seen:
                seen[t] = any(w in terms for w in analyzer.analyze(t))
            hit[i] = seen[t]
        return hit
    import pyarrow as pa
    import pyarrow.compute as pc

    flat, parent = analyzer.tokens(tokens)
    if len(flat):
        found = np.asarray(pc.is_in(flat, value_set=pa.array(sorted(terms), pa.string())), dtype=bool)
        hit[parent[found]] = True
    return hit


def _in_ascii(token: str) -> str | None:
    """An ASCII text whose terms, among ASCII terms, are the token's (None: no such text).

    The analyzer cuts runs of letters and digits (Unicode's L and N classes) and lower-cases
    them.  A character of neither class separates runs, as a space does.  A run holding a
    letter or digit outside ASCII gives a term outside ASCII (Snowball's English suffixes
    are ASCII, so the stem keeps that character), which no ASCII term equals: the run goes
    like a separator — unless lower-casing makes it ASCII (the Kelvin sign K is k), which
    only the Arrow path decides."""
    if token.isascii():
        return token
    out: list[str] = []
    run: list[str] = []

    def end_run() -> bool:
        if run:
            word = "".join(run)
            if word.isascii():
                out.append(word)
            elif word.lower().isascii():
                return False
            run.clear()
        out.append(" ")
        return True

    for c in token:
        if (c.isascii() and c.isalnum()) or (not c.isascii() and unicodedata.category(c)[0] in "LN"):
            run.append(c)
        elif not end_run():
            return None
    return "".join(out) if end_run() else None


def shortfall_line(n: int, k: int, passages: int, documents: int, filtered: bool, keeps: str) -> str | None:
    """Why a search gave n hits where k were asked (None: it gave k), given what the index or
    its filter holds: `passages` and `documents`, and what the filters are called (`keeps`:
    "--in keeps").  Searcher.shortfall's words, said the same by `search`'s fast path."""
    if n >= k:
        return None
    docs = f"{documents:,} document{'s' * (documents != 1)}"
    if n == passages:  # every passage there is to return
        return (f"{n} of {k}: the index holds {n} passage{'s' * (n != 1)}" if not filtered else
                f"{n} of {k}: {keeps} {n} passage{'s' * (n != 1)}, of {docs}")
    scope = "" if not filtered else f" of the {docs} {keeps}"
    if n == 0:
        return f"no passage{scope} contains any of its terms"
    return (f"{n} of {k}: only {n} passage{'s' * (n != 1)}{scope} contain{'s' * (n == 1)} "
            f"a term of the query")


ALSO_COLUMNS = ("chunk_id", "doc_id", "heading", "page_start", "page_end", "page_label_start", "page_label_end")


def also_places(also: list, read: dict, link_base: str | None) -> list[list[dict]]:
    """For each hit the places its collapsed repeats are found, as a Passage names them.
    `also`: per hit, (rows, scores) of its repeats; `read`: column name -> rows -> values
    (Searcher's Arrow readers or the cold path's memory-mapped ones), every hit's rows read in
    one call per column."""
    from pipekit.retrieve.links import link as make_link

    if not any(len(a[0]) for a in also):
        return [[] for _ in also]
    rows = np.concatenate([a[0] for a in also]).astype(np.int64)
    scores = np.concatenate([a[1] for a in also]).tolist()
    cols = {n: read[n](rows) for n in ALSO_COLUMNS}
    fmt = read["format"](rows) if "format" in read else [None] * len(rows)
    anchor = read["anchor"](rows) if "anchor" in read else [None] * len(rows)
    places = []
    for i, score in enumerate(scores):
        pages = cite_pages(cols["page_start"][i], cols["page_end"][i], cols["page_label_start"][i],
                           cols["page_label_end"][i])
        heading = cols["heading"][i] or ""
        places.append({"chunk_id": cols["chunk_id"][i], "doc_id": cols["doc_id"][i], "heading": heading,
                       "page_start": cols["page_start"][i], "page_end": cols["page_end"][i], "score": score,
                       "citation": cols["doc_id"][i] + (f" › {heading}" if heading else "") + (f", {pages}" if pages else ""),
                       "link": make_link(cols["doc_id"][i], fmt[i], anchor[i], cols["page_start"][i], link_base)})
    out, at = [], 0
    for a in also:
        out.append(places[at:at + len(a[0])])
        at += len(a[0])
    return out


def terminal_mark():
    """How a query term is marked in printed results: bold and underlined on a terminal,
    **Markdown** bold in a pipe or a file."""
    import sys

    return (lambda w: f"\033[1;4m{w}\033[0m") if sys.stdout.isatty() else (lambda w: f"**{w}**")


def print_answer(text: str, hits: list, terms: set[str], analyzer, mark, short: str | None, as_json: bool) -> None:
    """One query's answer as `python -m pipekit search` prints it (the full path and the cold
    one alike): with --json one object a line and nothing else on stdout (a note goes to
    stderr); otherwise the query, then its cited, marked results."""
    import json
    import sys

    if as_json:
        for h in hits:
            print(json.dumps(h.to_json(), ensure_ascii=False))
        sys.stdout.flush()
        if short:
            print(f"python -m pipekit search: note: {text!r}: {short}", file=sys.stderr, flush=True)
        return
    print(f"\n{text}")
    print("\n".join(result_lines(hits, terms, analyzer, mark, short)), flush=True)
