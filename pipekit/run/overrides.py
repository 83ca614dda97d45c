"""Which `--set` options a command that reads outputs cannot apply, said in one line each.

`python -m pipekit search … --set indexing.b=0` printed the same scores as without it: the
index had been built with b=0.75, and search scores with the index it finds, as it must
(a query analysed or weighted unlike the index matches nothing or lies). Silence made the
setting look applied. Each such command now names the setting, why it cannot apply here,
and the command that makes outputs with it (the user's own --config/--set kept, so it
writes where this command reads).

A --set whose value is the one the outputs were made with is no setting left unapplied:
the README tells a user to repeat their run's --sets on `search`, and `search --set
documents.input=DIR` on an index built from DIR warned that the value was "not applied
… reruns 01_documents onward".  Given the values the outputs record (`recorded_config`:
every stage output records its config values in its Parquet metadata, run/freshness.py),
`unapplied_lines` says nothing of a --set equal to its recorded value, and names the
recorded value beside one that differs.
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
                    options: list[str] = (), cfg: dict | None = None, recorded: dict | None = None) -> list[str]:
    """One line per --set that `command` cannot apply; `why_not(key)` says why (None: applied).
    With `cfg` (the config as loaded, --sets in) and `recorded` (`recorded_config` of the
    outputs read), a --set whose value the outputs were made with gets no line."""
    rerun = f"python run_pipeline.py {shlex.join(options)}".rstrip()
    lines, recorded = [], recorded or {}
    for key in override_keys(overrides):
        reason = why_not(key)
        if reason is None:
            continue
        if cfg is not None and key in recorded:
            section, _, name = key.partition(".")
            if cfg.get(section, {}).get(name, "<unset>") == recorded[key]:
                continue  # the value the outputs were made with: nothing left unapplied
            reason += f"; the outputs here were made with {key} {as_yaml(recorded[key])}"
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


def recorded_config(out) -> dict:
    """`section.key -> value` for every config value the outputs in folder `out` record (each
    stage's output records its own section's values as that stage ran; absent outputs, none)."""
    from pathlib import Path

    from pipekit.run.io import read_meta

    values: dict = {}
    for stage in STAGES:
        path = Path(out) / stage.outputs[0]
        recorded = ((read_meta(path) or {}).get("inputs") or {}).get("config") or {} if path.exists() else {}
        for name, value in recorded.items():
            values.setdefault(name, value)
    return values


def made_with_other_settings(cfg: dict, overrides: list[str]) -> str | None:
    """One line when the outputs in paths.output were made with config values that differ
    from these and that the user did not just --set (a deliberate --set is a question,
    "what would rerun?"; a forgotten one is a mistake). `report --set paths.output=OUT`
    on a folder made with `--set documents.input=…` showed every stage stale and said only
    "config documents.input changed", which reads as if the documents had changed."""
    from pathlib import Path

    out, explicit, diffs = Path(cfg["paths"]["output"]), set(override_keys(overrides)), {}
    for name, was in recorded_config(out).items():
        section, _, key = name.partition(".")
        now = cfg.get(section, {}).get(key, "<unset>")
        if now != was and name not in explicit:
            diffs[name] = (was, now)
    if not diffs:
        return None
    shown = "; ".join(f"{k} {as_yaml(w)}, here {as_yaml(n)}" for k, (w, n) in list(diffs.items())[:2])
    more = f"; {len(diffs) - 2} more" if len(diffs) > 2 else ""
    return (f"note: the outputs in {out} were made with other settings ({shown}{more}): give the --config "
            f"or --set options of the run that made them (or keep them in a config file of your own: "
            f"README, \"Your own documents\")")
