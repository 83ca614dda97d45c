"""The service spoken two ways: MCP (for agents) and a small JSON API (for programs).

MCP is the official `mcp` SDK's server (`MCPServer`), over stdio, which is how agent
clients (Claude Code, Cursor, LangGraph's MCP adapters) launch a local tool, or over the
streamable HTTP transport at `/mcp`.  Beside it on the same port, three GET routes answer
programs that do not speak MCP: `/search`, `/read`, `/status`, each returning what the
tool of the same name returns, as JSON; an error is `{"error": "one sentence"}` with a
4xx status.

HTTP is guarded in one middleware, in front of every route (MCP's and ours):
- `Host` must name the address served (a loopback name when bound to loopback): a web
  page the user visits cannot reach the server through a DNS name it rebinds to
  127.0.0.1 (the MCP specification's security warning for local servers);
- a browser's `Origin`, when sent, must be a loopback origin or one given with
  `--allow-origin`: another site's script cannot call the tools;
- with a token (required to bind anything but loopback), `Authorization: Bearer TOKEN`,
  compared in constant time.

What it does not do: TLS (put a reverse proxy in front for that), users and scopes
(one token), or rate limiting.
"""
from __future__ import annotations

import hmac
import sys
import traceback
from urllib.parse import parse_qs
from typing import Annotated, Any

import orjson
from pydantic import Field, ValidationError

from pipekit.run.errors import PipelineError
from pipekit.serve.service import MAX_K, MAX_QUERY_CHARS, Service
from pipekit.retrieve.reading import MAX_AROUND, MAX_READ_CHARS

LOOPBACK = ("127.0.0.1", "localhost", "::1")

INSTRUCTIONS = """\
Search a folder of documents (its documentation, manuals, notes) that has been indexed with BM25.
Use `search` with the user's words (several short searches beat one long one); each hit is a
passage with a citation (document › heading trail, page) and a link. Use `read` with a hit's
chunk_id to see the passages around it, or its whole section, before answering. Cite the
`citation` of what you used. `status` says what is indexed and whether the folder changed since."""

SEARCH_DOC = f"""\
Find the passages of the indexed documents that best match a query (BM25 ranking).
Returns {{"hits": [...]}} best first; each hit has text (the passage), citation
(document › headings, pages), link (document#anchor or #page=N), heading_path, doc_id,
chunk_id (for `read`), format, pages and score. A "note" says why fewer than k came back.
query: words a passage would contain (names, error messages, terms), up to {MAX_QUERY_CHARS} characters.
k: hits to return, 1-{MAX_K}.
paths: only documents whose doc_id (path in the folder) matches one of these globs,
  `*` within a folder, `**` across folders, e.g. ["api/**", "*.md"].
formats: only documents of these formats, e.g. ["pdf"], ["markdown", "rst"], ["html"]."""

READ_DOC = f"""\
Read more around a search hit: the passage `chunk_id` (from a search hit) with `around`
passages before and after it in the same document (0-{MAX_AROUND}), or with section=true the
whole section (`##` level) it sits in. Long answers are capped at {MAX_READ_CHARS:,} characters around
the passage, and a note names the chunk ids to read on from. Returns text, passages, the
character span (start_char, end_char), pages, citation and link of what was returned."""

STATUS_DOC = """\
What this server has indexed: the folder, documents read by format, what could not be read
(counts by reason, first examples), chunks, when the index was built and loaded, whether
files in the folder changed since, the state of the watcher (--watch), and which of the
server's processes answered."""


def build_mcp(service: Service):
    """The MCP server with the three tools, each answered by `service`."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations

    class PipekitMCP(MCPServer):
        async def call_tool(self, name: str, arguments: dict[str, Any], context=None):
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                cause = exc.__cause__
                if isinstance(cause, ValidationError):  # a wrong type: one sentence, not pydantic's page
                    raise ToolError(f"{name}: " + "; ".join(plain(e) for e in cause.errors())) from None
                if isinstance(cause, PipelineError):  # ours: already one sentence
                    raise ToolError(f"{name}: {cause}") from None
                raise

    mcp = PipekitMCP("pipekit", instructions=INSTRUCTIONS, log_level="WARNING")
    read_only = ToolAnnotations(readOnlyHint=True, openWorldHint=False)

    @mcp.tool(description=SEARCH_DOC, annotations=read_only, structured_output=True)
    def search(query: Annotated[str, Field(description="words a passage would contain")],
               k: Annotated[int, Field(ge=1, le=MAX_K, description="hits to return")] = 5,
               paths: Annotated[list[str], Field(description="doc_id globs to keep")] = [],  # noqa: B006 (read only)
               formats: Annotated[list[str], Field(description="formats to keep")] = [],  # noqa: B006
               ) -> dict[str, Any]:
        return service.search(query, k, paths, formats)

    @mcp.tool(description=READ_DOC, annotations=read_only, structured_output=True)
    def read(chunk_id: Annotated[str, Field(description="a search hit's chunk_id")],
             around: Annotated[int, Field(ge=0, le=MAX_AROUND, description="passages before and after")] = 0,
             section: Annotated[bool, Field(description="the whole ## section instead")] = False) -> dict[str, Any]:
        return service.read(chunk_id, around, section)

    @mcp.tool(description=STATUS_DOC, annotations=read_only, structured_output=True)
    def status() -> dict[str, Any]:
        return service.status()

    return mcp


def plain(error: dict) -> str:
    """One pydantic error as a phrase: `k: Input should be less than or equal to 50 (got 1000000000)`."""
    where = ".".join(str(p) for p in error.get("loc", ())) or "arguments"
    shown = repr(error.get("input"))
    shown = shown if len(shown) <= 60 else shown[:57] + "..."  # the caller's value, not all 10 kB of it
    got = f" (got {shown})" if "input" in error and not isinstance(error["input"], dict) else ""
    return f"{where}: {error.get('msg', 'invalid')}{got}"


# ---------------------------------------------------------------------- HTTP


def whole(value: str | None, name: str, default: int) -> int:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise PipelineError(f"{name} must be a whole number; got {value!r}") from None


def yes_no(value: str | None, name: str) -> bool:
    if value is None or value.lower() in ("", "0", "false", "no"):
        return False
    if value.lower() in ("1", "true", "yes"):
        return True
    raise PipelineError(f"{name} must be true or false; got {value!r}")


class JsonApi:
    """GET /search, /read, /status: the tools' answers as JSON, for programs without MCP.

    Plain ASGI in front of MCP's Starlette app, not Starlette routes: a search is ~0.6 ms, and
    Starlette's request, routing and response objects added ~0.2 ms more to each call."""

    def __init__(self, service: Service):
        self.service = service
        self.routes = {"/search": self.search, "/read": self.read, "/status": self.status}

    def search(self, q: dict) -> dict:
        return self.service.search(one(q, "q", ""), whole(one(q, "k"), "k", 5), q.get("in", []), q.get("format", []))

    def read(self, q: dict) -> dict:
        return self.service.read(one(q, "chunk_id", ""), whole(one(q, "around"), "around", 0),
                                 yes_no(one(q, "section"), "section"))

    def status(self, q: dict) -> dict:
        return self.service.status()

    async def __call__(self, scope, send) -> None:
        call = self.routes[scope["path"]]
        if scope["method"] not in ("GET", "HEAD"):
            return await respond(send, 405, {"error": f"{scope['path']} answers GET; got {scope['method']}"},
                                 [(b"allow", b"GET, HEAD")])
        try:
            query = parse_qs(scope["query_string"].decode("latin-1"), keep_blank_values=True)
            code, answer = 200, call(query)
        except PipelineError as exc:
            code = 404 if call == self.read and str(exc).startswith("no chunk") else 400
            answer = {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - one bad call must not end the service
            code, answer = 500, {"error": f"internal error: {type(exc).__name__}: {exc}"}
            # The caller gets one sentence; whoever runs the server needs where it broke.
            traceback.print_exc(file=sys.stderr)
        await respond(send, code, answer, head=scope["method"] == "HEAD")


def one(query: dict, name: str, default: str | None = None) -> str | None:
    """A parameter given once (the last one, if repeated), as a URL's reader expects."""
    values = query.get(name)
    return values[-1] if values else default


async def respond(send, status: int, answer: dict, headers: list | None = None, head: bool = False) -> None:
    body = orjson.dumps(answer)  # UTF-8, no spaces, as Starlette's JSONResponse gave, at 15x its speed
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": b"" if head else body})


class Guard:
    """ASGI middleware: Host, Origin and bearer-token checks for every HTTP request (module text)."""

    def __init__(self, app, host: str, port: int, token: str | None, origins: list[str] = (), api=None):
        self.app = app
        self.api = api  # JsonApi: its paths are answered here, the rest by `app`
        self.token = token.encode() if token else None
        local = host in LOOPBACK
        names = LOOPBACK if local else (host,)
        self.hosts = None if host in ("0.0.0.0", "::") else {f"[{n}]:{port}" if ":" in n else f"{n}:{port}"
                                                           for n in names}
        self.origins = {f"http://{h}" for h in (self.hosts or ())} | set(origins)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        why = self.refuse(headers)
        if why is not None:
            status, text = why
            return await respond(send, status, {"error": text}, [(b"www-authenticate", b"Bearer")] if status == 401
                                 else [])
        if self.api is not None and scope["path"] in self.api.routes:
            return await self.api(scope, send)
        await self.app(scope, receive, send)

    def refuse(self, headers: dict) -> tuple[int, str] | None:
        host = headers.get("host", "")
        if self.hosts is not None and host not in self.hosts:
            return 421, f"Host {host!r} is not this server's ({', '.join(sorted(self.hosts))}): refused"
        origin = headers.get("origin")
        if origin is not None and origin not in self.origins:
            return 403, f"Origin {origin!r} is not allowed (start the server with --allow-origin {origin} to allow it)"
        if self.token is not None:
            given = headers.get("authorization", "")
            scheme, _, value = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), self.token):
                return 401, "missing or wrong bearer token (send `Authorization: Bearer TOKEN`)"
        return None


def http_app(service: Service, host: str, port: int, token: str | None, origins: list[str] = ()):
    """MCP's streamable HTTP at /mcp and the JSON routes, behind the Guard."""
    from mcp.server.transport_security import TransportSecuritySettings

    mcp = build_mcp(service)
    # The Guard checks Host and Origin for every route; the SDK's own check (MCP's route
    # only) would need the same lists kept twice.
    app = mcp.streamable_http_app(transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
                                  host=host, json_response=True, stateless_http=True)
    return Guard(app, host, port, token, origins, api=JsonApi(service))
