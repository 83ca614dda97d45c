"""Issue 36: `search --json`, `--in`/`--format` filters applied before ranking, and a `link`
on every hit that opens the passage (pipekit/retrieve/filters.py, links.py, chunk/anchors.py)."""
import json
import shutil
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

import pipekit
from pipekit.chunk.anchors import github_slug, markdown_anchors
from pipekit.retrieve.filters import glob_regex
from pipekit.retrieve.links import link, link_list
from pipekit.run.errors import PipelineError

from conftest import REPO, run_script, write_config

SPHINX_PAGE = """<html><head><title>API</title></head><body>
<div class="sphinxsidebar"><h3>Navigation</h3></div>
<section id="the-api"><h1>The API<a class="headerlink" href="#the-api">¶</a></h1><p>Intro words.</p>
<section id="connecting-to-a-server"><h2>Connecting to a server<a class="headerlink" href="#connecting-to-a-server">¶</a></h2>
<p>Use connect to reach the lighthouse server with a pelican.</p></section>
<section id="id1"><h2>Closing<a class="headerlink" href="#id1">¶</a></h2><p>Call close when the heron leaves.</p></section>
</section>
<h2 id="plain-heading">Plain heading</h2><p>Words about the tapir.</p>
<div class="section" id="old-style"><h3>Old style</h3><p>The okapi lives here.</p></div>
</body></html>
"""

GUIDE_MD = """# Guide

Intro text.

## Setup

First setup of the walrus.

## Setup

Second setup of the narwhal.

## Install it {#custom-install}

Install with the ocelot.

## C++ & Rust: a `quick` tour!

Tour of the axolotl.
"""

NOTES_RST = """=========
The Notes
=========

Opening words.

.. _custom-label:

Getting started
===============

Start with the quokka.

Next steps
----------

Steps of the wombat.

Getting started
===============

Again the dingo.
"""

# `kestrel` is everywhere in top/ and once in each low/ page: unfiltered, low/ ranks last.
TOP_PAGE = "# Kestrels {n}\n\nThe kestrel hovers. A kestrel, kestrel, kestrel: kestrel watching {n}.\n"
LOW_PAGE = "# Notes {n}\n\nA long page about gulls and terns and waders, that once names a kestrel. " \
           + "Gulls and terns and waders again and again. " * 8 + "\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("issue36")
    docs = root / "docs"
    (docs / "top").mkdir(parents=True)
    (docs / "low" / "deep").mkdir(parents=True)
    (docs / "api.html").write_text(SPHINX_PAGE, encoding="utf-8")
    (docs / "guide.md").write_text(GUIDE_MD, encoding="utf-8")
    (docs / "notes.rst").write_text(NOTES_RST, encoding="utf-8")
    shutil.copy(REPO / "data" / "sample" / "field-guide.pdf", docs / "field-guide.pdf")
    for n in range(6):
        (docs / "top" / f"t{n}.md").write_text(TOP_PAGE.format(n=n), encoding="utf-8")
    for n in range(4):
        where = docs / "low" / ("deep" if n % 2 else "") / f"l{n}.md"
        where.write_text(LOW_PAGE.format(n=n), encoding="utf-8")
    cfg = write_config(root, documents={"input": str(docs)},
                       retrieval={"queries": ["kestrel"], "qrels": None, "top_k": 50})
    run_script("run_pipeline.py", "--config", str(cfg))
    return root, cfg


def search_cli(cfg, *args, check=True):
    proc = subprocess.run([sys.executable, "-m", "pipekit", "search", "--config", str(cfg), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


# ---- --json -------------------------------------------------------------------------------

FIELDS = {"query", "rank", "score", "chunk_id", "doc_id", "format", "heading", "heading_path", "page_start",
          "page_end", "page_label_start", "page_label_end", "start_char", "end_char", "text", "citation", "link", "also"}


def test_json_lines_hold_every_field_and_nothing_else_is_on_stdout(corpus):
    _, cfg = corpus
    proc = search_cli(cfg, "--json", "-k", "3", "kestrel watching", "pelican server")
    lines = proc.stdout.splitlines()
    hits = [json.loads(line) for line in lines]  # every line parses: no headers, notes or blank lines
    for h in hits:
        assert set(h) == FIELDS
        assert isinstance(h["heading_path"], list) and isinstance(h["score"], float)
    # Three for the first query; one for the second (one chunk says "pelican" or "server").
    assert [(h["query"][:7], h["rank"]) for h in hits] == [("kestrel", 1), ("kestrel", 2), ("kestrel", 3),
                                                          ("pelican", 1)]
    assert hits[3]["query"] == "pelican server"
    assert hits[3]["link"] == "api.html#connecting-to-a-server" and hits[3]["format"] == "html"
    assert hits[3]["citation"].startswith("api.html › The API › Connecting to a server")


def test_json_matches_the_searcher_and_errors_go_to_stderr(corpus):
    root, cfg = corpus
    proc = search_cli(cfg, "--json", "-k", "4", "kestrel")
    got = [(h["chunk_id"], h["score"], h["link"]) for h in map(json.loads, proc.stdout.splitlines())]
    want = [(p.chunk_id, p.score, p.link) for p in pipekit.Searcher(root / "out").search("kestrel", k=4)]
    assert got == want
    bad = search_cli(cfg, "--json", "kestrel", "--in", "nowhere/**", check=False)
    assert bad.returncode != 0 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "'nowhere/**' matches no document" in bad.stderr


# ---- filters ------------------------------------------------------------------------------

def test_a_filter_returns_k_hits_from_documents_that_rank_below_the_others(corpus):
    root, _ = corpus
    searcher = pipekit.Searcher(root / "out")
    everything = searcher.search("kestrel", k=50)
    unfiltered = {p.chunk_id: p.score for p in everything}
    assert [p.doc_id.split("/")[0] for p in everything[:6]] == ["top"] * 6  # low/ ranks below top/
    low = searcher.search("kestrel", k=3, paths=["low/**"])
    assert len(low) == 3 and all(p.doc_id.startswith("low/") for p in low)
    for p in low:  # the scores they have unfiltered: same statistics, same section context
        assert p.score == pytest.approx(unfiltered[p.chunk_id], rel=1e-12)
    assert [p.rank for p in low] == [1, 2, 3]
    # Fewer than k when fewer match, never a filler: only 4 low/ pages exist.
    assert len(searcher.search("kestrel", k=10, paths=["low/**"])) == 4
    assert searcher.search("kestrel", k=10, paths=["low/**"], formats=["html"]) == []


def test_star_stays_in_a_folder_and_double_star_crosses_folders(corpus):
    root, _ = corpus
    searcher = pipekit.Searcher(root / "out")
    top_level = {p.doc_id for p in searcher.search("kestrel", k=10, paths=["low/*"])}
    anywhere = {p.doc_id for p in searcher.search("kestrel", k=10, paths=["low/**"])}
    assert top_level == {"low/l0.md", "low/l2.md"}
    assert anywhere == top_level | {"low/deep/l1.md", "low/deep/l3.md"}
    assert glob_regex("**/*.pdf").fullmatch("field-guide.pdf") and glob_regex("**/*.pdf").fullmatch("a/b/c.pdf")
    assert not glob_regex("*.pdf").fullmatch("a/c.pdf")
    assert glob_regex("low/").fullmatch("low/deep/l1.md")


def test_format_filter_and_paths_together(corpus):
    root, cfg = corpus
    searcher = pipekit.Searcher(root / "out")
    pdf = searcher.search("dashboards alarms", k=5, formats=["pdf"])
    assert pdf and {p.format for p in pdf} == {"pdf"}
    assert {p.doc_id for p in searcher.search("kestrel", k=10, paths=["top/**", "low/deep/**"])} == \
        {f"top/t{n}.md" for n in range(6)} | {"low/deep/l1.md", "low/deep/l3.md"}
    with pytest.raises(PipelineError, match="no document of this index has that format"):
        searcher.search("kestrel", formats=["docx"])
    # On the command line a pattern that matches nothing beside one that does is one note on stderr.
    proc = search_cli(cfg, "kestrel", "-k", "2", "--in", "low/**", "--in", "typo/**", "--json")
    assert [json.loads(x)["doc_id"][:4] for x in proc.stdout.splitlines()] == ["low/", "low/"]
    assert proc.stderr.strip().endswith("--in 'typo/**' matches no document of this index "
                                        "(doc_ids look like 'api.html')")


# ---- links --------------------------------------------------------------------------------

def hit_link(searcher, query, **filters):
    return searcher.search(query, k=1, **filters)[0].link


def test_links_of_sphinx_like_html_use_the_sections_ids(corpus):
    searcher = pipekit.Searcher(corpus[0] / "out")
    assert hit_link(searcher, "pelican lighthouse") == "api.html#connecting-to-a-server"
    assert hit_link(searcher, "heron close") == "api.html#id1"  # the section's id, not a slug of "Closing"
    assert hit_link(searcher, "tapir") == "api.html#plain-heading"  # a plain <h2 id>
    assert hit_link(searcher, "okapi") == "api.html#old-style"  # Sphinx's older <div class="section" id>


def test_links_of_markdown_are_githubs_slugs_with_duplicates_numbered_and_explicit_ids(corpus):
    searcher = pipekit.Searcher(corpus[0] / "out")
    assert hit_link(searcher, "walrus") == "guide.md#setup"
    assert hit_link(searcher, "narwhal") == "guide.md#setup-1"
    assert hit_link(searcher, "ocelot") == "guide.md#custom-install"
    assert hit_link(searcher, "axolotl") == "guide.md#c--rust-a-quick-tour"
    assert markdown_anchors(["A", "A", "A-1", "A"]) == ["a", "a-1", "a-1-1", "a-2"]  # as github-slugger
    assert github_slug("Ünïcode stays, (parens) go") == "ünïcode-stays-parens-go"


def test_links_of_rest_are_docutils_section_ids(corpus):
    searcher = pipekit.Searcher(corpus[0] / "out")
    assert hit_link(searcher, "quokka") == "notes.rst#getting-started"  # ids[0], as Sphinx's <section id>
    assert hit_link(searcher, "wombat") == "notes.rst#next-steps"
    assert hit_link(searcher, "dingo") == "notes.rst#getting-started-1"


def test_links_of_pdfs_open_the_physical_page_and_others_the_document(corpus):
    searcher = pipekit.Searcher(corpus[0] / "out")
    for p in searcher.search("dashboards alarms", k=5, formats=["pdf"]):
        assert p.link == f"field-guide.pdf#page={p.page_start}"
    assert link("tables/x.csv", "csv", None, None) == "tables/x.csv"


def test_link_base_maps_sources_as_the_site_builds_them():
    assert link("guide/install.md", "markdown", "setup", None, "https://docs.example.org/en/") == \
        "https://docs.example.org/en/guide/install.html#setup"
    assert link("api/notes.rst", "rst", "getting-started", None, "https://docs.example.org") == \
        "https://docs.example.org/api/notes.html#getting-started"
    # A repository browser shows the source itself, and renders Markdown with these very slugs.
    assert link("docs/a b.md", "markdown", "setup-1", None, "https://github.com/o/r/blob/main/") == \
        "https://github.com/o/r/blob/main/docs/a%20b.md#setup-1"
    assert link("m.pdf", "pdf", None, 7, "https://x.org/") == "https://x.org/m.pdf#page=7"


def test_a_querys_links_made_together_are_each_hits_link():
    # links.link_list (a Searcher's Passages): `link` of each hit, with and without a link_base
    values = [(d, f, a, p) for d in ("a.md", "docs/a b.rst", "m.pdf") for f in ("markdown", "pdf", "html", None)
              for a in (None, "", "setup-1") for p in (None, 0, 7)]
    doc_ids, formats, anchors, pages = (list(x) for x in zip(*values))
    for base in (None, "", "https://x.org/", "https://github.com/o/r/blob/main/"):
        assert link_list(doc_ids, formats, anchors, pages, base) == [link(*v, base) for v in values]


def test_stage_05_writes_the_link_column_and_link_base_reruns_only_stage_05(corpus, tmp_path):
    root, cfg = corpus
    rows = pq.read_table(root / "out" / "05_results.parquet").to_pylist()
    # SPEC's columns end with link; `also` (issue 48: the repeats collapsed onto a hit) follows them.
    assert pq.read_schema(root / "out" / "05_results.parquet").names[-2:] == ["link", "also"]
    for r in rows:
        assert r["link"].startswith(r["doc_id"])
    out = tmp_path / "copy"
    shutil.copytree(root / "out", out)
    base = ["--config", str(cfg), "--set", f"paths.output={out}", "--set", "documents.link_base=https://docs.example.org/"]
    status = run_script("run_pipeline.py", "--status", *base).stdout
    # Recorded by stage 05, which makes the links, not by stage 01: a new URL reads no document again.
    assert status.count("config documents.link_base changed: null -> https://docs.example.org/") == 1
    assert status.index("documents.link_base changed") > status.index("05_retrieval")
    run_script("run_pipeline.py", *base)
    links = {r["link"] for r in pq.read_table(out / "05_results.parquet").to_pylist()}
    assert "https://docs.example.org/top/t0.html#kestrels-0" in links


def test_the_reports_citations_open_the_passage(corpus):
    root, cfg = corpus
    run_script("-m", "pipekit", "report", "--config", str(cfg))
    page = (root / "out" / "report.html").read_text(encoding="utf-8")
    # Without link_base the file below documents.input, as a file:// address with the anchor.
    assert f'<a href="{(root / "docs" / "top" / "t0.md").as_uri()}#kestrels-0"><span class="cite">top/t0.md › Kestrels 0' \
        '</span></a>' in page


def test_a_filtered_hybrid_search_keeps_each_hits_fused_score(corpus, tmp_path):
    # With vectors, each part of the fused score is divided by the best of the whole
    # collection's list, filtered or not: a filtered hit keeps the score it has unfiltered.
    pytest.importorskip("wordllama", reason="wordllama is not installed (requirements.txt)")
    root, cfg = corpus
    out = tmp_path / "dense"
    run_script("run_pipeline.py", "--config", str(cfg), "--set", f"paths.output={out}",
               "--set", "indexing.dense_model=wordllama")
    searcher = pipekit.Searcher(out, settings={"dense_weight": 0.3})
    unfiltered = {p.chunk_id: p.score for p in searcher.search("kestrel watching birds", k=200)}
    low = searcher.search("kestrel watching birds", k=3, paths=["low/**"])
    assert len(low) == 3 and all(p.doc_id.startswith("low/") for p in low)
    for p in low:  # (the cosines are summed exactly, pipekit/retrieve/fusion.py: the same to the last bits)
        assert p.score == pytest.approx(unfiltered[p.chunk_id], rel=1e-12)
    # A passage whose fused score is 0 or less is no result, filtered or not: no filler.
    assert [p for p in searcher.search("a small bird of prey hovering", k=200) if p.doc_id.startswith("low/")] == \
        searcher.search("a small bird of prey hovering", k=3, paths=["low/**"]) == []
