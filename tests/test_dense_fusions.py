"""bench/hybrid.py --fusions: the alternatives it compares with pipekit/retrieve/fusion.py's are the
formulas bench/README.md names (each fused score up to a shift: only their order counts)."""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from conftest import REPO

spec = importlib.util.spec_from_file_location("hybrid_bench", REPO / "bench" / "hybrid.py")
hybrid = importlib.util.module_from_spec(spec)
sys.modules["hybrid_bench"] = hybrid
spec.loader.exec_module(hybrid)

# Chunks 0-3: BM25 found 0, 1 and 2 (its top 2: 0 and 1); the cosine's top 2 is 3 and 1.
VECTORS = np.array([[0.0, 1.0], [0.8, 0.6], [0.6, 0.8], [1.0, 0.0]], np.float32)
COLS, VALS, QUERY = np.array([0, 1, 2]), np.array([4.0, 2.0, 1.0]), np.array([1.0, 0.0], np.float32)
COS = np.array([0.0, 0.8, 0.6, 1.0])


def fused(norm: str, w: float = 0.5, bound: float = 0.0):
    d = hybrid.fusion_class()(VECTORS, "wordllama", w)
    d.norm, d.bound = norm, bound
    return d.fuse(COLS, VALS, QUERY, d.top(QUERY[None], 2)[0], 2)


def same_up_to_a_shift(got, want):
    union, scores = got
    assert union.tolist() == [0, 1, 3]  # the union of both top lists
    np.testing.assert_allclose(scores - scores.min(), np.asarray(want) - min(want), atol=1e-9)


def test_best_is_the_pipelines_own_fusion():
    from pipekit.retrieve.fusion import Dense

    d = Dense(VECTORS, "wordllama", 0.5)
    want = d.fuse(COLS, VALS, QUERY, d.top(QUERY[None], 2)[0], 2)
    got = fused("best")
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()


@pytest.mark.parametrize("norm, bm25, cosine", [
    # (x − min)/(max − min) over each top list, 0 below it (chunk 0's cosine is under the list's)
    ("min-max", [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]),
    # (x − mean)/std over each top list; outside a list, that list's lowest
    ("z-score", [1.0, -1.0, -1.0], [-1.0, -1.0, 1.0]),
    # 1/(60 + rank) in each list, 0 outside it
    ("rrf", [1 / 61, 1 / 62, 0.0], [0.0, 1 / 62, 1 / 61]),
    # BM25 over the query's bound (8 here), the cosine as it is
    ("bound", [0.5, 0.25, 0.0], [0.0, 0.8, 1.0]),
])
def test_each_alternative_scales_as_documented(norm, bm25, cosine):
    want = [0.5 * b + 0.5 * c for b, c in zip(bm25, cosine)]
    same_up_to_a_shift(fused(norm, bound=8.0), want)


def test_the_trail_alone_variants_fuse_the_combined_cosine():
    """bench/README's "heading trail alone": each chunk's cosine becomes combine(its own, its
    trail's) in both the cosine's top list and the fusion.  Chunk 0 (cosine 0) sits under the
    trail the query points at (cosine 1): with the larger of the two it joins the cosine's top 2
    (ahead of chunk 1, 0.8) and scores 0.5 · 4/4 + 0.5 · 1/1."""
    trails, codes = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32), np.array([0, 1, 1, 1])
    d = hybrid.trail_fusion(np.maximum, trails, codes)(VECTORS, "wordllama", 0.5)
    top = d.top(QUERY[None], 2)[0]
    assert top[0].tolist() == [0, 3] and top[1].tolist() == [1.0, 1.0]
    union, scores = d.fuse(COLS, VALS, QUERY, top, 2)
    assert union.tolist() == [0, 1, 3]
    np.testing.assert_allclose(scores, [0.5 * 1 + 0.5 * 1, 0.5 * 0.5 + 0.5 * 0.8, 0.5 * 0 + 0.5 * 1])
    # the chunk's cosine plus half the trail's: chunk 0 gets 0.5 and stays below chunk 1's 0.8
    d = hybrid.trail_fusion(lambda c, t: c + 0.5 * t, trails, codes)(VECTORS, "wordllama", 0.5)
    top = d.top(QUERY[None], 2)[0]
    assert top[0].tolist() == [1, 3]
    np.testing.assert_allclose(top[1], [0.8, 1.0], rtol=1e-6)


def test_function_words_leave_the_average_and_nothing_else_changes():
    """bench/README's "function words left out of the average": a query of function words
    and one content word embeds as that word; a text without function words, a word joined
    by - or _ (on-call, is_valid) and a text of nothing but function words embed as the model
    embeds them.  Cutting them from the text instead changes the neighbours' tokens."""
    pytest.importorskip("wordllama")
    from pipekit.index.dense import load_model

    model = load_model("wordllama")
    got = hybrid.content_embed(model, ["What is the HEAT of it?", "heat?", "the on-call is_valid flag", "what is it"])
    want = model.embed(["heat?", "on-call is_valid flag", "what is it"])
    np.testing.assert_allclose(got[0], want[0], atol=1e-6)
    np.testing.assert_allclose(got[1:], want, atol=1e-6)
    assert hybrid.cut_function_words("The on-call rotation\n\nThe pager") == "-call rotation\n\npager"


def test_one_place_per_group_keeps_each_groups_best_in_order_and_the_rest_below():
    # --misses: "one place per level-2 section (or document)": a's second passage and b's second
    # give up their places to c, the next group, and stay reachable after every group's best.
    items = ["a1", "a2", "b1", "a3", "b2", "c1"]
    groups = ["a", "a", "b", "a", "b", "c"]
    assert hybrid.one_per_group(items, groups) == ["a1", "b1", "c1", "a2", "a3", "b2"]
    assert hybrid.one_per_group(["x", "y"], ["g", "h"]) == ["x", "y"]  # one item a group: unchanged


def test_reserve_moves_another_lists_best_section_to_its_place_unless_already_above():
    # --misses: "the cosine's first at 3rd": its best section takes distinct-section place 3
    # (index 2), pushing the fused ranking's third and later down by one; already in the top 3: no change.
    ranked = [("d", ("a",), "A"), ("d", ("a",), "A"), ("d", ("b",), "B"), ("e", ("c",), "C"), ("f", ("x",), "X")]
    moved = hybrid.reserve(ranked, [("f", ("x",), "X")], 2)
    assert [x[2] for x in moved] == ["A", "A", "B", "X", "C"]
    assert hybrid.reserve(ranked, [("d", ("b",), "B")], 2) == ranked
    assert hybrid.reserve(ranked, [], 2) == ranked
