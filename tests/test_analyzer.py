"""The analyzer's one-query path (plain Python, for a Searcher's search) gives exactly the
terms of its column path (Arrow, for stage 04's corpus and stage 05's batches)."""
import pyarrow as pa
from hypothesis import given, settings, strategies as st

from pipekit.index.analyzer import Analyzer

# ASCII with what questions hold: words, stopwords, digits, case, punctuation, code.
WORDS = st.sampled_from(["How", "do", "I", "set", "a", "timeout", "THE", "x86_64", "snake_case", "e.g.",
                         "ran", "running", "runs", "is", "what's", "--force", "v2", "0", "a1b", "C++",
                         "installing", "packages", "i.e", "\t", "\n", "", "  ", "don't", "ok!", "R", "in R?", "X-ray"])
QUESTIONS = st.lists(WORDS, max_size=12).map(" ".join) | st.text(st.characters(max_codepoint=127), max_size=40)


def column_path(analyzer: Analyzer, text: str) -> list[str]:
    flat, parent = analyzer.tokens(pa.array([text, "second text"]))  # an Arrow column: no shortcut
    return [t for t, p in zip(flat.to_pylist(), parent.tolist()) if p == 0]


@settings(max_examples=300, deadline=None)
@given(QUESTIONS, st.sampled_from(["english", "none"]), st.sampled_from(["questions", "english", "none"]),
       st.sampled_from(["capitals", "none"]))
def test_one_ascii_query_gives_the_column_paths_terms(text, stemmer, stopwords, single_letters):
    analyzer = Analyzer(stemmer=stemmer, stopwords=stopwords, single_letters=single_letters)
    flat, parent = analyzer.tokens([text])
    assert flat.to_pylist() == column_path(analyzer, text)
    assert parent.tolist() == [0] * len(flat)


def test_the_one_query_path_follows_the_rule():
    terms = Analyzer().analyze("How do I set a Timeout on x86_64 RUNNING requests?")
    assert terms == ["set", "timeout", "x86", "64", "run", "request"]


def test_a_non_ascii_query_takes_the_column_path():
    # (é is a letter: one run "café", which the ASCII rule would cut in two)
    assert Analyzer(stemmer="none").analyze("un café noir") == ["un", "café", "noir"]


TEXTS = st.lists(QUESTIONS | st.sampled_from(["", "x", "Ab", "R.", "a" * 300]), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(TEXTS, st.sampled_from([1, 2, 5, 64, 1 << 17]), st.booleans(), st.integers(0, 2))
def test_ascii_texts_cut_in_pieces_give_the_runs_of_re2(texts, piece, capitals, skip):
    """The ASCII fast path, cutting a batch's texts a few bytes at a time (`ASCII_PIECE`, pieces of
    whole texts), gives the runs, in order and with their texts, of one piece and of RE2's split
    (the plain way; one-letter runs but names are dropped by the fast path only)."""
    import numpy as np
    import pytest
    from pipekit.index import analyzer as an

    arr = pa.array(["Zz 9"] * skip + texts).slice(skip)  # (a slice: offsets that do not start at 0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(an, "ASCII_PIECE", piece)
        runs, parent = an._ascii_runs(arr, capitals)
    whole, whole_parent = an._ascii_runs(arr, capitals)
    assert runs.equals(whole) and np.array_equal(parent, whole_parent)
    plain, plain_parent = an._regex_runs(arr, capitals)
    kept = [(w, p) for w, p in zip(plain.to_pylist(), plain_parent.tolist())
            if len(w) > 1 or (capitals and w in an._ASCII_NAMES)]
    assert list(zip(runs.to_pylist(), parent.tolist())) == kept
