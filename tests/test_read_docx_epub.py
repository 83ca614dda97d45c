"""Word (.docx) and EPUB books in stage 01: their structure reaches the chunks, and a
hostile zip of XML costs nothing (pipekit/read/docx.py, epub.py, zipped.py).

The fixtures in tests/fixtures/office/ are pandoc's renderings of guide.md (make.sh),
committed so CI needs no pandoc; the hostile files (a zip bomb, a zip lying about its
sizes, an XXE entity naming a local secret, a corrupt zip) are built here from them.
"""
from __future__ import annotations

import io
import re
import shutil
import struct
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, pipeline, run_script, write_config
from pipekit.read.docx import read_docx
from pipekit.read.documents import read_document
from pipekit.read.epub import read_epub
from pipekit.read.walk import list_inputs
from test_incremental import reused

FIXTURES = REPO / "tests" / "fixtures" / "office"
DOCX, EPUB = FIXTURES / "guide.docx", FIXTURES / "guide.epub"
SECRET = "SECRET-TOKEN-7f3a9c"
MAX_BYTES = 8_000_000  # the HTML weight makes it 1 MB of inflated markup per package
CONTAINER_MARKUP = re.compile(r"<w:|<\?xml|xmlns|<!DOCTYPE|<html|<body", re.I)


def rewrite(src: Path, dst: Path, change) -> Path:
    """A copy of the zip `src` with each member's bytes passed through change(name, data)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, change(info.filename, zin.read(info)))
    return dst


def with_xxe(xml: bytes, secret: Path, root: bytes) -> bytes:
    """The part with a DTD declaring an entity that reads `secret`, used in its first text."""
    dtd = b'<!DOCTYPE ' + root + b' [<!ENTITY xxe SYSTEM "file://' + str(secret).encode() + b'">]>'
    xml = re.sub(rb"^(<\?xml[^>]*\?>\s*)(<!DOCTYPE[^>]*>\s*)?", lambda m: m.group(1) + dtd, xml, count=1)
    return xml


def docx_xxe(secret: Path, dst: Path) -> Path:
    def change(name, data):
        if name == "word/document.xml":
            data = with_xxe(data, secret, b"w:document")
            return re.sub(rb"(<w:t[^>]*>)Every expedition", rb"\1&xxe; Every expedition", data, count=1)
        return data
    return rewrite(DOCX, dst, change)


def epub_xxe(secret: Path, dst: Path) -> Path:
    def change(name, data):
        if name.endswith("ch001.xhtml"):
            data = with_xxe(data, secret, b"html")
            return data.replace(b"Every expedition", b"&xxe; Every expedition", 1)
        if name.endswith("content.opf"):
            data = with_xxe(data, secret, b"package")
            return data.replace(b">The Field Guide<", b">&xxe;The Field Guide<", 1)
        return data
    return rewrite(EPUB, dst, change)


def docx_bomb(dst: Path, size: int = 20_000_000) -> Path:
    """A real Word document whose body declares (and inflates to) `size` bytes: ~20 kB on disk."""
    def change(name, data):
        if name == "word/document.xml":
            filler = b"<w:p><w:r><w:t>" + b"a " * (size // 2) + b"</w:t></w:r></w:p>"
            return data.replace(b"</w:body>", filler + b"</w:body>")
        return data
    return rewrite(DOCX, dst, change)


def lying_size(src: Path, dst: Path, member: str, claimed: int) -> Path:
    """`src` with `member`'s uncompressed size in the central directory rewritten to
    `claimed`: a zip that declares little and inflates to much."""
    data = bytearray(src.read_bytes())
    name = member.encode()
    at = 0
    while (at := data.find(b"PK\x01\x02", at)) != -1:
        n = struct.unpack_from("<H", data, at + 28)[0]
        if bytes(data[at + 46: at + 46 + n]) == name:
            struct.pack_into("<I", data, at + 24, claimed)
            dst.write_bytes(bytes(data))
            return dst
        at += 4
    raise AssertionError(f"{member} not in {src}")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    """Stages 01-03 over a folder of good and hostile files; the outputs as tables."""
    tmp = tmp_path_factory.mktemp("office")
    docs = tmp / "docs"
    docs.mkdir()
    secret = tmp / "secret.txt"
    secret.write_text(SECRET, encoding="utf-8")
    shutil.copy(DOCX, docs / "guide.docx")
    shutil.copy(EPUB, docs / "guide.epub")
    docx_xxe(secret, docs / "xxe.docx")
    epub_xxe(secret, docs / "xxe.epub")
    docx_bomb(docs / "bomb.docx")
    (docs / "notes.docx").write_text("just text, renamed", encoding="utf-8")
    (docs / "truncated.epub").write_bytes(EPUB.read_bytes()[:3000])
    cfg = write_config(tmp, documents={"input": str(docs), "max_bytes": MAX_BYTES})
    out = tmp / "out"
    for script in ("01_documents.py", "02_preprocessing.py", "03_chunking.py"):
        run_script(script, "--config", str(cfg))
    return {"docs": pd.read_parquet(out / "01_documents.parquet").set_index("doc_id"),
            "clean": pd.read_parquet(out / "02_preprocessed.parquet"),
            "chunks": pd.read_parquet(out / "03_chunks.parquet"),
            "out": out}


def chunks_of(run, doc_id: str) -> pd.DataFrame:
    chunks = run["chunks"]
    return chunks[chunks.doc_id == doc_id]


# --------------------------------------------------------------------------- structure


@pytest.mark.parametrize("doc_id, fmt", [("guide.docx", "docx"), ("guide.epub", "epub")])
def test_headings_at_three_levels_become_the_chunks_heading_paths(run, doc_id, fmt):
    row = run["docs"].loc[doc_id]
    assert (row.status, row.format, row.title) == ("ok", fmt, "The Field Guide")
    paths = [list(p) for p in chunks_of(run, doc_id).heading_path]
    assert ["Getting started", "Packing the kit", "Checking the weather"] in paths
    assert ["Getting started", "Leaving word"] in paths
    assert ["Reference"] in paths
    # The Checking-the-weather section holds its table and code, not the next section's text.
    weather = chunks_of(run, doc_id)[[list(p)[-1:] == ["Checking the weather"] for p in chunks_of(run, doc_id).heading_path]]
    assert "hut warden" not in " ".join(weather.text)


@pytest.mark.parametrize("doc_id", ["guide.docx", "guide.epub"])
def test_list_items_table_cells_and_code_arrive_as_markdown(run, doc_id):
    text = "\n".join(chunks_of(run, doc_id).text)
    for item in ("- waterproof jacket", "- compass and map", "  - topographic sheet", "1. weigh the rucksack"):
        assert item in text, item
    assert re.search(r"\| *Ridgeback *\| *gale *\| *poor *\|", text)
    assert re.search(r"\| *Station *\| *Wind *\| *Visibility *\|\n\| *-+", text)  # a GFM table
    assert re.search(r"```[a-z]*\ndef forecast\(station\):\n    return fetch\(station\) or \"no signal\"\n```", text)


def test_no_container_markup_reaches_any_chunk(run):
    for doc_id in ("guide.docx", "guide.epub"):
        chunks = chunks_of(run, doc_id)
        assert len(chunks) >= 4
        for text in chunks.text:
            assert not CONTAINER_MARKUP.search(text), text


def test_epub_chapters_follow_the_spine_not_the_file_names(tmp_path):
    def reverse_spine(name, data):
        if not name.endswith(".opf"):
            return data
        refs = re.findall(rb"<itemref [^>]*/>", data)
        body = re.search(rb"(<spine[^>]*>)(.*?)(</spine>)", data, re.S)
        return data[:body.start(2)] + b"\n".join(reversed(refs)) + data[body.end(2):]

    book = read_epub(rewrite(EPUB, tmp_path / "reversed.epub", reverse_spine).read_bytes())
    normal = read_epub(EPUB.read_bytes())
    assert normal["text"].index("# Getting started") < normal["text"].index("# Reference")
    assert book["text"].index("# Reference") < book["text"].index("# Getting started")


def test_docx_title_falls_back_to_the_first_title_or_heading_1(tmp_path):
    no_core = rewrite(DOCX, tmp_path / "t.docx", lambda name, data: re.sub(
        rb"<dc:title>.*?</dc:title>", b"", data) if name == "docProps/core.xml" else data)
    assert read_docx(no_core.read_bytes())["title"] == "The Field Guide"  # pandoc's Title paragraph


# --------------------------------------------------------------------------- safety


def test_corrupt_and_not_zip_files_are_one_line_error_rows(run):
    docs = run["docs"]
    assert docs.loc["notes.docx", "status"] == "error"
    assert docs.loc["notes.docx", "error"] == "not a Word document: not a zip file"
    assert docs.loc["truncated.epub", "status"] == "error"
    assert docs.loc["truncated.epub", "error"].startswith("not an EPUB book: ")
    for message in docs.error.dropna():
        assert "\n" not in message and "Traceback" not in message


def test_a_zip_bomb_is_refused_unread_naming_its_size_and_the_key(run, tmp_path, monkeypatch):
    row = run["docs"].loc["bomb.docx"]
    assert row.status == "skipped"
    assert row.n_bytes < 100_000  # small on disk: only the inflated size gives it away
    assert "would inflate to 20.1 MB (20,0" in row.error and "documents.max_bytes" in row.error
    assert "bomb.docx" not in set(run["clean"].doc_id)
    # Unread: not one member is inflated once the declared sizes say no.
    bomb = docx_bomb(tmp_path / "bomb.docx")
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda *a, **k: pytest.fail("a member was inflated"))
    [entry] = list_inputs(bomb, max_bytes=MAX_BYTES)
    assert read_document(entry)["status"] == "skipped"


def test_a_member_that_inflates_past_its_declared_size_is_never_read_past_it(tmp_path):
    bomb = docx_bomb(tmp_path / "bomb.docx", size=5_000_000)
    liar = lying_size(bomb, tmp_path / "liar.docx", "word/document.xml", claimed=4000)
    [entry] = list_inputs(liar, max_bytes=MAX_BYTES)
    row = read_document(entry)
    assert row["status"] == "error"
    assert row["error"].startswith("not a Word document: corrupt zip member word/document.xml")
    assert zipfile.ZipFile(bomb).getinfo("word/document.xml").file_size > 5_000_000  # the real size


def test_the_xxe_fixtures_would_leak_the_secret_to_a_naive_parser(tmp_path):
    # The safety tests below are worth something only if these files really attack.
    from lxml import etree

    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET, encoding="utf-8")
    naive = etree.XMLParser(resolve_entities=True, load_dtd=True, no_network=True)
    with zipfile.ZipFile(docx_xxe(secret, tmp_path / "x.docx")) as z:
        assert SECRET in "".join(etree.fromstring(z.read("word/document.xml"), naive).itertext())
    with zipfile.ZipFile(epub_xxe(secret, tmp_path / "x.epub")) as z:
        for part in ("EPUB/content.opf", "EPUB/text/ch001.xhtml"):
            assert SECRET in "".join(etree.fromstring(z.read(part), naive).itertext()), part


def test_an_xxe_entity_naming_a_local_file_never_reaches_an_output(run):
    docs = run["docs"]
    assert docs.loc["xxe.docx", "status"] == "error"
    assert "word/document.xml declares a DTD" in docs.loc["xxe.docx", "error"]
    # The book is read (EPUB 2 chapters carry a DOCTYPE): without the entity's expansion.
    assert docs.loc["xxe.epub", "status"] == "ok"
    assert "Every expedition" in docs.loc["xxe.epub", "text"]
    assert docs.loc["xxe.epub", "title"] == "The Field Guide"
    for name in ("01_documents.parquet", "02_preprocessed.parquet", "03_chunks.parquet"):
        table = pd.read_parquet(run["out"] / name)
        for column in table.columns:
            assert not table[column].astype(str).str.contains(SECRET).any(), (name, column)


@pytest.mark.parametrize("src", [DOCX, EPUB], ids=["docx", "epub"])
def test_damaged_copies_give_rows_never_tracebacks(tmp_path, src):
    # Seeded: the same 40 damaged copies every run (bytes overwritten, some cut short).
    import random

    rng, base, kinds = random.Random(34), src.read_bytes(), set()
    for i in range(40):
        data = bytearray(base)
        for _ in range(rng.randint(1, 20)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        path = tmp_path / f"{i}{src.suffix}"
        path.write_bytes(bytes(data[:rng.randrange(len(data))] if i % 5 == 0 else data))
        [entry] = list_inputs(path, max_bytes=MAX_BYTES)
        row = read_document(entry)
        kinds.add(row["status"])
        if row["status"] != "ok":
            assert row["error"] and "\n" not in row["error"] and "Traceback" not in row["error"]
            assert row["error"].startswith(("not a Word document", "not an EPUB book", "its parts would inflate",
                                            "a Word document", "an EPUB book")), row["error"]
    assert "error" in kinds


def test_a_password_protected_docx_says_so_not_just_not_a_zip(tmp_path):
    # Word encrypts a protected .docx into an OLE2 compound file (the old .doc container).
    locked = tmp_path / "locked.docx"
    locked.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504) + b"EncryptedPackage")
    [entry] = list_inputs(locked)
    row = read_document(entry)
    assert row["status"] == "error"
    assert row["error"].startswith("not a Word document: an OLE2 compound file, so a password-protected")


def test_a_docx_without_word_parts_or_an_epub_without_a_container_says_so(tmp_path):
    plain = io.BytesIO()
    with zipfile.ZipFile(plain, "w") as z:
        z.writestr("readme.txt", "hello")
    for path, reader, message in ((tmp_path / "a.docx", read_docx, "not a Word document: a zip without"),
                                  (tmp_path / "a.epub", read_epub, "not an EPUB book: no META-INF/container.xml")):
        path.write_bytes(plain.getvalue())
        [entry] = list_inputs(path)
        row = read_document(entry)
        assert row["status"] == "error" and row["error"].startswith(message), row["error"]


def test_an_epub_with_encrypted_chapters_says_drm_not_binary(tmp_path):
    book = tmp_path / "locked.epub"
    shutil.copy(EPUB, book)
    with zipfile.ZipFile(book, "a") as z:
        z.writestr("META-INF/encryption.xml",
                   '<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
                   'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>'
                   '<enc:CipherData><enc:CipherReference URI="EPUB/text/ch001.xhtml"/></enc:CipherData>'
                   '</enc:EncryptedData></encryption>')
    [entry] = list_inputs(book)
    row = read_document(entry)
    assert (row["status"], row["error"]) == ("error", "an EPUB book with encrypted chapters (DRM; "
                                              "EPUB/text/ch001.xhtml and 0 more) cannot be read")


# --------------------------------------------------------------------------- reruns


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_an_edited_docx_is_read_again_and_the_rest_reused(tmp_path, engine):
    docs = tmp_path / "docs"
    docs.mkdir()
    for src in (DOCX, EPUB):
        shutil.copy(src, docs / src.name)
    shutil.copy(FIXTURES / "guide.md", docs / "guide.md")
    cfg = write_config(tmp_path, documents={"input": str(docs)},
                       retrieval={"queries": ["weather station", "hut warden route"]})
    sets = (f"engine.kind={engine}",) + (("engine.workers=2",) if engine == "dask" else ())
    pipeline(cfg, tmp_path / "out", *sets)
    rewrite(DOCX, docs / "guide.docx", lambda name, data: data.replace(
        b"your return time", b"your return time and your party size") if name == "word/document.xml" else data)
    rerun = pipeline(cfg, tmp_path / "out", *sets).stdout
    pipeline(cfg, tmp_path / "forced", *sets, args=("--force",))
    assert "0 added, 1 changed (guide.docx), 0 removed" in rerun
    assert reused(rerun, "01_documents") == 2
    assert reused(rerun, "03_chunking") == 2
    from conftest import assert_same_outputs
    assert_same_outputs(tmp_path / "out", tmp_path / "forced")
    chunks = pd.read_parquet(tmp_path / "out" / "03_chunks.parquet")
    assert chunks.text.str.contains("party size").any()
