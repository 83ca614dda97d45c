"""pipekit/read/fastpath.py and pipekit/chunk/fastpath.py give exactly the per-record rows: stage 01's BEIR columns, stage 02's
already-clean texts and stage 03's one-chunk records, each drawn by hypothesis (short
records, ASCII and not, with and without titles, blank lines, control characters, CRs,
trailing spaces, long words, Markdown-looking starts) through both paths and compared.
The sample, Cranfield and the engines are compared end to end by their own tests."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from pipekit.chunk import fastpath as chunk_fastpath
from pipekit.read import fastpath
from pipekit.run import arrays
from pipekit.run.engine import RowRange, iter_rows as S2_iter_rows
from pipekit.run.errors import PipelineError
from pipekit.read.beir import iter_beir
from pipekit.run.stages import load_stage

S1, S2, S3 = load_stage(1), load_stage(2), load_stage(3)


def examples(ci: int) -> int:
    """`ci` examples under the CI profile, scaled by the "search" profile (tests/conftest.py)."""
    return ci * settings.default.max_examples // 100


PIECES = ["alpha", "beta", "Gamma", "7", "1.", "2)", "#", "# ", "##", "-", "- ", "---", "--- page 3 ---", "```",
          ">", "|", "=", "<b>", "[x]:", "    ", " ", "  ", "\t", "\n", "\n\n", "\n\n\n", "\r", "\r\n", "\f",
          "\x00", "\x07", "\x1c", "\x1f", "\x7f", "\x85", "\xa0", "\u3000", "café", "e\u0301", "naïve",
          "abcdefghijklmnopqrstuvwxyz", "x" * 10, "y" * 11, "z" * 31, "é" * 12, "日本語のテキスト"]
TEXTS = st.lists(st.sampled_from(PIECES), max_size=30).map("".join) | st.text(max_size=80)
# Words and spaces only: the records the fast paths are for, so each run exercises them.
PLAIN = st.lists(st.sampled_from(["alpha", "beta", "Gamma", "7", "x" * 10, "y" * 11, "z" * 31, " ", "\n"]),
                 min_size=1, max_size=40).map("".join).map(lambda s: "w " + s)
# One line that opens a Markdown block (a heading, a list, a fence, a quote, a table row ...):
# the lines the stage-03 fast path must leave to the chunker.
MARKDOWN_LINE = st.tuples(st.sampled_from(["# ", "## ", "#", "- ", "* ", "1. ", "2) ", "> ", "```", "~~~", "---", "***",
                                           "    ", "\t", "<b>", "<!-- ", "[x]: ", "| ", "=", "--- page 3 ---", "+++"]),
                          PLAIN, st.sampled_from(["", "\n"])).map("".join)
TITLES = st.none() | st.sampled_from(["", " ", "Title", "Café au lait", "a › b", "\x00x"]) | st.text(max_size=12)


# ---- stage 01 -------------------------------------------------------------------------------

RECORDS = st.lists(st.fixed_dictionaries(
    {"_id": st.one_of(st.text(min_size=1, max_size=6), st.integers(0, 50))},
    optional={"title": st.none() | TITLES, "text": st.none() | TEXTS | PLAIN}), max_size=12)


def _jsonl(records, blank_lines: bool, bom: bool) -> bytes:
    lines = [json.dumps(r, ensure_ascii=bool(i % 2)) for i, r in enumerate(records)]
    if blank_lines:
        lines = [x for line in lines for x in (line, "  ")]
    return (b"\xef\xbb\xbf" if bom else b"") + "\n".join(lines).encode("utf-8") + b"\n"


def _rows(fn):
    try:
        return fn(), None
    except PipelineError as exc:
        return None, str(exc)


@settings(max_examples=examples(150))
@given(records=RECORDS, blank=st.booleans(), bom=st.booleans(), max_bytes=st.sampled_from([None, 60, 10_000]),
       rows=st.sampled_from([1, 3, 4096]), chars=st.sampled_from([5, 32 * 1024 * 1024]),
       block=st.sampled_from([fastpath.BLOCK_BYTES, 7, 64]), cut=st.floats(0, 1), threads=st.sampled_from([1, 2]))
def test_beir_tables_are_iter_beir(records, blank, bom, max_bytes, rows, chars, block, cut, threads):
    """Also read in blocks smaller than a line (a line longer than a block is read on), and
    as two byte ranges split at a line start, as the engines split a corpus among workers;
    one block at a time or two at once."""
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(fastpath, "BLOCK_BYTES", block):
        path = Path(tmp) / "corpus.jsonl"
        body = _jsonl(records, blank, bom)
        path.write_bytes(body)
        line_starts = [0] + [i + 1 for i, byte in enumerate(body[:-1]) if byte == 10]
        middle = line_starts[int(cut * (len(line_starts) - 1))]
        for start, end in ((0, None), (0, middle), (middle, len(body))):
            slow, slow_err = _rows(lambda: [pa.Table.from_pylist(b, schema=S1.SCHEMA)
                                            for b in S1.batches(iter_beir(path, max_bytes, start, end), rows, chars)])
            fast, fast_err = _rows(lambda: list(fastpath.beir_tables(path, max_bytes, start, end, S1.SCHEMA, rows, chars,
                                                                     threads)))
            assert fast_err == slow_err
            if slow is not None:
                assert [t.num_rows for t in fast] == [t.num_rows for t in slow]  # the same row groups
                assert all(f.equals(s) for f, s in zip(fast, slow))


def test_beir_tables_parse_usual_records_in_arrow(tmp_path):
    """Records of the usual shape never reach json.loads: the point of the Arrow path."""
    path = tmp_path / "corpus.jsonl"
    lines = [json.dumps({"_id": f"d{i}", "title": "" if i % 3 else f"T{i}", "text": f"w{i} é\n", "meta": {"k": [i]}},
                        ensure_ascii=bool(i % 2)) for i in range(200)]
    path.write_text("\n".join(lines[:100]) + "\n\n  \r\n" + "\r\n".join(lines[100:]), encoding="utf-8")
    with mock.patch.object(fastpath, "_python_block", side_effect=AssertionError("went line by line")), \
            mock.patch.object(fastpath, "BLOCK_BYTES", 4096):
        fast = pa.concat_tables(fastpath.beir_tables(path, None, 0, None, S1.SCHEMA, 64, 10_000))
    slow = pa.Table.from_pylist(list(iter_beir(path)), schema=S1.SCHEMA)
    assert fast.num_rows == 200 and fast.equals(slow)


ODD_LINES = [b'{"_id": "a", "title": "x", "title": "y"}', b'{"_id": "a", "n": 1e999}', b'{"_id": "a", "n": NaN}',
             b'{"_id": "a", "text": "\\ud800"}', b'{"_id": "a", "text": "\\ud83d\\ude00"}', b'{"\\u005fid": "a"}',
             b'{"_id": "a",}', b"{'_id': 'a'}", b'{"_id": "a"} {"_id": "b"}', b'{"_id": "a",', b'"text": "b"}',
             b'{"_id": "a", "n": 01}', b'{"_id": "a", "text": "x\x01"}', b'\x0c', b' {"_id": "a"} ', b'{"_id": "a"}\x00',
             b'{"_id": "a", "meta": {"_id": 5}}', b'{"_id": null}', b'{"_id": ""}', b'{"_id": "a", "text": null}',
             # JSON that json.loads gives up on (too deep; an integer of over 4,300 digits):
             b'{"_id": "a", "x": ' + b"[" * 1000 + b"]" * 1000 + b'}', b'{"_id": "a", "x": ' + b"9" * 5000 + b'}',
             b'{"_id": 7, "x": ' + b"9" * 5000 + b'}']


@pytest.mark.parametrize("line", ODD_LINES)
def test_beir_tables_read_odd_lines_as_iter_beir_does(tmp_path, line):
    """Lines where Arrow's JSON reader and json.loads might part ways: the rows, or the
    error, are iter_beir's (a line the two disagree on goes line by line)."""
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b'{"_id": "first", "text": "ok"}\n' + line + b"\n")
    slow, slow_err = _rows(lambda: pa.Table.from_pylist(list(iter_beir(path)), schema=S1.SCHEMA))
    fast, fast_err = _rows(lambda: pa.concat_tables(fastpath.beir_tables(path, None, 0, None, S1.SCHEMA, 10, 10_000)))
    assert fast_err == slow_err
    assert (fast is None) == (slow is None) and (fast is None or fast.equals(slow))


@pytest.mark.parametrize("body, end", [(b'{"_id": "a", "x": {}\n}\n', 1),
                                       (b'{"_id": "z"}\n{"_id": "a", "text": "t", "x": {}\n}\n', 14)])
def test_a_line_past_the_range_never_completes_one_inside_it(tmp_path, body, end):
    """A range's last line is judged alone, as iter_beir reads it: the line after `end`
    (another worker's) must not close the object it leaves open."""
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(body)
    _, slow_err = _rows(lambda: list(S1.batches(iter_beir(path, None, 0, end), 10, 10_000)))
    _, fast_err = _rows(lambda: list(fastpath.beir_tables(path, None, 0, end, S1.SCHEMA, 10, 10_000)))
    assert slow_err is not None and fast_err == slow_err


def test_a_range_that_ends_mid_file_is_still_parsed_by_arrow(tmp_path):
    """The lines after a range's end are not handed to Arrow (so they cannot send the
    range's last block line by line either): each worker's part keeps the fast path."""
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"_id": f"d{i}", "text": f"w{i}"}) + "\n" for i in range(100)))
    middle = len(path.read_bytes()) // 2
    with mock.patch.object(fastpath, "_python_block", side_effect=AssertionError("went line by line")):
        first = pa.concat_tables(fastpath.beir_tables(path, None, 0, middle, S1.SCHEMA, 64, 10_000))
        second = pa.concat_tables(fastpath.beir_tables(path, None, first.column("n_bytes").to_numpy().sum(), None,
                                                       S1.SCHEMA, 64, 10_000))
    assert first.num_rows + second.num_rows == 100 and first.num_rows > 40


def test_beir_tables_reports_a_bad_line_as_iter_beir_does(tmp_path):
    path = tmp_path / "corpus.jsonl"
    for body, message in ((b'{"_id": "a", "text": "x"}\n{"_id": "a"}\n', "line 2: _id 'a' appears twice"),
                          (b'{"_id": "a"}\n\n{"_id": 1.5}\n', 'line 3: "_id" must be a non-empty string or integer'),
                          (b'{"_id": "a", "text": 3}\n', '"text" must be a string, got int'),
                          (b'{"_id": "a"\n', "not valid JSON"), (b'\xff\n', "not UTF-8"),
                          (b'{"_id": "a", "text": "x\\udc00"}\n',
                           r'line 1: "text" holds an unpaired surrogate escape \(\\udc00\)')):
        path.write_bytes(body)
        with pytest.raises(PipelineError, match=message):
            list(fastpath.beir_tables(path, None, 0, None, S1.SCHEMA, 10, 10_000))


class _InFlight:
    """A wrapper counting how many calls of `fn` run at once (each held `hold` seconds)."""

    def __init__(self, fn, hold: float = 0.02):
        import threading

        self.fn, self.hold, self.now, self.most, self.lock = fn, hold, 0, 0, threading.Lock()

    def __call__(self, *args, **kwargs):
        import time

        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            time.sleep(self.hold)
            return self.fn(*args, **kwargs)
        finally:
            with self.lock:
                self.now -= 1


def test_beir_tables_on_two_threads_give_one_threads_rows_and_errors(tmp_path):
    """Blocks made two at once (one parsed while another is hashed): the tables one thread
    makes, in order, with blocks that go line by line (an integer `_id`) between Arrow's; an
    `_id` given twice across blocks stops the run at the same line, with the same message."""
    import pipekit.read.beir as beir

    path = tmp_path / "corpus.jsonl"
    records = [{"_id": i if i % 37 == 0 else f"d{i}", "title": f"T{i}" if i % 3 else "", "text": f"w{i} " * (i % 9)}
               for i in range(400)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    counted = _InFlight(beir.read_records)
    with mock.patch.object(fastpath, "BLOCK_BYTES", 512), mock.patch.object(beir, "read_records", counted):
        one = list(fastpath.beir_tables(path, 60, 0, None, S1.SCHEMA, 64, 10_000, threads=1))
        assert counted.most == 1
        two = list(fastpath.beir_tables(path, 60, 0, None, S1.SCHEMA, 64, 10_000, threads=2))
        assert counted.most == 2  # two blocks' parses in flight at once
    assert [t.num_rows for t in two] == [t.num_rows for t in one] and all(a.equals(b) for a, b in zip(one, two))
    assert pa.concat_tables(two).equals(pa.Table.from_pylist(list(iter_beir(path, 60)), schema=S1.SCHEMA))
    path.write_text("".join(json.dumps(r) + "\n" for r in records[:300] + [{"_id": "d5"}] + records[300:]))
    with mock.patch.object(fastpath, "BLOCK_BYTES", 512):
        errors = [_rows(lambda: list(fastpath.beir_tables(path, None, 0, None, S1.SCHEMA, 64, 10_000, threads=t)))[1]
                  for t in (1, 2)]
    assert errors[0] == errors[1] and "line 301: _id 'd5' appears twice" in errors[0]


# ---- stage 02 -------------------------------------------------------------------------------

@settings(max_examples=examples(300))
@given(texts=st.lists(st.none() | TEXTS | PLAIN, max_size=12),
       form=st.sampled_from(["NFC", "NFKC", "none"]), data=st.data())
def test_clean_texts_is_clean_document(texts, form, data):
    notes = data.draw(st.lists(st.none() | st.just("read with a note"), min_size=len(texts), max_size=len(texts)))
    slow = [S2._clean_one(t, n, form) for t, n in zip(texts, notes)]
    got, got_notes, furniture, paged = fastpath.clean_texts(pa.array(texts, pa.string()), pa.array(notes, pa.string()),
                                                            lambda t, n: S2._clean_one(t, n, form))
    assert got.to_pylist() == [s[0] for s in slow]
    assert got_notes.to_pylist() == [s[1] for s in slow]
    assert (furniture, paged) == (sum(s[2] for s in slow), sum(s[2] > 0 for s in slow))


@settings(max_examples=examples(200))
@given(st.lists(st.none() | st.text(st.sampled_from("ab \n"), max_size=6), max_size=8), st.integers(0, 3))
def test_final_newline_is_strip_and_one_newline(texts, skip):
    # With and without a text that ends in a newline (only then are the texts trimmed first),
    # sliced at any offset of the buffer.
    column = pa.array(["x" * skip] + texts, pa.string()).slice(1)
    want = [None if t is None else t.rstrip("\n") + "\n" for t in texts]
    assert fastpath._final_newline(column).to_pylist() == want


def test_plain_records_take_the_column_path_and_others_do_not():
    texts = pa.array(["one short paragraph", "ends with newlines\n\n", "trailing space \nx", "tab\there",
                      "Caf\u00e9", "\nleading", "a\rb", "--- page 2 ---\nx", "   ", None])
    assert fastpath.already_clean(texts).tolist() == [True, True, False, True, False, False, False, False, False, False]


def _needs_no_cleaning_by_re2(texts: pa.Array) -> list:
    """already_clean's rule as RE2 states it (what stage 02 ran before the NumPy scan)."""
    import pyarrow.compute as pc

    ok = pc.and_(pc.string_is_ascii(texts), pc.invert(pc.match_substring_regex(texts, fastpath._NEEDS_CLEANING)))
    return pc.fill_null(pc.and_(ok, pc.match_substring_regex(texts, r"[^ \t\n]")), False).to_pylist()


@settings(max_examples=examples(300))
@given(texts=st.lists(st.none() | TEXTS | PLAIN | st.sampled_from(["--- page ", "x--- page", "a -- page ", " \n", "\t"]),
                      max_size=12), cut=st.tuples(st.integers(0, 12), st.integers(0, 12)), large=st.booleans())
def test_already_clean_is_the_re2_rule(texts, cut, large):
    """The NumPy scan of the column's bytes picks the texts the RE2 pattern picks, on slices
    of a column too (offsets not starting at 0: a rule must not look past a text's ends)."""
    column = pa.array(texts, pa.large_string() if large else pa.string())
    column = column.slice(min(cut), max(cut) - min(cut))
    assert fastpath.already_clean(column).tolist() == _needs_no_cleaning_by_re2(column)


def test_already_clean_refuses_what_it_would_misread():
    with pytest.raises(TypeError, match="string_view"):
        fastpath.already_clean(pa.array(["a"], pa.string_view()))


@settings(max_examples=examples(200))
@given(data=st.binary(max_size=300), byte=st.integers(0, 255))
def test_odd_bytes_and_byte_positions_are_the_plain_scans(data, byte):
    b = np.frombuffer(data, dtype=np.uint8)
    assert arrays.odd_bytes(b).tolist() == np.flatnonzero((b < 0x20) | (b > 0x7e)).tolist()
    assert arrays.byte_positions(b, byte).tolist() == np.flatnonzero(b == byte).tolist()


def test_a_scan_of_a_batch_makes_no_temporary_of_its_size():
    """Stage 02's scan of a batch's bytes allocates no array of the batch's size once its
    thread has scratch arrays (each such temporary was a fresh mapping whose pages faulted
    in: pipekit/run/arrays.py, `scratch`); another thread gets its own, and a scan past
    SCRATCH_BYTES allocates as before.  NumPy reports its arrays to tracemalloc."""
    import threading
    import tracemalloc

    texts = pa.array(["alpha beta gamma " * 30 + "\n"] * 8000)  # 4 MB of text
    fastpath.already_clean(texts)  # this thread's scratch made
    tracemalloc.start()
    try:
        fastpath.already_clean(texts)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # two temporaries of 4 MB each before
    mine = arrays.scratch(10, 1)
    assert np.shares_memory(mine, arrays.scratch(20, 1)) and not np.shares_memory(mine, arrays.scratch(10, 0))
    other = []
    thread = threading.Thread(target=lambda: other.append(arrays.scratch(10, 1)))
    thread.start()
    thread.join()
    assert not np.shares_memory(mine, other[0])
    assert not np.shares_memory(arrays.scratch(arrays.SCRATCH_BYTES + 1, 1), mine)


def test_a_batch_under_large_is_told_apart_without_a_kernel(monkeypatch):
    """Stage 02 asks of every batch, on its own thread, whether it holds a large document:
    a batch whose texts together are under LARGE is answered from its offsets, with no
    compute call (each waited for the GIL behind the cleaning threads: 0.4-0.7 s at 1M
    passages); one over it still finds its large `ok` rows, and only those."""
    small = pa.record_batch({"status": ["ok", "error"], "text": ["a b\n", None]})
    big = "x" * (S2.LARGE + 1)
    large = pa.record_batch({"status": ["ok", "error", "ok", None], "text": ["a", big, big, big]})
    assert S2._ok_and_large(large)[1].tolist() == [False, False, True, False]

    def no_kernel(*args, **kwargs):
        raise AssertionError("a compute kernel was called")
    monkeypatch.setattr(S2.pc, "equal", no_kernel)
    monkeypatch.setattr(S2.pc, "binary_length", no_kernel)
    assert S2._ok_and_large(small)[1].tolist() == [False, False]


def test_ahead_unless_keeps_order_and_cleans_a_large_batch_alone():
    """Ordinary items two at once, in order; an item `alone` picks comes back after every
    item before it is done and before the one after it is taken from the input."""
    import threading

    taken, done, log = [], set(), []
    barrier = threading.Barrier(2, timeout=10)

    def items():
        for i in range(9):
            taken.append(i)
            yield i

    def work(i):
        if i < 2:
            barrier.wait()  # items 0 and 1 must be in flight together, or this times out
        done.add(i)
        return -i

    for item, result in fastpath.ahead_unless(work, items(), 2, alone=lambda i: i in (4, 5)):
        if result is None:
            assert done >= set(range(item)) and taken[-1] == item  # all before it done, nothing after it taken
            done.add(item)  # the caller's own work on it
        log.append((item, result))
    assert log == [(i, None if i in (4, 5) else -i) for i in range(9)]
    assert list(fastpath.ahead_unless(work, iter([2, 4, 3]), 1, alone=lambda i: i == 4)) == [(2, -2), (4, None), (3, -3)]


def test_clean_partition_on_two_threads_gives_one_threads_rows(tmp_path):
    """Stage 02 on batches of clean records, records to clean one by one, skipped rows and
    large documents (cleaned by slices, alone): the rows one thread gives, in order."""
    texts = ["plain words here", "trailing space \nx", None, "Caf\u00e9\r\nline", "big " * 60 + "\fpage two\n",
             "big text " * 40, "\x00ctrl", "ok"] * 7
    rows = [{"doc_id": f"d{i}", "source": "s", "format": "text", "text": t, "status": "ok" if t else "skipped",
             "path": [], "content_hash": f"h{i}"} for i, t in enumerate(texts)]
    path = tmp_path / "01_documents.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=S1.SCHEMA), path, row_group_size=5)
    part = RowRange(str(path), 0, len(rows))
    with mock.patch.object(S2, "LARGE", 200), mock.patch.object(S2, "iter_rows",
                                                                 lambda p, c: S2_iter_rows(p, c, batch_size=5)):
        one = [(t.to_pylist(), r, d) for t, r, d in S2.clean_partition("NFC", 1, part)]
        two = [(t.to_pylist(), r, d) for t, r, d in S2.clean_partition("NFC", 2, part)]
    assert two == one
    assert sum(len(t) for t, _, _ in one) == 49 and sum(1 for t, _, _ in one if t[0]["text"].startswith("--- page 1")) == 7


# ---- stage 03 -------------------------------------------------------------------------------

CHUNKING = st.builds(lambda unit, target, over: {"unit": unit, "target": target, "max": target + over,
                                                 "min": min(3, target)},
                     st.sampled_from(["words", "chars", "tokens"]), st.integers(1, 40), st.integers(0, 30))


def _chunks(section: dict, records, formats, threads: int = 1) -> pa.Table:
    """Stage 03's rows of stage-02 records (doc_id, title, text), through chunk_partition
    (`threads` batches of 5 rows at once)."""
    n = len(records)
    table = pa.table({"doc_id": pa.array([f"d{i}" for i in range(n)], pa.string()), "format": pa.array(formats, pa.string()),
                      "path": pa.array([[] if i % 3 else ["a", "b"] for i in range(n)], pa.list_(pa.string())),
                      "title": pa.array([t for t, _ in records], pa.string()),
                      "text": pa.array([x for _, x in records], pa.string()),
                      "outline": pa.nulls(n, S2.SCHEMA.field("outline").type),
                      "content_hash": [f"h{i}" for i in range(n)],
                      "page_labels": pa.nulls(n, pa.list_(pa.string())), "note": pa.nulls(n, pa.string()),
                      "anchors": pa.nulls(n, S2.SCHEMA.field("anchors").type)})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "02.parquet"
        pq.write_table(table, path, row_group_size=5)
        out = [t for t, _ in S3.chunk_partition({**S3.Settings().__dict__, **section}, threads, RowRange(str(path), 0, n))]
    return pa.concat_tables([pa.Table.from_batches([b]) if isinstance(b, pa.RecordBatch) else b for b in out]
                            ).combine_chunks() if out else None


def _outcome(fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001  (compared, not hidden: see the caller)
        return f"{type(exc).__name__}: {exc}"


@settings(max_examples=examples(200))
@given(raw=st.lists(st.tuples(TITLES, st.none() | TEXTS | PLAIN | MARKDOWN_LINE), max_size=14), section=CHUNKING,
       cleaned=st.booleans(), data=st.data())
def test_single_chunks_are_chunk_document(raw, section, cleaned, data):
    records = [(t, S2.clean_text(x or "") if cleaned else x) for t, x in raw]
    formats = data.draw(st.lists(st.sampled_from(["beir", "beir", "beir", "text", "markdown"]),
                                 min_size=len(records), max_size=len(records)))
    # The fast path on two threads (two batches' columns made at once): the rows, in order, as one by one.
    fast = _outcome(lambda: _chunks(section, records, formats, threads=2))
    original = chunk_fastpath.one_chunk
    chunk_fastpath.one_chunk = lambda batch, settings: (np.zeros(batch.num_rows, dtype=bool), None)  # every record alone
    try:
        slow = _outcome(lambda: _chunks(section, records, formats))
    finally:
        chunk_fastpath.one_chunk = original
    if isinstance(slow, str):  # the chunker's own failure (one the fast path never takes) stays the same
        assert fast == slow
        return
    assert (fast is None) == (slow is None)
    if slow is not None:
        assert fast.schema == slow.schema
        for name in slow.column_names:
            assert fast.column(name).to_pylist() == slow.column(name).to_pylist(), name


def test_chunk_partition_on_two_threads_keeps_rows_and_order():
    """Eight batches of five records, one-line BEIR records (the fast path) between Markdown
    documents of several chunks (the per-record chunker): two batches' column work at once
    gives the rows one thread gives, in the same order, each run of a batch in its place."""
    records = [(f"title {i}", f"word{i} " * (3 + i % 7) if i % 4 else f"# Head {i}\n\n" + "para text. " * 60 + "\n\n## Sub\n\nmore")
               for i in range(40)]
    formats = ["beir" if i % 4 else "markdown" for i in range(40)]
    section = {"unit": "words", "target": 20, "max": 30, "min": 3}
    one, two = _chunks(section, records, formats, threads=1), _chunks(section, records, formats, threads=2)
    assert one.num_rows > 40  # the Markdown documents made several chunks each
    assert two.to_pylist() == one.to_pylist()
    batch = pa.RecordBatch.from_pylist([{"doc_id": "a", "format": "beir", "path": [], "title": "t", "text": "one line",
                                         "content_hash": "h"},
                                        {"doc_id": "b", "format": "markdown", "path": [], "title": "t", "text": "x",
                                         "content_hash": "h"}])
    settings_ = S3.Settings()
    _, pieces = chunk_fastpath.fast_pieces(settings_, S3._schema(), batch)
    assert [(a, b, t is not None) for a, b, t in pieces] == [(0, 1, True), (1, 2, False)]
    assert pieces[0][2].column("text").to_pylist() == ["one line"]


@settings(max_examples=examples(300))
@given(st.lists(st.lists(st.sampled_from(["a", "bc", "x" * 10, "y" * 11, "z" * 25, " ", "  ", "\t", "\n", "\x0b",
                                          "\x1c", "\x1f", "\x7f", "!"]), max_size=12).map("".join), max_size=8),
       st.integers(0, 3))
def test_word_counts_are_split_and_count_words(texts, skip):
    from pipekit.chunk.doctext import count_words

    column = pa.array(["pad"] * skip + texts, pa.string()).slice(skip)  # an offset into the buffers, as a slice has
    n_words, budget = chunk_fastpath._words(column)
    assert n_words.tolist() == [len(t.split()) for t in texts]
    assert budget.tolist() == [count_words(t) for t in texts]
    # The same with the bytes below 0x20 found by the one-line scan, as one_chunk passes them.
    low = chunk_fastpath._one_line_scan(column)[1]
    assert [c.tolist() for c in chunk_fastpath._words(column, low=low)] == [n_words.tolist(), budget.tolist()]


@settings(max_examples=examples(300))
@given(st.lists(st.booleans(), max_size=90), st.lists(st.integers(0, 90), max_size=10))
def test_true_counts_are_each_segments_sum(flags, cuts):
    """arrays.true_counts (eight flags at a time, reduceat over the groups, the bounds' part
    groups masked) gives each segment's plain sum: bounds inside one group, on a group's
    edge, past the last whole group, repeated, and at both ends."""
    from pipekit.run.arrays import true_counts

    bounds = sorted(min(c, len(flags)) for c in cuts)
    flags = np.array(flags, dtype=bool)
    assert true_counts(flags, np.array(bounds, dtype=np.int64)).tolist() == \
        [int(flags[a:b].sum()) for a, b in zip(bounds, bounds[1:])]
    assert true_counts(flags[1:], np.array([0, max(len(flags) - 1, 0)])).tolist() == [int(flags[1:].sum())]


@settings(max_examples=examples(300))
@given(st.lists(st.none() | TEXTS | st.lists(st.sampled_from(["a", "Z", "7", " ", "\t", "\n", "\r", "\x00", "\x0b",
                                                               "\x1f", "\x7f", "\x80", "é", "-", "@", "[", "`", "{"]),
                                             max_size=8).map("".join), max_size=10), st.integers(0, 3))
def test_ascii_one_line_is_the_regex(texts, skip):
    """Stage 03's NumPy scan picks the texts Arrow's ASCII test and `_ONE_LINE` pick, nulls
    and a slice's offset included."""
    import pyarrow.compute as pc

    column = pa.array(["pad"] * skip + texts, pa.string()).slice(skip)
    want = pc.fill_null(pc.and_(pc.string_is_ascii(column), pc.match_substring_regex(column, chunk_fastpath._ONE_LINE)),
                        False).to_pylist()
    assert chunk_fastpath.ascii_one_line(column).tolist() == want
    with pytest.raises(TypeError):
        chunk_fastpath.ascii_one_line(column.cast(pa.string_view()))


def test_one_chunk_picks_short_beir_lines_within_max():
    settings_ = S3.Settings(target=5, max=8, min=1)
    batch = pa.record_batch({
        "text": ["one two three\n", "a b c d e f g h\n", "a b c d e f g h i\n", "# heading\n", "two\nlines\n",
                 "caf\u00e9\n", "one two\n"],
        "format": ["beir"] * 6 + ["markdown"], "path": pa.array([[]] * 7, pa.list_(pa.string()))})
    assert chunk_fastpath.one_chunk(batch, settings_)[0].tolist() == [True, True, False, False, False, False, False]


def test_chunk_rows_hand_out_batches_of_exactly_the_size():
    schema = S3._schema()
    rows = chunk_fastpath.ChunkRows(schema, S3.PER_CHUNK, 3, lambda cols, at, labels: {
        **cols, "page_label_start": [None] * len(at), "page_label_end": [None] * len(at)})
    chunk = {"chunk_id": "d#0", "doc_id": "d", "ordinal": 0, "heading_path": [], "heading": "", "path": [],
             "text": "t", "start_char": 0, "end_char": 1, "page_start": None, "page_end": None, "n_words": 1,
             "n_chars": 1, "format": "beir", "content_hash": "h", "anchor": None}
    rows.add(chunk, None)
    rows.add_table(pa.Table.from_pylist([{**chunk, "chunk_id": f"e{i}#0"} for i in range(4)], schema=schema))
    rows.add(chunk, None)
    sizes = []
    while len(rows) >= 3:
        sizes.append(rows.take().column("chunk_id").to_pylist())
    sizes.append(rows.take(everything=True).column("chunk_id").to_pylist())
    assert sizes == [["d#0", "e0#0", "e1#0"], ["e2#0", "e3#0", "d#0"], []]


@settings(max_examples=examples(300))
@given(st.lists(st.lists(st.sampled_from(["a", "bc", "x" * 9, "y" * 10, "z" * 11, " ", "\t", "\n", "\x1c"]),
                         max_size=6).map("".join), max_size=6), st.integers(1, 12))
def test_a_long_word_is_found_within_its_string_only(texts, run):
    """`_has_long_word`'s shifted ANDs: more than `run` non-space bytes in a row inside one
    string, never a run made of one string's end and the next one's start."""
    import re

    column = pa.array(texts, pa.string())
    data = b"".join(t.encode() for t in texts)
    space = np.isin(np.frombuffer(data, dtype=np.uint8), [32, 9, 10, 11, 12, 13, 28, 29, 30, 31])
    lengths = np.array([len(t.encode()) for t in texts], dtype=np.int64)
    first = (np.cumsum(lengths) - lengths)[lengths > 0]
    want = any(re.search(r"[^ \t\n\x0b\x0c\r\x1c-\x1f]{%d}" % (run + 1), t) for t in texts)
    assert chunk_fastpath._has_long_word(space, first, run) == want, (texts, column)
