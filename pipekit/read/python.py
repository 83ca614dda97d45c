"""Python sources (.py): the docstrings as Markdown sections, headed by their qualified names.

What a person searches a codebase's text for is its documentation: "how do I set a
timeout" is answered by `requests.api › request`'s docstring, not by the lines that
implement it.  So the standard library's `ast` parses the file (never imports or runs
it) and this module writes one Markdown document that stage 03 chunks by its headings:

* `# requests.api` — the module, named as Python imports it, from its path: the file's
  folders, innermost first, as long as they are identifiers, stopping at `src/` or at a
  folder that is not one (`requests-2.32.3/src/requests/api.py` -> `requests.api`,
  `pkg/__init__.py` -> `pkg`); then its docstring;
* one heading per documented class and function, a level deeper per level of nesting, so
  the heading trail is the qualified name (`requests.sessions › Session › request`;
  past Markdown's six levels the rest of the name is dotted onto the sixth); each section
  shows the signature in a ```python fence (`def get(url, params=None, **kwargs)`,
  rebuilt with `ast.unparse`, with its short decorators: `@property` says how to call
  it) and then the docstring;
* classes and functions inside `if`/`try`/`with` blocks of a module or class count
  (compatibility shims define their API there); a function's own body is code, so
  nothing defined inside one does.

Deliberate choices:
- Code bodies are never indexed: implementation words ("self", "return", local names)
  would match queries for reasons a reader cannot see in the cited docstring.
- A class or function without a docstring is left out: there is no documentation to
  find, only a name and parameters, which are code.  Listing their signatures in the
  parent's section was tried and measured: on requests' sdist, a test class's list of
  undocumented `test_*_timeout(self, ...)` signatures (26 words, "timeout" six times)
  ranked 3rd for "how do I set a timeout on a requests call", above every docstring of
  the library.  A class without a docstring still gets a heading (alone, no signature)
  when something inside it has one, so its methods' trails are whole.
- Private names (`_x`) are kept when documented, like public ones: in a project's own
  sources that is where the reasons are written.
- Docstrings are reST, numpy or Google style, not Markdown: a line that Markdown would
  read as block syntax (numpy's `----------` under `Parameters` is a setext underline,
  a `# comment` an ATX heading, a lone fence would swallow every later heading) is
  backslash-escaped (pipekit.read.markdown.escape_block_syntax): the words stay, the
  trail stays the qualified name.  Indentation is kept as written.
- Encoding as Python reads it: a BOM or a PEP 263 coding cookie, else UTF-8 (tokenize's
  own detection); bytes that are not in that encoding fall back to decode_text's
  detection, with a note.  A file that does not parse is an error row naming the line
  ("Python syntax error at line 12: invalid syntax"), Python 2 code included.

Other languages could follow the same shape: a parser that yields (qualified name,
signature, doc comment) triples — tree-sitter's grammars for JavaScript/TypeScript (JSDoc),
Java (Javadoc), Rust (`///`), Go (comments above declarations) — and this module's
writer turns them into headed sections.  Not done here: type stubs' overloads merged,
attribute docstrings (a string after an assignment, a Sphinx convention `ast` does not
attach), or `__all__` deciding what is public.
"""
from __future__ import annotations

import ast
import io
import keyword
import re
import tokenize
from pathlib import PurePosixPath

from pipekit.read.markdown import code_fence, escape_block_syntax
from pipekit.read.text import Unreadable, decode_text

__all__ = ["read_python", "module_name", "python_to_markdown"]

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_BLOCKS = (ast.If, ast.Try, getattr(ast, "TryStar", ast.Try), ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)
_MAX_LEVEL = 6  # Markdown's deepest heading
_DECORATOR_MAX = 80  # a longer decorator (a parametrize table) is code, not signature
_INLINE_SPECIAL = re.compile(r"([\\`*_\[\]<>#!&|~])")


def read_python(data: bytes, doc_id: str = "module.py") -> dict:
    """The stage-01 columns of one .py file; raises Unreadable when it does not parse."""
    text, encoding, note = decode_python(data)
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        where = f" at line {exc.lineno}" if exc.lineno else ""
        raise Unreadable(f"Python syntax error{where}: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes; nesting beyond the parser's stack
        raise Unreadable(f"Python source that cannot be parsed: {type(exc).__name__}: {exc}") from None
    name = module_name(doc_id)
    return {"text": python_to_markdown(tree, name), "title": name, "encoding": encoding, "note": note}


def decode_python(data: bytes) -> tuple[str, str, str | None]:
    """(text, encoding, note) as Python decodes the file: BOM, coding cookie, else UTF-8."""
    try:
        codec, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(codec), codec, None
    except (SyntaxError, LookupError, UnicodeDecodeError) as exc:
        # An unknown cookie, or bytes the cookie does not fit: Python would refuse the
        # module, but its docstrings are still text a person can read.
        text, encoding, note = decode_text(data)
        why = f"not valid as Python declares it ({exc})"  # "unknown encoding: klingon", a byte at an offset
        return text, encoding, f"{why}; {note}" if note else why


def module_name(doc_id: str) -> str:
    """The dotted name Python would import the file by, from its path alone."""
    parts = PurePosixPath(doc_id).parts
    stem = PurePosixPath(parts[-1]).stem if parts else "module"
    names = [] if stem == "__init__" else [stem]
    for folder in reversed(parts[:-1]):
        if folder == "src" or not folder.isidentifier() or keyword.iskeyword(folder):
            break
        names.insert(0, folder)
    return ".".join(names) or stem


def python_to_markdown(tree: ast.Module, name: str) -> str:
    """The module's docstrings as Markdown sections headed by their qualified names."""
    out = [_heading(1, [name])]
    out += _body_text(tree, [name])
    text = "\n\n".join(out)
    return text.replace("\x0c", " ") + "\n"  # a form feed would become a page marker in stage 02


def _body_text(node, trail: list[str]) -> list[str]:
    """A module's or class's docstring, then a section for each documented member (in
    source order)."""
    out = []
    doc = _docstring(node)
    if doc:
        out.append(escape_block_syntax(doc))
    for m in _defs(node.body):
        if _has_section(m):
            out += _section(m, [*trail, m.name])
    return out


def _section(node, trail: list[str]) -> list[str]:
    doc = _docstring(node)
    out = [_heading(len(trail), trail)]
    if doc or not isinstance(node, ast.ClassDef):
        # An undocumented class above documented methods is a heading alone: stage 03 puts
        # it in its first method's chunk, not in a chunk of its own that would be all name.
        out.append(code_fence(signature(node), "python"))
    if isinstance(node, ast.ClassDef):
        return out + _body_text(node, trail)
    return out + ([escape_block_syntax(doc)] if doc else [])


def _docstring(node) -> str | None:
    doc = ast.get_docstring(node, clean=True)
    return doc.strip("\n") if doc and doc.strip() else None


def _has_section(node) -> bool:
    """Documented, or a class with something documented inside."""
    if _docstring(node):
        return True
    return isinstance(node, ast.ClassDef) and any(_has_section(m) for m in _defs(node.body))


def _defs(body: list):
    """The classes and functions a module or class body defines, inside `if`, `try`,
    `with` and loop blocks too, never inside a function's body."""
    for node in body:
        if isinstance(node, _DEFS):
            yield node
        elif isinstance(node, ast.Match):
            for case in node.cases:
                yield from _defs(case.body)
        elif isinstance(node, _BLOCKS):
            for field in ("body", "orelse", "finalbody"):
                yield from _defs(getattr(node, field, None) or [])
            for handler in getattr(node, "handlers", None) or ():
                yield from _defs(handler.body)


def signature(node) -> str:
    """`def get(url, params=None, **kwargs)`, `class Session(SessionRedirectMixin)`,
    with the decorators that fit on a short line above it."""
    decorators = [f"@{d}" for d in map(ast.unparse, node.decorator_list) if len(d) <= _DECORATOR_MAX and "\n" not in d]
    if isinstance(node, ast.ClassDef):
        args = [ast.unparse(b) for b in node.bases]
        args += [f"{k.arg}={ast.unparse(k.value)}" if k.arg else f"**{ast.unparse(k.value)}" for k in node.keywords]
        line = f"class {node.name}({', '.join(args)})" if args else f"class {node.name}"
    else:
        kind = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
        line = f"{kind} {node.name}({ast.unparse(node.args)})"
        if node.returns is not None:
            line += f" -> {ast.unparse(node.returns)}"
    return "\n".join([*decorators, line])


def _heading(level: int, trail: list[str]) -> str:
    """An ATX heading for the last name of `trail`; past level 6, the rest dotted onto it."""
    title = trail[-1] if level <= _MAX_LEVEL else ".".join(trail[_MAX_LEVEL - 1:])
    return "#" * min(level, _MAX_LEVEL) + " " + _INLINE_SPECIAL.sub(r"\\\1", title)
