"""What a worker keeps between stage 05's jobs: parts of one index, let go when the stage ends."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from pipekit.retrieve import resident


def test_held_loads_once_per_key_and_a_new_key_replaces_the_old():
    loads = []
    load = lambda name: (lambda: loads.append(name) or name.upper())
    try:
        assert resident.held("a", load("a")) == "A"
        assert resident.held("a", load("never")) == "A"
        assert resident.held("b", load("b")) == "B"
        assert list(resident._HELD) == [("b", None)]  # at most one index held
        assert resident.held("a", load("a")) == "A"
        assert loads == ["a", "b", "a"]
    finally:
        resident.release()
    assert resident._HELD == {}


def test_parts_of_one_index_are_kept_side_by_side_and_another_index_replaces_them():
    try:
        assert resident.held("index", lambda: "part 0", part=0) == "part 0"
        assert resident.held("index", lambda: "part 4", part=4) == "part 4"  # a part taken over from a lost worker
        assert resident.held("index", lambda: "never", part=0) == "part 0"
        assert sorted(resident._HELD) == [("index", 0), ("index", 4)]
        assert resident.held("rebuilt", lambda: "new", part=0) == "new"
        assert list(resident._HELD) == [("rebuilt", 0)]
    finally:
        resident.release()


def test_a_failing_stage_still_has_every_process_let_its_parts_go(tmp_path):
    """on_shards: a job fails after the parts were loaded; the stage's error is the one
    raised, and every worker (and this process) lets its parts go anyway."""
    from pipekit.retrieve.shards import on_shards

    calls = []

    def load(fn, arg, worker=None):
        resident.held("index", lambda: "part", part=0)  # what the load task keeps
        return SimpleNamespace(single=True, load_seconds=0.1, facts=None)

    def failing_chains(chains, workers=None):
        raise RuntimeError("a job failed")

    def run_everywhere(fn, *args):
        calls.append(fn)
        fn(*args)

    engine = SimpleNamespace(kind="dask", workers=2, submit=load, fetch=list, spread=lambda n: [None] * n,
                             where=lambda handles: [None] * len(handles),
                             chains=failing_chains, run_everywhere=run_everywhere)
    index = SimpleNamespace(stats={"N": 3, "n_postings": 5}, meta={"fingerprint": "fp", "inputs": {}},
                            query_terms=lambda texts: [None] * len(texts))
    ctx = SimpleNamespace(output_dir=tmp_path, engine=engine, cfg={"engine": {"shards": None}}, note=calls.append)
    with pytest.raises(RuntimeError, match="a job failed"):
        on_shards(ctx, index, None, [("1", "q")], 10, 100, None, (0.0, 0.0))
    assert calls == [resident.release] and resident._HELD == {}
