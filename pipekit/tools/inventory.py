"""The report's account of what the index holds and what it left out.

`python -m pipekit report` (pipekit/tools/report.py) shows how the run went; this module
gives it three answers a person asks of a real folder before trusting a search over it:

1. **What was not read**: stage 01's `skipped` and `error` rows, grouped by reason (the
   kinds stage 01's summary counts) and by file extension, each with its count and its
   first few paths.  "Why is my file not found?" is answered here first, without opening
   01_documents.parquet.
2. **Which documents make the index**: the ten with the most chunks, with their share
   of all chunks (one log can be most of an index: pipekit/chunk/shares.py).
3. **How it scores**: BM25 only, or fused with a dense model's cosine, with the model
   stage 04 embedded with and the weight stage 05 used (as their outputs recorded them:
   the config of the last run, not the one on disk now).

Deliberately not done: reading anything but the outputs' columns and metadata, or
judging; the reasons are stage 01's own words, matched to their kinds, never re-derived
from the files.
"""
from __future__ import annotations

from collections import defaultdict
from html import escape
from pathlib import Path, PurePosixPath

from pipekit.read.walk import SKIP_REASONS
from pipekit.run import io
from pipekit.run.io import read_meta

SHOWN = 3  # paths named per group
TOP = 10  # documents listed by chunk count

# Stage 01's `error` text of a skipped row, by a phrase it always holds -> its kind in
# SKIP_REASONS (stage 01 counts the kinds from the walk; the rows keep only the words).
_KIND_PHRASES = (
    ("same bytes as ", "copy"),
    ("same file as ", "duplicate"),
    ("already read as ", "duplicate"),
    ("build output, not a document", "build"),
    ("part of a test suite, not documentation", "tests"),
    ("outside documents.input", "outside"),
    ("documents.max_bytes", "too large"),
    ("hidden ", "hidden"),
    ("documents.exclude", "excluded"),
    ("documents.include", "excluded"),
    ("is not supported", "unknown format"),
    ("no file extension and the content is not text", "unknown format"),
    ("dangling symlink", "link"),
    ("symlink loop", "link"),
    ("not a regular file", "other"),
    (".jsonl file inside a folder", "other"),
)


def why_not_read(status: str, error: str | None) -> str:
    """The group a row that was not read falls in: for `skipped`, its kind as stage 01's
    summary words it; for `error`, the problem's name (the message up to its first colon:
    `corrupt PDF`, `binary file`, `cannot read file`)."""
    text = error or ""
    if status == "skipped":
        for phrase, kind in _KIND_PHRASES:
            if phrase in text:
                return f"skipped: {SKIP_REASONS[kind]}"
        return "skipped: " + (text.split(":")[0] or "no reason given")
    return "failed: " + (text.split(":")[0].strip() or "no message")


def extension(doc_id: str) -> str:
    return PurePosixPath(doc_id).suffix.lower() or "(none)"


def not_read(out_dir: Path) -> dict | None:
    """Stage 01's rows that were not read, grouped: {"total": rows, "skipped": n, "failed": n,
    "by_reason": [(reason, count, first paths)], "by_extension": [...]}, most first; None
    without a stage-01 output."""
    path = out_dir / "01_documents.parquet"
    if not path.exists():
        return None
    import pyarrow.compute as pc

    table = io.read_table(path, ["doc_id", "status", "error"])
    rows = table.filter(pc.not_equal(table.column("status"), "ok")).to_pylist()
    # Counts and the first paths only: a folder can skip a hundred thousand files.
    by_reason: dict[str, list] = defaultdict(lambda: [0, []])
    by_ext: dict[str, list] = defaultdict(lambda: [0, []])
    for r in rows:
        for group in (by_reason[why_not_read(r["status"], r["error"])], by_ext[extension(r["doc_id"])]):
            group[0] += 1
            if len(group[1]) < SHOWN:
                group[1].append(r["doc_id"])

    def groups(d):
        return [(k, n, first) for k, (n, first) in sorted(d.items(), key=lambda kv: (-kv[1][0], kv[0]))]

    skipped = sum(r["status"] == "skipped" for r in rows)
    return {"total": table.num_rows, "skipped": skipped, "failed": len(rows) - skipped,
            "by_reason": groups(by_reason), "by_extension": groups(by_ext)}


def largest(out_dir: Path, top: int = TOP) -> tuple[int, list[tuple[str, int]]] | None:
    """(all chunks, [(doc_id, chunks)] of the `top` documents with the most), or None."""
    path = out_dir / "03_chunks.parquet"
    if not path.exists():
        return None
    import pyarrow.compute as pc

    ids = io.read_table(path, ["doc_id"]).column("doc_id")
    counts = pc.value_counts(ids).to_pylist()
    ranked = sorted(((c["values"], c["counts"]) for c in counts), key=lambda dc: (-dc[1], dc[0]))
    return len(ids), ranked[:top]


def scoring(out_dir: Path) -> str | None:
    """How the last run scored: "BM25 only", or the dense model and weight fused with it."""
    index, results = out_dir / "04_chunks.parquet", out_dir / "05_results.parquet"
    if not index.exists():
        return None
    model = ((read_meta(index) or {}).get("inputs", {}).get("config", {})).get("indexing.dense_model")
    if not model:
        return "BM25 only (indexing.dense_model: null: stage 04 made no vectors)"
    weight = None
    if results.exists():
        weight = (read_meta(results) or {}).get("inputs", {}).get("config", {}).get("retrieval.dense_weight")
    if weight is None:
        from pipekit.retrieve.fusion import default_weight

        weight, said = default_weight(model), "the model's default"
    else:
        said = "retrieval.dense_weight"
    if not weight:
        return f"BM25 only: the index has {model} vectors, but retrieval.dense_weight is 0"
    return (f"BM25 fused with the cosine of dense vectors: model {model} (indexing.dense_model, as stage 04 "
            f"embedded), weight {weight:g} ({said}, as stage 05 ran)")


# ---------------------------------------------------------------- HTML


def _group_table(title: str, groups: list) -> str:
    rows = "".join(f'<tr><td>{escape(k)}</td><td class="num">{n:,}</td><td>'
                   + ", ".join(f"<code>{escape(p)}</code>" for p in paths)
                   + (", …" if n > len(paths) else "") + "</td></tr>" for k, n, paths in groups)
    return f'<table class="notread"><tr><th>{escape(title)}</th><th class="num">files</th><th>first paths</th></tr>{rows}</table>'


def not_read_section(out_dir: Path) -> str:
    found = not_read(out_dir)
    if found is None:
        return "<h2>Not read</h2><p>No 01_documents.parquet yet.</p>"
    head = "<h2>Not read</h2>"
    if not found["by_reason"]:
        return head + f"<p>All {found['total']:,} files were read: none skipped, none failed.</p>"
    n = found["skipped"] + found["failed"]
    return (head + f"<p>{n:,} of {found['total']:,} files were not read: {found['skipped']:,} skipped "
            f"(on purpose, for the reason given), {found['failed']:,} failed (could not be read). "
            "Every one has its row in 01_documents.parquet (<code>status != 'ok'</code>), "
            "its reason in <code>error</code>.</p>"
            + _group_table("by reason", found["by_reason"]) + _group_table("by extension", found["by_extension"]))


def largest_section(out_dir: Path) -> str:
    found = largest(out_dir)
    if not found or not found[0]:
        return ""
    total, top = found
    rows = "".join(f'<tr><td class="num">{i}</td><td><code>{escape(d)}</code></td><td class="num">{n:,}</td>'
                   f'<td class="num">{100 * n / total:.1f} %</td></tr>' for i, (d, n) in enumerate(top, 1))
    return (f"<h3>Documents with the most chunks</h3><p>Their share of all {total:,} chunks: a document "
            "with a large share sets the statistics (df, avgdl) every score uses.</p>"
            f'<table class="largest"><tr><th class="num">#</th><th>document</th><th class="num">chunks</th>'
            f'<th class="num">share</th></tr>{rows}</table>')


def scoring_section(out_dir: Path) -> str:
    said = scoring(out_dir)
    if said is None:
        return ""
    return f'<h2>Scoring</h2><p class="scoring">{escape(said)}.</p>'


def ran(stage: dict) -> str:
    """When a stage's output was made and what that run reused, for the report's stage list:
    `, ran 2026-12-05 00:10:02 UTC for 0.27 s (incremental: reused 16 of 18 files)`.  The
    times are those of the run that wrote the output: a later run that found the stage
    fresh skipped it, and left its time as it was."""
    started = stage.get("started")
    if not started:
        return f", written {escape(stage['written'])}" if stage.get("written") else ""
    when = started.replace("T", " ").split(".")[0].replace("+00:00", "") + " UTC"
    secs = "" if stage.get("seconds") is None else f" for {stage['seconds']:.2f} s"
    reused = stage.get("reused") or {}
    how = ""
    if reused.get("of"):
        how = (f" (incremental: reused {reused['n']:,} of {reused['of']:,} {reused['unit']})" if reused["n"]
               else " (everything made anew)")
    return f", ran {escape(when)}{secs}{escape(how)}"
