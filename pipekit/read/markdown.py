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
    """A text file whose YAML front matter may name its title."""
    row = read_text_file(data)
    row["title"] = front_matter_title(row["text"])
    return row


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
