"""HTML files: converted to Markdown (pipekit/read/html_markdown.py) so stage 03 finds the page's structure."""
from __future__ import annotations

import re

from pipekit.read.html_markdown import convert_html, text_chars
from pipekit.read.text import Unreadable, decode_text

# In the note of a page that kept less than half its visible text: stage 01's summary names
# such pages (pipekit's own readers are the ones that lost the text, so a person must hear of it).
SHRUNK = "visible characters"
# Half: converting moves a page's count by far less (permalinks and link addresses out, image
# alt text in, a generator's bars out: 0.89-1.29 for 98 % of 993 pages of Python's, Flask's,
# SQLAlchemy's and Node's docs and R's and diffutils' texinfo manuals, 0.57 the least but
# one), and what issue 48 saw
# lost was whole elements, a page's body or a section.  The one page under half there is
# Node's policy.html, a stub whose module list (dropped) outweighs its 158 characters.
SHRUNK_BELOW = 0.5

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.I)


def read_html(data: bytes) -> dict:
    """HTML converted to Markdown (pipekit/read/html_markdown.py); `<title>` becomes the title,
    and each heading's id goes to `anchors` (the link to a passage: pipekit/chunk/anchors.py)."""
    declared = _META_CHARSET.search(data[:4096])
    text, encoding, note = decode_text(data, declared.group(1).decode("ascii") if declared else None)
    try:
        markdown, title, anchors, visible = convert_html(text)
    except RecursionError:
        raise Unreadable("HTML nested too deeply to convert") from None
    except Exception as exc:  # noqa: BLE001 — a parser bug on one page must not stop the folder
        raise Unreadable(f"HTML could not be converted ({type(exc).__name__}: {exc})") from None
    kept = text_chars(markdown)
    if kept < SHRUNK_BELOW * visible:
        shrunk = (f"the converted text keeps {kept:,} of the page's {visible:,} {SHRUNK}: content "
                  "taken for navigation or lost converting?")
        note = f"{note}; {shrunk}" if note else shrunk
    return {"text": markdown, "title": title, "encoding": encoding, "note": note, "anchors": anchors or None}
