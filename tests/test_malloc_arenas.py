"""pipekit/run/malloc.py: threads that allocate share at most n malloc heaps (few_arenas); stage 04
leaves malloc's thresholds as they were (it does not keep what it frees: keep_freed_memory)."""
import ctypes.util
import platform
import subprocess
import sys

import pytest

CHILD = r"""
import ctypes, ctypes.util, os, sys, tempfile, threading
import numpy as np
from pipekit.run import malloc
limit = int(sys.argv[1])
if limit:
    assert malloc.few_arenas(limit)
ready, done, kept = threading.Barrier(7), threading.Event(), []
def work():
    kept.append(np.ones(1 << 16))  # (512 KB: from the thread's arena, under the mmap threshold once raised)
    for _ in range(50):
        np.ones(1 << 14).sum()
    ready.wait()
    done.wait()
threads = [threading.Thread(target=work) for _ in range(6)]
for t in threads:
    t.start()
ready.wait()
try:  # (a failure here must not leave the threads waiting: the test would time out, not fail)
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.fopen.restype = ctypes.c_void_p
    path = tempfile.mktemp()
    f = libc.fopen(path.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(f))
    libc.fclose(ctypes.c_void_p(f))
finally:
    done.set()
for t in threads:
    t.join()
print(open(path).read().count("<heap nr="))
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="malloc arenas and malloc_info are glibc's")
def test_threads_share_at_most_the_arenas_allowed():
    """Six threads allocating at once get heaps of their own by default (glibc: up to 8 a
    core); after few_arenas(2) they share two, whose freed memory each thread can reuse."""
    def heaps(limit):
        out = subprocess.run([sys.executable, "-c", CHILD, str(limit)], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        return int(out.stdout.split()[-1])

    assert heaps(2) <= 2
    assert heaps(0) > 2  # (what the limit changes: without it, more)


STAGE_04_CHILD = r"""
import ctypes, sys
import numpy as np
from pipekit.run.stages import load_stage
indexing = load_stage(4)
assert indexing.stage_main(4, indexing.run, argv=["--set", "paths.output=" + sys.argv[1], "--force"],
                           show_preview=False) == 0

class Info(ctypes.Structure):  # glibc's struct mallinfo2
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
before = libc.mallinfo2().hblks
big = np.ones(6 << 20)  # 48 MB: above glibc's largest self-raised mmap threshold (32 MB)
print(libc.mallinfo2().hblks - before)
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc"
                    or tuple(int(x) for x in platform.libc_ver()[1].split(".")[:2]) < (2, 33),
                    reason="glibc 2.33 or later: mallopt's thresholds and mallinfo2")
def test_stage_04_hands_back_what_it_frees(tmp_path):
    """After stage 04 run by main() in a process that goes on (a test; run_pipeline on small
    inputs, in one process), a large array is still a mapping of its own, handed back when
    freed: glibc's thresholds are raised (malloc.keep_for_the_stage) only in a process that
    ends with its stage, as they stay for the process's life (stage 05 keeps from its queries
    on only; one run_pipeline process kept ~50 MB more at 200k passages, bench/README.md)."""
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    out = tmp_path / "out"
    subprocess.run([sys.executable, "run_pipeline.py", "--to", "3", "--set", f"paths.output={out}"],
                   cwd=repo, check=True, capture_output=True, timeout=300)
    child = subprocess.run([sys.executable, "-c", STAGE_04_CHILD, str(out)], cwd=repo, capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    assert int(child.stdout.split()[-1]) == 1  # the array is its own mmapped block


POOL_CHILD = r"""
import atexit, os, runpy, sys

def show():  # at exit: run_pipeline's own process, after its imports and its main()
    import pyarrow as pa
    from pipekit.run import io
    io.steady_memory()  # (what each stage calls: it must leave the chosen pool alone)
    print(pa.default_memory_pool().backend_name, os.environ.get("ARROW_DEFAULT_MEMORY_POOL", "-"))

atexit.register(show)
sys.argv = [SCRIPT, "--help"]
runpy.run_path(SCRIPT, run_name="__main__")
"""


@pytest.mark.parametrize("chosen, pool", [(None, "system"), ("jemalloc", "jemalloc")])
@pytest.mark.parametrize("script", ["run_pipeline.py", "04_indexing.py"])
def test_run_pipeline_puts_arrow_on_malloc(chosen, pool, script):
    """One run_pipeline process allocates Arrow's buffers from glibc's malloc (Arrow's system
    pool), so that what a stage freed is handed back before the next (malloc.arrow_on_malloc:
    Arrow's default, mimalloc, kept 68-81 MB of freed pages under stage 04's peak at 200k
    passages); the environment is put back for the processes it starts, and a pool the user
    chose is kept.  So does stage 04 run alone, as its forked child under run_pipeline has it
    (mimalloc's fresh huge pages: up to 1.6 s of system time at a million passages)."""
    import os
    from pathlib import Path

    pytest.importorskip("pyarrow")
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if chosen:
        env["ARROW_DEFAULT_MEMORY_POOL"] = chosen
    child = subprocess.run([sys.executable, "-c", POOL_CHILD.replace("SCRIPT", repr(script))],
                           cwd=Path(__file__).resolve().parent.parent,
                           capture_output=True, text=True, timeout=120, env=env)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.split()[-2:] == [pool, chosen or "-"]


@pytest.mark.parametrize("spilled", [True, False])
def test_stage_04_counting_hands_back_once_not_batch_by_batch(tmp_path, monkeypatch, spilled):
    """Stage 04 keeps what a batch freed for the next batch (handed back, each batch's
    temporaries were faulted in again: 580-620k page faults at a million passages against
    119-170k, bench/README.md, branch faults) and hands it back once, between the counting
    and the write, however many batches there are; the counts are the same either way."""
    from pipekit.index.analyzer import Analyzer
    from pipekit.index.spill import Spill
    from pipekit.run.stages import load_stage
    from test_04_indexing import chunks

    indexing = load_stage(4)
    words = ["alpha", "beta", "gamma", "delta", "zeta"]
    batches = [chunks(" ".join(words[(i + j) % 5] for j in range(i % 4 + 1))) for i in range(40)]
    a = Analyzer("english", "english")

    def counted():
        calls = []
        monkeypatch.setattr(indexing, "release_freed_memory", lambda: calls.append(1))
        counts = indexing.count_chunks(batches, a, 1, pieces=spilled,
                                       spill=Spill(tmp_path) if spilled else None)
        monkeypatch.undo()
        return calls, counts

    calls, counts = counted()
    assert calls == [1]  # 40 batches: one hand-back (every 16 batches before, and after each phase)
    reference = indexing.count_chunks(batches, a, 1, pieces=False)
    for x, y in zip(indexing.index_in_process([counts], a, 1.2, 0.75, 1)[:3],
                    indexing.index_in_process([reference], a, 1.2, 0.75, 1)[:3]):
        assert x.equals(y)


KEEP_CHILD = r"""
import ctypes, os, sys
import numpy as np
from pipekit.run import isolate, malloc

class Info(ctypes.Structure):  # glibc's struct mallinfo2
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info

def mapped():  # is a 48 MB array a mapping of its own (above glibc's largest self-raised threshold)?
    before = libc.mallinfo2().hblks
    big = np.ones(6 << 20)
    return libc.mallinfo2().hblks - before

def child():
    with open(sys.argv[1], "w") as f:
        f.write(f"{malloc.keep_for_the_stage()} {mapped()}")

print(malloc.keep_for_the_stage(), mapped())
isolate.run_in_child(child)
print(open(sys.argv[1]).read())
print(malloc.keep_for_the_stage(), mapped())
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc"
                    or tuple(int(x) for x in platform.libc_ver()[1].split(".")[:2]) < (2, 33)
                    or not hasattr(__import__("os"), "fork"),
                    reason="glibc 2.33 or later: mallopt's thresholds and mallinfo2; fork")
def test_a_stage_keeps_what_it_frees_only_in_a_process_that_ends_with_it(tmp_path):
    """run_pipeline's child for a stage (and a stage's own command line) keeps what it frees
    for its next batch: a large array comes from malloc's heap, not a mapping of its own
    faulted in anew; the parent, which runs more stages after, keeps its thresholds."""
    from pathlib import Path

    child = subprocess.run([sys.executable, "-c", KEEP_CHILD, str(tmp_path / "report")],
                           cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.split("\n")[:3] == ["False 1", "True 0", "False 1"]
