"""The warm ranking in one compiled loop (pipekit/retrieve/compiled.py, numba): a Searcher's query
ranked there gives the NumPy path's hits, order and score bits, on random small indexes (ties,
empty and unknown terms, repeated words, section context on and off, k past the matches), the
sample, a folder of repeated passages and the docs questions; without numba a Searcher answers
the NumPy way; and the one-shot `python -m pipekit search` never imports numba."""
import shutil
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import pipekit
from pipekit.retrieve import warm
from pipekit.retrieve.sections import SectionContext

from conftest import REPO, packages, run_importing, run_script, twin_guides
from test_05_retrieval_fast import build, random_corpus

pytest.importorskip("numba", reason="numba is not installed: the Searcher ranks the NumPy way (tested elsewhere)")

DOCS = REPO / "bench" / "out" / "docs_qa" / "ours"  # bench/docs_qa.py's index of real documentation
SAMPLE_QUERIES = (REPO / "data" / "queries.txt").read_text(encoding="utf-8").splitlines()
EXTRA = ["", "zzzz qqqq", "the of and", "freeze freeze change", "deploy deploy deploy rollback freeze on call",
         "R", "x", "naïve café"]
SETTINGS = [{}, {"section_context": 0}, {"repeats": "keep"}, {"section_context": 1.0, "repeats": "keep"},
            {"section_context": 0.25}]


def bits(rows, scores):
    return np.asarray(rows).tolist(), [s.hex() for s in np.asarray(scores, dtype=np.float64).tolist()]


def passages(hits):
    return [dict(p.to_dict(), score=p.score.hex()) for p in hits]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([0.0, 0.25, 0.5, 1.0]), st.floats(0.05, 1.0),
       st.lists(st.integers(1, 60), min_size=1, max_size=4), st.booleans())
def test_the_compiled_ranking_is_the_numpy_paths_to_the_bit(tmp_path_factory, seed, weight, new_section, ks, pruned):
    # A random index of 300 chunks over 25 Zipf-drawn words (short chunks of few words: equal
    # tf and length, so equal scores, are common), sections of one to several chunks, and
    # queries of known, repeated and unknown words: every hit, its place and its score bits.
    rng = np.random.default_rng(seed)
    words, texts, doc_ids = random_corpus(rng, n_chunks=300, vocab=25)
    index = build(tmp_path_factory.mktemp("compiled"), texts, doc_ids)
    new = rng.random(len(texts)) < new_section
    new[0] = True
    codes = np.cumsum(new) - 1
    index.context = SectionContext(codes, index, weight) if weight > 0 else None
    numpy_way = warm.OneQuery(index, 100)
    compiled = warm.OneQuery(index, 100, compiled=True)
    assert compiled.ranker is not None
    queries = ["", "zzz", "w0x w0x w0x", "zzz w3x"] + [
        " ".join(rng.choice(words + ["nope"], size=int(rng.integers(1, 9)))) for _ in range(10)]
    for text in queries:
        for k in ks:
            # Without context, stage 05 prunes (MaxScore) a query of enough postings: the compiled
            # loop scores every chunk, and must find the pruned path's k (small_query 0: always pruned).
            index.small_query = 0 if pruned else 4096
            want = numpy_way.hits(text, k)
            index.small_query = 10**9  # (the compiled loop for every query, context or not)
            got = compiled.hits(text, k)
            assert bits(*got[:2]) == bits(*want[:2]), (text, k)
            assert got[0].dtype == np.int64 and got[1].dtype == np.float64


@pytest.fixture(scope="module")
def sample(sample_default_run):
    return sample_default_run


def assert_compiled_is_numpy(out, queries, ks, extras=SETTINGS):
    compared = 0
    for extra in extras:
        numpy_way = pipekit.Searcher(out, settings=extra, compiled=False)
        compiled = pipekit.Searcher(out, settings=extra)
        assert numpy_way._one.ranker is None and compiled._one.ranker is not None
        for k in ks:
            for q in queries:
                want = numpy_way.search(q, k)
                assert passages(compiled.search(q, k)) == passages(want), (extra, k, q)
                assert bits(*compiled.ranking(q, k)) == bits(*numpy_way.ranking(q, k)), (extra, k, q)
                compared += len(want)
    return compared


def test_a_compiled_searcher_answers_the_sample_as_the_numpy_way(sample):
    assert assert_compiled_is_numpy(sample, SAMPLE_QUERIES + EXTRA, (1, 3, 10, 40, 500)) > 1000


def test_a_compiled_searcher_collapses_repeats_as_the_numpy_way(tmp_path_factory):
    # Two documents share titles: the compiled k best are walked, and a deep ranking is made the NumPy way.
    out = twin_guides(tmp_path_factory.mktemp("twins-compiled"), steps=3, other="## Step 1")
    assert assert_compiled_is_numpy(out, ["deploy canary", "deploy the service", "rollout flag 1", "canary 2 green"],
                                    (1, 2, 3, 5, 10), [{}, {"repeats": "keep"}, {"section_context": 0}]) > 20
    hits = pipekit.Searcher(out).search("deploy canary", 5)
    assert any(p.also for p in hits)  # (a repeat was collapsed: the deep path was taken)


def test_a_compiled_searcher_answers_the_docs_questions_as_the_numpy_way(tmp_path):
    if not (DOCS / "04_postings.parquet").exists():
        pytest.skip(f"no docs index at {DOCS} (`python bench/docs_qa.py --build` then `python bench/docs_qa.py`)")
    out = tmp_path / "docs"
    shutil.copytree(DOCS, out, ignore=shutil.ignore_patterns("04_index.mmap"))
    lines = (REPO / "bench" / "docs_qa_questions.tsv").read_text(encoding="utf-8").splitlines()
    questions = [line.split("\t")[-1] for line in lines if line.strip() and not line.startswith("#")]
    assert len(questions) == 58
    assert assert_compiled_is_numpy(out, questions, (1, 10, 50)) > 10_000


def test_without_numba_a_searcher_ranks_the_numpy_way(sample, monkeypatch):
    want = {q: passages(pipekit.Searcher(sample).search(q, 5)) for q in SAMPLE_QUERIES[:4]}
    monkeypatch.setitem(sys.modules, "numba", None)  # (an import of it raises ImportError)
    monkeypatch.delitem(sys.modules, "pipekit.retrieve.compiled", raising=False)
    searcher = pipekit.Searcher(sample)
    assert searcher._one.ranker is None
    assert {q: passages(searcher.search(q, 5)) for q in want} == want


def test_the_one_shot_search_never_imports_numba(sample, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(sample, out)
    (out / "04_index.mmap").unlink(missing_ok=True)
    # No copy yet: the full path (a Searcher) answers and writes it; then the copy answers;
    # a filter goes the full way again.
    for args in ([], [], ["--in", "handbook/**"], ["--json", "--set", "retrieval.section_context=0"]):
        mods = packages(run_importing("-m", "pipekit", "search", "rollback a deploy", *args,
                                      "--set", f"paths.output={out}"))
        assert "pipekit" in mods and "numba" not in mods and "llvmlite" not in mods, args
    assert (out / "04_index.mmap").exists()
    # ... while a program's Searcher does
    proc = run_script("-c", "import sys, pipekit; pipekit.Searcher(sys.argv[1]).search('rollback'); "
                      "print('numba' in sys.modules)", str(out))
    assert proc.stdout.strip().endswith("True")


def test_a_compiled_ranking_that_cannot_be_made_is_said_and_the_numpy_way_answers(sample, monkeypatch):
    # (numba raises its own errors, e.g. a RuntimeError when no cache folder may be written)
    from pipekit.retrieve import compiled

    def broken(self):
        raise RuntimeError("cannot cache function 'ranked': no locator available")

    want = passages(pipekit.Searcher(sample, compiled=False).search(SAMPLE_QUERIES[0], 5))
    monkeypatch.setattr(compiled.Ranker, "warm_up", broken)
    with pytest.warns(UserWarning, match="compiled ranking is off .*no locator available"):
        searcher = pipekit.Searcher(sample)
    assert searcher._one.ranker is None
    assert passages(searcher.search(SAMPLE_QUERIES[0], 5)) == want
