"""`python -m pipekit report`: one self-contained HTML page, rendered by a real browser."""
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pyarrow.parquet as pq
import pytest

from pipekit.run.io import read_meta

from pipekit.tools.report import REPORT

from conftest import run_script

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# As root a sandbox is unavailable; and nothing may reach the network (the page must not need it).
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--host-resolver-rules=MAP * ~NOTFOUND"]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """The sample run with the default settings, then with chunking.target=200."""
    out = tmp_path_factory.mktemp("report") / "out"
    run_script("run_pipeline.py", "--set", f"paths.output={out}")
    run_script("run_pipeline.py", "--set", f"paths.output={out}", "--set", "chunking.target=200")
    return out


class Page(HTMLParser):
    """Tags, attributes and text of a page, enough to check what it shows."""

    def __init__(self, html):
        super().__init__()
        self.tags, self.text = [], []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def all(self, tag, **attrs):
        return [a for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items())]

    @property
    def words(self):
        return " ".join(" ".join(self.text).split())


def report(out, *args):
    proc = run_script("-m", "pipekit", "report", "--set", f"paths.output={out}", *args)
    path = out / REPORT
    assert f"report: {path}" in proc.stdout
    return path.read_text(encoding="utf-8")


def test_the_page_shows_stages_chunk_sizes_metrics_and_results(two_runs):
    page = Page(report(two_runs, "--set", "chunking.target=200"))
    stages = page.all("g", **{"class": "stage"})
    assert [s["data-state"] for s in stages] == ["fresh"] * 5
    for label in ("01_documents", "02_preprocessing", "03_chunking", "04_indexing", "05_retrieval"):
        assert label in page.words
    n_chunks = pq.ParquetFile(two_runs / "03_chunks.parquet").metadata.num_rows
    assert f"{n_chunks:,} chunks (heading strategy)" in page.words
    assert f"15 → {n_chunks} rows" in page.words  # rows in and out of stage 03
    pipeline_svg = re.search(r'<svg class="pipeline".*?</svg>', report(two_runs, "--set", "chunking.target=200"), re.S)
    assert len(re.findall(r">\d+\.\d\d s<", pipeline_svg.group(0))) == 5  # each stage's time
    # the histogram's bars count every chunk once
    bars = re.findall(r"<title>\d+–\d+ words: (\d+) chunks</title>", report(two_runs, "--set", "chunking.target=200"))
    assert sum(map(int, bars)) == n_chunks
    assert "target 200" in page.words
    # metrics: this run against the previous one, with the config change named
    assert "run 2 against run 1" in page.words and "chunking.target: 400 -> 200" in page.words
    m = pq.read_table(two_runs / "05_metrics.parquet").to_pandas()
    mean = m[(m.query_id == "all") & (m.metric == "nDCG@10")].value.iloc[0]
    assert f"{mean:.3f}" in page.words
    assert len(page.all("svg", **{"class": "queries"})) == 1
    # every query's top results, cited
    results = pq.read_table(two_runs / "05_results.parquet").to_pandas()
    for q in results["query"].unique():
        assert q in page.words
    assert "handbook/operations/deploys.md › Deploying Lighthouse › Change freezes" in page.words
    assert len(page.all("mark")) > 20


def test_the_page_says_what_was_not_read_how_it_scores_and_whose_times_it_shows(two_runs):
    page = Page(report(two_runs, "--set", "chunking.target=200"))
    # The sample's one file not read: its truncated PDF, by reason and by extension.
    files = pq.ParquetFile(two_runs / "01_documents.parquet").metadata.num_rows
    assert f"1 of {files} files were not read: 0 skipped" in page.words
    assert "failed: corrupt PDF 1 field-guide-2023.pdf" in page.words and ".pdf 1 field-guide-2023.pdf" in page.words
    assert "BM25 only (indexing.dense_model: null" in page.words
    n = pq.ParquetFile(two_runs / "03_chunks.parquet").metadata.num_rows
    assert "1 tables/incidents.csv " in page.words and f"Their share of all {n:,} chunks" in page.words
    # 01 ran once (the second run found it fresh); 03 ran again, later, for target 200.  The
    # page shows whole seconds, and two runs of the sample can fall in the same one: the
    # order is checked on the outputs' own start times, and the page shows those times.
    times = dict(re.findall(r"(\d\d_\w+) — fresh, ran (\S+ \S+) UTC", page.words))
    started = {name: read_meta(two_runs / f"{out}.parquet")["started_at"]
               for name, out in (("01_documents", "01_documents"), ("03_chunking", "03_chunks"))}
    assert started["01_documents"] < started["03_chunking"]
    assert len(times) == 5 and all(times[n] == started[n].replace("T", " ")[:19] for n in started)
    assert "The times are those of the last run of each stage" in page.words


def test_stale_stages_say_why(two_runs):
    page = Page(report(two_runs, "--set", "indexing.k1=1.5"))  # also back to target 400: 03 stale
    states = [s["data-state"] for s in page.all("g", **{"class": "stage"})]
    assert states == ["fresh", "fresh", "stale", "stale", "stale"]
    assert "config chunking.target changed: 200 -> 400" in page.words
    assert "config indexing.k1 changed: 1.2 -> 1.5" in page.words


def test_the_page_needs_no_network(two_runs):
    html = report(two_runs)
    assert not re.search(r"<script|<link|<img|<iframe|@import|url\(", html, re.I)
    # the only URL is SVG's namespace name, which nothing fetches
    assert set(re.findall(r"https?://[^\s\"'<>]+", html)) <= {"http://www.w3.org/2000/svg"}
    assert "<style>" in html and html.count("<svg") == 3


def test_nothing_to_report_is_one_line(tmp_path):
    proc = run_script("-m", "pipekit", "report", "--set", f"paths.output={tmp_path / 'none'}", check=False)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert "run `python run_pipeline.py` first" in proc.stderr


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get install -y chromium); "
                                             "the page is checked without a browser by the other tests")
def test_chromium_renders_the_report(two_runs, tmp_path):
    html_path = two_runs / REPORT
    report(two_runs, "--set", "chunking.target=200")  # the last run's settings: every stage fresh
    url = html_path.as_uri()

    def chromium(*args):
        profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"  # a fresh profile each time
        return subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, url],
                              capture_output=True, text=True, timeout=120)

    dom = chromium("--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = Page(dom.stdout)  # the DOM as the browser built it
    assert len(page.all("svg")) == 3
    assert [s["data-state"] for s in page.all("g", **{"class": "stage"})] == ["fresh"] * 5
    assert "when is the change freeze" in page.words and "Change freezes" in page.words
    shot = tmp_path / "report.png"
    proc = chromium("--screenshot=" + str(shot), "--window-size=1200,2400")
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-2000:]
    from PIL import Image

    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 2400)
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50  # drawn: text, boxes and bars, not a blank page
    counts = {c: n for n, c in colours}
    blue = sum(n for (r, g, b), n in counts.items() if b > 140 and r < 60 and 70 < g < 120)  # the bars' #1f5fa8
    green = sum(n for (r, g, b), n in counts.items() if g > 100 and r < 70 and b < 70)  # "fresh" boxes' #2e7d32
    assert blue > 2000 and green > 2000
