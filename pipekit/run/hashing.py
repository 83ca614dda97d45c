"""Hashes the run keeps: of content (a file, a row), of a stage's code, of a record.

Reuse and freshness both stand on them: a file whose content hash is unchanged is not read
again (pipekit/run/incremental.py), and a stage whose record digests the same is fresh
(pipekit/run/freshness.py).
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from pipekit.run.stages import REPO_ROOT, Stage


def digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def code_hash(stage: Stage) -> str:
    """The stage's code files by content; a folder (`pipekit/read/`) stands for every module
    in it, so a reader added beside the others is part of stage 01's code without a list."""
    h = hashlib.sha256()
    for rel in stage.code:
        p = REPO_ROOT / rel
        files = sorted(p.rglob("*.py")) if p.is_dir() else [p]
        for f in files:
            h.update(f.relative_to(REPO_ROOT).as_posix().encode())
            h.update(f.read_bytes() if f.exists() else b"")
    return h.hexdigest()[:16]


def content_hash(data: bytes) -> str:
    """A short fingerprint of a file's (or a BEIR record's) bytes: 64 bits of BLAKE2b.

    Stages 02 and 03 carry it on each row, so a rerun can tell, document by document,
    whether the rows it made last time still stand."""
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def line_digests(data, starts, ends) -> bytes:
    """The 8 bytes of `content_hash` of each line data[starts[i]:ends[i]] (lists of ints), joined:
    a BEIR corpus's records, a block at a time (pipekit/read/line_hashes.py turns them to hex)."""
    view, blake2b = memoryview(data), hashlib.blake2b
    return b"".join([blake2b(view[a:b], digest_size=8).digest() for a, b in zip(starts, ends)])


def file_line_digests(path: str, offset: int, length: int, bounds: bytes) -> bytes:
    """`line_digests` of the lines of a file's bytes [offset, offset + length), read here: the
    task of stage 01's hashing process, which imports this module and nothing heavier
    (importing NumPy and Arrow there cost ~0.2 s of CPU, a third of its work at 200k
    passages).  `bounds`: the lines' starts, then their
    ends, as int64 bytes relative to `offset`."""
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.pread(fd, length, offset)
    finally:
        os.close(fd)
    if len(data) != length:  # the file is shorter than when the stage read it
        raise OSError(f"{path}: {length:,} bytes asked at {offset:,}, {len(data):,} read")
    b = memoryview(bounds).cast("q")
    n = len(b) // 2
    return line_digests(data, b[:n], b[n:])


def file_hash(path: Path, block: int = 1 << 20) -> str:
    """`content_hash` of a file's bytes, read a megabyte at a time (a corpus may be GBs)."""
    h = hashlib.blake2b(digest_size=8)
    with open(path, "rb") as fh:
        while chunk := fh.read(block):
            h.update(chunk)
    return h.hexdigest()


# ---- stage 01: the listing of input files ------------------------------------------------
