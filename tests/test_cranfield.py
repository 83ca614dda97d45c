"""End to end on Cranfield (../shared/data): exact BM25 against a plain-Python reference,
and metrics equal to ir-measures' own figures for the TREC run we write."""
import math
import re
from collections import Counter, defaultdict

import ir_measures
import pyarrow.parquet as pq
import pytest

from pipekit.retrieve.queries import load_qrels, load_queries

from conftest import run_script


def run_on_cranfield(collection, out, *sets):
    return run_script(
        "run_pipeline.py",
        "--set", f"paths.output={out}",
        "--set", f"documents.input={collection / 'corpus.jsonl'}",
        "--set", f"retrieval.queries={collection / 'queries.jsonl'}",
        "--set", f"retrieval.qrels={collection / 'qrels.tsv'}",
        "--set", "retrieval.top_k=10",
        *[a for s in sets for a in ("--set", s)])


def reference_terms(text: str) -> list[str]:
    """SPEC's analyzer with stemming and stopwords off, written with Python's re alone (a
    lone capital but A and I is a term as it is: indexing.single_letters)."""
    return [t if len(t) == 1 else t.lower() for t in re.findall(r"[^\W_]+", text)
            if len(t) >= 2 or (t.isupper() and t not in ("A", "I"))]


class ReferenceBM25:
    """SPEC's BM25 with qtf, in plain Python: the corpus is tokenised once, into per-term
    lists of (chunk, tf), so that each query costs only its terms' postings."""

    def __init__(self, chunk_texts: list[str], k1=1.2, b=0.75):
        self.k1, self.b = k1, b
        docs = [Counter(reference_terms(t)) for t in chunk_texts]
        self.lengths = [sum(d.values()) for d in docs]
        self.N, self.avgdl = len(docs), sum(self.lengths) / len(docs)
        self.postings = defaultdict(list)
        for i, d in enumerate(docs):
            for term, tf in d.items():
                self.postings[term].append((i, tf))

    def scores(self, query: str) -> dict[int, float]:
        """{chunk: score} for every chunk sharing a term with the query."""
        k1, b, scores = self.k1, self.b, defaultdict(float)
        for term, qtf in Counter(reference_terms(query)).items():  # a repeated term counts each time
            plist = self.postings.get(term, [])
            if not plist:
                continue
            df = len(plist)
            idf = math.log(1 + (self.N - df + 0.5) / (df + 0.5))
            for i, tf in plist:
                scores[i] += qtf * idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * self.lengths[i] / self.avgdl))
        return scores


@pytest.mark.parametrize("heading_weight", [1, 3])
def test_scores_equal_a_plain_python_bm25_with_qtf(cranfield, tmp_path, heading_weight):
    """The `bars` check: every returned score is the reference's, and the top 10 are the
    reference's top 10 up to ties.  Weight 1 is SPEC's plain formula; weight 3 must be the
    same formula on a text whose heading line is written out three times."""
    out = tmp_path / "out"
    run_on_cranfield(cranfield, out, "indexing.stemmer=none", "indexing.stopwords=none",
                     "indexing.path_weight=0", f"indexing.heading_weight={heading_weight}",
                     "retrieval.feedback=none", "retrieval.section_context=0",
                     "retrieval.repeats=keep")  # the formula's top 10, Cranfield's near-copies included
    chunks = pq.read_table(out / "03_chunks.parquet").to_pylist()
    reference = ReferenceBM25([(c["heading"] + "\n") * heading_weight + c["text"] for c in chunks])
    row_of = {c["chunk_id"]: i for i, c in enumerate(chunks)}
    results = pq.read_table(out / "05_results.parquet").to_pandas()
    queries = load_queries(str(cranfield / "queries.jsonl"))
    assert results.query_id.nunique() == len(queries)
    repeats = 0
    for qid, text in queries:
        ref = reference.scores(text)
        repeats += len(reference_terms(text)) > len(set(reference_terms(text)))
        ours = results[results.query_id == qid]
        for chunk_id, score in zip(ours.chunk_id, ours.score):
            assert score == pytest.approx(ref[row_of[chunk_id]], rel=1e-6)
        # Same top 10 up to ties: the same scores, and every chunk the reference puts above
        # its 10th score is among ours.
        ref_top = sorted(ref.values(), reverse=True)[:10]
        assert list(ours.score) == pytest.approx(ref_top, rel=1e-6)
        above = {i for i, s in ref.items() if s > ref_top[-1] * (1 + 1e-6)}
        assert above <= {row_of[c] for c in ours.chunk_id}
    assert repeats > 50  # Cranfield's long queries repeat words: qtf really is exercised


def test_default_metrics_equal_ir_measures_on_the_trec_run(cranfield, tmp_path):
    out = tmp_path / "out"
    run_on_cranfield(cranfield, out)
    metrics = pq.read_table(out / "05_metrics.parquet").to_pandas()
    ours = metrics[metrics.query_id == "all"].set_index("metric")["value"]
    measures = [ir_measures.parse_measure(m) for m in ("nDCG@10", "AP@100", "R@100")]
    theirs = ir_measures.calc_aggregate(measures, load_qrels(cranfield / "qrels.tsv"),
                                        list(ir_measures.read_trec_run(str(out / "05_results.trec"))))
    for m in measures:
        assert ours[str(m)] == pytest.approx(theirs[m], abs=1e-9)
    # A sanity floor well under what BM25 gets here (~0.33 nDCG@10): catches a broken pipeline.
    assert ours["nDCG@10"] > 0.25
    per_query = metrics[metrics.query_id != "all"]
    assert per_query.query_id.nunique() == 225
