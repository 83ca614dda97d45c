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
heading trail's last part, as words in lower case) whose analysed terms (the index's own
analyzer, over the chunk's text) are, as sets, at least `SIMILAR` alike by Jaccard,
|A ∩ B| / |A ∪ B|.  Sets, not counts: a Sphinx page and its `.rst` source say the same
words, the source some of them more often (role and directive names), and the HTML loses
or gains a link's address.  Measured on Node's docs and SQLAlchemy's sdist (python
bench/duplicates.py --pairs; bench/README.md), over every cross-document pair among 14
questions' top 20: of the same-titled pairs, the copies came out at 0.82-1.0 and the rest
(a section cut apart differently in its two forms, continuation chunks) at 0.75 or less;
0.8 sits between.  The title is needed: templated API sections differ in a name or two
and nothing else (Node's `Class: Hash` against `Class: Hmac` 0.86, the callback and promise
`createInterface` 0.92), and a reader would call them different passages, as their titles
do.  Within one document two alike chunks are two places of one page (a table row, a
repeated note), which the reader already has before them: they are not collapsed.

Cost: each chunk is analysed once, when it first comes up in a ranking (kept, up to
`KEEP` chunks, so a Searcher serving a query log analyses a popular passage once); a
candidate is compared with the hits already kept (at most k, by bisection, only those of the
same title whose sizes allow the threshold), never with the corpus.  Ranks beyond the
first k are looked at only as far as collapses need them.  Stage 05 reads the texts of all
its queries' first hits in one pass (`collapse_answers`), not a row group per query.
Node's docs, where most hits have a copy: a Searcher's search 1.3 -> 2.0 ms, warm.

Why at query time, from the texts: the index holds postings by term, and a chunk's terms
by chunk would be a second copy of them (a stable sort of 36M postings took 26 s here), or
stage 04 would write a sketch per chunk (MinHash) and compare estimates.  One query's
candidates are the only pairs anyone sees, and a few dozen texts analysed per query are
cheap; a stage-05 run on a cluster does the same on its client.

Not done: repeats inside one document; choosing which copy to show (the best-scored is
kept, which on Node's docs is all.html's as often as not: their scores differ only by the
path and section terms).
"""
from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

from pipekit.chunk.headings import TRAIL_SEPARATOR

SIMILAR = 0.8  # Jaccard of the analysed term sets from which a chunk repeats a higher hit
KEEP = 500_000  # chunks whose term sets are kept (a few KB each at most); past it, forgotten and redone
BLOCK = 8  # candidates analysed at a time beyond the first k (their texts read in one call)
PREFETCH = 2048  # queries whose first hits' texts stage 05 reads in one call
_WORD = re.compile(r"\w+")


class Repeats:
    """Which chunks of a ranking repeat a higher one.

    `analyzer` and `term_ids` are the index's (a word's term id, -1 for none); `texts_of(rows)`
    gives chunks' texts (a Searcher's kept texts, or stage 05's reads of 03_chunks.parquet);
    `doc_codes` each chunk's document as a small integer (stage 05's Index)."""

    def __init__(self, analyzer, term_ids, texts_of, doc_codes: np.ndarray, headings: pa.Array,
                 similar: float = SIMILAR):
        self.analyzer, self.term_ids, self.texts_of = analyzer, term_ids, texts_of
        self.doc_codes, self.headings = doc_codes, headings
        self.similar = similar
        self._sets: dict[int, np.ndarray] = {}
        self._titles: dict[int, str] = {}

    def titles(self, chunks) -> list[str]:
        """Each chunk's own section title (its heading trail's last part), as words in lower case."""
        chunks = [int(c) for c in chunks]
        need = sorted({c for c in chunks if c not in self._titles})
        if need:
            if len(self._titles) + len(need) > KEEP:
                self._titles.clear()
            for c, h in zip(need, self.headings.take(pa.array(need, pa.int64())).to_pylist()):
                self._titles[c] = " ".join(_WORD.findall((h or "").rpartition(TRAIL_SEPARATOR)[2].lower()))
        return [self._titles[c] for c in chunks]

    def term_sets(self, chunks) -> list[np.ndarray]:
        """Each chunk's distinct term ids (sorted), analysed once and kept."""
        chunks = [int(c) for c in chunks]
        need = sorted({c for c in chunks if c not in self._sets})
        if need:
            if len(self._sets) + len(need) > KEEP:
                self._sets.clear()
            texts = self.texts_of(np.asarray(need, dtype=np.int64))
            flat, parent = self.analyzer.tokens(list(texts))
            ids = self.term_ids(flat) if len(flat) else np.zeros(0, np.int64)
            known = ids >= 0
            ids, parent = ids[known], parent[known]
            # One sort gives every chunk its distinct terms: by chunk, then term.
            width = int(ids.max()) + 1 if len(ids) else 1
            key = np.unique(parent.astype(np.int64) * width + ids)
            owner, term = key // width, key % width
            bounds = np.searchsorted(owner, np.arange(len(need) + 1))
            for i, c in enumerate(need):
                self._sets[c] = term[bounds[i]:bounds[i + 1]]
        return [self._sets[c] for c in chunks]

    def alike(self, a: np.ndarray, b: np.ndarray) -> bool:
        """Jaccard(a, b) >= similar, for sorted distinct term ids."""
        small, large = (a, b) if len(a) <= len(b) else (b, a)
        # |A ∩ B| <= |small| and |A ∪ B| >= |large|: sizes this far apart cannot reach it.
        if len(small) == 0 or len(small) < self.similar * len(large):
            return False
        # Both sorted: each of small's terms looked up in large by bisection (np.isin's
        # sorting and set-up cost ~10x more on a few hundred terms; this runs per pair).
        at = np.searchsorted(large, small)
        at[at == len(large)] = 0
        inter = int(np.count_nonzero(large[at] == small))
        return inter >= self.similar * (len(a) + len(b) - inter)

    def collapse(self, chunks: np.ndarray, k: int) -> tuple[np.ndarray, list[list[int]]]:
        """Walk a ranking (`chunks`, best first) until k hits are kept (or it ends): the
        positions kept, and for each the positions of its repeats, in rank order."""
        kept: list[int] = []
        sets: list[np.ndarray] = []
        keys: list[tuple[int, str]] = []
        also: list[list[int]] = []
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
                j = next((j for j in range(len(kept))
                          if keys[j][0] != d and keys[j][1] == t and self.alike(sets[j], s)), -1)
                if j >= 0:
                    also[j].append(i)
                else:
                    kept.append(i)
                    sets.append(s)
                    keys.append((d, t))
                    also.append([])
            at = stop
        return np.asarray(kept, dtype=np.int64), also


NONE = (np.zeros(0, np.int64), np.zeros(0, np.float64))  # a hit with no repeats named


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
            firsts = np.unique(np.concatenate([b[0][:k + BLOCK] for b in answers[i:i + step]]))
            repeats.term_sets(firsts)
            repeats.titles(firsts)
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
