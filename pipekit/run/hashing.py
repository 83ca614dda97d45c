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


# A BEIR range this large or larger has its lines hashed in one compiled call a block, or, until
# that is built on this machine, in a process of their own where the stage has a second core
# (~27k passages; pipekit/read/line_hashes.py).
HASHING_PROCESS_BYTES = 16 << 20
_COMPILED_LINES = None


def compiled_lines():
    """The compiled line hashes' module as pipekit/run/aot.py builds, keeps and loads it
    (pipekit/read/hash_loops.py): an `Ahead`, made here so that the early start can ask whether
    it is built without importing NumPy (`lines_built`)."""
    global _COMPILED_LINES
    if _COMPILED_LINES is None:
        from pipekit.run.aot import Ahead

        _COMPILED_LINES = Ahead("pipekit.read.hash_loops", "pipekit_lines", "stage 01's compiled line hashes",
                                "each BEIR line is hashed by hashlib")
    return _COMPILED_LINES


def lines_built() -> bool:
    """Whether the compiled line hashes are built on this machine (nothing imported, nothing built)."""
    import sysconfig

    try:
        folder, name = compiled_lines().place()
    except OSError:
        return False
    return (folder / (name + sysconfig.get_config_var("EXT_SUFFIX"))).exists()


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


def file_hash(path: Path, block: int = 8 << 20) -> str:
    """`content_hash` of a file's bytes, read `block` bytes at a time (a corpus may be GBs)
    into one buffer: a fresh bytes object a read faulted in its pages anew each time
    (a megabyte a read, 118 MB for a 200k-passage corpus).  hashlib lets go of the GIL for
    each block, so on a thread of its own (`hash_ahead`) this runs beside the imports."""
    h = hashlib.blake2b(digest_size=8)
    with open(path, "rb", buffering=0) as fh:
        buf = memoryview(bytearray(max(1, min(block, os.fstat(fh.fileno()).st_size + 1))))
        while n := fh.readinto(buf):
            h.update(buf[:n])
    return h.hexdigest()


# ---- a file hashed ahead, while the process is still importing -------------------------------
#
# A run whose input is one file (a BEIR corpus) and which has no listing of it yet (a fresh
# output folder, as every bench/scale.py run) hashed the whole file before stage 01 could read
# a record: 0.16-0.32 s at 200k passages, ~1 s at a million, on one core, with the other idle.
# The imports before it (Arrow, NumPy, the stages: ~0.3 s) run on one core too.  So the
# command starts the hash on a thread before its imports (pipekit/read/early.py), and the
# listing takes it from there (pipekit/run/incremental.py `list_files`), if the file is
# still the file that was hashed: same device, inode, size and times before and after.

_AHEAD: dict[tuple, tuple] = {}  # the file's identity -> (an Event set when done, [its hash] or [])


def _identity(path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def hash_ahead(path) -> bool:
    """Start `file_hash(path)` on a thread of its own (a daemon: a run that ends before it
    needs the hash does not wait for it); True if it started."""
    import threading

    key = _identity(path)
    if key is None or key in _AHEAD:
        return False
    done, box = threading.Event(), []
    _AHEAD[key] = (done, box)

    def work() -> None:
        try:
            value = file_hash(path)
            if _identity(path) == key:  # not written to while it was read
                box.append(value)
        except OSError:
            pass  # the listing hashes it itself, and says what is wrong
        finally:
            done.set()

    threading.Thread(target=work, name="pipekit-hash-ahead", daemon=True).start()
    return True


def hashed_ahead(path) -> str | None:
    """`file_hash(path)` as `hash_ahead` made it (waited for), if the file is as it was when
    it was hashed; None otherwise (never started, failed, or the file changed since)."""
    if not _AHEAD:
        return None
    entry = _AHEAD.pop(_identity(path), None)
    if entry is None:
        return None
    done, box = entry
    done.wait()
    return box[0] if box else None  # (popped by the file's identity now, which is the one hashed)


# ---- stage 01: the listing of input files ------------------------------------------------
