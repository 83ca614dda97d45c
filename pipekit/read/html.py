"""HTML files: converted to Markdown (pipekit/read/html_markdown.py) so stage 03 finds the page's structure."""
from __future__ import annotations

import re

from pipekit.read.html_markdown import convert_html
from pipekit.read.text import Unreadable, decode_text

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.I)


def read_html(data: bytes) -> dict:
    """HTML converted to Markdown (pipekit/read/html_markdown.py); `<title>` becomes the title,
    and each heading's id goes to `anchors` (the link to a passage: pipekit/chunk/anchors.py)."""
    declared = _META_CHARSET.search(data[:4096])
    text, encoding, note = decode_text(data, declared.group(1).decode("ascii") if declared else None)
    try:
        markdown, title, anchors = convert_html(text)
    except RecursionError:
        raise Unreadable("HTML nested too deeply to convert") from None
    except Exception as exc:  # noqa: BLE001 — a parser bug on one page must not stop the folder
        raise Unreadable(f"HTML could not be converted ({type(exc).__name__}: {exc})") from None
    return {"text": markdown, "title": title, "encoding": encoding, "note": note, "anchors": anchors or None}
