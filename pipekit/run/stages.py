"""The five stages as data: which script, which config section, which outputs.

Everything that needs to know "what comes before stage 3" or "which files does stage 4
write" asks this table, so run_pipeline, the freshness checks and the tests never
repeat it.  `load_stage(3)` imports `03_chunking.py` as a module: a file name that
starts with a digit cannot be imported with a plain `import` statement.
"""
from __future__ import annotations

import importlib.util
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[2]  # pipekit/run/stages.py -> the repository


@dataclass(frozen=True)
class Stage:
    number: int
    name: str
    script: str
    section: str  # the config section this stage reads; its values are recorded in the output
    outputs: tuple[str, ...]  # files in paths.output; the first one is the stage's main output
    code: tuple[str, ...]  # files whose content decides whether the stage's output is stale

    @property
    def upstream(self) -> "Stage | None":
        return STAGES[self.number - 2] if self.number > 1 else None

    @property
    def label(self) -> str:
        return f"{self.number:02d}_{self.name}"


# `code`: the stage file, its own room (a folder: every module in it), and the modules of
# other rooms it uses.  tests/test_freshness.py checks the list against the stage file's
# imports, so a module a stage starts using cannot be left out of its fingerprint.
STAGES: tuple[Stage, ...] = (
    Stage(1, "documents", "01_documents.py", "documents", ("01_documents.parquet", "01_files.parquet"),
          ("01_documents.py", "pipekit/read/", "pipekit/chunk/unchunked.py", "pipekit/run/engine.py",
           "pipekit/run/incremental.py", "pipekit/run/hashing.py", "pipekit/run/arrays.py", "pipekit/run/globs.py")),
    Stage(2, "preprocessing", "02_preprocessing.py", "preprocessing", ("02_preprocessed.parquet",),
          ("02_preprocessing.py", "pipekit/read/", "pipekit/chunk/unchunked.py",
           "pipekit/run/engine.py", "pipekit/run/incremental.py", "pipekit/run/hashing.py", "pipekit/run/arrays.py")),
    Stage(3, "chunking", "03_chunking.py", "chunking", ("03_chunks.parquet",),
          ("03_chunking.py", "pipekit/chunk/", "pipekit/read/markdown.py", "pipekit/read/text.py", "pipekit/read/pages.py",
           "pipekit/run/engine.py", "pipekit/run/incremental.py", "pipekit/run/hashing.py", "pipekit/run/arrays.py")),
    Stage(4, "indexing", "04_indexing.py", "indexing",
          ("04_chunks.parquet", "04_terms.parquet", "04_postings.parquet"),
          ("04_indexing.py", "pipekit/index/", "pipekit/chunk/headings.py", "pipekit/run/engine.py", "pipekit/run/malloc.py",
           "pipekit/run/incremental.py", "pipekit/run/hashing.py", "pipekit/run/arrays.py")),
    Stage(5, "retrieval", "05_retrieval.py", "retrieval", ("05_results.parquet",),
          ("05_retrieval.py", "pipekit/retrieve/", "pipekit/index/analyzer.py", "pipekit/index/layout.py",
           "pipekit/index/link_text.py",
           "pipekit/index/dense.py", "pipekit/chunk/headings.py", "pipekit/read/pages.py", "pipekit/tools/history.py",
           "pipekit/run/io.py", "pipekit/run/engine.py", "pipekit/run/arrays.py")),
)


def get_stage(number: int) -> Stage:
    if not 1 <= number <= len(STAGES):
        raise ValueError(f"there is no stage {number}; stages are 1 to {len(STAGES)}")
    return STAGES[number - 1]


_LOADING = threading.RLock()  # reentrant: a stage file being loaded may load another


def load_stage(number: int) -> ModuleType:
    """Import a numbered stage file (`03_chunking.py`) as a module, once.

    Under a lock: a process running partitions on several threads (a Dask worker with
    threads_per_worker > 1; tried for stage 04 locally) had a second thread find the module
    registered but not yet executed (no `count_partition` in it)."""
    stage = get_stage(number)
    name = f"stage_{stage.label}"
    with _LOADING:
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, REPO_ROOT / stage.script)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # registered first so dataclasses and pickling can find it
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
        return module
