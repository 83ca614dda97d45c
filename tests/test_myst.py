"""MyST directive fences (Sphinx's Markdown) read as MyST renders them, not as code.

```{note} ... ``` is a fenced code block to CommonMark: a note's prose was shown in
snippets and chunked as code, a code-block's `:linenos:` lines kept as code. Stage 01's
Markdown reader turns each directive into what MyST renders (pipekit/read/markdown.py).
"""
from __future__ import annotations

from pipekit.chunk.markdown_blocks import scan_blocks
from pipekit.read.markdown import myst_directives, read_markdown
from pipekit.run.stages import load_stage

PAGE = """\
# Installing

```{note}
Run the installer as **root**.
# not a section
```

```{code-block} python
:linenos:
:caption: setup.py

import os
```

::::{warning}
Back up first.

```{code-block} sh
rm -rf build
```
::::

```{admonition} Before you start
:class: tip
Read the release notes.
```

```{toctree}
:maxdepth: 2
intro
```

```{versionadded} 3.2
The `--user` flag.
```

```markdown
```{note}
a fence about MyST stays code
```
"""


def blocks(text: str) -> list[tuple[str, str]]:
    lines = text.split("\n")
    found, _ = scan_blocks(lines, 0, False)
    return [(b[0], "\n".join(lines[b[1]:b[2]])) for b in found]


def test_admonitions_are_text_and_code_blocks_are_code_with_their_language():
    text = read_markdown(PAGE.encode())["text"]
    kinds = blocks(text)
    assert ("para", "**Note:** Run the installer as **root**.\n\\# not a section") in kinds
    assert ("fence", "```python\nimport os\n```") in kinds  # options gone, the language kept
    assert ("para", "**Warning:** Back up first.") in kinds and ("fence", "```sh\nrm -rf build\n```") in kinds
    assert ("para", "**Before you start:** Read the release notes.") in kinds
    assert ("para", "**Added in version 3.2:** The `--user` flag.") in kinds
    assert "maxdepth" not in text and "intro" not in text  # a table of contents is no text here
    assert ("fence", "```markdown\n```{note}\na fence about MyST stays code\n```") in kinds
    assert [k for k, _ in kinds if k == "heading"] == ["heading"]  # `# not a section` made none


def test_stage_03_chunks_a_note_as_text_under_its_section():
    chunking = load_stage(3)
    text = read_markdown(PAGE.encode())["text"]
    chunks = chunking.chunk_document(text, settings=chunking.Settings(
        strategy="heading", target=400, max=1000, min=0, unit="words", overlap=0, page_markers="track"))
    assert {tuple(c["heading_path"]) for c in chunks} == {("Installing",)}
    body = "".join(c["text"] for c in chunks)
    assert "```{note}\nRun" not in body and ":linenos:" not in body and "**Note:** Run the installer" in body


def test_markdown_without_directives_is_untouched():
    plain = "# T\n\n```python\nx = {1}\n```\n\n```{not closed\n"
    assert myst_directives(plain) == plain
    crlf = "# T\r\n\r\n```{tip}\r\nUse it.\r\n```\r\n"
    assert myst_directives(crlf) == "# T\r\n\r\n\r\n**Tip:** Use it.\r\n\r\n"
