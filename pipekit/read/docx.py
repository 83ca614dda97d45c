"""Word documents (.docx): their structure as Markdown, so stage 03 chunks them by it.

A .docx is a zip of XML parts (pipekit/read/zipped.py opens it: zip bombs refused unread,
DTDs refused, reads capped).  The document's paragraphs carry their meaning in styles,
not in markup: a heading is a paragraph styled "heading 2".  pipekit/read/wordml.py walks
word/document.xml with lxml, with the styles, numbering, notes and relationships parts
beside it, and writes HTML: headings (by style name or outline level), Word's list
numbering as nested lists, tables, code, links and footnotes (its docstring lists what it
reads and what not).  The HTML then takes the HTML path (pipekit/read/html_markdown.py),
so they reach the chunker as Markdown structure, as a web page's do.

mammoth (docx -> HTML) did this before, at 0.2 MB of .docx per CPU second; the walk gives
the same Markdown on 112 of pandoc's 113 renderings of Flask's and Click's docs (the other
differs by the back-arrow mammoth wrote after a footnote) at ~14x the speed,
and python-docx and docx2python, also measured, hand over paragraphs and tables, not
nested lists, links or notes (bench/formats_office.py, bench/README.md "Word and EPUB").

Which parts: the document part is the one the package's relationships name
(word/document.xml by default); styles, numbering and notes are found through the
document's relationships, and a hyperlink's address in the relationships of the part that
holds it.  Only parts inside the zip are read: an external target is an href, never a file
or address opened.

Title: the core properties' title (docProps/core.xml), else the first h1 (Title, Heading 1
or a style at outline level 1).

Not done: what wordml.py does not read (text boxes, headers and footers, comments), .doc
(the old binary format: an error row, it is not a zip).
"""
from __future__ import annotations

import functools
import html
import posixpath
import re

from pipekit.read.html_markdown import html_to_markdown
from pipekit.read.text import Unreadable
from pipekit.read.wordml import Styles, to_html
from pipekit.read.zipped import Package, guarded, inflate_limit, parse_xml, refuse_dtd, text_of

_KIND = "a Word document"

# The parts counted against the limit are every XML part, read or not (the limit means
# the same as when mammoth read them: a file refused before is refused now).  Media
# (images, fonts, embedded files) are never inflated, so they neither count against the
# limit nor reach a parser.
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

    def part(name: str | None):
        if name is None or not package.has(name):
            return None
        xml = package.read(name)
        refuse_dtd(xml, name, _KIND)
        return parse_xml(xml, name, _KIND)

    main = _main_part(part("_rels/.rels"))
    if not package.has(main):
        raise Unreadable(f"not {_KIND}: {main} is missing from the zip")
    folder = main.rpartition("/")[0]
    links, targets = _relationships(part(_rels_of(main)), folder)
    notes, note_rels = {}, {}
    for kind in ("footnotes", "endnotes"):
        name = targets.get(kind, f"{folder}/{kind}.xml")
        notes[kind] = part(name)
        if notes[kind] is not None:
            note_rels[kind[:-1]] = _relationships(part(_rels_of(name)), folder)[0]
    styles_name = targets.get("styles", f"{folder}/styles.xml")
    styles = _styles(package.read(styles_name), styles_name) if package.has(styles_name) else None
    html_body = to_html(part(main), styles=styles,
                        numbering=part(targets.get("numbering", f"{folder}/numbering.xml")),
                        rels=links, footnotes=notes["footnotes"], endnotes=notes["endnotes"],
                        note_rels=note_rels)
    markdown, _ = html_to_markdown(f"<html><body>{html_body}</body></html>")
    core = part(_CORE)
    title = _core_title(core) or _first_h1(html_body)
    return {"text": markdown, "title": title, "encoding": None, "note": None}


_REL = "{http://schemas.openxmlformats.org/package/2006/relationships}Relationship"


def _main_part(rels) -> str:
    """The document part the package's relationships name (word/document.xml by default)."""
    if rels is not None:
        for rel in rels.iter(_REL):
            if rel.get("Type", "").endswith("/officeDocument") and rel.get("TargetMode") != "External":
                return posixpath.normpath(rel.get("Target", "").lstrip("/"))
    return "word/document.xml"


@functools.lru_cache(maxsize=16)
def _styles(xml: bytes, name: str) -> Styles:
    """The styles part read once per distinct content: pandoc writes the same 20 kB
    styles.xml into every file, as a template does into a company's documents, and parsing
    it was a tenth of the reader's time on pandoc's .docx.  (Styles fills its caches
    lazily; two threads filling one entry write the same value.)"""
    refuse_dtd(xml, name, _KIND)
    return Styles(parse_xml(xml, name, _KIND))


def _rels_of(name: str) -> str:
    """The relationships part of the part `name` (word/document.xml: word/_rels/document.xml.rels)."""
    folder, _, base = name.rpartition("/")
    return f"{folder + '/' if folder else ''}_rels/{base}.rels"


def _relationships(rels, folder: str) -> tuple[dict[str, str], dict[str, str]]:
    """(hyperlink id -> address, part kind -> part name inside the package).  A target is only
    ever written into an href or looked up in the zip: nothing outside the package is read."""
    links, targets = {}, {}
    if rels is None:
        return links, targets
    for rel in rels.iter(_REL):
        kind, target = rel.get("Type", "").rpartition("/")[2], rel.get("Target", "")
        if kind == "hyperlink":
            links[rel.get("Id")] = target
        elif kind in ("styles", "numbering", "footnotes", "endnotes") and rel.get("TargetMode") != "External":
            name = target.lstrip("/") if target.startswith("/") else posixpath.join(folder, target)
            targets[kind] = posixpath.normpath(name)
    return links, targets


def _core_title(core) -> str | None:
    el = core.find(f"{_DC}title") if core is not None else None
    return (text_of(el) or None) if el is not None else None


def _first_h1(body: str) -> str | None:
    found = _FIRST_H1.search(body)
    return (" ".join(html.unescape(_TAG.sub("", found.group(1))).split()) or None) if found else None
