"""A source tree's tests: which folders under `documents.input` are a project's test suite.

A folder holding a project's source distribution (an sdist, a checkout) holds its tests
beside its docs, and stage 01 reads `.py` files (their docstrings) and the `.md`, `.txt`
and `.html` fixtures tests keep.  Read, the tests crowd the documentation out: over the
attrs sdist, "what does attrs frozen=True do" had three test docstrings
(`tests/test_functional.py › TestFunctional › test_frozen_slots_combo` ...) for its top 3.
Over three sdists (attrs, click, jinja2) and 24 documentation questions, leaving the
tests out found the answering section in the top 3 for 16 questions against 13 with them
read, and 14 with their scores weighed down (x0.5 or x0.25: out of the top 3, yet their
words still count in the term statistics); bench/source_tests.py, bench/README.md.
So by default a tests folder's files are `skipped` rows, each saying what it is and the
setting that reads them.

What this module decides: whether a folder is a tests folder, by its name *and* its
content.  Its name must be a test suite's usual one (`tests`, `test`, `testing`, any
case), and it must hold test code directly: a file pytest, unittest, Jest or Go would run
(`test_*.py`, `*_test.py`, `conftest.py`, `*.test.js` ...).  The name alone is not enough:
hatch ships its `hatch test` command in `src/hatch/cli/test/` (`__init__.py`, `core.py`,
real code whose docstrings document the command) and a tutorial in `docs/tutorials/testing/`.
Everything below a tests folder is the suite's (black's `tests/data/`, copier's
`tests/demo*/`, Python-Markdown's `tests/basic/*.txt` fixtures): skipped with it.

What it does not do: skip a test module outside a tests folder (Python-Markdown's
`markdown/test_tools.py` is a public module of the library; pytest's own docs keep their
examples as `doc/en/example/**/test_*.py` and `conftest.py`), or a folder named
`fixtures` or `testdata` on its name alone (pytest's docs have `doc/en/example/fixtures/`);
or apply to `documents.input` itself: a user who points it at a tests folder wants that
folder read (pipekit/read/walk.py asks only about the folders below it).
"""
from __future__ import annotations

import fnmatch

HINT = "set documents.test_files: true to read it"

# A test suite's folder names, compared lower-cased (`Tests` in .NET projects).
FOLDER_NAMES = frozenset({"tests", "test", "testing"})

# Files a test runner collects: pytest's defaults (test_*.py, *_test.py, conftest.py),
# Jest's and Mocha's (*.test.js, *.spec.ts ...), Go's (*_test.go).
TEST_CODE = ("test_*.py", "*_test.py", "conftest.py",
             "*.test.js", "*.spec.js", "*.test.ts", "*.spec.ts", "*.test.jsx", "*.test.tsx",
             "*.test.mjs", "*_test.go")


def recognise(name: str, names) -> str | None:
    """The test file that makes the folder `name` (holding `names`) a tests folder, the
    first in sorted order; None when it is not one."""
    if name.lower() not in FOLDER_NAMES:
        return None
    for entry in sorted(names):
        if any(fnmatch.fnmatchcase(entry, glob) for glob in TEST_CODE):
            return entry
    return None


def reason(folder: str, marker: str) -> str:
    """The `error` text of a file's `skipped` row inside the tests folder `folder` (its
    doc_id), recognised by the test file `marker`: what it is and what to set."""
    return (f"part of a test suite, not documentation: {folder}/ is a tests folder "
            f"(it holds {marker}); {HINT}")
