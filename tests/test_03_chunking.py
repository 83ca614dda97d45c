"""Stage 03: each chunk rule of SPEC on a small hand-made case, the settings checks, the
fixtures (zero violations under several budgets) and the stage run end to end.

The generated-document versions of rules 1, 4, 5, 6 live in test_03_properties.py; the
referee (markdown-it-py plus span checks) in test_03_oracle.py.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import regex

from conftest import run_script, write_config
from pipekit.run.config import load_config
from pipekit.run.errors import ConfigError
from pipekit.run.stages import load_stage
from test_03_oracle import check_spans, oracle_headings

chunking = load_stage(3)
S = chunking.Settings
FIXTURES = Path(__file__).parent / "fixtures" / "chunking"


def chunks(text, **kw):
    fmt = kw.pop("fmt", "markdown")
    title = kw.pop("title", None)
    return chunking.chunk_document(text, fmt=fmt, title=title, settings=S(**kw), name="data.csv")


def texts(text, **kw):
    return [c["text"] for c in chunks(text, **kw)]


def para(n, word="word"):
    return " ".join(f"{word}{i}" for i in range(n))


# -- Rule 1: a chunk never straddles a heading ----------------------------------------------

def test_headings_end_chunks_with_or_without_a_blank_line():
    # Without a blank line, a naive "split on blank lines" would glue B's heading to A's text.
    text = "# A\nalpha text\n# B\nbeta text\n## C\ngamma"
    out = chunks(text)
    assert [c["text"] for c in out] == ["# A\nalpha text", "# B\nbeta text", "## C\ngamma"]
    assert [c["heading_path"] for c in out] == [["A"], ["B"], ["B", "C"]]


def test_a_heading_directly_followed_by_a_deeper_one_stays_with_it():
    out = chunks("# Guide\n## Install\n\npip install x\n\n## Use\n\nrun it\n")
    assert out[0]["text"] == "# Guide\n## Install\n\npip install x"
    assert out[0]["heading_path"] == ["Guide", "Install"]
    assert out[1]["heading_path"] == ["Guide", "Use"]


def test_the_first_piece_of_a_heading_longer_than_max_carries_that_heading():
    # Found by the property search: the piece holding "# A" and the start of the long
    # "## word ..." line was labelled ['A'], though it holds the deeper heading's text.
    text = "# A\n## " + "word " * 40 + "\n\nbody\n"
    s = S(target=15, max=15, min=0)
    out = chunking.chunk_document(text, settings=s)
    deep = ["A", " ".join(["word"] * 40)]
    assert len(out) > 2 and out[0]["text"].startswith("# A\n## word")
    assert [c["heading_path"] for c in out] == [deep] * len(out)
    assert check_spans(text, out, s) == []


def test_small_sections_are_not_merged_with_their_neighbours():
    out = chunks("# A\n\none\n\n# B\n\ntwo\n", min=40)
    assert [c["heading_path"] for c in out] == [["A"], ["B"]]


def test_heading_path_is_positional_with_empty_skipped_levels():
    out = chunks("## Starts at two\n\ntext\n\n#### Four\n\nmore\n")
    assert out[0]["heading_path"] == ["", "Starts at two"]
    assert out[1]["heading_path"] == ["", "Starts at two", "", "Four"]
    done = chunking.finish(out, "d.md")
    assert done[1]["heading"] == "Starts at two › Four"


# -- Rule 2: headings as CommonMark finds them ------------------------------------------------

def test_hash_in_a_fence_or_indented_code_is_a_comment_not_a_heading():
    text = "# Real\n\n```bash\n# install it\npip install x\n```\n\n    # indented comment\n\ntext\n"
    out = chunks(text)
    assert len(out) == 1 and out[0]["heading_path"] == ["Real"]
    assert [h[2] for h in oracle_headings(text)] == ["Real"]


def test_hash_without_a_space_is_not_a_heading():
    out = chunks("#hashtag and #include <x>\n\n####### seven is too many\n")
    assert len(out) == 1 and out[0]["heading_path"] == []


def test_setext_headings_and_not_thematic_breaks_or_page_markers():
    out = chunks("Title\n=====\n\ntext\n\nSub\n---\n\nmore\n\n---\n\nafter a rule\n")
    assert [c["heading_path"] for c in out] == [["Title"], ["Title", "Sub"]]
    # a page marker under a line is not a setext underline
    out = chunks("Some words\n--- page 2 ---\nmore words\n", page_markers="keep")
    assert out[0]["heading_path"] == []


def test_closing_hashes_are_stripped_and_headings_become_plain_text():
    out = chunks("## *Fast* `start` with [links](http://x.org) \\# ##\n\ntext\n")
    assert out[0]["heading_path"] == ["", "Fast start with links #"]
    long = "# " + "word " * 100
    assert len(chunks(long + "\n\ntext")[0]["heading_path"][0]) <= 256
    assert chunks(long + "\n\ntext")[0]["heading_path"][0].endswith("…")


def test_headings_inside_quotes_lists_and_html_are_not_sections():
    text = "> # quoted\n> text\n\n- # in a list\n\n<div>\n# in html\n</div>\n\n# Real\n\nbody\n"
    out = chunks(text)
    assert [c["heading_path"] for c in out] == [[], ["Real"]]


def test_front_matter_is_covered_by_a_chunk_under_its_title_and_is_not_a_heading():
    # SPEC rule 9: front matter is text the user wrote; without a `# ` heading of its own
    # the page's title (from front matter) opens every heading path.
    text = "---\ntitle: Guide\nlayout: page\n---\nIntro line.\n\n## Install\n\ntext\n"
    out = chunks(text, target=6, max=20, min=0)
    assert out[0]["text"] == "---\ntitle: Guide\nlayout: page\n---\nIntro line." and out[0]["start_char"] == 0
    assert [c["heading_path"] for c in out] == [["Guide"], ["Guide", "Install"]]
    assert check_spans(text, out, S(target=6, max=20, min=0)) == []


def test_front_matter_title_gives_way_to_the_documents_own_h1():
    text = "---\ntitle: Guide page\n---\n# Guide\n\ntext\n\n## Sub\n\nmore\n"
    out = chunks(text, target=5, max=10, min=0)
    assert [c["heading_path"] for c in out] == [["Guide page"], ["Guide"], ["Guide", "Sub"]]
    assert out[0]["text"] == "---\ntitle: Guide page\n---"
    assert check_spans(text, out, S(target=5, max=10, min=0)) == []


def test_front_matter_without_a_title_is_an_untitled_chunk():
    text = "---\nlayout: page\nsummary: One-line description of the page.\n---\n# Body\n\ntext\n"
    out = chunks(text, target=8, max=20, min=0)
    assert out[0]["heading_path"] == [] and "One-line description" in out[0]["text"]
    assert [c["heading_path"] for c in out[1:]] == [["Body"]]
    assert check_spans(text, out, S(target=8, max=20, min=0)) == []


# -- Rule 3: fences, tables, CSV ---------------------------------------------------------------

def test_a_fence_within_max_is_never_cut():
    fence = "```\n" + "\n".join(f"line {i}" for i in range(30)) + "\n```"
    out = chunks(f"# Code\n\n{fence}\n", target=40, max=80, min=0)
    assert len(out) == 1


def test_an_oversized_fence_is_cut_between_lines_and_every_piece_refenced():
    body = "\n".join(f"# step {i}\nrun --flag {i}" for i in range(40))
    text = f"# Code\n\n~~~~sh title=setup\n{body}\n~~~~\n"
    out = chunks(text, target=40, max=60, min=0)
    assert len(out) > 3
    for c in out:
        lines = c["text"].split("\n")
        start = 2 if c is out[0] else 0
        assert lines[start] == "~~~~sh title=setup" and lines[-1] == "~~~~"
        assert all(not l.startswith("run --flag") or l.split()[-1].isdigit() for l in lines)  # whole lines
        assert len(c["text"].split()) <= 60
    assert out[0]["heading_path"] == out[-1]["heading_path"] == ["Code"]


def test_an_oversized_table_repeats_its_header_in_every_piece():
    rows = "\n".join(f"| {i} | value {i} |" for i in range(60))
    text = f"| id | value |\n|---:|---|\n{rows}\n"
    out = chunks(text, target=40, max=60, min=0)
    assert len(out) > 3
    for c in out:
        assert c["text"].startswith("| id | value |\n|---:|---|\n| ")
        assert len(c["text"].split()) <= 60


def test_a_table_header_repeats_whenever_it_fits_beside_a_row():
    # A 31-word header (over target/2) with 40 rows at target 40 / max 60: header, delimiter
    # and a row fit in 60, so SPEC rule 3 wants the header in every piece (it was in 1 of 15).
    header = "| " + " ".join(f"h{i}" for i in range(28)) + " |\n|---|\n"
    assert chunking.count_words(header) == 31
    text = header + "\n".join(f"| row {i} |" for i in range(40)) + "\n"
    s = S(target=40, max=60, min=0)
    out = chunking.chunk_document(text, settings=s)
    assert len(out) > 3
    assert all(c["text"].startswith(header + "| row ") for c in out)
    assert all(chunking.count_words(c["text"]) <= 60 for c in out)
    assert check_spans(text, out, s) == []


def test_a_table_whose_header_leaves_no_room_for_a_row_is_cut_by_lines():
    # 31 words of header and delimiter beside a 30-word row: over max 60, so no repeats.
    header = "| " + " ".join(f"h{i}" for i in range(28)) + " |\n|---|\n"
    text = header + "\n".join(f"| {para(28)} |" for i in range(10)) + "\n"
    s = S(target=40, max=60, min=0)
    out = chunking.chunk_document(text, settings=s)
    assert len(out) > 3 and sum("|---|" in c["text"] for c in out) == 1  # only where it stands
    assert "".join(c["text"] for c in out).replace("\n", "") == text.replace("\n", "")
    assert check_spans(text, out, s) == []


def test_csv_chunks_start_with_the_header_and_never_cut_a_record():
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["id", "summary", "notes"])
    rows = [[i, para(6), "two\nlines, and a comma" if i % 3 == 0 else "x"] for i in range(200)]
    w.writerows(rows)
    text = buf.getvalue()
    out = chunks(text, fmt="csv", target=60, max=100, min=0)
    assert len(out) > 5
    got = []
    for c in out:
        parsed = list(csv.reader(io.StringIO(c["text"], newline="")))
        assert parsed[0] == ["id", "summary", "notes"]
        got += parsed[1:]
        a, b = c["heading_path"][1].removeprefix("rows ").split("–")
        assert c["heading_path"][0] == "data.csv" and int(b) - int(a) + 1 == len(parsed) - 1
    assert got == [[str(r[0]), r[1], r[2]] for r in rows]
    assert out[0]["heading_path"][1].startswith("rows 1–")


# -- Rule 4: the ceiling -----------------------------------------------------------------------

def test_a_line_longer_than_max_is_cut_between_words():
    text = para(500)
    out = chunks(text, target=100, max=120, min=0)
    assert len(out) == 5
    assert all(len(c["text"].split()) <= 120 for c in out)
    assert " ".join(c["text"] for c in out) == text


def test_a_file_with_no_blank_line_still_gives_many_chunks():
    text = "\n".join(para(50) for _ in range(40))
    assert len(chunks(text, target=100, max=150)) >= 15


def test_text_without_spaces_is_cut_at_grapheme_clusters():
    cjk = "日本語のテキストは空白なしで続きます。" * 100
    family = "👩\u200d👩\u200d👧\u200d👦" * 100
    accents = "e\u0301" * 500
    for text in (cjk, family, accents):
        out = chunks(text, target=80, max=100, min=0, unit="chars")
        assert len(out) > 1
        assert all(len(c["text"]) <= 100 for c in out)
        assert "".join(c["text"] for c in out) == text
        for c in out:  # every piece is whole clusters
            assert "".join(regex.findall(r"\X", c["text"])) == c["text"]
            assert not regex.match(r"[\p{M}\u200d]", c["text"])


def test_added_parts_count_toward_max():
    pages = "".join(f"--- page {n} ---\n{para(150)}\n" for n in range(1, 4))
    for c in chunks(pages, target=60, max=60, min=0):
        assert len(c["text"].split()) <= 60


def test_tokens_are_a_quarter_of_the_characters():
    assert chunking.measure(0, 9, "tokens") == 3 and chunking.measure(5, 9, "words") == 5
    out = chunks(para(300), target=50, max=60, min=0, unit="tokens")
    assert all(-(-len(c["text"]) // 4) <= 60 for c in out)


# -- Rule 5: runts -----------------------------------------------------------------------------

def test_a_runt_joins_its_predecessor_under_the_same_heading():
    # Packing alone leaves "tail words" on its own (99 + 2 words > target 100); only rule 5
    # puts it back with the paragraph before it (101 words, within max 200).
    text = f"# A\n\n{para(97)}\n\n{para(99)}\n\ntail words\n"
    out = chunks(text, target=100, max=200, min=20)
    assert [c["text"] for c in out] == [f"# A\n\n{para(97)}", f"{para(99)}\n\ntail words"]


def test_a_runt_heading_does_not_join_the_last_piece_of_a_longer_heading():
    # Found by the property search: "## Install" (a runt) joined the last piece of the
    # 150-word heading before it, so one heading's text sat before another in a chunk.
    for text in (f"# {para(150)}\n## Install\n\n# Usage\n", f"{para(150)}\n===\nInstall\n---\nUsage\n---\n"):
        for mode in ("track", "strip"):
            s = S(target=87, max=130, min=3, page_markers=mode)
            out = chunking.chunk_document(text, settings=s)
            assert out[-3]["text"].endswith("word149") or out[-3]["text"].endswith("word149\n===")
            assert [c["heading_path"][-1] for c in out[-2:]] == ["Install", "Usage"]
            assert check_spans(text, out, s) == []


def test_a_runt_before_a_deeper_heading_joins_its_predecessor():
    # The "===" underline of a heading too long for one chunk is left alone by packing (two
    # full pieces of 60 words before it) and is a runt at the end of that heading's text:
    # it joins the piece before it even though the section goes on with a deeper heading
    # ("##", itself a runt that must stay apart).
    text = f"{para(120)}\n===\n## Next\n"
    s = S(target=60, max=90, min=10)
    out = chunking.chunk_document(text, settings=s)
    assert [chunking.count_words(c["text"]) for c in out] == [60, 61, 2]
    assert out[1]["text"].endswith("word118 word119\n===") and out[2]["text"] == "## Next"
    assert check_spans(text, out, s) == []


def test_a_runt_does_not_cross_a_heading():
    text = f"# A\n\n{para(90)}\n\n# B\n\ntail words\n"
    out = chunks(text, target=100, max=200, min=20)
    assert [c["heading_path"] for c in out] == [["A"], ["B"]]


# -- Rule 6: exact spans -----------------------------------------------------------------------

def test_text_is_exactly_the_source_span_crlf_tabs_and_zero_width_characters_included():
    text = "# Win\r\n\r\n\tTabbed\u200d line\u200b\r\n    indented code\r\n\r\n## Next\r\n\r\nmore\r\n"
    out = chunks(text)
    for c in out:
        assert c["text"] == text[c["start_char"]:c["end_char"]]
    assert "\tTabbed\u200d line\u200b\r\n    indented code" in out[0]["text"]
    assert check_spans(text, out, S()) == []


def test_additions_are_the_only_difference_from_the_span():
    rows = "\n".join(f"| {i} | v |" for i in range(80))
    text = f"| a | b |\n|---|---|\n{rows}\n"
    for c in chunks(text, target=40, max=60, min=0)[1:]:
        assert c["text"] == "| a | b |\n|---|---|\n" + text[c["start_char"]:c["end_char"]]


def test_an_empty_document_gives_no_chunks():
    assert chunks("") == [] and chunks(" \n\n\t\n") == []


# -- Rule 7: page markers ----------------------------------------------------------------------

PAGED = f"--- page 1 ---\n{para(80, 'one')}\n--- page 2 ---\n{para(80, 'two')}\n# On two\n{para(20, 'x')}\n"


def test_track_fills_pages_and_marks_continued_pages():
    out = chunks(PAGED, target=50, max=70, min=0)
    assert out[0]["text"].startswith("--- page 1 ---\n") and out[0]["page_start"] == 1
    cont = [c for c in out if c["text"].startswith("--- page 1 (cont.) ---\n")]
    assert cont and all(c["page_start"] == 1 for c in cont)
    assert any(c["page_start"] == 2 and c["text"].startswith("--- page 2 ---") for c in out)
    last = out[-1]
    assert last["heading_path"] == ["On two"] and last["page_start"] == last["page_end"] == 2
    assert last["text"].startswith("--- page 2 (cont.) ---\n# On two")
    assert check_spans(PAGED, out, S(target=50, max=70, min=0)) == []


def test_strip_drops_marker_lines_and_keep_leaves_them_as_text():
    stripped = chunks(PAGED, target=500, max=600, page_markers="strip")
    assert all("--- page" not in c["text"] for c in stripped)
    assert stripped[0]["page_start"] == 1 and stripped[0]["page_end"] == 2
    kept = chunks(PAGED, target=500, max=600, page_markers="keep")
    assert "--- page 2 ---" in kept[0]["text"] and kept[0]["page_start"] is None


def test_a_paragraph_crossing_pages_stays_in_one_chunk():
    text = "--- page 1 ---\nThe sentence starts here\n--- page 2 ---\nand ends here.\n"
    out = chunks(text)
    assert len(out) == 1 and (out[0]["page_start"], out[0]["page_end"]) == (1, 2)


def test_text_without_markers_chunks_the_same_in_every_mode():
    text = (FIXTURES / "headings.md").read_text()
    a, b, c = (chunks(text, target=60, max=100, page_markers=m) for m in ("track", "strip", "keep"))
    assert a == b == c


# -- Rule 8: output grows linearly -------------------------------------------------------------

def test_output_grows_linearly_with_the_input():
    one = (FIXTURES / "code.md").read_text()
    small, big = (sum(len(c["text"]) for c in chunks(t, target=60, max=100)) for t in (one, "\n\n".join([one] * 16)))
    assert 15 * small <= big <= 17 * small


# -- other formats and the fixed strategy ------------------------------------------------------

def test_beir_heading_paths_start_with_the_title():
    out = chunks("Plain abstract text.", fmt="beir", title="A study of flow")
    assert out[0]["heading_path"] == ["A study of flow"]


def test_fixed_windows_ignore_structure_with_overlap_and_cut_at_whitespace():
    text = "# A\n\n" + para(95) + "\n\n# B\n\nmore"
    out = chunks(text, strategy="fixed", target=40, overlap=10, max=40)
    words = text.split()
    assert [len(c["text"].split()) for c in out][:2] == [40, 40]
    assert out[1]["text"].split()[:10] == out[0]["text"].split()[-10:]
    assert out[0]["heading_path"] == [] and out[-1]["text"].endswith("more")
    assert " ".join(c["text"] for c in out).split()[:40] == words[:40]
    assert check_spans(text, out, S(strategy="fixed", target=40, overlap=10, max=40)) == []


# -- settings ----------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, message", [
    (["chunking.strategy=fixed", "chunking.target=400", "chunking.overlap=500"],
     "chunking.overlap must be >= 0 and < chunking.target (400); got 500"),
    (["chunking.target=400", "chunking.max=300"], "chunking.target (400) must not exceed chunking.max (300)"),
    (["chunking.target=100", "chunking.min=200"], "chunking.min (200) must not exceed chunking.target (100)"),
    (["chunking.unit=lines"], "chunking.unit"),
])
def test_settings_that_do_not_fit_together_name_the_key(overrides, message):
    # pipekit.run.config checks the chunking keys (alone and together) before any stage runs.
    with pytest.raises(ConfigError, match=regex.escape(message)):
        load_config(None, overrides)


def test_settings_come_from_the_validated_config_section():
    cfg = load_config(None, ["chunking.target=200", "chunking.unit=chars"])
    s = S.from_section(cfg["chunking"])
    assert (s.target, s.unit, s.strategy) == (200, "chars", "heading")
    assert S.from_section({"strategy": "heading", "target": 40, "overlap": 50}).overlap == 50  # heading ignores it


# -- fixtures: zero violations -----------------------------------------------------------------

BUDGETS = [S(target=800, max=1000, min=100, unit="chars"), S(), S(target=60, max=100, min=10),
           S(target=60, max=100, min=10, unit="tokens", page_markers="strip"),
           S(target=60, max=100, min=10, page_markers="keep"),
           S(strategy="fixed", target=50, max=100, overlap=10),
           S(strategy="fixed", target=300, max=400, overlap=60, unit="chars")]


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.iterdir()))
@pytest.mark.parametrize("budget", BUDGETS, ids=lambda s: f"{s.strategy}-{s.target}{s.unit}-{s.page_markers}")
def test_fixtures_have_no_violations(name, budget):
    text = (FIXTURES / name).read_bytes().decode("utf-8")
    fmt = "csv" if name.endswith(".csv") else "markdown"
    out = chunking.chunk_document(text, fmt=fmt, settings=budget, name=name)
    assert out
    assert check_spans(text, out, budget, fmt=fmt) == []


# -- the stage ---------------------------------------------------------------------------------

def test_the_stage_writes_chunks_whose_spans_point_into_the_stage_02_text(tmp_path):
    cfg = write_config(tmp_path, documents={"input": str(FIXTURES)},
                       chunking={"target": 60, "max": 100, "min": 10})
    for script in ("01_documents.py", "02_preprocessing.py", "03_chunking.py"):
        run_script(script, "--config", str(cfg))
    out = tmp_path / "out"
    chunks_t = pq.read_table(out / "03_chunks.parquet")
    docs = {r["doc_id"]: r for r in pq.read_table(out / "02_preprocessed.parquet").to_pylist()}
    schema = chunks_t.schema
    assert [f.name for f in schema] == list(chunking.COLUMNS)
    assert pa.types.is_list(schema.field("heading_path").type)
    assert schema.field("heading_path").type.value_type == pa.string()
    assert str(schema.field("page_start").type) == "int32" and str(schema.field("start_char").type) == "int64"
    rows = chunks_t.to_pylist()
    assert {r["doc_id"] for r in rows} == set(docs)
    by_doc: dict = {}
    for r in rows:
        by_doc.setdefault(r["doc_id"], []).append(r)
    for doc_id, rs in by_doc.items():
        assert [r["ordinal"] for r in rs] == list(range(len(rs)))
        assert all(r["chunk_id"] == f"{doc_id}#{r['ordinal']}" for r in rs)
        assert all(r["n_chars"] == len(r["text"]) and r["n_words"] == len(r["text"].split()) for r in rs)
        fmt = docs[doc_id]["format"]
        s = S(target=60, max=100, min=10)
        assert check_spans(docs[doc_id]["text"], rs, s, fmt=fmt) == []
    assert any(r["page_start"] is not None for r in rows)


def test_a_bad_budget_stops_the_stage_with_one_line(tmp_path):
    cfg = write_config(tmp_path, chunking={"strategy": "fixed", "target": 40, "overlap": 40})
    proc = run_script("03_chunking.py", "--config", str(cfg), check=False)
    assert proc.returncode != 0
    assert "chunking.overlap must be >= 0 and < chunking.target (40); got 40" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_front_matter_title_opens_the_path_of_every_chunk_of_a_page_without_an_h1():
    # Issue 16: a page titled only by its front matter (MkDocs, Jekyll, Hugo) gave chunks
    # with an empty heading.  Every chunk, however deep its section, however many pieces a
    # long section is cut into, and whatever the heading syntax, starts with that title.
    text = ("---\ntitle: \"Snippets\"\nicon: material/scissors\n---\n\nIntro. " + para(30) + "\n\n"
            "### Deep before any level two\n\n" + para(10) + "\n\n"
            "## Usage\n\n" + "\n\n".join(para(25) for _ in range(6)) + "\n\n"
            "```md\n# not a heading\n```\n\n"
            "Setext level two\n----------------\n\n" + para(12) + "\n\n"
            "### URL Snippets\n\n" + para(40) + "\n")
    out = chunks(text, target=30, max=60, min=0)
    assert len(out) > 8
    assert all(c["heading_path"][0] == "Snippets" for c in out), [c["heading_path"] for c in out]
    assert [c["heading_path"] for c in out if "URL Snippets" in c["heading_path"]][0] == \
        ["Snippets", "Setext level two", "URL Snippets"]
    assert ["Snippets", "Usage"] in [c["heading_path"] for c in out]
    assert check_spans(text, out, S(target=30, max=60, min=0)) == []
    # A setext level-1 heading is the page's own title: it takes over, as `# ` does.
    own = chunks("---\ntitle: Page\n---\nOwn title\n=========\n\ntext\n\n## Sub\n\nmore\n", target=5, max=10, min=0)
    assert [c["heading_path"] for c in own] == [["Page"], ["Own title"], ["Own title", "Sub"]]
