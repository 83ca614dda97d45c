"""Markdown files: their text as decoded, and the title their YAML front matter names.

The structure (headings, fences, tables) is stage 03's to find (pipekit/chunk/markdown_blocks.py);
here the reader only keeps the text and takes the page's title from its front matter.
"""
from __future__ import annotations

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
