"""Run a command; print its wall time, the CPU of its whole process tree and the peaks.

`/usr/bin/time` (and `bench/scale.py`'s `wait4()`) count the process and the children it
waited for; a process forked by a fork server (stage 01's readers, its hashing process:
pipekit/read/line_hashes.py) is the server's child, not the stage's, and its CPU and memory
were counted nowhere.  Here every process under the command is found in /proc every 20 ms
and each one's last seen user + system time summed; the tree's peak is the largest sum of
their RSS at one poll (pages shared between them counted in each, so an upper bound).

    python bench/tree_time.py python 01_documents.py --config config.yaml --force

Prints one line to stderr: wall, CPU of the command's process (from its rusage) + of the
others, its own peak RSS and the tree's.  What it does not do: see a process that lived
less than one poll, or run anything itself but the command.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:  # gone between two reads
        pass
    return out


def cpu_and_rss(pid: int) -> tuple[float, int] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK, int(fields[21]) * PAGE


def main(argv: list[str]) -> int:
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    cpu: dict[int, float] = {}
    tree_peak = 0
    while proc.poll() is None:
        pids, stack, rss = [], [proc.pid], 0
        while stack:
            pid = stack.pop()
            pids.append(pid)
            stack += children(pid)
        for pid in pids:
            got = cpu_and_rss(pid)
            if got:
                cpu[pid] = max(cpu.get(pid, 0.0), got[0])
                rss += got[1]
        tree_peak = max(tree_peak, rss)
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = usage.ru_utime + usage.ru_stime
    others = sum(v for pid, v in cpu.items() if pid != proc.pid)
    print(f"{' '.join(os.path.basename(a) for a in argv[:2])}: wall {wall:.2f} s  cpu {own:.2f} + others "
          f"{others:.2f} = {own + others:.2f} s  peak {usage.ru_maxrss / 1024:.0f} MB, tree {tree_peak / 2**20:.0f} MB"
          f"  rc {proc.returncode}", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
