"""Stage 05: queries in, ranked chunks out — ties, zeros, explanations, metrics, bad files."""
import math
import re

import ir_measures
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipekit.run.errors import PipelineError
from pipekit.run.io import ParquetSink
from pipekit.retrieve.queries import load_qrels, load_queries
from pipekit.run.stages import load_stage

from conftest import run_script, write_config

retrieval = load_stage(5)

TEXTS = [
    ("a", "Rollback", "undo the release with the rollback script"),
    ("a", "Rollback › Checks", "check the health endpoint after you undo"),
    ("b", "", "the health endpoint returns ok"),
    ("c", "", "release notes"),
    ("d", "", "release notes"),  # a twin of c: a tie that corpus order must settle
    ("e", "", "nothing relevant here at all"),
]


def chunks_file(folder):
    n = len(TEXTS)
    table = pa.table({
        "chunk_id": [f"{d}#{i}" for i, (d, _, _) in enumerate(TEXTS)],
        "doc_id": [d for d, _, _ in TEXTS], "heading": [h for _, h, _ in TEXTS],
        "path": pa.array([[]] * n, pa.list_(pa.string())), "text": [t for _, _, t in TEXTS],
        "page_start": pa.array([None, None, 2, None, None, None], pa.int32()),
        "page_end": pa.array([None, None, 3, None, None, None], pa.int32()),
    })
    sink = ParquetSink(folder / "03_chunks.parquet", table.schema, {"fingerprint": "hand-made"})
    sink.write(table)
    sink.commit()


@pytest.fixture
def indexed(tmp_path):
    (tmp_path / "out").mkdir()
    chunks_file(tmp_path / "out")
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n1\ta\t2\n1\tb\t1\n2\tc\t1\n3\tb\t1\n")
    # repeats: keep — c and d are twins on purpose (a tie), which collapse would make one hit
    # (tests/test_repeats.py is about that).
    cfg = write_config(tmp_path, indexing={"stemmer": "none", "stopwords": "english"},
                       retrieval={"queries": ["undo the rollback", "release notes", "health endpoint", "zebra"],
                                  "qrels": str(qrels), "top_k": 3, "explain": True, "repeats": "keep"})
    run_script("04_indexing.py", "--config", str(cfg))
    proc = run_script("05_retrieval.py", "--config", str(cfg))
    return tmp_path / "out", proc


def test_results_have_spec_columns_and_ranks(indexed):
    out, _ = indexed
    res = pq.read_table(out / "05_results.parquet").to_pandas()
    for col in ["query_id", "query", "rank", "score", "chunk_id", "doc_id", "heading",
                "page_start", "page_end", "text"]:
        assert col in res.columns
    for _, group in res.groupby("query_id"):
        assert list(group["rank"]) == list(range(1, len(group) + 1))
        assert list(group["score"]) == sorted(group["score"], reverse=True)
    assert (res["score"] > 0).all() and res["score"].map(math.isfinite).all()


def test_heading_terms_find_a_passage_that_never_repeats_them(indexed):
    res = pq.read_table(indexed[0] / "05_results.parquet").to_pandas()
    q1 = res[res.query_id == "1"]
    assert q1.iloc[0]["chunk_id"] == "a#0"
    assert "a#1" in set(q1.chunk_id)  # "Rollback" only in its heading path


def test_ties_keep_corpus_order_and_zero_scores_are_not_results(indexed):
    res = pq.read_table(indexed[0] / "05_results.parquet").to_pandas()
    q2 = res[res.query_id == "2"]
    assert list(q2.chunk_id[:2]) == ["c#3", "d#4"] and q2.score.iloc[0] == q2.score.iloc[1]
    assert "e#5" not in set(res.chunk_id)
    assert "4" not in set(res.query_id)  # "zebra" matches nothing, so it has no rows


def test_explanations_sum_to_the_score(indexed):
    res = pq.read_table(indexed[0] / "05_results.parquet").to_pylist()
    for r in res:
        assert r["explain"], r
        assert sum(e["contribution"] for e in r["explain"]) == pytest.approx(r["score"], abs=1e-9, rel=0)
        for e in r["explain"]:
            assert e["weight"] == e["qtf"] == 1 and e["feedback"] == 0  # no term repeated, no feedback
            expect = e["idf"] * e["tf"] * 2.2 / (e["tf"] + 1.2 * e["norm"])
            assert e["contribution"] == pytest.approx(expect, rel=1e-12)


def spec_bm25(docs: list[list[str]], query: list[str], k1: float, b: float) -> list[float]:
    """SPEC's formula written out term by term, nothing shared with stages 04 and 05."""
    n, avgdl = len(docs), sum(map(len, docs)) / len(docs)
    scores = []
    for d in docs:
        total = 0.0
        for t in set(query):
            df = sum(t in other for other in docs)
            tf = d.count(t)
            if tf:
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                total += query.count(t) * idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / avgdl))
        scores.append(total)
    return scores


def test_scores_follow_the_configured_k1_and_b(tmp_path):
    # k1 = 2 and b = 0.5 through the real scripts: a stage that ignored indexing.k1, or
    # hard-coded 1.2 anywhere in the formula, gives other scores (checked below).
    (tmp_path / "out").mkdir()
    chunks_file(tmp_path / "out")
    queries = ["undo the rollback", "release notes health", "health endpoint check"]  # each term once: k1 is under test, not qtf
    cfg = write_config(tmp_path, indexing={"stemmer": "none", "stopwords": "none", "k1": 2.0, "b": 0.5,
                                                 "heading_weight": 1},  # the plain formula
                       retrieval={"queries": queries, "qrels": None, "top_k": 10,
                                  "repeats": "keep"})  # every chunk's score, the twins c and d both
    run_script("04_indexing.py", "--config", str(cfg))
    run_script("05_retrieval.py", "--config", str(cfg))
    res = pq.read_table(tmp_path / "out" / "05_results.parquet").to_pandas()

    def analyze(s):  # SPEC's analyzer with stemmer and stopwords off (a lone capital but A and I as it is)
        return [w if len(w) == 1 else w.lower() for w in re.findall(r"[^\W_]+", s)
                if len(w) >= 2 or (w.isupper() and w not in ("A", "I"))]

    docs = [analyze(h) + analyze(t) for _, h, t in TEXTS]  # the heading line, then the text
    ids = [f"{d}#{i}" for i, (d, _, _) in enumerate(TEXTS)]
    for qid, q in enumerate(queries, 1):
        want = spec_bm25(docs, analyze(q), k1=2.0, b=0.5)
        other = spec_bm25(docs, analyze(q), k1=1.2, b=0.5)
        assert max(abs(w - o) for w, o in zip(want, other)) > 1e-3  # k1 matters for this query
        ranked = sorted((i for i in range(len(docs)) if want[i] > 0), key=lambda i: (-want[i], i))
        got = res[res.query_id == str(qid)]
        assert list(got.chunk_id) == [ids[i] for i in ranked]
        assert list(got.score) == pytest.approx([want[i] for i in ranked], rel=1e-9)


def feedback_run(tmp_path, queries, *sets):
    (tmp_path / "out").mkdir(exist_ok=True)
    chunks_file(tmp_path / "out")
    cfg = write_config(tmp_path, indexing={"stemmer": "none", "stopwords": "english"},
                       retrieval={"queries": queries, "top_k": 6, "explain": True, "repeats": "keep"})  # (the twins)
    sets = [a for s in sets for a in ("--set", s)]
    run_script("04_indexing.py", "--config", str(cfg), *sets)
    proc = run_script("05_retrieval.py", "--config", str(cfg), *sets)
    return pq.read_table(tmp_path / "out" / "05_results.parquet").to_pylist(), proc


def test_a_repeated_query_term_counts_each_time(tmp_path):
    once, _ = feedback_run(tmp_path, ["health undo"])
    twice, proc = feedback_run(tmp_path, ["health undo health"])
    once = {r["chunk_id"]: r for r in once}
    assert set(once) == {r["chunk_id"] for r in twice}
    for b in twice:
        a = once[b["chunk_id"]]
        ea, eb = ({e["term"]: e for e in r["explain"]} for r in (a, b))
        if "health" not in eb:
            continue
        assert eb["health"]["qtf"] == 2 and eb["health"]["weight"] == 2
        assert eb["health"]["contribution"] == pytest.approx(2 * ea["health"]["contribution"], rel=1e-12)
        assert b["score"] == pytest.approx(sum(e["contribution"] for e in b["explain"]), rel=1e-12)
    assert "health         qtf=2 tf=1" in proc.stdout  # the printed explanation says qtf


def test_feedback_adds_terms_of_the_best_results_and_explains_them(tmp_path):
    # "rollback" alone finds a#0 only; its text says "undo" and "release", and feedback
    # follows them to chunks that never say "rollback" (a#1 through "undo", c/d through "release").
    plain, _ = feedback_run(tmp_path, ["rollback"], "indexing.heading_weight=1")
    assert [r["chunk_id"] for r in plain] == ["a#0", "a#1"]  # a#1 by its heading "Rollback › Checks"
    fed, proc = feedback_run(tmp_path, ["rollback"], "indexing.heading_weight=1", "retrieval.feedback=rm3",
                             "retrieval.feedback_docs=1", "retrieval.feedback_query_weight=0.5")
    assert [r["chunk_id"] for r in fed][:2] == ["a#0", "a#1"]
    assert {"c#3", "d#4"} <= {r["chunk_id"] for r in fed}
    added = {}
    for r in fed:
        assert r["score"] == pytest.approx(sum(e["contribution"] for e in r["explain"]), abs=1e-9, rel=0)
        for e in r["explain"]:
            if e["qtf"] == 0:  # a term feedback added: all its weight is feedback's
                assert e["weight"] == e["feedback"] > 0
                added[e["term"]] = e["weight"]
            else:
                assert e["term"] == "rollback" and e["weight"] == pytest.approx(0.5 + e["feedback"])
    # One feedback chunk (a#0, 5 terms with its heading: rollback x2, undo, release, script):
    # P(t|R) = tf/|c|, times (1 - λ)·|q| = 0.5.
    assert added["release"] == pytest.approx(0.5 * 1 / 5) and added["undo"] == pytest.approx(0.5 * 1 / 5)
    assert "feedback added: " in proc.stdout and "release 0.100" in proc.stdout


def test_a_corpus_smaller_than_top_k_returns_fewer_results(tmp_path):
    import json

    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    corpus = tmp_path / "corpus.jsonl"
    with corpus.open("w") as f:
        for i in range(82):
            f.write(json.dumps({"_id": f"d{i}", "title": words[i % 8], "text": " ".join(words[: 1 + i % 7])}) + "\n")
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n1\td3\t1\n2\td5\t1\n")
    for feedback in ("none", "rm3"):
        cfg = write_config(tmp_path, documents={"input": str(corpus)},
                           retrieval={"queries": ["alpha gamma", "zeta theta"], "qrels": str(qrels), "top_k": 100,
                                      "feedback": feedback, "feedback_docs": 200,
                                      "repeats": "keep"})  # (every 8th record is the same: all counted)
        run_script("run_pipeline.py", "--config", str(cfg))
        res = pq.read_table(tmp_path / "out" / "05_results.parquet").to_pandas()
        assert len(res[res.query_id == "1"]) == 82  # every chunk has "alpha": all of them, no more
        # "zeta theta" is in fewer chunks; feedback from all 82 may reach every one, never more.
        assert 0 < len(res[res.query_id == "2"]) < 82 if feedback == "none" else len(res) == 2 * 82
        metrics = pq.read_table(tmp_path / "out" / "05_metrics.parquet").to_pandas()
        assert set(metrics.query_id) == {"1", "2", "all"}


def test_printed_table_names_document_heading_and_pages(indexed):
    _, proc = indexed
    assert "[3] health endpoint" in proc.stdout
    assert "b p.2–3" in proc.stdout
    assert "a › Rollback" in proc.stdout


def test_metrics_equal_ir_measures_on_the_trec_run(indexed):
    out, _ = indexed
    metrics = pq.read_table(out / "05_metrics.parquet").to_pandas()
    qrels = load_qrels(out.parent / "qrels.tsv")
    run = list(ir_measures.read_trec_run(str(out / "05_results.trec")))
    measures = [ir_measures.parse_measure(m) for m in ("nDCG@10", "AP@100", "R@100")]
    theirs = ir_measures.calc_aggregate(measures, qrels, run)
    ours = metrics[metrics.query_id == "all"].set_index("metric")["value"]
    for m in measures:
        assert ours[str(m)] == pytest.approx(theirs[m], abs=1e-12)
    assert set(metrics.metric) == {"nDCG@10", "AP@100", "R@100"}
    assert set(metrics.query_id) == {"1", "2", "3", "all"}


def test_the_trec_run_is_document_level(indexed):
    lines = (indexed[0] / "05_results.trec").read_text().splitlines()
    q1 = [l.split() for l in lines if l.startswith("1 ")]
    chunk_hits = pq.read_table(indexed[0] / "05_results.parquet").to_pandas().query("query_id == '1'")
    assert list(chunk_hits.chunk_id) == ["a#0", "a#1"]
    assert [f[2] for f in q1] == ["a"]  # two chunks of a, one line: a document scores its best chunk
    assert float(q1[0][4]) == pytest.approx(chunk_hits.score.max(), rel=1e-15)
    assert all(len(f) == 6 and f[1] == "Q0" for f in q1)


def test_ids_with_spaces_stay_one_trec_field():
    # A file name with a space would split a TREC line into seven fields; %-escaping keeps
    # six, and unquoting gives the id back.
    from urllib.parse import unquote

    run = {"q 1": {"notes/my file.md": 2.0, "100%.md": 1.0, "plain.md": 0.5}}
    lines = retrieval.trec_run([("q 1", "text")], run).splitlines()
    fields = [line.split() for line in lines]
    assert all(len(f) == 6 for f in fields)
    assert [unquote(f[2]) for f in fields] == ["notes/my file.md", "100%.md", "plain.md"]
    assert {unquote(f[0]) for f in fields} == {"q 1"}
    assert fields[2][2] == "plain.md"  # ordinary ids are written as they are


def test_missing_index_names_the_stage_to_run(tmp_path):
    cfg = write_config(tmp_path)
    proc = run_script("05_retrieval.py", "--config", str(cfg), check=False)
    assert proc.returncode == 1
    # the command named keeps the user's --config, so it writes where stage 05 looks
    assert f"run `python 04_indexing.py --config {cfg}` first" in proc.stderr and "Traceback" not in proc.stderr


def test_query_files_of_every_kind(tmp_path):
    (tmp_path / "q.txt").write_text("first query\n\nsecond query\n")
    assert load_queries(str(tmp_path / "q.txt")) == [("1", "first query"), ("2", "second query")]
    (tmp_path / "q.tsv").write_text("q7\tseventh\nq9\tninth\n")
    assert load_queries(str(tmp_path / "q.tsv")) == [("q7", "seventh"), ("q9", "ninth")]
    (tmp_path / "q.jsonl").write_text('{"_id": "x", "text": "ex"}\n')
    assert load_queries(str(tmp_path / "q.jsonl")) == [("x", "ex")]
    assert load_queries(["a", {"id": "z", "text": "b"}]) == [("1", "a"), ("z", "b")]


def test_malformed_queries_and_qrels_name_file_and_line(tmp_path):
    (tmp_path / "q.tsv").write_text("1\tok\nno tab here\n")
    with pytest.raises(PipelineError, match=r"q\.tsv line 2: expected `id<TAB>query text`"):
        load_queries(str(tmp_path / "q.tsv"))
    (tmp_path / "q.jsonl").write_text('{"_id": "1", "text": "ok"}\n{"_id": 2,\n')
    with pytest.raises(PipelineError, match=r"q\.jsonl line 2: not valid JSON"):
        load_queries(str(tmp_path / "q.jsonl"))
    (tmp_path / "qrels.txt").write_text("1 0 d1 1\n1 0 d2 high\n")
    with pytest.raises(PipelineError, match=r"qrels\.txt line 2: relevance 'high' is not a number"):
        load_qrels(tmp_path / "qrels.txt")
    (tmp_path / "qrels2.txt").write_text("1 0 d1 1\n1 d2\n")
    with pytest.raises(PipelineError, match=r"qrels2\.txt line 2: expected"):
        load_qrels(tmp_path / "qrels2.txt")


def test_a_malformed_qrels_file_stops_the_stage_before_it_writes(indexed, tmp_path):
    out, _ = indexed
    before = (out / "05_results.parquet").stat().st_mtime_ns
    bad = tmp_path / "bad.tsv"
    bad.write_text("query-id\tcorpus-id\tscore\n1\ta\n")
    cfg = write_config(tmp_path, retrieval={"queries": ["x"], "qrels": str(bad)})
    proc = run_script("05_retrieval.py", "--config", str(cfg), check=False)
    assert proc.returncode == 1 and "bad.tsv line 2" in proc.stderr
    assert (out / "05_results.parquet").stat().st_mtime_ns == before


def test_queries_use_the_analyzer_the_index_recorded(tmp_path):
    (tmp_path / "out").mkdir()
    chunks_file(tmp_path / "out")
    cfg = write_config(tmp_path, indexing={"stemmer": "none", "stopwords": "none"},
                       retrieval={"queries": ["releases"]})
    run_script("04_indexing.py", "--config", str(cfg))
    # config.yaml now says "stem", but the index holds unstemmed terms: "releases" must not
    # be stemmed to "releas" (which would find nothing), nor match "release".
    proc = run_script("05_retrieval.py", "--config", str(cfg), "--set", "indexing.stemmer=english")
    assert "no chunk contains any of its terms" in proc.stdout
    cfg2 = write_config(tmp_path, indexing={"stemmer": "none", "stopwords": "none"},
                        retrieval={"queries": ["release"], "repeats": "keep"})  # (the twins c and d both)
    run_script("05_retrieval.py", "--config", str(cfg2), "--set", "indexing.stemmer=english")
    res = pq.read_table(tmp_path / "out" / "05_results.parquet").to_pandas()
    assert set(res.chunk_id) == {"a#0", "c#3", "d#4"}


def test_bad_feedback_settings_name_the_key_and_what_it_accepts(tmp_path):
    from pipekit.run.config import load_config
    from pipekit.run.errors import ConfigError

    with pytest.raises(ConfigError, match=r"retrieval\.feedback must be none or rm3; got 'bm25'"):
        load_config(write_config(tmp_path), ["retrieval.feedback=bm25"])
    with pytest.raises(ConfigError, match=r"retrieval\.feedback_query_weight must be a number from 0 to 1"):
        load_config(write_config(tmp_path), ["retrieval.feedback_query_weight=1.5"])
    with pytest.raises(ConfigError, match=r"indexing\.heading_weight must be a whole number >= 0"):
        load_config(write_config(tmp_path), ["indexing.heading_weight=1.5"])


def test_the_trec_run_is_one_line_a_document_as_written_before():
    # trec_run formats the whole run in one %-format (issue 47): each line as the f-string a
    # line made it, ids escaped only where needed, scores to 17 significant digits.  (A pin
    # of the format, not a test that fails before: the old code wrote these same bytes.)
    run = {"q 1": {"a b": 1.5, "c%": 2.0, "d": 2.0}, "q2": {"x": 0.1 + 0.2, "é\u2003y": 1e-300}, "q3": {}}
    queries = [("q2", "t"), ("q 1", "t"), ("q3", "t"), ("q4", "t")]
    want = ["q2 Q0 x 1 0.30000000000000004 pipekit", "q2 Q0 é%E2%80%83y 2 1e-300 pipekit",
            "q%201 Q0 c%25 1 2 pipekit", "q%201 Q0 d 2 2 pipekit", "q%201 Q0 a%20b 3 1.5 pipekit"]
    assert retrieval.trec_run(queries, run) == "\n".join(want) + "\n"
    assert retrieval.trec_run(queries[2:], run) == ""
