"""Jupyter notebooks in stage 01: cells as Markdown, headings as heading trails, never JSON.

The fixture `tests/fixtures/notebooks/tides.ipynb` has a title, two levels of headings, a
code cell holding a ``` fence and a `#` comment, a Markdown cell that leaves a fence
open, a raw reST cell with an underline, an attachment, and outputs of every kind (a
stream, a text/plain result beside an HTML one, an image with its placeholder text, an
error).  `broken.ipynb` is a notebook whose JSON breaks on line 3.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from pipekit.read.documents import read_document
from pipekit.read.notebook import read_notebook
from pipekit.read.text import Unreadable
from pipekit.read.walk import list_inputs

from conftest import REPO, assert_same_outputs, pipeline, write_config

FIXTURES = REPO / "tests" / "fixtures" / "notebooks"
TIDES = FIXTURES / "tides.ipynb"
# What notebook JSON looks like in a chunk: a key in quotes followed by a colon.
JSON_KEY = re.compile(r'"(?:cell_type|outputs|source|metadata|execution_count|nbformat)"\s*:')
PNG_BASE64 = "iVBORw0KGgo"


def test_markdown_cells_stay_markdown_and_code_cells_are_fenced_in_the_notebooks_language():
    row = read_notebook(TIDES.read_bytes())
    text = row["text"]
    assert row["title"] == "Tide tables for harbour pilots"
    assert text.startswith("# Tide tables for harbour pilots\n")
    # The code holds a ``` line, so its fence is longer; its `#` comment is inside the fence.
    assert "````python\n# a comment, not a heading\nreadings = load_gauge('pier-4')" in text
    assert "\n````\n" in text
    # The raw reST cell is fenced: its ===== underline is not a Markdown heading.
    assert "```rst\nAppendix in reST\n================" in text
    assert not JSON_KEY.search(text) and PNG_BASE64 not in text


def test_outputs_are_left_out_by_default_and_only_their_text_is_kept_when_asked():
    without = read_notebook(TIDES.read_bytes())["text"]
    with_outputs = read_notebook(TIDES.read_bytes(), outputs=True)["text"]
    for printed in ("240 readings", "Gauge(pier-4, marigold)", "KeyError: 'tide_height'"):
        assert printed not in without
        assert printed in with_outputs
    assert "```output\n240 readings\n```" in with_outputs
    # Rich outputs stay out: the HTML twin of a result, the image and its placeholder text,
    # the terminal colours of a traceback.
    for rich in ("quokka", "<b>Gauge", "<Figure size", PNG_BASE64, "\x1b["):
        assert rich not in with_outputs


def test_a_notebook_that_is_not_json_is_an_error_row_naming_line_and_column():
    [entry] = list_inputs(FIXTURES / "broken.ipynb")
    row = read_document(entry)
    assert (row["status"], row["format"], row["text"]) == ("error", "notebook", None)
    assert row["error"].startswith("not a Jupyter notebook: invalid JSON at line 3 column 30")
    assert "\n" not in row["error"]


@pytest.mark.parametrize("data, reason", [
    (b'[{"cell_type": "markdown"}]', "the JSON is an array, not an object with cells"),
    (b'{"metadata": {}, "nbformat": 4}', "the JSON object has no 'cells' list"),
    (b'{"cells": [], "nbformat": 99}', "nbformat version 99 is unknown"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary file (a PNG image: NUL bytes), not text"),
])
def test_json_that_is_no_notebook_says_why(data, reason):
    with pytest.raises(Unreadable, match=re.escape(reason)):
        read_notebook(data)


def cells(*sources: str) -> bytes:
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": s} for s in sources]}).encode()


@pytest.mark.parametrize("sources, title", [
    (["Intro text", "Harbour Pilots\n=============\n\nSetext, as CommonMark reads it."], "Harbour Pilots"),
    (["## Only a second level", "```\n# inside a fence\n```"], None),
    (["#not a heading without its space", "# The *real* `title` [here](x.md)"], "The real title here"),
])
def test_the_title_is_the_first_level_1_heading_of_the_markdown_cells(sources, title):
    assert read_notebook(cells(*sources))["title"] == title


def test_an_old_notebook_missing_a_required_key_says_which():
    v3 = b'{"nbformat": 3, "worksheets": [{"cells": [{"cell_type": "code", "input": "x"}]}]}'
    with pytest.raises(Unreadable, match="^not a Jupyter notebook: a cell lacks its 'outputs' key$"):
        read_notebook(v3)


def test_an_empty_notebook_file_is_an_empty_document_not_an_error():
    assert read_notebook(b"")["text"] == ""


def test_an_old_v3_notebook_is_read_through_nbformats_upgrade():
    v3 = {"nbformat": 3, "nbformat_minor": 0, "metadata": {"name": "old"},
          "worksheets": [{"cells": [
              {"cell_type": "heading", "level": 1, "metadata": {}, "source": "Old harbour notes"},
              {"cell_type": "markdown", "metadata": {}, "source": ["Pilots board\n", "at the outer buoy."]},
              {"cell_type": "code", "language": "python", "input": "print('buoy')", "outputs": [],
               "collapsed": False, "metadata": {}}]}]}
    row = read_notebook(json.dumps(v3).encode())
    assert row["title"] == "Old harbour notes"
    assert "\n\nPilots board\nat the outer buoy.\n\n```" in row["text"]  # lines joined as written
    assert "\nprint('buoy')\n```" in row["text"] and not JSON_KEY.search(row["text"])


# ---- through the pipeline: headings become heading_path, reuse holds ------------------------


def reused(stdout: str, stage: str) -> int:
    """How many files (01) or documents (02, 03) a stage's summary says it reused."""
    block = re.search(rf"^{stage}: .* rows out .*\n((?:  .*\n)*)", stdout, re.M).group(1)
    m = re.search(r"([\d,]+) unchanged (?:files|documents)", block)
    return int(m.group(1).replace(",", "")) if m else 0


def notebook_folder(tmp_path: Path) -> tuple[Path, Path]:
    docs = tmp_path / "docs"
    shutil.copytree(FIXTURES, docs / "notebooks")
    (docs / "notes.md").write_text("# Harbour notes\n\nThe outer buoy is lit at night.\n", encoding="utf-8")
    cfg = write_config(tmp_path, documents={"input": str(docs)},
                       retrieval={"queries": ["when does the tidal stream turn"], "qrels": None})
    return docs, cfg


def chunks_of(out: Path, doc_id: str = "notebooks/tides.ipynb") -> pd.DataFrame:
    chunks = pd.read_parquet(out / "03_chunks.parquet")
    return chunks[chunks.doc_id == doc_id]


def test_notebook_headings_become_heading_paths_and_no_chunk_holds_json(tmp_path):
    _, cfg = notebook_folder(tmp_path)
    pipeline(cfg, tmp_path / "out", args=("--to", "3"))
    docs = pd.read_parquet(tmp_path / "out" / "01_documents.parquet").set_index("doc_id")
    assert docs.loc["notebooks/tides.ipynb", ["format", "status"]].tolist() == ["notebook", "ok"]
    assert docs.loc["notebooks/broken.ipynb", "status"] == "error"
    chunks = chunks_of(tmp_path / "out")
    paths = [list(p) for p in chunks.heading_path]
    title = "Tide tables for harbour pilots"
    assert [title, "Loading the gauge readings"] in paths
    assert [title, "Loading the gauge readings", "Slack water"] in paths
    # The fence the Markdown cell left open was closed with its cell: the heading after it is one.
    assert [title, "Publishing the table"] in paths
    assert not any("Appendix" in h or "comment" in h for p in paths for h in p)
    all_chunks = pd.read_parquet(tmp_path / "out" / "03_chunks.parquet")
    assert not all_chunks.text.str.contains(JSON_KEY).any()
    assert not all_chunks.text.str.contains(PNG_BASE64).any()


def test_the_outputs_key_changes_what_is_read(tmp_path):
    _, cfg = notebook_folder(tmp_path)
    pipeline(cfg, tmp_path / "off", args=("--to", "3"))
    pipeline(cfg, tmp_path / "on", "documents.notebook_outputs=true", args=("--to", "3"))
    assert not chunks_of(tmp_path / "off").text.str.contains("240 readings").any()
    assert chunks_of(tmp_path / "on").text.str.contains("240 readings").any()


def test_max_bytes_applies_to_notebooks(tmp_path):
    _, cfg = notebook_folder(tmp_path)
    pipeline(cfg, tmp_path / "out", "documents.max_bytes=2000", args=("--to", "1"))
    docs = pd.read_parquet(tmp_path / "out" / "01_documents.parquet").set_index("doc_id")
    assert docs.loc["notebooks/tides.ipynb", "status"] == "skipped"
    assert "documents.max_bytes" in docs.loc["notebooks/tides.ipynb", "error"]
    assert docs.loc["notes.md", "status"] == "ok"


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_a_changed_notebook_is_read_again_and_the_rest_reused(tmp_path, engine):
    if engine == "dask":
        pytest.importorskip("distributed")
    docs, cfg = notebook_folder(tmp_path)
    sets = (f"engine.kind={engine}",) + (("engine.workers=2",) if engine == "dask" else ())
    pipeline(cfg, tmp_path / "out", *sets)
    nb = docs / "notebooks" / "tides.ipynb"
    data = json.loads(nb.read_text(encoding="utf-8"))
    data["cells"].append({"cell_type": "markdown", "id": "c8", "metadata": {},
                          "source": "## Night pilotage\n\nOnly with the harbour master's leave."})
    nb.write_text(json.dumps(data, indent=1), encoding="utf-8")
    rerun = pipeline(cfg, tmp_path / "out", *sets).stdout
    pipeline(cfg, tmp_path / "forced", *sets, args=("--force",))
    assert_same_outputs(tmp_path / "out", tmp_path / "forced")
    assert "0 added, 1 changed (notebooks/tides.ipynb), 0 removed" in rerun
    assert reused(rerun, "01_documents") == 2  # broken.ipynb and notes.md: rows copied, not read
    assert reused(rerun, "03_chunking") == 1   # notes.md
    assert ["Tide tables for harbour pilots", "Night pilotage"] in [list(p) for p in chunks_of(tmp_path / "out").heading_path]
