"""One-letter names (issue 48): `indexing.single_letters` none (SPEC's rule before) against
capitals, on the test collections and on a folder where "read a CSV file in R" is asked.

    python bench/one_letter.py                 # the collections: paired 95 % intervals per query
    python bench/one_letter.py --build         # once: the folder (R's PDF manuals and xarray's docs)
    python bench/one_letter.py --folder        # the folder's questions, top 3 each way
    python bench/one_letter.py --speed         # what capitals cost stage 04 and the analyzer

The collections: every BEIR collection under ../shared/data and the bundled sample, each
run twice by `run_pipeline.py` with the defaults (outputs in bench/out/one_letter/<name>-<setting>),
and twice more with SPEC's plain formula (heading_weight 1, section_context 0).  For each it
prints nDCG@10, AP@100 and R@100 with the difference capitals - none and its 95 % interval
(2,000 bootstrap resamplings of the queries, paired), how many queries hold a lone capital
(only those can gain a term; every other query moves only because chunk lengths and avgdl
now count the capitals), how many queries went up and down, and the same over the
queries without a lone capital alone: what the setting does to everything else.

The folder (--build; bench/out/one_letter/folder, git-ignored): R's seven PDF manuals as
Debian installs them (`apt-get install r-doc-pdf`, /usr/share/R/doc/manual/R-*.pdf, the
reference manual left out: 6.5 MB of help pages) in `r-manuals/` (a name without a lone
capital, so that no folder term helps R), and the `doc/` folder of xarray's sdist (`pip
download --no-deps --no-binary :all: xarray==XARRAY`) in `xarray/`: the folder of issue 48's
report, cut to the two projects its R question is between.  --folder indexes it both ways
and prints each question's top 3 and whether the expected project is among them.

--speed (after the collections' runs, whose chunks it reuses): stage 04 with --force on
SciFact's and NFCorpus's chunks, each setting in turn, five rounds, the median wall; then
the analyzer alone (runs, then each distinct word's term, as stage 04 does) over 200,000
real passages (both collections' abstracts repeated) in stage 04's batches of 8,192, best of
three.  The synthetic corpus of bench/scale.py has no capitals at all, so it would time
only the test that finds none.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

OUT = REPO / "bench" / "out" / "one_letter"
FOLDER = OUT / "folder"
R_MANUALS = Path("/usr/share/R/doc/manual")
XARRAY = "2026.9.0"
METRICS = ("nDCG@10", "AP@100", "R@100")
SETTINGS = ("none", "capitals")
VARIANTS = {"defaults": [], "plain": ["indexing.heading_weight=1", "retrieval.section_context=0"]}
LONE_CAPITAL = r"(?<![^\W_])[B-HJ-Z](?![^\W_])"

# (question, the folder each answer should come from)
QUESTIONS = [
    ("read a CSV file in R", "r-manuals/"),
    ("how do I read a CSV file in R", "r-manuals/"),
    ("call C code from R", "r-manuals/"),
    ("R data frame from a spreadsheet", "r-manuals/"),
    ("open a netCDF file as a dataset", "xarray/"),  # controls: no lone capital, the same either way
    ("read a CSV file into xarray", "xarray/"),
]


def pipeline(out: Path, sets: list[str]) -> float:
    cmd = [sys.executable, "run_pipeline.py", "--set", f"paths.output={out}"]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def per_query(out: Path) -> dict[str, dict[str, float]]:
    m = pq.read_table(out / "05_metrics.parquet").to_pandas()
    m = m[m.query_id != "all"]
    return {metric: dict(zip(g.query_id, g.value)) for metric, g in m.groupby("metric")}


def bootstrap(diff: np.ndarray, rounds: int = 2000, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(rounds, len(diff)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def queries_with_capitals(beir: Path | None) -> tuple[set[str], int]:
    """The ids of the queries holding a lone capital but A and I, and how many queries there are."""
    import json
    import re

    if beir is None:  # the sample's questions (data/queries.txt: one a line, numbered from 1)
        lines = [line for line in (REPO / "data" / "queries.txt").read_text().splitlines() if line.strip()]
        texts = {str(i): t for i, t in enumerate(lines, 1)}
    else:
        texts = {r["_id"]: r["text"] for r in map(json.loads, (beir / "queries.jsonl").open(encoding="utf-8"))}
    return {q for q, t in texts.items() if re.search(LONE_CAPITAL, t)}, len(texts)


def collections(data: Path) -> None:
    targets = {p.parent.name: p for p in sorted(data.glob("*/beir")) if (p / "corpus.jsonl").exists()}
    targets["sample"] = None
    print("capitals - none, paired per query (95 % bootstrap interval); queries: with a lone capital / all")
    for name, beir in targets.items():
        capital, n = queries_with_capitals(beir)
        for variant, extra in VARIANTS.items():
            got, walls = {}, {}
            for setting in SETTINGS:
                sets = [f"indexing.single_letters={setting}", "retrieval.top_k=10", *extra]
                if beir is not None:
                    sets += [f"documents.input={beir / 'corpus.jsonl'}", f"retrieval.queries={beir / 'queries.jsonl'}",
                             f"retrieval.qrels={beir / 'qrels.tsv'}"]
                out = OUT / f"{name}-{variant}-{setting}"
                walls[setting] = pipeline(out, sets)
                got[setting] = per_query(out)
            print(f"\n{name} ({variant}; queries {len(capital)} / {n})")
            for metric in METRICS:
                ids = sorted(got["none"][metric])
                a = np.array([got["none"][metric][q] for q in ids])
                b = np.array([got["capitals"][metric].get(q, 0.0) for q in ids])
                d = b - a
                lo, hi = bootstrap(d)
                print(f"  {metric:<8} {a.mean():.4f} -> {b.mean():.4f}   {d.mean():+.4f} [{lo:+.4f}, {hi:+.4f}]"
                      f"   up {int((d > 1e-12).sum())}, down {int((d < -1e-12).sum())}")
                rest = np.array([q not in capital for q in ids])
                lo, hi = bootstrap(d[rest])
                print(f"  {'':<8} the {int(rest.sum())} without a capital: {d[rest].mean():+.4f} [{lo:+.4f}, {hi:+.4f}]"
                      f"   up {int((d[rest] > 1e-12).sum())}, down {int((d[rest] < -1e-12).sum())}")


def build() -> None:
    if not R_MANUALS.exists():
        raise SystemExit(f"{R_MANUALS} is missing: apt-get install r-doc-pdf")
    if FOLDER.exists():
        shutil.rmtree(FOLDER)
    (FOLDER / "r-manuals").mkdir(parents=True)
    for pdf in sorted(R_MANUALS.glob("R-*.pdf")):
        shutil.copy(pdf, FOLDER / "r-manuals" / pdf.name)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--quiet",
                        f"xarray=={XARRAY}", "-d", tmp], check=True)
        sdist, = Path(tmp).glob("xarray-*.tar.gz")
        with tarfile.open(sdist) as tar:
            top = f"xarray-{XARRAY}/doc/"
            members = [m for m in tar.getmembers() if m.name.startswith(top) and m.isfile()]
            for m in members:
                m.name = "xarray/" + m.name[len(top):]
            tar.extractall(FOLDER, members=members, filter="data")
    files = [p for p in FOLDER.rglob("*") if p.is_file()]
    print(f"{FOLDER}: {len(files)} files, {sum(p.stat().st_size for p in files) / 1e6:.1f} MB")


def folder() -> None:
    import pipekit

    if not FOLDER.exists():
        raise SystemExit(f"{FOLDER} is missing: python bench/one_letter.py --build")
    outs = {s: OUT / f"folder-{s}" for s in SETTINGS}
    wall = pipeline(outs["none"], [f"documents.input={FOLDER}", "indexing.single_letters=none",
                                   "retrieval.queries=[read a CSV file in R]", "retrieval.qrels=null"])
    print(f"folder indexed with single_letters none in {wall:.0f} s")
    # The same 01-03 outputs for the second index: only 04 and 05 differ, so only they rerun.
    if outs["capitals"].exists():
        shutil.rmtree(outs["capitals"])
    shutil.copytree(outs["none"], outs["capitals"])
    wall = pipeline(outs["capitals"], [f"documents.input={FOLDER}", "indexing.single_letters=capitals",
                                       "retrieval.queries=[read a CSV file in R]", "retrieval.qrels=null"])
    print(f"and with capitals in {wall:.0f} s (stages 04-05)")
    searchers = {s: pipekit.Searcher(outs[s]) for s in SETTINGS}
    for question, want in QUESTIONS:
        print(f"\n{question!r} (want {want})")
        for s in SETTINGS:
            hits = searchers[s].search(question, k=3)
            found = any(h.doc_id.startswith(want) for h in hits)
            print(f"  {s:<9} {'yes' if found else 'NO ':<4}" + " | ".join(f"{h.citation[:60]}" for h in hits))


def speed() -> None:
    import statistics

    import pyarrow as pa
    import pyarrow.compute as pc

    from pipekit.index.analyzer import Analyzer

    for name in ("scifact", "nfcorpus"):
        src = OUT / f"{name}-defaults-none"
        if not (src / "03_chunks.parquet").exists():
            raise SystemExit(f"{src} is missing: run python bench/one_letter.py first")
        walls = {s: [] for s in SETTINGS}
        for _ in range(5):
            for setting in SETTINGS:
                cmd = [sys.executable, "04_indexing.py", "--force", "--set", f"paths.output={src}",
                       "--set", f"indexing.single_letters={setting}"]
                t0 = time.perf_counter()
                subprocess.run(cmd, cwd=REPO, check=True, capture_output=True)
                walls[setting].append(time.perf_counter() - t0)
        print(f"stage 04 on {name}: " + ", ".join(f"{s} {statistics.median(w):.2f} s" for s, w in walls.items())
              + " (median of 5, process wall)")
    texts = pa.concat_arrays([pq.read_table(OUT / f"{n}-defaults-none" / "03_chunks.parquet", columns=["text"])
                              .column("text").combine_chunks() for n in ("scifact", "nfcorpus")])
    big = pa.concat_arrays([texts] * (200_000 // len(texts) + 1))[:200_000]
    ascii_share = pc.mean(pc.cast(pc.string_is_ascii(big), "int8")).as_py()
    print(f"analyzer over {len(big):,} passages ({pc.sum(pc.utf8_length(big)).as_py() / 1e6:.0f} M characters, "
          f"{ascii_share:.0%} pure ASCII), batches of 8,192:")
    for setting in SETTINGS:
        a, best = Analyzer(single_letters=setting), float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            words = []
            for i in range(0, len(big), 8192):
                runs, _ = a.runs(big[i:i + 8192])
                words.append(pc.unique(runs))
            a.terms_of_words(pc.unique(pa.concat_arrays(words)))
            best = min(best, time.perf_counter() - t0)
        print(f"  {setting:<9} {best:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--build", action="store_true", help="gather the folder (R's manuals, xarray's docs)")
    parser.add_argument("--folder", action="store_true", help="the folder's questions, top 3 each way")
    parser.add_argument("--speed", action="store_true", help="what capitals cost stage 04 and the analyzer")
    args = parser.parse_args()
    if args.speed:
        speed()
    elif args.build:
        build()
    elif args.folder:
        folder()
    else:
        collections(args.data)


if __name__ == "__main__":
    main()
