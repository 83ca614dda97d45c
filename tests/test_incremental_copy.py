"""A rerun copies the unchanged rows' row groups as bytes (pipekit/run/parquet_copy.py).

The output must read exactly as if every row had been encoded again — same rows, order,
values, this run's provenance — and the copied groups must really be the previous
file's bytes (else nothing was saved).  Groups are made small here (io.GROUP_BYTES) so a
few hundred rows make many of them, as 18 MB of text do in a real folder.
"""
from __future__ import annotations

import os
import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipekit.run import io, parquet_copy
from pipekit.run.incremental import PreviousRows


def rows(start: int, stop: int, tag: str = "v1") -> pa.Table:
    """Documents with a long text, a nested list and a repetitive column (dictionary pages)."""
    ids = [f"doc{i:04d}" for i in range(start, stop)]
    return pa.table({
        "doc_id": ids,
        "text": [f"{tag} text of {d} " * 40 for d in ids],
        "path": [["Guide", f"Part {i % 3}"] for i in range(start, stop)],
        "format": ["markdown"] * (stop - start),
        "n": pa.array(range(start, stop), pa.int64()),
    })


def write(path, tables, run: str) -> int:
    """Write an output as a stage does; returns how many of its rows were encoded (not copied)."""
    sink = io.ParquetSink(path, tables[0].schema.remove_metadata(), {"run": run})
    for t in tables:
        sink.write(t)
    sink.commit()
    return sum(piece[1] for piece in sink._pieces if piece[0] == "encoded")


def spans(path) -> list[bytes]:
    """The bytes of each row group of a file."""
    data = path.read_bytes()
    return [data[a:b] for a, b in map(parquet_copy.span, parquet_copy.row_groups(parquet_copy.read_footer(path)))]


@pytest.fixture
def small_groups(monkeypatch):
    monkeypatch.setattr(io, "GROUP_BYTES", 16 << 10)


def test_the_footer_codec_writes_back_what_pyarrow_wrote(tmp_path, small_groups):
    write(tmp_path / "a.parquet", [rows(0, 300)], "first")
    data = (tmp_path / "a.parquet").read_bytes()
    n = struct.unpack("<I", data[-8:-4])[0]
    again = bytearray()
    parquet_copy._write(again, parquet_copy.STRUCT, parquet_copy.read_footer(tmp_path / "a.parquet"))
    assert bytes(again) == data[-8 - n:-8]


@pytest.mark.parametrize("delta", [0, 3, 200, 1 << 20, 1 << 40])
def test_a_moved_group_differs_only_in_its_offsets_and_ordinal(tmp_path, small_groups, delta):
    # A copied group keeps its bytes; only the numbers that say where its pages are move
    # (written in their places, longer or shorter as varints), and its ordinal is its new one.
    write(tmp_path / "a.parquet", [rows(0, 300)], "first")
    groups = parquet_copy.row_groups(parquet_copy.read_footer(tmp_path / "a.parquet"))
    # What moves, at each level: the group's, each column chunk's, each column's metadata's.
    group_moves, chunk_moves = {parquet_copy.RG_FILE_OFFSET}, {parquet_copy.CC_FILE_OFFSET}
    meta_moves = {parquet_copy.CM_DATA_PAGE, parquet_copy.CM_INDEX_PAGE, parquet_copy.CM_DICT_PAGE}

    def numbers(fields, moving, data: bytes, shifted: bool) -> list:
        """Each field's id and value (a number, shifted back where it moved; else its bytes)."""
        out = []
        for fid, (_, a, b, value) in sorted(fields.items()):
            if isinstance(value, list):
                out.append((fid, [numbers(c, chunk_moves, data, shifted) for c in value]))
            elif isinstance(value, dict):
                out.append((fid, numbers(value, meta_moves, data, shifted)))
            elif value is None:
                out.append((fid, bytes(data[a:b])))
            else:
                out.append((fid, value - delta if shifted and fid in moving and value > delta else value))
        return out

    for k, group in enumerate(groups):
        again = parquet_copy.Group(parquet_copy.moved(group, delta, k + 5))
        fields = dict(again.fields())
        if parquet_copy.RG_ORDINAL in group.fields():  # (a field pyarrow may leave out: then left out)
            assert fields[parquet_copy.RG_ORDINAL][3] == k + 5
            fields[parquet_copy.RG_ORDINAL] = group.fields()[parquet_copy.RG_ORDINAL]
        assert parquet_copy.span(again) == tuple(x + delta for x in parquet_copy.span(group))
        assert numbers(fields, group_moves, again, True) == numbers(group.fields(), group_moves, group, False)
        assert len(again) - len(group) <= 6 * (1 + 4 * len(group.fields()[parquet_copy.RG_COLUMNS][3]))


def test_an_added_document_leaves_the_other_groups_copied_as_bytes(tmp_path, small_groups):
    before = tmp_path / "before.parquet"
    write(before, [rows(0, 300)], "first")
    assert pq.ParquetFile(before).metadata.num_row_groups >= 6
    previous = PreviousRows(str(before))
    after = tmp_path / "after.parquet"
    # The rerun's order: documents 0-149 copied, one new, 150-299 copied.
    encoded = write(after, [*previous.take(0, 150), rows(1000, 1001, "new"), *previous.take(150, 300)], "second")
    assert encoded <= 1 + 2 * 300 / pq.ParquetFile(before).metadata.num_row_groups  # the new row, a group or two
    expected = pa.concat_tables([rows(0, 150), rows(1000, 1001, "new"), rows(150, 300)])
    got = pq.ParquetFile(after).read()
    assert got.equals(expected.cast(got.schema))
    assert io.read_meta(after) == {"run": "second"}  # this run's provenance, not the copied file's
    old, new = spans(before), spans(after)
    copied = [g for g in new if g in old]
    assert len(copied) >= len(old) - 2  # all but the group the new document fell in
    assert len(new) <= len(old) + 1  # a change does not split the output into ever more groups


def test_a_removed_and_an_edited_document_read_as_if_written_anew(tmp_path, small_groups):
    before = tmp_path / "before.parquet"
    write(before, [rows(0, 300)], "first")
    previous = PreviousRows(str(before))
    after = tmp_path / "after.parquet"
    # 40 removed, 200 edited in place.
    encoded = write(after, [*previous.take(0, 40), *previous.take(41, 200), rows(200, 201, "edited"),
                            *previous.take(201, 300)], "second")
    assert encoded <= 4 * 300 / pq.ParquetFile(before).metadata.num_row_groups  # the two groups changed, a neighbour each
    expected = pa.concat_tables([rows(0, 40), rows(41, 200), rows(200, 201, "edited"), rows(201, 300)])
    got = pq.ParquetFile(after).read()
    assert got.equals(expected.cast(got.schema))
    assert sum(g in spans(before) for g in spans(after)) >= len(spans(before)) - 3


def test_copied_rows_reach_the_stage_without_their_texts(tmp_path, small_groups):
    before = tmp_path / "before.parquet"
    write(before, [rows(0, 300)], "first")
    taken = pa.concat_tables(PreviousRows(str(before)).take(10, 250))
    # What the stages count of copied rows is there; the texts stay in the file (the sink reads them).
    assert taken.column("doc_id").to_pylist() == rows(10, 250).column("doc_id").to_pylist()
    assert taken.column_names == rows(0, 1).column_names
    assert taken.column("text").null_count == 240
    assert pa.concat_tables(PreviousRows(str(before), texts=True).take(10, 250)).column("text").null_count == 0


def test_copied_rows_read_for_a_summary_hold_its_columns_and_write_the_same_output(tmp_path, small_groups):
    # A stage names the columns its summary reads (03: doc_id, end_char); the copied rows'
    # others stay in the file, and the output, groups encoded again included, is unchanged.
    before = tmp_path / "before.parquet"
    write(before, [rows(0, 300)], "first")
    taken = pa.concat_tables(PreviousRows(str(before), columns=("doc_id", "n")).take(10, 250))
    assert taken.column_names == rows(0, 1).column_names
    assert taken.select(["doc_id", "n"]).equals(rows(10, 250).select(["doc_id", "n"]))
    assert all(taken.column(c).null_count == 240 for c in ("text", "path", "format"))
    assert pa.concat_tables(PreviousRows(str(before), columns=()).take(10, 250)).num_rows == 240
    for columns in ((), ("doc_id",), None):
        previous = PreviousRows(str(before), columns=columns)
        after = tmp_path / f"after-{columns}.parquet"
        write(after, [*previous.take(0, 40), *previous.take(41, 200), rows(200, 201, "edited"),
                      *previous.take(201, 300)], "second")
        got = pq.ParquetFile(after).read()
        expected = pa.concat_tables([rows(0, 40), rows(41, 200), rows(200, 201, "edited"), rows(201, 300)])
        assert got.equals(expected.cast(got.schema))


def test_copied_rows_given_in_pieces_are_copied_whole(tmp_path, small_groups):
    # A stage yields copied rows run by run; runs that continue each other fill their
    # groups together, wherever the cuts fall (here inside nearly every group).
    before = tmp_path / "before.parquet"
    write(before, [rows(0, 300)], "first")
    previous = PreviousRows(str(before))
    cuts = [0, 7, 90, 91, 150, 299, 300]
    after = tmp_path / "after.parquet"
    assert write(after, [t for a, b in zip(cuts, cuts[1:]) for t in previous.take(a, b)], "second") == 0
    got = pq.ParquetFile(after).read()
    assert got.equals(rows(0, 300).cast(got.schema))


def test_copies_come_from_a_dataset_folder_too(tmp_path, small_groups):
    folder = tmp_path / "before.parquet"
    folder.mkdir()
    write(folder / io.PART.format(0), [rows(0, 100)], "first")
    write(folder / io.PART.format(1), [rows(100, 200)], "first")
    previous = PreviousRows(str(folder))
    after = tmp_path / "after.parquet"
    assert write(after, [*previous.take(0, 200)], "second") == 0
    got = pq.ParquetFile(after).read()
    assert got.equals(rows(0, 200).cast(got.schema))
    assert set(spans(after)) == set(spans(folder / io.PART.format(0)) + spans(folder / io.PART.format(1)))


def test_a_mark_that_is_not_the_rows_it_says_is_ignored(tmp_path, small_groups):
    before = tmp_path / "before.parquet"
    write(before, [rows(0, 300)], "first")
    # Rows that claim to be 300 rows of `before` but are 10 others: encoded as given.
    liar = io.copied_rows(rows(500, 510), before, 0)
    liar = liar.replace_schema_metadata({**liar.schema.metadata, io.COPIED: f'["{before}", 0, 300, true]'.encode()})
    after = tmp_path / "after.parquet"
    write(after, [liar], "second")
    got = pq.ParquetFile(after).read()
    assert got.equals(rows(500, 510).cast(got.schema))


def test_rows_of_another_schema_are_encoded_not_copied(tmp_path, small_groups):
    before = tmp_path / "before.parquet"
    write(before, [rows(0, 300).drop_columns(["n"])], "first")
    previous = PreviousRows(str(before), texts=True)
    taken = list(previous.take(0, 300))[0]
    # Today's schema has one more column: the previous bytes cannot be today's rows.
    today = taken.append_column("n", pa.array(range(300), pa.int64()))
    after = tmp_path / "after.parquet"
    assert write(after, [today], "second") == 300
    got = pq.ParquetFile(after).read()
    assert got.equals(rows(0, 300).cast(got.schema))
    assert not set(spans(after)) & set(spans(before))


def test_a_previous_file_whose_parquet_schema_differs_is_encoded_not_copied(tmp_path, small_groups):
    """Another writer named a list's values `path.list.item` (ours: `path.list.element`).
    Arrow calls the two schemas equal; copied under our footer, those groups' values read
    as nulls in fastparquet. So the Parquet schemas are compared, and the rows encoded anew."""
    before = tmp_path / "before.parquet"
    table = rows(0, 300)
    with pq.ParquetWriter(before, table.schema, use_compliant_nested_type=False) as writer:
        writer.write_table(table, row_group_size=40)
    assert pq.read_schema(before).equals(table.schema)  # what Arrow alone would let through
    after = tmp_path / "after.parquet"
    assert write(after, list(PreviousRows(str(before)).take(0, 300)), "second") == 300
    meta = pq.read_metadata(after)
    column = [meta.schema.column(i).path for i in range(meta.num_columns)].index("path.list.element")
    assert {meta.row_group(g).column(column).path_in_schema for g in range(meta.num_row_groups)} == {"path.list.element"}
    assert pq.read_table(after).equals(table)


def test_groups_that_point_outside_themselves_are_not_copied(tmp_path):
    # A page index lives after all the row groups: a group copied without it would point
    # at bytes of another file.  Such groups are refused, and their rows encoded again.
    path = tmp_path / "indexed.parquet"
    pq.write_table(rows(0, 50), path, write_page_index=True)
    with pytest.raises(parquet_copy.Unsupported):
        parquet_copy.span(parquet_copy.row_groups(parquet_copy.read_footer(path))[0])


def test_copied_groups_start_their_writeback_while_later_ones_are_copied(tmp_path, small_groups, monkeypatch):
    # Each copied group's bytes are handed to the disk right after their copy, and the file
    # is still fsync'd after the last of them, before it can be renamed over the output.
    before = tmp_path / "before.parquet"
    write(before, [rows(0, 300)], "first")
    calls = []
    real_start, real_fsync = parquet_copy.start_writeback, os.fsync
    spliced = lambda fd: ".tmp-spliced-" in os.readlink(f"/proc/self/fd/{fd}")  # (not the encoded rows' file)
    monkeypatch.setattr(parquet_copy, "start_writeback",
                        lambda fd, start, n: (spliced(fd) and calls.append(("writeback", start, n)), real_start(fd, start, n)))
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(("fsync",)), real_fsync(fd)))
    after = tmp_path / "after.parquet"
    previous = PreviousRows(str(before))
    write(after, [*previous.take(0, 150), rows(1000, 1001, "new"), *previous.take(150, 300)], "second")
    groups = list(map(parquet_copy.span, parquet_copy.row_groups(parquet_copy.read_footer(after))))
    started = [c[1:] for c in calls if c[0] == "writeback"]
    assert started == [(a, b - a) for a, b in groups]  # every group, where it landed, in order
    spliced_fsync = next(i for i, c in enumerate(calls) if c[0] == "fsync" and i > 0)
    assert all(c[0] == "writeback" for c in calls[1:spliced_fsync])  # the splice's fsync comes last
    assert pq.ParquetFile(after).read().equals(
        pa.concat_tables([rows(0, 150), rows(1000, 1001, "new"), rows(150, 300)]).cast(pq.ParquetFile(after).schema_arrow))


def test_writeback_is_a_no_op_where_the_system_has_none(tmp_path, monkeypatch):
    monkeypatch.setattr(parquet_copy, "_SFR", None)
    with open(tmp_path / "f", "wb") as fh:
        fh.write(b"x" * 100)
        parquet_copy.start_writeback(fh.fileno(), 0, 100)  # nothing to call: no error
    assert (tmp_path / "f").read_bytes() == b"x" * 100


def test_a_written_file_starts_its_writeback_batch_by_batch_and_is_fsynced_last(tmp_path, small_groups, monkeypatch):
    # Each encoded batch's bytes are handed to the disk once written (ParquetSink._write), so the
    # fsync before the rename waits for the last batches only; it still comes after all of them.
    calls = []
    real_start, real_fsync = parquet_copy.start_writeback, os.fsync
    monkeypatch.setattr(parquet_copy, "start_writeback",
                        lambda fd, start, n: (calls.append(("writeback", start, n)), real_start(fd, start, n)))
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(("fsync",)), real_fsync(fd)))
    out = tmp_path / "out.parquet"
    assert write(out, [rows(i, i + 50) for i in range(0, 300, 50)], "first") == 300
    started = [c[1:] for c in calls if c[0] == "writeback"]
    assert len(started) >= 2 and started[0][0] == 0
    assert all(a + n == b for (a, n), (b, _) in zip(started, started[1:]))  # contiguous, in order
    assert sum(n for _, n in started) <= out.stat().st_size  # (the footer is written at close)
    assert calls.index(("fsync",)) > max(i for i, c in enumerate(calls) if c[0] == "writeback")
    assert pq.read_table(out).equals(pa.concat_tables([rows(i, i + 50) for i in range(0, 300, 50)]))
