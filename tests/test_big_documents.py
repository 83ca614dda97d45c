"""A very large document: the pieces that keep it from being copied whole (issue 15).

Memory itself is shown by bench/big_document.py (a figure, not an assertion); these check
that the piecewise paths give exactly what the whole-text ones give."""
from __future__ import annotations

import random

import pyarrow.parquet as pq

from conftest import run_script, write_config
from pipekit import doctext as chunking


def test_words_of_a_long_span_counted_by_pieces_equal_the_whole_count(monkeypatch):
    monkeypatch.setattr(chunking, "_SPAN_PIECE", 5)
    rnd = random.Random(15)
    alphabet = ["a", "bb", " ", "\n", "x" * 12, "\u00a0", "\u3000", "é", "\t", "y" * 31]
    for _ in range(3000):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 40)))
        a = rnd.randint(0, len(text))
        b = rnd.randint(a, len(text))
        assert chunking.count_span(text, a, b) == chunking.count_words(text[a:b]), (text, a, b)


def test_one_document_of_more_chunks_than_a_write_batch_keeps_every_chunk_in_order(tmp_path):
    # 30,000 one-line paragraphs of 40+ words: more chunks than stage 03 writes at a time.
    docs = tmp_path / "docs"
    docs.mkdir()
    para = " ".join(f"w{i}" for i in range(45))
    (docs / "log.txt").write_text("".join(f"{para} n{k}\n\n" for k in range(30_000)), encoding="utf-8")
    cfg = write_config(tmp_path, documents={"input": str(docs)}, chunking={"target": 50, "max": 60, "min": 10})
    for script in ("01_documents.py", "02_preprocessing.py", "03_chunking.py"):
        run_script(script, "--config", str(cfg))
    out = pq.ParquetFile(tmp_path / "out" / "03_chunks.parquet")
    assert out.metadata.num_row_groups >= 2  # written in batches, not as one
    table = out.read(columns=["ordinal", "start_char", "end_char", "text"])
    assert table.column("ordinal").to_pylist() == list(range(30_000))
    starts, ends = table.column("start_char").to_pylist(), table.column("end_char").to_pylist()
    assert all(e <= s for e, s in zip(ends, starts[1:]))
    assert table.column("text")[-1].as_py().endswith("n29999")
