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
