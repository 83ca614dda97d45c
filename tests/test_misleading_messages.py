"""Messages that misled (issue 48): each says now what happened.

- `search --set KEY=VALUE` repeating the run's own --sets (as the README advises) warned that
  the value was "not applied … reruns 01_documents onward" although the index was built
  with that very value; only a value other than the one the outputs record gets a line.
- `--in 'web/**' --format pdf`, each matching some document but none both, printed "no
  passage contains any of its terms" (exit 0): now an error naming what each matched.
- Fewer than k hits came back without a word: "3 of 10: only 3 passages contain a term of
  the query", or what the filters keep; with --json on stderr, stdout staying JSON.
- Stage 05 with judgements of documents the index does not hold printed nDCG@10 0.0000 (see
  the tests of `judged_in_index` below).
"""
from __future__ import annotations

import json

import pandas as pd
import pytest

import pipekit
from conftest import REPO, run_script

B = "0.6"  # the module's index is built with indexing.b=0.6, not config.yaml's 0.75


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    out = tmp_path_factory.mktemp("messages") / "out"
    run_script("run_pipeline.py", "--set", f"paths.output={out}", "--set", "documents.input=data/sample",
               "--set", f"indexing.b={B}")
    return out


def search(out, *args, check=True):
    return run_script("-m", "pipekit", "search", *args, "--set", f"paths.output={out}", check=check)


# --- search --set: only values other than the index's ------------------------------------

def test_search_with_the_runs_own_sets_warns_of_nothing(out):
    same = search(out, "when is the change freeze", "-k", "1", "--set", "documents.input=data/sample",
                  "--set", f"indexing.b={B}", "--set", f"documents.input={REPO / 'data' / 'sample'}")
    assert same.stderr == ""  # before: one "not applied … reruns 01_documents onward" line per --set
    plain = search(out, "when is the change freeze", "-k", "1")
    assert same.stdout == plain.stdout


def test_search_names_a_value_other_than_the_index_s_and_the_index_s_own(out):
    other = search(out, "when is the change freeze", "-k", "1", "--set", "indexing.b=0.75",
                   "--set", "documents.input=data/sample/handbook")
    b_line, input_line = other.stderr.splitlines()
    assert b_line.startswith("python -m pipekit search: --set indexing.b not applied (search scores with the "
                             "index as 04_indexing made it; the outputs here were made with indexing.b 0.6)")
    assert "reruns 04_indexing onward" in b_line
    assert input_line.startswith("python -m pipekit search: --set documents.input not applied")
    assert f"made with documents.input {REPO / 'data' / 'sample'})" in input_line


# --- filters that match no document together ----------------------------------------------

def index_documents(out) -> pd.DataFrame:
    docs = pd.read_parquet(out / "01_documents.parquet", columns=["doc_id", "format"])
    indexed = set(pd.read_parquet(out / "04_chunks.parquet", columns=["doc_id"]).doc_id)
    return docs[docs.doc_id.isin(indexed)]


def test_filters_that_match_no_document_together_say_what_each_matched(out):
    docs = index_documents(out)
    web = docs[docs.doc_id.str.startswith("web/")]
    pdfs = docs[docs.format == "pdf"]
    assert len(web) and len(pdfs) and "pdf" not in set(web.format)  # each matches, none both
    for extra in ((), ("--json",)):
        proc = search(out, "alarms at night", "--in", "web/**", "--format", "pdf", *extra, check=False)
        assert proc.returncode == 1 and proc.stdout == ""  # before: exit 0, "no passage contains any of its terms"
        by_format = ", ".join(f"{f} {n}" for f, n in web.format.value_counts().items())
        assert proc.stderr == (
            f"python -m pipekit search: error: no document matches both --in and --format: --in 'web/**' matches "
            f"{len(web)} document{'s' * (len(web) > 1)} ({by_format}); --format pdf matches {len(pdfs)} "
            f"document{'s' * (len(pdfs) > 1)} (e.g. {pdfs.doc_id.iloc[0]!r})\n")
    # The API keeps its answer for programs: nothing, without an error.
    assert pipekit.Searcher(out).search("alarms", paths=["web/**"], formats=["pdf"]) == []


# --- fewer than k -------------------------------------------------------------------------

def test_fewer_hits_than_k_are_said_in_the_text_and_on_stderr_with_json(out):
    searcher = pipekit.Searcher(out)
    n = len(searcher.search("change", k=500))  # every passage that says "change" (none scores 0)
    assert 0 < n < 200
    text = search(out, "change", "-k", "200")
    ranks = [line for line in text.stdout.splitlines() if line[:5].strip().rstrip(".").isdigit()]
    assert len(ranks) == n
    assert text.stdout.rstrip().endswith(f"({n} of 200: only {n} passages contain a term of the query)")
    assert text.stderr == ""
    as_json = search(out, "change", "-k", "200", "--json")
    assert len([json.loads(line) for line in as_json.stdout.splitlines()]) == n  # stdout: JSON lines only
    assert as_json.stderr == (f"python -m pipekit search: note: 'change': {n} of 200: only {n} passages "
                              f"contain a term of the query\n")
    full = search(out, "change", "-k", str(n))  # k met: no word
    assert "of 200" not in full.stdout and f"of {n}:" not in full.stdout and full.stderr == ""


def test_fewer_hits_than_k_under_a_filter_say_what_the_filter_keeps(out):
    chunks = pd.read_parquet(out / "04_chunks.parquet", columns=["doc_id"])
    pdf_docs = set(index_documents(out).query("format == 'pdf'").doc_id)
    pdf_passages = int(chunks.doc_id.isin(pdf_docs).sum())
    assert 3 < pdf_passages < 50 and len(pdf_docs) == 1
    proc = search(out, "alarms at night", "--format", "pdf", "-k", "50")
    assert proc.stdout.rstrip().endswith(f"({pdf_passages} of 50: --format keeps {pdf_passages} passages, "
                                         f"of 1 document)")
    searcher = pipekit.Searcher(out)
    n = len(searcher.search("backup", k=50, paths=["handbook/**"]))
    handbook = chunks.doc_id.str.startswith("handbook/")
    assert 0 < n < int(handbook.sum())
    proc = search(out, "backup", "--in", "handbook/**", "-k", "50")
    docs = chunks[handbook].doc_id.nunique()
    assert proc.stdout.rstrip().endswith(f"({n} of 50: only {n} passages of the {docs} documents --in keeps "
                                         f"contain a term of the query)")
    none = search(out, "freeze", "--in", "web/**")
    assert none.stdout.rstrip().endswith("(no passage of the 1 document --in keeps contains any of its terms)")


# --- stage 05: judgements of documents the index does not hold ----------------------------

def stage05_notes(proc) -> list[str]:
    return proc.stdout.split("\n05_retrieval: ", 1)[1].splitlines()[1:]


def test_judgements_of_no_indexed_document_give_no_metrics_and_one_sentence(tmp_path):
    out = tmp_path / "out"
    run_script("run_pipeline.py", "--set", f"paths.output={out}")
    assert (out / "05_metrics.parquet").exists()
    history = pd.read_parquet(out / "05_history.parquet")
    # Your own folder, the sample's judgements still in config.yaml: before, nDCG@10 0.0000 and no word.
    proc = run_script("run_pipeline.py", "--set", f"paths.output={out}", "--set", "documents.input=data/sample/handbook")
    notes = stage05_notes(proc)
    assert not any("metrics (documents" in n or "nDCG" in n for n in notes)
    qrels = pd.read_csv(REPO / "data" / "qrels.tsv", sep="\t")
    said, = [n.strip() for n in notes if "no metrics" in n]
    assert said == (f"no metrics: none of the {qrels['corpus-id'].nunique()} documents judged for "
                    f"{qrels['query-id'].nunique()} queries in {REPO / 'data' / 'qrels.tsv'} is in this index "
                    f"(e.g. 'field-guide.pdf'; this index's doc_ids look like 'README.md'): they are judgements of "
                    f"other documents; point retrieval.qrels at judgements of these (README, \"Writing your own "
                    f"judgements\") or set it to null")
    assert not (out / "05_metrics.parquet").exists()  # the sample's metrics, now stale, are gone
    assert pd.read_parquet(out / "05_history.parquet").equals(history)  # no run of zeros recorded


def test_queries_whose_judged_documents_are_all_missing_are_left_out_and_counted(tmp_path):
    out = tmp_path / "out"
    proc = run_script("run_pipeline.py", "--set", f"paths.output={out}", "--set", "documents.exclude=[tables/**, web/**]")
    qrels = pd.read_csv(REPO / "data" / "qrels.tsv", sep="\t", dtype=str)
    gone = qrels["corpus-id"].str.startswith(("tables/", "web/"))
    relevant_left = qrels[~gone].groupby("query-id").size()
    left_out = sorted(set(qrels["query-id"]) - set(relevant_left.index), key=int)
    assert left_out == ["5", "6"]  # judged only tables/incidents.csv and web/status-page.html
    metrics = pd.read_parquet(out / "05_metrics.parquet")
    per_query = metrics[metrics.query_id != "all"]
    assert sorted(set(per_query.query_id), key=int) == sorted(relevant_left.index, key=int)
    for name, rows in per_query.groupby("metric"):  # the mean is over the kept queries only
        mean = float(metrics.query("query_id == 'all' and metric == @name").value.iloc[0])
        assert mean == pytest.approx(rows.value.mean(), rel=1e-12)
    from pipekit.run.io import read_meta
    assert read_meta(out / "05_metrics.parquet")["queries_left_out"] == left_out
    notes = [n.strip() for n in stage05_notes(proc)]
    where = REPO / "data" / "qrels.tsv"
    assert (f"2 of the {qrels['corpus-id'].nunique()} documents judged in {where} are not in this index "
            f"(e.g. 'tables/incidents.csv'): they count as never found") in notes
    assert (f"2 of the {qrels['query-id'].nunique()} judged queries left out of the metrics: none of the documents "
            f"judged relevant for them is in this index (e.g. query '5': 'tables/incidents.csv')") in notes
    assert any(n.startswith("metrics (documents, depth 100): nDCG@10 ") for n in notes)


def test_judgements_all_of_indexed_documents_change_nothing():
    from pipekit.retrieve.results import judged_in_index
    import pyarrow as pa

    qrels = {"1": {"a": 2, "b": 0}, "2": {"c": 1}}
    judged = judged_in_index(qrels, pa.array(["a", "a", "b", "c"]), "q.tsv")
    assert judged.qrels is qrels and judged.left_out == [] and judged.lines == []
    # A query judged only non-relevant stays (ir-measures counts it); one whose relevant
    # documents are all gone is left out even when a non-relevant one of it is indexed.
    judged = judged_in_index({"1": {"a": 2}, "2": {"b": 0}, "3": {"b": 0, "x": 1}}, pa.array(["a", "b"]), "q.tsv")
    assert sorted(judged.qrels) == ["1", "2"] and judged.left_out == ["3"]
