"""Shared test helpers: where things are, and running the scripts as a user would."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
CRANFIELD = SHARED_DATA / "cranfield" / "beir"


def run_script(*args: str, cwd: Path = REPO, check: bool = True) -> subprocess.CompletedProcess:
    """`python <script> <args>` from the repository root, output captured."""
    proc = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def write_config(folder: Path, **sections) -> Path:
    """A config.yaml in `folder` with outputs in folder/out and the given sections."""
    data = {"paths": {"output": str(folder / "out")}}
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


@pytest.fixture
def cranfield() -> Path:
    if not (CRANFIELD / "corpus.jsonl").exists():
        pytest.skip(f"the Cranfield collection is not at {CRANFIELD} (it lives in ../shared/data)")
    return CRANFIELD
