"""What a newcomer runs into first: no venv, an empty folder, a lost --set, `--set key value`, a bare glob."""
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, run_script


def without_site(*args, cwd=REPO):
    """Run as a Python without the project's packages would: `-S` leaves site-packages out."""
    return subprocess.run([sys.executable, "-S", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", [["01_documents.py"], ["05_retrieval.py", "--explain"], ["run_pipeline.py"],
                                     ["-m", "pipekit", "show", "data"]])
def test_outside_the_venv_says_how_to_activate_it(command):
    proc = without_site(*command)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert "has no module 'yaml'" in proc.stderr
    assert "virtual environment" in proc.stderr and "bin/activate" in proc.stderr


def test_with_a_venv_folder_it_says_activate(tmp_path):
    copy = tmp_path / "repo"
    shutil.copytree(REPO / "pipekit", copy / "pipekit", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "03_chunking.py", copy)
    (copy / ".venv" / "bin").mkdir(parents=True)
    (copy / ".venv" / "bin" / "activate").write_text("# made by python -m venv\n")
    proc = without_site("03_chunking.py", cwd=copy)
    assert proc.stderr.startswith("03_chunking.py: error: ")
    assert proc.stderr.rstrip().endswith("activate the project's virtual environment first: `. .venv/bin/activate`")


def test_imported_as_a_library_it_raises_with_the_same_advice():
    proc = without_site("-c", f"import sys; sys.path.insert(0, {str(REPO)!r}); import pipekit")
    assert proc.returncode == 1
    assert "ModuleNotFoundError" in proc.stderr and "virtual environment" in proc.stderr


def test_an_input_folder_with_no_files_is_an_error(tmp_path):
    (tmp_path / "docs").mkdir()
    out = tmp_path / "out"
    proc = run_script("run_pipeline.py", "--set", f"documents.input={tmp_path / 'docs'}",
                      "--set", f"paths.output={out}", check=False)
    assert proc.returncode == 1
    assert proc.stderr == f"run_pipeline: error: documents.input: the folder {tmp_path / 'docs'} holds no documents to read\n"
    assert not out.exists() or not any(out.glob("*.parquet"))
    assert "nDCG" not in proc.stdout


def test_run_this_first_keeps_config_and_set(tmp_path):
    cfg = tmp_path / "my.yaml"
    cfg.write_text(f"paths:\n  output: {tmp_path / 'out'}\ndocuments:\n  input: {REPO / 'data' / 'sample'}\n")
    proc = run_script("04_indexing.py", "--config", str(cfg), "--set", "chunking.target=200", check=False)
    opts = f"--config {cfg} --set chunking.target=200"
    assert proc.returncode == 1
    assert (f"run `python 03_chunking.py {opts}` first (or `python run_pipeline.py --to 3 {opts}`)"
            in proc.stderr)
    # and the command it names does what it says: it makes the missing file where 04 looks
    run_script("run_pipeline.py", "--to", "3", "--config", str(cfg), "--set", "chunking.target=200")
    run_script("04_indexing.py", "--config", str(cfg), "--set", "chunking.target=200")


def test_quoting_in_the_hint_survives_the_shell(tmp_path):
    out = tmp_path / "my out"
    proc = run_script("05_retrieval.py", "--set", f"paths.output={out}",
                      "--set", "retrieval.queries=[a b, c]", check=False)
    assert f"`python 04_indexing.py '--set' 'paths.output={out}'" not in proc.stderr
    assert f"`python 04_indexing.py --set 'paths.output={out}' --set 'retrieval.queries=[a b, c]'` first" in proc.stderr


def test_set_with_a_space_instead_of_equals_says_what_to_type():
    for script, name in (("03_chunking.py", "03_chunking"), ("run_pipeline.py", "run_pipeline")):
        proc = run_script(script, "--set", "chunking.target", "200", check=False)
        assert proc.returncode == 2
        assert proc.stderr == (f"{name}: error: --set takes section.key=VALUE as one word: "
                               "type --set chunking.target=200\n")


def test_an_unquoted_glob_says_how_to_quote_it(tmp_path):
    proc = run_script("01_documents.py", "--set", f"paths.output={tmp_path}", "--set", "documents.exclude=*.csv",
                      check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    hint = """--set 'documents.exclude=["*.csv"]'"""
    assert proc.stderr.rstrip().endswith(f"quote the patterns for YAML and the option for the shell: {hint}")
    # typed as suggested (the shell removes the single quotes), it works
    proc = run_script("01_documents.py", "--set", f"paths.output={tmp_path}", "--set", 'documents.exclude=["*.csv"]')
    assert "tables/incidents.csv" in proc.stdout and "skipped" in proc.stdout


# --- a closed pipe loses nothing -------------------------------------------------------


@pytest.fixture(scope="module")
def sample_out(sample_default_run):
    return sample_default_run  # the session's one default run of the sample (tests/conftest.py)


def test_a_closed_pipe_never_costs_stage_05_its_outputs(sample_out, tmp_path):
    """`python 05_retrieval.py --explain | head -40` ended the stage before its commit: the
    README's next command then found no `explain` column. Stdout closed before the first
    line is the harshest case of it."""
    import pyarrow.parquet as pq

    out = tmp_path / "out"
    shutil.copytree(sample_out, out)
    (out / "05_results.parquet").unlink()
    proc = subprocess.Popen([sys.executable, "05_retrieval.py", "--explain", "--set", f"paths.output={out}"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert "explain" in pq.read_schema(out / "05_results.parquet").names
    assert stderr.count("\n") == 1 and "output cut" in stderr and "outputs written up to 05_retrieval" in stderr, stderr


def test_prints_during_a_stage_cannot_abort_it(tmp_path, monkeypatch, capsys):
    """Any print inside a stage's run() (an engine's message, a future progress line) meets
    the closed pipe before the commit: the stage still commits, then reports the cut."""
    import io as _io

    import pyarrow as pa

    from pipekit import cli

    class Closed(_io.StringIO):
        def write(self, text):
            raise BrokenPipeError

    def run(ctx):
        print("a line nobody reads")
        ctx.write_table("01_documents.parquet", pa.table({"doc_id": ["a"]}))

    cfg = cli.load_config(None, [f"paths.output={tmp_path}", f"documents.input={REPO / 'data' / 'sample'}"])
    monkeypatch.setattr(sys, "stdout", Closed())
    with pytest.raises(BrokenPipeError):
        cli.run_stage(1, run, cfg, quiet=True)
    assert (tmp_path / "01_documents.parquet").exists()


# --- settings a reading command cannot apply are named, not ignored ---------------------


def test_search_names_a_setting_it_cannot_apply(sample_out):
    """`search … --set indexing.b=0` printed the default scores as if b=0 were in force."""
    ask = lambda *sets: run_script("-m", "pipekit", "search", "when is the change freeze", "-k", "1",
                                   "--set", f"paths.output={sample_out}", *sets)
    plain, with_b = ask(), ask("--set", "indexing.b=0")
    assert plain.stderr == ""
    assert with_b.stdout == plain.stdout  # the index decides b: nothing search can change
    line, = with_b.stderr.splitlines()
    assert line.startswith("python -m pipekit search: --set indexing.b not applied")
    assert f"`python run_pipeline.py --set paths.output={sample_out} --set indexing.b=0` reruns 04_indexing" in line
    applied = ask("--set", "retrieval.section_context=0")  # a retrieval setting search does apply
    assert applied.stderr == "" and applied.stdout != plain.stdout


def test_compare_names_a_setting_it_cannot_apply(sample_out, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(sample_out, out)
    run_script("05_retrieval.py", "--set", f"paths.output={out}", "--set", "retrieval.top_k=3")
    proc = run_script("-m", "pipekit", "compare", "--set", f"paths.output={out}", "--set", "chunking.target=200")
    line, = proc.stderr.splitlines()
    assert "--set chunking.target not applied (compare reads the runs recorded in 05_history.parquet)" in line
    assert "reruns 03_chunking onward" in line


# --- stopwords for questions, and what RM3 may add ----------------------------------------


def test_the_questions_stoplist_drops_what_makes_a_sentence_a_question():
    from pipekit.index.analyzer import Analyzer

    q = "how do I roll back a deploy, and what can we keep from May?"
    assert Analyzer(stopwords="english").analyze(q)[:2] == ["how", "do"]  # Lucene's 33 keep them
    assert Analyzer(stopwords="questions").analyze(q) == ["roll", "back", "deploy", "keep", "from", "may"]


def test_feedback_may_not_add_stopwords_or_common_numbers():
    import numpy as np
    import pyarrow as pa

    from pipekit.index.analyzer import Analyzer
    from pipekit.retrieve.queries import feedback_noise

    terms = pa.array(["00", "2025", "503", "doe", "flag", "how", "what"])
    df = np.array([30, 12, 2, 9, 4, 40, 40])
    noise = feedback_noise(terms, Analyzer(stopwords="english"), df, docs=5)
    # `doe` is how the stemmer spells `does`; 503 is in fewer chunks than feedback reads
    assert dict(zip(terms.to_pylist(), noise.tolist())) == {
        "00": True, "2025": True, "503": False, "doe": True, "flag": False, "how": True, "what": True}


def test_rm3_on_the_sample_adds_no_stopword_or_common_number(sample_out, tmp_path):
    """Before: `what`, `how`, `05`, `00`, `2025` among the terms feedback added."""
    out = tmp_path / "out"
    shutil.copytree(sample_out, out)
    proc = run_script("05_retrieval.py", "--set", f"paths.output={out}", "--set", "retrieval.feedback=rm3",
                      "--set", "retrieval.feedback_terms=1000")
    lines = [line for line in proc.stdout.splitlines() if "feedback added: " in line]
    added = {t for line in lines for t in re.findall(r"(\w+) \d\.\d{3}", line)}
    assert len(lines) == 8 and len(added) > 20
    assert not added & {"what", "how", "do", "i", "when", "which", "who", "why"}
    assert not {t for t in added if t.isdigit()}


# --- a folder made with other settings says so -------------------------------------------


def test_status_and_report_say_the_folder_was_made_with_other_settings(tmp_path):
    """`report --set paths.output=OUT` on a folder made with `--set documents.input=…`
    marked every stage stale with no hint that the settings, not the documents, differed."""
    made_with = ["--set", f"paths.output={tmp_path / 'out'}", "--set", f"documents.input={REPO / 'data/sample/handbook'}"]
    run_script("run_pipeline.py", *made_with)
    forgot = run_script("run_pipeline.py", "--status", "--set", f"paths.output={tmp_path / 'out'}").stdout
    notes = [line for line in forgot.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and "documents.input" in notes[0] and "made with other settings" in notes[0]
    assert "stale" in forgot
    same = run_script("run_pipeline.py", "--status", *made_with).stdout
    assert "note: " not in same and "stale" not in same
    asked = run_script("run_pipeline.py", "--status", *made_with, "--set", "indexing.k1=1.5").stdout
    assert "note: " not in asked and "stale" in asked  # a deliberate --set is a question, not a slip
    # The report compares with the settings given, which is its point when the change was
    # meant; when it was a slip, the page opened later must say so itself, not only the terminal.
    right = run_script("-m", "pipekit", "report", *made_with).stdout
    page = tmp_path / "out" / "report.html"
    assert "note: " not in right and "other-settings" not in page.read_text(encoding="utf-8")
    report = run_script("-m", "pipekit", "report", "--set", f"paths.output={tmp_path / 'out'}").stdout
    notes = [line for line in report.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and notes[0].endswith("; the report says so at its top")
    html = page.read_text(encoding="utf-8")
    top = html.split('<p class="other-settings"><strong>', 1)[1].split("</strong>", 1)[0]
    assert top.startswith(f"note: the outputs in {tmp_path / 'out'} were made with other settings (documents.input ")
    assert html.index("other-settings") < html.index("stale")  # before the stages it explains


# --- the report shows which results the judgements count --------------------------------


def test_report_marks_the_results_the_judgements_count(sample_out, tmp_path):
    """A query's nDCG@10 in the report meant little without seeing which results were the
    relevant ones; now each shown passage of a judged document says so, with its grade."""
    import html

    from pipekit.retrieve.queries import load_qrels

    page_path = tmp_path / "report.html"
    run_script("-m", "pipekit", "report", "--set", f"paths.output={sample_out}", "--out", str(page_path))
    page = page_path.read_text(encoding="utf-8")
    qrels = load_qrels(REPO / "data" / "qrels.tsv")
    for block in re.findall(r"<summary>\[(\w+)\].*?</summary>(.*?)</details>", page, re.S):
        qid, items = block
        for cite, mark in re.findall(r'<span class="cite">(.*?)</span>.*?</span>((?: <span class="rel">relevant \(\d\)</span>)?)<br>', items, re.S):
            doc = html.unescape(cite).split(" › ")[0].split(", p.")[0]
            grade = qrels.get(qid, {}).get(doc)
            assert mark == (f' <span class="rel">relevant ({grade})</span>' if grade else ""), (qid, doc)
    assert page.count('<span class="rel">relevant (') > 10  # the sample's judged documents are found
    unjudged = tmp_path / "unjudged.html"
    run_script("-m", "pipekit", "report", "--set", f"paths.output={sample_out}", "--set", "retrieval.qrels=null",
               "--out", str(unjudged))
    assert 'class="rel">relevant' not in unjudged.read_text(encoding="utf-8")


def test_search_says_when_a_query_is_all_stopwords(sample_out):
    """`search "the of and"` said no passage contained any of its terms, as if the corpus
    lacked them; the analyzer had left no term to look for."""
    proc = run_script("-m", "pipekit", "search", "the of and", "zebra quokka", "--set", f"paths.output={sample_out}")
    stop, missing = proc.stdout.split("zebra quokka")
    assert "every word of it is a stopword or a single letter" in stop and "indexing.stopwords" in stop
    assert "no passage contains any of its terms" in missing and "stopword" not in missing


def test_show_reads_stage_05s_file_stamps(sample_out):
    """The queries/qrels stamps became content hashes; `show` crashed on them (ValueError)."""
    proc = run_script("-m", "pipekit", "show", str(sample_out / "05_results.parquet"), "--rows", "0")
    stamps = [line for line in proc.stdout.splitlines() if "input files[" in line]
    assert len(stamps) == 2 and all("(content " in line for line in stamps), proc.stdout


def test_show_names_the_set_it_cannot_apply(sample_out):
    proc = run_script("-m", "pipekit", "show", str(sample_out / "04_terms.parquet"), "--rows", "1",
                      "--set", "indexing.b=0")
    plain = run_script("-m", "pipekit", "show", str(sample_out / "04_terms.parquet"), "--rows", "1")
    line, = proc.stderr.splitlines()
    assert line.startswith("python -m pipekit show: --set indexing.b not applied") and "04_indexing onward" in line
    assert proc.stdout == plain.stdout


def test_a_closed_pipe_never_stops_run_pipeline_before_its_last_stage(sample_out, tmp_path):
    """`run_pipeline.py | head -1` ran stage 01 and stopped at its first summary line."""
    out = tmp_path / "out"
    shutil.copytree(sample_out, out)
    before = (out / "05_results.parquet").stat().st_mtime_ns
    proc = subprocess.Popen([sys.executable, "run_pipeline.py", "--force", "--set", f"paths.output={out}"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141
    assert (out / "05_results.parquet").stat().st_mtime_ns > before  # every stage ran, 05 too
    assert stderr.count("\n") == 1 and "outputs written up to 05_retrieval" in stderr, stderr


def test_stage_05_says_in_one_line_when_a_query_is_all_stopwords(sample_out, tmp_path):
    """Stage 05 printed "(no chunk contains any of its terms)" for `what is the`, as if the
    collection lacked them; the analyzer had left nothing to look for."""
    out = tmp_path / "out"
    shutil.copytree(sample_out, out)
    proc = run_script("05_retrieval.py", "--set", f"paths.output={out}", "--set", "retrieval.qrels=null",
                      "--set", "retrieval.queries=[rolling back, what is the, zebra quokka]")
    said = "query 2 'what is the' has no searchable terms after stopword removal"
    assert [l.strip() for l in proc.stdout.splitlines() if said in l] == [
        f"{said} (indexing.stopwords; of single letters only capitals count, but A and I: "
        "indexing.single_letters): no results"] * 2  # under it, and in the summary
    zebra = proc.stdout.split("[3] zebra quokka\n", 1)[1].splitlines()[0]
    assert zebra == "    (no chunk contains any of its terms)"  # real words the collection lacks: not stopwords


def test_a_dense_weight_without_vectors_is_said_by_stage_05_search_and_searcher(sample_out, tmp_path):
    """Lesson 6's sweep, run after the command that removes the vectors, printed BM25's figures
    `+0.0000` at every weight and no word of why."""
    import warnings

    from pipekit import Searcher

    out = tmp_path / "out"
    shutil.copytree(sample_out, out)
    assert not (out / "04_vectors.parquet").exists()
    line = ("retrieval.dense_weight 0.1 has no effect: the index has no vectors (stage 04 ran with "
            "indexing.dense_model null), so this is BM25 alone; rerun from 04 with --set indexing.dense_model=wordllama to fuse")
    stage = run_script("05_retrieval.py", "--set", f"paths.output={out}", "--set", "retrieval.dense_weight=0.1")
    assert stage.stdout.count(line) == 1
    search = run_script("-m", "pipekit", "search", "rolling back", "-k", "1", "--set", f"paths.output={out}",
                        "--set", "retrieval.dense_weight=0.1")
    assert search.stderr.count(f"python -m pipekit search: note: {line}\n") == 1
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        Searcher(out, settings={"dense_weight": 0.1})
    assert [str(w.message) for w in said] == [line]
    for quiet in ({"dense_weight": 0}, {"dense_weight": None}):  # BM25 as asked: nothing to say
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            Searcher(out, settings=quiet)
        assert not said
    plain = run_script("05_retrieval.py", "--set", f"paths.output={out}", "--set", "retrieval.dense_weight=0")
    assert "has no effect" not in plain.stdout


def test_snippets_show_the_passage_not_its_page_markers(sample_out, tmp_path):
    """The field guide's chunks open with `--- page 3 (cont.) ---`: stage 05's preview, `search`
    and the report showed that line as the passage's first words.  The citation says the page."""
    import pyarrow.parquet as pq

    from pipekit.index.analyzer import Analyzer
    from pipekit.retrieve.search import snippet

    chunks = pq.read_table(sample_out / "03_chunks.parquet").to_pandas()
    marked = chunks[chunks.text.str.startswith("--- page 3 (cont.) ---") & (chunks.doc_id == "field-guide.pdf")]
    assert len(marked) == 1  # the sample still has the case this test is about
    text = marked.text.iloc[0]
    shown = snippet(text, {"acknowledg"}, Analyzer.from_settings({"stemmer": "english", "stopwords": "questions"}))
    assert "--- page" not in shown and "page 3" not in shown and shown.startswith("The first fifteen minutes")
    out = tmp_path / "out"
    shutil.copytree(sample_out, out)
    query = "when a page arrives acknowledge it within five minutes"
    stage = run_script("05_retrieval.py", "--set", f"paths.output={out}", "--set", "retrieval.qrels=null",
                       "--set", f"retrieval.queries=[{query}]").stdout
    search = run_script("-m", "pipekit", "search", query, "-k", "5", "--set", f"paths.output={out}").stdout
    report = out / "r.html"
    run_script("-m", "pipekit", "report", "--set", f"paths.output={out}", "--out", str(report))
    for printed in (stage, search, report.read_text(encoding="utf-8")):
        assert "field-guide" in printed and "--- page" not in printed
