"""BM25's weight, computed where it is used (pipekit/retrieve/bm25.py), is the impact stage 04
stored until issue 47's `tfpost`, bit for bit, whichever way it is computed: per term, a block
of terms, at a few positions, through a term's table of (tf, length) codes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from pipekit.retrieve import bm25
from test_05_retrieval_fast import build, random_corpus, random_queries, retrieval


def stored_impacts(idf_t: np.ndarray, tf: np.ndarray, lengths_c: np.ndarray, k1: float, b: float,
                   avgdl: float) -> np.ndarray:
    """Stage 04's code before `tfpost` (`04_indexing.chunk_norms` and `impacts`), as it was:
    each chunk's norm, gathered per posting, and the formula in place over a gathered idf."""
    norm_c = k1 * (1 - b + b * lengths_c / avgdl) if avgdl > 0 else np.zeros(len(tf))
    tfv = tf.astype(np.float64)
    out = np.multiply(idf_t, tfv, out=idf_t)
    out *= k1 + 1
    tfv += norm_c
    out /= tfv
    return out


def bits(a: np.ndarray) -> list[int]:
    return np.asarray(a, dtype=np.float64).view(np.int64).tolist()


@settings(max_examples=200, deadline=None)
@given(st.data(), st.integers(1, 40), st.integers(1, 6), st.floats(0.01, 4.0), st.floats(0.0, 1.0),
       st.sampled_from([3, 40, 300, 70_000]))
def test_the_weight_is_stage_04s_old_impact_bit_for_bit(data, n_chunks, n_terms, k1, b, largest):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    lengths = rng.integers(0, 2000, size=n_chunks).astype(np.int32)
    lengths[rng.random(n_chunks) < 0.3] = lengths[0]  # equal lengths: shared codes
    avgdl = float(lengths.mean())
    # Postings term-major, chunks ascending in a term, tf from 1 to `largest` (70,000: too many
    # (tf, length) pairs for a uint16 code, so the formula is applied to each posting).
    chunks, terms = [], []
    for t in range(n_terms):
        mine = np.flatnonzero(rng.random(n_chunks) < 0.6)
        chunks.append(mine)
        terms.append(np.full(len(mine), t))
    chunk = np.concatenate(chunks).astype(np.int32)
    term = np.concatenate(terms).astype(np.int64)
    assume(len(chunk) > 0)  # (no postings: column_max gives None, and nothing is held)
    tf = rng.integers(1, largest + 1, size=len(chunk)).astype(np.int32)
    tf[rng.random(len(tf)) < 0.5] = 1
    df = np.bincount(term, minlength=n_terms)
    idf = np.log1p((n_chunks - df + 0.5) / (df + 0.5))
    indptr = np.concatenate([[0], np.cumsum(df)]).astype(np.int64)
    want = stored_impacts(idf[term], tf, lengths[chunk], k1, b, avgdl)

    stats = {"k1": k1, "b": b, "avgdl": avgdl}
    weigh = bm25.Weights(idf, stats, lengths, int(tf.max()))
    weigh.hold(chunk, tf.astype(bm25.tf_dtype(int(tf.max()))))
    assert (weigh.codes is not None) == ((int(tf.max()) + 1) * len(set(lengths.tolist())) <= bm25.PAIRS_MAX)
    assert weigh.counts().tolist() == tf.tolist()
    assert bits(weigh.all(indptr)) == bits(want)  # blocks of terms, idf gathered per posting
    for t in range(n_terms):
        lo, hi = int(indptr[t]), int(indptr[t + 1])
        assert bits(weigh(t, chunk[lo:hi], tf[lo:hi])) == bits(want[lo:hi])  # the formula, one term
        assert bits(weigh.held(t, slice(lo, hi))) == bits(want[lo:hi])
        at = np.arange(lo, hi)[::2]
        assert bits(weigh.held(t, at)) == bits(want[at])  # a few positions
        assert bits(weigh.held(t, slice(lo, hi, 3))) == bits(want[lo:hi:3])
        if hi > lo:
            assert weigh.largest(indptr, {})[t] == want[lo:hi].max()
    before = bm25.BOUND_BLOCK, bm25.PAIRS_SEEN
    # Each term a block of its own, or all in one; by the pairs met (codes held) or posting by posting: the same bounds
    for block, seen in ((1, before[1]), (1, 0), (before[0], 0), (1 << 30, before[1])):
        bm25.BOUND_BLOCK, bm25.PAIRS_SEEN = block, seen
        try:
            assert weigh.largest(indptr, {}).tobytes() == np.asarray(
                [want[indptr[t]:indptr[t + 1]].max() if indptr[t + 1] > indptr[t] else 0.0 for t in range(n_terms)]).tobytes()
        finally:
            bm25.BOUND_BLOCK, bm25.PAIRS_SEEN = before
    # Read as `tf_dtype` says (uint16 when coded), the counts become the codes where they lie: the same codes.
    again = bm25.Weights(idf, stats, lengths, int(tf.max()))
    mine = tf.astype(again.tf_dtype)
    again.hold(chunk, mine)
    if weigh.codes is not None:
        assert again.codes is mine and again.codes.tobytes() == weigh.codes.tobytes()
    else:
        assert again.codes is None and again.tf.tolist() == tf.tolist()
    # All the terms' weights at once into one array (`gathered`), each times its query weight:
    # the bits of each term's own weights times it, one after another; its chunks the held ones.
    qw = data.draw(st.lists(st.sampled_from([1.0, 2.0, 0.37]), min_size=n_terms, max_size=n_terms))
    for terms in ([(t, qw[t]) for t in range(n_terms)], [(n_terms - 1, qw[-1])], [(0, 1.0), (0, 0.37)]):
        for dtype in (np.int32, np.intp):
            ch, w = bm25.gathered(weigh, indptr, terms, dtype)
            assert ch.dtype == dtype and w.dtype == np.float64
            assert ch.tolist() == [c for t, _ in terms for c in chunk[indptr[t]:indptr[t + 1]].tolist()]
            assert bits(w) == bits(np.concatenate([want[indptr[t]:indptr[t + 1]] * x for t, x in terms]))
    if weigh.codes is not None:  # a term's table over the pairs, and each posting by the formula, agree
        for pays, small in ((0, 0), (10**9, 0), (0, 10**9)):
            before = bm25.TABLE_PAYS, bm25.TABLE_SMALL
            bm25.TABLE_PAYS, bm25.TABLE_SMALL = pays, small
            weigh._tables.clear()  # (tables kept from above would answer without the formula)
            try:
                assert bits(np.concatenate([weigh.held(t, slice(int(indptr[t]), int(indptr[t + 1])))
                                            for t in range(n_terms)])) == bits(want)
                at = np.arange(int(indptr[0]), int(indptr[1]))[::-2]  # term 0's postings, a few, out of order
                assert bits(weigh.held(0, at)) == bits(want[at])
            finally:
                bm25.TABLE_PAYS, bm25.TABLE_SMALL = before


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=50), st.integers(0, 200), st.integers(1, 400))
def test_looked_up_weighs_only_what_it_finds_and_gives_the_lists_bits(tfs, seed, swap):
    rng = np.random.default_rng(seed)
    n = 120
    lengths = rng.integers(1, 50, size=n).astype(np.int32)
    chunk = np.sort(rng.choice(n, size=len(tfs), replace=False)).astype(np.int32)
    tf = np.asarray(tfs, dtype=np.int32)
    idf = np.array([0.7])
    weigh = bm25.Weights(idf, {"k1": 1.2, "b": 0.75, "avgdl": float(lengths.mean())}, lengths, 40)
    weigh.hold(chunk, tf.astype(np.uint8))
    cand = np.sort(rng.choice(n, size=int(rng.integers(0, n)), replace=False)).astype(np.int32)
    got = bm25.looked_up(weigh, 0, 0, len(chunk), cand, swap / 100)
    whole = weigh.held(0, slice(0, len(chunk)))
    want = np.zeros(len(cand))
    for i, c in enumerate(cand.tolist()):
        hit = np.flatnonzero(chunk == c)
        want[i] = whole[hit[0]] if len(hit) else 0.0
    assert bits(got) == bits(want)


@pytest.mark.parametrize("pairs_max,table_pays,table_small", [(0, 4, 0), (1 << 16, 0, 0), (1 << 16, 10**9, 0)],
                         ids=["formula-per-posting", "codes-no-table", "codes-table-always"])
def test_stage_05_scores_the_same_bits_by_every_way_of_weighing(tmp_path, monkeypatch, pairs_max, table_pays,
                                                                 table_small):
    rng = np.random.default_rng(5)
    words, texts, doc_ids = random_corpus(rng)
    queries = random_queries(rng, words)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    plain = build(tmp_path / "a", texts, doc_ids)
    plain.small_query = 0
    monkeypatch.setattr(bm25, "PAIRS_MAX", pairs_max)
    monkeypatch.setattr(bm25, "TABLE_PAYS", table_pays)
    monkeypatch.setattr(bm25, "TABLE_SMALL", table_small)
    other = build(tmp_path / "b", texts, doc_ids)
    other.small_query = 0
    assert (other.weigh.codes is None) == (pairs_max == 0)
    a, run_a, scored = retrieval.search(plain, queries, 5, 12)
    b, run_b, _ = retrieval.search(other, queries, 5, 12)
    for x, y in zip(a, b):
        assert x.tobytes() == y.tobytes()
    assert run_a == run_b
    # explain's per-term shares add up to the score (the weights explain computes are the scored ones)
    q, c, s, _ = b
    for i in range(0, len(q), 7):
        rows = other.explain(scored[q[i]], int(c[i]))
        assert sum(r["contribution"] for r in rows) == pytest.approx(float(s[i]), rel=1e-12)
