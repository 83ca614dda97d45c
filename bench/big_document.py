"""One very large document through stages 01–04: peak memory and time per stage.

    python bench/big_document.py                    # a log, a CSV and a paged report at 100 and 400 MB
    python bench/big_document.py --sizes 50         # a quicker look

A user's folder may hold one 400 MB log or CSV export beside its small documents; the
stages stream across documents, so what bounds their memory is the largest *single*
document.  The aim (issue 15): every stage's peak RSS at most 8x that document's size plus
400 MB, and stage 03 chunking it no slower, in MB/s, than it chunks the Markdown bench
corpus (`bench/chunking.py --build`; measured in the same run when it is there).

The documents are generated once per size (fixed seed, under bench/corpora/big/, git-ignored):
- `app-log.txt`: an application log, one event a line (timestamp, level, component,
  a message of invented words, request ids, durations, now and then an indented stack
  trace), no blank line anywhere — the case where the chunker has no paragraph to cut at;
- `export.csv`: a CSV export with a header row, quoted fields holding commas and, now
  and then, a newline (a record that spans two lines);
- `report.txt`: a long report as `pdftotext` writes a PDF, pages of wrapped paragraphs
  each ending in a form feed, a running header and a "Page N" footer on every page —
  the page furniture stage 02 finds by comparing pages, now by slices too.
All are mostly ASCII with some accented Latin-1 letters, as such files are.

Each stage runs as its own process (`python 0N_*.py --config ...`); its wall time includes
start-up, and its peak RSS and CPU time come from wait4() of that one process (as in
bench/scale.py).  `documents.max_bytes` is raised to let the 400 MB files in.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
CORPORA = REPO / "bench" / "corpora"
BIG = CORPORA / "big"
MARKDOWN = CORPORA / "markdown"  # the bench corpus of bench/chunking.py, when built
SEED = 15
STAGES = {1: "01_documents.py", 2: "02_preprocessing.py", 3: "03_chunking.py", 4: "04_indexing.py"}
MB = 1_000_000
AIM_FACTOR, AIM_FIXED_MB = 8, 400


# --------------------------------------------------------------------------- generating

def _words(rng: np.random.Generator, n: int) -> list[str]:
    """Invented words, a few with accented Latin-1 letters."""
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz" * 3 + "éèüöñç"))
    lengths = rng.integers(2, 11, size=n)
    return ["".join(rng.choice(letters, size=k)) for k in lengths]


def _write_blocks(path: Path, size_mb: int, make_block) -> None:
    """Write blocks of text until the file holds size_mb megabytes (UTF-8), atomically."""
    tmp = path.with_name(path.name + ".tmp")
    written, k = 0, 0
    with tmp.open("w", encoding="utf-8", newline="") as fh:
        while written < size_mb * MB:
            block = make_block(k)
            fh.write(block)
            written += len(block.encode("utf-8"))
            k += 1
    os.replace(tmp, path)


def make_log(path: Path, size_mb: int) -> None:
    rng = np.random.default_rng(SEED)
    vocab = _words(rng, 5000)
    levels = ["INFO"] * 12 + ["DEBUG"] * 6 + ["WARN"] * 2 + ["ERROR"]
    parts = ["api", "worker-1", "worker-2", "scheduler", "db.pool", "auth", "cache", "mailer"]
    verbs = ["GET", "POST", "PUT", "DELETE"]

    def block(k: int) -> str:
        n = 20_000
        w = rng.integers(0, len(vocab), size=(n, 8))
        lv = rng.integers(0, len(levels), size=n)
        pt = rng.integers(0, len(parts), size=n)
        ms = rng.integers(1, 5000, size=n)
        nw = rng.integers(3, 9, size=n)
        out = []
        for i in range(n):
            sec = (k * n + i) // 7
            ts = f"2026-11-{1 + sec // 86400 % 28:02d}T{sec // 3600 % 24:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}.{i % 1000:03d}Z"
            msg = " ".join(vocab[j] for j in w[i, :nw[i]])
            out.append(f"{ts} {levels[lv[i]]:5} [{parts[pt[i]]}] {verbs[i % 4]} /v1/{vocab[w[i, 0]]}/{ms[i]} "
                       f"req={k * n + i:x} took {ms[i]} ms: {msg}\n")
            if levels[lv[i]] == "ERROR" and i % 3 == 0:  # a stack trace, indented, as Java logs have
                out.extend(f"    at com.example.{vocab[w[i, d]]}.{vocab[w[i, d + 1]]}(Main.java:{ms[i] % 900 + d})\n"
                           for d in range(5))
        return "".join(out)

    _write_blocks(path, size_mb, block)


def make_csv(path: Path, size_mb: int) -> None:
    rng = np.random.default_rng(SEED + 1)
    vocab = _words(rng, 5000)
    header = "id,date,customer,city,amount,status,comment\n"

    def block(k: int) -> str:
        n = 20_000
        w = rng.integers(0, len(vocab), size=(n, 10))
        amount = rng.integers(100, 1_000_000, size=n)
        nw = rng.integers(2, 12, size=n)
        out = [header] if k == 0 else []
        for i in range(n):
            rid = k * n + i
            comment = " ".join(vocab[j] for j in w[i, :nw[i]])
            if i % 50 == 0:
                comment = f'"{comment}, {vocab[w[i, 1]]}"'  # a quoted comma
            elif i % 997 == 0:
                comment = f'"{comment}\n{vocab[w[i, 2]]} ""{vocab[w[i, 3]]}"""'  # a newline inside quotes
            out.append(f"{rid},2026-{1 + rid % 12:02d}-{1 + rid % 28:02d},{vocab[w[i, 4]]} {vocab[w[i, 5]]},"
                       f"{vocab[w[i, 6]].capitalize()},{amount[i] / 100:.2f},{('paid', 'open', 'void')[rid % 3]},{comment}\n")
        return "".join(out)

    _write_blocks(path, size_mb, block)


def make_paged(path: Path, size_mb: int) -> None:
    """A long report as `pdftotext` writes it: pages of wrapped paragraphs, a form feed
    after each, a running header and a "Page N" footer on every page (the furniture
    stage 02 finds by comparing pages)."""
    rng = np.random.default_rng(SEED + 2)
    vocab = _words(rng, 5000)
    header = "ACME Field Services - Annual Maintenance Report 2026 - Confidential\n\n"

    def block(k: int) -> str:
        out = []
        for p in range(50):
            n = k * 50 + p + 1
            paras = []
            for _ in range(rng.integers(3, 7)):
                w = rng.integers(0, len(vocab), size=rng.integers(30, 120))
                words = [vocab[j] for j in w]
                paras.append("\n".join(" ".join(words[i:i + 12]) for i in range(0, len(words), 12)))
            title = f"{n // 20 + 1}.{n % 20 + 1} {vocab[n % len(vocab)].capitalize()} checks\n\n" if n % 5 == 0 else ""
            out.append(header + title + "\n\n".join(paras) + f"\n\n                Page {n}\n\f")
        return "".join(out)

    _write_blocks(path, size_mb, block)


MAKERS = {"log": ("app-log.txt", make_log), "csv": ("export.csv", make_csv), "paged": ("report.txt", make_paged)}


def document(kind: str, size_mb: int) -> Path:
    name, make = MAKERS[kind]
    folder = BIG / f"{kind}-{size_mb}mb"
    path = folder / "in" / name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        make(path, size_mb)
        print(f"  generated {path.relative_to(REPO)} ({path.stat().st_size / MB:.0f} MB) in "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
    return path


# --------------------------------------------------------------------------- measuring

WRAPPER = r"""
import os, subprocess, sys, time, json
t0 = time.perf_counter()
p = subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = p.stderr.read()
_, status, ru = os.wait4(p.pid, 0)
json.dump({"seconds": time.perf_counter() - t0, "rss_mb": ru.ru_maxrss / 1024,
           "cpu": ru.ru_utime + ru.ru_stime, "rc": os.waitstatus_to_exitcode(status),
           "stderr": err.decode(errors="replace")[-2000:]}, open(sys.argv[1], "w"))
"""


def run_stage(n: int, cfg: Path) -> dict:
    """One stage in its own process: wall and CPU seconds, peak RSS from wait4() of that pid.

    The wrapper, not this process, waits for it: RUSAGE_CHILDREN of this process would be a
    maximum over every stage run so far."""
    report = cfg.parent / "measure.json"
    cmd = [sys.executable, str(REPO / STAGES[n]), "--config", str(cfg)]
    subprocess.run([sys.executable, "-c", WRAPPER, str(report)] + cmd, check=True)
    res = json.loads(report.read_text())
    report.unlink()
    if res["rc"] != 0:
        print(f"  ! {STAGES[n]} exited {res['rc']}: {res['stderr']}", file=sys.stderr)
    return res


def config_for(folder: Path, input_path: Path, max_bytes: int) -> Path:
    cfg = folder / "config.yaml"
    cfg.write_text(yaml.safe_dump({
        "paths": {"output": str(folder / "out")},
        "documents": {"input": str(input_path), "max_bytes": max_bytes},
    }), encoding="utf-8")
    return cfg


def chunks_written(folder: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(folder / "out" / "03_chunks.parquet").metadata.num_rows


def stage03_cpu(folder: Path, input_path: Path) -> float:
    """CPU seconds of a stage-03 process on `input_path` (stages 01-02 run first)."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = config_for(folder, input_path, 1 << 30)
    for n in (1, 2):
        run_stage(n, cfg)
    return run_stage(3, cfg)["cpu"]


def start_up_cpu() -> float:
    """Stage 03's CPU seconds on a one-line document: interpreter, imports, config."""
    tiny = BIG / "tiny" / "in" / "one.md"
    tiny.parent.mkdir(parents=True, exist_ok=True)
    tiny.write_text("# One\n\nline\n", encoding="utf-8")
    return min(stage03_cpu(BIG / "tiny", tiny.parent) for _ in range(3))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100,400", help="document sizes in MB, comma-separated")
    ap.add_argument("--kinds", default="log,csv,paged")
    ap.add_argument("--stages", default="1,2,3,4")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = args.kinds.split(",")
    stages = [int(s) for s in args.stages.split(",")]

    rows = []
    for size in sizes:
        for kind in kinds:
            path = document(kind, size)
            mb = path.stat().st_size / MB
            folder = BIG / f"{kind}-{size}mb"
            cfg = config_for(folder, path.parent, max(1 << 30, 2 * path.stat().st_size))
            for n in stages:
                res = run_stage(n, cfg)
                aim = AIM_FACTOR * mb + AIM_FIXED_MB
                rows.append((kind, mb, n, res, aim))
                extra = ""
                if n == 3 and res["rc"] == 0:
                    extra = f"  {mb / res['cpu']:.1f} MB/s CPU, {chunks_written(folder):,} chunks"
                print(f"  {kind:4} {mb:6.0f} MB  stage {n:02d}  {res['seconds']:7.1f} s  {res['cpu']:7.1f} s CPU  "
                      f"peak {res['rss_mb']:7.0f} MB = {res['rss_mb'] / mb:5.2f} x size  "
                      f"(aim {aim:.0f}) {'ok' if res['rss_mb'] <= aim and res['rc'] == 0 else 'OVER'}{extra}",
                      flush=True)

    print("\n== one document through stages 01-04 (each stage its own process; shared 2-core machine) ==")
    print(f"{'document':<14}{'MB':>6}  {'stage':<18}{'wall s':>8}{'CPU s':>8}{'peak MB':>9}"
          f"{'x size':>8}{'aim MB':>8}  verdict")
    for kind, mb, n, res, aim in rows:
        verdict = "exit %d" % res["rc"] if res["rc"] else ("ok" if res["rss_mb"] <= aim else "OVER AIM")
        print(f"{MAKERS[kind][0]:<14}{mb:6.0f}  {STAGES[n][:-3]:<18}{res['seconds']:8.1f}{res['cpu']:8.1f}"
              f"{res['rss_mb']:9.0f}{res['rss_mb'] / mb:8.2f}{aim:8.0f}  {verdict}")
    rates = [(kind, mb, res["cpu"]) for kind, mb, n, res, _ in rows if n == 3 and res["rc"] == 0]
    if rates:
        start = start_up_cpu()
        print("\n== chunking speed: stage 03 process, MB of document per CPU second ==")
        print(f"   (start-up: {start:.2f} s CPU on a one-line document; 'beyond' subtracts it)")
        base = None
        if MARKDOWN.exists():
            size = sum(p.stat().st_size for p in MARKDOWN.glob("*.md")) / MB
            cpu = stage03_cpu(BIG / "markdown-corpus", MARKDOWN)
            base = size / (cpu - start)
            print(f"  {'bench corpus':<14}{size:6.1f} MB: {size / cpu:5.1f} MB/s, beyond start-up {base:5.1f} MB/s"
                  f"  ({len(list(MARKDOWN.glob('*.md')))} Markdown documents, {MARKDOWN.relative_to(REPO)})")
        else:
            print(f"  (no bench corpus at {MARKDOWN.relative_to(REPO)}: `python bench/chunking.py --build` makes it)")
        for kind, mb, cpu in rates:
            beyond = mb / (cpu - start)
            cmp = f"  {'>=' if beyond >= base else '<'} bench corpus" if base else ""
            print(f"  {MAKERS[kind][0]:<14}{mb:6.0f} MB: {mb / cpu:5.1f} MB/s, beyond start-up {beyond:5.1f} MB/s{cmp}")

if __name__ == "__main__":
    main()
