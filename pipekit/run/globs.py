"""Globs as regular expressions: one reading of `*`, `**`, `?` and `[...]` for every pattern.

`documents.include`/`exclude` (the walk, pipekit/read/walk.py) and `search --in`
(pipekit/retrieve/filters.py) both match globs against POSIX paths relative to the input
folder; one translation keeps a pattern meaning the same thing in both places.
"""
from __future__ import annotations

import re


def translate(glob: str) -> str:
    """A regular expression matching what `glob` matches, to the end of the path.

    `*` and `?` stay inside one folder, `**/` is any number of folders (none included),
    `**` anything, `[abc]`/`[!abc]` a class, and a final `/**` also matches the folder
    itself (excluding `web/**` prunes the folder in one row)."""
    out, i = [], 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("/**", i) and i + 3 == len(glob):
            out.append("(?:/.*)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        elif glob[i] == "[" and "]" in glob[i + 2:]:
            end = glob.index("]", i + 2)
            inner = glob[i + 1:end]
            if inner.startswith("!"):
                inner = "^" + inner[1:]
            out.append("[" + inner.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return "".join(out) + r"\Z"
