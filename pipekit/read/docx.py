"""Word documents (.docx): their structure as Markdown, so stage 03 chunks them by it.

A .docx is a zip of XML parts (pipekit/read/zipped.py opens it: zip bombs refused unread,
DTDs refused, reads capped).  The document's paragraphs carry their meaning in styles,
not in markup: a heading is a paragraph styled "heading 2".  mammoth (docx -> HTML) reads
those styles, Word's list numbering, tables, footnotes and hyperlinks; the HTML then takes
the HTML path (pipekit/read/html_markdown.py), so headings, lists, tables and code reach
the chunker as Markdown structure, as a web page's do.  mammoth was measured against
python-docx and docx2python on the same files (bench/formats_office.py): it alone keeps
nested lists as lists and tables as rows of cells, and finds every heading.

The style map below adds to mammoth's own (Heading 1-6, lists):

* Title is a heading (h1): Word's cover line, and what a reader calls the document.
* Heading 7-9 become h6: Markdown has six levels; deeper ones stay headings, one level.
* Code: Pandoc's "Source Code" paragraphs, Word's "HTML Preformatted", "Plain Text",
  "Macro Text" and any style named "Code" become one `<pre>` per run of such paragraphs
  (a fence for stage 03, never cut), "Verbatim Char" and "HTML Code" runs inline code.
* Images become their alt text and are never inflated; an embedded style map (mammoth
  reads one from the file) is ignored: a document does not choose how we read it.

Title: the core properties' title (docProps/core.xml), else the first Title or Heading 1.

Not done: text boxes and shapes' text, headers and footers, comments, tracked changes
(mammoth reads the document as accepted), custom heading styles not named "heading N"
(outline levels), .doc (the old binary format: an error row, it is not a zip).
"""
from __future__ import annotations

import functools
import html
import io
import re
import zipfile

from pipekit.read.html_markdown import html_to_markdown
from pipekit.read.text import Unreadable
from pipekit.read.zipped import Package, guarded, inflate_limit, parse_xml, refuse_dtd, text_of

_KIND = "a Word document"

_STYLE_MAP = "\n".join(
    [f"p[style-name='{t}'] => h1:fresh" for t in ("Title", "title")]
    + [f"p[style-name='{h} {n}'] => h6:fresh" for h in ("Heading", "heading") for n in (7, 8, 9)]
    + [f"p[style-name='{s}'] => pre:separator('\\n')"
       for s in ("Source Code", "HTML Preformatted", "Plain Text", "Macro Text", "Code")]
    + [f"r[style-name='{s}'] => code" for s in ("Verbatim Char", "HTML Code")]
)

# The parts mammoth may read are XML: the package's content types and relationships, the
# document, styles, numbering, notes, comments.  Media (images, fonts, embedded files)
# are never inflated, so they neither count against the limit nor reach a parser.
_XML_PART = re.compile(r"(?:\.xml|\.rels)\Z", re.I)
_CORE = "docProps/core.xml"
_DC = "{http://purl.org/dc/elements/1.1/}"
_FIRST_H1 = re.compile(r"<h1[^>]*>(.*?)</h1>", re.S)
_TAG = re.compile(r"<[^>]+>")


def read_docx(data: bytes, max_bytes: int | None = None) -> dict:
    """A .docx file's text as Markdown with its headings, lists, tables and code."""
    return guarded(_read_docx, data, max_bytes, _KIND)


def _read_docx(data: bytes, max_bytes: int | None) -> dict:
    package = Package(data, _KIND, inflate_limit(max_bytes))
    if not package.has("[Content_Types].xml"):
        raise Unreadable(f"not {_KIND}: a zip without [Content_Types].xml, so not an Office file")
    parts = sorted(n for n in package.members if _XML_PART.search(n))
    package.refuse_if_over(parts)  # before anything is inflated
    checked, core = io.BytesIO(), None
    with zipfile.ZipFile(checked, "w", zipfile.ZIP_STORED) as out:
        for name in parts:
            part = package.read(name)
            refuse_dtd(part, name, _KIND)
            out.writestr(name, part)
            core = part if name == _CORE else core
    body = _convert(checked)
    markdown, _ = html_to_markdown(f"<html><body>{body}</body></html>")
    title = _core_title(core) or _first_h1(body)
    return {"text": markdown, "title": title, "encoding": None, "note": None}


def _convert(checked: io.BytesIO) -> str:
    """mammoth's HTML for the checked parts; its failures as one-line reasons."""
    import mammoth

    checked.seek(0)
    try:
        result = mammoth.convert_to_html(checked, style_map=_STYLE_MAP, convert_image=_alt_text(),
                                         include_embedded_style_map=False, external_file_access=False)
    except RecursionError:
        raise Unreadable(f"{_KIND} nested too deeply to convert") from None
    except Exception as exc:  # noqa: BLE001 — a converter bug on one file must not stop the folder
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise Unreadable(f"not {_KIND}: {reason}") from None
    return result.value


@functools.lru_cache(maxsize=1)
def _alt_text():
    import mammoth

    # No `src`: the image is not opened (its bytes are not even in the checked package),
    # and the HTML path turns an <img> into its alt text.
    return mammoth.images.img_element(lambda image: {})


def _core_title(core: bytes | None) -> str | None:
    if core is None:
        return None
    el = parse_xml(core, _CORE, _KIND).find(f"{_DC}title")
    return (text_of(el) or None) if el is not None else None


def _first_h1(body: str) -> str | None:
    found = _FIRST_H1.search(body)
    return (" ".join(html.unescape(_TAG.sub("", found.group(1))).split()) or None) if found else None
