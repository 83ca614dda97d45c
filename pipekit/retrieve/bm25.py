"""BM25's term weight, computed where it is used: stage 05, a Searcher, the cold copy (issue 47).

SPEC's score is a sum over the query's terms of one number per (term, chunk):

    weight(t, c) = idf(t) · tf·(k1+1) / (tf + norm(c)),   norm(c) = k1·(1 − b + b·|c|/avgdl)

Stage 04 used to compute it for every posting and store it (04_postings' `impact`, float64).
Lucene and tantivy store what the weight is made of instead (tf, and a length norm per
document) and compute it as they score, and so does pipekit now: stage 04 counts, stage 05
scores.  What that gave (bench/README.md, "Postings keep tf"):

- stage 04 writes no float64 a posting (04_postings at 1M passages: 386 -> 223 MB on disk);
- stage 05 holds a posting as one 2-byte code of its (tf, length) pair where it held an
  8-byte impact (`Weights`), and each term's weights are one gather from its table over the
  pairs (stage 05 alone at 1M: 632-639 -> 540-548 MB, the query phase's CPU within a few %);
- a rerun after one added file no longer rewrites every posting's weight (one new chunk
  moves avgdl, so it moved every stored impact).

The weight is this module's alone: every caller (stage 05's Index, its workers, the
Searcher's short way, the cold copy's writer, explain) computes it here, with the operations
stage 04 used, in its order — idf·tf, then ·(k1+1), then /(tf + norm) — elementwise IEEE
operations, so the same inputs give the same bits whether a term's weights are computed for
all its postings, a block of terms at once (idf gathered per posting), a few positions or
by a term's table (tests/test_bm25.py holds them to stage 04's old code, bit for bit).  Plain NumPy: the cold
search imports it without Arrow.
"""
from __future__ import annotations

import numpy as np

from pipekit.retrieve.ranks import masked

BLOCK = 1 << 20  # postings weighed or coded at a time when every term's are: 8 MB of float64
BOUND_BLOCK = 1 << 18  # ... for `largest`, at the index's load: its ~5 temporaries a block were 35 MB of stage 05's peak
PAIRS_MAX = 1 << 16  # (tf, length) pairs up to which a held posting is one uint16 code of both
TABLE_PAYS = 4  # postings weighed at once, per pair, from which a term's table of weights by code pays
TABLE_SMALL = 4096  # pairs up to which a term's table costs no more than weighing a few postings
TABLES_KEPT = 8 << 20  # bytes of terms' tables kept for the next query that asks them (then all forgotten)
PAIRS_SEEN = 1 << 25  # (held terms x pair codes) up to which `largest` marks the pairs met (a byte each) ...
# ... rather than weighing every held posting (a Searcher holds every term: there, posting by posting)


def chunk_norms(k1: float, b: float, avgdl: float, lengths: np.ndarray) -> np.ndarray:
    """Each chunk's length norm k1·(1 − b + b·|c|/avgdl), float64 (computed as stage 04
    computed it).  With no terms at all avgdl is 0 and there are no postings to weigh: zeros."""
    if avgdl > 0:
        return k1 * (1 - b + b * lengths / avgdl)
    return np.zeros(len(lengths))


def weights(idf, tf: np.ndarray, norm: np.ndarray, k1: float) -> np.ndarray:
    """SPEC's BM25 term weight of postings with these tf and chunk norms (`norm`: each
    posting's chunk's, a gathered copy, the caller's to lose: written over), for one term
    (`idf` a number) or per posting (`idf` an array)."""
    # Four passes: each product and the sum as a new array were six.  tf is converted to
    # float64 inside each ufunc, exactly, and x + y is y + x in IEEE arithmetic: the same bits.
    out = np.multiply(idf, tf, dtype=np.float64)
    out *= k1 + 1
    norm += tf
    out /= norm
    return out


def tf_dtype(largest: int | None) -> type:
    """The narrowest unsigned integer that holds every tf up to `largest` (None: not known)."""
    if largest is None or largest >= 1 << 16:
        return np.int32
    return np.uint8 if largest < 1 << 8 else np.uint16


class Weights:
    """An index's BM25 weights: its terms' idf, its chunks' norms (from their lengths and the
    corpus statistics stage 04 recorded: k1, b, avgdl), and the postings it holds (`hold`).

    A weight depends on the term and on the posting's (tf, chunk length) pair alone, and a
    corpus has few distinct pairs (21 counts x 65 lengths on the bench's 1M passages), so a
    held posting is one uint16 code of its pair (`codes`, when they number PAIRS_MAX or fewer),
    and a term's weights over many postings are its table over the pairs (each entry SPEC's
    formula on that tf and norm, `weights`) taken at their codes: one gather from a few KB, where
    the formula over each posting gathered its chunk's norm from 8 MB and made four passes.
    The same bits either way: the same operations on the same two numbers (tests/test_bm25.py)."""

    def __init__(self, idf: np.ndarray, stats: dict, lengths: np.ndarray, largest_tf: int | None = None):
        self.idf, self.k1 = idf, stats["k1"]
        self._tf_dtype = tf_dtype(largest_tf)
        k1, b, avgdl = stats["k1"], stats["b"], stats["avgdl"]
        self.norm = chunk_norms(k1, b, avgdl, lengths)
        self.chunk = self.tf = self.codes = self.klass = None
        self._tables: dict[int, np.ndarray] = {}  # term -> its weights by code, kept (`held`)
        if largest_tf is None or len(lengths) == 0:
            return
        seen = np.bincount(lengths) > 0  # the distinct lengths, numbered in order (lengths are small counts)
        values = np.flatnonzero(seen).astype(lengths.dtype)
        self.n_lengths = len(values)
        if (largest_tf + 1) * self.n_lengths > PAIRS_MAX:
            return  # too many pairs for a uint16 code: tf held, each posting weighed by the formula
        self.klass = (np.cumsum(seen) - 1).astype(np.uint16).take(lengths)  # each chunk's length's number
        # code = tf · n_lengths + the length's number; each code's tf and norm (as the chunk's, the same bits)
        self.pair_tf = np.repeat(np.arange(largest_tf + 1, dtype=np.int64), self.n_lengths)
        self.pair_norm = np.tile(chunk_norms(k1, b, avgdl, values), largest_tf + 1)

    @property
    def tf_dtype(self) -> type:
        """The dtype to read the postings' tf in for `hold`: the codes' own (uint16) when they
        are codes, so that `hold` turns the counts into codes where they lie."""
        return np.uint16 if self.klass is not None else self._tf_dtype

    def hold(self, chunk: np.ndarray, tf: np.ndarray) -> None:
        """The held postings (term-major runs, as stage 05's Index holds them): their chunks and
        tf, kept as codes of (tf, length) when there are few enough pairs.  A uint16 `tf` (read
        as `tf_dtype` says) becomes the codes in place, the caller's array: at 1M passages the
        17.4M asked postings' counts and their codes were 17 + 35 MB side by side, under stage
        05's peak."""
        self.chunk = chunk
        if self.klass is None:
            self.tf = tf
            return
        self.codes = tf if tf.dtype == np.uint16 else np.empty(len(tf), dtype=np.uint16)
        for a in range(0, len(tf), BLOCK):
            code = tf[a:a + BLOCK].astype(np.uint16, copy=self.codes is not tf)
            code *= np.uint16(self.n_lengths)
            code += self.klass.take(chunk[a:a + BLOCK])
            self.codes[a:a + BLOCK] = code

    def counts(self) -> np.ndarray:
        """Every held posting's tf."""
        return self.tf if self.codes is None else self.codes // np.uint16(self.n_lengths)

    def __call__(self, t: int, chunk: np.ndarray, tf: np.ndarray) -> np.ndarray:
        """Term t's weight in each of these postings (its chunks, and its tf in each)."""
        return weights(self.idf[t], tf, self.norm.take(chunk), self.k1)

    def held(self, t: int, at, out: np.ndarray | None = None) -> np.ndarray:
        """Term t's weight in held postings `at` (a slice or positions): by its table when they are
        many, else each by the formula (with codes: the pair's tf and norm, from a small table).
        `out`: a float64 array of their number to write them in (returned), rather than a new one."""
        if out is not None and (self.codes is None or t not in self._tables):
            out[:] = self.held(t, at)  # (the table made, or the formula: a new array, copied once)
            return out
        if self.codes is None:
            return self(t, self.chunk[at], self.tf[at])
        codes = self.codes[at]
        table = self._tables.get(t)
        if table is None and (len(codes) * TABLE_PAYS >= len(self.pair_tf) or len(self.pair_tf) <= TABLE_SMALL):
            table = self.table(t)
        if table is not None:
            return table.take(codes, out=out)
        return weights(self.idf[t], codes // np.uint16(self.n_lengths), self.pair_norm.take(codes), self.k1)

    def table(self, t: int) -> np.ndarray:
        """Term t's weight for each (tf, length) pair code (with codes held), made once and kept:
        a query log asks the same terms again and again (Zipf), and at 200k passages making a
        term's table at each query cost ~15 % of the query phase.  Threads share them: making
        one twice is harmless."""
        table = self._tables.get(t)
        if table is None:
            table = weights(self.idf[t], self.pair_tf, self.pair_norm.copy(), self.k1)
            if (len(self._tables) + 1) * table.nbytes > TABLES_KEPT:
                self._tables.clear()
            self._tables[t] = table
        return table

    def _block(self, terms: np.ndarray, lo: int, hi: int, indptr: np.ndarray) -> np.ndarray:
        """The weights of held postings [lo, hi), the runs of `terms` (ascending, whole)."""
        idf = self.idf.take(np.repeat(terms, np.diff(indptr)[terms]))
        if self.codes is None:
            return weights(idf, self.tf[lo:hi], self.norm.take(self.chunk[lo:hi]), self.k1)
        codes = self.codes[lo:hi]
        return weights(idf, codes // np.uint16(self.n_lengths), self.pair_norm.take(codes), self.k1)

    def _blocks(self, indptr: np.ndarray, block: int = BLOCK):
        """Runs of the terms with held postings, about `block` postings each, whole terms, with
        their weights: (terms, first posting, weights) (side by side: they follow in id order)."""
        held = np.flatnonzero(np.diff(indptr) > 0)
        starts, i = indptr[held], 0
        while i < len(held):
            j = max(int(np.searchsorted(starts, starts[i] + block, side="left")), i + 1)
            lo, hi = int(starts[i]), int(indptr[held[j - 1] + 1])
            yield held[i:j], lo, self._block(held[i:j], lo, hi, indptr)
            i = j

    def largest(self, indptr: np.ndarray, rows: dict) -> np.ndarray:
        """Each term's largest weight (0 for a term whose postings are not held): over its held
        postings, or for a term held only as a coded row (`rows`: term -> (codes, values)), its values."""
        out = np.zeros(len(indptr) - 1, dtype=np.float64)
        held = np.flatnonzero(np.diff(indptr) > 0)
        if self.codes is not None and len(held) * len(self.pair_tf) <= PAIRS_SEEN:
            self._largest_by_pairs(indptr, held, out)
        else:
            for terms, lo, w in self._blocks(indptr, BOUND_BLOCK):
                out[terms] = np.maximum.reduceat(w, indptr[terms] - lo)
        out[list(rows)] = [values.max() for _, values in rows.values()]
        return out

    def _largest_by_pairs(self, indptr: np.ndarray, held: np.ndarray, out: np.ndarray) -> None:
        """`largest` for held postings as pair codes: a term's weights are its table at its postings'
        codes, so its largest is its table's largest over the codes it has.  Each (term, code) met
        is marked once, and only those pairs are weighed (at 1M passages ~1 % of the weights the
        postings one by one were: 0.12-0.15 s of stage 05's load, in ~10 passes over float64 blocks).
        The same operations on the same two numbers as a posting's weight: the same bits."""
        pairs = len(self.pair_tf)
        seen = np.zeros(len(held) * pairs, dtype=bool)
        counts = indptr[held + 1] - indptr[held]
        i = 0
        while i < len(held):  # blocks of whole terms, ~BOUND_BLOCK postings each (their keys: int64)
            j = max(int(np.searchsorted(indptr[held], indptr[held[i]] + BOUND_BLOCK, side="left")), i + 1)
            lo, hi = int(indptr[held[i]]), int(indptr[held[j - 1] + 1])
            key = np.repeat(np.arange(i * pairs, j * pairs, pairs, dtype=np.int64), counts[i:j])
            key += self.codes[lo:hi]
            seen[key] = True
            i = j
        at = np.flatnonzero(seen)
        term, code = np.divmod(at, pairs)
        w = weights(self.idf[held].take(term), self.pair_tf.take(code), self.pair_norm.take(code), self.k1)
        out[held] = np.maximum.reduceat(w, np.searchsorted(term, np.arange(len(held))))

    def all(self, indptr: np.ndarray) -> np.ndarray:
        """Every held posting's weight, in the held order (the cold copy stores them)."""
        out = np.zeros(int(indptr[-1]), dtype=np.float64)
        for _, lo, w in self._blocks(indptr):
            out[lo:lo + len(w)] = w
        return out


def gathered(weigh: Weights, indptr: np.ndarray, terms: list, dtype) -> tuple[np.ndarray, np.ndarray]:
    """The held postings of `terms` [(t, w)], one term's after another: their chunks (as
    `dtype`) and weights times w, each written straight into one array of all of them.
    (Each term's weights gathered into an array of its own, then all joined, was a second
    pass over every posting a query scores in full: stage 05 at 200k passages, bench/README.md, s05m.)"""
    n = sum(indptr.item(t + 1) - indptr.item(t) for t, _ in terms)
    one = len(terms) == 1 and weigh.chunk.dtype == dtype  # (one term's chunks: the held ones, not a copy)
    chunks = weigh.chunk[indptr.item(terms[0][0]):indptr.item(terms[0][0] + 1)] if one else np.empty(n, dtype=dtype)
    out, a = np.empty(n, dtype=np.float64), 0
    for t, w in terms:
        lo, hi = indptr.item(t), indptr.item(t + 1)
        b = a + hi - lo
        if not one:
            chunks[a:b] = weigh.chunk[lo:hi]
        part = weigh.held(t, slice(lo, hi), out[a:b])
        if w != 1.0:
            part *= w  # (in place: the bits of imp * w)
        a = b
    return chunks, out


def looked_up(weigh: Weights, t: int, lo: int, hi: int, cand: np.ndarray, swap: float = 2) -> np.ndarray:
    """Term t's weight (float64, 0 where it is absent) in each of the sorted chunks `cand`, its
    postings being [lo, hi) of those `weigh` holds: of a long list, only the postings at the
    candidates are weighed (the same bits as the whole list's), where a common term's list is
    long and a query's candidates few (stage 05's MaxScore looks light terms up so).  `swap`:
    from how many candidates a posting the postings are searched in them instead."""
    ch = weigh.chunk[lo:hi]
    if len(ch) == 0:
        return np.zeros(len(cand), dtype=np.float64)
    # Both sorted: search the fewer in the more, in one dtype (else NumPy copies the list
    # to int64); take(mode="clip") reads a position past the end as the last, no clamping pass.
    cand = cand.astype(ch.dtype, copy=False)
    if len(cand) > swap * len(ch):
        pos = np.searchsorted(cand, ch)
        pos, found = masked(cand.take(pos, mode="clip") == ch, pos, weigh.held(t, slice(lo, hi)))
        out = np.zeros(len(cand), dtype=np.float64)
        out[pos] = found
        return out
    pos = np.searchsorted(ch, cand)
    np.minimum(pos, len(ch) - 1, out=pos)  # (a candidate past the list: its last posting, not found)
    return np.where(ch.take(pos) == cand, weigh.held(t, pos + lo), 0.0)
