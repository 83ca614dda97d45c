"""pipekit/run/malloc.py's few_arenas: threads that allocate share at most n malloc heaps."""
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
