"""Jupyter notebooks (.ipynb): the cells as Markdown, so stage 03 chunks them by their headings.

A notebook is JSON, and JSON must never reach a chunk (SPEC: container markup stays out):
a search for "outputs" would otherwise hit every notebook, and a chunk of `{"cell_type":`
cites nothing a person wrote.  nbformat reads the JSON of any notebook version (v3's
worksheets are upgraded to v4's cells, a cell's source given as a list of lines is
joined) and this module writes the cells out as one Markdown document:

* a Markdown cell as it is: its headings become heading trails in stage 03, which chunks
  Markdown by its syntax.  A fence the cell leaves open is closed at the cell's end
  (Jupyter renders each cell on its own, so an open fence there ends with its cell; here
  it would swallow every later heading), and images embedded as base64 `data:` URIs
  are dropped (kilobytes of noise a word each, never a word anyone searches);
* a code cell as fenced code in the notebook's language (`language_info.name`, else
  `kernelspec.language`), the fence longer than any backtick run in the code;
* a raw cell fenced too, tagged with its format (`rst`, `latex`, `html` ...): it is text
  the author wrote, so its words are kept, but it is meant for another format's converter,
  and read as Markdown its reST underlines and HTML would make headings the notebook does
  not have;
* outputs only with `documents.notebook_outputs: true`, and then only text: a stream
  (stdout, stderr), a result's `text/plain`, an error's `name: value` line, each fenced
  as `output`.  Off by default: outputs are what the code printed, not what the author
  wrote — logs, progress bars, long reprs of tables — and they crowd the prose out of
  the chunks a query should find.

Never kept: attachments, images and every other rich output (HTML, SVG, JavaScript,
widgets), cell metadata, execution counts.  Not validated against nbformat's JSON schema:
a real notebook with one odd metadata field is still a notebook a person can read, so
only what is not JSON, or JSON without cells, is an error ("not a Jupyter notebook: ...").
The title is the first level-1 heading of the Markdown cells, else None.
"""
from __future__ import annotations

import json
import re

from pipekit.read.markdown import code_fence
from pipekit.read.text import Unreadable, decode_text

__all__ = ["read_notebook", "notebook_to_markdown"]

# An image inlined in a Markdown or raw cell: `![x](data:image/png;base64,...)` or
# `<img src="data:...">`.  The URI goes, the alt text and the tag's words stay.
_DATA_URI = re.compile(r"data:[\w.+-]+/[\w.+-]+(?:;[\w.+-]+=[\w.+-]+)*;base64,[A-Za-z0-9+/=\s]*")
# Terminal colours in tracebacks and stream outputs (IPython colours its errors).
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# A fence opener or closer in a Markdown cell (CommonMark: up to 3 spaces, 3+ of one char).
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)$")
_ATX_H1 = re.compile(r" {0,3}#(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT_H1 = re.compile(r" {0,3}=+[ \t]*$")
# Raw cells' formats as nbconvert names them (`metadata.format` / `raw_mimetype`): the
# fence's info string, so a reader of the chunk sees what the text is.
_RAW_INFO = {"text/restructuredtext": "rst", "text/x-rst": "rst", "text/latex": "latex", "text/html": "html",
             "text/markdown": "markdown", "text/x-python": "python", "text/asciidoc": "asciidoc"}


def read_notebook(data: bytes, outputs: bool = False) -> dict:
    """The stage-01 columns of one .ipynb file; raises Unreadable when it is no notebook."""
    text, encoding, note = decode_text(data)
    if not text.strip():  # an empty file is an empty document (SPEC: no chunks, no error), as an empty .md is
        return {"text": "", "title": None, "encoding": encoding, "note": note}
    nb = parse_notebook(text)
    markdown, title = notebook_to_markdown(nb, outputs)
    return {"text": markdown, "title": title, "encoding": encoding, "note": note}


def parse_notebook(text: str) -> dict:
    """The notebook as nbformat's v4 dict; Unreadable with the reason when it is none."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Unreadable(f"not a Jupyter notebook: invalid JSON at line {exc.lineno} column {exc.colno} "
                         f"({exc.msg})") from None
    except RecursionError:
        raise Unreadable("not a Jupyter notebook: JSON nested too deeply") from None
    if not isinstance(raw, dict):
        kind = {list: "an array", str: "a string"}.get(type(raw), "a number or literal")
        raise Unreadable(f"not a Jupyter notebook: the JSON is {kind}, not an object with cells")
    if not isinstance(raw.get("cells", raw.get("worksheets")), list):
        raise Unreadable("not a Jupyter notebook: the JSON object has no 'cells' list")
    import nbformat  # imported here: only folders with notebooks pay for it

    try:
        major, minor = raw.get("nbformat", 4), raw.get("nbformat_minor", 0)
        if major not in nbformat.versions:
            raise Unreadable(f"not a Jupyter notebook: nbformat version {major!r} is unknown")
        nb = nbformat.versions[major].to_notebook_json(raw, minor=minor)
        nb = nbformat.convert(nb, 4)
    except Unreadable:
        raise
    except (AttributeError, KeyError) as exc:  # a cell of an old format without a key it must have
        raise Unreadable(f"not a Jupyter notebook: a cell lacks its {str(exc).strip(chr(39))!r} key") from None
    except Exception as exc:  # noqa: BLE001 — nbformat's upgrade of a malformed v3 file raises anything
        raise Unreadable(f"not a Jupyter notebook: nbformat cannot read it ({type(exc).__name__}: {exc})") from None
    if not isinstance(nb.get("cells"), list):
        raise Unreadable("not a Jupyter notebook: no list of cells")
    return nb


def notebook_to_markdown(nb: dict, outputs: bool = False) -> tuple[str, str | None]:
    """(Markdown of the notebook's cells, its first level-1 heading or None)."""
    language = notebook_language(nb)
    parts: list[str] = []
    title = None
    for cell in nb["cells"]:
        if not isinstance(cell, dict):
            continue
        kind, source = cell.get("cell_type"), _source(cell.get("source"))
        if kind == "markdown":
            source = _DATA_URI.sub("", source)
            if source.strip():
                parts.append(close_fences(source.strip("\n")))
                title = title or first_h1(source)
        elif kind == "code":
            if source.strip():
                parts.append(code_fence(source.strip("\n"), language))
            if outputs:
                parts += [code_fence(t, "output") for t in output_texts(cell.get("outputs"))]
        elif kind == "raw" and source.strip():
            meta = cell.get("metadata") or {}
            fmt = meta.get("format") or meta.get("raw_mimetype") or ""
            parts.append(code_fence(_DATA_URI.sub("", source).strip("\n"), _RAW_INFO.get(fmt, "raw")))
    return "\n\n".join(parts).replace("\x0c", "\n") + ("\n" if parts else ""), title


def notebook_language(nb: dict) -> str:
    """The fence's info string: the kernel's language as one lower-case word, or ""."""
    meta = nb.get("metadata") or {}
    for name in ((meta.get("language_info") or {}).get("name"), (meta.get("kernelspec") or {}).get("language")):
        if isinstance(name, str) and name.split():
            word = name.split()[0].lower()
            return re.sub(r"[`~]", "", word)  # an info string holding a backtick is no fence opener
    return ""


def _source(source) -> str:
    if isinstance(source, list):  # nbformat joins these; a malformed cell may still hold one
        return "".join(s for s in source if isinstance(s, str))
    return source if isinstance(source, str) else ""


def output_texts(outputs) -> list[str]:
    """The text a person reads in a code cell's outputs: streams, `text/plain`, errors."""
    texts = []
    for out in outputs if isinstance(outputs, list) else []:
        if not isinstance(out, dict):
            continue
        kind = out.get("output_type")
        if kind == "stream":
            text = _source(out.get("text"))
        elif kind in ("execute_result", "display_data"):
            data = out.get("data") or {}
            # Beside an image, text/plain is only its placeholder ("<Figure size 640x480 with 1 Axes>").
            if any(str(mime).startswith("image/") for mime in data):
                continue
            text = _source(data.get("text/plain"))
        elif kind == "error":
            text = f"{out.get('ename', '')}: {out.get('evalue', '')}".strip(": ")
        else:
            continue
        text = _ANSI.sub("", text).strip("\n")
        if text.strip():
            texts.append(text)
    return texts


def close_fences(markdown: str) -> str:
    """A Markdown cell with the fence it leaves open closed at its end (Jupyter renders each
    cell alone: there the fence ends with the cell; in one document it would run on)."""
    open_fence = None
    for line in markdown.split("\n"):
        m = _FENCE.match(line)
        if m is None:
            continue
        run = m.group(1)
        if open_fence is None:
            if not (run[0] == "`" and "`" in m.group(2)):  # a backtick fence's info has no backtick
                open_fence = run
        elif run[0] == open_fence[0] and len(run) >= len(open_fence) and not m.group(2).strip():
            open_fence = None
    return markdown if open_fence is None else f"{markdown}\n{open_fence}"


def first_h1(markdown: str) -> str | None:
    """The text of the cell's first level-1 heading (ATX `# x` or setext `x` over `===`)."""
    fence = None
    previous = ""  # the paragraph line above, for a setext underline
    for line in markdown.split("\n"):
        m = _FENCE.match(line)
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not m.group(2).strip():
                fence = None
            continue
        if m is not None:
            fence, previous = m.group(1), ""
            continue
        atx = _ATX_H1.match(line)
        if atx is not None and (atx.group(1) or "").strip():
            return _plain(atx.group(1))
        if _SETEXT_H1.match(line) and previous.strip() and not previous.startswith("    "):
            return _plain(previous)
        previous = line
    return None


_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MARKS = re.compile(r"(?<!\\)(?:\*\*|__|\*|`)")


def _plain(heading: str) -> str | None:
    """A heading's words without the commonest inline markup (links, emphasis, code)."""
    text = _MARKS.sub("", _LINK.sub(r"\1", heading))
    text = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text)
    return " ".join(text.split()) or None
