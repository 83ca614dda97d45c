"""Stage 04's term ranges written in kept arrays (pipekit/index/reuse.py) give the postings that
fresh arrays give, and an array is handed out again only once nothing refers to it."""
import gc

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from pipekit.index import reuse
from pipekit.index.analyzer import Analyzer
from pipekit.run.stages import load_stage

from test_04_indexing import WORDS, chunks

indexing = load_stage(4)


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_an_array_comes_back_only_when_no_view_table_or_arrow_buffer_holds_it():
    arrays = reuse.Arrays(keep=2)
    a = arrays.empty(1000, np.int32)
    where = address(a)
    view = a[10:20]
    table = pa.table({"x": pa.array(a)})  # Arrow shares the array's memory
    del a
    b = arrays.empty(1000, np.int32)
    assert address(b) != where  # a table and a view still hold it: a new one
    del table
    c = arrays.empty(500, np.int32)
    assert address(c) != where  # the view still holds it
    del view
    gc.collect()
    d = arrays.empty(800, np.int32)
    assert address(d) == where and len(d) == 800  # free again: the smallest free one that holds 800
    assert arrays.empty(800, np.uint16).dtype == np.uint16  # (another dtype never shares)
    del b, c
    bigger = arrays.empty(5000, np.int32)  # larger than any free one: a new one replaces the smallest
    assert len(bigger) == 5000 and arrays.reused == 1
    assert len(arrays._kept) <= 2


def ranges(docs, n_ranges, tf16, tmp):
    """A corpus's counts (spilled, as the local engine keeps them), its plan, the local engine's
    deferred term ranges and the tables `shard_postings` gives them with np.empty."""
    from pipekit.index import spill

    a = Analyzer("english", "english")
    counts = indexing.count_chunks([chunks(*docs)], a, 1, pieces=True, spill=spill.Spill(tmp))
    plan = indexing.Plan([indexing.vocabulary(counts)], 1.2, 0.75, n_shards=n_ranges)
    if not tf16:  # counts past 2 bytes: tf is held as int32 already
        for p in counts["pieces"]:
            p.refs = p.refs._replace(tf=p.spill.put(p.spill.get(p.refs.tf).astype(np.int32)))
    deferred = lambda fn, c: (lambda **kw: indexing.term_slice(*fn.args, c, **kw))  # noqa: E731 (as `write_postings`)
    shards = [indexing.shard_of(plan, s, [counts], deferred) for s in range(len(plan.bounds) - 1)]
    plain = [t for s in range(len(plan.bounds) - 1)
             for t in indexing.shard_postings(indexing.shard_of(plan, s, [counts]))]
    return shards, plain


def written(shards, plain, keep, monkeypatch):
    """`ranges_postings`' tables, each compared with the plain one as it comes and then dropped
    (as the writer drops it), so that later ranges reuse its arrays; the keeper used."""
    made = []

    class Recording(reuse.Arrays):
        def __init__(self, keep):
            super().__init__(keep)
            made.append(self)

    monkeypatch.setattr(reuse, "Arrays", Recording)
    monkeypatch.setattr(indexing, "RANGES_KEPT", keep)
    n = 0
    for table in indexing.ranges_postings(shards):
        assert table.equals(plain[n]), n
        n += 1
    assert n == len(plain)
    return made[0]


@settings(max_examples=30, deadline=None)
@given(docs=st.lists(st.lists(st.sampled_from(WORDS), max_size=8).map(" ".join), min_size=1, max_size=12),
       n_ranges=st.integers(1, 6), keep=st.sampled_from([0, 1, 3, 16]), tf16=st.booleans())
def test_ranges_written_in_kept_arrays_are_the_ranges_written_in_fresh_ones(tmp_path_factory, docs, n_ranges,
                                                                          keep, tf16):
    """The local engine's ranges (`ranges_postings`: two at once, in kept arrays) give the
    tables `shard_postings` gives with np.empty, whatever number of arrays is kept."""
    shards, plain = ranges(docs, n_ranges, tf16, tmp_path_factory.mktemp("spill"))
    with pytest.MonkeyPatch.context() as mp:
        written(shards, plain, keep, mp)


def test_later_ranges_are_written_in_earlier_ranges_arrays(tmp_path, monkeypatch):
    """A range's arrays are free once its tables are dropped, two ranges later at the latest
    (how many are reused depends on the threads' timing: at least one)."""
    docs = [" ".join(WORDS[i % len(WORDS)] for i in range(k, k + 9)) for k in range(60)]
    shards, plain = ranges(docs, 12, True, tmp_path)
    arrays = written(shards, plain, 16, monkeypatch)
    assert len(plain) >= 8 and arrays.reused > 0
