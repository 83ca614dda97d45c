"""`python -m pipekit serve`: the index in paths.output as an MCP server (stdio or HTTP).

    python -m pipekit serve                       # MCP over stdio: what an agent client launches
    python -m pipekit serve --http 127.0.0.1:8765 # MCP at /mcp, and GET /search, /read, /status
    python -m pipekit serve --watch               # rerun stages 01-04 when documents.input changes
    python -m pipekit serve --http 0.0.0.0:8765 --token SECRET   # another machine may call it
    python -m pipekit serve --http 127.0.0.1:8765 --workers 1    # one process (default: one per core)

Over stdio, stdout is the protocol's: everything this command says goes to stderr.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading

from pipekit.run.commands import add_common_args, parse_args, run_command, user_options
from pipekit.run.config import load_config
from pipekit.run.errors import PipelineError

TOKEN_ENV = "PIPEKIT_SERVE_TOKEN"  # a token kept out of the process list (`ps` shows --token's)


def address(text: str) -> tuple[str, int]:
    """`HOST:PORT` (or `[::1]:PORT`, or `:PORT` for 127.0.0.1) as (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise PipelineError(f"--http takes HOST:PORT, e.g. 127.0.0.1:8765; got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def say(text: str) -> None:
    print(f"pipekit serve: {text}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipekit serve", description=__doc__.split("\n")[0])
    parser.add_argument("--http", metavar="HOST:PORT", default=None,
                        help="serve MCP's streamable HTTP at /mcp and the JSON API (GET /search, /read, /status) "
                             "instead of stdio")
    parser.add_argument("--watch", action="store_true",
                        help="rerun stages 01-04 (incrementally) when files under documents.input change")
    parser.add_argument("--token", default=None,
                        help=f"with --http: require `Authorization: Bearer TOKEN` (required for a non-local "
                             f"bind; or set {TOKEN_ENV})")
    parser.add_argument("--allow-origin", dest="origins", action="append", default=[], metavar="ORIGIN",
                        help="with --http: a browser origin allowed to call (e.g. http://localhost:3000)")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="with --http: processes answering calls, forked after the index is loaded "
                             "(default: one per core, at most 4)")
    add_common_args(parser)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(parser, argv)

    def body():
        from pipekit.serve.service import Service

        cfg = load_config(args.config, args.overrides)
        token = args.token or os.environ.get(TOKEN_ENV) or None
        host, port = address(args.http) if args.http else (None, None)
        if host is not None and host not in ("127.0.0.1", "localhost", "::1") and not token:
            raise PipelineError(f"--http {args.http} lets other machines call the server: give --token "
                                f"(or set {TOKEN_ENV}), or bind 127.0.0.1")
        if args.http is None and (args.token or args.origins or args.workers is not None):
            raise PipelineError("--token, --allow-origin and --workers are for --http; over stdio the client "
                                "that launched the server is the only caller")
        workers = workers_wanted(args.workers)
        sock = None
        if host is not None:
            from pipekit.serve.workers import listening_socket

            try:  # before the load: a port in use is said at once
                sock = listening_socket(host, port)
            except OSError as exc:
                raise PipelineError(f"cannot listen on {args.http}: {exc.strerror or exc}") from None
        service = Service(cfg, user_options(argv))
        cur = service.current
        say(f"{int(cur.searcher.index.stats['N']):,} chunks of {cur.documents.get('read', 0):,} documents "
            f"from {cur.folder}, loaded in {cur.load_seconds:.2f} s")
        if sock is not None and workers > 1:
            return serve_workers(service, sock, workers, argv, args, host, port, token)
        stop = threading.Event()
        threads = [threading.Thread(target=service.refresh_forever, args=(stop,), name="refresh", daemon=True)]
        if args.watch:
            from pipekit.serve.watch import Watcher

            service.watcher = Watcher(service, user_options(argv))
            threads.append(threading.Thread(target=service.watcher.run_forever, args=(stop,), name="watch",
                                            daemon=True))
            say(f"watching {service.watcher.root} (a change reruns stages 01-04)")
        for t in threads:
            t.start()
        try:
            if host is None:
                serve_stdio(service)
            else:
                http_server(service, host, port, token, args.origins).run(sockets=[sock])
        finally:
            stop.set()

    return run_command("serve", body)


def workers_wanted(n: int | None) -> int:
    from pipekit.serve.workers import default_workers

    if n is None:
        return default_workers() if hasattr(os, "fork") else 1
    if n < 1 or n > 64:
        raise PipelineError(f"--workers takes a whole number from 1 to 64 (processes answering calls); got {n}")
    if n > 1 and not hasattr(os, "fork"):
        raise PipelineError("--workers above 1 needs fork, which this system lacks: use --workers 1")
    return n


def serve_workers(service, sock, n: int, argv: list[str], args, host: str, port: int, token: str | None) -> int:
    from pipekit.serve.workers import Workers

    watcher = None
    if args.watch:
        from pipekit.serve.watch import Watcher

        watcher = Watcher(service, user_options(argv))
        say(f"watching {watcher.root} (a change reruns stages 01-04)")
    http = http_server(service, host, port, token, args.origins)
    say(f"{n} workers share the loaded index")
    code = Workers(service, n, lambda s: http.run(sockets=[s]), watcher, say).run(sock)
    if code:
        raise PipelineError("a worker could not serve (its error is above)")
    return 0


def serve_stdio(service) -> None:
    import anyio

    from pipekit.serve.app import build_mcp

    say("MCP over stdio (stdin/stdout); Ctrl-C or closing stdin stops it")
    anyio.run(build_mcp(service).run_stdio_async)


def http_server(service, host: str, port: int, token: str | None, origins: list[str]):
    """The HTTP server (not yet running): uvicorn with the app; said where it answers."""
    import uvicorn

    from pipekit.serve.app import http_app

    shown = f"[{host}]" if ":" in host else host
    say(f"MCP at http://{shown}:{port}/mcp; JSON at /search?q=…, /read?chunk_id=…, /status"
        + ("; bearer token required" if token else ""))
    config = uvicorn.Config(http_app(service, host, port, token, origins), host=host, port=port,
                            log_level="warning", access_log=False, lifespan="on")
    return uvicorn.Server(config)

