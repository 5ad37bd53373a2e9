"""``fdkit serve``: a static file server whose hot loop runs in Rust (io_uring or epoll).

HTTP/1.1 GET and HEAD with keep-alive and pipelining, Range, If-Modified-Since, index.html
(then index.htm); OPTIONS answered, other methods 405; nothing outside DIR is ever opened. The
start line (stderr) names the address, the engine, the workers and whether directories are
listed; SIGINT and SIGTERM stop it gracefully with a one-line summary and exit code 0.

The command line takes the shape of ``python -m http.server``'s: an optional positional port,
``-b/--bind ADDRESS``, ``-d/--directory DIR`` (default: the current directory), plus
``--list`` (a directory listing where there is no index file, off by default: such a
directory answers 404, whose body says that ``--list`` lists it) and
``--access-log`` (common log format on stderr, off by default). ``fdkit serve DIR`` and
``--host``/``--port`` keep working: the one positional argument is a port when it is all
digits, and the directory otherwise (``-d 8000`` or ``./8000`` serves a directory named so).
Unlike http.server, the default address is 127.0.0.1, not every interface.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any, get_args

from fdkit._fdkit import SERVE_DEFAULTS
from fdkit.cli import _log
from fdkit.cli._args import positive
from fdkit.cli._listen import cannot_listen, listen_text
from fdkit.types import Engine

#: io_uring is the engine's name everywhere; "uring" is accepted as its alias.
ENGINES: tuple[str, ...] = get_args(Engine)

#: The port as typed when none is given.
_PORT = str(SERVE_DEFAULTS["port"])


def _port_and_dir(args: argparse.Namespace) -> tuple[int, str]:
    """The port and the directory, from the positional argument (a port when all digits, as
    http.server's ``[port]``; else the directory, as ``fdkit serve DIR`` always took it),
    ``--port`` and ``-d``. Each may be given once."""
    port_text: str | None = args.port
    port_name = "--port"
    directory: str | None = args.directory
    target: str | None = args.target
    if target is not None and target.isascii() and target.isdigit():
        if port_text is not None:
            raise ValueError(f"the port is given twice: {target} and --port {port_text}")
        port_text, port_name = target, "port"
    elif target is not None:
        if directory is not None:
            raise ValueError(f"the directory is given twice: {target} and --directory {directory}")
        directory = target
    if port_text is None:
        port_text = _PORT
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"{port_name} must be 0..65535, got {port_text!r}") from None
    if not 0 <= port <= 65535:
        hint = ""
        if port_name == "port" and os.path.isdir(port_text):
            hint = f" (to serve the directory {port_text!r}: -d {port_text} or ./{port_text})"
        raise ValueError(f"{port_name} must be 0..65535, got {port_text!r}{hint}")
    return port, os.getcwd() if directory is None else directory


def run(args: argparse.Namespace) -> int:
    from fdkit.static_server import _serve

    if args.engine not in ENGINES:
        raise ValueError(f"--engine must be one of {', '.join(ENGINES)}, got {args.engine!r}")
    port, directory = _port_and_dir(args)
    workers = int(positive(args.workers, "--workers", int))
    idle = float(positive(args.idle_timeout, "--idle-timeout", float))
    max_connections = int(positive(args.max_connections, "--max-connections", int))
    if not os.path.exists(directory):
        raise ValueError(f"no such directory: {directory}")
    if not os.path.isdir(directory):
        raise ValueError(f"not a directory: {directory}")
    log = _log.setup("serve", args)
    log.debug(
        "engine %s, %s, idle timeout %g s, at most %s, listings %s, access log %s",
        args.engine,
        _log.count(workers, "worker"),
        idle,
        _log.count(max_connections, "connection"),
        "on" if args.list else "off",
        "on (stderr)" if args.access_log else "off",
    )

    def on_ready(info: dict[str, Any]) -> None:
        if info.get("fallback"):
            print(f"fdkit serve: io_uring unavailable: {info['fallback']}; using epoll",
                  file=sys.stderr)  # fmt: skip
        host = info["host"]
        shown = f"[{host}]" if ":" in host else host
        # http.server lists directories; this server does not unless asked: say so up front.
        listings = "listings on" if args.list else "listings off, --list turns them on"
        print(
            f"fdkit serve: serving {directory} on http://{shown}:{info['port']}/ "
            f"(engine: {info['engine']}, {_log.count(info['workers'], 'worker')}; {listings})",
            file=sys.stderr,
            flush=True,
        )

    # SIGINT stops the server even when the shell started it with SIGINT ignored (a
    # background job): the contract is that SIGINT and SIGTERM both stop it cleanly.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.stderr.flush()
    try:
        stats = _serve(
            directory,
            host=args.host,
            port=port,
            workers=workers,
            engine=args.engine,
            idle_timeout=idle,
            max_connections=max_connections,
            quiet=args.quiet,
            on_ready=on_ready,
            listing=args.list,
            access_log=args.access_log,
        )
    except OSError as e:
        # The server names the listen address (as typed) in a failed socket/bind/listen,
        # and DIR in a failed open of the directory: say which one failed.
        line = cannot_listen("serve", e, listen_text(args.host, port), port, f"--port {_PORT}")
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 1
    how = stats.get("stopped_by") or "stopped"
    print(
        f"fdkit serve: stopped ({how}): {_log.count(stats.get('requests', 0), 'request')} "
        f"served on {_log.count(stats.get('connections', 0), 'connection')} "
        f"({stats.get('timeouts', 0)} timed out)",
        file=sys.stderr,
        flush=True,
    )
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a directory over HTTP/1.1 (io_uring or epoll, hot loop in Rust)",
        description="Serve the files under a directory over HTTP/1.1 (GET and HEAD, keep-alive, "
        "pipelining, Range, If-Modified-Since, index.html or index.htm) from a Rust event loop: "
        "io_uring "
        "where the kernel allows it, else epoll. Nothing outside the directory is ever opened. "
        "SIGINT or SIGTERM stops it gracefully with a summary and exit code 0. Takes the "
        "arguments of `python -m http.server` (PORT, -b, -d), but listens on 127.0.0.1 unless "
        "told otherwise.",
        epilog="The positional argument is the port when it is all digits (as in "
        "`python -m http.server 8080`), else the directory (`fdkit serve DIR`); "
        "serve a directory named like a number with -d 8080 or ./8080.",
    )
    p.add_argument(
        "target",
        nargs="?",
        metavar="PORT|DIR",
        help=f"the port (all digits; default {_PORT}) or the directory to serve "
        "(default: the current directory)",
    )
    p.add_argument(
        "-b",
        "--bind",
        "--host",
        dest="host",
        default=SERVE_DEFAULTS["host"],
        metavar="ADDRESS",
        help="address to listen on (default %(default)s; 0.0.0.0 or :: for every interface)",
    )
    p.add_argument(
        "-d",
        "--directory",
        default=None,
        metavar="DIR",
        help="the directory to serve (default: the current directory)",
    )
    p.add_argument("--port", default=None, help=f"port (default {_PORT}; 0 picks a free port)")
    p.add_argument(
        "--list",
        action="store_true",
        help="answer a directory without index.html or index.htm with a listing of its "
        "entries (default: 404, which says so); symlinks that lead outside the directory are "
        "left out",
    )
    p.add_argument(
        "--access-log",
        action="store_true",
        help="one line per request on stderr, in the common log format "
        "(written in batches; off by default, for speed)",
    )
    p.add_argument(
        "--workers",
        default="1",
        metavar="N",
        help="worker processes sharing the port with SO_REUSEPORT (default 1)",
    )
    p.add_argument(
        "--engine",
        default=SERVE_DEFAULTS["engine"],
        metavar="{auto,io_uring,epoll}",
        help="event engine (default %(default)s: io_uring when available, else epoll; "
        "uring is an alias of io_uring)",
    )
    p.add_argument(
        "--idle-timeout",
        default=f"{SERVE_DEFAULTS['idle_timeout']:g}",
        metavar="SECONDS",
        help="drop a connection whose request is not complete this long after its first byte, "
        "or that stays silent this long between requests (default %(default)s)",
    )
    p.add_argument(
        "--max-connections",
        default=str(SERVE_DEFAULTS["max_connections"]),
        metavar="N",
        help="the most connections at once; more are accepted and closed (default %(default)s)",
    )
    _log.add_verbosity(p, quiet="no notices while serving")
    p.set_defaults(run=run)
