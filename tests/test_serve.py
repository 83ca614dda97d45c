"""`python -m pipekit serve`, called as agents and programs call it: the official MCP client
over stdio and over streamable HTTP, the JSON API with plain HTTP, and the index switched
under load while the folder is edited."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import pytest

from conftest import REPO, write_config
from pipekit import Searcher
from pipekit.retrieve.sections import section_codes
from pipekit.serve.service import MAX_K, Service, outputs_signature
from pipekit.serve.watch import Watcher
from pipekit.run.config import load_config

from mcp import Client  # the official SDK's client: the server is called as agents call it
from mcp.client.stdio import StdioServerParameters

QUESTION = "change freeze"


def build(folder: Path) -> Path:
    """The bundled sample copied to folder/docs and indexed (stages 01-04) into folder/out."""
    shutil.copytree(REPO / "data" / "sample", folder / "docs")
    config = write_config(folder, documents={"input": str(folder / "docs")})
    proc = subprocess.run([sys.executable, "run_pipeline.py", "--config", str(config), "--to", "4"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return config


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("serve"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, headers: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def hits(url: str) -> list[dict]:
    """A search's hits; a failed call fails the test with the server's own words."""
    code, body = get(url)
    assert code == 200, body
    return body["hits"]


class Server:
    """`python -m pipekit serve --http 127.0.0.1:PORT …` as a child process, stopped at the end."""

    def __init__(self, config: Path, *args: str, host: str = "127.0.0.1"):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "pipekit", "serve", "--config", str(config),
                                      "--http", f"{host}:{self.port}", *args], cwd=REPO,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def __enter__(self):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.proc.communicate()
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.1)
        raise AssertionError("the server did not start listening within 60 s")

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.out, self.err = self.proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.out, self.err = self.proc.communicate()
        if exc[0] is not None:  # a failed test shows what the server said (a 500's traceback)
            print(f"the server's stderr:\n{self.err}")


def expected(config: Path, query: str = QUESTION, k: int = 5, **kw) -> list[dict]:
    """What pipekit.Searcher answers, as JSON would carry it."""
    out = load_config(config)["paths"]["output"]
    return json.loads(json.dumps([h.to_json() for h in Searcher(out).search(query, k, **kw)]))


async def talk_to(client: Client, config: Path) -> None:
    """The same conversation over either transport: list, search, read, status, then bad calls."""
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {"search", "read", "status"}
    assert "chunk_id" in tools["read"].description and "citation" in tools["search"].description
    assert tools["search"].input_schema["properties"]["k"]["maximum"] == MAX_K

    r = await client.call_tool("search", {"query": QUESTION, "k": 3})
    assert not r.is_error
    assert r.structured_content["hits"] == expected(config, k=3)  # hit for hit, score for score
    assert r.structured_content["hits"][0]["citation"].startswith("handbook/operations/deploys.md")
    first = r.structured_content["hits"][0]["chunk_id"]

    r = await client.call_tool("search", {"query": "incident", "k": 4, "formats": ["csv"]})
    assert not r.is_error and r.structured_content["hits"] == expected(config, "incident", 4, formats=["csv"])
    assert {h["format"] for h in r.structured_content["hits"]} == {"csv"}

    r = await client.call_tool("read", {"chunk_id": first, "around": 1})
    assert not r.is_error and first in [p["chunk_id"] for p in r.structured_content["passages"]]
    r = await client.call_tool("status", {})
    assert not r.is_error and r.structured_content["chunks"] == Searcher(
        load_config(config)["paths"]["output"]).index.stats["N"]

    bad = [("search", {"query": "x", "k": 10 ** 9}, "less than or equal to 50"),
           ("search", {"query": ""}, "query is empty"),
           ("search", {"query": "   "}, "query is empty"),
           ("search", {"query": "x" * 5000}, "over the limit of 1,000"),
           ("search", {"query": "x", "k": "many"}, "valid integer"),
           ("search", {"query": "x", "k": "9" * 10_000 + "x"}, "as an integer"),
           ("search", {"query": 5}, "valid string"),
           ("search", {"query": "x", "paths": "not a list"}, "paths"),
           ("search", {"query": "x", "paths": ["nowhere/**"]}, "nowhere"),
           ("read", {"chunk_id": "no/such.md#0"}, "no chunk 'no/such.md#0'"),
           ("read", {"chunk_id": "../../etc/passwd"}, "no chunk"),
           ("read", {"chunk_id": first, "around": 500}, "less than or equal to 20"),
           ("nosuchtool", {}, "Unknown tool")]
    for tool, args, words in bad:
        r = await client.call_tool(tool, args)
        text = r.content[0].text
        assert r.is_error, (tool, args)
        assert words in text and "\n" not in text and "Traceback" not in text and len(text) < 400, text
    # ... and it still serves.
    r = await client.call_tool("search", {"query": QUESTION, "k": 3})
    assert not r.is_error and r.structured_content["hits"] == expected(config, k=3)


def test_an_agent_over_stdio_lists_searches_reads_and_survives_bad_calls(sample):
    async def main():
        server = StdioServerParameters(command=sys.executable, args=["-m", "pipekit", "serve", "--config", str(sample)],
                                       cwd=str(REPO))
        async with Client(server, read_timeout_seconds=60) as client:
            await talk_to(client, sample)

    anyio.run(main)


def test_an_agent_over_http_and_a_program_over_json(sample):
    with Server(sample) as server:
        async def main():
            async with Client(server.base + "/mcp", read_timeout_seconds=60) as client:
                await talk_to(client, sample)

        anyio.run(main)
        # The JSON API beside it answers the same.
        code, body = get(f"{server.base}/search?q=change+freeze&k=3")
        assert code == 200 and body["hits"] == expected(sample, k=3)
        code, body = get(f"{server.base}/search?q=incident&k=2&format=csv&in=tables/**")
        assert code == 200 and body["hits"] == expected(sample, "incident", 2, formats=["csv"], paths=["tables/**"])
        hit = body["hits"][0]["chunk_id"]
        code, body = get(f"{server.base}/read?chunk_id={urllib.parse.quote(hit)}&around=1")
        assert code == 200 and hit in [p["chunk_id"] for p in body["passages"]]
        code, body = get(f"{server.base}/search?q=change+freeze&k=50&format=markdown")
        n = len(expected(sample, k=50, formats=["markdown"]))
        assert code == 200 and len(body["hits"]) == n < 50
        assert body["note"] == f"{n} of 50: only {n} passages of the 11 documents the formats filter keeps contain a term of the query"
        code, body = get(f"{server.base}/status")
        assert code == 200 and body["documents"]["by_format"]["markdown"] == 11
        assert body["not_read"]["total"] == 1 and body["folder_changed_since"] is False
        for url, status, words in [("/search?q=", 400, "query is empty"), ("/search?q=x&k=abc", 400, "whole number"),
                                   ("/search?q=x&k=0", 400, "from 1 to 50"),
                                   ("/read?chunk_id=nope", 404, "no chunk"), ("/read?chunk_id=x&section=maybe", 400,
                                                                              "true or false")]:
            code, body = get(server.base + url)
            assert (code, words in body["error"]) == (status, True), (url, code, body)
        # Malformed JSON-RPC gets an error, and the server keeps serving.
        for raw in (b"{not json", b'{"jsonrpc": "2.0", "method": 5}', b"[]"):
            request = urllib.request.Request(server.base + "/mcp", data=raw, method="POST", headers={
                "Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(request, timeout=30)
            assert 400 <= e.value.code < 500
        # The JSON API answers GET (and HEAD); another method is told so.
        request = urllib.request.Request(f"{server.base}/search?q=change+freeze", data=b"", method="POST")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(request, timeout=30)
        assert e.value.code == 405 and json.loads(e.value.read())["error"] == "/search answers GET; got POST"
        with urllib.request.urlopen(urllib.request.Request(f"{server.base}/status", method="HEAD"), timeout=30) as r:
            assert r.status == 200 and r.read() == b"" and int(r.headers["content-length"]) > 100
        assert hits(f"{server.base}/search?q=change+freeze&k=3") == expected(sample, k=3)
        # DNS rebinding: a Host that is not this server's, an Origin of another site.
        code, body = get(f"{server.base}/status", {"Host": "attacker.example:80"})
        assert code == 421 and "not this server's" in body["error"]
        code, body = get(f"{server.base}/status", {"Origin": "http://attacker.example"})
        assert code == 403 and "--allow-origin" in body["error"]
        assert get(f"{server.base}/status", {"Origin": f"http://localhost:{server.port}"})[0] == 200


def test_a_token_guards_every_route_and_a_public_bind_needs_one(sample):
    with Server(sample, "--token", "s3cret") as server:
        assert get(f"{server.base}/status")[0] == 401
        assert get(f"{server.base}/status", {"Authorization": "Bearer wrong"})[0] == 401
        assert get(f"{server.base}/status", {"Authorization": "Bearer s3cret"})[0] == 200
        request = urllib.request.Request(server.base + "/mcp", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(request, timeout=30)
        assert e.value.code == 401

        async def main():
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            http = create_mcp_http_client(headers={"Authorization": "Bearer s3cret"})
            async with Client(streamable_http_client(server.base + "/mcp", http_client=http)) as client:
                r = await client.call_tool("search", {"query": QUESTION, "k": 2})
                assert r.structured_content["hits"] == expected(sample, k=2)

        anyio.run(main)
    proc = subprocess.run([sys.executable, "-m", "pipekit", "serve", "--config", str(sample), "--http",
                           f"0.0.0.0:{free_port()}"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "--token" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    # A port another program holds: one line, before the index is loaded (one process or several).
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        for workers in ("1", "2"):
            proc = subprocess.run([sys.executable, "-m", "pipekit", "serve", "--config", str(sample), "--http",
                                   f"127.0.0.1:{port}", "--workers", workers], cwd=REPO, capture_output=True,
                                  text=True, timeout=60)
            assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
                f"python -m pipekit serve: error: cannot listen on 127.0.0.1:{port}: Address already in use"]


# ---------------------------------------------------------------------- read


def test_read_stays_in_its_document_and_caps_a_long_section(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    long_section = "\n\n".join(f"Paragraph {i} of the long part, word{i} " + "filler text " * 60 for i in range(60))
    (docs / "a.md").write_text("# A\n\nIntro of a.\n\n## Short\n\nOnly one passage here about herons.\n\n"
                               f"## Long\n\n{long_section}\n", encoding="utf-8")
    (docs / "b.md").write_text("# B\n\nAnother document about herons.\n", encoding="utf-8")
    config = write_config(tmp_path, documents={"input": str(docs)})
    proc = subprocess.run([sys.executable, "run_pipeline.py", "--config", str(config), "--to", "4"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    s = Searcher(tmp_path / "out")
    ids = s.index.chunks.column("chunk_id").to_pylist()
    a_ids = [c for c in ids if c.startswith("a.md#")]
    # The first passage of a document has nothing before it; the last nothing after it.
    first = s.read(a_ids[0], around=2)
    assert [p["chunk_id"] for p in first["passages"]] == a_ids[:3] and not first["truncated"]
    last = s.read("b.md#0", around=3)
    assert [p["chunk_id"] for p in last["passages"]] == ["b.md#0"]
    assert last["citation"] == "b.md › B" and last["text"].startswith(s.read("b.md#0")["text"])
    # A short section is returned whole, and only it.
    short = next(c for c in a_ids if "herons" in s.read(c)["text"])
    sec = s.read(short, section=True)
    assert sec["heading_path"] == ["A", "Short"] and len(sec["passages"]) == 1 and not sec["truncated"]
    # A section longer than the cap: the passages nearest the hit, within the cap, and where to read on.
    codes = section_codes(s.index.chunks.column("doc_id"), s._cited.column("heading_path"))
    middle_row = [i for i, c in enumerate(ids) if c.startswith("a.md#")][-8]
    in_long = [ids[i] for i in range(len(ids)) if codes[i] == codes[middle_row]]
    assert len(in_long) > 10
    got = s.read(ids[middle_row], section=True, max_chars=6000)
    kept = [p["chunk_id"] for p in got["passages"]]
    assert got["truncated"] and ids[middle_row] in kept and len(got["text"]) <= 6000 + 2 * len(kept)
    assert kept == in_long[in_long.index(kept[0]):in_long.index(kept[0]) + len(kept)]  # consecutive
    assert f"of the {len(in_long)} in the section" in got["note"] and "read on from" in got["note"]
    whole = s.read(ids[middle_row], section=True, max_chars=10 ** 9)
    assert [p["chunk_id"] for p in whole["passages"]] == in_long and not whole["truncated"]
    assert whole["heading"] == "A › Long" and whole["start_char"] < whole["end_char"]


# ---------------------------------------------------------------------- fresh


def edit(config: Path, name: str, text: str) -> None:
    path = Path(load_config(config)["documents"]["input"]) / name
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def test_the_index_switches_atomically_under_load_and_a_half_written_index_is_not_served(tmp_path):
    config = build(tmp_path)
    service = Service(load_config(config))
    before = service.current
    failures, answers, stop = [], [], threading.Event()

    def ask():
        while not stop.is_set():
            try:
                answers.append(len(service.search("zebrafish quokka", 5)["hits"]))
                service.search(QUESTION, 5)
            except Exception as exc:  # noqa: BLE001 - any failure is the test's finding
                failures.append(repr(exc))

    askers = [threading.Thread(target=ask) for _ in range(4)]
    for t in askers:
        t.start()
    try:
        # Half a rerun: stage 03 rewritten, stage 04 not yet. Not loaded; the old index serves, and says why.
        edit(config, "handbook/README.md", "\n\nThe zebrafish quokka rule applies.\n")
        subprocess.run([sys.executable, "03_chunking.py", "--config", str(config)], cwd=REPO, check=False,
                       capture_output=True, timeout=300)
        proc = subprocess.run([sys.executable, "run_pipeline.py", "--config", str(config), "--to", "3"], cwd=REPO,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert not service.refresh() and service.current is before
        assert "could not be loaded" in service.status()["reload_error"]
        # The rest of the rerun: now it switches.
        proc = subprocess.run([sys.executable, "run_pipeline.py", "--config", str(config), "--to", "4"], cwd=REPO,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert service.refresh() and service.current is not before
        time.sleep(0.3)
    finally:
        stop.set()
        for t in askers:
            t.join()
    assert failures == []
    assert 0 in answers and any(a > 0 for a in answers)  # the old index's answer, then the new one's
    assert service.search("zebrafish quokka", 5)["hits"][0]["doc_id"] == "handbook/README.md"
    assert service.status()["reload_error"] is None and service.current.signature == outputs_signature(
        Path(load_config(config)["paths"]["output"]))


def test_a_loaded_index_answers_from_what_it_loaded_after_the_files_are_replaced(tmp_path):
    # The server's old index answers calls while the pipeline renames the next run's files
    # over its own.  Its first search used to read the postings' tf by name then: the new
    # run's, three postings longer, and the call failed (seen in CI, mid-switch).
    config = build(tmp_path)
    out = Path(load_config(config)["paths"]["output"])
    old, reference = Searcher(out), Searcher(out)
    asked = [h.to_json() for h in reference.search(QUESTION, 5)]  # loaded and asked before the rerun
    edit(config, "handbook/README.md", "\n\nThe change freeze covers the narwhal quokka release.\n")
    proc = subprocess.run([sys.executable, "run_pipeline.py", "--config", str(config), "--to", "4"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert [h.to_json() for h in old.search(QUESTION, 5)] == asked  # first asked now: the old index's answer
    assert old.search("narwhal", 3) == [] and Searcher(out).search("narwhal", 3)

    # Stage 05's Index holds its postings' tf from the load (in each posting's (tf, length) code,
    # pipekit/retrieve/bm25.py): asked after the file was replaced, it gives the loaded index's
    # counts, never the new file's (which used to be read by name on first need, and refused).
    import pyarrow.parquet as pq

    from pipekit.retrieve.search import OutputReader
    from pipekit.run.stages import load_stage

    index = load_stage(5).Index(OutputReader(out))
    loaded = pq.read_table(out / "04_postings.parquet").column("tf").to_pylist()
    edit(config, "handbook/README.md", "\n\nAnd the walrus.\n")
    proc = subprocess.run([sys.executable, "run_pipeline.py", "--config", str(config), "--to", "4"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert pq.read_table(out / "04_postings.parquet").num_rows != len(loaded)
    assert index.tf.tolist() == loaded


def test_watch_reruns_after_an_edit_and_status_says_the_folder_changed(tmp_path):
    config = build(tmp_path)
    service = Service(load_config(config))
    assert service.status()["folder_changed_since"] is False
    edit(config, "report.txt", "\n\nA note on the narwhal protocol.\n")
    status = service.status()
    assert status["folder_changed_since"] is True and status["changes"]
    assert service.search("narwhal", 3)["hits"] == []

    service.watcher = Watcher(service, ["--config", str(config)], quiet=0.2)
    stop = threading.Event()
    watching = threading.Thread(target=service.watcher.run_forever, args=(stop,))
    watching.start()
    try:
        time.sleep(0.5)
        edit(config, "report.txt", "\n\nAnd the narwhal protocol's second rule.\n")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not service.search("narwhal", 3)["hits"]:
            time.sleep(0.2)
    finally:
        stop.set()
        watching.join()
    hits = service.search("narwhal", 3)["hits"]
    assert hits and hits[0]["doc_id"] == "report.txt"
    state = service.status()["watch"]
    assert state["reruns"] >= 1 and state["last_rerun"]["ok"] and not state["rerunning"]
    assert service.status()["folder_changed_since"] is False


def test_a_failed_watch_rerun_keeps_the_old_index_and_says_why(tmp_path):
    config = build(tmp_path)
    service = Service(load_config(config))
    before = service.current
    watcher = Watcher(service, ["--config", str(config), "--set", "chunking.target=-5"])
    watcher.rerun()
    assert watcher.last["ok"] is False and "chunking.target" in watcher.last["error"]
    assert service.current is before and service.search(QUESTION, 1)["hits"]


def test_a_hits_dict_is_every_field_copied(sample):
    """to_dict is written field by field for speed; it must stay what dataclasses.asdict gives."""
    from dataclasses import asdict

    hits = Searcher(load_config(sample)["paths"]["output"]).search(QUESTION, 10, explain=True)
    assert hits
    for h in hits:
        d = h.to_dict()
        assert d == {**asdict(h), "citation": h.citation}
        d["heading_path"].append("changed")  # a copy: the hit is not changed with it
        assert h.heading_path[-1:] != ["changed"]


def test_status_counts_what_was_not_read_by_reason_not_by_file():
    from pipekit.read.walk import too_large
    from pipekit.serve.service import reason_of

    said = [("skipped", "same bytes as handbook/a.md: read once, as handbook/a.md"),
            ("skipped", "same bytes as b.md: read once, as b.md"),
            ("skipped", too_large(12_582_912, 10 << 20, "markdown")),
            ("skipped", too_large(3 << 20, 1 << 20, "markdown")),
            ("error", "corrupt PDF: truncated (no %EOF at the end), PDFium could not open it (data format error)"),
            ("error", "corrupt PDF: no pages")]
    reasons = [reason_of(*s) for s in said]
    assert reasons[0] == reasons[1] == "skipped: same bytes as …"
    assert reasons[2] == reasons[3] and "documents.max_bytes" in reasons[2] and "12" not in reasons[2]
    assert reasons[4] == reasons[5] == "error: corrupt PDF"
    assert reason_of("error", None) == "error: no message"


def test_the_readme_quotes_the_limits_the_server_has():
    from pipekit.retrieve.reading import MAX_AROUND, MAX_READ_CHARS
    from pipekit.serve import service, watch

    text = " ".join((REPO / "README.md").read_text(encoding="utf-8").split("python -m pipekit serve`", 1)[1]
                    .split("### Writing your own judgements", 1)[0].split())
    assert f"`k` up to {service.MAX_K}" in text and f"1–{service.MAX_K}, default 5" in text
    assert f"a query up to {service.MAX_QUERY_CHARS:,} characters" in text
    assert f"{service.MAX_FILTERS} `paths`/`formats`" in text and service.MAX_RESPONSE_BYTES == 1 << 20
    assert "1 MB an answer" in text
    assert f"0–{MAX_AROUND} passages" in text and f"past {MAX_READ_CHARS:,} characters" in text
    assert f"quiet for {watch.QUIET_SECONDS} s" in text and service.REFRESH_SECONDS == 0.5
    assert "twice a second" in text


def family(pid: int) -> set[int]:
    """The server's processes: the parent and its children (workers, watcher)."""
    kids = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids |= {int(c) for c in (task / "children").read_text().split()}
    return kids


@pytest.mark.skipif(not Path("/proc/self/task").exists(),
                    reason="needs fork and POSIX signals, and Linux's /proc to find the workers")
def test_workers_answer_side_by_side_switch_after_a_watch_rerun_and_a_dead_one_is_replaced(tmp_path):
    config = build(tmp_path)
    with Server(config, "--workers", "2", "--watch") as server:
        assert get(f"{server.base}/status")[0] == 200  # the parent listens before it loads and forks
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(family(server.proc.pid)) < 3:
            time.sleep(0.1)
        kids = family(server.proc.pid)
        assert len(kids) == 3  # two workers and the watcher

        # Each call on a new connection goes to whichever worker accepts it: both answer (a
        # worker may still be starting, or lose every race on a busy machine: ask until both have).
        def who_answers(within: float = 30) -> set[int]:
            seen, deadline = set(), time.monotonic() + within
            def ask():
                while len(seen) < 2 and time.monotonic() < deadline:
                    code, body = get(f"{server.base}/status")
                    assert code == 200 and body["process"]["workers"] == 2
                    seen.add(body["process"]["pid"])
            askers = [threading.Thread(target=ask) for _ in range(4)]
            for t in askers:
                t.start()
            for t in askers:
                t.join()
            return seen

        workers = who_answers()
        assert len(workers) == 2 and workers < kids
        assert hits(f"{server.base}/search?q=change+freeze&k=3") == expected(config, k=3)

        # An edit: the watcher (in its own process) reruns, and every worker switches.
        edit(config, "report.txt", "\n\nA note on the narwhal protocol.\n")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not hits(f"{server.base}/search?q=narwhal&k=1"):
            time.sleep(0.2)
        time.sleep(1)  # the other worker's switch: it was woken with the first
        answers = [get(f"{server.base}/search?q=narwhal&k=1")[1] for _ in range(20)]
        assert all(a["hits"] and a["hits"][0]["doc_id"] == "report.txt" for a in answers)
        watch = get(f"{server.base}/status")[1]["watch"]  # the watcher's state, seen from a worker
        assert watch["reruns"] >= 1 and watch["last_rerun"]["ok"] and not watch["rerunning"]

        # A worker killed outright is replaced, and the replacement serves the new index.
        victim = sorted(workers)[0]
        subprocess.run(["kill", "-9", str(victim)], check=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (victim in family(server.proc.pid)
                                               or len(family(server.proc.pid)) < 3):
            time.sleep(0.1)
        now = who_answers()
        assert victim not in now and len(now) == 2
        assert all(hits(f"{server.base}/search?q=narwhal&k=1") for _ in range(10))
        everyone = family(server.proc.pid) | {server.proc.pid}
    # Stopping the parent stops every worker and the watcher.
    assert server.proc.returncode is not None
    time.sleep(0.5)
    assert not [p for p in everyone if Path(f"/proc/{p}").exists()
                and "zombie" not in Path(f"/proc/{p}/status").read_text()]
    assert "a worker ended (signal 9); starting another" in server.err


def test_workers_that_keep_failing_at_their_start_end_the_server_instead_of_a_fork_loop():
    script = """
import socket, sys
from pipekit.serve.workers import Workers

class Index:  # what a worker needs of a Service before it serves
    workers = 1
    def refresh(self): return False
    def refresh_forever(self, stop, wake=None): stop.wait()

def serve(sock):
    raise RuntimeError("the app could not start")

sock = socket.create_server(("127.0.0.1", 0))
said = []
code = Workers(Index(), 2, serve, say=said.append).run(sock)
print(code, said[-1])
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("1 the worker ended (exit status 1): 3 children in a row ended within 5 s")
    assert done.stderr.count("failed: RuntimeError: the app could not start") >= 3
