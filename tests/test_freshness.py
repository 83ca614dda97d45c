"""Freshness: every reason `run_pipeline.py --status` gives for a stale stage, each caused
for real — a config key (chunking.max among them), an input document edited or added, the
queries or qrels file edited, a stage's code or a pipekit module it depends on edited, an
upstream output rewritten — and the stage it names is the one that reruns.

The pipeline runs on a copy of the code in a temporary folder, with a tiny corpus, so that
editing "the code" edits the copy and never the repository.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import shutil
from pathlib import Path

import pytest

from pipekit.run.stages import STAGES

from conftest import REPO, run_script, write_config

_spec = importlib.util.spec_from_file_location("run_pipeline", REPO / "run_pipeline.py")
run_pipeline = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_pipeline)


def parse_status(stdout: str) -> dict[str, list[str]]:
    """{stage label: ["fresh"] or ["stale", reason, ...]} from the lines `--status` prints."""
    out: dict[str, list[str]] = {}
    label = None
    for line in stdout.splitlines():
        if line[:2].isdigit():
            label = line.split()[0]
            out[label] = [line.split()[-1]]
        elif line.strip().startswith("why: "):
            out[label].append(line.strip()[len("why: "):])
    return out


def status(root: Path, *overrides: str) -> dict[str, list[str]]:
    """`run_pipeline.py --status` in this process (a subprocess per call made this file
    slow).  Freshness hashes the repository's code, which the copy's outputs recorded
    too: the copy is byte for byte the same until a test edits it."""
    argv = ["--config", str(root / "config.yaml"), "--status"]
    for o in overrides:
        argv += ["--set", o]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert run_pipeline.main(argv) == 0
    return parse_status(buf.getvalue())


def status_of_copy(root: Path) -> dict[str, list[str]]:
    """`--status` run by the copy itself: the only way to see an edit of the copy's code."""
    return parse_status(run_script("run_pipeline.py", "--config", str(root / "config.yaml"), "--status",
                                   cwd=root).stdout)


def run(root: Path, *args: str) -> str:
    return run_script("run_pipeline.py", "--config", str(root / "config.yaml"), *args, cwd=root).stdout


def all_fresh(root: Path) -> None:
    assert all(v == ["fresh"] for v in status(root).values())


@contextlib.contextmanager
def edited(path: Path, more: str):
    """Append to a file, then put back its bytes and its timestamps (freshness stamps
    input files by size and mtime), so the next test starts from a fresh pipeline."""
    st = path.stat()
    text = path.read_bytes()
    path.write_bytes(text + more.encode())
    try:
        yield
    finally:
        path.write_bytes(text)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of the pipeline's code with two documents, a queries and a qrels file, run once."""
    root = tmp_path_factory.mktemp("project")
    for s in STAGES:
        shutil.copy2(REPO / s.script, root / s.script)
    shutil.copy2(REPO / "run_pipeline.py", root / "run_pipeline.py")
    shutil.copytree(REPO / "pipekit", root / "pipekit", ignore=shutil.ignore_patterns("__pycache__"))
    docs = root / "docs"
    docs.mkdir()
    (docs / "deploy.md").write_text("# Deploys\n\nRoll back with the rollback script.\n")
    (docs / "backup.md").write_text("# Backups\n\nThe nightly base backup runs at two.\n")
    (root / "queries.tsv").write_text("q1\trollback script\nq2\tnightly backup\n")
    (root / "qrels.tsv").write_text("q1 0 deploy.md 1\nq2 0 backup.md 1\n")
    write_config(root, documents={"input": str(docs)},
                 retrieval={"queries": str(root / "queries.tsv"), "qrels": str(root / "qrels.tsv")})
    run(root)
    all_fresh(root)
    return root


def test_every_chunking_key_is_recorded_and_reruns_03(project):
    # chunking.max went unchecked: a stage recording only some of its keys would keep a
    # stale 03_chunks.parquet after `--set chunking.max=...`.
    for key, value, before in [("max", 900, 1000), ("target", 300, 400), ("min", 10, 40),
                               ("unit", "chars", "words"), ("page_markers", "strip", "track")]:
        st = status(project, f"chunking.{key}={value}")
        assert st["01_documents"] == st["02_preprocessing"] == ["fresh"]
        assert st["03_chunking"] == ["stale", f"config chunking.{key} changed: {before} -> {value}"], key
        assert st["04_indexing"] == ["stale", "upstream stage 03 runs first"]
    out = run(project, "--to", "3", "--set", "chunking.max=900")
    assert "03_chunking: running (config chunking.max changed: 1000 -> 900)" in out
    assert "02_preprocessing: fresh, skipped" in out
    assert status(project)["03_chunking"] == ["stale", "config chunking.max changed: 900 -> 1000"]
    run(project, "--to", "3")  # the same inputs as the first run: the same fingerprint
    all_fresh(project)


def test_a_rewritten_upstream_output_makes_the_next_stage_stale(project):
    run_script("03_chunking.py", "--config", str(project / "config.yaml"), "--set", "chunking.target=300",
               cwd=project)
    st = status(project, "chunking.target=300")
    assert st["03_chunking"] == ["fresh"]
    assert st["04_indexing"] == ["stale", "upstream 03_chunks.parquet changed"]
    run(project, "--to", "3")
    all_fresh(project)


def test_an_edited_or_added_input_document_makes_01_stale(project):
    with edited(project / "docs" / "deploy.md", "\nAsk the on-call engineer first.\n"):
        assert status(project)["01_documents"] == ["stale", "input changed: 0 added, 1 changed (deploy.md), 0 removed"]
    all_fresh(project)
    added = project / "docs" / "new.md"
    added.write_text("# New\n\ntext\n")
    try:
        assert status(project)["01_documents"] == ["stale", "input changed: 1 added (new.md), 0 changed, 0 removed"]
    finally:
        added.unlink()
    all_fresh(project)


@pytest.mark.parametrize("name, more", [("queries.tsv", "q3\tbase backup\n"), ("qrels.tsv", "q2 0 deploy.md 0\n")])
def test_an_edited_queries_or_qrels_file_makes_05_stale(project, name, more):
    with edited(project / name, more):
        st = status(project)
        assert all(st[s.label] == ["fresh"] for s in STAGES[:4])
        assert st["05_retrieval"] == ["stale", f"{project / name} changed"]
    all_fresh(project)


@pytest.mark.parametrize("number, name", [(5, "05_retrieval.py"), (5, "pipekit/retrieve/queries.py")])
def test_edited_code_makes_its_stage_stale(project, number, name):
    stage = STAGES[number - 1]
    assert any(name == c or (c.endswith("/") and name.startswith(c)) for c in stage.code)  # listed, or in a listed room
    with edited(project / name, "\n# an edit\n"):
        st = status_of_copy(project)
        assert all(st[s.label] == ["fresh"] for s in STAGES[:number - 1])
        assert st[stage.label] == ["stale", f"code changed ({', '.join(stage.code)})"]
    all_fresh(project)


def test_config_changes_read_as_yaml_not_python(project):
    # `None -> 'wordllama'` is Python's spelling; the user typed (and config.yaml holds) YAML.
    assert "config indexing.dense_model changed: null -> wordllama" in status(
        project, "indexing.dense_model=wordllama")["04_indexing"]
    st = status(project, "chunking.unit=chars")
    assert st["03_chunking"] == ["stale", "config chunking.unit changed: words -> chars"]
    st = status(project, 'documents.exclude=["*.csv", "web/"]')
    assert "config documents.exclude changed: [] -> ['*.csv', web/]" in st["01_documents"]


def test_a_file_and_a_folder_leaving_the_exclusion_are_named_so(tmp_path):
    """Exercise 1's case: nothing on disk changed, a pattern did; `1 changed (tables/incidents.csv),
    1 removed (web)` sent the user looking for an edit they never made."""
    docs = tmp_path / "docs"
    for rel, text in [("a.md", "# A\n\nalpha words\n"), ("tables/t.csv", "x,y\n1,2\n"),
                      ("web/p.html", "<h1>P</h1><p>page words</p>")]:
        (docs / rel).parent.mkdir(parents=True, exist_ok=True)
        (docs / rel).write_text(text)
    write_config(tmp_path, documents={"input": str(docs)}, retrieval={"queries": ["alpha"], "qrels": None})
    cfg = str(tmp_path / "config.yaml")
    excluded = 'documents.exclude=["*.csv", "web/"]'
    run_script("01_documents.py", "--config", cfg, "--set", excluded)
    assert status(tmp_path)["01_documents"][2:] == ["no input file changed on disk; 2 no longer excluded (tables/t.csv, web/)"]
    (docs / "a.md").write_text("# A\n\nalpha words, edited\n")  # a real change beside them is still counted
    assert status(tmp_path)["01_documents"][2:] == [
        "input changed: 0 added, 1 changed (a.md), 0 removed; 2 no longer excluded (tables/t.csv, web/)"]
    run_script("01_documents.py", "--config", cfg)
    assert status(tmp_path, excluded)["01_documents"][2:] == [
        "no input file changed on disk; 2 now excluded (tables/t.csv, web/)"]
    assert status(tmp_path, "documents.max_bytes=5")["01_documents"][2:] == [
        "no input file changed on disk; 3 now skipped (a.md, tables/t.csv, web/p.html)"]
