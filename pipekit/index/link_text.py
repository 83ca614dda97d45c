"""Markdown links read as a reader sees them: their text, not their destination.

A rendered `[the logging cookbook](../howto/logging-cookbook.html#logging-cookbook "Logging
Cookbook")` shows three words; the chunk's text holds eleven more (`howto`, `html`,
`logging`, `cookbook` again, the title ...).  Indexed, those made a passage match words a
reader never sees in it, and counted a linked name two or three times; shown in a
snippet, the markup buried the sentence.  This module turns links into their text for
the two readers of a chunk's text that are not the chunk itself:

* `drop_link_destinations(texts)`: stage 04's indexed text (a pyarrow string column,
  rewritten in Arrow's RE2 kernels, only the rows that hold a candidate), as
  pipekit/chunk/headings.py's `drop_heading_attribute_lists` drops heading attribute lists;
* `link_text(text)`: one passage, for the snippets of `pipekit search` and stage 05's
  printed results.

What counts, by CommonMark's rules as far as a regular expression follows them:
inline links and images `[text](dest "title")` / `![alt](src)` become their text (alt
text for an image; a link around an image becomes the alt); a link reference
definition line `[label]: dest "title"` goes.  Autolinks (`<https://...>`) stay: their
text *is* the address.  Reference links (`[text][label]`) stay as written: whether one is
a link depends on a definition elsewhere in the document, and read blindly the pattern
took `[0-9][0-9]` in a regular expression and a table's footnote marks `[1][2]` for links
(10 of the Python manual's 7,268 chunks); a label is a word or two at most.  The
chunk's own `text` column keeps the markup (SPEC: it is the source span, and a reader
following up wants the address).  On the Python manual's chunks, Arrow's and Python's
readings agree on every one, and 5 chunks keep a `](`, each in code (`squares[2]()`).

Not CommonMark-exact, on purpose: a `[` right after a letter, digit, `_`, `]` or `\\`
does not start a link here (`handlers[event](payload)` in code is a call, and nearly
every link in prose follows a space or punctuation); link text nests brackets one level
deep; code spans and fences are not told apart from prose (a fenced `[x](y)` after a
space loses `y` from the index).  A bracketed label such as `[1]` or `[^note]` stays.
"""
from __future__ import annotations

import re

import numpy as np

from pipekit.run.lazy import lazy
from pipekit.run.arrays import rows_matching

pa, pc = lazy("pyarrow"), lazy("pyarrow.compute")  # imported on first use: `search` starts without Arrow (pipekit/run/lazy.py)

__all__ = ["drop_link_destinations", "link_text"]

# What may precede a link's `[` (see the module docstring).  Python looks behind; RE2 has
# no look-behind, so there the character is matched and written back (group 1); its `\w`
# is ASCII, so letters and digits are named as Unicode classes, as Python's `\w` has them.
_BEFORE_PY, _BEFORE_RE2 = r"(?<![\w\]\\])", r"(^|[^\pL\pN_\]\\])"
# Link text: one level of nested brackets, and line breaks but no blank line (a converted
# page breaks long link texts across lines: 14 of the Python manual's chunks kept one).
_TEXT = r"((?:[^\[\]\n\\]|\\.|\n[ \t]*[^\s\[\]\\]|\[[^\[\]\n]*\])*)"
_DEST = r"(?:<[^<>\n]*>|(?:[^\s()<][^\s()]*)?(?:\([^\s()]*\)[^\s()]*)*)"
_TITLE = r"""(?:[ \t]+(?:"[^"\n]*"|'[^'\n]*'|\([^()\n]*\)))?"""
_INLINE = r"!?\[" + _TEXT + r"\]\([ \t]*" + _DEST + _TITLE + r"[ \t]*\)"
_DEFINITION = (r"(?m)^ {0,3}\[[^\]\n^][^\]\n]*\]:[ \t]*(?:<[^<>\n]*>|\S+)"
               r"""(?:[ \t]+(?:"[^"\n]*"|'[^'\n]*'|\([^()\n]*\)))?[ \t]*$""")
# A row is rewritten only if it may hold one (most chunks of most corpora hold none).
_CANDIDATE = r"(?m)\]\(|^ {0,3}\[[^\]\n]+\]:"
# An image inside a link is matched once the link around it is gone: two passes.  In RE2
# a link's `)` is consumed as the character before the next link's `[` (`[a](x)[b](y)`):
# each replaced link leaves a mark that counts as such a character, removed at the end.
_PASSES = 2
_MARK = "\x01"

_INLINE_RE = re.compile(_BEFORE_PY + _INLINE)
_DEFINITION_RE = re.compile(_DEFINITION)
_CANDIDATE_RE = re.compile(_CANDIDATE)


def link_text(text: str) -> str:
    """The text with its links as their text and definitions dropped."""
    if not _CANDIDATE_RE.search(text):
        return text
    text = _DEFINITION_RE.sub("", text)
    for _ in range(_PASSES):
        text = _INLINE_RE.sub(r"\1", text)
    return text


def drop_link_destinations(texts: pa.Array) -> pa.Array:
    """Chunk texts (a pyarrow string array) with `link_text` applied to each, in Arrow."""
    if len(texts) == 0:
        return texts
    rows = rows_matching(texts, _CANDIDATE, ord("]"))  # both kinds of link need a `]`
    if len(rows) == 0:
        return texts
    fixed = pc.replace_substring_regex(texts.take(rows), _DEFINITION, "")
    for _ in range(_PASSES):
        fixed = pc.replace_substring_regex(fixed, _BEFORE_RE2 + _INLINE, r"\1\2" + _MARK)
    fixed = pc.replace_substring(fixed, _MARK, "")
    mask = np.zeros(len(texts), dtype=bool)
    mask[rows] = True
    return pc.replace_with_mask(texts, pa.array(mask), fixed.cast(texts.type))
