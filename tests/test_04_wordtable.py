"""Stage 04's table of distinct words kept between batches (pipekit/index/wordtable.py): each
word's number is the one a dict numbering words first-seen-first gives, whatever the hash
does, and a hash two words share is caught, never taken for the word."""
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings, strategies as st

from pipekit.index.wordtable import Collision, WordTable, word_hashes

# Words that differ only past 8 or 16 bytes, or in length by a zero byte, or outside ASCII.
TRICKY = ["", "a", "a\x00", "ab", "abcdefgh", "abcdefgh\x00", "abcdefghi", "abcdefghij", "abcdefghijklmnop",
          "abcdefghijklmnopq", "abcdefghijklmnopr", "x" * 40, "x" * 41, "çé", "çè", "日本語", "日本"]


def _numbered(batches, table):
    seen, want = {}, []
    for words in batches:
        for w in words:
            seen.setdefault(w, len(seen))
        want.append([seen[w] for w in words])
    got = [table.number(pa.array(words, pa.string())).tolist() for words in batches]
    return got, want, list(seen)


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.lists(st.one_of(st.sampled_from(TRICKY), st.text(max_size=30)), unique=True, max_size=40),
                        max_size=8),
       capacity=st.sampled_from([2, 16, 1 << 16]))
def test_words_are_numbered_first_seen_first_across_batches(batches, capacity):
    """From a table far too small (it grows) or roomy, batch after batch."""
    table = WordTable(capacity=capacity)
    got, want, words = _numbered(batches, table)
    assert got == want
    assert table.words.to_pylist() == words and len(table) == len(words)


def test_the_hash_reads_every_byte_and_the_length():
    """Words equal in their first 8 or 16 bytes, or but for a trailing zero byte, hash apart;
    a word hashes the same inside a sliced array (offsets not from 0) as alone."""
    h = word_hashes(pa.array(TRICKY))
    assert len(set(h.tolist())) == len(TRICKY)
    sliced = pa.array(["zz"] + TRICKY).slice(1)
    assert np.array_equal(word_hashes(sliced), h)
    assert word_hashes(pa.array([], pa.string())).dtype == np.uint64


def test_a_shared_hash_is_caught_and_changes_nothing():
    """A hash that sends every word to one value: a new word meeting a known one under it, or
    two new words sharing it in one batch, raise Collision with the table as it was."""
    table = WordTable(hashes=lambda w: np.zeros(len(w), dtype=np.uint64))
    assert table.number(pa.array(["alpha"])).tolist() == [0]
    assert table.number(pa.array(["alpha"])).tolist() == [0]  # the same word under it: found
    for words in (["beta"], ["gamma", "delta"], ["alpha", "beta"]):
        with pytest.raises(Collision):
            table.number(pa.array(words))
        assert table.words.to_pylist() == ["alpha"]
    weak = WordTable(hashes=lambda w: np.asarray(pc.utf8_length(w), dtype=np.uint64))
    assert weak.number(pa.array(["ab", "abc"])).tolist() == [0, 1]
    with pytest.raises(Collision):
        weak.number(pa.array(["xy"]))


def _compiled_loops():
    from pipekit.index import compiled

    loops = compiled.load()  # (built on first use: ~15 s once a machine, then kept in __pycache__)
    if loops is None:
        pytest.skip("the compiled loops cannot be built here (numba or a C compiler missing): "
                    "stage 04's vocabulary numbers words the NumPy way, tested above")
    return loops


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.lists(st.one_of(st.sampled_from(TRICKY), st.text(max_size=30)), unique=True, max_size=40),
                        max_size=8))
def test_the_compiled_table_numbers_words_as_the_numpy_one(batches):
    """CompiledWordTable (the counting's compiled loops, its buffers grown from small ones):
    every batch's numbers and the words so far equal a dict's first-seen-first numbering and
    WordTable's, words equal in their first 8 or 16 bytes, with a zero byte, empty or not ASCII too."""
    from pipekit.index.wordtable import CompiledWordTable

    table = CompiledWordTable(_compiled_loops())
    got, want, words = _numbered(batches, table)
    assert got == want
    assert table.words.to_pylist() == words and len(table) == len(words)
    numpy_way = WordTable()
    assert [numpy_way.number(pa.array(b, pa.string())).tolist() for b in batches] == want


def test_the_compiled_table_grows_and_takes_sliced_and_null_words():
    """Many batches of many words (its table rehashed, its buffers grown several times): the
    NumPy table's numbers; a sliced array (offsets not from 0) and a null ("" as WordTable has it)."""
    from pipekit.index.wordtable import CompiledWordTable

    rng = np.random.default_rng(7)
    vocab = np.array(["w%dx%s" % (i, "y" * int(rng.integers(0, 30))) for i in range(40_000)])
    compiled_way, numpy_way = CompiledWordTable(_compiled_loops()), WordTable()
    for _ in range(6):
        words = pa.array(list(dict.fromkeys(rng.choice(vocab, 15_000).tolist())))
        assert np.array_equal(compiled_way.number(words), numpy_way.number(words))
    odd = pa.array(["zz", "w1x", None, "new", "çé"]).slice(1)
    assert compiled_way.number(odd).tolist() == numpy_way.number(odd).tolist()
    assert compiled_way.words.equals(numpy_way.words)
