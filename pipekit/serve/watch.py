"""`serve --watch`: when files under documents.input change, rerun stages 01-04, then switch.

Changes are the operating system's file events (inotify on Linux, FSEvents, ReadDirectoryChangesW)
through `watchfiles`, not a poll of every file's time: a poll of 1,400 files took 12 ms of the
server's one Python thread, four times a second for a quick answer, and grows with the folder;
events cost nothing while nothing changes (watchfiles falls back to polling where a folder gives
no events, such as some network mounts).  An editor saves in bursts (a temporary file, a
rename, a second write), and a `git checkout` touches hundreds of files, so a rerun starts only
once no event has come for `quiet` seconds; events in version-control and cache folders
(`.git`, `__pycache__`, ...) and in the pipeline's own output folder are ignored.

The rerun is `run_pipeline.py --to 4` in a child process with the server's own --config
and --set: incremental (a rerun costs what changed, ~9 % of a full run for one file), and
away from the server's process, so a search is not slowed by the rerun's Python work and
a crashing reader cannot take the server down.  One rerun at a time: changes made during
a rerun start the next one when it ends.  A rerun that fails leaves the old index serving
(each stage writes atomically), and its last words are in `status`.

Stage 05 is not rerun: the service answers from stage 04's index with the retrieval
settings stage 05 last recorded.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from pipekit.run.stages import REPO_ROOT

QUIET_SECONDS = 0.3  # no event for this long ends a burst: a save's rename and writes come within milliseconds


class Watcher:
    """Watches documents.input and reruns stages 01-04 on a change (see the module text)."""

    def __init__(self, service, options: list[str], quiet: float = QUIET_SECONDS):
        self.service = service
        self.options = list(options)
        self.quiet = quiet
        self.root = Path(service.cfg["documents"]["input"])
        self.running = False
        self.runs = 0
        self.last: dict | None = None  # the last rerun: when, how long, ok or its error
        # With --workers the watcher runs in a process of its own (workers.py): its state is
        # handed on at each change, and the workers are told to look once a rerun has ended.
        self.on_state = None  # on_state(state()): after every change of state
        self.after_rerun = service.refresh  # after a rerun that succeeded: switch now, not at the next look

    def state(self) -> dict:
        return {"folder": str(self.root), "rerunning": self.running, "reruns": self.runs, "last_rerun": self.last}

    def command(self) -> list[str]:
        return [sys.executable, str(REPO_ROOT / "run_pipeline.py"), "--to", "4", *self.options]

    def _changed(self) -> None:
        if self.on_state is not None:
            self.on_state(self.state())

    def rerun(self) -> None:
        self.running = True
        self._changed()
        t0 = time.perf_counter()
        started = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
        try:
            done = subprocess.run(self.command(), capture_output=True, text=True, cwd=os.getcwd(),
                                  stdin=subprocess.DEVNULL)
            ok = done.returncode == 0
            words = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or [""])[-1]
        except OSError as exc:
            ok, words = False, f"could not start the pipeline: {exc}"
        self.runs += 1
        self.last = {"started": started, "seconds": round(time.perf_counter() - t0, 2), "ok": ok,
                     "error": None if ok else (words or "the pipeline failed without a message")}
        self.running = False
        self._changed()
        if ok:
            self.after_rerun()

    def run_forever(self, stop: threading.Event) -> None:
        import watchfiles

        outputs = str(self.service.output_dir.resolve())
        default = watchfiles.DefaultFilter()

        def wanted(change, path: str) -> bool:  # not the outputs (inside the input, writing them is no edit)
            return default(change, path) and not (path == outputs or path.startswith(outputs + os.sep))

        try:
            for _changes in watchfiles.watch(self.root, watch_filter=wanted, step=int(self.quiet * 1000),
                                             debounce=60_000, stop_event=stop, raise_interrupt=False):
                self.rerun()
        except (FileNotFoundError, OSError) as exc:  # the folder is gone, or cannot be watched
            self.last = {"started": None, "seconds": 0, "ok": False,
                         "error": f"cannot watch {self.root}: {exc}; the index is no longer kept fresh"}
            self._changed()
