"""Copying Parquet row groups byte for byte into a new file: a rerun's unchanged rows are
neither decoded nor compressed again.

A rerun that adds one file to a folder keeps nearly every row of stages 01-03, and
writing those rows again was most of what the rerun cost: their texts decompressed on
reading and compressed again on writing (LZ4 at ~350 MB/s, ~50 ms a stage on 18 MB of
text, with a run of ~0.9 s in all).  A row group is self-contained bytes (its column
chunks' pages) plus a description in the file's footer, so an unchanged group can be
copied as bytes: only the footer's offsets, which say where each column chunk starts,
move with it.

pyarrow reads and writes footers but has no call that writes one listing row groups of
another file, so this module reads and writes the footer itself: Thrift's compact
protocol (the footer's encoding), generically, so every field pyarrow wrote (statistics,
encodings, the Arrow schema, fields this module does not know of) is kept as it was,
and only the offsets of copied groups are shifted.

What it deliberately does not do: copy part of a row group (the group's pages are
compressed as a whole), copy groups that point outside themselves (page indexes,
bloom filters, encryption: `spans` refuses them, and the caller encodes those rows
again), or decide which rows to copy (pipekit/run/io.py's ParquetSink does).
"""
from __future__ import annotations

import gc
import os
import struct
from contextlib import contextmanager
from pathlib import Path

MAGIC = b"PAR1"
STOP, TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT, UUID = range(14)

# Field ids of parquet.thrift (apache/parquet-format): only those this module reads or moves.
FILE_NUM_ROWS, FILE_ROW_GROUPS = 3, 4
RG_COLUMNS, RG_NUM_ROWS, RG_FILE_OFFSET, RG_ORDINAL = 1, 3, 5, 7
CC_FILE_PATH, CC_FILE_OFFSET, CC_META, CC_OFFSET_INDEX, CC_COLUMN_INDEX, CC_CRYPTO, CC_ENCRYPTED = 1, 2, 3, 4, 6, 8, 9
CM_COMPRESSED, CM_DATA_PAGE, CM_INDEX_PAGE, CM_DICT_PAGE, CM_BLOOM = 7, 9, 10, 11, 14


class Unsupported(Exception):
    """A row group this module cannot copy as bytes (its rows are encoded again instead)."""


# ---- Thrift compact protocol, generically --------------------------------------------------
# A struct is a list of [field id, type, value]; a list or set (type, [values]); a map
# (key type, value type, [(key, value)]); a bool field's value is its type (TRUE/FALSE).
# Only the footer's own fields are taken apart (SHAPE); any other struct, list, map or
# string is kept as its bytes (Raw) and written back as they were: taking apart every
# column's statistics made a footer cost ~8 ms to read and write, a rerun's three text
# outputs two each.  Each row group stays its bytes too (a Group), with the places of its
# offsets found in one pass when it is copied (`Group.fields`): built as lists of fields,
# the groups of a rerun's three footers were ~15 ms of reading and writing them.


class Raw(bytes):
    """A value's bytes as the footer holds them (after its field header)."""


GROUPS = object()  # SHAPE's mark of the row groups' list: each group read as a Group
SHAPE = {FILE_ROW_GROUPS: GROUPS}

def _varint(buf: bytes, at: int) -> tuple[int, int]:
    shift = out = 0
    while True:
        b = buf[at]
        at += 1
        out |= (b & 0x7F) << shift
        if b < 0x80:
            return out, at
        shift += 7


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _list_head(buf, at: int) -> tuple[int, int, int]:
    """A list's or set's header: (size, element type, where the elements start); the size
    is in the header's high nibble, or a varint after it when it is 15 or more."""
    head = buf[at]
    n, et = head >> 4, head & 0x0F
    at += 1
    if n == 15:
        n, at = _varint(buf, at)
    return n, et, at


_INTS = (I16, I32, I64)
_FIXED = {TRUE: 1, FALSE: 1, BYTE: 1, DOUBLE: 8, UUID: 16}  # bytes of a value of these types in a list


def _skip(buf: bytes, at: int, t: int) -> int:
    """Where the value of type t starting at `at` ends, nothing built.  The commonest
    cases (a struct's numbers and strings, a list of numbers) are stepped over in line:
    skipping is most of what reading a footer costs, a function call a value doubled it."""
    if t == STRUCT:
        while True:
            head = buf[at]
            at += 1
            ft = head & 0x0F
            if ft == STOP:
                return at
            if head < 0x10:  # the field id follows, as a varint
                while buf[at] & 0x80:
                    at += 1
                at += 1
            if ft == I32 or ft == I64 or ft == I16:
                while buf[at] & 0x80:
                    at += 1
                at += 1
            elif ft == BINARY:
                n, at = _varint(buf, at)
                at += n
            elif ft != TRUE and ft != FALSE:  # a bool field's value is its type
                at = _skip(buf, at, ft)
    if t in _INTS:
        while buf[at] & 0x80:
            at += 1
        return at + 1
    if t == BINARY:
        n, at = _varint(buf, at)
        return at + n
    if t in (LIST, SET):
        n, et, at = _list_head(buf, at)
        if et in _FIXED:
            return at + n * _FIXED[et]
        if et in _INTS:
            for _ in range(n):
                while buf[at] & 0x80:
                    at += 1
                at += 1
            return at
        for _ in range(n):
            at = _skip(buf, at, et)
        return at
    if t in _FIXED:
        return at + _FIXED[t]
    if t == MAP:
        n, at = _varint(buf, at)
        if n == 0:
            return at
        kt, vt = buf[at] >> 4, buf[at] & 0x0F
        at += 1
        for _ in range(n):
            at = _skip(buf, _skip(buf, at, kt), vt)
        return at
    raise Unsupported(f"unknown Thrift type {t} in a Parquet footer")


def _field_head(buf: bytes, at: int, last: int) -> tuple[int, int, int]:
    """A struct field's header at `at`: (field id, type, where its value starts); the type
    is STOP after a struct's last field.  The id is a delta from the last one's, or whole."""
    head = buf[at]
    if head >> 4 or head & 0x0F == STOP:
        return last + (head >> 4), head & 0x0F, at + 1
    n, at = _varint(buf, at + 1)
    return _zigzag(n), head & 0x0F, at


def _read(buf: bytes, at: int, t: int, shape: dict | None = None):
    """The value of type t at `at`, and where it ends.  A struct or list of structs is
    taken apart as `shape` says (field id: the shape of its value); without a shape, a
    composite value or a string stays its bytes (Raw)."""
    if shape is None and t in (BINARY, LIST, SET, MAP, STRUCT):
        end = _skip(buf, at, t)
        return Raw(buf[at:end]), end
    if t in (TRUE, FALSE):  # inside a list: one byte each
        return buf[at] == TRUE, at + 1
    if t == BYTE:
        return struct.unpack_from("b", buf, at)[0], at + 1
    if t in (I16, I32, I64):
        n, at = _varint(buf, at)
        return _zigzag(n), at
    if t == DOUBLE:
        return struct.unpack_from("<d", buf, at)[0], at + 8
    if t == BINARY:
        n, at = _varint(buf, at)
        return bytes(buf[at:at + n]), at + n
    if t == UUID:
        return bytes(buf[at:at + 16]), at + 16
    if t in (LIST, SET):
        n, et, at = _list_head(buf, at)
        items = []
        for _ in range(n):
            if shape is GROUPS:  # found in the same pass that finds where the group ends
                found, end = _fields(buf, at, GROUP_SHAPE, at)
                v, at = Group(buf[at:end]), end
                v._found = found
            else:
                v, at = _read(buf, at, et, shape)
            items.append(v)
        return (et, items), at
    if t == MAP:
        n, at = _varint(buf, at)
        if n == 0:
            return (0, 0, []), at
        kt, vt = buf[at] >> 4, buf[at] & 0x0F
        at += 1
        pairs = []
        for _ in range(n):
            k, at = _read(buf, at, kt)
            v, at = _read(buf, at, vt)
            pairs.append((k, v))
        return (kt, vt, pairs), at
    if t == STRUCT:
        fields, last = [], 0
        while True:
            fid, ft, at = _field_head(buf, at, last)
            if ft == STOP:
                return fields, at
            if ft in (TRUE, FALSE):
                value = ft == TRUE
            else:
                value, at = _read(buf, at, ft, shape.get(fid))
            fields.append([fid, ft, value])
            last = fid
    raise Unsupported(f"unknown Thrift type {t} in a Parquet footer")


def _put_varint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _put_zigzag(out: bytearray, n: int) -> None:
    _put_varint(out, (n << 1) ^ (n >> 63))


def _write(out: bytearray, t: int, v) -> None:
    if isinstance(v, Raw):
        out += v
    elif t in (TRUE, FALSE):  # inside a list
        out.append(TRUE if v else FALSE)
    elif t == BYTE:
        out += struct.pack("b", v)
    elif t in (I16, I32, I64):
        _put_zigzag(out, v)
    elif t == DOUBLE:
        out += struct.pack("<d", v)
    elif t == BINARY:
        _put_varint(out, len(v))
        out += v
    elif t == UUID:
        out += v
    elif t in (LIST, SET):
        et, items = v
        if len(items) < 15:
            out.append(len(items) << 4 | et)
        else:
            out.append(0xF0 | et)
            _put_varint(out, len(items))
        for item in items:
            _write(out, et, item)
    elif t == MAP:
        kt, vt, pairs = v
        _put_varint(out, len(pairs))
        if pairs:
            out.append(kt << 4 | vt)
            for k, x in pairs:
                _write(out, kt, k)
                _write(out, vt, x)
    elif t == STRUCT:
        last = 0
        for fid, ft, value in v:
            wire = (TRUE if value else FALSE) if ft in (TRUE, FALSE) else ft
            if 0 < fid - last <= 15:
                out.append((fid - last) << 4 | wire)
            else:
                out.append(wire)
                _put_zigzag(out, fid)
            if ft not in (TRUE, FALSE):
                _write(out, ft, value)
            last = fid
        out.append(STOP)
    else:
        raise Unsupported(f"unknown Thrift type {t}")


def _field(fields: list, fid: int):
    for f in fields:
        if f[0] == fid:
            return f
    return None


# ---- Footers and row groups ---------------------------------------------------------------

@contextmanager
def no_collection():
    """Python's cycle collector off while footers are taken apart and written: their
    thousands of small lists hold no cycles, yet building them set off a full collection
    of the whole process (17 ms of a 0.8 s rerun, as long as the rest of the footer work)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_footer(path: Path) -> list:
    """A Parquet file's footer (FileMetaData) as a Thrift struct."""
    with open(path, "rb") as fh:
        fh.seek(-8, os.SEEK_END)
        tail = fh.read(8)
        if tail[4:] != MAGIC:
            raise Unsupported(f"{path}: not a plain Parquet file")
        n = struct.unpack("<I", tail[:4])[0]
        fh.seek(-8 - n, os.SEEK_END)
        footer, _ = _read(fh.read(n), 0, STRUCT, SHAPE)
    return footer


def row_groups(footer: list) -> list:
    """The footer's row groups (Thrift structs), in file order."""
    f = _field(footer, FILE_ROW_GROUPS)
    return f[2][1] if f else []


class Group(Raw):
    """A row group's struct (RowGroup) as the footer holds it, its fields found on first use."""

    _found: dict | None = None

    def fields(self) -> dict:
        """{field id: (type, start, end, value)} of the group, the value an int field's
        number, the columns' list a list of their fields (and each column's metadata its
        fields) alike, any other value None; start and end are where its bytes lie."""
        if self._found is None:
            self._found = _fields(self, 0, GROUP_SHAPE, 0)[0]
        return self._found


GROUP_SHAPE = {RG_COLUMNS: {CC_META: {}}}  # the fields taken apart on the way to the offsets


def _fields(buf: bytes, at: int, shape: dict, origin: int) -> tuple[dict, int]:
    """The fields of the struct at `at` (Group.fields; their places counted from `origin`),
    and where it ends; a struct or a list of structs that `shape` names is taken apart."""
    out, last = {}, 0
    while True:
        fid, ft, at = _field_head(buf, at, last)
        if ft == STOP:
            return out, at
        last, value = fid, None
        if ft in _INTS:
            n, end = _varint(buf, at)
            value = _zigzag(n)
        elif ft in (TRUE, FALSE):
            end = at
        elif fid in shape and ft == STRUCT:
            value, end = _fields(buf, at, shape[fid], origin)
        elif fid in shape and ft == LIST:
            n, _, end = _list_head(buf, at)
            value = []
            for _ in range(n):
                item, end = _fields(buf, end, shape[fid], origin)
                value.append(item)
        else:
            end = _skip(buf, at, ft)
        out[fid] = (ft, at - origin, end - origin, value)
        at = end


def span(group: Group) -> tuple[int, int]:
    """The bytes [start, stop) a row group's column chunks occupy, which must be all of
    its data: nothing of it may live elsewhere in the file."""
    start, stop, size = None, 0, 0
    for chunk in group.fields()[RG_COLUMNS][3]:
        if any(f in chunk for f in (CC_OFFSET_INDEX, CC_COLUMN_INDEX, CC_CRYPTO, CC_ENCRYPTED)):
            raise Unsupported("a row group with page indexes or encryption")
        if CC_FILE_PATH in chunk:  # a summary file's column chunks live in other files
            _, a, _, _ = chunk[CC_FILE_PATH]
            n, a = _varint(group, a)
            if bytes(group[a:a + n]) not in (b"", b"\x00"):
                raise Unsupported("a column chunk in another file")
        if CC_META not in chunk or CM_BLOOM in chunk[CC_META][3]:
            raise Unsupported("a row group with a bloom filter or no column metadata")
        meta = chunk[CC_META][3]
        dict_page = meta.get(CM_DICT_PAGE)
        first = dict_page[3] if dict_page and dict_page[3] > 0 else meta[CM_DATA_PAGE][3]
        length = meta[CM_COMPRESSED][3]
        start = first if start is None else min(start, first)
        stop = max(stop, first + length)
        size += length
    if start is None or stop - start != size:  # not one contiguous run of bytes
        raise Unsupported("a row group whose column chunks are not contiguous")
    return start, stop


def moved(group: Group, delta: int, ordinal: int) -> Raw:
    """The row group's bytes with its offsets `delta` bytes further on and its ordinal
    `ordinal`: every other byte as it was, the changed numbers written in their places."""
    fields = group.fields()
    numbers = []  # (start, end, new value) of each number that changes
    for fid in (RG_FILE_OFFSET, RG_ORDINAL):
        if fid in fields:
            _, a, b, value = fields[fid]
            numbers.append((a, b, ordinal if fid == RG_ORDINAL else value + delta if value > 0 else value))
    for chunk in fields[RG_COLUMNS][3]:
        shifts = [chunk[CC_FILE_OFFSET]] if CC_FILE_OFFSET in chunk else []
        if CC_META in chunk:
            meta = chunk[CC_META][3]
            shifts += [meta[f] for f in (CM_DATA_PAGE, CM_INDEX_PAGE, CM_DICT_PAGE) if f in meta]
        numbers += [(a, b, value + delta if value > 0 else value) for _, a, b, value in shifts]
    out, at = bytearray(), 0
    for a, b, value in sorted(numbers):
        out += group[at:a]
        _put_zigzag(out, value)
        at = b
    out += group[at:]
    return Raw(out)


def num_rows(group: Group) -> int:
    return group.fields()[RG_NUM_ROWS][3]


def _copy(src, dst, start: int, n: int) -> None:
    """n bytes of `src` from `start` onto the end of `dst` (open files), in the kernel when it can."""
    src.flush()
    dst.flush()
    while n > 0:
        try:
            done = os.copy_file_range(src.fileno(), dst.fileno(), n, start)
        except (AttributeError, OSError):
            src.seek(start)
            dst.write(src.read(n))
            return
        if done == 0:
            raise OSError("source file ended early")
        start += done
        n -= done


SYNC_FILE_RANGE_WRITE = 2  # from Linux's fcntl.h: start writing the range back, do not wait


def _sync_file_range():
    """Linux's sync_file_range, or None (another system, a C library without it)."""
    global _SFR
    if _SFR is False:
        try:
            import ctypes

            from pipekit.run.malloc import _libc

            _SFR = _libc().sync_file_range
            _SFR.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
        except (OSError, AttributeError, ImportError):
            _SFR = None
    return _SFR


_SFR = False


def start_writeback(fd: int, start: int, n: int) -> None:
    """Have the system start writing bytes [start, start + n) of `fd` to disk now, without
    waiting: the fsync that must follow (the file is renamed over an output only once its
    bytes are on disk) then waits for what is left instead of for all of it.

    A rerun's splices copy ~18 MB of unchanged row groups each (01, 02, 03), and their fsync
    wrote all of it after the last copy: 40-47 ms each here.  Started group by group, the
    disk writes while the next groups are copied: a splice of 01_documents.parquet with its
    fsync 63 -> 54 ms (median of 8 each, bench/README.md "Reruns on a real folder").  It
    changes no byte and no order: durability still comes from the fsync alone."""
    sfr = _sync_file_range()
    if sfr is not None and n > 0:
        sfr(fd, start, n, SYNC_FILE_RANGE_WRITE)  # -1 (a file system without it): the fsync does it all


def splice(target: Path, pieces: list[tuple[Path, list]], footer: list) -> None:
    """Write a Parquet file at `target` whose row groups are `pieces`, in order: (file,
    a row group struct of its footer), each copied as bytes.  `footer` gives
    everything else (schema, key-value metadata, writer) and gets the groups' list."""
    groups, total = [], 0
    files: dict[Path, object] = {}
    try:
        with open(target, "wb") as out:
            out.write(MAGIC)
            for k, (path, group) in enumerate(pieces):
                start, stop = span(group)
                if path not in files:
                    files[path] = open(path, "rb")
                at = out.tell()
                _copy(files[path], out, start, stop - start)
                out.seek(0, os.SEEK_END)
                start_writeback(out.fileno(), at, stop - start)  # beside the next copies
                groups.append(moved(group, at - start, k))
                total += num_rows(group)
            fields = []
            for fid, ft, value in footer:
                if fid == FILE_ROW_GROUPS:
                    value = (STRUCT, groups)
                elif fid == FILE_NUM_ROWS:
                    value = total
                fields.append([fid, ft, value])
            meta = bytearray()
            _write(meta, STRUCT, fields)
            out.write(meta)
            out.write(struct.pack("<I", len(meta)))
            out.write(MAGIC)
            out.flush()
            os.fsync(out.fileno())
    finally:
        for fh in files.values():
            fh.close()
