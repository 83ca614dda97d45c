"""What of a chunk's text stage 04 indexes: the text a reader sees, not its markup.

A chunk's `text` is its span of the document as written (SPEC rule 6: citations point at
it), so it still holds markup that a rendered page never shows.  Two kinds of it put
words into the index that no reader finds on the page:

- a heading line's *attribute list* (`## Handling Errors { #handling-errors }`), whose
  id repeated the heading's words, or named something else (`{ #setup }` on
  "Installation"); the heading column already drops it (pipekit/headings.py);
- *HTML comments* (`<!-- ... -->`), which Markdown passes through to the page unrendered:
  Node.js's API reference keeps each function's change history in one (`added: v0.5.0`,
  `pr-url: https://github.com/...`, `description: ...`), editors leave notes and
  linter directives (`<!-- markdownlint-disable -->`) in them.  Measured on
  bench/docs_qa.py's 58 questions, leaving them out of the index finds the right
  document for one more question as written, and one more section and document with the
  project named; nothing is lost (bench/README.md).

Both are cut from whole Arrow columns: one cheap substring pass finds the few texts that
can hold them, and only those are rewritten (RE2), so text without markup costs a scan.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .headings import drop_heading_attribute_lists

# A comment as an HTML reader ends it: at the first `-->` (or at the end of the text when
# unclosed, as a browser does).
_COMMENT = r"(?s)<!--.*?(?:-->|$)"


def drop_html_comments(texts: pa.Array) -> pa.Array:
    """`texts` with every `<!-- ... -->` replaced by a space (words either side stay apart)."""
    if len(texts) == 0:
        return texts
    rows = np.flatnonzero(np.asarray(pc.fill_null(pc.match_substring(texts, "<!--"), False)))
    if len(rows) == 0:
        return texts
    fixed = pc.replace_substring_regex(texts.take(rows), _COMMENT, " ")
    mask = np.zeros(len(texts), dtype=bool)
    mask[rows] = True
    return pc.replace_with_mask(texts, pa.array(mask), fixed)


def indexed_text(texts: pa.Array) -> pa.Array:
    """A batch of chunk texts as stage 04 indexes them (see the module text)."""
    return drop_html_comments(drop_heading_attribute_lists(texts))
