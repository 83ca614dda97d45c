"""One query through a loaded Searcher the short way (pipekit/retrieve/warm.py, issue 47): every
Passage, score bits included, is what stage 05's path gives (`search_many`, which the short way
never takes), on the sample, a folder of repeated passages and the docs questions, with section
context on and off, repeats collapsed and kept, several k; and the pieces it is made of (the
vocabulary look-up of a list of words, the citation columns read together, Passages made
without the dataclass's __init__) are what they replace."""
import dataclasses
import shutil

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

import pipekit
from pipekit.index.analyzer import Analyzer
from pipekit.retrieve import warm
from pipekit.retrieve.warm import WORD
from pipekit.retrieve.passages import Passage, ranked_passages
from pipekit.retrieve.queries import TermIds
from pipekit.retrieve.ranks import rank
from pipekit.retrieve.rows import Records, table_reader

from conftest import REPO, twin_guides

SAMPLE_QUERIES = (REPO / "data" / "queries.txt").read_text(encoding="utf-8").splitlines()
EXTRA = ["rollback a deploy", "who is on call", "freeze freeze change", "zzzz qqqq", "the of and", "R", "x", "",
         "deploy deploy deploy rollback freeze on call pager escalation", "Déploiement du service", "naïve café"]
DOCS = REPO / "bench" / "out" / "docs_qa" / "ours"  # bench/docs_qa.py's index of real documentation
SETTINGS = [{}, {"section_context": 0}, {"repeats": "keep"}, {"section_context": 1.0, "repeats": "keep"},
            {"section_context": 0.25}]


def passages(hits):
    return [dict(p.to_dict(), score=p.score.hex()) for p in hits]


def assert_short_way_is_stage_05s(out, queries, ks, extras=SETTINGS):
    """Searcher.search (the short way) against search_many (stage 05's search), every field."""
    compared = 0
    for extra in extras:
        searcher = pipekit.Searcher(out, settings=extra)
        for k in ks:
            for q in queries:
                want = searcher.search_many([q], k)[0]
                got = searcher.search(q, k)
                assert passages(got) == passages(want), (extra, k, q)
                rows, scores = searcher.ranking(q, k)
                assert [s.hex() for s in scores.tolist()] == [p["score"] for p in passages(want)], (extra, k, q)
                assert rows.dtype == np.int64 and len(rows) == len(want)
                compared += len(want)
    return compared


@pytest.fixture(scope="module")
def sample(sample_default_run):
    return sample_default_run


def test_one_query_the_short_way_is_stage_05s_answer(sample):
    assert assert_short_way_is_stage_05s(sample, SAMPLE_QUERIES + EXTRA, (1, 3, 10, 40)) > 1000


def test_the_short_way_does_not_call_stage_05s_search(sample):
    searcher = pipekit.Searcher(sample)
    want = passages(searcher.search(SAMPLE_QUERIES[0], 5))
    real = searcher._stage.search
    searcher._stage = type("Stage", (), {"DEPTH": searcher._stage.DEPTH, "search": None})()
    assert passages(searcher.search(SAMPLE_QUERIES[0], 5)) == want
    # ... and what it does not cover still goes there: a filter, an explanation, feedback
    searcher._stage.search = lambda *a, **kw: (_ for _ in ()).throw(AssertionError("stage 05"))
    for call in (lambda: searcher.search(SAMPLE_QUERIES[0], 5, paths=["**"]),
                 lambda: searcher.search(SAMPLE_QUERIES[0], 5, explain=True)):
        with pytest.raises(AssertionError, match="stage 05"):
            call()
    searcher.settings["feedback"] = "rm3"
    with pytest.raises(AssertionError, match="stage 05"):
        searcher.search(SAMPLE_QUERIES[0], 5)
    searcher._stage.search = real


WORDS = sorted({w for q in SAMPLE_QUERIES for w in q.split()}) + ["the", "of", "R", "X", "B", "zzz", "Deploy",
                                                                    "deploys", "café", "2024", "x86_64"]


@settings(max_examples=150)
@given(st.lists(st.sampled_from(WORDS), min_size=0, max_size=12).map(" ".join), st.sampled_from([1, 2, 5, 25]),
       st.sampled_from(range(len(SETTINGS))))
def test_any_query_the_short_way_is_stage_05s(sample, text, k, which):
    searcher = _searchers(sample)[which]
    assert passages(searcher.search(text, k)) == passages(searcher.search_many([text], k)[0])


_LOADED: dict = {}


def _searchers(out, compiled: bool = True):
    if (out, compiled) not in _LOADED:
        _LOADED[(out, compiled)] = [pipekit.Searcher(out, settings=extra, compiled=compiled) for extra in SETTINGS]
    return _LOADED[(out, compiled)]


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """A folder where one guide is copied with a word changed: its passages are repeats."""
    return twin_guides(tmp_path_factory.mktemp("twins-warm"), steps=3, other="## Step 1")


def test_repeats_collapsed_the_short_way_as_stage_05_does(twins):
    queries = ["deploy the service with the rollout command", "canary green promote", "flag 2 dashboard",
               "step canary deploy"]
    assert_short_way_is_stage_05s(twins, queries, (1, 2, 3, 5, 20))
    hits = pipekit.Searcher(twins).search(queries[0], 5)
    assert any(p.also for p in hits)  # the comparison covered hits with repeats named on them


def test_one_query_the_short_way_on_real_documentation(tmp_path):
    # Node's API pages and six projects' Markdown docs: sections of many chunks, titles shared
    # across documents ("Options", "Usage"), headings and anchors of every kind.
    if not (DOCS / "04_postings.parquet").exists():
        pytest.skip(f"no docs index at {DOCS} (`python bench/docs_qa.py --build` then `python bench/docs_qa.py`)")
    out = tmp_path / "docs"
    shutil.copytree(DOCS, out, ignore=shutil.ignore_patterns("04_index.mmap"))
    questions = [line.split("\t")[-1] for line in (REPO / "bench" / "docs_qa_questions.tsv").read_text(
        encoding="utf-8").splitlines() if line.strip() and not line.startswith("#")]
    assert len(questions) > 50
    assert assert_short_way_is_stage_05s(out, questions, (5, 10, 50), SETTINGS[:3]) > 10_000


ASCII_BITS = ["the", "The", "what", "How", "deploys", "Deploying", "R", "I", "A", "x", "B2", "x86_64", "2024",
              "e.g.", "don't", "C++", "node.js", "--flag", "ROLLBACK", "  ", "\t", "-", "#"]


@settings(max_examples=300)
@given(st.lists(st.sampled_from(ASCII_BITS) | st.text(alphabet="aAbZ09 ._-'", max_size=8), max_size=12).map("".join),
       st.sampled_from([("english", "questions", "capitals"), ("english", "english", "none"), ("none", "none", "none"),
                        ("none", "questions", "capitals")]))
def test_an_ascii_querys_terms_are_its_words_terms_one_after_another(text, setting):
    # What the short way's kept words rest on (warm.WORD): each word is analysed on its own.
    analyzer = Analyzer(*setting)
    assert analyzer.analyze(text) == [t for w in WORD.findall(text) for t in analyzer.analyze(w)]


def test_a_querys_terms_from_kept_words_are_stage_05s(sample):
    searcher = pipekit.Searcher(sample)
    one = searcher._one
    for text in SAMPLE_QUERIES + EXTRA + [" ".join(EXTRA), "Deploy DEPLOY deploy deploys"]:
        want = searcher.index.query_terms([text])[0]
        for _ in range(2):  # the words analysed, then kept
            ids, weights = one.terms(text)
            assert ids == want.ids.tolist() and weights == want.weights.tolist(), text
    assert "deploys" in one._words and "Déploiement" not in one._words
    for limit in (1, 3):  # a full store is emptied, and its words found again
        one._words.clear()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(warm, "WORDS_KEPT", limit)
            for text in SAMPLE_QUERIES:
                assert one.terms(text) == (searcher.index.query_terms([text])[0].ids.tolist(),
                                           searcher.index.query_terms([text])[0].weights.tolist())
                assert len(one._words) <= limit


def _rescored_term_by_term(ctx, ids, weights, cols, vals):
    """The section context mixed in as its formula says, one term and one chunk at a time:
    each chunk's score plus (w · weight) · bm25(term, its section), in query order, over 1 + w."""
    total = vals.copy()
    for t, w in zip(ids, weights):
        lo, hi = ctx.pairs()[0][t], ctx.pairs()[0][t + 1]
        by_section = dict(zip(ctx.pairs()[1][lo:hi].tolist(), ctx.pairs()[2][lo:hi].tolist()))
        total += np.array([ctx.weight * w * by_section.get(s, 0.0) for s in ctx.codes[cols].tolist()])
    return total / (1 + ctx.weight)


@settings(max_examples=200)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from([1.0, 1.0, 2.0, 3.0, 0.5])), min_size=1, max_size=20),
       st.sampled_from([0, 3, 4]), st.sampled_from(["all", "one", "some"]))
def test_the_section_context_mixed_in_is_the_formula_term_by_term(sample, terms, which, keep):
    # SectionContext.rescore: stage 05's and the short way's (one implementation, issue 47).
    # Any terms, any weights; every matching chunk, one, some.
    ix = _searchers(sample, compiled=False)[which].index  # (the NumPy way's Searcher keeps the common rows)
    weight_of = {}
    for t, w in terms:
        weight_of.setdefault(t % len(ix.df), w)
    ids, weights = list(weight_of), list(weight_of.values())
    cols, vals = ix.scores(ids, weights=weights)
    if keep != "all":
        cols, vals = (cols[:1], vals[:1]) if keep == "one" else (cols[::3], vals[::3])
    want = _rescored_term_by_term(ix.context, ids, weights, cols, vals).tobytes()
    assert ix.context._common  # a Searcher keeps the common terms' rows ...
    assert ix.context.rescore(ids, weights, cols, vals).tobytes() == want
    with pytest.MonkeyPatch.context() as patch:  # ... stage 05 does not (and stage 05's arrays)
        patch.setattr(ix.context, "_common", {})
        assert ix.context.rescore(np.asarray(ids), np.asarray(weights), cols, vals).tobytes() == want
    assert not ix.context._rows.row.any()  # the scratch row is left as found: zeros
    parts = ix.context.section_part(ids, weights, cols)  # (an explanation's shares: the same parts)
    total = vals.copy()
    for part in parts:
        total += part
    assert (total / (1 + ix.context.weight)).tobytes() == want


@settings(max_examples=200)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from([1.0, 1.0, 2.0, 0.5])), min_size=1, max_size=12),
       st.sampled_from([0, 1]), st.sampled_from([20_000, 2]))
def test_the_short_ways_bm25_sums_are_stage_05s(sample, terms, which, kept):
    # OneQuery.scores: stage 05's Index.scores (chunks and score bits), its chunks as NumPy's
    # index type; each term's postings' views kept (forgotten past TERMS_KEPT) and used again.
    searcher = _searchers(sample)[which]
    ix, one = searcher.index, searcher._one
    weight_of = {}
    for t, w in terms:
        weight_of.setdefault(t % len(ix.df), w)
    ids, weights = list(weight_of), list(weight_of.values())
    want_cols, want_vals = ix.scores(ids, weights=weights)
    one._postings.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(warm, "TERMS_KEPT", kept)
        for _ in range(2):  # (the second time from the kept views)
            cols, vals = one.scores(ids, weights)
            assert cols.dtype == np.intp and cols.tolist() == want_cols.tolist()
            assert vals.tobytes() == want_vals.tobytes()
        assert len(one._postings) <= kept


def test_the_short_ways_bm25_sums_take_the_bincount_way_on_the_docs_questions(sample):
    # (the path the docs folder's questions take, summed the short way: not Index.scores)
    searcher = pipekit.Searcher(sample)
    one, ix = searcher._one, searcher.index
    ids, weights = one.terms("deploy rollback freeze on call pager escalation")
    assert len(ids) > 1
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ix, "scores", lambda *a, **k: pytest.fail("stage 05's Index.scores called"))
        cols, vals = one.scores(ids, weights)
    want = ix.scores(ids, weights=weights)
    assert cols.tolist() == want[0].tolist() and vals.tobytes() == want[1].tobytes()


def test_a_searchers_section_context_keeps_the_terms_views_and_mixes_the_same(sample):
    from pipekit.retrieve import sections

    ctx = pipekit.Searcher(sample, compiled=False).index.context  # (the NumPy way's: the compiled loop keeps none)
    start = ctx.pairs()[0]
    rare = [t for t in range(len(start) - 1) if t not in ctx._common and start[t + 1] > start[t]][:6]
    assert len(rare) == 6 and ctx._views == {}
    cols = np.arange(len(ctx.codes))
    vals = np.ones(len(cols))
    want = _rescored_term_by_term(ctx, rare, [1.0, 2.0] * 3, cols, vals).tobytes()
    assert ctx.rescore(rare, [1.0, 2.0] * 3, cols, vals).tobytes() == want
    assert set(ctx._views) == set(rare)  # kept as said ...
    assert ctx.rescore(rare, [1.0, 2.0] * 3, cols, vals).tobytes() == want  # ... and read back the same
    with pytest.MonkeyPatch.context() as patch:  # past VIEWS_KEPT, forgotten and made again
        patch.setattr(sections, "VIEWS_KEPT", 2)
        ctx._views.clear()
        assert ctx.rescore(rare, [1.0, 2.0] * 3, cols, vals).tobytes() == want
        assert len(ctx._views) <= 2
    assert not ctx._rows.row.any()


def test_the_common_terms_rows_are_the_most_common_within_the_bytes_allowed(sample):
    from pipekit.retrieve import sections

    ctx = pipekit.Searcher(sample, compiled=False).index.context  # (the NumPy way's: the compiled loop keeps none)
    start, secs, _ = ctx.pairs()
    counts = np.diff(start)
    common = {t for t in range(len(counts)) if counts[t] * sections.COMMON_SHARE > ctx.n}
    assert set(ctx._common) == common and len(common) > 10
    for t, row in ctx._common.items():
        assert row.tolist() == [ctx.weight * s for s in _section_row(ctx, t)]
    with pytest.MonkeyPatch.context() as patch:  # room for three rows: the three most common terms
        patch.setattr(sections, "COMMON_BYTES", 3 * 8 * ctx.n)
        ctx.keep_common_rows()
        assert len(ctx._common) == 3 and min(counts[list(ctx._common)]) >= sorted(counts[list(common)])[-3]


def _section_row(ctx, term):
    start, secs, scores = ctx.pairs()
    by_section = dict(zip(secs[start[term]:start[term + 1]].tolist(), scores[start[term]:start[term + 1]].tolist()))
    return [by_section.get(x, 0.0) for x in range(ctx.n)]


def test_the_section_context_of_one_chunk_adds_many_terms_in_query_order(sample):
    # One chunk and many terms its section holds: every term adds to it, and a sum in another
    # order (NumPy's reduction down one column is pairwise from 8 values) differs in the last bits.
    ctx = pipekit.Searcher(sample).index.context
    start, sections, _ = ctx.pairs()
    term_of_pair = np.repeat(np.arange(len(start) - 1), np.diff(start))
    differs = 0
    for section in range(0, ctx.n, 7):
        ids = term_of_pair[sections == section][:40].tolist()
        if len(ids) < 16:
            continue
        weights = [1.0 + (i % 3) / 4 for i in range(len(ids))]
        cols, vals = ctx.index.scores(ids, weights=weights)
        at = np.flatnonzero(ctx.codes[cols] == section)[:1]
        cols, vals = cols[at], vals[at]
        want = _rescored_term_by_term(ctx, ids, weights, cols, vals)
        assert ctx.rescore(ids, weights, cols, vals).tobytes() == want.tobytes(), section
        parts = ctx.section_part(ids, weights, cols)
        differs += (vals + np.add.reduce(parts, axis=0)) / (1 + ctx.weight) != want
    assert differs > 0  # the order mattered on some of them: the comparison could fail


@settings(max_examples=200)
@given(st.lists(st.sampled_from([0.5, 1.0, 1.25, 2.0, 7.5]) | st.floats(0.01, 100), max_size=300),
       st.sampled_from([1, 2, 10, 50]), st.sampled_from([500, 1]))
def test_the_k_best_are_the_first_k_of_stage_05s_ranking(values, k, pays):
    # Ties included (few distinct values), by one partition of all or by nth_largest's blocks
    vals = np.array(values, dtype=np.float64)
    cols = np.arange(len(vals), dtype=np.int32) * 3
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(warm, "PARTITION_PAYS", pays)
        got = warm.best(vals, k)
    order, _, _ = rank(cols, vals, np.arange(3 * len(vals) + 1), k, k)
    assert got.tolist() == order.tolist()


@settings(max_examples=100)
@given(st.lists(st.text(alphabet="abcdeüç_19", min_size=0, max_size=12), max_size=40))
def test_a_list_of_words_is_looked_up_as_an_arrow_array_is(words):
    vocabulary = pa.array(sorted({"a", "ab", "abc", "abcdefgh", "abcdefghi", "abcdefghij", "b", "bç", "cü",
                                  "abcdeabcde", "abcdeabcdf", "ü", "_1", "19", "eeeeeeeeeeee"}), pa.string())
    ids = TermIds(vocabulary)
    assert ids.few(words) == ids(pa.array(words, pa.string())).tolist()
    by_hash = {t: i for i, t in enumerate(vocabulary.to_pylist())}
    assert ids.few(words) == [by_hash.get(w, -1) for w in words]


def test_the_citation_columns_read_together_are_what_arrow_gives(sample):
    searcher = pipekit.Searcher(sample)
    rows = np.random.default_rng(3).permutation(len(searcher._texts))[:40]
    got = searcher._read_cited(rows)
    for name in searcher._cited.column_names:
        assert got[name] == searcher._cited.column(name).take(pa.array(rows)).to_pylist(), name
    # Nulls, slices, several chunks, columns of nulls only, lists with null items, no rows
    table = pa.table({"s": pa.chunked_array([pa.array(["a", None, "ünï", ""]).slice(1), pa.array(["x", "yz"])]),
                      "n": pa.array([None] * 5, pa.int32()), "i": pa.array([7, None, -3, 2**40, 1], pa.int64()),
                      "l": pa.array([["A", "b"], None, [], ["", None, "ç"], ["z"]], pa.list_(pa.large_string()))})
    read = table_reader(table)
    for at in ([4, 0, 3, 1, 2], [2, 2], []):
        want = table.take(pa.array(at, pa.int64())).to_pydict()
        assert read(np.array(at, dtype=np.int64)) == want


def _as_a_passage_reads_them(cols: dict) -> dict:
    """Columns as a Passage takes them: a null heading or anchor is "", a null trail []."""
    out = dict(cols)
    for name in ("heading", "anchor"):
        out[name] = [v or "" for v in cols[name]]
    out["heading_path"] = [list(v or []) for v in cols["heading_path"]]
    return out


def test_the_citation_records_joined_at_load_read_as_the_columns(sample):
    searcher = pipekit.Searcher(sample)
    assert searcher._records.ok
    rows = np.random.default_rng(5).permutation(len(searcher._texts))[:40]
    want = searcher._cited.append_column("text", searcher._texts).take(pa.array(rows)).to_pydict()
    assert searcher._records(rows) == _as_a_passage_reads_them(want)  # the kept texts too
    # Nulls here and there and everywhere, trails empty, of one empty title, of several, and
    # non-ASCII; several row groups; no rows
    s = lambda *v: pa.array(list(v), pa.string())  # noqa: E731
    table = pa.table({
        "chunk_id": pa.chunked_array([s("a#0", "a#1"), s("b#0", "ç#0", "d#0")]), "doc_id": s("a", "a", "b", "ç", "d"),
        "heading": s("A › B", None, "", "Ü", "x"), "page_start": pa.array([None, 3, None, 1, 2**40], pa.int64()),
        "page_end": pa.array([None, 4, None, 1, 2**40], pa.int64()), "page_label_start": s(None, "iv", None, "", "1"),
        "page_label_end": pa.array([None] * 5, pa.string()),
        "heading_path": pa.array([["A", "B"], None, [], [""], ["", "ü", ""]], pa.list_(pa.string())),
        "start_char": pa.array([0, 5, None, 7, 8], pa.int64()), "end_char": pa.array([5, 9, 1, 8, 9], pa.int64()),
        "format": s("markdown", None, "pdf", "html", None), "anchor": s("b", None, "", "ü-1", None)})
    records = Records(table)
    assert records.ok
    for at in ([4, 0, 3, 1, 2], [2, 2], [1], []):
        want = table.take(pa.array(at, pa.int64())).to_pydict()
        assert records(np.array(at, dtype=np.int64)) == _as_a_passage_reads_them(want), at
    # ... with their texts, in row groups of their own (one sliced out of a bigger array)
    texts = pa.chunked_array([pa.array(["zero", "één", "x"]).slice(1), pa.array(["", "ω" * 3, "five"]).slice(0, 3)])
    with_texts = Records(table, texts)
    for at in ([4, 0, 3, 1, 2], [2, 2], [1], []):
        want = table.append_column("text", texts).take(pa.array(at, pa.int64())).to_pydict()
        assert with_texts(np.array(at, dtype=np.int64)) == _as_a_passage_reads_them(want), at
    # ... and a text null: none read here (the Searcher reads them from their column)
    assert "text" not in Records(table, pa.array(["a", None, "b", "c", "d"]))(np.array([0, 2]))
    # A value holding a separator, or a trail a null item: not joined (the Searcher reads the columns)
    assert not Records(table.set_column(0, "chunk_id", s("a", "b\x1fc", "d", "e", "f"))).ok
    assert not Records(table.set_column(7, "heading_path", pa.array([["A\x1e"], None, [], [], []],
                                                                    pa.list_(pa.string())))).ok
    assert not Records(table.set_column(7, "heading_path", pa.array([[None], None, [], [], []],
                                                                    pa.list_(pa.string())))).ok
    # ... and then a Searcher reads the columns, to the same Passages
    want = [passages(searcher.search(q, 10)) for q in SAMPLE_QUERIES]
    searcher._records.ok = False
    assert [passages(searcher.search(q, 10)) for q in SAMPLE_QUERIES] == want


def test_passages_made_the_short_way_are_the_dataclasss():
    cols = {"chunk_id": ["a.md#0", "b.pdf#3"], "doc_id": ["a.md", "b.pdf"], "heading": ["A › B", None],
            "heading_path": [["A", "B"], None], "page_start": [None, 4], "page_end": [None, 5],
            "page_label_start": [None, "iv"], "page_label_end": [None, "v"], "start_char": [0, 10],
            "end_char": [5, 20], "format": ["markdown", "pdf"], "anchor": ["b", None]}
    made = ranked_passages("q", [2.5, 1.0], cols, ["one", "two"], "https://x.org/", [[], [{"chunk_id": "c"}]],
                           added=[("t", 0.5)], explain=[[{"term": "q"}], None], fusion=[None, {"bm25": 1.0}])
    want = [Passage(query="q", rank=1, score=2.5, chunk_id="a.md#0", doc_id="a.md", heading="A › B",
                    heading_path=["A", "B"], page_start=None, page_end=None, page_label_start=None,
                    page_label_end=None, start_char=0, end_char=5, text="one", format="markdown",
                    link="https://x.org/a.html#b", explain=[{"term": "q"}], added=[("t", 0.5)], also=[]),
            Passage(query="q", rank=2, score=1.0, chunk_id="b.pdf#3", doc_id="b.pdf", heading="",
                    heading_path=[], page_start=4, page_end=5, page_label_start="iv", page_label_end="v",
                    start_char=10, end_char=20, text="two", format="pdf", link="https://x.org/b.pdf#page=4",
                    added=[("t", 0.5)], fusion={"bm25": 1.0}, also=[{"chunk_id": "c"}])]
    assert made == want
    for got, w in zip(made, want):
        assert vars(got) == vars(w)  # every field, the ones equality skips included
        with pytest.raises(dataclasses.FrozenInstanceError):
            got.rank = 3
