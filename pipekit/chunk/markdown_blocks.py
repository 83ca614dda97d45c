"""The CommonMark block structure of a Markdown text, found by scanning its lines.

Stage 03 cuts Markdown between blocks and opens a section at each heading, so it needs
to know, for every line, which top-level block it belongs to: ATX and setext headings,
fenced and indented code, block quotes, list items, raw HTML blocks, GFM tables,
thematic breaks, paragraphs; plus the YAML front matter at the very top and the
`--- page N ---` marker lines stages 01 and 02 write between pages.

`scan_blocks(lines, first, markers)` answers that as a list of top-level blocks
`[kind, first_line, end_line, info]` (end exclusive; a heading's info is
`(level, title)`, title None for setext, whose title is the paragraph lines above the
underline; a closed fence's info is "closed") and the list of page-marker lines.

Why a scanner and not markdown-it-py: its block parser is ~30x slower, and chunking
needs only where top-level blocks start and end.  markdown-it-py stays the referee:
tests/test_03_properties.py checks on generated documents that both find the same
blocks, and tests/test_markdown_blocks.py pins the cases that once differed.

Deliberately not here: inline syntax (a heading's title is cleaned elsewhere), link
reference definitions (they never start a block a chunker could cut at), and nesting
below the top level beyond what decides where a top-level block ends.
"""
from __future__ import annotations

import re

__all__ = ["scan_blocks", "norm", "FENCE_OPEN", "MARKER"]

# `--- page N ---` on its own line: stage 01 writes it before every PDF page, stage 02
# makes it from form feeds.  It is not Markdown (markdown-it reads it as a paragraph line).
_MARKER = re.compile(r"--- page (\d+) ---[ \t]*")
# ATX: 1-6 `#` then a space, tab or the line end — `#include` or `#hashtag` is not a heading.
_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_ATX_CLOSE = re.compile(r"(?:^|[ \t]+)#+$")
_FENCE_OPEN = re.compile(r"( {0,3})(`{3,}|~{3,})(.*)$")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*$")
_HR = re.compile(r" {0,3}([-*_])[ \t]*(?:\1[ \t]*){2,}$")
_LIST = re.compile(r" {0,3}(?:([-+*])|(\d{1,9})[.)])(?=[ \t]|$)")
_DELIM_ROW = re.compile(r" {0,3}[-:|][-:| \t]*$")
_DELIM_CELL = re.compile(r":?-+:?")

_HTML_BLOCK_NAMES = (
    "address|article|aside|base|basefont|blockquote|body|caption|center|col|colgroup|dd|"
    "details|dialog|dir|div|dl|dt|fieldset|figcaption|figure|footer|form|frame|frameset|"
    "h1|h2|h3|h4|h5|h6|head|header|hr|html|iframe|legend|li|link|main|menu|menuitem|nav|"
    "noframes|ol|optgroup|option|p|param|search|section|summary|table|tbody|td|tfoot|th|"
    "thead|title|tr|track|ul")
_ATTR = (r"(?:\s+[a-zA-Z_:][a-zA-Z0-9:._-]*(?:\s*=\s*(?:[^\"'=<>`\x00-\x20]+|'[^']*'|\"[^\"]*\"))?)")
# (start, end-of-block pattern or None for "ends at a blank line", can interrupt a paragraph)
_HTML_STARTS = (
    (re.compile(r"<(?:script|pre|style|textarea)(?=\s|>|$)", re.I),
     re.compile(r"</(?:script|pre|style|textarea)>", re.I), True),
    (re.compile(r"<!--"), re.compile(r"-->"), True),
    (re.compile(r"<\?"), re.compile(r"\?>"), True),
    (re.compile(r"<![A-Za-z]"), re.compile(r">"), True),
    (re.compile(r"<!\[CDATA\["), re.compile(r"\]\]>"), True),
    (re.compile(r"</?(?:" + _HTML_BLOCK_NAMES + r")(?=\s|/?>|$)", re.I), None, True),
    (re.compile(r"(?:<[A-Za-z][A-Za-z0-9-]*" + _ATTR + r"*\s*/?>|</[A-Za-z][A-Za-z0-9-]*\s*>)\s*$"),
     None, False),
)

# First characters after which a line might start a block.  Every other line is plain
# paragraph text: the scanner's fast path, which is most lines of real Markdown.
_SPECIAL_FIRST = frozenset(" \t\r#`~><=-*_+0123456789|:")
_PARA_BREAKERS = frozenset("\t\r#`~><=-*_+01")
_LAZY_BREAKERS = frozenset("\t\r#`~><=-*_+0123456789")

PARA, FENCE, CODE, HTML, TABLE = range(5)
_MAX_NESTING = 20  # markdown-it's own limit (options.maxNesting in the commonmark preset)


def _indent(s: str) -> int:
    return len(s) - len(s.lstrip(" "))


def _html_start(s: str):
    for start, end, interrupts in _HTML_STARTS:
        if start.match(s):
            return end, interrupts
    return None


def _table_cells(row: str) -> int:
    """Cells of a table row as markdown-it counts them (escaped `\\|` is not a divider)."""
    cells = re.split(r"(?<!\\)\|", row.strip(" \t"))
    if cells and cells[0].strip() == "":
        cells.pop(0)
    if cells and cells[-1].strip() == "":
        cells.pop()
    return len(cells)


def _table_start(header: str, delim: str) -> bool:
    """A GFM table starts where a line with `|` is followed by a delimiter row with the same
    number of cells (markdown-it's rule, which is also why `| A |` over `---` is a table)."""
    if _indent(header) >= 4 or not _DELIM_ROW.match(delim):
        return False
    d = delim.strip(" \t")
    if len(d) < 2 or (d[0] == "-" and d[1] in " \t"):  # `- x` is a list item, not a delimiter
        return False
    parts = d.split("|")
    n = 0
    for k, part in enumerate(parts):
        part = part.strip(" \t")
        if not part:
            if k in (0, len(parts) - 1):
                continue
            return False
        if not _DELIM_CELL.fullmatch(part):
            return False
        n += 1
    return n > 0 and n == _table_cells(header)


def _interrupts(s: str) -> bool:
    """Does line `s` start a block that ends a lazy continuation (markdown-it's terminator
    list for block quotes and lists: fence, quote, rule, list item, HTML 1-6, ATX)?"""
    ind = _indent(s)
    if ind >= 4:
        return False
    c = s[ind]
    if c == "#":
        return _ATX.match(s) is not None
    if c in "`~":
        m = _FENCE_OPEN.match(s)
        return m is not None and not (m.group(2)[0] == "`" and "`" in m.group(3))
    if c == ">":
        return True
    if c == "<":
        h = _html_start(s[ind:])
        return h is not None and h[1]
    if c in "-*_" and _HR.match(s):
        return True
    return (c in "-*+" or "0" <= c <= "9") and _LIST.match(s) is not None


class _Scanner:
    """CommonMark block structure at one nesting level, fed one line at a time.

    The top level (out is a list) records its blocks as [kind, first_line, end_line, info];
    nested levels (inside a list item) only keep state, because only top-level blocks
    become chunk units — but a nested open paragraph decides whether an unindented line
    is a lazy continuation of the item or ends it.
    """

    __slots__ = ("leaf", "fence_char", "fence_len", "html_end", "child_kind", "child",
                 "child_indent", "item_empty", "quote_empty", "out", "cur", "depth")

    def __init__(self, out: list | None = None, depth: int = 0):
        self.depth = depth
        self.leaf = None
        self.fence_char = ""
        self.fence_len = 0
        self.html_end = None
        self.child_kind = None  # "quote" or "item"
        self.child: _Scanner | None = None
        self.child_indent = 0
        self.item_empty = False
        self.quote_empty = False
        self.out = out
        self.cur = None

    # -- recording (top level only) --
    def _open(self, kind: str, i: int, info=None) -> None:
        if self.out is not None:
            self.cur = [kind, i, i + 1, info]
            self.out.append(self.cur)

    def _extend(self, i: int) -> None:
        if self.cur is not None:
            self.cur[2] = i + 1

    def _single(self, kind: str, i: int, info=None) -> None:
        self.leaf = None
        self._open(kind, i, info)
        self.cur = None

    def _leaf(self, leaf: int, kind: str, i: int) -> None:
        self.leaf = leaf
        self._open(kind, i)

    def lazy_ok(self) -> bool:
        """Would an unindented plain line continue this level's innermost paragraph?"""
        if self.child_kind == "item":
            return self.child.lazy_ok()
        if self.child_kind == "quote":
            return not self.quote_empty and self.child.lazy_ok()
        return self.leaf == PARA

    def close(self) -> None:
        self.child_kind = self.child = None
        self.leaf = None
        self.cur = None

    def blank(self, i: int) -> None:
        kind = self.child_kind
        if kind == "item":
            if not self.item_empty:
                self.child.blank(i)
                return
            # An item that starts with an empty line and is followed by another ends there.
            self.close()
            return
        if kind == "quote":  # a blank line ends a block quote (`>` alone does not)
            self.close()
            return
        leaf = self.leaf
        if leaf == FENCE or leaf == CODE or (leaf == HTML and self.html_end is not None):
            return  # these continue across blank lines; the span ends at their last non-blank line
        self.leaf = None
        self.cur = None

    def _quote_line(self, s: str, ind: int, i: int) -> None:
        rest = s[ind + 1:]
        if rest[:1] == " ":
            rest = rest[1:]
        self.quote_empty = rest.strip(" \t") == ""
        if self.quote_empty:
            self.child.blank(i)
        else:
            self.child.feed(rest, i, None)

    def feed(self, s: str, i: int, nxt: str | None) -> None:
        """One non-blank line `s` (tabs expanded, no line end); `nxt` is the next line when
        a table could start here (only looked at for lines containing `|`)."""
        if self.depth >= _MAX_NESTING:
            # markdown-it stops looking inside containers nested this deep, and so do we:
            # without a limit `> > > ...` recursed past Python's stack and deep lists went quadratic.
            self.leaf = PARA
            return
        kind = self.child_kind
        if kind is not None:
            ind = _indent(s)
            if kind == "item":
                w = self.child_indent
                if ind >= w:
                    self.item_empty = False
                    self.child.feed(s[w:], i, None)
                    self._extend(i)
                    return
                if not self.item_empty and self.child.lazy_ok() and not _interrupts(s):
                    self._extend(i)
                    return
            else:
                if ind < 4 and s[ind] == ">":
                    self._quote_line(s, ind, i)
                    self._extend(i)
                    return
                # A lazy line continues a paragraph inside the quote, and nothing else.
                if not self.quote_empty and self.child.lazy_ok() and not _interrupts(s):
                    self._extend(i)
                    return
            self.close()
        leaf = self.leaf
        if leaf is not None and leaf != PARA:
            if leaf == FENCE:
                m = _FENCE_OPEN.match(s)
                self._extend(i)
                if (m and m.group(2)[0] == self.fence_char and len(m.group(2)) >= self.fence_len
                        and m.group(3).strip(" \t") == ""):
                    self.leaf = None  # a closing fence: same character, at least as long
                    if self.cur is not None:
                        self.cur[3] = "closed"
                    self.cur = None
                return
            if leaf == HTML:
                self._extend(i)
                if self.html_end is not None and self.html_end.search(s):
                    self.leaf = None
                    self.cur = None
                return
            if leaf == CODE:
                if _indent(s) >= 4:
                    self._extend(i)
                    return
            elif leaf == TABLE:
                if _indent(s) < 4 and not _interrupts(s):
                    self._extend(i)  # any other non-blank line is a row, pipes or not
                    return
            self.leaf = None
            self.cur = None
        para = self.leaf == PARA
        ind = _indent(s)
        if ind >= 4:
            if para:  # indented code cannot interrupt a paragraph
                self._extend(i)
            else:
                self._leaf(CODE, "code", i)
            return
        if nxt is not None and "|" in s and _table_start(s, nxt):
            self._leaf(TABLE, "table", i)
            return
        c = s[ind]
        if c == "#":
            m = _ATX.match(s)
            if m:
                title = _ATX_CLOSE.sub("", m.group(2) or "").strip(" \t")
                self._single("heading", i, (len(m.group(1)), title))
                return
        elif c == "`" or c == "~":
            m = _FENCE_OPEN.match(s)
            if m and not (c == "`" and "`" in m.group(3)):
                self.leaf = FENCE
                self.fence_char, self.fence_len = c, len(m.group(2))
                self._open("fence", i)
                return
        elif c == ">":
            self.leaf = None
            self.child_kind = "quote"
            self.child = _Scanner(depth=self.depth + 1)
            self._quote_line(s, ind, i)
            self._open("quote", i)
            return
        elif c == "<":
            h = _html_start(s[ind:])
            if h is not None and (h[1] or not para):
                self.leaf = HTML
                self.html_end = h[0]
                self._open("html", i)
                if h[0] is not None and h[0].search(s[ind:]):
                    self.leaf = None
                    self.cur = None
                return
        if para and (c == "=" or c == "-") and _SETEXT.match(s):
            # A setext underline turns the whole open paragraph into a heading.
            if self.cur is not None:
                self.cur[0] = "heading"
                self.cur[3] = (1 if c == "=" else 2, None)
                self.cur[2] = i + 1
            self.leaf = None
            self.cur = None
            return
        if c in "-*_" and _HR.match(s):
            self._single("hr", i)
            return
        if c in "-*+" or "0" <= c <= "9":
            m = _LIST.match(s)
            if m:
                after = s[m.end():]
                empty = after.strip(" \t") == ""
                # Only a non-empty bullet or an ordered item starting at 1 interrupts a paragraph.
                if not (para and (empty or (m.group(2) is not None and int(m.group(2)) != 1))):
                    sp = _indent(after)
                    w = m.end() + (1 if empty or sp > 4 else sp)
                    self.leaf = None
                    self.child_kind = "item"
                    self.child = _Scanner(depth=self.depth + 1)
                    self.child_indent = w
                    self.item_empty = empty
                    if not empty:
                        self.child.feed(s[w:], i, None)
                    self._open("item", i)
                    return
        if para:
            self._extend(i)
        else:
            self._leaf(PARA, "para", i)


def norm(line: str) -> str:
    if line.endswith("\r"):
        line = line[:-1]
    if "\t" in line:
        line = line.expandtabs(4)
    return line


def scan_blocks(lines: list[str], first: int, markers: bool) -> tuple[list, list]:
    """Top-level blocks [kind, first_line, end_line, info] and page-marker lines [(i, N)].

    With `markers`, a page-marker line is structure, not text: it ends the open paragraph
    like a blank line (a page break is a paragraph break for the chunker).  A fence, raw
    HTML, indented code or a list item that goes on after the marker holds it; otherwise
    the marker is a block of its own, which the packer attaches to the block after it."""
    blocks: list = []
    marks: list = []
    held: list = []  # marker lines met while a block that may continue was open
    held_rec = held_at = None
    top = _Scanner(blocks)
    n = len(lines)
    special = _SPECIAL_FIRST
    for i in range(first, n):
        s = lines[i]
        c = s[:1]
        # Fast paths for the common top-level cases; anything unusual goes the long way.
        if held:
            pass
        elif top.child_kind is None:
            leaf = top.leaf
            if leaf == PARA:
                # Only these first characters can interrupt a paragraph (digits: only `1.`,
                # `1)`, `01.` ...), and `|` may start a table; an indented line continues.
                ls = s.lstrip(" ")
                c = ls[:1]
                if c and (len(s) - len(ls) >= 4 or (c not in _PARA_BREAKERS and "|" not in s)):
                    if c != "\r" and c != "\t":
                        top.cur[2] = i + 1
                        continue
            elif leaf is None:
                c = s[:1]
                if c and c not in special and "|" not in s:
                    top._leaf(PARA, "para", i)
                    continue
            elif leaf == FENCE:
                # Only a line starting (after up to 3 spaces) with the fence character can close it.
                ls = s.lstrip(" ")
                if ls[:1] != top.fence_char or len(s) - len(ls) > 3:
                    if ls.strip() and not (markers and ls.startswith("--- page ")):
                        top.cur[2] = i + 1
                        continue
                    if not ls.strip():
                        continue
            elif leaf == HTML:
                # A raw HTML block runs to a blank line or to its end string.
                end = top.html_end
                if s.strip(" \t\r") and not (markers and s.startswith("--- page ")):
                    top.cur[2] = i + 1
                    if end is not None and end.search(s):
                        top.leaf = None
                        top.cur = None
                    continue
            elif leaf == TABLE:
                if s[:1] == "|":
                    top.cur[2] = i + 1
                    continue
            elif leaf == CODE:
                if s.startswith("    ") and s.strip():
                    top.cur[2] = i + 1
                    continue
        elif top.child_kind == "item" and not top.item_empty:
            # Lists of one-paragraph items are most of what API docs are made of.
            ch = top.child
            if ch.child_kind is None and ch.leaf == PARA:
                ls = s.lstrip(" ")
                c = ls[:1]
                ind = len(s) - len(ls)
                if c and c != "\r" and c != "\t":
                    w = top.child_indent
                    if ind >= w:
                        if ind - w >= 4 or (c not in _PARA_BREAKERS and "|" not in s):
                            top.cur[2] = i + 1  # the item's paragraph goes on
                            continue
                    elif c not in _LAZY_BREAKERS and "|" not in s:
                        top.cur[2] = i + 1  # a lazy continuation line
                        continue
                    elif (ind < 4 and c in "-*+" and ls[1:2] == " " and "|" not in s and "\t" not in s
                          and (ls.count(c) < 3 or not _HR.match(norm(ls)))):
                        after = ls[1:]
                        content = after.lstrip(" ")
                        sp = len(after) - len(content)
                        if content and content[0] != "\r" and sp <= 4:
                            # the next bullet item: close this one, open its sibling
                            top.close()
                            top.child_kind, top.child = "item", _Scanner(depth=1)
                            top.child_indent, top.item_empty = ind + 1 + sp, False
                            if content[0] not in special and "|" not in content:
                                top.child.leaf = PARA
                            else:
                                top.child.feed(norm(content), i, None)
                            top._open("item", i)
                            continue
        c = s[:1]
        s = norm(s)
        if not s.strip(" \t"):
            top.blank(i)
            continue
        if markers and c == "-" and s.startswith("--- page ") and _MARKER.fullmatch(s):
            marks.append((i, int(_MARKER.fullmatch(s).group(1))))
            top.blank(i)
            if top.cur is None:
                blocks.append(["marker", i, i + 1, None])
            else:
                # A fence, raw HTML, a list item or indented code may go on after the
                # break: the marker is inside it if it does, a block of its own if not.
                if not held:
                    held_rec, held_at = top.cur, len(blocks)
                held.append(i)
            continue
        if held:
            _settle(blocks, held, held_rec, held_at, top, s, i, lines)
            held = []
            continue
        nxt = norm(lines[i + 1]) if "|" in s and i + 1 < n else None
        top.feed(s, i, nxt)
    if held:
        blocks[held_at:held_at] = [["marker", j, j + 1, None] for j in held if j >= held_rec[2]]
    return blocks, marks


def _settle(blocks, held, rec, at, top, s, i, lines) -> None:
    """Feed line i, then place the held marker lines inside `rec` or as their own blocks."""
    n = len(lines)
    nxt = norm(lines[i + 1]) if "|" in s and i + 1 < n else None
    top.feed(s, i, nxt)
    outside = [j for j in held if j >= rec[2]]  # the block ended before these markers
    blocks[at:at] = [["marker", j, j + 1, None] for j in outside]


FENCE_OPEN = _FENCE_OPEN  # the packer re-fences the pieces of a cut fence with its opening
MARKER = _MARKER
