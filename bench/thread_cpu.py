"""Run a Python script in this process; print where each of its threads' CPU went, and how
busy both cores were over time (issue 47, branch s04f).

pyinstrument samples the main thread's wall time, and py-spy (not installed here) counts a
thread waiting for a core as busy: on a machine shared with other jobs neither says where
the CPU went.  Here a thread samples every thread's Python stack every PROF_INTERVAL
seconds (0.01) and charges each thread's CPU since the last sample (its user + system time
from /proc/self/task/TID/stat, whatever else the machine runs) to the innermost function
and the innermost three of the project's (pipekit/, the stage files).  A C call that lets
go of the GIL is charged to the Python line that made it.  Then every 0.25 s window's cores
busy (the process's CPU / wall) with its largest RSS in MB, and the core-seconds left idle
of two cores.

    python bench/thread_cpu.py 04_indexing.py --config config.yaml --force
    PROF_TOP=60 PROF_INTERVAL=0.005 python bench/thread_cpu.py ...

Prints to stderr at exit.  What it does not do: see CPU spent between two samples by a
thread that ended in between (a short-lived thread's last ticks are lost), or children.
"""
import atexit
import collections
import os
import runpy
import sys
import threading
import time
TICK = os.sysconf("SC_CLK_TCK")
INTERVAL = float(os.environ.get("PROF_INTERVAL", "0.01"))
cpu_by = collections.Counter()
wall_by = collections.Counter()
timeline = []  # (t, process CPU, RSS MB)
last = {}
stop = False

def task_cpu(tid):
    try:
        with open(f"/proc/self/task/{tid}/stat") as f:
            x = f.read().rsplit(")", 1)[1].split()
        return (int(x[11]) + int(x[12])) / TICK
    except OSError:
        return None

def sig(frame):
    names = []
    f = frame
    while f is not None and len(names) < 3:
        fn = f.f_code.co_filename
        if "pipekit" in fn or "/0" in fn:
            names.append(f"{os.path.basename(fn)}:{f.f_code.co_name}")
        f = f.f_back
    inner = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_code.co_name}"
    return (inner, " < ".join(names))

def sampler():
    me = threading.get_ident()
    t0 = time.perf_counter()
    while not stop:
        frames = sys._current_frames()
        threads = {t.ident: t for t in threading.enumerate()}
        for ident, frame in frames.items():
            if ident == me:
                continue
            t = threads.get(ident)
            if t is None:
                continue
            c = task_cpu(t.native_id)
            if c is None:
                continue
            prev = last.get((ident, t.native_id), 0.0)
            last[(ident, t.native_id)] = c
            key = (t.name.split("_")[0][:12],) + sig(frame)
            cpu_by[key] += c - prev
            wall_by[key] += INTERVAL
        tms = os.times()
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * 4096 // (1 << 20)
        timeline.append((time.perf_counter() - t0, tms.user + tms.system, rss))
        time.sleep(INTERVAL)

def report():
    global stop
    stop = True
    time.sleep(0.05)
    out = sys.stderr
    total = sum(cpu_by.values())
    print(f"== CPU by (thread, innermost, project stack), total {total:.2f} s ==", file=out)
    for k, v in cpu_by.most_common(int(os.environ.get('PROF_TOP', '45'))):
        print(f"{v:7.2f}  {wall_by[k]:6.2f}w  {k[0]:12s} {k[1]:40s} {k[2]}", file=out)
    # overlap: CPU rate in windows of 0.25 s
    print("== CPU rate timeline (cores busy / largest RSS MB, per 0.25 s) ==", file=out)
    w, row = 0.25, []
    t_end = timeline[-1][0] if timeline else 0
    idle = 0.0
    import bisect
    ts = [x[0] for x in timeline]
    t = 0.0
    while t < t_end:
        a = bisect.bisect_left(ts, t); b = bisect.bisect_left(ts, t + w)
        if b >= len(ts): b = len(ts) - 1
        if b > a:
            rate = (timeline[b][1] - timeline[a][1]) / (timeline[b][0] - timeline[a][0])
            row.append(f"{rate:.1f}/{max(x[2] for x in timeline[a:b+1])}")
            idle += max(0.0, 2 - rate) * (timeline[b][0] - timeline[a][0])
        t += w
    print(" ".join(row), file=out)
    print(f"core-seconds idle (2 cores): {idle:.2f} of {2*t_end:.2f}", file=out)

th = threading.Thread(target=sampler, daemon=True, name="sampler")
th.start()
atexit.register(report)
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit:
    pass
