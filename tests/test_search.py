"""`python -m pipekit search` and `pipekit.Searcher`: stage 05's answers, without rewriting anything."""
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pipekit
from pipekit.retrieve.ranks import nth_largest
from pipekit.retrieve.rows import column_reader
from pipekit.run.errors import PipelineError

from conftest import REPO, run_script

SAMPLE_QUERIES = (REPO / "data" / "queries.txt").read_text(encoding="utf-8").splitlines()
EXTRA = ["rollback a deploy", "who is on call", "freeze freeze change", "zzzz qqqq", "the of and"]


@pytest.fixture(scope="module")
def sample(sample_default_run):
    return sample_default_run  # the session's one default run of the sample (tests/conftest.py)


def stage05_results(out, queries, top_k, *options):
    """What stage 05 itself writes for these queries (in a copy: the original stays as it is)."""
    copy = out.parent / f"copy-{top_k}-{'-'.join(options).replace('=', '_')}"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(out, copy)
    listing = copy.parent / f"queries-{top_k}.tsv"
    listing.write_text("".join(f"{i + 1}\t{q}\n" for i, q in enumerate(queries)), encoding="utf-8")
    run_script("05_retrieval.py", "--set", f"paths.output={copy}", "--set", f"retrieval.queries={listing}",
               "--set", f"retrieval.top_k={top_k}", "--set", "retrieval.qrels=null", *options)
    r = pq.read_table(copy / "05_results.parquet").to_pylist()
    return {str(i + 1): [(x["rank"], x["chunk_id"], x["score"]) for x in r if x["query_id"] == str(i + 1)]
            for i in range(len(queries))}


def snapshot(folder):
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()}


@pytest.mark.parametrize("k, feedback", [(3, "none"), (10, "none"), (40, "none"), (10, "rm3")])
def test_searcher_answers_exactly_as_stage_05(sample, k, feedback):
    queries = SAMPLE_QUERIES + EXTRA
    expected = stage05_results(sample, queries, k, "--set", f"retrieval.feedback={feedback}")
    searcher = pipekit.Searcher(sample, settings={"feedback": feedback})
    for i, q in enumerate(queries):
        got = [(p.rank, p.chunk_id, p.score) for p in searcher.search(q, k)]
        assert got == expected[str(i + 1)], q  # same chunks, same order, same scores to the last bit
    assert searcher.search("zzzz qqqq", k) == []


@pytest.mark.parametrize("where", [{"paths": ["handbook/**"]}, {"formats": ["pdf", "html"]},
                                   {"paths": ["*.pdf", "tables/**", "web/**"]}])
def test_a_filtered_search_is_stage_05s_ranking_within_the_filter_to_the_bit(sample, where):
    # A filter keeps chunks out before ranking, each scored as without it: the filtered top 3
    # is the first 3 of stage 05's own (unfiltered) top 40 that the filter lets through.
    queries = SAMPLE_QUERIES + EXTRA
    expected = stage05_results(sample, queries, 40)
    searcher = pipekit.Searcher(sample)
    mask = searcher.filter.mask(where.get("paths", []), where.get("formats", []))
    inside = set(np.asarray(searcher.index.chunks.column("chunk_id"))[mask].tolist())
    compared = 0
    for i, q in enumerate(queries):
        within = [(c, s) for _, c, s in expected[str(i + 1)] if c in inside]
        got = [(p.chunk_id, p.score) for p in searcher.search(q, 3, **where)]
        if len(within) >= 3:
            assert got == within[:3], q
            compared += 1
    assert compared >= len(SAMPLE_QUERIES) // 2  # the comparison ran on real rankings


def test_texts_kept_or_read_per_search_are_the_same_passages(sample):
    # keep_texts (the default) holds every chunk's text; without it each search reads its hits'
    # texts from 03_chunks.parquet: the same passages either way.
    kept, read = pipekit.Searcher(sample), pipekit.Searcher(sample, keep_texts=False)
    assert read._texts is None and kept._texts is not None
    for q in SAMPLE_QUERIES + EXTRA:
        assert kept.search(q, 10) == read.search(q, 10), q
        assert [p.text for p in kept.search(q, 10)] == [p.text for p in read.search(q, 10)], q


def test_search_on_cranfield_equals_stage_05(cranfield, tmp_path):
    """225 real queries over 1,400 abstracts: long enough lists for stage 05's pruning."""
    out = tmp_path / "cran"
    run_script("run_pipeline.py", "--set", f"paths.output={out}", "--set", f"documents.input={cranfield / 'corpus.jsonl'}",
               "--set", f"retrieval.queries={cranfield / 'queries.jsonl'}", "--set", "retrieval.qrels=null")
    for feedback in ("none", "rm3"):
        run_script("05_retrieval.py", "--set", f"paths.output={out}", "--set", f"retrieval.queries={cranfield / 'queries.jsonl'}",
                   "--set", "retrieval.qrels=null", "--set", f"retrieval.feedback={feedback}")
        rows = pq.read_table(out / "05_results.parquet").to_pylist()
        by_q: dict[str, tuple[str, list]] = {}
        for r in rows:
            by_q.setdefault(r["query_id"], (r["query"], []))[1].append((r["chunk_id"], r["score"]))
        searcher = pipekit.Searcher(out, settings={"feedback": feedback})
        answers = searcher.search_many([t for t, _ in by_q.values()], 10)
        for (text, expected), got in zip(by_q.values(), answers):
            assert [(p.chunk_id, p.score) for p in got] == expected, (feedback, text)


def section_scores_term_by_term(ctx, term):
    """What SectionContext.term_scores computed per query before its scores were prepared once:
    the term's postings grouped into sections, tf added up, the formula on them."""
    ix = ctx.index
    lo, hi = ix.indptr[term], ix.indptr[term + 1]
    sec = ctx.codes[ix.chunk[lo:hi]]
    if len(sec) == 0:
        return sec, np.zeros(0)
    first = np.ones(len(sec), dtype=bool)
    np.not_equal(sec[1:], sec[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    tf = np.add.reduceat(ix.tf[lo:hi].astype(np.float64), starts)
    ids = sec[starts]
    df = len(ids) if ctx.section_df is None else int(ctx.section_df[term])
    idf = np.log(1 + (ctx.n_all - df + 0.5) / (df + 0.5))
    norm = ctx.k1 * (1 - ctx.b + ctx.b * ctx.length[ids] / ctx.avgdl)
    return ids, idf * tf * (ctx.k1 + 1) / (tf + norm)


def test_section_scores_prepared_once_are_the_formulas_to_the_bit(sample):
    ctx = pipekit.Searcher(sample).index.context
    assert ctx is not None and ctx.n < len(ctx.codes)  # the sample's pages have sections of several chunks

    def same_as_term_by_term():
        for t in range(len(ctx.index.df)):
            ids, s = ctx.term_scores(t)
            want_ids, want = section_scores_term_by_term(ctx, t)
            assert ids.tolist() == want_ids.tolist() and s.tobytes() == want.tobytes(), t

    same_as_term_by_term()
    # One shard of a collection (pipekit/retrieve/shards.py): the collection's N, avgdl and
    # section df replace the shard's, and the prepared scores follow them.
    n, total, df = ctx.facts()
    ctx.use_collection(3 * n, 5 * total, 2 * df)
    same_as_term_by_term()


def test_section_part_spreads_each_terms_section_scores_over_its_chunks(sample):
    ctx = pipekit.Searcher(sample).index.context
    terms, weights = np.array([3, 10, 3, 25]), np.array([1.0, 2.0, 0.5, 1.0])
    cols = np.arange(0, len(ctx.codes), 3)
    parts = ctx.section_part(terms, weights, cols)
    for row, t, w in zip(parts, terms.tolist(), weights.tolist()):
        ids, s = section_scores_term_by_term(ctx, t)
        by_section = dict(zip(ids.tolist(), s.tolist()))
        assert row.tolist() == [ctx.weight * w * by_section.get(x, 0.0) for x in ctx.codes[cols].tolist()]
    assert ctx.section_part(terms, weights, cols).tobytes() == parts.tobytes()  # the scratch rows wiped


def test_rows_read_from_column_buffers_are_what_arrow_gives(sample):
    searcher = pipekit.Searcher(sample)
    rows = np.random.default_rng(7).permutation(len(searcher._texts))
    for name in searcher._cited.column_names:
        column = searcher._cited.column(name)
        assert searcher._readers[name](rows) == column.take(pa.array(rows)).to_pylist(), name
    assert searcher._read_texts(rows[:50]) == searcher._texts.take(pa.array(rows[:50])).to_pylist()
    # Nulls, slices of bigger arrays, several row groups, large strings, lists with null items
    odd = pa.chunked_array([pa.array(["a", None, "ünï", ""]).slice(1), pa.array(["x", "yz"])])
    assert column_reader(odd)(np.array([4, 0, 3, 1, 2])) == ["yz", None, "x", "ünï", ""]
    nums = pa.array([7, None, -3, 2**40], pa.int64()).slice(1)
    assert column_reader(nums)(np.array([2, 0, 1])) == [2**40, None, -3]
    trails = pa.array([["A", "b"], None, [], ["", None, "ç"]], pa.list_(pa.large_string())).slice(1)
    assert column_reader(trails)(np.array([2, 0, 1])) == [["", None, "ç"], None, []]
    assert column_reader(pa.array([1.5, None]))(np.array([1, 0])) == [None, 1.5]  # other types: Arrow's take


@pytest.mark.parametrize("size, n", [(1, 1), (99, 1), (2000, 100), (5569, 100), (5569, 7), (30000, 1000)])
def test_nth_largest_is_the_partitions_value_ties_and_all(size, n):
    rng = np.random.default_rng(size + n)
    for vals in (rng.gamma(2.0, size=size), np.round(rng.gamma(2.0, size=size), 1),  # many ties
                 np.sort(rng.random(size)), np.sort(rng.random(size))[::-1].copy()):  # the best first, or last
        assert nth_largest(vals, n) == np.partition(vals, size - n)[size - n]


def test_feedback_changes_the_answers_and_says_what_it_added(sample):
    """The rm3 case above is not the plain one twice: feedback reorders, and says how."""
    q = SAMPLE_QUERIES[1]
    plain = pipekit.Searcher(sample, settings={"feedback": "none"}).search(q, 10)
    fed = pipekit.Searcher(sample, settings={"feedback": "rm3"}).search(q, 10)
    assert [p.score for p in plain] != [p.score for p in fed]
    assert plain[0].added is None and fed[0].added and all(w > 0 for _, w in fed[0].added)
    text = run_script("-m", "pipekit", "search", q, "-k", "2", "--set", f"paths.output={sample}",
                      "--set", "retrieval.feedback=rm3").stdout
    assert "feedback added: " + fed[0].added[0][0] in text


def test_passages_carry_their_citation_and_span(sample):
    hits = pipekit.Searcher(sample).search("when is the change freeze", k=5)
    chunks = pq.read_table(sample / "03_chunks.parquet").to_pandas().set_index("chunk_id")
    cleaned = pq.read_table(sample / "02_preprocessed.parquet").to_pandas().set_index("doc_id").text
    assert hits[0].citation == "handbook/operations/deploys.md › Deploying Lighthouse › Change freezes"
    assert hits[0].heading_path == ["Deploying Lighthouse", "Change freezes"]
    for p in hits:
        c = chunks.loc[p.chunk_id]
        assert (p.doc_id, p.heading, p.start_char, p.end_char, p.text) == (
            c.doc_id, c.heading, c.start_char, c.end_char, c.text)
        span = cleaned[p.doc_id][p.start_char:p.end_char]
        assert span.split()[-1] in p.text  # the span is where the passage came from
        d = p.to_dict()
        assert d["citation"] == p.citation and d["score"] == p.score
    paged = [p for p in pipekit.Searcher(sample).search("probe regions agree site marked down", 10) if p.page_start]
    assert paged and all(re.search(r", p\.\S+( \(PDF pages? \d+(–\d+)?\))?$", p.citation) for p in paged)
    # A passage cites the labels printed on its pages (03_chunks' columns), and the PDF's own
    # page numbers beside them where they differ (the field guide prints "i", then 1, 2, ...).
    for p in paged:
        c = chunks.loc[p.chunk_id]
        assert (p.page_label_start, p.page_label_end) == (c.page_label_start, c.page_label_end)
        same = (p.page_label_start, p.page_label_end) == (str(p.page_start), str(p.page_end))
        assert p.pages.startswith(f"p.{p.page_label_start}") and ("(PDF page" in p.citation) != same
    assert any("(PDF page" in p.citation for p in paged)


def test_explain_adds_up_to_the_score(sample):
    for p in pipekit.Searcher(sample).search("why drop the replication slot", 5, explain=True):
        assert p.explain and abs(sum(e["contribution"] for e in p.explain) - p.score) < 1e-9


def test_cli_prints_cited_marked_results_and_writes_nothing(sample):
    # Nothing but, once, the index's memory-mapped copy for the next search's fast start
    # (pipekit/retrieve/cold.py); the outputs themselves are never touched.
    before = {n: v for n, v in snapshot(sample).items() if n != "04_index.mmap"}
    proc = run_script("-m", "pipekit", "search", "when is the change freeze", "rollback a deploy", "-k", "3",
                      "--set", f"paths.output={sample}")
    after = snapshot(sample)
    assert {n: v for n, v in after.items() if n != "04_index.mmap"} == before and "04_index.mmap" in after
    again = run_script("-m", "pipekit", "search", "when is the change freeze", "rollback a deploy", "-k", "3",
                       "--set", f"paths.output={sample}")
    assert snapshot(sample) == after and again.stdout == proc.stdout
    text = proc.stdout
    assert "\nwhen is the change freeze\n" in text and "\nrollback a deploy\n" in text
    assert re.search(r"^\s+1\.\s+\d+\.\d{3}  handbook/operations/deploys.md › Deploying Lighthouse › Change freezes$",
                     text, re.M)
    assert "**Change** **freezes**" in text  # query terms marked, as the stemmer matched them
    assert len(re.findall(r"^\s+\d\.\s+\d+\.\d{3}  ", text, re.M)) == 6


def test_cli_explain_lines(sample):
    text = run_script("-m", "pipekit", "search", "when is the change freeze", "-k", "1", "--explain",
                      "--set", f"paths.output={sample}").stdout
    score = float(re.search(r"^\s+1\.\s+(\d+\.\d+)", text, re.M).group(1))
    parts = [float(x) for x in re.findall(r"→ (\d+\.\d+)$", text, re.M)]
    assert len(parts) == 2 and abs(sum(parts) - score) < 0.002
    assert re.search(r"freez\s+qtf=1 tf=\d", text)


def test_cli_reads_queries_from_a_pipe(sample):
    proc = subprocess.run([sys.executable, "-m", "pipekit", "search", "-k", "1", "--set", f"paths.output={sample}"],
                          cwd=REPO, input="who is on call\n\nrollback a deploy\n", capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "\nwho is on call\n" in proc.stdout and "\nrollback a deploy\n" in proc.stdout


def test_no_index_names_the_command_with_the_users_options(tmp_path):
    proc = run_script("-m", "pipekit", "search", "x", "--set", f"paths.output={tmp_path}", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"run `python 04_indexing.py --set paths.output={tmp_path}` first" in proc.stderr
    with pytest.raises(PipelineError, match="04_indexing.py"):
        pipekit.Searcher(tmp_path)
    assert list(tmp_path.iterdir()) == []
