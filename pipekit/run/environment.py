"""Say how to activate the virtual environment instead of a ModuleNotFoundError traceback.

The most common first failure in class: a new terminal, `python 01_documents.py`, and a
ten-line traceback ending in `No module named 'yaml'` — the packages are in `.venv`, which
this shell has not activated.  `pipekit` is imported before any third-party module by
every script, so this check runs first and turns that into one line saying what to type.
Only the standard library may be imported here.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # pipekit/run/environment.py -> the repository
# Imported at start by every stage and tool (the rest of requirements.txt is installed
# with them: if these are missing, the environment is not the project's).
NEEDED = ("yaml", "pyarrow", "numpy", "pandas")


def missing_packages() -> list[str]:
    return [m for m in NEEDED if importlib.util.find_spec(m) is None]


def advice(missing: list[str]) -> str:
    venv = REPO_ROOT / ".venv"
    here = Path.cwd().resolve() == REPO_ROOT
    where = ".venv" if here else str(venv)
    if (venv / "bin" / "activate").exists():
        todo = f"activate the project's virtual environment first: `. {where}/bin/activate`"
    elif (venv / "Scripts" / "activate").exists():
        todo = f"activate the project's virtual environment first: `{where}\\Scripts\\activate`"
    else:
        req = "requirements-dev.txt" if here else str(REPO_ROOT / "requirements-dev.txt")
        todo = (f"create and activate a virtual environment first: `python3 -m venv {where} && "
                f". {where}/bin/activate && pip install -r {req}`")
    return (f"{sys.executable} has no module {', '.join(map(repr, missing))}: {todo}")


def check() -> None:
    """Exit with one line of advice when run as a script without the packages;
    raise a ModuleNotFoundError carrying the same advice when imported as a library."""
    missing = missing_packages()
    if not missing:
        return
    script = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] not in ("", "-c") else None
    if sys.argv and sys.argv[0] == "-m" or (script and script.is_relative_to(REPO_ROOT)):
        name = script.name if script and script.suffix == ".py" and script.name != "__main__.py" else "pipekit"
        print(f"{name}: error: {advice(missing)}", file=sys.stderr)
        raise SystemExit(1)
    raise ModuleNotFoundError(advice(missing), name=missing[0])


# OpenBLAS (NumPy's BLAS) starts a thread per extra core when NumPy is imported, and each
# waits for work by spinning for 2^28 cycles (~0.1 s) before it sleeps, at start and after
# every BLAS call.  On two cores that was ~0.1 s of CPU taken from every stage process's first
# busy moments (perf of stage 01 at 200k passages: `blas_thread_server` 3.5 % of all samples,
# though stage 01 makes no BLAS call).  2^4 cycles: a thread sleeps as soon as its work is
# done and is woken for the next, which a matrix product large enough to be split waits for
# unnoticed.  Threads, their number and every result are as before; a value already set wins.
BLAS_THREAD_TIMEOUT = "4"


def quiet_blas_threads() -> bool:
    """Set OPENBLAS_THREAD_TIMEOUT before NumPy loads OpenBLAS: True if this set it."""
    if "numpy" in sys.modules or "OPENBLAS_THREAD_TIMEOUT" in os.environ:
        return False
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = BLAS_THREAD_TIMEOUT
    return True
