"""CSV documents in chunks: whole records, every chunk starting with the header row.

Stage 01 keeps a CSV's own text (so that chunk spans point at exact characters), and a
CSV has no blank lines or headings to cut at: its structure is its records.  SPEC rule 3
asks that a chunk never cut a record and that every chunk start with the header row, so
a reader of any chunk knows what its columns are.

* `csv_records(lines)`: the line ranges of the records (a quoted field may hold newlines);
* `chunk_csv(doc, name)`: records packed greedily up to `target` under the header (which
  counts toward the budget), a runt at the end joining its predecessor when `max`
  allows, heading_path `[file name, "rows a–b"]`.  A single record larger than `max`
  stays whole: cutting it would leave broken CSV.

`doc` is a pipekit.doctext.DocText: the budget arithmetic is the same as for every other
format.
"""
from __future__ import annotations

__all__ = ["csv_records", "chunk_csv"]


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


def chunk_csv(doc, name: str) -> list[dict]:
    """CSV: every chunk starts with the header row and holds whole records.  CSVs have no
    blank lines or headings to cut at, so the budget is the only thing that ends a chunk;
    a single record larger than `max` stays whole (cutting it would leave broken CSV)."""
    recs = csv_records(doc.lines)
    if not recs:
        return []
    s = doc.s
    h0, h1 = recs[0]
    hs, he = doc.starts[h0], doc.line_end(h1 - 1)
    header = doc.text[hs:he] + doc.nl
    if len(recs) == 1:
        return [{"heading_path": [name], "text": doc.text[hs:he], "start_char": hs, "end_char": he,
                 "page_start": None, "page_end": None}]
    out = []
    groups: list[list[int]] = []  # [first_rec, last_rec, words]
    cur = None
    for k in range(1, len(recs)):
        a, b = doc.starts[recs[k][0]], doc.line_end(recs[k][1] - 1)
        w = doc.words(a, b)
        if cur is not None:
            cs = doc.starts[recs[cur[0]][0]]
            new = doc.size(cur[2] + w, cs, b, header)
            if new > s.target and not (new <= s.max and doc.size(cur[2], cs, doc.line_end(recs[cur[1]][1] - 1), header) < s.min):
                groups.append(cur)
                cur = None
        if cur is None:
            cur = [k, k, w]
        else:
            cur[1], cur[2] = k, cur[2] + w
    groups.append(cur)
    if len(groups) >= 2:  # the last group a runt: join its predecessor if the budget allows
        p, l = groups[-2], groups[-1]
        ls_, le = doc.starts[recs[l[0]][0]], doc.line_end(recs[l[1]][1] - 1)
        ps = doc.starts[recs[p[0]][0]]
        if doc.size(l[2], ls_, le, header) < s.min and doc.size(p[2] + l[2], ps, le, header) <= s.max:
            groups[-2:] = [[p[0], l[1], p[2] + l[2]]]
    for n, (k0, k1, _w) in enumerate(groups):
        a, b = doc.starts[recs[k0][0]], doc.line_end(recs[k1][1] - 1)
        if n == 0:  # the first chunk's span starts at the header itself
            a, text = hs, doc.text[hs:b]
        else:
            text = header + doc.text[a:b]
        out.append({"heading_path": [name, f"rows {k0}–{k1}"], "text": text,
                    "start_char": a, "end_char": b, "page_start": None, "page_end": None})
    return out
