"""`python -m pipekit COMMAND`: small tools around the pipeline's outputs.

    python -m pipekit show PATH [--rows N] [--columns a,b]
    python -m pipekit compare [A B] [--list]      (runs kept in 05_history.parquet)
    python -m pipekit search ["QUERY" ...] [-k N] [--explain] [--json] [--in GLOB]... [--format FMT]...
    python -m pipekit report                      (one HTML page in paths.output)
    python -m pipekit serve [--http HOST:PORT] [--watch] [--token T]   (MCP and JSON over the index)

The stages themselves run as `python 0N_<stage>.py` or `python run_pipeline.py`.
"""
from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "show": "print a stage output: schema, rows, provenance metadata",
    "compare": "the queries whose metrics moved most between two runs, and the config difference",
    "search": "ask the stage-04 index a question, as stage 05 would; writes nothing",
    "report": "write report.html: the stages, chunk sizes, per-query metrics, top results",
    "serve": "serve the index to agents (MCP over stdio or HTTP) and programs (JSON), warm and fresh",
}
# search: a query or two from the index's memory-mapped copy (pipekit/retrieve/cold.py, which
# answers None when it cannot: the prompt, filters, --explain, ...), else a Searcher's full load.
MODULES = {"show": ["pipekit.tools.show"], "compare": ["pipekit.tools.compare"],
           "search": ["pipekit.retrieve.cold", "pipekit.retrieve.search"], "report": ["pipekit.tools.report"],
           "serve": ["pipekit.serve.command"]}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        for name, what in COMMANDS.items():
            print(f"\n  {name:<8} {what}")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command in COMMANDS:
        for name in MODULES[command]:
            # Imported on demand: `show` should not pay for loading the search code.
            module = importlib.import_module(name)
            # show prints any Parquet file: nanosecond times need pandas to become values; the
            # cold search loads no Arrow at all
            if command != "show" and name != "pipekit.retrieve.cold":
                from pipekit.run.io import defer_pandas

                defer_pandas()  # pipekit/run/io.py: no DataFrame is made, pandas need not load
            code = module.main(rest)
            if code is not None:
                return code
    print(f"python -m pipekit: error: unknown command {command!r}; commands: {', '.join(COMMANDS)}",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
