"""Stage 01: walking the input and reading each format (pipekit/read/, 01_documents.py)."""
from __future__ import annotations

import codecs
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from conftest import REPO
from pipekit.read import documents as reading, walk
from pipekit.run.errors import PipelineError
from pipekit.read.beir import iter_beir

from pipekit.read.documents import read_document
from pipekit.read.walk import InputEntry, list_inputs
fpdf = pytest.importorskip("fpdf")  # a dev dependency: builds the PDFs these tests read


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    return path


def rows_by_id(root: Path, **kwargs) -> dict[str, dict]:
    options = {"include": [], "exclude": [], "hidden": False} | kwargs
    return {e.doc_id: read_document(e) for e in list_inputs(root, **options)}


def read_one(path: Path) -> dict:
    [entry] = list_inputs(path, [], [], False)
    return read_document(entry)


def make_pdf(path: Path, pages: list[str], title: str | None = None, labels: bool = False) -> Path:
    pdf = fpdf.FPDF()
    pdf.set_creation_date(datetime(2024, 1, 1, tzinfo=timezone.utc))
    pdf.set_font("helvetica", size=12)
    if title:
        pdf.set_title(title)
    for number, text in enumerate(pages, 1):
        pdf.add_page()
        if labels and number <= 2:
            # front matter in roman numerals, then arabic from 1: labels that differ from
            # the physical page numbers are the case page_labels exists for
            pdf.set_page_label("r") if number == 1 else pdf.set_page_label("D", label_start=1)
        if text:
            pdf.multi_cell(0, 8, text)
    pdf.output(str(path))
    return path


# --------------------------------------------------------------------------- walking


def test_walk_is_recursive_sorted_and_names_ancestors(tmp_path):
    for rel in ["b.md", "a/z.txt", "a/b/c.md", "A.md", "a b/é ñ/x.md"]:
        write(tmp_path / rel, "text")
    entries = list_inputs(tmp_path, [], [], False)
    assert [e.doc_id for e in entries] == ["A.md", "a/b/c.md", "a/z.txt", "a b/é ñ/x.md", "b.md"]
    assert {e.doc_id: e.folders for e in entries}["a b/é ñ/x.md"] == ["a b", "é ñ"]
    assert {e.doc_id: e.folders for e in entries}["b.md"] == []
    assert all(e.skip is None for e in entries)


def test_single_file_root_is_its_own_doc_id(tmp_path):
    path = write(tmp_path / "deep" / "notes.md", "# Hi\n")
    [entry] = list_inputs(path, ["*.txt"], ["*.md"], False)  # a named file is always read
    assert (entry.doc_id, entry.folders, entry.skip) == ("notes.md", [], None)
    assert read_document(entry)["text"] == "# Hi\n"


def test_missing_root_is_a_pipeline_error(tmp_path):
    with pytest.raises(PipelineError, match="does not exist"):
        list_inputs(tmp_path / "nope", [], [], False)


def test_hidden_files_get_rows_hidden_folders_one_row_and_are_not_entered(tmp_path):
    write(tmp_path / ".env.md", "secret")
    write(tmp_path / ".git" / "objects" / "ab.txt", "blob")
    write(tmp_path / "doc.md", "text")
    rows = rows_by_id(tmp_path)
    assert set(rows) == {".env.md", ".git", "doc.md"}
    assert rows[".git"]["status"] == rows[".env.md"]["status"] == "skipped"
    assert "hidden folder" in rows[".git"]["error"] and "documents.hidden" in rows[".git"]["error"]
    assert rows[".env.md"]["format"] == "markdown"
    shown = rows_by_id(tmp_path, hidden=True)
    assert shown[".git/objects/ab.txt"]["text"] == "blob" and shown[".env.md"]["status"] == "ok"


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks need privileges on Windows")
def test_symlink_loops_and_dangling_links_are_skipped_rows(tmp_path):
    write(tmp_path / "a" / "doc.md", "text")
    os.symlink("..", tmp_path / "a" / "up")          # folder loop
    os.symlink("missing.md", tmp_path / "gone.md")     # dangling
    os.symlink("l2", tmp_path / "l1")                  # link chain that never ends
    os.symlink("l1", tmp_path / "l2")
    write(tmp_path / "real" / "r.md", "real")
    os.symlink("real", tmp_path / "alias")             # a link to a folder inside: read once, as real/
    rows = rows_by_id(tmp_path)
    assert rows["a/up"]["status"] == "skipped" and "symlink loop" in rows["a/up"]["error"]
    assert rows["gone.md"]["status"] == "skipped" and "dangling symlink" in rows["gone.md"]["error"]
    assert "symlink loop" in rows["l1"]["error"] and "symlink loop" in rows["l2"]["error"]
    assert rows["real/r.md"]["text"] == "real" and "alias/r.md" not in rows
    assert rows["alias"]["status"] == "skipped" and "already read as real/" in rows["alias"]["error"]
    assert rows["a/doc.md"]["status"] == "ok"


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks need privileges on Windows")
def test_a_link_removed_while_the_folder_is_read_is_a_file_that_disappeared(tmp_path, monkeypatch):
    """The walk knows which names are links from the listing; one removed before its turn
    is not "dangling" (there is nothing left to read the target of): it disappeared."""
    write(tmp_path / "a.md", "x")
    os.symlink("a.md", tmp_path / "link.md")
    real_scandir = os.scandir

    class Listing:  # the folder listed, then the link removed, as another process might
        def __init__(self, path):
            self.entries = list(real_scandir(path))
            (tmp_path / "link.md").unlink(missing_ok=True)

        def __enter__(self):
            return iter(self.entries)

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(os, "scandir", Listing)
    rows = rows_by_id(tmp_path)
    assert rows["link.md"]["status"] == "error"
    assert rows["link.md"]["error"] == "file disappeared while the folder was being read"
    assert rows["a.md"]["status"] == "ok"


def test_an_unlistable_folder_is_an_error_row_and_the_walk_goes_on(tmp_path, monkeypatch):
    write(tmp_path / "locked" / "secret.md", "x")
    write(tmp_path / "open" / "a.md", "x")
    real_scandir = os.scandir

    def scandir(path):
        if Path(path).name == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    rows = rows_by_id(tmp_path)
    assert set(rows) == {"locked", "open/a.md"}
    assert (rows["locked"]["status"], rows["locked"]["error"]) == ("error", "cannot list folder: permission denied")
    assert rows["locked"]["format"] == "folder" and rows["locked"]["path"] == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_named_pipe_is_skipped_not_opened(tmp_path):
    os.mkfifo(tmp_path / "pipe.txt")  # opening it would block forever
    row = rows_by_id(tmp_path)["pipe.txt"]
    assert row["status"] == "skipped" and "named pipe" in row["error"]


def test_include_and_exclude_globs(tmp_path):
    for rel in ["a.md", "b.txt", "docs/c.md", "docs/drafts/d.md", "drafts/e.md", "x/drafts/f.md"]:
        write(tmp_path / rel, "text")
    rows = rows_by_id(tmp_path, include=["*.md"], exclude=["drafts/", "/docs/*.txt"])
    assert rows["b.txt"]["status"] == "skipped" and "documents.include" in rows["b.txt"]["error"]
    # a folder-only pattern without a slash prunes matching folders at any depth, one row each
    for folder in ["docs/drafts", "drafts", "x/drafts"]:
        assert rows[folder]["status"] == "skipped" and "'drafts/'" in rows[folder]["error"]
    assert not any(k.endswith(("d.md", "e.md", "f.md")) for k in rows)
    assert rows["a.md"]["status"] == rows["docs/c.md"]["status"] == "ok"
    rows = rows_by_id(tmp_path, include=["docs/**"])
    assert [k for k, r in rows.items() if r["status"] == "ok"] == ["docs/c.md", "docs/drafts/d.md"]
    rows = rows_by_id(tmp_path, exclude=["docs/**", "?.txt"])
    assert rows["docs"]["status"] == "skipped" and rows["b.txt"]["status"] == "skipped"


@pytest.mark.parametrize("pattern, path, is_dir, expected", [
    ("*.md", "a/b/c.md", False, True),
    ("*.md", "a/b/c.mdx", False, False),
    ("/a/*.md", "a/c.md", False, True),
    ("/a/*.md", "x/a/c.md", False, False),
    ("a/*.md", "a/b/c.md", False, False),   # * never crosses a folder
    ("a/**/c.md", "a/c.md", False, True),   # ** matches zero folders too
    ("a/**/c.md", "a/x/y/c.md", False, True),
    ("[ab]?.txt", "b1.txt", False, True),
    ("[!ab]?.txt", "b1.txt", False, False),
    ("build/", "build", False, False),      # trailing slash: folders only
    ("build/", "build", True, True),
])
def test_glob_rules(pattern, path, is_dir, expected):
    assert walk._Glob(pattern).matches(path, is_dir) is expected


def test_unsupported_and_extensionless_files_are_skipped_with_reason(tmp_path):
    write(tmp_path / "report.pptx", b"PK\x03\x04")  # PowerPoint: not read (Word and EPUB are)
    write(tmp_path / "sub" / "c.jsonl", '{"_id": "1", "text": "x"}\n')
    rows = rows_by_id(tmp_path)
    assert rows["report.pptx"]["format"] == "pptx"
    assert rows["report.pptx"]["status"] == "skipped" and "'.pptx' is not supported" in rows["report.pptx"]["error"]
    assert rows["report.pptx"]["text"] is None
    assert rows["sub/c.jsonl"]["status"] == "skipped" and "BEIR" in rows["sub/c.jsonl"]["error"]
    assert all(r["text"] is None for r in rows.values())


def test_extensionless_files_are_read_when_they_are_text(tmp_path):
    write(tmp_path / "README", "Read me first.\n")
    write(tmp_path / "program", b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 40)
    write(tmp_path / "latin", "caf\xe9 cr\xe8me na\xefve fa\xe7ade d\xe9j\xe0 vu, tr\xe8s chaud\n".encode("cp1252") * 3)
    rows = rows_by_id(tmp_path)
    assert (rows["README"]["status"], rows["README"]["format"], rows["README"]["text"]) == ("ok", "text", "Read me first.\n")
    assert "no file extension" in rows["README"]["note"]
    assert rows["program"]["status"] == "skipped" and rows["program"]["text"] is None
    assert "no file extension and the content is not text" in rows["program"]["error"]
    assert rows["latin"]["status"] == "ok" and "café" in rows["latin"]["text"]


# --------------------------------------------------------------------------- encodings

TEXT = "Le café était très chaud – “naïve” façade, déjà vu. Œuvre, garçon, 5 €.\n" * 3


@pytest.mark.parametrize("data, encoding", [
    (TEXT.encode("utf-8"), "utf-8"),
    (codecs.BOM_UTF8 + TEXT.encode("utf-8"), "utf-8-sig"),
    (codecs.BOM_UTF16_LE + TEXT.encode("utf-16-le"), "utf-16"),
    (codecs.BOM_UTF16_BE + TEXT.encode("utf-16-be"), "utf-16"),
    (codecs.BOM_UTF32_LE + TEXT.encode("utf-32-le"), "utf-32"),
    (TEXT.encode("cp1252"), "cp1252"),
])
def test_encodings_decode_to_the_same_text_and_are_recorded(tmp_path, data, encoding):
    row = read_one(write(tmp_path / "t.txt", data))
    assert (row["status"], row["text"], row["encoding"]) == ("ok", TEXT, encoding)
    assert row["n_bytes"] == len(data)


def test_detected_non_western_encodings(tmp_path):
    russian = "Привет, мир! Это тестовый документ о поиске информации и ранжировании.\n" * 3
    row = read_one(write(tmp_path / "ru.md", russian.encode("cp1251")))
    assert row["text"] == russian and "charset-normalizer" in row["note"]


def test_utf8_with_a_few_bad_bytes_stays_utf8(tmp_path):
    good = "Grüße aus Köln, naïve café, déjà vu — “quoted”. " * 5
    data = good.encode("utf-8") + b"one stray cp1252 byte: \x93 here. " + good.encode("utf-8")
    row = read_one(write(tmp_path / "mixed.txt", data + "é".encode("utf-8")[:1]))  # and cut mid-character
    assert row["status"] == "ok" and row["encoding"] == "utf-8"
    assert row["text"].count(good) == 2 and row["text"].count("\ufffd") == 2
    assert "2 invalid UTF-8 sequences" in row["note"]


def test_random_bytes_are_a_binary_file_error(tmp_path):
    data = bytes((i * 7919 + 13) % 256 for i in range(4096))  # every byte value, NULs included
    row = read_one(write(tmp_path / "blob.txt", data))
    assert (row["status"], row["text"]) == ("error", None)
    assert row["error"].startswith("binary file")


def test_mostly_control_characters_is_binary_even_when_valid_utf8(tmp_path):
    row = read_one(write(tmp_path / "zeros.txt", b"\x00" * 500 + b"abc"))
    assert row["status"] == "error" and row["error"].startswith("binary file")


def test_utf16_without_bom_is_called_out(tmp_path):
    row = read_one(write(tmp_path / "u.txt", TEXT.encode("utf-16-le")))
    assert row["status"] == "error" and "UTF-16 without a byte-order mark" in row["error"]


def test_a_stray_nul_in_text_is_read_with_a_note(tmp_path):
    row = read_one(write(tmp_path / "nul.md", "# Title\n\nsome text\x00 that a crashed editor left\n"))
    assert row["status"] == "ok" and "\x00" in row["text"] and "NUL" in row["note"]


def test_bad_bytes_after_a_bom_are_an_error(tmp_path):
    row = read_one(write(tmp_path / "x.txt", codecs.BOM_UTF8 + b"ok \xff\xfe broken"))
    assert row["status"] == "error" and "utf-8-sig" in row["error"]


def test_permission_denied_is_an_error_row(tmp_path, monkeypatch):
    path = write(tmp_path / "locked.md", "secret")
    [entry] = list_inputs(path, [], [], False)

    def refuse(self):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", refuse)
    row = read_document(entry)
    assert (row["status"], row["error"], row["text"]) == ("error", "cannot read file: permission denied", None)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads every file")
def test_permission_denied_for_real(tmp_path):
    path = write(tmp_path / "locked.md", "secret")
    path.chmod(0)
    try:
        row = rows_by_id(tmp_path)["locked.md"]
    finally:
        path.chmod(0o644)
    assert row["status"] == "error" and "permission denied" in row["error"]


# --------------------------------------------------------------------------- PDF


def test_pdf_pages_markers_labels_and_title(tmp_path):
    path = make_pdf(tmp_path / "g.pdf", ["Front matter words", "Alpha page text", "Beta page text"],
                    title="The Field Guide", labels=True)
    row = read_one(path)
    assert row["status"] == "ok" and row["format"] == "pdf" and row["title"] == "The Field Guide"
    assert row["text"] == ("--- page 1 ---\nFront matter words\n"
                           "--- page 2 ---\nAlpha page text\n"
                           "--- page 3 ---\nBeta page text\n")
    assert row["page_labels"] == ["i", "1", "2"]
    assert "3 pages" in row["note"] and row["encoding"] is None


def test_pdf_paragraph_gaps_become_blank_lines(tmp_path):
    first = "one two three four five six seven eight nine ten " * 6
    second = "eleven twelve thirteen fourteen fifteen sixteen " * 7
    row = read_one(make_pdf(tmp_path / "p.pdf", [first.strip() + "\n\n" + second.strip()]))
    body = row["text"].split("\n", 1)[1]
    paragraphs = [" ".join(p.split()) for p in body.split("\n\n")]
    assert paragraphs == [" ".join(first.split()), " ".join(second.split())]
    assert body.count("\n") > 4  # the printed lines themselves stay lines


def test_pdf_words_hyphenated_across_lines_are_whole(tmp_path):
    text = "The manip\u00adulation of extra\u00adordinary long hyphen\u00adated words in narrow columns"
    pdf = fpdf.FPDF()
    pdf.add_page()
    pdf.set_font("helvetica", size=12)
    pdf.multi_cell(60, 6, text)  # narrow: fpdf2 breaks lines at the soft hyphens
    pdf.output(str(tmp_path / "h.pdf"))
    row = read_one(tmp_path / "h.pdf")
    assert "extraordinary" in row["text"] and "\ufffe" not in row["text"]


def test_pdf_without_labels_or_title(tmp_path):
    row = read_one(make_pdf(tmp_path / "p.pdf", ["one", "two"]))
    assert row["page_labels"] is None and row["title"] is None
    assert row["text"].count("--- page ") == 2


def test_pdf_without_text_layer_is_ok_with_a_note(tmp_path):
    row = read_one(make_pdf(tmp_path / "scan.pdf", ["", ""]))
    assert (row["status"], row["text"]) == ("ok", "")
    assert "no text layer" in row["note"]


def test_pdf_with_some_empty_pages_keeps_their_markers(tmp_path):
    row = read_one(make_pdf(tmp_path / "p.pdf", ["one", "", "three"]))
    assert row["text"] == "--- page 1 ---\none\n--- page 2 ---\n--- page 3 ---\nthree\n"
    assert "no text on page 2" in row["note"]


def test_broken_pdfs_are_error_rows(tmp_path):
    good = make_pdf(tmp_path / "good.pdf", ["some text"] * 3).read_bytes()
    locked = fpdf.FPDF()
    locked.add_page()
    locked.set_font("helvetica", size=12)
    locked.cell(text="secret")
    locked.set_encryption(owner_password="owner", user_password="user")
    locked.output(str(tmp_path / "locked.pdf"))
    write(tmp_path / "zero.pdf", b"")
    write(tmp_path / "cut.pdf", good[: len(good) // 3])
    write(tmp_path / "notes.pdf", "just some notes, not a PDF at all\n")
    rows = rows_by_id(tmp_path)
    expected = {"locked.pdf": "encrypted PDF", "zero.pdf": "empty PDF file (0 bytes)",
                "cut.pdf": "truncated", "notes.pdf": "not a PDF"}
    for doc_id, message in expected.items():
        assert rows[doc_id]["status"] == "error", doc_id
        assert message in rows[doc_id]["error"], (doc_id, rows[doc_id]["error"])
        assert rows[doc_id]["text"] is None
    assert rows["good.pdf"]["status"] == "ok"


def test_pdf_only_owner_password_is_readable(tmp_path):
    pdf = fpdf.FPDF()
    pdf.add_page()
    pdf.set_font("helvetica", size=12)
    pdf.cell(text="printable but not editable")
    pdf.set_encryption(owner_password="owner")
    pdf.output(str(tmp_path / "o.pdf"))
    row = read_one(tmp_path / "o.pdf")
    assert row["status"] == "ok" and "printable but not editable" in row["text"]


# --------------------------------------------------------------------------- HTML

PAGE = """<!DOCTYPE html>
<html><head><title>  Pump   Manual </title>
<style>body { color: red }</style><script>var tracking = "SCRIPT-TEXT";</script></head>
<body>
<nav><a href="/">Home</a> <a href="/shop">NAV-TEXT</a></nav>
<div role="navigation">ROLE-NAV-TEXT</div>
<!-- COMMENT-TEXT -->
<h1>Installing the pump</h1>
<p>Read <b>all</b> of this first. snake_case stays.</p>
<p># 5 is not a heading</p>
<h2>Parts</h2>
<ul><li>impeller<ul><li>blades</li></ul></li><li>housing</li></ul>
<ol><li>first</li><li>second</li></ol>
<h3>Sizes</h3>
<table><tr><th>Model</th><th>Flow</th></tr><tr><td>A|1</td><td>10</td></tr><tr><td>B</td><td>20</td></tr></table>
<pre><code class="language-python"># a comment, not a heading
def flow(rate):
    return rate * 2
</code></pre>
<noscript>NOSCRIPT-TEXT</noscript>
</body></html>
"""


def headings(markdown: str) -> list[tuple[str, str]]:
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    return [(t.tag, tokens[i + 1].content) for i, t in enumerate(tokens) if t.type == "heading_open"]


def test_html_becomes_markdown_with_structure(tmp_path):
    row = read_one(write(tmp_path / "manual.html", PAGE))
    md = row["text"]
    assert row["status"] == "ok" and row["format"] == "html" and row["title"] == "Pump Manual"
    assert headings(md) == [("h1", "Installing the pump"), ("h2", "Parts"), ("h3", "Sizes")]
    assert "- impeller\n  - blades\n- housing" in md
    assert "1. first\n2. second" in md
    assert "| Model | Flow |\n| --- | --- |\n| A\\|1 | 10 |\n| B | 20 |" in md
    assert "```python\n# a comment, not a heading\ndef flow(rate):\n    return rate * 2\n```" in md
    assert "**all**" in md and "snake_case" in md
    for dropped in ["SCRIPT-TEXT", "NAV-TEXT", "ROLE-NAV-TEXT", "COMMENT-TEXT", "NOSCRIPT-TEXT", "color: red"]:
        assert dropped not in md


def test_table_parses_as_a_gfm_table(tmp_path):
    md = read_one(write(tmp_path / "t.htm", PAGE))["text"]
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    cells = [t.children[0].content for t in tokens if t.type == "inline" and tokens[tokens.index(t) - 1].type in ("td_open", "th_open")]
    assert cells == ["Model", "Flow", "A|1", "10", "B", "20"]


def test_broken_html_with_unclosed_script_leaks_no_script(tmp_path):
    broken = "<html><body><h2>Kept</h2><p>para <b>unclosed <div>inner\n<script>steal('SCRIPT-TEXT')"
    row = read_one(write(tmp_path / "broken.html", broken))
    assert row["status"] == "ok" and "SCRIPT-TEXT" not in row["text"] and "steal" not in row["text"]
    assert "## Kept" in row["text"] and "inner" in row["text"] and row["title"] is None


def test_html_without_a_closing_head_keeps_its_body(tmp_path):
    page = "<html><head><title>T</title><script>SCRIPT-TEXT</script><body><h1>Body</h1><p>kept</p>"
    row = read_one(write(tmp_path / "h.html", page))
    assert row["title"] == "T" and "# Body" in row["text"] and "kept" in row["text"]
    assert "SCRIPT-TEXT" not in row["text"] and "T\n" not in row["text"]


def test_html_that_looks_like_a_url_is_read_without_a_warning(tmp_path, recwarn):
    row = read_one(write(tmp_path / "link.html", "https://example.com/manual.pdf"))
    assert row["status"] == "ok" and row["text"] == "https://example.com/manual.pdf\n"
    assert not [w for w in recwarn if "looks more like" in str(w.message)]


def test_html_images_become_their_alt_text(tmp_path):
    page = ('<p>Before <img src="data:image/png;base64,' + "QUFB" * 5000 + '" alt="the  pump diagram"> after '
            '<img src="x.png"></p>')
    row = read_one(write(tmp_path / "i.html", page))
    assert row["text"] == "Before the pump diagram after\n"


def test_html_meta_charset_is_used_when_not_utf8(tmp_path):
    page = '<html><head><meta charset="windows-1252"><title>Caf\xe9</title></head><body><p>cr\xe8me</p></body></html>'
    row = read_one(write(tmp_path / "c.html", page.encode("cp1252")))
    assert row["title"] == "Café" and "crème" in row["text"] and row["encoding"] == "cp1252"


def test_deeply_nested_html_is_an_error_not_a_crash(tmp_path):
    row = read_one(write(tmp_path / "deep.html", "<div>" * 50_000 + "x"))
    assert row["status"] in ("ok", "error")
    if row["status"] == "error":
        assert "nested too deeply" in row["error"]


# --------------------------------------------------------------------------- CSV


def test_csv_keeps_its_original_text_and_notes_the_dialect(tmp_path):
    text = 'name;city;note\r\nAda;London;"says ""hi""; twice"\r\nBo;Oslo;plain\r\n'
    row = read_one(write(tmp_path / "people.csv", text))
    assert (row["status"], row["format"], row["text"]) == ("ok", "csv", text)
    assert "delimiter ';'" in row["note"] and "2 records" in row["note"] and "malformed" not in row["note"]


def test_tsv_is_read_as_csv(tmp_path):
    row = read_one(write(tmp_path / "t.tsv", "a\tb\n1\t2\n3\t4\n"))
    assert row["format"] == "csv" and "delimiter '\\t'" in row["note"]


def test_malformed_csv_is_ok_text_with_a_note(tmp_path):
    text = 'a,b,c\n1,2\n3,4,5\n"never closed,6,7\n'
    row = read_one(write(tmp_path / "bad.csv", text))
    assert (row["status"], row["text"]) == ("ok", text)
    assert "malformed" in row["note"] and "line 2: 2 fields, header has 3" in row["note"]
    assert "parsing stopped" in row["note"]


def test_empty_files_are_ok_and_empty(tmp_path):
    for name in ["e.md", "e.txt", "e.csv", "e.html"]:
        write(tmp_path / name, b"")
    for name, row in rows_by_id(tmp_path).items():
        assert (row["status"], row["error"]) == ("ok", None), name
        assert row["text"].strip() == "", name


def test_every_row_has_every_column(tmp_path):
    write(tmp_path / "a.md", "x")
    write(tmp_path / "b.bin", b"\x00")
    write(tmp_path / "c.pdf", b"")
    for row in rows_by_id(tmp_path).values():
        assert tuple(row) == reading.COLUMNS


# --------------------------------------------------------------------------- BEIR


def test_beir_rows(tmp_path):
    lines = [{"_id": "d1", "title": "First", "text": "alpha"}, {"_id": 7, "text": "no title"}]
    path = write(tmp_path / "corpus.jsonl",
                 codecs.BOM_UTF8 + "\n".join(json.dumps(x) for x in lines).encode() + b"\n\n")
    [entry] = list_inputs(path, [], [], False)
    assert entry.format == "beir"
    rows = list(iter_beir(path))
    assert [(r["doc_id"], r["title"], r["text"], r["format"], r["status"]) for r in rows] == [
        ("d1", "First", "alpha", "beir", "ok"), ("7", None, "no title", "beir", "ok")]
    assert all(tuple(r) == reading.COLUMNS and r["path"] == [] for r in rows)


@pytest.mark.parametrize("line, problem", [
    ('{"_id": "a", "text": "x"', "not valid JSON"),
    ('["a", "b"]', "expected a JSON object"),
    ('{"title": "t", "text": "x"}', 'no "_id" field'),
    ('{"_id": "", "text": "x"}', '"_id" must be'),
    ('{"_id": "z", "text": 5}', '"text" must be a string'),
    ('{"_id": "d1", "text": "again"}', "appears twice"),
])
def test_malformed_beir_line_names_file_line_and_problem(tmp_path, line, problem):
    path = write(tmp_path / "corpus.jsonl", '{"_id": "d1", "text": "ok"}\n\n' + line + "\n")
    with pytest.raises(PipelineError) as info:
        list(iter_beir(path))
    assert str(path) in str(info.value) and "line 3" in str(info.value) and problem in str(info.value)


def test_read_document_refuses_a_beir_entry(tmp_path):
    path = write(tmp_path / "c.jsonl", '{"_id": "1", "text": "x"}\n')
    with pytest.raises(ValueError, match="iter_beir"):
        read_document(InputEntry(path, "c.jsonl", [], format="beir"))


# --------------------------------------------------------------------------- the stage

import pyarrow.parquet as pq  # noqa: E402

from pipekit.cli import run_stage  # noqa: E402
from pipekit.run.config import load_config  # noqa: E402
from pipekit.run.stages import load_stage  # noqa: E402

documents = load_stage(1)


def run_documents(tmp_path: Path, input_path: Path, *overrides: str):
    out = tmp_path / "out"
    cfg = load_config(None, [f"documents.input={input_path}", f"paths.output={out}", *overrides])
    ctx = run_stage(1, documents.run, cfg, quiet=True)
    return pq.read_table(out / "01_documents.parquet"), ctx


def test_stage_writes_one_row_per_file_with_the_schema(tmp_path):
    corpus = tmp_path / "corpus"
    write(corpus / "a.md", "# A\n")
    write(corpus / "b" / "c.txt", "plain")
    write(corpus / "blob.txt", b"\x00\x01\x02\x03" * 10)
    write(corpus / "x.pptx", b"PK")
    table, ctx = run_documents(tmp_path, corpus)
    assert table.schema.remove_metadata() == documents.SCHEMA
    rows = {r["doc_id"]: r for r in table.to_pylist()}
    assert list(rows) == ["a.md", "b/c.txt", "blob.txt", "x.pptx"]
    assert [rows[k]["status"] for k in rows] == ["ok", "ok", "error", "skipped"]
    assert rows["b/c.txt"]["path"] == ["b"] and rows["b/c.txt"]["source"] == str(corpus / "b" / "c.txt")
    assert ctx.notes[0] == "2 ok, 1 error, 1 skipped (1 markdown, 1 text)"
    assert any("blob.txt: binary file" in n for n in ctx.notes)


def test_texts_are_stored_for_fast_reading_and_every_other_column_compressed(tmp_path):
    """Texts are most of the bytes stages 01-03 write and 02-05 read back: written as they
    are (compressing them was most of the writer's time, issue 47), every other column
    snappy.  Per-column codecs name every leaf column (a list's values, a struct's fields):
    one left out would be written uncompressed."""
    corpus = tmp_path / "corpus"
    write(corpus / "a.md", "# A\n\nsome text\n")
    run_documents(tmp_path, corpus)
    meta = pq.ParquetFile(tmp_path / "out" / "01_documents.parquet").metadata.row_group(0)
    codecs_ = {meta.column(i).path_in_schema: meta.column(i).compression for i in range(meta.num_columns)}
    assert "outline.list.element.title" in codecs_ and "path.list.element" in codecs_
    assert codecs_.pop("text") == "UNCOMPRESSED"
    assert set(codecs_.values()) == {"SNAPPY"}
    # Column types the stages do not write today are named as Parquet names them too.
    import pyarrow as pa
    from pipekit.run import io

    schema = pa.schema([("text", pa.string()), ("vector", pa.list_(pa.float32(), 2)),
                        ("m", pa.map_(pa.string(), pa.int32())), ("ll", pa.large_list(pa.list_(pa.int8())))])
    sink = io.ParquetSink(tmp_path / "odd.parquet", schema, {})
    sink.write(pa.table({"text": ["t"], "vector": [[1.0, 2.0]], "m": [[("k", 1)]], "ll": [[[1]]]}, schema=schema))
    sink.commit()
    meta = pq.ParquetFile(tmp_path / "odd.parquet").metadata.row_group(0)
    assert [meta.column(i).compression for i in range(meta.num_columns)] == ["UNCOMPRESSED"] + ["SNAPPY"] * 4


def test_rerun_gives_the_same_rows(tmp_path):
    corpus = tmp_path / "corpus"
    for i in range(5):
        write(corpus / f"d{i}" / f"{i}.md", f"# Doc {i}\n\ntext {i}\n")
    first, _ = run_documents(tmp_path, corpus)
    second, _ = run_documents(tmp_path, corpus)
    assert first.to_pylist() == second.to_pylist()


def test_stage_reads_a_beir_corpus(tmp_path):
    path = write(tmp_path / "corpus.jsonl",
                 "".join(json.dumps({"_id": f"d{i}", "title": f"T{i}", "text": f"text {i}"}) + "\n"
                         for i in range(1200)))
    table, ctx = run_documents(tmp_path, path)
    assert table.num_rows == 1200 and set(table.column("format").to_pylist()) == {"beir"}
    assert table.column("doc_id").to_pylist()[:2] == ["d0", "d1"] and ctx.notes == ["1,200 ok (1,200 beir)"]


def test_stage_stops_on_a_malformed_beir_line_and_writes_nothing(tmp_path):
    path = write(tmp_path / "corpus.jsonl", '{"_id": "a", "text": "x"}\nnot json\n')
    with pytest.raises(PipelineError, match="line 2"):
        run_documents(tmp_path, path)
    assert not list((tmp_path / "out").glob("01_documents.parquet*"))


def test_batches_are_bounded_by_rows_and_text_size():
    rows = [{"text": "x" * 10}] * 7 + [{"text": None}]
    assert [len(b) for b in documents.batches(rows, max_rows=3, max_chars=10**6)] == [3, 3, 2]
    assert [len(b) for b in documents.batches(rows, max_rows=100, max_chars=25)] == [3, 3, 2]


def test_files_read_are_handed_on_every_few_megabytes_of_text(tmp_path, monkeypatch):
    # So the writer encodes them while later files are read, not all after the last page.
    monkeypatch.setattr(documents, "FILE_BATCH_CHARS", 100)
    for i in range(6):
        (tmp_path / f"{i}.md").write_text(f"# Page {i}\n\n" + "words " * 10 + "\n")
    entries = list_inputs(tmp_path)
    [part] = documents.input_partitions({}, None, entries, workers=1)
    tables = list(documents.read_partition(part))
    assert [t.num_rows for t in tables] == [2, 2, 2]  # ~70 characters a page: a batch at 100
    assert sum((t.column("doc_id").to_pylist() for t in tables), []) == [e.doc_id for e in entries]


def test_summary_names_the_first_problems_and_counts_the_rest():
    tally = documents.Tally(shown=2)
    for i in range(5):
        tally.add({"status": "error", "doc_id": f"e{i}", "format": "pdf", "error": "corrupt PDF"})
    tally.add({"status": "ok", "doc_id": "ok", "format": "html", "error": None})
    assert tally.lines() == ["1 ok, 5 error (1 html)", "error   e0: corrupt PDF", "error   e1: corrupt PDF",
                             "... and 3 more: status != 'ok' in 01_documents.parquet"]


@pytest.mark.parametrize("seed", range(40))
def test_a_tables_tally_is_its_rows_counted_one_by_one(seed):
    """`add_table` (Arrow, with its short way for tables all `ok` or without notes) counts what a
    plain loop over the rows counts: statuses, formats, the first problems, blank and shrunk pages."""
    import random

    import pyarrow as pa

    from pipekit.chunk.unchunked import NO_TEXT_LAYER
    from pipekit.read.html import SHRUNK

    rng = random.Random(seed)
    statuses = rng.choice([["ok"], ["ok", "error", "skipped"]])
    notes = rng.choice([[None], [None, "x", f"3 pages, {NO_TEXT_LAYER}", f"1,000 of 9,000 {SHRUNK} kept"]])
    tables = [[{"doc_id": f"d{t}-{i}", "status": rng.choice(statuses), "format": rng.choice(["beir", "pdf", "html"]),
                "error": rng.choice([None, "bad"]), "note": rng.choice(notes)} for i in range(rng.randint(0, 30))]
              for t in range(rng.randint(1, 4))]
    tally = documents.Tally(shown=3)
    for rows in tables:
        tally.add_table(pa.Table.from_pylist(rows, schema=pa.schema(
            [(k, pa.string()) for k in ("doc_id", "status", "format", "error", "note")])))
    want = documents.Tally(shown=3)
    for row in (r for rows in tables for r in rows):
        want.add(row)
        for part, named, mark in (("blank", "blank_named", NO_TEXT_LAYER), ("shrunk", "shrunk_named", SHRUNK)):
            if row["status"] == "ok" and mark in (row["note"] or ""):
                setattr(want, part, getattr(want, part) + 1)
                if len(getattr(want, named)) < want.shown:
                    getattr(want, named).append(f"ok      {row['doc_id']}: {row['note']}")
    assert tally.lines() == want.lines()
    assert (+tally.statuses, +tally.formats) == (+want.statuses, +want.formats)


def test_the_bundled_sample_reads_all_but_its_broken_pdf():
    sample = REPO / "data" / "sample"
    rows = {e.doc_id: read_document(e) for e in list_inputs(sample, [], [], False)}
    # One file is broken on purpose, so Lesson 1's `error` row is there to see: an old
    # edition of the field guide whose download stopped part-way.
    broken = rows.pop("field-guide-2023.pdf")
    assert broken["status"] == "error" and broken["error"].startswith("corrupt PDF: truncated")
    assert SAMPLE_PDF.read_bytes().startswith((sample / "field-guide-2023.pdf").read_bytes())
    assert all(r["status"] == "ok" for r in rows.values()), {k: r["error"] for k, r in rows.items()}
    assert {r["format"] for r in rows.values()} >= {"markdown", "text", "pdf", "html", "csv"}
    pdf = rows["field-guide.pdf"]
    assert pdf["title"] == "Lighthouse On-Call Field Guide" and pdf["page_labels"] == ["i", "1", "2", "3", "4"]
    # its outline (bookmarks), from which stage 03 takes the heading trail
    assert [(e["level"], e["title"], e["page"]) for e in pdf["outline"]] == [
        (1, "Lighthouse On-Call Field Guide", 1), (2, "Reading the dashboards", 2),
        (2, "The first fifteen minutes", 3), (2, "Alarms you will meet", 4), (2, "Handing over", 5)]
    assert rows["handbook/operations/runbooks/queue-backlog.md"]["title"] == "Runbook for the QueueBacklog alarm"


# --------------------------------------------------------------------------- PDF pages end to end

SAMPLE_PDF = REPO / "data" / "sample" / "field-guide.pdf"
_MARKER_LINE = __import__("re").compile(r"--- page \d+( \(cont\.\))? ---")


def _norm(text: str) -> str:
    import unicodedata

    return " ".join(unicodedata.normalize("NFC", text).split())


def _pdfium_pages(path: Path) -> list[str]:
    """Each page's text straight from PDFium: the oracle, independent of our reader."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(path))
    try:
        return [pdf[i].get_textpage().get_text_range() for i in range(len(pdf))]
    finally:
        pdf.close()


@pytest.mark.parametrize("overrides", [[], ["chunking.target=40", "chunking.max=90", "chunking.min=5"]],
                         ids=["default budget", "small chunks"])
def test_chunks_of_the_sample_pdf_are_on_the_pages_they_say(tmp_path, overrides):
    import subprocess

    import yaml

    repo = REPO
    if not (repo / "03_chunking.py").exists():
        pytest.skip("needs stages 02 and 03")
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"paths": {"output": str(tmp_path / "out")},
                                   "documents": {"input": str(SAMPLE_PDF)}}))
    args = [sys.executable, "run_pipeline.py", "--config", str(cfg), "--to", "3"]
    for o in overrides:
        args += ["--set", o]
    proc = subprocess.run(args, cwd=repo, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    chunks = pq.read_table(tmp_path / "out" / "03_chunks.parquet").to_pylist()
    assert len(chunks) >= 2 and all(c["doc_id"] == "field-guide.pdf" for c in chunks)

    # Where each page's text starts in the concatenation of all pages, normalised alike.
    pages = [_norm(p) for p in _pdfium_pages(SAMPLE_PDF)]
    full, starts = "", []
    for page in pages:
        starts.append(len(full))
        full += page + " "

    def page_of(offset: int) -> int:
        return max(n for n, s in enumerate(starts, 1) if s <= offset)

    cursor, spans_pages = 0, set()
    for chunk in sorted(chunks, key=lambda c: c["ordinal"]):
        lines = [_norm(ln) for ln in chunk["text"].split("\n")]
        lines = [ln for ln in lines if ln and not _MARKER_LINE.fullmatch(ln)]
        assert lines, chunk["chunk_id"]
        found = []
        for line in lines:  # in order: each line is found after the previous one
            at = full.find(line, cursor)
            assert at >= 0, (chunk["chunk_id"], line)
            found.append(page_of(at))
            cursor = at + len(line)
        assert (chunk["page_start"], chunk["page_end"]) == (found[0], found[-1]), chunk["chunk_id"]
        if chunk["page_start"] != chunk["page_end"]:
            spans_pages.add(chunk["chunk_id"])
        if not chunk["text"].startswith(f"--- page {chunk['page_start']} ---"):
            # a chunk that starts inside a page says which page it continues
            assert chunk["text"].startswith(f"--- page {chunk['page_start']} (cont.) ---"), chunk["chunk_id"]
    assert {c["page_start"] for c in chunks} | {c["page_end"] for c in chunks} == set(range(1, len(pages) + 1))


def test_front_matter_title_becomes_the_document_title():
    from pipekit.read.markdown import front_matter_title

    assert front_matter_title("---\ntitle: Operations  Handbook\nowner: x\n---\n# H\n") == "Operations Handbook"
    assert front_matter_title("---\r\ntitle: CRLF\r\n---\r\nbody") == "CRLF"
    assert front_matter_title("# No front matter\n---\ntitle: x\n---\n") is None
    assert front_matter_title("---\ntitle: [unclosed\n---\n") is None  # malformed: no title, no error
    assert front_matter_title("---\nowner: x\n---\n") is None


def test_an_extensionless_binary_mostly_of_text_is_skipped_not_read(tmp_path):
    """A database file with no extension: valid UTF-8, few control bytes, so decoding alone
    would take it for text and index its pages as a document.  Its NUL bytes say binary
    (git's test, `_looks_binary`): a `skipped` row saying so, never an `ok` document."""
    data = b"SQLite format 3\x00\x10\x00\x01\x01" + b"CREATE TABLE notes (id INTEGER, body TEXT) " * 100 + b"\x00" * 40
    write(tmp_path / "cache", data)
    from pipekit.read.text import decode_text

    decode_text(data)  # not refused by decoding: only the NUL test stands between it and an ok row
    row = rows_by_id(tmp_path)["cache"]
    assert (row["status"], row["text"]) == ("skipped", None)
    assert row["error"] == "no file extension and the content is not text"


def test_a_pdf_line_break_inside_an_identifier_is_joined_and_a_sentence_end_is_not(tmp_path):
    """R's manuals break `R_LIBS_USER` after its underscore and `install.packages` after its
    dot: indexed as `r` + `libs_user`, the name a reader searches for was in no chunk."""
    pdf = make_pdf(tmp_path / "admin.pdf", [
        "Set R_\nLIBS_USER to a folder of your own.\nThen call install.\npackages(\"x\") there.\n"
        "Run install.packages once more for its\ndependencies. It installs the packages.\n"
        "Then restart R. See the manual, etc.\nand the FAQ, and snake_\ncase names."])
    text = read_one(pdf)["text"]
    assert "R_LIBS_USER to a folder" in text and 'install.packages("x")' in text and "snake_case" in text
    # a period ending a sentence at a line's end: the next line is another sentence
    assert "packages.\nThen restart" in text and "etc.\nand the FAQ" in text


def test_a_dot_at_a_line_end_joins_only_on_the_documents_own_evidence():
    from pipekit.read.pdf import join_identifier_wraps

    assert join_identifier_wraps(["use install.\npackages today"]) == ["use install.\npackages today"]
    assert join_identifier_wraps(["use install.\npackages today", "install.packages"]) == [
        "use install.packages today", "install.packages"]  # the document spells it so elsewhere
    assert join_identifier_wraps(["see e.g.\nthe manual, etc.\nand more"]) == ["see e.g.\nthe manual, etc.\nand more"]
    assert join_identifier_wraps(["end of page R_", "LIBS_USER"]) == ["end of page R_", "LIBS_USER"]  # across pages: never
    assert join_identifier_wraps(["a line ending _\nx", "word _\nnext"]) == ["a line ending _\nx", "word _\nnext"]
    # found on R's manuals: a list of whole macro names, a sentence ending before a call, an initial
    assert join_identifier_wraps(["__CYGWIN__\nFreeBSD", "on macOS.\nsessionInfo() says", "R.\nWilks, R.Wilks"]) == [
        "__CYGWIN__\nFreeBSD", "on macOS.\nsessionInfo() says", "R.\nWilks, R.Wilks"]
    assert join_identifier_wraps(["see www.gnu.\norg", "www.gnu.org"])[0] == "see www.gnu.org"


@pytest.mark.parametrize("name", ["a.md", "A.HTML", ".bashrc", "notes.", "..", "...", "a.tar.gz", "README",
                                  ".hidden.md", "a..b", "é.rst", "x.y."])
def test_a_files_format_comes_from_its_suffix_as_pathlib_reads_it(name):
    # The walk takes a name's suffix without making a Path of it (a tenth of listing a folder).
    from pathlib import PurePath

    from pipekit.read.walk import FORMATS, _extension

    ext = PurePath(name).suffix.lower()
    assert _extension(name) == FORMATS.get(ext, ext.lstrip("."))
