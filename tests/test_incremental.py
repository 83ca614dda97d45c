"""A rerun costs what changed: unchanged files and documents keep their rows.

Every scenario edits a copy of the bundled sample, reruns the pipeline on the output of
the first run (reusing what it can), runs it again with --force into another folder, and
asserts the two are the same rows, order, values and provenance — the only acceptable
price of reuse is none.  The summaries say how much was reused, so each test also checks
that reuse really happened (equality alone would pass if nothing were ever reused).
"""
from __future__ import annotations

import fcntl
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipekit.run.incremental import PreviousRows, list_files, plan_reuse, runs
from pipekit.read.walk import list_inputs

from conftest import REPO, assert_same_outputs, pipeline, run_script, write_config, read_terminal

SAMPLE = REPO / "data" / "sample"
N_FILES = sum(1 for p in SAMPLE.rglob("*") if p.is_file())
N_CHUNKS = 88  # the sample's chunks with the default settings (tests/test_datasets.py counts them too)


def sample_copy(tmp_path: Path, settle: bool = False) -> tuple[Path, Path]:
    """A copy of the sample and a config reading it.  `settle`: wait out the window in
    which a just-written file is hashed again whatever its stamp says (racily clean)."""
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLE, docs)
    cfg = write_config(tmp_path, documents={"input": str(docs)},
                       retrieval={"queries": str(REPO / "data" / "queries.txt"),
                                  "qrels": str(REPO / "data" / "qrels.tsv")})
    if settle:
        time.sleep(2.1)
    return docs, cfg


def rerun_and_force(tmp_path: Path, cfg: Path, change, *sets: str) -> str:
    """First run, `change`, rerun in place, then a --force run elsewhere: equal outputs.
    Returns the rerun's stdout (its summaries say what was reused)."""
    pipeline(cfg, tmp_path / "out")
    change()
    rerun = pipeline(cfg, tmp_path / "out", *sets).stdout
    pipeline(cfg, tmp_path / "forced", *sets, args=("--force",))
    assert_same_outputs(tmp_path / "out", tmp_path / "forced")
    return rerun


def reused(stdout: str, stage: str) -> int:
    """How many files (01), documents (02, 03) or chunks (04) a stage said it reused."""
    block = re.search(rf"^{stage}: .* rows out .*\n((?:  .*\n)*)", stdout, re.M).group(1)
    m = re.search(r"([\d,]+) (?:unchanged (?:files|documents)|chunks of unchanged documents)", block)
    return int(m.group(1).replace(",", "")) if m else 0


def test_an_added_file_is_read_alone_and_the_rest_is_copied(tmp_path):
    docs, cfg = sample_copy(tmp_path)
    new = docs / "handbook" / "notes" / "new.md"

    def add():
        new.parent.mkdir()
        new.write_text("# Pager etiquette\n\nAcknowledge within five minutes.\n", encoding="utf-8")

    out = rerun_and_force(tmp_path, cfg, add)
    assert "input changed: 1 added (handbook/notes/new.md), 0 changed, 0 removed" in out
    assert reused(out, "01_documents") == N_FILES
    ok_docs = N_FILES - 1  # the sample's truncated PDF is an error row, not a document
    assert reused(out, "02_preprocessing") == ok_docs
    assert reused(out, "03_chunking") == ok_docs
    assert reused(out, "04_indexing") == N_CHUNKS  # every chunk but the new file's


def test_an_edited_file_is_read_again_and_only_its_document_redone(tmp_path):
    docs, cfg = sample_copy(tmp_path)
    page = docs / "handbook" / "README.md"
    out = rerun_and_force(tmp_path, cfg, lambda: page.write_text(
        page.read_text(encoding="utf-8") + "\n## Escalation\n\nCall the duty manager.\n", encoding="utf-8"))
    assert "0 added, 1 changed (handbook/README.md), 0 removed" in out
    assert reused(out, "01_documents") == N_FILES - 1
    assert reused(out, "03_chunking") == N_FILES - 2
    assert 0 < reused(out, "04_indexing") < N_CHUNKS


def test_a_removed_file_drops_out(tmp_path):
    docs, cfg = sample_copy(tmp_path)
    out = rerun_and_force(tmp_path, cfg, lambda: (docs / "report.txt").unlink())
    assert "0 added, 0 changed, 1 removed (report.txt)" in out
    assert reused(out, "01_documents") == N_FILES - 1
    assert reused(out, "03_chunking") == N_FILES - 2


def test_a_renamed_file_is_a_new_document_under_its_new_name(tmp_path):
    docs, cfg = sample_copy(tmp_path)
    out = rerun_and_force(tmp_path, cfg, lambda: (docs / "report.txt").rename(docs / "report-2023.txt"))
    assert "1 added (report-2023.txt), 0 changed, 1 removed (report.txt)" in out
    assert reused(out, "01_documents") == N_FILES - 1


def test_same_size_and_mtime_new_bytes_is_still_a_change(tmp_path):
    docs, cfg = sample_copy(tmp_path, settle=True)
    page = docs / "handbook" / "README.md"

    def swap_bytes_keep_stamp():
        st = page.stat()
        data = page.read_bytes()
        i = data.index(b"e")
        page.write_bytes(data[:i] + b"a" + data[i + 1:])  # one byte for another: same size
        os.utime(page, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the old modification time
        assert page.stat().st_size == st.st_size and page.stat().st_mtime_ns == st.st_mtime_ns

    out = rerun_and_force(tmp_path, cfg, swap_bytes_keep_stamp)
    assert "0 added, 1 changed (handbook/README.md), 0 removed" in out
    assert reused(out, "01_documents") == N_FILES - 1


def test_touch_changes_nothing(tmp_path):
    docs, cfg = sample_copy(tmp_path)
    pipeline(cfg, tmp_path / "out")
    os.utime(docs / "report.txt")  # what `touch` or a fresh checkout does
    status = run_script("run_pipeline.py", "--config", str(cfg), "--status").stdout
    assert "stale" not in status, status


def test_a_chunking_change_redoes_stage_03_for_every_document_and_nothing_before(tmp_path):
    docs, cfg = sample_copy(tmp_path)
    out = rerun_and_force(tmp_path, cfg, lambda: None, "chunking.target=120")
    assert "01_documents: fresh, skipped" in out and "02_preprocessing: fresh, skipped" in out
    assert reused(out, "03_chunking") == 0 and reused(out, "04_indexing") == 0


def test_a_bm25_parameter_change_reruns_04_alone_and_recounts_it_whole(tmp_path):
    """k1 changes every impact but no count; 04 still recounts every chunk (its row
    fingerprint holds every indexing setting): slower than it need be, never wrong."""
    docs, cfg = sample_copy(tmp_path)
    out = rerun_and_force(tmp_path, cfg, lambda: None, "indexing.k1=1.5")
    assert "03_chunking: fresh, skipped" in out and reused(out, "04_indexing") == 0


def test_force_reuses_nothing(tmp_path):
    docs, cfg = sample_copy(tmp_path)
    pipeline(cfg, tmp_path / "out")
    out = pipeline(cfg, tmp_path / "out", args=("--force",)).stdout
    assert "unchanged" not in out


def test_queries_file_change_is_named(tmp_path):
    docs, cfg = sample_copy(tmp_path)
    queries = tmp_path / "queries.txt"
    queries.write_text("change freeze\n", encoding="utf-8")
    run = lambda: pipeline(cfg, tmp_path / "out", f"retrieval.queries={queries}", "retrieval.qrels=null")
    run()
    queries.write_text("change freeze\nreplication slot\n", encoding="utf-8")
    status = run_script("run_pipeline.py", "--config", str(cfg), "--set", f"retrieval.queries={queries}",
                        "--set", "retrieval.qrels=null", "--status").stdout
    assert f"why: {queries} changed" in status


# ---- the pieces, as examples ---------------------------------------------------------------

def test_a_stamp_unchanged_since_long_before_the_listing_is_not_hashed_again(tmp_path):
    (tmp_path / "a.md").write_text("alpha", encoding="utf-8")
    entries = list_inputs(tmp_path)
    first = list_files(entries, None)
    # A previous listing with a made-up hash and the file's true stamp: trusted, unread...
    fake = {"listed_ns": first["listed_ns"] + 10**12,
            "files": {"a.md": first["files"]["a.md"][:3] + ["feedfacefeedface|" + first["files"]["a.md"][3].split("|", 1)[1]]}}
    assert list_files(entries, fake)["files"]["a.md"][3].startswith("feedface")
    # ...unless the file changed close to that listing (two writes in one clock tick).
    fake["listed_ns"] = first["listed_ns"]
    assert not list_files(entries, fake)["files"]["a.md"][3].startswith("feedface")


def test_the_listing_stamps_a_file_by_the_walks_stat(tmp_path, monkeypatch):
    # The walk has just stat'ed every file: the listing takes its size and times from there
    # (1,400 stats fewer a rerun), the same numbers a stat of its own gives.
    import pipekit.run.incremental as incremental

    (tmp_path / "a.md").write_text("alpha", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("beta", encoding="utf-8")
    entries = list_inputs(tmp_path)
    monkeypatch.setattr(incremental, "_stamp", lambda path: pytest.fail(f"{path} stat'ed again"))
    listing = list_files(entries, None)
    for doc_id in ("a.md", "sub/b.txt"):
        st = os.stat(tmp_path / doc_id)
        assert listing["files"][doc_id][:3] == [st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    monkeypatch.undo()
    for e in entries:  # an entry made without the walk's stat (a test's, a caller's) is stat'ed here
        e.stamp = None
    assert list_files(entries, None)["files"]["a.md"][:3] == listing["files"]["a.md"][:3]


def test_plan_reuse_matches_documents_by_id_and_content():
    previous = pa.table({"doc_id": ["a", "a", "b", "c", "c", "c"], "content_hash": ["1", "1", "2", "3", "3", "3"]})
    upstream = pa.table({"doc_id": ["a", "new", "b", "c"], "content_hash": ["1", "9", "changed", "3"]})
    plan = plan_reuse(upstream, previous)
    assert plan.tolist() == [[0, 2], [-1, -1], [-1, -1], [3, 6]]
    assert runs(plan, 0, 4) == (("old", 0, 2, 1), ("new", 1, 3), ("old", 3, 6, 1))
    # Consecutive documents whose previous rows are consecutive are one copy.
    same = plan_reuse(previous.group_by("doc_id").aggregate([("content_hash", "min")])
                      .rename_columns(["doc_id", "content_hash"]).sort_by("doc_id"), previous)
    assert runs(same, 0, 3) == (("old", 0, 6, 3),)


def test_previous_rows_are_read_across_row_groups(tmp_path):
    import pyarrow.parquet as pq

    table = pa.table({"x": np.arange(10)})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=3)
    rows = PreviousRows(str(tmp_path / "t.parquet"))
    assert pa.concat_tables(rows.take(2, 8)).column("x").to_pylist() == [2, 3, 4, 5, 6, 7]


# ---- progress on a terminal, silence elsewhere ---------------------------------------------

def test_stage_01_counts_files_on_a_terminal_and_prints_nothing_extra_elsewhere(tmp_path):
    docs, cfg = sample_copy(tmp_path)
    quiet = run_script("01_documents.py", "--config", str(cfg))
    assert quiet.stderr == ""
    # A pseudo-terminal on stderr: what a person running the stage sees.
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a window 100 columns wide
    proc = subprocess.run([sys.executable, "01_documents.py", "--config", str(cfg), "--force"], cwd=REPO,
                          stdout=subprocess.PIPE, stderr=slave, timeout=300)
    os.close(slave)
    seen = read_terminal(master)
    assert proc.returncode == 0
    assert f"/{N_FILES} [".encode() in seen and b"file" in seen, seen[-400:]


def test_a_beir_corpus_is_reread_whole_but_only_changed_records_are_redone(tmp_path):
    import json

    corpus = tmp_path / "corpus.jsonl"
    records = [{"_id": f"d{i}", "title": f"Record {i}", "text": f"passage {i} about wing flutter"} for i in range(30)]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    cfg = write_config(tmp_path, documents={"input": str(corpus)},
                       retrieval={"queries": ["wing flutter"], "qrels": None})

    def edit_one_add_one():
        records[7]["text"] = "passage 7 rewritten about boundary layers"
        records.append({"_id": "d30", "title": "Record 30", "text": "a new passage"})
        corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")

    out = rerun_and_force(tmp_path, cfg, edit_one_add_one)
    assert "0 added, 1 changed (corpus.jsonl), 0 removed" in out
    assert reused(out, "01_documents") == 0  # one file: read whole again (it is fast)
    assert reused(out, "02_preprocessing") == 29 and reused(out, "03_chunking") == 29


def test_run_pipeline_walks_the_input_folder_once_per_run(tmp_path, monkeypatch):
    """The freshness check's walk is the one stage 01 reads by: on a folder of thousands of
    files a second walk was a tenth of a one-file rerun, and two walks could disagree."""
    import pipekit.read.walk
    import run_pipeline

    docs, cfg = sample_copy(tmp_path)
    pipeline(cfg, tmp_path / "out")
    (docs / "new.md").write_text("# New\n\nA page added after the first run.\n", encoding="utf-8")
    walks = []
    real = pipekit.read.walk.list_inputs
    monkeypatch.setattr(pipekit.read.walk, "list_inputs", lambda *a, **k: walks.append(a[0]) or real(*a, **k))
    assert run_pipeline.main(["--config", str(cfg), "--set", f"paths.output={tmp_path / 'out'}"]) == 0
    assert walks == [docs]
    pipeline(cfg, tmp_path / "forced", args=("--force",))
    assert_same_outputs(tmp_path / "out", tmp_path / "forced")


def test_reused_counts_are_the_same_whether_runs_are_found_by_scans_or_by_one_sort(monkeypatch):
    """Stage 04 cuts each unchanged run of chunks out of the previous postings: by one scan
    a run when a few runs are left (one changed file), by one stable sort over all postings
    when many are.  Both must give every run its postings in term order, chunks renumbered
    from the run's start: here checked against the postings picked out one by one."""
    import pipekit.run.incremental as inc

    rng = np.random.default_rng(7)
    n_chunks, n_terms = 60, 40
    pairs = sorted({(int(t), int(c)) for t, c in zip(rng.integers(0, n_terms, 900), rng.integers(0, n_chunks, 900))})
    postings = pa.table({"term_id": pa.array([t for t, _ in pairs], pa.int32()),
                         "chunk": pa.array([c for _, c in pairs], pa.int32()),
                         "tf": pa.array(rng.integers(1, 5, len(pairs)), pa.int32())})
    terms = pa.array([f"t{i:02d}" for i in range(n_terms)])
    lengths = rng.integers(1, 50, n_chunks)
    # Eleven runs (more than FEW_RUNS), chunks 25-29 changed, run starts in the new numbering shifted.
    olds = [("old", a + 3, a + 8, a) for a in range(0, 25, 5)] + [("old", a + 1, a + 6, a) for a in range(30, 60, 5)]
    assert len(olds) > inc.FEW_RUNS

    def expected(a, b, s):
        mine = [(t, c - s, f) for t, c, f in zip(*(postings.column(n).to_pylist() for n in ("term_id", "chunk", "tf")))
                if s <= c < s + (b - a)]
        return [f"t{t:02d}" for t in sorted({t for t, _, _ in mine})], [c for _, c, _ in mine], [f for _, _, f in mine]

    by_sort = inc.previous_counts(postings, terms, lengths, olds)
    monkeypatch.setattr(inc, "FEW_RUNS", len(olds))
    by_scan = inc.previous_counts(postings, terms, lengths, olds)
    for (_, a, b, s), x, y in zip(olds, by_sort, by_scan):
        want_terms, want_chunks, want_tf = expected(a, b, s)
        for got in (x, y):
            assert got["terms"].to_pylist() == want_terms
            assert got["chunk"].tolist() == want_chunks and got["tf"].tolist() == want_tf
            assert got["lengths"].tolist() == lengths[s:s + (b - a)].tolist()
            assert got["col_ptr"][-1] == len(want_chunks)


def test_reused_counts_merged_in_one_pass_are_the_postings_in_their_new_places():
    """A rerun's stage 04 takes the previous postings whole, renumbers their chunks (a
    removed document's postings dropped) and puts the new chunks' postings in their
    places: one partition, as a --force run counts it.  Checked against the postings
    moved one by one, with a term only the new chunks have and terms only the removed
    chunks had."""
    import pipekit.run.incremental as inc

    rng = np.random.default_rng(11)
    n_chunks, n_terms = 60, 40
    pairs = sorted({(int(t), int(c)) for t, c in zip(rng.integers(0, n_terms, 900), rng.integers(0, n_chunks, 900))})
    pairs += [(n_terms, c) for c in (26, 27)]  # a term of the removed chunks alone
    terms = pa.array([f"t{i:02d}" for i in range(n_terms + 1)])
    postings = pa.table({"term_id": pa.array([t for t, _ in pairs], pa.int32()),
                         "chunk": pa.array([c for _, c in pairs], pa.int32()),
                         "tf": pa.array(rng.integers(1, 5, len(pairs)), pa.int32())})
    lengths = rng.integers(1, 50, n_chunks)
    # Old chunks 0-24 stay, 25-29 are removed, three new chunks come in their place, 30-59 follow.
    runs_ = [("old", 0, 25, 0), ("new", 25, 28), ("old", 28, 58, 30)]
    new = {"terms": pa.array(["a-new", "t03", "t39"]), "col_ptr": np.array([0, 2, 3, 5]),
           "chunk": np.array([0, 2, 1, 0, 1], np.int32), "tf": np.array([1, 2, 3, 4, 5], np.int32),
           "lengths": np.array([7, 8, 9])}
    got = inc.merged_counts(postings, terms, lengths, runs_, [new])

    moved = {0: range(0, 25), 28: range(30, 60)}
    want = [(f"t{t:02d}", c - s + at, f) for (t, c), f in zip(pairs, postings.column("tf").to_pylist())
            for at, old in moved.items() if c in old for s in [old.start]]
    want += [("a-new", 25, 1), ("a-new", 27, 2), ("t03", 26, 3), ("t39", 25, 4), ("t39", 26, 5)]
    want.sort()
    names = sorted({t for t, _, _ in want})
    assert got["terms"].to_pylist() == names and f"t{n_terms:02d}" not in names
    term_of = np.repeat(np.arange(len(names)), np.diff(got["col_ptr"]))
    assert [(names[t], c, f) for t, c, f in zip(term_of, got["chunk"].tolist(), got["tf"].tolist())] == want
    assert got["lengths"].tolist() == lengths[:25].tolist() + [7, 8, 9] + lengths[30:].tolist()


def test_reused_counts_keep_every_term_id_when_no_term_comes_or_goes(monkeypatch):
    """The usual rerun, a file added and none removed, its words all in the index: the
    terms are the previous ones, so merged_counts only places the new postings, without
    sorting the terms anew (which the patched kernels would refuse) or looking every
    posting's term up again.  The result is the postings moved one by one, as above."""
    import pipekit.run.incremental as inc

    rng = np.random.default_rng(5)
    n_chunks, n_terms = 60, 40
    pairs = sorted({(int(t), int(c)) for t, c in zip(rng.integers(0, n_terms, 900), rng.integers(0, n_chunks, 900))})
    pairs = sorted(set(pairs) | {(t, t) for t in range(n_terms)})  # every term has a posting
    terms = pa.array([f"t{i:02d}" for i in range(n_terms)])
    postings = pa.table({"term_id": pa.array([t for t, _ in pairs], pa.int32()),
                         "chunk": pa.array([c for _, c in pairs], pa.int32()),
                         "tf": pa.array(rng.integers(1, 5, len(pairs)), pa.int32())})
    lengths = rng.integers(1, 50, n_chunks)
    runs_ = [("old", 0, 25, 0), ("new", 25, 27), ("old", 27, 62, 25)]  # two chunks added, none removed
    new = {"terms": pa.array(["t03", "t39"]), "col_ptr": np.array([0, 2, 3]),
           "chunk": np.array([0, 1, 1], np.int32), "tf": np.array([6, 7, 8], np.int32), "lengths": np.array([4, 5])}

    def refused(*args, **kwargs):
        raise AssertionError("the terms were sorted anew")

    monkeypatch.setattr(inc.pc, "sort_indices", refused)
    monkeypatch.setattr(inc.pc, "unique", refused)
    got = inc.merged_counts(postings, terms, lengths, runs_, [new])

    want = [(f"t{t:02d}", c if c < 25 else c + 2, f) for (t, c), f in zip(pairs, postings.column("tf").to_pylist())]
    want += [("t03", 25, 6), ("t03", 26, 7), ("t39", 26, 8)]
    want.sort()
    assert got["terms"].to_pylist() == terms.to_pylist()
    term_of = np.repeat(np.arange(n_terms), np.diff(got["col_ptr"]))
    assert [(f"t{t:02d}", c, f) for t, c, f in zip(term_of, got["chunk"].tolist(), got["tf"].tolist())] == want
    assert got["lengths"].tolist() == lengths[:25].tolist() + [4, 5] + lengths[25:].tolist()
