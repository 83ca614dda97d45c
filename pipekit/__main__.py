"""`python -m pipekit COMMAND`: small tools around the pipeline's outputs.

    python -m pipekit show PATH [--rows N] [--columns a,b]

The stages themselves run as `python 0N_<stage>.py` or `python run_pipeline.py`.
"""
from __future__ import annotations

import sys

COMMANDS = {"show": "print a stage output: schema, rows, provenance metadata"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        for name, what in COMMANDS.items():
            print(f"\n  {name:<6} {what}")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "show":
        from .show import main as show_main

        return show_main(rest)
    print(f"python -m pipekit: error: unknown command {command!r}; commands: {', '.join(COMMANDS)}",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
