"""Print pipekit's import graph: which room imports which, and whether any import circles.

    python scripts/import_graph.py            # rooms and arrows, circles, upward arrows
    python scripts/import_graph.py --modules  # every module-to-module arrow as well

Reads the imports with `ast`, function-level ones too (an import inside a function is
still a dependency: it only moves the moment it is paid).  A *room* is a subpackage of
pipekit (`read`, `chunk`, ...); a module at the top is its own room.  The rule the layout
keeps: no circle among modules, and nothing in `run/` (the plumbing every stage stands on)
imports a stage's machinery or a tool.  Exit status 1 when either is broken, so a test can
run this as it is.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pipekit"
# Bottom to top: a room may import the rooms before it in this list, never those after.
# `run/` is the plumbing; the stage rooms follow the pipeline; `top` is the modules left at
# pipekit's top (`__init__`, `__main__`, `cli`: the stages wired to the plumbing); the
# integrations and tools stand on all of it.
LAYERS = ("run", "read", "chunk", "index", "retrieve", "top", "integrations", "tools", "serve")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """The pipekit modules `path` imports, anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from . import io` imports the module pipekit.io; `from .io import x` the module pipekit.io
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # `pipekit.run.io.read_meta` -> the module that holds it
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else "top"


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each a circle."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def build() -> dict[str, set[str]]:
    files = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    known = set(files)
    return {name: imports_of(path, name, known) for name, path in files.items()}


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Arrows from a room to a room above it in LAYERS."""
    bad = []
    for a, targets in graph.items():
        for b in targets:
            ra, rb = room(a), room(b)
            if LAYERS.index(rb) > LAYERS.index(ra):
                bad.append((a, b))
    return sorted(bad)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--modules", action="store_true", help="print every module's arrows too")
    args = parser.parse_args(argv)
    graph = build()
    rooms: dict[str, dict[str, int]] = {}
    for a, targets in graph.items():
        for b in targets:
            if room(a) != room(b):
                rooms.setdefault(room(a), {}).setdefault(room(b), 0)
                rooms[room(a)][room(b)] += 1
    counts: dict[str, int] = {}
    for m in graph:
        counts[room(m)] = counts.get(room(m), 0) + 1
    print(f"{len(graph)} modules in {len(counts)} rooms")
    for r in sorted(counts, key=lambda r: (LAYERS.index(r) if r in LAYERS else len(LAYERS), r)):
        arrows = ", ".join(f"{b} ({n})" for b, n in sorted(rooms.get(r, {}).items()))
        name = "(top)" if r == "top" else r + "/"
        print(f"  {name:<14} {counts[r]:>2} modules  -> {arrows or 'nothing'}")
    if args.modules:
        for a in sorted(graph):
            print(f"  {a} -> {', '.join(sorted(graph[a])) or '-'}")
    found = circles(graph)
    up = upward(graph)
    print(f"circles: {len(found)}")
    for c in found:
        print("  " + " <-> ".join(c))
    print(f"arrows upward (a room importing one above it): {len(up)}")
    for a, b in up:
        print(f"  {a} -> {b}")
    return 1 if found or up else 0


if __name__ == "__main__":
    raise SystemExit(main())
