"""``fdkit proxy`` as a subprocess for the tests of tests/test_cli_proxy_*.py: started with its
arguments, its start line read, killed by its pid at the end (:func:`fdkit_proxy`); threaded
upstreams on loopback or a unix socket (:class:`Upstream`, and the ``upstream`` fixture that
closes them); and the small socket helpers those tests share (reading to the end, an echo
handler, free and closed ports)."""

from __future__ import annotations

import contextlib
import os
import re
import select
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

FDKIT = shutil.which("fdkit", path=os.path.dirname(sys.executable)) or "fdkit"
START = re.compile(r"listening on (\S+), forwarding to (\S+) \(pid (\d+)\)")


class Proxy:
    """A running ``fdkit proxy`` process."""

    def __init__(self, proc: subprocess.Popen[str], listen: str, err_path: Path) -> None:
        self.proc = proc
        self.listen = listen
        self.err_path = err_path

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.listen.rsplit(":", 1)
        return host, int(port)

    def connect(self, timeout: float = 10) -> socket.socket:
        if self.listen.startswith("unix:"):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(timeout)
            s.connect(self.listen[len("unix:") :])
            return s
        return socket.create_connection(self.address, timeout=timeout)

    def log(self) -> list[str]:
        return self.err_path.read_text().splitlines()

    def wait_log(self, needle: str, count: int = 1, timeout: float = 10) -> list[str]:
        """Waits until ``count`` stderr lines contain ``needle``; returns them."""
        deadline = time.monotonic() + timeout
        while True:
            found = [line for line in self.log() if needle in line]
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                pytest.fail(f"no {count} log lines with {needle!r}: {self.log()[-20:]}")
            time.sleep(0.01)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> tuple[int, str]:
        """Sends ``sig``; returns the exit code and what was left on stdout."""
        self.proc.send_signal(sig)
        out, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out


@contextlib.contextmanager
def fdkit_proxy(tmp_path: Path, *args: str, setup: str = "") -> Iterator[Proxy]:
    """Starts ``fdkit proxy ARGS``, reads its start line, and kills it by pid at the end.
    ``setup`` is a command run first, which then execs the proxy in its place (so the pid is
    the same): ``sh -c 'ulimit -n 1024 && exec "$0" "$@"'``, split as a shell would split it."""
    err_path = tmp_path / f"proxy-{time.monotonic_ns()}.err"
    command = [*shlex.split(setup), FDKIT, "proxy", *args]
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 15)
        line = proc.stdout.readline() if ready else ""
        m = START.search(line)
        assert m, f"no start line: {line!r}; stderr: {err_path.read_text()!r}"
        assert int(m.group(3)) == proc.pid
        yield Proxy(proc, m.group(1), err_path)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


def run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FDKIT, "proxy", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


class Upstream:
    """A threaded TCP server on 127.0.0.1 running ``handler(conn)`` per connection."""

    def __init__(
        self,
        handler: Callable[[socket.socket], None],
        at: tuple[str, int] = ("127.0.0.1", 0),
        unix: Path | None = None,
    ) -> None:
        self.handler = handler
        self.unix = unix
        if unix is None:
            self.listener = socket.create_server(at, backlog=1024)
            self.port: int = self.listener.getsockname()[1]
        else:
            self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.listener.bind(str(unix))
            self.listener.listen(64)
            self.port = 0
        self.listener.settimeout(0.05)
        self.stopping = threading.Event()
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def spec(self) -> str:
        return f"127.0.0.1:{self.port}" if self.unix is None else f"unix:{self.unix}"

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            t = threading.Thread(target=self._handle, args=(conn,), daemon=True)
            t.start()
            self.threads.append(t)

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            try:
                self.handler(conn)
            except BaseException as e:
                self.errors.append(e)

    def close(self) -> None:
        self.stopping.set()
        self.thread.join()
        for t in self.threads:
            t.join(10)
        self.listener.close()


# The fixture a module gets by importing it: ``from helpers.cli_proxy import
# upstream_fixture``. Named ``upstream`` for the tests that take it.


@pytest.fixture(name="upstream")
def upstream_fixture() -> Iterator[Callable[..., Upstream]]:
    """``upstream(handler)``: an :class:`Upstream` on 127.0.0.1 (``at=(HOST, PORT)`` elsewhere,
    ``unix=PATH`` for a unix socket), closed when the test ends."""
    made: list[Upstream] = []

    def make(
        handler: Callable[[socket.socket], None],
        at: tuple[str, int] = ("127.0.0.1", 0),
        unix: Path | None = None,
    ) -> Upstream:
        made.append(Upstream(handler, at, unix))
        return made[-1]

    yield make
    for u in made:
        u.close()
    for u in made:
        assert not u.errors, u.errors


def recv_all(s: socket.socket) -> bytes:
    chunks = []
    while data := s.recv(65536):
        chunks.append(data)
    return b"".join(chunks)


def echo(conn: socket.socket) -> None:
    while data := conn.recv(65536):
        conn.sendall(data)
    conn.shutdown(socket.SHUT_WR)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def free_port() -> int:
    """A port free on every interface (bound to 0.0.0.0 and let go)."""
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        port: int = s.getsockname()[1]
    return port


MB = 1 << 20
LINGER_ZERO = struct.pack("ii", 1, 0)


def read_until_end(s: socket.socket) -> tuple[bytes, BaseException | None]:
    """Everything ``s`` reads, and how it ended: None for a clean EOF, else the exception."""
    got = bytearray()
    try:
        while data := s.recv(MB):
            got += data
    except OSError as e:
        return bytes(got), e
    return bytes(got), None
