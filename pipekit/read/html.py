"""HTML files: converted to Markdown (pipekit/read/html_markdown.py) so stage 03 finds the page's structure."""
from __future__ import annotations

import re

from pipekit.read.html_markdown import convert_html, text_chars
from pipekit.read.text import Unreadable, decode_text

# In the note of a page that kept less than half its visible text: stage 01's summary names
# such pages (pipekit's own readers are the ones that lost the text, so a person must hear of it).
SHRUNK = "visible characters"
# Half: converting moves a page's characters by a few percent either way (permalinks and
# link addresses out, image alt text in; 0.84-1.2 on 993 pages of five generators), and what
# the issue saw lost was whole elements, the page's body or a section.  Only a generator's
# sidebar on a near-empty page outweighs the page (Node's policy.html: 158 of 831).
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
