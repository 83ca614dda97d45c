"""bench/docs_qa.py's question set and its referee (the bench itself needs the documentation,
which `python bench/docs_qa.py --build` gathers; without it the section check is skipped)."""
from __future__ import annotations

import importlib.util
import sys

import pytest

from conftest import REPO

spec = importlib.util.spec_from_file_location("docs_qa", REPO / "bench" / "docs_qa.py")
docs_qa = importlib.util.module_from_spec(spec)
sys.modules["docs_qa"] = docs_qa
spec.loader.exec_module(docs_qa)


def test_questions_are_many_distinct_and_name_a_project_document_and_section():
    qs = docs_qa.questions()
    projects = {s["name"] for s in docs_qa.sources()}
    assert len(qs) >= 40
    assert len({q["id"] for q in qs}) == len(qs)
    assert len({q["question"].lower() for q in qs}) == len(qs)
    for q in qs:
        assert q["doc"].split("/")[0] in projects and q["doc"].endswith(".md"), q
        assert q["section"].strip() and q["question"].strip(), q
    assert len({q["doc"].split("/")[0] for q in qs}) == len(projects)  # every project is asked about


def test_referee_reads_headings_as_a_reader_sees_them():
    assert docs_qa.shown("Handling Errors { #handling-errors }") == "Handling Errors"
    assert docs_qa.shown("Name (*required*) ## {: #name }") == "Name (required)"
    assert docs_qa.shown("`fs.readFile(path)` and _Black_") == "fs.readFile(path) and Black"
    assert docs_qa.title_key("use_directory_urls") == ("use_directory_urls",)
    assert docs_qa.title_key("usedirectoryurls") != docs_qa.title_key("use_directory_urls")
    text = "# Guide\n\n## Install\n\ntext\n\nSetup\n-----\n\nmore\n"
    assert [s for s, _ in docs_qa.document_sections(text)] == [
        (("guide",),), (("guide",), ("install",)), (("guide",), ("setup",))]


def test_scores_count_distinct_sections_and_documents():
    qs = [{"id": "q", "doc": "a.md", "key": (("install",),), "shown": "Install"}]
    other = ("b.md", (("x",),), "X")
    hit = ("a.md", (("guide",), ("install",)), "Install")
    sc = docs_qa.score(qs, {"q": [other, other, ("c.md", (("y",),), "Y"), hit]})
    assert sc["section hit@1"] == 0 and sc["section hit@3"] == 1 and sc["document hit@3"] == 1
    assert sc["cited as shown@3"] == 1
    sc = docs_qa.score(qs, {"q": [("a.md", (("guide",), ("install",)), "Install {#i}")]})
    assert sc["section hit@1"] == 1 and sc["cited as shown@3"] == 0


def test_every_section_exists_once_in_its_document():
    if not all((docs_qa.CORPUS / s["name"]).is_dir() for s in docs_qa.sources()):
        pytest.skip(f"the documentation is not in {docs_qa.CORPUS} (python bench/docs_qa.py --build)")
    qs = docs_qa.questions()
    kept = docs_qa.answerable(qs)  # raises SystemExit naming a pinned source's question that does not match
    left_out = [q["id"] for q in qs if q not in kept]
    assert all(i.startswith("node-") for i in left_out) and len(left_out) <= 3, left_out


def test_build_unpacks_debians_gzipped_pages(tmp_path, monkeypatch):
    import gzip

    api = tmp_path / "doc" / "api"
    api.mkdir(parents=True)
    (api / "small.md").write_text("# Small\n")
    (api / "fs.md.gz").write_bytes(gzip.compress(b"# File system\n\n## fs.readFile\n"))
    (api / "fs.html").write_text("<h1>not Markdown</h1>")
    monkeypatch.setattr(docs_qa, "sources", lambda: [{"name": "nodejs", "kind": "debian", "package": "nodejs-doc",
                                                      "version": "-", "folder": str(api)}])
    monkeypatch.setattr(docs_qa, "BENCH", tmp_path)
    monkeypatch.setattr(docs_qa, "CORPUS", tmp_path / "corpus")
    monkeypatch.setattr(docs_qa, "REPO", tmp_path)
    docs_qa.build()
    got = tmp_path / "corpus" / "nodejs" / "api"
    assert sorted(p.name for p in got.iterdir()) == ["fs.md", "small.md"]
    assert (got / "fs.md").read_text() == "# File system\n\n## fs.readFile\n"
