"""Word's document XML (WordprocessingML) read with lxml straight into HTML for the HTML path.

pipekit/read/docx.py opens the package (zip bombs and DTDs refused) and hands this module
the XML parts; `to_html` returns the document as HTML that pipekit/read/html_markdown.py
turns into Markdown, as it does a web page.  It replaces mammoth (docx -> HTML), which
took 5 s per MB of .docx on pandoc's renderings of Flask's and Click's docs, most of it
building its own document model in Python; this walk writes HTML as it reads the tree
(bench/formats_office.py has both, same counts).

What it reads, each as mammoth did unless said:

* Headings: a paragraph whose style is named "Heading N" (any case; 7-9 become h6:
  Markdown has six levels; a style styles.xml does not define is known by its id,
  "Heading1") or "Title" (h1); and, beyond mammoth, a paragraph in any other style with
  an outline level (w:outlineLvl 0-8, on the paragraph or its style or a style it is
  based on): a company's custom "Chapter" style is a heading to Word's navigation pane,
  so it is one to us.  Level 9 is Word's "body text".
* Lists: a paragraph with numbering (w:numPr on the paragraph, on its style or a style it
  is based on, or a numbering level that names the style) is a list item at its level
  (w:ilvl); the level's number format chooses <ol> or <ul> (bullet); deeper levels nest
  inside the item before them, a change of kind at one level starts a new list, and a
  paragraph without numbering ends them all; levels skipped open as empty items, so an
  item keeps its depth.  numId 0 is Word's "numbering removed".
* Tables: rows and cells (w:gridSpan as colspan, a vertical merge as one cell with rowspan,
  header rows (w:tblHeader) as <th>); a cell's paragraphs, lists and tables as anywhere.
* Code: one <pre> per run of paragraphs styled "Source Code" (pandoc), "HTML Preformatted",
  "Plain Text", "Macro Text" or "Code"; runs styled "Verbatim Char" or "HTML Code" as <code>.
* Links: w:hyperlink with a relationship id (its target from the relationships of the
  part that holds it: the document's, or the notes') or an anchor (`#name`, which the
  HTML path makes text), and HYPERLINK fields (simple and complex, as Word writes a table
  of contents).  A field's instruction is never text; its result is.
* Footnotes and endnotes: the reference as `[n]` where it stands, the notes in order of
  reference as a numbered list at the end, as mammoth writes them (without its back-link).
* Runs: bold (and the "Strong" character style), italic, strikethrough, superscript,
  subscript; tabs, line breaks; images as their description (alt text), never inflated;
  tracked changes as accepted (insertions kept, deletions and moved-from text left out);
  content controls (w:sdt), smart tags, custom XML and mc:AlternateContent's fallback
  read through.  A field other than a hyperlink is its result, the text Word shows.

Not read: text boxes and shapes' text, headers and footers, comments, symbols (w:sym),
other run formatting inherited from character styles, list numbers' actual values (the
HTML path numbers an <ol> from 1), math (OMML), "Strict Open XML" files (another
namespace, rare: their text is not found and the document reads empty).  No part outside
the package is ever opened: a relationship's target is only written into an href, and
an image linked rather than embedded is not fetched (only its alt text is used).
"""
from __future__ import annotations

import functools
import re
from html import escape

__all__ = ["Styles", "to_html"]

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_R_ID = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
_MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"
_WP = "{http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing}"
_V = "{urn:schemas-microsoft-com:vml}"
_O = "{urn:schemas-microsoft-com:office:office}"
_VAL = W + "val"

_P, _R, _T, _TBL, _TR, _TC = W + "p", W + "r", W + "t", W + "tbl", W + "tr", W + "tc"
_PPR, _RPR = W + "pPr", W + "rPr"
_PSTYLE, _NUMPR, _OUTLINE = W + "pStyle", W + "numPr", W + "outlineLvl"
_TAB = W + "tab"
_BR = W + "br"
_CR = W + "cr"
_NBH = W + "noBreakHyphen"
_FLDCHAR = W + "fldChar"
_INSTR = W + "instrText"
_FNREF = W + "footnoteReference"
_ENREF = W + "endnoteReference"
_DRAWING = W + "drawing"
_PICT = W + "pict"
_HLINK = W + "hyperlink"
_FLDSIMPLE = W + "fldSimple"
_SDT = W + "sdt"
_SDTCONTENT = W + "sdtContent"
_RSTYLE = W + "rStyle"
_B = W + "b"
_I = W + "i"
_STRIKE = W + "strike"
_VALIGN = W + "vertAlign"
_OFF = frozenset(("0", "false", "off", "none"))
_CODE_STYLES = frozenset(("source code", "html preformatted", "plain text", "macro text", "code"))
_CODE_RUNS = frozenset(("verbatim char", "html code"))
_HEADING = re.compile(r"heading ?([1-9])\Z")
_HYPERLINK = re.compile(r'HYPERLINK\s+(?:(\\l)\s+)?"?([^"\s]*)"?(?:\s+\\l\s+"([^"]*)")?')

# Elements read through as if their children stood in their place.
_TRANSPARENT = frozenset((W + "ins", W + "moveTo", W + "smartTag", W + "customXml", W + "dir", W + "bdo"))
_SKIP = frozenset((W + "del", W + "moveFrom", W + "proofErr", W + "bookmarkStart", W + "bookmarkEnd",
                   W + "commentRangeStart", W + "commentRangeEnd", W + "permStart", W + "permEnd"))


def _on(el) -> bool:
    """A toggle property (w:b, w:i ...) present and not switched off."""
    return el is not None and el.get(_VAL, "true").lower() not in _OFF


class Styles:
    """Style names, outline levels and numbering of paragraph styles, basedOn followed.
    Read lazily: pandoc's styles.xml defines ~90 styles, a document uses a few."""

    def __init__(self, styles):
        self.element = {} if styles is None else {
            s.get(W + "styleId"): s for s in styles.iterchildren(W + "style")}
        self._name: dict[str, str] = {}
        self._inherited: dict[tuple[str, str], object] = {}

    def name(self, sid: str | None) -> str:
        """The style's name, lower case ("" for no style or an undefined one)."""
        if sid is None:
            return ""
        found = self._name.get(sid)
        if found is None:
            el = self.element.get(sid)
            name = el.find(W + "name") if el is not None else None
            # A style styles.xml does not define (or a package without styles.xml) is known
            # by its id, as mammoth's default map knew "Heading1": writers that skip the
            # styles part still write Word's ids.
            found = self._name[sid] = (name.get(_VAL, "") if name is not None else sid).lower()
        return found

    def inherited(self, sid: str, prop: str):
        """The w:pPr child `prop` a style or the nearest style it is based on sets (loops cut)."""
        key = (sid, prop)
        if key not in self._inherited:
            self._inherited[key] = self._lookup(sid, prop)
        return self._inherited[key]

    def _lookup(self, sid: str, prop: str):
        seen = set()
        while sid is not None and sid not in seen:
            el = self.element.get(sid)
            if el is None:
                return None
            found = el.find(f"{_PPR}/{W}{prop}")
            if found is not None:
                return found
            seen.add(sid)
            based = el.find(W + "basedOn")
            sid = based.get(_VAL) if based is not None else None
        return None


class _Numbering:
    """numId -> level -> ordered?, and the levels that name a paragraph style."""

    def __init__(self, numbering):
        self.ordered: dict[tuple[str, int], bool] = {}
        self.by_style: dict[str, tuple[str, int]] = {}
        if numbering is None:
            return
        abstract: dict[str, dict[int, bool]] = {}
        style_of: dict[str, list[tuple[str, int]]] = {}
        for a in numbering.iter(W + "abstractNum"):
            aid, levels = a.get(W + "abstractNumId"), {}
            for lvl in a.iter(W + "lvl"):
                ilvl = int(lvl.get(W + "ilvl", "0") or 0)
                fmt = lvl.find(W + "numFmt")
                levels[ilvl] = (fmt.get(_VAL) if fmt is not None else "decimal") not in ("bullet", "none")
                pstyle = lvl.find(W + "pStyle")
                if pstyle is not None and pstyle.get(_VAL):
                    style_of.setdefault(aid, []).append((pstyle.get(_VAL), ilvl))
            abstract[aid] = levels
        for num in numbering.iter(W + "num"):
            nid, aid = num.get(W + "numId"), num.find(W + "abstractNumId")
            levels = dict(abstract.get(aid.get(_VAL) if aid is not None else None, {}))
            for over in num.iter(W + "lvlOverride"):
                lvl = over.find(W + "lvl")
                fmt = lvl.find(W + "numFmt") if lvl is not None else None
                if fmt is not None:
                    levels[int(over.get(W + "ilvl", "0") or 0)] = fmt.get(_VAL) not in ("bullet", "none")
            for ilvl, ordered in levels.items():
                self.ordered[(nid, ilvl)] = ordered
            for style, ilvl in style_of.get(aid.get(_VAL) if aid is not None else None, ()):
                self.by_style.setdefault(style, (nid, ilvl))


class _Writer:
    def __init__(self, styles, numbering, rels: dict[str, str], notes: dict[str, dict], note_rels: dict):
        self.styles, self.numbering, self.rels, self.notes = styles, numbering, rels, notes
        self.note_rels = note_rels
        self.note_order: list[tuple[str, str]] = []  # (kind, id) in order of reference
        self.field_stack: list[list] = []  # complex fields: [instruction, href or None, in result]

    # ----------------------------------------------------------------- blocks

    def blocks(self, parent, out: list) -> None:
        """A body, cell or note: its paragraphs as <p>/<hN>/<pre>/lists, its tables."""
        lists: list[tuple[int, str]] = []  # open lists: (level, "ul"|"ol"), each with an open <li>
        pre: list[str] | None = None
        for el in self._block_elements(parent):
            if el.tag == _TBL:
                self._close(lists, 0, out)
                pre = self._flush(pre, out)
                self.table(el, out)
                continue
            kind, level, text = self.paragraph(el)
            if kind == "pre":
                self._close(lists, 0, out)
                if pre is None:
                    pre = []
                pre.append(text)
                continue
            pre = self._flush(pre, out)
            if kind == "li":
                self._item(lists, level[0], level[1], text, out)
                continue
            self._close(lists, 0, out)
            if text.strip():  # Word's empty paragraphs are spacing, not content
                out.append(f"<{kind}>{text}</{kind}>")
        self._close(lists, 0, out)
        self._flush(pre, out)

    def _block_elements(self, parent):
        for el in parent:
            tag = el.tag
            if tag == _P or tag == _TBL:
                yield el
            elif tag == _SDT:
                content = el.find(_SDTCONTENT)
                if content is not None:
                    yield from self._block_elements(content)
            elif tag in _TRANSPARENT:
                yield from self._block_elements(el)
            elif tag == _MC + "AlternateContent":
                fallback = el.find(_MC + "Fallback")
                if fallback is not None:
                    yield from self._block_elements(fallback)

    @staticmethod
    def _flush(pre, out):
        if pre is not None:
            out.append("<pre>" + "\n".join(pre) + "</pre>")
        return None

    @staticmethod
    def _close(lists, keep: int, out) -> None:
        while len(lists) > keep:
            out.append(f"</li></{lists.pop()[1]}>")

    def _item(self, lists, level: int, tag: str, text: str, out) -> None:
        # Close lists deeper than this item; a different kind at its own level starts anew.
        while lists and (lists[-1][0] > level or (lists[-1][0] == level and lists[-1][1] != tag)):
            out.append(f"</li></{lists.pop()[1]}>")
        if lists and lists[-1][0] == level:
            out.append(f"</li><li>{text}")
        else:  # deeper than the open item (or the first): a list inside it
            # Levels skipped (an item at level 1 right after a code block closed the list
            # its parent was in) are opened as empty bulleted items, as mammoth did, so the
            # item keeps its depth: "- - Windows" under Flask's "Create a virtualenv".
            for missing in range(lists[-1][0] + 1 if lists else 0, level):
                lists.append((missing, "ul"))
                out.append("<ul><li>")
            lists.append((level, tag))
            out.append(f"<{tag}><li>{text}")

    def table(self, tbl, out: list) -> None:
        rows = [tr for tr in self._rows(tbl)]
        grid = []  # per row: [(tc, colspan, vmerge)] with vmerge None / "restart" / "continue"
        for tr in rows:
            cells = []
            for tc in self._cells(tr):
                tcpr = tc.find(W + "tcPr")
                span, vmerge = 1, None
                if tcpr is not None:
                    gs = tcpr.find(W + "gridSpan")
                    if gs is not None and (gs.get(_VAL) or "").isdigit():
                        span = max(1, int(gs.get(_VAL)))
                    vm = tcpr.find(W + "vMerge")
                    if vm is not None:
                        vmerge = "restart" if vm.get(_VAL) == "restart" else "continue"
                cells.append((tc, span, vmerge))
            grid.append(cells)
        # A vertically merged cell is one cell spanning rows: count the rows that continue it
        # in the same grid column.
        columns = [self._columns(cells) for cells in grid]
        out.append("<table>")
        for r, (tr, cells) in enumerate(zip(rows, grid)):
            trpr = tr.find(W + "trPr")
            head = trpr is not None and _on(trpr.find(W + "tblHeader"))
            cell_tag = "th" if head else "td"
            out.append("<tr>")
            for (tc, span, vmerge), col in zip(cells, columns[r]):
                if vmerge == "continue":
                    continue
                attrs = f' colspan="{span}"' if span > 1 else ""
                if vmerge == "restart":
                    down = 1
                    for later in columns[r + 1:]:
                        if later.get(col) != "continue":
                            break
                        down += 1
                    if down > 1:
                        attrs += f' rowspan="{down}"'
                inner: list[str] = []
                self.blocks(tc, inner)
                out.append(f"<{cell_tag}{attrs}>{''.join(inner)}</{cell_tag}>")
            out.append("</tr>")
        out.append("</table>")

    @staticmethod
    def _columns(cells):
        """Each cell's starting grid column, and the vMerge state by column (for the rows above)."""
        starts, col = [], 0
        by_col = {}
        for _, span, vmerge in cells:
            starts.append(col)
            by_col[col] = vmerge
            col += span
        return _ColumnMap(starts, by_col)

    def _rows(self, tbl):
        return self._within(tbl, _TR)

    def _cells(self, tr):
        return self._within(tr, _TC)

    def _within(self, el, tag):
        """The `tag` children of el, also those a content control (w:sdt) or another
        transparent wrapper holds: Word nests rows and cells in them."""
        for child in el:
            if child.tag == tag:
                yield child
            elif child.tag == _SDT or child.tag in _TRANSPARENT:
                inner = child.find(_SDTCONTENT) if child.tag == _SDT else child
                if inner is not None:
                    yield from self._within(inner, tag)

    # ----------------------------------------------------------------- paragraphs

    def paragraph(self, p):
        """(kind, (level, list tag) for an item, inner HTML) of one w:p."""
        sid = numpr = outline = None
        first = p[0] if len(p) else None
        # pPr is the first child when present; its children read in one pass (find() goes
        # through ElementPath, a few microseconds a call, on every paragraph).
        if first is not None and first.tag == _PPR:
            for c in first:
                t = c.tag
                if t == _PSTYLE:
                    sid = c.get(_VAL)
                elif t == _NUMPR:
                    numpr = c
                elif t == _OUTLINE:
                    v = c.get(_VAL) or ""
                    outline = int(v) if v.isdigit() else None
        name = self.styles.name(sid)
        if name in _CODE_STYLES:
            return "pre", None, self.inline(p, plain=True)
        text = self.inline(p)
        found = _HEADING.match(name)
        if found:
            return f"h{min(int(found.group(1)), 6)}", None, text
        if name == "title":
            return "h1", None, text
        item = self._numbering(numpr, sid)
        if item is not None:
            return "li", item, text
        if outline is None and sid is not None:
            ol = self.styles.inherited(sid, "outlineLvl")
            outline = int(ol.get(_VAL)) if ol is not None and (ol.get(_VAL) or "").isdigit() else None
        if outline is not None and outline < 9:
            return f"h{min(outline + 1, 6)}", None, text
        return "p", None, text

    def _numbering(self, numpr, sid):
        num_id = ilvl = None
        if numpr is not None:
            n, i = numpr.find(W + "numId"), numpr.find(W + "ilvl")
            num_id = n.get(_VAL) if n is not None else None
            ilvl = i.get(_VAL) if i is not None else None
        if num_id is None and sid is not None:
            inherited = self.styles.inherited(sid, "numPr")
            if inherited is not None:
                n, i = inherited.find(W + "numId"), inherited.find(W + "ilvl")
                num_id = n.get(_VAL) if n is not None else None
                ilvl = ilvl if ilvl is not None else (i.get(_VAL) if i is not None else None)
            elif sid in self.numbering.by_style:
                num_id, level = self.numbering.by_style[sid]
                ilvl = ilvl if ilvl is not None else str(level)
        if num_id is None or num_id == "0":
            return None
        level = int(ilvl) if ilvl and ilvl.isdigit() else 0
        ordered = self.numbering.ordered.get((num_id, level))
        if ordered is None:
            # A numId numbering.xml does not define: mammoth made it no list; a paragraph
            # Word shows without a number is not an item.
            return None
        return level, "ol" if ordered else "ul"

    # ----------------------------------------------------------------- runs

    def inline(self, parent, plain: bool = False) -> str:
        """A paragraph's runs as HTML.  Each piece carries the tags around it, outermost
        first (link, code, bold, italic, super/subscript, strike: mammoth's nesting), and
        adjacent pieces share the tags they have in common, so bold across three runs is
        one <strong> (`**a****b**` never) and a link around code and text is one link."""
        pieces: list[tuple[tuple, str]] = []
        self._runs(parent, pieces, None, plain)
        out, open_ = [], ()
        for tags, text in pieces:
            if tags != open_:
                k, n = 0, min(len(tags), len(open_))
                while k < n and tags[k] == open_[k]:
                    k += 1
                out.extend(_close(t) for t in reversed(open_[k:]))
                out.extend(tags[k:])
                open_ = tags
            out.append(text)
        out.extend(_close(t) for t in reversed(open_))
        return "".join(out)

    def _runs(self, parent, pieces, href, plain) -> None:
        for el in parent:
            tag = el.tag
            if tag == _R:
                self._run(el, pieces, href, plain)
            elif tag == _HLINK:
                rid, anchor = el.get(_R_ID), el.get(W + "anchor")
                link = self.rels.get(rid) if rid else None
                if link is None and anchor:
                    link = "#" + anchor
                elif link is not None and anchor:
                    link += "#" + anchor
                self._runs(el, pieces, link if link is not None else href, plain)
            elif tag == _FLDSIMPLE:
                found = _HYPERLINK.search(el.get(W + "instr", ""))
                self._runs(el, pieces, _field_href(found) if found else href, plain)
            elif tag in _TRANSPARENT:
                self._runs(el, pieces, href, plain)
            elif tag == _SDT:
                content = el.find(_SDTCONTENT)
                if content is not None:
                    self._runs(content, pieces, href, plain)
            elif tag == _MC + "AlternateContent":
                fallback = el.find(_MC + "Fallback")
                if fallback is not None:
                    self._runs(fallback, pieces, href, plain)

    def _run(self, r, pieces, href, plain) -> None:
        # Per run, not per piece: a run's format and link (a field's, when one is open).
        fmt = ()
        link = self._href(href) if self.field_stack else href
        tags = (_link_tag(link),) if link else ()
        for child in r:
            tag = child.tag
            if tag == _T:
                text = child.text
                # Text between a field's begin and separate is shown too: Word keeps the
                # instruction in w:instrText, and a field never closed (a damaged file)
                # must not hide the rest of the document.
                if text:
                    if "&" in text or "<" in text or ">" in text:
                        text = escape(text, quote=False)
                    pieces.append((tags, text))
            elif tag == _RPR:
                if not plain:
                    fmt = self._format(child)
                    tags = ((_link_tag(link),) if link else ()) + fmt
            elif tag == _TAB:
                pieces.append((tags, "\t"))
            elif tag == _BR or tag == _CR:
                if child.get(W + "type") not in ("page", "column"):
                    pieces.append((tags, "\n" if plain else "<br>"))
            elif tag == _NBH:
                pieces.append((tags, "-"))
            elif tag == _FLDCHAR:
                self._field_char(child.get(W + "fldCharType"))
                link = self._href(href) if self.field_stack else href
                tags = ((_link_tag(link),) if link else ()) + fmt
            elif tag == _INSTR:
                if self.field_stack and not self.field_stack[-1][2]:
                    self.field_stack[-1][0] += child.text or ""
            elif tag == _FNREF or tag == _ENREF:
                kind = "footnote" if tag == _FNREF else "endnote"
                self.note_order.append((kind, child.get(W + "id")))
                pieces.append(((), f"<sup>[{len(self.note_order)}]</sup>"))
            elif tag == _DRAWING or tag == _PICT:
                alt = _alt_text(child)
                if alt:
                    pieces.append((tags, f'<img alt="{escape(alt)}">'))
            elif tag == _MC + "AlternateContent":
                fallback = child.find(_MC + "Fallback")
                if fallback is not None:
                    self._run(fallback, pieces, href, plain)

    def _format(self, rpr) -> tuple:
        code = bold = italic = strike = False
        valign = None
        for c in rpr:
            t = c.tag
            if t == _RSTYLE:
                style = self.styles.name(c.get(_VAL))
                code = style in _CODE_RUNS
                bold = bold or style == "strong"  # Word's "Strong" character style, as mammoth
            elif t == _B:
                bold = _on(c)
            elif t == _I:
                italic = _on(c)
            elif t == _STRIKE:
                strike = _on(c)
            elif t == _VALIGN:
                valign = c.get(_VAL)
        return _FORMATS[code, bold, italic, strike, valign if valign in ("superscript", "subscript") else None]

    def _field_char(self, kind) -> None:
        if kind == "begin":
            self.field_stack.append(["", None, False])
        elif kind == "separate" and self.field_stack:
            field = self.field_stack[-1]
            found = _HYPERLINK.search(field[0])
            field[1], field[2] = (_field_href(found) if found else None), True
        elif kind == "end" and self.field_stack:
            self.field_stack.pop()

    def _href(self, href):
        for field in reversed(self.field_stack):
            if field[1] is not None:
                return field[1]
        return href

    def footnotes(self, out: list) -> None:
        if not self.note_order:
            return
        items = []
        done = 0
        # A note's own text may reference further notes: read until none is new.
        while done < len(self.note_order):
            kind, nid = self.note_order[done]
            done += 1
            note = self.notes.get(kind, {}).get(nid)
            # A note's links are in its own part's relationships, not the document's.
            self.rels = self.note_rels.get(kind, {})
            if note is None:
                items.append("<li></li>")
                continue
            inner: list[str] = []
            self.blocks(note, inner)
            items.append(f"<li>{''.join(inner)}</li>")
        out.append("<ol>" + "".join(items) + "</ol>")


class _ColumnMap:
    """A row's cells' starting grid columns (iterated) and vMerge state by column (`get`)."""

    def __init__(self, starts, by_col):
        self.starts, self.by_col = starts, by_col

    def __iter__(self):
        return iter(self.starts)

    def get(self, col):
        return self.by_col.get(col)


def _field_href(found) -> str | None:
    if found.group(1):  # HYPERLINK \l "anchor"
        return "#" + found.group(2)
    href = found.group(2)
    return href + ("#" + found.group(3) if found.group(3) else "") if href else None


def _alt_text(el) -> str:
    for doc_pr in el.iter(_WP + "docPr"):
        return (doc_pr.get("descr") or doc_pr.get("title") or "").strip()
    for data in el.iter(_V + "imagedata"):
        return (data.get(_O + "title") or "").strip()
    return ""


def _formats() -> dict:
    """Every run format (code, bold, italic, strike, vertical alignment) as its tags, outermost first."""
    table = {}
    for code in (False, True):
        for bold in (False, True):
            for italic in (False, True):
                for strike in (False, True):
                    for valign in (None, "superscript", "subscript"):
                        tags = (("<code>",) if code else ()) + (("<strong>",) if bold else ()) \
                            + (("<em>",) if italic else ()) \
                            + ({"superscript": ("<sup>",), "subscript": ("<sub>",)}.get(valign, ())) \
                            + (("<s>",) if strike else ())
                        table[code, bold, italic, strike, valign] = tags
    return table


_FORMATS = _formats()


@functools.lru_cache(maxsize=4096)
def _link_tag(href: str) -> str:
    return f'<a href="{escape(href)}">'


def _close(tag: str) -> str:
    return "</a>" if tag.startswith("<a ") else "</" + tag[1:]


def to_html(document, styles=None, numbering=None, rels: dict[str, str] | None = None,
            footnotes=None, endnotes=None, note_rels: dict[str, dict[str, str]] | None = None) -> str:
    """The body of word/document.xml as HTML.  Each argument is a parsed part (lxml element)
    or None when the package lacks it (`styles` may also be a `Styles` already read);
    `rels` maps the document's relationship ids to hyperlink targets, `note_rels` the same
    for "footnote" and "endnote" parts."""
    notes = {"footnote": _notes(footnotes, "footnote"), "endnote": _notes(endnotes, "endnote")}
    styles = styles if isinstance(styles, Styles) else Styles(styles)
    writer = _Writer(styles, _Numbering(numbering), rels or {}, notes, note_rels or {})
    body = document.find(W + "body")
    out: list[str] = []
    if body is not None:
        writer.blocks(body, out)
    writer.footnotes(out)
    return "".join(out)


def _notes(part, kind: str) -> dict:
    if part is None:
        return {}
    # Separator notes (w:type="separator" ...) are Word's rule lines, not notes.
    return {n.get(W + "id"): n for n in part.iter(W + kind) if n.get(W + "type") in (None, "normal")}
