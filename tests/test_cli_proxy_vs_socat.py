"""`fdkit proxy` against socat as a reference: the same relay, with the same address strings,
run by socat and by fdkit proxy, must give a client and an upstream the same bytes, the same
half-closes and the same ends; the one place they differ on purpose (fdkit passes a reset
on, where socat ends cleanly) is checked too. Skipped when socat is not installed (``make
test-tools`` installs it).

Every proxy process is started here and stopped by its pid in a ``finally``; upstreams are
threads (or an asyncio server) on 127.0.0.1 that stop with the test. The proxy runner and the
upstreams are in ``helpers/cli_proxy.py``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from helpers.cli_proxy import (  # noqa: F401  (the fixture upstream)
    FDKIT,
    LINGER_ZERO,
    MB,
    Upstream,
    closed_port,
    echo,
    free_port,
    read_until_end,
    upstream_fixture,
)

# ------------------------------------------------------------------------------- socat as reference

SOCAT = shutil.which("socat")
needs_socat = pytest.mark.skipif(
    SOCAT is None, reason="socat is not installed (`make test-tools` installs it)"
)


@contextlib.contextmanager
def relay(tool: str, tmp_path: Path, listen: str, up: str) -> Iterator[Callable[[], socket.socket]]:
    """``socat LISTEN UP`` or ``fdkit proxy LISTEN UP``, the same strings; yields a function
    that connects a client. The process (and socat's children, in its own session) is stopped
    by its pid at the end."""
    err_path = tmp_path / f"{tool}-{time.monotonic_ns()}.err"
    if tool == "socat":
        # -t: how long socat keeps the other direction open after one ended (0.5 s by
        # default, where fdkit waits for it to end): long enough for these exchanges.
        command = [str(SOCAT), "-d", "-d", "-t", "10", listen, up]
        ready = "listening on"
    else:
        command = [FDKIT, "proxy", "-v", listen, up]
        ready = "fdkit proxy: listening on"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            command, stdout=err, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 15
        while ready not in err_path.read_text():
            assert proc.poll() is None, err_path.read_text()
            assert time.monotonic() < deadline, err_path.read_text()
            time.sleep(0.01)
        kind, _, where = listen.partition(":")
        where = where.split(",")[0]

        def connect() -> socket.socket:
            if kind.upper().startswith("UNIX"):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(10)
                s.connect(where)
                return s
            return socket.create_connection(("127.0.0.1", int(where)), timeout=10)

        yield connect
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # the session the process leads: its pid
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def ended(s: socket.socket) -> tuple[bytes, str]:
    """What ``s`` reads to its end, and how it ended: "eof", or the error's name."""
    got, end = read_until_end(s)
    return got, "eof" if end is None else type(end).__name__


def digest(data: bytes) -> tuple[int, str]:
    return len(data), hashlib.sha256(data).hexdigest()[:16]


# Each scenario: (upstream handler, client) -> what each side saw. The handler stores the
# upstream's view in `seen`; the client returns its own.
Seen = list[object]


def bulk_echo(seen: Seen) -> tuple[Callable[[socket.socket], None], Callable[..., object]]:
    def handler(conn: socket.socket) -> None:
        echo(conn)
        seen.append("echoed")

    def client(c: socket.socket) -> object:
        payload = os.urandom(3 * MB)

        def send() -> None:
            c.sendall(payload)
            c.shutdown(socket.SHUT_WR)

        t = threading.Thread(target=send)
        t.start()
        got, end = ended(c)
        t.join(10)
        return digest(got) == digest(payload), len(got), end

    return handler, client


def client_half_closes_first(seen: Seen) -> tuple[Callable[..., None], Callable[..., object]]:
    def handler(conn: socket.socket) -> None:
        got, end = ended(conn)  # ends only at the client's half-close
        seen.append((digest(got), end))
        conn.sendall(b"got %d" % len(got))

    def client(c: socket.socket) -> object:
        c.sendall(b"q" * 300_000)
        c.shutdown(socket.SHUT_WR)
        return ended(c)

    return handler, client


def upstream_half_closes_first(seen: Seen) -> tuple[Callable[..., None], Callable[..., object]]:
    def handler(conn: socket.socket) -> None:
        conn.sendall(b"hello")
        conn.shutdown(socket.SHUT_WR)
        got, end = ended(conn)
        seen.append((digest(got), end))

    def client(c: socket.socket) -> object:
        greeting = ended(c)  # EOF while the client may still send
        c.sendall(b"u" * 200_000)
        c.shutdown(socket.SHUT_WR)
        return greeting, ended(c)

    return handler, client


def upstream_sends_and_closes(seen: Seen) -> tuple[Callable[..., None], Callable[..., object]]:
    body = os.urandom(2 * MB)

    def handler(conn: socket.socket) -> None:
        conn.sendall(body)
        seen.append("sent")

    def client(c: socket.socket) -> object:
        got, end = ended(c)
        return got == body, len(got), end

    return handler, client


SCENARIOS = [
    bulk_echo,
    client_half_closes_first,
    upstream_half_closes_first,
    upstream_sends_and_closes,
]


@needs_socat
@pytest.mark.parametrize(
    ("listen", "up"),
    [
        ("TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork", "TCP:127.0.0.1:{up_port}"),
        ("UNIX-LISTEN:{tmp}/front.sock,fork", "UNIX-CONNECT:{tmp}/back.sock"),
    ],
    ids=["tcp", "unix"],
)
def test_a_client_sees_through_fdkit_what_it_sees_through_socat(
    tmp_path: Path, listen: str, up: str, upstream: Callable[..., Upstream]
) -> None:
    """The same relay, the same address strings, run by socat and then by fdkit proxy: the
    bytes each way, where each side's half-close arrives and how each read ends are the same."""
    unix = up.startswith("UNIX")
    upstream_seen: Seen = []
    server = upstream(echo, unix=tmp_path / "back.sock" if unix else None)
    fill = {"port": free_port(), "up_port": server.port, "tmp": tmp_path}
    views: dict[str, list[tuple[str, object, Seen]]] = {}
    for tool in ("socat", "fdkit"):
        views[tool] = []
        with relay(tool, tmp_path, listen.format(**fill), up.format(**fill)) as connect:
            for scenario in SCENARIOS:
                upstream_seen.clear()
                handler, client = scenario(upstream_seen)
                server.handler = handler
                with connect() as c:
                    view = client(c)
                deadline = time.monotonic() + 10
                while not upstream_seen and time.monotonic() < deadline:
                    time.sleep(0.01)
                views[tool].append((scenario.__name__, view, list(upstream_seen)))
    assert views["fdkit"] == views["socat"]
    # And both are what a relay must give (had socat and fdkit been wrong alike).
    assert views["fdkit"] == [
        ("bulk_echo", (True, 3 * MB, "eof"), ["echoed"]),
        ("client_half_closes_first", (b"got 300000", "eof"), [(digest(b"q" * 300_000), "eof")]),
        (
            "upstream_half_closes_first",
            ((b"hello", "eof"), (b"", "eof")),
            [(digest(b"u" * 200_000), "eof")],
        ),
        ("upstream_sends_and_closes", (True, 2 * MB, "eof"), ["sent"]),
    ]


@needs_socat
def test_where_fdkit_differs_from_socat_a_cut_stream_stays_cut(
    tmp_path: Path, upstream: Callable[..., Upstream]
) -> None:
    """socat ends the client's connection cleanly when the upstream refuses or resets, so a
    cut body looks whole; fdkit proxy passes the reset on (docs/cli.md says so)."""
    sent = os.urandom(100_000)

    def send_then_reset(conn: socket.socket) -> None:
        conn.sendall(sent)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_ZERO)

    server = upstream(send_then_reset)
    seen: dict[str, list[tuple[bool, str]]] = {}
    for tool in ("socat", "fdkit"):
        seen[tool] = []
        for up in (f"TCP:127.0.0.1:{server.port}", f"TCP:127.0.0.1:{closed_port()}"):
            listen = f"TCP-LISTEN:{free_port()},bind=127.0.0.1,reuseaddr,fork"
            with relay(tool, tmp_path, listen, up) as connect:
                try:
                    c = connect()
                except ConnectionResetError:  # the reset can beat the connect's return
                    seen[tool].append((True, "ConnectionResetError"))
                    continue
                with c:
                    got, end = ended(c)
                seen[tool].append((sent.startswith(got), end))
    assert seen["socat"] == [(True, "eof"), (True, "eof")]
    assert seen["fdkit"] == [(True, "ConnectionResetError"), (True, "ConnectionResetError")]
