"""Outputs as dataset folders (part files), the form the Dask engine writes: every reader
takes them as it takes one file, and switching engines replaces one form by the other.

No cluster here: `InlineEngine` runs the very task a Dask worker runs (`_WrittenPart`,
which writes a partition's part file) in this process, so the write path and every
reader are tested in seconds; tests/test_engine.py does the same on real workers.
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pipekit.run import io
from pipekit.cli import run_stage
from pipekit.run.config import load_config
from pipekit.run.engine import LocalEngine, RowRange, _WrittenPart, iter_rows
from pipekit.tools.show import show_file
from pipekit.run.stages import STAGES, load_stage

from conftest import REPO, run_script, write_config

SCHEMA = pa.schema([("n", pa.int64()), ("word", pa.string())])


class InlineEngine(LocalEngine):
    """The Dask engine's write path without Dask: each partition's task runs here."""

    kind = "inline"

    def rows_per_part(self, n_rows, few=False):
        return self.partition_rows  # stage 04 too: many partitions, many shards, merged here

    def map_to_parts(self, fn, parts, folder, schema, meta, keep=(), progress=None):
        task = _WrittenPart(fn, str(folder), schema, meta, tuple(keep))
        for i, part in enumerate(parts):
            yield from task((i, part))


def make_dataset(folder, sizes: list[int]) -> pa.Table:
    """A dataset folder whose parts hold `sizes` rows each (0: an empty part), and the table it holds."""
    sink = io.DatasetSink(folder, len(sizes))
    at = 0
    for i, k in enumerate(sizes):
        part = io.ParquetSink(sink.tmp / io.PART.format(i), SCHEMA, {"stage": "test", "fingerprint": "f"})
        rows = pa.table({"n": np.arange(at, at + k), "word": [f"w{j}" for j in range(at, at + k)]}, schema=SCHEMA)
        for piece in (rows.slice(0, k // 2), rows.slice(k // 2)):  # two row groups a part
            part.write(piece)
        part.commit()
        at += k
    (sink.tmp / "part-00001.parquet.tmp-999999").write_bytes(b"half a part of a killed worker")
    sink.commit()
    return pa.table({"n": np.arange(at), "word": [f"w{j}" for j in range(at)]}, schema=SCHEMA)


def test_every_reader_takes_a_dataset_folder(tmp_path):
    path = tmp_path / "03_chunks.parquet"
    whole = make_dataset(path, [7, 0, 10, 3])
    assert sorted(p.name for p in path.iterdir()) == [
        f"part-{i:05d}.parquet" for i in range(4)]  # the killed worker's leftover is gone
    assert io.row_count(path) == 20
    assert io.read_meta(path) == {"stage": "test", "fingerprint": "f"}
    assert io.read_table(path).equals(whole.replace_schema_metadata(io.read_table(path).schema.metadata))
    assert pa.Table.from_batches(list(io.iter_batches(path, batch_size=4))).column("n").to_pylist() == list(range(20))
    assert io.read_column(path, "n", np.int64, 20, threads=2).tolist() == list(range(20))
    assert io.take_rows(path, "word", [19, 0, 8, 7, 12]) == ["w19", "w0", "w8", "w7", "w12"]
    # Row ranges across part boundaries (7 | 0 | 10 | 3), as the next stage's partitions read them.
    for start, stop in ((0, 20), (5, 9), (7, 17), (16, 20), (3, 3)):
        got = [v for b in iter_rows(RowRange(str(path), start, stop), ["n"], batch_size=2)
               for v in b.column("n").to_pylist()]
        assert got == list(range(start, stop)), (start, stop)
    assert pd.read_parquet(path)["n"].tolist() == list(range(20))  # the README's pandas line
    text = show_file(path, rows=2, columns=None)
    assert "20 rows · 2 columns" in text and "in 4 part files (a dataset folder)" in text and "w1" in text


def test_a_file_replaces_a_folder_and_a_folder_a_file(tmp_path):
    path = tmp_path / "02_preprocessed.parquet"
    make_dataset(path, [2, 2])
    sink = io.ParquetSink(path, SCHEMA, {"stage": "file"})
    sink.write(pa.table({"n": [1], "word": ["x"]}, schema=SCHEMA))
    sink.commit()
    assert path.is_file() and io.read_meta(path) == {"stage": "file"}
    make_dataset(path, [1, 4])
    assert path.is_dir() and io.row_count(path) == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["02_preprocessed.parquet"]  # nothing aside left


@pytest.fixture()
def sample_cfg(tmp_path):
    return write_config(tmp_path, documents={"input": str(REPO / "data" / "sample")},
                        retrieval={"queries": str(REPO / "data" / "queries.txt"),
                                   "qrels": str(REPO / "data" / "qrels.tsv")})


def test_stages_written_as_parts_equal_the_local_files_and_stay_fresh(tmp_path, sample_cfg):
    out = {}
    for name, engine in (("local", LocalEngine()), ("parts", InlineEngine(partition_rows=4))):
        cfg = load_config(sample_cfg, [f"paths.output={tmp_path / name}"])
        for stage in STAGES:
            run_stage(stage.number, load_stage(stage.number).run, cfg, quiet=True, engine=engine)
        out[name] = tmp_path / name
    for stage in STAGES:
        for name in stage.outputs:
            a, b = pd.read_parquet(out["local"] / name), pd.read_parquet(out["parts"] / name)
            assert len(a) > 0 and a.map(repr).equals(b.map(repr)), name
            assert io.read_meta(out["local"] / name)["fingerprint"] == io.read_meta(out["parts"] / name)["fingerprint"]
    assert [(out["parts"] / s.outputs[0]).is_dir() for s in STAGES] == [True, True, True, True, False]
    # 04: the chunks one part per partition, the postings one per shard of terms; the terms one file.
    assert len(io.part_files(out["parts"] / "04_chunks.parquet")) == 22  # 88 chunks, 4 a partition
    assert len(io.part_files(out["parts"] / "04_postings.parquet")) > 1
    assert (out["parts"] / "04_terms.parquet").is_file()
    # run_pipeline (local engine) reads the folders: everything fresh; --force rewrites them as files.
    status = run_script("run_pipeline.py", "--config", str(sample_cfg), "--set", f"paths.output={out['parts']}",
                        "--status").stdout
    assert status.count(" fresh") == 5 and "stale" not in status
    assert "     88 rows" in status  # 03_chunks: the parts' rows counted together
    run_script("run_pipeline.py", "--config", str(sample_cfg), "--set", f"paths.output={out['parts']}", "--force")
    assert [(out["parts"] / s.outputs[0]).is_file() for s in STAGES] == [True] * 5
    assert pd.read_parquet(out["parts"] / "03_chunks.parquet").map(repr).equals(
        pd.read_parquet(out["local"] / "03_chunks.parquet").map(repr))


def test_show_lists_a_dataset_as_one_output(tmp_path):
    make_dataset(tmp_path / "01_documents.parquet", [3, 4])
    proc = subprocess.run([sys.executable, "-m", "pipekit", "show", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "01_documents.parquet" in proc.stdout and "7 rows" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "pipekit", "show", str(tmp_path / "01_documents.parquet")],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0 and "7 rows · 2 columns" in proc.stdout


def test_a_killed_runs_temp_and_aside_folders_are_swept(tmp_path):
    """SIGKILL gives a client no chance to clean up: its `<name>.tmp-PID/` of part files (or
    the old output it had just renamed aside) would otherwise stay beside the output for ever."""
    path = tmp_path / "03_chunks.parquet"
    for leftover in (f"{path.name}.tmp-999999", f"{path.name}.old-999998"):
        (tmp_path / leftover).mkdir()
        (tmp_path / leftover / "part-00000.parquet").write_bytes(b"x" * 100)
    make_dataset(path, [2])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["03_chunks.parquet"]


def test_row_groups_are_read_through_one_reader_a_file_and_thread(tmp_path, monkeypatch):
    # Opening a ParquetFile parses its whole footer (640 KB for 03_chunks at 1M passages):
    # one open per row group made stage 05's hit texts 1.5 s there (issue 47).
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"n": np.arange(100), "word": [f"w{j}" for j in range(100)]}), path, row_group_size=10)
    opened = []
    real = pq.ParquetFile
    monkeypatch.setattr(io.pq, "ParquetFile", lambda f, *a, **k: opened.append(f) or real(f, *a, **k))
    assert io.take_rows(path, "word", [99, 0, 55, 12, 31, 78], threads=1) == ["w99", "w0", "w55", "w12", "w31", "w78"]
    assert io.read_column(path, "n", np.int64, 100, threads=1).tolist() == list(range(100))
    # row_groups() reads the footer once per call, then one reader serves every group
    assert len(opened) == 4
