"""Reusing the previous run's rows for what has not changed.

(Work in progress: the content hash every stage-01 row carries.)
"""
from __future__ import annotations

import hashlib


def content_hash(data: bytes) -> str:
    """A short fingerprint of a file's (or a BEIR record's) bytes: 64 bits of BLAKE2b.

    Stages 02 and 03 carry it on each row, so a rerun can tell, document by document,
    whether the rows it made last time still stand."""
    return hashlib.blake2b(data, digest_size=8).hexdigest()
