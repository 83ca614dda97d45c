"""Stage 04: the analyzer and the BM25 statistics, checked against SPEC by hand."""
import math
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from pipekit.index import counting
from pipekit.index.analyzer import Analyzer
from pipekit.run.stages import load_stage

indexing = load_stage(4)


def chunks(*texts, headings=None, paths=None):
    n = len(texts)
    return pa.record_batch({
        "chunk_id": [f"d{i}#0" for i in range(n)], "doc_id": [f"d{i}" for i in range(n)],
        "heading": headings or [""] * n, "path": pa.array(paths or [[]] * n, pa.list_(pa.string())),
        "text": list(texts), "page_start": pa.array([None] * n, pa.int32()),
        "page_end": pa.array([None] * n, pa.int32()),
    })


def build(batch, **kw):
    opts = {"analyzer": Analyzer("none", "none"), "k1": 1.2, "b": 0.75, "path_weight": 1} | kw
    terms, postings, chunk_table, stats = indexing.build_index([batch], **opts)
    tf = {(t, c): f for t, c, f in zip(postings.column("term_id").to_pylist(),
                                       postings.column("chunk").to_pylist(), postings.column("tf").to_pylist())}
    names = terms.column("term").to_pylist()
    return {(names[t], c): f for (t, c), f in tf.items()}, terms, postings, chunk_table, stats


def test_analyzer_follows_spec():
    a = Analyzer("none", "none")
    # letters and digits only (no underscore), lower-cased, at least two characters
    assert a.analyze("Snake_case X86_64 a I Ünïcode 東京 2024-05") == \
        ["snake", "case", "x86", "64", "ünïcode", "東京", "2024", "05"]
    assert Analyzer("none", "english").analyze("the cat is on the mat") == ["cat", "mat"]
    assert Analyzer("english", "english").analyze("Running runners ran") == ["run", "runner", "ran"]
    # one letter standing alone as a capital, but A and I, is a term as it is (issue 48)
    assert a.analyze("R and C, a A I x") == ["R", "and", "C"]
    assert Analyzer("none", "none", "none").analyze("R and C, a A I x") == ["and"]


def test_term_frequencies_include_the_heading_line():
    tf, *_ = build(chunks("rollback the deploy", "deploy deploy", headings=["Rollback", ""]))
    assert tf[("rollback", 0)] == 2  # once in the heading, once in the text
    assert tf[("deploy", 1)] == 2


def test_a_heading_lines_attribute_list_is_not_indexed():
    # Issue 16: `## Installation { #setup .wide }` (Python-Markdown attr_list, MkDocs,
    # kramdown `{: #id}`) is markup: its id and classes are no words of the section.
    texts = ["## Installation { #setup-guide .wide }\n\nrun pip",
             "Usage {: #how-to }\n=====\n\nstart here",
             "#### Name ## {: #closing-hashes }\n\nbody",
             "## Format {name}\n\n{: .note-box }\nsee {value}"]  # not lists of #id/.class: text
    tf, *_ = build(chunks(*texts, headings=["Installation", "Usage", "Name", "Format {name}"]))
    terms = {t for t, _ in tf}
    assert not terms & {"setup", "guide", "wide", "how", "closing", "hashes"}
    assert tf[("installation", 0)] == 2 and tf[("usage", 1)] == 2 and tf[("name", 2)] == 2  # heading + text line
    assert tf[("name", 3)] == 2 and tf[("note", 3)] == 1 and tf[("box", 3)] == 1 and tf[("value", 3)] == 1


def test_path_terms_count_path_weight_times():
    batch = chunks("alpha", paths=[["ops", "runbooks"]])
    tf, *_ = build(batch, path_weight=3)
    assert tf[("ops", 0)] == 3 and tf[("runbooks", 0)] == 3
    tf0, *_ = build(batch, path_weight=0)
    assert ("ops", 0) not in tf0


def weights_of(terms, postings, chunk_table, stats) -> list[float]:
    """Each posting's BM25 weight as stage 05 computes it from what stage 04 wrote (04 counts,
    05 scores: pipekit/retrieve/bm25.py)."""
    from pipekit.retrieve.bm25 import Weights

    weigh = Weights(terms.column("idf").to_numpy(), stats, chunk_table.column("length").to_numpy())
    term, chunk, tf = (postings.column(n).to_numpy() for n in ("term_id", "chunk", "tf"))
    return [float(weigh(int(t), chunk[i:i + 1], tf[i:i + 1])[0]) for i, t in enumerate(term)]


def test_idf_and_weight_are_spec_formula():
    tf, terms, postings, chunk_table, stats = build(chunks("a1 b2 b2", "b2 c3", "", "c3 c3 c3 d4"))
    assert postings.column_names == ["term_id", "chunk", "tf"]  # counts only: stage 05 weighs them
    N, avgdl = 4, (3 + 2 + 0 + 4) / 4
    assert stats["N"] == N and stats["avgdl"] == pytest.approx(avgdl)  # the empty chunk counts
    assert chunk_table.column("length").to_pylist() == [3, 2, 0, 4]
    df = dict(zip(terms.column("term").to_pylist(), terms.column("df").to_pylist()))
    assert df == {"a1": 1, "b2": 2, "c3": 2, "d4": 1}
    idf = dict(zip(terms.column("term").to_pylist(), terms.column("idf").to_pylist()))
    for t, d in df.items():
        assert idf[t] == pytest.approx(math.log(1 + (N - d + 0.5) / (d + 0.5)), rel=1e-12)
    names = terms.column("term").to_pylist()
    lengths = chunk_table.column("length").to_pylist()
    assert stats["k1"] == 1.2 and stats["b"] == 0.75
    weights = weights_of(terms, postings, chunk_table, stats)
    for t, c, f, imp in zip(*(postings.column(n).to_pylist() for n in ("term_id", "chunk", "tf")), weights):
        expect = idf[names[t]] * f * 2.2 / (f + 1.2 * (1 - 0.75 + 0.75 * lengths[c] / avgdl))
        assert imp == pytest.approx(expect, rel=1e-12)


def test_postings_are_term_major_and_terms_sorted():
    _, terms, postings, *_ = build(chunks("zeta beta", "beta alpha", "alpha zeta beta"))
    assert terms.column("term").to_pylist() == ["alpha", "beta", "zeta"]
    keys = list(zip(postings.column("term_id").to_pylist(), postings.column("chunk").to_pylist()))
    assert keys == sorted(keys)


def test_vocabulary_grows_across_batches():
    a = Analyzer("none", "none")
    batches = [chunks("one two"), chunks("two three")]
    terms, postings, chunk_table, stats = indexing.build_index(batches, a, 1.2, 0.75, 1)
    assert terms.column("term").to_pylist() == ["one", "three", "two"]
    assert stats["N"] == 2 and terms.column("df").to_pylist() == [1, 1, 2]


def test_heading_terms_count_heading_weight_times_in_tf_and_length():
    batch = chunks("rollback the deploy", "deploy deploy", headings=["Rollback now", ""])
    tf1, _, _, table1, stats1 = build(batch)
    tf3, _, _, table3, stats3 = build(batch, heading_weight=3)
    assert tf1[("rollback", 0)] == 2 and tf3[("rollback", 0)] == 4  # 3 from the heading, 1 from the text
    assert tf1[("now", 0)] == 1 and tf3[("now", 0)] == 3
    assert tf3[("deploy", 0)] == 1 and tf3[("deploy", 1)] == 2  # text terms are untouched
    assert table1.column("length").to_pylist() == [5, 2]
    assert table3.column("length").to_pylist() == [3 + 2 * 3, 2]  # the length counts the weight too
    assert stats3["avgdl"] == pytest.approx(11 / 2) and stats3["heading_weight"] == 3
    tf0, _, _, table0, _ = build(batch, heading_weight=0)  # 0 leaves the heading out
    assert ("now", 0) not in tf0 and table0.column("length").to_pylist() == [3, 2]


def test_heading_weight_is_the_same_as_writing_the_heading_out_that_many_times():
    texts = ["alpha beta beta", "beta gamma", "gamma delta alpha"]
    headings = ["Alpha", "", "Delta gamma"]
    weighted = build(chunks(*texts, headings=headings), heading_weight=3)
    written = build(chunks(*[" ".join([h] * 3 + [t]) for h, t in zip(headings, texts)]))
    assert weighted[0] == written[0]
    assert weighted[2].equals(written[2]) and weighted[3].column("length").equals(written[3].column("length"))
    assert weights_of(*weighted[1:]) == pytest.approx(weights_of(*written[1:]), rel=1e-12)


def test_merge_adjacent_sums_a_terms_repeated_chunks_and_keeps_every_term_start():
    """Two words of a chunk that analyse to one term leave neighbouring postings after the
    CSC step; merged, each (term, chunk) is one posting whose tf is their sum."""
    import numpy as np

    rng = np.random.default_rng(7)
    for _ in range(100):
        df = rng.integers(0, 8, rng.integers(1, 30))
        lists = [np.sort(rng.integers(0, 6, d)) for d in df]  # repeats: the neighbours to merge
        indptr = np.concatenate([[0], np.cumsum(df)]).astype(np.int32)
        chunk = np.concatenate(lists).astype(np.int32)
        tf = rng.integers(1, 4, len(chunk)).astype(np.int32)
        got_ptr, got_chunk, got_tf = counting.merge_adjacent(indptr, chunk, tf)
        want = []  # per term: {chunk: summed tf}, in chunk order
        for t in range(len(df)):
            sums: dict[int, int] = {}
            for c, f in zip(chunk[indptr[t]:indptr[t + 1]].tolist(), tf[indptr[t]:indptr[t + 1]].tolist()):
                sums[c] = sums.get(c, 0) + f
            want.append(sums)
        got = [dict(zip(got_chunk[got_ptr[t]:got_ptr[t + 1]].tolist(), got_tf[got_ptr[t]:got_ptr[t + 1]].tolist()))
               for t in range(len(df))]
        assert got == want and got_ptr.dtype == indptr.dtype and len(got_chunk) == got_ptr[-1]


WORDS = ["alpha", "beta", "gamma", "delta", "runs", "running", "the", "x", "zeta", "Ünï", "R", "A", "Δ"]


@settings(max_examples=80, deadline=None)
@given(docs=st.lists(st.lists(st.sampled_from(WORDS), max_size=8).map(" ".join), min_size=1, max_size=12))
def test_each_chunks_counts_are_its_analysed_words(docs):
    """Words the analyzer drops (stopwords, one letter) leave their chunk's row and its
    length, whichever chunks hold nothing else: the first, the last, several in a row."""
    a = Analyzer("english", "english")
    counts = indexing.count_chunks([chunks(*docs)], a, 1)
    flat, parent = a.tokens(docs)
    want = [Counter() for _ in docs]
    for word, row in zip(flat.to_pylist(), parent.tolist()):
        want[row][word] += 1
    got = [Counter() for _ in docs]
    ptr, names = counts["col_ptr"], counts["terms"].to_pylist()
    for t, name in enumerate(names):
        for c, f in zip(counts["chunk"][ptr[t]:ptr[t + 1]].tolist(), counts["tf"][ptr[t]:ptr[t + 1]].tolist()):
            got[c][name] += f
    assert got == want
    assert counts["lengths"].tolist() == [sum(w.values()) for w in want]


@settings(max_examples=60, deadline=None)
@given(docs=st.lists(st.lists(st.sampled_from(WORDS), max_size=8).map(" ".join), min_size=1, max_size=12),
       cuts=st.lists(st.integers(0, 12), max_size=4), n_shards=st.integers(1, 6))
def test_partitions_counted_apart_and_merged_by_shards_equal_one_run(docs, cuts, n_shards):
    """What a cluster does (each partition counted with its own vocabulary, the postings
    cut into term-range shards and each shard merged from every partition's slice) gives
    the tables one run gives: same rows, same order, same values."""
    a = Analyzer("english", "english")
    bounds = sorted({0, len(docs), *(min(c, len(docs)) for c in cuts)})
    batch = chunks(*docs)
    parts = [indexing.count_chunks([batch.slice(lo, hi - lo)], a, 1) for lo, hi in zip(bounds, bounds[1:])]
    one = indexing.build_index([batch], a, 1.2, 0.75, 1)
    apart = indexing.index_in_process(parts, a, 1.2, 0.75, 1, n_shards=n_shards)
    for x, y in zip(one[:3], apart[:3]):
        assert x.equals(y)
    assert one[3] == apart[3]


@settings(max_examples=60, deadline=None)
@given(docs=st.lists(st.lists(st.sampled_from(WORDS), max_size=8).map(" ".join), min_size=1, max_size=12),
       cuts=st.lists(st.integers(0, 12), max_size=5), threads=st.sampled_from([1, 2, 3]))
def test_batches_counted_on_threads_equal_one_batch(docs, cuts, threads):
    """count_chunks counts its batches on several threads, each batch with its own
    dictionary; the counts are those of the chunks read as one batch, in the same order."""
    a = Analyzer("english", "english")
    bounds = sorted({0, len(docs), *(min(c, len(docs)) for c in cuts)})
    batch = chunks(*docs)
    cut = indexing.count_chunks([batch.slice(lo, hi - lo) for lo, hi in zip(bounds, bounds[1:])], a, 1, threads=threads)
    whole = indexing.count_chunks([batch], a, 1)
    assert cut["terms"].equals(whole["terms"])
    for key in ("col_ptr", "chunk", "tf", "lengths"):
        assert np.array_equal(cut[key], whole[key]), key


@settings(max_examples=60, deadline=None)
@given(docs=st.lists(st.lists(st.sampled_from(WORDS), max_size=8).map(" ".join), min_size=1, max_size=12),
       cuts=st.lists(st.integers(0, 12), max_size=5), threads=st.sampled_from([1, 2]),
       ranges=st.lists(st.integers(0, 12), max_size=4))
def test_counts_kept_by_batch_give_every_term_range_as_one_table(docs, cuts, threads, ranges):
    """Counts kept as each batch's term-major postings (`pieces`, what stage 04 holds
    since session 20 instead of one table of the corpus) give, for any range of terms,
    the postings one table gives (df, chunks in corpus order, tf), the same df and each
    chunk's number of postings; and an index written a term range at a time from them
    is the index one table gives, row for row."""
    a = Analyzer("english", "english")
    bounds = sorted({0, len(docs), *(min(c, len(docs)) for c in cuts)})
    batches = [chunks(*docs).slice(lo, hi - lo) for lo, hi in zip(bounds, bounds[1:])]
    kept = indexing.count_chunks(batches, a, 1, threads=threads, pieces=True)
    whole = indexing.count_chunks([chunks(*docs)], a, 1)
    assert "chunk" not in kept and kept["terms"].equals(whole["terms"])
    assert np.array_equal(indexing.vocabulary(kept)["df"], indexing.vocabulary(whole)["df"])
    assert np.array_equal(indexing.vocabulary(kept)["nnz"], indexing.vocabulary(whole)["nnz"])
    n = len(whole["terms"])
    for lo, hi in zip([0, *sorted(min(r, n) for r in ranges)], [*sorted(min(r, n) for r in ranges), n]):
        got, want = (indexing.term_slice(lo, hi, 0, None, c) for c in (kept, whole))
        for key in ("df", "chunk", "tf"):
            assert np.array_equal(got[key], want[key]), (lo, hi, key)
    one = indexing.build_index([chunks(*docs)], a, 1.2, 0.75, 1)
    for n_ranges in (1, 3):
        by_range = indexing.index_in_process([kept], a, 1.2, 0.75, 1, n_shards=n_ranges)
        for x, y in zip(one[:3], by_range[:3]):
            assert x.equals(y)


def test_chunk_rows_read_again_from_03_are_the_rows_counted(tmp_path, monkeypatch):
    """04_chunks' cited columns are read again from the partition of 03_chunks they were
    counted from (held through the counting they were 218 MB at a million passages), a
    group of rows at a time: the same rows as from the columns kept while counting."""
    import pyarrow.parquet as pq
    from pipekit.run.engine import RowRange

    batch = chunks(*[f"word{i} other" for i in range(23)])
    batch = batch.append_column("content_hash", pa.array([f"h{i}" for i in range(23)]))
    pq.write_table(pa.Table.from_batches([batch]), tmp_path / "03_chunks.parquet", row_group_size=5)
    a = Analyzer("none", "none")
    counts = indexing.count_chunks([batch], a, 1)
    monkeypatch.setattr(indexing, "BATCH", 4)
    from pipekit.index import layout
    monkeypatch.setattr(layout, "CHUNK_GROUP", 7)
    source = {"lengths": counts["lengths"], "meta": None, "source": RowRange(str(tmp_path / "03_chunks.parquet"), 3, 23)}
    held = {"lengths": counts["lengths"][3:], "meta": pa.Table.from_batches([batch.slice(3)])}
    read_again = list(indexing.chunk_rows((10, source)))
    assert len(read_again) == 3  # 20 rows in groups of 7
    assert pa.concat_tables(read_again).equals(pa.concat_tables(indexing.chunk_rows((10, held))))
    assert pa.concat_tables(read_again).column("chunk").to_pylist() == list(range(10, 30))


def test_postings_keep_dictionaries_only_for_columns_that_repeat(tmp_path):
    """chunk is nearly all distinct: a dictionary attempt per row group there only cost time
    (writing 27M postings 3.2 s instead of 1.4, with the impacts stage 04 wrote then); term_id and tf repeat."""
    import numpy as np
    import pyarrow.parquet as pq

    from pipekit.run import io

    n = 50_000
    rng = np.random.default_rng(0)
    table = pa.table({"term_id": np.repeat(np.arange(50, dtype=np.int32), n // 50),
                      "chunk": np.arange(n, dtype=np.int32), "tf": rng.integers(1, 4, n, dtype=np.int32)},
                     schema=indexing.POSTINGS_SCHEMA)
    sink = io.ParquetSink(tmp_path / "04_postings.parquet", indexing.POSTINGS_SCHEMA, {})
    sink.write(table)
    sink.commit()
    group = pq.ParquetFile(tmp_path / "04_postings.parquet").metadata.row_group(0)
    has_dict = {group.column(i).path_in_schema: group.column(i).has_dictionary_page for i in range(3)}
    assert has_dict == {"term_id": True, "chunk": False, "tf": True}
    assert io.read_table(tmp_path / "04_postings.parquet").equals(table.replace_schema_metadata(
        io.read_table(tmp_path / "04_postings.parquet").schema.metadata))


@settings(max_examples=60)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 30), st.integers(1, 4)), max_size=300),
       st.integers(41, 60), st.integers(31, 50))
def test_numpy_counting_matches_scipy(entries, n_rows, n_cols):
    """pipekit/index/counting.py: a few chunks are turned term-major with NumPy (a rerun after
    one added file does not import scipy for them), the rest with scipy: the arrays must be
    the same, for rows as `by_row` gives them (repeats not summed, columns in any order)."""
    import numpy as np
    from scipy import sparse

    rows = np.array([e[0] for e in entries], dtype=np.int32)
    cols = np.array([e[1] for e in entries], dtype=np.int32)
    w = np.array([e[2] for e in entries], dtype=np.int32)
    shape = (n_rows, n_cols)
    ids, counts, nnz = counting.by_row(rows, cols, w, n_rows)
    indptr = np.concatenate([[0], np.cumsum(nnz)]).astype(np.int32)
    csc = sparse.csr_matrix((counts, ids, indptr), shape=shape).tocsc()
    got = counting.to_csc(indptr, ids, counts, shape)
    for mine, theirs in zip(got, (csc.indptr, csc.indices, csc.data)):
        assert mine.dtype == theirs.dtype and np.array_equal(mine, theirs)
    # Summed (a chunk's repeats of a term added into one posting): NumPy's merge and scipy's sum.
    small = counting.to_csc(indptr, ids, counts, shape, summed=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(counting, "SMALL", 0)
        large = counting.to_csc(indptr, ids, counts, shape, summed=True)
    csc.sum_duplicates()
    for mine, theirs, ref in zip(small, large, (csc.indptr, csc.indices, csc.data)):
        assert np.array_equal(mine, ref) and np.array_equal(theirs, ref)


@settings(max_examples=80, deadline=None)
@given(entries=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 9), st.sampled_from([1, 1, 1, 3, 70_000])),
                        max_size=200),
       appended=st.integers(0, 40), n_terms=st.integers(1, 6), first_row=st.integers(0, 5))
def test_a_batch_counted_token_by_token_gives_the_summed_counts_postings(entries, appended, n_terms, first_row):
    """A batch's tokens kept one entry each (`by_row`; some appended out of row order, as
    headings and paths are) give `batch_postings` the postings and lengths that the summed
    counts (scipy's COO -> CSR, what count_batch made before) give: each word's repeats in a
    chunk, and two words of one term, summed once the words are terms; a sum past 65,535 kept."""
    import numpy as np
    from scipy import sparse

    n_rows, n_words = 13, 10
    rows = np.array([e[0] for e in entries], dtype=np.int64)
    cols = np.array([e[1] for e in entries], dtype=np.int32)
    w = np.array([e[2] for e in entries], dtype=np.int32)
    k = min(appended, len(rows))  # the last k entries moved first: out of row order
    rows, cols, w = np.roll(rows, k), np.roll(cols, k), np.roll(w, k)
    term_of_word = (np.arange(n_words) % (n_terms + 1) - 1).astype(np.int32)  # -1: a dropped word
    summed = sparse.coo_matrix((w, (rows, cols)), shape=(n_rows, n_words)).tocsr()
    want = counting.batch_postings(term_of_word, summed.indices.astype(np.int32), summed.data,
                                   np.diff(summed.indptr), n_terms, first_row)
    ids, counts, nnz = counting.by_row(rows, cols, w, n_rows)
    for small in (counting.SMALL, 0):  # NumPy's way, then scipy's
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(counting, "SMALL", small)
            got = counting.batch_postings(term_of_word, ids.copy(), counting.narrow_counts(counts), nnz, n_terms,
                                          first_row)
        (p, n), (q, m) = want, got
        assert np.array_equal(n, m)
        for a, b in zip(p, q):
            assert np.array_equal(a, b)


@settings(max_examples=80, deadline=None)
@given(entries=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 9)), max_size=200),
       appended=st.integers(0, 40), n_terms=st.integers(1, 6), first_row=st.integers(0, 5),
       small=st.sampled_from([counting.SMALL, 0]))
def test_tokens_that_count_once_need_no_counts(entries, appended, n_terms, first_row, small):
    """Where every token counts 1 (no heading or path weight above 1), count_batch keeps no
    counts (None): `by_row` and `batch_postings` give without them the postings and lengths
    they give with a count of 1 for each token, by NumPy's way and by scipy's."""
    n_rows, n_words = 13, 10
    rows = np.array([e[0] for e in entries], dtype=np.int64)
    cols = np.array([e[1] for e in entries], dtype=np.int32)
    k = min(appended, len(rows))  # the last k entries moved first: out of row order
    rows, cols = np.roll(rows, k), np.roll(cols, k)
    term_of_word = (np.arange(n_words) % (n_terms + 1) - 1).astype(np.int32)  # -1: a dropped word
    ids, counts, nnz = counting.by_row(rows, cols, np.ones(len(rows), np.int32), n_rows)
    ids_none, none, nnz_none = counting.by_row(rows, cols, None, n_rows)
    assert none is None and np.array_equal(ids, ids_none) and np.array_equal(nnz, nnz_none)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(counting, "SMALL", small)
        want = counting.batch_postings(term_of_word, ids.copy(), counting.narrow_counts(counts), nnz, n_terms,
                                       first_row)
        got = counting.batch_postings(term_of_word, ids_none.copy(), None, nnz_none, n_terms, first_row)
    (p, n), (q, m) = want, got
    assert n.dtype == m.dtype and np.array_equal(n, m)
    for a, b in zip(p, q):
        assert a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.parametrize("heading_weight, path_weight", [(1, 1), (0, 1), (1, 0), (3, 1), (1, 2)])
def test_count_batch_keeps_counts_only_where_a_token_counts_more_than_once(heading_weight, path_weight):
    """count_batch's counts are None exactly when no heading or path weight is above 1, and
    the index is then the one explicit counts of 1 give (`indexed_runs` made to return them)."""
    a = Analyzer("english", "english")
    batch = chunks("running runs ran", "the cat sat", "cats and dogs", headings=["Run", "Cats", ""],
                   paths=[["a", "b"], [], ["dogs"]])
    counts = indexing.count_batch(a, batch, path_weight, heading_weight)[2]
    assert (counts is None) == (heading_weight <= 1 and path_weight <= 1)
    plain = indexing.indexed_runs

    def explicit(*args):
        words, rows, weights = plain(*args)
        return words, rows, np.ones(len(rows), np.int32) if weights is None else weights

    want = indexing.build_index([batch], a, 1.2, 0.75, path_weight, heading_weight=heading_weight)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(indexing, "indexed_runs", explicit)
        assert indexing.count_batch(a, batch, path_weight, heading_weight)[2] is not None
        got = indexing.build_index([batch], a, 1.2, 0.75, path_weight, heading_weight=heading_weight)
    for w, g in zip(want[:3], got[:3]):
        assert w.equals(g)
    assert want[3] == got[3]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from([1, 2, 7, 65_535]), max_size=5), max_size=12),
       st.sampled_from([np.uint16, np.int32]))
def test_row_sums_are_a_bincount_of_each_entrys_row(rows, dtype):
    """`row_sums` (each row's run of counts summed, as batch_postings takes a chunk's length)
    gives what a bincount of every entry's row, weighted by its count, gives: empty rows,
    leading and trailing ones included, are 0."""
    values = np.array([v for r in rows for v in r], dtype=dtype)
    indptr = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum([len(r) for r in rows], out=indptr[1:])
    row_of = np.repeat(np.arange(len(rows)), np.diff(indptr))
    want = np.bincount(row_of, weights=values, minlength=len(rows)).astype(np.int64)
    got = counting.row_sums(values, indptr)
    assert got.dtype == np.int64 and np.array_equal(got, want)


def test_a_small_rerun_counts_without_scipy(tmp_path):
    """One added file's chunks are counted in NumPy: stage 04's rerun never loads scipy."""
    from conftest import packages, run_importing, run_script

    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"d{i}.md").write_text(f"# Doc {i}\n\nwords about topic {i} and more words\n")
    sets = ["--set", f"documents.input={docs}", "--set", f"paths.output={tmp_path / 'out'}",
            "--set", "retrieval.queries=['topic words']", "--set", "retrieval.qrels=null"]
    run_script("run_pipeline.py", *sets)
    (docs / "new.md").write_text("# New\n\nanother topic\n")
    proc = run_importing("run_pipeline.py", *sets)
    assert "04_indexing: 4 rows in" in proc.stdout, proc.stdout + proc.stderr  # stage 04 ran, on the new file too
    assert "scipy" not in packages(proc), proc.stdout


def test_counts_held_in_two_bytes_while_they_fit_and_in_four_past_that():
    """Stage 04 holds every count of the corpus at once (twice around CSR -> CSC): a count
    takes 2 bytes while every count of its batch fits in uint16.  A batch with a word said
    70,000 times in one chunk keeps int32, beside batches that fit, and the counts and the
    chunk's length stay exact."""
    a = Analyzer("none", "none")
    small = indexing.count_chunks([chunks("alpha beta beta", "gamma")], a, 1)
    assert small["tf"].dtype == np.uint16 and small["tf"].tolist() == [1, 2, 1]
    many = " ".join(["beta"] * 70_000)
    mixed = indexing.count_chunks([chunks("alpha beta"), chunks(many + " alpha")], a, 1)
    assert mixed["tf"].dtype == np.int32
    assert mixed["terms"].to_pylist() == ["alpha", "beta"]
    assert mixed["tf"].tolist() == [1, 1, 1, 70_000] and mixed["lengths"].tolist() == [2, 70_001]


def test_merging_two_words_of_one_term_sums_past_two_bytes():
    """Two words of one chunk that stem to one term, each said 40,000 times: each count fits
    in uint16, their posting's tf (80,000) does not, and is exact."""
    a = Analyzer("english", "none")
    counts = indexing.count_chunks([chunks(" ".join(["runs"] * 40_000 + ["running"] * 40_000))], a, 1)
    assert counts["terms"].to_pylist() == ["run"]
    assert counts["tf"].tolist() == [80_000] and counts["lengths"].tolist() == [80_000]


def test_drain_holds_none_of_what_it_runs_through():
    """engine.drain runs a writer's results to the end without keeping them: stage 04's
    list() of them held every postings table written until the stage ended."""
    import gc
    import weakref

    from pipekit.run.engine import drain

    class Table:
        pass

    alive = []

    def tables():
        for _ in range(5):
            t = Table()
            alive.append(weakref.ref(t))
            yield t
            gc.collect()
            assert sum(r() is not None for r in alive) <= 1  # only the one just yielded, if any

    assert drain(tables()) == 5
    alive.clear()
    with pytest.raises(AssertionError):  # list() keeps them: the check above sees it
        list(tables())

