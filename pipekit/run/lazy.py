"""A module imported on its first use: `pa = lazy("pyarrow")` at the top of a module.

`python -m pipekit search "QUERY"` answers from a memory-mapped copy of the index with
NumPy alone (pipekit/retrieve/cold.py), and importing pyarrow, its compute functions and
its Parquet reader cost more than everything else that process does (~0.2 s of a 0.3 s
goal on a busy 2-core machine, `python -X importtime`; issue 47).  The modules that search
shares with the stages (the analyzer, links, pages, repeats, ...) use Arrow in functions
the cold path never calls, so they name it through this stand-in: the import happens on
the first attribute looked up, exactly as `import pyarrow as pa` would have done it.

Not for a module whose import-time code uses the library (a module-level `pa.list_(...)`
would import it at once: pipekit/read/pages.py makes those on first use instead).
"""
from __future__ import annotations

import importlib


class LazyModule:
    """Stands for the module `name` until an attribute is asked for, then is its attributes."""

    __slots__ = ("_name", "_module")

    def __init__(self, name: str):
        self._name = name
        self._module = None

    def __getattr__(self, attr: str):
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}{' (imported)' if self._module is not None else ''}>"


def lazy(name: str) -> LazyModule:
    return LazyModule(name)
