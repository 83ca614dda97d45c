"""pipekit — the machinery the five numbered stages stand on, one room per stage.

    run/       plumbing every stage uses: config and --set, Parquet I/O, fingerprints, reuse, engines
    read/      stages 01-02: the walk, one reader per format, pages, cleaning fast path
    chunk/     stage 03: Markdown blocks, headings, document text, CSV, what gives no chunk
    index/     stage 04: analyzer, counting, links, dense vectors
    retrieve/  stage 05 and search: queries, ranks, sections, fusion, results, Searcher
    tools/     show, compare, history, report
    cli.py     one stage run: its context, commit-or-abort and summary (the stages wired to run/)

Nothing in run/ imports a room above it, and no module imports the numbered stage files:
`pipekit.run.stages.load_stage(n)` loads them for run_pipeline and the tests
(`python scripts/import_graph.py` prints the graph).
"""
from pipekit.run.environment import check as _check_environment, quiet_blas_threads as _quiet_blas_threads

_check_environment()  # before anything imports a third-party package: see environment.py
_quiet_blas_threads()  # before NumPy loads: its BLAS threads sleep when idle (environment.py)

from pipekit.run.errors import ConfigError, PipelineError  # noqa: E402
from pipekit.run.stages import STAGES, load_stage

__all__ = ["ConfigError", "PipelineError", "STAGES", "Searcher", "load_stage"]


def __getattr__(name: str):
    # `pipekit.Searcher` on first use: importing it loads pyarrow and numpy, which the
    # stages and `python -m pipekit show` should not pay for when they do not search.
    if name in ("Searcher", "Passage"):
        from pipekit.retrieve import search

        return getattr(search, name)
    raise AttributeError(f"module 'pipekit' has no attribute {name!r}")
