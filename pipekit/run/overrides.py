"""Which `--set` options a command that reads outputs cannot apply, said in one line each.

`python -m pipekit search … --set indexing.b=0` printed the same scores as without it: the
index had been built with b=0.75, and search scores with the index it finds, as it must
(a query analysed or weighted unlike the index matches nothing or lies). Silence made the
setting look applied. Each such command now names the setting, why it cannot apply here,
and the command that makes outputs with it (the user's own --config/--set kept, so it
writes where this command reads).
"""
from __future__ import annotations

import shlex
from typing import Callable

import yaml

from pipekit.run.stages import STAGES


def as_yaml(value) -> str:
    """A config value as config.yaml and `--set` spell it: `null`, `true`, `wordllama`,
    `[a, '*.csv']`.  Python's repr (`None -> 'wordllama'`) is a language the user never
    typed: a `--status` line should read as the setting they would write to get it back."""
    if value == "<unset>":
        return value  # not a value: the record had no such key
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10**9).rstrip("\n")
    return text[:-4].rstrip("\n") if text.endswith("\n...") else text


def override_keys(overrides: list[str]) -> list[str]:
    """`section.key` of each `--set section.key=VALUE`, in order, each once."""
    keys = [o.split("=", 1)[0].strip() for o in overrides or []]
    return list(dict.fromkeys(keys))


def stage_of(key: str):
    """The stage whose config section holds `key` (None for paths and engine)."""
    section = key.split(".", 1)[0]
    return next((s for s in STAGES if s.section == section), None)


def unapplied_lines(command: str, overrides: list[str], why_not: Callable[[str], str | None],
                    options: list[str] = ()) -> list[str]:
    """One line per --set that `command` cannot apply; `why_not(key)` says why (None: applied)."""
    rerun = f"python run_pipeline.py {shlex.join(options)}".rstrip()
    lines = []
    for key in override_keys(overrides):
        reason = why_not(key)
        if reason is None:
            continue
        stage = stage_of(key)
        fix = (f": `{rerun}` reruns {stage.label} onward with it" if stage else
               ": outputs are the same on any engine" if key.startswith("engine.") else "")
        lines.append(f"{command}: --set {key} not applied ({reason}){fix}")
    return lines


def search_why_not(key: str) -> str | None:
    """search scores with the retrieval settings it is given; everything before stage 05
    is baked into the index, and it answers the queries typed, judged by nobody."""
    section = key.split(".", 1)[0]
    if section == "paths" or (section == "retrieval" and key not in ("retrieval.queries", "retrieval.qrels")):
        return None
    if key == "documents.link_base":  # the hits' links are made as they are returned
        return None
    if section == "retrieval":
        return "search answers the queries you type"
    if section == "engine":
        return "search runs in this process"
    return f"search scores with the index as {stage_of(key).label} made it"


def compare_why_not(key: str) -> str | None:
    """compare reads recorded runs: only where they are (paths.output) applies."""
    if key.startswith("paths."):
        return None
    return "compare reads the runs recorded in 05_history.parquet"


def made_with_other_settings(cfg: dict, overrides: list[str]) -> str | None:
    """One line when the outputs in paths.output were made with config values that differ
    from these and that the user did not just --set (a deliberate --set is a question,
    "what would rerun?"; a forgotten one is a mistake). `report --set paths.output=OUT`
    on a folder made with `--set documents.input=…` showed every stage stale and said only
    "config documents.input changed", which reads as if the documents had changed."""
    from pathlib import Path

    from pipekit.run.io import read_meta

    out, explicit, diffs = Path(cfg["paths"]["output"]), set(override_keys(overrides)), {}
    for stage in STAGES:
        path = out / stage.outputs[0]
        recorded = ((read_meta(path) or {}).get("inputs") or {}).get("config") or {} if path.exists() else {}
        for name, was in recorded.items():
            section, _, key = name.partition(".")
            now = cfg.get(section, {}).get(key, "<unset>")
            if now != was and name not in explicit:
                diffs.setdefault(name, (was, now))
    if not diffs:
        return None
    shown = "; ".join(f"{k} {as_yaml(w)}, here {as_yaml(n)}" for k, (w, n) in list(diffs.items())[:2])
    more = f"; {len(diffs) - 2} more" if len(diffs) > 2 else ""
    return (f"note: the outputs in {out} were made with other settings ({shown}{more}): give the --config "
            f"or --set options of the run that made them (or keep them in a config file of your own: "
            f"README, \"Your own documents\")")
