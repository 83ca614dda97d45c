"""pipekit — the plumbing the five numbered stages share.

config (schema, `--set`), io (Parquet with provenance metadata, atomic writes),
freshness (fingerprints), cli (the stage wrapper), analyzer (the tokenizer stage 04
and 05 must agree on), readers (one per input format), queries (queries and qrels).
It imports nothing from the stage files; `stages.load_stage(n)` imports them for
run_pipeline and the tests.
"""
from .environment import check as _check_environment

_check_environment()  # before anything imports a third-party package: see environment.py

from .errors import ConfigError, PipelineError  # noqa: E402
from .stages import STAGES, load_stage

__all__ = ["ConfigError", "PipelineError", "STAGES", "load_stage"]
