"""Documents that swamp the index: stage 03's summary names them, with their share.

One file can make most of an index without anyone meaning it to: a 20 MB application log
dropped in a folder of manuals became 36 % of the chunks.  Its terms then set df and idf
for everyone, its length sets avgdl, and its near-identical chunks crowd every top 10
that shares a word with it.  Nothing is wrong with any one row, so no error says so;
stage 03's summary does, by name:

- a document holding more than a quarter of all chunks, once there are enough chunks
  and documents for a share to mean something (`MIN_CHUNKS`, `MIN_DOCUMENTS` below);
- a document with a line longer than `LONG_LINE_CHARS`, whatever its share: a log
  without line ends, a minified script, a base64 blob.  It has no structure to chunk by
  (no headings, no paragraphs, not even lines), so it becomes windows cut between words,
  passages nobody wrote as passages.

How: chunks come in document order, so the counts are runs of equal doc_ids, tallied
batch by batch with the largest `KEPT` documents kept (memory is constant, however many
documents).  Only those few are candidates for the long-line check, which reads their
stage-02 text (a few documents, never the corpus): the chunks themselves cannot tell a
line end from a cut.  The verdict depends on the chunks and the stage-02 text alone, so
a rerun that copies unchanged documents' chunks says what a `--force` run says.

Deliberately not done: nothing is dropped or down-weighted (the user decides:
`documents.exclude`, or a smaller `documents.max_bytes`), and a large share of a small
folder is not named (with four documents one of them always holds a quarter).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["ChunkShares", "KEPT", "LONG_LINE_CHARS", "MIN_CHUNKS", "MIN_DOCUMENTS", "SHARE", "long_lines", "longest_line"]

SHARE = 0.25  # "over a quarter of all chunks"
# Below 40 chunks a share is a handful of chunks: a folder of a README, a changelog and a
# guide is not swamped because the guide is 10 of its 30 chunks.
MIN_CHUNKS = 40
# With four documents or fewer one of them always holds at least a quarter: saying so is
# arithmetic, not news.
MIN_DOCUMENTS = 5
# No line a person writes comes near a million characters (the longest paragraphs of
# Python's documentation are a few thousand); a line that long is a machine's output.  A
# character count, not bytes: stage 02's text is what the chunker had to cut.
LONG_LINE_CHARS = 1_000_000
KEPT = 10  # documents kept by chunk count: the report's top 10, and every one over a quarter


LINE_SLICE = 1 << 20  # characters of a text looked at a time by longest_line (4 MB of code points)


def longest_line(text: str) -> int:
    """The length of the longest line of `text` (a line ends at "\\n"), without splitting
    it into a list of lines (a 20 MB text would be copied whole): its code points a slice
    at a time as NumPy, the line ends found there.  A Python loop from line end to line
    end took 13 ms of a one-file rerun on the one document over a million characters of
    the bench's folder (Python's contents.html, 20,000 lines); tests/test_shares.py holds
    this to that loop."""
    longest, open_line = 0, 0  # open_line: characters of the line the last slice left open
    for start in range(0, len(text), LINE_SLICE):
        piece = text[start:start + LINE_SLICE]
        ends = np.flatnonzero(np.frombuffer(piece.encode("utf-32-le", "surrogatepass"), dtype=np.uint32) == 10)
        if not len(ends):
            open_line += len(piece)
            continue
        longest = max(longest, open_line + int(ends[0]), int(np.diff(ends).max(initial=1)) - 1)
        open_line = len(piece) - int(ends[-1]) - 1
    return max(longest, open_line)


class ChunkShares:
    """Chunks per document, counted from stage 03's batches as they are written.

    `add(batch)` takes a table with `doc_id` and `end_char` (the document's text length
    is its last chunk's end), in the stage's output order."""

    def __init__(self, kept: int = KEPT):
        self.kept = kept
        self.total = 0
        self.documents = 0
        self.top: dict[str, tuple[int, int]] = {}  # doc_id -> (chunks, characters)
        self._open: tuple[str, int, int] | None = None  # the last document, maybe continued next batch

    def add(self, batch: pa.Table) -> None:
        if not batch.num_rows:
            return
        ids = batch.column("doc_id")
        ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
        ends = np.asarray(batch.column("end_char"), dtype=np.int64)
        first = np.r_[True, np.asarray(pc.not_equal(ids[1:], ids[:-1]).fill_null(True), dtype=bool)]
        starts = np.flatnonzero(first)
        counts = np.diff(np.r_[starts, batch.num_rows])
        chars = np.maximum.reduceat(ends, starts)
        # Only the names that can be kept, as Python strings: the batch's first and last
        # documents and its largest counts.  Every document's name (`to_pylist`, 20,000 a
        # batch of a BEIR corpus) was ~0.1 s of stage 03's own thread at 1M passages.
        def name(k) -> str:
            return ids[int(starts[k])].as_py()

        self.total += batch.num_rows
        if self._open and name(0) == self._open[0]:  # the document the last batch ended in, continued
            counts[0] += self._open[1]
            chars[0] = max(chars[0], self._open[2])
        elif self._open:
            self._close(*self._open)
            self.documents += 1
        for k in self._largest(counts[:-1]):
            self._close(name(k), int(counts[k]), int(chars[k]))
        self.documents += len(starts) - 1
        self._open = (name(len(starts) - 1), int(counts[-1]), int(chars[-1]))

    def _largest(self, counts: np.ndarray) -> np.ndarray:
        """The positions of the batch's `kept` largest counts: only they can enter the top."""
        if len(counts) <= self.kept:
            return np.arange(len(counts))
        return np.argpartition(counts, -self.kept)[-self.kept:]

    def _close(self, doc_id: str, chunks: int, chars: int) -> None:
        self.top[doc_id] = (chunks, chars)
        if len(self.top) > self.kept:
            # Ties broken by doc_id: which document is kept never depends on batch sizes.
            del self.top[max(self.top, key=lambda d: (-self.top[d][0], d))]

    def finish(self) -> None:
        if self._open:
            self._close(*self._open)
            self.documents += 1
            self._open = None

    def largest(self) -> list[tuple[str, int, int]]:
        """(doc_id, chunks, characters) of the documents with the most chunks, most first."""
        return sorted(((d, n, c) for d, (n, c) in self.top.items()), key=lambda x: (-x[1], x[0]))

    def swamping(self) -> list[str]:
        """The doc_ids over a quarter of the chunks, when the share means something."""
        if self.total < MIN_CHUNKS or self.documents < MIN_DOCUMENTS:
            return []
        return [d for d, n, _ in self.largest() if n > SHARE * self.total]

    def long_line_candidates(self) -> list[str]:
        """The kept documents whose text could hold a line over LONG_LINE_CHARS."""
        return [d for d, _, c in self.largest() if c > LONG_LINE_CHARS]

    def lines(self, long_lines: dict[str, int] | None = None) -> list[str]:
        """The summary's lines (none when no document stands out).  `long_lines`: doc_id ->
        its longest line, for the candidates whose line is over LONG_LINE_CHARS."""
        long_lines = long_lines or {}
        named = set(self.swamping()) | set(long_lines)
        out = []
        for doc_id, n, _ in self.largest():
            if doc_id not in named:
                continue
            share = f"{doc_id}: {n:,} chunks, {100 * n / self.total:.0f} % of the index"
            if doc_id in long_lines:
                share += (f"; a line of {long_lines[doc_id]:,} characters (a log or a minified file?): "
                          "no structure to chunk by, cut into windows between words")
            out.append(share)
        if out:
            out.insert(0, "documents that make a large share of the index (documents.exclude leaves one out):")
            out[1:] = ["  " + line for line in out[1:]]
        return out


def long_lines(path, doc_ids: list[str]) -> dict[str, int]:
    """{doc_id: longest line} of those of `doc_ids` whose stage-02 text (at `path`) has a
    line over LONG_LINE_CHARS.  Reads the doc_id column, then only the row groups that
    hold those documents' texts."""
    if not doc_ids:
        return {}
    from pipekit.run.io import read_table, take_rows

    # Not pq.read_table with a filter: it loads pyarrow.dataset and builds a dataset, 30-70 ms
    # of every rerun of stage 03 (which checks the largest documents whether they changed).
    ids = read_table(path, ["doc_id"]).column("doc_id")
    rows = np.flatnonzero(pc.is_in(ids, value_set=pa.array(doc_ids, pa.string())))
    out = {}
    for doc_id, text in zip(ids.take(rows).to_pylist(), take_rows(path, "text", rows.tolist())):
        n = longest_line(text or "")
        if n > LONG_LINE_CHARS:
            out[doc_id] = n
    return out
