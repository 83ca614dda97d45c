"""Zip packages of XML (Word .docx, EPUB) opened so that a hostile file costs nothing.

A .docx or .epub is a zip of XML parts, and both halves can be turned against a reader:

* A zip bomb: a 40 kB file whose member inflates to gigabytes.  The walk's
  `documents.max_bytes` test sees only the file's size on disk, so a package is measured
  again here, by what its members inflate to.  Before anything is inflated, the sizes the
  zip declares for the members a reader will use are added up and the file is refused
  (`TooLarge`, a `skipped` row naming the size and the key) when they pass the limit; then
  every read is capped as well, because a declared size is only a claim: a member that
  inflates past what it declared is a corrupt package, never a bigger read.
* XML external entities (XXE): `<!ENTITY x SYSTEM "file:///home/me/.ssh/id_rsa">` in a
  part would paste that file into the document, and a search index is shared.  Parts are
  parsed with no entity resolution, no DTD loading and no network (`parse_xml`), and
  `refuse_dtd` refuses a part that declares a DTD at all where its format never has one
  (Office Open XML does: ECMA-376 Part 2, "XML Usage", M1.18 says a package reader shall
  treat a DTD declaration as an error, against entity-expansion attacks; and M1.17 allows
  only UTF-8 and UTF-16, the encodings `refuse_dtd` looks in).

The limit is `documents.max_bytes` divided by HTML's size weight (pipekit/read/walk.py
`_SIZE_WEIGHT`): both formats are converted through the HTML path, whose tree costs ~60x
the markup, and a .docx's document tree and HTML less (Flask's docs as one .docx, 2.6 MB
of XML parts: +32 MB peak read by pipekit/read/wordml.py, +114 MB by mammoth before it;
as one .epub, 1.0 MB: +28 MB).  Images and fonts are never inflated, so they do not count.

What this module does not do: read a format (pipekit/read/docx.py, pipekit/read/epub.py),
decrypt, or repair a damaged zip (a corrupt one is an error row saying so).
"""
from __future__ import annotations

import io
import re
import zipfile
import zlib

from pipekit.read.text import Unreadable
from pipekit.read.walk import _SIZE_WEIGHT, _human

__all__ = ["Package", "TooLarge", "guarded", "inflate_limit", "parse_xml", "refuse_dtd"]


_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


class TooLarge(Unreadable):
    """A package whose parts inflate past the limit: a `skipped` row, as a file over
    `documents.max_bytes` is, not an error."""


def guarded(read, data: bytes, max_bytes: int | None, kind: str) -> dict:
    """read(data, max_bytes), any failure of the libraries beneath a one-line Unreadable:
    one odd file (a zlib error, a converter bug) must not stop the folder."""
    try:
        return read(data, max_bytes)
    except Unreadable:
        raise
    except RecursionError:
        raise Unreadable(f"{kind} nested too deeply to convert") from None
    except Exception as exc:  # noqa: BLE001
        reason = " ".join(str(exc).split())
        raise Unreadable(f"{kind} could not be converted ({type(exc).__name__}{': ' + reason if reason else ''})") from None


def inflate_limit(max_bytes: int | None) -> int | None:
    """How many inflated bytes of markup one package may hold (None: no limit)."""
    return None if max_bytes is None else max_bytes // _SIZE_WEIGHT.get("html", 1)


class Package:
    """One zip package, read member by member under one budget of inflated bytes.

    `kind` names the format in messages ("a Word document", "an EPUB book"), so an error
    reads "not a Word document: not a zip file"."""

    def __init__(self, data: bytes, kind: str, limit: int | None):
        self.kind, self.limit, self.spent = kind, limit, 0
        try:
            self.zip = zipfile.ZipFile(io.BytesIO(data))
        except zipfile.BadZipFile:
            if data.startswith(_OLE2):  # what Office writes for a password-protected file
                raise Unreadable(f"not {kind}: an OLE2 compound file, so a password-protected (encrypted) "
                                 "Office file or an old binary one (.doc) renamed") from None
            raise Unreadable(f"not {kind}: not a zip file") from None
        except (OSError, EOFError, ValueError) as exc:  # a truncated central directory
            raise Unreadable(f"not {kind}: corrupt zip ({exc})") from None
        # A name listed twice: which copy a reader takes differs between libraries, a way
        # to show a checker one text and the index another.
        self.members = {info.filename: info for info in self.zip.infolist()}

    def has(self, name: str) -> bool:
        return name in self.members

    def declared(self, names) -> int:
        return sum(self.members[n].file_size for n in names if n in self.members)

    def refuse_if_over(self, names, what: str = "its parts") -> None:
        """TooLarge, before anything is inflated, when `names` declare more than the budget left."""
        if self.limit is None:
            return
        total = self.spent + self.declared(names)
        if total > self.limit:
            raise TooLarge(_too_large(total, self.limit, what))

    def read(self, name: str) -> bytes:
        """The member's inflated bytes, never more than the budget left allows."""
        info = self.members.get(name)
        if info is None:
            raise Unreadable(f"not {self.kind}: {name} is missing from the zip")
        room = None if self.limit is None else self.limit - self.spent
        if room is not None and info.file_size > room:
            raise TooLarge(_too_large(self.spent + info.file_size, self.limit, name))
        try:
            with self.zip.open(info) as member:
                # One byte more than declared: a member that gives it lied about its size.
                data = member.read(info.file_size + 1)
        except RuntimeError as exc:  # "File is encrypted, password required"
            raise Unreadable(f"{self.kind} with encrypted parts cannot be read ({exc})") from None
        except NotImplementedError as exc:  # a compression method zipfile lacks
            raise Unreadable(f"not {self.kind}: {exc}") from None
        except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, OSError, EOFError, ValueError) as exc:
            raise Unreadable(f"not {self.kind}: corrupt zip member {name} ({exc})") from None
        if len(data) > info.file_size:
            raise Unreadable(f"not {self.kind}: zip member {name} inflates past the "
                             f"{info.file_size:,} bytes it declares (a zip bomb?): not read")
        self.spent += len(data)
        return data


def _too_large(total: int, limit: int, what: str) -> str:
    weight = _SIZE_WEIGHT.get("html", 1)
    return (f"{what} would inflate to {_human(total)} ({total:,} bytes), larger than "
            f"documents.max_bytes / {weight} ({_human(limit)}; its markup is converted as HTML, "
            f"~{8 * weight}x its size in memory): not read; raise documents.max_bytes to read it")


# A DTD declaration in the three encodings an XML part can have without one (UTF-8 and
# its ASCII-compatible kin, UTF-16 either way round).  Entities need a DTD to be declared.
_DOCTYPE = tuple("<!DOCTYPE".encode(codec) for codec in ("ascii", "utf-16-le", "utf-16-be"))


def refuse_dtd(data: bytes, name: str, kind: str) -> None:
    """Unreadable when an XML part declares a DTD (for formats that never have one)."""
    if any(marker in data for marker in _DOCTYPE):
        raise Unreadable(f"not {kind}: {name} declares a DTD (<!DOCTYPE), which this format never has; "
                         "refused, as its entities could read other files")


def parse_xml(data: bytes, name: str, kind: str):
    """A part's element tree: entities left unresolved, no DTD loaded, nothing fetched."""
    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, load_dtd=False, no_network=True,
                             dtd_validation=False, huge_tree=False, remove_comments=True)
    try:
        return etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        raise Unreadable(f"not {kind}: {name} is not well-formed XML ({exc})") from None


def text_of(el) -> str:
    """An element's text with whitespace runs made single spaces; entity references
    (left unresolved by `parse_xml`) are not text and are left out."""
    from lxml import etree

    parts = []
    for node in el.iter():
        if isinstance(node, etree._Entity):
            parts.append(node.tail or "")
            continue
        if node is not el and not isinstance(node.tag, str):
            continue
        parts.append(node.text or "")
        if node is not el:
            parts.append(node.tail or "")
    return " ".join("".join(parts).split())


_XML_ENCODING = re.compile(rb"""^\s*<\?xml[^>]*encoding\s*=\s*["']([A-Za-z0-9._:-]+)["']""")


def declared_encoding(data: bytes) -> str | None:
    """The encoding an XML declaration names, if it names one."""
    found = _XML_ENCODING.match(data[:200])
    return found.group(1).decode("ascii") if found else None
