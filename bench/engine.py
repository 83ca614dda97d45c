"""The local engine against Dask with 2 worker processes, stage by stage, on one machine.

    python bench/engine.py                                  # 300k and 1M passages
    python bench/engine.py --sizes 300000                   # one size
    python bench/engine.py --baseline ../main               # also time another checkout's stages (before)
    python bench/engine.py --shards                         # stage 05 with the index in shards, 1M passages
    python bench/engine.py --shards --sizes 200000          # ... at 200k

`--shards` (issue 38) indexes the corpus once (local engine, `indexing.shard_chunks` a
quarter of it: four shards by document), then runs stage 05 locally and on clusters of 1
and 2 workers started for it, each worker holding its part of the index: each worker's
peak RSS (sampled) and idle RSS before the stage, the stage's time, and whether the
results, run file and metrics equal the local engine's, byte for byte.

The corpora are bench/scale.py's (same generator, seed and folder: bench/corpora/n<size>/,
made once).  Every stage runs as its own process (`python 0N_*.py --config ...`), as a
user runs it, so its wall time includes start-up; its peak RSS comes from wait4().

- local: the default engine (`engine.kind: local`), outputs in out-local/.
- The engines take turns stage by stage (before, local, dask for 01, then for 02, ...):
  the load of a shared machine drifts, and turns spread the drift over every column.
- dask:  `engine.kind=dask` against one LocalCluster of 2 worker processes (1 thread
  each) that this script starts once, before the first stage, so that no stage is
  charged the cluster's start-up (printed on its own).  Each worker's peak RSS during a
  stage is sampled every 0.2 s.  The load average (1 min) beside each time says how
  busy the machine was: with 2 cores, a load above 2 leaves no idle core to win.
  Outputs in out-dask/, where 01-03 are folders of part files (each worker writes its
  partitions' rows; pipekit/run/io.py); at the end each output is compared with out-local's
  single files (rows, order, values).
- run: stages 01-04 once more as one `run_pipeline.py --to 4 --force` process per engine
  (outputs in out-local-run/, out-dask-run/), as a user runs the pipeline: one start-up
  and one connection to the cluster for the four stages (`--no-pipeline` skips it).
- `--baseline DIR`: the same stages from another checkout (the code before this change),
  local engine, outputs in out-before/: "the default run is no slower than before".

The machine is shared while this runs (other people's tests and benches): run it as
`flock /tmp/bench.lock python bench/engine.py` and read the times as indicative.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the cluster's scheduler runs in this process and unpickles pipekit's tasks
_spec = importlib.util.spec_from_file_location("bench_scale", REPO / "bench" / "scale.py")
scale = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scale)

STAGES = (1, 2, 3, 4, 5)
OUTPUTS = {1: ["01_documents.parquet"], 2: ["02_preprocessed.parquet"], 3: ["03_chunks.parquet"],
           4: ["04_chunks.parquet", "04_terms.parquet", "04_postings.parquet"],
           5: ["05_results.parquet", "05_results.trec"]}


class PeakSampler:
    """Peak RSS of each worker process during one stage, sampled every 0.2 s with psutil
    (from outside: polling through Dask would queue behind the workers' tasks), and the
    CPU seconds each worker spent during the stage."""

    def __init__(self, client):
        import psutil

        self.procs = [psutil.Process(pid) for pid in client.run(os.getpid).values()]

    def __enter__(self):
        import threading

        self.peaks = [0.0] * len(self.procs)
        self.cpu = [self._cpu(p) for p in self.procs]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self):
        while not self._stop.is_set():
            for i, p in enumerate(self.procs):
                try:
                    self.peaks[i] = max(self.peaks[i], p.memory_info().rss / 2**20)
                except Exception:
                    pass
            self._stop.wait(0.2)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.cpu = [self._cpu(p) - before for p, before in zip(self.procs, self.cpu)]

    @staticmethod
    def _cpu(proc) -> float:
        t = proc.cpu_times()
        return t.user + t.system


def same_output(a: Path, b: Path, name: str) -> bool:
    if name.endswith(".trec"):
        return (a / name).read_bytes() == (b / name).read_bytes()
    # Values, not bytes: the files differ in row-group layout and in their write time.
    x, y = pq.read_table(a / name), pq.read_table(b / name)
    return x.replace_schema_metadata(None).equals(y.replace_schema_metadata(None))


def bench_size(size: int, client, address: str, baseline: Path | None, pipeline: bool = True) -> dict:
    folder = scale.CORPORA / f"n{size}"
    scale.generate(size, folder)
    rows = {}
    dask = ["--set", "engine.kind=dask", "--set", f"engine.address={address}"]
    runs = ([("before", baseline, [])] if baseline is not None else []) + [("local", REPO, []), ("dask", REPO, dask)]
    # Stage by stage, each engine in turn: the load of a shared machine drifts, and
    # interleaving spreads the drift over all three columns instead of charging one.
    for n in STAGES:
        for name, repo, extra in runs:
            cfg = scale.write_config(folder, f"out-{name}", known=repo / "config.yaml" if repo != REPO else None)
            res = run_stage(size, name, n, [sys.executable, str(repo / scale.STAGE_FILES[n]), "--config", str(cfg),
                                            *extra], folder, client)
            rows[(name, n)] = res
    rows["identical"] = {n: all(same_output(folder / "out-local", folder / "out-dask", o) for o in OUTPUTS[n])
                         for n in STAGES}
    if pipeline:
        # 01-04 as one `run_pipeline.py --to 4 --force` per engine, as a user runs the
        # pipeline: one start-up and (Dask) one connection for the four stages.
        for name, extra in (("local", []), ("dask", dask)):
            cfg = scale.write_config(folder, f"out-{name}-run")
            rows[(name, "run")] = run_stage(size, name, "01-04 run", [
                sys.executable, str(REPO / "run_pipeline.py"), "--config", str(cfg), "--to", "4", "--force", *extra],
                folder, client)
        rows["identical_run"] = all(same_output(folder / "out-local", folder / "out-dask-run", o)
                                    for n in (1, 2, 3, 4) for o in OUTPUTS[n])
    return rows


def run_stage(size: int, name: str, n, cmd: list[str], folder: Path, client) -> dict:
    load = os.getloadavg()[0]
    with PeakSampler(client) as sampler:
        res = scale.run_measured(cmd, folder)
    res["load"] = (load + os.getloadavg()[0]) / 2
    if res.get("rc") != 0:
        raise SystemExit(f"{name} stage {n} failed at {size:,}:\n{res.get('stderr', '')[-3000:]}")
    res["workers_mb"], res["workers_cpu"] = sampler.peaks, sampler.cpu
    extra_mb = (f"  workers {'/'.join(f'{m:.0f}' for m in res['workers_mb'])} MB"
                f" {'/'.join(f'{c:.1f}' for c in res['workers_cpu'])} CPU s") if name == "dask" else ""
    print(f"  {size:>9,}  {name:<6} stage {str(n):>2}  {res['seconds']:7.1f} s  client {res['rss_mb']:6.0f} MB"
          f" {res['cpu']:.1f} CPU s{extra_mb}  load {res['load']:.1f}", flush=True)
    return res


def idle_estimate(dask: dict) -> float:
    """What the Dask stage would take with a core per worker: the client's CPU (start-up,
    listing, stage 04's reduce: none of it overlaps the workers' much) plus the busiest
    worker's.  On a loaded machine wall time measures the other users as much as us;
    CPU seconds do not, so this column says what an idle machine would show."""
    return dask["cpu"] + max(dask["workers_cpu"])


def print_table(results: dict[int, dict], baseline: bool) -> None:
    print("\nwall seconds per stage (each its own process), peak RSS in MB; dask = 2 worker processes;\n"
          "CPU s: the local process's CPU seconds, and the Dask client's + its busiest worker's (idle-machine estimate)")
    head = f"{'passages':>10} {'stage':>5} " + (f"{'before':>8} " if baseline else "") + \
        f"{'local':>8} {'dask':>8} {'dask/local':>10} {'local CPU':>9} {'dask CPU':>9} {'CPU ratio':>9} " \
        f"{'local MB':>9} {'client MB':>9} {'worker MB':>9} {'same':>5} {'load':>5}"
    print(head)
    print("-" * len(head))
    for size, rows in results.items():
        for n in STAGES:
            lo, da = rows[("local", n)], rows[("dask", n)]
            before = f"{rows[('before', n)]['seconds']:8.1f} " if baseline else ""
            print(f"{size:>10,} {n:>5} {before}{lo['seconds']:8.1f} {da['seconds']:8.1f} "
                  f"{da['seconds'] / lo['seconds']:10.2f} {lo['cpu']:9.1f} {idle_estimate(da):9.1f} "
                  f"{idle_estimate(da) / lo['cpu']:9.2f} {lo['rss_mb']:9.0f} {da['rss_mb']:9.0f} "
                  f"{max(da['workers_mb']):9.0f} {'yes' if rows['identical'][n] else 'NO':>5} "
                  f"{(lo['load'] + da['load']) / 2:5.1f}")
        for label, stages in (("01-04", (1, 2, 3, 4)), ("01-05", STAGES)):
            lo = sum(rows[("local", n)]["seconds"] for n in stages)
            da = sum(rows[("dask", n)]["seconds"] for n in stages)
            lo_cpu = sum(rows[("local", n)]["cpu"] for n in stages)
            da_cpu = sum(idle_estimate(rows[("dask", n)]) for n in stages)
            before = f"{sum(rows[('before', n)]['seconds'] for n in stages):8.1f} " if baseline else ""
            print(f"{size:>10,} {label:>5} {before}{lo:8.1f} {da:8.1f} {da / lo:10.2f} {lo_cpu:9.1f} {da_cpu:9.1f} "
                  f"{da_cpu / lo_cpu:9.2f}")
        if ("local", "run") in rows:  # one run_pipeline.py process per engine
            lo, da = rows[("local", "run")], rows[("dask", "run")]
            before = f"{'':8} " if baseline else ""
            print(f"{size:>10,} {'run':>5} {before}{lo['seconds']:8.1f} {da['seconds']:8.1f} "
                  f"{da['seconds'] / lo['seconds']:10.2f} {lo['cpu']:9.1f} {idle_estimate(da):9.1f} "
                  f"{idle_estimate(da) / lo['cpu']:9.2f} {lo['rss_mb']:9.0f} {da['rss_mb']:9.0f} "
                  f"{max(da['workers_mb']):9.0f} {'yes' if rows['identical_run'] else 'NO':>5}")


def bench_shards(size: int, reuse: bool = False) -> None:
    """Stage 05 on 1 and 2 workers, the index in four shards by document (see the module text).
    `reuse`: take the index already in out-shards/ as it is (a code change elsewhere made it stale)."""
    import shutil

    from distributed import Client

    from pipekit.run.engine import local_cluster

    folder = scale.CORPORA / f"n{size}"
    scale.generate(size, folder)
    cfg = scale.write_config(folder, "out-shards", name="config-shards.yaml")
    text = cfg.read_text().replace("  heading_weight: 1\n", f"  heading_weight: 1\n  shard_chunks: {size // 4}\n")
    cfg.write_text(text)
    if not (reuse and (folder / "out-shards" / "04_postings.parquet").exists()):
        res = scale.run_measured([sys.executable, str(REPO / "run_pipeline.py"), "--config", str(cfg), "--to", "4"],
                                 folder)
        print(f"  01-04 (local, fresh stages skipped): {res['seconds']:.1f} s", flush=True)
    out, kept = folder / "out-shards", folder / "out-shards-local05"
    local = scale.run_measured(scale.stage_cmd(5, cfg), folder)
    kept.mkdir(exist_ok=True)
    for name in ("05_results.parquet", "05_results.trec"):
        shutil.copy(out / name, kept / name)
    print(f"  stage 05 local: {local['seconds']:.1f} s, peak {local['rss_mb']:.0f} MB", flush=True)
    for workers in (1, 2):
        with local_cluster(workers) as cluster, Client(cluster) as client:
            idle = [m / 2**20 for m in client.run(lambda: __import__("psutil").Process().memory_info().rss).values()]
            with PeakSampler(client) as sampler:
                res = scale.run_measured(scale.stage_cmd(5, cfg) + ["--set", "engine.kind=dask", "--set",
                                                                    f"engine.address={cluster.scheduler_address}"],
                                         folder)
        same = all(same_output(kept, out, n) for n in ("05_results.parquet", "05_results.trec"))
        note = next((line.strip() for line in res.get("stdout", "").splitlines() if "queries answered" in line), "")
        print(f"  stage 05 on {workers} worker{'s' * (workers > 1)}: {res['seconds']:.1f} s; workers peak "
              f"{'/'.join(f'{m:.0f}' for m in sampler.peaks)} MB (idle {'/'.join(f'{m:.0f}' for m in idle)} MB), "
              f"CPU {'/'.join(f'{c:.1f}' for c in sampler.cpu)} s; identical to local: {'yes' if same else 'NO'}\n"
              f"    {note}", flush=True)


def per_million(folder: Path, parts: int = 2) -> dict:
    """The figures bench/README's 100M table is made from, measured here, in this process, on
    the index `--shards` built: each of `parts` parts loaded alone (its memory: the arrays it
    holds), all queries scored on it as a job does (CPU seconds), the bytes a job sends and
    returns, the client's merge per query; each per million chunks of a part."""
    import pickle

    import numpy as np

    from pipekit.retrieve import shards
    from pipekit.retrieve.queries import load_queries
    from pipekit.retrieve.search import OutputReader
    from pipekit.run.io import read_meta
    from pipekit.run.stages import load_stage

    out = folder / "out-shards"
    stage = load_stage(5)
    client = stage.Index(OutputReader(out), postings=False)
    queries = load_queries(str(folder / "queries.jsonl"))
    scored = client.query_terms([text for _, text in queries])
    fingerprint = read_meta(out / "04_postings.parquet")["fingerprint"]
    groups = shards.groups(client.stats["shards"], parts)
    answers, res = [], {"chunks": client.stats["N"], "queries": len(queries), "parts": []}
    for part in groups:
        held = shards.answer(stage.Index, stage.candidates, str(out), fingerprint, part, False, (0.0, 0.0), "load")
        t0 = time.process_time()
        got = shards.answer(stage.Index, stage.candidates, str(out), fingerprint, part, False, (0.0, 0.0),
                            (held, "score", scored, None, stage.DEPTH, None))
        cpu = time.process_time() - t0
        shards.release()
        files = sorted(p for p in (out / "04_postings.parquet").glob("*.parquet")) or [out / "04_postings.parquet"]
        disk = sum(f.stat().st_size for f in files) * (part[-1][3] - part[0][2]) / max(client.stats["n_postings"], 1)
        res["parts"].append({"chunks": part[-1][1] - part[0][0], "held": held.nbytes, "disk": disk, "cpu": cpu,
                             "out": len(pickle.dumps(scored)), "back": len(pickle.dumps(got))})
        answers.append(got)
    t0 = time.perf_counter()
    for j in range(len(queries)):
        shards._merge([a[j] for a in answers], 10, stage.DEPTH, None)
    res["merge"] = (time.perf_counter() - t0) / len(queries) / parts  # per query, per part merged
    m = sum(p["chunks"] for p in res["parts"]) / 1e6
    res["held_per_m"] = sum(p["held"] for p in res["parts"]) / m
    res["disk_per_m"] = sum(p["disk"] for p in res["parts"]) / m
    res["cpu_per_query_per_m"] = sum(p["cpu"] for p in res["parts"]) / m / len(queries)
    res["out_per_query"] = float(np.mean([p["out"] for p in res["parts"]])) / len(queries)
    res["back_per_query"] = float(np.mean([p["back"] for p in res["parts"]])) / len(queries)
    return res


def paper_table(res: dict, total: float = 100e6, batch: int = 125, rtt: float = 0.5e-3,
                bandwidth: float = 1.25e9) -> None:
    """bench/README's "On paper, 100M passages", from `per_million`'s figures: each of W
    workers holds 100M/W passages; a batch of `batch` queries costs each worker its share's
    CPU (linear in the postings it holds), travels out to every worker and back (10 Gbit/s,
    `rtt` a round), and the client merges W answers a query."""
    print(f"  per million chunks of a part: {res['held_per_m'] / 2**20:,.0f} MB held, "
          f"{res['disk_per_m'] / 2**20:,.0f} MB of 04_postings on disk, {res['cpu_per_query_per_m'] * 1e3:.2f} ms "
          f"CPU a query; {res['out_per_query']:.0f} B out a query a part, "
          f"{res['back_per_query'] / 1024:.1f} KB back a query a part; client merge "
          f"{res['merge'] * 1e6:.0f} us a query a part", flush=True)
    print(f"  {'workers':>7} {'passages each':>13} {'held MB':>8} {'disk MB':>8} {'out KB':>7} {'back KB':>8} "
          f"{'batch ms':>9}   (a batch: {batch} queries)")
    for w in (10, 50, 100):
        m = total / w / 1e6
        held, disk = res["held_per_m"] * m, res["disk_per_m"] * m
        out_b = res["out_per_query"] * batch * w
        back_b = res["back_per_query"] * batch * w  # a part returns ~its best 100 documents' chunks, whatever its size
        compute = res["cpu_per_query_per_m"] * m * batch
        latency = compute + (out_b + back_b) / bandwidth + rtt + res["merge"] * w * batch
        print(f"  {w:>7} {total / w:>13,.0f} {held / 2**20:>8,.0f} {disk / 2**20:>8,.0f} {out_b / 1024:>7,.0f} "
              f"{back_b / 1024:>8,.0f} {latency * 1e3:>9,.0f}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="300000,1000000", help="comma-separated passage counts (default %(default)s)")
    parser.add_argument("--baseline", type=Path, help="another checkout whose stages to time too, local engine")
    parser.add_argument("--no-pipeline", action="store_true",
                        help="skip timing 01-04 as one run_pipeline.py process per engine")
    parser.add_argument("--shards", action="store_true", help="stage 05 on 1 and 2 workers holding shards "
                        "of the index (default size 1M)")
    parser.add_argument("--reuse-index", action="store_true", help="with --shards: stage 05 on the index already "
                        "built, even if a code change made it stale")
    args = parser.parse_args(argv)
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    if args.shards:
        for size in (sizes if args.sizes != parser.get_default("sizes") else [1_000_000]):
            print(f"bench/engine.py --shards  size={size:,}  cores={os.cpu_count()}  (shared machine: times "
                  "are indicative)", flush=True)
            bench_shards(size, args.reuse_index)
            paper_table(per_million(scale.CORPORA / f"n{size}"))
        return 0
    from distributed import Client

    from pipekit.run.engine import local_cluster

    print(f"bench/engine.py  sizes={sizes}  cores={os.cpu_count()}  baseline={args.baseline or '-'}  "
          "(shared machine: times are indicative)", flush=True)
    t0 = time.perf_counter()
    with local_cluster(2) as cluster, Client(cluster) as client:
        print(f"  local cluster of 2 workers started in {time.perf_counter() - t0:.1f} s "
              f"(not charged to any stage)", flush=True)
        results = {size: bench_size(size, client, cluster.scheduler_address,
                                    args.baseline.resolve() if args.baseline else None, not args.no_pipeline)
                   for size in sizes}
    print_table(results, args.baseline is not None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
