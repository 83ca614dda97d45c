"""Stage 01 run alone: its first files read while the stage is still importing Arrow.

`01_documents.py` calls `begin(argv)` before its own imports.  When the run will read every
file (`--force`, or no previous output) and there is enough of them for the reading
processes, this walks the input as the stage will, and submits the first tasks to the pool
(pipekit/read/parallel.py, `HeadStart`).  Before, the second core idled for the stage's first
~0.4 s (pyarrow and NumPy imported, the walk, every file hashed) and the first page was read
after them; on the Python manual's 47 MB that was an eighth of the stage.

What it does not do: decide anything the stage decides.  Its walk is a guess at the stage's:
a row read ahead is used only if the stage's own walk made the same entries and its listing
hashed the bytes the row was read from (`HeadStart`); otherwise it is dropped and the file
read as usual.  Anything that goes wrong here (a bad config, a missing folder, no process
pool) is left for the stage to meet and report in its own words: `begin` never raises.
A rerun that reads a few changed files starts nothing (it reads in the stage's process).
Neither Arrow nor NumPy is imported here: that is the point.

An input that is one file (a BEIR corpus) is read by the stage itself, but two things it
waits for can start here (`file_ahead`, also called by run_pipeline.py before its imports,
`begin_pipeline`): the file's content hash, which the listing needs before any record is
read, and the fork server of the lines' hashing process (pipekit/read/line_hashes.py).
"""
from __future__ import annotations

import argparse
from pathlib import Path


def begin(argv: list[str]) -> bool:
    """Start reading ahead if this run of stage 01 will read every file: True if it did."""
    try:
        return _begin(argv)
    except Exception:  # noqa: BLE001 -- the stage meets the same problem and says it properly
        return False


def _begin(argv: list[str]) -> bool:
    from pipekit.run.commands import add_common_args
    from pipekit.run.config import load_config

    parser = argparse.ArgumentParser(add_help=False)
    add_common_args(parser)
    parser.add_argument("--force", action="store_true")
    args, _ = parser.parse_known_args(argv)
    if any(a in ("-h", "--help") for a in argv):
        return False
    cfg = load_config(args.config, args.overrides)
    reads_all = args.force or not (Path(cfg["paths"]["output"]) / "01_documents.parquet").exists()
    if Path(cfg["documents"]["input"]).is_file():
        return file_ahead(cfg, reads_all)
    if cfg["engine"]["kind"] != "local":
        return False  # a cluster's workers read their own parts
    if not reads_all:
        return False  # a rerun: the stage reads what changed, here
    from pipekit.read.parallel import begin_head_start, workers_wanted
    from pipekit.read.walk import READER_OPTIONS, list_inputs

    sec = cfg["documents"]
    root = Path(sec["input"])
    if not root.is_dir():
        return False  # one file, or a BEIR corpus: read by the stage
    entries = list_inputs(root, sec["include"], sec["exclude"], sec["hidden"], sec["follow_links"],
                          sec["max_bytes"], build_files=sec["build_files"], test_files=sec["test_files"])
    for e in entries:  # as input_listing sets them: the entries must equal the stage's
        e.options = {k: sec[k] for k in READER_OPTIONS}
    workers = workers_wanted(cfg["engine"]["workers"])
    return begin_head_start(workers, entries, seconds=0.6 * workers)


def begin_pipeline(argv: list[str]) -> bool:
    """run_pipeline's `file_ahead`, before its imports: True if something was started."""
    try:
        return _begin_pipeline(argv)
    except Exception:  # noqa: BLE001 -- run_pipeline meets the same problem and says it properly
        return False


def _begin_pipeline(argv: list[str]) -> bool:
    from pipekit.run.commands import add_common_args
    from pipekit.run.config import load_config

    parser = argparse.ArgumentParser(add_help=False)
    add_common_args(parser)
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--status", action="store_true")
    parser.add_argument("--from", dest="first", type=int, default=1)
    args, _ = parser.parse_known_args(argv)
    if args.first != 1 or any(a in ("-h", "--help") for a in argv):
        return False  # stage 01 is not in the run (or nothing runs)
    cfg = load_config(args.config, args.overrides)
    if not Path(cfg["documents"]["input"]).is_file():
        return False
    reads_all = args.force or not (Path(cfg["paths"]["output"]) / "01_documents.parquet").exists()
    return file_ahead(cfg, reads_all and not args.status)


def file_ahead(cfg: dict, reads_all: bool) -> bool:
    """An input that is one file (a BEIR corpus): its content hash made on a thread now, when
    no listing of the output folder can vouch for it (pipekit/run/hashing.py `hash_ahead`:
    0.16-0.32 s of stage 01 at 200k passages, on one core, before any record was read), and,
    when every record will be read, the fork server of the lines' hashing process started
    (pipekit/read/workers.py).  Both run beside the imports, which keep one core busy."""
    from pipekit.run.hashing import hash_ahead

    root = Path(cfg["documents"]["input"])
    started = False
    if not (Path(cfg["paths"]["output"]) / "01_files.parquet").exists():
        started = hash_ahead(root)
    if reads_all and cfg["engine"]["kind"] == "local" and root.suffix == ".jsonl":
        from pipekit.read.parallel import workers_wanted
        from pipekit.read.workers import start_hashing_server

        started = start_hashing_server(root.stat().st_size, workers_wanted(cfg["engine"]["workers"])) or started
    return started
