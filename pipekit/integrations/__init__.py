"""Adapters that hand pipekit's search to other frameworks; each imports its framework only
when used, and none is a dependency of the pipeline (requirements-dev.txt has what the tests need)."""
