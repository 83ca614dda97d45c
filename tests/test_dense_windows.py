"""Long chunks embedded whole (pipekit/index/dense.py BertFolder.windows, pipekit/retrieve/fusion.py).

A chunk longer than the model's window (max_seq_length word pieces) gets vectors for windows
that cover all of it, each later one repeating the heading; 04_vectors.parquet keeps one row
per chunk (`vector`: the first window, what a truncating encoder gives; `windows`: the later
ones), and the chunk's cosine is its best window's.  Checked: the windows' tokens (every word
piece of the text in one, the heading in each, the overlap), their vectors (the encoder's own
on those tokens), and end to end a question whose answer sits only in a long chunk's tail,
found by the cosine with windows and not without.  The folders are tests/reference_folders.py's
(max_seq_length 24, so a few sentences make a long chunk).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import reference_folders as rf
from conftest import REPO, run_script, write_config

LONG = ("the nightly backup and the restore probe is paged to the owner when the alarm is on ; "
        "the replication slot and the deploy queue and the release review and the feature flag ; ")
TAIL = "the clock drift is rejected after friday when the port is listen"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from pipekit.index.dense import BertFolder

    return BertFolder(rf.build(tmp_path_factory.mktemp("m") / "mean", "mean"))


def test_windows_cover_every_word_piece_with_the_heading_in_each(model):
    heading, body = "backup restore", LONG * 3 + TAIL
    text = heading + "\n\n" + body
    (wins,) = model.windows([text], [heading + "\n\n"])
    ids = model._whole.encode(text).ids
    head = model._whole.encode(heading, add_special_tokens=False).ids
    assert len(ids) > 3 * model.max_len and len(wins) >= 3
    assert wins[0].tolist() == model.token_ids([text])[0].tolist()  # the first: what truncation gives
    body_ids = ids[1 + len(head):-1]
    covered = list(wins[0][1 + len(head):-1])
    for w in wins[1:]:
        assert len(w) <= model.max_len and w[0] == ids[0] and w[-1] == ids[-1]
        assert w[1:1 + len(head)].tolist() == head  # the heading again
        piece = w[1 + len(head):-1].tolist()
        # Each window's stretch starts inside the one before (the overlap) and goes on from there.
        start = len(covered) - min(len(covered), len(piece), 5)
        assert body_ids[start:start + len(piece)] == piece
        covered = body_ids[:start + len(piece)]
    assert covered == body_ids  # the last word piece is in a window
    short = model.windows(["backup"], [""])[0]
    assert len(short) == 1


def test_window_vectors_are_the_encoders_own_and_the_first_is_the_truncated_chunks(model):
    heads, texts = ["backup restore", "", "owner"], [LONG * 2 + TAIL, "the change freeze", "who is paged"]
    first, extra, owner, tokens = model.embed_windows(heads, texts)
    from pipekit.index.dense import chunk_text

    np.testing.assert_allclose(first, model.embed([chunk_text(h, t) for h, t in zip(heads, texts)]), atol=1e-6)
    assert owner.tolist() == [0] * len(extra) and len(extra) >= 2
    wins = model.windows([chunk_text(heads[0], texts[0])], [heads[0] + "\n\n"])[0]
    alone = np.concatenate([model.stored(model.forward([w])) for w in wins[1:]])
    np.testing.assert_allclose(extra, alone, atol=1e-5)
    assert tokens == sum(len(w) for w in wins) + len(model.token_ids([texts[1]])[0]) + \
        len(model.token_ids([chunk_text(heads[2], texts[2])])[0])


def test_a_question_answered_only_in_a_long_chunks_tail_is_found_by_its_windows(tmp_path, model):
    from pipekit.index.dense import read_vectors, read_windows
    from pipekit.retrieve.fusion import Dense

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "long.md").write_text("# backup restore\n\n" + LONG * 3 + TAIL + "\n")
    for i, words in enumerate(["the change freeze is friday", "who owns the deploy queue",
                               "the release review and the feature flag owner", "page the incident owner"]):
        (docs / f"short{i}.md").write_text(f"# review {i}\n\n{words}\n")
    folder = rf.build(tmp_path / "model", "mean")
    # The question: the words of the long chunk's last window, as a user might paste them.
    text = "backup restore\n\n" + LONG * 3 + TAIL
    last = model.windows([text], ["backup restore\n\n"])[0][-1]
    question = model.tokenizer.decode(last[1:-1].tolist())
    assert "rejected" in question and "nightly" not in question  # only the tail's words
    (tmp_path / "queries.txt").write_text(question + "\n")
    config = write_config(tmp_path, documents={"input": str(docs)},
                          indexing={"dense_model": str(folder)},
                          retrieval={"queries": str(tmp_path / "queries.txt"), "dense_weight": 1.0})
    run_script("run_pipeline.py", "--config", str(config))
    out = tmp_path / "out"
    chunks = pd.read_parquet(out / "04_chunks.parquet")
    vec = pd.read_parquet(out / "04_vectors.parquet")
    assert len(vec) == len(chunks) and vec["chunk"].tolist() == list(range(len(chunks)))  # one row a chunk
    long_chunk = int(chunks.index[chunks["doc_id"].str.contains("long")][0])
    n_windows = vec["windows"].map(len).tolist()
    assert n_windows[long_chunk] >= 2 and sum(n_windows) == n_windows[long_chunk]
    results = pd.read_parquet(out / "05_results.parquet")
    # The same vectors, the chunk's cosine from its first window alone: the tail is unseen.
    v, windows = read_vectors(out / "04_vectors.parquet", len(chunks)), read_windows(out / "04_vectors.parquet")
    q = model.embed([question], kind="query")
    best = Dense(v, str(folder), 1.0, windows, rule="best").chunk_cosines(np.arange(len(v)), q[0])
    first = Dense(v, str(folder), 1.0, windows, rule="first").chunk_cosines(np.arange(len(v)), q[0])
    assert best.argmax() == long_chunk and first.argmax() != long_chunk
    # indexing.dense_windows false: truncated, as before windows; no later windows stored.
    run_script("run_pipeline.py", "--config", str(config), "--set", f"paths.output={tmp_path / 'cut'}",
               "--set", "indexing.dense_windows=false")
    cut = pd.read_parquet(tmp_path / "cut" / "04_vectors.parquet")
    assert cut["windows"].map(len).sum() == 0
    np.testing.assert_allclose(np.stack(cut["vector"].to_numpy()), v, atol=1e-6)
    cut_results = pd.read_parquet(tmp_path / "cut" / "05_results.parquet")
    # Stage 05 (the cosine alone, WINDOW_RULE's half way to the best window) ranks the long
    # chunk higher with its windows than truncated.
    rank = lambda r: int(r[r["doc_id"].str.contains("long")]["rank"].min())
    assert rank(results) < rank(cut_results)
    assert best[long_chunk] > first[long_chunk] + 0.1 and np.array_equal(np.delete(best, long_chunk),
                                                                          np.delete(first, long_chunk))


@pytest.mark.parametrize("rule", ["first", "best", "mean", "mix:0.5", "meanvec"])
def test_each_rule_makes_a_chunks_cosine_from_its_windows_and_top_agrees(rule):
    """chunk_cosines (exact) and top (rough, then exact) by each rule, against the rule written out."""
    from pipekit.index.dense import normalise
    from pipekit.retrieve.fusion import Dense

    rng = np.random.default_rng(3)
    v = normalise(rng.standard_normal((40, 16)))
    owner = np.sort(rng.integers(0, 40, 30))
    extra = normalise(rng.standard_normal((30, 16)))
    q = normalise(rng.standard_normal((1, 16)))[0]
    d = Dense(v, "wordllama", 0.5, (extra, owner), rule=rule)
    expected = []
    for c in range(40):
        cos = np.r_[v[c] @ q, extra[owner == c] @ q].astype(np.float64)
        mean_vec = np.r_[v[c][None], extra[owner == c]].sum(axis=0)
        expected.append({"first": cos[0], "best": cos.max(), "mean": cos.mean(),
                         "mix:0.5": cos[0] + 0.5 * (cos.max() - cos[0]),
                         "meanvec": mean_vec @ q / np.linalg.norm(mean_vec)}[rule])
    np.testing.assert_allclose(d.chunk_cosines(np.arange(40), q), expected, atol=1e-6)
    np.testing.assert_allclose(d.rough(q[None])[:, 0], expected, atol=1e-5)
    top, vals = d.top(q[None], 5)[0]
    assert sorted(top.tolist()) == sorted(np.argsort(expected)[::-1][:5].tolist())
