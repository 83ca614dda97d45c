"""The analyzer: text -> terms. Stage 04 indexes with it, stage 05 queries with it.

SPEC's rule, in order: lower-case; split into maximal runs of Unicode letters and digits
(so `snake_case` is two terms and `x86_64` is `x86` and `64`); keep runs of at least two
characters; drop stopwords; stem.  One exception (`single_letters: capitals`, issue 48): a
run of one letter written as a capital, other than `A` and `I`, is a term too, kept as that
capital (`R`, `C`, `X`): see SINGLE_LETTERS.  It works on whole Arrow columns, in two steps:

1. `runs()` cuts a batch of texts into lower-cased runs.  Texts that are pure ASCII (most
   of any English corpus) are cut in numpy over the raw UTF-8 bytes, a few vector
   comparisons over the whole batch, because pyarrow's regex split costs ~20 µs a
   passage: it was the largest single cost of indexing a million passages.  Any other
   text goes through the RE2 split, whose letter and digit classes are the rule; on
   ASCII both give the same runs (ASCII's letters and digits are exactly [A-Za-z0-9]).
2. `terms_of_words()` applies the rest of the rule (length, stopwords, stem) to *distinct*
   words.  Every one of those steps depends on the word alone, so deciding once per
   distinct word is the same as deciding per token, and a corpus repeats its vocabulary
   endlessly: stemming the dictionary instead of the token stream is what makes
   Snowball cheap (stage 04 goes further: each distinct word of the whole corpus once).

The settings are recorded in the index, and stage 05 rebuilds the analyzer from that
record, not from config.yaml: a query analysed differently from the documents would
silently match nothing.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np

from pipekit.run.lazy import lazy
from pipekit.run.arrays import string_buffers

pa, pc = lazy("pyarrow"), lazy("pyarrow.compute")  # imported on first use: `search` starts without Arrow (pipekit/run/lazy.py)

# Runs of anything that is not a letter or a digit separate terms. RE2 syntax (pyarrow).
SEPARATORS = r"[^\p{L}\p{N}]+"

# Lucene's English stop set (EnglishAnalyzer / Elasticsearch `_english_`), the list bm25s
# also uses: small on purpose, so negations and question words still count.
ENGLISH_STOPWORDS = frozenset("""
a an and are as at be but by for if in into is it no not of on or such that the their
then there these they this to was will with
""".split())

# `questions`: Lucene's set plus the words that give a sentence the form of a question
# rather than its subject (interrogatives, the auxiliaries that open one, the asker's
# pronouns; `I` is one letter, which the analyzer drops anyway). A user types "how do I
# roll back a deploy"; with Lucene's set alone `how` and `do` stayed in 86% of the
# sample's questions, matched any chunk that happens to say them, and RM3 fed `how` and
# `what` back as expansion terms. Left out on purpose: words that are also names or
# subjects (`may` the month, `us` the country). Measured: bench/stopwords.py.
QUESTION_WORDS = frozenset("""
how what when where which who whom whose why do does did can could should would shall
might must am were been has have had me my we our you your
""".split())

STOPLISTS = {"english": ENGLISH_STOPWORDS, "questions": ENGLISH_STOPWORDS | QUESTION_WORDS}

_ASCII_RUN = re.compile(r"[a-z0-9]{2,}")  # a term's run in lower-cased ASCII (Analyzer._ascii_terms)

# `single_letters`. A one-letter run is noise in running text (`e.g.`, `don't`'s `t`, a list's
# `a)`), which is why SPEC drops it; but a capital standing alone is how a language, a
# vitamin, a cell or an axis is named (`R`, `C`, `X`, vitamin `D`, `T` cells), and "read a
# CSV file in R" lost the one word that said what it was about. English writes only two
# words as one capital: `A` (opening a sentence or a title) and the pronoun `I`, so those
# two stay out. The term keeps its capital: every other term is lower-cased (and Snowball's
# stems of lower-case words are lower-case), so `R` can never meet `r`, a stem such as
# `aed` -> `a`, or any two-letter term. A query finds it only written the same way (`R`,
# not `r`): a lower-case lone letter in a question is more often a contraction's
# (`what's`, `don't`) than a name. Measured: bench/one_letter.py.
SINGLE_LETTERS = ("capitals", "none")
NOT_NAMES = ("A", "I")  # English words written as one capital
_ASCII_WORD = re.compile(r"[A-Za-z0-9]+")  # a maximal run in ASCII, case kept (Analyzer._ascii_terms)
_ASCII_NAMES = frozenset("BCDEFGHJKLMNOPQRSTUVWXYZ")  # one-letter ASCII names: the capitals less NOT_NAMES


@dataclass(frozen=True)
class Analyzer:
    stemmer: str = "english"  # "english" (Snowball via PyStemmer) or "none"
    stopwords: str = "questions"  # "questions" (Lucene's 33 and QUESTION_WORDS), "english" (Lucene's 33) or "none"
    single_letters: str = "capitals"  # "capitals" (a lone capital but A and I is a term) or "none" (SPEC's rule)

    def __post_init__(self):
        # Anything else would silently mean `none` (`capitals` is tested by equality).
        if self.single_letters not in SINGLE_LETTERS:
            raise ValueError(f"single_letters must be one of {', '.join(SINGLE_LETTERS)}; got {self.single_letters!r}")

    def settings(self) -> dict:
        return asdict(self)

    @classmethod
    def from_settings(cls, settings: dict) -> "Analyzer":
        # An index written before `single_letters` existed was built without one-letter
        # terms: its queries must be analysed the same way, or `R` would find nothing
        # while the words beside it score as before (a silent change in the ranking).
        return cls(stemmer=settings["stemmer"], stopwords=settings["stopwords"],
                   single_letters=settings.get("single_letters", "none"))

    @property
    def capitals(self) -> bool:
        return self.single_letters == "capitals"

    def runs(self, texts) -> tuple[pa.Array, np.ndarray]:
        """Lower-cased maximal letter/digit runs of `texts`, and the text each came from.

        Runs come out grouped by text, in text order, in order within a text. Runs shorter
        than two characters may or may not be present: `terms_of_words` drops them, but for
        a lone capital under `single_letters: capitals`, which comes out as that capital.
        """
        arr = _as_string_array(texts)
        if len(arr) == 0:
            return pa.array([], pa.string()), np.zeros(0, dtype=np.int64)
        ascii_ = pc.string_is_ascii(arr)
        if pc.all(ascii_).as_py():
            return _ascii_runs(arr, self.capitals)
        if not pc.any(ascii_).as_py():
            return _regex_runs(arr, self.capitals)
        # A mixed batch: each part its own way, then back into text order (a stable sort by
        # text keeps each text's runs in order, which queries and explanations rely on).
        fast_rows = np.flatnonzero(np.asarray(ascii_))
        slow_rows = np.flatnonzero(~np.asarray(ascii_))
        fast, fast_parent = _ascii_runs(arr.take(pa.array(fast_rows)), self.capitals)
        slow, slow_parent = _regex_runs(arr.take(pa.array(slow_rows)), self.capitals)
        parent = np.concatenate([fast_rows[fast_parent], slow_rows[slow_parent]])
        order = np.argsort(parent, kind="stable")
        return pa.concat_arrays([fast, slow]).take(pa.array(order)), parent[order]

    def terms_of_words(self, words) -> pa.Array:
        """The term each distinct word becomes, null where the rule drops it (Arrow strings).

        Length and stopwords are Arrow kernels over the whole column; only the words kept
        go through Python, once each, for the stemmer (a corpus's vocabulary, not its text).
        """
        arr = _as_string_array(words)
        length = pc.utf8_length(arr)
        keep = pc.greater_equal(length, 2)
        if self.stopwords != "none":
            keep = pc.and_(keep, pc.invert(pc.is_in(arr, value_set=_stopword_array(self.stopwords))))
        keep = np.asarray(keep)
        name = np.zeros(len(arr), dtype=bool)
        if self.capitals:  # a lone capital (runs() left it upper-case), not A or I; no stopword, no stem
            name = np.asarray(pc.and_(pc.and_(pc.equal(length, 1), pc.utf8_is_upper(arr)),
                                      pc.invert(pc.is_in(arr, value_set=pa.array(NOT_NAMES)))))
        kept = pc.filter(arr, pa.array(keep))
        if self.stemmer == "english" and len(kept):
            kept = pa.array(_distinct_stemmer().stemWords(kept.to_pylist()), pa.string())
        if name.any():
            # The names take their places among the stems (the words' order is the caller's).
            both = keep | name
            place = np.cumsum(both) - 1
            source = np.empty(int(both.sum()), dtype=np.int64)  # where each kept word is in [stems, names]
            source[place[keep]] = np.arange(len(kept))
            source[place[name]] = len(kept) + np.arange(int(name.sum()))
            kept = pa.concat_arrays([kept, arr.filter(pa.array(name))]).take(pa.array(source))
            keep = both
        at = np.full(len(arr), -1, dtype=np.int64)  # each word's place among the kept ones
        at[keep] = np.arange(len(kept))
        return kept.take(pa.array(at, mask=at < 0))

    def tokens(self, texts) -> tuple[pa.Array, np.ndarray]:
        """All terms of `texts` flattened, and for each the index of the text it came from."""
        if isinstance(texts, list) and len(texts) == 1 and isinstance(texts[0], str) and texts[0].isascii():
            # One ASCII query (a Searcher's search): the same rule in plain Python.  The
            # column path's dozen Arrow calls cost ~20 µs each whatever the length, which
            # made analysing a five-word question a fifth of a whole search.
            terms = self._ascii_terms(texts[0])
            return pa.array(terms, pa.string()), np.zeros(len(terms), dtype=np.int64)
        runs, parent = self.runs(texts)
        if len(runs) == 0:
            return runs, parent
        encoded = pc.dictionary_encode(runs)
        flat = self.terms_of_words(encoded.dictionary).take(encoded.indices)
        keep = pc.is_valid(flat)
        return pc.filter(flat, keep), parent[np.asarray(keep)]

    def _ascii_terms(self, text: str) -> list[str]:
        """`tokens` of one ASCII text: on ASCII the letters and digits are [a-z0-9] once
        lower-cased, and a maximal run of two or more of them is what `{2,}` finds; under
        `capitals` the runs are cut with their case, so that a lone B-Z but I stays itself."""
        stop = STOPLISTS.get(self.stopwords, frozenset())
        if not self.capitals:
            words = [w for w in _ASCII_RUN.findall(text.lower()) if w not in stop]
            if self.stemmer == "english" and words:
                words = _stemmer().stemWords(words)
            return words
        runs = _ASCII_WORD.findall(text)
        words = [w.lower() for w in runs if len(w) > 1 and w.lower() not in stop]
        if self.stemmer == "english" and words:
            words = _stemmer().stemWords(words)
        stems = iter(words)
        return [w if len(w) == 1 else next(stems) for w in runs
                if w in _ASCII_NAMES or (len(w) > 1 and w.lower() not in stop)]

    def analyze(self, text: str) -> list[str]:
        """The terms of one string, in order (for queries, tests and explanations)."""
        if text.isascii():  # `tokens`' own plain-Python rule, without making an Arrow array of it
            return self._ascii_terms(text)
        flat, _ = self.tokens([text])
        return flat.to_pylist()


@lru_cache(maxsize=None)
def _stopword_array(name: str = "english") -> pa.Array:
    return pa.array(sorted(STOPLISTS[name]), pa.string())


def _as_string_array(texts) -> pa.Array:
    arr = texts if isinstance(texts, (pa.Array, pa.ChunkedArray)) else pa.array(texts, pa.string())
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.string())
    return pc.fill_null(arr, "")


def _regex_runs(arr: pa.Array, capitals: bool = False) -> tuple[pa.Array, np.ndarray]:
    if not capitals:
        runs = pc.split_pattern_regex(pc.utf8_lower(arr), SEPARATORS)
        return pc.list_flatten(runs), np.asarray(pc.list_parent_indices(runs), dtype=np.int64)
    # Cut first, lower-case after, so that a lone capital can keep its case.  (Lower-casing
    # maps each letter to one letter, so the runs are the same either way: checked over every
    # code point, but for 8 letters added to Unicode lately, which RE2's tables lack in one case.)
    runs = pc.split_pattern_regex(arr, SEPARATORS)
    flat = pc.list_flatten(runs)
    lone = pc.and_(pc.equal(pc.utf8_length(flat), 1), pc.utf8_is_upper(flat))
    name = pc.and_(lone, pc.invert(pc.is_in(flat, value_set=pa.array(NOT_NAMES))))
    return pc.if_else(name, flat, pc.utf8_lower(flat)), np.asarray(pc.list_parent_indices(runs), dtype=np.int64)


ASCII_PIECE = 1 << 17  # bytes of text _ascii_runs cuts at once (whole texts: a longer one alone)


def _ascii_runs(arr: pa.Array, capitals: bool = False) -> tuple[pa.Array, np.ndarray]:
    """`_regex_runs` for pure-ASCII texts, in numpy over the bytes (one-letter runs dropped,
    but for the lone capitals that are names when `capitals`, kept upper-case); the texts'
    run numbers as int32.

    Cut ASCII_PIECE bytes of whole texts at a time (`_ascii_piece`), then put together: on a
    batch of 8,192 passages (~4.8 MB) each of the scan's ~15 passes made a fresh array of the
    batch's size, a new mapping faulted in page by page and handed back when freed (8,000
    page faults a batch, a million passages' stage 04 faulted 4 GB in); a piece's arrays stay
    in the CPU's cache and in malloc's heap, reused by the next piece (2,700 faults a batch,
    the step ~15 % less CPU; bench/README.md, branch s04g).  The runs are the same, in the
    same order: each piece is whole texts, and a run never crosses a text."""
    offsets, data = string_buffers(arr)
    lo, hi = int(offsets[0]), int(offsets[-1])
    if hi == lo:
        return pa.array([], pa.string()), np.zeros(0, dtype=np.int32)
    n = len(arr)
    # The text holding every ASCII_PIECE-th byte opens a piece (and the first text: empty
    # texts before it hold no byte).
    cuts = np.unique(np.concatenate([[0], np.searchsorted(offsets, np.arange(lo, hi, ASCII_PIECE), side="right") - 1,
                                     [n]])).tolist()
    pieces = [_ascii_piece(offsets[i:j + 1], data, capitals, i) for i, j in zip(cuts[:-1], cuts[1:])]
    if len(pieces) == 1:
        kept, lengths, parent = pieces[0]
    else:
        kept, lengths, parent = (np.concatenate(p) for p in zip(*pieces))
    run_offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=run_offsets[1:])
    runs = pa.StringArray.from_buffers(len(lengths), pa.py_buffer(run_offsets), pa.py_buffer(kept))
    return runs, parent


def _ascii_piece(offsets: np.ndarray, data: np.ndarray, capitals: bool, first: int):
    """The runs of the texts whose bytes are data[offsets[0]:offsets[-1]] (text k's are
    data[offsets[k]:offsets[k + 1]]): their bytes lower-cased and put end to end, their
    lengths, and the text of each (numbered from `first`)."""
    lo, hi = int(offsets[0]), int(offsets[-1])
    raw = data[lo:hi]
    # Bit 0x20 lower-cases an ASCII letter and leaves a digit as it is (uint8 arithmetic wraps,
    # so each "in range" test is one subtraction and one comparison).
    folded = raw | np.uint8(0x20)
    in_run = ((folded - np.uint8(97)) < 26) | ((raw - np.uint8(48)) < 10)
    # A run also ends where one text ends and the next begins, even with no separator between.
    text_start = np.zeros(hi - lo + 1, dtype=bool)
    text_start[offsets - lo] = True
    inner_start = text_start[1:-1]
    is_start = in_run.copy()
    is_start[1:] &= ~in_run[:-1] | inner_start
    is_end = in_run.copy()
    is_end[:-1] &= ~in_run[1:] | inner_start
    starts = np.flatnonzero(is_start)
    ends = np.flatnonzero(is_end) + 1
    # One-letter runs are never terms (but names); dropping them here spares hashing them later.
    single = (ends - starts) == 1
    if capitals:
        letter = raw[starts[single]]
        # B-Z less I, as bytes: uint8 wraps, so `letter - B < 25` is B <= letter <= Z.
        is_name = ((letter - np.uint8(66)) < 25) & (letter != np.uint8(73))
        folded[starts[single][is_name]] = letter[is_name]  # the name keeps its capital
        single[np.flatnonzero(single)[is_name]] = False
    keep = in_run
    keep[starts[single]] = False
    starts, ends = starts[~single], ends[~single]
    lengths = (ends - starts).astype(np.int32)
    # Each text's first run, then every run labelled with its text (cheaper than searching per run).
    at = np.searchsorted(starts, offsets - lo, side="left")
    parent = np.repeat(np.arange(first, first + len(offsets) - 1, dtype=np.int32), np.diff(at))
    return folded[keep], lengths, parent


_STEMMER = None
_STEMMER_NO_CACHE = None


def _stemmer():
    global _STEMMER
    if _STEMMER is None:
        import Stemmer  # PyStemmer: the Snowball C stemmers

        _STEMMER = Stemmer.Stemmer("english")
    return _STEMMER


def _distinct_stemmer():
    """A stemmer for words that are each given once (`terms_of_words`: a dictionary's).
    PyStemmer keeps a cache of 10,000 words by default, which only distinct words never hit,
    and purging it cost twice the stemming: 86k distinct words in 37 ms without it against
    120 ms with it (stage 04's vocabulary stems every new word of the corpus)."""
    global _STEMMER_NO_CACHE
    if _STEMMER_NO_CACHE is None:
        import Stemmer

        stemmer = Stemmer.Stemmer("english")
        stemmer.maxCacheSize = 0
        _STEMMER_NO_CACHE = stemmer
    return _STEMMER_NO_CACHE
