"""pipekit — the plumbing the five numbered stages share.

config (schema, `--set`), io (Parquet with provenance metadata, atomic writes),
freshness (fingerprints), cli (the stage wrapper), analyzer (the tokenizer stage 04
and 05 must agree on), readers (one per input format), queries (queries and qrels),
history and compare (runs side by side), search (`Searcher`: the index answering one
query as stage 05 would), report (one HTML page of the whole run).
It imports nothing from the stage files; `stages.load_stage(n)` imports them for
run_pipeline and the tests.
"""
from .environment import check as _check_environment

_check_environment()  # before anything imports a third-party package: see environment.py

from .errors import ConfigError, PipelineError  # noqa: E402
from .stages import STAGES, load_stage

__all__ = ["ConfigError", "PipelineError", "STAGES", "Searcher", "load_stage"]


def __getattr__(name: str):
    # `pipekit.Searcher` on first use: importing it loads pyarrow and numpy, which the
    # stages and `python -m pipekit show` should not pay for when they do not search.
    if name in ("Searcher", "Passage"):
        from . import search

        return getattr(search, name)
    raise AttributeError(f"module 'pipekit' has no attribute {name!r}")
