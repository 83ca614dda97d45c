"""Stage 04's words cut and numbered in one compiled pass (pipekit/index/compiled.py): on random
ASCII and mixed texts, headings and folder names, with every weight setting, the batch's
dictionary, its tokens' word numbers in chunk order, their counts and each chunk's entries are
the plain way's (the analyzer's runs, `pc.dictionary_encode`, `counting.by_row`), to the element
and the dtype; buffers grown from almost nothing give the same; and the index files are the
same with the compiled loops and without them."""
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings, strategies as st

from pipekit.index import compiled, counting
from pipekit.index.analyzer import Analyzer
from pipekit.run.stages import load_stage

from test_04_indexing import chunks

indexing = load_stage(4)
if compiled.load() is None:  # (built on first use: ~15 s once a machine, then kept in __pycache__)
    pytest.skip("the compiled loops cannot be built here (numba or a C compiler missing): "
                "stage 04 counts the plain way, tested elsewhere", allow_module_level=True)

# Runs of letters (both cases), digits, lone letters and capitals (A, I and the names), long
# words (past the 16 bytes a table slot compares, some sharing those 16; about the 64 bytes the
# cutter reads its letter bits in), punctuation, markup,
# and letters that are not ASCII (a text holding one goes the plain way, RE2, in its place).
PIECES = st.sampled_from([
    "How", "do", "I", "set", "a", "A", "R", "x", "B", "Z", "timeout", "THE", "x86_64", "snake_case",
    "e.g.", "don't", "v2", "0", "42", "a1b", "C++", "--force", "Ünïcode", "café", "東京", "naïve",
    "abcdefghijklmnopqrstu", "abcdefghijklmnopqrstv", "abcdefghijklmnop", "ABCDEFGHIJKLMNOPQ",
    "eb729a757f01c10546ebd179ae2aec852dd0d7f8ada2328ccf4558909d859985", "Z" * 63, "q" * 65,  # a 64-byte read's edges
    "[link](http://x.org/a \"t\")", "## Head { #id .c }", "\n", "\t", " ", "", "!", "—", "İ", "ß"])
TEXT = st.lists(PIECES, max_size=14).map(" ".join) | st.text(max_size=30) | st.text(
    st.characters(max_codepoint=127), max_size=40)


def plain(analyzer, fields, n_rows):
    words, rows, weights = indexing.indexed_runs(analyzer, fields)
    encoded = pc.dictionary_encode(words)
    ids, counts, nnz = counting.by_row(rows, np.asarray(encoded.indices, dtype=np.int32), weights, n_rows)
    return encoded.dictionary, ids, counts, nnz


def assert_same(got, want):
    (d, ids, counts, nnz), (d2, ids2, counts2, nnz2) = got, want
    assert d.type == d2.type and d.to_pylist() == d2.to_pylist()
    assert ids.dtype == ids2.dtype and np.array_equal(ids, ids2)
    assert (counts is None) == (counts2 is None)
    if counts is not None:
        assert counts.dtype == counts2.dtype and np.array_equal(counts, counts2)
    assert nnz.dtype == nnz2.dtype and np.array_equal(nnz, nnz2)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(TEXT, TEXT, st.lists(TEXT, max_size=3)), min_size=1, max_size=12),
       st.sampled_from([0, 1, 3]), st.sampled_from([0, 1, 2]), st.booleans(), st.sampled_from([1, 1 << 12]))
def test_the_compiled_pass_gives_the_plain_ways_arrays(rows, heading_weight, path_weight, capitals, scale):
    texts, headings, paths = zip(*rows)
    batch = chunks(*texts, headings=list(headings), paths=list(paths))
    analyzer = Analyzer("none", "none", "capitals" if capitals else "none")
    fields = indexing.indexed_fields(batch, path_weight, heading_weight)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compiled._Scratch, "SCALE", scale)  # (1 << 12: every buffer grown, the table rehashed)
        mp.setattr(compiled._scratch, "buffers", None, raising=False)
        got = compiled.count_words(fields, analyzer.capitals, batch.num_rows, least=0)
    assert_same(got, plain(analyzer, fields, batch.num_rows))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.tuples(TEXT, TEXT), min_size=1, max_size=6), min_size=1, max_size=5),
       st.sampled_from([0, 1, 3]), st.booleans(), st.sampled_from([1, 1 << 12]), st.sampled_from([None, 1, 5]))
def test_a_thread_that_keeps_its_words_gives_each_token_the_plain_ways_word(batches, heading_weight, capitals,
                                                                             scale, most):
    """With compiled.KeptWords a counting thread's table outlives its batch: each batch's
    dictionary (NewWords) is only the words new to the thread, numbered after its earlier ones,
    and its ids number the thread's words.  Batch after batch on one thread, each token's word,
    its count and each chunk's entries are the plain way's (its own dictionary each batch).
    `most`: a table that reached KeptWords.MOST words is started again, under a new owner."""
    analyzer = Analyzer("none", "none", "capitals" if capitals else "none")
    kept, words, owner = compiled.KeptWords(), [], None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compiled._Scratch, "SCALE", scale)  # (1 << 12: buffers grown, the kept table rehashed)
        if most is not None:
            mp.setattr(compiled.KeptWords, "MOST", most)
        for rows in batches:
            texts, headings = zip(*rows)
            batch = chunks(*texts, headings=list(headings))
            fields = indexing.indexed_fields(batch, 0, heading_weight)
            new, ids, counts, nnz = compiled.count_words(fields, analyzer.capitals, batch.num_rows, least=0, kept=kept)
            d, ids2, counts2, nnz2 = plain(analyzer, fields, batch.num_rows)
            assert isinstance(new, compiled.NewWords)
            if new.owner != owner:  # a table of its own: the first batch, or the last one reached MOST
                assert owner is None or len(words) >= compiled.KeptWords.MOST
                owner, words = new.owner, []
            else:
                assert len(words) < compiled.KeptWords.MOST
            assert new.first == len(words)
            added = new.words.to_pylist()
            assert len(set(added)) == len(added) and not set(added) & set(words)
            words += added
            assert [words[i] for i in ids] == [d[int(i)].as_py() for i in ids2]
            assert ids.dtype == ids2.dtype and (counts is None) == (counts2 is None)
            assert counts is None or np.array_equal(counts, counts2)
            assert nnz.dtype == nnz2.dtype and np.array_equal(nnz, nnz2)


def test_a_sliced_column_and_a_batch_of_many_words():
    # A column sliced out of a bigger one (offsets not from 0), and ~20k distinct words in one
    # field (the table, words and token buffers grown mid-text from their smallest sizes).
    rng = np.random.default_rng(7)
    vocab = np.array(["w%dq%s" % (i, "x" * int(i % 23)) for i in range(20_000)])
    text = " ".join(rng.choice(vocab, 60_000)) + " É " + " ".join(vocab[:50])
    column = pa.array(["Zz 9 R", text, "", "İstanbul Ab cd", text[:999]]).slice(1)
    analyzer = Analyzer("none", "none")
    fields = [(column, None, 1), (pa.array(["A b C", "", "d", "Ee"]), None, 3)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compiled._Scratch, "SCALE", 1 << 16)
        mp.setattr(compiled._scratch, "buffers", None, raising=False)
        got = compiled.count_words(fields, True, 4, least=0)
    assert_same(got, plain(analyzer, fields, 4))


def test_runs_of_64_letters_and_more_end_where_their_letters_end():
    # The cutter reads 64 bytes of letter bits at a time; a run as long as a read or two (a
    # SHA-256 in hex is 64 letters and digits) once kept it reading forever.  Every length
    # about those reads, at every offset of an 8-byte word, alone and between other words;
    # the call on a thread of its own, so that a loop that does not end fails the test.
    import threading

    texts = ["eb729a757f01c10546ebd179ae2aec852dd0d7f8ada2328ccf4558909d859985"]
    for n in (*range(56, 72), *range(120, 136), *range(188, 196), 256):
        for pad in range(8):
            texts += [" " * pad + "x" * n, "a " * pad + "Q" * n + " b", "z" * pad + "9" * n + ".w"]
    column = pa.array(texts)
    done = {}
    counting_thread = threading.Thread(
        target=lambda: done.update(got=compiled.count_words([(column, None, 1)], False, len(texts), least=0)),
        daemon=True)
    counting_thread.start()
    counting_thread.join(120)
    assert not counting_thread.is_alive(), "the compiled cutter did not finish"
    assert_same(done["got"], plain(Analyzer("none", "none"), [(column, None, 1)], len(texts)))


def test_small_batches_and_unbuilt_loops_take_the_plain_way(monkeypatch):
    fields = [(pa.array(["one two"]), None, 1)]
    assert compiled.count_words(fields, True, 1) is None  # under LEAST_BYTES
    monkeypatch.setattr(compiled, "_loops", False)  # (what a machine without numba or a compiler has)
    assert compiled.count_words(fields, True, 1, least=0) is None


@pytest.mark.parametrize("heading_weight, path_weight", [(1, 1), (3, 2), (0, 0)])
def test_the_index_is_the_same_with_the_compiled_loops_and_without(monkeypatch, heading_weight, path_weight):
    rng = np.random.default_rng(heading_weight)
    words = ["deploy", "Rollback", "R", "a", "x86_64", "café", "on-call", "Freeze", "I", "2024"]
    texts = [" ".join(rng.choice(words, int(rng.integers(0, 30)))) for _ in range(300)]
    batch = chunks(*texts, headings=[" ".join(rng.choice(words, 2)) for _ in texts],
                   paths=[list(rng.choice(["ops", "Guide", "ünï"], int(rng.integers(0, 3)))) for _ in texts])
    analyzer = Analyzer("english", "questions")

    assert_same_index(monkeypatch, lambda: indexing.build_index([batch], analyzer, 1.2, 0.75, path_weight,
                                                                heading_weight=heading_weight))


def assert_same_index(monkeypatch, index):
    """index() gives the same tables and statistics with the compiled loops and without."""
    monkeypatch.setattr(compiled, "LEAST_BYTES", 0)
    with_loops = index()
    monkeypatch.setattr(compiled, "_loops", False)
    without = index()
    for a, b in zip(with_loops[:3], without[:3]):
        assert a.equals(b)
    assert with_loops[3] == without[3]


def test_many_batches_on_two_threads_that_keep_their_words_give_the_plain_index(monkeypatch):
    """count_chunks on two threads, each keeping its words across its batches (a batch's ids
    numbering its thread's words, the vocabulary a map a thread): the index of the plain way."""
    rng = np.random.default_rng(11)
    vocab = ["deploy", "Rollback", "R", "a", "x86_64", "café", "on-call", "Freeze", "I", "2024"] + [
        "w%d" % i for i in range(400)]
    batches = []
    for b in range(9):
        texts = [" ".join(rng.choice(vocab[:60 + 40 * b], int(rng.integers(0, 40)))) for _ in range(120)]
        batches.append(chunks(*texts, headings=[" ".join(rng.choice(vocab, 2)) for _ in texts]))
    analyzer = Analyzer("english", "questions")

    assert_same_index(monkeypatch, lambda: indexing.build_index(iter(batches), analyzer, 1.2, 0.75, 0, heading_weight=2))
    # A thread's table started again every ~100 words (KeptWords.MOST): several owners a thread.
    monkeypatch.setattr(compiled.KeptWords, "MOST", 100)
    monkeypatch.setattr(compiled, "_loops", None)
    assert_same_index(monkeypatch, lambda: indexing.build_index(iter(batches), analyzer, 1.2, 0.75, 0, heading_weight=2))


@settings(max_examples=200, deadline=None)
@given(st.data(), st.integers(0, 40), st.integers(1, 30), st.integers(0, 50), st.booleans(), st.integers(0, 10_000),
       st.booleans())
def test_a_batch_turned_term_major_by_the_loop_is_the_plain_ways(data, n_rows, n_words, n_terms, weighted, first_row,
                                                                   read_only):
    """counting.batch_postings through the compiled `term_major` (its threads' kept count a
    term, zero again after each batch) and the plain way (scipy's CSR -> CSC, NumPy's sums):
    the same Piece and lengths, to the element and the dtype: words the analyzer dropped (-1),
    two words of one term in a chunk, repeats, empty rows, counts past 65,535 summed, ids
    read-only as Arrow's."""
    row_nnz = np.array(data.draw(st.lists(st.integers(0, 9), min_size=n_rows, max_size=n_rows)), np.int64)
    n_tok = int(row_nnz.sum())
    ids = np.array(data.draw(st.lists(st.integers(0, n_words - 1), min_size=n_tok, max_size=n_tok)), np.int32)
    term_of = np.array(data.draw(st.lists(st.integers(-1, n_terms - 1), min_size=n_words, max_size=n_words)), np.int32)
    counts = None
    if weighted:
        counts = np.array(data.draw(st.lists(st.sampled_from([1, 2, 3, 40_000]), min_size=n_tok, max_size=n_tok)),
                          np.int32)
        counts = counting.narrow_counts(counts)
    if read_only:
        ids.flags.writeable = False
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(counting, "SMALL", 0)  # (the loop for any size, and the plain way through scipy)
        got = counting.batch_postings(term_of, ids.copy() if not read_only else ids, counts, row_nnz, n_terms,
                                      first_row)
        again = counting.batch_postings(term_of, ids.copy() if not read_only else ids, counts, row_nnz, n_terms,
                                        first_row)  # (the kept counts were zeroed)
        mp.setattr(compiled, "_loops", False)
        want = counting.batch_postings(term_of, ids.copy(), counts, row_nnz, n_terms, first_row)
    for (piece, lengths) in (got, again):
        for a, b in zip([*piece, lengths], [*want[0], want[1]]):
            assert a.dtype == b.dtype and np.array_equal(a, b)


@settings(max_examples=200, deadline=None)
@given(st.data(), st.integers(1, 12), st.lists(st.tuples(st.integers(0, 30), st.booleans(), st.sampled_from([1, 2, 3])),
                                               min_size=1, max_size=4), st.booleans())
def test_the_loop_puts_tokens_in_row_order_as_a_stable_sort_does(data, n_rows, fields, weighted):
    """The compiled `by_row` (each field's run of a row merged in field order where every field's
    rows ascend, as cut_field gives them; a counting sort where one does not) against NumPy's
    stable sort (counting.by_row): ids, each one's field's weight, entries per row."""
    rows, ends, weights, tok_weights = [], [], [], []
    for n, ascending, weight in fields:
        r = data.draw(st.lists(st.integers(0, n_rows - 1), min_size=n, max_size=n))
        rows += sorted(r) if ascending else r
        ends.append(len(rows))
        weights.append(weight)
        tok_weights += [weight] * n
    rows = np.array(rows, np.int32)
    ids = np.arange(len(rows), dtype=np.int32) * 7 % 11
    got = compiled.load().by_row(ids, rows, len(rows), np.array(ends, np.int64), np.array(weights, np.int64), n_rows,
                                 weighted)
    want = counting.by_row(rows, ids, np.array(tok_weights, np.int32), n_rows)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[2], want[2]) and got[2].dtype == want[2].dtype
    assert np.array_equal(got[1], want[1]) if weighted else len(got[1]) == 0


@settings(max_examples=100, deadline=None)
@given(st.data(), st.lists(st.integers(0, 30), min_size=1, max_size=4), st.integers(1, 30), st.integers(1, 50),
       st.booleans())
def test_a_tally_of_the_batches_is_their_pieces_df_and_postings_a_chunk(data, batch_rows, n_words, n_terms, loop):
    """counting.Tally, filled by batch_postings as each batch turns term-major (by the compiled
    loop, or the plain way), on two threads: each term's df summed over the batches, and each
    chunk's number of postings, as the batches' pieces give them."""
    batches, first = [], 0
    for n_rows in batch_rows:
        row_nnz = np.array(data.draw(st.lists(st.integers(0, 9), min_size=n_rows, max_size=n_rows)), np.int64)
        n_tok = int(row_nnz.sum())
        ids = np.array(data.draw(st.lists(st.integers(0, n_words - 1), min_size=n_tok, max_size=n_tok)), np.int32)
        batches.append((ids, row_nnz, first))
        first += n_rows
    term_of = np.array(data.draw(st.lists(st.integers(-1, n_terms - 1), min_size=n_words, max_size=n_words)), np.int32)
    tally = counting.Tally(n_terms, first)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(counting, "SMALL", 0)
        if not loop:
            mp.setattr(compiled, "_loops", False)
        with ThreadPoolExecutor(2) as pool:
            pieces = list(pool.map(lambda b: counting.batch_postings(term_of, b[0].copy(), None, b[1], n_terms, b[2],
                                                                     tally)[0], batches))
    df = np.zeros(n_terms, np.int64)
    for piece in pieces:
        df[piece.terms] += piece.df
    per_chunk = np.bincount(np.concatenate([np.zeros(0, np.int32)] + [p.chunk for p in pieces]), minlength=first)
    assert tally.df.dtype == np.int64 and np.array_equal(tally.df, df)
    assert tally.per_chunk.dtype == np.int32 and np.array_equal(tally.per_chunk, per_chunk)


def test_a_large_batch_turned_term_major_by_the_loop_is_scipys():
    """Past counting.SMALL the plain way is scipy's: the loop gives its arrays too."""
    rng = np.random.default_rng(3)
    row_nnz = rng.integers(0, 90, 3000).astype(np.int64)
    ids = (rng.zipf(1.4, int(row_nnz.sum())) % 5000).astype(np.int32)
    term_of = rng.integers(-1, 4000, 5000).astype(np.int32)
    for counts in (None, counting.narrow_counts(rng.integers(1, 4, len(ids)).astype(np.int32))):
        got = counting.batch_postings(term_of, ids.copy(), counts, row_nnz, 4000, 123)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(compiled, "_loops", False)
            want = counting.batch_postings(term_of, ids.copy(), counts, row_nnz, 4000, 123)
        for a, b in zip([*got[0], got[1]], [*want[0], want[1]]):
            assert a.dtype == b.dtype and np.array_equal(a, b)


@settings(max_examples=150, deadline=None)
@given(st.data(), st.integers(1, 40), st.integers(0, 6), st.sampled_from(["uint16", "int32", "mixed"]))
def test_a_term_range_put_together_by_the_loop_is_the_plain_ways(data, n_terms, n_pieces, width):
    """counting.place with the compiled `place_runs` (a piece's runs copied) and without: the
    same col_ptr, chunk and tf, dtypes too, whatever the pieces' tf widths (uint16 and int32
    mixed: NumPy's way for a piece the loop is not compiled for)."""
    pieces, first = [], 0
    for p in range(n_pieces):
        terms = np.array(sorted(data.draw(st.sets(st.integers(0, n_terms - 1), max_size=n_terms))), np.int32)
        df = np.array([data.draw(st.integers(1, 4)) for _ in terms], np.int32)
        n = int(df.sum())
        chunk = np.array(sorted(data.draw(st.lists(st.integers(first, first + 9), min_size=n, max_size=n))), np.int32)
        dtype = {"uint16": np.uint16, "int32": np.int32, "mixed": (np.uint16, np.int32)[p % 2]}[width]
        tf = np.array(data.draw(st.lists(st.integers(1, 9), min_size=n, max_size=n)), dtype)
        pieces.append(counting.Piece(terms, df, chunk, tf))
        first += 10
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(counting, "SMALL", 0)  # (the loop for any size)
        got = counting.place(n_terms, deque(pieces))
        mp.setattr(compiled, "_loops", False)
        want = counting.place(n_terms, deque(pieces))
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and np.array_equal(a, b)
