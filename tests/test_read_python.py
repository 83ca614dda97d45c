"""Python sources in stage 01: docstrings as sections whose heading trail is the qualified name.

The fixture `tests/fixtures/python/src/shipping/rates.py` has a module docstring, a
function with a numpy-style docstring (its `----------` underlines, a `#` line and a lone
`~~~` fence must not make headings or swallow the sections after it), an undocumented
function, a private one with and one without a docstring, a class with a Google
style docstring, a property, a method with a nested function, a nested class and an async
function.  `broken_syntax.py` stops parsing on line 6.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from pipekit.read.documents import read_document
from pipekit.read.python import module_name, read_python
from pipekit.read.walk import list_inputs

from conftest import REPO, pipeline, write_config

FIXTURES = REPO / "tests" / "fixtures" / "python"
RATES = FIXTURES / "src" / "shipping" / "rates.py"


@pytest.mark.parametrize("doc_id, name", [
    ("requests/api.py", "requests.api"),
    ("pkg/__init__.py", "pkg"),
    ("src/pkg/mod.py", "pkg.mod"),
    ("requests-2.32.3/src/requests/api.py", "requests.api"),   # an sdist's folder is no package
    ("flask-3.1.3/tests/test_basic.py", "tests.test_basic"),
    ("setup.py", "setup"),
])
def test_module_names_come_from_the_path_as_python_imports_them(doc_id, name):
    assert module_name(doc_id) == name


@pytest.fixture(scope="module")
def chunks(tmp_path_factory) -> pd.DataFrame:
    """Stages 01-03 on the fixtures: the chunks of rates.py."""
    tmp = tmp_path_factory.mktemp("python")
    shutil.copytree(FIXTURES, tmp / "docs" / "python")
    cfg = write_config(tmp, documents={"input": str(tmp / "docs")},
                       retrieval={"queries": ["freight rate"], "qrels": None})
    pipeline(cfg, tmp / "out", args=("--to", "3"))
    all_chunks = pd.read_parquet(tmp / "out" / "03_chunks.parquet")
    return all_chunks[all_chunks.doc_id == "python/src/shipping/rates.py"]


def section(chunks: pd.DataFrame, *trail: str) -> str:
    """The text of the chunks whose heading trail is exactly `trail`."""
    found = chunks[chunks.heading_path.map(lambda p: list(p) == list(trail))]
    assert len(found), f"no chunk under {' › '.join(trail)}; trails: {sorted(set(chunks.heading))}"
    return "\n".join(found.text)


def test_heading_trails_are_the_qualified_names_of_documented_objects(chunks):
    trails = {" › ".join(p) for p in chunks.heading_path}
    assert trails == {
        "shipping.rates",
        "shipping.rates › quote",
        "shipping.rates › _convert_currency",
        "shipping.rates › Tariff",
        "shipping.rates › Tariff › quarter",
        "shipping.rates › Tariff › surcharge",
        "shipping.rates › Tariff › Clause",
        "shipping.rates › Tariff › Clause › cite",
        "shipping.rates › fetch_schedule",
    }


def test_each_section_shows_the_signature_then_the_docstring(chunks):
    quote = section(chunks, "shipping.rates", "quote")
    assert "```python\ndef quote(origin, destination, teu=1, *, reefer=False, **surcharges) -> float\n```" in quote
    assert quote.index("-> float") < quote.index("Quote the freight rate")
    assert "@property\ndef quarter(self)" in section(chunks, "shipping.rates", "Tariff", "quarter")
    assert "async def fetch_schedule(port)" in section(chunks, "shipping.rates", "fetch_schedule")
    assert "class Tariff(object)" in section(chunks, "shipping.rates", "Tariff")


def test_docstring_markup_keeps_its_words_but_makes_no_heading(chunks):
    quote = section(chunks, "shipping.rates", "quote")
    for words in ("Parameters", "Port of loading", "Returns", "The rate in US dollars",
                  "This line starts with a hash but is no heading",
                  "An unmatched tilde fence must not swallow the sections after it"):
        assert words in quote
    assert "Tariffs are revised every quarter" in section(chunks, "shipping.rates", "Tariff")
    assert "an HTML block start left open" in section(chunks, "shipping.rates", "Tariff", "surcharge")


def test_code_bodies_and_what_functions_define_inside_are_not_indexed(chunks):
    text = "\n".join(chunks.text)
    assert "albatross_in_the_body" not in text and "return" not in text
    assert "nested_helper" not in text and "never indexed" not in text


def test_undocumented_objects_are_left_out_and_documented_private_ones_kept(chunks):
    text = "\n".join(chunks.text)
    for undocumented in ("undocumented_helper", "_private_undocumented", "__init__"):
        assert undocumented not in text
    assert "a private helper, documented" in section(chunks, "shipping.rates", "_convert_currency")


def test_an_undocumented_class_is_a_heading_alone_over_its_documented_methods(tmp_path):
    source = b'class Plain:\n    def go(self, speed=1):\n        """Go at a speed."""\n'
    text = read_python(source, "pkg/boat.py")["text"]
    assert text == "# pkg.boat\n\n## Plain\n\n### go\n\n```python\ndef go(self, speed=1)\n```\n\nGo at a speed.\n"


def test_a_syntax_error_is_an_error_row_naming_the_line():
    [entry] = list_inputs(FIXTURES / "broken_syntax.py")
    row = read_document(entry)
    assert (row["status"], row["format"], row["text"]) == ("error", "python", None)
    assert row["error"] == "Python syntax error at line 6: '[' was never closed"


def test_python_2_code_is_a_syntax_error_too():
    with pytest.raises(Exception, match=r"^Python syntax error at line 2: Missing parentheses"):
        read_python(b'"""Old module."""\nprint "hello"\n')


def test_a_coding_cookie_decides_the_encoding():
    source = '# -*- coding: latin-1 -*-\n"""Caf\xe9 menu prices."""\n'.encode("latin-1")
    row = read_python(source, "menu.py")
    assert row["encoding"] == "iso-8859-1" and "Café menu prices." in row["text"]
    assert row["note"] is None


def test_bytes_that_break_the_declared_encoding_are_still_read_with_a_note():
    row = read_python('"""Caf\xe9 menu."""\n'.encode("cp1252"), "menu.py")
    assert "Caf" in row["text"] and "not valid as Python declares it" in row["note"]


def test_a_docstring_cannot_open_a_page_marker_or_a_heading(tmp_path: Path):
    source = b'"""Top.\n\n--- page 3 ---\n# Not a heading\nTitle\n=====\n"""\n\ndef f():\n    """Body."""\n'
    text = read_python(source, "m.py")["text"]
    assert "\n\\--- page 3 ---\n\\# Not a heading\nTitle\n\\=====\n" in text
    assert "\n## f\n" in text


def test_max_bytes_counts_a_python_file_eight_times(tmp_path: Path):
    # ast's tree takes ~33-70x the source: a .py counts 8x against documents.max_bytes, as HTML does.
    size = RATES.stat().st_size
    entries = {e.doc_id: e for e in list_inputs(FIXTURES, max_bytes=size * 4)}
    rates = entries["src/shipping/rates.py"]
    assert rates.skip is not None and "documents.max_bytes / 8" in rates.skip
    assert read_document(rates)["status"] == "skipped"
    assert entries["src/shipping/__init__.py"].skip is None  # 60 bytes: well under the limit
