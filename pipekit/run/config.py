"""config.yaml: every key, its default, what it accepts — and `--set` overrides.

The schema below is the single list of settings.  Loading merges the file over the
defaults, applies `--set section.key=VALUE` overrides (VALUE read as a YAML scalar or
flow list, so `--set chunking.target=200` is an int and `--set retrieval.queries=[a, b]`
a list), then checks every value.  A mistake stops the run before anything is written,
with one line that names the key and what it accepts; an unknown key also gets the
closest known one ("did you mean chunking.target?"), because a typo that is silently
ignored is worse than one that stops the run.

Paths in the file are relative to the folder of the config file, so a config kept
next to its corpus works from any working directory.
"""
from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from pipekit.run.errors import ConfigError
from pipekit.run.stages import REPO_ROOT

DEFAULT_CONFIG = REPO_ROOT / "config.yaml"
_ADDRESS = re.compile(r"(?:tcp|tls)://[^\s/:]+:\d{1,5}/?")


@dataclass(frozen=True)
class Key:
    default: Any
    kind: str  # str | path | optional_path | dense_model | int | optional_int | number | optional_number | bytes | bool | choice | globs | queries | optional_address
    accepts: str  # what the error message says the key accepts
    choices: tuple = ()
    check: Callable[[Any], bool] | None = field(default=None, compare=False)


SCHEMA: dict[str, dict[str, Key]] = {
    "paths": {
        "output": Key("data", "path", "a folder path"),
    },
    "documents": {
        "input": Key("data/sample", "path", "a folder, a file, or a BEIR corpus .jsonl"),
        "include": Key([], "globs", "a list of glob patterns (empty: every file)"),
        "exclude": Key([], "globs", "a list of glob patterns"),
        "hidden": Key(False, "bool", "true or false"),
        "follow_links": Key(False, "bool", "true or false"),
        "build_files": Key(False, "bool", "true (read a documentation generator's build leftovers: Sphinx "
                           "_sources/, _static/, genindex.html, search.html, MkDocs search/, 404.html) "
                           "or false (skip them, each with a skipped row)"),
        # Default false by bench/source_tests.py (bench/README.md): read, a source tree's
        # tests took the top places of documentation questions.
        "test_files": Key(False, "bool", "true (read the files of a source tree's tests folders: a folder "
                          "named tests, test or testing that holds test_*.py, *_test.py, conftest.py ...) "
                          "or false (skip them, each with a skipped row)"),
        # At most 1 GiB: a text is one Arrow string (2 GB at most, and decoding legacy
        # encodings can double it), and each stage needs up to ~8x the largest document.
        "max_bytes": Key("512 MB", "bytes", "a size from 1 byte to 1 GiB: a whole number of bytes "
                         "or one like 256 MB, 1.5 GB, 512 MiB", check=lambda v: 0 < v <= 2**30),
        "notebook_outputs": Key(False, "bool", "true (keep a notebook's text outputs: streams, text/plain "
                                "results, error lines) or false (its cells only)"),
        # Read by stage 05 (a hit's link), not 01: freshness.READ_BY records it there.
        "link_base": Key(None, "optional_str", "null (links are paths below documents.input) or a URL "
                         "prefix such as https://docs.example.org/", check=lambda v: v is None or (isinstance(v, str) and bool(v.strip()))),
    },
    "preprocessing": {
        "unicode_form": Key("NFC", "choice", "NFC, NFKC or none", ("NFC", "NFKC", "none")),
    },
    "chunking": {
        "strategy": Key("heading", "choice", "heading or fixed", ("heading", "fixed")),
        "unit": Key("words", "choice", "words, chars or tokens", ("words", "chars", "tokens")),
        "target": Key(400, "int", "a whole number > 0", check=lambda v: v > 0),
        "max": Key(1000, "int", "a whole number > 0", check=lambda v: v > 0),
        "min": Key(40, "int", "a whole number >= 0", check=lambda v: v >= 0),
        "overlap": Key(50, "int", "a whole number >= 0", check=lambda v: v >= 0),
        "page_markers": Key("track", "choice", "track, strip or keep", ("track", "strip", "keep")),
    },
    "indexing": {
        "k1": Key(1.2, "number", "a number >= 0", check=lambda v: v >= 0),
        "b": Key(0.75, "number", "a number from 0 to 1", check=lambda v: 0 <= v <= 1),
        "stemmer": Key("english", "choice", "english or none", ("english", "none")),
        "stopwords": Key("questions", "choice", "english, questions or none", ("english", "questions", "none")),
        "single_letters": Key("capitals", "choice", "capitals or none", ("capitals", "none")),
        "path_weight": Key(1, "int", "a whole number >= 0", check=lambda v: v >= 0),
        "heading_weight": Key(3, "int", "a whole number >= 0", check=lambda v: v >= 0),
        "dense_model": Key(None, "dense_model", "null, wordllama, or the path of a sentence-transformers model folder"),
        "dense_windows": Key(True, "bool", "true (a chunk longer than a model folder's window is embedded whole, "
                             "in windows) or false (truncated at its max_seq_length)"),
        "shard_chunks": Key(1_000_000, "int", "a whole number > 0", check=lambda v: v > 0),
    },
    "retrieval": {
        "queries": Key("data/queries.txt", "queries",
                       "a .txt, .tsv or BEIR .jsonl file, or an inline list of queries"),
        "qrels": Key(None, "optional_path", "a TREC or BEIR .tsv qrels file, or null"),
        "top_k": Key(10, "int", "a whole number > 0", check=lambda v: v > 0),
        "explain": Key(False, "bool", "true or false"),
        "feedback": Key("none", "choice", "none or rm3", ("none", "rm3")),
        "feedback_docs": Key(5, "int", "a whole number > 0", check=lambda v: v > 0),
        "feedback_terms": Key(50, "int", "a whole number > 0", check=lambda v: v > 0),
        "feedback_query_weight": Key(0.7, "number", "a number from 0 to 1", check=lambda v: 0 <= v <= 1),
        "dense_weight": Key(None, "optional_number", "null (the model's default) or a number from 0 to 1 (0: BM25 alone)",
                            check=lambda v: v is None or 0 <= v <= 1),
        "section_context": Key(0.5, "number", "a number >= 0 (0: off)", check=lambda v: v >= 0),
        "repeats": Key("collapse", "choice", "collapse (a passage repeated in other documents is one hit, "
                       "naming the others) or keep (every copy its own hit)", ("collapse", "keep")),
    },
    "engine": {
        "kind": Key("local", "choice", "local or dask", ("local", "dask")),
        "address": Key(None, "optional_address", "null (start a local cluster) or tcp://HOST:PORT"),
        "workers": Key(None, "optional_int", "null (one per core) or a whole number > 0",
                       check=lambda v: v is None or v > 0),
        "partition_rows": Key(None, "optional_int", "null (the engine's default) or a whole number > 0",
                              check=lambda v: v is None or v > 0),
        "timeout": Key(10.0, "number", "a number of seconds > 0", check=lambda v: v > 0),
        "shards": Key(None, "optional_int", "null (one per worker) or a whole number > 0",
                      check=lambda v: v is None or v > 0),
    },
}


def all_keys() -> list[str]:
    return [f"{s}.{k}" for s, keys in SCHEMA.items() for k in keys]


def _unknown(name: str, known: list[str], what: str) -> ConfigError:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]}?" if close else f"; known {what}s: {', '.join(known)}"
    return ConfigError(f"unknown config {what} {name!r}{hint}")


def _coerce(name: str, key: Key, value: Any, base: Path) -> Any:
    """Check one value against its key and return it in canonical form."""
    bad = ConfigError(f"{name} must be {key.accepts}; got {value!r}")
    kind = key.kind
    if kind == "bool":
        if not isinstance(value, bool):
            raise bad
    elif kind == "optional_int" and value is None:
        pass
    elif kind in ("int", "optional_int"):
        # YAML reads `400` as int and `4e2` as float; a bool is an int to Python but not to a person.
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            raise bad
        value = int(value)
    elif kind == "bytes":
        value = parse_size(value)
        if value is None:
            raise bad
    elif kind == "optional_number" and value is None:
        pass
    elif kind in ("number", "optional_number"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise bad
        value = float(value)
    elif kind == "choice":
        value = "none" if value is None or value is False else value
        if value not in key.choices:
            raise bad
    elif kind == "globs":
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad
    elif kind == "dense_model":  # null, the model inside the wordllama wheel, or a folder (checked by stage 04)
        if value is None or value == "wordllama":
            return value
        if not isinstance(value, str) or not value:
            raise bad
        return str((base / value).resolve()) if not Path(value).is_absolute() else value
    elif kind in ("path", "optional_path"):
        if value is None and kind == "optional_path":
            return None
        if not isinstance(value, str) or not value:
            raise bad
        value = str((base / value).resolve()) if not Path(value).is_absolute() else value
    elif kind == "optional_address":
        # Checked here, not at connect time, so a typo stops the run before any stage runs.
        if value is not None and not (isinstance(value, str) and _ADDRESS.fullmatch(value)):
            raise bad
    elif kind == "queries":
        if isinstance(value, list):
            if not value:
                raise bad
            return value
        if not isinstance(value, str) or not value:
            raise bad
        value = str((base / value).resolve()) if not Path(value).is_absolute() else value
    if key.check is not None and not key.check(value):
        raise bad
    return value


_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)b?\s*", re.I)


def parse_size(value: Any) -> int | None:
    """`268435456`, `256 MB`, `1.5GB`, `512 MiB` -> bytes (MB = 10^6, MiB = 2^20); None if not a size."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value) if math.isfinite(value) and value == int(value) else None
    m = _SIZE.fullmatch(value) if isinstance(value, str) else None
    if not m or (m.group(3) and not m.group(2)):
        return None
    power = " kmgt".index(m.group(2).lower() or " ")
    return int(float(m.group(1)) * (1024 if m.group(3) else 1000) ** power)


def parse_override(text: str) -> tuple[str, str, Any]:
    """`chunking.target=200` -> ("chunking", "target", 200)."""
    name, sep, raw = text.partition("=")
    if not sep or "." not in name:
        raise ConfigError(f"--set takes section.key=VALUE (for example chunking.target=200); got {text!r}")
    section, _, key = name.strip().partition(".")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {name}: cannot read {raw!r} as a YAML value ({exc.problem})"
                          f"{glob_hint(name, raw)}") from None
    return section, key, value


def glob_hint(name: str, raw: str) -> str:
    """What to type instead of an unquoted glob such as `--set documents.exclude=*.csv`.

    YAML reads a bare `*x` as an alias (and the shell may expand it before that), so
    the newcomer's natural spelling fails with "found undefined alias"; the fix is to
    quote the pattern for YAML and the whole option for the shell."""
    items = [i.strip() for i in raw.strip().strip("[]").split(",") if i.strip()]
    if not any(i.startswith(("*", "&", "!")) for i in items):
        return ""
    quoted = ", ".join('"' + i.strip("'\"") + '"' for i in items)
    return f"; quote the patterns for YAML and the option for the shell: --set '{name}=[{quoted}]'"


# libyaml's safe loader when PyYAML was built with it (the wheels are): the same values, read
# in 1 ms instead of 12 — config.yaml is read by every stage process.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> dict:
    """Read, merge, override and validate. Returns {section: {key: value}}."""
    path = Path(path) if path is not None else DEFAULT_CONFIG
    raw: dict = {}
    if path.exists():
        try:
            raw = yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" line {mark.line + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ConfigError(f"{path}{where}: not valid YAML: {problem}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: not UTF-8 text") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: must be a mapping of sections (paths:, documents:, ...)")
    elif path != DEFAULT_CONFIG:
        raise ConfigError(f"config file {path} does not exist")

    values: dict[str, dict[str, Any]] = {s: {} for s in SCHEMA}
    for section, keys in raw.items():
        if section not in SCHEMA:
            raise _unknown(str(section), list(SCHEMA), "section")
        if keys is None:
            continue
        if not isinstance(keys, dict):
            raise ConfigError(f"{path}: section {section!r} must be a mapping of keys")
        for key, value in keys.items():
            if key not in SCHEMA[section]:
                raise _unknown(f"{section}.{key}", all_keys(), "key")
            values[section][key] = value
    for text in overrides or []:
        section, key, value = parse_override(text)
        if section not in SCHEMA or key not in SCHEMA[section]:
            raise _unknown(f"{section}.{key}", all_keys(), "key")
        values[section][key] = value

    base = path.resolve().parent
    cfg: dict[str, dict[str, Any]] = {}
    for section, keys in SCHEMA.items():
        cfg[section] = {}
        for key, spec in keys.items():
            value = values[section].get(key, spec.default)
            cfg[section][key] = _coerce(f"{section}.{key}", spec, value, base)
    _check_across(cfg)
    return cfg


def _check_across(cfg: dict) -> None:
    """Rules that tie two keys together; each names both."""
    e = cfg["engine"]
    if e["address"] is not None and e["kind"] != "dask":
        # Running locally while naming a cluster is surely a forgotten key, not a wish.
        raise ConfigError(f"engine.address is {e['address']} but engine.kind is {e['kind']}: "
                          "set engine.kind=dask to use that scheduler, or engine.address=null")
    c = cfg["chunking"]
    if c["min"] > c["target"]:
        raise ConfigError(f"chunking.min ({c['min']}) must not exceed chunking.target ({c['target']})")
    if c["target"] > c["max"]:
        raise ConfigError(f"chunking.target ({c['target']}) must not exceed chunking.max ({c['max']})")
    if c["strategy"] == "fixed" and not c["overlap"] < c["target"]:
        raise ConfigError(
            f"chunking.overlap must be >= 0 and < chunking.target ({c['target']}); got {c['overlap']}")
