"""Dense vectors fused with BM25 (pipekit/index/dense.py, pipekit/retrieve/fusion.py), offline.

Two models, both without any download: WordLlama's static model inside its wheel (in
requirements.txt), and a sentence-transformers folder of the BERT family, here a tiny
randomly initialised one that `tiny_bert` writes (config, tokenizer.json, safetensors),
run by pipekit's NumPy encoder.  What is checked: the vectors (normalised, in chunk order,
what the model gives for each chunk's heading and text), the fusion as its formula says,
against BM25's and the cosine's own rankings computed here; weight 0 and no model leave
BM25 bit for bit; both engines give the same outputs; another model makes 04 stale; a
missing folder is one line; --explain, `Searcher` and RM3 with vectors.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import REPO, run_script, write_config
from reference_folders import bert_weights

pytest.importorskip("wordllama")

COMPARED = ("04_chunks.parquet", "04_terms.parquet", "04_postings.parquet", "04_vectors.parquet",
            "05_results.parquet", "05_metrics.parquet")


def pipeline(config: Path, out: Path, *sets: str) -> subprocess.CompletedProcess:
    """`run_pipeline.py --config CONFIG --set paths.output=OUT [--set S ...]`, which must succeed."""
    args = ["run_pipeline.py", "--config", str(config), "--set", f"paths.output={out}"]
    for s in sets:
        args += ["--set", s]
    return run_script(*args)


def assert_same_outputs(a: Path, b: Path) -> None:
    """The index, the vectors and the results: same rows, same order, same values."""
    for name in COMPARED:
        x, y = pd.read_parquet(a / name), pd.read_parquet(b / name)
        assert len(x) > 0 and list(x.columns) == list(y.columns) and len(x) == len(y), name
        for col in x.columns:
            assert x[col].map(repr).tolist() == y[col].map(repr).tolist(), f"{name}:{col}"

WORDS = ("change freeze deploy release friday backup restore nightly replication slot port queue result "
         "listen page paged on call alarm incident probe clock drift rejected flag feature owner review "
         "the a is of to and when who which why what how after where").split()


def tiny_bert(folder: Path, seed: int = 0, pooling: str = "mean") -> Path:
    """A BERT-family sentence-transformers folder small enough to make in a test: random
    weights (2 layers, hidden 32, 4 heads), a WordPiece vocabulary of WORDS."""
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *WORDS])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.save(str(folder / "tokenizer.json"))
    h, inter, layers, heads = 32, 64, 2, 4
    rng = np.random.default_rng(seed)
    r = lambda *shape: (rng.standard_normal(shape) * 0.2).astype(np.float32)
    w = bert_weights(r, len(vocab), h, inter, layers)
    save_file(w, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({
        "model_type": "bert", "hidden_size": h, "num_attention_heads": heads, "num_hidden_layers": layers,
        "intermediate_size": inter, "max_position_embeddings": 64, "layer_norm_eps": 1e-12,
        "vocab_size": len(vocab)}))
    (folder / "1_Pooling").mkdir(exist_ok=True)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": h, "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_cls_token": pooling == "cls"}))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 48}))
    return folder


def naive_bert(folder: Path, text: str) -> np.ndarray:
    """The same encoder written out plainly, one text, one head at a time, in float64:
    what BertFolder's packed float32 passes must agree with."""
    from safetensors.numpy import load_file
    from scipy.special import erf
    from tokenizers import Tokenizer

    cfg = json.loads((folder / "config.json").read_text())
    w = {k: v.astype(np.float64) for k, v in load_file(str(folder / "model.safetensors")).items()}
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.enable_truncation(48)
    ids = tok.encode(text).ids
    ln = lambda x, p: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12) \
        * w[p + "weight"] + w[p + "bias"]
    lin = lambda x, p: x @ w[p + "weight"].T + w[p + "bias"]
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:len(ids)] \
        + w["embeddings.token_type_embeddings.weight"][0]
    x = ln(x, "embeddings.LayerNorm.")
    nh = cfg["num_attention_heads"]
    dh = cfg["hidden_size"] // nh
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q, k, v = (lin(x, p + f"attention.self.{n}.") for n in ("query", "key", "value"))
        heads = []
        for j in range(nh):
            s = q[:, j * dh:(j + 1) * dh] @ k[:, j * dh:(j + 1) * dh].T / np.sqrt(dh)
            a = np.exp(s - s.max(1, keepdims=True))
            heads.append((a / a.sum(1, keepdims=True)) @ v[:, j * dh:(j + 1) * dh])
        x = ln(x + lin(np.concatenate(heads, 1), p + "attention.output.dense."), p + "attention.output.LayerNorm.")
        u = lin(x, p + "intermediate.dense.")
        x = ln(x + lin(0.5 * u * (1 + erf(u / np.sqrt(2))), p + "output.dense."), p + "output.LayerNorm.")
    pooled = x.mean(0)
    return pooled / np.linalg.norm(pooled)


def sample_config(folder: Path, **retrieval) -> Path:
    return write_config(folder, documents={"input": str(REPO / "data" / "sample")},
                        retrieval={"queries": str(REPO / "data" / "queries.txt"),
                                   "qrels": str(REPO / "data" / "qrels.tsv"), **retrieval})


def vectors(out: Path) -> np.ndarray:
    t = pd.read_parquet(out / "04_vectors.parquet")
    assert t["chunk"].tolist() == list(range(len(t)))
    return np.stack(t["vector"].to_numpy()).astype(np.float32)


def expected_fusion(bm25: dict[int, float], cos: np.ndarray, w: float, depth: int = 100) -> list[tuple[int, float]]:
    """The fusion as pipekit/retrieve/fusion.py states it, from every chunk's BM25 score (`bm25`: chunk
    -> score, the chunks it scores) and cosine: union of the two top-`depth` lists, each
    score divided by its own list's best, convex combination; best first, ties by chunk order."""
    b_top = sorted(bm25, key=lambda c: (-bm25[c], c))[:depth]
    d_top = sorted(range(len(cos)), key=lambda c: (-cos[c], c))[:depth]
    bh, dh = max(bm25[c] for c in b_top), max(cos[c] for c in d_top)
    out = []
    for c in set(b_top) | set(d_top):
        f = (1 - w) * bm25.get(c, 0.0) / bh + w * cos[c] / dh
        if f > 0:
            out.append((c, f))
    return sorted(out, key=lambda cf: (-cf[1], cf[0]))


def chunk_numbers(out: Path) -> dict[str, int]:
    chunks = pd.read_parquet(out / "04_chunks.parquet")
    return dict(zip(chunks["chunk_id"], chunks["chunk"]))


# ------------------------------------------------------------------------------- the models

def test_bert_folder_agrees_with_the_encoder_written_out_and_batches_change_little(tmp_path):
    from pipekit.index.dense import BertFolder

    folder = tiny_bert(tmp_path / "m")
    model = BertFolder(folder)
    texts = ["When is the change freeze?", "who is paged after an alarm " * 12, "a", "", "Backup RESTORE nightly"]
    together = model.embed(texts)
    for t, v in zip(texts, together):
        np.testing.assert_allclose(v, naive_bert(folder, t), atol=2e-5)
        # Packing others beside it changes float32 rounding at most (stage 04 packs the same
        # texts together on every engine: test_vector_rows_pack_the_same_blocks_however_rows_arrive).
        np.testing.assert_allclose(model.embed([t])[0], v, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1, atol=1e-6)
    assert len(model.token_ids([" ".join(WORDS * 3)])[0]) == 48  # truncated at max_seq_length


def per_text_attend(model, q, k, v, starts, ctx):
    """Attention as BertFolder ran it before issue 37: one text at a time, its own tokens only."""
    h, dh = model.heads, model.dim // model.heads
    for a, z in zip(starts[:-1].tolist(), starts[1:].tolist()):
        qs, ks, vs = (m[a:z].reshape(z - a, h, dh).transpose(1, 0, 2).astype(np.float64) for m in (q, k, v))
        s = qs @ ks.transpose(0, 2, 1) / np.sqrt(dh)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        ctx[a:z] = (s @ vs).transpose(1, 0, 2).reshape(z - a, model.dim)


def test_padded_attention_groups_row_blocks_and_blocked_gelu_give_the_per_text_vectors_within_1e_5(tmp_path, monkeypatch):
    from scipy.special import erf

    from pipekit.index import dense

    model = dense.BertFolder(tiny_bert(tmp_path / "m"))
    # More texts than one attention group, lengths far apart: padding must change nothing.
    texts = [" ".join(WORDS[: 1 + i % 9] * (1 + i % 4)) for i in range(2 * dense.ATTENTION_GROUP + 3)]
    fast = model.embed(texts)
    monkeypatch.setattr(model, "_attend", lambda *a: per_text_attend(model, *a))
    monkeypatch.setattr(dense, "_gelu", lambda x: (x * (1 + erf(x / np.sqrt(2))) / 2).astype(np.float32))
    assert np.abs(fast - model.embed(texts)).max() <= 1e-5
    x = np.linspace(-30, 30, 2001, dtype=np.float32).reshape(1, -1)  # exp(-x²/2) far below float32's range
    assert np.abs(dense._gelu(x) - x * (1 + erf(x / np.sqrt(2))) / 2).max() <= 1e-5


def test_bert_blocks_on_one_thread_or_several_give_the_same_bits(tmp_path, monkeypatch):
    """The steps between the GEMMs run in row blocks and attention groups spread over a thread
    per core; a block's arithmetic must not depend on the thread that runs it (the local engine
    and a Dask worker may have different thread counts and must still write the same vectors)."""
    from concurrent.futures import ThreadPoolExecutor

    from pipekit.index import dense

    model = dense.BertFolder(tiny_bert(tmp_path / "m"))
    texts = [" ".join(WORDS[: 1 + i % 9] * (1 + i % 5)) for i in range(40)]
    monkeypatch.setattr(dense, "ROWS", 8)  # the tiny texts still make many row blocks ...
    monkeypatch.setattr(dense, "GELU_ROWS", 3)  # ... each of several GELU slices, the last one short
    monkeypatch.setattr(dense, "_POOL", ThreadPoolExecutor(4))
    several = model.embed(texts)
    monkeypatch.setattr(dense, "_POOL", ThreadPoolExecutor(1))
    one = model.embed(texts)
    assert several.tobytes() == one.tobytes()
    assert len({v.tobytes() for v in one}) == len(set(texts))  # not all the same vector


def test_bert_pool_has_a_thread_per_blas_thread_though_made_inside_the_one_thread_limit(tmp_path, monkeypatch):
    """The encoder limits BLAS to one thread and spreads row blocks over its own pool: a pool
    sized inside that limit had one thread, and the encoder ran on one core (34 % of the
    matmul rate instead of 64 %, bench/embed_speed.py)."""
    from threadpoolctl import threadpool_info

    from pipekit.index import dense

    blas = max(i.get("num_threads") or 1 for i in threadpool_info() if i.get("user_api") == "blas")
    monkeypatch.setattr(dense, "_POOL", None)
    dense.BertFolder(tiny_bert(tmp_path / "m")).embed(["a text", "another"])
    assert dense._POOL._max_workers == blas


def test_vector_rows_pack_the_same_blocks_however_rows_arrive(tmp_path, monkeypatch):
    """Batches of any size, partitions cut anywhere (moved to block starts by block_parts): the
    same texts are embedded together, so the vectors are the same bits (what lets a cluster,
    or a local run counting on a thread per core, write the local engine's 04_vectors)."""
    from pipekit.index import dense
    from pipekit.run.engine import RowRange

    monkeypatch.setattr(dense, "EMBED_BATCH", 4)
    monkeypatch.setattr(dense, "CUT_EVERY", 3)
    folder, packed = spy_on_packing(tmp_path, monkeypatch)
    table = chunk_table([f"d{i // 3}#{i % 3}" for i in range(11)])
    starts = dense.block_starts(table.column("chunk_id").to_pylist())
    sizes = np.diff(starts + [11]).tolist()
    assert len(starts) > 2 and max(sizes) <= 4  # cut by chunk id, at most EMBED_BATCH

    def vectors(cuts: list[int], batch: int) -> np.ndarray:
        parts = dense.block_parts([RowRange("x", a, b) for a, b in zip(cuts, cuts[1:])], starts)
        assert all(p.start in starts for p in parts)
        rows = []
        for p in parts:
            batches = table.slice(p.start, len(p)).to_batches(max_chunksize=batch)
            rows += [t for t, _ in dense.vector_rows(str(folder), batches, p.start,
                                                      dense.block_sizes(starts, p.start, p.stop))]
        out = pa.concat_tables(rows)
        assert out.column("chunk").to_pylist() == list(range(11))
        return np.stack(out.column("vector").to_pylist())

    one = vectors([0, 11], 11)
    assert packed == sizes
    for cuts, batch in (([0, 5, 11], 3), ([0, 2, 3, 9, 11], 1), ([0, 6, 11], 7)):
        packed.clear()
        assert np.array_equal(vectors(cuts, batch), one), (cuts, batch)
        assert packed == sizes


def test_a_document_added_in_the_middle_re_embeds_only_the_blocks_around_it(tmp_path, monkeypatch):
    """Blocks are cut by chunk id, so a new document moves only the cuts next to it: the
    other blocks' keys are the previous run's and their vectors are copied, the same bits
    a run without the previous vectors embeds."""
    from pipekit.index import dense

    monkeypatch.setattr(dense, "EMBED_BATCH", 6)
    monkeypatch.setattr(dense, "CUT_EVERY", 3)
    folder, packed = spy_on_packing(tmp_path, monkeypatch)
    ids = [f"d{i // 2}#{i % 2}" for i in range(40)]

    def blocks(table):
        return dense.block_sizes(dense.block_starts(table.column("chunk_id").to_pylist()), 0, len(table))

    def run(table, previous=None):
        out = list(dense.vector_rows(str(folder), table.to_batches(max_chunksize=7), 0, blocks(table), 1, previous))
        return pa.concat_tables([t for t, _ in out]), sum(n for _, n in out)

    before, copied = run(chunk_table(ids))
    assert copied == 0
    pq.write_table(before, tmp_path / "previous.parquet")
    after_ids = ids[:20] + ["new#0", "new#1", "new#2"] + ids[20:]
    packed.clear()
    after, copied = run(chunk_table(after_ids), str(tmp_path / "previous.parquet"))
    embedded = sum(packed)
    assert copied + embedded == len(after_ids) and embedded < len(after_ids) // 2 and copied > len(ids) // 2
    fresh, _ = run(chunk_table(after_ids))
    assert after.equals(fresh)  # vectors and block keys, bit for bit
    # Another model (or code) makes every key new: nothing is copied.
    assert run(chunk_table(after_ids), str(tmp_path / "previous.parquet"))[1] == copied
    other = tiny_bert(tmp_path / "other", seed=1)
    table = chunk_table(after_ids)
    out = list(dense.vector_rows(str(other), table.to_batches(), 0, blocks(table), 1, str(tmp_path / "previous.parquet")))
    assert sum(n for _, n in out) == 0


def spy_on_packing(tmp_path, monkeypatch):
    """A tiny model folder, and the list of how many chunks each embed_windows call packed."""
    from pipekit.index import dense

    folder = tiny_bert(tmp_path / "m")
    packed = []
    real = dense.BertFolder.embed_windows
    monkeypatch.setattr(dense.BertFolder, "embed_windows",
                        lambda self, heads, texts, done=None: packed.append(len(texts)) or real(self, heads, texts, done))
    return folder, packed


def chunk_table(ids: list[str]) -> pa.Table:
    """Chunks (chunk_id, heading, text) whose text follows from the id: a chunk keeps its text wherever it moves."""
    texts = [" ".join(WORDS[sum(map(ord, c)) % 30:sum(map(ord, c)) % 30 + 2 + len(c) % 5]) for c in ids]
    return pa.table({"chunk_id": ids, "heading": [c.split("#")[0] for c in ids], "text": texts})


def test_wordllama_loads_from_its_wheel_and_ignores_case(monkeypatch):
    from pipekit.index.dense import WordLlamaModel, identity

    # Any attempt to reach a network would fail here: WordLlama must load from its wheel.
    import socket
    monkeypatch.setattr(socket.socket, "connect", lambda *a, **k: (_ for _ in ()).throw(OSError("no network")))
    model = WordLlamaModel()
    v = model.embed(["When is the CHANGE FREEZE", "when is the change freeze", "nightly backup of the database"])
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1, atol=1e-6)
    assert np.array_equal(v[0], v[1])
    assert v[0] @ v[2] < 0.9
    ident = identity("wordllama")
    assert ident["model"].startswith("wordllama ") and len(ident["files"]["weights"]) == 16


# ------------------------------------------------------------------------- stage 04 and 05

@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The sample indexed with WordLlama; BM25 alone (top 100) as the reference."""
    root = tmp_path_factory.mktemp("dense")
    cfg = sample_config(root)
    pipeline(cfg, root / "bm25", "retrieval.top_k=100")
    pipeline(cfg, root / "wl", "indexing.dense_model=wordllama", "retrieval.dense_weight=0.4")
    return root, cfg


def test_a_chunks_text_to_embed_weights_its_own_heading_not_its_parents():
    from pipekit.index.dense import chunk_text, heading_repeats

    text = chunk_text("Guide › Install › Linux", "apt install it", 3)
    assert text == "Guide › Install › Linux\n\nLinux\n\nLinux\n\napt install it"
    assert text.count("Linux") == 3 and text.count("Guide") == 1 and text.count("Install") == 1
    assert chunk_text("Title", "body", 3) == "\n\n".join(["Title"] * 3 + ["body"])  # one level: a BEIR title
    assert chunk_text("A › B", "x", 1) == "A › B\n\nx" and chunk_text("", "body", 3) == chunk_text(None, "body") == "body"
    # WordLlama averages tokens, so repeating is weighting: BM25's heading_weight; a transformer reads it once.
    assert heading_repeats("wordllama", 3) == 3 and heading_repeats("wordllama", 0) == 1
    assert heading_repeats("/models/all-MiniLM-L6-v2", 3) == 1


def test_wordllama_vectors_are_each_chunks_heading_and_text_embedded(runs):
    from pipekit.index.dense import WordLlamaModel, chunk_text
    from pipekit.run.io import read_meta

    root, _ = runs
    v = vectors(root / "wl")
    chunks = pd.read_parquet(root / "wl" / "03_chunks.parquet")
    assert v.shape == (len(chunks), 256)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1, atol=1e-6)
    trail = int(np.flatnonzero(chunks["heading"].fillna("").str.contains("›"))[0])  # a chunk under two headings
    pick = [0, trail, len(chunks) // 2, len(chunks) - 1]
    hw = read_meta(root / "wl" / "04_terms.parquet")["corpus"]["heading_weight"]
    assert hw == 3  # the default: the own heading counts three times
    again = WordLlamaModel().embed([chunk_text(chunks["heading"][i], chunks["text"][i], hw) for i in pick])
    np.testing.assert_allclose(v[pick], again, atol=1e-6)
    assert "wordllama" in json.dumps(__import__("pipekit.run.io", fromlist=["x"]).read_meta(root / "wl" / "04_vectors.parquet"))


def test_hybrid_results_are_the_fusion_of_bm25_and_the_cosine(runs):
    from pipekit.index.dense import WordLlamaModel

    root, _ = runs
    bm25 = pd.read_parquet(root / "bm25" / "05_results.parquet")
    hyb = pd.read_parquet(root / "wl" / "05_results.parquet")
    number = chunk_numbers(root / "wl")
    v = vectors(root / "wl")
    changed = 0
    for qid, text in hyb.groupby("query_id", sort=False)["query"].first().items():
        b = bm25[bm25.query_id == qid]
        cos = v @ WordLlamaModel().embed([text])[0]
        want = expected_fusion({number[c]: s for c, s in zip(b.chunk_id, b.score)}, cos, 0.4)[:10]
        got = hyb[hyb.query_id == qid]
        assert [number[c] for c in got.chunk_id] == [c for c, _ in want], qid
        np.testing.assert_allclose(got.score, [f for _, f in want], rtol=1e-6)
        changed += list(got.chunk_id) != list(b.chunk_id[:10])
    assert changed > 0  # the cosine moved something, or the test would prove nothing


def test_a_chunk_only_the_cosine_found_gets_its_own_bm25_part(runs):
    """Chunk 3 is in the cosine's top 2, not BM25's: its BM25 part is its score looked up
    (`Index.scorer`), over the best of BM25's list, as for any chunk; without a scorer, 0."""
    from pipekit.retrieve.fusion import Dense
    from pipekit.retrieve.search import Searcher

    vectors_ = np.array([[0.0, 1.0], [0.8, 0.6], [0.6, 0.8], [1.0, 0.0]], np.float32)
    d, query = Dense(vectors_, "wordllama", 0.5), np.array([1.0, 0.0], np.float32)
    top = d.top(query[None], 2)[0]
    union, fused = d.fuse(np.array([0, 1, 2]), np.array([4.0, 2.0, 1.0]), query, top, 2,
                          exact=lambda chunks: np.full(len(chunks), 0.5))
    assert union.tolist() == [0, 1, 3]
    np.testing.assert_allclose(fused, [0.5 * 4 / 4 + 0.5 * 0.0, 0.5 * 2 / 4 + 0.5 * 0.8, 0.5 * 0.5 / 4 + 0.5 * 1.0])
    _, without = d.fuse(np.array([0, 1, 2]), np.array([4.0, 2.0, 1.0]), query, top, 2)
    assert without[2] == 0.5 * 1.0

    # The scorer gives a chunk the score stage 05's full scoring gives it, and 0 without a query term.
    index = Searcher(runs[0] / "bm25").index
    q = index.query_terms(["why drop the replication slot after the nightly base backup"])[0]
    cols, vals = index.scores(q.ids, weights=q.weights)
    assert len(cols) > 1
    np.testing.assert_allclose(index.scorer(q)(cols), vals, rtol=1e-12)
    absent = np.setdiff1d(np.arange(len(index.lengths)), cols)[:5]
    assert len(absent) and not index.scorer(q)(absent).any()


def test_no_model_or_weight_zero_is_bm25_bit_for_bit(runs, tmp_path):
    root, cfg = runs
    pipeline(cfg, tmp_path / "w0", "indexing.dense_model=wordllama", "retrieval.dense_weight=0", "retrieval.top_k=100")
    plain = pd.read_parquet(root / "bm25" / "05_results.parquet")
    zero = pd.read_parquet(tmp_path / "w0" / "05_results.parquet")
    assert zero.chunk_id.tolist() == plain.chunk_id.tolist()
    assert zero.score.tolist() == plain.score.tolist()
    assert not (root / "bm25" / "04_vectors.parquet").exists()
    # Back to no model: the old vectors go, and the results are BM25's again.
    pipeline(cfg, tmp_path / "w0", "retrieval.top_k=100")
    assert not (tmp_path / "w0" / "04_vectors.parquet").exists()
    assert pd.read_parquet(tmp_path / "w0" / "05_results.parquet").score.tolist() == plain.score.tolist()


def test_explain_shows_both_parts_and_the_fused_score(runs):
    root, cfg = runs
    proc = run_script("05_retrieval.py", "--config", str(cfg), "--set", f"paths.output={root / 'wl'}",
                      "--set", "indexing.dense_model=wordllama", "--set", "retrieval.dense_weight=0.4", "--explain")
    assert "cosine" in proc.stdout and "→ fused" in proc.stdout
    t = pd.read_parquet(root / "wl" / "05_results.parquet")
    f = pd.DataFrame(t["fusion"].tolist())
    np.testing.assert_allclose(f.fused, t.score, rtol=1e-12)
    np.testing.assert_allclose(0.6 * f.bm25_norm + 0.4 * f.cosine_norm, t.score, rtol=1e-12)
    assert (f.bm25 >= 0).all() and (f.cosine.abs() <= 1 + 1e-6).all()


def test_searcher_answers_as_stage_05_with_vectors(runs):
    from pipekit.retrieve.search import Searcher

    root, _ = runs
    hyb = pd.read_parquet(root / "wl" / "05_results.parquet")
    text = hyb["query"].iloc[0]
    hits = Searcher(root / "wl", settings={"dense_weight": 0.4, "explain": False}).search(text, k=10)
    first = hyb[hyb["query"] == text]
    assert [h.chunk_id for h in hits] == first.chunk_id.tolist()
    np.testing.assert_allclose([h.score for h in hits], first.score, rtol=1e-12)


def test_a_null_weight_is_the_models_measured_default(runs):
    from pipekit.index.dense import WordLlamaModel
    from pipekit.retrieve.fusion import WORDLLAMA_WEIGHT
    from pipekit.retrieve.search import Searcher

    root, _ = runs
    searcher = Searcher(root / "wl", settings={"dense_weight": None, "explain": False})
    assert searcher.index.dense.weight == WORDLLAMA_WEIGHT
    bm25 = pd.read_parquet(root / "bm25" / "05_results.parquet")
    number, v = chunk_numbers(root / "wl"), vectors(root / "wl")
    text = bm25["query"].iloc[0]
    b = bm25[bm25["query"] == text]
    want = expected_fusion({number[c]: s for c, s in zip(b.chunk_id, b.score)},
                           v @ WordLlamaModel().embed([text])[0], WORDLLAMA_WEIGHT)[:10]
    assert [number[h.chunk_id] for h in searcher.search(text, k=10)] == [c for c, _ in want]


def test_rm3_with_vectors_fuses_the_expanded_query_with_the_cosine(runs, tmp_path):
    from pipekit.index.dense import WordLlamaModel

    root, cfg = runs
    pipeline(cfg, tmp_path / "rm3", "retrieval.feedback=rm3", "retrieval.top_k=100")
    pipeline(cfg, tmp_path / "both", "retrieval.feedback=rm3", "indexing.dense_model=wordllama",
             "retrieval.dense_weight=0.4")
    rm3 = pd.read_parquet(tmp_path / "rm3" / "05_results.parquet")
    both = pd.read_parquet(tmp_path / "both" / "05_results.parquet")
    number, v = chunk_numbers(tmp_path / "both"), vectors(tmp_path / "both")
    for qid, text in both.groupby("query_id", sort=False)["query"].first().items():
        b = rm3[rm3.query_id == qid]
        want = expected_fusion({number[c]: s for c, s in zip(b.chunk_id, b.score)},
                               v @ WordLlamaModel().embed([text])[0], 0.4)[:10]
        got = both[both.query_id == qid]
        assert [number[c] for c in got.chunk_id] == [c for c, _ in want], qid


def test_a_rerun_that_reuses_counts_writes_the_vectors_a_forced_run_writes(tmp_path):
    import shutil

    docs = tmp_path / "docs"
    shutil.copytree(REPO / "data" / "sample", docs)
    cfg = write_config(tmp_path, documents={"input": str(docs)},
                       retrieval={"queries": str(REPO / "data" / "queries.txt"), "qrels": None})
    pipeline(cfg, tmp_path / "out", "indexing.dense_model=wordllama")
    # A setting of stage 04 that is not the vectors' reruns it, and copies every vector.
    proc = pipeline(cfg, tmp_path / "out", "indexing.dense_model=wordllama", "indexing.k1=1.3")
    n = len(pd.read_parquet(tmp_path / "out" / "04_vectors.parquet"))
    assert f"04_vectors.parquet: 0 chunks embedded by wordllama" in proc.stdout
    assert f"{n:,} copied from the previous run" in proc.stdout
    page = docs / "handbook" / "operations" / "deploys.md"
    page.write_text(page.read_text() + "\n## Rollback drills\n\nEvery quarter we roll a release back on purpose.\n")
    proc = pipeline(cfg, tmp_path / "out", "indexing.dense_model=wordllama")
    assert "copied from the previous run" in proc.stdout  # the blocks before deploys.md's chunks
    for _ in range(2):  # the second --force has previous vectors beside it, and copies none
        forced = run_script("run_pipeline.py", "--config", str(cfg), "--set", f"paths.output={tmp_path / 'forced'}",
                            "--set", "indexing.dense_model=wordllama", "--force")
        assert "copied from the previous run" not in forced.stdout
    for name in ("04_chunks.parquet", "04_vectors.parquet", "05_results.parquet"):
        x, y = pd.read_parquet(tmp_path / "out" / name), pd.read_parquet(tmp_path / "forced" / name)
        assert x.drop(columns="text", errors="ignore").map(repr).equals(
            y.drop(columns="text", errors="ignore").map(repr)), name
    assert np.array_equal(vectors(tmp_path / "out"), vectors(tmp_path / "forced"))


# ----------------------------------------------------------------------- a model folder

def test_model_folder_end_to_end_and_another_model_makes_04_stale(tmp_path):
    from pipekit.index.dense import BertFolder, chunk_text

    folder = tiny_bert(tmp_path / "model")
    cfg = sample_config(tmp_path, dense_weight=0.5)
    out = tmp_path / "out"
    pipeline(cfg, out, f"indexing.dense_model={folder}")
    chunks = pd.read_parquet(out / "03_chunks.parquet")
    v = vectors(out)
    assert v.shape == (len(chunks), 32)
    np.testing.assert_allclose(v[:3], BertFolder(folder).embed(
        [chunk_text(h, t) for h, t in zip(chunks.heading[:3], chunks.text[:3])]), atol=1e-6)
    status = lambda: run_script("run_pipeline.py", "--config", str(cfg), "--set", f"paths.output={out}",
                                "--set", f"indexing.dense_model={folder}", "--status").stdout
    assert "stale" not in status()
    from pipekit.retrieve.fusion import FOLDER_WEIGHT
    from pipekit.retrieve.search import Searcher
    assert Searcher(out, settings={"dense_weight": None}).index.dense.weight == FOLDER_WEIGHT
    tiny_bert(folder, seed=1)  # the same folder, other weights
    assert "the model of indexing.dense_model changed" in status()
    pipeline(cfg, out, f"indexing.dense_model={folder}")
    assert not np.allclose(vectors(out), v)


def test_a_missing_or_broken_model_folder_is_one_line(tmp_path):
    cfg = sample_config(tmp_path)
    for folder, says in ((tmp_path / "nowhere", "is not a folder"), (tmp_path / "empty", "lacks config.json")):
        if folder.name == "empty":
            folder.mkdir()
        proc = run_script("run_pipeline.py", "--config", str(cfg), "--set", f"paths.output={tmp_path / 'out'}",
                          "--set", f"indexing.dense_model={folder}", check=False)
        assert proc.returncode != 0
        assert says in proc.stderr and "Traceback" not in proc.stderr
        assert len([line for line in proc.stderr.splitlines() if "dense_model" in line]) == 1


# ------------------------------------------------------------------------------ engines

@pytest.fixture(scope="module")
def two_workers():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, silence_logs=50) as lc:
        yield lc.scheduler_address


def test_both_engines_give_the_same_vectors_and_results(tmp_path, two_workers):
    folder = tiny_bert(tmp_path / "model")
    cfg = sample_config(tmp_path, dense_weight=0.4)
    for model in ("wordllama", str(folder)):
        name = Path(model).name
        pipeline(cfg, tmp_path / f"local-{name}", f"indexing.dense_model={model}")
        pipeline(cfg, tmp_path / f"dask-{name}", f"indexing.dense_model={model}", "engine.kind=dask",
                 f"engine.address={two_workers}", "engine.partition_rows=7")
        assert_same_outputs(tmp_path / f"local-{name}", tmp_path / f"dask-{name}")
        assert np.array_equal(vectors(tmp_path / f"local-{name}"), vectors(tmp_path / f"dask-{name}"))


def embedded_and_copied(stdout: str) -> tuple[int, int]:
    """Stage 04's summary of its vectors: how many chunks it embedded, how many it copied."""
    line = next(l for l in stdout.splitlines() if "04_vectors.parquet: " in l and " embedded by " in l)
    embedded = int(line.split("04_vectors.parquet: ")[1].split(" chunks")[0].replace(",", ""))
    copied = int(line.split(", ")[-1].split(" copied")[0].replace(",", "")) if "copied from" in line else 0
    return embedded, copied


@pytest.mark.parametrize("model", ["wordllama", "folder"])
def test_a_rerun_on_the_workers_embeds_only_the_changed_blocks_and_equals_a_forced_run(tmp_path, two_workers, model):
    """The Dask twin of the local reuse test: the workers copy unchanged blocks from the
    previous run's part files (they write beside them), and the vectors are a --force run's."""
    import shutil

    spec = "wordllama" if model == "wordllama" else str(tiny_bert(tmp_path / "model"))
    docs = tmp_path / "docs"
    shutil.copytree(REPO / "data" / "sample", docs)
    cfg = write_config(tmp_path, documents={"input": str(docs)},
                       retrieval={"queries": str(REPO / "data" / "queries.txt"), "qrels": None})
    dask = (f"indexing.dense_model={spec}", "engine.kind=dask", f"engine.address={two_workers}",
            "engine.partition_rows=7")
    first = embedded_and_copied(pipeline(cfg, tmp_path / "out", *dask).stdout)
    before = pd.read_parquet(tmp_path / "out" / "04_vectors.parquet", columns=["block"])
    assert first == (len(before), 0)
    page = docs / "handbook" / "operations" / "deploys.md"
    page.write_text(page.read_text() + "\n## Rollback drills\n\nEvery quarter we roll a release back on purpose.\n")
    embedded, copied = embedded_and_copied(pipeline(cfg, tmp_path / "out", *dask).stdout)
    after = pd.read_parquet(tmp_path / "out" / "04_vectors.parquet", columns=["block"])
    n = len(after)
    # Exactly the chunks of blocks the first run did not have (deploys.md's) were embedded.
    assert embedded == (~after.block.isin(set(before.block))).sum() and embedded + copied == n
    assert 0 < embedded < n, (embedded, copied)
    forced = run_script("run_pipeline.py", "--config", str(cfg), "--set", f"paths.output={tmp_path / 'forced'}",
                        *[a for s in dask for a in ("--set", s)], "--force")
    assert embedded_and_copied(forced.stdout) == (n, 0)
    assert np.array_equal(vectors(tmp_path / "out"), vectors(tmp_path / "forced"))  # bit for bit
    from conftest import assert_same_outputs as same_rows_and_provenance  # every output, and no qrels here

    same_rows_and_provenance(tmp_path / "out", tmp_path / "forced")


def test_an_edit_that_keeps_a_chunks_length_embeds_its_block_again(tmp_path, monkeypatch):
    """A block key must hash the texts, not their lengths: `rollback` -> `rollforw` leaves every
    length as it was, and a key of lengths copied the stale vector into the new run."""
    from pipekit.index import dense

    monkeypatch.setattr(dense, "EMBED_BATCH", 4)
    monkeypatch.setattr(dense, "CUT_EVERY", 2)
    folder, packed = spy_on_packing(tmp_path, monkeypatch)
    ids = [f"d{i // 2}#{i % 2}" for i in range(8)]
    table = chunk_table(ids)
    sizes = dense.block_sizes(dense.block_starts(ids), 0, len(ids))

    def run(t, previous=None):
        out = list(dense.vector_rows(str(folder), t.to_batches(), 0, sizes, 1, previous))
        return pa.concat_tables([o for o, _ in out]), sum(n for _, n in out)

    before, _ = run(table)
    pq.write_table(before, tmp_path / "previous.parquet")
    texts = table.column("text").to_pylist()
    edited = texts[5][::-1] if texts[5][::-1] != texts[5] else texts[5].upper()
    assert len(edited) == len(texts[5]) and edited != texts[5]
    texts[5] = edited
    changed = table.set_column(table.schema.get_field_index("text"), "text", pa.array(texts))
    packed.clear()
    after, copied = run(changed, str(tmp_path / "previous.parquet"))
    assert copied == len(ids) - sum(packed) and 0 < sum(packed) < len(ids)  # only the edited block
    fresh, _ = run(changed)
    assert after.equals(fresh)  # the edited chunk's new vector, not the stale one
    vec = np.stack(after.column("vector").to_pylist())
    assert not np.array_equal(vec[5], np.stack(before.column("vector").to_pylist())[5])
