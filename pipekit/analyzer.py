"""The analyzer: text -> terms. Stage 04 indexes with it, stage 05 queries with it.

SPEC's rule, in order: lower-case; split into maximal runs of Unicode letters and digits
(so `snake_case` is two terms and `x86_64` is `x86` and `64`); keep runs of at least two
characters; drop stopwords; stem.  It works on whole Arrow columns (one regex split and a
few compute kernels for a batch of thousands of passages) and stems each *distinct*
word once per batch: a corpus repeats its vocabulary endlessly, so stemming the
dictionary instead of the token stream is what makes Snowball cheap.

The settings are recorded in the index, and stage 05 rebuilds the analyzer from that
record, not from config.yaml: a query analysed differently from the documents would
silently match nothing.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Runs of anything that is not a letter or a digit separate terms. RE2 syntax (pyarrow).
SEPARATORS = r"[^\p{L}\p{N}]+"

# Lucene's English stop set (EnglishAnalyzer / Elasticsearch `_english_`), the list bm25s
# also uses: small on purpose, so negations and question words still count.
ENGLISH_STOPWORDS = frozenset("""
a an and are as at be but by for if in into is it no not of on or such that the their
then there these they this to was will with
""".split())


@dataclass(frozen=True)
class Analyzer:
    stemmer: str = "english"  # "english" (Snowball via PyStemmer) or "none"
    stopwords: str = "english"  # "english" or "none"

    def settings(self) -> dict:
        return asdict(self)

    @classmethod
    def from_settings(cls, settings: dict) -> "Analyzer":
        return cls(stemmer=settings["stemmer"], stopwords=settings["stopwords"])

    def tokens(self, texts) -> tuple[pa.Array, np.ndarray]:
        """All terms of `texts` flattened, and for each the index of the text it came from."""
        arr = texts if isinstance(texts, (pa.Array, pa.ChunkedArray)) else pa.array(texts, pa.string())
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        arr = pc.fill_null(arr, "")
        runs = pc.split_pattern_regex(pc.utf8_lower(arr), SEPARATORS)
        flat = pc.list_flatten(runs)
        parent = pc.list_parent_indices(runs)
        # Splitting leaves "" at the edges and one-letter runs ("a", "x"): neither is a term.
        keep = pc.greater_equal(pc.utf8_length(flat), 2)
        if self.stopwords == "english":
            keep = pc.and_(keep, pc.invert(pc.is_in(flat, pa.array(sorted(ENGLISH_STOPWORDS)))))
        flat = pc.filter(flat, keep)
        parent = pc.filter(parent, keep)
        if self.stemmer == "english" and len(flat):
            flat = _stem(flat)
        return flat, np.asarray(parent, dtype=np.int64)

    def analyze(self, text: str) -> list[str]:
        """The terms of one string, in order (for queries, tests and explanations)."""
        flat, _ = self.tokens([text])
        return flat.to_pylist()


def _stem(flat: pa.Array) -> pa.Array:
    encoded = pc.dictionary_encode(flat)
    words = encoded.dictionary.to_pylist()
    stems = pa.array(_stemmer().stemWords(words), pa.string())
    return pc.take(stems, encoded.indices)


_STEMMER = None


def _stemmer():
    global _STEMMER
    if _STEMMER is None:
        import Stemmer  # PyStemmer: the Snowball C stemmers

        _STEMMER = Stemmer.Stemmer("english")
    return _STEMMER
