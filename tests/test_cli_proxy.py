"""`fdkit proxy` run as a user runs it: a subprocess, with loopback upstreams in the test.

Every proxy process is started here and stopped by its pid in a ``finally``; upstreams are
threads (or an asyncio server) on 127.0.0.1 that stop with the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import resource
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
        self, handler: Callable[[socket.socket], None], at: tuple[str, int] = ("127.0.0.1", 0)
    ) -> None:
        self.handler = handler
        self.listener = socket.create_server(at, backlog=1024)
        self.listener.settimeout(0.05)
        self.port: int = self.listener.getsockname()[1]
        self.stopping = threading.Event()
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def spec(self) -> str:
        return f"127.0.0.1:{self.port}"

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


@pytest.fixture
def upstream() -> Iterator[Callable[..., Upstream]]:
    """``upstream(handler)``: an :class:`Upstream` on 127.0.0.1 (``at=(HOST, PORT)`` elsewhere),
    closed when the test ends."""
    made: list[Upstream] = []

    def make(
        handler: Callable[[socket.socket], None], at: tuple[str, int] = ("127.0.0.1", 0)
    ) -> Upstream:
        made.append(Upstream(handler, at))
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


# ------------------------------------------------------------------------------- arguments


def test_help_names_the_addresses() -> None:
    r = subprocess.run([FDKIT, "proxy", "--help"], capture_output=True, text=True, check=False)
    assert r.returncode == 0
    assert "usage: fdkit proxy" in r.stdout
    assert "unix:@NAME" in r.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nonsense", "127.0.0.1:1"], 'invalid address "nonsense": expected HOST:PORT'),
        (["127.0.0.1:0", "127.0.0.1:99999"], 'invalid address "127.0.0.1:99999"'),
        (["127.0.0.1:0", "::1:80"], "brackets"),
        (["127.0.0.1:0", "unix:"], "empty"),
        (["127.0.0.1:0", "127.0.0.1:1", "--max-connections", "0"], "--max-connections"),
        (["127.0.0.1:0", "127.0.0.1:1", "--idle-timeout", "-1"], "--idle-timeout"),
        (["127.0.0.1:0", "127.0.0.1:1", "--connect-timeout", "nan"], "--connect-timeout"),
        (["127.0.0.1:0", "127.0.0.1:1", "--record", "/nonexistent/dir/rec"], "--record"),
        (["127.0.0.1:0", "127.0.0.1:1", "--pipe-size", "0"], "--pipe-size"),
        (["127.0.0.1:0", "127.0.0.1:1", "--pipe-size", "1X"], "--pipe-size"),
        (["99999", "127.0.0.1:1"], 'invalid address "99999": the port is not a number'),
        ([":65536", "127.0.0.1:1"], 'invalid address ":65536": the port is not a number'),
        ([":", "127.0.0.1:1"], "the host is empty"),
        (["127.0.0.1:0", "127.0.0.1:1", "--resolve-every", "-1"], "--resolve-every must be 0"),
        (["127.0.0.1:0", "127.0.0.1:1", "--resolve-every", "x"], "--resolve-every must be 0"),
    ],
)
def test_bad_arguments_fail_in_one_line(args: list[str], message: str) -> None:
    r = run(*args)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("fdkit proxy: "), r.stderr
    assert message in lines[0], lines[0]
    assert r.stdout == ""


def test_an_address_in_use_is_named_as_serve_names_it() -> None:
    """Not a raw ``[Errno 98] Address already in use: '127.0.0.1:PORT'``: the line serve
    prints, with its exit status."""
    with socket.create_server(("0.0.0.0", 0)) as taken:
        port = taken.getsockname()[1]
        r = run(f"0.0.0.0:{port}", "127.0.0.1:1")
        alone = run(str(port), "127.0.0.1:1")
        serve = subprocess.run(
            [FDKIT, "serve", "-b", "0.0.0.0", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    line = f"cannot listen on 0.0.0.0:{port}: Address already in use"
    assert (r.returncode, r.stderr, r.stdout) == (1, f"fdkit proxy: {line}\n", "")
    assert (alone.returncode, alone.stderr) == (1, f"fdkit proxy: {line}\n")
    assert (serve.returncode, serve.stderr) == (1, f"fdkit serve: {line}\n")


# ------------------------------------------------------------------------------- serving


def test_a_thousand_concurrent_connections(tmp_path: Path) -> None:
    n, size = 1000, 6 * 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * n + 200
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    try:
        _thousand(tmp_path, n, size)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _thousand(tmp_path: Path, n: int, size: int) -> None:
    async def echo_handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while data := await r.read(65536):
            w.write(data)
            await w.drain()
        w.write_eof()
        await w.drain()
        w.close()
        await w.wait_closed()

    async def main() -> tuple[list[bool], float, Proxy, int, str]:
        server = await asyncio.start_server(echo_handler, "127.0.0.1", 0, backlog=2048)
        port = server.sockets[0].getsockname()[1]
        with fdkit_proxy(tmp_path, "127.0.0.1:0", f"127.0.0.1:{port}") as p:
            host, pport = p.address
            barrier = asyncio.Barrier(n)

            async def client(i: int) -> bool:
                r, w = await asyncio.open_connection(host, pport, limit=1 << 20)
                # One round trip proves the proxy holds this connection; then all wait, so
                # that all n are open through the proxy at once.
                w.write(b"%08d" % i)
                assert await r.readexactly(8) == b"%08d" % i
                await barrier.wait()
                payload = os.urandom(size)
                w.write(payload)
                w.write_eof()
                back = await r.read(-1)
                w.close()
                await w.wait_closed()
                return hashlib.sha256(back).digest() == hashlib.sha256(payload).digest()

            t0 = time.monotonic()
            results = await asyncio.wait_for(
                asyncio.gather(*(client(i) for i in range(n))), timeout=60
            )
            elapsed = time.monotonic() - t0
            p.wait_log(" eof", count=n, timeout=20)
            code, out = p.stop(signal.SIGTERM)
        server.close()
        await server.wait_closed()
        return results, elapsed, p, code, out

    results, elapsed, p, code, out = asyncio.run(main())
    assert all(results), f"{results.count(False)} of {n} echoes differ"
    assert elapsed < 20, f"{n} connections took {elapsed:.1f} s"
    assert code == 0, out
    total = n * (size + 8)
    assert f"stopped (SIGTERM): {n} connections (peak {n}), {total} B up, {total} B down" in out
    conns = [line for line in p.log() if line.startswith("conn ")]
    assert len(conns) == n, conns[:5]
    assert all(line.endswith(", eof") for line in conns), conns[:5]


def test_half_close_reaches_the_upstream_and_replies_still_flow(
    tmp_path: Path, upstream: Callable[..., Upstream]
) -> None:
    def count_then_reply(conn: socket.socket) -> None:
        total = len(recv_all(conn))  # ends only at the client's half-close
        conn.sendall(b"got %d" % total)

    up = upstream(count_then_reply)
    with fdkit_proxy(tmp_path, "127.0.0.1:0", up.spec) as p, p.connect() as c:
        c.sendall(os.urandom(300_000))
        c.shutdown(socket.SHUT_WR)
        assert recv_all(c) == b"got 300000"
        line = p.wait_log("conn 1 ")[0]
        assert ": 300000 B up, 10 B down, " in line, line
        assert line.endswith(", eof"), line


def test_an_upstream_half_close_reaches_the_client_first(
    tmp_path: Path, upstream: Callable[..., Upstream]
) -> None:
    counted: list[int] = []

    def greet_then_count(conn: socket.socket) -> None:
        conn.sendall(b"hello")
        conn.shutdown(socket.SHUT_WR)
        counted.append(len(recv_all(conn)))

    up = upstream(greet_then_count)
    with fdkit_proxy(tmp_path, "127.0.0.1:0", up.spec) as p:
        with p.connect() as c:
            assert recv_all(c) == b"hello"  # EOF while the client may still send
            c.sendall(b"x" * 200_000)
            c.shutdown(socket.SHUT_WR)
            assert recv_all(c) == b""
        assert p.wait_log("conn 1 ")[0].endswith("eof")
    up.close()
    assert counted == [200_000]


def test_record_files_hold_what_each_client_received(
    tmp_path: Path, upstream: Callable[..., Upstream]
) -> None:
    def serve_random(conn: socket.socket) -> None:
        conn.sendall(os.urandom(2 * 1024 * 1024 + 12345))
        conn.shutdown(socket.SHUT_WR)
        recv_all(conn)

    up = upstream(serve_random)
    rec = tmp_path / "rec"
    received = []
    with fdkit_proxy(tmp_path, "127.0.0.1:0", up.spec, "--record", str(rec)) as p:
        for _ in range(2):
            with p.connect() as c:
                c.sendall(b"request")
                received.append(recv_all(c))
        p.wait_log(" eof", count=2)
        code, _ = p.stop()
    assert code == 0
    assert (tmp_path / "rec.1").read_bytes() == received[0]
    assert (tmp_path / "rec.2").read_bytes() == received[1]
    assert received[0] != received[1]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_cleanly_with_a_summary(
    tmp_path: Path, sig: int, upstream: Callable[..., Upstream]
) -> None:
    up = upstream(echo)
    with fdkit_proxy(tmp_path, "127.0.0.1:0", up.spec) as p, p.connect() as c:
        c.sendall(b"ping")
        assert c.recv(4) == b"ping"
        t0 = time.monotonic()
        code, out = p.stop(sig)
        assert time.monotonic() - t0 < 5
        name = signal.Signals(sig).name
        assert code == 0, out
        assert out.strip().splitlines()[-1] == (
            f"fdkit proxy: stopped ({name}): 1 connection (peak 1), 4 B up, 4 B down, "
            "0 upstream failures"
        )
        # The open connection was closed, and said so.
        assert recv_all(c) == b""
        assert p.wait_log("conn 1 ")[0].endswith(", stopped")
        assert "Traceback" not in p.err_path.read_text()


def test_an_upstream_that_refuses_resets_the_client_and_is_logged(tmp_path: Path) -> None:
    """The refusal is passed on as a reset: a clean EOF would read as an empty reply."""
    with fdkit_proxy(tmp_path, "127.0.0.1:0", f"127.0.0.1:{closed_port()}") as p:
        try:
            c = p.connect()
        except ConnectionResetError:  # the reset can beat a connect that waits with a timeout
            pass
        else:
            with c:
                got, end = read_until_end(c)
            assert (got, type(end)) == (b"", ConnectionResetError)
        line = p.wait_log("conn 1 ")[0]
        assert "upstream refused (Connection refused)" in line
        code, out = p.stop()
    assert code == 0
    assert "1 connection (peak 1), 0 B up, 0 B down, 1 upstream failure" in out


def test_unix_listener_and_idle_timeout(tmp_path: Path, upstream: Callable[..., Upstream]) -> None:
    up = upstream(echo)
    path = tmp_path / "proxy.sock"
    with fdkit_proxy(tmp_path, f"unix:{path}", up.spec, "--idle-timeout", "0.3") as p:
        assert p.listen == f"unix:{path}"
        with p.connect() as c:
            c.sendall(b"abc")
            assert c.recv(3) == b"abc"
            t0 = time.monotonic()
            assert recv_all(c) == b""  # closed by the idle timeout
            assert 0.25 < time.monotonic() - t0 < 3
        assert p.wait_log("conn 1 from unix")[0].endswith("idle timeout")
        code, _ = p.stop()
    assert code == 0
    assert not path.exists()


# ------------------------------------------------------------------------------- resets

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


def test_an_upstream_reset_reaches_the_client_as_a_reset(
    tmp_path: Path, upstream: Callable[..., Upstream]
) -> None:
    """The upstream sends 1 MB and resets (SO_LINGER 0 + close). The client reads a prefix of
    it and then ECONNRESET, never a clean EOF that would make the cut body look complete."""
    sent = os.urandom(MB)

    def send_then_reset(conn: socket.socket) -> None:
        conn.sendall(sent)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_ZERO)

    up = upstream(send_then_reset)
    with fdkit_proxy(tmp_path, "127.0.0.1:0", up.spec) as p, p.connect() as c:
        got, end = read_until_end(c)
        assert isinstance(end, ConnectionResetError), (
            f"the upstream's reset reached the client as {end or 'a clean EOF'!r} "
            f"after {len(got)} bytes"
        )
        assert sent.startswith(got), f"{len(got)} bytes are not a prefix of what was sent"
        line = p.wait_log("conn 1 ")[0]
        assert "upstream reset" in line, line


def test_a_client_reset_reaches_the_upstream_as_a_reset(
    tmp_path: Path, upstream: Callable[..., Upstream]
) -> None:
    sent = os.urandom(MB)
    seen: list[tuple[bytes, BaseException | None]] = []
    up = upstream(lambda conn: seen.append(read_until_end(conn)))
    with fdkit_proxy(tmp_path, "127.0.0.1:0", up.spec) as p:
        with p.connect() as c:
            c.sendall(sent)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_ZERO)
        line = p.wait_log("conn 1 ")[0]
        assert "client reset" in line, line
        up.close()
    assert len(seen) == 1
    got, end = seen[0]
    assert isinstance(end, ConnectionResetError), (
        f"the client's reset reached the upstream as {end or 'a clean EOF'!r} "
        f"after {len(got)} bytes"
    )
    assert sent.startswith(got)


def test_a_reset_waits_for_bytes_the_client_has_not_read_only_so_long(
    tmp_path: Path, upstream: Callable[..., Upstream]
) -> None:
    """The upstream fills everything up to a client that does not read, then resets. The proxy
    does not hold the connection forever waiting for the client: it resets it after the stall
    (2 s), and the client then reads a prefix followed by ECONNRESET."""
    sent = os.urandom(64 * MB)
    done = threading.Event()

    def fill_then_reset(conn: socket.socket) -> None:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
        conn.settimeout(0.5)
        with contextlib.suppress(TimeoutError):
            conn.sendall(sent)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_ZERO)
        done.set()

    up = upstream(fill_then_reset)
    with fdkit_proxy(tmp_path, "127.0.0.1:0", up.spec) as p, p.connect() as c:
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        assert done.wait(10)
        t0 = time.monotonic()
        line = p.wait_log("conn 1 ", timeout=10)[0]
        assert time.monotonic() - t0 < 5, line
        assert "upstream reset" in line, line
        got, end = read_until_end(c)
        assert isinstance(end, ConnectionResetError), (end, len(got))
        assert sent.startswith(got)


def test_a_clean_end_is_still_a_clean_eof_with_every_byte(
    tmp_path: Path, upstream: Callable[..., Upstream]
) -> None:
    sent = os.urandom(MB)

    def send_then_close(conn: socket.socket) -> None:
        conn.sendall(sent)

    up = upstream(send_then_close)
    with fdkit_proxy(tmp_path, "127.0.0.1:0", up.spec) as p, p.connect() as c:
        got, end = read_until_end(c)
        assert end is None, (end, len(got))
        assert got == sent, (end, len(got))
        c.shutdown(socket.SHUT_WR)
        assert p.wait_log("conn 1 ")[0].endswith(", eof")


def test_a_recording_that_cannot_be_written_resets_the_client(
    tmp_path: Path, upstream: Callable[..., Upstream]
) -> None:
    """The recording hits the file size limit (RLIMIT_FSIZE: EFBIG) mid-stream: the proxy stops
    relaying, and the client must see the cut as a reset, not as a clean end of a short body."""
    sent = os.urandom(4 * MB)

    def send_all(conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            conn.sendall(sent)
            conn.shutdown(socket.SHUT_WR)
            recv_all(conn)

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))

    up = upstream(send_all)
    rec = tmp_path / "rec"
    err_path = tmp_path / "proxy.err"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [FDKIT, "proxy", "127.0.0.1:0", up.spec, "--record", str(rec)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            preexec_fn=small_files,
        )
    try:
        assert proc.stdout is not None
        m = START.search(proc.stdout.readline())
        assert m, err_path.read_text()
        p = Proxy(proc, m.group(1), err_path)
        got: bytes = b""
        end: BaseException | None = None
        try:
            c = p.connect()
        except ConnectionResetError as e:  # the reset can beat a connect that waits in poll
            end = e
        else:
            with c:
                got, end = read_until_end(c)
        assert isinstance(end, ConnectionResetError), (
            f"a failed recording reached the client as {end or 'a clean EOF'!r} "
            f"after {len(got)} bytes"
        )
        assert len(got) < len(sent)
        assert sent.startswith(got)
        assert "record" in p.wait_log("conn 1 ")[0]
    finally:
        proc.kill()
        proc.communicate(timeout=10)


# ------------------------------------------------------------------------------- signals


def test_sigint_stops_it_even_when_started_with_sigint_ignored(
    tmp_path: Path, upstream: Callable[..., Upstream]
) -> None:
    """A background job of a script (`fdkit proxy ... &` in sh) starts with SIGINT ignored,
    and Python leaves SIG_IGN in place: SIGINT did nothing and the proxy kept serving. It now
    stops on SIGINT as serve does, with the summary and exit code 0."""
    up = upstream(echo)
    err_path = tmp_path / "proxy.err"
    # `trap '' INT` sets SIG_IGN, which exec keeps: the proxy starts with SIGINT ignored.
    script = f"trap '' INT; exec '{FDKIT}' proxy 127.0.0.1:0 {up.spec}"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 15)
        m = START.search(proc.stdout.readline() if ready else "")
        assert m, err_path.read_text()
        assert int(m.group(3)) == proc.pid
        with open(f"/proc/{proc.pid}/status") as f:
            ignored = next(int(line.split()[1], 16) for line in f if line.startswith("SigIgn:"))
        assert not ignored & (1 << (signal.SIGINT - 1)), "SIGINT still ignored while serving"
        p = Proxy(proc, m.group(1), err_path)
        with p.connect() as c:
            c.sendall(b"ping")
            assert c.recv(4) == b"ping"
        code, out = p.stop(signal.SIGINT, timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)
    assert code == 0, out
    assert out.strip().splitlines()[-1].startswith("fdkit proxy: stopped (SIGINT): 1 connection ")


def test_verbose_logs_the_settings_with_a_timestamp_and_quiet_drops_the_connections(
    tmp_path: Path, upstream: Callable[..., Upstream]
) -> None:
    up = upstream(echo)
    with fdkit_proxy(tmp_path, "127.0.0.1:0", up.spec, "-v", "--idle-timeout", "30") as p:
        with p.connect() as c:
            c.sendall(b"x")
            assert c.recv(1) == b"x"
        p.wait_log("conn 1 ")
        code, out = p.stop()
    assert code == 0
    first = p.log()[0]
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d fdkit proxy: at most 4096 connections, idle timeout "
        r"30 s, connect timeout 10 s, relay pipes 64K grown to 1M",
        first,
    ), first
    # The start line and the summary stay on stdout, as they were.
    assert out.strip().splitlines()[-1].startswith("fdkit proxy: stopped (SIGTERM): 1 connection ")
    with fdkit_proxy(tmp_path, "127.0.0.1:0", up.spec, "-q") as p:
        with p.connect() as c:
            c.sendall(b"x")
            assert c.recv(1) == b"x"
        code, out = p.stop()
    assert code == 0
    assert "1 connection (peak 1)" in out
    assert p.log() == []


# ------------------------------------------------------------------------------- socat's habits


def free_port() -> int:
    """A port free on every interface (bound to 0.0.0.0 and let go)."""
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.parametrize("spelling", ["{port}", ":{port}"])
def test_a_port_alone_listens_on_every_interface(
    tmp_path: Path, spelling: str, upstream: Callable[..., Upstream]
) -> None:
    """As socat's TCP-LISTEN:PORT: 0.0.0.0 (it was refused: "the host is empty")."""
    up = upstream(echo)
    port = free_port()
    with fdkit_proxy(tmp_path, spelling.format(port=port), up.spec) as p:
        assert p.listen == f"0.0.0.0:{port}"
        for host in ("127.0.0.1", "127.0.0.2"):
            with socket.create_connection((host, port), timeout=10) as c:
                c.sendall(b"hi")
                assert c.recv(2) == b"hi"
        code, out = p.stop()
    assert code == 0
    assert "stopped (SIGTERM): 2 connections (peak " in out


def test_help_says_what_a_port_alone_means() -> None:
    r = subprocess.run([FDKIT, "proxy", "--help"], capture_output=True, text=True, check=False)
    text = " ".join(r.stdout.split())
    assert "PORT or :PORT (every IPv4 interface, as socat's TCP-LISTEN:PORT)" in text
    assert "--resolve-every SECONDS" in text


LOWERED = "max connections lowered from 4096 to "


def test_the_rlimit_line_is_a_detail_for_verbose_only(
    tmp_path: Path, upstream: Callable[..., Upstream]
) -> None:
    """4096 connections do not fit 1024 fds: the default cap is lowered quietly (the line came
    on every start); -v shows it, time-stamped; an explicit --max-connections says it anyway."""
    up = upstream(echo)
    small = """sh -c 'ulimit -n 1024 && exec "$0" "$@"'"""
    with fdkit_proxy(tmp_path, "127.0.0.1:0", up.spec, setup=small) as p:
        with p.connect() as c:
            c.sendall(b"x")
            assert c.recv(1) == b"x"
        p.wait_log("conn 1 ")
        p.stop()
    assert not any(LOWERED in line for line in p.log()), p.log()
    with fdkit_proxy(tmp_path, "127.0.0.1:0", up.spec, "-v", setup=small) as p:
        p.stop()
    (line,) = [line for line in p.log() if LOWERED in line]
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d fdkit proxy: max connections lowered from 4096 "
        r"to \d+: RLIMIT_NOFILE allows 1024 open files \(hard limit 1024\) and each connection "
        r"needs 6",
        line,
    ), line
    with fdkit_proxy(
        tmp_path, "127.0.0.1:0", up.spec, "--max-connections", "4096", setup=small
    ) as p:
        p.stop()
    assert [line for line in p.log() if LOWERED in line], p.log()


def tagged(tag: bytes) -> Callable[[socket.socket], None]:
    """An upstream that names itself with ``tag``, then echoes."""

    def handler(conn: socket.socket) -> None:
        conn.sendall(tag)
        echo(conn)

    return handler


def tag_through(p: Proxy) -> bytes:
    with p.connect() as c:
        tag = c.recv(1)
        c.sendall(b"x")
        assert c.recv(1) == b"x"
    return tag


def _private_hosts_file() -> str:
    """The shell that puts a private /etc/hosts in place for the proxy alone: a bind mount in
    a mount namespace of its own (``unshare -m``, or ``-rm`` for a user without root). The
    proxy's getaddrinfo reads it as it reads /etc/hosts; the machine's own stays untouched."""
    for flags in ("-m", "-rm"):
        r = subprocess.run(
            ["unshare", flags, "sh", "-c", "mount --bind /dev/null /etc/hosts"],
            capture_output=True,
            check=False,
        )
        if r.returncode == 0:
            return flags
    pytest.skip("no mount namespace here (unshare -m and -rm refused)")


@pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare(1)")
@pytest.mark.parametrize("every", ["0.2", "0"])
def test_an_upstream_name_is_looked_up_again_while_serving(
    tmp_path: Path, every: str, upstream: Callable[..., Upstream]
) -> None:
    """A name whose address changes (a DNS record, a Kubernetes Service) is followed by new
    connections (it was resolved once at start), unless --resolve-every 0 asks for once. The
    lookup is the real getaddrinfo(3) reading a hosts file this test rewrites."""
    flags = _private_hosts_file()
    first = upstream(tagged(b"A"))
    try:
        upstream(tagged(b"B"), at=("127.0.0.2", first.port))  # the same port, another address
    except OSError as e:
        pytest.skip(f"127.0.0.2:{first.port} cannot be bound here: {e}")
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 upstream.fdkit.test\n")
    mount = f'mount --bind {shlex.quote(str(hosts))} /etc/hosts && exec "$0" "$@"'
    setup = shlex.join(["unshare", flags, "sh", "-c", mount])
    name = f"upstream.fdkit.test:{first.port}"
    args = ["127.0.0.1:0", name, "--resolve-every", every, "-v"]
    with fdkit_proxy(tmp_path, *args, setup=setup) as p:
        assert tag_through(p) == b"A"
        # Rewritten in place (the bind mount holds the inode), as an editor of /etc/hosts would.
        with open(hosts, "r+") as f:
            f.write("127.0.0.2 upstream.fdkit.test\n")
        if every == "0":
            time.sleep(1)
            assert tag_through(p) == b"A"
            assert not any("resolves to" in line for line in p.log()), p.log()
        else:
            line = p.wait_log("now resolves to")[0]
            assert line == (
                f"upstream upstream.fdkit.test:{first.port} now resolves to "
                f"127.0.0.2:{first.port} (was 127.0.0.1:{first.port}): new connections go there"
            )
            assert tag_through(p) == b"B"
        code, out = p.stop()
    assert code == 0
    assert "0 upstream failures" in out
    said = "once" if every == "0" else "again every 0.2 s"
    assert any(f"upstream name upstream.fdkit.test looked up {said}" in line for line in p.log())
