"""pipekit/run/malloc.py: threads that allocate share at most n malloc heaps (few_arenas); stage 04
keeps what it frees for its next batch (keep_freed_memory)."""
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
def test_stage_04_keeps_freed_memory_for_its_next_batch(tmp_path):
    """After stage 04 (pipekit/run/malloc.py, keep_freed_memory) a large array comes from malloc's
    heap, not from a fresh mmap that is faulted in page by page and handed back when freed:
    a batch's larger temporaries cost a million passages 1.0-1.1M page faults that way."""
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    out = tmp_path / "out"
    subprocess.run([sys.executable, "run_pipeline.py", "--to", "3", "--set", f"paths.output={out}"],
                   cwd=repo, check=True, capture_output=True, timeout=300)
    child = subprocess.run([sys.executable, "-c", STAGE_04_CHILD, str(out)], cwd=repo, capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    assert int(child.stdout.split()[-1]) == 0  # no new mmapped block for the array
