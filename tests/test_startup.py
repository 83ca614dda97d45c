"""What a process pays before its stage's own work: libraries it never uses are not imported.

A rerun after one changed file is mostly start-up (bench/incremental.py), and a class runs
the five stages as five processes: pandas (0.25 s) and scipy (0.16 s) imported for nothing
were a quarter of that rerun.
"""
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq

from conftest import REPO, packages, run_importing
from pipekit.run.commands import preview


def imported(*args: str) -> set[str]:
    """The packages a `python -X importtime <args>` process loaded."""
    return packages(run_importing(*args))


def test_the_pipeline_never_imports_pandas(tmp_path):
    # pyarrow imports pandas on its first Arrow array unless told not to (pipekit.run.io.defer_pandas)
    mods = imported("run_pipeline.py", "--force", "--set", f"paths.output={tmp_path}")
    assert "pyarrow" in mods and "ir_measures" in mods  # it did run, and evaluated
    assert "pandas" not in mods


def test_a_stage_run_alone_prints_its_preview_without_pandas(tmp_path):
    subprocess.run([sys.executable, "run_pipeline.py", "--to", "2", "--set", f"paths.output={tmp_path}"], cwd=REPO,
                   check=True, capture_output=True)
    assert "pandas" not in imported("03_chunking.py", "--set", f"paths.output={tmp_path}")


def test_stage_05_without_feedback_does_not_import_scipy(tmp_path):
    subprocess.run([sys.executable, "run_pipeline.py", "--to", "4", "--set", f"paths.output={tmp_path}"], cwd=REPO,
                   check=True, capture_output=True)
    assert "scipy" not in imported("05_retrieval.py", "--set", f"paths.output={tmp_path}")
    assert "scipy" in imported("05_retrieval.py", "--set", f"paths.output={tmp_path}", "--set", "retrieval.feedback=rm3")


def test_the_readers_processes_start_without_arrow_or_numpy():
    # Stage 01's fork server imports the readers before it forks the workers, while the stage
    # waits (pipekit/read/parallel.py); pyarrow and NumPy came with the walk's module and
    # pipekit/read/pages.py, and no reader uses them.
    mods = imported("-c", "import pipekit.read.documents")
    assert not {"pyarrow", "numpy", "pandas"} & mods, sorted(mods)


def test_a_markdown_file_is_read_without_the_other_formats_readers(tmp_path):
    # A rerun after one changed Markdown file read it with every reader's module loaded (PDF,
    # Word, EPUB, notebooks, Python, CSV, HTML, reST): each is imported at its format's first file.
    (tmp_path / "a.md").write_text("# A\n\nText.\n")
    (tmp_path / "b.html").write_text("<h1>B</h1><p>Text.</p>")
    code = f"""
import sys
from pathlib import Path
from pipekit.read.documents import read_document
from pipekit.read.walk import list_inputs
loaded = lambda: print(sorted(m for m in sys.modules if m.startswith("pipekit.read.")))
md, html = list_inputs(Path({str(tmp_path)!r}))
assert read_document(md)["status"] == "ok"
loaded()
assert read_document(html)["status"] == "ok" and read_document(html)["title"] is None
loaded()
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    after_markdown, after_html = (set(eval(line)) for line in proc.stdout.splitlines())
    readers = {"pipekit.read." + m for m in ("pdf", "docx", "epub", "notebook", "python", "csv", "html", "rst")}
    assert "pipekit.read.markdown" in after_markdown and not readers & after_markdown, sorted(after_markdown)
    assert readers & after_html == {"pipekit.read.html"}  # the HTML reader, on its first page


def test_stage_01_reading_a_few_files_here_loads_no_process_pool(tmp_path):
    # A rerun that reads one changed file reads it in the stage's own process: multiprocessing
    # and the pool's machinery (7.8 ms of the rerun's imports) wait for a run that starts a pool.
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nText.\n")
    mods = imported("01_documents.py", "--set", f"documents.input={tmp_path / 'docs'}",
                    "--set", f"paths.output={tmp_path / 'out'}", "--set", "engine.workers=2")
    assert "pyarrow" in mods and (tmp_path / "out" / "01_documents.parquet").exists()
    assert "multiprocessing" not in mods and "concurrent" in mods  # the writer's threads, not processes


def test_deferred_pandas_still_makes_dataframes_and_reads_series():
    code = """
import sys, math
import pyarrow as pa
from pipekit.run.io import defer_pandas
defer_pandas()
pa.array([1, 2]); pa.table({"a": [1.0, None]})
assert "pandas" not in sys.modules
frame = pa.table({"a": [1.0, None]}).to_pandas()   # asking for a DataFrame imports pandas
assert frame["a"].isna().tolist() == [False, True]
import pandas as pd
assert pa.array(pd.Series([1.0, math.nan])).null_count == 1  # a Series is a Series again: NaN is null
assert pa.array(pd.Series(["x", "y"], dtype="category")).type.id == pa.dictionary(pa.int8(), pa.string()).id
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "ok", proc.stderr


def test_preview_lays_out_the_first_rows_as_columns(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"chunk_id": ["a.md#0", "a.md#1", "b.md#0", "b.md#1"],
                             "heading_path": [["Guide", "Setup"], [], None, ["B"]],
                             "score": [1.5, 0.25, 2.0, 3.0],
                             "text": ["line one\nline two", "x" * 60, "short", "z"]}), path)
    lines = preview(path, ["chunk_id", "heading_path", "score", "text"], rows=3, width=20).splitlines()
    assert len(lines) == 4  # the header and three rows
    assert lines[0].split() == ["chunk_id", "heading_path", "score", "text"]
    assert lines[1].split() == ["a.md#0", "[Guide,", "Setup]", "1.5", "line", "one⏎line", "two"]
    assert lines[2].endswith("x" * 19 + "…") and " [] " in lines[2] and " 0.25 " in lines[2]
    assert " None " in lines[3]
    assert len({len(line) for line in lines}) == 1  # right-aligned columns: every line as wide


def test_show_prints_nanosecond_times_of_any_parquet_file(tmp_path):
    """`show` reads files no stage wrote, whose nanosecond times only pandas turns into values:
    it is the one command that leaves pyarrow's look for pandas alone."""
    path = tmp_path / "times.parquet"
    pq.write_table(pa.table({"at": pa.array([1_700_000_000_123_456_789], pa.timestamp("ns"))}), path)
    proc = subprocess.run([sys.executable, "-m", "pipekit", "show", str(path)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "123456789" in proc.stdout


def test_stage_03_loads_regex_only_for_a_word_over_max(tmp_path):
    # `regex` (grapheme clusters) is for a single word longer than chunking.max; importing it
    # at the start was ~13 ms of every one-file rerun that chunked an ordinary page.
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nText of a page.\n")
    sets = ["--set", f"documents.input={tmp_path / 'docs'}", "--set", f"paths.output={tmp_path / 'out'}"]
    subprocess.run([sys.executable, "run_pipeline.py", "--to", "2", *sets], cwd=REPO, check=True, capture_output=True)
    mods = imported("03_chunking.py", *sets)
    assert "pyarrow" in mods and (tmp_path / "out" / "03_chunks.parquet").exists()
    assert "regex" not in mods
    (tmp_path / "docs" / "a.md").write_text("# A\n\n" + "x\u0301" * 50 + "\n")
    subprocess.run([sys.executable, "run_pipeline.py", "--to", "2", *sets], cwd=REPO, check=True, capture_output=True)
    assert "regex" in imported("03_chunking.py", *sets, "--set", "chunking.max=20", "--set", "chunking.target=10",
                               "--set", "chunking.min=1", "--set", "chunking.unit=chars")
    chunks = pq.read_table(tmp_path / "out" / "03_chunks.parquet").column("text").to_pylist()
    assert len(chunks) > 2 and all(c[0] == "x" for c in chunks[1:])  # cut between grapheme clusters, not before an accent


def test_numpys_blas_threads_sleep_when_idle_unless_the_user_says_otherwise():
    """pipekit sets OPENBLAS_THREAD_TIMEOUT before NumPy loads (pipekit/run/environment.py): an
    idle BLAS thread then uses no CPU; the threads' number and a product's result are as without."""
    import os

    code = ("import os, time, pipekit, numpy as np; time.sleep(0.3); a = np.arange(40000.).reshape(200, 200); "
            "print(os.environ.get('OPENBLAS_THREAD_TIMEOUT'), float((a @ a).sum()), len(os.listdir('/proc/self/task')))")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    ours = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    theirs = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**env, "OPENBLAS_THREAD_TIMEOUT": "28"},
                            capture_output=True, text=True, check=True)
    plain = subprocess.run([sys.executable, "-c", code.replace("pipekit, ", "")], cwd=REPO, env=env,
                           capture_output=True, text=True, check=True)
    assert ours.stdout.split()[0] == "4" and theirs.stdout.split()[0] == "28" and plain.stdout.split()[0] == "None"
    assert ours.stdout.split()[1:] == plain.stdout.split()[1:]  # the same product, the same threads


def test_the_compiled_modules_names_come_without_importing_numba_or_importlib_metadata():
    """pipekit/run/aot.py names a compiled module by the loops' source, numba's version and
    Python's; numba's is read from its _version.py, so a stage process that loads the module
    imports neither numba nor importlib.metadata (~40 ms), and the stamp names the version installed."""
    code = """
import sys
from pipekit.run import aot
from pipekit.index import compiled
folder, name = compiled.BUILT.place()
stamp = aot.numba_stamp()
print(name.startswith("pipekit_words_"), "numba" in sys.modules, "importlib.metadata" in sys.modules)
import importlib.metadata as md
try:
    print(md.version("numba").encode() in stamp)
except md.PackageNotFoundError:
    print(stamp == b"none")
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "False", "False", "True"]
