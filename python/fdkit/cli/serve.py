"""``fdkit serve``: a static file server whose hot loop runs in Rust (io_uring or epoll).

HTTP/1.1 GET and HEAD with keep-alive and pipelining, Range, If-Modified-Since, index.html;
nothing outside DIR is ever opened. The start line (stderr) names the address, the engine and
the workers; SIGINT and SIGTERM stop it gracefully with a one-line summary and exit code 0.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
from typing import Any

from fdkit.cli._args import positive

ENGINES = ("auto", "uring", "epoll")


def _listen_text(host: str, port: int) -> str:
    """The listen address as ``serve_static`` names it in an error: ``HOST:PORT``,
    ``[V6]:PORT``."""
    host = host.lstrip("[").rstrip("]")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def run(args: argparse.Namespace) -> int:
    from fdkit.static_server import _serve

    if args.engine not in ENGINES:
        raise ValueError(f"--engine must be one of {', '.join(ENGINES)}, got {args.engine!r}")
    try:
        port = int(args.port)
    except ValueError:
        raise ValueError(f"--port must be 0..65535, got {args.port!r}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"--port must be 0..65535, got {args.port!r}")
    workers = int(positive(args.workers, "--workers", int))
    idle = float(positive(args.idle_timeout, "--idle-timeout", float))
    max_connections = int(positive(args.max_connections, "--max-connections", int))
    if not os.path.isdir(args.dir):
        raise ValueError(f"not a directory: {args.dir}")

    def on_ready(info: dict[str, Any]) -> None:
        if info.get("fallback"):
            print(f"fdkit serve: io_uring unavailable: {info['fallback']}; using epoll",
                  file=sys.stderr)  # fmt: skip
        host = info["host"]
        shown = f"[{host}]" if ":" in host else host
        n = info["workers"]
        print(
            f"fdkit serve: serving {args.dir} on http://{shown}:{info['port']}/ "
            f"(engine: {info['engine']}, {n} worker{'s' if n != 1 else ''})",
            file=sys.stderr,
            flush=True,
        )

    # SIGINT stops the server even when the shell started it with SIGINT ignored (a
    # background job): the contract is that SIGINT and SIGTERM both stop it cleanly.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.stderr.flush()
    try:
        stats = _serve(
            args.dir,
            host=args.host,
            port=port,
            workers=workers,
            engine=args.engine,
            idle_timeout=idle,
            max_connections=max_connections,
            quiet=args.quiet,
            on_ready=on_ready,
        )
    except OSError as e:
        # The server names the listen address (as typed) in a failed socket/bind/listen,
        # and DIR in a failed open of the directory: say which one failed.
        listen_at = _listen_text(args.host, port)
        if e.filename != listen_at or not e.strerror:
            raise
        hint = ""
        if e.errno == errno.EACCES and 0 < port < 1024:
            hint = " (ports below 1024 need root or CAP_NET_BIND_SERVICE; try --port 8000)"
        print(f"fdkit serve: cannot listen on {listen_at}: {e.strerror}{hint}", file=sys.stderr)
        return 1
    how = stats.get("stopped_by") or "stopped"
    print(
        f"fdkit serve: stopped ({how}): {stats.get('requests', 0)} requests served on "
        f"{stats.get('connections', 0)} connections ({stats.get('timeouts', 0)} timed out)",
        file=sys.stderr,
        flush=True,
    )
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a directory over HTTP/1.1 (io_uring or epoll, hot loop in Rust)",
        description="Serve the files under DIR over HTTP/1.1 (GET and HEAD, keep-alive, "
        "pipelining, Range, If-Modified-Since, index.html) from a Rust event loop: io_uring "
        "where the kernel allows it, else epoll. Nothing outside DIR is ever opened. SIGINT or "
        "SIGTERM stops it gracefully with a summary and exit code 0.",
    )
    p.add_argument("dir", metavar="DIR", help="the directory to serve")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", default="8000", help="port (default 8000; 0 picks a free port)")
    p.add_argument(
        "--workers",
        default="1",
        metavar="N",
        help="worker processes sharing the port with SO_REUSEPORT (default 1)",
    )
    p.add_argument(
        "--engine",
        default="auto",
        metavar="{auto,uring,epoll}",
        help="event engine (default auto: io_uring when available, else epoll)",
    )
    p.add_argument(
        "--idle-timeout",
        default="30",
        metavar="SECONDS",
        help="drop a connection whose request is not complete this long after its first byte, "
        "or that stays silent this long between requests (default 30)",
    )
    p.add_argument(
        "--max-connections",
        default="10000",
        metavar="N",
        help="the most connections at once; more are accepted and closed (default 10000)",
    )
    p.add_argument("--quiet", action="store_true", help="no notices while serving")
    p.set_defaults(run=run)
