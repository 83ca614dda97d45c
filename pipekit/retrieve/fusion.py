"""Stage 05's hybrid scoring: BM25 fused with the cosine of dense vectors (`retrieval.dense_weight`).

The vectors are stage 04's (04_vectors.parquet, pipekit/index/dense.py, which also embeds the
queries with the same model).  Per query:

1. the cosine of the query's vector with every chunk's, exactly, a block of chunks at a
   time against a batch of queries (`Dense.top`: its best `depth` chunks);
2. BM25's candidates as stage 05 found them (its best `depth` chunks among them);
3. the fusion (`Dense.fuse`), over the union of the two top lists:

       fused(c) = (1 − w) · bm25(q, c) / best bm25 + w · cos(q, c) / best cos

   each score divided by the best of its own top list, so the best of each gets 1: BM25's
   tens (growing with the query's length) and a model's cosines (its own range) meet on one
   scale per query, which a convex combination needs.  Every chunk of the union gets both
   parts: one only the cosine found has its BM25 score looked up (`Index.scorer`), so a
   chunk's fused score depends on the query and the chunk, not on which list it was in
   (it used to get 0 there; nDCG@10 is the same to 10⁻³ on every collection measured).
   A chunk fused to 0 or less is no result.

   Why divide by the best rather than min-max normalise, (x − min)/(max − min), the usual
   choice (and the issue's): min-max stretches whatever spread the top 100 has to [0, 1],
   so on a query whose BM25 scores are all close (NFCorpus: many short, similar abstracts)
   a small BM25 difference becomes a large one and the cosine is outvoted; dividing by the
   best keeps each list's own proportions.  Measured (bench/hybrid.py, WordLlama, nDCG@10
   ratio to BM25 alone, at each one's best weight): min-max (w 0.3) sample 1.052, Cranfield
   1.054, SciFact 1.004, NFCorpus 0.997; divided by the best (w 0.3) 1.052, 1.055, 1.021, 1.028:
   the only one that gains on every collection.  z-scores stretch the same way (NFCorpus 0.977
   at their best weight) and reciprocal ranks (1/(60 + rank)) drop the scores' spread altogether
   (SciFact 0.995): `python bench/hybrid.py --fusions` measures them all side by side.

A long chunk embedded in windows (pipekit/index/dense.py, `indexing.dense_windows`) has one
cosine per window; its cosine is made from them by WINDOW_RULE (its first window's moved half
way to its best window's), in `top`'s rough scan and in the exact `chunk_cosines` alike.

w = 0 is BM25 alone (and is never computed: stage 05 then scores as without vectors),
w = 1 the cosine alone (over the same union).  With RM3 feedback, the expanded query's
BM25 is fused with the original query's cosine: feedback widens the words, the vector
already stands for the meaning.

What it does not do: approximate nearest neighbours (every vector is scored; bench/hybrid.py
measures the cost per query and where an ANN index would pay), or learn the weight.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from pipekit.index.dense import VECTORS, WORDLLAMA, load_model, read_vectors, read_windows
from pipekit.run.errors import PipelineError

# The weights retrieval.dense_weight: null stands for (bench/hybrid.py; config.yaml has the tables).
# WordLlama: 0.3 gains on every collection (sample, Cranfield, SciFact, NFCorpus nDCG@10 +5.2,
# +5.5, +2.1, +2.8 %); all-MiniLM-L6-v2, a better model, earns more: 0.5, which against 0.4
# loses on no set beyond noise (95 % intervals: Cranfield +2.7 %, +1.2 .. +4.4; SciFact -1.0 %,
# -2.3 .. +0.1; NFCorpus +0.5 %; docs_qa section hit@3 the same, hit@1 +3 and document hit@3
# +1 of 57 questions) and on 60 unseen questions over real docs put the answering section in
# the top 3 for 0.783 against 0.700. 0.6 costs docs_qa a section (bench/hybrid.py --intervals).
WORDLLAMA_WEIGHT, FOLDER_WEIGHT = 0.3, 0.5
SCORE_BLOCK = 1 << 16  # vectors scored at a time against a batch of queries (16 MB of a 256-d model)


def scaled(x: np.ndarray, best: float) -> np.ndarray:
    """x / best: the best of a list gets 1 (nothing to scale by when best <= 0: all 0)."""
    return x / best if best > 0 else np.zeros(len(x))


def top_chunks(cols: np.ndarray, vals: np.ndarray, m: int) -> np.ndarray:
    """Positions of the m best (score desc, then corpus order) of chunks `cols`."""
    if len(vals) > m:
        cut = vals[np.argpartition(vals, len(vals) - m)[len(vals) - m]]
        pick = np.flatnonzero(vals >= cut)  # every chunk tied with the m-th: order settles it
    else:
        pick = np.arange(len(vals))
    return pick[np.lexsort((cols[pick], -vals[pick]))][:m]


COS_MARGIN = 1e-4  # above what a float32 product of 256-d unit vectors can round off (~1.5e-5 at worst)


def cosines(vectors: np.ndarray, rows: np.ndarray, qvec: np.ndarray) -> np.ndarray:
    """The cosines of chunks `rows` with the query, each summed alone in float64 (exact
    products of float32s, NumPy's pairwise sum along one row).  A BLAS product of a block of
    rows rounds a row differently by the rows around it (OpenBLAS, 256-d: 15 of 2.1M products
    of blocks moved by a few rows changed, and 5 of 500 of a matrix-vector product): then the same chunk's cosine would
    depend on which chunks a shard holds, and two shards could break a tie one index keeps."""
    return (vectors[rows].astype(np.float64) * np.asarray(qvec, np.float64)).sum(axis=1)


def near_top(vals: np.ndarray, m: int) -> np.ndarray:
    """Positions of every value within COS_MARGIN of the m-th best: a superset of the top m
    by BLAS's rounded cosines that holds the top m by the exact ones (`cosines`)."""
    if len(vals) <= m:
        return np.arange(len(vals))
    cut = vals[np.argpartition(vals, len(vals) - m)[len(vals) - m]]
    return np.flatnonzero(vals >= cut - COS_MARGIN * max(1.0, abs(cut)))


# How a long chunk's windows make its cosine (pipekit/index/dense.py BertFolder.windows):
# "mix:0.5", its first window's moved half way to its best window's; "best", the best window's
# (MaxP, Dai & Callan 2019); "mean", their mean; "meanvec", the cosine with their normalised
# mean vector; "first", the first window's alone (a truncating encoder's: the tail unseen).
# Measured (bench/hybrid.py --windows --fusions --only window, all-MiniLM-L6-v2 at 0.5; bench/README.md):
# only mix:0.5 loses on no set beyond noise, and it gains on SciFact beyond it (+0.9 %, +0.2 .. +1.8);
# MaxP costs docs_qa2's section hit@1 (-0.082, -0.163 .. -0.020): a long reference section's many
# windows are many chances at a question; the first window, with the heading and the section's
# opening, says best what the section is about, and the rest of it may only add to that.
WINDOW_RULE = "mix:0.5"


def window_cosines(first: np.ndarray, rows: np.ndarray, extra_cos: np.ndarray, owner: np.ndarray,
                   rule: str) -> np.ndarray:
    """Chunks `rows`' cosines from their first windows' (`first`) and later windows' (`extra_cos`,
    each of chunk `owner`, ascending) by `rule`."""
    if rule == "first" or not len(owner):
        return first
    out = first.copy()
    at = np.searchsorted(rows, owner)
    ok = (at < len(rows)) & (rows[np.minimum(at, len(rows) - 1)] == owner)
    if rule == "best" or rule.startswith("mix:"):
        np.maximum.at(out, at[ok], extra_cos[ok])
        if rule.startswith("mix:"):  # the first window's, moved toward the best by a share
            out = first + float(rule[4:]) * (out - first)
    elif rule == "mean":
        counts = np.ones(len(rows))
        np.add.at(out, at[ok], extra_cos[ok])
        np.add.at(counts, at[ok], 1)
        out /= counts
    elif rule == "sum":  # the cosine with the windows' summed vector, before its length is divided out
        np.add.at(out, at[ok], extra_cos[ok])
    else:
        raise ValueError(rule)
    return out


class Dense:
    """The index's vectors and the model that embeds queries like them, and the fusion.
    `windows`: a long chunk's later windows (their vectors, each one's chunk ascending), whose
    cosines make the chunk's by WINDOW_RULE."""

    def __init__(self, vectors: np.ndarray, spec: str, weight: float, windows=None, rule: str | None = None):
        self.vectors, self.spec, self.weight = vectors, spec, float(weight)
        self.rule = rule or WINDOW_RULE
        self.extra, self.owner = windows if windows is not None else (None, np.zeros(0, np.int64))
        self.owner = np.asarray(self.owner, np.int64)

    def embed(self, texts: list[str]) -> np.ndarray:
        """The queries' vectors (with the folder's query prompt), each embedded alone: packed
        with others, a model folder's vector changes in its last bits with its neighbours
        (pipekit/index/dense.py), and a cluster's workers see other neighbours than one process does."""
        model = load_model(self.spec)
        return np.concatenate([model.embed([t], kind="query") for t in texts]) if len(texts) \
            else model.embed([], kind="query")

    def chunk_cosines(self, rows: np.ndarray, qvec: np.ndarray) -> np.ndarray:
        """Chunks `rows`' (ascending) exact cosines with the query, windows combined (`cosines`)."""
        rows = np.asarray(rows, np.int64)
        first = cosines(self.vectors, rows, qvec)
        if self.rule == "first" or not len(self.owner):
            return first
        lo, hi = np.searchsorted(self.owner, rows), np.searchsorted(self.owner, rows, side="right")
        take = np.concatenate([np.arange(a, b) for a, b in zip(lo.tolist(), hi.tolist())] or [np.zeros(0, np.int64)])
        take = take.astype(np.int64)
        if self.rule == "meanvec":
            return window_cosines(first, rows, cosines(self.extra, take, qvec), self.owner[take], "sum") \
                / self.sum_norms()[rows]
        return window_cosines(first, rows, cosines(self.extra, take, qvec), self.owner[take], self.rule)

    def sum_norms(self) -> np.ndarray:
        """Each chunk's windows' summed vector's length (rule "meanvec": the cosine with their
        normalised mean, one vector a chunk)."""
        if getattr(self, "_sum_norms", None) is None:
            total = self.vectors.astype(np.float64)
            np.add.at(total, self.owner, self.extra.astype(np.float64))
            n = np.linalg.norm(total, axis=1)
            self._sum_norms = np.where(n > 0, n, 1.0)
        return self._sum_norms

    def rough(self, qvecs: np.ndarray, a: int = 0, b: int | None = None) -> np.ndarray:
        """Chunks a..b's cosines with each query (columns), by BLAS: rounded, to find the few
        near the top that `chunk_cosines` then decides."""
        b = len(self.vectors) if b is None else b
        q = np.asarray(qvecs, dtype=np.float32).T
        sims = (self.vectors[a:b] @ q).astype(np.float64)
        if self.rule != "first" and len(self.owner):
            lo, hi = np.searchsorted(self.owner, [a, b])
            if hi > lo:
                extra = (self.extra[lo:hi] @ q).astype(np.float64)
                rows = np.arange(a, b)
                rule = "sum" if self.rule == "meanvec" else self.rule
                for i in range(sims.shape[1]):
                    sims[:, i] = window_cosines(sims[:, i], rows, extra[:, i], self.owner[lo:hi], rule)
                if self.rule == "meanvec":
                    sims /= self.sum_norms()[a:b, None]
        return sims

    def explain(self, candidates, index, queries, scored, q, c, depth: int):
        return explain_hits(self, candidates, index, queries, scored, q, c, depth)

    def top(self, qvecs: np.ndarray, m: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each query's m chunks of highest cosine (chunk order ascending) and their cosines.
        Exact: every vector is scored, a block of SCORE_BLOCK at a time against all the
        queries at once (the vectors are read once per batch of queries, not per query);
        the few near the m-th best are then scored again by `cosines`, which decide."""
        n = len(self.vectors)
        best = [(np.zeros(0, np.int64), np.zeros(0, np.float64)) for _ in range(len(qvecs))]
        for a in range(0, n, SCORE_BLOCK):
            sims = self.rough(qvecs, a, min(n, a + SCORE_BLOCK))
            for i in range(len(qvecs)):
                cols = np.concatenate([best[i][0], np.arange(a, a + len(sims), dtype=np.int64)])
                vals = np.concatenate([best[i][1], sims[:, i]])
                keep = near_top(vals, m)
                best[i] = (cols[keep], vals[keep])
        out = []
        for (c, _), qvec in zip(best, qvecs):
            c = np.sort(c)
            v = self.chunk_cosines(c, qvec)
            keep = top_chunks(c, v, m)
            c, v = c[keep], v[keep]
            out.append((c[np.argsort(c)], v[np.argsort(c)]))
        return out

    def union_scores(self, cols: np.ndarray, vals: np.ndarray, qvec: np.ndarray, dense_top: tuple, depth: int,
                     exact=None):
        """What any fusion of the two lists starts from: the union of BM25's top `depth`
        (of chunks `cols`, scores `vals`) and the cosine's (`dense_top`), in corpus order;
        each member's BM25 score and cosine; and whether it is in BM25's top list and in the
        cosine's.  A member BM25 did not return gets `exact(chunks)` (its score, looked up),
        or 0 without it."""
        b_cols = cols[top_chunks(cols, vals, depth)]
        d_cols = dense_top[0]
        union = np.union1d(b_cols.astype(np.int64), d_cols)
        # A chunk's BM25 score if BM25 scored it at all (0 otherwise: below its top's minimum).
        bm25 = np.zeros(len(union))
        if len(cols):
            order = np.argsort(cols, kind="stable")  # cols come in corpus order; this makes sure
            sc = cols[order]
            at = np.minimum(np.searchsorted(sc, union), len(sc) - 1)
            hit = sc[at] == union
            bm25[hit] = vals[order][at[hit]]
        else:
            hit = np.zeros(len(union), dtype=bool)
        if exact is not None and not hit.all():
            bm25[~hit] = exact(union[~hit])
        cos = self.chunk_cosines(union, qvec)
        return union, bm25, cos, np.isin(union, b_cols), np.isin(union, d_cols)

    def fuse(self, cols: np.ndarray, vals: np.ndarray, qvec: np.ndarray, dense_top: tuple, depth: int,
             exact=None, parts: bool = False, best: tuple[float, float] | None = None):
        """BM25's candidates (chunks `cols` in corpus order, scores `vals`) fused with the
        query's cosines (`dense_top`: its best chunks and cosines, from `top`): the union of
        both top-`depth` lists, each chunk scored (1 − w)·bm25/best + w·cos/best, in corpus
        order; chunks scoring 0 or less are dropped.  With `parts`, also each chunk's BM25 score,
        cosine and their normalised values (for --explain).  `best`: the (BM25, cosine) to
        divide by instead of the lists' own bests — a filtered search's lists are the
        filter's, its scale the whole collection's (pipekit/retrieve/filters.py)."""
        w = self.weight
        union, bm25, cos, in_b, in_d = self.union_scores(cols, vals, qvec, dense_top, depth, exact)
        b_own = bm25[in_b]
        b_norm = scaled(bm25, best[0] if best else b_own.max() if len(b_own) else 0.0)
        # The cosine's best from the same products as every union member's (a matrix-vector
        # product may round differently from the blocked one `top` used).
        d_own = cos[in_d]
        d_norm = scaled(cos, best[1] if best else d_own.max() if len(d_own) else 0.0)
        fused = (1 - w) * b_norm + w * d_norm
        keep = fused > 0
        if parts:
            return union[keep], fused[keep], {"bm25": bm25[keep], "bm25_norm": b_norm[keep], "cosine": cos[keep],
                                              "cosine_norm": d_norm[keep]}
        return union[keep], fused[keep]


def fusion_type():
    import pyarrow as pa

    return pa.struct([("bm25", pa.float64()), ("bm25_norm", pa.float64()), ("cosine", pa.float64()),
                      ("cosine_norm", pa.float64()), ("dense_weight", pa.float64()), ("fused", pa.float64())])


def explain_hits(dense: "Dense", candidates, index, queries, scored, q: np.ndarray, c: np.ndarray, depth: int):
    """For each hit (query number q[i], chunk c[i]): its BM25 score and cosine, each
    normalised as the fusion did, the weight, and the fused score (its `score`).  Each
    query's fusion is done again, with its parts: a few queries, when asked."""
    import pyarrow as pa

    rows, done = [], {}
    for qi, ci in zip(np.asarray(q).tolist(), np.asarray(c).tolist()):
        if qi not in done:
            vec = dense.embed([queries[qi][1]])
            cols, vals = candidates(index, scored[qi], depth)
            union, fused, parts = dense.fuse(cols, vals, vec[0], dense.top(vec, depth)[0], depth,
                                             index.scorer(scored[qi]), parts=True)
            done = {qi: (union, fused, parts)}
        union, fused, parts = done[qi]
        at = int(np.searchsorted(union, ci))
        rows.append({**{k: float(v[at]) for k, v in parts.items()}, "dense_weight": dense.weight,
                     "fused": float(fused[at])})
    return pa.array(rows, fusion_type())


def fusion_line(f: dict, indent: int) -> str:
    """A hybrid hit's score, part by part: (1 − w) · BM25 normalised + w · cosine normalised."""
    w = f["dense_weight"]
    return (" " * indent + f"bm25 {f['bm25']:.3f} (norm {f['bm25_norm']:.3f}) × {1 - w:.2f} + cosine {f['cosine']:.3f} "
            f"(norm {f['cosine_norm']:.3f}) × {w:.2f} → fused {f['fused']:.3f}")


def default_weight(spec: str) -> float:
    """retrieval.dense_weight when it is null: the weight measured best for the kind of model."""
    return WORDLLAMA_WEIGHT if spec == WORDLLAMA else FOLDER_WEIGHT


def no_vectors(weight: float) -> str:
    """One line for a weight asked for with no vectors to weigh.  Silent, a sweep of
    `--set retrieval.dense_weight=0.1` ... `0.9` after 04 had dropped its vectors printed BM25's
    figures nine times, `+0.0000` in compare, and nothing said why."""
    return (f"retrieval.dense_weight {weight:g} has no effect: the index has no vectors (stage 04 ran with "
            f"indexing.dense_model null), so this is BM25 alone; rerun from 04 with "
            f"--set indexing.dense_model=wordllama to fuse")


def dense_for(output_dir: Path, index, weight: float | None, note=None) -> Dense | None:
    """The Dense part of an index, or None: weight 0, or no vectors (indexing.dense_model null).
    Weight None is the model's default (`default_weight`)."""
    from pipekit.run import io

    spec = (index.meta.get("inputs", {}).get("config", {}) or {}).get("indexing.dense_model")
    path = Path(output_dir) / VECTORS
    if spec is None:
        if weight != 0 and note is not None and path.exists():
            note(f"{VECTORS} is left from an older run: ignored (indexing.dense_model is null)")
        elif weight and note is not None:
            note(no_vectors(weight))
        return None
    weight = default_weight(spec) if weight is None else weight
    if weight <= 0:
        return None
    if not path.exists():
        raise PipelineError(f"no {VECTORS} in {output_dir}: rerun `python 04_indexing.py`")
    if (io.read_meta(path) or {}).get("fingerprint") != index.meta["fingerprint"]:
        raise PipelineError(f"{VECTORS} and the other 04_* files come from different runs: "
                            "rerun `python 04_indexing.py`")
    return Dense(read_vectors(path, int(index.stats["N"])), spec, weight, read_windows(path))
