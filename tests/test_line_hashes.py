"""pipekit/read/line_hashes.py: a BEIR record's `content_hash` made in one compiled call a block
(pipekit/read/hash_loops.py), in a hashing process, or in bulk in the stage's thread is
`content_hash` of its line; stage 01's tables are the same with the compiled call, with the
process, without either, and when the process fails; and the block reader's offsets and ids
check (pipekit/read/fastpath.py) that the process and the one-pass id check stand on."""
from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from pipekit.read import fastpath, line_hashes
from pipekit.read.beir import iter_beir
from pipekit.run.errors import PipelineError
from pipekit.run.hashing import content_hash, file_line_digests, line_digests
from pipekit.run.stages import load_stage

S1 = load_stage(1)


@pytest.mark.parametrize("compiled", [False, None])
@settings(max_examples=60, deadline=None)
@given(lines=st.lists(st.binary(max_size=40) | st.binary(min_size=2040, max_size=2100), max_size=12),
       keep=st.data())
def test_digests_in_bulk_are_content_hash(lines, keep, compiled):
    """Short lines, empty ones, and lines on both sides of hashlib's 2,048-byte GIL threshold;
    hashlib's way and the compiled call's, where it is built."""
    line_hashes._loops = compiled
    try:
        _digests_are_content_hash(lines, keep)
    finally:
        line_hashes._loops = None


def _digests_are_content_hash(lines, keep):
    data = b"".join(lines)
    ends = np.cumsum([len(x) for x in lines], dtype=np.int64)
    starts = ends - np.array([len(x) for x in lines], dtype=np.int64)
    joined = line_hashes.digests(data, starts, ends)
    assert line_hashes.hex_column(joined).to_pylist() == [content_hash(x) for x in lines]
    rows = np.array(keep.draw(st.lists(st.integers(0, max(len(lines) - 1, 0)), max_size=len(lines)) if lines else st.just([])),
                    dtype=np.int64)
    assert line_hashes.hex_column(joined, rows).to_pylist() == [content_hash(lines[i]) for i in rows.tolist()]
    assert line_hashes.hex_column(joined).type == pa.string()


# Lines of every length around BLAKE2b's 128-byte block (and 0, 1, several blocks), anywhere in
# a buffer (a block's lines start at any offset), bytes of every value.
LINE = st.binary(max_size=300) | st.integers(0, 1100).map(lambda n: bytes(range(256)) * (n // 256) + bytes(n % 256))


@pytest.fixture(scope="module")
def compiled_hashes():
    module = line_hashes.compiled_lines().load(wait=True)  # (built on first use: ~15 s once a machine)
    if module is None:
        pytest.skip("the compiled loops cannot be built here (numba or a C compiler missing): "
                    "stage 01 hashes its lines with hashlib, tested above")
    return module


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(LINE, max_size=10), lead=st.binary(max_size=9))
def test_compiled_digests_are_hashlibs(compiled_hashes, lines, lead):
    """The compiled BLAKE2b gives `content_hash`'s 8 bytes for every line: what a rerun compares."""
    data = lead + b"".join(lines)
    ends = len(lead) + np.cumsum([len(x) for x in lines], dtype=np.int64)
    starts = ends - np.array([len(x) for x in lines], dtype=np.int64)
    buf = np.frombuffer(data, dtype=np.uint8)
    out = np.zeros(8 * len(lines), dtype=np.uint8)
    compiled_hashes.line_digests(buf, starts, ends, out)
    assert out.tobytes() == line_digests(data, starts.tolist(), ends.tolist())
    assert line_hashes.hex_column(line_hashes.digests(buf, starts, ends)).to_pylist() == [content_hash(x) for x in lines]


def test_beir_tables_with_the_compiled_hashes_are_hashlibs(compiled_hashes, tmp_path, monkeypatch):
    """With the compiled call built no hashing process starts, and the tables are those made
    with hashlib in the thread, and `iter_beir`'s."""
    path = tmp_path / "corpus.jsonl"
    _corpus(path)
    monkeypatch.setattr(fastpath, "BLOCK_BYTES", 700)
    monkeypatch.setattr(line_hashes, "PROCESS_BYTES", 0)
    with mock.patch.object(line_hashes.LineHasher, "__init__", side_effect=AssertionError("a process started")):
        compiled = pa.concat_tables(fastpath.beir_tables(path, 200, 0, None, S1.SCHEMA, 64, 10_000, threads=2))
    monkeypatch.setattr(line_hashes, "_loops", False)
    plain = pa.concat_tables(fastpath.beir_tables(path, 200, 0, None, S1.SCHEMA, 64, 10_000, threads=1))
    assert compiled.equals(plain)
    assert plain.equals(pa.Table.from_pylist(list(iter_beir(path, 200)), schema=S1.SCHEMA))


def test_file_line_digests_read_the_bytes_they_hash(tmp_path):
    path = tmp_path / "c.jsonl"
    body = b"".join(json.dumps({"_id": f"d{i}", "text": "w " * i}).encode() + b"\n" for i in range(50))
    path.write_bytes(body)
    offset, length = 37, len(body) - 100
    data = body[offset:offset + length]
    starts, ends = [0, 5, 5, 300], [5, 5, 300, length]
    bounds = np.array(starts + ends, dtype=np.int64).tobytes()
    assert file_line_digests(str(path), offset, length, bounds) == line_digests(data, starts, ends)
    with pytest.raises(OSError, match="bytes asked"):  # the file shorter than the block the stage read
        file_line_digests(str(path), len(body) - 10, 20, np.array([0, 20], dtype=np.int64).tobytes())


def _corpus(path: Path, n: int = 600) -> None:
    # Blank lines and an integer `_id` (a block that goes line by line) among the usual records.
    lines = [json.dumps({"_id": i if i % 97 == 5 else f"d{i}", "title": f"T{i}" if i % 3 else "",
                         "text": "wörd " * (i % 13)}, ensure_ascii=bool(i % 2)) for i in range(n)]
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(x if i % 50 else x + "\n   " for i, x in enumerate(lines)).encode() + b"\n")


def test_beir_tables_with_the_hashing_process_are_one_threads(tmp_path, monkeypatch):
    monkeypatch.setattr(line_hashes, "_loops", False)  # (the process is the way until they are built)
    path = tmp_path / "corpus.jsonl"
    _corpus(path)
    with mock.patch.object(fastpath, "BLOCK_BYTES", 700):
        one = pa.concat_tables(fastpath.beir_tables(path, 200, 0, None, S1.SCHEMA, 64, 10_000, threads=1))
        started = []
        real_start = line_hashes.LineHasher.start

        def start(*args):
            hasher = real_start(*args)
            started.append(hasher)
            return hasher

        with mock.patch.object(line_hashes, "PROCESS_BYTES", 0), \
                mock.patch.object(line_hashes.LineHasher, "start", side_effect=start):
            two = pa.concat_tables(fastpath.beir_tables(path, 200, 0, None, S1.SCHEMA, 64, 10_000, threads=2))
    assert len(started) == 1 and started[0] is not None  # the process was used
    assert two.equals(one)
    assert one.equals(pa.Table.from_pylist(list(iter_beir(path, 200)), schema=S1.SCHEMA))


def test_a_failed_or_late_hashing_process_leaves_the_hashes_to_the_thread(tmp_path, monkeypatch):
    """A process that died (its futures raise), one that has not begun a block (the future is
    cancelled and the block hashed where it is asked for), and the file changed under it."""
    monkeypatch.setattr(line_hashes, "_loops", False)
    path = tmp_path / "corpus.jsonl"
    _corpus(path, 300)
    with mock.patch.object(fastpath, "BLOCK_BYTES", 900):
        want = pa.concat_tables(fastpath.beir_tables(path, None, 0, None, S1.SCHEMA, 64, 10_000, threads=1))

        class Broken:
            def submit(self, *args):
                from concurrent.futures import Future

                f = Future()
                f.set_running_or_notify_cancel()
                f.set_exception(OSError("the hashing process died"))
                return f

            def shutdown(self, **kw):
                pass

        class Idle(Broken):
            def submit(self, *args):
                from concurrent.futures import Future

                return Future()  # never begun: cancelled by the thread that needs it

        for pool in (Broken(), Idle()):
            with mock.patch.object(line_hashes, "PROCESS_BYTES", 0), \
                    mock.patch.object(line_hashes.LineHasher, "__init__",
                                      lambda self, p, pool=pool: setattr(self, "pool", pool) or setattr(self, "path", str(p))):
                got = pa.concat_tables(fastpath.beir_tables(path, None, 0, None, S1.SCHEMA, 64, 10_000, threads=2))
            assert got.equals(want)


@pytest.mark.parametrize("block", [7, 64, 1 << 20])
def test_line_blocks_say_where_their_bytes_are(tmp_path, block):
    """Each block's offset is where its bytes lie in the file (what the hashing process reads),
    lines longer than several blocks included, from the start and from inside the file."""
    path = tmp_path / "corpus.jsonl"
    body = b"\xef\xbb\xbf" + b"".join((b"x" * (i * 37 % 300)) + b"\n" for i in range(80)) + b"last"
    path.write_bytes(body)
    middle = body.index(b"\n", 500) + 1
    with mock.patch.object(fastpath, "BLOCK_BYTES", block):
        for start, end in ((0, None), (middle, None), (0, middle)):
            seen = []
            for line_no, at, data, starts, ends in fastpath._line_blocks(path, start, end):
                assert bytes(data) == body[at:at + len(data)]
                seen += [body[at + a:at + b] for a, b in zip(starts.tolist(), ends.tolist())]
            want = body[start:end].split(b"\n")
            want = [x + b"\n" for x in want[:-1]] + ([want[-1]] if want[-1] else [])
            if start == 0:
                want[0] = want[0][3:]  # the BOM is not the first line's
            assert seen == want


def test_ids_checked_in_two_passes_stop_at_the_first_repeat():
    seen = set()
    fastpath._check_seen(Path("c"), seen, ["a", "b"], np.array([0, 1]), 1)
    assert seen == {"a", "b"}
    with pytest.raises(PipelineError, match=r"c, line 12: _id 'x' appears twice"):  # within the block
        fastpath._check_seen(Path("c"), seen, ["w", "x", "y", "x"], np.array([0, 1, 2, 3]), 9)
    seen = {"a", "b"}
    with pytest.raises(PipelineError, match=r"c, line 11: _id 'b' appears twice"):  # with an earlier block
        fastpath._check_seen(Path("c"), seen, ["w", "b", "w"], np.array([0, 2, 3]), 9)
