"""`python -m pipekit report`: the whole run on one page, `report.html` in `paths.output`.

People would rather look at a pipeline than read it.  The page shows:

1. the five stages as a diagram: fresh or stale (and why, against the config given
   now), rows in and out, how long each took and when it ran;
2. the distribution of chunk sizes, with the chunking budget (`target`, `max`) marked;
3. per-query metrics against the previous evaluated run (from `05_history.parquet`);
4. each query's top results with their citations, query terms marked;
5. what stage 01 did not read, by reason and by extension; the documents with the most
   chunks; BM25 alone or fused with a dense model (pipekit/tools/inventory.py).  Each
   stage's time is its last run's, said with when it ran and what it reused.

The file is self-contained: inline CSS and hand-made inline SVG charts, system fonts,
no script, nothing fetched from the network — it opens the same on a plane, in a mail
attachment or in a CI artifact.  It reads the stage outputs and writes only the report
(atomically, like every output).
"""
from __future__ import annotations

import argparse
import os
from datetime import datetime, timezone
from html import escape
from pathlib import Path

from pipekit.run import io
from pipekit.run.commands import add_common_args, parse_args, run_command
from pipekit.run.config import load_config
from pipekit.run.overrides import made_with_other_settings
from pipekit.run.errors import PipelineError
from pipekit.read.pages import cite_pages
from pipekit.cli import why_stale
from pipekit.tools.history import HISTORY, read_history, runs
from pipekit.tools.inventory import largest_section, not_read_section, ran, scoring_section
from pipekit.run.io import read_meta
from pipekit.run.stages import STAGES

REPORT = "report.html"
RESULTS_SHOWN = 5  # results per query on the page
FRESH, STALE, MISSING = "#2e7d32", "#e08a00", "#9e9e9e"
NOW, BEFORE = "#1f5fa8", "#b8c4d6"


# ---------------------------------------------------------------- what the page shows


def stage_rows(cfg: dict) -> list[dict]:
    """Per stage: label, state (fresh/stale/missing), reasons, rows in/out, seconds, when."""
    out_dir = Path(cfg["paths"]["output"])
    rows, upstream_stale = [], False
    for stage in STAGES:
        path = out_dir / stage.outputs[0]
        meta = read_meta(path) if path.exists() else None
        # Its own reasons, and its upstream's: the page should say everything a change does.
        reasons = why_stale(stage, cfg, out_dir)
        if upstream_stale:
            reasons.append(f"upstream stage {stage.number - 1:02d} is stale")
        state = "missing" if not path.exists() else ("stale" if reasons else "fresh")
        upstream_stale = upstream_stale or bool(reasons)
        n_out = io.row_count(path) if path.exists() else None
        rows.append({"stage": stage, "state": state, "reasons": reasons, "rows_out": n_out,
                     "seconds": duration(path, meta), "written": (meta or {}).get("written_at"),
                     "started": (meta or {}).get("started_at"), "reused": (meta or {}).get("reused")})
    for prev, row in zip(rows, rows[1:]):
        row["rows_in"] = prev["rows_out"]
    rows[0]["rows_in"] = None
    return rows


def duration(path: Path, meta: dict | None) -> float | None:
    """Seconds from the stage's start (recorded) to its output's last write (mtime)."""
    started = (meta or {}).get("started_at")
    if not started:
        return None
    end = max((p.stat().st_mtime for p in path.rglob("*") if p.is_file()), default=None) if path.is_dir() \
        else path.stat().st_mtime
    seconds = end - datetime.fromisoformat(started).timestamp()
    return seconds if seconds >= 0 else None


def chunk_sizes(out_dir: Path):
    """(n_words of every chunk, the chunking settings 03 recorded) or None."""
    path = out_dir / "03_chunks.parquet"
    if not path.exists():
        return None
    sizes = io.read_table(path, ["n_words", "n_chars"])
    config = (read_meta(path) or {}).get("inputs", {}).get("config", {})
    unit = config.get("chunking.unit", "words")
    column = "n_chars" if unit in ("chars", "tokens") else "n_words"
    values = sizes.column(column).to_numpy()
    if unit == "tokens":
        values = values / 4  # the budget's tokens are chars/4 (config.yaml)
    return values, config, unit


def top_results(out_dir: Path):
    """{query_id: (query, [result rows])} from 05_results.parquet, best first, and the
    analyzer the index recorded (to mark query terms in snippets)."""
    from pipekit.index.analyzer import Analyzer

    path = out_dir / "05_results.parquet"
    if not path.exists():
        return {}, None
    cols = ["query_id", "query", "rank", "score", "doc_id", "heading", "page_start", "page_end",
            "page_label_start", "page_label_end", "text"]
    if "fusion" in io.schema(path).names:  # hybrid results explained: each hit's BM25 and cosine (pipekit/retrieve/fusion.py)
        cols.append("fusion")
    if "link" in io.schema(path).names:  # where each passage opens (pipekit/retrieve/links.py): the citation's href
        cols.append("link")
    by_q: dict[str, tuple[str, list[dict]]] = {}
    for r in io.read_table(path, cols).to_pylist():
        entry = by_q.setdefault(r["query_id"], (r["query"], []))
        if r["rank"] <= RESULTS_SHOWN:
            entry[1].append(r)
    terms = read_meta(out_dir / "04_terms.parquet") if (out_dir / "04_terms.parquet").exists() else None
    analyzer = Analyzer.from_settings(terms["corpus"]["analyzer"]) if terms and "corpus" in terms else None
    return by_q, analyzer


# ---------------------------------------------------------------- drawing (SVG by hand)


def svg_pipeline(stages: list[dict]) -> str:
    w, h, box, gap = 1000, 150, 160, 37
    parts = [f'<svg class="pipeline" viewBox="0 0 {w} {h}" width="100%" role="img" '
             f'aria-label="the five stages, fresh or stale" xmlns="http://www.w3.org/2000/svg">']
    for i, s in enumerate(stages):
        x = 10 + i * (box + gap)
        color = {"fresh": FRESH, "stale": STALE, "missing": MISSING}[s["state"]]
        rows_in = "" if s["rows_in"] is None else f"{s['rows_in']:,} → "
        rows = "no output" if s["rows_out"] is None else f"{rows_in}{s['rows_out']:,} rows"
        secs = "" if s["seconds"] is None else f"{s['seconds']:.2f} s"
        parts.append(
            f'<g class="stage" data-state="{s["state"]}"><rect x="{x}" y="20" width="{box}" height="110" rx="10" '
            f'fill="#fff" stroke="{color}" stroke-width="3"/>'
            f'<rect x="{x}" y="20" width="{box}" height="30" rx="10" fill="{color}"/>'
            f'<rect x="{x}" y="40" width="{box}" height="10" fill="{color}"/>'
            f'<text x="{x + box / 2}" y="41" text-anchor="middle" fill="#fff" font-weight="bold">'
            f'{escape(s["stage"].label)}</text>'
            f'<text x="{x + box / 2}" y="74" text-anchor="middle">{escape(rows)}</text>'
            f'<text x="{x + box / 2}" y="96" text-anchor="middle" fill="#555">{escape(secs)}</text>'
            f'<text x="{x + box / 2}" y="118" text-anchor="middle" fill="{color}" font-weight="bold">'
            f'{s["state"]}</text></g>')
        if i < len(stages) - 1:
            ax = x + box + 4
            parts.append(f'<path d="M{ax} 75 h{gap - 14} m-8 -6 l8 6 l-8 6" fill="none" stroke="#444" '
                         f'stroke-width="2"/>')
    parts.append("</svg>")
    return "".join(parts)


def svg_histogram(values, marks: dict[str, float], unit: str) -> str:
    import numpy as np

    w, h, left, bottom, top = 1000, 260, 60, 40, 20
    hi = max(float(values.max()) if len(values) else 1.0, *marks.values(), 1.0)
    bins = np.linspace(0, hi * 1.02, 41)
    counts, _ = np.histogram(values, bins=bins)
    peak = max(int(counts.max()) if len(counts) else 1, 1)
    sx = lambda v: left + (w - left - 20) * v / bins[-1]
    sy = lambda c: h - bottom - (h - bottom - top) * c / peak
    parts = [f'<svg class="histogram" viewBox="0 0 {w} {h}" width="100%" role="img" '
             f'aria-label="chunk sizes" xmlns="http://www.w3.org/2000/svg">',
             f'<line x1="{left}" y1="{h - bottom}" x2="{w - 20}" y2="{h - bottom}" stroke="#444"/>']
    for c, a, b in zip(counts.tolist(), bins[:-1], bins[1:]):
        if c:
            parts.append(f'<rect x="{sx(a):.1f}" y="{sy(c):.1f}" width="{max(sx(b) - sx(a) - 1, 1):.1f}" '
                         f'height="{h - bottom - sy(c):.1f}" fill="{NOW}"><title>{a:.0f}–{b:.0f} {unit}: '
                         f'{c} chunks</title></rect>')
    for t in np.linspace(0, bins[-1], 6):
        parts.append(f'<text x="{sx(t):.1f}" y="{h - bottom + 18}" text-anchor="middle" font-size="12">{t:.0f}</text>')
    parts.append(f'<text x="{(w + left) / 2}" y="{h - 4}" text-anchor="middle" font-size="13">chunk size ({unit})</text>')
    parts.append(f'<text x="{left - 8}" y="{top + 10}" text-anchor="end" font-size="12">{peak}</text>')
    for name, v in marks.items():
        right_side = sx(v) > w - 120  # label on the line's left where the right edge would cut it
        parts.append(f'<line x1="{sx(v):.1f}" y1="{top}" x2="{sx(v):.1f}" y2="{h - bottom}" stroke="{STALE}" '
                     f'stroke-dasharray="5 4" stroke-width="2"/><text x="{sx(v) + (-4 if right_side else 4):.1f}" '
                     f'y="{top + 12}" text-anchor="{"end" if right_side else "start"}" font-size="12" '
                     f'fill="{STALE}">{escape(name)} {v:g}</text>')
    parts.append("</svg>")
    return "".join(parts)


def svg_query_bars(rows: list[tuple[str, float | None, float]], metric: str) -> str:
    """One row per query: the previous run's value (pale) behind this run's (dark)."""
    line, left, right = 24, 70, 130
    w, h = 1000, 30 + line * len(rows)
    sx = lambda v: left + (w - left - right) * v
    parts = [f'<svg class="queries" viewBox="0 0 {w} {h}" width="100%" role="img" '
             f'aria-label="{escape(metric)} per query" xmlns="http://www.w3.org/2000/svg">']
    for t in (0, 0.25, 0.5, 0.75, 1):
        parts.append(f'<line x1="{sx(t):.1f}" y1="6" x2="{sx(t):.1f}" y2="{h - 20}" stroke="#ddd"/>'
                     f'<text x="{sx(t):.1f}" y="{h - 6}" text-anchor="middle" font-size="11">{t:g}</text>')
    for i, (qid, before, now) in enumerate(rows):
        y = 10 + i * line
        parts.append(f'<text x="{left - 8}" y="{y + 14}" text-anchor="end" font-size="12">{escape(qid)}</text>')
        if before is not None:
            parts.append(f'<rect x="{left}" y="{y}" width="{sx(before) - left:.1f}" height="18" fill="{BEFORE}">'
                         f'<title>previous run: {before:.4f}</title></rect>')
        parts.append(f'<rect x="{left}" y="{y + 5}" width="{sx(now) - left:.1f}" height="8" fill="{NOW}">'
                     f'<title>this run: {now:.4f}</title></rect>')
        delta = "" if before is None else f" ({now - before:+.3f})"
        color = "#333" if before is None or abs(now - before) < 1e-9 else ("#2e7d32" if now > before else "#c62828")
        parts.append(f'<text x="{w - right + 8}" y="{y + 14}" font-size="12" fill="{color}">{now:.3f}{delta}</text>')
    parts.append("</svg>")
    return "".join(parts)


# ---------------------------------------------------------------- the page


CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2em auto;
       max-width: 1060px; padding: 0 1em; color: #222; line-height: 1.45; }
h1 { margin-bottom: 0.1em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; }
.meta { color: #666; margin-top: 0; }
svg text { font-family: system-ui, sans-serif; font-size: 14px; }
table { border-collapse: collapse; margin: 0.6em 0; }
td, th { padding: 0.25em 0.7em; border-bottom: 1px solid #eee; text-align: left; vertical-align: top; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.up { color: #2e7d32; } .down { color: #c62828; }
details { margin: 0.4em 0; } summary { cursor: pointer; font-weight: 600; }
ol.results li { margin: 0.5em 0; } .cite { font-weight: 600; } .score { color: #666; }
.rel { background: #d8f0d8; color: #1a5e1a; border-radius: 3px; padding: 0 0.3em; font-size: 0.85em; }
.snippet { color: #333; } mark { background: #fff0a8; padding: 0 1px; }
ul.why { margin: 0.2em 0 0 0; color: #555; }
"""


def stage_section(stages: list[dict]) -> str:
    items = []
    for s in stages:
        when = ran(s)
        why = "".join(f"<li>{escape(r)}</li>" for r in s["reasons"])
        items.append(f"<li><b>{escape(s['stage'].label)}</b> — {s['state']}{when}"
                     + (f'<ul class="why">{why}</ul>' if why and s["state"] != "missing" else "") + "</li>")
    return (f"<h2>The pipeline</h2>{svg_pipeline(stages)}"
            f"<p>Fresh: its output matches its config, code and upstream now; stale: "
            f"<code>python run_pipeline.py</code> would rerun it, for the reason given.  The times are those "
            f"of the last run of each stage: a fresh stage is skipped, and keeps the time of the run that "
            f"made its output.</p><ul>{''.join(items)}</ul>")


def chunk_section(out_dir: Path) -> str:
    found = chunk_sizes(out_dir)
    if found is None:
        return "<h2>Chunk sizes</h2><p>No 03_chunks.parquet yet.</p>"
    import numpy as np

    values, config, unit = found
    marks = {k: config[f"chunking.{k}"] for k in ("target", "max") if f"chunking.{k}" in config}
    strategy = config.get("chunking.strategy", "?")
    if not len(values):
        return "<h2>Chunk sizes</h2><p>03_chunks.parquet holds no chunks.</p>"
    stats = (f"{len(values):,} chunks ({escape(str(strategy))} strategy); median {np.median(values):.0f}, "
             f"mean {values.mean():.0f}, largest {values.max():.0f} {unit}")
    return f"<h2>Chunk sizes</h2><p>{stats}.</p>{svg_histogram(values, marks, unit)}"


def metrics_section(out_dir: Path, results_fp: str | None) -> str:
    all_runs = runs(read_history(out_dir))
    if not all_runs:
        return ("<h2>Metrics</h2><p>No evaluated run yet: stage 05 computes metrics when "
                "<code>retrieval.qrels</code> names judgements, and keeps each run in "
                f"{HISTORY}.</p>")
    now = all_runs[-1]
    before = all_runs[-2] if len(all_runs) > 1 else None
    metrics = now.metrics
    head = "".join(f'<th class="num">{escape(m)}</th>' for m in metrics)
    note = ""
    if results_fp and now.fingerprint != results_fp:
        note = ("<p><b>Note:</b> the last evaluated run is not the one that wrote 05_results.parquet "
                "(stage 05 has run since without judgements, or with judgements of none of its index's "
                "documents: its summary says which).</p>")
    compared = (f"run {now.number} against run {before.number}" if before else f"run {now.number}, the first")
    changes = "".join(f"<li><code>{escape(c)}</code></li>" for c in now.changed)
    body = [f"<h2>Metrics</h2><p>{compared} in {HISTORY}"
            + (f"; config changed:</p><ul>{changes}</ul>" if changes else ".</p>") + note]

    def cell(q, m):
        v, b = now.value(q, m), before.value(q, m) if before else None
        if v is None:
            return '<td class="num">—</td>'
        d = "" if b is None else f' <span class="{"up" if v > b + 1e-9 else "down" if v < b - 1e-9 else ""}">' \
                                 f'({v - b:+.3f})</span>'
        return f'<td class="num">{v:.3f}{d}</td>'

    queries = [q for q in dict.fromkeys(q for q, _ in now.values) if q != "all"]
    rows = [f"<tr><td><b>all</b></td><td>(mean)</td>{''.join(cell('all', m) for m in metrics)}</tr>"]
    rows += [f"<tr><td>{escape(q)}</td><td>{escape(now.queries.get(q, ''))}</td>"
             f"{''.join(cell(q, m) for m in metrics)}</tr>" for q in queries]
    first = metrics[0]
    bars = [(q, before.value(q, first) if before else None, now.value(q, first)) for q in queries]
    legend = (f"<p>{escape(first)} per query: dark bar this run"
              + (", pale bar the previous run" if before else "") + ".</p>")
    body.append(legend + svg_query_bars(bars, first))
    body.append(f"<table><tr><th>query</th><th></th>{head}</tr>{''.join(rows)}</table>")
    return "".join(body)


def judgements(cfg: dict) -> dict[str, dict[str, int]]:
    """The judgements stage 05 scores with (retrieval.qrels; {} without), so the page can mark
    the shown passages they count: a query's nDCG@10 means little until a reader sees
    which of its results were the relevant ones."""
    from pipekit.retrieve.queries import load_qrels

    try:
        return load_qrels(cfg["retrieval"]["qrels"]) if cfg["retrieval"]["qrels"] else {}
    except PipelineError:  # stage 05 says what is wrong with the file; the page goes on without marks
        return {}


def relevance_mark(grade: int | None) -> str:
    return f' <span class="rel">relevant ({grade})</span>' if grade else ""


def fusion_parts(f: dict | None) -> str:
    """A hybrid hit's two scores beside the fused one, as stage 05 --explain recorded them."""
    return f" (fused: bm25 {f['bm25']:.3f}, cosine {f['cosine']:.3f}, weight {f['dense_weight']:.2f})" if f else ""


def results_section(out_dir: Path, judged: dict[str, dict[str, int]] | None = None, input_dir=None) -> str:
    from pipekit.retrieve.links import file_href
    from pipekit.retrieve.search import snippet

    judged = judged or {}

    by_q, analyzer = top_results(out_dir)
    if not by_q:
        return "<h2>Top results</h2><p>No 05_results.parquet yet.</p>"
    parts = [f"<h2>Top results</h2><p>The best {RESULTS_SHOWN} passages of each query, as stage 05 "
             f"ranked them; query terms are marked as the index matched them (stemmed)"
             + (", and <span class=\"rel\">relevant (grade)</span> marks a passage whose document the "
                "judgements (retrieval.qrels) count, as the metrics above do" if judged else "") + ".</p>"]
    for i, (qid, (query, hits)) in enumerate(by_q.items()):
        terms = set(analyzer.analyze(query)) if analyzer else set()
        items = []
        for r in hits:
            pages = cite_pages(r["page_start"], r["page_end"], r["page_label_start"], r["page_label_end"])
            cite = r["doc_id"] + (f" › {r['heading']}" if r["heading"] else "") + (f", {pages}" if pages else "")
            snip = (snippet(r["text"], terms, analyzer, mark=lambda w: f"<mark>{escape(w)}</mark>", plain=escape)
                    if analyzer else escape(r["text"][:200]))
            grade = judged.get(qid, {}).get(r["doc_id"])
            cite_html = f'<span class="cite">{escape(cite)}</span>'
            if r.get("link"):  # the citation opens the passage: its heading's anchor, its PDF page
                cite_html = f'<a href="{escape(file_href(r["link"], input_dir))}">{cite_html}</a>'
            items.append(f'<li>{cite_html} <span class="score">'
                         f'score {r["score"]:.3f}{fusion_parts(r.get("fusion"))}</span>{relevance_mark(grade)}<br><span class="snippet">{snip}</span></li>')
        parts.append(f"<details{' open' if i < 2 else ''}><summary>[{escape(qid)}] {escape(query)}</summary>"
                     f'<ol class="results">{"".join(items)}</ol></details>')
    return "".join(parts)


def render(cfg: dict, note: str | None = None) -> str:
    """The page; `note`: the outputs were made with other settings (made_with_other_settings),
    said at the top, since a page opened later shows every stage stale with no terminal beside it."""
    out_dir = Path(cfg["paths"]["output"])
    stages = stage_rows(cfg)
    if all(s["state"] == "missing" for s in stages):
        raise PipelineError(f"nothing to report in {out_dir}: run `python run_pipeline.py` first")
    results = out_dir / "05_results.parquet"
    results_fp = (read_meta(results) or {}).get("fingerprint") if results.exists() else None
    made = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>pipekit report — {escape(str(out_dir))}</title><style>{CSS}</style></head><body>"
            f"<h1>pipekit report</h1><p class=\"meta\">{escape(str(out_dir))} · made {made}</p>"
            + (f'<p class="other-settings"><strong>{escape(note)}</strong></p>' if note else "") +
            f"{stage_section(stages)}{not_read_section(out_dir)}{chunk_section(out_dir)}{largest_section(out_dir)}"
            f"{scoring_section(out_dir)}{metrics_section(out_dir, results_fp)}"
            f"{results_section(out_dir, judgements(cfg), cfg['documents']['input'])}</body></html>\n")


def write_report(cfg: dict, path: Path | None = None, note: str | None = None) -> Path:
    """Render the report and write it atomically (temp file, then rename)."""
    target = Path(path) if path else Path(cfg["paths"]["output"]) / REPORT
    page = render(cfg, note)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(page, encoding="utf-8")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipekit report", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=None, metavar="FILE", help=f"where to write (default: paths.output/{REPORT})")
    add_common_args(parser)
    args = parse_args(parser, argv)

    def body():
        cfg = load_config(args.config, args.overrides)
        # Outputs made with settings these options do not give (a forgotten --set or
        # --config, or config.yaml edited since): the report shows each stage stale against
        # these settings, which is what it is for when the change was meant.  So it is
        # written, and the page says why at its top (the terminal's note used to be the only
        # word, gone once the page was opened later).  What it replaces is no loss: a report
        # is made from the outputs, and the right options make that one again.
        note = made_with_other_settings(cfg, args.overrides)
        path = write_report(cfg, args.out, note)
        print(f"report: {path} ({path.stat().st_size:,} bytes; open it in a browser)")
        if note:
            print(note + "; the report says so at its top")

    return run_command("report", body)
