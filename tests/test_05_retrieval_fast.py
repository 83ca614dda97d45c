"""Stage 05's fast paths give exactly what the plain formula gives.

`search` finds a floor, reads only the heavy terms' postings and looks the light ones up
(MaxScore), on a pool of threads; each step has several ways to do its work, picked by
thresholds.  Every way is checked here against the most direct scorer there is: a dense
chunk × term matrix of tf, SPEC's BM25 formula over every chunk, a full sort by (score
desc, chunk asc), documents scored by their best chunk. A small random
corpus with a Zipfian vocabulary has common terms (so the pruning runs), rare ones, equal
scores (same tf, same length: ties must keep corpus order), empty chunks and documents of
several chunks.
"""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from pipekit.retrieve import ranks
from pipekit.index.analyzer import Analyzer
from pipekit.retrieve.queries import TermIds
from pipekit.retrieve.search import OutputReader
from pipekit.run.stages import load_stage

indexing = load_stage(4)
retrieval = load_stage(5)
K1, B = 1.2, 0.75


def random_corpus(rng, n_chunks=400, vocab=40, new_doc=0.6):
    words = [f"w{i}x" for i in range(vocab)]
    p = 1.0 / np.arange(1, vocab + 1)
    p /= p.sum()
    texts, doc_ids = [], []
    doc = 0
    for c in range(n_chunks):
        n = int(rng.integers(0, 12)) if c % 37 else 0  # some empty chunks
        texts.append(" ".join(words[i] for i in rng.choice(vocab, size=n, p=p)))
        if rng.random() < new_doc:  # documents of one to several consecutive chunks
            doc += 1
        doc_ids.append(f"doc{doc}")
    return words, texts, doc_ids


def build(tmp_path, texts, doc_ids):
    n = len(texts)
    batch = pa.record_batch({
        "chunk_id": pa.array([f"{d}#{i}" for i, d in enumerate(doc_ids)]),
        "doc_id": pa.array(doc_ids),
        "heading": pa.array([""] * n),
        "path": pa.array([[] for _ in range(n)], pa.list_(pa.string())),
        "text": pa.array(texts),
        "page_start": pa.array([None] * n, pa.int32()),
        "page_end": pa.array([None] * n, pa.int32()),
    })
    terms, postings, chunks, stats = indexing.build_index([batch], Analyzer("none", "none"), K1, B, 0)
    meta = json.dumps({"fingerprint": "test", "corpus": stats, "inputs": {"upstream": None}}).encode()
    for name, table in (("04_terms.parquet", terms), ("04_postings.parquet", postings),
                        ("04_chunks.parquet", chunks)):
        # Small row groups, so loading the postings really goes group by group.
        pq.write_table(table.replace_schema_metadata({b"pipekit": meta}), tmp_path / name, row_group_size=500)
    return retrieval.Index(OutputReader(tmp_path))  # the context pipekit.Searcher gives the index


def dense_matrix(texts):
    """The corpus as a dense chunk × term matrix of tf, and each cell's SPEC BM25 weight."""
    vocab = sorted({w for t in texts for w in t.split()})
    col = {w: i for i, w in enumerate(vocab)}
    tf = np.zeros((len(texts), len(vocab)))
    for c, t in enumerate(texts):
        for w in t.split():
            tf[c, col[w]] += 1
    lengths = tf.sum(axis=1)
    n, avgdl = len(texts), lengths.mean()
    df = (tf > 0).sum(axis=0)
    idf = np.log1p((n - df + 0.5) / (df + 0.5))
    norm = K1 * (1 - B + B * lengths / avgdl)
    bm25 = np.where(tf > 0, idf * tf * (K1 + 1) / (tf + norm[:, None]), 0.0)
    return vocab, col, tf, lengths, bm25


def dense_reference(matrix, doc_ids, query_terms, k, depth, feedback=None):
    """SPEC's BM25 over every chunk, from scratch: [(chunk, score)] top k, [(doc, score)] the
    documents of the top depth chunks (what the results file gives at top_k = depth).
    With `feedback` (docs, terms, λ): RM3 written out from its definition, then the same."""
    vocab, col, tf, lengths, bm25 = matrix
    n = len(lengths)
    weight = {}
    for w in query_terms:  # qtf: a repeated term counts each time
        if w in col:
            weight[w] = weight.get(w, 0) + 1.0
    scores = sum((bm25[:, col[w]] * x for w, x in weight.items()), np.zeros(n))
    if feedback is not None and weight:
        fb_docs, fb_terms, lam = feedback
        top = sorted((c for c in range(n) if scores[c] > 0), key=lambda c: (-scores[c], c))[:fb_docs]
        p_c = scores[top] / scores[top].sum()
        model = sum(p * tf[c] / lengths[c] for p, c in zip(p_c, top))  # P(t|R), over the vocabulary
        kept = sorted((t for t in range(len(vocab)) if model[t] > 0), key=lambda t: (-model[t], t))[:fb_terms]
        size = sum(weight.values())
        expanded = {w: lam * x for w, x in weight.items()}
        for t in kept:
            expanded[vocab[t]] = expanded.get(vocab[t], 0.0) + (1 - lam) * size * model[t] / model[kept].sum()
        scores = sum((bm25[:, col[w]] * x for w, x in expanded.items()), np.zeros(n))
    ranked = sorted((c for c in range(n) if scores[c] > 0), key=lambda c: (-scores[c], c))
    docs, seen = [], set()
    for c in ranked[:depth]:  # a document's place is its best chunk's
        if doc_ids[c] not in seen:
            seen.add(doc_ids[c])
            docs.append((doc_ids[c], scores[c]))
    return [(c, scores[c]) for c in ranked[:k]], docs


def random_queries(rng, words, n=300):
    queries = []
    for q in range(n):
        m = int(rng.integers(1, 6))
        terms = [words[int(i)] for i in rng.integers(0, len(words), size=m)]
        if q % 10 == 0:
            terms.append("neverseen")
        if q % 7 == 0:
            terms.append(terms[0])  # a repeated term counts twice (qtf)
        if q % 11 == 0:
            terms += [terms[-1]] * 3
        queries.append((f"q{q}", " ".join(terms)))
    queries.append(("none", "neverseen nowhere"))  # no term the index knows: no results
    queries.append(("common", f"{words[0]} {words[1]} {words[0]}"))  # the two commonest terms
    return queries


# Each way of finding the answer, forced by the module's thresholds (a 400-chunk corpus
# would otherwise take only some of them): all must give exactly the plain answer.
WAYS = {
    "as configured": {},
    "chunks searched in the postings": {"SEARCH_SWAP": 10**9, "DENSE_TERMS": 0},
    "postings searched in the chunks": {"SEARCH_SWAP": 0, "DENSE_TERMS": 0},
    "a dense row for every term": {"DENSE_SHARE": 10**9, "DENSE_TERMS": 10**9},
    "lists added with bincount": {"BINCOUNT_SHARE": 10**9},
    "lists merged": {"BINCOUNT_SHARE": 0},
    "cut lists always": {"CUT_PAYS": 0},
    "cut lists never": {"CUT_PAYS": 10**9},
}


RM3 = retrieval.Feedback(docs=4, terms=6, query_weight=0.6)


# Feedback's second query, with its fractional weights, goes through every way too (one corpus).
@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("seed,new_doc,fb", [(1, 0.6, None), (2, 0.6, None), (3, 0.1, None), (4, 0.4, RM3)],
                         ids=["seed1", "seed2", "seed3-long-docs", "seed4-rm3"])
def test_search_equals_dense_scoring(tmp_path, monkeypatch, seed, new_doc, fb, way):
    for name, value in WAYS[way].items():
        monkeypatch.setattr(retrieval, name, value)
    rng = np.random.default_rng(seed)
    words, texts, doc_ids = random_corpus(rng, new_doc=new_doc)
    index = build(tmp_path, texts, doc_ids)
    index.small_query = 0  # a 400-chunk corpus: prune even tiny queries, so that path is tested
    pruned = []
    lookup = index._lookup
    index._lookup = lambda t, cand, w=1.0: pruned.append(len(cand)) or lookup(t, cand, w)
    queries = random_queries(rng, words)
    k, depth = 5, 12
    (hq, hc, hs, hr), run, _ = retrieval.search(index, queries, k, depth, feedback=fb)
    assert pruned, "no query took the pruned path: the test corpus no longer exercises it"
    matrix = dense_matrix(texts)
    for i, (qid, text) in enumerate(queries):
        want_chunks, want_docs = dense_reference(matrix, doc_ids, text.split(), k, depth,
                                                 fb and (fb.docs, fb.terms, fb.query_weight))
        mine = hq == i
        assert hc[mine].tolist() == [c for c, _ in want_chunks], text
        np.testing.assert_allclose(hs[mine], [s for _, s in want_chunks], rtol=1e-12, atol=0)
        assert hr[mine].tolist() == list(range(1, len(want_chunks) + 1))
        assert list(run[qid]) == [d for d, _ in want_docs], text
        np.testing.assert_allclose(list(run[qid].values()), [s for _, s in want_docs], rtol=1e-12, atol=0)


def test_results_do_not_depend_on_the_number_of_threads(tmp_path):
    rng = np.random.default_rng(7)
    words, texts, doc_ids = random_corpus(rng)
    index = build(tmp_path, texts, doc_ids)
    index.small_query = 0
    queries = random_queries(rng, words, n=600)  # several batches, so threads really share them
    one, run_one, _ = retrieval.search(index, queries, 5, 12, threads=1)
    three, run_three, _ = retrieval.search(index, queries, 5, 12, threads=3)
    for a, b in zip(one, three):
        assert np.array_equal(a, b)
    assert run_one == run_three


def test_short_queries_run_on_one_thread_long_ones_on_all(tmp_path, monkeypatch):
    """A query over short lists is mostly Python, which one thread runs at a time: a second
    thread only fought for it (200k passages: 0.46 s on one, 0.53 s on two). Threads are
    used once queries' lists are long (THREADS_PAY postings a query, on average)."""
    rng = np.random.default_rng(3)
    words, texts, doc_ids = random_corpus(rng)
    index = build(tmp_path, texts, doc_ids)
    queries = random_queries(rng, words, n=100)
    notes = []
    index.note = notes.append
    retrieval.search(index, queries, 5, 12)
    assert "on 1 thread " in notes[-1]
    monkeypatch.setattr(retrieval, "cores", lambda: 2)
    monkeypatch.setattr(retrieval, "THREADS_PAY", 1)
    retrieval.search(index, queries, 5, 12)
    assert "on 2 threads " in notes[-1]


def test_ties_keep_corpus_order(tmp_path):
    # Ten identical chunks tie: the earliest ones must be the results, chunks and documents.
    texts = ["gamma delta"] * 5 + ["alpha beta"] * 10 + ["gamma"] * 5
    index = build(tmp_path, texts, [f"d{i}" for i in range(len(texts))])
    (hq, hc, hs, hr), run, _ = retrieval.search(index, [("1", "beta alpha")], 3, 4)
    assert hc.tolist() == [5, 6, 7]
    assert len(set(hs.tolist())) == 1
    assert list(run["1"]) == ["d5", "d6", "d7", "d8"]


def test_chunk_texts_reads_the_rows_asked_for_in_order(tmp_path):
    from pipekit.retrieve.results import chunk_texts

    path = tmp_path / "03_chunks.parquet"
    texts = [f"text {i}" for i in range(1000)]
    pq.write_table(pa.table({"text": texts}), path, row_group_size=64)
    rows = np.array([999, 0, 500, 63, 64, 500])
    assert chunk_texts(path, rows) == [texts[r] for r in rows]


# --- the pieces the fast path is built from, each against the plain way -------------------

def test_term_ids_equal_a_hash_lookup(tmp_path):
    # Binary search over the sorted terms (kept), and the hash lookup it falls back to when
    # the terms are not sorted, both give pc.index_in's ids (-1: a word the index lacks).
    rng = np.random.default_rng(11)
    words, texts, doc_ids = random_corpus(rng)
    index = build(tmp_path, texts, doc_ids)
    asked = pa.array(words + ["neverseen", "a", "zzzz", "w1", "w1x", "w10x"] + words[::-1])
    want = np.asarray(pa.compute.fill_null(pa.compute.index_in(asked, value_set=index.terms), -1))
    assert index._term_ids(asked).tolist() == want.tolist()
    index._term_ids.sorted = False  # as if stage 04 had written them unsorted
    assert index._term_ids(asked).tolist() == want.tolist()


# Words that share their first 8 bytes with several terms, with one, or with none; multi-byte
# characters across the 8-byte line; terms of one byte, of eight, of many.
PIECES = ["a", "ab", "internat", "internation", "é", "日本", "zz", "x" * 8, "\u00ff", "q" * 40]


@settings(max_examples=150, deadline=None)
@given(st.sets(st.lists(st.sampled_from(PIECES), min_size=1, max_size=4).map("".join), max_size=40),
       st.lists(st.lists(st.sampled_from(PIECES), min_size=1, max_size=4).map("".join), max_size=30),
       st.integers(0, 3))
def test_term_ids_by_prefix_keys_equal_a_hash_lookup(terms, others, skip):
    terms = pa.array(sorted(terms, key=lambda t: t.encode()), pa.string())  # stage 04's order: UTF-8 bytes
    # (asked through a slice, as a column read in batches is: its offsets do not start at 0)
    asked = pa.array(["pad"] * skip + terms.to_pylist()[::2] + others, pa.string()).slice(skip)
    want = np.asarray(pa.compute.fill_null(pa.compute.index_in(asked, value_set=terms), -1))
    ids = TermIds(terms)
    assert ids(asked).tolist() == want.tolist()
    if len(terms):  # a query's few words (a Searcher's search) go the plain-Python way: the same ids
        assert ids._few(asked.to_pylist()).tolist() == want.tolist()


def test_floor_seeds_are_each_terms_best_postings(tmp_path):
    # What the floor starts from, kept per term: the `want` highest impacts (every n-th
    # posting of a long list), sorted: computed here from scratch.
    rng = np.random.default_rng(12)
    words, texts, doc_ids = random_corpus(rng, n_chunks=600)
    index = build(tmp_path, texts, doc_ids)
    for t in range(len(index.df)):
        for want, sample in ((8, 10**9), (8, 50), (10**6, 10**9)):
            ch, imp = index._postings_of(t)
            if len(ch) > sample:
                ch, imp = ch[::len(ch) // sample], imp[::len(ch) // sample]
            got = index._seeds(t, want, sample)
            assert got.tolist() == sorted(got.tolist())
            assert len(got) == min(want, len(ch))
            assert set(got.tolist()) <= set(ch.tolist())
            if len(ch) > want:  # none left out beats one kept
                kept = np.isin(ch, got)
                assert imp[~kept].max() <= imp[kept].min()
            assert index._seeds(t, want, sample) is got  # kept, not found again


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=0, max_size=200))
def test_sorted_unique_is_np_unique(values):
    a = np.asarray(values, dtype=np.int64)
    assert ranks.sorted_unique(a).tolist() == np.unique(a).tolist()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(-5, 5), st.floats(-1, 1)), max_size=100))
def test_masked_is_boolean_indexing(rows):
    mask = np.array([r[0] for r in rows], dtype=bool)
    ints, floats = np.array([r[1] for r in rows], np.int32), np.array([r[2] for r in rows])
    got_ints, got_floats = ranks.masked(mask, ints, floats)
    assert got_ints.dtype == np.int32 and got_ints.tolist() == ints[mask].tolist()
    assert got_floats.tolist() == floats[mask].tolist()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 3)), min_size=0, max_size=60),
       st.integers(1, 5), st.integers(1, 8), st.data())
def test_rank_is_a_full_sort(rows, k, depth, data):
    # Chunks in corpus order, each document's chunks consecutive, scores with many ties:
    # rank's shortcuts (a partition, documents counted from runs) give a plain full sort's answer.
    k = min(k, depth)
    # Documents numbered in order of first appearance, as the index numbers them.
    docs = np.cumsum([0] + [int(d > 0) for d, _ in rows[1:]])[:len(rows)] if rows else np.zeros(0, np.int64)
    vals = np.array([float(s) for _, s in rows]) + 0.5
    cols = np.arange(len(rows))
    if len(rows) > 4 and data.draw(st.booleans()):  # some chunks not among the candidates
        cols = np.array(sorted(data.draw(st.sets(st.integers(0, len(rows) - 1), min_size=1))), dtype=np.int64)
        vals = vals[cols]
    order, top_docs, doc_scores = ranks.rank(cols, vals, docs, k, depth)
    full = sorted(range(len(cols)), key=lambda i: (-vals[i], cols[i]))
    assert order.tolist() == full[:k]
    best = {}
    for i in full[:depth]:  # the documents of the depth best chunks: what a results file of depth rows holds
        best.setdefault(int(docs[cols[i]]), vals[i])
    assert top_docs.tolist() == list(best)
    assert doc_scores.tolist() == list(best.values())


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(0.05, 1.0), st.integers(1, 30))
def test_pruned_candidates_hold_the_exhaustive_best(tmp_path_factory, seed, new_doc, depth):
    # MaxScore (floor, heavy terms read, light ones looked up) keeps every chunk of the best
    # `depth` documents with its score, whatever the corpus, query and depth: rank gives
    # from its candidates what it gives from every matching chunk's exact score.
    rng = np.random.default_rng(seed)
    words, texts, doc_ids = random_corpus(rng, n_chunks=300, vocab=25, new_doc=new_doc)
    index = build(tmp_path_factory.mktemp("idx"), texts, doc_ids)
    index.small_query = 0
    for text in [" ".join(rng.choice(words, size=int(rng.integers(1, 7)))) for _ in range(8)]:
        q = index.query_terms([text])[0]
        k = min(5, depth)
        got = ranks.rank(*index.best_candidates(q.ids, depth, q.weights), index.doc_codes, k, depth)
        cols, vals = index.scores(q.ids, weights=q.weights)
        want = ranks.rank(cols, vals, index.doc_codes, k, depth)
        pc_, pv = index.best_candidates(q.ids, depth, q.weights)
        assert pc_[got[0]].tolist() == cols[want[0]].tolist(), text
        assert got[1].tolist() == want[1].tolist(), text
        np.testing.assert_allclose(got[2], want[2], rtol=1e-12, atol=0)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 400))
def test_common_term_rows_are_narrow_codes_of_the_exact_impacts(seed, distinct):
    # Each common term's row gives its stored impact in every chunk, the same bits (0.0
    # where absent), from codes of one or two bytes a chunk: the float64 rows they replace
    # were 608 MB of stage 05's peak at 1M passages (bench/README.md, issue 47).
    rng = np.random.default_rng(seed)
    n, df = 500, np.array([400, 3, 260, 120, 31])
    values = rng.random(distinct) * 10
    lists = {t: (np.sort(rng.choice(n, size=int(d), replace=False)).astype(np.int32),
                 values[rng.integers(0, distinct, size=int(d))]) for t, d in enumerate(df)}
    ids, rows = ranks.common_term_rows(df, n, lists.__getitem__, share=16, most=3)
    assert ids.tolist() == [0, 2, 3]  # over 1/16 of the chunks, commonest first, at most 3
    for t, row in zip(ids.tolist(), rows):
        codes, _ = row
        own = len(np.unique(lists[t][1]))  # the term's distinct impacts, and 0 for absent
        assert codes.shape == (n,) and codes.itemsize == (1 if own + 1 <= 256 else 2)
        want = np.zeros(n)
        want[lists[t][0]] = lists[t][1]
        got = ranks.row_lookup(row, np.arange(n))
        assert got.dtype == np.float64 and got.view(np.uint64).tolist() == want.view(np.uint64).tolist()
        some = np.sort(rng.choice(n, size=50, replace=False))
        assert ranks.row_lookup(row, some).tolist() == want[some].tolist()


def test_code_dtype_numbers_every_value():
    assert [ranks.code_dtype(v) for v in (1, 256, 257, 65536, 65537)] == [np.uint8, np.uint8, np.uint16, np.uint16,
                                                                         np.uint32]


def test_the_index_holds_no_unread_columns_and_drops_its_postings(tmp_path):
    # Stage 05 holds of 04_chunks only what it reads (no hashes, no row numbers), and once
    # every query is answered it lets the postings and common rows go before writing.
    rng = np.random.default_rng(7)
    _, texts, doc_ids = random_corpus(rng, n_chunks=200, vocab=30)
    index = build(tmp_path, texts, doc_ids)
    assert pq.read_schema(tmp_path / "04_chunks.parquet").names[:2] == ["chunk", "chunk_id"]
    assert "content_hash" in pq.read_schema(tmp_path / "04_chunks.parquet").names
    assert not {"chunk", "content_hash"} & set(index.chunks.column_names)
    assert {"chunk_id", "doc_id", "heading", "length"} <= set(index.chunks.column_names)
    assert len(index._dense) > 0 and "impact" not in pq.read_schema(tmp_path / "04_postings.parquet").names
    # Each posting held as one uint16 code of its (tf, length) pair, not as a float64 impact (bm25.Weights)
    assert index.weigh.codes.dtype == np.uint16 and len(index.weigh.codes) == len(index.chunk)
    assert index.tf.tolist() == pq.read_table(tmp_path / "04_postings.parquet").column("tf").to_pylist()
    index.drop_postings()
    assert index.chunk is None and index._tf is None and index.weigh is None and index._dense == {}


def postings_file(path, rng, n_terms=60, group=7):
    """A term-major postings file as 04_postings lays it out (a run of rows a term, some
    terms with none), in row groups of `group` rows; and each term's df."""
    df = rng.integers(0, 9, size=n_terms) * (rng.random(n_terms) < 0.8)
    n = int(df.sum())
    table = pa.table({"term_id": np.repeat(np.arange(n_terms, dtype=np.int32), df),
                      "chunk": rng.integers(0, 1000, size=n).astype(np.int32),
                      "tf": rng.integers(1, 5, size=n).astype(np.int32), "impact": rng.random(n)})
    pq.write_table(table, path, row_group_size=group)
    return df, table


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([0.02, 0.3, 0.9, 1.0]), st.sampled_from([0, 10**9]),
       st.sampled_from([2, 3, 1 << 16]))
def test_asked_postings_hold_each_asked_terms_run_and_decode_no_other_group(tmp_path_factory, seed, share, slices,
                                                                            batch_rows):
    # Stage 05 reads of 04_postings only the runs of the terms its queries ask (issue 47):
    # each asked term's postings exactly as the whole file has them, every other term's run
    # empty, and a row group holding no asked posting is never decoded.  Both ways of
    # copying a group's runs (a slice each, one mask) give the same, and so does a group
    # decoded a few rows at a time (`BATCH_ROWS`: 2 or 3 of its 7, or all of them at once).
    import pyarrow.parquet as parquet
    from pipekit.retrieve import asked as asked_module

    rng = np.random.default_rng(seed)
    path = tmp_path_factory.mktemp("asked") / "04_postings.parquet"
    df, table = postings_file(path, rng)
    ids = np.flatnonzero(rng.random(len(df)) < share)
    held = asked_module.AskedPostings(df, ids)
    start = np.concatenate([[0], np.cumsum(df)])
    decoded = []
    read = parquet.ParquetFile.iter_batches
    try:
        parquet.ParquetFile.iter_batches = lambda self, *a, **kw: decoded.extend(kw["row_groups"]) or read(self, *a, **kw)
        asked_module.SLICES, before = slices, asked_module.SLICES
        asked_module.BATCH_ROWS, rows_before = batch_rows, asked_module.BATCH_ROWS
        got = {name: held.read(path, name, dtype, threads=2) for name, dtype in
               (("chunk", np.int32), ("tf", np.int32), ("impact", np.float64))}
    finally:
        parquet.ParquetFile.iter_batches = read
        asked_module.SLICES, asked_module.BATCH_ROWS = before, rows_before
    for name in got:
        whole = table.column(name).to_numpy()
        assert got[name].dtype == whole.dtype and len(got[name]) == int(df[ids].sum())
        for t in range(len(df)):
            lo, hi = held.indptr[t], held.indptr[t + 1]
            if t in ids:
                assert got[name][lo:hi].tolist() == whole[start[t]:start[t + 1]].tolist()
            else:
                assert lo == hi
    rows_of_group = np.arange(len(table)) // 7
    wanted = sorted(set(rows_of_group[np.isin(table.column("term_id").to_numpy(), ids)].tolist()))
    assert sorted(decoded) == sorted(wanted * 3)  # each wanted group once a column, no other


def test_an_index_loaded_for_its_queries_answers_them_as_the_whole_index(tmp_path, monkeypatch):
    # Stage 05 loads the postings of its queries' terms only; every way of answering gives
    # the same bits as the whole index, and a term it was not loaded for is refused, not
    # scored as found nowhere.
    rng = np.random.default_rng(11)
    words, texts, doc_ids = random_corpus(rng, vocab=120)
    whole = build(tmp_path, texts, doc_ids)
    queries = random_queries(rng, words[:60], n=120)
    asked = retrieval.Index(OutputReader(tmp_path), queries=[t for _, t in queries])
    assert 0 < len(asked.chunk) < len(whole.chunk) and len(asked.tf) == len(asked.chunk)
    analysed = []  # the queries it was loaded for are not analysed again (200k stems: 0.63 s)
    monkeypatch.setattr(asked, "analyzer", type("Counting", (), {"tokens": lambda self, t: analysed.append(t)})())
    assert 0 < len(asked.dense_ids) <= len(whole.dense_ids)
    for way in WAYS.values():
        with monkeypatch.context() as m:
            for name, value in way.items():
                m.setattr(retrieval, name, value)
            for ix in (whole, asked):
                ix.small_query = 0
                ix.__dict__.update(ix._derived(ix.chunks, np.zeros))  # the rows as this way sets them
                ix._dense, ix.dense = dict(zip(ix.dense_ids.tolist(), ix.dense)), None  # (None: no vectors)
            a, run_a, _ = retrieval.search(whole, queries, 5, 12)
            b, run_b, _ = retrieval.search(asked, queries, 5, 12)
            for x, y in zip(a, b):
                assert x.tolist() == y.tolist()
            assert run_a == run_b
    assert analysed == []
    monkeypatch.undo()
    assert asked.tf.tolist() == np.concatenate([whole.tf[whole.indptr[t]:whole.indptr[t + 1]]
                                               for t in np.flatnonzero(np.diff(asked.indptr))]).tolist()
    unasked = next(w for w in words[60:] if whole._term_ids(pa.array([w]))[0] >= 0)
    with pytest.raises(retrieval.PipelineError, match="postings of .* terms only"):
        retrieval.search(asked, [("x", unasked)], 5, 12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 5), max_size=40), st.randoms(use_true_random=False))
def test_document_codes_are_dictionary_encodings_of_consecutive_documents(runs, rnd):
    # A document's chunks are consecutive (stage 03 writes them so): numbering documents from
    # the runs of doc_id gives exactly what hashing every id gave (0.3 s at 1M chunks).
    import pyarrow.compute as pc

    names = rnd.sample([f"doc{i}" for i in range(200)], len(runs))
    doc_id = pa.array([name for name, n in zip(names, runs) for _ in range(n)], pa.string())
    got_names, got_codes = ranks.document_codes(doc_id)
    want = pc.dictionary_encode(doc_id)
    assert got_names.to_pylist() == want.dictionary.to_pylist()
    assert got_codes.dtype == np.int64 and got_codes.tolist() == np.asarray(want.indices).tolist()
    if all(n == 1 for n in runs):  # every chunk its own document: the names are doc_id, no copy held beside it
        assert got_names is doc_id
    ones = pa.array(names, pa.string())
    assert ranks.document_codes(ones)[0] is ones and ranks.document_codes(ones)[1].tolist() == list(range(len(names)))


WORDISH = st.text(alphabet=st.sampled_from(list("ab-—–.,'\" \t\n\u00a0é…x")), max_size=12)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(WORDISH, st.text(alphabet="xy-", min_size=60, max_size=400)), max_size=80),
       st.sampled_from([10, 40, 90]))
def test_a_printed_snippet_is_what_textwrap_shorten_makes_of_the_whole_text(pieces, width):
    """The terminal's snippet is cut from the passage's first words (results.shortened):
    the same line as textwrap.shorten of the whole passage, long words and hyphens too."""
    import textwrap

    from pipekit.retrieve.results import shortened

    text = " ".join(pieces)
    assert shortened(text, width) == textwrap.shorten(" ".join(text.split()), width, placeholder=" …")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["a", "b", "c d", "e%", "f", "g", "h"]),
                                st.sampled_from([0.5, 1.0, 1.0, 2.0, 1 / 3, 7.25]), max_size=7), max_size=5),
       st.booleans())
def test_trec_run_as_a_stable_sort_a_query_gives_it(runs, best_first):
    # trec_run sorts only a query whose documents are not best first already (stage 05's `rank`
    # names them so); either way each line is the plain way's: documents by score, ties in the
    # run's order, each line as one f-string made it.
    from pipekit.retrieve.queries import trec_field, trec_run

    if best_first:  # as stage 05 hands them over
        runs = [dict(sorted(r.items(), key=lambda kv: -kv[1])) for r in runs]
    run = {f"q{i}": r for i, r in enumerate(runs)}
    queries = [(q, "text") for q in run] + [("missing", "text")]
    want = [f"{trec_field(q)} Q0 {trec_field(d)} {n} {s:.17g} pipekit\n" for q, _ in queries
            for n, (d, s) in enumerate(sorted(run.get(q, {}).items(), key=lambda kv: -kv[1]), 1)]
    assert trec_run(queries, run) == "".join(want)


def test_print_results_reads_only_the_printed_queries_rows(capsys):
    # print_results turns only the first queries' rows into Python values: the rows of queries
    # past them (or of no query asked) change nothing printed, and a repeated id prints its rows.
    from pipekit.retrieve.results import print_results

    queries = [(f"q{i % 10}", f"text {i}") for i in range(12)]
    rows = [{"query_id": f"q{i % 13}", "rank": r, "score": 10.0 - r, "doc_id": f"d{i}", "heading": "H" if r % 2 else "",
             "page_start": None, "page_end": None, "page_label_start": None, "page_label_end": None,
             "text": f"passage {i} {r} " * 5, "link": f"d{i}#x"} for i in range(14) for r in range(1, 4)]
    full = pa.Table.from_pylist(rows)
    shown = {q for q, _ in queries[:8]}
    print_results(full, queries)
    got = capsys.readouterr().out
    print_results(pa.Table.from_pylist([r for r in rows if r["query_id"] in shown]), queries)
    assert got == capsys.readouterr().out and "d9" not in got and "[q1] text 1" in got and "passage 1 3" in got
