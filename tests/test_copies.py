"""Byte-identical files are read once: the first in sorted order, the others `skipped`
rows naming it (SPEC, stage 01).

A folder a person keeps holds copies (the same PDF under `manuals/` and `downloads/`);
read twice, a copy doubles its passages in every top 10.  These tests make copies of the
bundled sample's files, then edit, remove and restore them, and check after each change
that a rerun reusing what it can writes exactly what a `--force` run writes, on both
engines.
"""
from __future__ import annotations

import os
import shutil

import pandas as pd

from pipekit.read.walk import input_listing
from pipekit.run.config import load_config

from conftest import REPO, assert_same_outputs, pipeline, run_script
from test_incremental import N_FILES, rerun_and_force, reused, sample_copy

PDF = "field-guide.pdf"
PDF_COPY = "zz-backup/field-guide.pdf"  # after the original in sorted order: the original is read
MD = "handbook/company/glossary.md"
MD_COPY = "handbook/engineering/glossary-copy.md"


def with_copies(tmp_path, settle: bool = False):
    """The sample, plus a copy of its PDF in another folder and of a Markdown page in another."""
    docs, cfg = sample_copy(tmp_path, settle)
    (docs / "zz-backup").mkdir()
    shutil.copy2(docs / PDF, docs / PDF_COPY)
    shutil.copy2(docs / MD, docs / MD_COPY)
    return docs, cfg


def rows(out) -> pd.DataFrame:
    return pd.read_parquet(out / "01_documents.parquet").set_index("doc_id")


def listed(root):
    cfg = load_config(None, [f"documents.input={root}"])
    return {e.doc_id: e for e in input_listing(cfg, root / "no-previous-listing.parquet")[0]}


# ---- the walk's verdict ------------------------------------------------------------------

def test_the_first_copy_in_sorted_order_is_read_and_the_others_name_it(tmp_path):
    for name, data in (("b/notes.md", b"# Notes\n\nsame\n"), ("a/notes.md", b"# Notes\n\nsame\n"),
                       ("c/notes-again.md", b"# Notes\n\nsame\n"), ("c/other.md", b"# Notes\n\nother\n")):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(data)
    entries = listed(tmp_path)
    assert entries["a/notes.md"].skip is None and entries["c/other.md"].skip is None
    for copy in ("b/notes.md", "c/notes-again.md"):
        assert entries[copy].skip == "same bytes as a/notes.md: read once, as a/notes.md"
        assert entries[copy].reason == "copy"


def test_empty_files_are_each_their_own_document(tmp_path):
    """Every 0-byte file has the same bytes; `__init__.md` and `TODO.md` are still two files."""
    for name in ("TODO.md", "__init__.md", "notes/empty.txt"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    assert all(e.skip is None for e in listed(tmp_path).values())


def test_a_hard_link_is_a_copy_too(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\ntext\n", encoding="utf-8")
    os.link(tmp_path / "a.md", tmp_path / "b.md")
    assert listed(tmp_path)["b.md"].skip == "same bytes as a.md: read once, as a.md"


def test_same_size_other_bytes_is_no_copy(tmp_path):
    (tmp_path / "a.md").write_text("alpha", encoding="utf-8")
    (tmp_path / "b.md").write_text("alphb", encoding="utf-8")
    assert all(e.skip is None for e in listed(tmp_path).values())


def test_stage_01_counts_copies_and_names_the_file_read(tmp_path):
    docs, cfg = with_copies(tmp_path)
    proc = run_script("01_documents.py", "--config", str(cfg))
    assert "skipped: 2 a copy of a file already read (same bytes)" in proc.stdout
    assert f"skipped {PDF_COPY}: same bytes as {PDF}: read once, as {PDF}" in proc.stdout
    got = rows(tmp_path / "out")
    assert got.loc[PDF, "status"] == "ok" and got.loc[MD, "status"] == "ok"
    assert got.loc[PDF_COPY, "status"] == "skipped" and got.loc[PDF_COPY, "format"] == "pdf"
    assert got.loc[MD_COPY, "error"] == f"same bytes as {MD}: read once, as {MD}"
    assert (got.status == "ok").sum() == N_FILES - 1  # the sample's documents, each once (its truncated PDF fails)


# ---- reruns: what a --force run writes, reusing the rest -----------------------------------

def test_an_edited_copy_becomes_its_own_document_and_the_original_stays(tmp_path):
    docs, cfg = with_copies(tmp_path)
    out = rerun_and_force(tmp_path, cfg, lambda: (docs / MD_COPY).write_text(
        (docs / MD).read_text(encoding="utf-8") + "\n## Added\n\nA term only the copy has.\n", encoding="utf-8"))
    assert f"0 added, 1 changed ({MD_COPY}), 0 removed" in out
    assert reused(out, "01_documents") == N_FILES + 1  # every row but the edited copy's
    got = rows(tmp_path / "out")
    assert got.loc[MD_COPY, "status"] == "ok" and got.loc[MD, "status"] == "ok"
    assert got.loc[PDF_COPY, "status"] == "skipped"


def test_a_removed_copy_drops_out_and_nothing_else_changes(tmp_path):
    docs, cfg = with_copies(tmp_path)
    out = rerun_and_force(tmp_path, cfg, lambda: (docs / PDF_COPY).unlink())
    assert f"0 added, 0 changed, 1 removed ({PDF_COPY})" in out
    assert reused(out, "01_documents") == N_FILES + 1  # every row left
    assert reused(out, "02_preprocessing") == N_FILES - 1  # every document (the truncated PDF fails)
    assert PDF_COPY not in rows(tmp_path / "out").index


def test_when_the_original_goes_its_copy_is_read(tmp_path):
    docs, cfg = with_copies(tmp_path)
    out = rerun_and_force(tmp_path, cfg, lambda: (docs / PDF).unlink())
    # The copy did not change on disk: the summary says why its row did.
    assert f"0 added, 0 changed, 1 removed ({PDF}); 1 no longer a copy, read now ({PDF_COPY})" in out
    assert reused(out, "01_documents") == N_FILES  # all but the original (gone) and its copy (read now)
    got = rows(tmp_path / "out")
    assert got.loc[PDF_COPY, "status"] == "ok" and got.loc[PDF_COPY, "title"] == "Lighthouse On-Call Field Guide"


def test_status_says_the_copy_changed_when_its_original_was_edited(tmp_path):
    docs, cfg = with_copies(tmp_path)
    pipeline(cfg, tmp_path / "out")
    assert "stale" not in run_script("run_pipeline.py", "--config", str(cfg), "--status").stdout
    page = docs / MD
    page.write_text(page.read_text(encoding="utf-8") + "\nEdited after the copy was made.\n", encoding="utf-8")
    status = run_script("run_pipeline.py", "--config", str(cfg), "--status").stdout
    # Both rows change: the original is read again, and the copy is no copy any more.
    assert f"0 added, 1 changed ({MD}), 0 removed; 1 no longer a copy, read now ({MD_COPY})" in status
    rerun = pipeline(cfg, tmp_path / "out").stdout
    assert reused(rerun, "01_documents") == N_FILES  # all but those two
    pipeline(cfg, tmp_path / "forced", args=("--force",))
    assert_same_outputs(tmp_path / "out", tmp_path / "forced")
    got = rows(tmp_path / "out")
    assert got.loc[MD_COPY, "status"] == "ok" and got.loc[MD, "status"] == "ok"


def test_a_new_copy_before_the_file_read_takes_its_place(tmp_path):
    """Sorted order decides: a copy that sorts first is read, and the file read until now
    names it (its bytes unchanged: `now a copy`, not `changed`)."""
    docs, cfg = with_copies(tmp_path)
    first = "aa-early/field-guide.pdf"
    out = rerun_and_force(tmp_path, cfg, lambda: ((docs / "aa-early").mkdir(), shutil.copy2(docs / PDF, docs / first)))
    # The old copy names the new file read too: its row changed, its bytes did not.
    assert f"1 added ({first}), 0 changed, 0 removed; 2 now a copy of a file read ({PDF}, {PDF_COPY})" in out
    got = rows(tmp_path / "out")
    assert got.loc[first, "status"] == "ok"
    assert got.loc[PDF, "error"] == got.loc[PDF_COPY, "error"] == f"same bytes as {first}: read once, as {first}"


def test_copies_on_the_dask_engine_are_the_local_engines_rows_before_and_after_a_change(tmp_path):
    """The walk decides on the client; its verdict reaches the workers with the entries."""
    docs, cfg = with_copies(tmp_path)
    dask = ("engine.kind=dask", "engine.workers=2", "engine.partition_rows=3")
    pipeline(cfg, tmp_path / "local")
    proc = pipeline(cfg, tmp_path / "dask", *dask)
    assert "skipped: 2 a copy of a file already read (same bytes)" in proc.stdout
    assert_same_outputs(tmp_path / "local", tmp_path / "dask")
    (docs / PDF).unlink()
    pipeline(cfg, tmp_path / "dask", *dask)  # reuses the dask run's rows
    pipeline(cfg, tmp_path / "forced", args=("--force",))
    assert_same_outputs(tmp_path / "dask", tmp_path / "forced")
    assert rows(tmp_path / "dask").loc[PDF_COPY, "status"] == "ok"
