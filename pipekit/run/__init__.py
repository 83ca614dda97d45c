"""run/ — the plumbing every stage stands on; it imports nothing from the rooms above it.

stages (the five stages as data, `load_stage`), config (every key, its default, `--set`),
overrides (which `--set` a reading command cannot apply), errors (the one-line PipelineError),
commands (arguments, one-line errors, a stdout `| head` may close), io (Parquet with
provenance metadata, atomic writes), hashing (content, code and record hashes), arrays
(Arrow/NumPy helpers several stages share), globs (one reading of `*` and `**` for
documents.include/exclude and search --in), freshness (is an output still what its inputs
make?), incremental (reusing the rows of what did not change), engine (local or Dask:
partitions, progress bars), environment (the virtualenv hint), malloc (memory handed back).
"""
