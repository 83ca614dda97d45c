"""Progress while embedding (issue 37): a bar of chunks (count, chunks/s, time left) and, once
the rate is measured, stage 04's forecast of how long the rest takes — on a terminal only.

The issue: 12,461 chunks took a model folder 7.5 minutes, WordLlama 28 s, both in silence,
and an engineer with 24,000 chunks estimated 50 minutes and did not try.  What is checked:
the forecast's wording (`rough_duration`, `forecast_line`), that it is said once and only
after a second or a full block of embedding (`Forecast`), that a model folder reports each
packed pass (`BertFolder.embed`'s `done`), and stage 04 itself under a pseudo-terminal, for
WordLlama and for a model folder, against the same run with stderr a pipe: silence there.
"""
from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest

from conftest import REPO, write_config, read_terminal

pytest.importorskip("wordllama")

from pipekit.index import dense  # noqa: E402
from test_dense import WORDS, tiny_bert  # noqa: E402

N_RECORDS = 1200  # enough chunks for a forecast: more than one block of EMBED_BATCH


def test_a_duration_is_said_as_a_person_says_it():
    assert dense.rough_duration(0.2) == "about 1 s"
    assert dense.rough_duration(28.4) == "about 28 s"
    assert dense.rough_duration(450) == "about 8 min"
    assert dense.rough_duration(3000) == "about 50 min"
    assert dense.rough_duration(4200) == "about 1 h 10 min"
    assert dense.rough_duration(7200) == "about 2 h"


def test_the_forecast_names_the_chunks_left_the_model_and_the_measured_rate():
    line = dense.forecast_line("all-MiniLM-L6-v2", 12_205, 21.5, 256, may_copy=False)
    assert line == ("04 vectors: 12,205 chunks left to embed with all-MiniLM-L6-v2: about 9 min "
                    "(22 chunks/s over the first 256)")
    assert "unchanged since the last run" in dense.forecast_line("wordllama", 100, 400.0, 256, may_copy=True)


def test_the_forecast_is_said_once_after_a_second_or_a_block(monkeypatch):
    from pipekit.run import engine

    said = []
    monkeypatch.setattr(engine, "tell", lambda message: said.append(message(1000)))
    f = dense.Forecast("wordllama", may_copy=False)
    f.embedded(10, 0.01)  # 10 chunks in 10 ms: too little to measure a rate on
    assert said == []
    f.embedded(30, 1.0)  # a second has gone by: 40 chunks in 1.01 s
    assert said == ["04 vectors: 1,000 chunks left to embed with wordllama: about 25 s (40 chunks/s over the first 40)"]
    f.embedded(500, 1.0)
    assert len(said) == 1  # once
    g = dense.Forecast("wordllama", may_copy=False)
    g.embedded(dense.EMBED_BATCH, 0.2)  # a full block, however fast
    assert len(said) == 2


def test_a_model_folder_reports_each_packed_pass(tmp_path, monkeypatch):
    folder = tiny_bert(tmp_path / "bert")
    model = dense.BertFolder(folder)
    monkeypatch.setattr(dense, "TOKENS_PER_BATCH", 64)  # several passes for these texts
    texts = [" ".join(WORDS[i:i + 1 + i % 9]) for i in range(40)]
    steps = []
    vectors = model.embed(texts, done=steps.append)
    assert len(steps) > 1 and sum(steps) == len(texts)
    assert (vectors == model.embed(texts)).all()  # being told changes nothing


def corpus(tmp_path):
    lines = [json.dumps({"_id": f"d{i}", "title": f"Record {i}",
                         "text": " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(12))})
             for i in range(N_RECORDS)]
    (tmp_path / "corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path / "corpus.jsonl"


def stage_04_on_a_terminal(cfg, *sets: str) -> tuple[subprocess.CompletedProcess, str]:
    """Stage 04 (--force) with stderr on a pseudo-terminal 120 columns wide: what a person sees."""
    cmd = [sys.executable, "04_indexing.py", "--config", str(cfg), "--force"]
    for s in sets:
        cmd += ["--set", s]
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    seen = read_terminal(master)
    out = proc.stdout.read().decode()
    proc.wait(timeout=600)
    assert proc.returncode == 0, out + seen.decode(errors="replace")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, ""), seen.decode(errors="replace")


@pytest.mark.parametrize("model", ["wordllama", "folder"])
def test_stage_04_shows_a_bar_of_chunks_and_a_forecast_on_a_terminal_only(tmp_path, model):
    spec = "wordllama" if model == "wordllama" else str(tiny_bert(tmp_path / "bert"))
    cfg = write_config(tmp_path, documents={"input": str(corpus(tmp_path))},
                       indexing={"dense_model": spec}, retrieval={"queries": ["wing flutter"], "qrels": None})
    piped = subprocess.run([sys.executable, "run_pipeline.py", "--config", str(cfg), "--to", "4"], cwd=REPO,
                           capture_output=True, text=True, timeout=600)
    assert piped.returncode == 0, piped.stderr
    assert piped.stderr == ""  # no bar, no forecast in a log
    name = "wordllama" if model == "wordllama" else "bert"
    assert f"{N_RECORDS:,} chunks embedded by" in piped.stdout

    proc, seen = stage_04_on_a_terminal(cfg)
    assert f"04 vectors: " in seen and f"/{N_RECORDS} [" in seen, seen[-600:]
    assert "chunk/s]" in seen  # the bar's rate, in chunks
    if model == "folder":  # a model folder's work is its word pieces: the bar counts them too
        assert "tokens embedded" in seen, seen[-600:]
    told = [line for line in seen.replace("\r", "\n").splitlines() if "chunks left to embed with" in line]
    assert len(told) == 1, seen[-600:]
    assert told[0].startswith("04 vectors: ") and f"with {name}: about " in told[0]
    left = int(told[0].split("04 vectors: ")[1].split(" chunks left")[0].replace(",", ""))
    assert 0 < left < N_RECORDS  # said once the first chunks were measured, of the rest
    assert "chunks left" not in proc.stdout  # the summary on stdout is unchanged
