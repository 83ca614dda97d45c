"""A hit's `link`: where the passage opens, for a person clicking it or an answer citing it.

    HTML, reST, Markdown   doc_id#anchor   (the id of the chunk's own heading: pipekit/chunk/anchors.py)
    PDF                    doc_id#page=N   (the physical page page_start: what a viewer's #page opens)
    anything else          doc_id

`documents.link_base` (default null) is put before the doc_id instead of nothing, for an
index of a folder that is also published (a docs site, a repository browser).  A published
site serves what it built from a source page, not the source: Sphinx (reST, and Markdown
through MyST) and MkDocs with `use_directory_urls: false` write `guide/install.md` or
`.rst` as `guide/install.html`, so under a link_base those two suffixes become `.html`.
A repository browser (GitHub's and GitLab's `/blob/` and `/tree/` addresses) shows the
source itself and renders Markdown with the very slugs used here: there the path stays as
it is.  Without a link_base the link is the document's path below `documents.input`
(SPEC: `doc_id#anchor`), which the report turns into a file address.

Deliberately not done: guessing MkDocs' directory URLs (`guide/install/`) or any other
generator's layout; checking that the target exists (bench/links.py does, on real folders).
"""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote

from pipekit.run.lazy import lazy

pa = lazy("pyarrow")  # imported on first use: `search` starts without Arrow (pipekit/run/lazy.py)

_SOURCE_SUFFIX = re.compile(r"\.(?:rst|md|markdown)$", re.I)
_REPOSITORY_BROWSER = re.compile(r"/(?:-/)?(?:blob|tree)/")


def fragment(fmt: str | None, anchor: str | None, page_start: int | None) -> str:
    """`#anchor`, `#page=N` or "" (see the module text)."""
    if fmt == "pdf":
        return f"#page={page_start}" if page_start is not None else ""
    return f"#{anchor}" if anchor else ""


def published_path(doc_id: str, link_base: str) -> str:
    """doc_id as the site under link_base serves it (see the module text)."""
    if _REPOSITORY_BROWSER.search(link_base):
        return doc_id
    return _SOURCE_SUFFIX.sub(".html", doc_id)


def link(doc_id: str, fmt: str | None, anchor: str | None, page_start: int | None,
         link_base: str | None = None) -> str:
    """The link of one hit."""
    if link_base:
        where = link_base.rstrip("/") + "/" + quote(published_path(doc_id, link_base), safe="/#:@!$&'()*+,;=~")
    else:
        where = doc_id
    return where + fragment(fmt, anchor, page_start)


def link_list(doc_ids: list, formats: list, anchors: list, page_starts: list, link_base: str | None = None) -> list[str]:
    """The links of a query's hits (lists, one value per hit), as `link` makes each: without a
    link_base, `fragment`'s rule written out in one comprehension (a Searcher's ten hits: a
    call of `link` and of `fragment` a hit were ~0.7 of 1.9 µs; tests/test_warm.py holds it to `link`)."""
    if link_base:
        return [link(d, f, a, p, link_base) for d, f, a, p in zip(doc_ids, formats, anchors, page_starts)]
    return [d + ((f"#page={p}" if p is not None else "") if f == "pdf" else f"#{a}" if a else "")
            for d, f, a, p in zip(doc_ids, formats, anchors, page_starts)]


def file_href(link_value: str, input_dir: str | Path | None) -> str:
    """What a page outside the input folder (the report) can open: the link itself when it
    is an address (made with link_base), else the file below `input_dir` as a file:// URL,
    anchor kept (a browser opens file://…/x.html#id and file://…/x.pdf#page=3 there)."""
    if "://" in link_value or input_dir is None:
        return link_value
    path, hash_, frag = link_value.partition("#")
    target = (Path(input_dir) / path).resolve()
    return target.as_uri() + (hash_ + frag if hash_ else "")


def hit_links(rows: pa.Table, link_base: str | None = None) -> pa.Array:
    """The links of hits, from their rows of 03_chunks (doc_id, page_start, format, anchor;
    a format or anchor null where an older file lacks it: pipekit/retrieve/cited.py)."""
    values = [rows.column(n).to_pylist() for n in ("doc_id", "format", "anchor", "page_start")]
    return pa.array(link_list(*values, link_base), pa.string())


def with_link(table: pa.Table, values: pa.Array) -> pa.Table:
    """`table` with its `link` column right after `text` (SPEC's column order)."""
    at = table.schema.get_field_index("text") + 1 if "text" in table.column_names else table.num_columns
    return table.add_column(at, "link", values)
