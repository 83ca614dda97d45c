"""pipekit/run/hashing.py `hash_ahead` and pipekit/read/early.py `file_ahead`: an input file's
content hash made on a thread while the command imports is the hash the listing would make
itself (`file_hash`), taken only for the file as it was hashed; `file_hash` reading into one
buffer gives BLAKE2b of the bytes; and a BEIR corpus's fork server holds only what its
hashing process imports (pipekit/read/workers.py `start_hashing_server`)."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings, strategies as st

from pipekit.read.walk import list_inputs
from pipekit.run import hashing
from pipekit.run.incremental import _HASHED, list_files

REPO = Path(__file__).resolve().parents[1]


def _blake(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=5000), block=st.integers(1, 4096))
def test_file_hash_by_blocks_is_blake2b_of_the_bytes(tmp_path_factory, data, block):
    path = tmp_path_factory.mktemp("h") / "f.bin"
    path.write_bytes(data)
    assert hashing.file_hash(path, block=block) == _blake(data) == hashing.content_hash(data)


def test_a_hash_made_ahead_is_the_listings(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(f'{{"_id": "d{i}", "title": "t", "text": "x {i}"}}\n' for i in range(2000)))
    assert hashing.hash_ahead(corpus)
    assert not hashing.hash_ahead(corpus)  # once per file as it is
    _HASHED.clear()  # (another test of this process may have listed a file of the same stamp)
    listing = list_files(list_inputs(corpus), None)
    assert listing["files"]["corpus.jsonl"][3].split("|")[0] == _blake(corpus.read_bytes())
    assert hashing._AHEAD == {}  # taken: the listing did not hash it again
    assert hashing.hashed_ahead(corpus) is None  # nothing left over for a later listing


def test_a_file_changed_after_it_was_hashed_ahead_is_hashed_again(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "a", "text": "one"}\n')
    assert hashing.hash_ahead(corpus)
    hashing._AHEAD[next(iter(hashing._AHEAD))][0].wait()  # hashed as it was
    corpus.write_text('{"_id": "a", "text": "two, longer"}\n')
    os.utime(corpus, ns=(1, 1))  # another size and times: another file to the listing
    assert hashing.hashed_ahead(corpus) is None
    _HASHED.clear()
    listing = list_files(list_inputs(corpus), None)
    assert listing["files"]["corpus.jsonl"][3].split("|")[0] == _blake(corpus.read_bytes())
    hashing._AHEAD.clear()


def test_a_missing_file_is_not_hashed_ahead(tmp_path):
    assert not hashing.hash_ahead(tmp_path / "nothing.jsonl")
    assert hashing.hashed_ahead(tmp_path / "nothing.jsonl") is None


def _run(code: str, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_run_pipeline_hashes_a_corpus_ahead_only_without_a_listing(tmp_path):
    # begin_pipeline (run_pipeline.py, before its imports): a fresh output folder has no
    # listing, so the corpus is hashed ahead; a --from 2 run, or one whose output folder has
    # a listing (its stamps decide, pipekit/run/incremental.py), starts nothing.
    (tmp_path / "corpus.jsonl").write_text('{"_id": "a", "title": "t", "text": "x"}\n')
    (tmp_path / "c.yaml").write_text("documents:\n  input: corpus.jsonl\npaths:\n  output: out\n")
    code = """
import sys
from pipekit.read.early import begin_pipeline
from pipekit.run import hashing
from multiprocessing import forkserver
print(begin_pipeline(sys.argv[1:] or ["--config", "c.yaml", "--force"]), len(hashing._AHEAD),
      hashing.hashed_ahead("corpus.jsonl") == hashing.file_hash("corpus.jsonl"),
      forkserver._forkserver._forkserver_pid is None)  # a small corpus: no hashing process
"""
    assert _run(code, tmp_path) == "True 1 True True"
    assert _run(code.replace('sys.argv[1:] or ', ''), tmp_path) == "True 1 True True"
    assert _run(code.replace('sys.argv[1:] or ["--config", "c.yaml", "--force"]',
                             '["--config", "c.yaml", "--from", "2"]'), tmp_path) == "False 0 False True"
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "01_files.parquet").write_bytes(b"")
    assert _run(code, tmp_path) == "False 0 False True"


def test_a_beir_corpus_starts_a_fork_server_with_the_hashing_module_only(tmp_path):
    # For a corpus whose lines are hashed in a process (PROCESS_BYTES or more, two workers),
    # the walk's start_early starts the server with pipekit.run.hashing alone, not the
    # readers a folder's files need (lxml, html_to_markdown: ~0.2 s of its start).
    code = """
import os
from pathlib import Path
from multiprocessing import forkserver
from pipekit.read.parallel import start_early
from pipekit.read.walk import InputEntry
from pipekit.run import hashing
from pipekit.run.hashing import HASHING_PROCESS_BYTES

hashing.lines_built = lambda: False  # (where the compiled line hashes are built, no process is needed: below)

def corpus(n_bytes):
    return InputEntry(Path("c.jsonl"), "c.jsonl", [], format="beir", n_bytes=n_bytes)

server = lambda: forkserver._forkserver._forkserver_pid
assert not start_early([corpus(HASHING_PROCESS_BYTES - 1)], 2) and server() is None
assert not start_early([corpus(HASHING_PROCESS_BYTES)], 1) and server() is None
assert start_early([corpus(HASHING_PROCESS_BYTES)], 2)
os.kill(server(), 0)  # running
print(forkserver._forkserver._preload_modules)
"""
    assert _run(code, tmp_path) == "['pipekit.run.hashing']"


def test_no_fork_server_where_the_lines_are_hashed_by_the_compiled_call(tmp_path):
    code = """
from multiprocessing import forkserver
from pipekit.read.workers import start_hashing_server
from pipekit.run import hashing

hashing.lines_built = lambda: True
print(start_hashing_server(hashing.HASHING_PROCESS_BYTES, 2), forkserver._forkserver._forkserver_pid)
"""
    assert _run(code, tmp_path) == "False None"
