"""One document's text as stage 03 measures it: lines, offsets, pages and budget sizes.

The chunker decides every cut by asking two questions about a span of the stage-02 text:
how big is it in the budget unit, and which page is it on?  `DocText` answers both for one
document, in one place, so that the chunking code reads as decisions and not arithmetic
(`Settings`, the budget from config section `chunking`, lives here too):

* the line table (`lines`, `starts`, `line_end`) the block readers' line numbers refer to;
* page markers (`set_markers`, `page_at`, `cont_line`): with `track`, every chunk may
  need a `--- page N (cont.) ---` line, whose size is reserved up front (`cont_reserve`)
  so that "what a rule adds counts toward max" holds without re-packing; with `strip`,
  marker lines are left out of sizes and of chunk text (`body`);
* sizes (`words`, `size`, `reserve`) in `words`, `chars` or `tokens` (ceil(chars / 4));
* `atoms`: an oversized region cut into lines, a line over the cap into runs of words, a
  word over the cap into runs of grapheme clusters, so even text without spaces keeps
  the ceiling and no cut splits an emoji sequence or a letter from its accent;
* counting a big region (`line_cum`, `line_units`, `count_span`): with numpy over the
  code points, every line of the document at once, so that a log of a million lines in
  one paragraph is chunked as fast, per megabyte, as Markdown (bench/big_document.py).

Budget words (`count_words`) are whitespace-separated words, except that a run longer than
10 characters counts one word per 10: Chinese or Japanese text, a base64 blob or a long
URL has no spaces, and counted as one word a whole book would fit in one chunk.
"""
from __future__ import annotations

import bisect
import re
from itertools import accumulate
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

__all__ = ["DocText", "count_span", "count_words", "measure", "run_units"]

_RUN = 10  # characters per budget word in a run without whitespace


def count_words(s: str) -> int:
    """Words for the budget: whitespace-separated words, except that a run longer than 10
    characters counts one word per 10.  Chinese or Japanese text, a base64 blob or a long
    URL has no spaces; counted as one word, a whole book would fit in one chunk."""
    toks = s.split()
    if not toks or max(map(len, toks)) <= _RUN:  # the usual case, decided in C
        return len(toks)
    return len(toks) + sum([(len(t) - 1) // _RUN for t in toks if len(t) > _RUN])


_SPACE = re.compile(r"\s")  # the whitespace str.split() splits at
_SPAN_PIECE = 1 << 20
_BULK = 1 << 16  # characters from which counting with numpy beats str.split() (with a long run in it)
_WS_TABLE = None  # code point -> is whitespace (str.isspace), for code points up to U+3000


def _space_mask(cp):
    """Which of the code points `cp` (a numpy uint32 array) are whitespace as str.split()
    sees it.  ASCII decides most in two comparisons; only the rare code points from
    U+0085 on are looked up (the last whitespace code point is U+3000)."""
    global _WS_TABLE
    if _WS_TABLE is None:
        table = np.zeros(0x3002, dtype=bool)
        table[[c for c in range(0x3001) if chr(c).isspace()]] = True
        _WS_TABLE = table
    sp = (cp == 32) | ((cp - 9) <= 4) | ((cp - 28) <= 3)  # uint32: below 9 wraps to huge
    hi = np.flatnonzero(cp >= 0x85)
    if len(hi):
        sp[hi] = _WS_TABLE[np.minimum(cp[hi], 0x3001)]
    return sp


def _runs(piece: str):
    """(start, units) of the whitespace-free runs of `piece`: its words for the budget,
    found with numpy over the code points (one word per 10 characters of a long run,
    exactly as count_words counts them)."""
    cp = np.frombuffer(piece.encode("utf-32-le"), dtype=np.uint32)
    word = ~_space_mask(cp)
    edges = np.flatnonzero(np.diff(word.view(np.int8), prepend=0, append=0))
    starts, ends = edges[0::2], edges[1::2]
    return starts, (ends - starts + (_RUN - 1)) // _RUN


def count_span(text: str, start: int, end: int) -> int:
    """count_words(text[start:end]), a megabyte at a time and with numpy: a whole log
    without a blank line is one block, and splitting it at once made a string per word
    (9x its size), while counting it word by word in Python made stage 03 slower on logs
    than on Markdown."""
    if end - start < _BULK:
        return count_words(text[start:end])
    total = 0
    while start < end:
        cut = end
        if end - start > _SPAN_PIECE:
            m = _SPACE.search(text, start + _SPAN_PIECE, end)  # a cut at whitespace splits no word
            if m is None:  # one run to the end (minified JSON): one string, not 4 bytes a character
                return total + count_words(text[start:end])
            cut = m.start()
        total += int(_runs(text[start:cut])[1].sum())
        start = cut
    return total


def run_units(length: int) -> int:
    """Budget words of one run of `length` characters without whitespace."""
    return 1 if length <= _RUN else (length + _RUN - 1) // _RUN


def measure(words: int, chars: int, unit: str) -> int:
    """Size in the budget unit; tokens are approximated as ceil(chars / 4)."""
    if unit == "words":
        return words
    if unit == "chars":
        return chars
    return -(-chars // 4)


@dataclass(frozen=True)
class Settings:
    """The chunk budget and options, from config section `chunking`."""

    strategy: str = "heading"
    target: int = 400
    max: int = 1000
    min: int = 40
    unit: str = "words"
    overlap: int = 50
    page_markers: str = "track"

    @classmethod
    def from_section(cls, section: Mapping) -> "Settings":
        """From config section `chunking`.  pipekit.run.config has already checked every key
        alone and together (min <= target <= max; for fixed, 0 <= overlap < target)."""
        return cls(**{k: section[k] for k in cls.__dataclass_fields__ if k in section})


class DocText:
    """One document's text with its line table, page markers and budget helpers."""

    def __init__(self, text: str, settings, lines: list[str] | None = None):
        self.text = text
        self.s = settings
        self.lines = lines if lines is not None else text.split("\n")
        # Offsets of line starts, computed in C (this runs over every line of the corpus).
        self.starts = list(accumulate(map((1).__add__, map(len, self.lines)), initial=0))
        first_nl = text.find("\n")
        self.nl = "\r\n" if first_nl > 0 and text[first_nl - 1] == "\r" else "\n"
        self.mark_starts: list[int] = []
        self.mark_pages: list[int] = []
        self.strip_cum = [0]  # prefix sums of removed marker-line lengths (strip mode)
        self.cont_reserve = (0, 0)
        self.by_words = settings.unit == "words"
        self._extra_words: dict[str, int] = {}  # count_words of the extras size() was given
        self._cum = None  # words per line, cumulated, once a big region needs them (line_cum)

    def line_end(self, j: int) -> int:
        ln = self.lines[j]
        return self.starts[j] + len(ln) - (1 if ln.endswith("\r") else 0)

    def trim(self, a: int, b: int) -> tuple[int, int]:
        """[a, b) without the whitespace at either end (empty: a == b)."""
        text = self.text
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        return a, b

    def set_markers(self, marks: list) -> None:
        for i, page in marks:
            self.mark_starts.append(self.starts[i])
            self.mark_pages.append(page)
            if self.s.page_markers == "strip":
                self.strip_cum.append(self.strip_cum[-1] + (self.starts[i + 1] - self.starts[i]))
        if marks and self.s.page_markers == "track":
            # Every chunk may need a `--- page N (cont.) ---` line; reserving its size up
            # front keeps "added parts count toward max" true without re-packing.
            probe = self.cont_line(max(self.mark_pages))
            self.cont_reserve = (count_words(probe), len(probe))

    # -- pages --
    def page_at(self, pos: int) -> int | None:
        if not self.mark_starts:
            return None
        k = bisect.bisect_right(self.mark_starts, pos) - 1
        if k >= 0:
            return self.mark_pages[k]
        first = self.mark_pages[0]
        return first - 1 if first > 1 else None  # text before the first marker

    def cont_line(self, page: int) -> str:
        return f"--- page {page} (cont.) ---{self.nl}"

    # -- sizes --
    def stripped(self, start: int, end: int) -> tuple[int, int]:
        """(words, chars) of marker lines removed from [start, end) in strip mode."""
        if len(self.strip_cum) == 1:
            return 0, 0
        a = bisect.bisect_left(self.mark_starts, start)
        b = bisect.bisect_left(self.mark_starts, end)
        return 4 * (b - a), self.strip_cum[b] - self.strip_cum[a]

    def words(self, start: int, end: int) -> int:
        if not self.by_words:
            return 0  # sizes in chars or tokens never look at word counts
        w = self._span_words(start, end)
        if len(self.strip_cum) > 1:
            w -= self.stripped(start, end)[0]
        return w

    def extra_size(self, extra: str) -> int:
        """The size of text a rule adds (a fence line, a repeated header) in the unit."""
        return measure(count_words(extra), len(extra), self.s.unit)

    def size(self, words: int, start: int, end: int, extra: str = "") -> int:
        # Called for every block and candidate chunk: kept flat on purpose.
        if self.by_words:
            if extra:
                # the same few extras (a CSV header, a fence) again and again: counted once
                ew = self._extra_words.get(extra)
                if ew is None:
                    ew = self._extra_words[extra] = count_words(extra)
                words += ew
            return words + self.cont_reserve[0]
        chars = end - start + self.cont_reserve[1]
        if len(self.strip_cum) > 1:
            chars -= self.stripped(start, end)[1]
        if extra:
            chars += len(extra)
        return chars if self.s.unit == "chars" else -(-chars // 4)

    def reserve(self) -> int:
        """The continuation-marker room that size() includes, in the budget unit."""
        return measure(*self.cont_reserve, self.s.unit)

    def body(self, start: int, end: int) -> str:
        """The span as chunk text: with strip, marker lines inside it are left out."""
        if len(self.strip_cum) == 1:
            return self.text[start:end]
        a = bisect.bisect_left(self.mark_starts, start)
        b = bisect.bisect_left(self.mark_starts, end)
        if a == b:
            return self.text[start:end]
        parts, pos = [], start
        for k in range(a, b):
            ms = self.mark_starts[k]
            parts.append(self.text[pos:ms])
            nl = self.text.find("\n", ms)
            pos = min(end, nl + 1 if nl >= 0 else end)
        parts.append(self.text[pos:end])
        return "".join(parts)

    # -- counting a big region: every line's words at once --
    def _count_lines(self, first: int, end: int) -> np.ndarray:
        """Budget words of each line in [first, end) (numpy int64), counted with numpy
        (`_runs`) about a megabyte of lines at a time, a longer line alone by count_span.
        A log is a million lines in one paragraph: a Python call per line to count it
        made stage 03 slower on logs than on Markdown."""
        starts, text = self.starts, self.text
        units = np.zeros(end - first, dtype=np.int64)
        j = first
        while j < end:
            k = bisect.bisect_right(starts, starts[j] + _SPAN_PIECE, j + 1, end + 1) - 1
            if k <= j:  # one line longer than a piece
                units[j - first] = count_span(text, starts[j], self.line_end(j))
                j += 1
                continue
            base = starts[j]
            run_at, run_units = _runs(text[base:starts[k] - 1])
            # a run never crosses "\n": its line is the last line start at or before it
            line_of = np.searchsorted(np.array(starts[j:k]) - base, run_at, side="right") - 1
            units[j - first:k - first] = np.bincount(line_of, weights=run_units, minlength=k - j)
            j = k
        return units

    def line_cum(self) -> np.ndarray:
        """Budget words of lines [0, j) for every j, counted once per document.  A region
        as big as a quarter of the document is counted from it: a log paragraph was
        counted whole, then again line by line to cut it."""
        if self._cum is None:
            self._cum = np.concatenate(([0], np.cumsum(self._count_lines(0, len(self.lines)))))
        return self._cum

    def _whole(self, chars: int) -> bool:
        return self._cum is not None or 4 * chars >= len(self.text)

    def line_units(self, first: int, end: int) -> list[int]:
        """count_words of each line in [first, end)."""
        if self._whole(self.starts[end] - self.starts[first]):
            return np.diff(self.line_cum()[first:end + 1]).tolist()
        return self._count_lines(first, end).tolist()

    def _span_words(self, start: int, end: int) -> int:
        """count_words(text[start:end]); a big span of whole lines from the line counts."""
        if end - start >= _BULK and self._whole(end - start):
            j = bisect.bisect_left(self.starts, start)
            k = bisect.bisect_right(self.starts, end)  # lines [j, k) start inside the span
            if j < k and self.starts[j] == start and end >= self.line_end(k - 1):
                cum = self.line_cum()
                return int(cum[k] - cum[j])
        return count_span(self.text, start, end)

    # -- cutting an oversized region into atoms no larger than cap --
    def atoms(self, first_line: int, end_line: int, cap: int) -> Iterable[tuple[int, int, int]]:
        """(start, end, words) of lines; a line over `cap` as runs of words; a word over
        `cap` as runs of grapheme clusters, so even text without spaces keeps the ceiling
        and no cut splits an emoji sequence or a letter from its combining accent."""
        starts, lines = self.starts, self.lines
        strip = len(self.strip_cum) > 1
        if end_line - first_line < 64:  # a small block: counting line by line is cheaper
            for j in range(first_line, end_line):
                a, b = starts[j], self.line_end(j)
                if self.text[a:b].strip():
                    w = self.words(a, b)
                    if self.size(w, a, b) <= cap:
                        yield a, b, w
                    else:
                        yield from self._cut_line(a, b, cap)
            return
        units = self.line_units(first_line, end_line)
        # Words mode without stripped markers (the default, and every big log): a line
        # fits when its words do, decided here without a call per line.
        room = cap - self.cont_reserve[0] if self.by_words and not strip else None
        for j, w in zip(range(first_line, end_line), units):
            if not w:  # no word: a blank line
                continue
            a, ln = starts[j], lines[j]
            b = a + len(ln) - ln.endswith("\r")
            if room is not None:
                if w <= room:
                    yield a, b, w
                    continue
            else:
                if not self.by_words:
                    w = 0
                elif strip:
                    w -= self.stripped(a, b)[0]
                if self.size(w, a, b) <= cap:
                    yield a, b, w
                    continue
            yield from self._cut_line(a, b, cap)

    def _cut_line(self, a: int, b: int, cap: int) -> Iterable[tuple[int, int, int]]:
        """A line over `cap` as runs of words, a word over it as runs of grapheme clusters."""
        first_word = True
        for m in re.finditer(r"\S+", self.text[a:b]):
            ws, we = a + m.start(), a + m.end()
            if first_word:
                ws, first_word = a, False  # the line's indentation stays with its first word
            wu = run_units(we - ws)
            if self.size(wu, ws, we) <= cap:
                yield ws, we, wu
                continue
            g0 = ws
            # Grapheme clusters (\X), which stdlib `re` cannot find: imported for a word over
            # max only, as `regex` was ~13 ms of a one-file rerun's start (bench/README.md).
            import regex

            for g in regex.finditer(r"\X", self.text[ws:we]):
                gs, ge = ws + g.start(), ws + g.end()
                if gs > g0 and self.size(run_units(ge - g0), g0, ge) > cap:
                    yield g0, gs, run_units(gs - g0)
                    g0 = gs
            yield g0, we, run_units(we - g0)
