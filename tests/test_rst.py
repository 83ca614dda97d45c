"""reStructuredText: read by docutils into the Markdown structure stage 03 chunks
(pipekit/read/rst.py, `read_rst` in pipekit/read/, SPEC rule 9)."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from conftest import run_script
from pipekit.chunk.markdown_blocks import scan_blocks
from pipekit.read.documents import read_document
from pipekit.read.walk import list_inputs
from pipekit.read.rst import parse, read_rst, refused_files, rst_to_markdown, section_titles


def headings(markdown: str) -> list[tuple[int, str]]:
    """(level, raw title) of every top-level ATX heading, as stage 03's scanner finds them."""
    blocks, _ = scan_blocks(markdown.split("\n"), 0, True)
    return [b[3] for b in blocks if b[0] == "heading"]


# Styles in order of first appearance decide the levels: overlined `#` is level 1,
# overlined `*` level 2, plain `=` a style of its own, then every other punctuation
# character docutils accepts, each one level deeper; a style seen again returns to its level.
CHAIN = ["#", "*", "=", "-", "^", '"', "~", "+", ":", ".", "_", "`", "'", "<", ">", "!", "$", "%"]


def chain_document() -> str:
    parts = []
    for i, ch in enumerate(CHAIN):
        title = f"Level {i + 1} {ch!r} title"
        line = ch * (len(title) + 2)
        over = line + "\n" if i < 2 else ""
        parts.append(f"{over}{title}\n{line}\n\nText under level {i + 1}.\n")
    parts.append("Back at three\n=============\n\nAgain.\n")
    parts.append("And four\n--------\n\nMore.\n")
    return "\n".join(parts)


def docutils_levels(text: str) -> list[tuple[int, str]]:
    """The oracle: each section's nesting depth in docutils' own tree, and its title."""
    from docutils import nodes
    out = []
    for section in parse(text).findall(nodes.section):
        depth, node = 0, section
        while isinstance(node, nodes.section):
            depth, node = depth + 1, node.parent
        out.append((depth, " ".join(section[0].astext().split())))
    return out


def test_every_underline_and_overline_style_gives_docutils_levels():
    text = chain_document()
    markdown, title = rst_to_markdown(text)
    expected = docutils_levels(text)
    assert [d for d, _ in expected] == list(range(1, len(CHAIN) + 1)) + [3, 4]
    found = headings(markdown)
    assert [level for level, _ in found] == [min(d, 6) for d, _ in expected]  # ATX stops at six
    assert [t.replace("\\", "") for _, t in found] == [t for _, t in expected]
    assert len(section_titles(parse(text))) == len(CHAIN) + 2 and title == "Level 1 '#' title"
    assert "Text under level 18." in markdown


def test_a_title_breaking_the_hierarchy_is_kept_as_text_not_a_heading(capfd):
    text = "Top\n===\n\nTwo\n---\n\nBack\n====\n\nStray\n~~~~~\n\nIts body.\n"
    markdown, _ = rst_to_markdown(text)
    # docutils refuses `~` here (a new style may only go one level deeper than the last
    # section, and "Back" is at level 1): no section, but its words stay findable.
    assert [t for _, t in docutils_levels(text)] == ["Top", "Two", "Back"]
    assert headings(markdown) == [(1, "Top"), (2, "Two"), (1, "Back")]
    assert "\n\nStray\n\nIts body." in markdown and "~~~" not in markdown
    assert "Title level inconsistent" not in markdown and capfd.readouterr() == ("", "")


def test_directives_keep_their_text_and_code_is_fenced():
    text = """\
Guide
=====

.. note:: The note's first line.

   Its second paragraph.

.. warning::

   Careful.

.. code-block:: python

   # a comment, not a heading
   def f():
       return 1

.. versionadded:: 3.2
   The *frob* option.

.. toctree::
   :maxdepth: 2

   install
   usage

.. autofunction:: spam.eggs

.. mystery:: argument words
   :option: value

   Body of a directive nobody knows.

   .. note:: Nested note.
"""
    markdown, _ = rst_to_markdown(text)
    assert "**Note:** The note's first line." in markdown and "Its second paragraph." in markdown
    assert "**Warning:** Careful." in markdown
    assert "```python\n# a comment, not a heading\ndef f():\n    return 1\n```" in markdown
    assert "**Added in version 3.2:** The *frob* option." in markdown
    assert "install\nusage" in markdown and "spam.eggs" in markdown
    assert "argument words" in markdown and "Body of a directive nobody knows." in markdown
    assert "**Note:** Nested note." in markdown
    assert not re.search(r"(?m)^\s*\.\. ", markdown)  # no directive markup left
    assert ":maxdepth:" not in markdown and "value" not in markdown  # options are settings, not text
    assert headings(markdown) == [(1, "Guide")]  # the `#` comment stayed inside its fence


def test_roles_known_and_unknown_keep_their_text():
    markdown, _ = rst_to_markdown(
        "Use :func:`~os.path.join`, see :ref:`the install guide <install>`, :doc:`usage`,\n"
        ":pep:`8`, :pep:`506#section`, :unknownrole:`odd text`, *emph*, ``code``, `default`.\n")
    assert "`os.path.join`" in markdown and "the install guide" in markdown and "<install>" not in markdown
    assert "PEP 8" in markdown and "PEP 506#section" in markdown
    assert "`odd text`" in markdown and "*emph*" in markdown and "`code`" in markdown
    assert not re.search(r":[a-z]+:`", markdown)


def test_literal_blocks_are_fenced_longer_than_any_backtick_run_inside():
    markdown, _ = rst_to_markdown("Example::\n\n    ```\n    # inside\n    ```\n\nAfter.\n")
    assert "Example:\n\n````\n```\n# inside\n```\n````\n\nAfter." in markdown
    assert headings(markdown) == []


def test_tables_become_whole_gfm_tables():
    text = """\
+-----------+-----------+
| Name      | Value     |
+===========+===========+
| alpha     | one       |
| continued | two lines |
+-----------+-----------+
| spanning both cells   |
+-----------------------+

=====  =====
Key    Pipe
=====  =====
a      x|y
=====  =====
"""
    markdown, _ = rst_to_markdown(text)
    assert ("| Name | Value |\n|---|---|\n| alpha continued | one two lines |\n"
            "| spanning both cells |  |") in markdown
    assert "| Key | Pipe |\n|---|---|\n| a | x\\|y |" in markdown
    blocks, _ = scan_blocks(markdown.split("\n"), 0, True)
    assert [b[0] for b in blocks].count("table") == 2


def test_text_that_looks_like_markdown_is_escaped():
    text = "Para\n\n# not a heading\n\n| --- page 3 ---\n| ======\n\n```\n\n<div>\n"
    markdown, _ = rst_to_markdown(text)
    assert headings(markdown) == []
    assert "\\# not a heading" in markdown and "\\--- page 3 ---" in markdown
    assert "\\======" in markdown and "\\```" in markdown and "\\<div>" in markdown


def test_nothing_outside_the_input_is_read(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET,value\n", encoding="utf-8")
    text = f"""\
Doc
===

.. include:: {secret}

.. include:: {secret}
   :literal:

.. raw:: html
   :file: {secret}

.. csv-table:: Data
   :file: {secret}

.. literalinclude:: {secret}
"""
    markdown, _ = rst_to_markdown(text)
    assert "TOPSECRET" not in markdown
    # ... because each directive was refused, not because docutils failed on the way (with file
    # insertion on it raised on `input_encoding: unicode`, and the reader's plain-text fallback
    # held no secret either): the row names every refusal and why.
    row = read_rst(text.encode())
    assert row.get("format", "rst") != "text" and "TOPSECRET" not in row["text"]
    assert row["note"] == (f"not read: 5 file insertions (.. include:: {secret}, .. include:: {secret}, "
                           f".. raw:: {secret}, …): a document is read alone, never the files it pulls in")
    assert refused_files(parse(text)) == [f".. include:: {secret}", f".. include:: {secret}", f".. raw:: {secret}",
                                          f".. csv-table:: {secret}", f".. literalinclude:: {secret}"]


def test_broken_markup_prints_nothing_and_leaks_no_message(capfd):
    text = ("Title\n=====\n\n*unclosed emphasis and `unclosed role\n\n.. image::\n\n"
            ".. code-block:: python\n   :bogus-option: 1\n\n   x = 1\n\n|undefined substitution|\n"
            "Short\n-\n\n" + "x" * 20_000 + "\n")
    markdown, title = rst_to_markdown(text)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    for leak in ("System Message", "ERROR/", "WARNING/", "Unknown directive", "Title underline too short"):
        assert leak not in markdown
    assert "unclosed emphasis" in markdown and "x" * 20_000 in markdown  # a long line is still read
    assert title == "Title"


def test_stage_01_reads_rst_and_stage_03_chunks_it_by_sections(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.rst").write_text("""\
=====
Guide
=====

Welcome text.

Install
-------

Run this::

    # not a heading
    pip install thing

Usage
-----

.. note:: Read the manual.
""", encoding="utf-8")
    row = read_document(list_inputs(docs / "guide.rst")[0])
    assert (row["status"], row["format"], row["title"]) == ("ok", "rst", "Guide")
    out = tmp_path / "out"
    for script in ("01_documents.py", "02_preprocessing.py", "03_chunking.py"):
        proc = run_script(script, "--set", f"documents.input={docs}", "--set", f"paths.output={out}")
    assert "1 rst" in run_script("01_documents.py", "--set", f"documents.input={docs}",
                                 "--set", f"paths.output={tmp_path / 'again'}").stdout
    chunks = pd.read_parquet(out / "03_chunks.parquet")
    paths = [list(p) for p in chunks.heading_path]
    assert paths == [["Guide"], ["Guide", "Install"], ["Guide", "Usage"]]
    install = chunks.text[1]
    assert "```\n# not a heading\npip install thing\n```" in install
    assert proc.returncode == 0


def test_sphinx_class_directive_keeps_its_signature_and_description():
    # docutils' own `class` directive (a CSS class) refused this, description and all.
    markdown, _ = rst_to_markdown(
        ".. class:: ArgumentParser(prog=None, \\\n"
        "                          usage=None)\n\n"
        "   Create a new :class:`ArgumentParser` object.\n")
    assert "ArgumentParser(prog=None, usage=None)" in markdown.replace("  ", " ")
    assert "Create a new `ArgumentParser` object." in markdown


def test_refused_markup_keeps_its_text_with_roles_shown_as_text():
    markdown, _ = rst_to_markdown(".. code-block:: python\n   :bogus-option: 1\n\n   x = :func:`spam`\n")
    assert "x = spam" in markdown and ":func:" not in markdown and "bogus" not in markdown


def test_a_file_docutils_fails_on_is_kept_as_plain_text(tmp_path):
    # Found by fuzzing: docutils' substitution transform raises ValueError on this.
    text = ("<div>|s|<div>```- item| x | y |\\<div>.. |s| replace:: z-----::\\\n\n"
            ".. |s| replace:: z   +---+---+.. toctree::.. ~~~~~+---+---+.. |s| replace:: z--- page 2 ---__"
            ".. |s| replace:: z_.. code-block:: python|")
    (tmp_path / "odd.rst").write_text(text, encoding="utf-8")
    row = read_document(list_inputs(tmp_path / "odd.rst")[0])
    assert (row["status"], row["format"], row["text"]) == ("ok", "text", text)
    assert row["note"].startswith("docutils could not convert it (") and row["note"].endswith("read as plain text")
