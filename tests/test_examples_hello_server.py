"""examples/hello_server.py, the Ring-driven keep-alive HTTP server, run as a subprocess and
checked with real HTTP clients on loopback: keep-alive, pipelining, many clients, and a clean
stop on SIGTERM and SIGINT."""

from __future__ import annotations

import http.client
import os
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fdkit import uring

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "hello_server.py"
REPLY = (
    b"HTTP/1.1 200 OK\r\nServer: fdkit-ring\r\nContent-Type: text/plain\r\n"
    b"Content-Length: 6\r\nConnection: keep-alive\r\n\r\nhallo\n"
)

_ok, _reason = uring.available()
pytestmark = pytest.mark.skipif(not _ok, reason=f"io_uring unavailable: {_reason}")


class Server:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(EXAMPLE), "--port", "0", "--entries", "256"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 10)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith("listening on "):
            self.kill()
            pytest.fail(f"the server did not start: {line!r} {self.proc.stderr.read()!r}")  # type: ignore[union-attr]  # stderr=PIPE
        host, port = line.split()[-1].rsplit(":", 1)
        self.addr = (host, int(port))

    def stop(self, sig: int) -> tuple[int, str]:
        os.kill(self.proc.pid, sig)
        out, err = self.proc.communicate(timeout=10)
        return self.proc.returncode, out + err

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.communicate(timeout=10)


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    try:
        yield s
    finally:
        s.kill()


def test_keep_alive_serves_several_requests_on_one_connection(server: Server) -> None:
    conn = http.client.HTTPConnection(*server.addr, timeout=5)
    try:
        socks = set()
        for path in ("/", "/a", "/b/c?d=e", "/"):
            conn.request("GET", path)
            r = conn.getresponse()
            assert (r.status, r.reason) == (200, "OK")
            assert r.getheader("Content-Length") == "6"
            assert r.getheader("Connection") == "keep-alive"
            assert r.read() == b"hallo\n"
            socks.add(id(conn.sock))
        assert len(socks) == 1, "the connection was not kept alive"
    finally:
        conn.close()


def test_pipelined_requests_get_one_reply_each(server: Server) -> None:
    with socket.create_connection(server.addr, timeout=5) as s:
        req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
        s.sendall(req * 5)
        # A request split across two sends still counts once.
        s.sendall(req[:10])
        s.sendall(req[10:])
        want = REPLY * 6
        got = b""
        while len(got) < len(want):
            chunk = s.recv(65536)
            assert chunk, f"closed after {len(got)} bytes"
            got += chunk
        assert got == want


def test_many_clients_at_once(server: Server) -> None:
    clients = [socket.create_connection(server.addr, timeout=5) for _ in range(50)]
    try:
        for c in clients:
            c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        for c in clients:
            got = b""
            while len(got) < len(REPLY):
                chunk = c.recv(4096)
                assert chunk
                got += chunk
            assert got == REPLY
    finally:
        for c in clients:
            c.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stops_cleanly_on_a_signal(server: Server, sig: int) -> None:
    # An idle keep-alive connection is open while the server stops.
    idle = socket.create_connection(server.addr, timeout=5)
    try:
        idle.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert idle.recv(4096) == REPLY
        code, output = server.stop(sig)
        assert code == 0, output
        assert "stopped after 1 requests" in output, output
        assert "Traceback" not in output, output
        assert idle.recv(4096) == b"", "the server closed the idle connection"
    finally:
        idle.close()
