"""``fdkit proxy``: a TCP and unix-socket forwarding proxy whose connection loop runs in Rust.

One thread and one epoll set serve every connection; bytes move socket → pipe → socket with
splice(2) and never enter Python. The start line (stdout) names the real listening address (so
``127.0.0.1:0`` tells you the port it got); one line per connection goes to stderr as it closes
(``-q`` drops them; ``-v`` adds the settings, time-stamped). SIGINT and SIGTERM both stop it
cleanly, SIGINT even when the proxy was started with it ignored: the listener and every
connection are closed, a summary line is printed on stdout, and the exit code is 0.

socat's habits: socat's own address forms work (``TCP-LISTEN:9002,fork,reuseaddr``,
``TCP:HOST:PORT``, ``UNIX-LISTEN:PATH``, ...: see ``_socat``), and its other address types are
refused by name; ``9002`` or ``:9002`` listens on every IPv4 interface, as ``TCP-LISTEN:9002``
does; an upstream host name is looked up again every ``--resolve-every`` seconds (5), as socat
looks it up for every connection in its fork mode, so a name whose address changes (a
Kubernetes Service, a DNS failover) is followed without a restart. The lookups run in a
background thread: the connection loop never waits on DNS. A port that cannot be bound is one
line, ``cannot listen on ADDRESS: REASON``, worded as ``fdkit serve`` words it, exit status 1.

An UPSTREAM that is the proxy's own listening address (``fdkit proxy 8080 127.0.0.1:8080``)
would make every connection open another, without end: it is refused at start, once the
listening address is known (port 0 resolved), with exit status 2. See ``_self_loop``.

``--record FILE`` writes both directions of connection ``n`` to ``FILE.<n>``, chunk by chunk
with each chunk's direction and time: the format is in docs/cli.md, with a script that reads it.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import sys
from types import FrameType
from typing import Any

from fdkit.cli import _log
from fdkit.cli._args import positive
from fdkit.cli._listen import LISTEN_HELP, cannot_listen, listen_address
from fdkit.cli._self_loop import self_loop
from fdkit.cli._socat import Address, spell
from fdkit.types import ProxyStats

ADDRESS_HELP = (
    "HOST:PORT, [V6]:PORT, unix:/PATH or unix:@NAME (abstract), or socat's TCP:HOST:PORT, "
    "TCP4:, TCP6:, UNIX-CONNECT:PATH, ABSTRACT-CONNECT:NAME"
)
SOCAT_LISTEN_HELP = (
    "or socat's TCP-LISTEN:PORT[,fork,reuseaddr,bind=ADDR] (TCP-L, TCP4-LISTEN, TCP6-LISTEN), "
    "UNIX-LISTEN:PATH (UNIX-L), ABSTRACT-LISTEN:NAME"
)

#: The default connection cap (the native default too).
MAX_CONNECTIONS = 4096


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


def _resolve_every(text: str) -> float | None:
    """``--resolve-every``: seconds between lookups of an upstream name; 0 looks it up once."""
    try:
        if float(text) == 0:
            return None
        return positive(text, "--resolve-every", float)
    except ValueError as e:
        if "too large" in str(e):
            raise
        raise ValueError(
            f"--resolve-every must be 0 (look up once) or a positive number of seconds, "
            f"got {text!r}"
        ) from None


def _host_name(upstream: str) -> str | None:
    """The host of ``HOST:PORT`` when it is a name to look up (not an IP literal, not unix)."""
    if upstream.startswith("unix:") or upstream.startswith("["):
        return None
    host = upstream.rpartition(":")[0]
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host or None
    return None


class SelfLoop(ValueError):
    """The upstream is the proxy's own listening address: the message says why."""


def _summary(how: str, stats: ProxyStats | None) -> str:
    if stats is None:
        return f"fdkit proxy: stopped ({how}) before serving"
    return (
        f"fdkit proxy: stopped ({how}): {_log.count(stats['connections'], 'connection')} "
        f"(peak {stats['peak_connections']}), {stats['bytes_up']} B up, "
        f"{stats['bytes_down']} B down, "
        f"{_log.count(stats['upstream_failures'], 'upstream failure')}"
    )


#: ``--connect-timeout``'s default, in seconds.
CONNECT_TIMEOUT = "10"


def _setting(value: str | None, flag: str, address: Address, option: str) -> tuple[str | None, str]:
    """A setting given as ``flag`` or as socat's ``option=`` in ``address`` (one setting:
    both is an error): its text, and the name an error about it uses."""
    socat_value = getattr(address, option.replace("-", "_"))
    if socat_value is None:
        return value, flag
    if value is not None:
        raise ValueError(f'{flag} and {option}= in "{address.typed}" are the same setting')
    return socat_value, f'{option}= in "{address.typed}"'


def run(args: argparse.Namespace) -> int:
    from fdkit._fdkit import serve_proxy

    log = _log.setup("proxy", args)
    try:
        listening = spell(args.listen, "LISTEN")
        upstream = spell(args.upstream, "UPSTREAM")
        listen = listen_address(listening.spec)
        cap_text, cap_name = _setting(
            args.max_connections, "--max-connections", listening, "max-children"
        )
        max_connections = (
            MAX_CONNECTIONS if cap_text is None else int(positive(cap_text, cap_name, int))
        )
        resolve_every = _resolve_every(args.resolve_every)
        idle = (
            None
            if args.idle_timeout is None
            else positive(args.idle_timeout, "--idle-timeout", float)
        )
        connect_text, connect_name = _setting(
            args.connect_timeout, "--connect-timeout", upstream, "connect-timeout"
        )
        connect = positive(
            CONNECT_TIMEOUT if connect_text is None else connect_text, connect_name, float
        )
        pipe_size = None if args.pipe_size is None else _size(args.pipe_size)
    except OSError as e:  # a TCP4:/TCP6: or bind= name with no address in its family
        print(f"fdkit proxy: {e}", file=sys.stderr)
        return 1
    except ValueError as e:
        print(f"fdkit proxy: {e}", file=sys.stderr)
        return 2
    if args.record is not None:
        directory = os.path.dirname(args.record) or "."
        if not os.path.isdir(directory):
            print(f"fdkit proxy: --record: no directory {directory!r}", file=sys.stderr)
            return 2

    log.debug(
        "at most %s, idle timeout %s, connect timeout %s s, relay pipes %s%s",
        _log.count(max_connections, "connection"),
        "none" if idle is None else f"{idle:g} s",
        f"{connect:g}",
        "64K grown to 1M" if pipe_size is None else f"of {pipe_size} bytes",
        "" if args.record is None else f", recording both directions to {args.record}.<n>",
    )
    for address in (listening, upstream):
        if address.keyword is not None:
            log.debug("%s is %s", address.typed, address.spec)
    if upstream.looked_up is not None:
        log.debug(
            "upstream name %s looked up once, at start, as %s (the address family asks for "
            "it; TCP:HOST:PORT follows a name)",
            upstream.looked_up,
            upstream.spec,
        )
    name = _host_name(upstream.spec)
    if name is not None:
        log.debug(
            "upstream name %s looked up %s",
            name,
            "once" if resolve_every is None else f"again every {resolve_every:g} s",
        )

    def on_notice(line: str) -> None:
        # The connection cap lowered to fit RLIMIT_NOFILE: a detail when it is the default
        # (-v), worth saying when the user asked for that many (--max-connections, max-children=).
        log.log(logging.DEBUG if cap_text is None else logging.INFO, "%s", line)

    def on_listen(listen: str, forwarding: str) -> None:
        why = self_loop(listen, upstream.spec)
        if why is not None:
            raise SelfLoop(
                f'UPSTREAM "{args.upstream}" is this proxy\'s own listening address: {why}, '
                "so every connection would open another through the proxy, without end"
            )
        print(
            f"fdkit proxy: listening on {listen}, forwarding to {forwarding} (pid {os.getpid()})",
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
            listen,
            upstream.spec,
            record=args.record,
            max_connections=max_connections,
            idle_timeout=idle,
            connect_timeout=connect,
            pipe_size=pipe_size,
            quiet=args.quiet,
            on_listen=on_listen,
            resolve_every=resolve_every,
            on_notice=on_notice,
        )
        how = "stopped"
    except _Terminated as e:
        stats, how = getattr(e, "proxy_stats", None), "SIGTERM"
    except KeyboardInterrupt as e:
        stats, how = getattr(e, "proxy_stats", None), "SIGINT"
    except SelfLoop as e:
        print(f"fdkit proxy: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        port_text = listen.rpartition(":")[2]
        port = int(port_text) if port_text.isdigit() and not listen.startswith("unix:") else None
        line = cannot_listen("proxy", e, listen, port)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 1
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
        + "; LISTEN may also be a port alone, PORT or :PORT, which listens on every IPv4 "
        "interface (0.0.0.0), as socat's TCP-LISTEN:PORT does ([::]:PORT for IPv6 too). Port 0 "
        "picks a free port, printed in the start line. socat's addresses work as socat reads "
        "them: fdkit proxy TCP-LISTEN:8080,fork,reuseaddr TCP:backend:80 (fork and reuseaddr "
        "are what the proxy always does; bind=, pf=, max-children= on LISTEN and "
        "connect-timeout= on UPSTREAM are honoured); socat's other address types (EXEC:, "
        "OPENSSL:, UDP:, STDIO, ...) and options are refused by name. An UPSTREAM that is the "
        "proxy's own listening address is refused at start. An UPSTREAM host name is looked up "
        "again every --resolve-every seconds in the background, and new connections go to its "
        "latest address. One line per connection goes to stderr. SIGINT or SIGTERM stops it "
        "cleanly with a summary and exit code 0.",
    )
    p.add_argument(
        "listen",
        metavar="LISTEN",
        help="where clients connect: " + LISTEN_HELP + ", " + SOCAT_LISTEN_HELP,
    )
    p.add_argument(
        "upstream", metavar="UPSTREAM", help="where connections are forwarded: " + ADDRESS_HELP
    )
    p.add_argument(
        "--record",
        metavar="FILE",
        help="record both directions of connection n (from 1) to FILE.<n>: each chunk with "
        "its direction (> client to upstream, < upstream to client) and time (the format is in "
        "docs/cli.md)",
    )
    p.add_argument(
        "--max-connections",
        metavar="N",
        help="the most connections at once; more wait in the listen backlog (default 4096, "
        "lowered to what RLIMIT_NOFILE allows: -v says so; socat's max-children= on LISTEN "
        "says the same)",
    )
    p.add_argument(
        "--idle-timeout",
        metavar="SECONDS",
        help="close a connection that moved no byte for this long (default: never)",
    )
    p.add_argument(
        "--connect-timeout",
        metavar="SECONDS",
        help="give up on an upstream connect after this long (default 10; socat's "
        "connect-timeout= on UPSTREAM says the same)",
    )
    p.add_argument(
        "--resolve-every",
        metavar="SECONDS",
        default="5",
        help="look an UPSTREAM host name up again this often, so new connections follow a "
        "changed address (a Kubernetes Service, a DNS failover); a lookup that fails keeps the "
        "last address; 0 looks it up once, at start (default 5)",
    )
    p.add_argument(
        "--pipe-size",
        metavar="BYTES",
        help="fixed relay pipe size, e.g. 1M (default: 64K, grown to 1M once a direction "
        "has moved 1 MiB)",
    )
    _log.add_verbosity(p, quiet="no per-connection log lines")
    p.set_defaults(run=run)
