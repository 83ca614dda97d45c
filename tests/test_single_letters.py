"""One-letter names (issue 48): "read a CSV file in R" lost `R`, the one word that said what
it was about, because SPEC's analyzer kept runs of two characters or more.  Under
`indexing.single_letters: capitals` a letter standing alone as a capital, but `A` and `I`,
is a term, kept as that capital; `none` and an index built before the setting keep the old
terms."""
import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

import pipekit
from pipekit.index.analyzer import Analyzer
from pipekit.run.io import META_KEY, part_files

from conftest import REPO, run_script

OLD = Analyzer(single_letters="none")


def test_lone_capitals_are_terms_and_keep_their_case():
    assert Analyzer().analyze("How do I read a CSV file in R?") == ["read", "csv", "file", "R"]
    assert Analyzer().analyze("C and X, vitamin D, T cells") == ["C", "X", "vitamin", "D", "T", "cell"]
    assert OLD.analyze("How do I read a CSV file in R?") == ["read", "csv", "file"]


def test_a_and_i_and_lower_case_letters_are_not_terms():
    """`A` opens sentences and titles, `I` is the pronoun: English words, not names.  A
    lower-case letter alone is a contraction's tail, an abbreviation or a list label."""
    text = "A cat. I think so. e.g. don't a) b) x = y; it's what's"
    assert Analyzer(stopwords="none").analyze(text) == ["cat", "think", "so", "don", "it", "what"]
    assert Analyzer(stopwords="none").analyze(text) == Analyzer(stopwords="none", single_letters="none").analyze(text)


def test_a_one_letter_term_cannot_meet_another_term():
    """Snowball stems `aed` to `a` and leaves `r` as `r`: the names are capitals, so `R`
    is neither, and the lower-case letters stay out as before."""
    a = Analyzer(stopwords="none")
    assert a.analyze("aed R r B b") == ["a", "R", "B"]
    assert set(a.analyze("R")).isdisjoint(a.analyze("r rr aed ar"))


def test_unicode_capitals_take_the_column_path_alike():
    # Non-ASCII text is cut by RE2, whose \p{Lu} capitals count as well (É, Δ).
    a = Analyzer(stemmer="none", stopwords="none")
    assert a.analyze("Ünïcode É Δ R über I A x é") == ["ünïcode", "É", "Δ", "R", "über"]
    mixed = pa.array(["read a CSV in R", "Δ und R, café", None, "A I"])
    flat, parent = a.tokens(mixed)
    assert list(zip(flat.to_pylist(), parent.tolist())) == [
        ("read", 0), ("csv", 0), ("in", 0), ("R", 0), ("Δ", 1), ("und", 1), ("R", 1), ("café", 1)]


def reference(text: str, single_letters: str) -> list[str]:
    """The rule in Python's re alone: runs of letters and digits; two characters or more,
    lower-cased; or one capital but A and I, as it is."""
    out = []
    for w in re.findall(r"[^\W_]+", text):
        if len(w) >= 2:
            out.append(w.lower())
        elif single_letters == "capitals" and w.isupper() and w not in ("A", "I"):
            out.append(w)
    return out


ALPHABET = st.sampled_from(list("aAbBiIrRxXzZ09éÉΔδ _-.'\n") + ["CSV", "in", "Ünï"])


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(st.lists(ALPHABET, max_size=20).map("".join), min_size=1, max_size=4),
       single_letters=st.sampled_from(["capitals", "none"]))
def test_every_path_follows_the_rule(texts, single_letters):
    """The one-query path, the ASCII column path, RE2's path and mixed batches: each text's terms."""
    a = Analyzer(stemmer="none", stopwords="none", single_letters=single_letters)
    flat, parent = a.tokens(pa.array(texts))
    for i, text in enumerate(texts):
        want = reference(text, single_letters)
        assert [t for t, p in zip(flat.to_pylist(), parent.tolist()) if p == i] == want
        assert a.analyze(text) == want


def test_an_index_recorded_before_the_setting_is_read_as_none():
    """An index whose analyzer record predates `single_letters` was built without one-letter
    terms: its queries must be analysed the same way."""
    record = {"stemmer": "english", "stopwords": "questions"}
    assert Analyzer.from_settings(record) == OLD
    assert Analyzer.from_settings(Analyzer().settings()) == Analyzer()
    assert Analyzer().settings()["single_letters"] == "capitals"
    with pytest.raises(ValueError, match="single_letters must be one of capitals, none; got 'yes'"):
        Analyzer(single_letters="yes")


# ---- end to end: a folder where R's page answers only if `R` is a term ----

R_PAGE = """# R Data Import/Export

## Importing data

In R, `read.table` reads a file in table format and creates a data frame from it;
its variant `read.csv` expects commas. R converts each column to a vector of the
right type, and R's own format is kept by `save`.
"""
XARRAY_PAGE = """# Reading and writing files

## CSV files

To read a CSV file, read it with pandas and convert: a CSV file read this way becomes a
Dataset. Writing back to a CSV file is the same in reverse. Any file pandas can read
(CSV, Excel, a fixed-width file) can be read into xarray this way.
"""
OTHER_PAGE = """# Plotting

## Line plots

A DataArray of one dimension is drawn as a line; of two, as an image. Colours come from
the colour map, and axes are labelled from the coordinates.
"""
QUESTION = "read a CSV file in R"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("letters")
    docs = root / "docs"
    for name, text in {"r/data-import.md": R_PAGE, "xarray/io.md": XARRAY_PAGE, "xarray/plotting.md": OTHER_PAGE}.items():
        (docs / name).parent.mkdir(parents=True, exist_ok=True)
        (docs / name).write_text(text, encoding="utf-8")
    return root


def run(folder, single_letters):
    out = folder / f"out-{single_letters}"
    run_script("run_pipeline.py", "--set", f"paths.output={out}", "--set", f"documents.input={folder / 'docs'}",
               "--set", f"retrieval.queries=[{QUESTION}]", "--set", "retrieval.qrels=null",
               "--set", f"indexing.single_letters={single_letters}")
    return out


def test_the_r_question_finds_the_r_page(folder):
    hits = pipekit.Searcher(run(folder, "capitals")).search(QUESTION, k=3)
    assert hits[0].doc_id == "r/data-import.md", [h.doc_id for h in hits]
    terms = pq.read_table(folder / "out-capitals" / "04_terms.parquet").column("term").to_pylist()
    assert "R" in terms and "r" not in terms


def test_without_the_setting_xarray_wins_and_an_old_index_still_answers_so(folder):
    out = run(folder, "none")
    before = [h.doc_id for h in pipekit.Searcher(out).search(QUESTION, k=3)]
    assert before[0] == "xarray/io.md"  # the failure issue 48 reported, on this folder
    # Strip the setting from the index's record, as an index written before it existed.
    for name in ("04_chunks.parquet", "04_terms.parquet", "04_postings.parquet"):
        for f in part_files(out / name):
            table = pq.read_table(f)
            meta = dict(table.schema.metadata)
            record = json.loads(meta[META_KEY])
            del record["corpus"]["analyzer"]["single_letters"]
            meta[META_KEY] = json.dumps(record).encode()
            pq.write_table(table.replace_schema_metadata(meta), f)
    old = pipekit.Searcher(out)
    assert old.analyzer == OLD  # config.yaml says capitals now; the index's record decides
    assert [h.doc_id for h in old.search(QUESTION, k=3)] == before
    assert "R" not in old.query_terms(QUESTION)


def test_config_yaml_names_the_setting():
    text = (REPO / "config.yaml").read_text(encoding="utf-8")
    assert re.search(r"^  single_letters: capitals\b", text, re.M)
