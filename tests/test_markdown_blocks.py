"""pipekit/chunk/markdown_blocks.py on its own: the block scanner and the front-matter reader,
with markdown-it-py (and its front-matter plugin) as the referee.  The scanner's
generated-document comparison with markdown-it is in test_03_properties.py."""
from __future__ import annotations

import pytest

from pipekit.chunk.markdown_blocks import scan_blocks
from pipekit.read.markdown import front_matter_end, front_matter_title
from test_03_oracle import front_matter_span, oracle_blocks

FRONT = [
    "---\ntitle: A\n---\n# H\n",
    "---\ntitle: A\n...\ntext\n",
    "---\r\ntitle: CRLF\r\n---\r\nbody\r\n",
    "---\nno: end\n\ntext without a closing line\n",
    "--- page 1 ---\ntext\n",  # a page marker is not front matter
    "text\n---\ntitle: late\n---\n",
]


@pytest.mark.parametrize("text", FRONT)
def test_front_matter_ends_where_markdown_it_says(text):
    lines = text.split("\n")
    end = front_matter_end(lines)
    chars = sum(len(ln) + 1 for ln in lines[:end])
    expect = front_matter_span(text) if text.split("\n", 1)[0].rstrip("\r") == "---" else 0
    assert min(chars, len(text)) == expect


def test_front_matter_title():
    assert front_matter_title("---\ntitle: Operations  Handbook\nowner: x\n---\n# H\n") == "Operations Handbook"
    assert front_matter_title("---\r\ntitle: CRLF\r\n---\r\nbody") == "CRLF"
    assert front_matter_title("---\ntitle: 2026\n---\n") == "2026"
    assert front_matter_title("# No front matter\n---\ntitle: x\n---\n") is None
    assert front_matter_title("---\ntitle: [unclosed\n---\n") is None  # malformed: no title, no error
    assert front_matter_title("---\ntitle: true\n---\n") is None
    assert front_matter_title("---\nowner: x\n---\n") is None


def test_blocks_after_front_matter_are_the_ones_markdown_it_finds():
    text = "---\ntitle: A\n---\nIntro\n\n## Sub\n\n```\n# code\n```\n\n- item\n"
    lines = text.split("\n")
    first = front_matter_end(lines)
    blocks, marks = scan_blocks(lines, first, markers=True)
    assert [(b[0], b[1], b[2]) for b in blocks] == [(k, a, b) for k, a, b in oracle_blocks(text)]
    assert blocks[1][3] == (2, "Sub") and marks == []
