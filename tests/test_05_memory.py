"""Stage 05's memory (issue 47, branch mem5): its commonest asked terms held only as coded
rows, and columns taken from in place.

A term in over 1/ROWS_ONLY_SHARE of the chunks already has a coded row over every chunk
(ranks.common_term_rows); its postings were held beside it (~100 MB at 1M passages).  With
`rows_only` the postings are never held: each such term's rows are read, coded and let go
(`AskedPostings.read_columns`), and every use of its postings reads the row instead.  The
scores must keep their bits: these tests compare against the index that holds everything.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from pipekit.retrieve import asked as asked_module, ranks
from pipekit.retrieve.search import OutputReader
from pipekit.run.arrays import one_array
from test_05_retrieval_fast import WAYS, build, postings_file, random_corpus, random_queries, retrieval


def random_parts(rng, n: int, terms: int, rows_from: int) -> tuple[list, np.ndarray]:
    """A query's parts as `ranks.summed` takes them (random postings over n chunks; from term
    `rows_from` on, each as its coded row), and one bincount over all the postings in order."""
    parts, plain = [], []
    for i in range(terms):
        ch = np.sort(rng.choice(n, size=int(rng.integers(0, n)), replace=False)).astype(np.int32)
        imp = rng.random(len(ch)) * 10.0 ** rng.integers(-3, 4)
        plain.append((ch, imp))
        parts.append((ch, imp) if i < rows_from else (None, ranks.coded_row(ch, imp, n)))
    return parts, np.bincount(np.concatenate([p[0] for p in plain]), weights=np.concatenate([p[1] for p in plain]),
                              minlength=n)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(0, 5))
def test_summed_adds_rows_and_postings_in_the_bits_of_one_bincount(seed, terms, rows_from):
    # One bincount over every term's postings adds each chunk's impacts in query order;
    # `summed`, given some terms as coded rows (0.0 where absent), must give the same bits.
    n = 50
    parts, want = random_parts(np.random.default_rng(seed), n, terms, rows_from)
    got = ranks.summed(n, parts)
    assert got.tobytes() == want.tobytes()
    before, ranks.ROW_BLOCK = ranks.ROW_BLOCK, 7  # a row added 7 chunks at a time: the same bits
    try:
        assert ranks.summed(n, parts).tobytes() == want.tobytes()
    finally:
        ranks.ROW_BLOCK = before


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(0, 6), st.sampled_from([0.0, 0.5, 3.0]))
def test_kept_sums_are_summeds_bits_in_a_buffer_zeroed_again(seed, terms, rows_from, at_least):
    # Stage 05's query phase adds each term's postings where they lie (np.add.at) into an array a
    # thread keeps (ranks.KeptSums): the chunks that score, and their sums, must be `summed`'s to
    # the bit (one bincount over the postings), query after query on the same buffer (zeroed again),
    # and on two threads at once.
    from concurrent.futures import ThreadPoolExecutor
    rng = np.random.default_rng(seed)
    n = 50
    queries = [random_parts(rng, n, terms, rows_from) for _ in range(3)]
    sums = ranks.KeptSums(n)

    def check(query):
        parts, dense = query
        want = np.flatnonzero(dense >= at_least if at_least > 0 else dense != 0)
        cols, vals = sums(parts, at_least)
        assert cols.tolist() == want.tolist() and vals.tobytes() == dense[want].tobytes()

    for query in queries + queries:
        check(query)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(check, queries * 4))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(0.0, 1.0))
def test_row_postings_are_the_postings_the_row_was_coded_from(seed, cut):
    rng = np.random.default_rng(seed)
    n = 300
    ch = np.sort(rng.choice(n, size=int(rng.integers(0, n)), replace=False)).astype(np.int32)
    imp = np.round(rng.random(len(ch)), 2) + 0.01  # repeated impacts, as a common term's are
    row = ranks.coded_row(ch, imp, n)
    got_ch, got_imp = ranks.row_postings(row)
    assert got_ch.dtype == np.int32 and got_ch.tolist() == ch.tolist()
    assert got_imp.tobytes() == imp.tobytes()
    assert ranks.row_postings(row, at_least=cut)[0].tolist() == (ch[imp >= cut] if cut > 0 else ch).tolist()


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([0.3, 1.0]), st.sampled_from([0.2, 0.6]), st.sampled_from([2, 1 << 16]))
def test_apart_terms_are_handed_over_whole_and_never_held(tmp_path_factory, seed, share, apart_share, batch_rows):
    # Each apart term reaches `whole` once, its rows of every column exactly as the file has
    # them (runs across row groups, read on two threads, a group in batches of 2 rows or at
    # once: asked.BATCH_ROWS); the held arrays are the other asked terms' runs; and each
    # group is decoded once for both columns.
    rng = np.random.default_rng(seed)
    path = tmp_path_factory.mktemp("apart") / "04_postings.parquet"
    df, table = postings_file(path, rng)
    ids = np.flatnonzero(rng.random(len(df)) < share)
    apart = ids[rng.random(len(ids)) < apart_share]
    held = asked_module.AskedPostings(df, [ids], 0, apart)
    got, decoded = {}, []
    read = pq.ParquetFile.iter_batches
    try:
        pq.ParquetFile.iter_batches = lambda self, *a, **kw: decoded.extend(kw["row_groups"]) or read(self, *a, **kw)
        asked_module.BATCH_ROWS, rows_before = batch_rows, asked_module.BATCH_ROWS
        chunk, impact = held.read_columns(path, {"chunk": np.int32, "impact": np.float64}, 2, np.zeros,
                                          lambda t, arrays: got.setdefault(t, []).append(arrays))
    finally:
        pq.ParquetFile.iter_batches = read
        asked_module.BATCH_ROWS = rows_before
    start = np.concatenate([[0], np.cumsum(df)])
    whole_chunk, whole_impact = table.column("chunk").to_numpy(), table.column("impact").to_numpy()
    assert sorted(got) == sorted(t for t in apart.tolist() if df[t] > 0)
    for t, [(ch, imp)] in got.items():
        assert ch.tolist() == whole_chunk[start[t]:start[t + 1]].tolist()
        assert imp.tolist() == whole_impact[start[t]:start[t + 1]].tolist()
    for t in range(len(df)):
        lo, hi = held.indptr[t], held.indptr[t + 1]
        if t in ids and t not in apart:
            assert chunk[lo:hi].tolist() == whole_chunk[start[t]:start[t + 1]].tolist()
            assert impact[lo:hi].tolist() == whole_impact[start[t]:start[t + 1]].tolist()
        else:
            assert lo == hi
    unasked = np.setdiff1d(np.arange(len(df)), ids)[:1]
    if len(unasked):
        with pytest.raises(ValueError, match="must be asked"):
            asked_module.AskedPostings(df, [ids], 0, unasked)
    rows_of_group = np.arange(len(table)) // 7
    wanted = sorted(set(rows_of_group[np.isin(table.column("term_id").to_numpy(), ids)].tolist()))
    assert sorted(decoded) == wanted  # once for both columns, no other group


@pytest.mark.parametrize("way", WAYS)
def test_an_index_of_rows_only_answers_as_the_whole_index(tmp_path, monkeypatch, way):
    # The commonest asked terms held only as rows: every way of answering, every score and
    # document run the same bits as the index holding every posting, with weights (qtf) and
    # queries of rows alone; the postings a caller asks of such a term are the whole index's.
    for name, value in WAYS[way].items():
        monkeypatch.setattr(retrieval, name, value)
    monkeypatch.setattr(retrieval, "ROWS_ONLY_SHARE", 8)  # (a 400-chunk corpus: a few terms past 1/8)
    rng = np.random.default_rng(5)
    words, texts, doc_ids = random_corpus(rng, vocab=120)
    whole = build(tmp_path, texts, doc_ids)
    queries = random_queries(rng, words[:60], n=150)
    queries += [("rows", f"{words[0]} {words[1]}"), ("row", words[0]), ("twice", f"{words[2]} {words[0]} {words[0]}")]
    texts_q = [t for _, t in queries]
    asked = retrieval.Index(OutputReader(tmp_path), queries=texts_q)
    rows = retrieval.Index(OutputReader(tmp_path), queries=texts_q, rows_only=True)
    if WAYS[way].get("DENSE_TERMS", 1):
        assert len(rows._whole) >= 2 and len(rows.chunk) < len(asked.chunk)
        for t in rows._whole:
            assert rows.df[t] * 8 > len(rows.lengths) and rows.indptr[t] == rows.indptr[t + 1]
            for a, b in zip(rows._postings_of(t), whole._postings_of(t)):
                assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
        assert rows.max_impact.tobytes() == asked.max_impact.tobytes()
    else:
        assert rows._whole == {}  # no term gets a row, so none is held as one alone
    for ix in (whole, rows):
        ix.small_query = 0
    a, run_a, scored = retrieval.search(whole, queries, 5, 12)
    b, run_b, _ = retrieval.search(rows, queries, 5, 12)
    for x, y in zip(a, b):
        assert x.tobytes() == y.tobytes()
    assert run_a == run_b
    for q in scored:
        for weights in (None, q.weights):
            for x, y in zip(whole.scores(q.ids, weights=weights), rows.scores(q.ids, weights=weights)):
                assert x.dtype == y.dtype and x.tobytes() == y.tobytes()


def test_one_array_is_a_one_chunk_column_itself_and_combines_several():
    # pyarrow's combine_chunks copies a column of one chunk (32 MB of headings at 1M passages,
    # held through stage 05's queries): one_array hands over the chunk itself.
    strings = pa.array([f"title {i}" for i in range(1000)])
    column = pa.chunked_array([strings])
    before = pa.total_allocated_bytes()
    got = one_array(column)
    assert pa.total_allocated_bytes() == before
    assert got.buffers()[2].address == strings.buffers()[2].address
    several = pa.chunked_array([strings.slice(0, 300), strings.slice(300)])
    assert one_array(several).equals(strings) and one_array(strings) is strings
    assert one_array(pa.chunked_array([], pa.string())).to_pylist() == []


def test_chunks_read_later_are_the_whole_read_in_the_files_order(tmp_path):
    # Stage 05 reads chunk_id and the page columns of 04_chunks after its queries (LATER_04):
    # joined, `chunks` is the table a whole read gives (columns, order, values, metadata).
    from types import SimpleNamespace
    rng = np.random.default_rng(3)
    words, texts, doc_ids = random_corpus(rng, vocab=60)
    build(tmp_path, texts, doc_ids)
    path = tmp_path / "04_chunks.parquet"
    whole = pq.read_table(path, columns=[n for n in pq.read_schema(path).names if n not in retrieval.UNREAD_04])
    holder = SimpleNamespace()
    holder.chunks, read_later = asked_module.read_chunks(holder, path, retrieval.UNREAD_04, retrieval.LATER_04)
    assert holder.chunks.column_names == [n for n in whole.column_names if n not in retrieval.LATER_04]
    read_later()
    assert holder.chunks.equals(whole) and holder.chunks.schema.metadata == whole.schema.metadata
    read_later()  # (a second call reads nothing more)
    assert holder.chunks.equals(whole)
    index = retrieval.Index(OutputReader(tmp_path), later=retrieval.LATER_04)
    assert "chunk_id" not in index.chunks.column_names
    index.read_later()
    assert index.chunks.equals(whole)
