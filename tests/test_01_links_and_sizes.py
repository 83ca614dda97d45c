"""Stage 01's boundaries: nothing read from outside documents.input unless the user asks
(`documents.follow_links`), each file read once however many links lead to it, symlink
loops stopped, and no document larger than `documents.max_bytes` read at all (issue 15)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import run_script, write_config
from pipekit.run.config import load_config
from pipekit.run.errors import ConfigError
from pipekit.read.beir import iter_beir

from pipekit.read.documents import read_document
from pipekit.read.walk import list_inputs
pytestmark = pytest.mark.skipif(sys.platform == "win32" or not hasattr(os, "symlink"),
                                reason="symlinks need privileges on Windows")

SECRET_FILE = "SHADOWSECRET root:$6$hash:19000:0:99999:7:::"
SECRET_DIR = "PRIVATEKEYTEXT do not index"


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def outside_and_docs(tmp_path: Path) -> tuple[Path, Path]:
    """docs/ with a link to a file outside it (absolute) and to a folder outside it (relative)."""
    outside = tmp_path / "outside"
    write(outside / "shadow", SECRET_FILE + "\n")
    write(outside / "home" / "notes.md", f"# Keys\n\n{SECRET_DIR}\n")
    docs = tmp_path / "docs"
    write(docs / "guide.md", "# Guide\n\nInstall with care.\n")
    os.symlink(outside / "shadow", docs / "shadow.txt")
    os.symlink(Path("..") / "outside" / "home", docs / "home")
    return outside, docs


def rows_of(root: Path, **options) -> dict[str, dict]:
    return {e.doc_id: read_document(e) for e in list_inputs(root, **options)}


def test_links_to_an_outside_file_and_folder_are_skipped_and_nothing_of_theirs_is_chunked(tmp_path):
    outside, docs = outside_and_docs(tmp_path)
    cfg = write_config(tmp_path, documents={"input": str(docs)})
    first = run_script("01_documents.py", "--config", str(cfg))
    run_script("02_preprocessing.py", "--config", str(cfg))
    run_script("03_chunking.py", "--config", str(cfg))
    out = tmp_path / "out"
    rows = {r["doc_id"]: r for r in pq.read_table(out / "01_documents.parquet").to_pylist()}
    assert set(rows) == {"guide.md", "shadow.txt", "home"}  # the folder is one row, not entered
    for doc_id, target in (("shadow.txt", outside / "shadow"), ("home", outside / "home")):
        row = rows[doc_id]
        assert row["status"] == "skipped" and row["text"] is None
        # The row says where the link points and which key would read it.
        assert str(target.resolve()) in row["error"] and "documents.follow_links: true" in row["error"]
    assert rows["home"]["format"] == "folder"
    chunks = pq.read_table(out / "03_chunks.parquet", columns=["doc_id", "text"]).to_pylist()
    assert [c["doc_id"] for c in chunks] == ["guide.md"]
    for c in chunks:
        assert "SHADOWSECRET" not in c["text"] and "PRIVATEKEYTEXT" not in c["text"]
    assert "skipped: 2 outside documents.input (symlink not followed)" in first.stdout


def test_follow_links_true_reads_what_the_links_point_at(tmp_path):
    _, docs = outside_and_docs(tmp_path)
    rows = rows_of(docs, follow_links=True)
    assert rows["shadow.txt"]["status"] == "ok" and rows["shadow.txt"]["text"] == SECRET_FILE + "\n"
    assert rows["home/notes.md"]["status"] == "ok" and SECRET_DIR in rows["home/notes.md"]["text"]
    assert rows["home/notes.md"]["path"] == ["home"]
    # The same through the config key, as a user sets it.
    cfg = load_config(None, [f"documents.input={docs}", "documents.follow_links=true"])
    assert cfg["documents"]["follow_links"] is True


def test_a_link_inside_the_input_is_read_once_and_its_second_name_noted(tmp_path):
    docs = tmp_path / "docs"
    write(docs / "guide.md", "# Guide\n\nInstall with care.\n")
    os.symlink("guide.md", docs / "latest.md")                  # a second name for a file
    write(docs / "releases" / "v2" / "notes.md", "# v2\n\nFaster.\n")
    os.symlink("releases/v2", docs / "current")                 # a second name for a folder
    write(docs / ".drafts" / "plan.md", "# Plan\n\nLater.\n")   # hidden, but linked from a visible name
    os.symlink(".drafts/plan.md", docs / "plan.md")
    rows = rows_of(docs)
    ok = {d: r for d, r in rows.items() if r["status"] == "ok"}
    # Each file once, under the name reached without a link when there is one.
    assert sorted(ok) == ["guide.md", "plan.md", "releases/v2/notes.md"]
    assert [r["text"] for r in ok.values()].count("# Guide\n\nInstall with care.\n") == 1
    assert "also reached as latest.md" in ok["guide.md"]["note"]
    assert rows["latest.md"]["status"] == "skipped" and "same file as guide.md" in rows["latest.md"]["error"]
    assert rows["current"]["status"] == "skipped"
    assert "already read as releases/v2/" in rows["current"]["error"]
    assert "current/notes.md" not in rows
    assert ok["plan.md"]["text"] == "# Plan\n\nLater.\n"  # its only readable name is the link


def test_a_file_reached_only_through_linked_folders_is_read_once(tmp_path):
    docs = tmp_path / "docs"
    write(docs / ".store" / "a.md", "# A\n\ntext\n")
    os.symlink(".store", docs / "one")
    os.symlink(".store", docs / "two")
    rows = rows_of(docs)
    assert rows["one/a.md"]["status"] == "ok"
    assert rows["two"]["status"] == "skipped" and "already read as one/" in rows["two"]["error"]


def test_loops_are_stopped_with_and_without_follow_links(tmp_path):
    outside, docs = outside_and_docs(tmp_path)
    write(docs / "sub" / "x.md", "x")
    os.symlink("..", docs / "sub" / "up")                    # back to the input folder
    os.symlink(docs, outside / "home" / "back")              # outside -> into the input again
    os.symlink(".", outside / "home" / "self")               # a folder inside itself
    os.symlink("l2", docs / "l1")                            # a chain that never reaches a file
    os.symlink("l1", docs / "l2")
    for follow in (False, True):
        rows = rows_of(docs, follow_links=follow)
        assert "symlink loop" in rows["sub/up"]["error"]
        assert "symlink loop" in rows["l1"]["error"] and "symlink loop" in rows["l2"]["error"]
        assert [d for d, r in rows.items() if r["text"] == "x"] == ["sub/x.md"]
        assert [d for d, r in rows.items() if r["text"] and "Guide" in r["text"]] == ["guide.md"]
    rows = rows_of(docs, follow_links=True)
    assert "symlink loop" in rows["home/back"]["error"] and "symlink loop" in rows["home/self"]["error"]
    assert rows["home/notes.md"]["status"] == "ok"


def test_a_file_over_max_bytes_is_skipped_naming_its_size_and_the_key(tmp_path):
    docs = tmp_path / "docs"
    write(docs / "big.txt", "word " * 300)       # 1500 bytes
    write(docs / "fits.txt", "word " * 200)      # 1000 bytes: exactly the limit is read
    write(docs / "README", "x" * 2000)           # no extension: the size rule still holds
    rows = rows_of(docs, max_bytes=1000)
    assert rows["fits.txt"]["status"] == "ok"
    for doc_id, size in (("big.txt", "1,500 bytes"), ("README", "2,000 bytes")):
        row = rows[doc_id]
        assert row["status"] == "skipped" and row["text"] is None
        assert size in row["error"] and "documents.max_bytes" in row["error"]
    # A file named as the input is held to it too.
    [entry] = list_inputs(docs / "big.txt", max_bytes=1000)
    assert read_document(entry)["status"] == "skipped"


def test_a_file_that_grows_past_max_bytes_after_the_walk_is_skipped_not_read(tmp_path):
    docs = tmp_path / "docs"
    path = write(docs / "growing.log.txt", "line\n" * 10)
    [entry] = list_inputs(docs, max_bytes=100)
    assert entry.skip is None
    write(path, "line\n" * 1000)
    row = read_document(entry)
    assert row["status"] == "skipped" and "5,000 bytes" in row["error"] and "documents.max_bytes" in row["error"]


def test_a_beir_record_over_max_bytes_is_skipped(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "small", "text": "short"}) + "\n"
                      + json.dumps({"_id": "huge", "text": "w " * 1000}) + "\n")
    rows = {r["doc_id"]: r for r in iter_beir(corpus, max_bytes=500)}
    assert rows["small"]["status"] == "ok"
    assert rows["huge"]["status"] == "skipped" and "documents.max_bytes" in rows["huge"]["error"]


def test_max_bytes_reads_sizes_with_units_and_names_the_key_when_wrong():
    assert load_config(None, ["documents.max_bytes=2 MB"])["documents"]["max_bytes"] == 2_000_000
    assert load_config(None, ["documents.max_bytes=1 GiB"])["documents"]["max_bytes"] == 2**30
    assert load_config(None, ["documents.max_bytes=4096"])["documents"]["max_bytes"] == 4096
    default = load_config(None)["documents"]["max_bytes"]
    assert 100 * 10**6 <= default <= 10**9  # big enough for real documents, safe in memory
    for bad in ("lots", "0", "-5 MB", "true"):
        with pytest.raises(ConfigError, match="documents.max_bytes must be"):
            load_config(None, [f"documents.max_bytes={bad}"])
    with pytest.raises(ConfigError, match="documents.follow_links must be true or false"):
        load_config(None, ["documents.follow_links=maybe"])


def test_stage01_summary_counts_links_and_skips_by_reason(tmp_path):
    outside, docs = outside_and_docs(tmp_path)
    write(docs / ".env", "SECRET=1")
    write(docs / "image.xyz", "?")
    write(docs / "huge.md", "# Big\n\n" + "word " * 1000)
    write(docs / ".drafts" / "plan.md", "# Plan\n")
    os.symlink(".drafts/plan.md", docs / "plan.md")
    os.symlink("guide.md", docs / "again.md")
    cfg = write_config(tmp_path, documents={"input": str(docs), "max_bytes": 1000})
    out = run_script("01_documents.py", "--config", str(cfg)).stdout
    assert "2 ok, 7 skipped" in out
    assert "1 read through a symlink (the file itself or a folder above it)" in out
    assert ("skipped: 2 outside documents.input (symlink not followed), 1 larger than documents.max_bytes, "
            "2 hidden, 1 of an unknown format, 1 a second name for a file already read (symlink)") in out


def test_html_counts_eight_times_against_max_bytes_because_converting_it_takes_that_much_more(tmp_path):
    docs = tmp_path / "docs"
    write(docs / "page.html", "<p>" + "word " * 40 + "</p>")   # 207 bytes
    write(docs / "notes.md", "word " * 41)                      # 205 bytes
    rows = rows_of(docs, max_bytes=1000)
    assert rows["notes.md"]["status"] == "ok"
    assert rows["page.html"]["status"] == "skipped"
    assert "documents.max_bytes / 8" in rows["page.html"]["error"] and "raise documents.max_bytes" in rows["page.html"]["error"]
    assert rows_of(docs, max_bytes=8 * 207)["page.html"]["status"] == "ok"
