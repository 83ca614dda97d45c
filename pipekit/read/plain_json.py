"""A block of BEIR lines written exactly as `json.dumps` writes a plain record, read without a JSON parser.

Stage 01 hands each 2 MB block of a BEIR corpus to Arrow's JSON reader (pipekit/read/fastpath.py):
at 200,000 passages that parse was the largest item of the stage's CPU (0.45-0.75 s of ~2.3 s,
rapidjson's string scanner and the builders behind it; ~2.8 s at a million).  But most corpora
are written by `json.dumps(record)` with the keys in BEIR's order, and a line whose strings hold
no escape is nothing but its three values between fixed bytes:

    {"_id": "<id>", "title": "<title>", "text": "<text>"}

For such a line a JSON reader finds exactly the bytes between the quotes: no escape means no
backslash, and a string without a backslash ends at its next quote.  So `plain_fields` checks,
for every record line of a block at once in NumPy, that the line is that template and nothing
else: exactly 12 quotes, the fixed bytes in their places (which pins every quote), no backslash
and no control character anywhere in it (JSON forbids one unescaped in a string, and json.loads
and Arrow refuse it), a non-empty `_id`; the block is valid UTF-8 already (its caller checks).
Then each value is the span between its quotes, and the three columns are built from those spans
by Arrow in C (a string-view array over the block's bytes, cast to plain strings: one copy of
each value, as the parse made).  One line of any other shape (another key order, a
`metadata` key, other spacing, an escape, `\\u00e9`) and the whole block goes to Arrow's reader
as before: the rows do not depend on which path read them (tests/test_fastpath.py draws
records through both and against `iter_beir`).

What it does not do: unescape anything, accept another layout, or decide an error: a block it
does not take is the JSON reader's, and a line that reader refuses is `_beir_record`'s to word.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

_HEAD = np.frombuffer(b'{"_id": "', dtype=np.uint8)        # at the line's start
_TITLE = np.frombuffer(b'", "title": "', dtype=np.uint8)  # at the id's closing quote
_TEXT = np.frombuffer(b'", "text": "', dtype=np.uint8)    # at the title's closing quote
_TAIL = np.frombuffer(b'"}', dtype=np.uint8)              # at the text's closing quote, ending the line
QUOTES = 12  # two around each key and each value


def plain_fields(buf: np.ndarray, starts: np.ndarray, body_ends: np.ndarray):
    """(ids, titles, texts) as Arrow string arrays for record lines buf[starts[i]:body_ends[i]]
    (each without its line end), or None unless every one of them is the plain template."""
    if not hasattr(pa, "string_view") or not len(starts) or len(buf) >= 1 << 31:
        return None
    n = len(starts)
    # Bytes outside printable ASCII and the two that matter: only line ends may be among them.
    if np.count_nonzero(buf == 92):  # a backslash anywhere: an escape somewhere, or a stray one
        return None
    quotes = np.flatnonzero(buf == 34)
    if len(quotes) != QUOTES * n:
        return None
    low = np.flatnonzero(buf < 32)
    if len(low):
        line = np.searchsorted(starts, low, side="right") - 1
        if np.any((line >= 0) & (low < body_ends[np.maximum(line, 0)])):
            return None  # a control character inside a record (a tab, a CR not ending the line)
    at = quotes.reshape(n, QUOTES)  # each line's twelve, if it is the template (checked next)
    id_end, title_end, text_end = at[:, 3], at[:, 7], at[:, 11]
    # Every quote where the template puts it, relative to the line's start or to the value
    # before; with the fixed bytes around them, a line is the template, and a value's span
    # (between two consecutive quotes) holds no quote.
    if not (np.array_equal(text_end + len(_TAIL), body_ends) and _placed(at, starts, (1, 5, 8), 0)
            and _placed(at, id_end, (3, 9, 12), 4) and _placed(at, title_end, (3, 8, 11), 8)):
        return None
    if not (_fixed(buf, starts, _HEAD) and _fixed(buf, id_end, _TITLE) and _fixed(buf, title_end, _TEXT)
            and _fixed(buf, text_end, _TAIL)):
        return None
    id_start = starts + len(_HEAD)
    if np.any(id_end <= id_start):
        return None  # an empty `_id`: the reader's path refuses it in its own words
    data = pa.py_buffer(buf)
    return tuple(_strings(buf, data, a, b) for a, b in ((id_start, id_end), (id_end + len(_TITLE), title_end),
                                                         (title_end + len(_TEXT), text_end)))


def _placed(at: np.ndarray, base: np.ndarray, offsets: tuple, first: int) -> bool:
    """Whether quotes first, first + 1, ... of each line are at base + offsets."""
    return all(np.array_equal(at[:, first + k], base + d) for k, d in enumerate(offsets))


def _fixed(buf: np.ndarray, at: np.ndarray, want: np.ndarray) -> bool:
    """Whether buf[at[i]:at[i] + len(want)] == want for every i."""
    if len(at) and int(at.max()) + len(want) > len(buf):
        return False
    return all(np.all(buf[at + k] == byte) for k, byte in enumerate(want.tolist()))


def _strings(buf: np.ndarray, data: pa.Buffer, start: np.ndarray, end: np.ndarray) -> pa.Array:
    """The spans buf[start[i]:end[i]] as a string array of their own (Arrow's string-view
    layout over the block's bytes: 16 bytes a value, its length, then the value itself up to
    12 bytes, else its first 4 bytes, buffer 0 and its offset; then cast, which copies)."""
    n = len(start)
    length = (end - start).astype(np.int32)
    views = np.empty((n, 4), dtype=np.int32)
    views[:, 0] = length
    short = length <= 12
    wide = 12 if short.any() else 4  # the value inline, else only its first 4 bytes
    first = buf[np.minimum(start[:, None] + np.arange(wide), len(buf) - 1)]
    first[np.arange(wide) >= length[:, None]] = 0
    as_bytes = views.view(np.uint8)  # (n, 16)
    as_bytes[:, 4:4 + wide] = first
    views[:, 2] = np.where(short, views[:, 2], 0)  # buffer 0 (in place for an inline value)
    views[:, 3] = np.where(short, views[:, 3], start)  # the value's offset in it
    array = pa.Array.from_buffers(pa.string_view(), n, [None, pa.py_buffer(views), data])
    return array.cast(pa.string())
