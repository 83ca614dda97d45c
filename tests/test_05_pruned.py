"""Stage 05's queries ranked in one compiled call (pipekit/retrieve/pruned.py, the loops in
pruned_loops.py): the chunks `rank` is handed hold the same best chunks with the same score
bits as the NumPy path's (`candidates`: MaxScore in ~30 NumPy calls), so every hit, its order,
every tie and the document run are the same; stage 05's files too, with the module and without.

The loops run here as numba's `@njit` functions (the module pruned_loops itself, compiled in the
test's process: the same code pycc builds), and once as the built extension module."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pipekit.retrieve import pruned, pruned_loops
from pipekit.retrieve.ranks import rank
from pipekit.retrieve.search import OutputReader
from pipekit.run.arrays import small_page_zeros
from pipekit.run.stages import load_stage
from test_05_retrieval_fast import RM3, WAYS, build, random_corpus, random_queries, retrieval


def both_ways(monkeypatch, index, queries, k, depth, feedback=None):
    """`search`'s hits and document run with the compiled loops, then with them off."""
    monkeypatch.setattr(pruned.BUILT, "module", pruned_loops)
    assert pruned.ranker(index, False) is not None
    on = retrieval.search(index, queries, k, depth, feedback=feedback)
    monkeypatch.setattr(pruned.BUILT, "module", False)
    assert pruned.ranker(index, False) is None
    off = retrieval.search(index, queries, k, depth, feedback=feedback)
    return on, off


def assert_same(on, off):
    (hits, run, scored), (hits2, run2, scored2) = on, off
    for a, b in zip(hits, hits2):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    assert run == run2
    assert [(q.ids.tolist(), q.weights.tobytes()) for q in scored] == [(q.ids.tolist(), q.weights.tobytes()) for q in scored2]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([8, 30, 120]), st.sampled_from([0.05, 0.6, 1.0]),
       st.sampled_from([1, 3, 10]), st.sampled_from([1, 5, 40]), st.booleans(), st.booleans())
def test_the_compiled_ranking_gives_the_numpy_paths_hits(tmp_path_factory, seed, vocab, new_doc, k, depth, rows_only,
                                                         small):
    # Random corpora of many ties (few words, short chunks of equal lengths), documents of one or
    # several chunks, queries of known, unknown and repeated words (qtf), k past depth and below,
    # the commonest terms held as rows alone or beside their postings, pruning or not.
    tmp_path = tmp_path_factory.mktemp("pruned")
    rng = np.random.default_rng(seed)
    words, texts, doc_ids = random_corpus(rng, n_chunks=int(rng.integers(20, 300)), vocab=vocab, new_doc=new_doc)
    build(tmp_path, texts, doc_ids)
    queries = random_queries(rng, words, n=40)
    index = retrieval.Index(OutputReader(tmp_path), queries=[t for _, t in queries], rows_only=rows_only)
    index.small_query = 0 if small else index.small_query
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(retrieval, "ROWS_ONLY_SHARE", 3)
        assert_same(*both_ways(mp, index, queries, k, depth))


@pytest.mark.parametrize("way", WAYS)
def test_every_way_of_the_numpy_path_and_rm3(tmp_path, monkeypatch, way):
    # The NumPy path's settings (dense rows for every term or none, lists merged or summed, cuts
    # always or never) and rm3's expanded queries (weights that are not whole numbers) give what
    # the compiled loop gives.
    for name, value in WAYS[way].items():
        monkeypatch.setattr(retrieval, name, value)
    rng = np.random.default_rng(11)
    words, texts, doc_ids = random_corpus(rng, vocab=80)
    index = build(tmp_path, texts, doc_ids)
    index.small_query = 0
    queries = random_queries(rng, words, n=120)
    for feedback in (None, RM3):
        for k, depth in ((5, 12), (30, 10)):
            assert_same(*both_ways(monkeypatch, index, queries, k, depth, feedback))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(1, 150))
def test_top_chunks_holds_the_reach_best_with_their_ties(seed, terms, reach):
    # Straight against `rank` over every chunk's exact score (`Index.scores`): the chunks handed
    # back hold the reach best (every tie of the reach-th too), in corpus order, score bits equal.
    import tempfile
    from pathlib import Path

    rng = np.random.default_rng(seed)
    words, texts, doc_ids = random_corpus(rng, n_chunks=200, vocab=12, new_doc=0.5)
    with tempfile.TemporaryDirectory() as folder:
        index = build(Path(folder), texts, doc_ids)
        ranked = pruned.TopChunks.of(index, pruned_loops)
        ids = np.unique(rng.integers(0, len(index.df), terms))
        rng.shuffle(ids)
        weights = rng.choice([1.0, 2.0, 0.37, 3.5], len(ids))
        cols, vals = ranked(ids, weights, reach)
        all_cols, all_vals = index.scores(ids, weights=weights)
        assert np.all(np.diff(cols) > 0) and cols.dtype == all_cols.dtype
        at = np.searchsorted(all_cols, cols)
        assert np.array_equal(all_cols[at], cols) and all_vals[at].tobytes() == vals.tobytes()
        cut = np.sort(all_vals)[::-1][reach - 1] if len(all_vals) >= reach else 0.0
        assert np.array_equal(cols, all_cols[all_vals >= cut])
        order, docs, scores = rank(cols, vals, index.doc_codes, reach, reach)
        order2, docs2, scores2 = rank(all_cols, all_vals, index.doc_codes, reach, reach)
        assert np.array_equal(cols[order], all_cols[order2]) and np.array_equal(docs, docs2)
        assert scores.tobytes() == scores2.tobytes()


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_many_pair_codes_long_chunks_and_high_tf(tmp_path_factory, seed):
    # Chunks of 1 to 700 words and a word said up to 90 times in one: thousands of (tf, length)
    # pairs, so the NumPy path weighs a short list posting by posting (the formula) and a long one
    # by the term's kept table (bm25.Weights.table), which the loop is handed: the same bits.
    tmp_path = tmp_path_factory.mktemp("pairs")
    rng = np.random.default_rng(seed)
    words = [f"w{i}x" for i in range(25)]
    p = 1.0 / np.arange(1, len(words) + 1)
    texts, doc_ids = [], []
    for c in range(160):
        body = [words[i] for i in rng.choice(len(words), size=int(rng.integers(1, 700)), p=p / p.sum())]
        body += [words[int(rng.integers(0, len(words)))]] * int(rng.integers(0, 90))
        texts.append(" ".join(body))
        doc_ids.append(f"doc{c // 2}")
    build(tmp_path, texts, doc_ids)
    queries = random_queries(rng, words, n=40)
    index = retrieval.Index(OutputReader(tmp_path), queries=[t for _, t in queries], rows_only=True)
    index.small_query = 0
    assert index.weigh.codes is not None and len(index.weigh.pair_tf) > 4096
    with pytest.MonkeyPatch.context() as mp:
        assert_same(*both_ways(mp, index, queries, 5, 12))
    ranked = pruned.TopChunks.of(index, pruned_loops)
    for _, text in queries:
        q = index.query_terms([text])[0]
        cols, vals = ranked(q.ids, q.weights, 30)
        all_cols, all_vals = index.scores(q.ids, weights=q.weights)
        at = np.searchsorted(all_cols, cols)
        assert np.array_equal(all_cols[at], cols) and all_vals[at].tobytes() == vals.tobytes()


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([12, 30, 80]), st.sampled_from([1, 5, 40]))
def test_common_terms_as_bits_give_what_their_rows_give(tmp_path_factory, seed, vocab, depth):
    # Where the compiled loop answers (its module built), a common term whose postings are held
    # is looked up by its bits (pruned.BitStack), not a coded row: the hits of an index with bits
    # are those of one with rows (compiled, and the NumPy path, which then searches the postings).
    tmp_path = tmp_path_factory.mktemp("bits")
    rng = np.random.default_rng(seed)
    words, texts, doc_ids = random_corpus(rng, n_chunks=int(rng.integers(60, 400)), vocab=vocab)
    build(tmp_path, texts, doc_ids)
    queries = random_queries(rng, words, n=40)
    texts_q = [t for _, t in queries]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(retrieval, "ROWS_ONLY_SHARE", 3)
        mp.setattr(pruned.BUILT, "module", False)
        rows = retrieval.Index(OutputReader(tmp_path), queries=texts_q, rows_only=True)
        mp.setattr(pruned.BUILT, "module", pruned_loops)
        bits = retrieval.Index(OutputReader(tmp_path), queries=texts_q, rows_only=True)
        assert rows.bit_stack is None and bits.bit_stack is not None
        assert set(bits._dense) == set(bits._whole) and set(rows._dense) == set(bits._whole) | set(bits.bit_stack.at)
        for t, i in bits.bit_stack.at.items():  # each held chunk's bit, and the postings before each word
            ch = bits.chunk[bits.indptr[t]:bits.indptr[t + 1]]
            flags = np.unpackbits(bits.bit_stack.bits[i].view(np.uint8), bitorder="little")
            assert np.array_equal(np.flatnonzero(flags), ch)
            assert np.array_equal(bits.bit_stack.before[i], np.searchsorted(ch, np.arange(len(flags) // 64) * 64))
        for ix in (rows, bits):
            ix.small_query = 0
        on = retrieval.search(bits, queries, 5, depth)
        mp.setattr(pruned.BUILT, "module", False)
        assert_same(on, retrieval.search(rows, queries, 5, depth))
        assert_same(on, retrieval.search(bits, queries, 5, depth))


def test_rows_past_the_stack_and_no_pair_codes_take_the_numpy_path(tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    words, texts, doc_ids = random_corpus(rng, vocab=30)
    build(tmp_path, texts, doc_ids)
    queries = random_queries(rng, words, n=60)
    monkeypatch.setattr(retrieval, "ROWS_ONLY_SHARE", 4)
    # One row per code type stacked: the others plain arrays (a query with such a term held only as
    # a row takes the NumPy path; one whose postings are held is looked up in them).
    monkeypatch.setattr(retrieval, "RowStack", lambda n, most, zeros: pruned.RowStack(n, 1, zeros))
    index = retrieval.Index(OutputReader(tmp_path), queries=[t for _, t in queries], rows_only=True)
    assert len(index._whole) >= 2 and len(index.row_stack.at) < len(index._dense)
    assert_same(*both_ways(monkeypatch, index, queries, 5, 12))
    index.weigh.codes = None  # (too many (tf, length) pairs for a uint16 code: the formula, in NumPy)
    assert pruned.TopChunks.of(index, pruned_loops) is None


def test_stage_05_writes_the_same_files_with_the_module_and_without(tmp_path, monkeypatch):
    # The whole stage on a small BEIR corpus (one chunk a record, no section context: the
    # compiled path), its results, run file and metrics byte for byte with the module and off.
    import json

    import pandas as pd

    from pipekit.cli import stage_main

    rng = np.random.default_rng(8)
    words, texts, _ = random_corpus(rng, n_chunks=300, vocab=60, new_doc=1.0)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": t or "w0x"}) + "\n"
                              for i, t in enumerate(texts)))
    queries = random_queries(rng, words, n=50)
    (tmp_path / "queries.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in queries))
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\td{int(rng.integers(0, 300))}\t1\n" for q, _ in queries))
    config = tmp_path / "config.yaml"
    config.write_text("paths: {output: out}\ndocuments: {input: corpus.jsonl}\nindexing: {heading_weight: 1}\n"
                      "retrieval: {queries: queries.tsv, qrels: qrels.tsv, top_k: 10, feedback: none, "
                      "section_context: 0}\n")
    for stage in range(1, 5):
        assert stage_main(stage, load_stage(stage).run, ["--config", str(config)]) == 0
    files = []
    for module in (pruned_loops, False):
        monkeypatch.setattr(pruned.BUILT, "module", module)
        assert stage_main(5, retrieval.run, ["--config", str(config), "--force"]) == 0
        out = tmp_path / "out"
        files.append(((out / "05_results.trec").read_bytes(), pd.read_parquet(out / "05_results.parquet"),
                      pd.read_parquet(out / "05_metrics.parquet")))
    (trec, results, metrics), (trec2, results2, metrics2) = files
    assert trec == trec2 and len(results) > 100
    assert results.equals(results2) and metrics.equals(metrics2)


def test_the_built_module_ranks_as_the_loops_do(tmp_path, monkeypatch):
    # pycc's build of the same loops (built once per machine, as stage 05 builds it: ~13 s of a core).
    monkeypatch.setattr(pruned.BUILT, "module", pruned.BUILT.module)  # (put back after: other tests' small
    built = pruned.BUILT.load()                                        # indexes rank in NumPy then)
    if built is None:
        pytest.skip("the compiled loops cannot be built here (numba or a C compiler missing): "
                    "stage 05 ranks in NumPy, tested elsewhere")
    rng = np.random.default_rng(21)
    words, texts, doc_ids = random_corpus(rng, vocab=50)
    index = build(tmp_path, texts, doc_ids)
    a, b = pruned.TopChunks.of(index, built), pruned.TopChunks.of(index, pruned_loops)
    for _, text in random_queries(rng, words, n=80):
        q = index.query_terms([text])[0]
        for reach in (1, 10, 110):
            (c1, v1), (c2, v2) = a(q.ids, q.weights, reach), b(q.ids, q.weights, reach)
            assert c1.tobytes() == c2.tobytes() and v1.tobytes() == v2.tobytes()


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(0, 5), n=st.integers(0, 9000), dtype=st.sampled_from([np.uint8, np.uint16, np.float64]))
def test_small_page_zeros_is_np_zeros(rows, n, dtype):
    # RowStack's stacks: the same array np.zeros makes, writable, its rows views that outlive it.
    got = small_page_zeros((rows, n), dtype)
    assert got.shape == (rows, n) and got.dtype == np.dtype(dtype) and not got.any()
    if rows and n:
        row = got[rows - 1]
        del got
        row[n - 1] = 7
        assert row.sum() == 7 and row.flags.writeable


@settings(max_examples=20, deadline=None)
@given(n=st.integers(0, 5000), dtype=st.sampled_from([np.uint16, np.int32, np.float64]))
def test_large_zeros_are_np_zeros_in_small_pages_from_their_size(n, dtype):
    # Stage 05's held postings: NumPy's own below SMALL_PAGES_FROM bytes, a mapping of their own from it.
    import mmap

    from pipekit.run import arrays

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(arrays, "SMALL_PAGES_FROM", 4096)
        got = arrays.large_zeros((n,), dtype)
    assert got.shape == (n,) and got.dtype == np.dtype(dtype) and not got.any()
    owner = got
    while isinstance(owner, np.ndarray) and owner.base is not None:
        owner = owner.base
    assert isinstance(getattr(owner, "obj", owner), mmap.mmap) == (n * np.dtype(dtype).itemsize >= 4096)


def test_a_row_stack_is_in_small_pages():
    # Huge pages for it stalled stage 05's load on compaction (bench/README.md, branch `r05`).
    stack = pruned.RowStack(1 << 20, 8)
    row = stack.zeros((1 << 20,), np.uint16)
    row[::4096] = 1
    start = row.__array_interface__["data"][0] + row.nbytes // 2  # (NumPy's advice leaves an array's first page out)
    try:
        maps = open("/proc/self/smaps").read().split("\n")
    except OSError:
        pytest.skip("no /proc/self/smaps")
    for i, line in enumerate(maps):
        head = line.split()[0] if line else ""
        if "-" in head and all(c in "0123456789abcdef-" for c in head):
            lo, hi = (int(x, 16) for x in head.split("-"))
            if lo <= start < hi:
                block = maps[i:i + 40]
                flags = next(b for b in block if b.startswith("VmFlags"))
                assert "nh" in flags.split()  # (madvise NOHUGEPAGE: NumPy's own would say "hg")
                assert next(b for b in block if b.startswith("AnonHugePages")).split()[1] == "0"
                return
    pytest.fail("the stack's mapping is not in smaps")


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=40))
def test_bits_set_counts_each_words_bits_with_numpy_2_and_without(words):
    """BitStack's counts before each word: np.bitwise_count (NumPy 2), or the byte table that
    stands in for it on NumPy 1.26 (which requirements.txt allows), each bin(x).count("1")."""
    w = np.array(words, dtype=np.uint64)
    want = [bin(x).count("1") for x in words]
    assert pruned._bits_set(w).tolist() == want
    with pytest.MonkeyPatch.context() as mp:
        mp.delattr(np, "bitwise_count", raising=False)
        assert pruned._bits_set(w).tolist() == want
