"""pyproject.toml: `pip install -e <clone>` makes pipekit importable from any folder and puts a
`pipekit` command on PATH.  Installed into a fresh virtual environment, offline: it sees this
one's packages through a .pth file (so nothing is downloaded), and pip builds the editable
wheel with the setuptools and wheel already here (--no-build-isolation)."""
import json
import subprocess
import sys
import sysconfig

import pytest

from conftest import REPO, run_script, write_config


def _can_build_offline() -> bool:
    try:
        import setuptools
        import wheel  # noqa: F401  (setuptools < 70.1 builds editable wheels with wheel's bdist_wheel)
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= 64  # PEP 660 editable installs


@pytest.mark.skipif(not _can_build_offline(), reason="setuptools >= 64 and wheel are needed to build the "
                    "editable install offline (pip install -r requirements-dev.txt)")
def test_an_editable_install_searches_from_another_folder(tmp_path):
    out = tmp_path / "out"
    run_script("run_pipeline.py", "--set", f"paths.output={out}")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "project_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                          "--no-index", "-q", "-e", str(REPO)], cwd=elsewhere, capture_output=True, text=True,
                         timeout=300)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    command = subprocess.run([str(venv / "bin" / "pipekit"), "search", "how do I undo a bad release", "-k", "2",
                              "--json", "--set", f"paths.output={out}"], cwd=elsewhere, capture_output=True,
                             text=True, timeout=300)
    assert command.returncode == 0, command.stderr
    hits = [json.loads(line) for line in command.stdout.splitlines()]
    module = run_script("-m", "pipekit", "search", "how do I undo a bad release", "-k", "2", "--json",
                        "--set", f"paths.output={out}")
    assert hits == [json.loads(line) for line in module.stdout.splitlines()] and len(hits) == 2
    imported = subprocess.run([str(venv / "bin" / "python"), "-c",
                               "import pipekit, sys; print(pipekit.__file__); "
                               f"print(pipekit.Searcher({str(out)!r}).search('change freeze', k=1)[0].link)"],
                              cwd=elsewhere, capture_output=True, text=True, timeout=300)
    assert imported.returncode == 0, imported.stderr
    where, link = imported.stdout.splitlines()
    assert where == str(REPO / "pipekit" / "__init__.py")
    assert link == "handbook/operations/deploys.md#change-freezes"
    # An agent's MCP client launches the installed command as the README configures it:
    # the command, `serve --config FILE`, from whatever folder the client runs in.
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    config = write_config(tmp_path)  # paths.output: tmp_path/out

    async def ask():
        server = StdioServerParameters(command=str(venv / "bin" / "pipekit"), args=["serve", "--config", str(config)],
                                       cwd=str(elsewhere))
        async with Client(server, read_timeout_seconds=60) as client:
            answer = await client.call_tool("search", {"query": "change freeze", "k": 1})
            return answer.structured_content["hits"][0]["link"]

    assert anyio.run(ask) == "handbook/operations/deploys.md#change-freezes"
