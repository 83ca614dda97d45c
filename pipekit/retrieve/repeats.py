"""Repeated passages once in a ranking (`retrieval.repeats: collapse`, the default).

Documentation folders hold the same text more than once: Node's `all.html` repeats every
module page, a Sphinx sdist ships each page's `.rst` source beside its HTML build, a
release keeps last year's guide beside this year's.  Byte-identical files are skipped by
stage 01; copies that differ in a byte, or pages that hold other pages, are not, and their
passages score alike, so one passage took two or three of the top 3 places (issue 48: 5 of
15 questions on a real folder).  Here a ranking keeps the first (best) of them and names
the others on it (`also`: the places a reader could cite instead), and fills the freed
places from further down, so a query still gets k distinct passages when there are that many.

What counts as a repeat: a chunk of *another document* with the same own section title (its
heading trail's last part, as words in lower case) whose words (letter and digit runs,
lower-cased, of the text a reader sees: a link's text, not its address) are, as sets, at
least `SIMILAR` alike by Jaccard, |A ∩ B| / |A ∪ B|.  Sets, not counts or sequences: a
Sphinx page and its `.rst` source say the same words, the source some of them more often
(role and directive names) and the build a few more (a version note, a rendered
cross-reference).  Plain words, not the index's terms: the analyzer's Arrow kernels and
term lookups cost ~12 ms per 18 passages here, a regular expression ~2 ms, and stemming
only makes alike what is already nearly so.  Measured on Node's docs and SQLAlchemy's
sdist (python bench/duplicates.py --pairs; bench/README.md), over the 1,936
cross-document pairs among 14 questions' top 20: the same-titled pairs that are copies
came out at 0.80-1.0, the others (a section cut apart differently in its two forms,
continuation chunks) at 0.75 or less; 0.8 is the edge of the copies.  The title is
needed: templated API sections differ in a name or two and nothing else (Node's
`Class: Hash` against `Class: Hmac`, 0.90), and a reader calls them different passages,
as their titles do.  Within one document two alike chunks are two places of one page (a
table row, a repeated note), which the reader already has before them: they stay.

Cost: each chunk's words are found once, when it first comes up in a ranking (kept, up to
`KEEP` chunks, so a Searcher serving a query log reads a popular passage once); a
candidate is compared with the hits already kept (at most k; a set intersection, only for
those of the same title whose sizes allow the threshold), never with the corpus.  Ranks
beyond the first k are looked at only as far as collapses need them.  Stage 05 reads the
texts of its queries' first hits in one pass (`collapse_answers`), not a row group per
query.  A Searcher's search, median (python bench/duplicates.py --speed): 0.64 -> 0.94 ms
on Node's and SQLAlchemy's docs, where most hits have a copy, 0.36 -> 0.46 ms on Cranfield.

Why at query time, from the texts: the index holds postings by term, and a chunk's terms
by chunk would be a second copy of them (a stable sort of 36M postings took 26 s here), or
stage 04 would write a sketch per chunk (MinHash) and compare estimates, which miss both
ways near the threshold.  One query's candidates are the only pairs anyone sees, and a few
dozen texts per query are cheap; a stage-05 run on a cluster does the same on its client
(there a query whose collapses use up its ranking, more repeats than `depth` chunks, stays
short: the local engine ranks it deeper).

Not done: repeats inside one document; choosing which copy to show (the best-scored is
kept: on Node's docs that was all.html's in all 7 questions, their scores differing only by
the path's and the section's terms).
"""
from __future__ import annotations

import re

import numpy as np

from pipekit.run.lazy import lazy
from pipekit.chunk.headings import TRAIL_SEPARATOR
from pipekit.index.link_text import link_text
from pipekit.read.pages import passage_text
from pipekit.retrieve.ranks import sorted_unique
from pipekit.run.arrays import one_array

pa, pc = lazy("pyarrow"), lazy("pyarrow.compute")  # imported on first use: `search` starts without Arrow (pipekit/run/lazy.py)

SIMILAR = 0.8  # Jaccard of the word sets from which a same-titled chunk repeats a higher hit
KEEP = 500_000  # chunks whose word sets are kept (a few KB each at most); past it, forgotten and redone
BLOCK = 8  # candidates looked at a time beyond the first k (their texts read in one call)
PREFETCH = 2048  # queries whose first hits' texts stage 05 reads in one call
_WORD = re.compile(r"\w+")


class Repeats:
    """Which chunks of a ranking repeat a higher one.

    `texts_of(rows)` gives chunks' texts (a Searcher's kept texts, or stage 05's reads of
    03_chunks.parquet); `doc_codes` each chunk's document as a small integer (stage 05's
    Index); `headings_of(rows)` their heading trails (04_chunks' `heading`; both take an
    int64 array of rows and give a list, so that `search`'s memory-mapped index,
    pipekit/retrieve/cold.py, answers through this class as a Searcher does)."""

    def __init__(self, texts_of, doc_codes: np.ndarray, headings_of, similar: float = SIMILAR):
        self.texts_of = texts_of
        self.doc_codes, self.headings_of = doc_codes, headings_of
        self.similar = similar
        self._sets: dict[int, frozenset] = {}
        self._titles: dict[int, str] = {}

    def titles(self, chunks) -> list[str]:
        """Each chunk's own section title (its heading trail's last part), as words in lower case."""
        chunks = _ints(chunks)
        got = list(map(self._titles.get, chunks))  # (in C: two comprehensions were ~1 µs of a warm search's 4)
        if None in got:
            need = sorted({c for c, t in zip(chunks, got) if t is None})
            if len(self._titles) + len(need) > KEEP:
                self._titles.clear()
            for c, h in zip(need, self.headings_of(np.asarray(need, dtype=np.int64))):
                self._titles[c] = " ".join(_WORD.findall((h or "").rpartition(TRAIL_SEPARATOR)[2].lower()))
            got = [self._titles[c] for c in chunks]
        return got

    def term_sets(self, chunks) -> list[frozenset]:
        """Each chunk's distinct words (letter and digit runs, lower-cased, of the text a reader
        sees), found once and kept."""
        chunks = _ints(chunks)
        need = sorted({c for c in chunks if c not in self._sets})
        if need:
            if len(self._sets) + len(need) > KEEP:
                self._sets.clear()
            for c, text in zip(need, self.texts_of(np.asarray(need, dtype=np.int64))):
                # As a reader sees it (a link's text, not its address; no page-marker lines),
                # so an HTML build's `[name](api.html#name)` and its source's ``name`` agree.
                self._sets[c] = frozenset(_WORD.findall(link_text(passage_text(text or "")).lower()))
        return [self._sets[c] for c in chunks]

    def apart(self, chunks: np.ndarray) -> bool:
        """True when no own section title of these chunks is shared by two documents.  A
        repeat is a chunk of another document under the title of a hit kept before it, so
        then none of them repeats another, and `collapse` keeps them all, in order, without
        a word set read (pipekit/retrieve/warm.py tests one query the same way)."""
        titles = self.titles(chunks)
        if len(set(titles)) == len(titles):  # (no title said twice: most rankings, no documents read)
            return True
        return len(set(titles)) == len(set(zip(titles, self.doc_codes.take(np.asarray(chunks, np.int64)).tolist())))

    def alike(self, a: frozenset, b: frozenset) -> bool:
        """Jaccard(a, b) >= similar."""
        small, large = (a, b) if len(a) <= len(b) else (b, a)
        # |A ∩ B| <= |small| and |A ∪ B| >= |large|: sizes this far apart cannot reach it.
        if len(small) == 0 or len(small) < self.similar * len(large):
            return False
        inter = len(small & large)
        return inter >= self.similar * (len(a) + len(b) - inter)

    def collapse(self, chunks: np.ndarray, k: int) -> tuple[np.ndarray, list[list[int]]]:
        """Walk a ranking (`chunks`, best first) until k hits are kept (or it ends): the
        positions kept, and for each the positions of its repeats, in rank order."""
        if self.apart(chunks[:k]):  # none of the first k can repeat another: no word set is read
            return np.arange(min(k, len(chunks)), dtype=np.int64), [[] for _ in range(min(k, len(chunks)))]
        kept: list[int] = []
        sets: list[frozenset] = []
        docs: list[int] = []
        also: list[list[int]] = []
        # The kept hits of each title, in rank order: a candidate is compared with those alone
        # (scanning every kept hit for its title was a tenth of a Searcher's search).
        by_title: dict[str, list[int]] = {}
        n, at = len(chunks), 0
        codes = self.doc_codes[chunks] if n else np.zeros(0, np.int64)
        while len(kept) < k and at < n:
            # The first block is what a ranking without repeats needs; later ones a few more.
            stop = min(n, at + (k - len(kept)) + (BLOCK if at else 0))
            block = chunks[at:stop]
            for i, s, t in zip(range(at, stop), self.term_sets(block), self.titles(block)):
                if len(kept) == k:
                    break
                d = int(codes[i])
                j = next((j for j in by_title.get(t, ()) if docs[j] != d and self.alike(sets[j], s)), -1)
                if j >= 0:
                    also[j].append(i)
                else:
                    by_title.setdefault(t, []).append(len(kept))
                    kept.append(i)
                    sets.append(s)
                    docs.append(d)
                    also.append([])
            at = stop
        return np.asarray(kept, dtype=np.int64), also


def repeats_for(index, setting: str, texts_of, chunks=None) -> Repeats | None:
    """What finds repeated passages in a stage-05 Index's rankings (`retrieval.repeats:
    collapse`), or None (keep).  `texts_of(rows)`: the chunks' texts.  Their heading trails come
    from the index's `chunks` table, or with `chunks` (a path: 03_chunks, whose rows are the
    index's and its heading 04_chunks' own; or a function of the rows, stage 05's
    pipekit/retrieve/cited.py) from the file, for the rows a ranking asks alone
    (io.take_rows): stage 05 held 04_chunks' column whole to find the titles of ~10,000 hits,
    33 MB of Arrow strings at 1M passages, ~70 resident with its read's buffers, under its peak.
    03_chunks, not 04_chunks: its row groups are small (~3,000 rows, 04_chunks' 131,072 at 1M
    passages), and the 8 large groups' buffers, read on glibc's heap as the queries keep it
    (malloc.keep_freed_memory), grew the process by 46 MB (bench/README.md, branch p05)."""
    if setting != "collapse":
        return None
    codes = getattr(index, "doc_codes", None)  # (a cluster's client holds no postings, nor these)
    if codes is None:
        codes = np.asarray(pc.dictionary_encode(one_array(index.chunks.column("doc_id"))).indices, np.int64)
    if callable(chunks):
        return Repeats(texts_of, codes, chunks)
    if chunks is not None:
        from pipekit.run import io  # (here: a Searcher's `search` imports this module without Arrow)

        return Repeats(texts_of, codes, lambda rows: io.take_rows(chunks, "heading", rows))
    headings = one_array(index.chunks.column("heading"))  # (not a copy of the column: arrays.one_array)
    return Repeats(texts_of, codes, lambda rows: headings.take(pa.array(rows, pa.int64())).to_pylist())


NONE = (np.zeros(0, np.int64), np.zeros(0, np.float64))  # a hit with no repeats named


def _ints(chunks) -> list[int]:
    # (an array's tolist: int() of each of its items was ~1 µs a hit of a warm search's ten)
    return chunks.tolist() if isinstance(chunks, np.ndarray) else [int(c) for c in chunks]


def collapse_answers(repeats: Repeats | None, answers: list[tuple], k: int, reach: int, deeper=None,
                     depth: int | None = None, by_chunk: bool = False):
    """Each query's answer (ranked chunks, scores, documents, document scores; the chunks
    ranked `reach` deep, past k) cut to its k best distinct passages, and for each hit its
    repeats as (chunks, scores).  When the collapses use up a ranking that may go on (it
    is `reach` long), `deeper(i, reach)` ranks query i twice as deep, and so on (None: the
    answer stands short).  Without repeats (`retrieval.repeats: keep`): the first k as
    they are, none named.

    The documents (the run the metrics are computed from) are those of the `depth` best
    chunks, repeats included: a copy is a document of its own, judged on its own.  When
    the hits and their repeats reach past the depth-th chunk (top_k >= depth), they are
    those of every chunk the hits and repeats hold, so that 05_results.parquet's rows with
    their `also` give the metrics exactly (issue 37).  `by_chunk`: documents are named by
    one of their chunks (a cluster's client), not by their codes."""
    out, also = [], []
    step = max(1, min(PREFETCH, KEEP // (2 * (k + BLOCK))))  # (what one read brings stays kept)
    for i, a in enumerate(answers):
        if repeats is not None and i % step == 0:  # these queries' first hits: one read of their texts
            block = answers[i:i + step]
            # (sorted_unique, not np.unique: its first call imports numpy.ma, 10-30 ms of a one-shot search)
            repeats.titles(sorted_unique(np.concatenate([b[0][:k] for b in block])))
            # Texts only where a title of the first k is shared by two documents: elsewhere
            # nothing can collapse (`Repeats.apart`, which `collapse` asks first), and reading
            # and splitting the texts of every query's first hits was most of this function
            # (stage 05 at 200k passages: 0.9 s, for one query in 5,000 that had a shared
            # title; bench/README.md).
            wordy = [b[0][:k + BLOCK] for b in block if not repeats.apart(b[0][:k])]
            if wordy:
                repeats.term_sets(sorted_unique(np.concatenate(wordy)))
        if repeats is None:
            out.append((a[0][:k], a[1][:k], a[2], a[3]))
            also.append([NONE] * len(out[-1][0]))
            continue
        deep = reach
        kept, rep = repeats.collapse(a[0], k)
        while len(kept) < k and len(a[0]) >= deep and deeper is not None:
            deep *= 2
            a = deeper(i, deep)
            kept, rep = repeats.collapse(a[0], k)
        docs, doc_scores = a[2], a[3]
        walked = max([int(kept.max()) + 1 if len(kept) else 0] + [r[-1] + 1 for r in rep if r])
        if depth is not None and walked > depth:
            codes = repeats.doc_codes[a[0][:walked]]
            _, first = np.unique(codes, return_index=True)
            first.sort()  # each document at its best chunk's place
            docs, doc_scores = (a[0][first] if by_chunk else codes[first]), a[1][first]
        out.append((a[0][kept], a[1][kept], docs, doc_scores))
        also.append([(a[0][r], a[1][r]) if r else NONE for r in rep])
    return out, also
