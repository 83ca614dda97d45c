"""Stage 05's results as a reader sees them: the table, the metrics, the terminal preview.

None of this decides a score or a rank — `05_retrieval.py` does that.  Here the ranked
chunk hits become `05_results.parquet` rows (`results_table`, with `explain_rows`' term
by term breakdown when asked), the document run becomes nDCG@10, AP@100 and R@100 through
ir-measures (`evaluate`, trec_eval's conventions), and the first queries' best results
are printed (`print_results`).  Kept apart so the stage file reads as its own idea:
scoring, pruning, ranking and feedback.

The index is passed in, not imported: pipekit never imports a stage file (`explain_rows`
only reads the arrays every stage-05 `Index` has).

Judgements are checked against the index before any metric (`judged_in_index`): a run on
one's own folder with the sample's `data/qrels.tsv` still in the config printed
`nDCG@10 0.0000` and no word that not one judged document was in the index.  Now the
judgements of documents the index lacks are named; a query none of whose relevant
documents is indexed is left out of the metrics (it could only ever score 0) and counted;
with none left, there are no metrics, and one sentence says why.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pipekit.run import io
from pipekit.index.link_text import link_text
from pipekit.read.pages import cite_pages, passage_text
from pipekit.retrieve.fusion import fusion_line

METRICS = ("nDCG@10", "AP@100", "R@100")

EXPLAIN_TYPE = pa.list_(pa.struct([
    ("term", pa.string()), ("qtf", pa.int32()), ("weight", pa.float64()), ("tf", pa.int32()),
    ("df", pa.int32()), ("idf", pa.float64()), ("norm", pa.float64()), ("contribution", pa.float64()),
    ("feedback", pa.float64())]))


def chunk_texts(path, rows: np.ndarray) -> list[str]:
    """Texts of the given 03_chunks rows (only the row groups that hold them are read)."""
    return io.take_rows(path, "text", rows)


def explain_rows(index, q, chunk: int) -> list[dict]:
    """Each query term's share of a chunk's score (weight · impact); the shares add up
    to the score.  `qtf` is how often the query says the term (0: feedback added it),
    `weight` its multiplier, `feedback` the part of the weight feedback gave it."""
    b, avgdl = index.stats["b"], index.stats["avgdl"]
    names = index.terms
    fb = q.from_feedback if q.from_feedback is not None else np.zeros(len(q.ids))
    # With section context (pipekit/retrieve/sections.py) each term also brings its section's share,
    # and the sum is divided by 1 + w: `section` is that share of the contribution.
    ctx = getattr(index, "context", None)
    shares = [float(p[0]) for p in ctx.section_part(q.ids, q.weights, np.array([chunk]))] if ctx else None
    scale = 1 + ctx.weight if ctx else 1.0
    out = []
    for i in np.argsort(q.ids, kind="stable").tolist():  # term ids are alphabetical
        t = int(q.ids[i])
        lo, hi = index.indptr[t], index.indptr[t + 1]
        pos = lo + np.searchsorted(index.chunk[lo:hi], chunk)
        found = pos < hi and index.chunk[pos] == chunk
        if not found and not (shares and shares[i] > 0):
            continue
        term = names[t].as_py()
        weight = float(q.weights[i])
        norm = 1 - b + b * float(index.lengths[chunk]) / avgdl
        own = weight * float(index.weigh.held(t, slice(pos, pos + 1))[0]) if found else 0.0
        row = {"term": term, "qtf": q.qtf.get(term, 0), "weight": weight, "tf": int(index.tf[pos]) if found else 0,
               "df": int(index.df[t]), "idf": float(index.idf[t]), "norm": norm,
               "contribution": (own + (shares[i] if shares else 0.0)) / scale, "feedback": float(fb[i])}
        if shares:
            row["section"] = shares[i] / scale
        out.append(row)
    return out


def added_terms(terms: pa.Array, q) -> list[tuple[str, float]]:
    """The terms feedback added to a query (the text never says them), heaviest first."""
    if q.from_feedback is None:
        return []
    names = terms.take(pa.array(q.ids)).to_pylist()
    new = [(t, w) for t, w in zip(names, q.weights.tolist()) if q.qtf.get(t, 0) == 0]
    return sorted(new, key=lambda tw: -tw[1])


class Hits(tuple):
    """The hit arrays (query#, chunk, score, rank), unpacked as a 4-tuple, and `also`: for
    each hit the repeats collapsed onto it, (chunks, scores) (pipekit/retrieve/repeats.py)."""

    also: list[tuple[np.ndarray, np.ndarray]]

    def __new__(cls, arrays, also=None):
        hits = super().__new__(cls, arrays)
        hits.also = also if also is not None else [(np.zeros(0, np.int64), np.zeros(0))] * len(arrays[0])
        return hits


def collect_answers(queries, answers: list[tuple], doc_names: pa.Array | None,
                    also: list[list] | None = None) -> tuple[Hits, dict | None]:
    """Each query's answer (its chunks, their scores, its documents as codes, theirs) as
    the hit arrays (query#, chunk, score, rank) and the document run {qid: {doc: score}}
    (doc_names None: no run, None; a Searcher cites chunks, and naming a query's hundred
    documents was a tenth of its search at 5,000 chunks, bench/search_speed.py).
    `also`: per query, per hit, the repeats collapsed onto it (Hits.also)."""
    flat_also = [x for per_query in also for x in per_query] if also is not None else None
    if doc_names is None and len(answers) == 1:  # a Searcher's one query: its arrays as they are
        a = answers[0]
        return Hits((np.zeros(len(a[0]), np.int64), a[0].astype(np.int64), a[1].astype(np.float64),
                     np.arange(1, len(a[0]) + 1, dtype=np.int32)), flat_also), None
    # Document names for every query at once: one Arrow take, not a thousand.
    run: dict[str, dict[str, float]] | None = {} if doc_names is not None else None
    if answers and doc_names is not None:
        names = doc_names.take(pa.array(np.concatenate([a[2] for a in answers]))).to_pylist()
        scores = np.concatenate([a[3] for a in answers]).tolist()
    at = 0
    for (qid, _), a in zip(queries, answers if run is not None else []):
        run[qid] = dict(zip(names[at:at + len(a[2])], scores[at:at + len(a[2])]))
        at += len(a[2])
    cat = lambda parts, dt: np.concatenate(parts).astype(dt) if parts else np.zeros(0, dt)
    hits = (cat([np.full(len(a[0]), i) for i, a in enumerate(answers)], np.int64),
            cat([a[0] for a in answers], np.int64), cat([a[1] for a in answers], np.float64),
            cat([np.arange(1, len(a[0]) + 1) for a in answers], np.int32))
    return Hits(hits, flat_also), run


def results_table(queries, rows: pa.Table, hits, explain: list | None = None) -> pa.Table:
    """05_results.parquet's rows: one per chunk hit (`hits`: query#, chunk, score, rank
    arrays), with its chunk's citation columns and text (`rows`, in the hits' order:
    pipekit/retrieve/cited.py)."""
    q, _, s, r = hits
    at = pa.array(q)
    results = {
        "query_id": pa.array([qid for qid, _ in queries], pa.string()).take(at),
        "query": pa.array([text for _, text in queries], pa.string()).take(at),
        "rank": pa.array(r, pa.int32()),
        "score": pa.array(s, pa.float64()),
        **{n: rows.column(n) for n in ("chunk_id", "doc_id", "heading", "page_start", "page_end",
                                       "page_label_start", "page_label_end", "text")},
    }
    if explain is not None:
        results["explain"] = pa.array(explain, EXPLAIN_TYPE)
    return pa.table(results)


@dataclass
class Judged:
    """The judgements a run is scored on, and what was left out of them (`judged_in_index`)."""

    qrels: dict  # {query_id: {doc_id: relevance}} of the queries kept (empty: no metrics)
    left_out: list[str]  # queries none of whose relevant documents the index holds
    lines: list[str]  # what to tell the user (stage 05's summary)

    @property
    def meta(self) -> dict:
        """05_metrics.parquet's record of the queries its mean leaves out."""
        return {"queries_left_out": self.left_out}


def judged_in_index(qrels: dict, doc_ids: pa.Array | pa.ChunkedArray, where) -> Judged:
    """The judgements of documents in the index (`doc_ids`: its chunks' doc_id), split:
    queries with a relevant (> 0) document there are kept, whole; those without one, whose
    metrics could only be 0 whatever the ranking, are left out and counted.  A query whose
    judgements are all 0 stays, as ir-measures counts it.  `where`: the qrels file, named."""
    import pyarrow.compute as pc

    indexed = set(pc.unique(doc_ids).to_pylist())
    judged = {d for docs in qrels.values() for d in docs}
    missing = sorted(judged - indexed)
    if not missing:  # every BEIR collection here but one document of Cranfield's
        return Judged(qrels, [], [])
    left_out = [q for q, docs in qrels.items()
                if any(r > 0 for r in docs.values()) and not any(r > 0 and d in indexed for d, r in docs.items())]
    kept = {q: docs for q, docs in qrels.items() if q not in set(left_out)}
    looks = f"; this index's doc_ids look like {min(indexed)!r}" if indexed else ""
    if not kept:
        return Judged({}, left_out, [
            f"no metrics: none of the {len(judged):,} documents judged for {len(qrels):,} queries in {where} "
            f"is in this index"
            f" (e.g. {missing[0]!r}{looks}): they are judgements of other documents; point retrieval.qrels"
            f" at judgements of these (README, \"Writing your own judgements\") or set it to null"
            if len(missing) == len(judged) else
            f"no metrics: no query judged in {where} has a document judged relevant in this index"
            f" ({len(missing):,} of its {len(judged):,} judged documents are not in it, e.g. {missing[0]!r}{looks})"])
    lines = [f"{len(missing):,} of the {len(judged):,} documents judged in {where} "
             f"{'is' if len(missing) == 1 else 'are'} not in this index (e.g. {missing[0]!r}): "
             f"{'it counts' if len(missing) == 1 else 'they count'} as never found"]
    if left_out:
        first = left_out[0]
        lines.append(f"{len(left_out):,} of the {len(qrels):,} judged queries left out of the metrics: none of the "
                     f"documents judged relevant for them is in this index (e.g. query {first!r}: "
                     f"{', '.join(map(repr, sorted(d for d, r in qrels[first].items() if r > 0)[:3]))})")
    return Judged(kept, left_out, lines)


ALSO_TYPE = pa.list_(pa.struct([
    ("chunk_id", pa.string()), ("doc_id", pa.string()), ("heading", pa.string()), ("page_start", pa.int32()),
    ("page_end", pa.int32()), ("score", pa.float64()), ("link", pa.string())]))


def also_column(also: list[tuple[np.ndarray, np.ndarray]], rows_of, links_of) -> pa.Array:
    """05_results.parquet's `also`: for each hit the repeats collapsed onto it (Hits.also),
    each with what a citation needs and its link (`rows_of(rows)`: their rows of 03_chunks,
    pipekit/retrieve/cited.py; `links_of(table)`: those rows' links, pipekit/retrieve/links.py)."""
    rows = np.concatenate([a[0] for a in also]).astype(np.int64) if also else np.zeros(0, np.int64)
    table = rows_of(rows)
    cols = {n: table.column(n).to_pylist() for n in ("chunk_id", "doc_id", "heading", "page_start", "page_end")}
    cols["score"] = np.concatenate([a[1] for a in also]).tolist() if also else []
    cols["link"] = links_of(table).to_pylist() if len(rows) else []
    records = [dict(zip(cols, v)) for v in zip(*cols.values())]
    out, at = [], 0
    for a in also:
        out.append(records[at:at + len(a[0])])
        at += len(a[0])
    return pa.array(out, ALSO_TYPE)


def evaluate(qrels, run) -> pa.Table:
    """Per-query and mean metrics with ir-measures (trec_eval conventions)."""
    import ir_measures

    measures = [ir_measures.parse_measure(m) for m in METRICS]
    rows = [(m.query_id, str(m.measure), float(m.value)) for m in ir_measures.iter_calc(measures, qrels, run)]
    agg = ir_measures.calc_aggregate(measures, qrels, run)
    rows += [("all", str(m), float(agg[m])) for m in measures]
    qid, metric, value = zip(*rows) if rows else ((), (), ())
    return pa.table({"query_id": pa.array(qid, pa.string()), "metric": pa.array(metric, pa.string()),
                     "value": pa.array(value, pa.float64())})


def no_terms_line(qid: str, text: str) -> str:
    """One line for a query of stopwords only: "no chunk contains any of its terms" read as if
    the collection lacked them, when the analyzer had left no term to look for."""
    return (f"    query {qid} {text!r} has no searchable terms after stopword removal "
            f"(indexing.stopwords; of single letters only capitals count, but A and I: "
            f"indexing.single_letters): no results")


def termless_queries(analyzer, queries, note) -> set[str]:
    """The ids of queries the analyzer leaves no term of, said in one note beside the summary
    (only the first 8 queries' results are printed, where each would be said)."""
    termless = [(qid, text) for qid, text in queries if not analyzer.analyze(text)]
    if termless:
        more = f" (and {len(termless) - 1} more such queries)" if len(termless) > 1 else ""
        note(no_terms_line(*termless[0]).strip() + more)
    return {qid for qid, _ in termless}


def shortened(text: str, width: int) -> str:
    """`textwrap.shorten(text, width, placeholder=" …")`, from the text's first words only.

    shorten splits the whole text into words and spaces by a regular expression to keep
    the first `width` characters' worth: for stage 05's 20 printed passages of ~1,800
    characters each, ~10 ms of a one-file rerun.  The line it keeps is made of the words
    that begin within `width` characters of the collapsed text, so the collapsed text cut
    at its first space past twice that width gives the same line: both are too long, and
    every word the line can hold, the one it stops at and the neighbours its splitting
    looks at are whole in both (tests/test_05_retrieval_fast.py checks it against shorten)."""
    flat = " ".join(text.split())
    cut = flat.find(" ", 2 * width)
    return textwrap.shorten(flat if cut < 0 else flat[:cut], width, placeholder=" …")


def print_results(results: pa.Table, queries, added=None, max_queries: int = 8, termless=frozenset()) -> None:
    """The first queries' best five results (with their explanations, if any), and with
    feedback the terms it added to each query (`added`: per query [(term, weight)]).
    `termless`: ids of queries the analyzer left no term of (said so, not "no chunk contains")."""
    import pyarrow.compute as pc  # (here: a Searcher imports this module, and compute's import is ~0.06 s)

    # Only the printed queries' rows as Python values (every row's were 0.03-0.05 s of stage 05 at
    # 10,000 rows, for the 40 printed).
    shown = pa.array(sorted({qid for qid, _ in queries[:max_queries]}), pa.string())
    rows = results.filter(pc.is_in(results.column("query_id"), value_set=shown)).to_pylist()
    by_q: dict[str, list[dict]] = {}
    for r in rows:
        by_q.setdefault(r["query_id"], []).append(r)
    for n, (qid, text) in enumerate(queries[:max_queries]):
        print(f"\n[{qid}] {text}")
        if added is not None:
            new = added[n]
            print("    feedback added: " + (", ".join(f"{t} {w:.3f}" for t, w in new[:8]) if new else "nothing")
                  + (f" … and {len(new) - 8} more" if len(new) > 8 else ""))
        hits = by_q.get(qid, [])
        if not hits:
            print(no_terms_line(qid, text) if qid in termless else "    (no chunk contains any of its terms)")
        for r in hits[:5]:
            pages = cite_pages(r["page_start"], r["page_end"], r["page_label_start"], r["page_label_end"])
            where = r["doc_id"] + (f" › {r['heading']}" if r["heading"] else "") + (f" {pages}" if pages else "")
            snippet = shortened(link_text(passage_text(r["text"])), 90)
            print(f"  {r['rank']:>2}. {r['score']:7.3f}  {where}\n              {snippet}")
            if r.get("link"):  # where the passage opens (pipekit/retrieve/links.py)
                print(f"              ↗ {r['link']}")
            for a in r.get("also") or []:  # the same passage elsewhere, collapsed onto this hit (repeats.py)
                print(f"              also in {a['doc_id']}" + (f" › {a['heading']}" if a["heading"] else ""))
            if r.get("fusion"):  # a hybrid hit: its BM25 part, its cosine part, the fused score
                print(fusion_line(r["fusion"], 14))
            for e in r.get("explain") or []:
                # The query side: qtf, and with feedback the weight (a term feedback added has qtf=0).
                weight = f" w={e['weight']:.3f}" if e["weight"] != e["qtf"] else ""
                print(f"              {e['term']:<14} qtf={e['qtf']}{weight} tf={e['tf']:<3} df={e['df']:<6} "
                      f"idf={e['idf']:.3f} norm={e['norm']:.3f} → {e['contribution']:.3f}")
    if len(queries) > max_queries:
        print(f"\n… and {len(queries) - max_queries} more queries in 05_results.parquet")
