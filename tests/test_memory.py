"""Memory a stage frees goes back to the system when it is freed, not when the allocator gets round to it.

pyarrow's default pool (mimalloc) held freed pages for 10 ms, and whether they were still
held when the next big arrays were made decided stage 04's peak at 1M passages: 1.62 or
1.87 GB in runs of the same code (pipekit/malloc.py).
"""
import os
import subprocess
import sys

import pyarrow as pa
import pytest

from conftest import REPO

# A process that imports pipekit as every script does, makes 64 MB of Arrow arrays in the
# pool, frees them, and prints how much of them its resident memory still holds.
PROBE = """
import pipekit
import numpy as np, pyarrow as pa, pyarrow.compute as pc

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

source = [pa.array(np.arange(1_000_000, dtype=np.int64)) for _ in range(8)]
before = rss_mb()
made = [pc.add(a, 1) for a in source]  # 8 x 8 MB from Arrow's pool
made_mb = rss_mb() - before
del made
print(made_mb, rss_mb() - before)
"""

needs_mimalloc = pytest.mark.skipif(
    pa.default_memory_pool().backend_name != "mimalloc" or not os.path.exists("/proc/self/statm"),
    reason="the setting is mimalloc's, and the probe reads Linux's /proc")


def held_after_free(env_value: str | None) -> tuple[float, float]:
    env = {k: v for k, v in os.environ.items() if k != "MIMALLOC_PURGE_DELAY"}
    if env_value is not None:
        env["MIMALLOC_PURGE_DELAY"] = env_value
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True,
                         check=True).stdout
    made, held = map(float, out.split())
    return made, held


@needs_mimalloc
def test_arrow_memory_freed_in_a_pipekit_process_leaves_at_once():
    made, held = held_after_free(None)
    assert made > 50  # the arrays really were resident
    assert held < made / 4


@needs_mimalloc
def test_a_purge_delay_the_user_set_is_kept():
    made, held = held_after_free("1000")  # a second: the pages are still held when we look
    assert made > 50 and held > made * 3 / 4
