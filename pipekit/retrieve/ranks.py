"""Order statistics over scored chunks, for stage 05: which chunks and documents are best.

A document scores its best chunk, and a document's chunks are consecutive in corpus
order, so "the n-th best document" and "the documents of the depth best chunks" come
from runs of equal document codes (or, when every chunk is its own document, from the
scores alone: `own_documents`).  Ties are settled by corpus order, never by chance.  Stage 05's
pruned scorer uses `nth_best_document` for its floor, computed from each term's best
postings (`TopPostings`, found once per term and kept); `rank` turns a query's scored
chunks into its results.  Plain NumPy; nothing here reads or writes.

These run a few times per query, on a few hundred numbers, so what they cost is mostly
NumPy calls: each shortcut here (no hashing np.unique, no runs when documents are single
chunks, seeds kept) is a call or several saved per query, not a faster loop.
"""
from __future__ import annotations

import threading

import numpy as np

from pipekit.run.arrays import run_starts
from pipekit.run.lazy import lazy

pa, pc = lazy("pyarrow"), lazy("pyarrow.compute")  # only `common_term_rows` needs Arrow: `search` starts without it


def masked(mask: np.ndarray, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each array where mask is True (`a[mask]` for each).  The positions are found once and
    taken from each: boolean indexing copies element by element on a branch that a mask
    like "score >= floor" can make unpredictable: on random masks of 20,000-100,000 keeping
    a fifth to a half it was 3-8x slower (here, both about the same on a mask keeping
    nearly all; stage 05's pruned scorer filters its candidates this way several times a query)."""
    at = np.flatnonzero(mask)
    return tuple(a.take(at) for a in arrays)


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """np.unique of an integer array, by sorting: NumPy 2's np.unique hashes first, which
    costs several times more on the few hundred chunk ids of a query."""
    values = np.sort(values)
    return values[run_starts(values)]


class TopPostings:
    """Each term's `want` highest-impact chunks (sorted), from every n-th posting when its
    list is longer than `sample`: the seeds of stage 05's floor.  They depend on the term
    alone, and a Zipfian query log asks for the same terms again and again, so each is
    found once per index and kept (a few hundred ints a term; past `limit` terms, as a
    Searcher serving for days might reach, all are forgotten and found again as asked).
    Threads share it: finding one twice is harmless."""

    limit = 50_000  # terms kept: at most 40 MB of seeds

    def __init__(self, postings_of):
        # (t, 0.0, sample) -> (chunks, impacts) as the index holds them, every n-th of a list longer
        # than `sample` (only those weighed: stage 05 computes each impact, pipekit/retrieve/bm25.py)
        self.postings_of = postings_of
        self.kept: dict[tuple[int, int, int], np.ndarray] = {}
        self.lock = threading.Lock()

    def __call__(self, t: int, want: int, sample: int) -> np.ndarray:
        got = self.kept.get((t, want, sample))
        if got is None:
            ch, imp = self.postings_of(t, 0.0, sample)
            if len(ch) > want:
                ch = ch[np.argpartition(imp, len(imp) - want)[len(imp) - want:]]
            got = np.sort(ch)
            with self.lock:
                if len(self.kept) >= self.limit:
                    self.kept.clear()
                self.kept[(t, want, sample)] = got
        return got


def own_documents(doc_codes: np.ndarray) -> bool:
    """True when every chunk is a document of its own (a BEIR corpus of short records).
    The codes number documents in order of first appearance, so the last is the number
    of documents less one: the corpus's length less one exactly when no two chunks share one.
    Then a chunk's score is its document's and the steps below need no runs."""
    return len(doc_codes) == 0 or int(doc_codes[-1]) == len(doc_codes) - 1


def document_codes(doc_id: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Each chunk's document as a number, in order of first appearance, and each number's
    doc_id: what `pc.dictionary_encode` gives, found from runs instead.  A document's chunks
    are consecutive in corpus order (stage 03 writes them so; `nth_best_document` relies on
    it too), so a document starts where doc_id differs from the chunk before: one comparison
    of neighbours, 6 ms at 1M chunks, where hashing the million ids took 0.29-0.34 s of stage
    05's load (bench/README.md, issue 47)."""
    n = len(doc_id)
    new = np.ones(n, dtype=bool)
    if n > 1:
        new[1:] = np.asarray(pc.not_equal(doc_id.slice(1), doc_id.slice(0, n - 1)))
    if new.all():  # every chunk a document of its own (BEIR records): the names are doc_id itself, not a copy
        return doc_id, np.arange(n, dtype=np.int64)  # (10 MB at 1M passages, held through stage 05's queries)
    return doc_id.take(pa.array(np.flatnonzero(new))), np.cumsum(new) - 1


def nth_best_document(cols: np.ndarray, vals: np.ndarray, doc_codes: np.ndarray, n: int) -> float:
    """The n-th best document's score among chunks `cols` (in corpus order), 0 if fewer."""
    if len(vals) < n:
        return 0.0
    if own_documents(doc_codes):
        return float(nth_largest(vals, n))
    docs = doc_codes[cols]
    # A document's chunks are consecutive in corpus order: its best is a max over one run.
    starts = np.flatnonzero(run_starts(docs))
    best = np.maximum.reduceat(vals, starts) if len(starts) < len(vals) else vals
    return float(nth_largest(best, n)) if len(best) >= n else 0.0


BINCOUNT_SHARE = 16  # lists adding up to over 1/16 of the chunks are summed into an array over all chunks
# (merging sorted lists costs ~12 ns a posting, the array ~0.3 ns a chunk: it wins from ~1/30;
# stage 05, the Searcher's one query and the cold search choose by it, the same bits either way)
BLOCKS_PAY = 20  # values per wanted one from which nth_largest narrows them first


def nth_largest(vals: np.ndarray, n: int) -> float:
    """The n-th largest of vals (1 <= n <= len(vals)), exactly np.partition's.

    Among many values (a Searcher's query matching half of 12,000 chunks, depth 100) the
    partition cost ~50 µs, a tenth of a search (bench/search_speed.py).  Cut the values into n
    blocks: the smallest block maximum is <= n of the values, so <= the n-th largest, and the
    values below it can go before partitioning (~500 of 5,500 remain)."""
    if len(vals) >= BLOCKS_PAY * n:
        per = len(vals) // n
        vals = vals[vals >= vals[:per * n].reshape(n, per).max(axis=1).min()]
    return np.partition(vals, len(vals) - n)[len(vals) - n]


def rank(cols: np.ndarray, vals: np.ndarray, doc_codes: np.ndarray, k: int, depth: int):
    """Positions of the k best chunks (score desc, then corpus order), and the documents of
    the `depth` best chunks with their scores (a document scores its best chunk), best
    first.  `doc_codes` number the documents in order of first appearance (as stage 05's
    Index does).  k may pass depth: stage 05 then ranks chunks past the depth-th for
    pipekit/retrieve/repeats.py to fill the places of collapsed repeats, while the documents
    (the metrics') stay those of the depth best.

    Why the documents of the best `depth` chunks, not the best `depth` documents: the
    metrics are computed from these documents, and they must be what 05_results.parquet
    gives (issue 37).  With top_k = depth = 100 the file holds 100 chunks, which may be
    98 documents; the 100 best documents reached two more, whose best chunks ranked past
    the file's last row, and with WordLlama fused in (whose cosine brings ~200 candidates)
    R@100 was published 0.9861 where the file gave 0.9585."""
    own = own_documents(doc_codes)
    pick, reach = np.arange(len(vals)), max(k, depth)
    if len(pick) > reach:
        # partition finds the reach-th best without sorting the rest; every chunk tied with
        # it stays in, so that corpus order, not chance, settles the tie.
        cut = nth_largest(vals, reach)
        pick = np.flatnonzero(vals >= cut)
    order = pick[np.lexsort((cols[pick], -vals[pick]))][:reach]
    docs = doc_codes[cols[order[:depth]]]
    # Each document's best chunk: its first place in `order` (np.unique(return_index=True)
    # does the same stable sort, with more calls around it; this runs once per query).
    if own:
        first = np.arange(len(docs))
    else:
        by_doc = np.argsort(docs, kind="stable")
        first = np.sort(by_doc[run_starts(docs[by_doc])])
    return order[:k], docs[first], vals[order[first]]


def common_term_rows(df: np.ndarray, n: int, postings_of, share: int, most: int, zeros=np.zeros,
                     coded: dict | None = None) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """The ids of the terms in over 1/`share` of the `n` chunks (at most `most`, commonest
    first), and for each a row over every chunk that gives its impact there (0 where absent),
    as (codes, values): the impact in chunk c is `values[codes[c]]`, `values[0]` = 0.

    Such a term is looked up by nearly every query that has it, in a list too long to search
    cheaply: a row over all chunks makes each lookup a plain index.  Built once with the
    index, because building one costs as much as a hundred lookups, and the same rows serve
    every query.  `postings_of(t)`: term t's (chunks, impacts).  `coded`: {term: row} of terms
    coded already (the commonest, held only as rows: stage 05), first, and counted in `most`.

    Why codes, not the impacts themselves: a term's impact depends only on its count in the
    chunk and the chunk's length, so a common term has few distinct impacts (at most 945 on
    the 1M-passage bench corpus, whose 76 rows held 608 MB as float64, the largest part of
    stage 05's peak).  A row of uint16 codes (uint8 when 255 do) is a quarter of that or
    less, and `values` holds the term's impacts exactly as stored: a lookup gives the same
    bits, so scores do not change."""
    coded = coded or {}
    common = commonest(df, n, share, max(most - len(coded), 0))
    rows: list = [None] * len(common)

    def row(i: int) -> None:
        rows[i] = coded_row(*postings_of(common[i]), n, zeros)

    from concurrent.futures import ThreadPoolExecutor  # (both here: `search` starts without them,
    from pipekit.run.io import cores                    # pipekit/retrieve/cold.py; io loads Arrow's Parquet reader)

    # A row is mostly page faults, hashing and a scatter, all outside the GIL: one per core.
    with ThreadPoolExecutor(cores()) as pool:
        list(pool.map(row, range(len(common))))
    return np.concatenate([np.fromiter(coded, np.int64, len(coded)), common]).astype(np.int64), list(coded.values()) + rows


def commonest(df: np.ndarray, n: int, share: int, most: int) -> np.ndarray:
    """The ids of the terms in over 1/`share` of the `n` chunks, at most `most`, commonest first."""
    common = np.flatnonzero(df * share > n)
    return common[np.argsort(-df[common], kind="stable")[:most]]


ROW_BLOCK = 1 << 16  # chunks of a coded row added to the sums at a time (`summed`)


def summed(n: int, parts: list) -> np.ndarray:
    """Each of `n` chunks' sum of the parts' impacts, added part by part in the order given:
    a part is a term's postings (chunks, impacts), or (None, (codes, values)) for a term held
    only as its coded row.  The postings before the first row are one bincount (which adds in
    the order of its input); each later part is added to the sums as it comes, so every chunk
    gets ((0 + a) + b) + c, the bits of one bincount over all the postings: a row adds 0.0
    where its term is absent, which changes no sum."""
    # (a plain loop and one zip, not a generator and two comprehensions, each a frame of its own:
    # with the short way's 0.0 below, ~2 µs of a Searcher's docs question, bench/README.md "warm6")
    lead = len(parts)
    for i, p in enumerate(parts):
        if p[0] is None:
            lead = i
            break
    if lead:
        chunks, impacts = zip(*parts[:lead]) if lead < len(parts) else zip(*parts)
        # (the chunks joined as NumPy's index type: bincount copies int32 ones to it first, so
        # this is one copy, not two: ~1 µs of a Searcher's docs question, and less memory at once)
        # (one part already so, as stage 05 gathers them: used as it is, bm25.gathered)
        one = len(chunks) == 1 and chunks[0].dtype == np.intp
        dense = np.bincount(chunks[0] if one else np.concatenate(chunks, dtype=np.intp),
                            weights=impacts[0] if one else np.concatenate(impacts), minlength=n)
        if dense.dtype != np.float64:  # (no postings at all: bincount gives int64 zeros, which a row cannot add to)
            dense = dense.astype(np.float64)
    else:
        dense = np.zeros(n)
    added(dense, parts[lead:])
    return dense


def added(dense: np.ndarray, parts: list) -> None:
    """`summed`'s parts added to the sums in place, one after another in the order given: a
    coded row to every chunk (`_add_row`), a term's postings with `np.add.at`, which adds one
    posting after another as bincount does (each chunk once: a term's chunks are distinct) and,
    in NumPy 2, in about half the time of `dense[ch] += imp` (200k postings over 1M chunks:
    0.98 ms against 1.76)."""
    for ch, imp in parts:
        if ch is None:
            _add_row(dense, imp)
        else:
            np.add.at(dense, ch, imp)


def _add_row(dense: np.ndarray, row: tuple) -> None:
    """A coded row's weights (codes, values) added to every chunk's sum, in place."""
    n = len(dense)
    if n <= ROW_BLOCK:  # (a Searcher's folder: one pass, no loop)
        dense += row[1].take(row[0])
        return
    for a in range(0, n, ROW_BLOCK):  # (a block at a time: a row's n weights at once were 8 MB a query at 1M passages)
        dense[a:a + ROW_BLOCK] += row[1].take(row[0][a:a + ROW_BLOCK])


class KeptSums:
    """`summed`'s sums, into an array over the `n` chunks that each thread keeps and zeroes again
    (with a mask beside it), and only the chunks that scored handed back: stage 05's query phase.

    `summed` makes an n-sized array a query (8 MB at 1M passages), and for its one bincount the
    postings' chunks and weights joined (16 bytes a posting); on two query threads and glibc's heap,
    which stage 05 keeps from its queries on (malloc.keep_freed_memory), the phase grew the process
    by 40-120 MB over its loaded index, the stage's peak (bench/README.md, branch p05).  Here each
    term's postings are added where they lie (`added`, as `summed` adds its later parts), one
    posting after another in the order given, as bincount does: every chunk gets
    ((0 + a) + b) + c, the same bits (tests/test_05_memory.py).  NumPy 2's add.at also took a third of the join and the bincount's
    time (4 terms of 200k postings over 1M chunks: 2.7 ms against 7.2)."""

    def __init__(self, n: int):
        self.n = n
        self._mine = threading.local()

    def __call__(self, parts: list, at_least: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """The chunks (ascending, int64) whose sum of the parts is nonzero (>= at_least, when that
        is > 0) and those sums; parts as `summed`'s, a term's (chunks, weights) or (None, row)."""
        mine = self._mine.__dict__
        if "dense" not in mine:
            mine["dense"], mine["mask"] = np.zeros(self.n), np.empty(self.n, dtype=bool)
        dense, mask = mine["dense"], mine["mask"]
        try:
            added(dense, parts)
            # (`dense != 0` into the kept mask, not `dense`: nonzero over floats took 4x as long as over bools)
            keep = np.greater_equal(dense, at_least, out=mask) if at_least > 0 else np.not_equal(dense, 0, out=mask)
            cols = keep.nonzero()[0]
            return cols, dense.take(cols)
        finally:
            dense.fill(0.0)  # (all of it: 0.3 ms at 1M chunks, less than putting 0 at the chunks scored)


def coded_row(ch: np.ndarray, imp: np.ndarray, n: int, zeros=np.zeros) -> tuple[np.ndarray, np.ndarray]:
    """One term's row over `n` chunks from its postings (chunks `ch`, impacts `imp`), as
    `common_term_rows` describes: (codes, values), values[0] = 0 for the chunks without it."""
    # Equal impacts get one code (Arrow hashes them; equal positive floats are equal bits).
    coded = pc.dictionary_encode(pa.array(imp, pa.float64()))
    values = np.concatenate([np.zeros(1), coded.dictionary.to_numpy()])
    codes = zeros((n,), dtype=code_dtype(len(values)))
    codes[ch] = np.asarray(coded.indices) + 1  # 0: the term is absent
    return codes, values


def row_postings(row: tuple[np.ndarray, np.ndarray], dtype=np.int32,
                 at_least: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """A coded row's postings as the index would hold them: the chunks the term is in (in
    corpus order, as `dtype`) and its impact in each, the same bits; with `at_least` > 0 only
    those whose impact is >= it (a pass over the row's codes, not over its postings)."""
    codes, values = row
    ch = np.flatnonzero(codes if at_least <= 0 else (values >= at_least).take(codes)).astype(dtype, copy=False)
    return ch, values.take(codes.take(ch))


def code_dtype(values: int) -> type:
    """The narrowest unsigned integer that numbers `values` distinct values."""
    return np.uint8 if values <= 1 << 8 else np.uint16 if values <= 1 << 16 else np.uint32


def row_lookup(row: tuple[np.ndarray, np.ndarray], chunks: np.ndarray) -> np.ndarray:
    """A common term's impacts (float64, 0 where absent) in `chunks`, from its
    `common_term_rows` row: a gather of codes, then of the few values they name."""
    codes, values = row
    return values.take(codes.take(chunks))
