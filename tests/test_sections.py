"""Section context (pipekit/retrieve/sections.py): which chunks share a section, and scores that
equal BM25 over chunks mixed with BM25 over sections, computed here by hand."""
import math
from collections import Counter

import pyarrow as pa
import pytest

import pipekit
from pipekit.index.analyzer import Analyzer
from pipekit.run.config import load_config
from pipekit.run.errors import ConfigError
from pipekit.run.io import ParquetSink
from pipekit.retrieve.sections import section_codes

from conftest import run_script, write_config

# (doc, heading_path, text): doc "api" has two level-2 sections, one of two chunks plus a
# level-3 subsection (same section), one of one chunk; "guide" has no `#` title ("" first).
CHUNKS = [
    ("api", ["Child process"], "the child process module"),
    ("api", ["Child process", "Asynchronous creation"], "spawn a child with an ipc channel"),
    ("api", ["Child process", "Asynchronous creation", "fork"], "fork starts another node script"),
    ("api", ["Child process", "Asynchronous creation", "fork"], "messages between parent and script"),
    ("api", ["Child process", "Synchronous creation"], "blocks the event loop"),
    ("guide", ["", "Scripts"], "run a node script from the command line"),
    ("guide", ["", "Scripts", "Messages"], "log messages to the console"),
    ("other", [], "script script script without a heading"),
]


def test_section_codes_group_consecutive_chunks_by_their_first_two_levels():
    docs = pa.array(["a", "a", "a", "a", "b", "b", "a", "c"])
    paths = pa.array([["T"], ["T", "One"], ["T", "One", "x"], ["T", "Two"], ["", "One"], ["", "One", "y"],
                      ["T", "One"], []], pa.list_(pa.string()))
    # the intro, One (with its subsection), Two, b's One, a's One again (not adjacent: a
    # different section of the reading order), c's untitled text
    assert section_codes(docs, paths).tolist() == [0, 1, 1, 2, 3, 3, 4, 5]
    assert section_codes(pa.array([], pa.string()), pa.array([], pa.list_(pa.string()))).tolist() == []


def write_chunks(folder, rows):
    n = len(rows)
    table = pa.table({
        "chunk_id": [f"{d}#{i}" for i, (d, _, _) in enumerate(rows)], "doc_id": [d for d, _, _ in rows],
        "heading_path": pa.array([p for _, p, _ in rows], pa.list_(pa.string())),
        "heading": [" › ".join(x for x in p if x) for _, p, _ in rows],
        "path": pa.array([[]] * n, pa.list_(pa.string())), "text": [t for _, _, t in rows],
        "start_char": pa.array([0] * n, pa.int64()), "end_char": pa.array([len(t) for _, _, t in rows], pa.int64()),
        "page_start": pa.array([None] * n, pa.int32()), "page_end": pa.array([None] * n, pa.int32()),
    })
    sink = ParquetSink(folder / "03_chunks.parquet", table.schema, {"fingerprint": "hand-made"})
    sink.write(table)
    sink.commit()


def bm25(tfs: list[Counter], k1=1.2, b=0.75):
    """Plain BM25 weights over units given as term counters: (unit, term) -> weight."""
    n, avgdl = len(tfs), sum(sum(c.values()) for c in tfs) / len(tfs)
    df = Counter(t for c in tfs for t in c)
    return {(u, t): math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) * f * (k1 + 1)
            / (f + k1 * (1 - b + b * sum(c.values()) / avgdl)) for u, c in enumerate(tfs) for t, f in c.items()}


@pytest.fixture
def indexed(tmp_path):
    (tmp_path / "out").mkdir()
    write_chunks(tmp_path / "out", CHUNKS)
    cfg = write_config(tmp_path, indexing={"stemmer": "none", "stopwords": "english", "heading_weight": 1,
                                           "path_weight": 0})
    run_script("04_indexing.py", "--config", str(cfg))
    return tmp_path / "out"


def test_scores_mix_chunk_and_section_bm25_as_the_formula_says(indexed):
    w = 0.5
    words = lambda h, t: Analyzer("none", "english").analyze(" ".join(h) + " " + t)  # heading once, then text
    chunk_tf = [Counter(words(h, t)) for _, h, t in CHUNKS]
    sections = section_codes(pa.array([d for d, _, _ in CHUNKS]), pa.array([h for _, h, _ in CHUNKS])).tolist()
    section_tf = [sum((chunk_tf[i] for i, s in enumerate(sections) if s == k), Counter()) for k in range(max(sections) + 1)]
    own, ctx = bm25(chunk_tf), bm25(section_tf)
    query = ["node", "script", "messages"]
    expected = {}
    for i in range(len(CHUNKS)):
        if any((i, t) in own for t in query):  # only chunks holding a query term are results
            expected[f"{CHUNKS[i][0]}#{i}"] = (sum(own.get((i, t), 0) for t in query)
                                              + w * sum(ctx.get((sections[i], t), 0) for t in query)) / (1 + w)
    hits = pipekit.Searcher(indexed, settings={"section_context": w}).search(" ".join(query), k=20, explain=True)
    assert {h.chunk_id: h.score for h in hits} == pytest.approx(expected, rel=1e-12)
    for h in hits:  # explain still adds up, and names each term's section share
        assert sum(e["contribution"] for e in h.explain) == pytest.approx(h.score, rel=1e-12)
        assert all("section" in e for e in h.explain)
    # api#1 has none of the query's words, though its section (fork's) has them all: not a result
    assert "api#1" not in expected and "api#1" not in {h.chunk_id for h in hits}
    plain = {h.chunk_id: h.score for h in pipekit.Searcher(indexed, settings={"section_context": 0}).search(
        " ".join(query), k=20)}
    assert set(plain) == set(expected)
    assert plain == pytest.approx({c: sum(own.get((int(c.split("#")[1]), t), 0) for t in query) for c in plain},
                                  rel=1e-12)


def test_one_chunk_sections_score_exactly_as_without_context(tmp_path):
    (tmp_path / "out").mkdir()
    write_chunks(tmp_path / "out", [(f"d{i}", [f"Title {i}"], t) for i, t in
                                    enumerate(["alpha beta", "beta gamma gamma", "delta alpha", "beta"])])
    run_script("04_indexing.py", "--config", str(write_config(tmp_path, indexing={"stemmer": "none"})))
    with_ctx = pipekit.Searcher(tmp_path / "out", settings={"section_context": 0.5})
    assert with_ctx.index.context is None  # nothing to mix: every section is its own chunk
    a = [(h.chunk_id, h.score) for h in with_ctx.search("alpha beta", k=10)]
    b = [(h.chunk_id, h.score) for h in pipekit.Searcher(tmp_path / "out", settings={"section_context": 0})
         .search("alpha beta", k=10)]
    assert a == b and len(a) == 4


def test_bad_section_context_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"retrieval\.section_context must be a number >= 0"):
        load_config(write_config(tmp_path), ["retrieval.section_context=-1"])
