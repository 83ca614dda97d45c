"""EPUB books (.epub): the spine's chapters, in reading order, as one Markdown document.

An EPUB is a zip (pipekit/read/zipped.py opens it: zip bombs refused unread, reads
capped): META-INF/container.xml names the package document (OPF), whose manifest lists
the book's files and whose spine gives the reading order.  Each spine document is XHTML;
their bodies, in spine order, make one HTML page that takes the HTML path
(pipekit/read/html_markdown.py), so a chapter's <h1> and its sections' <h2>... become the
heading trail, and lists, tables and code keep their structure.  One book, one document:
the book is what a reader cites, and its chapters' headings say where in it a passage is.
Title: the OPF's `dc:title`.

Why zipfile and lxml, not ebooklib: the reader needs three things (the container, the OPF,
the spine's files) and must control every read (size caps) and every parse (no entities,
no DTD, no network).  ebooklib opens every manifest item, images included, and parses
with its own lxml settings; it is also AGPL-licensed, which this project's users would
inherit.

Safety of the XHTML: a chapter's DOCTYPE (EPUB 2 books declare XHTML 1.1's) is cut off
before parsing, internal subset and all, so no entity a book declares can be expanded:
`&xxe;` stays the five characters it is.  The HTML parser then reads the named entities
HTML has (`&nbsp;`), which an XML parser without the DTD would reject.

Not done: the navigation document and NCX (the headings already give the structure; a
book whose chapter titles are styled paragraphs, not <h1>-<h6>, has no trail),
non-XHTML spine items (a DTBook or SVG chapter gets a note), encrypted (DRM) books (an
error row saying so), fixed-layout page images.
"""
from __future__ import annotations

import posixpath
import re
from urllib.parse import unquote

from pipekit.read.html_markdown import html_to_markdown, parse_html
from pipekit.read.text import Unreadable, decode_text
from pipekit.read.zipped import Package, guarded, declared_encoding, inflate_limit, parse_xml, text_of

_KIND = "an EPUB book"
_CONTAINER = "META-INF/container.xml"
_ENCRYPTION = "META-INF/encryption.xml"
_ENC = "{http://www.w3.org/2001/04/xmlenc#}"
_OCF = "{urn:oasis:names:tc:opendocument:xmlns:container}"
_OPF = "{http://www.idpf.org/2007/opf}"
_DC = "{http://purl.org/dc/elements/1.1/}"
_XHTML_TYPES = ("application/xhtml+xml", "text/html")
# The XML declaration and a DOCTYPE with its internal subset (`[ ... ]`), if any.
_PROLOG = re.compile(r"\A\s*(?:<\?xml[^>]*\?>\s*)?(?:<!--.*?-->\s*)*(?:<!DOCTYPE[^>\[]*(?:\[.*?\]\s*)?>)?", re.S | re.I)


def read_epub(data: bytes, max_bytes: int | None = None) -> dict:
    """An .epub file's spine documents, in order, as one Markdown text."""
    return guarded(_read_epub, data, max_bytes, _KIND)


def _read_epub(data: bytes, max_bytes: int | None) -> dict:
    package = Package(data, _KIND, inflate_limit(max_bytes))
    opf_name = _rootfile(package)
    package.refuse_if_over([opf_name])
    opf = parse_xml(package.read(opf_name), opf_name, _KIND)
    chapters, notes = _spine(package, opf, opf_name)
    _refuse_encrypted(package, chapters)
    package.refuse_if_over(chapters, "its chapters")  # before any chapter is inflated
    bodies = [_body_html(package.read(name), name) for name in chapters]
    markdown, _ = html_to_markdown("<html><body>" + "".join(bodies) + "</body></html>")
    title_el = opf.find(f"{_OPF}metadata/{_DC}title")
    title = (text_of(title_el) or None) if title_el is not None else None
    return {"text": markdown, "title": title, "encoding": None, "note": "; ".join(notes) or None}


def _rootfile(package: Package) -> str:
    """The OPF's name in the zip, from META-INF/container.xml."""
    if not package.has(_CONTAINER):
        raise Unreadable(f"not {_KIND}: no {_CONTAINER} in the zip")
    package.refuse_if_over([_CONTAINER])
    container = parse_xml(package.read(_CONTAINER), _CONTAINER, _KIND)
    for rootfile in container.iter(f"{_OCF}rootfile"):
        media = rootfile.get("media-type", "application/oebps-package+xml")
        path = (rootfile.get("full-path") or "").strip()
        if path and media == "application/oebps-package+xml":
            if not package.has(path):
                raise Unreadable(f"not {_KIND}: {_CONTAINER} names {path}, which is missing from the zip")
            return path
    raise Unreadable(f"not {_KIND}: {_CONTAINER} names no package document (rootfile)")


def _spine(package: Package, opf, opf_name: str) -> tuple[list[str], list[str]]:
    """The zip names of the spine's XHTML documents in reading order, and notes on the rest."""
    base = posixpath.dirname(opf_name)
    manifest = {}
    for item in opf.iter(f"{_OPF}item"):
        href = unquote((item.get("href") or "").split("#", 1)[0])
        manifest[item.get("id")] = (posixpath.normpath(posixpath.join(base, href)) if href else "",
                                    (item.get("media-type") or "").strip().lower())
    chapters, notes, seen = [], [], set()
    for ref in opf.iter(f"{_OPF}itemref"):
        name, media = manifest.get(ref.get("idref"), ("", ""))
        if not name:
            notes.append(f"spine item {ref.get('idref')!r} is not in the manifest: skipped")
        elif media not in _XHTML_TYPES:
            notes.append(f"spine item {name} is {media or 'of no media type'}, not XHTML: skipped")
        elif not package.has(name):
            notes.append(f"spine item {name} is missing from the zip: skipped")
        elif name not in seen:  # listed twice: read once, where it first comes
            seen.add(name)
            chapters.append(name)
    if not chapters:
        raise Unreadable(f"not {_KIND}: its spine lists no XHTML document"
                         + (f" ({notes[0]})" if notes else ""))
    return chapters, notes


def _refuse_encrypted(package: Package, chapters: list[str]) -> None:
    """Unreadable when META-INF/encryption.xml lists a chapter (DRM): its bytes are
    ciphertext, which would otherwise read as "binary file".  Fonts are often listed too
    (obfuscated, as EPUB allows): they are not read, so they do not matter."""
    if not package.has(_ENCRYPTION):
        return
    package.refuse_if_over([_ENCRYPTION])
    listed = {unquote(ref.get("URI") or "") for ref in
              parse_xml(package.read(_ENCRYPTION), _ENCRYPTION, _KIND).iter(f"{_ENC}CipherReference")}
    locked = [c for c in chapters if c in listed]
    if locked:
        raise Unreadable(f"{_KIND} with encrypted chapters (DRM; {locked[0]} and {len(locked) - 1} more) "
                         "cannot be read")


def _body_html(data: bytes, name: str) -> str:
    """One chapter's <body> content as HTML, in a <div> of its own, DOCTYPE cut off."""
    from lxml import etree

    text, _, _ = decode_text(data, declared_encoding(data))
    text = _PROLOG.sub("", text, count=1)
    try:
        root = parse_html(text)
    except RecursionError:
        raise Unreadable(f"{name} nested too deeply to convert") from None
    body = None if root is None else next(root.iter("body"), None)
    if body is None:
        return ""
    inner = (body.text and _escape(body.text) or "") + "".join(
        etree.tostring(child, method="html", encoding="unicode", with_tail=True) for child in body)
    return f"<div>{inner}</div>"


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
