"""Fingerprints: what a stage's output was made from, and whether that is still true.

A stage's *inputs record* is four things: the values of its config section, the
fingerprint of its upstream output (stage 01: the listing of the input files with their
content hashes — pipekit/run/incremental.py keeps sizes and times only to know which files
need hashing again; stage 05 adds the queries and qrels files), and a hash of its code.  The output's fingerprint is the hash of that record, written into the
output's metadata.  A rerun with the same inputs gets the same fingerprint, so the
stages after it stay fresh: `--set indexing.k1=1.5` reruns 04 and 05, nothing else.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from pipekit.run.hashing import code_hash, digest, file_hash
from pipekit.run.incremental import describe_changes, keys_of, read_listing
from pipekit.run.io import read_meta
from pipekit.run.overrides import as_yaml
from pipekit.run.stages import Stage


def _file_stamp(path: Path) -> dict:
    """A small file's content hash: a queries file saved unchanged is not a change."""
    try:
        return {"file": str(path), "hash": file_hash(path)}
    except OSError:
        return {"file": str(path), "missing": True}


def external_inputs(stage: Stage, cfg: dict, listing: dict | None = None, model: dict | None = None):
    """What a stage reads from outside the pipeline's own outputs, as a stamp: stage 01's
    files by content (so `touch` or a fresh checkout changes nothing), stage 04's model
    (`model`: its name and files' hashes, pipekit/index/dense.py's `identity`), stage 05's
    queries and qrels files.

    The walk (`listing`) and the model's identity are the stages' own machinery, so the
    caller (pipekit/cli.py) brings them: the plumbing here only compares."""
    if stage.number == 1:
        if listing is None:
            return {"missing": str(cfg["documents"]["input"])}
        return digest(keys_of(listing))
    if stage.number == 5:
        sec = cfg["retrieval"]
        stamps = []
        if isinstance(sec["queries"], str):
            stamps.append(_file_stamp(Path(sec["queries"])))
        if sec["qrels"]:
            stamps.append(_file_stamp(Path(sec["qrels"])))
        return stamps
    if stage.number == 4 and cfg["indexing"].get("dense_model"):
        return model  # another model, or the same folder with other weights, makes 04 stale
    return None


# Keys kept in one section for the reader of config.yaml but read by a later stage: recorded
# by that stage, not by their section's.  `documents.link_base` only shapes stage 05's links;
# recorded by stage 01, changing a URL would read every document again.
READ_BY = {"documents.link_base": 5}


def config_record(stage: Stage, cfg: dict) -> dict:
    """The config values a stage's output depends on: its section's, less READ_BY's, plus those READ_BY gives it."""
    own = {f"{stage.section}.{k}": v for k, v in cfg[stage.section].items() if READ_BY.get(f"{stage.section}.{k}") is None}
    for name, number in READ_BY.items():
        section, _, key = name.partition(".")
        if number == stage.number and key in cfg.get(section, {}):
            own[name] = cfg[section][key]
    return own


def inputs_record(stage: Stage, cfg: dict, upstream_fingerprint: str | None, listing: dict | None = None,
                  model: dict | None = None) -> dict:
    return {
        "config": config_record(stage, cfg),
        "upstream": upstream_fingerprint,
        "external": external_inputs(stage, cfg, listing, model),
        "code": code_hash(stage),
    }


def recorded_fingerprint(path: Path) -> str | None:
    meta = read_meta(path) if path.exists() else None
    return meta.get("fingerprint") if meta else None


def why_stale(stage: Stage, cfg: dict, output_dir: Path, walk: Callable[[Path], tuple] | None = None,
              model: dict | None = None) -> list[str]:
    """Reasons the stage must run (empty list: it is fresh). Upstream staleness is the caller's.

    `walk(previous listing)`: stage 01's walk of its input folder, called only when stage 01's
    outputs are there to compare with; `model`: stage 04's model identity.  Both are the
    stages' machinery, which the caller brings (pipekit/cli.py's `why_stale`)."""
    paths = [output_dir / name for name in stage.outputs]
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        return [f"output missing: {', '.join(missing)}"]
    metas = [read_meta(p) for p in paths]
    if any(m is None for m in metas):
        return ["output has no provenance record"]
    if len({m.get("fingerprint") for m in metas}) > 1:
        return ["its output files come from different runs"]
    old = metas[0].get("inputs", {})
    upstream_fp = None
    if stage.upstream is not None:
        upstream_fp = recorded_fingerprint(output_dir / stage.upstream.outputs[0])
    listing = None
    if stage.number == 1 and walk is not None:
        listing = walk(paths[1])[1]
    new = inputs_record(stage, cfg, upstream_fp, listing, model)
    reasons = []
    for name, value in new["config"].items():
        before = old.get("config", {}).get(name, "<unset>")
        if before != value:
            reasons.append(f"config {name} changed: {as_yaml(before)} -> {as_yaml(value)}")
    if old.get("upstream") != new["upstream"]:
        reasons.append(f"upstream {stage.upstream.outputs[0]} changed" if stage.upstream else "upstream changed")
    if old.get("external") != new["external"]:
        if stage.number == 4:
            reasons.append(f"the model of indexing.dense_model changed ({(new['external'] or {}).get('model')})")
        elif stage.number == 1:
            reasons.append(describe_changes(read_listing(paths[1]), listing) if listing else
                           f"documents.input {cfg['documents']['input']} does not exist")
        else:
            was = {s.get("file"): s for s in old.get("external") or []}
            changed = [s["file"] for s in new["external"] if was.get(s["file"]) != s]
            reasons.append(f"{' and '.join(changed) or 'queries or qrels file'} changed")
    if old.get("code") != new["code"]:
        reasons.append(f"code changed ({', '.join(stage.code)})")
    return reasons
