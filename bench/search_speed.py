"""How long one query takes through `pipekit.Searcher` (what `python -m pipekit search` and a
program feeding passages to a language model call), once the index is loaded.

    python bench/search_speed.py OUTPUT_FOLDER [OUTPUT_FOLDER ...] [--queries FILE] [--repeat 3] [-k 10]
                                 [--read-texts] [--baseline CHECKOUT] [--no-peer]

For each output folder (one made by run_pipeline.py) it loads a Searcher, asks every query
of the folder's stage-05 results (or --queries: one a line, or a .tsv's last field, as in
bench/docs_qa_questions.tsv) one at a time, `--repeat`
times, for the `-k` best (10, as the peers are asked; not the folder's retrieval.top_k,
which was 50 on the docs folder and made ours build five times the passages the peers
return), and prints the median and 90th percentile microseconds per query (to a tenth: at
0.05-0.1 ms a query, two decimals of a millisecond hid a 10 µs change), the chunks in
the index, and the machine's load average (a busy machine is slower: say which it was).
Two rows are ours: `ours` is `Searcher.search` (cited Passages with their texts, to set
beside `tantivy+texts`), `ours ranking` is `Searcher.ranking` (the same hits as chunk
numbers and scores, to set beside bm25s and plain `tantivy`, which return those).
With --read-texts the Searcher keeps no texts (keep_texts=False): each search reads its hits'
texts from 03_chunks.parquet, as `python -m pipekit search "QUERY"` does for a query or two.
Prints figures only; the README's search-speed sentence quotes them.

Beside ours, in the same run and on the same questions: bm25s (its default numpy backend,
and numba's when installed) and tantivy (when installed: `tantivy_search`) over the same
chunk texts (03_chunks.parquet), with what our
defaults do to words, Lucene's English stop list and the Snowball English stemmer
(PyStemmer), k1 1.2, b 0.75; one query is its `tokenize` plus `retrieve(k=10)`, the
numba functions compiled before the clock starts (bm25s and tantivy are asked for `-k` too).  Ours and the peers take turns, a pass over
the questions each, so that load from other work falls on all of them alike.  bm25s ranks
chunks by BM25 alone; ours also mixes in the section context, finds sections and links and
makes citable Passage objects, so equal times mean ours does more in them.  --baseline CHECKOUT runs
this bench's Searcher from another checkout of the project (a child process), for a
before/after on the same machine at the same time; with --same (and --same-in GLOB) it also
checks that every Passage of every query, unfiltered and within each GLOB, equals the baseline's.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if "--pipekit" in sys.argv:  # a child run for --baseline: that checkout's pipekit
    REPO = Path(sys.argv[sys.argv.index("--pipekit") + 1]).resolve()
sys.path.insert(0, str(REPO))

from pipekit import Searcher  # noqa: E402
from pipekit.run.io import read_table  # noqa: E402


def folder_queries(out: Path) -> list[str]:
    return sorted(set(read_table(out / "05_results.parquet", ["query"]).column("query").to_pylist()))


def file_queries(path: Path) -> list[str]:
    """One query a line; in a .tsv its last field (bench/docs_qa_questions.tsv: id, document,
    section, question); `#` lines are comments."""
    lines = [line for line in path.read_text(encoding="utf-8").split("\n") if line.strip() and not line.startswith("#")]
    return [line.split("\t")[-1] for line in lines] if path.suffix == ".tsv" else lines


def timed_together(runners: dict, queries: list[str], repeat: int) -> dict[str, list[float]]:
    """Each runner's milliseconds per query, the runners taking turns a pass (every query once)
    at a time: a change in the machine's load (other work starting) then falls on all of them
    alike, not on whichever ran while it lasted (one run in three had ours 0.63 ms against
    0.45 in the two beside it, when each ran all its passes in a block)."""
    ms: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(repeat):
        for name, one in runners.items():
            for q in queries:
                t0 = time.perf_counter()
                one(q)
                ms[name].append((time.perf_counter() - t0) * 1000)
    return ms


def ms_summary(ms: list[float]) -> tuple[float, float]:
    ms = sorted(ms)
    return statistics.median(ms), ms[int(0.9 * (len(ms) - 1))]


def peer_backends() -> list[str]:
    """bm25s's default backend (numpy), and numba's compiled one where installed."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return ["numpy"]
    return ["numpy", "numba"]


def bm25s_search(out: Path, queries: list[str], backend: str, k: int = 10):
    """bm25s over the folder's chunk texts: one query's tokenize + retrieve, as a function."""
    import bm25s
    import Stemmer
    texts = read_table(out / "03_chunks.parquet", ["text"]).column("text").to_pylist()
    stemmer = Stemmer.Stemmer("english")
    model = bm25s.BM25(k1=1.2, b=0.75, backend=backend)
    model.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False),
                show_progress=False)

    def one(q: str) -> None:
        model.retrieve(bm25s.tokenize([q], stopwords="en", stemmer=stemmer, show_progress=False),
                       k=min(k, len(texts)), show_progress=False, n_threads=1)

    for q in queries[:5]:  # numba compiles at the first retrieve: not on the clock
        one(q)
    return one


def tantivy_search(out: Path, queries: list[str], documents: bool = False, k: int = 10):
    """tantivy (Rust, Lucene-like: `pip install tantivy`) over the folder's chunk texts, with
    what our defaults do to words (letter and digit runs, lower-cased, Lucene's English stop
    list, the Snowball English stemmer; BM25 k1 1.2, b 0.75, its defaults): one query is its
    parse (the lenient parser: a question's `:` or `"` is text, not syntax) plus the search
    for the top k on this thread, hits as (score, address) pairs, as bm25s gives chunk
    numbers; with `documents` also each hit's stored text and chunk_id, as ours gives passages."""
    import tantivy

    from pipekit.index.analyzer import ENGLISH_STOPWORDS

    chunks = read_table(out / "03_chunks.parquet", ["chunk_id", "text"]).to_pydict()
    texts = chunks["text"]
    analyzer = (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple()).filter(tantivy.Filter.remove_long(255))
                .filter(tantivy.Filter.lowercase()).filter(tantivy.Filter.custom_stopword(sorted(ENGLISH_STOPWORDS)))
                .filter(tantivy.Filter.stemmer("english")).build())
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("body", stored=documents, tokenizer_name="ours")
    builder.add_text_field("chunk_id", stored=documents, tokenizer_name="raw")
    index = tantivy.Index(builder.build())  # in memory, as bm25s's is
    index.register_tokenizer("ours", analyzer)
    writer = index.writer(heap_size=256 << 20, num_threads=1)
    for chunk_id, text in zip(chunks["chunk_id"], texts):
        writer.add_document(tantivy.Document(body=text or "", chunk_id=chunk_id))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()

    def one(q: str) -> None:
        query, _ = index.parse_query_lenient(q, ["body"])
        hits = searcher.search(query, limit=k, count=False).hits
        if documents:
            [(d["chunk_id"][0], d["body"][0]) for d in (searcher.doc(address) for _, address in hits)]

    for q in queries[:5]:
        one(q)
    return one


def peer_tantivy() -> bool:
    try:
        import tantivy  # noqa: F401
    except ImportError:
        return False
    return True


def all_hits(searcher: Searcher, queries: list[str], globs: list[str], k: int) -> dict[str, list[dict]]:
    """Every Passage of every query, unfiltered and within each glob (score as its bits), at
    k and at the folder's retrieval.top_k."""
    return {f"{g or 'all'}\t{kk}\t{q}": [dict(p.to_dict(), score=p.score.hex())
                                          for p in searcher.search(q, kk, paths=[g] if g else None)]
            for g in [None, *globs] for kk in sorted({k, int(searcher.settings["top_k"])}) for q in queries}


def baseline_row(checkout: Path, out: Path, args, hits: Path | None = None) -> str:
    """This bench's Searcher row, run by a child process with another checkout's pipekit
    (with `hits`, its Passages written there as JSON for --same)."""
    cmd = [sys.executable, __file__, str(out), "--pipekit", str(checkout), "--repeat", str(args.repeat),
           "-k", str(args.k), "--rows-only"] + (["--queries", str(args.queries)] if args.queries else []) + \
        (["--read-texts"] if args.read_texts else []) + \
        (["--hits", str(hits)] + [a for g in args.same_in for a in ("--same-in", g)] if hits else [])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"the baseline's bench failed:\n{proc.stderr[-2000:]}")
    return proc.stdout.strip()


def same_line(ours: dict, theirs: dict, name: str) -> str:
    """One line: every Passage equal to the baseline's (score bits included), or the first that is not."""
    for key in ours:
        if ours[key] != theirs.get(key):
            return f"  NOT the same as {name}: {key!r} (first of {sum(ours[k] != theirs.get(k) for k in ours)})"
    return (f"  same Passages as {name}: {len(ours)} searches, {sum(map(len, ours.values()))} hits, "
            f"every field and score bit")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--queries", type=Path, help="one query a line, or a .tsv's last field (default: the folder's "
                    "stage-05 queries)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("-k", type=int, default=10, help="hits per query, ours and the peers' (default 10)")
    ap.add_argument("--read-texts", action="store_true", help="keep no texts: read each search's from 03_chunks")
    ap.add_argument("--baseline", type=Path, metavar="CHECKOUT",
                    help="also time another checkout's Searcher on the same folders and questions")
    ap.add_argument("--no-peer", action="store_true", help="leave bm25s and tantivy out")
    ap.add_argument("--same", action="store_true",
                    help="with --baseline: check that every Passage of every query equals the baseline's")
    ap.add_argument("--same-in", action="append", default=[], metavar="GLOB",
                    help="--same also within documents matching GLOB (repeatable)")
    ap.add_argument("--hits", type=Path, help=argparse.SUPPRESS)  # a --baseline child's Passages, for --same
    ap.add_argument("--pipekit", type=Path, help=argparse.SUPPRESS)  # (read before the imports above)
    ap.add_argument("--rows-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.rows_only:
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"{'folder':<36}{'who':<18}{'chunks':>8}{'queries':>8}{'load s':>7}{'median µs':>10}{'p90 µs':>8}"
              f"{'÷ ours':>8}")
    for out in args.folders:
        t0 = time.perf_counter()
        searcher = Searcher(out, keep_texts=not args.read_texts)
        load = time.perf_counter() - t0
        queries = file_queries(args.queries) if args.queries else folder_queries(out)
        queries = [q for q in queries if q.strip()][:300]
        # Ours and the peers in turns, all loaded at once (--no-peer where two indexes do not fit)
        runners = {"ours": lambda q: searcher.search(q, args.k)}
        if hasattr(searcher, "ranking") and not args.rows_only:  # (a checkout before it has none)
            runners["ours ranking"] = lambda q: searcher.ranking(q, args.k)
        for backend in peer_backends() if not (args.no_peer or args.rows_only) else []:
            runners[f"bm25s-{backend}"] = bm25s_search(out, queries, backend, args.k)
        if peer_tantivy() and not (args.no_peer or args.rows_only):
            runners["tantivy"] = tantivy_search(out, queries, k=args.k)
            runners["tantivy+texts"] = tantivy_search(out, queries, documents=True, k=args.k)
        ms = timed_together(runners, queries, args.repeat)
        median, p90 = ms_summary(ms["ours"])
        chunks = searcher.index.stats["N"]
        who = "ours" if args.pipekit is None else f"ours at {args.pipekit.name}"
        row = lambda who, load, m, p: (f"{str(out)[-35:]:<36}{who[:17]:<18}{chunks:>8,}{len(queries):>8}{load:>7}"
                                       f"{m * 1000:>10.1f}{p * 1000:>8.1f}{m / median:>8.2f}")
        if args.rows_only:
            if args.hits:
                args.hits.write_text(json.dumps(all_hits(searcher, queries, args.same_in, args.k)), encoding="utf-8")
            print(f"{load:.2f}\t{median}\t{p90}")
            continue
        print(row(who, f"{load:.2f}", median, p90), flush=True)
        if args.baseline:
            with tempfile.TemporaryDirectory() as tmp:
                hits = Path(tmp) / "hits.json" if args.same else None
                b_load, b_median, b_p90 = baseline_row(args.baseline, out, args, hits).split("\t")
                print(row(f"ours at {args.baseline.name}", b_load, float(b_median), float(b_p90)), flush=True)
                if hits:
                    print(same_line(all_hits(searcher, queries, args.same_in, args.k),
                                    json.loads(hits.read_text(encoding="utf-8")), args.baseline.name), flush=True)
        for name in list(runners)[1:]:
            print(row(name, "", *ms_summary(ms[name])), flush=True)
    if not args.rows_only:
        print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
