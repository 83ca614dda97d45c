"""pipekit/read/plain_json.py: a block of lines in json.dumps' plain layout, cut at its quotes,
gives the values json.loads gives, and any other block is left to the JSON reader.  Drawn by
hypothesis: values with quotes, backslashes, control characters, non-ASCII (escaped and not),
empty ones, lines ending in CRLF, blank lines, keys in another order or another spacing."""
from __future__ import annotations

import json
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from pipekit.read import fastpath
from pipekit.read.beir import iter_beir
from pipekit.read.plain_json import plain_fields
from pipekit.run.stages import load_stage

S1 = load_stage(1)
WORDS = st.lists(st.sampled_from(["alpha", "7", " ", "x" * 13, "é", "日本", "\"", "\\", "\t", "\x01", "\x7f", "/", "}",
                                  '", "', ": ", "{"]), max_size=8).map("".join) | st.text(max_size=20)
RECORD = st.fixed_dictionaries({"_id": WORDS, "title": WORDS, "text": WORDS})


def _block(lines: list[bytes], crlf: bool, blank: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A block's bytes and its record lines' starts and ends (without the line end)."""
    body, starts, ends = b"", [], []
    for line in lines:
        if blank:
            body += b"  \n"
        starts.append(len(body))
        ends.append(len(body) + len(line))
        body += line + (b"\r\n" if crlf else b"\n")
    return np.frombuffer(body, dtype=np.uint8).copy(), np.array(starts, np.int64), np.array(ends, np.int64)


@settings(max_examples=300, deadline=None)
@given(records=st.lists(RECORD, min_size=1, max_size=8), ascii_only=st.booleans(), crlf=st.booleans(),
       blank=st.booleans(), layout=st.sampled_from(["dumps", "compact", "reordered"]))
def test_values_are_json_loads_or_left_to_the_reader(records, ascii_only, crlf, blank, layout):
    def dump(r):
        if layout != "reordered":
            r = {"_id": r["_id"], "title": r["title"], "text": r["text"]}  # BEIR's order
        if layout == "compact":
            return json.dumps(r, ensure_ascii=ascii_only, separators=(",", ":"))
        if layout == "reordered":
            return json.dumps({"title": r["title"], "_id": r["_id"], "text": r["text"]}, ensure_ascii=ascii_only)
        return json.dumps(r, ensure_ascii=ascii_only)

    lines = [dump(r).encode("utf-8") for r in records]
    buf, starts, ends = _block(lines, crlf, blank)
    got = plain_fields(buf, starts, ends)
    plain = layout == "dumps" and all(r["_id"] for r in records) and b"\\" not in b"".join(lines) \
        and not any(c < 32 for line in lines for c in line)
    assert (got is not None) == plain, lines  # taken exactly when every line is the plain template
    if got is not None:
        assert [a.to_pylist() for a in got] == [[json.loads(x)[k] for x in lines] for k in ("_id", "title", "text")]
        assert all(a.type == pa.string() for a in got)


@pytest.mark.parametrize("line", [b'{"_id": "a", "title": "b", "text": "c"} ', b' {"_id": "a", "title": "b", "text": "c"}',
                                  b'{"_id": "a", "title": "b", "text": "c", "x": "d"}', b'{"_id": "", "title": "b", "text": "c"}',
                                  b'{"_id": "a", "title": "b", "text": "c"}{"_id": "a", "title": "b", "text": "c"}',
                                  b'{"_id": "a", "title": "b", "text": "c\x00"}', b'{"_id": "a", "title": "b\\"", "text": "c"}',
                                  b'{"_id": "a",  "title": "b", "text": "c"}', b'{"_id": "a", "title": "b", "text": "c"'])
def test_other_lines_are_left_to_the_reader(line):
    good = b'{"_id": "z", "title": "", "text": "plain words"}'
    buf, starts, ends = _block([good, line], False, False)
    assert plain_fields(buf, starts, ends) is None
    buf, starts, ends = _block([good], False, False)
    assert plain_fields(buf, starts, ends) is not None


@settings(max_examples=60, deadline=None)
@given(records=st.lists(st.fixed_dictionaries({"_id": st.text("abc123", min_size=1, max_size=5),
                                               "title": st.text("ab é", max_size=6),
                                               "text": st.text("xyz é\u3000", max_size=40)}), min_size=1, max_size=40),
       max_bytes=st.sampled_from([None, 60]), block=st.sampled_from([64, 300, fastpath.BLOCK_BYTES]))
def test_stage_rows_from_the_template_are_iter_beirs(tmp_path_factory, records, max_bytes, block):
    """Plain records never reach Arrow's JSON reader, and give iter_beir's rows (or its error:
    an `_id` given twice)."""
    path = tmp_path_factory.mktemp("plain") / "corpus.jsonl"
    path.write_text("".join(json.dumps({k: r[k] for k in ("_id", "title", "text")}, ensure_ascii=False) + "\n"
                            for r in records), encoding="utf-8")
    try:
        slow, slow_err = pa.Table.from_pylist(list(iter_beir(path, max_bytes)), schema=S1.SCHEMA), None
    except Exception as exc:  # noqa: BLE001 -- compared below
        slow, slow_err = None, str(exc)
    with mock.patch("pipekit.read.beir.read_records", side_effect=AssertionError("parsed by Arrow")), \
            mock.patch.object(fastpath, "BLOCK_BYTES", block):
        try:
            fast, fast_err = pa.concat_tables(fastpath.beir_tables(path, max_bytes, 0, None, S1.SCHEMA, 16, 10_000, 2)), None
        except Exception as exc:  # noqa: BLE001
            fast, fast_err = None, str(exc)
    assert fast_err == slow_err
    if slow is not None:
        assert fast.equals(slow)
