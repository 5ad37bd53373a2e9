"""`fdkit proxy` run as a user runs it, relaying between a client and an upstream: the
arguments it refuses, a thousand connections at once, half-closes passed on in each
direction, ``--record`` files (and the reader in docs/cli.md run on one), resets passed on as
resets rather than clean ends, and how it stops on SIGTERM and SIGINT with ``-v`` and ``-q``.

What matters is what each end sees: every byte, in order, and the way the other side ended
(EOF or reset), since a cut stream that ends cleanly looks like a whole one.

Every proxy process is started here and stopped by its pid in a ``finally``; upstreams are
threads (or an asyncio server) on 127.0.0.1 that stop with the test. The proxy runner and the
upstreams are in ``helpers/cli_proxy.py``.
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
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.cli_proxy import (  # noqa: F401  (the fixture upstream)
    FDKIT,
    LINGER_ZERO,
    MB,
    START,
    Proxy,
    Upstream,
    closed_port,
    echo,
    fdkit_proxy,
    read_until_end,
    recv_all,
    run,
    upstream_fixture,
)

DOCS_CLI = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


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
