"""pipekit's house rules, read from the imports themselves (scripts/import_graph.py)."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import import_graph  # noqa: E402


def test_no_module_imports_another_in_a_circle():
    assert import_graph.circles(import_graph.build()) == []


def test_a_circle_is_found_when_there_is_one():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_graph.circles(graph) == [["a", "b", "c"]]


def test_no_room_imports_a_room_above_it():
    assert import_graph.upward(import_graph.build()) == []


def test_an_import_from_the_plumbing_up_into_a_stage_room_is_named():
    graph = {"pipekit.run.freshness": {"pipekit.read.walk"}, "pipekit.read.walk": set()}
    assert import_graph.upward(graph) == [("pipekit.run.freshness", "pipekit.read.walk")]


def test_function_level_imports_count(tmp_path, monkeypatch):
    pkg = tmp_path / "pipekit"
    (pkg / "run").mkdir(parents=True)
    (pkg / "read").mkdir()
    (pkg / "run" / "a.py").write_text("def f():\n    from pipekit.read import b\n")
    (pkg / "read" / "b.py").write_text("from ..run import a\n")
    monkeypatch.setattr(import_graph, "PACKAGE", pkg)
    graph = import_graph.build()
    assert graph["pipekit.run.a"] == {"pipekit.read.b"}
    assert graph["pipekit.read.b"] == {"pipekit.run.a"}
    assert import_graph.circles(graph) == [["pipekit.read.b", "pipekit.run.a"]]


def test_the_script_prints_the_rooms_and_exits_0():
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "import_graph.py")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "circles: 0" in out.stdout and "arrows upward (a room importing one above it): 0" in out.stdout
    for room in ("run/", "read/", "chunk/", "index/", "retrieve/", "tools/"):
        assert f"  {room}" in out.stdout


def test_at_most_a_handful_of_modules_stay_at_the_top():
    top = sorted(p.name for p in (REPO / "pipekit").glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "cli.py"]


def _imports_of_stage_file(script: Path, graph: dict) -> set[str]:
    """Every pipekit module a stage file uses, directly or through other modules."""
    known = set(graph)
    seen, todo = set(), list(import_graph.imports_of(script, "stage", known))
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            if import_graph.room(m) != "top":  # `import pipekit` and cli: the wiring, not the stage's algorithm
                todo += graph[m]
    return seen


def test_each_stage_fingerprints_the_code_it_runs():
    """A stage's `code` (what makes its output stale when edited) covers every module of the
    stage rooms its file reaches: a module a stage starts using cannot be left out.
    The plumbing (run/, cli) is listed where it decides rows (engine, incremental)."""
    from pipekit.run.stages import STAGES

    graph = import_graph.build()
    for stage in STAGES:
        used = _imports_of_stage_file(REPO / stage.script, graph)
        files = {m.replace(".", "/") + ".py" for m in used if import_graph.room(m) not in ("run", "top")}
        covered = {f for f in files if any(f == c or (c.endswith("/") and f.startswith(c)) for c in stage.code)}
        assert files - covered == set(), f"{stage.label}: code does not list {sorted(files - covered)}"
