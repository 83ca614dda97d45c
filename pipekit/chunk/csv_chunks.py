"""CSV documents in chunks: whole records, every chunk starting with the header row.

Stage 01 keeps a CSV's own text (so that chunk spans point at exact characters), and a
CSV has no blank lines or headings to cut at: its structure is its records.  SPEC rule 3
asks that a chunk never cut a record and that every chunk start with the header row, so
a reader of any chunk knows what its columns are.

* `csv_records(lines)`: the line ranges of the records (a quoted field may hold newlines),
  and `record_bounds(doc)`, the same found with numpy as two arrays of line numbers: a
  list of tuples was another copy of a 400 MB export's size;
* `chunk_csv(doc, name)`: records packed greedily up to `target` under the header (which
  counts toward the budget), a runt at the end joining its predecessor when `max`
  allows, heading_path `[file name, "rows a–b"]`.  A single record larger than `max`
  stays whole: cutting it would leave broken CSV.

`doc` is a pipekit.chunk.doctext.DocText: the budget arithmetic is the same as for every other
format.
"""
from __future__ import annotations

import bisect

import numpy as np

__all__ = ["csv_records", "record_bounds", "chunk_csv"]


def csv_records(lines: list[str], quote: str = '"') -> list[tuple[int, int]]:
    """Line ranges [first, end) of CSV records: a quoted field may hold newlines, so a
    record ends only at a line end outside quotes (an odd quote count flips the state;
    a doubled quote inside a field counts twice and changes nothing).  Stage 01 keeps the
    file's own text; `"` is the quote character of every dialect its sniffer reports here."""
    recs = []
    inside = False
    first = None
    for j, ln in enumerate(lines):
        if first is None:
            if not inside and not ln.strip():
                continue
            first = j
        if ln.count(quote) % 2:
            inside = not inside
        if not inside:
            recs.append((first, j + 1))
            first = None
    if first is not None:
        recs.append((first, len(lines)))
    return recs


_PIECE = 1 << 20  # characters of lines whose quotes are counted at a time


def _odd_quotes(doc, quote: int = 0x22) -> np.ndarray:
    """Per line of `doc`, whether it holds an odd number of `"` (bool array), counted in
    the UTF-8 bytes of about a megabyte of lines at a time (in UTF-8 a `"` or a newline
    byte is never part of another character)."""
    starts, text, n = doc.starts, doc.text, len(doc.lines)
    odd = np.zeros(n, dtype=bool)
    j = 0
    while j < n:
        k = bisect.bisect_right(starts, starts[j] + _PIECE, j + 1, n + 1) - 1
        if k <= j:  # one line longer than that
            odd[j] = text.count('"', starts[j], starts[j + 1] - 1) % 2 == 1
            j += 1
            continue
        data = np.frombuffer(text[starts[j]:starts[k] - 1].encode("utf-8"), dtype=np.uint8)
        quotes = np.flatnonzero(data == quote)
        line_of = np.searchsorted(np.flatnonzero(data == 10), quotes)  # newlines before each quote
        odd[j:k] = np.bincount(line_of, minlength=k - j) % 2 == 1
        j = k
    return odd


def record_bounds(doc) -> tuple[np.ndarray, np.ndarray]:
    """`csv_records(doc.lines)` as arrays of first lines and end lines, without a Python
    step per line: a record starts at a non-blank line outside quotes and ends at the
    first non-blank line after which the quotes are closed."""
    n = len(doc.lines)
    filled = np.diff(doc.line_cum()) > 0  # a line with a word in it: not blank
    inside_after = np.cumsum(_odd_quotes(doc), dtype=np.int64) % 2 == 1
    inside_before = np.concatenate(([False], inside_after[:-1]))
    firsts = np.flatnonzero(filled & ~inside_before)
    ends = np.flatnonzero(filled & ~inside_after) + 1
    if len(ends) < len(firsts):  # quotes never closed: the last record runs to the end
        ends = np.append(ends, n)
    return firsts, ends


def chunk_csv(doc, name: str) -> list[dict]:
    """CSV: every chunk starts with the header row and holds whole records.  CSVs have no
    blank lines or headings to cut at, so the budget is the only thing that ends a chunk;
    a single record larger than `max` stays whole (cutting it would leave broken CSV)."""
    firsts, ends = record_bounds(doc)
    if not len(firsts):
        return []
    s = doc.s
    hs, he = doc.starts[int(firsts[0])], doc.line_end(int(ends[0]) - 1)
    header = doc.text[hs:he] + doc.nl
    if len(firsts) == 1:
        return [{"heading_path": [name], "text": doc.text[hs:he], "start_char": hs, "end_char": he,
                 "page_start": None, "page_end": None}]
    cum = doc.line_cum()
    words = cum[ends] - cum[firsts] if doc.by_words else np.zeros(len(firsts), dtype=np.int64)
    out = []
    groups: list[list[int]] = []  # [first_rec, last_rec, words, start_char, end_char]
    cur = None
    step = 1 << 16  # records turned into Python ints at a time: never the whole export at once
    for lo in range(1, len(firsts), step):
        hi = min(len(firsts), lo + step)
        for k, f, e, w in zip(range(lo, hi), firsts[lo:hi].tolist(), ends[lo:hi].tolist(), words[lo:hi].tolist()):
            a, b = doc.starts[f], doc.line_end(e - 1)
            if cur is not None:
                new = doc.size(cur[2] + w, cur[3], b, header)
                if new > s.target and not (new <= s.max and doc.size(cur[2], cur[3], cur[4], header) < s.min):
                    groups.append(cur)
                    cur = None
            if cur is None:
                cur = [k, k, w, a, b]
            else:
                cur[1], cur[2], cur[4] = k, cur[2] + w, b
    groups.append(cur)
    if len(groups) >= 2:  # the last group a runt: join its predecessor if the budget allows
        p, l = groups[-2], groups[-1]
        if doc.size(l[2], l[3], l[4], header) < s.min and doc.size(p[2] + l[2], p[3], l[4], header) <= s.max:
            groups[-2:] = [[p[0], l[1], p[2] + l[2], p[3], l[4]]]
    for n, (k0, k1, _w, a, b) in enumerate(groups):
        if n == 0:  # the first chunk's span starts at the header itself
            a, text = hs, doc.text[hs:b]
        else:
            text = header + doc.text[a:b]
        out.append({"heading_path": [name, f"rows {k0}–{k1}"], "text": text,
                    "start_char": a, "end_char": b, "page_start": None, "page_end": None})
    return out
