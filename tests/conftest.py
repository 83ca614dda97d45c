"""Shared test helpers: where things are, and running the scripts as a user would."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, settings

# Hypothesis profiles.  "ci" (the default) draws the same examples on every run: unseeded,
# the chunker's property test failed about one run in twenty on unchanged code, so CI went
# red at random and the bugs it found were never pinned down.  "search" is the long random
# hunt run before a release (bench/hypothesis_search.py, or HYPOTHESIS_PROFILE=search); a
# failure it finds becomes a plain test in tests/test_03_chunking.py, so CI keeps it.
# Each property test asks for its CI example count through examples() in its module; the
# profile's max_examples (100 = CI) scales them all.
_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("ci", derandomize=True, database=None, deadline=None,
                          max_examples=100, suppress_health_check=_QUIET)
settings.register_profile("search", derandomize=False, database=None, deadline=None,
                          max_examples=4000, suppress_health_check=_QUIET)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from pipekit.run.io import read_meta  # noqa: E402  (after the path: the tests import the repository's pipekit)
from pipekit.run.stages import STAGES  # noqa: E402
SHARED_DATA = REPO.parent / "shared" / "data"
CRANFIELD = SHARED_DATA / "cranfield" / "beir"


def run_script(*args: str, cwd: Path = REPO, check: bool = True) -> subprocess.CompletedProcess:
    """`python <script> <args>` from the repository root, output captured."""
    proc = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def twin_guides(root: Path, steps: int = 2, other: str = "## Canary") -> Path:
    """A folder in which one guide is copied with a word changed (its passages are repeats)
    and a third page shares a heading or a word, indexed and searched once: its output folder."""
    docs = root / "docs"
    (docs / "v1").mkdir(parents=True)
    (docs / "v2").mkdir()
    guide = "".join(f"## Step {i}\n\nTo deploy the service run the rollout command with flag {i} and "
                    f"watch the dashboard until the canary {i} is green, then promote it.\n\n" for i in range(steps))
    (docs / "v1" / "guide.md").write_text("# Deploy guide\n\n" + guide, encoding="utf-8")
    (docs / "v2" / "guide.md").write_text("# Deploy guide\n\n" + guide.replace("service", "app", 1), encoding="utf-8")
    (docs / "other.md").write_text(f"# Other\n\n{other}\n\nA canary deploy sends a little traffic first.\n",
                                   encoding="utf-8")
    out = root / "out"
    run_script("run_pipeline.py", "--set", f"paths.output={out}", "--set", f"documents.input={docs}",
               "--set", "retrieval.queries=[deploy canary]", "--set", "retrieval.qrels=null")
    return out


def run_importing(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """`python -X importtime <args>`, which must succeed: its stderr lists every import."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc


def packages(proc: subprocess.CompletedProcess) -> set[str]:
    """The packages a `run_importing` process loaded (a package counts once one of its
    modules is loaded: the probe that finds pandas "missing" is logged, alone, too)."""
    names = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    return {n.split(".")[0] for n in names if "." in n}


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


# ---- the sample's default run, made once and shared ----


def folder_digest(folder: Path) -> dict[str, str]:
    """Every file under `folder` (relative name -> sha256 of its bytes)."""
    import hashlib

    return {str(f.relative_to(folder)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(folder.rglob("*")) if f.is_file()}


@pytest.fixture(scope="session")
def sample_default_run(tmp_path_factory) -> Path:
    """`python run_pipeline.py --set paths.output=OUT` on the bundled sample with config.yaml's
    settings: OUT, made once per session (once per xdist worker).  Six test files each ran this
    same command for a module fixture of their own, seconds each time.  Tests read it; a test
    that runs a stage on it or otherwise writes copies it first (shutil.copytree).  A test that
    wrote into it instead would change what the next test reads, so the folder's bytes are
    checked at the end of the session and a change fails it."""
    out = tmp_path_factory.mktemp("sample-default") / "out"
    run_script("run_pipeline.py", "--set", f"paths.output={out}")
    before = folder_digest(out)
    yield out
    after = folder_digest(out)
    # 04_index.mmap is the search command's own cache (pipekit/retrieve/cold.py), written
    # once, atomically, by whichever test searches the run first: not a test writing into it.
    changed = sorted(n for n in before.keys() | after.keys() if before.get(n) != after.get(n)
                     and n != "04_index.mmap")
    assert not changed, (f"a test wrote into the shared sample run {out} (copy it first): "
                         f"{', '.join(changed)} changed")


# ---- comparing whole runs (the engines, a rerun that reused rows and a --force run) ----

OUTPUTS = [n for s in STAGES for n in s.outputs] + ["05_metrics.parquet"]


def pipeline(config: Path, out: Path, *sets: str, env=None, args: tuple = ()) -> subprocess.CompletedProcess:
    """`run_pipeline.py --config CONFIG --set paths.output=OUT [--set S ...] [ARGS]`, which must succeed."""
    cmd = ["run_pipeline.py", "--config", str(config), "--set", f"paths.output={out}", *args]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.run([sys.executable, *cmd], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def assert_same_outputs(a: Path, b: Path) -> None:
    """Same rows, same order, same values (floats within 1e-9 relative), same provenance."""
    for name in OUTPUTS:
        assert (a / name).exists() == (b / name).exists(), name
        if not (a / name).exists():
            continue
        x, y = pd.read_parquet(a / name), pd.read_parquet(b / name)
        assert list(x.columns) == list(y.columns) and len(x) == len(y), name
        assert len(x) > 0, f"{name} is empty: the comparison would prove nothing"
        for col in x.columns:
            if x[col].dtype.kind == "f":
                np.testing.assert_allclose(x[col].to_numpy(), y[col].to_numpy(), rtol=1e-9, atol=0,
                                           err_msg=f"{name}:{col}")
            else:
                assert x[col].map(repr).tolist() == y[col].map(repr).tolist(), f"{name}:{col}"
        mx, my = read_meta(a / name), read_meta(b / name)
        for key in ("stage", "fingerprint", "inputs", "upstream_file", "row_fingerprint"):
            assert mx.get(key) == my.get(key), f"{name}: provenance {key} differs"
    assert (a / "05_results.trec").read_text() == (b / "05_results.trec").read_text()


def read_terminal(master: int) -> bytes:
    """Everything written to a pseudo-terminal until its other end closes: read while the
    command runs, since a full pty buffer would stall it (the progress-bar tests)."""
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # Linux: EIO once the other end is closed
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    return seen
