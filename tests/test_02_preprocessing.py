"""Stage 02: each cleaning rule on a small example."""
import unicodedata

from pipekit.stages import load_stage

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
