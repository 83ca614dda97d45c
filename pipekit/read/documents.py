"""One listed file into one stage-01 row: the format's reader, or the reason it has none.

`read_document` never raises for a bad file: the problem becomes `status="error"` and a
one-line message.  Each format's reader is a module beside this one, from bytes to a dict
of the row's columns: Markdown and plain text as decoded; PDF per page through PDFium with a
`--- page N ---` line before each page, and its outline (bookmarks) in `outline`; HTML
converted to Markdown so that stage 03's heading, list, table and code rules apply;
reStructuredText converted to Markdown by docutils, sections as headings, for the same
reason; CSV kept as its original lines (stage 03 cuts between records and must give exact
spans into the text, so we never re-serialise); Jupyter notebooks (cells, never their JSON)
and Python sources (docstrings under their qualified names) written as Markdown too.
"""
from __future__ import annotations

import importlib
from pathlib import Path

from pipekit.read.markdown import read_markdown
from pipekit.read.text import Unreadable, read_text_file
from pipekit.read.walk import _SIZE_WEIGHT, InputEntry, _strerror, too_large
from pipekit.read.zipped import TooLarge
from pipekit.run.hashing import content_hash


class _OnFirstUse:
    """A format's reader, its module imported at the first file of that format: a rerun that
    reads one changed Markdown file paid for every reader's module (docutils alone took 35 ms;
    PDF, Word, EPUB, notebooks, Python, CSV and HTML together ~10 ms more, `python -X importtime`)."""

    def __init__(self, module: str, name: str):
        self.module, self.name, self.read = module, name, None

    def __call__(self, data: bytes, *args, **kwargs) -> dict:
        if self.read is None:
            self.read = getattr(importlib.import_module(self.module), self.name)
        return self.read(data, *args, **kwargs)


read_rst = _OnFirstUse("pipekit.read.rst", "read_rst")
# The modules a reading process loads before it starts (pipekit/read/parallel.py's fork server).
READER_MODULES = ("pipekit.read.csv", "pipekit.read.docx", "pipekit.read.epub", "pipekit.read.html",
                  "pipekit.read.notebook", "pipekit.read.pdf", "pipekit.read.python")


COLUMNS = ("doc_id", "source", "format", "text", "status", "error", "path", "title",
           "encoding", "page_labels", "note", "n_bytes", "outline", "content_hash", "anchors")

_READERS = {
    "markdown": read_markdown,
    "text": read_text_file,
    "pdf": _OnFirstUse("pipekit.read.pdf", "read_pdf"),
    "html": _OnFirstUse("pipekit.read.html", "read_html"),
    "csv": _OnFirstUse("pipekit.read.csv", "read_csv"),
    "rst": read_rst,
    "docx": _OnFirstUse("pipekit.read.docx", "read_docx"),
    "epub": _OnFirstUse("pipekit.read.epub", "read_epub"),
    "notebook": _OnFirstUse("pipekit.read.notebook", "read_notebook"),
    "python": _OnFirstUse("pipekit.read.python", "read_python"),
}
# Zips measure what their members inflate to against documents.max_bytes (zip bombs).
_ZIPPED = {"docx", "epub"}


def read_document(entry: InputEntry) -> dict:
    """The stage-01 row for one listed file.  Never raises for a bad file."""
    row = dict.fromkeys(COLUMNS)
    row.update(doc_id=entry.doc_id, source=str(entry.path), format=entry.format,
               path=list(entry.folders), n_bytes=entry.n_bytes)
    if entry.skip is not None:
        # The reason goes into `error` too: it is the one column a reader checks to learn
        # why a document has no text.
        row.update(status="skipped", error=entry.skip)
        return row
    if entry.error is not None:
        row.update(status="error", error=entry.error)
        return row
    if entry.format == "beir":
        raise ValueError(f"{entry.doc_id} is a BEIR corpus: read it with iter_beir")
    try:
        if entry.guessed and _looks_binary(entry.path):
            row.update(status="skipped", format="", error="no file extension and the content is not text")
            return row
        cap = None if entry.max_bytes is None else entry.max_bytes // _SIZE_WEIGHT.get(entry.format, 1)
        data = _read_capped(entry.path, cap)
        if data is None:  # it grew past the limit after the walk measured it
            size = entry.path.stat().st_size
            row.update(status="skipped", error=too_large(size, entry.max_bytes, entry.format), n_bytes=size)
            return row
        row["n_bytes"] = len(data)
        row["content_hash"] = content_hash(data)
        limit = {"max_bytes": entry.max_bytes} if entry.format in _ZIPPED else {}
        row.update(_READERS[entry.format](data, **limit, **_given(entry)))
        del data  # the bytes are the text's size again: not kept while the row lives on
        row["status"] = "ok"
        if entry.guessed:
            row["note"] = "; ".join(filter(None, ["no file extension: read as plain text", row["note"]]))
        if entry.note:
            row["note"] = "; ".join(filter(None, [row["note"], entry.note]))
    except TooLarge as exc:  # a package inflating past the limit: refused unread, as a big file is
        row.update(status="skipped", error=str(exc), text=None, content_hash=None)
    except Unreadable as exc:
        if entry.guessed:  # we only guessed it was text: not being text is no error
            row.update(status="skipped", format="", error=f"no file extension and the content is not text ({exc})")
        else:
            row.update(status="error", error=str(exc), text=None)
    except OSError as exc:
        row.update(status="error", error=f"cannot read file: {_strerror(exc)}", text=None)
    except Exception as exc:  # noqa: BLE001 — a reader's bug on one file must not stop the folder
        # (nor, read on a worker process, vanish with it): the row names the file and the exception.
        message = " ".join(str(exc).split())[:200]
        row.update(status="error", error=f"the {entry.format} reader failed ({type(exc).__name__}: {message})",
                   text=None, title=None, encoding=None, note=None, page_labels=None, outline=None, anchors=None)
    return row


def failed_row(entry: InputEntry, reason: str) -> dict:
    """The `error` row of a file whose reading failed outside its reader (its process died)."""
    row = dict.fromkeys(COLUMNS)
    row.update(doc_id=entry.doc_id, source=str(entry.path), format=entry.format,
               path=list(entry.folders), n_bytes=entry.n_bytes, status="error", error=reason)
    return row


def _given(entry: InputEntry) -> dict:
    """What a reader needs besides the bytes: a module's dotted name comes from its path;
    a notebook's outputs are kept only when documents.notebook_outputs says so."""
    if entry.format == "python":
        return {"doc_id": entry.doc_id}
    if entry.format == "notebook":
        return {"outputs": bool(entry.options.get("notebook_outputs", False))}
    return {}


def _read_capped(path: Path, max_bytes: int | None) -> bytes | None:
    """The file's bytes, or None if it holds more than max_bytes."""
    if max_bytes is None:
        return path.read_bytes()
    with path.open("rb") as handle:
        data = handle.read(max_bytes + 1)
    return None if len(data) > max_bytes else data


def _looks_binary(path: Path, sniff: int = 8192) -> bool:
    """A NUL in the first 8 KiB: git's test, so a 2 GB extensionless binary is not read whole."""
    with path.open("rb") as handle:
        return b"\x00" in handle.read(sniff)
