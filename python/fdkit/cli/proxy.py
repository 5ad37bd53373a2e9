"""``fdkit proxy``: a TCP and unix-socket forwarding proxy whose connection loop runs in Rust.

One thread and one epoll set serve every connection; bytes move socket → pipe → socket with
splice(2) and never enter Python. The start line (stdout) names the real listening address (so
``127.0.0.1:0`` tells you the port it got); one line per connection goes to stderr as it closes
(``-q`` drops them; ``-v`` adds the settings, time-stamped). SIGINT and SIGTERM both stop it
cleanly, SIGINT even when the proxy was started with it ignored: the listener and every
connection are closed, a summary line is printed on stdout, and the exit code is 0.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from types import FrameType
from typing import Any

from fdkit.cli import _log
from fdkit.cli._args import positive
from fdkit.types import ProxyStats

ADDRESS_HELP = "HOST:PORT, [V6]:PORT, unix:/PATH or unix:@NAME (abstract)"


class _Terminated(KeyboardInterrupt):
    """Raised by the SIGTERM handler: stops the proxy the way Ctrl-C does."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


def _size(text: str) -> int:
    """Bytes, with an optional K or M suffix (powers of 1024)."""
    scale = {"k": 1 << 10, "m": 1 << 20}.get(text[-1:].lower(), 1)
    digits = text[:-1] if scale > 1 else text
    if not digits.isdigit() or int(digits) == 0:
        raise ValueError(
            f"--pipe-size must be a positive size like 65536, 256K or 1M, got {text!r}"
        )
    return int(digits) * scale


def _summary(how: str, stats: ProxyStats | None) -> str:
    if stats is None:
        return f"fdkit proxy: stopped ({how}) before serving"
    return (
        f"fdkit proxy: stopped ({how}): {stats['connections']} connections "
        f"(peak {stats['peak_connections']}), {stats['bytes_up']} B up, "
        f"{stats['bytes_down']} B down, {stats['upstream_failures']} upstream failures"
    )


def run(args: argparse.Namespace) -> int:
    from fdkit._fdkit import serve_proxy

    log = _log.setup("proxy", args)
    try:
        max_connections = int(positive(args.max_connections, "--max-connections", int))
        idle = (
            None
            if args.idle_timeout is None
            else positive(args.idle_timeout, "--idle-timeout", float)
        )
        connect = positive(args.connect_timeout, "--connect-timeout", float)
        pipe_size = None if args.pipe_size is None else _size(args.pipe_size)
    except ValueError as e:
        print(f"fdkit proxy: {e}", file=sys.stderr)
        return 2
    if args.record is not None:
        directory = os.path.dirname(args.record) or "."
        if not os.path.isdir(directory):
            print(f"fdkit proxy: --record: no directory {directory!r}", file=sys.stderr)
            return 2

    log.debug(
        "at most %d connections, idle timeout %s, connect timeout %s s, relay pipes %s%s",
        max_connections,
        "none" if idle is None else f"{idle:g} s",
        f"{connect:g}",
        "64K grown to 1M" if pipe_size is None else f"of {pipe_size} bytes",
        "" if args.record is None else f", recording to {args.record}.<n>",
    )

    def on_listen(listen: str, upstream: str) -> None:
        print(
            f"fdkit proxy: listening on {listen}, forwarding to {upstream} (pid {os.getpid()})",
            flush=True,
        )

    # Log lines are written by Rust straight to fd 2: nothing of Python's may be left behind.
    sys.stderr.flush()
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    # SIGINT stops the proxy even when it was started with SIGINT ignored (a background job
    # of a non-interactive shell, `nohup`): Python then leaves SIG_IGN in place, and Ctrl-C
    # or `kill -INT` would do nothing. SIGINT and SIGTERM both stop it cleanly, as serve does.
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    stats: ProxyStats | None
    try:
        stats = serve_proxy(
            args.listen,
            args.upstream,
            record=args.record,
            max_connections=max_connections,
            idle_timeout=idle,
            connect_timeout=connect,
            pipe_size=pipe_size,
            quiet=args.quiet,
            on_listen=on_listen,
        )
        how = "stopped"
    except _Terminated as e:
        stats, how = getattr(e, "proxy_stats", None), "SIGTERM"
    except KeyboardInterrupt as e:
        stats, how = getattr(e, "proxy_stats", None), "SIGINT"
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
    print(_summary(how, stats), flush=True)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "proxy",
        help="forward TCP or unix-socket connections (zero-copy, one thread, epoll)",
        description="Accept connections on LISTEN and forward each to UPSTREAM, relaying both "
        "directions with splice(2) in a single-threaded Rust epoll loop. A half-close (FIN) is "
        "passed on as a half-close; a reset (RST) on one side is passed on as a reset to the "
        "other, after the bytes that came before it (waiting at most 2 s for a reader that "
        "takes nothing), so a cut stream never looks complete; an upstream that refuses or cannot "
        "be reached, and a --record file that cannot be written, reset the client too. An idle "
        "timeout and a stop end connections with a FIN. Addresses: "
        + ADDRESS_HELP
        + "; port 0 picks a free port, printed in the "
        "start line. One line per connection goes to stderr. SIGINT or SIGTERM stops it "
        "cleanly with a summary and exit code 0.",
    )
    p.add_argument("listen", metavar="LISTEN", help="where clients connect: " + ADDRESS_HELP)
    p.add_argument("upstream", metavar="UPSTREAM", help="where connections are forwarded")
    p.add_argument(
        "--record",
        metavar="FILE",
        help="write what each client received (upstream → client) to FILE.<n>, n from 1",
    )
    p.add_argument(
        "--max-connections",
        metavar="N",
        default="4096",
        help="the most connections at once; more wait in the listen backlog (default 4096)",
    )
    p.add_argument(
        "--idle-timeout",
        metavar="SECONDS",
        help="close a connection that moved no byte for this long (default: never)",
    )
    p.add_argument(
        "--connect-timeout",
        metavar="SECONDS",
        default="10",
        help="give up on an upstream connect after this long (default 10)",
    )
    p.add_argument(
        "--pipe-size",
        metavar="BYTES",
        help="fixed relay pipe size, e.g. 1M (default: 64K, grown to 1M once a direction "
        "has moved 1 MiB)",
    )
    _log.add_verbosity(p, quiet="no per-connection log lines")
    p.set_defaults(run=run)
