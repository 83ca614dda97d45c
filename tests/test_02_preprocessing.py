"""Stage 02: each cleaning rule on a small example."""
import unicodedata

from pipekit.run.stages import load_stage

pre = load_stage(2)


def test_line_endings_become_lf():
    assert pre.clean_text("a\r\nb\rc\n") == "a\nb\nc\n"


def test_unicode_is_composed_so_one_letter_is_one_code_point():
    decomposed = unicodedata.normalize("NFD", "café")
    assert pre.clean_text(decomposed) == "café\n"
    assert pre.clean_text(decomposed, "none") == decomposed + "\n"


def test_form_feeds_become_page_markers():
    assert pre.clean_text("one\n\fpage two\f") == "--- page 1 ---\none\n--- page 2 ---\npage two\n"


def test_control_characters_go_but_tabs_and_newlines_stay():
    assert pre.clean_text("a\x00b\x1b[0m\tc\nd") == "ab[0m\tc\nd\n"


def test_trailing_spaces_and_blank_runs_are_collapsed():
    assert pre.clean_text("a   \n\n\n\nb\t\n") == "a\n\nb\n"


def test_markdown_structure_and_code_indentation_survive():
    md = "# Title\n\n```python\n    # comment\n    x = 1\n```\n\n    indented code\n"
    assert pre.clean_text(md) == md


def test_whitespace_only_documents_become_empty():
    assert pre.clean_text(" \n\n\t\n") == ""


# ---- a large document, cleaned a slice at a time (issue 15)

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st


def sliced(text: str, form: str = "NFC", size: int = 7) -> str:
    data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    return pre.clean_large(data, form, size=size).to_pybytes().decode("utf-8")


# Every character some rule looks at, and the ones that make a cut interesting: line ends,
# controls, trailing blanks, a letter and the accent that composes with it,
# a non-breaking space (whitespace to str.strip, not to the trailing rule), an emoji.
PIECES = ["\n", "\n\n\n", "\r", "\r\n", " ", "\t", "\x00", "\x1b", "\x85", "a", "bc",
          "e", "\u0301", "é", "\u00a0", "-", "#", "😀", "x y"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=40), st.integers(1, 12),
       st.sampled_from(["NFC", "NFKC", "none"]))
def test_cleaning_by_slices_gives_exactly_the_whole_text_result(parts, size, form):
    text = "".join(parts)
    assert sliced(text, form, size) == pre.clean_text(text, form)


@pytest.mark.parametrize("text", ["ab" * 50 + "\n" + "é\u0301" * 30, "x" * 100, "😀" * 40 + "\n",
                                  "\n\n a  \n \n\nb\n\n\n", " \u00a0\n\t"])
def test_cleaning_by_slices_on_lines_without_a_cut(text):
    for size in (1, 2, 5, 64):
        assert sliced(text, "NFC", size) == pre.clean_text(text), size


def test_a_text_with_pages_is_found_so_that_it_is_cleaned_whole():
    view = lambda s: np.frombuffer(s.encode(), dtype=np.uint8)
    assert not pre.has_pages(view("plain\ntext - page 3\n"))
    assert pre.has_pages(view("a\fb")) and pre.has_pages(view("x\n--- page 2 ---\ny"))
    straddling = view("y" * 20 + "--- page 9 ---")  # across two windows of the scan
    assert pre.has_pages(straddling, window=23)


def test_slices_are_cut_only_after_a_newline_or_between_printable_ascii():
    data = np.frombuffer("aé b\nccc  d\u0301x".encode(), dtype=np.uint8)
    ranges = list(pre.slice_ranges(data, 1))
    assert ranges[0][0] == 0 and ranges[-1][1] == len(data)
    for (_, end), (start, _) in zip(ranges, ranges[1:]):
        assert end == start
        before, after = data[end - 1], data[end]
        assert before == 10 or (0x21 <= before <= 0x7E and 0x21 <= after <= 0x7E)


def test_the_stage_cleans_a_document_over_the_slicing_size_as_it_cleans_a_small_one(tmp_path):
    import pyarrow.parquet as pq
    from conftest import run_script, write_config

    line = "2026-11-01 INFO  caf\u0065\u0301 order shipped   \r\n"
    big = (line * 40 + "\n\n\n\n\x00  \r\n") * (pre.LARGE // (len(line) * 40) + 50)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "big.txt").write_bytes(big.encode())               # by slices
    (docs / "paged.txt").write_bytes(big.replace("\x00", "\f").encode())  # pages: by slices, read twice
    (docs / "small.txt").write_bytes(b"a  \r\n\n\n\nb\n")
    cfg = write_config(tmp_path, documents={"input": str(docs)})
    run_script("01_documents.py", "--config", str(cfg))
    summary = run_script("02_preprocessing.py", "--config", str(cfg)).stdout
    before = {r["doc_id"]: r["text"] for r in pq.read_table(tmp_path / "out" / "01_documents.parquet").to_pylist()}
    after = {r["doc_id"]: r["text"] for r in pq.read_table(tmp_path / "out" / "02_preprocessed.parquet").to_pylist()}
    assert len(before["big.txt"].encode()) > pre.LARGE and len(before["paged.txt"].encode()) > pre.LARGE
    assert after == {d: pre.clean_text(t) for d, t in before.items()}
    # every page of paged.txt starts with the same log line: furniture, counted in the summary
    removed = pre.clean_document(before["paged.txt"])[1]
    assert removed > 100 and f"{removed:,} page furniture lines" in summary and "from 1 documents" in summary


# ---- a large document with pages: furniture found in one pass, dropped in another (issue 15)

def sliced_paged(text: str, form: str = "NFC", size: int = 7) -> tuple[str, int]:
    data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    out, removed = pre.clean_large_paged(data, form, size=size)
    return out.to_pybytes().decode("utf-8"), removed


# What page furniture and page breaks are made of, beside the PIECES every rule looks at.
PAGED = PIECES + ["\f", "\f", "\n\f\n", "--- page 3 ---\n", "\n--- page 9 ---  \n", "Header\n",
                  "Page 4 of 9\n", "\n7\n", "\nFooter x\n", " \n\f \n"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PAGED), max_size=60), st.integers(1, 12),
       st.sampled_from(["NFC", "NFKC", "none"]))
def test_a_paged_text_cleaned_by_slices_gives_exactly_the_whole_text_result(parts, size, form):
    text = "".join(parts)
    assert sliced_paged(text, form, size) == pre.clean_document(text, form)


@settings(max_examples=150, deadline=None)
@given(st.integers(3, 12), st.lists(st.sampled_from(["body text", "", "Header", "3", "x y"]), min_size=1, max_size=6),
       st.booleans(), st.integers(1, 40))
def test_furniture_found_by_slices_is_the_furniture_found_whole(pages, body, form_feeds, size):
    """Pages with a running header, a numbered footer and a body: the furniture found and
    dropped in two passes over slices is the whole-text result, line for line."""
    sep = "\f" if form_feeds else ""
    text = "".join(
        ("" if form_feeds else f"--- page {n} ---\n") + "Shared Manual\n" + "\n".join(body[: 1 + n % len(body)])
        + f"\n\nPage {n} of {pages}\n" + sep for n in range(1, pages + 1))
    got = sliced_paged(text, "NFC", size)
    assert got == pre.clean_document(text)
    assert got[1] >= pages  # the header and footer went from every page


def test_a_paged_text_with_a_page_over_the_slicing_size():
    page = "Title line\n" + "word " * 50 + "\n" + "\n".join(f"row {k}" for k in range(60)) + "\nthe end\n"
    text = "\f".join(page.replace("Title", f"Title {n}") for n in range(6))
    for size in (1, 16, 500, 10_000):
        assert sliced_paged(text, "NFC", size) == pre.clean_document(text), size
