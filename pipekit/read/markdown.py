"""Markdown files: their text as decoded, and the title their YAML front matter names.

The structure (headings, fences, tables) is stage 03's to find (pipekit/chunk/markdown_blocks.py);
here the reader only keeps the text and takes the page's title from its front matter.
Also here: the two helpers of the readers that *write* Markdown for stage 03 (notebook,
python): a code fence that its code cannot close, and the escape that keeps foreign text
(a docstring, a raw cell) from making headings of its own.
"""
from __future__ import annotations

import re

from pipekit.read.text import read_text_file


def read_markdown(data: bytes) -> dict:
    """A text file whose YAML front matter may name its title; MyST directive fences as MyST
    renders them (myst_directives)."""
    row = read_text_file(data)
    row["text"] = myst_directives(row["text"])
    row["title"] = front_matter_title(row["text"])
    return row


# ---- MyST directives ---------------------------------------------------------------------
#
# MyST (Sphinx's Markdown) writes a directive as a fence whose info string is `{name}`:
# ```{note} ... ```, ```{code-block} python ... ```, :::{tip} ... ::: .  Read as CommonMark,
# every one is a code block: a note's prose was shown and chunked as code, and a code
# block's `:linenos:` option lines as code too.  Here, in stage 01 (so stage 03's spans
# still point into the text stage 02 cleans), each becomes what MyST renders: an
# admonition's content is text under its label (`**Note:** ...`, as the reST reader writes
# it), a code directive a plain fence with its language, a table of contents or an image
# nothing (they are no text a reader reads here; `include` reads no other file, as in reST).
# Not done: directives inside a list item or a quote (indented past three spaces), roles
# (`{ref}`...`` stay as written), and MyST's `{eval-rst}` content (kept as its text).

_DIRECTIVE_FENCE = re.compile(r"( {0,3})(`{3,}|~{3,}|:{3,})\{([\w:.-]+)\}[ \t]*(.*?)[ \t]*$")
_PLAIN_FENCE = re.compile(r"( {0,3})(`{3,}|~{3,})(.*)$")
_OPTION_LINE = re.compile(r"[ \t]*:[\w-]+:(?:[ \t].*)?$")
_HEADING_LIKE = re.compile(r" {0,3}(?:#{1,6}(?:[ \t]|$)|=+[ \t]*$|-+[ \t]*$)")
_LABELS = {"note": "Note", "warning": "Warning", "tip": "Tip", "important": "Important", "hint": "Hint",
           "caution": "Caution", "attention": "Attention", "danger": "Danger", "error": "Error",
           "seealso": "See also", "todo": "Todo", "versionadded": "Added in version",
           "versionchanged": "Changed in version", "deprecated": "Deprecated since version"}
_TITLED = {"admonition", "dropdown", "topic", "sidebar", "card", "margin"}  # the argument is the title
_CODE = {"code-block", "code", "sourcecode", "code-cell", "testcode", "testoutput", "doctest", "ipython",
         "jupyter-execute", "prompt"}
_NO_TEXT = {"toctree", "tableofcontents", "contents", "include", "literalinclude", "image", "highlight",
            "currentmodule", "py:currentmodule", "index", "bibliography", "raw"}
_ANY_DIRECTIVE = re.compile(r"^ {0,3}(?:`{3,}|~{3,}|:{3,})\{", re.M)


def myst_directives(text: str) -> str:
    """`text` with each MyST directive fence written as MyST renders it (see above)."""
    if _ANY_DIRECTIVE.search(text) is None:
        return text
    nl = "\r\n" if "\r\n" in text else "\n"
    lines = text.split(nl)
    first = front_matter_end(lines)
    return nl.join(lines[:first] + _directives(lines[first:], inside=False))


def _closing(lines: list[str], start: int, fence: str) -> int:
    """Index of the line that closes the fence opened at `start` (len(lines): unclosed,
    which CommonMark runs to the end of the document)."""
    close = re.compile(rf" {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
    return next((j for j in range(start + 1, len(lines)) if close.match(_bare(lines[j]))), len(lines))


def _directives(lines: list[str], inside: bool) -> list[str]:
    out, i = [], 0
    while i < len(lines):
        line = _bare(lines[i])
        m = _DIRECTIVE_FENCE.match(line)
        plain = None if m else _PLAIN_FENCE.match(line)
        if plain and not (plain.group(2)[0] == "`" and "`" in plain.group(3)):
            end = _closing(lines, i, plain.group(2))  # a code fence: its lines are code, untouched
            out += lines[i:end + 1]
            i = end + 1
            continue
        if m is None:
            # Inside an admonition a heading line is the note's text, not a section of the
            # document (MyST makes no section of it): escaped, as CommonMark allows.
            out.append("\\" + lines[i].lstrip(" ") if inside and _HEADING_LIKE.match(line) else lines[i])
            i += 1
            continue
        indent, fence, name, arg = m.groups()
        end = _closing(lines, i, fence)
        body = [b[min(len(indent), len(b) - len(b.lstrip(" "))):] for b in lines[i + 1:end]]
        out += ["", *_rendered(name.lower(), arg, _without_options(body)), ""]
        i = end + 1
    return out


def _without_options(body: list[str]) -> list[str]:
    """A directive's content without its options: `:key: value` lines, or a `---` YAML block."""
    if body and _bare(body[0]) == "---":
        end = next((j for j in range(1, len(body)) if _bare(body[j]) == "---"), None)
        if end is not None:
            return body[end + 1:]
    k = 0
    while k < len(body) and _OPTION_LINE.match(body[k]):
        k += 1
    return body[k:]


def _rendered(name: str, arg: str, body: list[str]) -> list[str]:
    if name in _NO_TEXT:
        return []
    if name in _CODE or name == "math":
        info = "math" if name == "math" else (arg.split()[0] if arg else "")
        while body and not body[0].strip():  # the blank line that ends the options is no code
            body = body[1:]
        return code_fence("\n".join(body), info).split("\n")
    content = _directives(body, inside=True)
    if name in _LABELS or name in _TITLED:
        label = _LABELS.get(name, "")
        label = f"{label} {arg}".strip() if name not in _TITLED else (arg or name.capitalize())
        head = f"**{label}:**"
        at = next((k for k, c in enumerate(content) if c.strip()), None)
        if at is not None and re.match(r"[^\s`>|#\\*!:~<-]", content[at]):  # a paragraph: the label opens it
            return content[:at] + [f"{head} {content[at]}"] + content[at + 1:]
        return [head, ""] + content
    # A directive MyST renders as figure or unknown: its argument (a figure's is its image:
    # not text) and its content, as text.
    return ([arg] if arg and name != "figure" else []) + ([""] if arg and content else []) + content


def _bare(line: str) -> str:
    """A line as CommonMark compares it: without its CR and trailing blanks."""
    return (line[:-1] if line.endswith("\r") else line).rstrip(" \t")


def front_matter_end(lines: list[str]) -> int:
    """Number of lines of YAML front matter at the top (`---` ... `---` or `...`), or 0.

    Front matter is not Markdown: without this, markdown-it reads its closing `---` as a
    setext underline and the last YAML line becomes a bogus heading.  It is still text
    the user wrote (often the page's one-line description), so stage 03 gives it a
    chunk of its own instead of dropping it (SPEC rule 9)."""
    if not lines or _bare(lines[0]) != "---":
        return 0
    for j in range(1, len(lines)):
        s = _bare(lines[j])
        if s == "..." or (len(s) >= 3 and s == "-" * len(s)):
            return j + 1
    return 0


def front_matter_title(text: str) -> str | None:
    """`title:` of the document's YAML front matter; None if absent or not plain YAML.

    Static-site generators keep a page's real title there: stage 01 makes it the title
    column, and stage 03 opens the heading path with it when the page has no level-1
    heading of its own.  Malformed front matter is not an error: the document is still
    a good document without a title, and its front matter is still chunked as text."""
    if not text.startswith("---"):
        return None
    head = text[:65536].split("\n")  # front matter sits at the top; a title beyond 64 KiB is no title
    end = front_matter_end(head)
    if end < 2:
        return None
    import yaml  # only documents with front matter pay for the import

    try:
        # the C safe loader when PyYAML has libyaml: faster, and as safe
        meta = yaml.load("\n".join(head[1:end - 1]), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return None
    title = meta.get("title") if isinstance(meta, dict) else None
    if not isinstance(title, (str, int, float)) or isinstance(title, bool):
        return None
    return " ".join(str(title).split()) or None


# ---- writing Markdown (the readers that produce it: notebook, python)

# Lines that Markdown reads as block syntax but that, in text brought in from elsewhere
# (a docstring, a raw cell), are just text: an ATX opener, a fence, a setext underline or
# thematic break (a numpy `----------` under `Parameters` made "Parameters" a heading), a
# table delimiter row, an HTML block start (`<pre>` or `<!--` left open swallows every
# heading after it), a page marker (stage 02's `--- page N ---`).  Up to three spaces of
# indent: four make an indented code block, where none of these is syntax.
_BLOCK_LOOKALIKE = re.compile(
    r" {0,3}(?:#{1,6}(?:[ \t]|$)|`{3,}|~{3,}|=+[ \t]*$|[-*_+][ \t]*(?:[-*_][ \t]*)+$"
    r"|[-:|][-:| \t]*\|[-:| \t]*$|[-:][-:| \t]*$|<|--- page \d+ ---)")
_BACKTICKS = re.compile(r"`{3,}")


def escape_block_syntax(text: str) -> str:
    """`text` with a backslash before each line Markdown would read as a block construct.

    A backslash before ASCII punctuation is CommonMark's own escape: the line reads as the
    same words, as a paragraph line, and stage 04 indexes the same terms.  Indentation is
    kept (it is the structure of a numpy or Google docstring's parameter list)."""
    return "\n".join(_escape_line(line) for line in text.split("\n"))


def _escape_line(line: str) -> str:
    m = _BLOCK_LOOKALIKE.match(line)
    if m is None:
        return line
    indent = len(line) - len(line.lstrip(" "))
    return line[:indent] + "\\" + line[indent:]


def code_fence(code: str, info: str = "") -> str:
    """`code` as a fenced block whose fence is longer than any backtick run inside, so code
    that holds a fence (Markdown in a string, a notebook about notebooks) cannot close it."""
    longest = max((len(m) for m in _BACKTICKS.findall(code)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{info}\n{code.rstrip(chr(10))}\n{ticks}"
