"""Stage 01's reading processes, started without the script that started the run.

multiprocessing's `forkserver` runs `__main__` again in every worker as `__mp_main__`;
01_documents.py's own imports (pyarrow, pipekit.cli, the engine) were then a worker's whole
start-up (pipekit/read/parallel.py says why they are left out).  `Worker` hides `__main__`
while its process is launched; `ReadersContext` makes such workers.

A module of its own so that multiprocessing is imported only when a pool is started (a
rerun reading one file in the stage's process never imports this), while a worker still
finds the class by its plain name when it unpickles its process object.

What it does not do: choose which readers run where (pipekit/read/parallel.py).
"""
from __future__ import annotations

import multiprocessing.context
import sys
import types

_NO_MAIN = types.ModuleType("__main__")


class Worker(multiprocessing.context.ForkServerProcess):
    """A fork-server process started without the script that started the run."""

    @staticmethod
    def _Popen(process_obj):
        # What the child runs first is decided here, in this process, from sys.modules["__main__"]
        # (multiprocessing.spawn.get_preparation_data: its __spec__ or __file__): a module that
        # has neither is left alone.  Swapped for the launch only (a few ms; the stage's other
        # threads, the Parquet writer's, never look at __main__).
        main = sys.modules["__main__"]
        sys.modules["__main__"] = _NO_MAIN
        try:
            return multiprocessing.context.ForkServerProcess._Popen(process_obj)
        finally:
            sys.modules["__main__"] = main


class ReadersContext(multiprocessing.context.ForkServerContext):
    Process = Worker


# What stage 01's hashing process needs (pipekit/read/line_hashes.py): its task's module only.
HASHING_PRELOAD = ("pipekit.run.hashing",)


def start_hashing_server(n_bytes: int, workers: int) -> bool:
    """Start the fork server now for a BEIR corpus of `n_bytes` whose lines will be hashed in a
    process (pipekit/read/line_hashes.py: `PROCESS_BYTES` or more, a second core), with only
    what that process imports; True if it was started (or runs already).

    The hashing process's first block waits for the server.  Started with the readers'
    preload (pipekit/read/parallel.py `_context`: lxml, html_to_markdown, every reader, ~0.2
    s), which a BEIR corpus never uses, the server was ready ~0.3 s after it was asked for;
    with this one module, in ~0.1 s.  The server is the process's one fork server: a later
    start with another preload finds it running, and a corpus's run needs no other."""
    from multiprocessing import forkserver

    from pipekit.run.hashing import HASHING_PROCESS_BYTES, lines_built

    if workers <= 1 or n_bytes < HASHING_PROCESS_BYTES:
        return False
    if lines_built():
        return False  # the lines are hashed by the compiled call, in the stage's threads: no process
    try:
        ReadersContext().set_forkserver_preload(list(HASHING_PRELOAD))
        forkserver.ensure_running()
    except (OSError, ImportError, NotImplementedError):
        return False  # LineHasher finds the same and hashes in the stage's threads
    return True
