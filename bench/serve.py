"""Static file serving: ``fdkit serve`` against nginx, h2o, a C floor and asyncio, and the
Python ``Ring`` hello server against an asyncio Protocol hello server, under wrk.

The figure that ranks the servers is the **server's CPU time per request**: ``utime + stime``
of the server process and every process under it (nginx's master and worker; ``fdkit serve``'s
workers), read from ``/proc/PID/stat`` (in ns steps from ``/proc/PID/task/*/schedstat`` when
the two agree, see :func:`._endpoints.cpu_between`) before wrk starts and after it exits,
divided by the requests wrk completed. Requests per second and wrk's p99 latency are reported
too. On this kind of machine wrk saturates before the good servers do, so requests per second
alone cannot rank them; a server's idle time is not used (io_uring's waiting shows as iowait).

Contenders, all started once, serving the same directory, measured in alternating rounds:

* ``fdkit serve DIR --engine uring --workers 1 --quiet`` and the same with ``--engine epoll``;
* nginx (Debian package): a config generated in a temporary directory, 1 worker process,
  ``sendfile on``, ``open_file_cache max=1000``, ``access_log off``, ``daemon off``,
  ``keepalive_requests`` high enough that wrk's connections are never recycled, listening on a
  free loopback port, pid and logs in the temporary directory, run as the current user;
* h2o (Debian package, 2.2.5), the server people pick when nginx is not fast enough: a config
  generated the same way, ``num-threads: 1``, ``file.send-compressed: OFF``, no access log,
  ``user: root`` when run as root (h2o refuses root without it);
* the floor, on the 6 B file only: ``bench/c/epoll_hello.c`` (the aio bench's C epoll server,
  run by :mod:`bench.child.aio_servers` ``floor``), which answers every request with one fixed
  6-byte reply without parsing it: the least CPU anything that reads requests can spend;
* :mod:`bench.child.asyncio_servers` ``static``: an asyncio Protocol keep-alive server with an
  open-file cache that writes the head with the transport and sends the body with ``os.sendfile`` on
  the socket (``loop.sendfile`` for what does not fit the socket buffer at once);
* ``examples/hello_server.py`` (the ``Ring`` hello server) against
  :mod:`bench.child.asyncio_servers` ``hello``, an asyncio Protocol server that answers the
  same bytes the same way (count the request terminators, one write per batch).

Files: 6 B (``hallo\\n``), 4 KiB, 1 MiB. wrk (Debian package) runs with one thread, 64 and
256 keep-alive connections, ``--latency``; the servers are pinned to CPU 0 and wrk to CPU 1
(when there are two CPUs).

Two workers, on the 4 KiB file (headline connection count only): ``fdkit serve --workers 2``
(io_uring) against nginx with ``worker_processes 2`` (the 4 KiB config otherwise), nobody
pinned: both servers' workers and wrk's one thread share both CPUs as the kernel schedules
them, three busy threads on two cores, so the load gets about a third of the machine's time.
The figure is the same (the server tree's CPU per request), so what wrk takes does not enter
the ratio.

wrk, nginx and h2o are Debian packages this bench never installs (a library's command does not
change the system): ``make bench-tools`` does, and ``make bench`` and ``make demo`` run it.
When one is missing, the rows that need it are skipped, named in a note that gives the command
that installs it, and listed as skipped under the table (the JSON leaves them out, as it always
has for rows that cannot run here); so are the floor's rows when gcc cannot build it. Every
server's answer is checked (status and body) before it is measured (the floor's on the 6 B file
only), and wrk's non-2xx count and socket errors must be zero.

Modes: full (64 and 256 connections, 5 rounds of 2 s after a 1 s warm-up round), ``--quick``
(64 connections, the headline contenders only, one 1 s round), tiny (``FDKIT_BENCH_TINY``:
a small Python load generator instead of wrk, a few hundred requests).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench._common import Result, alternate, compare, load_c, median, note, pick, skip, tiny
from bench._endpoints import MiB, cpu_between, process_tree, read_cpu
from bench.child import script

BENCH = "serve"
GOAL_SMALL = 1.25  # = 1 / 0.8: fdkit serve at most 0.8x nginx's CPU per request, 6 B and 4 KiB
GOAL_1M = 1.0  # no more than nginx for 1 MiB
GOAL_EPOLL = 1.0  # the forced-epoll mode: no more than nginx (4 KiB)
GOAL_HELLO = 1.0  # the Ring hello server: less CPU per request than asyncio
GOAL_H2O_SMALL = 1.25  # fdkit serve at most 0.8x h2o's CPU per request, 6 B and 4 KiB
GOAL_H2O_1M = 1.0  # no more than h2o for 1 MiB
GOAL_FLOOR = 0.9  # at most 1/0.9 of the C fixed-reply server's CPU per request (6 B)
GOAL_2W = 1.3  # two workers each, 4 KiB: at most 1/1.3 of nginx's CPU per request
START_TIMEOUT = 15.0
STOP_TIMEOUT = 5.0
SETTLE = 0.05  # seconds after wrk exits before the CPU is read (in-flight work finishes)

CPU_UNIT = "us/req"
RATE_UNIT = "req/s"
LATENCY_UNIT = "ms p99"

HELLO = b"hallo\n"
FILES = {"6b": ("hallo.txt", 6), "4k": ("4k.bin", 4096), "1m": ("1m.bin", MiB)}
HELLO_RESPONSE = (
    b"HTTP/1.1 200 OK\r\n"
    b"Server: fdkit-ring\r\n"
    b"Content-Type: text/plain\r\n"
    b"Content-Length: 6\r\n"
    b"Connection: keep-alive\r\n"
    b"\r\n"
    b"hallo\n"
)

# which nginx config each file size is measured against (see run)
NGINX_CONFIG = {"6b": "nginx_nopush", "4k": "nginx_nopush", "1m": "nginx"}
FLOOR = "floor"  # the C fixed-reply server: measured on the 6 B file only
FLOOR_SOURCE = "epoll_hello"  # bench/c/epoll_hello.c
FLOOR_SIZE = "6b"
TWO_WORKERS_SIZE = "4k"  # the two-worker case: fdkit_2w against nginx_2w

LABELS = {
    "fdkit": "fdkit serve (io_uring)",
    "epoll": "fdkit serve --engine epoll",
    "nginx": "nginx (1 worker, sendfile, open_file_cache)",
    "nginx_nopush": "nginx (1 worker, sendfile, open_file_cache, tcp_nopush)",
    "asyncio": "asyncio static server (Protocol, os.sendfile)",
    "h2o": "h2o (1 thread, file.send-compressed OFF, no access log)",
    FLOOR: f"C epoll server, fixed reply (bench/c/{FLOOR_SOURCE}.c)",
    "fdkit_2w": "fdkit serve --workers 2 (io_uring)",
    "nginx_2w": "nginx (2 workers, sendfile, open_file_cache, tcp_nopush)",
    "ring_hello": "Ring hello server (examples/hello_server.py)",
    "asyncio_hello": "asyncio Protocol hello server",
}


# --- tools ---------------------------------------------------------------------------------


def _which(name: str) -> str | None:
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin:/usr/local/sbin"
    return shutil.which(name, path=path)


#: The Debian package that provides each tool this bench runs (``make bench-tools`` installs
#: them; the package ``nginx`` rather than ``nginx-light``, which Debian 12 keeps only as a
#: transitional name and Debian 13 no longer has).
PACKAGES = {"wrk": "wrk", "nginx": "nginx", "h2o": "h2o"}


def install_command(name: str) -> str:
    """The command that installs tool ``name`` on a Debian system, for the note."""
    sudo = "" if os.geteuid() == 0 else "sudo "
    return f"{sudo}apt-get install {PACKAGES[name]}"


def find_tool(name: str, ids: Sequence[str]) -> str | None:
    """The path of tool ``name``; when it is missing, ``None`` after recording ``ids`` as
    skipped with a note naming the tool and the command that installs it.

    Nothing is ever installed from here: a library's command does not change the system's
    packages. The project's ``make bench-tools`` does it (``make bench`` and ``make demo``
    depend on it)."""
    found = _which(name)
    if found is None:
        skip(BENCH, ids, f"{name} is not installed; `{install_command(name)}` "
                         "(or `make bench-tools` in a source tree) adds these rows")  # fmt: skip
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _pin(cpu: int | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` pinning the child to ``cpu`` (None on a one-CPU machine, or for
    ``cpu=None``: the child runs where the kernel puts it)."""
    if cpu is None or (os.cpu_count() or 1) < 2 or not hasattr(os, "sched_setaffinity"):
        return None

    def pin() -> None:
        os.sched_setaffinity(0, {cpu})

    return pin


def tree_cpu(pids: Sequence[int]) -> Callable[[], float]:
    """A reader of the CPU seconds ``pids`` use from now on (summed, each process read the
    two ways :func:`._endpoints.cpu_between` reconciles)."""
    before = {pid: read_cpu(pid) for pid in pids}

    def since() -> float:
        return sum(cpu_between(before[pid], read_cpu(pid)) for pid in pids)

    return since


# --- servers -------------------------------------------------------------------------------


class Server:
    """A server process on a loopback port, pinned to ``cpu`` (CPU 0; None: not pinned), in
    ``env`` (this process's environment when None); stopped by pid."""

    def __init__(self, key: str, argv: Sequence[str], port: int, cwd: str | None = None,
                 name: str | None = None, bench: str = BENCH,
                 env: Mapping[str, str] | None = None, cpu: int | None = 0) -> None:  # fmt: skip
        self.key = key
        self.name = LABELS[key] if name is None else name
        self.bench = bench
        self.port = port
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop)
        try:
            self.proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=self._log,
                cwd=cwd,
                env=env,
                preexec_fn=_pin(cpu),
            )
        except BaseException:
            self._log.close()
            raise

    def output(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace").strip()

    def wait_ready(self, target: str, expect: bytes) -> None:
        """Waits until ``GET target`` answers 200 with ``expect`` (the check of the server)."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with status {self.proc.returncode}: {self.output()}"
                )
            try:
                status, body = http_get(self.port, target)
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{self.name} did not answer on port {self.port} within "
                        f"{START_TIMEOUT:g} s: {self.output()}"
                    ) from None
                time.sleep(0.02)
                continue
            if status != 200 or body != expect:
                raise RuntimeError(
                    f"{self.name}: GET {target} answered {status} with {len(body)} bytes "
                    f"(expected 200 with {len(expect)})"
                )
            return

    def pids(self) -> list[int]:
        return process_tree(self.proc.pid)

    def stop(self) -> None:
        """SIGTERM (SIGKILL after 5 s, with a note), by pid."""
        try:
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.proc.pid, signal.SIGTERM)
                try:
                    status = self.proc.wait(STOP_TIMEOUT)
                    if status != 0 and not self.key.startswith(("nginx", "h2o")):
                        note(f"{self.bench}: {self.name} exited with status {status} on SIGTERM")
                except subprocess.TimeoutExpired:
                    note(
                        f"{self.bench}: {self.name} ignored SIGTERM for {STOP_TIMEOUT:g} s; killed"
                    )
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(10)
        finally:
            self._log.close()


def http_get(port: int, target: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """One ``GET`` on a fresh connection: ``(status, body)`` (Content-Length framed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
        reader = _Reader(s)
        status, length = reader.head()
        return status, reader.exactly(length)


class _Reader:
    """Reads HTTP/1.1 responses (Content-Length framed) from a blocking socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()

    def _more(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the server closed the connection mid-response")
        self.buf += chunk

    def head(self) -> tuple[int, int]:
        while (i := self.buf.find(b"\r\n\r\n")) < 0:
            self._more()
        lines = bytes(self.buf[:i]).split(b"\r\n")
        del self.buf[: i + 4]
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v)
        return status, length

    def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._more()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out


def _nginx_conf(tmp: Path, root: Path, port: int, nopush: bool = False, workers: int = 1) -> Path:
    user = ""
    if os.geteuid() == 0:
        import grp
        import pwd

        user = f"user {pwd.getpwuid(os.getuid()).pw_name} {grp.getgrgid(os.getgid()).gr_name};"
    temp = "\n".join(
        f"    {kind}_temp_path {tmp / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    conf = tmp / "nginx.conf"
    conf.write_text(f"""\
{user}
worker_processes {workers};
daemon off;
pid {tmp / "nginx.pid"};
error_log {tmp / "error.log"} warn;
events {{
    worker_connections 4096;
}}
http {{
    access_log off;
    sendfile on;
    tcp_nopush {"on" if nopush else "off"};
    tcp_nodelay on;
    open_file_cache max=1000 inactive=60s;
    open_file_cache_valid 60s;
    keepalive_timeout 65;
    keepalive_requests 100000000;
    types {{
        text/plain txt;
        text/html html;
        application/octet-stream bin;
    }}
    default_type application/octet-stream;
{temp}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        root {root};
    }}
}}
""")
    return conf


def _h2o_conf(tmp: Path, root: Path, port: int) -> Path:
    """h2o's config: one thread, files sent as they are (no pre-compressed variants looked
    up), no access log (none is configured), pid and error log in ``tmp``. h2o refuses to run
    as root unless told which user to be: root then, as nginx runs as the current user."""
    user = "user: root\n" if os.geteuid() == 0 else ""
    conf = tmp / "h2o.conf"
    conf.write_text(f"""\
{user}num-threads: 1
pid-file: {tmp / "h2o.pid"}
error-log: {tmp / "error.log"}
file.send-compressed: OFF
listen:
  host: 127.0.0.1
  port: {port}
hosts:
  default:
    paths:
      /:
        file.dir: {root}
""")
    return conf


# --- load ----------------------------------------------------------------------------------


@dataclass
class Run:
    """One load run against one server: requests done, wall seconds, the server's CPU
    seconds, and the p99 latency in ms."""

    requests: int
    wall: float
    cpu: float
    p99_ms: float

    @property
    def cpu_us(self) -> float:
        return self.cpu * 1e6 / self.requests if self.requests else math.nan

    @property
    def rate(self) -> float:
        return self.requests / self.wall if self.wall > 0 else math.nan


@dataclass
class WrkOutput:
    requests: int
    seconds: float
    rate: float
    p99_ms: float
    non_2xx: int = 0
    socket_errors: dict[str, int] = field(default_factory=dict)


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}


def parse_wrk(text: str) -> WrkOutput:
    """The figures of one ``wrk --latency`` run (raises ValueError when they are missing)."""
    m = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m|h)\b", text)
    p99 = re.search(r"^\s*99(?:\.0+)?%\s+([\d.]+)(us|ms|s|m|h)\s*$", text, re.M)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", text)
    if m is None or p99 is None or rate is None:
        raise ValueError(f"unexpected wrk output: {text.strip()!r}")
    out = WrkOutput(
        requests=int(m.group(1)),
        seconds=float(m.group(2)) * _UNITS[m.group(3)] / 1e3,
        rate=float(rate.group(1)),
        p99_ms=float(p99.group(1)) * _UNITS[p99.group(2)],
    )
    if bad := re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text):
        out.non_2xx = int(bad.group(1))
    if errs := re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text
    ):
        out.socket_errors = {
            k: int(v)
            for k, v in zip(("connect", "read", "write", "timeout"), errs.groups(), strict=True)
        }
    return out


def run_wrk(wrk: str, server: Server, target: str, conns: int, seconds: int,
            wrk_cpu: int | None = 1, scheme: str = "http") -> Run:  # fmt: skip
    """wrk on ``wrk_cpu`` (None: not pinned) against ``server`` for ``seconds``; the server's
    CPU meanwhile. ``scheme`` ``https``: wrk speaks TLS (it checks no certificate)."""
    argv = [wrk, "-t1", f"-c{conns}", f"-d{seconds}s", "--latency", "--timeout", "10s",
            f"{scheme}://127.0.0.1:{server.port}{target}"]  # fmt: skip
    cpu = tree_cpu(server.pids())
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=seconds + 60, check=False,
        preexec_fn=_pin(wrk_cpu),
    )  # fmt: skip
    time.sleep(SETTLE)
    used = cpu()
    if proc.returncode != 0:
        raise RuntimeError(f"wrk failed ({proc.returncode}): {proc.stderr.strip()}")
    out = parse_wrk(proc.stdout)
    if out.non_2xx:
        raise RuntimeError(f"{server.name}: {out.non_2xx} non-2xx answers to GET {target}")
    if any(out.socket_errors.values()):
        where = f"{server.bench}: {server.name} {target} c{conns}"
        note(f"{where}: wrk socket errors {out.socket_errors}")
    if server.proc.poll() is not None:
        raise RuntimeError(f"{server.name} exited during the run: {server.output()}")
    # requests/s over wrk's own clock: the window its requests were counted in
    return Run(out.requests, out.seconds, used, out.p99_ms)


def run_python_load(server: Server, target: str, conns: int, per_conn: int) -> Run:
    """The smoke-test load: ``conns`` keep-alive connections, ``per_conn`` GETs each, one at
    a time over the connections in turn; checks every status and length."""
    socks = [socket.create_connection(("127.0.0.1", server.port), timeout=10)]
    try:
        socks += [
            socket.create_connection(("127.0.0.1", server.port), timeout=10)
            for _ in range(conns - 1)
        ]
        readers = [_Reader(s) for s in socks]
        request = f"GET {target} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
        latencies: list[float] = []
        cpu = tree_cpu(server.pids())
        t0 = time.perf_counter()
        for _ in range(per_conn):
            for s, r in zip(socks, readers, strict=True):
                t = time.perf_counter()
                s.sendall(request)
                status, length = r.head()
                r.exactly(length)
                latencies.append(time.perf_counter() - t)
                if status != 200:
                    raise RuntimeError(f"{server.name}: GET {target} answered {status}")
        wall = time.perf_counter() - t0
        time.sleep(SETTLE)
        used = cpu()
    finally:
        for s in socks:
            s.close()
    p99 = statistics.quantiles(latencies, n=100)[98] if len(latencies) > 1 else latencies[0]
    return Run(len(latencies), wall, used, p99 * 1e3)


# --- the bench -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    conns: tuple[int, ...]
    seconds: int
    rounds: int
    warmup: int
    with_asyncio: bool
    tiny_requests: int


def _plan(quick: bool) -> Plan:
    return pick(
        quick,
        Plan((64, 256), 2, 5, 1, True, 0),
        Plan((64,), 1, 1, 0, False, 0),
        Plan((4,), 0, 1, 0, True, 25),
    )


@contextlib.contextmanager
def _site() -> Iterator[Path]:
    """The served directory: the three files, readable by the nginx worker."""
    with tempfile.TemporaryDirectory(prefix="fdkit-bench-serve-") as d:
        base = Path(d)
        base.chmod(0o755)
        root = base / "www"
        root.mkdir(mode=0o755)
        (root / "hallo.txt").write_bytes(HELLO)
        (root / "4k.bin").write_bytes(os.urandom(4096))
        (root / "1m.bin").write_bytes(os.urandom(MiB))
        yield root


def _example() -> Path | None:
    """examples/hello_server.py of the source tree this harness is in, when there is one."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "examples" / "hello_server.py"
        if candidate.is_file():
            return candidate
    return None


def _start(stack: contextlib.ExitStack, key: str, argv: Sequence[str], port: int,
           target: str, expect: bytes, cpu: int | None = 0) -> Server | None:  # fmt: skip
    server = Server(key, argv, port, cpu=cpu)
    stack.callback(server.stop)
    try:
        server.wait_ready(target, expect)
    except RuntimeError as e:
        note(f"serve: {e}; its rows are skipped")
        server.stop()
        return None
    return server


def _file_servers(stack: contextlib.ExitStack, root: Path, plan: Plan) -> dict[str, Server]:
    from fdkit import uring

    servers: dict[str, Server] = {}
    fdkit = [sys.executable, "-m", "fdkit", "serve", str(root), "--host", "127.0.0.1",
             "--workers", "1", "--quiet"]  # fmt: skip
    ok, reason = uring.available()
    engines = {"epoll": "epoll"}
    if ok:
        engines = {"fdkit": "uring", **engines}
    else:
        note(f"serve: io_uring unavailable ({reason}): the fdkit serve (io_uring) rows skipped")
    for key, engine in engines.items():
        port = _free_port()
        argv = [*fdkit, "--port", str(port), "--engine", engine]
        if (s := _start(stack, key, argv, port, "/hallo.txt", HELLO)) is not None:
            servers[key] = s
    nginx = find_tool("nginx", [i for i in planned_ids(plan) if "_vs_nginx_" in i])
    for key, nopush in (("nginx", False), ("nginx_nopush", True)):
        if nginx is None:
            break
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fdkit-bench-nginx-")))
        port = _free_port()
        conf = _nginx_conf(tmp, root, port, nopush)
        argv = [nginx, "-p", str(tmp), "-c", str(conf), "-e", str(tmp / "error.log")]
        if (s := _start(stack, key, argv, port, "/hallo.txt", HELLO)) is not None:
            servers[key] = s
    h2o = find_tool("h2o", [i for i in planned_ids(plan) if "_vs_h2o_" in i])
    if h2o is not None:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fdkit-bench-h2o-")))
        port = _free_port()
        argv = [h2o, "-c", str(_h2o_conf(tmp, root, port))]
        if (s := _start(stack, "h2o", argv, port, "/hallo.txt", HELLO)) is not None:
            servers["h2o"] = s
    floor = load_c(FLOOR_SOURCE)
    if floor is None:
        skip(BENCH, [i for i in planned_ids(plan) if f"_vs_{FLOOR}_" in i],
             f"the C floor server bench/c/{FLOOR_SOURCE}.c could not be built (gcc)")  # fmt: skip
    else:
        port = _free_port()
        argv = [sys.executable, script("aio_servers"), "floor", str(floor._name), "127.0.0.1",
                str(port)]  # fmt: skip
        if (s := _start(stack, FLOOR, argv, port, "/hallo.txt", HELLO)) is not None:
            servers[FLOOR] = s
    if plan.with_asyncio:
        port = _free_port()
        argv = [sys.executable, script("asyncio_servers"), "static", str(root), "127.0.0.1",
                str(port)]  # fmt: skip
        if (s := _start(stack, "asyncio", argv, port, "/hallo.txt", HELLO)) is not None:
            servers["asyncio"] = s
    return servers


def _two_worker_servers(stack: contextlib.ExitStack, root: Path) -> dict[str, Server]:
    """``fdkit serve --workers 2`` (io_uring) and nginx with 2 workers, not pinned (their rows
    were recorded as skipped already when nginx is missing)."""
    from fdkit import uring

    servers: dict[str, Server] = {}
    nginx = _which("nginx")
    ok, reason = uring.available()
    if nginx is None:
        return servers
    if not ok:
        note(f"serve: io_uring unavailable ({reason}): the two-worker rows skipped")
        return servers
    port = _free_port()
    argv = [sys.executable, "-m", "fdkit", "serve", str(root), "--host", "127.0.0.1",
            "--workers", "2", "--quiet", "--port", str(port), "--engine", "uring"]  # fmt: skip
    if (s := _start(stack, "fdkit_2w", argv, port, "/hallo.txt", HELLO, cpu=None)) is not None:
        servers["fdkit_2w"] = s
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fdkit-bench-nginx-")))
    port = _free_port()
    conf = _nginx_conf(tmp, root, port, nopush=True, workers=2)
    argv = [nginx, "-p", str(tmp), "-c", str(conf), "-e", str(tmp / "error.log")]
    if (s := _start(stack, "nginx_2w", argv, port, "/hallo.txt", HELLO, cpu=None)) is not None:
        servers["nginx_2w"] = s
    return servers


def _hello_servers(stack: contextlib.ExitStack) -> dict[str, Server]:
    from fdkit import uring

    servers: dict[str, Server] = {}
    example = _example()
    ok, reason = uring.available()
    if example is None:
        note("serve: examples/hello_server.py not found (not a source tree): hello rows skipped")
        return servers
    if not ok:
        note(f"serve: io_uring unavailable ({reason}): the Ring hello rows skipped")
        return servers
    port = _free_port()
    argv = [sys.executable, str(example), "--host", "127.0.0.1", "--port", str(port)]
    if (s := _start(stack, "ring_hello", argv, port, "/", HELLO)) is not None:
        servers["ring_hello"] = s
    port = _free_port()
    argv = [sys.executable, script("asyncio_servers"), "hello", "127.0.0.1", str(port)]
    if (s := _start(stack, "asyncio_hello", argv, port, "/", HELLO)) is not None:
        servers["asyncio_hello"] = s
    return servers


def _check_bodies(servers: dict[str, Server], root: Path) -> None:
    """Every file server answers every file with its exact bytes (the floor, whose one reply
    is the 6 B file, only that one)."""
    for key, s in servers.items():
        for size, (name, _) in FILES.items():
            if key == FLOOR and size != FLOOR_SIZE:
                continue
            status, body = http_get(s.port, f"/{name}")
            if status != 200 or body != (root / name).read_bytes():
                raise RuntimeError(f"{s.name}: GET /{name} answered {status}, wrong body")


def _measure(wrk: str | None, plan: Plan, server: Server, target: str,
             conns: int, wrk_cpu: int | None = 1) -> Callable[[], Run]:  # fmt: skip
    calls = [0]

    def once() -> Run:
        calls[0] += 1
        if wrk is None:
            return run_python_load(server, target, conns, plan.tiny_requests)
        warm = calls[0] <= plan.warmup
        return run_wrk(wrk, server, target, conns, 1 if warm else plan.seconds, wrk_cpu)

    return once


Figures = dict[str, dict[str, float]]


def _figures(runs: dict[str, list[Run]]) -> Figures:
    return {
        key: {
            "cpu": median([r.cpu_us for r in rs]),
            "rate": median([r.rate for r in rs]),
            "p99": median([r.p99_ms for r in rs]),
        }
        for key, rs in runs.items()
    }


def _report(what: str, figs: Figures, names: dict[str, str] = LABELS) -> None:
    note(
        f"serve {what}: "
        + "; ".join(
            f"{names[k]} {f['cpu']:.2f} us/req, {f['rate']:,.0f} req/s, p99 {f['p99']:.2f} ms"
            for k, f in figs.items()
        )
    )


def _rows(prefix: str, case: str, figs: Figures, me: str, other: str, cpu_goal: float | None,
          names: dict[str, str] = LABELS) -> list[Result]:  # fmt: skip
    """CPU per request (with the goal), requests/s and p99 of ``me`` against ``other``."""
    if me not in figs or other not in figs:
        return []
    a, b, name = figs[me], figs[other], names[other]
    return [
        compare(prefix.format(kind=""), BENCH, case, "server CPU per request (utime+stime)",
                CPU_UNIT, a["cpu"], b["cpu"], name, cpu_goal),
        compare(prefix.format(kind="_rps"), BENCH, case, "requests per second (wrk)",
                RATE_UNIT, a["rate"], b["rate"], name),
        compare(prefix.format(kind="_p99"), BENCH, case, "p99 latency (wrk)", LATENCY_UNIT,
                a["p99"], b["p99"], name),
    ]  # fmt: skip


# The row ids, ``kind`` one of "", "_rps", "_p99" (see _rows): a contract, see run.
FILE_IDS = (
    "serve{kind}_vs_nginx_{size}{suffix}",
    "serve_epoll{kind}_vs_nginx_{size}{suffix}",
    "serve{kind}_vs_asyncio_{size}{suffix}",
    "serve_epoll{kind}_vs_asyncio_{size}{suffix}",
    "serve{kind}_vs_h2o_{size}{suffix}",
)
FLOOR_IDS = "serve{kind}_vs_floor_6b{suffix}"
TWO_WORKER_IDS = "serve{kind}_vs_nginx_2w_4k"
HELLO_IDS = "ring_hello{kind}_vs_asyncio{suffix}"
KINDS = ("", "_rps", "_p99")


def _suffix(plan: Plan, conns: int) -> str:
    return "" if conns == plan.conns[0] else f"_c{conns}"


def planned_ids(plan: Plan) -> list[str]:
    """Every row id ``run`` can produce with ``plan`` when every contender is here."""
    ids = []
    for size in FILES:
        for conns in plan.conns:
            for pattern in FILE_IDS:
                if "asyncio" in pattern and not plan.with_asyncio:
                    continue
                ids += [pattern.format(kind=k, size=size, suffix=_suffix(plan, conns))
                        for k in KINDS]  # fmt: skip
            if size == FLOOR_SIZE:
                ids += [FLOOR_IDS.format(kind=k, suffix=_suffix(plan, conns)) for k in KINDS]
    ids += [TWO_WORKER_IDS.format(kind=k) for k in KINDS]
    for conns in plan.conns:
        ids += [HELLO_IDS.format(kind=k, suffix=_suffix(plan, conns)) for k in KINDS]
    return ids


def run(quick: bool) -> list[Result]:
    """Every file size and connection count, the contenders alternating; then the hello
    servers."""
    plan = _plan(quick)
    wrk: str | None = None
    load = "python load generator (smoke test)"
    if not tiny():
        wrk = find_tool("wrk", planned_ids(plan))
        if wrk is None:
            return []
        load = "wrk -t1"
    rows: list[Result] = []
    with _site() as root, contextlib.ExitStack() as stack:
        servers = _file_servers(stack, root, plan)
        _check_bodies(servers, root)
        for size, (name, _) in FILES.items():
            for conns in plan.conns:
                suffix = _suffix(plan, conns)
                # nginx at its best for the size: tcp_nopush on for the small files, nginx's
                # default (off) for 1 MiB, where TCP_CORK doubles its CPU per request here
                chosen = NGINX_CONFIG[size]
                case_servers = {("nginx" if k == chosen else k): s for k, s in servers.items()
                                if (not k.startswith("nginx") or k == chosen)
                                and (k != FLOOR or size == FLOOR_SIZE)}  # fmt: skip
                names = dict(LABELS, nginx=LABELS[chosen])
                contenders = {k: _measure(wrk, plan, s, f"/{name}", conns)
                              for k, s in case_servers.items()}  # fmt: skip
                runs = alternate(contenders, plan.rounds, plan.warmup)
                figs = _figures(runs)
                _report(f"{size} c{conns}", figs, names)
                headline = suffix == ""
                goal = (GOAL_1M if size == "1m" else GOAL_SMALL) if headline else None
                cond = f"{size} file, {conns} keep-alive connections, {load}"
                case_u = f"{LABELS['fdkit']} [{cond}]"
                case_e = f"{LABELS['epoll']} [{cond}]"
                ids = [p.replace("{size}{suffix}", f"{size}{suffix}") for p in FILE_IDS]
                rows += _rows(ids[0], case_u, figs, "fdkit", "nginx", goal, names)
                epoll_goal = GOAL_EPOLL if headline and size == "4k" else None
                rows += _rows(ids[1], case_e, figs, "epoll", "nginx", epoll_goal, names)
                rows += _rows(ids[2], case_u, figs, "fdkit", "asyncio", None)
                rows += _rows(ids[3], case_e, figs, "epoll", "asyncio", None)
                h2o_goal = (GOAL_H2O_1M if size == "1m" else GOAL_H2O_SMALL) if headline else None
                rows += _rows(ids[4], case_u, figs, "fdkit", "h2o", h2o_goal)
                if size == FLOOR_SIZE:
                    floor_goal = GOAL_FLOOR if headline else None
                    floor_id = FLOOR_IDS.replace("{suffix}", suffix)
                    rows += _rows(floor_id, case_u, figs, "fdkit", FLOOR, floor_goal)
        for s in servers.values():
            s.stop()
        two = _two_worker_servers(stack, root)
        if len(two) == 2:
            _check_bodies(two, root)
            conns = plan.conns[0]
            target = f"/{FILES[TWO_WORKERS_SIZE][0]}"
            contenders = {k: _measure(wrk, plan, s, target, conns, wrk_cpu=None)
                          for k, s in two.items()}  # fmt: skip
            figs = _figures(alternate(contenders, plan.rounds, plan.warmup))
            _report(f"{TWO_WORKERS_SIZE} c{conns} two workers", figs)
            cond = f"{TWO_WORKERS_SIZE} file, {conns} keep-alive connections, {load}, not pinned"
            case = f"{LABELS['fdkit_2w']} [{cond}]"
            rows += _rows(TWO_WORKER_IDS, case, figs, "fdkit_2w", "nginx_2w", GOAL_2W)
        for s in two.values():
            s.stop()
        hello = _hello_servers(stack)
        for conns in plan.conns:
            suffix = _suffix(plan, conns)
            contenders = {k: _measure(wrk, plan, s, "/", conns) for k, s in hello.items()}
            runs = alternate(contenders, plan.rounds, plan.warmup)
            figs = _figures(runs)
            _report(f"hello c{conns}", figs)
            case = f'{LABELS["ring_hello"]} ["hallo\\n", {conns} keep-alive connections, {load}]'
            rows += _rows(HELLO_IDS.replace("{suffix}", suffix), case, figs, "ring_hello",
                          "asyncio_hello", GOAL_HELLO if suffix == "" else None)  # fmt: skip
    return rows
