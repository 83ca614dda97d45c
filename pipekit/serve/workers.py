"""`serve --http … --workers N`: the HTTP service answered by N processes, forked after the load.

Why: a call costs ~1.2 ms of Python (the search ~0.9, HTTP and JSON the rest), and one
interpreter answers one call at a time; threads do not help, the work holds the GIL.  With
8 callers always waiting (bench/serve.py), a call waited for the 7 ahead of it: a median of
7-10 ms on this 2-core machine, against 1.3 ms for a lone caller.  N processes answer N
calls at once.

How:
- The parent loads the index and opens the listening socket, then forks the workers, so the
  index's arrays and the imported libraries are shared with every worker (copy-on-write),
  not loaded N times.  The parent never starts a thread: a thread's locks would be copied,
  held, into a child that has no such thread.
- Each worker runs the same app on the inherited socket (the kernel gives each new
  connection to one worker) and its own refresher: after a rewrite, each worker loads the
  new index and switches on its own, so each call still sees one whole index.
- `--watch` runs in a process of its own, forked beside the workers, so the parent never has a
  thread and can fork a replacement worker at any time.  After a rerun the watcher signals
  the parent (SIGUSR1), which passes it on to the workers, so they look at the outputs at
  once instead of at their next half second; the watcher's state reaches every worker's
  `status` through a small block of shared memory.
- A worker (or the watcher) that dies is replaced, and a new worker loads the current index
  before it serves; when three in a row die within seconds of their start, the server ends
  with their exit status rather than forking them in a loop.  SIGTERM or SIGINT to the parent stops the
  workers gracefully.

What it does not do: share an index loaded after a switch (each worker loads its own copy,
so after a rebuild the index's own memory is N copies while the libraries stay shared),
run where there is no fork (Windows: one process), or serve stdio (it has one caller).
"""
from __future__ import annotations

import gc
import json
import mmap
import multiprocessing
import os
import signal
import socket
import struct
import sys
import threading
import time

DIED_YOUNG_SECONDS = 5.0  # a worker gone this soon after its fork ...
YOUNG_DEATHS = 3          # ... this many times running is broken, not unlucky: do not fork it again


def default_workers() -> int:
    """One worker per core, at most 4: the calls are short and CPU-bound, so more processes
    than cores only queue, and each one that reloads after a switch holds its own copy."""
    return max(1, min(os.cpu_count() or 1, 4))


class SharedState:
    """A small JSON value one process writes and the others read: an anonymous shared mapping
    made before the fork (the child inherits it), a length prefix, and a lock."""

    SIZE = 64 * 1024

    def __init__(self):
        self._buf = mmap.mmap(-1, self.SIZE)
        self._lock = multiprocessing.get_context("fork").Lock()
        self.set(None)

    def set(self, value) -> None:
        data = json.dumps(value).encode()
        if len(data) > self.SIZE - 4:  # a watcher's error of many kB: keep the state valid, cut the words
            data = json.dumps({"error": "state too large to share"}).encode()
        with self._lock:
            self._buf[:4 + len(data)] = struct.pack("<I", len(data)) + data

    def get(self):
        with self._lock:
            (n,) = struct.unpack("<I", self._buf[:4])
            return json.loads(self._buf[4:4 + n])


class SharedWatch:
    """What a worker's `status` shows as the watcher: the parent's Watcher state, as last shared."""

    def __init__(self, shared: SharedState):
        self.shared = shared

    def state(self) -> dict | None:
        return self.shared.get()


def listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class Workers:
    """The parent: forks `n` workers that each call `serve(sock)` and, with a watcher, one
    process that watches; replaces one that dies; stops them all on SIGTERM or SIGINT."""

    def __init__(self, service, n: int, serve, watcher=None, say=print):
        self.service = service
        self.n = n
        service.workers = n
        self.serve = serve  # serve(sock): runs one worker's HTTP server until it is told to stop
        self.watcher = watcher
        self.say = say
        self.shared = SharedState()
        self.children: dict[int, tuple[str, float]] = {}  # pid -> (role, when it was forked)
        self.stopping = False
        self.young_deaths = 0  # children that died soon after their fork, in a row

    # ------------------------------------------------------------------ the children

    def _worker(self, sock: socket.socket) -> None:
        """A worker: its own refresher (woken by SIGUSR1), then the server until SIGTERM."""
        service = self.service
        wake = threading.Event()
        signal.signal(signal.SIGUSR1, lambda *_: wake.set())
        if self.watcher is not None:
            service.watcher = SharedWatch(self.shared)
        service.refresh()  # a replacement worker: the index as it is now, before the first call
        stop = threading.Event()
        threading.Thread(target=service.refresh_forever, args=(stop,), kwargs={"wake": wake}, name="refresh",
                         daemon=True).start()
        try:
            self.serve(sock)
        finally:
            stop.set()

    def _watch(self, sock: socket.socket) -> None:
        """The watcher's process: reruns the pipeline on a change, shares its state, and
        tells the parent (which tells the workers) when a rerun has ended."""
        sock.close()
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        self.watcher.on_state = self.shared.set
        self.watcher.after_rerun = lambda: os.kill(os.getppid(), signal.SIGUSR1)
        self.watcher.run_forever(stop)

    def _fork(self, role: str, sock: socket.socket) -> None:
        pid = os.fork()
        if pid == 0:  # the child never returns into the parent's code
            code = 0
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the parent's handlers are not the child's
                signal.signal(signal.SIGINT, signal.default_int_handler)
                (self._worker if role == "worker" else self._watch)(sock)
            except KeyboardInterrupt:
                pass
            except BaseException as exc:  # noqa: BLE001 - a child's end is reported by its exit status
                if not isinstance(exc, SystemExit):
                    print(f"pipekit serve: {role} {os.getpid()} failed: {type(exc).__name__}: {exc}",
                          file=sys.stderr, flush=True)
                    code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        self.children[pid] = (role, time.monotonic())

    # ------------------------------------------------------------------ the parent

    def _signal_all(self, signum: int, role: str | None = None) -> None:
        for pid, (r, _) in list(self.children.items()):
            if role is None or r == role:
                try:
                    os.kill(pid, signum)
                except ProcessLookupError:
                    pass

    def _stop(self, *_) -> None:
        self.stopping = True
        self._signal_all(signal.SIGTERM)

    def run(self, sock: socket.socket) -> int:
        """Fork the workers (and the watcher), then wait; the server's exit status."""
        if self.watcher is not None:
            self.shared.set(self.watcher.state())
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        signal.signal(signal.SIGUSR1, lambda *_: self._signal_all(signal.SIGUSR1, "worker"))
        # A collection in a worker touches every tracked object's header, which copies the
        # page it sits on: the loaded index's Python objects would become N private copies.
        # Frozen objects are left out of collections (what gc.freeze is for, before a fork).
        gc.collect()
        gc.freeze()
        for _ in range(self.n):
            self._fork("worker", sock)
        if self.watcher is not None:
            self._fork("watcher", sock)
        code = 0
        try:
            while self.children:
                pid, status = os.wait()  # a signal's handler runs, then the wait goes on (PEP 475)
                role, born = self.children.pop(pid, ("", 0.0))
                if not role or self.stopping:
                    continue
                why = (f"signal {-os.waitstatus_to_exitcode(status)}" if os.WIFSIGNALED(status)
                       else f"exit status {os.waitstatus_to_exitcode(status)}")
                self.young_deaths = self.young_deaths + 1 if time.monotonic() - born < DIED_YOUNG_SECONDS else 0
                if self.young_deaths >= YOUNG_DEATHS:
                    self.say(f"the {role} ended ({why}): {YOUNG_DEATHS} children in a row ended within "
                             f"{DIED_YOUNG_SECONDS:.0f} s of their start; stopping")
                    code = 1
                    self._stop()
                    continue
                self.say(f"a {role} ended ({why}); starting another")
                self._fork(role, sock)
        finally:
            sock.close()
        return code
