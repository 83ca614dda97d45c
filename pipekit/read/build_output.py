"""Documentation generators' build output: which files in a built site are not documents.

A folder of built documentation (Sphinx's `_build/html`, MkDocs' `site/`, Debian's
/usr/share/doc/python3.11/html) holds the pages a person reads and, beside them, what the
generator leaves for the browser: a copy of every page's source (`_sources/`, 497 files in
Python's docs, each doubling a page in the results), the theme's scripts and styles, the
search page, the search index, and generated index pages that are lists of links.
Indexed, those leftovers crowd the real pages out of the results.

What this module decides: whether a folder is a generator's build folder, and whether a
path inside it is one of that generator's leftovers (with the reason in words).  A folder
is recognised only by its *marker files*, at least two of a generator's (Sphinx:
`.buildinfo`, `searchindex.js`, `objects.inv`; MkDocs: `search/search_index.json`,
`sitemap.xml`, `sitemap.xml.gz`), never by a leftover's name alone: a user's own notes
folder with a `_static/` or a `search.html` in it is not a build, and is read as it is.
Only the paths named in the table below, directly under the build folder, are leftovers;
the pages themselves, and any other file the user put there, are read.

What it does not do: walk folders or read files (readers.py does, and asks `recognise`
with the names it listed), or know generators it has no table for (Hugo, Docusaurus,
rustdoc, Javadoc, Doxygen: their sites are read whole, as before).
"""
from __future__ import annotations

import fnmatch
import functools
import os
import re
import stat
from dataclasses import dataclass

HINT = "set documents.build_files: true to read it"


@dataclass(frozen=True)
class Generator:
    name: str
    markers: tuple[str, ...]  # paths relative to the build folder
    leftovers: tuple[tuple[str, str], ...]  # (glob on the path relative to the build folder, what it is)


# Two markers, not one: one file of a common name (an `objects.inv` kept for offline
# intersphinx, a `sitemap.xml` any site generator writes) must not turn a user's folder into a build.
MARKERS_NEEDED = 2

GENERATORS = (
    Generator("Sphinx", (".buildinfo", "objects.inv", "searchindex.js"), (
        ("_sources", "a copy of a page's source text, which the page itself already holds"),
        ("_static", "the theme's scripts, stylesheets and icons"),
        ("_images", "an image the pages show"),
        ("_downloads", "a copy of a file the pages offer for download"),
        ("genindex*.html", "the generated general index, a list of links without prose"),
        ("genindex", "the generated general index, a list of links without prose"),
        ("*modindex.html", "the generated module index, a list of links without prose"),
        ("*modindex", "the generated module index, a list of links without prose"),
        ("search.html", "the search page, a form without content"),
        ("search", "the search page, a form without content"),
        ("searchindex.js", "the search index"),
        ("objects.inv", "the cross-reference inventory"),
        (".buildinfo", "the build stamp"),
        (".doctrees", "the cached parse trees"),
    )),
    Generator("MkDocs", ("search/search_index.json", "sitemap.xml", "sitemap.xml.gz"), (
        ("search", "the search index and its scripts"),
        ("404.html", "the 'page not found' page"),
        ("sitemap.xml", "the sitemap for search engines"),
        ("sitemap.xml.gz", "the sitemap for search engines"),
        ("css", "the theme's stylesheets"),
        ("js", "the theme's scripts"),
        ("webfonts", "the theme's fonts"),
        ("fonts", "the theme's fonts"),
        ("assets/javascripts", "the theme's scripts"),
        ("assets/stylesheets", "the theme's stylesheets"),
    )),
)


@dataclass(frozen=True)
class Build:
    """A recognised build folder: which generator, where (doc_id, "" for the input
    itself), how deep (its number of path parts), and the markers that gave it away."""
    generator: Generator
    where: str
    depth: int
    found: tuple[str, ...]


def recognise(folder: str, names: set[str], where: str, depth: int) -> Build | None:
    """The build `folder` is, judged by the marker files among its `names`; None if none.

    A marker inside a subfolder (`search/search_index.json`) is checked with lstat, so a
    symlink never takes the check outside the folder."""
    for gen in GENERATORS:
        found = tuple(m for m in gen.markers if _present(folder, names, m))
        if len(found) >= MARKERS_NEEDED:
            return Build(gen, where, depth, found)
    return None


def _present(folder: str, names: set[str], marker: str) -> bool:
    first, _, rest = marker.partition("/")
    if first not in names:
        return False
    if not rest:
        return True
    path, mode = folder, 0
    for part in marker.split("/"):
        path = os.path.join(path, part)
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            return False
        if stat.S_ISLNK(mode):
            return False
    return stat.S_ISREG(mode)


def leftover(build: Build, rel: str) -> str | None:
    """What `rel` (a path relative to the build folder) is, when it is one of the
    generator's leftovers, itself or inside one; None for a page or a user's file."""
    parts = rel.split("/")
    # Most paths are pages: one expression per depth of glob says "none of them" at once,
    # where the globs one by one (14 for Sphinx) were a third of the walk of Python's
    # 1,400-file manual in a rerun.  A path one of them matches takes the loop below, which
    # decides which glob names it (the first in the table).
    if not any(len(parts) >= n and match("/".join(parts[:n])) for n, match in _any_leftover(build.generator)):
        return None
    for glob, what in build.generator.leftovers:
        n = glob.count("/") + 1
        if len(parts) >= n and fnmatch.fnmatchcase("/".join(parts[:n]), glob):
            return what
    return None


@functools.lru_cache(maxsize=None)
def _any_leftover(generator: Generator) -> tuple:
    """(n, match) per number of path parts n its globs span: `match` of a path's first n
    parts is not None when one of those globs matches them, as fnmatchcase would."""
    depths: dict[int, list[str]] = {}
    for glob, _ in generator.leftovers:
        depths.setdefault(glob.count("/") + 1, []).append(fnmatch.translate(glob))
    return tuple((n, re.compile("|".join(f"(?:{p})" for p in pats)).match) for n, pats in sorted(depths.items()))


def reason(build: Build, what: str) -> str:
    """The `error` text of a leftover's `skipped` row: what it is, who left it, and how
    the folder was recognised, so a user who expected the file knows why and what to set."""
    where = f"{build.where}/" if build.where else "the input folder"
    name = build.generator.name
    return (f"{name} build output, not a document: {what} ({where} is a {name} build, "
            f"recognised by {', '.join(build.found)}); {HINT}")
