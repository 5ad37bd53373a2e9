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
DOCS_CLI = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
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


@pytest.fixture
def upstream() -> Iterator[Callable[..., Upstream]]:
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
        (["127.0.0.1:0", "127.0.0.1:1", "--connect-timeout", ""], "--connect-timeout"),
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


RECORD_MAGIC = b"FDKREC1\n"
RECORD_HEADER = struct.Struct("<c3xIQQ")


def read_recording(path: Path) -> list[tuple[bytes, int, int, bytes]]:
    """The chunks of a recording, as docs/cli.md describes them: (direction, connection,
    nanoseconds since the epoch, bytes)."""
    data = path.read_bytes()
    assert data.startswith(RECORD_MAGIC), data[:16]
    at, chunks = len(RECORD_MAGIC), []
    while at < len(data):
        direction, length, conn, ns = RECORD_HEADER.unpack_from(data, at)
        at += RECORD_HEADER.size
        assert at + length <= len(data), "a cut chunk"
        chunks.append((direction, conn, ns, data[at : at + length]))
        at += length
    return chunks


def direction_of(chunks: list[tuple[bytes, int, int, bytes]], which: bytes) -> tuple[bytes, bool]:
    """The bytes going ``which`` (``b">"`` or ``b"<"``), and whether that direction ended."""
    mine = [c[3] for c in chunks if c[0] == which]
    assert b"" not in mine[:-1], "bytes after a direction's end"
    return b"".join(mine), bool(mine) and mine[-1] == b""


def test_record_files_hold_both_directions_with_their_times(
    tmp_path: Path, upstream: Callable[..., Upstream]
) -> None:
    def answer(conn: socket.socket) -> None:
        request = recv_all(conn)  # ends at the client's half-close
        conn.sendall(hashlib.sha256(request).digest() + os.urandom(2 * 1024 * 1024 + 12345))

    up = upstream(answer)
    rec = tmp_path / "rec"
    sent, received = [], []
    before = time.time_ns()
    with fdkit_proxy(tmp_path, "127.0.0.1:0", up.spec, "--record", str(rec)) as p:
        for _ in range(2):
            with p.connect() as c:
                sent.append(os.urandom(100_000))
                c.sendall(sent[-1])
                c.shutdown(socket.SHUT_WR)
                received.append(recv_all(c))
        p.wait_log(" eof", count=2)
        code, _ = p.stop()
    after = time.time_ns()
    assert code == 0
    assert received[0] != received[1]
    for n in (1, 2):
        chunks = read_recording(tmp_path / f"rec.{n}")
        assert direction_of(chunks, b">") == (sent[n - 1], True)
        assert direction_of(chunks, b"<") == (received[n - 1], True)
        assert {c[1] for c in chunks} == {n}
        times = [c[2] for c in chunks]
        assert times == sorted(times)
        assert before <= times[0]
        assert times[-1] <= after
        # The upstream answers only after the whole request: every > chunk comes first.
        kinds = [c[0] for c in chunks]
        assert kinds == sorted(kinds, key=lambda k: k == b"<"), kinds


@pytest.mark.source_tree
def test_the_script_in_the_docs_reads_a_real_recording(
    tmp_path: Path, upstream: Callable[..., Upstream]
) -> None:
    """docs/cli.md's reader, taken from the page itself, run on what the proxy recorded."""
    blocks = re.findall(r"^```python\n(.*?)^```$", DOCS_CLI.read_text(), flags=re.S | re.M)
    (script,) = [b for b in blocks if b.startswith("# examples/docs_proxy_record.py")]
    (tmp_path / "reader.py").write_text(script)

    def greet(conn: socket.socket) -> None:
        assert recv_all(conn) == b"hello upstream"
        conn.sendall(b"hello client")

    up = upstream(greet)
    with fdkit_proxy(tmp_path, "127.0.0.1:0", up.spec, "--record", str(tmp_path / "rec")) as p:
        with p.connect() as c:
            c.sendall(b"hello upstream")
            c.shutdown(socket.SHUT_WR)
            assert recv_all(c) == b"hello client"
        p.wait_log(" eof")
        p.stop()
    r = subprocess.run(
        [sys.executable, str(tmp_path / "reader.py"), str(tmp_path / "rec.1")],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    lines = [line.split(" ", 1)[1] for line in r.stdout.splitlines()]
    assert lines == [
        "conn 1 > 14 bytes b'hello upstream'",
        "conn 1 > end",
        "conn 1 < 12 bytes b'hello client'",
        "conn 1 < end",
    ], r.stdout


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


# ------------------------------------------------------------------------------- socat's addresses


def one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    """The one stderr line of a refused start (status 2, as for every usage error)."""
    assert (r.returncode, r.stdout) == (2, ""), (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("fdkit proxy: "), lines
    return lines[0]


@pytest.mark.parametrize(
    ("listen", "up", "message"),
    [
        ("TCP-L:0", "EXEC:cat", 'UPSTREAM "EXEC:cat": fdkit proxy does not support socat\'s EXEC:'),
        ("TCP-L:0", "SYSTEM:echo hi", "socat's SYSTEM: address"),
        ("TCP-L:0", "OPENSSL:example.com:443", "socat's OPENSSL: address"),
        ("TCP-L:0", "UDP:127.0.0.1:53", "socat's UDP: address"),
        ("TCP-L:0", "udp4-sendto:127.0.0.1:53", "socat's UDP4-SENDTO: address"),
        ("TCP-L:0", "STDIO", "socat's STDIO address"),
        ("TCP-L:0", "-", "socat's - address"),
        ("TCP-L:0", "FILE:/etc/hosts", "socat's FILE: address"),
        ("TCP-L:0", "/tmp/socket", "socat's GOPEN address (a path alone); a unix socket is "),
        ("OPENSSL-LISTEN:4443,cert=x.pem", "TCP:127.0.0.1:1", "socat's OPENSSL-LISTEN: address"),
        ("UDP-LISTEN:5353", "TCP:127.0.0.1:1", 'LISTEN "UDP-LISTEN:5353": fdkit proxy does not'),
        ("TCP:127.0.0.1:80", "TCP:127.0.0.1:1", "is socat's TCP: address, which connects"),
        ("TCP-L:0", "TCP-LISTEN:80", "is socat's TCP-LISTEN: address, which listens"),
        ("TCP-L:0,backlog=5", "TCP:127.0.0.1:1", "cannot honour socat's option backlog=5 on TCP-L"),
        ("TCP-L:0,fork=0", "TCP:127.0.0.1:1", "cannot honour socat's option fork=0"),
        ("TCP-L:0,ipv6only=1", "TCP:127.0.0.1:1", "option ipv6only=1"),
        ("TCP-L:0", "TCP:127.0.0.1:1,bind=127.0.0.2", "option bind=127.0.0.2 on TCP (it takes "),
        ("TCP-L:0", "TCP:127.0.0.1:1,fork", "cannot honour socat's option fork on TCP"),
        ("UNIX-LISTEN:/tmp/x.sock,mode=600", "TCP:127.0.0.1:1", "option mode=600 on UNIX-LISTEN"),
        ("TCP4-L:0,pf=ip6", "TCP:127.0.0.1:1", "pf=ip6 contradicts TCP4-L"),
        ("TCP-L:0", "TCP4:[::1]:80", "TCP4 takes an IPv4 address, not ::1"),
        ("TCP-L:0", "TCP6:127.0.0.1:80", "TCP6 takes an IPv6 address, not 127.0.0.1"),
        ("TCP-L:0", "TCP:127.0.0.1", "socat's TCP: address takes HOST:PORT"),
        ("TCP-LISTEN:99999", "TCP:127.0.0.1:1", "the port is not a number from 0 to 65535"),
        ("TCP-L:0", "TCP:127.0.0.1:nosuchservice", "neither a number from 0 to 65535 nor a TCP"),
        ("TCP-L:0,max-children=2", "TCP:127.0.0.1:1", "--max-connections and max-children="),
        ("TCP-L:0", "TCP:127.0.0.1:1,connect-timeout=x", 'connect-timeout= in "TCP:127.0.0.1:1,'),
    ],
)
def test_socat_addresses_fdkit_cannot_serve_are_refused_by_name(
    listen: str, up: str, message: str
) -> None:
    extra = ["--max-connections", "3"] if "max-children" in listen else []
    line = one_line_error(run(listen, up, *extra))
    assert message in line, line


def test_a_host_named_like_a_socat_type_is_still_a_host() -> None:
    """``proxy:3128`` is a host named proxy (socat's PROXY: takes three parameters)."""
    r = run("127.0.0.1:0", "proxy:3128", "--resolve-every", "0", timeout=60)
    assert "socat" not in r.stderr, r.stderr


def echo_through(p: Proxy, payload: bytes = b"socat habits") -> None:
    with p.connect() as c:
        c.sendall(payload)
        c.shutdown(socket.SHUT_WR)
        assert recv_all(c) == payload


@pytest.mark.parametrize(
    ("listen", "shown"),
    [
        ("TCP-LISTEN:0,fork,reuseaddr,bind=127.0.0.1", "127.0.0.1:"),
        ("tcp-l:0,bind=127.0.0.1,FORK,ReuseAddr=1,nodelay", "127.0.0.1:"),
        ("TCP4-LISTEN:0,bind=localhost,max-children=5", "127.0.0.1:"),
        ("TCP4-L:0", "0.0.0.0:"),
        ("TCP-L:0,pf=ip4", "0.0.0.0:"),
        ("UNIX-LISTEN:{tmp}/front.sock,fork,unlink-early,unlink-close", "unix:{tmp}/front.sock"),
        ("unix-l:{tmp}/front.sock", "unix:{tmp}/front.sock"),
        ("ABSTRACT-LISTEN:fdkit-test-{pid}", "unix:@fdkit-test-{pid}"),
    ],
)
def test_socat_listening_addresses_listen_where_socat_would(
    tmp_path: Path, listen: str, shown: str, upstream: Callable[..., Upstream]
) -> None:
    up = upstream(echo)
    fill = {"tmp": str(tmp_path), "pid": str(os.getpid())}
    with fdkit_proxy(tmp_path, listen.format(**fill), f"TCP:{up.spec}") as p:
        assert p.listen.startswith(shown.format(**fill)), p.listen
        if p.listen.startswith("0.0.0.0:"):
            p.listen = p.listen.replace("0.0.0.0", "127.0.0.1")
        if p.listen.startswith("unix:@"):
            with socket.socket(socket.AF_UNIX) as c:
                c.connect("\0" + p.listen[len("unix:@") :])
                c.sendall(b"x")
                assert c.recv(1) == b"x"
        else:
            echo_through(p)
        assert p.stop()[0] == 0


def test_socat_tcp6_listen_is_ipv6(
    tmp_path: Path, ipv6: None, upstream: Callable[..., Upstream]
) -> None:
    up = upstream(echo)
    with fdkit_proxy(tmp_path, "TCP6-LISTEN:0,bind=[::1]", f"tcp-connect:{up.spec}") as p:
        assert p.listen.startswith("[::1]:"), p.listen
        with socket.create_connection(("::1", int(p.listen.rpartition(":")[2])), 10) as c:
            c.sendall(b"v6")
            assert c.recv(2) == b"v6"
        p.stop()


@pytest.mark.parametrize(
    "spelled",
    [
        "TCP:127.0.0.1:{port}",
        "tcp-connect:127.0.0.1:{port},connect-timeout=5",
        "TCP4:localhost:{port},nodelay",
        "TCP:[127.0.0.1]:{port},pf=ip4",
        "UNIX-CONNECT:{path}",
        "UNIX:{path}",
        "unix-client:{path},connect-timeout=2.5",
    ],
)
def test_socat_upstream_addresses_connect_where_socat_would(
    tmp_path: Path, spelled: str, upstream: Callable[..., Upstream]
) -> None:
    unix = "UNIX" in spelled.upper()
    up = upstream(echo, unix=tmp_path / "back.sock" if unix else None)
    target = spelled.format(port=up.port, path=up.unix)
    with fdkit_proxy(tmp_path, "127.0.0.1:0", target, "-v") as p:
        echo_through(p)
        code, _ = p.stop()
    assert code == 0
    shown = f"unix:{up.unix}" if unix else f"127.0.0.1:{up.port}"
    if not target.lower().startswith("unix:"):  # socat's UNIX:PATH is fdkit's unix:PATH too
        assert f"{target} is {shown}" in "\n".join(p.log()), p.log()


def test_a_tcp4_name_is_looked_up_once_in_its_family(
    tmp_path: Path, upstream: Callable[..., Upstream]
) -> None:
    up = upstream(echo)
    with fdkit_proxy(tmp_path, "127.0.0.1:0", f"TCP4:localhost:{up.port}", "-v") as p:
        echo_through(p)
        p.stop()
    log = "\n".join(p.log())
    assert "upstream name localhost looked up once, at start, as 127.0.0.1:" in log, log


def test_help_shows_the_socat_forms() -> None:
    r = subprocess.run([FDKIT, "proxy", "--help"], capture_output=True, text=True, check=False)
    text = " ".join(r.stdout.split())
    assert "TCP-LISTEN:PORT[,fork,reuseaddr,bind=ADDR]" in text
    assert "UNIX-LISTEN:PATH (UNIX-L)" in text
    assert "TCP:HOST:PORT" in text
    assert "fork and reuseaddr are what the proxy always does" in text
    assert "own listening address is refused" in text


# ------------------------------------------------------------------------------- its own address


def own_address() -> str | None:
    """An address of this host that is not loopback (the one a route out would use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: connect(2) only picks a route
        except OSError:
            return None
        addr: str = s.getsockname()[0]
    return None if addr.startswith("127.") or addr == "0.0.0.0" else addr


LOOP = "is this proxy's own listening address"


@pytest.mark.parametrize(
    ("listen", "up", "why"),
    [
        ("{port}", "127.0.0.1:{port}", "127.0.0.1:{port} reaches the listener on 0.0.0.0:{port}"),
        ("0.0.0.0:{port}", "localhost:{port}", "localhost resolves to "),
        ("0.0.0.0:{port}", "127.0.0.2:{port}", "127.0.0.2:{port} reaches the listener on 0.0.0.0"),
        ("127.0.0.1:{port}", "127.0.0.1:{port}", "reaches the listener on 127.0.0.1:{port}"),
        ("127.0.0.1:{port}", "0.0.0.0:{port}", "a connect to 0.0.0.0 goes to 127.0.0.1"),
        ("TCP-LISTEN:{port},fork,reuseaddr", "TCP:localhost:{port}", "localhost resolves to"),
        ("TCP4-L:{port},bind=127.0.0.1", "TCP4:127.0.0.1:{port}", "reaches the listener on 127."),
        ("0.0.0.0:{port}", "[::ffff:127.0.0.1]:{port}", "a connect to ::ffff:127.0.0.1 goes to"),
        ("0.0.0.0:{port}", "{own}:{port}", "{own}:{port} reaches the listener on 0.0.0.0:{port}"),
        ("[::]:{port}", "127.0.0.1:{port}", "reaches the listener on [::]:{port}"),
        ("[::]:{port}", "[::1]:{port}", "[::1]:{port} reaches the listener on [::]:{port}"),
        ("unix:{tmp}/p.sock", "unix:{tmp}/p.sock", "the same socket file"),
        ("UNIX-LISTEN:{tmp}/p.sock,fork", "UNIX-CONNECT:{tmp}/link.sock", "the same socket file"),
        ("unix:@fdkit-loop-{pid}", "ABSTRACT-CONNECT:fdkit-loop-{pid}", "abstract socket name"),
    ],
)
def test_an_upstream_that_is_its_own_listening_address_is_refused(
    tmp_path: Path, listen: str, up: str, why: str
) -> None:
    """One curl through ``fdkit proxy 8080 127.0.0.1:8080`` opened thousands of connections,
    each to the proxy itself: such an upstream is refused before the first is accepted."""
    fill = {"port": free_port(), "tmp": str(tmp_path), "pid": str(os.getpid())}
    if "{own}" in up:
        own = own_address()
        if own is None:
            pytest.skip("this host has no address but loopback")
        fill["own"] = own
    if "[::" in listen:
        if not socket.has_ipv6 or not _ipv6_any_bindable():
            pytest.skip("no IPv6 here")
        if "127.0.0.1" in up and Path("/proc/sys/net/ipv6/bindv6only").read_text().strip() == "1":
            pytest.skip("[::] takes IPv6 only here (net.ipv6.bindv6only = 1)")
    (tmp_path / "link.sock").symlink_to(tmp_path / "p.sock")
    t0 = time.monotonic()
    line = one_line_error(run(listen.format(**fill), up.format(**fill)))
    assert time.monotonic() - t0 < 10
    assert f'UPSTREAM "{up.format(**fill)}" {LOOP}: ' in line, line
    assert why.format(**fill) in line, line
    assert line.endswith("so every connection would open another through the proxy, without end")
    assert not (tmp_path / "p.sock").exists()  # the listener was closed and its file removed
    if "port" in listen:
        with socket.create_server(("0.0.0.0", fill["port"])):
            pass  # and the port is free again


def _ipv6_any_bindable() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::", 0))
    except OSError:
        return False
    return True


def test_port_zero_is_checked_once_the_port_is_known(tmp_path: Path) -> None:
    """A listener on port 0 gets its port from the kernel: the upstream is compared with the
    real port. A loop on port 0 cannot be typed, so the check must let it start."""
    with fdkit_proxy(tmp_path, "127.0.0.1:0", f"127.0.0.1:{closed_port()}") as p:
        assert p.stop()[0] == 0


@pytest.mark.parametrize(
    ("listen", "up"),
    [
        ("127.0.0.1:{port}", "127.0.0.2:{port}"),  # another address on the same port
        ("0.0.0.0:{port}", "[::1]:{port}"),  # an IPv4 listener is not reached over IPv6
        ("127.0.0.1:{port}", "127.0.0.1:{other}"),
        ("unix:{tmp}/a.sock", "unix:{tmp}/b.sock"),
        ("unix:@fdkit-a-{pid}", "unix:@fdkit-b-{pid}"),
    ],
)
def test_an_upstream_beside_its_own_address_is_not_a_loop(
    tmp_path: Path, listen: str, up: str
) -> None:
    fill = {"port": free_port(), "other": closed_port(), "tmp": tmp_path, "pid": os.getpid()}
    with fdkit_proxy(tmp_path, listen.format(**fill), up.format(**fill)) as p:
        assert p.stop()[0] == 0


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
