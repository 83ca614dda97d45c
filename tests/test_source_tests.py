"""A source tree's tests: a tests folder's files are skipped by default, each with a row
saying why and what reads them; documentation beside them, folders merely named like
tests, and the folder the user points at are read (pipekit/read/source_tests.py, the walk
in pipekit/read/walk.py, documents.test_files)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, run_script
from pipekit.read.documents import read_document
from pipekit.read.walk import list_inputs
from pipekit.run.config import load_config
from pipekit.run.errors import ConfigError

HINT = "set documents.test_files: true to read it"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def source_tree(root: Path) -> None:
    """A project as its sdist ships it: the package, its docs, and its tests with fixtures."""
    write(root / "docs" / "x.md", "# Frozen classes\n\nfrozen=True makes instances immutable.\n")
    write(root / "pkg" / "__init__.py", '"""The package: frozen classes."""\n')
    write(root / "pkg" / "tests" / "__init__.py", "")
    write(root / "pkg" / "tests" / "test_x.py",
          '"""Tests of frozen classes."""\n\ndef test_frozen():\n    """frozen=True raises on assignment."""\n')
    write(root / "pkg" / "tests" / "fixtures" / "page.md", "# A fixture page about frozen classes\n")
    write(root / "pkg" / "tests" / "data.txt", "frozen frozen frozen\n")


def rows(root: Path, **options) -> dict[str, dict]:
    return {e.doc_id: read_document(e) for e in list_inputs(root, **options)}


def test_a_tests_folder_is_skipped_file_by_file_saying_why_and_how_to_read_it(tmp_path):
    source_tree(tmp_path)
    got = rows(tmp_path, test_files=False)
    assert {k for k, r in got.items() if r["status"] == "ok"} == {"docs/x.md", "pkg/__init__.py"}
    skipped = {k: r["error"] for k, r in got.items() if r["status"] == "skipped"}
    # every file below the tests folder has its own row, fixtures and data included
    assert set(skipped) == {"pkg/tests/__init__.py", "pkg/tests/test_x.py", "pkg/tests/fixtures/page.md",
                            "pkg/tests/data.txt"}
    why = skipped["pkg/tests/fixtures/page.md"]
    assert why == ("part of a test suite, not documentation: pkg/tests/ is a tests folder "
                   f"(it holds test_x.py); {HINT}")
    assert all(w == why for w in skipped.values())
    # the report's inventory groups them under the words of stage 01's summary
    from pipekit.tools.inventory import why_not_read
    assert why_not_read("skipped", why) == "skipped: in a source tree's tests folder (documents.test_files)"


def test_test_files_true_reads_them(tmp_path):
    source_tree(tmp_path)
    got = rows(tmp_path, test_files=True)
    assert all(r["status"] == "ok" for r in got.values()), got
    assert "pkg/tests/test_x.py" in got and "pkg/tests/fixtures/page.md" in got


def test_the_folder_the_user_points_at_is_read_even_when_it_is_a_tests_folder(tmp_path):
    source_tree(tmp_path)
    got = rows(tmp_path / "pkg" / "tests", test_files=False)
    assert {k: r["status"] for k, r in got.items()} == {
        "__init__.py": "ok", "test_x.py": "ok", "fixtures/page.md": "ok", "data.txt": "ok"}
    # ... but a test suite inside it is still one
    write(tmp_path / "pkg" / "tests" / "fixtures" / "tests" / "conftest.py", '"""fixtures"""\n')
    got = rows(tmp_path / "pkg" / "tests", test_files=False)
    assert got["fixtures/tests/conftest.py"]["status"] == "skipped"
    assert got["fixtures/page.md"]["status"] == "ok"


@pytest.mark.parametrize("marker", ["conftest.py", "test_api.py", "api_test.py", "button.test.js", "parse_test.go"])
@pytest.mark.parametrize("name", ["tests", "test", "testing", "Tests"])
def test_what_makes_a_tests_folder_a_name_and_test_code_in_it(tmp_path, name, marker):
    write(tmp_path / "proj" / name / marker, "")
    write(tmp_path / "proj" / name / "notes.md", "# Notes\n")
    assert rows(tmp_path, test_files=False)[f"proj/{name}/notes.md"]["status"] == "skipped"


def test_folders_named_like_tests_without_test_code_and_loose_test_modules_are_read(tmp_path):
    # hatch ships its `hatch test` command in src/hatch/cli/test/ and a tutorial in
    # docs/tutorials/testing/; Python-Markdown's markdown/test_tools.py is a public module;
    # pytest's docs keep examples in doc/en/example/fixtures/ as test_*.py and conftest.py.
    write(tmp_path / "src" / "hatch" / "cli" / "test" / "__init__.py", '"""Run the tests."""\n')
    write(tmp_path / "src" / "hatch" / "cli" / "test" / "core.py", '"""How hatch test runs them."""\n')
    write(tmp_path / "docs" / "tutorials" / "testing" / "overview.md", "# Testing\n")
    write(tmp_path / "markdown" / "test_tools.py", '"""A testing framework for extensions."""\n')
    write(tmp_path / "doc" / "en" / "example" / "fixtures" / "test_order.py", '"""Fixture order."""\n')
    write(tmp_path / "doc" / "en" / "example" / "conftest.py", '"""An example conftest."""\n')
    write(tmp_path / "notes" / "test" / "plan.md", "# Our test plan\n")
    got = rows(tmp_path, test_files=False)
    assert all(r["status"] == "ok" for r in got.values()), {k: r["error"] for k, r in got.items()}


def test_no_effect_on_a_folder_without_tests():
    sample = REPO / "data" / "sample"
    def listed(flag):
        return [(e.doc_id, e.skip, e.reason) for e in list_inputs(sample, hidden=False, test_files=flag)]
    assert listed(False) == listed(True)
    assert len(listed(False)) > 10


def test_config_default_and_validation():
    assert load_config(None)["documents"]["test_files"] is False
    assert load_config(None, ["documents.test_files=true"])["documents"]["test_files"] is True
    with pytest.raises(ConfigError, match=r"documents.test_files must be true \(read the files of a source "
                                          r"tree's tests folders.* or false \(skip them.*; got 'sometimes'"):
        load_config(None, ["documents.test_files=sometimes"])


def test_stage_01_counts_them_and_a_changed_setting_reads_them_again(tmp_path):
    source_tree(tmp_path / "in")
    out = tmp_path / "out"
    sets = ("--set", f"documents.input={tmp_path / 'in'}", "--set", f"paths.output={out}")
    proc = run_script("01_documents.py", *sets)
    assert "skipped: 4 in a source tree's tests folder (documents.test_files)" in proc.stdout + proc.stderr
    table = pd.read_parquet(out / "01_documents.parquet").set_index("doc_id")
    assert table.loc["pkg/tests/test_x.py", "status"] == "skipped"
    assert table.loc["pkg/tests/test_x.py", "error"].endswith(HINT)
    # The setting is one of stage 01's inputs: flipped, the stage is stale and its skipped
    # rows are not copied from the run before (they would be, were the setting not recorded).
    status = run_script("run_pipeline.py", "--status", *sets, "--set", "documents.test_files=true")
    assert "config documents.test_files changed: false -> true" in status.stdout + status.stderr
    run_script("01_documents.py", *sets, "--set", "documents.test_files=true")
    table = pd.read_parquet(out / "01_documents.parquet").set_index("doc_id")
    assert set(table.status) == {"ok"} and len(table) == 6
    run_script("01_documents.py", *sets)
    table = pd.read_parquet(out / "01_documents.parquet").set_index("doc_id")
    assert (table.status == "skipped").sum() == 4
