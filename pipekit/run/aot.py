"""Loops compiled ahead of time by numba's pycc: built once per machine, imported without numba.

Four stages run compiled loops: stage 01 hashes a BEIR corpus's lines (pipekit/read/hash_loops.py),
stage 03 scans its short records' bytes (pipekit/chunk/scan_loops.py), stage 04 cuts and numbers
words (pipekit/index/compiled_loops.py), stage 05 ranks its queries (pipekit/retrieve/pruned_loops.py).  Compiled the way `@njit` compiles them, in the stage's own
process, numba's import and its compiler's registries add ~140 MB and ~0.5 s to it (LLVM, numba's
typing tables: stage 04 was 230 MB resident before its first batch, 63 without), and stages 04's
and 05's peaks are the run's.  So numba's pycc compiles them into an
extension module instead, and a stage imports that like any module: in a millisecond, numba not
imported.  This file is the part they share:

- where the module is kept: beside the loops (`__pycache__`), or ~/.cache/pipekit where that is
  not writable, named by a hash of the loops' source, numba's version and Python's (any of them
  changed, it is built again, as a .pyc is);
- the build: in a process of its own (numba's memory stays there), started by the first use
  that is worth it on a machine, on a thread that waits for it; the caller goes the plain way
  meanwhile (`load(wait=False)` is None), so no stage waits ~13 s of one core for it;
- its wrappers release the GIL while a loop runs, as `@njit(nogil=True)` would (`compile_module`:
  pycc's otherwise hold it, and two threads of a stage would take turns);
- one warning where it cannot be built (no numba, no C compiler, pycc gone: it is "pending
  deprecation" since numba 0.57), and the plain way for good.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
import threading
import warnings
from pathlib import Path

ROOT = Path(__file__).parents[2]  # the checkout (pipekit's parent): the build process imports from it


class Ahead:
    """One module of compiled loops: `loops` (a dotted module name under pipekit, whose
    `build(folder, name)` compiles it) kept as `prefix`_HASH; `what` names it in the warning,
    `plain` says what is done without it."""

    def __init__(self, loops: str, prefix: str, what: str, plain: str):
        self.loops, self.prefix, self.what, self.plain = loops, prefix, what, plain
        self.source = ROOT / (loops.replace(".", "/") + ".py")
        self.module = None  # the built module once imported; False: it cannot be (the plain way)
        self._loading = threading.Lock()
        self._builder: threading.Thread | None = None

    def load(self, wait: bool = True):
        """The built module, imported, or built first (in a process of its own, on a thread that
        waits for it: `wait` False returns None meanwhile); None where it cannot be built."""
        if self.module is None:
            with self._loading:
                if self.module is None and self._builder is None:
                    folder, name = self.place()
                    if (folder / (name + sysconfig.get_config_var("EXT_SUFFIX"))).exists():
                        self.module = imported(folder, name)
                    else:
                        self._builder = threading.Thread(target=self._build, args=(folder, name),
                                                         name=f"build-{self.prefix}", daemon=True)
                        self._builder.start()
            if self.module is None and wait:
                self._builder.join()
        return self.module or None

    def built(self):
        """The module if it is built on this machine already (imported now), else None: never builds."""
        if self.module is None:
            folder, name = self.place()
            if not (folder / (name + sysconfig.get_config_var("EXT_SUFFIX"))).exists():
                return None
            return self.load()
        return self.module or None

    def place(self) -> tuple[Path, str]:
        """Where the built module is kept, and its name (the loops' source, numba's and Python's
        versions in its hash: any of them changed, it is built again)."""
        key = hashlib.sha256(self.source.read_bytes() + numba_stamp() + sys.version.encode()).hexdigest()[:16]
        folder = self.source.parent / "__pycache__"
        try:
            folder.mkdir(exist_ok=True)
            writable = os.access(folder, os.W_OK)
        except OSError:
            writable = False
        if not writable:
            folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pipekit"
            folder.mkdir(parents=True, exist_ok=True)
        return folder, f"{self.prefix}_{key}"

    def _build(self, folder: Path, name: str) -> None:
        """The loops' `build` in a process of its own, then imported."""
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        code = f"from {self.loops} import build; build({str(folder)!r}, {name!r})"
        try:
            done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError((done.stderr.strip().splitlines() or ["failed"])[-1])
            self.module = imported(folder, name)
        except Exception as exc:  # (no numba, no compiler, numba's own errors: the plain way is always there)
            warnings.warn(f"{self.what} is off ({type(exc).__name__}: {exc}); {self.plain}", RuntimeWarning)
            self.module = False


def numba_stamp() -> bytes:
    """What names the installed numba's version, read without importing numba or importlib.metadata:
    its `_version.py` (versioneer's, in every release: the version and its git revision).
    importlib.metadata cost ~40 ms of imports (email, zipfile, csv) in every process that loads a
    compiled module, stage 04's and 05's, a twentieth of a one-file rerun.  b"none": no numba."""
    spec = importlib.util.find_spec("numba")
    if spec is None or not spec.submodule_search_locations:
        return b"none"
    folder = Path(next(iter(spec.submodule_search_locations)))
    try:
        return (folder / "_version.py").read_bytes()
    except OSError:  # (a numba without it: its folder names it, as a build of its own)
        return str(folder).encode()


def imported(folder: Path, name: str):
    """The extension module `name` in `folder`, imported."""
    path = folder / (name + sysconfig.get_config_var("EXT_SUFFIX"))
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compile_module(folder: str, name: str, exports: list) -> None:
    """Compile `exports` [(name, numba signature, plain Python function)] into the extension
    module `name` in `folder` (numba's pycc: a C compiler links it); each releases the GIL while
    it runs.  Written to a temporary folder, then moved into place: two processes building at
    once each write a whole file.  (Run in the build process: this imports numba.)"""
    import shutil
    import tempfile

    from numba.pycc import CC
    from numba.pycc import compiler

    class Flags(compiler.Flags):  # (pycc has no option for it: its wrappers are made with these flags)
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.release_gil = True

    compiler.Flags = Flags
    cc = CC(name)
    cc.verbose = False
    for export, signature, function in exports:
        cc.export(export, signature)(function)
    work = tempfile.mkdtemp(dir=folder, prefix=".build-")
    try:
        cc.output_dir = work
        cc.compile()
        (built,) = [f for f in os.listdir(work) if f.startswith(name)]
        os.replace(os.path.join(work, built), os.path.join(folder, built))
    finally:
        shutil.rmtree(work, ignore_errors=True)
