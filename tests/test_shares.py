"""A document that would make a large share of the index is named in stage 03's summary.

The folder an engineer points the pipeline at: manuals, a copied PDF, a Markdown page
copied into another folder, and a 20 MB application log of one line.  Stage 01 reads
each copy once; stage 03 names the log, its chunks and its share; the report shows
what was not read and the documents with the most chunks.
"""
from __future__ import annotations

import random
import re
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from pipekit.chunk.shares import LONG_LINE_CHARS, MIN_CHUNKS, ChunkShares, longest_line

from conftest import REPO, run_script, write_config

SAMPLE = REPO / "data" / "sample"


def chunks(*docs: tuple[str, int], ends: dict[str, int] | None = None) -> pa.Table:
    """A stage-03 batch: `n` chunks of each doc_id, in order; end_char as given (else 100 a chunk)."""
    ids = [d for d, n in docs for _ in range(n)]
    end = [(ends or {}).get(d, 100 * (k + 1)) for d, n in docs for k in range(n)]
    return pa.table({"doc_id": ids, "end_char": end})


def counted(*batches: pa.Table) -> ChunkShares:
    shares = ChunkShares()
    for b in batches:
        shares.add(b)
    shares.finish()
    return shares


# ---- the counting, as examples -----------------------------------------------------------

def test_a_document_over_a_quarter_of_the_chunks_is_named_with_its_share():
    shares = counted(chunks(("a.md", 5), ("b.md", 5), ("c.md", 5), ("d.md", 5), ("logs/app.txt", 30)))
    assert shares.swamping() == ["logs/app.txt"]
    assert shares.lines() == ["documents that make a large share of the index (documents.exclude leaves one out):",
                              "  logs/app.txt: 30 chunks, 60 % of the index"]


def test_a_document_split_across_batches_is_counted_once():
    shares = counted(chunks(("a.md", 4), ("big.txt", 10)), chunks(("big.txt", 20)),
                     chunks(("big.txt", 3), ("c.md", 4), ("d.md", 4), ("e.md", 5)))
    assert shares.largest()[0] == ("big.txt", 33, 2000)  # its last end_char seen: its text length
    assert shares.total == 50 and shares.documents == 5


def test_documents_that_end_where_a_batch_ends_are_counted_too():
    shares = counted(*(chunks((name, 10)) for name in "abcde"), chunks(("f", 40)))
    assert shares.documents == 6 and shares.swamping() == ["f"]


def test_a_small_index_or_a_folder_of_few_documents_names_nobody():
    # 39 chunks: a quarter of them is a handful of chunks.
    assert counted(chunks(("a", 20), ("b", 5), ("c", 5), ("d", 5), ("e", 4))).lines() == []
    # Four documents: one of them always holds a quarter.
    assert counted(chunks(("a", 100), ("b", 10), ("c", 10), ("d", 10))).lines() == []
    assert MIN_CHUNKS == 40


def test_exactly_a_quarter_is_not_over_it():
    assert counted(chunks(("a", 10), ("b", 10), ("c", 10), ("d", 5), ("e", 5))).swamping() == []


def test_only_long_texts_are_candidates_for_the_long_line_check():
    shares = counted(chunks(("a", 3), ("log", 2), ends={"log": LONG_LINE_CHARS + 1}))
    assert shares.long_line_candidates() == ["log"]
    line = shares.lines({"log": LONG_LINE_CHARS + 1})
    assert line[1].startswith("  log: 2 chunks, 40 % of the index; a line of 1,000,001 characters")


def test_longest_line():
    assert longest_line("") == 0
    assert longest_line("ab\ncdef\ng") == 4
    assert longest_line("abc\n") == 3
    assert longest_line("x" * 10) == 10


def plain_longest_line(text: str) -> int:
    """From line end to line end, as `str.find` finds them: the plain way."""
    longest, start = 0, 0
    while True:
        end = text.find("\n", start)
        if end < 0:
            return max(longest, len(text) - start)
        longest = max(longest, end - start)
        start = end + 1


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "é", "\n", "\r", "😀", "\ud800", "\u2028"]), st.integers(1, 40))),
       st.sampled_from([1, 2, 3, 7, 64]))
def test_longest_line_by_slices_is_the_plain_ways(runs, slice_chars):
    # Line ends on either side of a slice's edge, a text with none, astral and lone surrogate code points.
    import pipekit.chunk.shares as shares

    text = "".join(c * n for c, n in runs)
    was = shares.LINE_SLICE
    shares.LINE_SLICE = slice_chars
    try:
        assert longest_line(text) == plain_longest_line(text)
    finally:
        shares.LINE_SLICE = was
    assert longest_line(text) == plain_longest_line(text)


# ---- the engineer's folder ------------------------------------------------------------------

def one_line_log(path, size: int) -> None:
    """`size` bytes of access-log words separated by spaces, and not one line end."""
    rng = random.Random(34)
    words = ["GET", "/api/v1/items", "200", "user=alice", "latency_ms=12", "POST", "/login", "401",
             "WARN", "cache", "miss", "retry", "upstream", "timeout"]
    out, n = [], 0
    while n < size:
        w = rng.choice(words)
        out.append(w)
        n += len(w) + 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(" ".join(out)[:size], encoding="ascii")


@pytest.fixture(scope="module")
def folder_run(tmp_path_factory):
    """The sample, a copied PDF and Markdown page, a 20 MB one-line log; stages 01-05 run."""
    root = tmp_path_factory.mktemp("engineer")
    docs = root / "docs"
    shutil.copytree(SAMPLE, docs)
    (docs / "downloads").mkdir()
    shutil.copy2(docs / "field-guide.pdf", docs / "downloads" / "field-guide.pdf")
    shutil.copy2(docs / "handbook" / "README.md", docs / "web" / "handbook-copy.md")
    one_line_log(docs / "logs" / "app.txt", 20_000_000)
    cfg = write_config(root, documents={"input": str(docs)},
                       retrieval={"queries": str(REPO / "data" / "queries.txt"), "qrels": None})
    proc = run_script("run_pipeline.py", "--config", str(cfg))
    return root, proc.stdout


def test_each_copy_is_read_once_and_the_other_names_it(folder_run):
    _, out = folder_run
    assert "skipped: 2 a copy of a file already read (same bytes)" in out
    # downloads/ sorts before field-guide.pdf: the copy there is the one read.
    assert "skipped field-guide.pdf: same bytes as downloads/field-guide.pdf: read once, as downloads/field-guide.pdf" in out
    assert "skipped web/handbook-copy.md: same bytes as handbook/README.md: read once, as handbook/README.md" in out


def test_the_one_line_log_is_named_in_stage_03s_summary_with_its_share(folder_run):
    _, out = folder_run
    block = re.search(r"^03_chunking: .* rows out .*\n((?:  .*\n)*)", out, re.M).group(1)
    m = re.search(r"logs/app\.txt: ([\d,]+) chunks, (\d+) % of the index; a line of ([\d,]+) characters", block)
    assert m, block
    assert int(m.group(3).replace(",", "")) > 19_990_000  # the whole log (stage 02 strips its trailing space)
    total = int(re.search(r"→ ([\d,]+) chunks", block).group(1).replace(",", ""))
    n = int(m.group(1).replace(",", ""))
    assert int(m.group(2)) == round(100 * n / total) and n > total / 4


def test_the_report_says_what_was_not_read_what_fills_the_index_and_how_it_scores(folder_run):
    from test_report import Page, report

    root, _ = folder_run
    out = root / "out"
    page = Page(report(out, "--config", str(root / "config.yaml")))
    words = page.words
    files = pq.ParquetFile(out / "01_documents.parquet").metadata.num_rows  # the sample's files, 2 copies, the log
    assert f"3 of {files} files were not read: 2 skipped" in words and "1 failed" in words
    reasons = {r["class"] for r in page.all("table") if r.get("class")}
    assert {"notread", "largest"} <= reasons
    assert ("skipped: a copy of a file already read (same bytes) 2 field-guide.pdf , web/handbook-copy.md"
            in words)
    assert "failed: corrupt PDF 1 field-guide-2023.pdf" in words
    assert ".pdf 2 field-guide-2023.pdf , field-guide.pdf" in words and ".md 1 web/handbook-copy.md" in words
    n = pq.ParquetFile(out / "03_chunks.parquet").metadata.num_rows
    log = pq.read_table(out / "03_chunks.parquet", columns=["doc_id"]).column("doc_id").to_pylist().count("logs/app.txt")
    assert f"1 logs/app.txt {log:,} {100 * log / n:.1f} %" in words
    assert "BM25 only (indexing.dense_model: null" in words
    assert re.search(r"01_documents — fresh, ran \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC for \d+\.\d\d s "
                     r"\(everything made anew\)", words), words[:2000]


def test_the_report_says_which_run_its_times_come_from(folder_run, tmp_path):
    """A rerun after one added file: 01 reused the rest, and the report says so."""
    from test_report import Page, report

    root, _ = folder_run
    (root / "docs" / "handbook" / "added.md").write_text("# Added\n\nOne more page.\n", encoding="utf-8")
    run_script("run_pipeline.py", "--config", str(root / "config.yaml"))
    words = Page(report(root / "out", "--config", str(root / "config.yaml"))).words
    files = pq.ParquetFile(root / "out" / "01_documents.parquet").metadata.num_rows
    docs = pq.ParquetFile(root / "out" / "02_preprocessed.parquet").metadata.num_rows
    assert re.search(rf"01_documents — fresh, ran [^(]* UTC for \d+\.\d\d s \(incremental: reused {files - 1} of "
                     rf"{files} files\)", words), words[:3000]
    assert "03_chunking — fresh, ran" in words and f"(incremental: reused {docs - 1} of {docs} documents)" in words


def test_the_reports_reasons_are_stage_01s_kinds_found_in_its_own_words():
    from pipekit.read.walk import too_large
    from pipekit.tools.inventory import why_not_read

    assert why_not_read("skipped", "same bytes as a.pdf: read once, as a.pdf") == \
        "skipped: a copy of a file already read (same bytes)"
    assert why_not_read("skipped", too_large(2_000_000, 1_000_000)) == "skipped: larger than documents.max_bytes"
    assert why_not_read("skipped", "hidden file, not read (set documents.hidden: true to read it)") == "skipped: hidden"
    assert why_not_read("skipped", "symlink to /etc, outside documents.input: not followed (set ...)") == \
        "skipped: outside documents.input (symlink not followed)"
    assert why_not_read("skipped", "format '.log' is not supported (readable: .md)") == "skipped: of an unknown format"
    assert why_not_read("error", "corrupt PDF: truncated (no %EOF at the end)") == "failed: corrupt PDF"
    assert why_not_read("skipped", "something new") == "skipped: something new"  # a kind it does not know: its words


def test_stage_03_names_the_same_documents_on_the_dask_engine(tmp_path):
    """The counts come back from the workers as doc_id and end_char columns only; the
    long-line check reads stage 02's output where the workers wrote it (a folder of parts)."""
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLE, docs)
    (docs / "notes" / "big.md").parent.mkdir()
    (docs / "notes" / "big.md").write_text("# Big\n\n" + "".join(f"Paragraph {i} " + "word " * 300 + "\n\n"
                                                                  for i in range(300)), encoding="utf-8")
    one_line_log(docs / "logs" / "min.txt", LONG_LINE_CHARS + 10_000)
    cfg = write_config(tmp_path, documents={"input": str(docs)})
    summaries = []
    for name, sets in (("local", []), ("dask", ["engine.kind=dask", "engine.workers=2", "engine.partition_rows=3"])):
        args = ["run_pipeline.py", "--config", str(cfg), "--to", "3", "--set", f"paths.output={tmp_path / name}"]
        out = run_script(*args, *[w for s in sets for w in ("--set", s)]).stdout
        summaries.append(re.search(r"^03_chunking: .* rows out .*\n((?:  .*\n)*)", out, re.M).group(1))
    assert summaries[0] == summaries[1]
    assert re.search(r"notes/big\.md: [\d,]+ chunks, \d+ % of the index\n", summaries[0]), summaries[0]
    assert re.search(r"logs/min\.txt: [\d,]+ chunks, \d+ % of the index; a line of 1,0[01]\d,\d{3} characters",
                     summaries[0]), summaries[0]


def test_the_report_says_how_the_last_run_scored_as_its_outputs_recorded_it(tmp_path):
    """The model stage 04 embedded with and the weight stage 05 used, not today's config."""
    import json

    from pipekit.run.io import META_KEY
    from pipekit.tools.inventory import scoring

    def output(name, config):
        table = pa.table({"x": [1]})
        meta = {META_KEY: json.dumps({"inputs": {"config": config}}).encode()}
        pq.write_table(table.replace_schema_metadata(meta), tmp_path / name)

    assert scoring(tmp_path) is None  # no index yet
    output("04_chunks.parquet", {"indexing.dense_model": None})
    assert scoring(tmp_path).startswith("BM25 only")
    output("04_chunks.parquet", {"indexing.dense_model": "wordllama"})
    output("05_results.parquet", {"retrieval.dense_weight": None})
    assert scoring(tmp_path) == ("BM25 fused with the cosine of dense vectors: model wordllama (indexing.dense_model, "
                                 "as stage 04 embedded), weight 0.3 (the model's default, as stage 05 ran)")
    output("05_results.parquet", {"retrieval.dense_weight": 0.5})
    assert "weight 0.5 (retrieval.dense_weight, as stage 05 ran)" in scoring(tmp_path)
    output("05_results.parquet", {"retrieval.dense_weight": 0})
    assert scoring(tmp_path) == "BM25 only: the index has wordllama vectors, but retrieval.dense_weight is 0"
