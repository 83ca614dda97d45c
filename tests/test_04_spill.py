"""Stage 04's counts kept in a spill file (pipekit/index/spill.py) give what counts kept in
memory give: every term range's postings, the df, each chunk's number of postings, the index."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pipekit.index import counting, spill
from pipekit.index.analyzer import Analyzer
from pipekit.run.stages import load_stage

from test_04_indexing import WORDS, chunks

indexing = load_stage(4)


@pytest.mark.parametrize("positioned", [True, False])
def test_a_spill_gives_back_each_array_and_any_slice_of_it(tmp_path, positioned):
    """Arrays of several dtypes appended, read back whole and in part, byte for byte; with
    os.pwrite/os.preadv (Linux) and with the seek-and-read fallback (where they are missing)."""
    s = spill.Spill(tmp_path)
    s._positioned = positioned
    rng = np.random.default_rng(7)
    arrays = [rng.integers(0, 2**31 - 1, 1000, dtype=np.int32), np.arange(5, dtype=np.uint16),
              np.zeros(0, np.int64), rng.random(333)]
    stored = [s.put(a) for a in arrays]
    assert s.size == sum(a.nbytes for a in arrays)
    for a, ref in zip(arrays, stored):
        got = s.get(ref)
        assert got.dtype == a.dtype and np.array_equal(got, a)
        if len(a) > 3:
            assert np.array_equal(s.get(ref, 2, len(a) - 1), a[2:-1])
    assert list(tmp_path.iterdir()) == []  # unnamed: nothing left in the folder, even while open
    s.close()


@pytest.mark.parametrize("first, spread", [(0, 1), (3_000_000, 1), (70_000, 1_000), (5, 70_000)])
def test_a_spilled_piece_finds_any_range_of_terms_as_the_piece_does(tmp_path, monkeypatch, first, spread):
    """`terms_in` of a spilled batch, found through its sample of every SAMPLE-th term and one
    block read, is `terms_in` of the batch in memory, for every range (ends inside a block, on
    a sampled term, before the first term, after the last); its chunks, stored as distances
    from the batch's first in 2 bytes, come back as the int32 numbers they were (and as they
    are where the distances do not fit: `spread` 70,000)."""
    monkeypatch.setattr(spill, "SAMPLE", 3)
    terms = np.array([1, 2, 4, 5, 6, 9, 10, 14, 15, 20], dtype=np.int32)
    df = np.arange(1, 11, dtype=np.int32)
    starts = np.concatenate([[0], np.cumsum(df)]).astype(np.int64)
    chunk = (first + np.arange(starts[-1]) * spread % 65_537 * (spread // 60_000 + 1)).astype(np.int32)
    piece = counting.Piece(terms, df, chunk, (chunk % 7).astype(np.uint16), starts)
    kept = spill.SpilledPiece(spill.Spill(tmp_path), piece)
    narrow = int(chunk.max()) - int(chunk.min()) <= 65_535
    assert (kept.spill.get(kept.refs.chunk).dtype == np.uint16) == narrow == (spread < 70_000)
    for lo in range(0, 23):
        for hi in range(lo, 23):
            want, got = piece.terms_in(lo, hi), kept.terms_in(lo, hi)
            for w, g in zip(want[:4], got[:4]):
                assert g.dtype == w.dtype and np.array_equal(g, w), (lo, hi)


@settings(max_examples=40, deadline=None)
@given(docs=st.lists(st.lists(st.sampled_from(WORDS), max_size=8).map(" ".join), min_size=1, max_size=12),
       cuts=st.lists(st.integers(0, 12), max_size=5), threads=st.sampled_from([1, 2]),
       ranges=st.lists(st.integers(0, 12), max_size=4))
def test_spilled_counts_give_every_term_range_as_counts_in_memory(tmp_path_factory, docs, cuts, threads, ranges):
    """count_chunks with a spill file holds no postings in memory (each batch's are in the
    file) and gives the df, the chunks' lengths and numbers of postings, every term range's
    postings and the index written a range at a time that counts kept in memory give."""
    a = Analyzer("english", "english")
    bounds = sorted({0, len(docs), *(min(c, len(docs)) for c in cuts)})
    batches = [chunks(*docs).slice(lo, hi - lo) for lo, hi in zip(bounds, bounds[1:])]
    held = indexing.count_chunks(batches, a, 1, threads=threads, pieces=True)
    spilled = indexing.count_chunks(batches, a, 1, threads=threads, pieces=True,
                                    spill=spill.Spill(tmp_path_factory.mktemp("spill")))
    assert all(isinstance(p, spill.SpilledPiece) and not hasattr(p, "chunk") for p in spilled["pieces"])
    assert spilled["terms"].equals(held["terms"])
    for key in ("df", "nnz", "lengths"):
        assert np.array_equal(spilled[key], held[key]), key
    n = len(held["terms"])
    cut = sorted(min(r, n) for r in ranges)
    for lo, hi in zip([0, *cut], [*cut, n]):
        got, want = (indexing.term_slice(lo, hi, 0, None, c) for c in (spilled, held))
        for key in ("df", "chunk", "tf"):
            assert np.array_equal(got[key], want[key]), (lo, hi, key)
    for n_ranges in (1, 3):
        one = indexing.index_in_process([held], a, 1.2, 0.75, 1, n_shards=n_ranges)
        by_range = indexing.index_in_process([spilled], a, 1.2, 0.75, 1, n_shards=n_ranges)
        for x, y in zip(one[:3], by_range[:3]):
            assert x.equals(y)


def test_stage_04_spills_into_its_output_folder_and_leaves_nothing_there(tmp_path, monkeypatch):
    """The local engine's count_partition is given the output folder to spill to; the file is
    unnamed, so the folder holds only the index afterwards."""
    made = []
    real = spill.Spill

    def recording(folder):
        made.append(folder)
        return real(folder)

    monkeypatch.setattr(indexing, "Spill", recording)
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    out = tmp_path / "out"
    # Stages 01-03 of the bundled sample, then stage 04 in this process (so the spy sees it).
    subprocess.run([sys.executable, "run_pipeline.py", "--to", "3", "--set", f"paths.output={out}"],
                   cwd=repo, check=True, capture_output=True)
    monkeypatch.chdir(repo)
    assert indexing.stage_main(4, indexing.run, argv=["--set", f"paths.output={out}", "--force"],
                               show_preview=False) == 0
    assert made == [str(out)]
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []


class _OwnDictionaries:
    """pyarrow.compute as an Arrow that gives each chunk its own dictionary would be
    (`own`), or pyarrow.compute whose word-by-word lookup must not be needed."""

    def __init__(self, own=True):
        self.own = own

    def __getattr__(self, name):
        import pyarrow as pa
        import pyarrow.compute as pc

        if name == "index_in" and not self.own:
            raise AssertionError("the batches' words were looked up one by one: Arrow's shared dictionary was not used")
        if name == "dictionary_encode" and self.own:
            return lambda arr: (pa.chunked_array([pc.dictionary_encode(c) for c in arr.chunks])
                                if isinstance(arr, pa.ChunkedArray) else pc.dictionary_encode(arr))
        return getattr(pc, name)


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.lists(st.sampled_from(WORDS + ["Running", "betas", "RUNS"]), max_size=9, unique=True),
                        max_size=9),
       every=st.integers(1, 10), own=st.booleans(), spilled=st.booleans(),
       kind=st.sampled_from(["chosen", "weak", "compiled"]), owners=st.sampled_from([0, 1, 2]))
def test_the_vocabulary_folded_a_few_batches_at_a_time_numbers_terms_as_one_pass(
        tmp_path_factory, batches, every, own, spilled, kind, owners):
    """Each batch's local words get their term's place among the sorted terms (-1: dropped),
    whether the batches' words are numbered by the kept hash table (NumPy's, or `compiled`:
    the counting's compiled loops; `chosen`: whichever the vocabulary picks) or (`weak`: a hash two
    words share, from the batch where they meet) the exact way, folded one, a few or all at
    a time, whether Arrow shares one dictionary between chunks or not, and with the maps
    spilled or held: the terms the analyzer gives each word on its own, sorted by code point.
    `owners` 1 or 2: the batches come as their counting threads' new words (compiled.NewWords,
    batch k from thread k % owners, which keeps its words), each batch's ids numbering its
    thread's words: term_of_batch gives each of the thread's words its term."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from pipekit.index import compiled, vocabulary
    from pipekit.index.wordtable import CompiledWordTable, WordTable

    a = Analyzer("english", "english")
    store = spill.Spill(tmp_path_factory.mktemp("spill")) if spilled else None
    kept = [[] for _ in range(owners)]  # each thread's words so far, in the order it met them
    fed, local = [], []  # each batch's words as given (a thread's: only those new to it); the words its ids number
    for k, words in enumerate(batches):
        if not owners:
            fed.append((words, None))
            local.append(words)
            continue
        mine = kept[k % owners]
        fed.append(([w for w in words if w not in mine], (100 + k % owners, len(mine))))
        mine.extend(fed[-1][0])
        local.append(list(mine))
    with pytest.MonkeyPatch.context() as mp:
        if own or all(words for words, _ in fed):  # (a batch without words is looked up the slow way: Arrow drops its chunk)
            mp.setattr(vocabulary, "pc", _OwnDictionaries(own))
        table = None
        if kind == "weak":
            table = WordTable(hashes=lambda w: np.asarray(pc.utf8_length(w), dtype=np.uint64) % 3)
        elif kind == "compiled" and compiled.load() is not None:
            table = CompiledWordTable(compiled.load())
        vocab = vocabulary.Vocabulary(a, every=every, spill=store, table=table)
        numbers = [vocab.add(pa.array(words, pa.string()) if owner is None else
                             compiled.NewWords(pa.array(words, pa.string()), *owner)) for words, owner in fed]
        terms = vocab.finish().to_pylist()
    term_of = {w: a.terms_of_words(pa.array([w])).to_pylist()[0] for words in batches for w in words}
    assert terms == sorted({t for t in term_of.values() if t is not None})
    for k, words in zip(numbers, local):
        want = [terms.index(term_of[w]) if term_of[w] is not None else -1 for w in words]
        got = vocab.term_of_batch(k).tolist()
        # (a thread's map is its every word's, later batches' too: the batch's ids number the first ones)
        assert (got[:len(want)] if owners else got) == want


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(0, 5000), st.sampled_from(["int16", "int32", "int64", "uint8"])),
                      min_size=1, max_size=6),
       taken=st.sets(st.integers(0, 5)))
def test_an_array_taken_comes_back_and_its_neighbours_keep_their_bytes(tmp_path_factory, sizes, taken):
    """Spill.take reads an array for the last time and punches a hole where it lay (its pages
    handed back at once): what it gives is what was put, and every other array, the ones
    sharing a page with it too, reads back unchanged, taken before or after."""
    s = spill.Spill(tmp_path_factory.mktemp("take"))
    arrays = [np.arange(n, dtype=dtype) * 7 - 3 for n, dtype in sizes]
    stored = [s.put(a) for a in arrays]
    for i in sorted(taken & set(range(len(arrays)))):
        got = s.take(stored[i])
        assert got.dtype == arrays[i].dtype and np.array_equal(got, arrays[i])
    for i, (a, ref) in enumerate(zip(arrays, stored)):
        if i not in taken:
            assert np.array_equal(s.get(ref), a)
    s.close()


@pytest.mark.skipif(__import__("platform").libc_ver()[0] != "glibc" or not spill._fallocate(),
                    reason="punched holes (fallocate): Linux with glibc")
def test_an_array_taken_leaves_the_file_its_pages(tmp_path):
    """The pages wholly inside a taken array are no longer the file's (what made the spill's
    page cache grow to ~0.6 GB at a million passages, each page touched afresh)."""
    import os

    s = spill.Spill(tmp_path)
    big, after = s.put(np.ones(1 << 20, np.int32)), s.put(np.ones(1 << 10, np.int32))
    os.fsync(s._fd)
    before = os.fstat(s._fd).st_blocks * 512
    assert np.array_equal(s.take(big), np.ones(1 << 20, np.int32))
    assert before - os.fstat(s._fd).st_blocks * 512 >= (4 << 20) - 8192
    assert np.array_equal(s.get(after), np.ones(1 << 10, np.int32))
    s.close()
