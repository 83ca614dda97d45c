"""Stage 03's byte scan in one compiled pass (pipekit/chunk/scan.py, numba): on drawn texts (ASCII
words and spaces, tabs, newlines anywhere, control characters, DEL, letters that are not ASCII,
runs of non-spaces around the 10 a budget word holds, empty texts and nulls), placed at every
alignment of the column's buffer, the one-line test is `ascii_one_line`'s and, where it holds,
both word counts are `_words`' (str.split's and count_words'); one_chunk's picks and counts
are the plain way's; and stage 03's rows are the same with the loop and without it."""
import types

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from pipekit.chunk import fastpath, scan
from pipekit.chunk.doctext import Settings, count_words
from pipekit.run.arrays import text_bytes

numba = pytest.importorskip("numba", reason="numba is not installed: stage 03 scans the plain way (tested elsewhere)")

from pipekit.chunk import scan_loops  # noqa: E402  (imports numba)

JITTED = types.SimpleNamespace(one_line_words=scan_loops.one_line_words)
PIECES = st.sampled_from(["a", "Z", "9", "word", "abcdefghij", "abcdefghijk", "x" * 21, "y" * 31, " ", "  ",
                          "\t", "\n", "\n\n", "\x0b", "\x1c", "\x01", "\x7f", "\r", "é", "東京", ".", "-", "#"])
TEXT = st.lists(PIECES, max_size=40).map("".join) | st.text(st.characters(max_codepoint=130), max_size=60)
TEXTS = st.lists(st.one_of(TEXT, TEXT.map(lambda t: t + "\n"), st.none()), min_size=1, max_size=12)


def plain(column):
    one_line = fastpath.ascii_one_line(column)
    n_words, budget = fastpath._words(column)
    return one_line, n_words, budget


def check(loops, column):
    b, starts, ends = text_bytes(column, "test")
    one_line, n_words, budget = scan.one_line_words(loops, b, starts, ends)
    if column.null_count:
        one_line &= np.asarray(column.is_valid())
    want_line, want_words, want_budget = plain(column)
    assert one_line.tolist() == want_line.tolist()
    assert n_words[one_line].tolist() == want_words[one_line].tolist()
    assert budget[one_line].tolist() == want_budget[one_line].tolist()


def placed(texts, skip):
    """The texts as a column whose bytes start `skip` bytes into its buffer (a slice)."""
    return pa.array(["p" * skip] + texts, pa.string()).slice(1)


@settings(max_examples=400, deadline=None)
@given(TEXTS, st.integers(0, 15))
def test_the_loop_is_the_plain_scans(texts, skip):
    check(JITTED, placed(texts, skip))


def test_a_word_run_across_three_words_is_found():
    # 2 + 8 + 1 non-spaces across three words of the buffer: a run of 11, one extra budget word.
    for skip in range(8):
        for lead in range(16):
            check(JITTED, placed(["a" + " " * lead + "b" * 11 + " c\n", "ab " + "c" * 10 + " d" * 3], skip))


def test_the_built_module_is_the_plain_scans():
    loops = scan.built().load(wait=True)
    if loops is None:
        pytest.skip("the compiled loops cannot be built here (a C compiler or numba's pycc missing): "
                    "stage 03 scans the plain way, tested elsewhere")
    rng = np.random.default_rng(7)
    words = ["w", "word", "abcdefghijk", "x" * 25, "\t", "é"]
    texts = [" ".join(rng.choice(words, rng.integers(0, 30)).tolist()) + ("\n" if k % 3 else "") for k in range(500)]
    for skip in range(9):
        check(loops, placed(texts, skip))


@settings(max_examples=100, deadline=None)
@given(st.lists(TEXT, min_size=1, max_size=8), st.sampled_from([5, 40, 1000]))
def test_one_chunk_picks_and_counts_as_the_plain_way(texts, most):
    batch = pa.RecordBatch.from_pydict({
        "text": texts, "format": ["beir"] * len(texts),
        "path": pa.array([[]] * len(texts), pa.list_(pa.string()))})
    section = Settings(max=most, target=min(most, 400), min=min(most, 40))
    original = scan._loops
    try:
        scan._loops = JITTED
        got = fastpath.one_chunk(batch, section)
        scan._loops = False
        want = fastpath.one_chunk(batch, section)
    finally:
        scan._loops = original
    assert got[0].tolist() == want[0].tolist()
    assert (got[1] is None) == (want[1] is None)
    if got[1] is not None:
        assert got[1][got[0]].tolist() == want[1][want[0]].tolist()
        assert got[1][got[0]].tolist() == [len(t.split()) for t, ok in zip(texts, got[0]) if ok]
    # (what `max` is held to: the budget's count)
    assert all(count_words(t) <= most for t, ok in zip(texts, got[0]) if ok)
