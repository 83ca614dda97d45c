"""A binary file is called binary, and UTF-16 text without a byte-order mark is still
recognised as text that lost its mark (pipekit/read/, `_not_text`)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipekit.read.documents import read_document

from pipekit.read.walk import list_inputs
TEXT = "Grüße aus Köln: the quick brown fox jumps over the lazy dog.\nSecond line, 42.\n" * 20


def read_one(path: Path) -> dict:
    [entry] = list_inputs(path)
    return read_document(entry)


def test_an_executable_renamed_txt_is_called_binary_not_utf16(tmp_path):
    # The case that was reported: /bin/ls copied to x.txt was "UTF-16 without a BOM",
    # because an executable's zero runs fill both byte parities with NULs.
    ls = shutil.which("ls")
    if ls is None:
        pytest.skip("no ls executable on this machine")
    shutil.copyfile(ls, tmp_path / "x.txt")
    row = read_one(tmp_path / "x.txt")
    assert (row["status"], row["text"]) == ("error", None)
    assert row["error"].startswith("binary file (") and row["error"].endswith("not text")
    assert "UTF-16" not in row["error"]


def test_a_made_elf_header_names_the_kind_of_file(tmp_path):
    data = b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + bytes(range(256)) * 8 + b"\x00" * 2000
    (tmp_path / "a.txt").write_bytes(data)
    row = read_one(tmp_path / "a.txt")
    assert row["error"] == "binary file (an ELF executable or library: NUL bytes), not text"


def test_zero_runs_in_both_parities_are_binary(tmp_path):
    # Half NUL in each parity: what fooled the old parity test.
    data = (b"\x00\x00\x00\x00\x12\x34\x56\x78" * 600)
    (tmp_path / "b.md").write_bytes(data)
    row = read_one(tmp_path / "b.md")
    assert row["status"] == "error" and row["error"] == "binary file (NUL bytes), not text"


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
def test_utf16_text_without_bom_is_still_recognised_as_text(tmp_path, codec):
    (tmp_path / "u.txt").write_bytes(TEXT.encode(codec))
    row = read_one(tmp_path / "u.txt")
    assert row["status"] == "error"
    assert "UTF-16 without a byte-order mark" in row["error"] and "binary" not in row["error"]


def test_utf16_with_a_bom_is_read(tmp_path):
    (tmp_path / "u.txt").write_bytes(TEXT.encode("utf-16"))
    row = read_one(tmp_path / "u.txt")
    assert row["status"] == "ok" and row["text"] == TEXT
