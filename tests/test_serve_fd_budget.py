"""`fdkit serve` under a small ``RLIMIT_NOFILE``: the open-file cache must fit in what the
limit leaves after the connections, so that many distinct files never exhaust the fd table.

Every server here runs with ``RLIMIT_NOFILE`` soft and hard 1024 (what ``ulimit -n 1024``
sets), set in its own process before it execs ``fdkit serve``. Each test asks for 1,100
distinct files over kept-alive connections (more than the limit), then a file created
afterwards, then holds hundreds of connections at once: every answer must be 200 with the
file's bytes, on both engines, and the server must never hold more fds than the limit minus
a reserve.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.serve import ENGINES, Serve, Wire, _engine_args, _tree, fdkit_serve

pytestmark = pytest.mark.timeout(120)

NOFILE = 1024
FILES = 1100
#: Kept-alive connections the distinct files are asked over (in turn).
CONNS = 4
#: Connections held open at once at the end.
CONCURRENT = 500
#: How long each phase may take.
PHASE = 60.0


def body_of(i: int) -> bytes:
    return f"file {i:04d} ".encode() * (1 + i % 7) + b"\n"


def limited(nofile: int) -> tuple[str, ...]:
    """A command prefix that sets ``RLIMIT_NOFILE`` to ``nofile`` (soft and hard) in its own
    process and then execs the rest of the command line (as ``preexec_fn`` would)."""
    code = (
        "import os, resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({nofile}, {nofile}))\n"
        "os.execvp(sys.argv[1], sys.argv[1:])\n"
    )
    return (sys.executable, "-c", code)


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fdbudget") / "www"
    root.mkdir()
    for i in range(FILES):
        (root / f"f{i:04d}.txt").write_bytes(body_of(i))
    return root


def fds_of(pids: list[int]) -> dict[int, int]:
    """How many fds each process has open now."""
    out = {}
    for pid in pids:
        with contextlib.suppress(FileNotFoundError):
            out[pid] = len(os.listdir(f"/proc/{pid}/fd"))
    return out


def servers(srv: Serve) -> list[int]:
    """The processes that serve: the workers, or the process itself with one worker."""
    return _tree(srv.proc.pid) if srv.workers > 1 else [srv.proc.pid]


def check_limit(srv: Serve) -> None:
    for pid in servers(srv):
        limits = Path(f"/proc/{pid}/limits").read_text()
        line = next(x for x in limits.splitlines() if x.startswith("Max open files"))
        assert line.split()[3:5] == [str(NOFILE), str(NOFILE)], line


class Endpoint:
    """A server known by its address only."""

    def __init__(self, addr: tuple[str, int]) -> None:
        self.addr = addr

    def raw(self, timeout: float = 5) -> socket.socket:
        return socket.create_connection(self.addr, timeout=timeout)


def ask_all(
    srv: Serve | Endpoint,
    targets: list[tuple[str, bytes]],
    conns: int = CONNS,
    depth: int = 1,
    each: bool = False,
) -> None:
    """GETs the targets over ``conns`` kept-alive connections, ``depth`` pipelined requests at
    a time on each in turn: the targets are shared out, or with ``each`` every connection
    asks for all of them. Each answer must be 200 with the expected body, and the connection
    must stay open."""
    socks = [srv.raw(10) for _ in range(conns)]
    try:
        wires = [Wire(s) for s in socks]
        queues = [targets if each else targets[k::conns] for k in range(conns)]
        deadline = time.monotonic() + PHASE
        for start in range(0, max(len(q) for q in queues), depth):
            for s, w, q in zip(socks, wires, queues, strict=True):
                batch = q[start : start + depth]
                s.sendall(
                    b"".join(
                        f"GET {t} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode() for t, _ in batch
                    )
                )
                for target, want in batch:
                    r = w.response()
                    assert (r.status, r.body) == (200, want), (
                        f"{target}: {r.status} {r.reason} {r.body[:80]!r}"
                    )
                    assert "close" not in r.headers.get("connection", ""), (target, r.headers)
            assert time.monotonic() < deadline, f"not done in {PHASE:g} s"
    finally:
        for s in socks:
            s.close()


async def _concurrent(srv: Serve, n: int, files: int) -> list[str]:
    return await _concurrent_at(srv.addr, n, files)


async def _concurrent_at(addr: tuple[str, int], n: int, files: int) -> list[str]:
    """Opens ``n`` connections and holds them all; then each asks for a distinct file.
    Returns what went wrong (empty when every answer is 200 with the right body)."""
    opened: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    wrong: list[str] = []
    try:
        for _ in range(n):
            opened.append(await asyncio.open_connection(*addr))

        async def one(i: int, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            k = (i * 7 + 3) % files
            w.write(f"GET /f{k:04d}.txt HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
            try:
                head = await r.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError) as e:
                wrong.append(f"connection {i}: {e!r}")
                return
            status = int(head.split(b" ", 2)[1])
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            body = await r.readexactly(length)
            if (status, body) != (200, body_of(k)):
                wrong.append(f"connection {i} (/f{k:04d}.txt): {status} {body[:60]!r}")

        await asyncio.gather(*(one(i, r, w) for i, (r, w) in enumerate(opened)))
    finally:
        for _, w in opened:
            w.close()
        for _, w in opened:
            with contextlib.suppress(ConnectionError):
                await w.wait_closed()
    return wrong


@contextlib.contextmanager
def limited_serve(root: Path, *args: str) -> Iterator[Serve]:
    with fdkit_serve(root, *args, prefix=limited(NOFILE)) as s:
        check_limit(s)
        yield s


def run_the_load(srv: Serve, root: Path, fresh_name: str) -> None:
    # 1,100 distinct files, more than RLIMIT_NOFILE: all 200 with their bytes. With several
    # workers, every connection asks for every file (pipelined), so that each worker that
    # gets a connection (the kernel hashes them) sees them all.
    everything = [(f"/f{i:04d}.txt", body_of(i)) for i in range(FILES)]
    if srv.workers > 1:
        ask_all(srv, everything, conns=12, depth=16, each=True)
    else:
        ask_all(srv, everything)
    # The server never came close to the limit: a reserve is left for accept.
    for pid, n in fds_of(servers(srv)).items():
        assert n <= NOFILE - 16, f"process {pid} holds {n} fds of {NOFILE}"
    # A file created now, never asked for before: 200 on a new connection.
    fresh = root / fresh_name
    fresh.write_bytes(b"fresh " + fresh_name.encode() + b"\n")
    ask_all(srv, [(f"/{fresh_name}", fresh.read_bytes())], conns=1)
    # The first files again (long evicted) and the last (maybe cached): still right.
    ask_all(srv, [(f"/f{i:04d}.txt", body_of(i)) for i in (*range(50), *range(1050, 1100))])
    # Hundreds of connections at once, each asking for a distinct file: all accepted and
    # answered.
    wrong = asyncio.run(asyncio.wait_for(_concurrent(srv, CONCURRENT, FILES), PHASE))
    assert not wrong, f"{len(wrong)} of {CONCURRENT} wrong: {wrong[:5]}"
    for pid, n in fds_of(servers(srv)).items():
        assert n <= NOFILE - 16, f"process {pid} holds {n} fds of {NOFILE}"
    assert srv.alive(), srv.output()[-2000:]


@pytest.mark.parametrize("engine", list(ENGINES))
def test_more_distinct_files_than_rlimit_nofile(many: Path, engine: str) -> None:
    with limited_serve(many, *_engine_args(engine), "--workers", "1") as s:
        run_the_load(s, many, f"fresh-{engine}.txt")
    out = s.output()
    assert "accept:" not in out, out[-2000:]


def test_each_worker_fits_its_own_limit(many: Path) -> None:
    """Two SO_REUSEPORT workers: each process has its own fd table and limit, and fits the
    cache into it."""
    with limited_serve(many, "--workers", "2") as s:
        assert s.workers == 2
        run_the_load(s, many, "fresh-workers.txt")


def test_a_small_limit_with_few_connections_allowed(many: Path) -> None:
    """A connection cap below what the limit allows leaves the rest to the cache; the
    distinct files still all come back right (the cache evicts as it must)."""
    with limited_serve(many, "--engine", "epoll", "--max-connections", "600") as s:
        run_the_load(s, many, "fresh-capped.txt")


# ------------------------------------------------------------ a host that takes every fd

#: The server as a library in a process that also takes fds: RLIMIT_NOFILE 1024, then
#: ``fdkit.serve`` in the main thread while a thread obeys ``eat`` (open /dev/null until
#: EMFILE) and ``free`` (close them) on stdin.
HOST = """
import errno, os, resource, sys, threading
resource.setrlimit(resource.RLIMIT_NOFILE, ({nofile}, {nofile}))
import fdkit
held = []
def control():
    for line in sys.stdin:
        if line.strip() == "eat":
            while True:
                try:
                    held.append(os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC))
                except OSError as e:
                    assert e.errno == errno.EMFILE, e
                    break
            print("ate", len(held), flush=True)
        elif line.strip() == "free":
            while held:
                os.close(held.pop())
            print("freed", flush=True)
threading.Thread(target=control, daemon=True).start()
fdkit.serve(sys.argv[1], port=0, engine=sys.argv[2],
            on_listen=lambda h, p: print("listening", h, p, flush=True))
"""


class Host:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        assert proc.stdout is not None
        assert proc.stdin is not None
        self.stdout, self.stdin = proc.stdout, proc.stdin

    def line(self) -> str:
        ready, _, _ = select.select([self.stdout], [], [], 15)
        assert ready, "the host process said nothing for 15 s"
        out = self.stdout.readline()
        assert out, f"the host process ended: {self.proc.poll()}"
        return out.strip()

    def say(self, cmd: str) -> str:
        self.stdin.write(cmd + "\n")
        self.stdin.flush()
        return self.line()

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _server_inode(s: socket.socket) -> str | None:
    """The inode of the server's end of the connection ``s`` (from ``/proc/net/tcp*``)."""
    mine, theirs = s.getsockname()[1], s.getpeername()[1]
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            local, remote = int(f[1].rsplit(":", 1)[1], 16), int(f[2].rsplit(":", 1)[1], 16)
            if (local, remote) == (theirs, mine) and f[9] != "0":
                return f[9]
    return None


def close_and_wait_released(s: socket.socket, pid: int, timeout: float = 10.0) -> None:
    """Close ``s`` and wait until process ``pid`` no longer holds the server's end of it.

    The server closes a connection lingeringly (FIN first, its fd once the client's FIN
    arrives), so the fd comes free some time after the client's ``close()``: a host that
    takes every free fd before then would miss it and get it later, out of the test's order.
    """
    inode = _server_inode(s)
    s.close()
    if inode is None:
        return
    want = f"socket:[{inode}]"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        held = False
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == want:
                    held = True
                    break
        if not held:
            return
        time.sleep(0.005)
    raise AssertionError(f"the server still holds {want} {timeout} s after the client closed")


def one_get(addr: tuple[str, int], target: str, timeout: float = 5.0) -> tuple[int, bytes]:
    with socket.create_connection(addr, timeout=timeout) as s:
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        r = Wire(s).response()
        return r.status, r.body


@pytest.mark.serial
@pytest.mark.parametrize("engine", list(ENGINES))
def test_a_host_that_takes_every_free_fd(many: Path, tmp_path: Path, engine: str) -> None:
    """The host program takes every fd the server left free: the server gives cached fds
    back to accept and to open new files; once it has none left it waits (without spinning)
    and serves again as soon as fds are free."""
    _engine_args(engine)
    err = tmp_path / "host.err"
    with open(err, "wb") as e:
        proc = subprocess.Popen(
            [sys.executable, "-c", HOST.format(nofile=NOFILE), str(many), engine],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=e,
            text=True,
        )
    host = Host(proc)
    try:
        words = host.line().split()
        assert words[0] == "listening", words
        addr = (words[1], int(words[2]))
        srv = Endpoint(addr)
        # Fill the cache, keep one connection, then the host takes every free fd.
        ask_all(srv, [(f"/f{i:04d}.txt", body_of(i)) for i in range(300)], conns=1)
        with srv.raw(10) as kept:
            w = Wire(kept)
            ate = int(host.say("eat").split()[1])
            assert ate > 100, ate
            # New files on the kept connection: the cache closes idle files to open them.
            for i in range(300, 600):
                kept.sendall(f"GET /f{i:04d}.txt HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
                r = w.response()
                assert (r.status, r.body) == (200, body_of(i)), (i, r)
            # Again no free fd (the host takes what that freed), and no connection closes: a
            # new connection is accepted only because the cache gives an fd back.
            host.say("eat")
            assert one_get(addr, "/f0599.txt", timeout=3) == (200, body_of(599))
            close_and_wait_released(kept, proc.pid)
        # New connections while the host keeps taking what is freed: accepted (the cache
        # gives fds back) until the cache has nothing idle left.
        pending = None
        for i in range(600, 1100):
            host.say("eat")
            s = socket.create_connection(addr, timeout=10)
            s.sendall(f"GET /f{i:04d}.txt HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
            s.settimeout(5)
            try:
                r = Wire(s).response()
            except TimeoutError:
                pending = s  # not accepted: no fd anywhere
                break
            if r.status == 503:
                # No fd for the file; the server closes the connection (one fd back).
                while s.recv(4096):
                    pass
            # Every fd the server frees is free before the host's next bite, so that no fd
            # comes back later, behind the pending connection's back.
            close_and_wait_released(s, proc.pid)
            assert r.status in (200, 503), r
            if r.status == 503:
                host.say("eat")
                pending = socket.create_connection(addr, timeout=10)
                pending.sendall(b"GET /f0001.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
                break
            assert r.body == body_of(i)
        assert pending is not None, "the cache never ran dry"
        with pending:
            # No fd anywhere: the connection waits in the backlog, and the server does not
            # spin meanwhile.
            before = host.cpu()
            pending.settimeout(1.0)
            with pytest.raises(TimeoutError):
                pending.recv(1)
            spent = host.cpu() - before
            assert spent < 0.3, f"{spent:.2f} s of CPU in 1 s while out of fds"
            # Fds come back: the waiting client is served within a few ticks.
            assert host.say("free") == "freed"
            pending.settimeout(5)
            r = Wire(pending).response()
            assert r.status == 200, r
        # And everything works again.
        for i in (0, 1, 700, 1099):
            assert one_get(addr, f"/f{i:04d}.txt") == (200, body_of(i))
        wrong = asyncio.run(asyncio.wait_for(_concurrent_at(addr, 200, FILES), PHASE))
        assert not wrong, wrong[:5]
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        host.stdin.close()
        host.stdout.close()
    log = err.read_text()
    assert "Traceback" not in log, log[-2000:]
    assert "panicked" not in log, log[-2000:]
    assert log.count("accept:") <= 2, log[-2000:]
