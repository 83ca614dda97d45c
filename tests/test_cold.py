"""`python -m pipekit search` from a cold start (pipekit/retrieve/cold.py): the mapped copy of the
index answers exactly as `Searcher.search`, is never used once its index files change, and the
process loads neither pyarrow nor pandas."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings as hsettings, strategies as st

import pipekit
from pipekit.retrieve import cold

from conftest import REPO, packages, run_importing, run_script, twin_guides

SAMPLE_QUERIES = (REPO / "data" / "queries.txt").read_text(encoding="utf-8").splitlines()
EXTRA = ["rollback a deploy", "who is on call", "freeze freeze change", "zzzz qqqq", "the of and", "R", "x",
         "deploy deploy deploy rollback freeze on call pager escalation"]
DOCS = REPO / "bench" / "out" / "docs_qa" / "ours"  # bench/docs_qa.py's index of real documentation
SETTINGS = [{}, {"section_context": 0}, {"repeats": "keep"}, {"section_context": 1.0, "repeats": "keep"},
            {"section_context": 0.25}]


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    out = tmp_path_factory.mktemp("cold") / "out"
    run_script("run_pipeline.py", "--set", f"paths.output={out}")
    return out


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    if not (DOCS / "04_postings.parquet").exists():
        pytest.skip(f"no docs index at {DOCS} (`python bench/docs_qa.py --build` then `python bench/docs_qa.py`)")
    out = tmp_path_factory.mktemp("cold-docs") / "out"
    shutil.copytree(DOCS, out, ignore=shutil.ignore_patterns(cold.CACHE))
    return out


def made(out):
    """The folder's copy, written from a Searcher as the full path writes it."""
    (out / cold.CACHE).unlink(missing_ok=True)
    before = cold.stamps(out)
    assert cold.write(pipekit.Searcher(out, keep_texts=False), before) == out / cold.CACHE
    index = cold.ColdIndex.open(out)
    assert index is not None
    return index


def passages(hits):
    return [dict(p.to_dict(), score=p.score.hex()) for p in hits]


def settings_of(out, extra):
    from pipekit.retrieve.search import recorded_settings

    return dict(recorded_settings(out), **extra)


def assert_same_as_searcher(out, queries, ks, link_base=None):
    index = made(out)
    for extra in SETTINGS:
        settings = settings_of(out, extra)
        searcher = pipekit.Searcher(out, settings=settings, link_base=link_base)
        for k in ks:
            for q in queries:
                want = passages(searcher.search(q, k))
                assert passages(index.search(q, k, settings, link_base)) == want, (extra, k, q)


def test_the_copy_answers_as_the_searcher_every_field_and_score_bit(sample):
    assert_same_as_searcher(sample, SAMPLE_QUERIES + EXTRA, (1, 3, 10, 40))


def test_the_same_links_under_a_link_base(sample):
    assert_same_as_searcher(sample, SAMPLE_QUERIES[:6], (5,), link_base="https://docs.example.org/handbook/")


def test_the_copy_answers_as_the_searcher_on_real_documentation(docs):
    # Node's API pages and six projects' Markdown docs: sections of many chunks, repeated
    # passages collapsed (`also`), headings and anchors of every kind.
    questions = [line.split("\t")[-1] for line in (REPO / "bench" / "docs_qa_questions.tsv").read_text(
        encoding="utf-8").splitlines() if line.strip() and not line.startswith("#")]
    assert len(questions) > 50
    index = made(docs)
    assert "section_codes" in index._a  # the sections of a docs folder are not single chunks
    for extra in SETTINGS[:3]:
        settings = settings_of(docs, extra)
        searcher = pipekit.Searcher(docs, settings=settings)
        for q in questions:
            for k in (5, 10):
                assert passages(index.search(q, k, settings, None)) == passages(searcher.search(q, k)), (extra, q)


@hsettings(max_examples=100)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from([1.0, 1.0, 2.0, 3.0, 0.5])), min_size=1,
                max_size=12), st.sampled_from([0.5, 1.0, 0.25]), st.sampled_from(["all", "one", "some"]))
def test_the_copy_mixes_the_section_context_with_stage_05s_own(sample, terms, weight, keep):
    # One implementation (issue 47): the copy's context is a SectionContext on the mapped
    # section scores, and mixes any terms, said any number of times, to the Searcher's bits.
    from pipekit.retrieve.sections import SectionContext

    index, ix = _mapped_and_loaded(sample, weight)
    context = index.context(weight)
    assert isinstance(context, SectionContext) and index.context(0) is None
    weight_of = {}
    for t, w in terms:
        weight_of.setdefault(t % len(ix.df), w)
    ids, weights = np.fromiter(weight_of, np.int64), np.fromiter(weight_of.values(), np.float64)
    cols, vals = ix.scores(ids.tolist(), weights=weights.tolist())
    if keep != "all":
        cols, vals = (cols[:1], vals[:1]) if keep == "one" else (cols[::3], vals[::3])
    want = ix.context.rescore(ids, weights, cols, vals)
    assert context.rescore(ids, weights, cols, vals).tobytes() == want.tobytes()
    assert context.section_part(ids, weights, cols).tobytes() == ix.context.section_part(ids, weights, cols).tobytes()


_LOADED = {}


def _mapped_and_loaded(out, weight):
    """The folder's copy and a Searcher's index with section context `weight` (made once)."""
    if (str(out), weight) not in _LOADED:
        index = cold.ColdIndex.open(out) or made(out)
        _LOADED[str(out), weight] = index, pipekit.Searcher(out, settings=settings_of(out, {"section_context": weight})).index
    return _LOADED[str(out), weight]


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """A folder where one guide is copied with a word changed: its passages are repeats."""
    return twin_guides(tmp_path_factory.mktemp("twins"))


def test_repeats_collapsed_the_same_way(twins):
    queries = ["deploy the service with the rollout command", "canary green promote", "flag 3 dashboard"]
    assert_same_as_searcher(twins, queries, (1, 2, 5, 20))
    hits = made(twins).search(queries[0], 5, settings_of(twins, {}), None)
    assert any(p.also for p in hits)  # the comparison covered hits with repeats named on them


def search_cli(out, *args):
    return run_script("-m", "pipekit", "search", *args, "--set", f"paths.output={out}")


def test_the_command_prints_the_same_with_and_without_the_copy(sample):
    queries = ["when is the change freeze", "rollback a deploy", "the of and", "zzzz qqqq"]
    (sample / cold.CACHE).unlink(missing_ok=True)
    for args in (["--json", "-k", "4"], ["-k", "3"], ["--json", "-k", "2", "--set", "retrieval.section_context=0"]):
        full = search_cli(sample, *queries, *args)  # no copy: a Searcher answers, and writes it
        assert cold.fresh(sample)
        fast = search_cli(sample, *queries, *args)
        assert (fast.stdout, fast.stderr) == (full.stdout, full.stderr), args
    lines = [json.loads(x) for x in fast.stdout.splitlines()]
    assert lines and {"citation", "link", "also", "text"} <= set(lines[0])


def test_a_cold_search_loads_neither_arrow_nor_pandas(sample):
    search_cli(sample, "rollback a deploy")  # the copy exists after this
    assert cold.fresh(sample)
    for args in ([], ["--json"]):
        mods = packages(run_importing("-m", "pipekit", "search", "rollback a deploy", "who is on call", *args,
                                      "--set", f"paths.output={sample}"))
        assert "numpy" in mods and "pipekit" in mods
        assert not {"pyarrow", "pandas", "scipy"} & mods
    # What the copy does not cover goes the full way, and gives the full way's answer.
    mods = packages(run_importing("-m", "pipekit", "search", "rollback a deploy", "--in", "handbook/**",
                                  "--set", f"paths.output={sample}"))
    assert "pyarrow" in mods


def test_a_changed_index_is_never_answered_from_the_old_copy(sample, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(sample, out)
    made(out)
    terms = out / "04_terms.parquet"
    # Stage 04 writes through a temporary file and a rename: a new file, same bytes or not.
    shutil.copy2(terms, tmp_path / "t.parquet")
    os.replace(tmp_path / "t.parquet", terms)
    assert cold.ColdIndex.open(out) is None and not cold.fresh(out)
    proc = search_cli(out, "rollback a deploy", "--json", "-k", "2")
    assert cold.fresh(out)  # made again, from the files as they are now
    again = search_cli(out, "rollback a deploy", "--json", "-k", "2")
    assert proc.stdout == again.stdout
    # A stage 03 rerun since the index was built: the full path's error, not an old answer.
    import pyarrow.parquet as pq
    from pipekit.run.io import META_KEY

    chunks = out / "03_chunks.parquet"
    table = pq.read_table(chunks)
    meta = json.loads(table.schema.metadata[META_KEY])
    pq.write_table(table.replace_schema_metadata({META_KEY: json.dumps(dict(meta, fingerprint="another run"))}), chunks)
    failed = run_script("-m", "pipekit", "search", "rollback a deploy", "--set", f"paths.output={out}", check=False)
    assert failed.returncode == 1 and "changed since the index was built" in failed.stderr


def test_the_copy_is_not_written_while_the_index_changes(sample, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(sample, out, ignore=shutil.ignore_patterns(cold.CACHE))
    before = cold.stamps(out)
    searcher = pipekit.Searcher(out)
    os.utime(out / "04_postings.parquet", ns=(1, 1))  # a stage ran meanwhile
    assert cold.write(searcher, before) is None and not (out / cold.CACHE).exists()


def test_options_the_copy_does_not_cover_still_work(sample):
    search_cli(sample, "rollback a deploy")
    assert cold.fresh(sample)
    text = search_cli(sample, "when is the change freeze", "-k", "1", "--explain").stdout
    assert "qtf=" in text and "idf=" in text
    piped = subprocess.run([sys.executable, "-m", "pipekit", "search", "--set", f"paths.output={sample}"],
                           cwd=REPO, input="who is on call\n", capture_output=True, text=True, timeout=300)
    assert piped.returncode == 0 and "\nwho is on call\n" in piped.stdout
    bad = run_script("-m", "pipekit", "search", "rollback", "-k", "-1", "--set", f"paths.output={sample}", check=False)
    assert bad.returncode == 1 and "k must be a whole number > 0" in bad.stderr


def test_the_constants_it_shares_with_stage_05_agree():
    from pipekit.run.stages import load_stage

    stage = load_stage(5)
    assert cold.DEPTH == stage.DEPTH  # (BINCOUNT_SHARE is one constant, ranks', for both)
