"""A very large document: the pieces that keep it from being copied whole (issue 15).

Memory itself is shown by bench/big_document.py (a figure, not an assertion); these check
that the piecewise paths give exactly what the whole-text ones give."""
from __future__ import annotations

import random

import pyarrow.parquet as pq

from conftest import run_script, write_config
from pipekit.chunk import doctext as chunking


# Every kind of whitespace str.split() splits at (ASCII, the \x1c-\x1f separators, NEL,
# no-break and ideographic spaces, line and paragraph separators) and a zero-width space,
# which it does not; runs longer than 10 characters count one word per 10.
ALPHABET = ["a", "bb", " ", "\n", "x" * 12, "\u00a0", "\u3000", "é", "\t", "y" * 31, "\u200b", "😀" * 11,
            "漢字", "\x84", "\x86", "\x1b", "\x08", "\x21", "\u3001"]
ALPHABET += [chr(c) for c in range(0x3001) if chr(c).isspace()]


def _texts(rnd, n=3000, longest=40):
    for _ in range(n):
        yield "".join(rnd.choice(ALPHABET) for _ in range(rnd.randint(0, longest)))


def test_words_of_a_long_span_counted_by_pieces_equal_the_whole_count(monkeypatch):
    # numpy counting from 1 character, pieces of 5: every cut and every whitespace kind
    monkeypatch.setattr(chunking, "_SPAN_PIECE", 5)
    monkeypatch.setattr(chunking, "_BULK", 1)
    rnd = random.Random(15)
    for text in _texts(rnd):
        a = rnd.randint(0, len(text))
        b = rnd.randint(a, len(text))
        assert chunking.count_span(text, a, b) == chunking.count_words(text[a:b]), (text, a, b)


def test_line_counts_and_spans_of_whole_lines_equal_counting_each_alone(monkeypatch):
    """The per-line counts a log paragraph is cut by (numpy, a piece of lines at a time,
    a line longer than a piece alone) are count_words of each line."""
    monkeypatch.setattr(chunking, "_SPAN_PIECE", 16)
    monkeypatch.setattr(chunking, "_BULK", 1)
    rnd = random.Random(16)
    for text in _texts(rnd, 600, 200):
        doc = chunking.DocText(text, chunking.Settings())
        n = len(doc.lines)
        a, b = sorted(rnd.randint(0, n) for _ in range(2))
        start = doc.starts[a]
        end = doc.line_end(b - 1) if b > a else start
        # a small region counted alone, then the whole document's lines, then from those
        assert doc.line_units(a, b) == [chunking.count_words(ln) for ln in doc.lines[a:b]], (text, a, b)
        assert doc.words(start, end) == chunking.count_words(text[start:end]), (text, a, b)
        assert doc.line_units(0, n) == [chunking.count_words(ln) for ln in doc.lines], text
        assert doc.line_units(a, b) == [chunking.count_words(ln) for ln in doc.lines[a:b]], (text, a, b)
        assert doc.words(start, end) == chunking.count_words(text[start:end]), (text, a, b)


def test_atoms_of_a_big_block_are_the_atoms_of_its_lines_one_by_one():
    """A block of 64 lines or more is counted in bulk; a line alone the old way.  Cutting
    depends on each line alone, so both must give the same atoms, in every unit and with
    stripped page markers."""
    rnd = random.Random(17)
    lines = []
    for k in range(400):
        line = "".join(rnd.choice(ALPHABET[:10] + ["word ", "word word "]) for _ in range(rnd.randint(0, 30)))
        lines.append(f"--- page {k // 40 + 1} ---" if k % 40 == 5 else line.replace("\n", " "))
    text = "\n".join(lines)
    for settings in (chunking.Settings(), chunking.Settings(unit="chars", target=60, max=90, min=5),
                     chunking.Settings(unit="tokens", target=15, max=30, min=2),
                     chunking.Settings(page_markers="strip", target=8, max=12, min=2)):
        for cap in (3, 8, 40, 1000):
            doc = chunking.DocText(text, settings)
            doc.set_markers([(k, k // 40 + 1) for k in range(len(lines)) if k % 40 == 5])
            bulk = list(doc.atoms(0, len(lines), cap))
            alone = [a for j in range(len(lines)) for a in doc.atoms(j, j + 1, cap)]
            assert bulk == alone, (settings, cap)
            assert len(bulk) > 300


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


def test_csv_records_found_with_numpy_are_the_records_found_line_by_line(monkeypatch):
    """record_bounds (quotes counted in UTF-8 bytes, a few lines at a time) gives exactly
    csv_records: quoted newlines, blank lines between records, a quote never closed."""
    from pipekit.chunk.csv_chunks import csv_records, record_bounds

    monkeypatch.setattr("pipekit.chunk.csv_chunks._PIECE", 6)  # a line or two a piece, a long line alone
    monkeypatch.setattr(chunking, "_SPAN_PIECE", 6)
    rnd = random.Random(18)
    cells = ['a', '"b, c"', '"x\n y"', '""', '"q ""r"""', '', ' ', 'é', '"\n\n"', '"open', '\t']
    for _ in range(500):
        rows = [",".join(rnd.choice(cells) for _ in range(rnd.randint(1, 4))) for _ in range(rnd.randint(0, 12))]
        text = "\n".join(r if rnd.random() > 0.15 else "" for r in rows)
        doc = chunking.DocText(text, chunking.Settings())
        firsts, ends = record_bounds(doc)
        assert list(zip(firsts.tolist(), ends.tolist())) == csv_records(doc.lines), text
