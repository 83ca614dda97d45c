"""The one error type a stage raises for a person to read.

A PipelineError carries a single line that says what went wrong and what to do about
it ("no 02_preprocessed.parquet in data: run `python 02_preprocessing.py` first").
The command-line wrappers print it to stderr and exit non-zero without a traceback;
anything else that escapes is a bug and keeps its traceback.
"""


class PipelineError(Exception):
    """A problem with the user's input or setup, explained in one line."""


class ConfigError(PipelineError):
    """A config key that is unknown, ill-typed or out of range."""
