"""Documents that give no chunk, and why: stage 03's account of what it cannot index.

SPEC rule 10: nothing findable is dropped, and a document that gives no chunk is counted
with its reason in stage 03's summary.  A document without text has nothing to find, so
it gets no chunk; but a user who looks for it in the results must be able to see that it
gave none and why, without opening 02_preprocessed.parquet.  Cranfield has two records
with neither title nor text (471 and 995): before this, they went without a word.

The reasons, in the order they are told apart:
- "no text layer (scanned or image-only PDF)": stage 01's note says so (no OCR here);
- "only whitespace": stage 02's note says cleaning left nothing of a text that was not
  empty (blank lines, spaces, control characters), or the text itself is whitespace;
- "empty": no text at all (an empty file, a BEIR record without title or text);
- "only page markers": with page_markers `strip` a text of markers alone has no text left.

Deliberately not done: a document that gives chunks is not listed, however short; the
names are the first few only (a corpus of a million empty records costs counters here,
not a million names).
"""
from __future__ import annotations

from collections import Counter

__all__ = ["NO_TEXT_LAYER", "ONLY_WHITESPACE", "reason", "NoChunks"]

NO_TEXT_LAYER = "no text layer"  # in stage 01's note of a PDF whose pages have no text
ONLY_WHITESPACE = "only whitespace"  # in stage 02's note when cleaning left nothing
SHOWN = 5


def reason(text: str, note: str | None) -> str:
    """Why a document with this stage-02 text and note gives no chunk."""
    note = note or ""
    if NO_TEXT_LAYER in note:
        return "no text layer (scanned or image-only PDF)"
    if ONLY_WHITESPACE in note or (text and not text.strip()):
        return "only whitespace"
    if not text:
        return "empty"
    return "only page markers"


class NoChunks:
    """Counts by reason and the first documents by name.  Small and picklable: each
    partition (on any worker) sends one back with its chunks, and the stage merges them."""

    def __init__(self, shown: int = SHOWN):
        self.counts: Counter = Counter()
        self.named: list[tuple[str, str]] = []
        self.shown = shown

    def add(self, doc_id: str, why: str) -> None:
        self.counts[why] += 1
        if len(self.named) < self.shown:
            self.named.append((doc_id, why))

    def merge(self, other: "NoChunks | None") -> None:
        if other is None:
            return
        self.counts.update(other.counts)
        self.named += other.named[:max(0, self.shown - len(self.named))]

    def take(self) -> "NoChunks":
        """What was counted so far, handed out with a batch of chunks; counting restarts."""
        taken = NoChunks(self.shown)
        taken.counts, taken.named = self.counts, self.named
        self.counts, self.named = Counter(), []
        return taken

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def lines(self) -> list[str]:
        """The summary's lines: none when every document gave a chunk."""
        if not self.total:
            return []
        why = ", ".join(f"{n:,} {r}" for r, n in sorted(self.counts.items(), key=lambda rn: (-rn[1], rn[0])))
        out = [f"{self.total:,} document{'s' if self.total != 1 else ''} gave no chunk ({why}):"]
        out += [f"  {doc_id}: {r}" for doc_id, r in self.named]
        if self.total > len(self.named):
            out.append(f"  ... and {self.total - len(self.named):,} more")
        return out
