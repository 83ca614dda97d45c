"""A Markdown heading's text as a reader sees it: what stage 03 puts in `heading_path`.

The heading trail is shown to people (it is the citation) and indexed (stage 04 counts the
`heading` line's terms), so it must be the text a CommonMark reader displays — no more,
no less.  `plain_heading(raw)` takes the raw inline source of one heading (what follows
the `#`s, closing `#`s already removed; or a setext heading's lines joined by spaces) and
returns the visible text of its rendering (the HTML's `textContent`), whitespace collapsed,
at most 256 characters.  `open_level` and `heading_path` keep the trail itself: a heading
of level N closes the deeper ones, a gap (a `###` under no `##`) stays an empty level.

The rules are CommonMark's inline rules, as markdown-it-py (the test oracle,
`tests/test_headings.py`) applies them to a heading parsed on its own:

- emphasis only where CommonMark sees it: `*`/`_` delimiter runs judged left/right
  flanking, `_` never opens or closes inside a word, the "rule of 3", openers matched
  nearest-first.  A regex that reads `_x_` anywhere as emphasis turned the option heading
  `use_directory_urls` into `usedirectoryurls` (about 460 real headings in 28 files of
  one documentation set), so the citation was wrong and its terms never matched a query;
- code spans keep their text literally (no emphasis, escapes or entities inside);
- links and autolinks keep their text, images show nothing (their alt text is not
  displayed), raw HTML tags are dropped (their content stays);
- backslash escapes and entities (`&amp;`, `&#95;`, `&#x5F;`) are decoded;
- reference links (`[text][ref]`) stay literal: a heading alone has no definitions;
- `~~` is literal (strikethrough is GFM, not CommonMark).

One addition CommonMark lacks: an *attribute list* at the end of the heading —
`## Handling Errors { #handling-errors }` (Python-Markdown's attr_list, MkDocs, kramdown
`{: #id}`, Pandoc) — is markup, not text, and is dropped before rendering.  Only a
list made wholly of `#id`, `.class` and `key=value` items counts, so a heading that ends in
`{name}` (a format string, a set) keeps it.  Left in, the id repeated the heading's
words in 1,107 chunks' trails of one documentation site.

Deliberately not done: reference-link resolution (needs the whole document), GFM
strikethrough, linkify.  A heading longer than 4,000 characters is read only that far
(its displayed text is cut to 256 anyway), which keeps the emphasis pass bounded.
"""
from __future__ import annotations

import html.entities
import re
import unicodedata

import numpy as np

from pipekit.run.lazy import lazy
from pipekit.run.arrays import rows_matching

pa, pc = lazy("pyarrow"), lazy("pyarrow.compute")  # imported on first use: `search` starts without Arrow (pipekit/run/lazy.py)

__all__ = ["plain_heading", "strip_attribute_list", "drop_heading_attribute_lists", "HEADING_MAX",
           "open_level", "heading_path", "TRAIL_SEPARATOR"]

HEADING_MAX = 256   # characters of a heading trail entry; longer ones end in "…"
TRAIL_SEPARATOR = " › "  # between the levels of a chunk's `heading` (stage 03: its trail in one line)
_READ_MAX = 4000    # raw characters read (see the module docstring)

# --------------------------------------------------------------------------------------
# Attribute lists
# --------------------------------------------------------------------------------------

_ATTR_ITEM = r"""(?:[#.][^\s{}"'=]+|[A-Za-z_:][\w:.-]*=(?:"[^"]*"|'[^']*'|[^\s{}"']+))"""
_ATTR_LIST = re.compile(
    r"(?:^|[ \t]+)\{:?[ \t]*" + _ATTR_ITEM + r"(?:[ \t]+" + _ATTR_ITEM + r")*[ \t]*\}[ \t]*$")
_CLOSING_HASHES = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")


def strip_attribute_list(raw: str) -> str:
    """`Title { #id .class key=val }` -> `Title`; anything else unchanged.

    Python-Markdown also lets the list follow a closing sequence (`## Name ## {: #name }`,
    as its attr_list documentation shows and MkDocs sites write): those `#`s go too."""
    if "{" not in raw:
        return raw
    stripped = _ATTR_LIST.sub("", raw)
    return _CLOSING_HASHES.sub("", stripped) if stripped != raw else raw


# The same lists where they sit in a chunk's *text*: at the end of an ATX heading line, or
# of a setext heading's last title line (the line above its `===` / `---`).  RE2 syntax, for
# pyarrow, so a whole column of texts is rewritten in one pass (stage 04, per batch).
_RE2_ITEM = r"""(?:[#.][^\s{}"'=]+|[A-Za-z_:][\w:.-]*=(?:"[^"]*"|'[^']*'|[^\s{}"']+))"""
_RE2_LIST = r"[ \t]+\{:?[ \t]*" + _RE2_ITEM + r"(?:[ \t]+" + _RE2_ITEM + r")*[ \t]*\}[ \t]*"
_TEXT_ATX = r"(?m)^( {0,3}#{1,6}[ \t][^\n]*?)" + _RE2_LIST + "$"
_TEXT_SETEXT = r"(?m)^([^\n]*?)" + _RE2_LIST + r"(\n {0,3}(?:=+|-+)[ \t]*)$"
_CANDIDATE = r"(?m)^ {0,3}#{1,6}[ \t][^\n]*\}[ \t]*$|\}[ \t]*\n {0,3}(?:=+|-+)[ \t]*$"


def drop_heading_attribute_lists(texts):
    """Chunk texts (a pyarrow string array) with every heading line's attribute list
    removed, the rest of each text as it was.

    Why: a chunk's text starts with its raw heading line, so `## Handling Errors
    { #handling-errors }` put the id's words into the index a second time (the heading
    column already drops the list), and an id that differs from the title (`{ #setup }`
    on "Installation") made the section match words a reader never sees there.  Only
    heading lines are touched: a `{: .class }` line of its own, or `{name}` in prose, is
    text (as in `strip_attribute_list`, only a list wholly of `#id`, `.class` and
    `key=value` items counts)."""
    if len(texts) == 0:
        return texts
    # Two cheap passes find the few texts with a heading line ending in `}`; only those are
    # rewritten (code-heavy docs have braces everywhere, attribute lists in few chunks).
    # The first, a byte search, spares the regex scan every text without a `}` at all.
    rows = rows_matching(texts, _CANDIDATE, ord("}"))
    if len(rows) == 0:
        return texts
    fixed = pc.replace_substring_regex(texts.take(rows), _TEXT_ATX, r"\1")
    fixed = pc.replace_substring_regex(fixed, _TEXT_SETEXT, r"\1\2")
    mask = np.zeros(len(texts), dtype=bool)
    mask[rows] = True
    return pc.replace_with_mask(texts, pa.array(mask), fixed)


# --------------------------------------------------------------------------------------
# Character classes (CommonMark's, as markdown-it-py defines them)
# --------------------------------------------------------------------------------------

_WHITESPACE = frozenset("\t\n\x0b\x0c\r \xa0\u1680\u202f\u205f\u3000") | frozenset(
    chr(c) for c in range(0x2000, 0x200B))
_TRIM = "".join(sorted(_WHITESPACE | {"\u2028", "\u2029"}))
_ASCII_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
# Characters that end a run of plain text: only at these can any inline rule start.
_SPECIAL = re.compile(r"[`*_\[\]!<&\\]")


def _is_punct(ch: str) -> bool:
    # CommonMark 0.31: ASCII punctuation, or Unicode P* (punctuation) and S* (symbols).
    return ch in _ASCII_PUNCT or unicodedata.category(ch)[0] in "PS"


# --------------------------------------------------------------------------------------
# Entities, link destinations, autolinks, raw HTML
# --------------------------------------------------------------------------------------

_NUMERIC_ENTITY = re.compile(r"&#(?:[xX]([0-9a-fA-F]{1,6})|([0-9]{1,7}));")
_NAMED_ENTITY = re.compile(r"&([A-Za-z][A-Za-z0-9]{1,31});")


def _codepoint(c: int) -> str:
    """A numeric character reference's character; U+FFFD for the invalid ones (surrogates,
    non-characters, C0/C1 controls other than tab/newline/FF/CR, beyond U+10FFFF)."""
    bad = (0xD800 <= c <= 0xDFFF or 0xFDD0 <= c <= 0xFDEF or (c & 0xFFFF) in (0xFFFE, 0xFFFF)
           or c <= 0x08 or c == 0x0B or 0x0E <= c <= 0x1F or 0x7F <= c <= 0x9F or c > 0x10FFFF)
    return "\ufffd" if bad else chr(c)


def _entity_at(s: str, i: int, end: int) -> tuple[str, int] | None:
    """(decoded text, position after) for a character reference at s[i], else None."""
    if i + 1 >= end:
        return None
    m = _NUMERIC_ENTITY.match(s, i, end) if s[i + 1] == "#" else _NAMED_ENTITY.match(s, i, end)
    if m is None:
        return None
    if s[i + 1] == "#":
        return _codepoint(int(m.group(1), 16) if m.group(1) else int(m.group(2))), m.end()
    chars = html.entities.html5.get(m.group(1) + ";")  # CommonMark needs the `;`
    return (chars, m.end()) if chars is not None else None


_BAD_SCHEME = re.compile(r"(?:vbscript|javascript|file|data):", re.I)
_IMAGE_DATA = re.compile(r"data:image/(?:gif|png|jpeg|webp);", re.I)


def _safe_link(url: str) -> bool:
    """Script and file URLs are not links at all (the text stays literal), as in
    markdown-it; of `data:` URLs only images' are."""
    url = url.strip().lower()
    return not _BAD_SCHEME.match(url) or bool(_IMAGE_DATA.match(url))


def _unescape(s: str) -> str:
    """A link destination's escapes and entities decoded (`java&#115;cript:` is a script)."""
    s = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", s)

    def entity(m):
        got = _entity_at(m.group(0), 0, len(m.group(0)))
        return got[0] if got else m.group(0)
    return re.sub(r"&#?[A-Za-z0-9]+;", entity, s)


def _destination(s: str, i: int, end: int) -> tuple[str, int] | None:
    """A link destination at s[i]: `<...>` or a run without spaces, parentheses balanced."""
    if i < end and s[i] == "<":
        j = i + 1
        while j < end:
            c = s[j]
            if c in "\n<":
                return None
            if c == ">":
                return _unescape(s[i + 1:j]), j + 1
            j += 2 if c == "\\" and j + 1 < end else 1
        return None
    j, depth = i, 0
    while j < end:
        c = s[j]
        if c == " " or ord(c) < 0x20 or c == "\x7f":
            break
        if c == "\\" and j + 1 < end:
            if s[j + 1] == " ":
                break
            j += 2
            continue
        if c == "(":
            depth += 1
            if depth > 32:
                return None
        elif c == ")":
            if depth == 0:
                break
            depth -= 1
        j += 1
    if j == i or depth:
        return None
    return _unescape(s[i:j]), j


def _title_end(s: str, i: int, end: int) -> int:
    """Position after a link title `"..."`, `'...'` or `(...)` at s[i], or -1."""
    if i >= end or s[i] not in "\"'(":
        return -1
    close = ")" if s[i] == "(" else s[i]
    j = i + 1
    while j < end:
        c = s[j]
        if c == close:
            return j + 1
        if c == "(" and close == ")":
            return -1
        j += 2 if c == "\\" and j + 1 < end else 1
    return -1


def _skip_space(s: str, i: int, end: int) -> int:
    while i < end and s[i] in " \t\n":
        i += 1
    return i


_AUTOLINK_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]{1,31}:[^<>\x00-\x20]*")
_AUTOLINK_EMAIL = re.compile(
    r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")
_ATTR_VALUE = r"""(?:[^"'=<>`\x00-\x20]+|'[^']*'|"[^"]*")"""
_HTML_TAG = re.compile(
    r"<[A-Za-z][A-Za-z0-9\-]*(?:\s+[A-Za-z_:][A-Za-z0-9:._-]*(?:\s*=\s*" + _ATTR_VALUE + r")?)*\s*/?>"
    r"|</[A-Za-z][A-Za-z0-9\-]*\s*>"
    r"|<!---?>|<!--(?:[^-]|-[^-]|--[^>])*-->"
    r"|<[?][\s\S]*?[?]>"
    r"|<![A-Za-z][^>]*>"
    r"|<!\[CDATA\[[\s\S]*?\]\]>")
_PCT = re.compile(r"(?:%[0-9A-Fa-f]{2})+")
_KEEP_ENCODED = frozenset(";/?:@&=+$,#")


def _display_url(url: str) -> str:
    """An autolink's text as shown: percent-escapes of valid UTF-8 decoded, except the
    URL's reserved characters (markdown-it's normalizeLinkText)."""
    def dec(m):
        raw = bytes.fromhex(m.group(0).replace("%", ""))
        out, k, src = [], 0, m.group(0)
        while k < len(raw):
            b = raw[k]
            n = 1 if b < 0x80 else 2 if 0xC0 <= b < 0xE0 else 3 if 0xE0 <= b < 0xF0 else 4 if 0xF0 <= b < 0xF8 else 0
            try:
                ch = raw[k:k + n].decode("utf-8") if n and k + n <= len(raw) else None
            except UnicodeDecodeError:
                ch = None
            if ch is None or ch in _KEEP_ENCODED:
                out.append(src[3 * k:3 * k + 3])
                k += 1
            else:
                out.append(ch)
                k += n
        return "".join(out)
    return _PCT.sub(dec, url) if "%" in url else url


def _angle(s: str, i: int, end: int) -> tuple[str | None, int] | None:
    """At `<`: an autolink (its text) or a raw HTML tag (no text), with the position after."""
    j = s.find(">", i + 1, end)
    if j != -1 and "<" not in s[i + 1:j]:
        url = s[i + 1:j]
        if _AUTOLINK_URL.fullmatch(url):
            if _safe_link(url):
                return _display_url(url), j + 1
        elif _AUTOLINK_EMAIL.fullmatch(url):
            return _display_url(url), j + 1
    if i + 2 < end and (s[i + 1] in "!?/" or s[i + 1].isascii() and s[i + 1].isalpha()):
        m = _HTML_TAG.match(s, i, end)
        if m:
            return None, m.end()
    return None


# --------------------------------------------------------------------------------------
# Inline parsing: text pieces and emphasis delimiter runs
# --------------------------------------------------------------------------------------


class _Run:
    """A run of `*` or `_`: how many are left unmatched, and whether it may open/close."""

    __slots__ = ("ch", "left", "length", "opens", "closes", "slot")

    def __init__(self, ch, length, opens, closes, slot):
        self.ch, self.left, self.length = ch, length, length
        self.opens, self.closes, self.slot = opens, closes, slot


def _delimiter_run(s: str, i: int, end: int, slot: int) -> _Run:
    ch = s[i]
    j = i
    while j < end and s[j] == ch:
        j += 1
    before = s[i - 1] if i > 0 else " "
    after = s[j] if j < end else " "  # the end of a link's text counts as a space
    ws_b, ws_a = before in _WHITESPACE, after in _WHITESPACE
    p_b, p_a = _is_punct(before), _is_punct(after)
    left = not ws_a and (not p_a or ws_b or p_b)
    right = not ws_b and (not p_b or ws_a or p_a)
    if ch == "*":
        opens, closes = left, right
    else:  # `_` inside a word (flanking on both sides, letters around) is a literal
        opens = left and (not right or p_b)
        closes = right and (not left or p_a)
    return _Run(ch, j - i, opens, closes, slot)


def _match_emphasis(runs: list[_Run]) -> None:
    """CommonMark's "process emphasis": pair closers with the nearest eligible opener,
    two delimiters at a time when both have two; what is left of a run stays literal."""
    bottom: dict[tuple, int] = {}  # no opener for this kind of closer below this index
    alive = [True] * len(runs)
    c = 0
    while c < len(runs):
        closer = runs[c]
        if not (alive[c] and closer.closes and closer.left):
            c += 1
            continue
        key = (closer.ch, closer.opens, closer.length % 3)
        o = c - 1
        floor = bottom.get(key, -1)
        while o > floor:
            op = runs[o]
            if alive[o] and op.ch == closer.ch and op.opens and op.left and not (
                    (op.closes or closer.opens) and (op.length + closer.length) % 3 == 0
                    and (op.length % 3 or closer.length % 3)):
                break
            o -= 1
        if o <= floor:
            bottom[key] = c - 1
            if not closer.opens:
                alive[c] = False
            c += 1
            continue
        op = runs[o]
        use = 2 if op.left >= 2 and closer.left >= 2 else 1
        op.left -= use
        closer.left -= use
        for k in range(o + 1, c):  # delimiters between a matched pair can match nothing
            alive[k] = False
        if op.left == 0:
            alive[o] = False
        if closer.left == 0:
            alive[c] = False
            c += 1


def _code_span(s: str, i: int, end: int) -> tuple[str | None, int]:
    """At a backtick run: (code text, after) for a span closed by a run of the same length,
    else (None, after the run) — an unmatched run is literal text."""
    j = i
    while j < end and s[j] == "`":
        j += 1
    n = j - i
    k = j
    while True:
        k = s.find("`", k, end)
        if k == -1:
            return None, j
        m = k
        while m < end and s[m] == "`":
            m += 1
        if m - k == n:
            code = s[j:k].replace("\n", " ")
            if code.startswith(" ") and code.endswith(" ") and code.strip(" "):
                code = code[1:-1]  # one space each side is padding, unless it is all spaces
            return code, m
        k = m


def _skip_token(s: str, i: int, end: int) -> int:
    """Where one inline element starting at s[i] ends (to find a link text's `]`)."""
    c = s[i]
    if c == "\\":
        return i + 2 if i + 1 < end else i + 1
    if c == "`":
        return _code_span(s, i, end)[1]
    if c == "[":
        link = _link(s, i, end)
        return link[2] if link else i + 1
    if c == "!" and i + 1 < end and s[i + 1] == "[":
        link = _link(s, i + 1, end, image=True)
        return link[2] if link else i + 1
    if c == "<":
        got = _angle(s, i, end)
        return got[1] if got else i + 1
    if c == "&":
        got = _entity_at(s, i, end)
        return got[1] if got else i + 1
    if c in "*_]!":
        return i + 1
    m = _SPECIAL.search(s, i + 1, end)
    return m.start() if m else end


def _label_end(s: str, i: int, end: int, nested_ok: bool) -> int:
    """Index of the `]` closing the `[` at s[i], or -1.  Brackets nest; code spans,
    autolinks and HTML hide their brackets; a link inside a link's text means the outer
    one is not a link (CommonMark: links do not nest, the inner one wins)."""
    depth, j = 1, i + 1
    while j < end:
        if s[j] == "]":
            depth -= 1
            if depth == 0:
                return j
        k = _skip_token(s, j, end)
        if s[j] == "[":
            if k == j + 1:
                depth += 1
            elif not nested_ok:
                return -1
        j = k
    return -1


def _link(s: str, i: int, end: int, image: bool = False) -> tuple[int, int, int] | None:
    """At `[` (for an image, the `[` after `!`): (text start, text end, after the link)
    for an inline link `[text](dest "title")`, else None."""
    close = _label_end(s, i, end, nested_ok=image)
    if close < 0 or close + 1 >= end or s[close + 1] != "(":
        return None
    p = _skip_space(s, close + 2, end)
    if p >= end:
        return None
    dest = _destination(s, p, end)
    if dest is not None:
        if _safe_link(dest[0]):
            p = dest[1]
        start = p
        p = _skip_space(s, p, end)
        t = _title_end(s, p, end)
        if p < end and p != start and t >= 0:
            p = _skip_space(s, t, end)
    if p >= end or s[p] != ")":
        return None
    return i + 1, close, p + 1


def _inline(s: str, i: int, end: int, out: list[str]) -> None:
    """Append the visible text of s[i:end] to `out`, emphasis resolved."""
    runs: list[_Run] = []
    while i < end:
        m = _SPECIAL.search(s, i, end)
        if m is None:
            out.append(s[i:end])
            break
        if m.start() > i:
            out.append(s[i:m.start()])
        i = m.start()
        c = s[i]
        if c == "\\":
            nxt = s[i + 1] if i + 1 < end else ""
            if nxt and nxt in _ASCII_PUNCT:
                out.append(nxt)
                i += 2
            elif nxt == "\n":
                out.append(" ")
                i += 2
            else:
                out.append("\\")
                i += 1
        elif c == "`":
            code, j = _code_span(s, i, end)
            out.append(s[i:j] if code is None else code)
            i = j
        elif c in "*_":
            run = _delimiter_run(s, i, end, len(out))
            runs.append(run)
            out.append("")  # filled with what is left of the run once emphasis is resolved
            i += run.length
        elif c == "[" or (c == "!" and i + 1 < end and s[i + 1] == "["):
            link = _link(s, i + (c == "!"), end, image=c == "!")
            if link is None:
                out.append(c)
                i += 1
            else:
                if c == "[":
                    _inline(s, link[0], link[1], out)  # a link shows its text; an image nothing
                i = link[2]
        elif c == "<":
            got = _angle(s, i, end)
            if got is None:
                out.append("<")
                i += 1
            else:
                if got[0]:
                    out.append(got[0])
                i = got[1]
        elif c == "&":
            got = _entity_at(s, i, end)
            out.append(got[0] if got else "&")
            i = got[1] if got else i + 1
        else:  # `]`, or `!` not before `[`
            out.append(c)
            i += 1
    if runs:
        _match_emphasis(runs)
        for r in runs:
            out[r.slot] = r.ch * r.left


def plain_heading(raw: str) -> str:
    """A heading's text as a CommonMark reader displays it (see the module docstring):
    attribute list dropped, markup resolved, whitespace collapsed, at most 256 characters."""
    # As every CommonMark reader normalises its input: line ends to "\n", NUL to U+FFFD.
    s = raw[:_READ_MAX].replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "\ufffd")
    s = strip_attribute_list(s.strip(_TRIM))
    if _SPECIAL.search(s):
        out: list[str] = []
        _inline(s, 0, len(s), out)
        s = "".join(out)
    s = " ".join(s.split())
    if len(s) > HEADING_MAX:
        s = s[: HEADING_MAX - 1].rstrip() + "…"
    return s


def open_level(levels: list[str], level: int, title: str, base: list[str]) -> list[str]:
    """A heading of `level` closes the deeper ones and replaces its own (`levels`, the
    open titles by level, is updated): the new heading_path, `base` first."""
    del levels[level - 1:]
    levels.extend([""] * (level - 1 - len(levels)))
    levels.append(title)
    return heading_path(list(levels), list(base))


def heading_path(levels: list[str], base: list[str]) -> list[str]:
    """`base` + `levels` without trailing empty levels (a `###` under no `##` keeps its gap)."""
    path = base + levels
    while path and path[-1] == "":
        path.pop()
    return path
