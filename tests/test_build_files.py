"""Documentation build output: a generator's leftovers are skipped, its pages and the
user's own files are read (pipekit/read/build_output.py, the walk in pipekit/read/)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from conftest import run_script
from pipekit.run.config import load_config
from pipekit.run.errors import ConfigError
from pipekit.read.documents import read_document

from pipekit.read.walk import list_inputs
PAGE = "<html><head><title>{0}</title></head><body><h1>{0}</h1><p>About {0}.</p></body></html>"


def write(path: Path, text: str = "x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def sphinx_site(html: Path) -> None:
    """What `sphinx-build -b html` leaves: markers, pages, and the leftovers beside them."""
    write(html / ".buildinfo", "# Sphinx build info version 1\nconfig: abc\n")
    write(html / "searchindex.js", "Search.setIndex({})")
    write(html / "objects.inv", "# Sphinx inventory version 2\n")
    write(html / "index.html", PAGE.format("Welcome"))
    write(html / "guide" / "install.html", PAGE.format("Installing"))
    write(html / "_sources" / "index.rst.txt", "Welcome\n=======\n")
    write(html / "_sources" / "guide" / "install.rst.txt", "Installing\n==========\n")
    write(html / "_static" / "basic.css", "body {}")
    write(html / "_static" / "notes.md", "# a theme's readme\n")
    write(html / "_images" / "diagram.png", "PNG")
    write(html / "_downloads" / "0f3a" / "example.py", "print(1)\n")
    write(html / "genindex.html", PAGE.format("Index"))
    write(html / "genindex-A.html", PAGE.format("Index – A"))
    write(html / "py-modindex.html", PAGE.format("Python Module Index"))
    write(html / "search.html", PAGE.format("Search"))


def rows(root: Path, **options) -> dict[str, dict]:
    return {e.doc_id: read_document(e) for e in list_inputs(root, **options)}


def test_sphinx_leftovers_are_skipped_with_a_reason_and_pages_read(tmp_path):
    sphinx_site(tmp_path / "docs" / "_build" / "html")
    got = rows(tmp_path, hidden=True)
    site = "docs/_build/html/"
    read = {k[len(site):] for k, r in got.items() if r["status"] == "ok"}
    assert read == {"index.html", "guide/install.html"}
    skipped = {k[len(site):]: r["error"] for k, r in got.items() if r["status"] == "skipped"}
    assert set(skipped) == {".buildinfo", "searchindex.js", "objects.inv", "_sources/index.rst.txt",
                            "_sources/guide/install.rst.txt", "_static/basic.css", "_static/notes.md",
                            "_images/diagram.png", "_downloads/0f3a/example.py", "genindex.html",
                            "genindex-A.html", "py-modindex.html", "search.html"}
    why = skipped["_sources/index.rst.txt"]
    assert why.startswith("Sphinx build output, not a document: a copy of a page's source text")
    assert "docs/_build/html/ is a Sphinx build, recognised by .buildinfo, objects.inv, searchindex.js" in why
    assert why.endswith("set documents.build_files: true to read it")
    assert "the search page" in skipped["search.html"]


def test_build_files_true_reads_the_leftovers(tmp_path):
    sphinx_site(tmp_path)
    got = rows(tmp_path, build_files=True)
    assert got["_sources/index.rst.txt"]["status"] == "ok"
    assert got["genindex.html"]["status"] == "ok" and got["_static/notes.md"]["status"] == "ok"
    assert not any("build output" in (r["error"] or "") for r in got.values())


def test_a_users_folder_with_build_names_but_no_markers_is_read(tmp_path):
    # A notes folder that happens to have a _static/ folder, a search page and one file
    # named like a marker: one marker is not a build.
    notes = tmp_path / "notes"
    write(notes / "_static" / "style-guide.md", "# Style guide\n")
    write(notes / "_sources" / "draft.txt", "draft text")
    write(notes / "search.html", PAGE.format("How we search"))
    write(notes / "genindex.html", PAGE.format("Gene index"))
    write(notes / "objects.inv", "inventory")
    got = rows(tmp_path)
    for doc_id in ("notes/_static/style-guide.md", "notes/_sources/draft.txt", "notes/search.html",
                   "notes/genindex.html"):
        assert got[doc_id]["status"] == "ok", got[doc_id]
    assert got["notes/objects.inv"]["error"].startswith("format '.inv' is not supported")


def test_leftover_names_are_leftovers_only_directly_under_the_build_folder(tmp_path):
    sphinx_site(tmp_path)
    write(tmp_path / "guide" / "_static" / "cheatsheet.md", "# Cheatsheet\n")
    write(tmp_path / "guide" / "search.html", PAGE.format("Searching the catalogue"))
    got = rows(tmp_path)
    assert got["guide/_static/cheatsheet.md"]["status"] == "ok"
    assert got["guide/search.html"]["status"] == "ok"


def test_mkdocs_site_leftovers_are_skipped(tmp_path):
    site = tmp_path / "site"
    write(site / "search" / "search_index.json", '{"docs": []}')
    write(site / "search" / "main.js", "")
    write(site / "sitemap.xml", "<urlset/>")
    write(site / "sitemap.xml.gz", "gz")
    write(site / "404.html", PAGE.format("404 - Not found"))
    write(site / "css" / "theme.css", "")
    write(site / "assets" / "javascripts" / "bundle.js", "")
    write(site / "assets" / "manual.md", "# Manual\n")  # a user's file copied into the site
    write(site / "index.html", PAGE.format("Home"))
    write(site / "guide" / "index.html", PAGE.format("Guide"))
    got = rows(tmp_path)
    ok = {k for k, r in got.items() if r["status"] == "ok"}
    assert ok == {"site/index.html", "site/guide/index.html", "site/assets/manual.md"}
    assert got["site/404.html"]["error"].startswith("MkDocs build output, not a document: the 'page not found' page")
    assert all("MkDocs build output" in got[k]["error"] for k in got if k not in ok)


def test_a_linked_marker_subfolder_does_not_count(tmp_path):
    # search/search_index.json reached through a symlink is not looked at: the check
    # never leaves the folder, and with one marker left the folder is no build.
    outside = tmp_path / "outside"
    write(outside / "search_index.json", "{}")
    site = tmp_path / "in" / "site"
    write(site / "sitemap.xml", "<urlset/>")
    write(site / "404.html", PAGE.format("Our 404 story"))
    (site / "search").symlink_to(outside)
    got = rows(tmp_path / "in")
    assert got["site/404.html"]["status"] == "ok"


def test_config_key_is_validated_with_its_name_and_what_it_accepts():
    assert load_config(None)["documents"]["build_files"] is False
    assert load_config(None, ["documents.build_files=true"])["documents"]["build_files"] is True
    with pytest.raises(ConfigError, match=r"documents.build_files must be true .* or false .*; got 'yes please'"):
        load_config(None, ["documents.build_files=yes please"])


def test_stage_01_counts_them_in_its_summary_and_the_key_reads_them(tmp_path):
    sphinx_site(tmp_path / "html")
    out = tmp_path / "out"
    proc = run_script("01_documents.py", "--set", f"documents.input={tmp_path / 'html'}",
                      "--set", f"paths.output={out}")
    assert "12 documentation build files" in proc.stdout + proc.stderr
    table = pd.read_parquet(out / "01_documents.parquet")
    assert sorted(table[table.status == "ok"].doc_id) == ["guide/install.html", "index.html"]
    proc = run_script("01_documents.py", "--set", f"documents.input={tmp_path / 'html'}",
                      "--set", f"paths.output={out}", "--set", "documents.build_files=true")
    table = pd.read_parquet(out / "01_documents.parquet")
    assert "_sources/index.rst.txt" in set(table[table.status == "ok"].doc_id)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["_sources", "_static", "genindex", "genindex-A.html", "py-modindex.html",
                                 "modindex", "search", "search.html", "searchindex.js", "objects.inv", ".buildinfo",
                                 ".doctrees", "assets", "javascripts", "stylesheets", "css", "js", "404.html",
                                 "sitemap.xml.gz", "library", "index.html", "a*b", "x.html"]), min_size=1, max_size=4))
def test_a_path_is_the_leftover_the_globs_one_by_one_say(parts):
    """`leftover` rules most paths out with one expression per depth: the answer is the
    first matching glob's, as fnmatchcase on each glob in the table's order gives it."""
    import fnmatch

    from pipekit.read.build_output import GENERATORS, Build, leftover

    rel = "/".join(parts)
    for gen in GENERATORS:
        plain = next((what for glob, what in gen.leftovers
                      if len(parts) >= glob.count("/") + 1
                      and fnmatch.fnmatchcase("/".join(parts[:glob.count("/") + 1]), glob)), None)
        assert leftover(Build(gen, "", 0, ()), rel) == plain
