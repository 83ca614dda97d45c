"""How close a model folder's encoder comes to the machine's float32 matmul rate (issue 37).

    python bench/embed_speed.py MODEL_FOLDER [--chunks 300] [--before /tmp/before37]
    python bench/embed_speed.py MODEL_FOLDER --int8   # also NumPy's integer matmul at the encoder's shapes

Embeds the first --chunks SciFact records (title + abstract) with pipekit's BertFolder,
truncated at max_seq_length ("now") and whole, in windows, as stage 04 does ("windows"), and
prints chunks/s, the model's GFLOP/s (its FLOPs counted from config.json and the token counts:
the Q/K/V, output and feed-forward products plus attention's two, per layer), a 2048x2048
float32 numpy matmul's GFLOP/s on all cores timed in the same run, and their ratio.  The
ratio is the measure because the machine is shared: an absolute rate moves with whatever
else runs, the ratio much less.  With --before, the same chunks go through the dense.py of
an older checkout (`git worktree add /tmp/before37 <commit>`) too, and the largest
difference between the two sets of vectors is printed.

--int8 answers "would int8 weights be faster?" before anyone quantises: NumPy multiplies
integer matrices in its own C loops, not in BLAS, so it times float32 against int8, int16 and
int32 products at the feed-forward's shapes (4,096 tokens x 384 x 1,536 and back) and 2048².

It does not count tokenization or pooling FLOPs (tiny), nor judge retrieval quality.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data"


def records(n: int) -> list[tuple[str, str]]:
    out = []
    with open(DATA / "scifact" / "beir" / "corpus.jsonl") as f:
        for line in f:
            r = json.loads(line)
            out.append((r.get("title", ""), r.get("text", "")))
            if len(out) == n:
                break
    return out


def texts(n: int) -> list[str]:
    return [f"{t}\n{a}" for t, a in records(n)]


def model_flops(folder: Path, lengths: list[int]) -> float:
    cfg = json.loads((folder / "config.json").read_text())
    d, inter, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    per_token = 2 * (4 * d * d + 2 * d * inter)  # QKV (3 d²), attention output (d²), FFN in and out
    return layers * sum(per_token * n + 4 * n * n * d for n in lengths)  # + scores and weighted values


def matmul_gflops(seconds: float = 2.0) -> float:
    a = np.random.default_rng(0).standard_normal((2048, 2048), dtype=np.float32)
    a @ a
    runs, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ a
        runs += 1
    return runs * 2 * 2048 ** 3 / (time.perf_counter() - t0) / 1e9


def integer_rates(folder: Path) -> None:
    """GFLOP/s of one product per dtype: the best of a few runs (integers are slow: few runs)."""
    cfg = json.loads((folder / "config.json").read_text())
    d, inter = cfg["hidden_size"], cfg["intermediate_size"]
    rng = np.random.default_rng(0)
    print(f"{'product':<20}" + "".join(f"{t:>10}" for t in ("float32", "int8", "int16", "int32")) + "  GF/s")
    for m, k, n in ((4096, d, inter), (4096, inter, d), (2048, 2048, 2048)):
        rates = []
        for dtype in (np.float32, np.int8, np.int16, np.int32):
            a = (rng.standard_normal((m, k)) * 20).astype(dtype)
            b = (rng.standard_normal((k, n)) * 20).astype(dtype)
            best = float("inf")
            for _ in range(5 if dtype is np.float32 else 2):
                t0 = time.perf_counter()
                a @ b
                best = min(best, time.perf_counter() - t0)
            rates.append(2 * m * k * n / best / 1e9)
        print(f"{f'{m}x{k}x{n}':<20}" + "".join(f"{r:>10.1f}" for r in rates), flush=True)


def load_dense(checkout: Path | None):
    if checkout is None:
        from pipekit.index import dense
        return dense
    spec = importlib.util.spec_from_file_location("dense_before", checkout / "pipekit" / "index" / "dense.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def measure(label: str, dense, folder: Path, chunk_texts: list[str]) -> np.ndarray:
    model = dense.BertFolder(folder)
    lengths = [len(i) for i in model.token_ids(chunk_texts)]
    flops = model_flops(folder, lengths)
    mm = matmul_gflops()
    t0 = time.perf_counter()
    v = model.embed(chunk_texts)
    s = time.perf_counter() - t0
    mm = (mm + matmul_gflops()) / 2  # before and after: the machine's rate around the embedding
    gf = flops / s / 1e9
    print(f"{label:<8}{len(chunk_texts) / s:>10.1f}{gf:>12.1f}{mm:>13.1f}{gf / mm:>8.0%}", flush=True)
    return v


def measure_windows(folder: Path, recs: list[tuple[str, str]]) -> None:
    """The same records embedded whole, as stage 04 embeds a model folder's chunks
    (BertFolder.embed_windows: a record longer than max_seq_length gets more windows):
    chunks/s falls with the extra tokens, the share of the matmul rate should not."""
    from pipekit.index import dense

    model = dense.BertFolder(folder)
    heads, bodies = [t for t, _ in recs], [a for _, a in recs]
    wins = model.windows([dense.chunk_text(h, b) for h, b in recs], [h + "\n\n" if h else "" for h in heads])
    lengths = [len(w) for ws in wins for w in ws]
    flops = model_flops(folder, lengths)
    mm = matmul_gflops()
    t0 = time.perf_counter()
    _, extra, _, tokens = model.embed_windows(heads, bodies)
    s = time.perf_counter() - t0
    mm = (mm + matmul_gflops()) / 2
    gf = flops / s / 1e9
    print(f"{'windows':<8}{len(recs) / s:>10.1f}{gf:>12.1f}{mm:>13.1f}{gf / mm:>8.0%}   "
          f"({len(extra)} later windows, {tokens:,} tokens, {tokens / s:,.0f} tokens/s)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--chunks", type=int, default=300)
    ap.add_argument("--before", type=Path, help="a checkout whose dense.py is measured too")
    ap.add_argument("--int8", action="store_true", help="also NumPy's integer matmul rates at the encoder's shapes")
    args = ap.parse_args()
    if not (DATA / "scifact").is_dir():
        raise SystemExit(f"needs {DATA / 'scifact'} (the shared SciFact sample)")
    chunk_texts = texts(args.chunks)
    # The load beside the figures: the ratio holds better than absolute rates on a shared
    # machine, but a run beside another CPU-bound job still loses some (bench/README.md).
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").is_file() else ["?"]
    print(f"{args.chunks} SciFact chunks, {args.folder.name}; load average {' '.join(load)}")
    print(f"{'code':<8}{'chunks/s':>10}{'model GF/s':>12}{'matmul GF/s':>13}{'ratio':>8}")
    now = measure("now", load_dense(None), args.folder, chunk_texts)
    measure_windows(args.folder, records(args.chunks))
    if args.before:
        old = measure("before", load_dense(args.before), args.folder, chunk_texts)
        print(f"max |difference| per component: {np.abs(now - old).max():.2e}")
    if args.int8:
        integer_rates(args.folder)


if __name__ == "__main__":
    main()
