"""pipekit/retrieve/resident.py: what a worker loads once (stage 05's index) and how one machine's
workers share its arrays instead of each building its own."""
from __future__ import annotations

import multiprocessing
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipekit.retrieve import resident


@pytest.fixture
def tag():
    t = f"test-{uuid.uuid4().hex[:12]}"
    yield t
    resident.release(t)


def test_held_loads_once_per_key_and_a_new_key_replaces_the_old():
    loads = []
    load = lambda name: (lambda: loads.append(name) or name.upper())
    try:
        assert resident.held("a", load("a")) == "A"
        assert resident.held("a", load("never")) == "A"
        assert resident.held("b", load("b")) == "B"
        assert list(resident._HELD) == ["b"]  # at most one index held
        assert resident.held("a", load("a")) == "A"
        assert loads == ["a", "b", "a"]
    finally:
        resident.release()
    assert resident._HELD == {}


def _arrays(zeros) -> dict:
    big = zeros((3, 5), np.float64)
    big[1, 2] = 7.5
    return {"ids": np.arange(10, dtype=np.int32), "big": big, "names": pa.array(["x", None, "zz"])}


def test_shared_arrays_are_built_once_then_mapped_read_only(tag):
    first = resident.shared_arrays(tag, _arrays)

    def never(zeros):
        raise AssertionError("built twice")

    again = resident.shared_arrays(tag, never)
    for got in (first, again):
        assert got["ids"].tolist() == list(range(10)) and got["ids"].dtype == np.int32
        assert got["big"].shape == (3, 5) and got["big"][1, 2] == 7.5 and got["big"].sum() == 7.5
        assert type(got["big"]) is np.ndarray and not got["big"].flags.writeable
        assert got["names"].to_pylist() == ["x", None, "zz"]
    folder = resident.shared_dir(tag)
    assert sorted(p.name for p in folder.iterdir()) == ["big.npy", "ids.npy", "names.arrow"]
    resident.release(tag)
    assert not folder.exists() and not resident._lock_path(tag).exists()
    assert again["big"][1, 2] == 7.5  # a process still mapping it keeps its pages


def test_without_room_in_shared_memory_the_arrays_go_to_the_temp_folder(tag):
    """A container's /dev/shm is often 64 MB: an index too big for it is built on disk."""
    import tempfile

    got = resident.shared_arrays(tag, _arrays, size=1 << 62)
    assert resident.shared_dir(tag).parent == Path(tempfile.gettempdir())
    assert got["big"][1, 2] == 7.5 and resident.shared_arrays(tag, None, size=0)["ids"].sum() == 45


def test_a_failed_build_leaves_nothing_and_the_next_one_builds(tag):
    def broken(zeros):
        zeros((2, 2), np.float64)
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        resident.shared_arrays(tag, broken)
    folder = resident.shared_dir(tag)
    assert not folder.exists() and not list(folder.parent.glob(f"{folder.name}.tmp-*"))
    assert resident.shared_arrays(tag, _arrays)["ids"].sum() == 45


def _slow_build_counting(tag: str, marks: str):
    def build(zeros):
        with open(marks, "a") as fh:
            fh.write("built\n")
        time.sleep(0.5)  # long enough for the other processes to be waiting on the lock
        return _arrays(zeros)

    return float(resident.shared_arrays(tag, build)["big"].sum())


def test_processes_asking_at_once_share_one_build(tag, tmp_path):
    marks = tmp_path / "marks"
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(3) as pool:
        sums = pool.starmap(_slow_build_counting, [(tag, str(marks))] * 3)
    assert sums == [7.5, 7.5, 7.5]
    assert marks.read_text() == "built\n"


def test_a_failing_stage_still_has_every_process_let_the_index_go(tmp_path):
    """on_workers: a task fails after a worker built the shared copy; the stage's error is
    the one raised, and the copy and every worker's held index are released anyway."""
    from types import SimpleNamespace

    tag = resident.shared_tag(tmp_path, "fp")
    calls = []

    def failing_map(fn, parts, desc=None):
        resident.shared_arrays(tag, _arrays)  # what the first task built
        resident.held(tag, lambda: "index")
        yield from ()
        raise RuntimeError("a task failed")

    def run_everywhere(fn, *args):
        calls.append((fn, args))
        fn(*args)

    ctx = SimpleNamespace(output_dir=tmp_path, map_partitions=failing_map, note=calls.append,
                          engine=SimpleNamespace(workers=2, run_everywhere=run_everywhere))
    with pytest.raises(RuntimeError, match="a task failed"):
        resident.on_workers(ctx, [("1", "q")], "fp", 10, 100, None)
    assert calls == [(resident.release, (tag,))]
    assert resident._HELD == {} and not resident.shared_dir(tag).exists()
