"""Repeated passages once in a ranking (issue 48, pipekit/retrieve/repeats.py).

A folder of documentation holds copies: an aggregate page repeating a module page, a
page's .rst source beside its HTML build.  A copy of a higher hit in another document is
named on that hit (`also`) and its place goes to the next passage; `retrieval.repeats:
keep` gives every copy its own place.  Fixtures: a small folder with each kind of copy and
passages that look alike but are not copies.
"""
from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest

import pipekit
from pipekit.run.config import load_config
from pipekit.run.errors import PipelineError

from conftest import REPO, run_script

WIDGET = ("## Configuring the flux capacitor\n\n"
          "The flux capacitor reads its calibration from `capacitor.toml` at startup. Set `gigawatts` to the "
          "power budget and `plutonium_grams` to the fuel mass; the capacitor refuses to start when the two "
          "disagree by more than a tenth. Restart the chronometer after changing either value.\n")
GADGET_RST = """Installing the gyroscope
========================

The gyroscope ships as a wheel: run ``pip install gyroscope`` and import it with
:mod:`gyroscope`. Calibrate the spindle before first use by calling
:func:`gyroscope.calibrate` with the local latitude; an uncalibrated spindle drifts by
several degrees an hour.
"""
GADGET_HTML = """<html><body><main>
<h1>Installing the gyroscope<a class="headerlink" href="#installing">¶</a></h1>
<p>The gyroscope ships as a wheel: run <code>pip install gyroscope</code> and import it with
<a href="api.html#module-gyroscope"><code>gyroscope</code></a>. Calibrate the spindle before first use by calling
<a href="api.html#gyroscope.calibrate"><code>gyroscope.calibrate()</code></a> with the local latitude; an
uncalibrated spindle drifts by several degrees an hour.</p>
<p class="versionadded">New in version 2.0.</p>
</main></body></html>
"""
# Templated sections: the same words but for a name, under their own titles (Node's
# `Class: Hash` and `Class: Hmac`): different passages, never collapsed.
TEMPLATE = ("## Class: {name}\n\nThe `{name}` class is a utility for creating {name} digests of data. It can be used as "
            "a stream that is both readable and writable, or through the `update()` and `digest()` methods. "
            "Instances are created by `create{name}()`, never with the `new` keyword.\n")


def write(folder, rel, text):
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("repeats")
    docs = root / "docs"
    write(docs, "capacitor.md", "# Flux capacitor\n\n" + WIDGET + "\n## Maintenance\n\nWipe the housing monthly.\n")
    # An aggregate page: every module page again, one after another (Node's all.html).
    write(docs, "all.md", "# Everything\n\n" + WIDGET + "\n## Chronometer\n\nThe chronometer counts seconds.\n")
    write(docs, "source/gyroscope.rst", GADGET_RST)
    write(docs, "site/gyroscope.html", GADGET_HTML)
    write(docs, "crypto/hash.md", "# Hashing\n\n" + TEMPLATE.format(name="Hash"))
    write(docs, "crypto/hmac.md", "# Keyed hashing\n\n" + TEMPLATE.format(name="Hmac"))
    # Other passages about the capacitor, to fill the places collapsed repeats leave.
    for i, topic in enumerate(["fuel", "budget", "startup", "calibration"]):
        write(docs, f"notes/{topic}.md", f"# Note {i}\n\n## The capacitor's {topic}\n\nThe flux capacitor {topic} "
                                         f"matters: check the {topic} of the capacitor before each trip.\n")
    queries = root / "queries.tsv"
    queries.write_text("1\tconfigure the flux capacitor gigawatts\n2\tinstall and calibrate the gyroscope spindle\n"
                       "3\tcreate digests with the class\n", encoding="utf-8")
    out = root / "out"
    run_script("run_pipeline.py", "--set", f"paths.output={out}", "--set", f"documents.input={docs}",
               "--set", f"retrieval.queries={queries}", "--set", "retrieval.qrels=null")
    return out, queries


def test_the_same_section_in_two_documents_is_one_hit_naming_the_other(folder):
    out, _ = folder
    hits = pipekit.Searcher(out).search("configure the flux capacitor gigawatts", k=3)
    first = hits[0]
    assert first.heading.endswith("Configuring the flux capacitor")
    assert {first.doc_id} | {a["doc_id"] for a in first.also} == {"capacitor.md", "all.md"}
    other = first.also[0]
    assert other["chunk_id"].startswith(other["doc_id"] + "#")
    assert other["link"] == other["doc_id"] + "#configuring-the-flux-capacitor"
    assert other["citation"].startswith(other["doc_id"] + " › ") and other["score"] <= first.score
    # ... and the copy takes no place of its own.
    assert [h.chunk_id for h in hits].count(other["chunk_id"]) == 0
    assert sum(h.heading.endswith("Configuring the flux capacitor") for h in hits) == 1


def test_keep_gives_every_copy_its_own_place(folder):
    out, _ = folder
    hits = pipekit.Searcher(out, settings={"repeats": "keep"}).search("configure the flux capacitor gigawatts", k=3)
    assert {h.doc_id for h in hits[:2]} == {"capacitor.md", "all.md"}
    assert all(h.also == [] for h in hits)


def test_a_page_and_its_rst_source_collapse(folder):
    out, _ = folder
    kept = pipekit.Searcher(out, settings={"repeats": "keep"}).search("install and calibrate the gyroscope spindle", 2)
    assert {h.doc_id for h in kept} == {"source/gyroscope.rst", "site/gyroscope.html"}
    assert kept[0].score != kept[1].score  # near-identical: not the same terms (the HTML says a version)
    hits = pipekit.Searcher(out).search("install and calibrate the gyroscope spindle", k=2)
    assert [a["doc_id"] for a in hits[0].also] == [kept[1].doc_id]
    assert hits[0].chunk_id == kept[0].chunk_id
    assert all(h.doc_id not in {"source/gyroscope.rst", "site/gyroscope.html"} for h in hits[1:])


def test_alike_passages_under_other_titles_never_collapse(folder):
    # 35 of their 40 words are shared (Jaccard 0.875): only their titles tell them apart.
    out, _ = folder
    hits = pipekit.Searcher(out).search("create digests with the class", k=4)
    assert {"crypto/hash.md", "crypto/hmac.md"} <= {h.doc_id for h in hits}
    assert all(h.also == [] for h in hits)


def test_collapsed_places_are_filled_from_further_down(folder):
    out, _ = folder
    query = "configure the flux capacitor gigawatts"
    kept = pipekit.Searcher(out, settings={"repeats": "keep"}).search(query, k=10)
    hits = pipekit.Searcher(out).search(query, k=4)
    assert len(hits) == 4
    named = {a["chunk_id"] for h in hits for a in h.also}
    assert [h.chunk_id for h in hits] == [h.chunk_id for h in kept if h.chunk_id not in named][:4]
    assert [h.rank for h in hits] == [1, 2, 3, 4]


def test_many_copies_still_leave_k_hits(tmp_path):
    """More copies than stage 05 ranks deep (100 and k): the ranking is taken deeper."""
    docs = tmp_path / "docs"
    for i in range(110):  # not byte-identical (stage 01 skips those): each has its own second section
        write(docs, f"copy{i:03}.md", "# Page\n\n" + WIDGET + f"\n## Other\n\nserial number {i}\n")
    for topic in ["fuel", "budget", "startup"]:
        write(docs, f"notes/{topic}.md", f"# Note\n\n## The capacitor {topic}\n\nThe flux capacitor {topic}.\n")
    out = tmp_path / "out"
    run_script("run_pipeline.py", "--set", f"paths.output={out}", "--set", f"documents.input={docs}",
               "--set", "retrieval.queries=[flux capacitor]", "--set", "retrieval.qrels=null")
    hits = pipekit.Searcher(out).search("flux capacitor gigawatts", k=3)
    assert len(hits) == 3
    assert len(hits[0].also) == 109
    assert {h.doc_id for h in hits[1:]} <= {"notes/fuel.md", "notes/budget.md", "notes/startup.md"}


def test_stage_05_and_the_searcher_agree(folder, tmp_path):
    out, queries = folder
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    for setting in ("collapse", "keep"):
        run_script("05_retrieval.py", "--set", f"paths.output={copy}", "--set", f"retrieval.queries={queries}",
                   "--set", "retrieval.qrels=null", "--set", "retrieval.top_k=4", "--set",
                   f"retrieval.repeats={setting}")
        rows = pq.read_table(copy / "05_results.parquet").to_pylist()
        searcher = pipekit.Searcher(copy)  # the settings stage 05 last ran with: this one
        assert searcher.settings["repeats"] == setting
        for qid, text in (line.split("\t") for line in queries.read_text().splitlines()):
            want = [(r["chunk_id"], r["score"], [(a["chunk_id"], a["score"], a["link"]) for a in r["also"]])
                    for r in rows if r["query_id"] == qid]
            got = [(h.chunk_id, h.score, [(a["chunk_id"], a["score"], a["link"]) for a in h.also])
                   for h in searcher.search(text, 4)]
            assert got == want, (setting, text)
        assert any(r["also"] for r in rows) == (setting == "collapse")


def test_search_prints_and_writes_the_other_places(folder):
    out, _ = folder
    query = "configure the flux capacitor gigawatts"
    text = run_script("-m", "pipekit", "search", query, "-k", "2", "--set", f"paths.output={out}").stdout
    assert "also in " in text and ("also in all.md › " in text or "also in capacitor.md › " in text)
    lines = run_script("-m", "pipekit", "search", query, "-k", "2", "--json", "--set", f"paths.output={out}").stdout
    first = json.loads(lines.splitlines()[0])
    assert [a["doc_id"] for a in first["also"]] in (["all.md"], ["capacitor.md"])
    kept = run_script("-m", "pipekit", "search", query, "-k", "2", "--json", "--set", f"paths.output={out}",
                      "--set", "retrieval.repeats=keep").stdout
    assert [json.loads(line)["also"] for line in kept.splitlines()] == [[], []]


def test_a_bad_setting_names_the_key_and_what_it_accepts():
    with pytest.raises(PipelineError) as e:
        load_config(REPO / "config.yaml", ["retrieval.repeats=merge"])
    assert "retrieval.repeats" in str(e.value) and "collapse" in str(e.value) and "keep" in str(e.value)


def test_on_shards_of_the_index_stage_05_collapses_as_the_local_engine(folder, tmp_path):
    """The cluster's path (parts of the index, the client merging; run here in-process as
    tests/test_shards.py does) names the same repeats on the same hits."""
    import pandas as pd

    from pipekit.cli import run_stage
    from pipekit.run.engine import LocalEngine
    from pipekit.run.stages import load_stage
    from test_shards import InProcessParts

    out, queries = folder
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    sets = [f"paths.output={copy}", f"retrieval.queries={queries}", "retrieval.qrels=null", "retrieval.top_k=4",
            "indexing.shard_chunks=3"]
    run_script("04_indexing.py", *[x for s in sets for x in ("--set", s)])
    stage = load_stage(5)
    got = {}
    for name, engine, extra in (("local", LocalEngine(), []), ("2 parts", InProcessParts(), ["engine.shards=2"]),
                                ("3 parts", InProcessParts(), ["engine.shards=3"])):
        run_stage(5, stage.run, load_config(REPO / "config.yaml", sets + extra), quiet=True, engine=engine)
        got[name] = pd.read_parquet(copy / "05_results.parquet").map(repr).to_dict("list")
    assert any(a != "array([], dtype=object)" for a in got["local"]["also"])  # repeats were named
    assert got["2 parts"] == got["local"] and got["3 parts"] == got["local"]


def test_texts_are_read_only_for_rankings_whose_titles_two_documents_share():
    """A repeat shares a hit's own section title in another document: a ranking whose first
    k titles are each one document's collapses to itself without a word set, so stage 05
    reads no text for it (reading every query's first hits was 0.9 s at 200k passages)."""
    import numpy as np

    from pipekit.retrieve.repeats import Repeats, collapse_answers

    titles = ["alpha", "beta", "alpha", "gamma", "delta", "epsilon"]
    texts = ["the flux capacitor reads its calibration", "a gyroscope drifts", "the flux capacitor reads its calibration",
             "gigawatts", "plutonium", "chronometer"]
    read: list[int] = []

    def texts_of(rows):
        read.extend(rows.tolist())
        return [texts[r] for r in rows]

    repeats = Repeats(texts_of, np.arange(6), lambda rows: [titles[r] for r in rows])
    ranked = lambda chunks: (np.array(chunks), np.linspace(9, 1, len(chunks)), np.array(chunks), np.ones(len(chunks)))
    answers = [ranked([1, 3, 4, 5, 0]), ranked([0, 2, 1])]
    out, also = collapse_answers(repeats, answers, 2, 4)
    assert out[0][0].tolist() == [1, 3] and [len(a[0]) for a in also[0]] == [0, 0]
    assert out[1][0].tolist() == [0, 1] and also[1][0][0].tolist() == [2]  # chunk 2 repeats chunk 0
    assert set(read) == {0, 1, 2}  # the second ranking's; none of the first's (3, 4, 5)


def test_headings_read_from_04_chunks_for_the_hits_are_the_held_columns(tmp_path):
    # Stage 05 no longer holds 04_chunks' heading while it scores (LATER_04): the repeats read the
    # headings of the rows a ranking asks from the file (io.take_rows, small row groups here). The
    # titles, and so every collapse, must be those the held column gives, in any order of rows.
    from types import SimpleNamespace

    import numpy as np
    import pyarrow as pa

    from pipekit.chunk.headings import TRAIL_SEPARATOR
    from pipekit.retrieve.repeats import repeats_for

    rng = np.random.default_rng(5)
    n = 97
    titles = ["Setup", "Usage", "API", "Notes", "setup!"]
    heading = [None if i % 11 == 0 else TRAIL_SEPARATOR.join(rng.choice(titles, size=1 + i % 3).tolist())
               for i in range(n)]
    texts = [" ".join(rng.choice(["alpha", "beta", "gamma", "delta"], size=6).tolist()) for _ in range(n)]
    table = pa.table({"doc_id": [f"d{i % 13}" for i in range(n)], "heading": pa.array(heading, pa.string())})
    path = tmp_path / "04_chunks.parquet"
    pq.write_table(table, path, row_group_size=7)
    holder = SimpleNamespace(chunks=table, doc_codes=np.arange(n, dtype=np.int64) % 13)
    texts_of = lambda rows: [texts[r] for r in rows]  # noqa: E731
    held, read = repeats_for(holder, "collapse", texts_of), repeats_for(holder, "collapse", texts_of, path)
    rows = rng.permutation(n)
    assert read.titles(rows) == held.titles(rows) and read.titles(rows[:5]) == held.titles(rows[:5])
    for _ in range(20):
        ranking = rng.choice(n, size=int(rng.integers(1, 40)), replace=False)
        (k1, a1), (k2, a2) = held.collapse(ranking, 5), read.collapse(ranking, 5)
        assert k1.tolist() == k2.tolist() and a1 == a2
