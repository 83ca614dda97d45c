"""reStructuredText to Markdown, read by docutils, so stage 03 chunks it by its structure.

Stage 03 knows one structured syntax, Markdown (HTML is converted to it too).  SPEC rule 9
says a reST document's structure is its section titles *as docutils reads them*: which
underline and overline styles make which level is decided by the order they first
appear, so no line-pattern guess gets it right; we let docutils (the reference
implementation) parse the document and write its tree out as Markdown:

* sections as ATX headings, one `#` per level of nesting (at most six);
* literal blocks, `code`/`code-block` directives and doctest blocks as fenced code, the
  fence longer than any backtick run inside;
* tables (grid, simple, `csv-table`, `list-table`) as GFM tables, one line a row, so
  stage 03 keeps them whole or cuts them between rows with the header repeated;
* lists, block quotes, definition and field lists, admonitions (`.. note::` as
  "**Note:** ..."), footnotes, figures' captions, as their Markdown equivalents or text;
* directives and roles docutils does not know (Sphinx's `.. toctree::`,
  `.. versionadded::`, `:func:`, ...) kept as text: a directive's argument and its
  content (parsed as reST), a role's text (`:func:` on `~os.path.join` -> `os.path.join`);
* markup docutils rejects (a title whose underline style breaks the hierarchy, a
  directive with a bad option) kept as its source lines' text, never as the message.

Safety: docutils reads no file but the text it is given: `.. include::`, `.. raw::` with
`:file:`, `csv-table :file:` are refused (file_insertion_enabled, raw_enabled off), no
docutils.conf is consulted (_disable_config), and no message reaches stderr or the text
(report level 5, messages dropped from the tree).  Text that would read as Markdown block
syntax (a paragraph line starting `# `, a fence, an underline) is backslash-escaped, so
the only headings stage 03 sees are docutils' sections.

Not done: comments, link targets, substitution definitions and `.. contents::` tables
(not text a reader sees); images keep only their alt text; link addresses are dropped
(the link text stays).  A document docutils cannot parse at all raises ValueError, which
stage 01 reports as the file's error.
"""
from __future__ import annotations

import io
import re
import threading
import warnings
from contextlib import contextmanager

from docutils import nodes, utils
from docutils.core import publish_doctree
from docutils.parsers.rst import Directive, directives, roles

__all__ = ["convert_rst", "rst_to_markdown", "parse", "section_titles"]

# A line longer than docutils' default limit (10,000 characters) makes it skip the
# whole document; 1 MB lines still parse, and documents.max_bytes bounds the rest.
_LINE_LIMIT = 1_000_000

_SETTINGS = {
    "_disable_config": True,        # no docutils.conf from /etc, ~ or the working folder
    "file_insertion_enabled": False,  # .. include::, :file: options: nothing outside the input
    "raw_enabled": False,
    # Errors stay in the tree (report level 3) because each holds the source text docutils
    # refused (a title breaking the hierarchy: at level 5 its text vanished); the writer keeps
    # that text and drops the message.  Halt level 5: bad markup never raises.
    "report_level": 3, "halt_level": 5,
    "doctitle_xform": False,        # every section stays a section: its title is a heading
    "sectsubtitle_xform": False,
    "syntax_highlight": "none",     # code stays one text node; no Pygments needed
    "smart_quotes": False,          # the text as written
    "line_length_limit": _LINE_LIMIT,
    "input_encoding": "unicode",
}

# docutils' parser looks directives and roles up in module-level tables; the lookups are
# swapped for lenient ones during a parse (as Sphinx itself does), under a lock, so a
# thread parsing at the same time never sees them half-swapped.
_LOCK = threading.Lock()


def parse(text: str) -> nodes.document:
    """The docutils document tree of `text`, unknown directives and roles kept as text."""
    with _LOCK, _lenient(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        doc = publish_doctree(text, settings_overrides=dict(_SETTINGS, warning_stream=io.StringIO()))
    if text.strip() and not len(doc) and any(len(line) > _LINE_LIMIT for line in text.splitlines()):
        raise ValueError(f"a line is longer than {_LINE_LIMIT:,} characters, more than docutils reads")
    return doc


def rst_to_markdown(text: str) -> tuple[str, str | None]:
    """(Markdown text, document title) of a reST document."""
    markdown, title, _ = convert_rst(text)
    return markdown, title


def convert_rst(text: str) -> tuple[str, str | None, list[dict]]:
    """(Markdown text, document title, {title, id} per heading written): the id is docutils'
    first id of the section (what Sphinx's `<section id>` says), so a hit links to it."""
    markdown, title, anchors, _ = _convert(text)
    return markdown, title, anchors


def _convert(text: str) -> tuple[str, str | None, list[dict], list[str]]:
    """convert_rst's three, and the file-reading directives refused (refused_files)."""
    doc = parse(text)
    writer = _Writer()
    blocks = writer.blocks(doc)
    markdown = "\n\n".join(b for b in blocks if b.strip())
    return (markdown + "\n" if markdown else ""), document_title(doc), writer.anchors, refused_files(doc)


# docutils' own words when file insertion is off (`.. include::`, `.. raw:: :file:`,
# `csv-table :file:`), matched so the row can say what was not read, and why.
_DISABLED = re.compile(r'"([\w:-]+)" directive disabled|File and URL access deactivated; ignoring "([\w:-]+)"')
_FILE_OPTION = re.compile(r"^\s*:(?:file|url):\s*(\S.*)$", re.M)


def refused_files(doc: nodes.document) -> list[str]:
    """`.. include:: PATH` for each directive that asked for a file and was refused.

    A test that only checked the file's text was absent passed for the wrong reason: with
    insertion on, docutils failed on `input_encoding: unicode` and the reader fell back to
    plain text; the secret was absent, yet nothing had refused it.  Naming what was refused
    makes the refusal itself visible (stage 01's `note`)."""
    out = []
    for msg in doc.findall(nodes.system_message):
        m = _DISABLED.search(msg.astext())
        if m is None:
            continue
        name = m.group(1) or m.group(2)
        source = "\n".join(b.astext() for b in msg.findall(nodes.literal_block))
        opt = _FILE_OPTION.search(source)
        arg = opt.group(1) if opt else source.split("::", 1)[-1].split("\n", 1)[0]
        out.append(f".. {name}:: {arg.strip()}")
    for node in doc.findall(nodes.container):
        if node.get("refused"):
            out.append(node["refused"])
    return out


def document_title(doc: nodes.document) -> str | None:
    """The title a reader sees first: the first section's, when the document opens with one
    (after comments, targets and substitution definitions, as docutils' own rule)."""
    for child in doc.children:
        if isinstance(child, (nodes.PreBibliographic, nodes.docinfo, nodes.system_message)):
            continue
        if isinstance(child, nodes.section) and child.children and isinstance(child[0], nodes.title):
            return " ".join(child[0].astext().split()) or None
        return None
    return None


def section_titles(doc: nodes.document) -> list[str]:
    """Every section title of a tree, whitespace collapsed: the oracle bench/rst_structure.py
    compares stage 03's heading paths with."""
    return [" ".join(s[0].astext().split()) for s in doc.findall(nodes.section)
            if s.children and isinstance(s[0], nodes.title)]


# --------------------------------------------------------------------------- leniency


class _AnyOption(dict):
    """An option spec that accepts every option (`:maxdepth: 2`, `:members:`) as text."""

    def __missing__(self, key):
        return directives.unchanged


# Sphinx directives whose content is code, not reST: parsed as reST, `>>> x = 1` lines
# and indentation would turn into quotes and definition lists.
_CODE_DIRECTIVES = frozenset({"testcode", "testoutput", "testsetup", "testcleanup", "doctest",
                              "ipython", "jupyter-execute", "code-cell", "productionlist", "prompt",
                              "literalinclude"})
# Directives that only set how the rest renders: no text of their own.
_SETTINGS_DIRECTIVES = frozenset({"highlight", "default-role", "default-domain", "tabularcolumns",
                                  "currentmodule", "py:currentmodule", "sectionauthor", "moduleauthor",
                                  "codeauthor", "meta"})
_LABELS = {"versionadded": "Added in version", "versionchanged": "Changed in version",
           "deprecated": "Deprecated since version", "versionremoved": "Removed in version",
           "seealso": "See also"}


class _UnknownDirective(Directive):
    """Any directive docutils does not know: its argument and content, kept as text."""

    has_content = True
    optional_arguments = 1
    final_argument_whitespace = True
    option_spec = _AnyOption(_=directives.unchanged)  # not empty: docutils tests it for truth

    def run(self):
        name = self.name.lower()
        if name in _SETTINGS_DIRECTIVES:
            return []
        node = nodes.container(classes=["unknown-directive"])
        arg = self.arguments[0] if self.arguments else ""
        if name == "literalinclude":  # Sphinx reads the file it names; we never do (refused_files)
            node["refused"] = f".. literalinclude:: {arg.strip()}"
        if name in _LABELS:
            # `.. versionadded:: 3.2` then, on the same or the next lines, the change: the
            # version goes into the label, the rest is the note's text.
            version, rest = ("", arg) if name == "seealso" else _first_word(arg)
            node["label"], arg = f"{_LABELS[name]} {version}".strip(), rest
        # One signature a line; a line ending in a backslash continues (Sphinx's rule).
        lines = [arg] if name in _LABELS else re.sub(r"\\[ \t]*\n[ \t]*", " ", arg).split("\n")
        for line in filter(str.strip, lines):
            inline, _ = self.state.inline_text(line.strip(), self.lineno)  # roles in it resolved too
            node += nodes.paragraph(line, "", *inline)
        if name in _CODE_DIRECTIVES:
            if self.content:
                code = "\n".join(self.content)
                node += nodes.literal_block(code, code)
        elif self.content:
            self.state.nested_parse(self.content, self.content_offset, node)
        return [node]


def _first_word(text: str) -> tuple[str, str]:
    parts = text.strip().split(None, 1)
    return (parts[0], parts[1] if len(parts) > 1 else "") if parts else ("", "")


# Names docutils and Sphinx both define, where the Sphinx meaning is the one documents
# use: `.. class:: ArgumentParser(prog=None, ...)` describes a Python class in Sphinx,
# while docutils' `class` sets a CSS class and refused that argument, with the whole
# description in its error (Python's argparse page lost its main section's text).  A
# plain docutils `.. class:: special` costs one line of text ("special").
_SPHINX_FIRST = frozenset({"class"})


# Roles whose text is prose (a cross-reference's title, a term); the rest name code.
_PROSE_ROLES = frozenset({"ref", "doc", "term", "numref", "abbr", "dfn", "guilabel", "menuselection",
                          "download", "std:ref", "std:doc", "std:term", "keyword", "pep", "rfc"})
_TITLE_TARGET = re.compile(r"^(.*\S)\s*<([^<>]+)>$", re.S)


def _shown(name: str, text: str) -> str:
    """What a reader sees of a role: `Title <target>` -> Title, `~a.b` -> a.b, PEP 8."""
    m = _TITLE_TARGET.match(text)
    shown = m.group(1) if m else text.lstrip("~!")
    if name.lower() in ("pep", "rfc") and not m:  # as docutils and Sphinx show them: "PEP 8"
        shown = f"{name.upper()} {shown}"
    return shown


def _role_shown(m: re.Match) -> str:
    return _shown(m.group(1), m.group(2))


def _unknown_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """Any role docutils does not know: `:func:` on `~os.path.join` -> `os.path.join`."""
    shown = _shown(name, utils.unescape(text))
    node = nodes.inline(rawtext, shown) if name.lower() in _PROSE_ROLES else nodes.literal(rawtext, shown)
    return [node], []


def _or_text(fn):
    """A known role that rejects its text (`:pep:` on `506#anchor`, Sphinx syntax docutils'
    role refuses) answers with an error and the raw markup; that markup is no text a
    reader sees, so the role's text is kept instead, as for an unknown role."""
    def role(name, rawtext, text, lineno, inliner, options=None, content=None):
        result, messages = fn(name, rawtext, text, lineno, inliner, options or {}, content or [])
        if messages or any(isinstance(n, nodes.problematic) for n in result):
            return _unknown_role(name, rawtext, text, lineno, inliner)
        return result, messages
    return role


@contextmanager
def _lenient():
    find_directive, find_role = directives.directive, roles.role

    def directive(name, language, document):
        if name.lower() in _SPHINX_FIRST:
            return _UnknownDirective, []
        cls, messages = find_directive(name, language, document)
        return (cls, messages) if cls is not None else (_UnknownDirective, [])

    def role(name, language, lineno, reporter):
        fn, messages = find_role(name, language, lineno, reporter)
        return (_or_text(fn), messages) if fn is not None else (_unknown_role, [])

    directives.directive, roles.role = directive, role
    try:
        yield
    finally:
        directives.directive, roles.role = find_directive, find_role


# --------------------------------------------------------------------------- writing

_DROP = (nodes.comment, nodes.target, nodes.substitution_definition,
         nodes.pending, nodes.raw, nodes.decoration, getattr(nodes, "meta", nodes.comment))

# Lines Markdown would read as block syntax, which in reST text are just text: an ATX
# opener, a fence, a setext underline or thematic break, a table delimiter row, an HTML
# block start, a page marker (stage 02's `--- page N ---`).
_BLOCK_LOOKALIKE = re.compile(
    r"#{1,6}(?:[ \t]|$)|`{3,}|~{3,}|[=]+[ \t]*$|[-*_+][ \t]*(?:[-*_][ \t]*){1,}$|[-:|][-:| \t]*\|[-:| \t]*$"
    r"|[-:][-:| \t]*$|<|--- page \d+ ---")
# In refused source text: a directive's marker and its `:option:` lines are markup, and
# an underline or overline is no text.
_REFUSED_MARKUP = re.compile(r"^\s*(?:\.\. (?:\|[^|]+\|\s+)?[\w:.+-]+::|:[\w-]+:(?=\s|$).*$)")
_ROLE_MARKUP = re.compile(r":([a-zA-Z][\w:+.-]*):`([^`]+)`")
_PUNCTUATION_LINE = re.compile(r"""^([!-/:-@\[-`{-~])\1*$""")
_PLAIN_START = re.compile(r"[^\s`>|#\\*!-]")  # a block that starts as a paragraph does
_TITLE_SPECIAL = re.compile(r"([\\`*_\[\]<>#!&|])")


def _escape_lines(text: str) -> str:
    return "\n".join("\\" + line if _BLOCK_LOOKALIKE.match(line) else line
                     for line in (raw.lstrip() for raw in text.split("\n")))


def _fence(code: str, info: str = "") -> str:
    longest = max((len(m) for m in re.findall(r"`+", code)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{info}\n{code.rstrip(chr(10))}\n{ticks}"


def _code_span(text: str) -> str:
    text = " ".join(text.split("\n"))
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or longest else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _indent(block: str, first: str, rest: str) -> str:
    lines = block.split("\n")
    return "\n".join([first + lines[0]] + [(rest + line) if line else "" for line in lines[1:]])


class _Writer:
    """A docutils tree as Markdown blocks (strings, joined by blank lines)."""

    def __init__(self):
        self.level = 0
        self.anchors: list[dict] = []  # {title, id} per heading written, in order

    # ---- blocks

    def blocks(self, parent) -> list[str]:
        out: list[str] = []
        for child in parent.children:
            out.extend(self.block(child))
        return out

    def block(self, node) -> list[str]:
        if isinstance(node, _DROP) or (isinstance(node, nodes.topic) and "contents" in node["classes"]):
            return []
        method = getattr(self, "_" + node.__class__.__name__, None)
        if method is not None:
            return method(node)
        if isinstance(node, nodes.Admonition):  # note, warning, tip, ... and the generic one
            return self._admonition(node)
        if isinstance(node, nodes.Text):
            return [_escape_lines(str(node))] if str(node).strip() else []
        if isinstance(node, nodes.TextElement):
            return self._paragraph(node)
        return self.blocks(node)

    def _system_message(self, node) -> list[str]:
        """The source text of markup docutils refused, as a paragraph; never the message."""
        out = []
        for block in node.findall(nodes.literal_block):
            lines = [_ROLE_MARKUP.sub(_role_shown, _REFUSED_MARKUP.sub("", line)).strip()
                     for line in block.astext().split("\n")]
            text = "\n".join(line for line in lines if line and not _PUNCTUATION_LINE.match(line))
            if text:
                out.append(_escape_lines(text))
        return out

    def _section(self, node) -> list[str]:
        self.level += 1
        try:
            head, body = [], node.children
            if body and isinstance(body[0], nodes.title):
                head = [f"{'#' * min(self.level, 6)} {self.title_text(body[0])}"]
                self.anchors.append({"title": " ".join(body[0].astext().split()),
                                     "id": node["ids"][0] if node["ids"] else ""})
                body = body[1:]
            return head + [b for child in body for b in self.block(child)]
        finally:
            self.level -= 1

    def title_text(self, node) -> str:
        """A heading's text: docutils' title as plain text, every character a Markdown
        inline parser would take for markup escaped.  Inline markup is dropped on purpose:
        `*__slots__*` written as emphasis became a heading "slots", and a code span glued
        to a word (`with`-statement) a title with a space inside."""
        return _TITLE_SPECIAL.sub(r"\\\1", " ".join(node.astext().split()))

    def _title(self, node) -> list[str]:  # a title outside a section: topic, sidebar, table
        return [f"**{self.inline_line(node)}**"]

    _rubric = _subtitle = _title

    def _paragraph(self, node) -> list[str]:
        text = self.inline(node)
        return [_escape_lines(text)] if text.strip() else []

    def _literal_block(self, node) -> list[str]:
        classes = [c for c in node["classes"] if c != "code"]
        return [_fence(node.astext(), classes[0] if "code" in node["classes"] and classes else "")]

    def _doctest_block(self, node) -> list[str]:
        return [_fence(node.astext(), "pycon")]

    def _math_block(self, node) -> list[str]:
        return [_fence(node.astext(), "math")]

    def _line_block(self, node) -> list[str]:
        lines = [self.inline_line(line) if isinstance(line, nodes.line) else "\n".join(self._line_block(line))
                 for line in node.children]
        return [_escape_lines("\n".join(lines))]

    def _block_quote(self, node) -> list[str]:
        inner = "\n\n".join(self.blocks(node))
        return ["\n".join(f"> {line}" if line else ">" for line in inner.split("\n"))] if inner.strip() else []

    def _attribution(self, node) -> list[str]:
        return [f"— {self.inline_line(node)}"]

    def _items(self, items: list[list[str]], markers: list[str]) -> list[str]:
        rendered, loose = [], any(len(blocks) > 1 for blocks in items)
        for blocks, marker in zip(items, markers):
            body = "\n\n".join(blocks) or ""
            rendered.append(_indent(body, marker + " ", " " * (len(marker) + 1)))
        return ["\n\n".join(rendered) if loose else "\n".join(rendered)]

    def _bullet_list(self, node) -> list[str]:
        items = [self.blocks(item) for item in node.children]
        return self._items(items, ["-"] * len(items)) if items else []

    def _enumerated_list(self, node) -> list[str]:
        items = [self.blocks(item) for item in node.children]
        start = node.get("start", 1)
        return self._items(items, [f"{start + i}." for i in range(len(items))]) if items else []

    def _definition_list(self, node) -> list[str]:
        out = []
        for item in node.children:
            term = " : ".join(self.inline_line(c) for c in item.children
                              if isinstance(c, (nodes.term, nodes.classifier)))
            body = [b for c in item.children if isinstance(c, nodes.definition) for b in self.blocks(c)]
            out.append(_escape_lines(f"**{term}**") if term else "")
            out.extend(body)
        return [b for b in out if b]

    def _field_list(self, node) -> list[str]:
        items = []
        for field in node.children:
            name = self.inline_line(field[0]) if len(field) else ""
            body = self.blocks(field[1]) if len(field) > 1 else []
            items.append(self._labelled(name, body))
        return self._items(items, ["-"] * len(items)) if items else []

    _docinfo = _field_list

    def _author(self, node) -> list[str]:  # docinfo's known fields come as their own nodes
        return [f"**{node.__class__.__name__.capitalize()}:** {self.inline_line(node)}"]

    _authors = _organization = _address = _contact = _version = _revision = _status = _date = \
        _copyright = _author

    def _option_list(self, node) -> list[str]:
        items = []
        for item in node.children:
            options = ", ".join(c.astext() for c in item.findall(nodes.option))
            body = [b for c in item.children if isinstance(c, nodes.description) for b in self.blocks(c)]
            items.append([_code_span(options) + (" " + body[0] if body else "")] + body[1:])
        return self._items(items, ["-"] * len(items)) if items else []

    def _admonition(self, node) -> list[str]:
        body = list(node.children)
        if body and isinstance(body[0], nodes.title):
            label, body = self.inline_line(body[0]), body[1:]
        else:
            label = node.__class__.__name__.replace("_", " ").capitalize()
        blocks = [b for child in body for b in self.block(child)]
        return self._labelled(label, blocks)

    def _labelled(self, label: str, blocks: list[str]) -> list[str]:
        head = f"**{label}:**"
        if blocks and _PLAIN_START.match(blocks[0]):  # a paragraph: the label opens it
            return [f"{head} {blocks[0]}"] + blocks[1:]
        return [head] + blocks

    def _container(self, node) -> list[str]:
        if "unknown-directive" not in node["classes"]:
            return self.blocks(node)
        blocks = self.blocks(node)
        return self._labelled(node["label"], blocks) if node.get("label") else blocks

    def _topic(self, node) -> list[str]:
        return self.blocks(node)

    _sidebar = _compound = _topic

    def _figure(self, node) -> list[str]:
        return self.blocks(node)

    def _caption(self, node) -> list[str]:
        return self._paragraph(node)

    def _legend(self, node) -> list[str]:
        return self.blocks(node)

    def _image(self, node) -> list[str]:
        alt = _TITLE_SPECIAL.sub(r"\\\1", node.get("alt", ""))
        return [f"![{alt}]({node.get('uri', '')})"] if alt else []

    def _footnote(self, node) -> list[str]:
        label = node[0].astext() if len(node) and isinstance(node[0], nodes.label) else ""
        blocks = [b for child in node.children if not isinstance(child, nodes.label) for b in self.block(child)]
        return self._labelled(f"[{label}]", blocks) if label else blocks

    _citation = _footnote

    def _transition(self, node) -> list[str]:
        return ["* * *"]

    def _table(self, node) -> list[str]:
        out = []
        title = next((c for c in node.children if isinstance(c, nodes.title)), None)
        if title is not None:
            out.append(f"**{self.inline_line(title)}**")
        for group in node.findall(nodes.tgroup):
            out.append(self.gfm_table(group))
            break
        return out

    def gfm_table(self, group) -> str:
        """A tgroup as a GFM table, one line a row; spanned cells repeat nothing (empty)."""
        ncols = group.get("cols", 0)
        rows, pending = [], {}  # pending: column -> rows still covered by a cell above
        body_rows = [r for part in group.children if isinstance(part, (nodes.thead, nodes.tbody))
                     for r in part.children]
        for row in body_rows:
            cells, col = [], 0
            for entry in row.children:
                while pending.get(col, 0) > 0:
                    pending[col] -= 1
                    cells.append("")
                    col += 1
                text = self.cell_text(entry)
                span = entry.get("morecols", 0) + 1
                for k in range(span):
                    cells.append(text if k == 0 else "")
                    if entry.get("morerows", 0):
                        pending[col + k] = entry["morerows"]
                col += span
            while col < ncols:
                if pending.get(col, 0) > 0:
                    pending[col] -= 1
                cells.append("")
                col += 1
            rows.append(cells)
        width = max([ncols] + [len(r) for r in rows]) or 1
        rows = [r + [""] * (width - len(r)) for r in rows] or [[""] * width]
        line = lambda cells: "| " + " | ".join(cells) + " |"  # noqa: E731
        return "\n".join([line(rows[0]), "|" + "---|" * width] + [line(r) for r in rows[1:]])

    def cell_text(self, entry) -> str:
        blocks = self.blocks(entry)
        text = " ".join(" ".join(b.split()) for b in blocks)
        return text.replace("|", "\\|")

    # ---- inline

    def inline_line(self, node) -> str:
        return " ".join(self.inline(node).split())

    def inline(self, node) -> str:
        if isinstance(node, nodes.Text):
            return str(node)
        if isinstance(node, (nodes.system_message, nodes.raw, nodes.target)) and not node.children:
            return ""
        if isinstance(node, (nodes.system_message, nodes.raw, nodes.pending, nodes.substitution_definition)):
            return ""
        inner = "".join(self.inline(c) for c in node.children)
        if isinstance(node, nodes.strong):
            return f"**{inner}**" if inner.strip() else inner
        if isinstance(node, (nodes.emphasis, nodes.title_reference)):
            return f"*{inner}*" if inner.strip() else inner
        if isinstance(node, nodes.literal):
            return _code_span(node.astext())
        if isinstance(node, nodes.math):
            return f"${node.astext()}$"
        if isinstance(node, (nodes.footnote_reference, nodes.citation_reference)):
            return f"[{node.astext()}]"
        if isinstance(node, nodes.image):
            return node.get("alt", "")
        if isinstance(node, nodes.problematic):
            return node.astext()
        return inner


# ---- the stage-01 reader

def read_rst(data: bytes) -> dict:
    """reST converted to Markdown (rst_to_markdown above); the first section's title is the title.

    When docutils itself fails (its transforms raise on some self-referring substitutions,
    found by fuzzing), the file is still text a person wrote: it is kept as plain text,
    format `text`, with the failure in `note`, rather than an error row with no text."""
    from pipekit.read.text import decode_text

    text, encoding, note = decode_text(data)
    try:
        markdown, title, anchors, refused = _convert(text)
    except Exception as exc:  # noqa: BLE001 — RecursionError included: a deep nesting is still text
        problem = " ".join(str(exc).split())
        problem = problem if len(problem) <= 100 else problem[:99] + "…"
        failed = f"docutils could not convert it ({type(exc).__name__}: {problem}): read as plain text"
        return {"text": text, "format": "text", "encoding": encoding,
                "note": f"{note}; {failed}" if note else failed}
    if refused:
        shown = ", ".join(refused[:3]) + (", …" if len(refused) > 3 else "")
        note = "; ".join(filter(None, [note, f"not read: {len(refused)} file insertion{'s' if len(refused) > 1 else ''} "
                                             f"({shown}): a document is read alone, never the files it pulls in"]))
    return {"text": markdown, "title": title, "encoding": encoding, "note": note, "anchors": anchors or None}
