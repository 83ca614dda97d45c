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
                                                      "version": "-", "folder": str(api), "formats": (".md",)}])
    monkeypatch.setattr(docs_qa, "BENCH", tmp_path)
    monkeypatch.setattr(docs_qa, "CORPUS", tmp_path / "corpus")
    monkeypatch.setattr(docs_qa, "REPO", tmp_path)
    docs_qa.build()
    got = tmp_path / "corpus" / "nodejs" / "api"
    assert sorted(p.name for p in got.iterdir()) == ["fs.md", "small.md"]
    assert (got / "fs.md").read_text() == "# File system\n\n## fs.readFile\n"


def pointed_at(collection: str):
    """bench/docs_qa.py pointed at another question set for one test, then back."""
    docs_qa.use(collection)
    yield docs_qa
    docs_qa.use("docs_qa")


def asks_every_project_in_both_formats(bench) -> list[dict]:
    """The set's questions, once each (by id and by wording), over every project it pins,
    in Markdown and reST alike."""
    qs = bench.questions()
    projects = {s["name"] for s in bench.sources()}
    assert len(qs) >= 40 and len({q["id"] for q in qs}) == len(qs)
    assert len({q["question"].lower() for q in qs}) == len(qs)
    assert {q["doc"].split("/")[0] for q in qs} == projects  # every project is asked about
    assert {q["doc"].rsplit(".", 1)[1] for q in qs} == {"md", "rst"}
    return qs


@pytest.fixture
def second_set():
    yield from pointed_at("docs_qa2")


def test_second_set_asks_other_projects_in_both_formats(second_set):
    asks_every_project_in_both_formats(second_set)
    second_set.use("docs_qa")
    first = {s["package"].lower() for s in docs_qa.sources()}
    second_set.use("docs_qa2")
    assert not first & {s["package"].lower() for s in second_set.sources()}  # docs the first set never saw


def test_rst_sections_are_docutils_levels_compared_as_the_pipelines_markdown_headings():
    from pipekit.read.rst import rst_to_markdown

    # The underline styles' order, not the character, decides the level: "~" is level 2 here.
    text = ("Guide\n=====\n\nInstall\n~~~~~~~\n\ntext\n\n``__init__`` and *args*\n"
            "~~~~~~~~~~~~~~~~~~~~~~~\n\nmore\n\nUsage\n=====\n\nend\n")
    got = docs_qa.rst_sections(text)
    assert [s for s, _ in got] == [(("guide",),), (("guide",), ("install",)),
                                   (("guide",), ("__init__", "and", "args")), (("usage",),)]
    assert got[2][1] == "__init__ and args"
    # Stage 02 hands stage 03 (and the recipe) that document as Markdown: its headings give
    # the same keys, so no system is judged by its own idea of a heading.
    markdown, _ = rst_to_markdown(text)
    assert [s for s, _ in docs_qa.document_sections(markdown)] == [s for s, _ in got]


def test_build_keeps_a_sources_formats_from_its_sdist(tmp_path, monkeypatch):
    import io
    import tarfile

    cache = tmp_path / "corpora" / "docs_qa_sdists"
    cache.mkdir(parents=True)
    with tarfile.open(cache / "demo-1.0.tar.gz", "w:gz") as tar:
        for name, body in [("demo-1.0/docs/a.rst", b"A\n=\n"), ("demo-1.0/docs/b.md", b"# B\n"),
                           ("demo-1.0/docs/conf.py", b"x = 1\n"), ("demo-1.0/README.rst", b"R\n=\n")]:
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    monkeypatch.setattr(docs_qa.subprocess, "run", lambda *a, **k: None)  # the archive is already here
    monkeypatch.setattr(docs_qa, "sources", lambda: [{"name": "demo", "kind": "sdist", "package": "demo",
                                                      "version": "1.0", "folder": "docs", "formats": (".rst",)}])
    monkeypatch.setattr(docs_qa, "BENCH", tmp_path)
    monkeypatch.setattr(docs_qa, "CORPUS", tmp_path / "corpus")
    monkeypatch.setattr(docs_qa, "REPO", tmp_path)
    docs_qa.build()
    assert [p.name for p in (tmp_path / "corpus" / "demo" / "docs").iterdir()] == ["a.rst"]


def test_every_section_of_the_second_set_exists_once_in_its_document(second_set):
    if not all((second_set.CORPUS / s["name"]).is_dir() for s in second_set.sources()):
        pytest.skip(f"the documentation is not in {second_set.CORPUS} "
                    "(python bench/docs_qa.py --collection docs_qa2 --build)")
    qs = second_set.questions()
    assert second_set.answerable(qs) == qs  # every source is pinned: nothing may be left out


@pytest.fixture
def third_set():  # issue 46's
    yield from pointed_at("docs_qa3")


def test_third_set_asks_projects_neither_earlier_set_saw(third_set):
    asks_every_project_in_both_formats(third_set)
    earlier = set()
    for name in ("docs_qa", "docs_qa2"):
        third_set.use(name)
        earlier |= {s["package"].lower() for s in third_set.sources()}
    third_set.use("docs_qa3")
    assert not earlier & {s["package"].lower() for s in third_set.sources()}


def test_every_section_of_the_third_set_exists_once_in_its_document(third_set):
    if not all((third_set.CORPUS / s["name"]).is_dir() for s in third_set.sources()):
        pytest.skip(f"the documentation is not in {third_set.CORPUS} "
                    "(python bench/docs_qa.py --collection docs_qa3 --build)")
    qs = third_set.questions()
    assert third_set.answerable(qs) == qs
