"""`fdkit serve` connections from first byte to last: keep-alive and pipelining, half-closes,
idle timeouts against silent, trickling and slow clients, a thousand connections at once and
the ``--max-connections`` cap, a graceful stop with a response in flight, and several
workers.

A server that answers every single request right can still hang, cut or leak connections;
these tests hold the connections open, slow them down or end them early to see that it does
not.

Most tests run against both engines (``--engine uring`` skipped where io_uring is not
available). The server (``--port 0``, stopped by pid with its workers), the site (with
``secret.txt`` beside it, which no answer may contain) and the response reader are in
``helpers/serve.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import resource
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.serve import (  # noqa: F401  (the fixtures site, srv)
    DATA,
    FDKIT,
    HALLO,
    INDEX,
    START,
    STARTUP,
    Serve,
    Wire,
    _engine_args,
    _tree,
    fdkit_serve,
    get,
    make_site,
    site_fixture,
    srv_fixture,
)

# ------------------------------------------------------------------------------ keep-alive


def test_keep_alive_with_http_client(srv: Serve) -> None:
    conn = srv.http()
    try:
        socks = set()
        for method, target, status, body in [
            ("GET", "/hallo.txt", 200, HALLO),
            ("GET", "/nope", 404, None),
            ("HEAD", "/data.bin", 200, b""),
            ("GET", "/data.bin", 200, DATA),
            ("GET", "/", 200, INDEX),
        ]:
            conn.request(method, target)
            r = conn.getresponse()
            got = r.read()
            assert r.status == status, (target, r.status)
            if body is not None:
                assert got == body
            socks.add(id(conn.sock))
        assert len(socks) == 1, "the connection was not kept alive"
    finally:
        conn.close()


def test_pipelined_requests_are_answered_in_order(srv: Serve) -> None:
    with srv.raw() as s:
        s.sendall(
            b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /data.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=5-9\r\n\r\n"
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        w = Wire(s)
        first, second, third = w.response(), w.response(), w.response()
    assert (first.status, first.body) == (200, HALLO)
    assert (second.status, second.body) == (206, DATA[5:10])
    assert (third.status, third.body) == (200, INDEX)


def test_many_pipelined_requests_mixed(srv: Serve) -> None:
    kinds = [
        ("GET", "/hallo.txt", 200, HALLO),
        ("HEAD", "/data.bin", 200, b""),
        ("GET", "/nope", 404, None),
        ("GET", "/data.bin", 200, DATA),
        ("GET", "/sub/page.txt", 200, b"sub page\n"),
    ]
    plan = kinds * 20
    blob = b"".join(f"{m} {t} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for m, t, _, _ in plan)
    with srv.raw(10) as s:
        w = Wire(s)
        sender = threading.Thread(target=s.sendall, args=(blob,), daemon=True)
        sender.start()  # the answers (2 MB) are read while the requests are still going out
        for m, t, status, body in plan:
            r = w.response(m)
            assert r.status == status, (m, t, r)
            if body is not None:
                assert r.body == body, (m, t)
        sender.join(10)


def test_a_request_trickled_in_pieces(srv: Serve) -> None:
    req = b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n"
    with srv.raw() as s:
        for i in range(len(req)):
            s.sendall(req[i : i + 1])
            time.sleep(0.002)
        assert Wire(s).response().body == HALLO


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET /hallo.txt HTTP/1.0\r\n\r\n",
    ],
    ids=["connection-close", "http-1.0"],
)
def test_the_connection_ends_when_asked(srv: Serve, request_bytes: bytes) -> None:
    with srv.raw() as s:
        s.sendall(request_bytes)
        w = Wire(s)
        r = w.response()
        assert r.body == HALLO
        assert w.closed(5), "the server kept the connection open"


@pytest.mark.parametrize(
    ("request_bytes", "answered"),
    [
        (b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n", True),
        (
            b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\nGET /data.bin HTTP/1.1\r\nHost: x\r\n\r\n",
            True,
        ),
        (b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n", False),  # the head never completes
        (b"", False),
    ],
    ids=["one-request", "two-requests", "incomplete-head", "nothing"],
)
def test_a_client_half_close_ends_the_connection(
    srv: Serve, request_bytes: bytes, answered: bool
) -> None:
    """After the client's FIN no request can come: the server answers what it has (complete
    requests, in order), then closes, without waiting for the idle timeout (30 s here)."""
    with srv.raw() as s:
        s.sendall(request_bytes)
        s.shutdown(socket.SHUT_WR)
        w = Wire(s)
        if answered:
            assert w.response().body == HALLO
            if b"data.bin" in request_bytes:
                assert w.response().body == DATA
        assert w.closed(3), "the connection stayed open 3 s after the client's FIN"


def test_http_1_0_keep_alive_if_asked(srv: Serve) -> None:
    with srv.raw() as s:
        s.sendall(b"GET /hallo.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        w = Wire(s)
        assert w.response().body == HALLO
        # Either kept (and says so) or closed; never anything else.
        s.sendall(b"GET /hallo.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        with contextlib.suppress(ConnectionError, BrokenPipeError):
            assert w.response().body == HALLO


# ------------------------------------------------------------------------------ slow clients


@pytest.fixture(scope="module")
def idle_srv(site: Path, engine: str) -> Iterator[Serve]:
    with fdkit_serve(site, *_engine_args(engine), "--idle-timeout", "1") as s:
        yield s


def _closed_after(s: socket.socket, limit: float) -> float | None:
    """Seconds until the server closes ``s`` (reading and discarding), None past ``limit``."""
    t0 = time.monotonic()
    s.settimeout(0.2)
    while time.monotonic() - t0 < limit:
        try:
            if s.recv(65536) == b"":
                return time.monotonic() - t0
        except TimeoutError:
            continue
        except ConnectionResetError:
            return time.monotonic() - t0
    return None


def test_a_silent_connection_is_dropped(idle_srv: Serve) -> None:
    with idle_srv.raw() as s:
        took = _closed_after(s, 5)
    assert took is not None, "still open 5 s after connecting with --idle-timeout 1"
    assert took > 0.5, f"closed after {took:.2f} s, before the idle timeout"


def test_an_idle_keep_alive_connection_is_dropped(idle_srv: Serve) -> None:
    with idle_srv.raw() as s:
        s.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
        assert Wire(s).response().body == HALLO
        took = _closed_after(s, 5)
    assert took is not None, took
    assert took > 0.5, took


def test_slowloris_a_header_trickled_byte_by_byte_is_dropped(idle_srv: Serve) -> None:
    """One byte every 0.2 s, forever: never idle for a second, yet never a request. The
    server must drop it soon after the idle timeout, not keep it while bytes trickle."""
    head = b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10_000
    with idle_srv.raw() as s:
        t0 = time.monotonic()
        dropped = None
        for b in head:
            try:
                s.sendall(bytes([b]))
            except (BrokenPipeError, ConnectionResetError):
                dropped = time.monotonic() - t0
                break
            readable, _, _ = select.select([s], [], [], 0.2)
            if readable:
                try:
                    data = s.recv(65536)
                except ConnectionResetError:
                    data = b""
                if not data or data.startswith(b"HTTP/1.1 4"):
                    dropped = time.monotonic() - t0
                    break
                pytest.fail(f"unexpected answer to a partial head: {data[:200]!r}")
            if time.monotonic() - t0 > 6:
                break
    assert dropped is not None, "a trickling client kept its connection for 6 s"
    assert dropped > 0.5, dropped


def test_an_active_client_is_not_dropped(idle_srv: Serve) -> None:
    """Requests every 0.3 s for 2 s: the connection is never idle for a second."""
    with idle_srv.raw() as s:
        w = Wire(s)
        t0 = time.monotonic()
        n = 0
        while time.monotonic() - t0 < 2.0:
            s.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
            assert w.response().body == HALLO, n
            n += 1
            time.sleep(0.3)
        assert n >= 6


def test_a_slow_reader_of_a_large_body_is_not_cut_while_it_reads(idle_srv: Serve) -> None:
    """A client that reads a 100 kB body slowly (in 2 s) but steadily is not idle."""
    with idle_srv.raw() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(b"GET /data.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        got = bytearray()
        t0 = time.monotonic()
        s.settimeout(5)
        while len(got) < len(DATA) + 100 and time.monotonic() - t0 < 10:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
            if time.monotonic() - t0 < 2.0:
                time.sleep(0.08)
            if b"\r\n\r\n" in got and len(got) - got.index(b"\r\n\r\n") - 4 >= len(DATA):
                break
        head, _, body = bytes(got).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        assert body == DATA, f"{len(body)} of {len(DATA)} bytes"


# ------------------------------------------------------------------------------ load


def test_a_thousand_concurrent_connections(site: Path, engine: str) -> None:
    n = 1000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = n + 500
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    try:
        with fdkit_serve(site, *_engine_args(engine), "--max-connections", "4096") as s:
            results = asyncio.run(_thousand(s, n))
            assert results.count(True) == n, f"{results.count(False)} of {n} answers wrong"
            assert get(s, "/hallo.txt").body == HALLO
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def _thousand(srv: Serve, n: int) -> list[bool]:
    barrier = asyncio.Barrier(n)
    want_data = hashlib.sha256(DATA).digest()

    async def read_response(r: asyncio.StreamReader) -> tuple[int, bytes]:
        head = await r.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
        body = await r.readexactly(int(m.group(1))) if m else b""
        return status, body

    async def client(i: int) -> bool:
        r, w = await asyncio.open_connection(srv.host, srv.port, limit=1 << 20)
        try:
            # Every connection is established and has been served once; then all at once.
            w.write(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
            if await read_response(r) != (200, HALLO):
                return False
            await barrier.wait()
            target = b"/data.bin" if i % 2 else b"/sub/page.txt"
            w.write(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            status, body = await read_response(r)
            if i % 2:
                return status == 200 and hashlib.sha256(body).digest() == want_data
            return status == 200 and body == b"sub page\n"
        finally:
            w.close()
            with contextlib.suppress(ConnectionError):
                await w.wait_closed()

    return await asyncio.wait_for(asyncio.gather(*(client(i) for i in range(n))), timeout=60)


def test_the_connection_cap(site: Path, engine: str) -> None:
    with fdkit_serve(site, *_engine_args(engine), "--max-connections", "2") as s:
        a, b = s.raw(), s.raw()
        try:
            for c in (a, b):
                c.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
                assert Wire(c).response().body == HALLO
            # A third connection is not served while two are open (it may wait unaccepted,
            # be closed, or get an error status).
            with s.raw() as c:
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    c.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
                c.settimeout(0.7)
                try:
                    data = c.recv(65536)
                except (TimeoutError, ConnectionResetError):
                    data = b""
                assert not data.startswith(b"HTTP/1.1 200"), data[:200]
            a.close()
            # Once one closes, a new connection is served.
            deadline = time.monotonic() + 5
            while True:
                try:
                    r = get(s, "/hallo.txt")
                    if r.status == 200:
                        break
                except (ConnectionError, TimeoutError):
                    pass
                assert time.monotonic() < deadline, "no connection served after one closed"
                time.sleep(0.1)
        finally:
            a.close()
            b.close()


# ------------------------------------------------------------------------------ stop, workers


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_graceful_stop_finishes_a_large_response(
    engine: str, tmp_path: Path, sig: signal.Signals
) -> None:
    root = make_site(tmp_path)
    big = os.urandom(24 << 20)
    (root / "big.bin").write_bytes(big)
    with fdkit_serve(root, *_engine_args(engine), check_exit=False) as s:
        idle = s.raw()
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        c.settimeout(10)
        with idle, c:
            idle.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
            assert Wire(idle).response().body == HALLO
            c.connect(s.addr)
            c.sendall(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
            got = bytearray()
            while len(got) < 200_000:
                chunk = c.recv(65536)
                assert chunk
                got += chunk
            os.kill(s.proc.pid, sig)  # the response is in flight
            deadline = time.monotonic() + 20
            while True:
                assert time.monotonic() < deadline, f"stuck at {len(got)} bytes"
                try:
                    chunk = c.recv(1 << 20)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                got += chunk
            head, _, body = bytes(got).partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), head[:100]
            assert len(body) == len(big), f"{len(body)} of {len(big)} bytes after {sig!r}"
            assert body == big
            try:
                code = s.proc.wait(10)
            except subprocess.TimeoutExpired:
                pytest.fail("the server did not exit after the in-flight response")
            assert code == 0, s.output()[-2000:]
            # The idle keep-alive connection was closed, not left hanging.
            assert Wire(idle).closed(2)
        out = s.output()
        assert "Traceback" not in out
        assert "panicked" not in out
        others = [ln for ln in out.splitlines() if ln.strip() and not START.search(ln)]
        assert others, f"no summary line: {out!r}"


def test_stop_with_only_idle_connections_is_prompt(engine: str, site: Path) -> None:
    with fdkit_serve(site, *_engine_args(engine), check_exit=False) as s:
        conns = [s.raw() for _ in range(20)]
        try:
            for c in conns[:10]:
                c.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
                assert Wire(c).response().body == HALLO
            t0 = time.monotonic()
            assert s.stop(signal.SIGTERM, timeout=10) == 0
            assert time.monotonic() - t0 < 5, "waited for idle connections (idle timeout 30 s)"
        finally:
            for c in conns:
                c.close()


def test_two_workers(engine: str, site: Path) -> None:
    with fdkit_serve(site, *_engine_args(engine), "--workers", "2", check_exit=False) as s:
        assert s.workers == 2
        deadline = time.monotonic() + 5
        while len(workers := _tree(s.proc.pid)) < 2:
            assert time.monotonic() < deadline, f"worker processes: {workers}"
            time.sleep(0.05)
        assert len(workers) == 2, workers
        # Many connections (SO_REUSEPORT spreads them), each served correctly.
        conns = [s.raw() for _ in range(64)]
        try:
            for c in conns:
                c.sendall(b"GET /data.bin HTTP/1.1\r\nHost: x\r\n\r\n")
            for c in conns:
                assert Wire(c).response().body == DATA
        finally:
            for c in conns:
                c.close()
        assert s.stop(signal.SIGTERM) == 0, s.output()[-2000:]
        deadline = time.monotonic() + 5
        while any(Path(f"/proc/{w}").exists() and _state(w) != "Z" for w in workers):
            assert time.monotonic() < deadline, "workers outlived the parent"
            time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0].decode()
    except OSError:
        return "gone"


def test_quiet_still_serves(site: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [FDKIT, "serve", str(site), "--port", str(port), "--quiet"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + STARTUP
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
                    c.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
                    assert Wire(c).response().body == HALLO
                break
            except ConnectionRefusedError:
                assert proc.poll() is None
                assert time.monotonic() < deadline
                time.sleep(0.02)
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err
        assert b"GET /hallo.txt" not in err + out  # no per-request log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
