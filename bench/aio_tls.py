"""TLS on fdkit.aio against uvloop and asyncio's own loop: CPU per request, per handshake and
per GiB.

Same method as :mod:`bench.aio`: every program under test is its own process pinned to CPU 0
(the load, wrk or a client, on CPU 1); the figure is the **CPU time of the measured process**
(``utime + stime`` from ``/proc/PID/stat``, in ns steps from ``schedstat`` when the two agree:
:func:`._endpoints.cpu_between`) over the run, divided by the requests, handshakes or GiB
done. The contenders alternate in rounds and the medians are compared; ``ratio`` = the other
loop's CPU ÷ fdkit.aio's (above 1: fdkit.aio spends less).

The contenders: fdkit.aio's default loop on its epoll engine (its programs run with
``FDKIT_AIO_ENGINE=epoll`` and must say so), uvloop, and asyncio's own loop. Certificates: a
throwaway EC P-256 certificate for ``127.0.0.1`` made once per run in a temporary directory
(``openssl req -x509``; the ``trustme`` package where there is no openssl command); the
clients trust it and check the host name. The programs are :mod:`bench.child.aio_tls_servers`.

Workloads:

* ``hello``: the aio bench's ``asyncio.Protocol`` keep-alive hello server behind TLS
  (``loop.create_server(Hello, ssl=ctx)``) under ``wrk -t1 -c64 https://...``: server CPU per
  request, and wrk's requests/s.
* ``client``: a streams HTTPS client in the measured process: 8 keep-alive connections made
  with ``asyncio.open_connection(ssl=ctx)``, each sending ``GET /`` and reading the reply with
  ``readexactly``, one request in flight on each, against one server for every contender
  (fdkit.aio's TLS hello server, pinned to CPU 1); client CPU per request (the handshakes are
  made before the rounds and not counted).
* ``handshake``: new TLS connections on the server side: a ``create_server(ssl=)`` server that
  answers one request per connection and closes it, under a plain Python client (blocking
  ``ssl`` sockets, 4 threads, CPU 1) opening N connections; server CPU per connection.
* ``bulk``: both ends of one TLS connection in one process on the same loop: a sink server
  (``create_server(ssl=)``, a Protocol counting bytes) and a streams client writing 1 GiB in
  256 KiB writes with ``drain``; the process's CPU per GiB. The warm-up round moves less and
  compares SHA-256 of what was sent and what arrived.

A contender that cannot be imported is skipped with the ``pip install`` that adds it; wrk
missing skips the hello rows (not at smoke size, where a Python load generator replaces it);
no way to make a certificate skips every row. A contender that fails, hangs (every measurement
has a time bound) or answers wrong is left out of that workload with a note.

Rows: ``aio_tls_W_vs_X`` for each workload W and X in ``uvloop``, ``asyncio`` (CPU), and
``aio_tls_hello_rps_vs_uvloop`` (wrk's requests/s).

Modes: full (5 rounds of 2 s of wrk, 30,000 client requests, 1,000 handshakes after a warm-up
round; 3 rounds of 1 GiB), ``--quick`` (one round: 1 s, 10,000 requests, 400 handshakes,
256 MiB), tiny (``FDKIT_BENCH_TINY``: a Python load generator instead of wrk, a few hundred
requests, 40 handshakes, 4 MiB).
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from bench import aio
from bench._common import Result, alternate, compare, median, note, pick, skip, tiny
from bench._endpoints import Child, GiB, MiB
from bench.child import script
from bench.child.aio_servers import HELLO, REQUEST
from bench.serve import (
    SETTLE,
    START_TIMEOUT,
    Run,
    Server,
    _free_port,
    _which,
    install_command,
    run_wrk,
    tree_cpu,
)

BENCH = "aio_tls"
SUBJECT = "epoll_engine"  # fdkit.aio's default loop: the epoll engine (aio's key and label)
OTHERS = ("uvloop", "asyncio")
LOOPS = (SUBJECT, *OTHERS)
WORKLOADS = ("hello", "client", "handshake", "bulk")
GOALS = {
    "aio_tls_hello_vs_uvloop": 1.15,
    "aio_tls_hello_vs_asyncio": 2.0,
    "aio_tls_client_vs_uvloop": 1.1,
    "aio_tls_handshake_vs_uvloop": 1.0,
    "aio_tls_bulk_vs_uvloop": 1.0,
}
# per workload: the unit of the CPU figure, what one CPU second counts in it per unit done,
# the unit of the rate, what one unit done per second counts in it, and the metric's words
UNIT = {"hello": "us/req", "client": "us/req", "handshake": "us/handshake", "bulk": "s/GiB"}
CPU_SCALE = {"hello": 1e6, "client": 1e6, "handshake": 1e6, "bulk": float(GiB)}
RATE_UNIT = {"hello": "req/s", "client": "req/s", "handshake": "handshakes/s", "bulk": "MiB/s"}
RATE_SCALE = {"hello": 1.0, "client": 1.0, "handshake": 1.0, "bulk": 1 / MiB}
METRIC = {
    "hello": "server CPU per request (utime+stime)",
    "client": "client CPU per request (utime+stime)",
    "handshake": "server CPU per TLS connection (utime+stime)",
    "bulk": "process CPU per GiB, both ends (utime+stime)",
}
RPS_METRIC = "requests per second (wrk)"
HOST = "127.0.0.1"
TINY_CONNS = 4  # the smoke-test load generator's keep-alive connections


# --- ids -----------------------------------------------------------------------------------


def _kinds(workload: str, other: str) -> tuple[str, ...]:
    """The rows of ``workload`` against ``other``: CPU, and wrk's rate for hello vs uvloop."""
    return ("", "_rps") if (workload, other) == ("hello", "uvloop") else ("",)


def row_ids(workload: str, other: str) -> list[str]:
    """The ids of fdkit.aio against ``other`` in ``workload`` (the CPU row first)."""
    return [f"aio_tls_{workload}{k}_vs_{other}" for k in _kinds(workload, other)]


def planned_ids(workloads: Sequence[str] = WORKLOADS,
                others: Sequence[str] = OTHERS) -> list[str]:  # fmt: skip
    """Every row id ``run`` produces when every contender is here, in table order."""
    return [i for w in workloads for o in OTHERS if o in others for i in row_ids(w, o)]


# --- plan ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    seconds: int  # of each wrk round (the warm-up's: 1)
    rounds: int
    warmup: int
    conns: int  # wrk's keep-alive connections
    tiny_requests: int  # per connection, with the smoke-test load generator (0: wrk)
    client_conns: int
    client_requests: int
    handshakes: int
    handshake_threads: int
    bulk_bytes: int
    bulk_warm_bytes: int  # the warm-up round's, whose bytes are checked
    byte_rounds: int


def _plan(quick: bool) -> Plan:
    return pick(
        quick,
        Plan(2, 5, 1, 64, 0, 8, 30_000, 1_000, 4, GiB, 64 * MiB, 3),
        Plan(1, 1, 1, 64, 0, 8, 10_000, 400, 4, 256 * MiB, 32 * MiB, 1),
        Plan(1, 1, 1, TINY_CONNS, 50, 8, 400, 40, 4, 4 * MiB, MiB, 1),
    )


# --- certificates --------------------------------------------------------------------------


@dataclass(frozen=True)
class Cert:
    """The servers' certificate and key, and the PEM file clients trust (PEM file paths)."""

    cert: str
    key: str
    cafile: str


OPENSSL_REQ = ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
               "-nodes", "-days", "2", "-subj", f"/CN={HOST}",
               "-addext", f"subjectAltName=IP:{HOST}"]  # fmt: skip


def _openssl_cert(where: str) -> Cert | None:
    """A self-signed EC P-256 certificate made by ``openssl req``; None without openssl."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    cert, key = os.path.join(where, "cert.pem"), os.path.join(where, "key.pem")
    proc = subprocess.run([openssl, *OPENSSL_REQ, "-keyout", key, "-out", cert],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"openssl req failed: {proc.stderr.strip()}")
    return Cert(cert, key, cert)


def _trustme_cert(where: str) -> Cert | None:
    """An EC P-256 certificate issued by a ``trustme`` CA; None without trustme."""
    try:
        trustme = importlib.import_module("trustme")  # optional: a test requirement
    except ImportError:
        return None
    ca = trustme.CA(key_type=trustme.KeyType.ECDSA)
    leaf = ca.issue_cert(HOST)
    cert, key = os.path.join(where, "cert.pem"), os.path.join(where, "key.pem")
    cafile = os.path.join(where, "ca.pem")
    leaf.cert_chain_pems[0].write_to_path(cert)
    leaf.private_key_pem.write_to_path(key)
    ca.cert_pem.write_to_path(cafile)
    return Cert(cert, key, cafile)


@contextlib.contextmanager
def certificate() -> Iterator[Cert | str]:
    """A throwaway certificate for ``127.0.0.1`` in a temporary directory (removed after), or
    why none could be made."""
    with tempfile.TemporaryDirectory(prefix="fdkit-bench-tls-") as where:
        try:
            made = _openssl_cert(where) or _trustme_cert(where)
        except (OSError, RuntimeError, subprocess.SubprocessError) as e:
            yield f"no certificate: {e}"
            return
        yield made or ("no certificate: neither the openssl command nor the trustme package "
                       "is here")  # fmt: skip


def client_context(cert: Cert) -> ssl.SSLContext:
    return ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cert.cafile)


# --- TLS from this process -----------------------------------------------------------------


def _tls_connect(port: int, ctx: ssl.SSLContext, timeout: float = 10.0) -> ssl.SSLSocket:
    """A TLS connection to ``127.0.0.1:port``, handshake done."""
    raw = socket.create_connection((HOST, port), timeout=timeout)
    try:
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return ctx.wrap_socket(raw, server_hostname=HOST)
    except BaseException:
        raw.close()
        raise


def _exactly(sock: ssl.SSLSocket, n: int) -> bytes:
    got = b""
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        if not chunk:
            raise ConnectionError(f"the server closed the connection after {len(got)} bytes")
        got += chunk
    return got


def _ask_hello(sock: ssl.SSLSocket, what: str) -> None:
    """One ``GET /`` on ``sock``; the answer must be the hello reply."""
    sock.sendall(REQUEST)
    answer = _exactly(sock, len(HELLO))
    if answer != HELLO:
        raise RuntimeError(f"{what} answered {answer[:80]!r}")


def wait_tls_ready(server: Server, ctx: ssl.SSLContext) -> str:
    """Waits until ``server`` answers ``GET /`` over TLS with the hello reply; the TLS version
    it negotiated."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.name} exited with status {server.proc.returncode}: "
                               f"{server.output()}")  # fmt: skip
        try:
            with _tls_connect(server.port, ctx) as sock:
                _ask_hello(sock, server.name)
                return sock.version() or "TLS"
        except (OSError, ConnectionError):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{server.name} did not answer over TLS on port "
                                   f"{server.port} within {START_TIMEOUT:g} s: "
                                   f"{server.output()}") from None  # fmt: skip
            time.sleep(0.05)


def python_tls_load(server: Server, ctx: ssl.SSLContext, conns: int, per_conn: int) -> Run:
    """The smoke-test load: ``conns`` TLS keep-alive connections (handshakes not counted),
    ``per_conn`` GETs each, one at a time over the connections in turn, every answer
    checked."""
    socks: list[ssl.SSLSocket] = []
    try:
        for _ in range(conns):
            socks.append(_tls_connect(server.port, ctx))
        cpu = tree_cpu(server.pids())
        t0 = time.perf_counter()
        for _ in range(per_conn):
            for sock in socks:
                _ask_hello(sock, server.name)
        wall = time.perf_counter() - t0
        time.sleep(SETTLE)
        used = cpu()
    finally:
        for sock in socks:
            sock.close()
    return Run(conns * per_conn, wall, used, math.nan)


# --- contenders ----------------------------------------------------------------------------


@dataclass
class Measured:
    """One measurement: ``count`` requests, handshakes or bytes in ``wall`` seconds, and the
    measured process's CPU seconds."""

    count: int
    wall: float
    cpu: float


def loops() -> list[str]:
    """The contenders here (fdkit.aio first; none without it); the rows of the others are
    skipped, saying why."""
    keys: list[str] = []
    for key in LOOPS:
        lacking = aio.missing([aio.MODULES[key]])
        if not lacking:
            keys.append(key)
            continue
        ids = planned_ids() if key == SUBJECT else planned_ids(others=[key])
        skip(BENCH, ids, f"{', '.join(lacking)} is not installed; "
                         f"{aio.install_hint(lacking)} adds these rows")  # fmt: skip
        if key == SUBJECT:
            return []
    return keys


def _server(stack: contextlib.ExitStack, mode: str, key: str, cert: Cert, cpu: int = 0) -> Server:
    """``key``'s TLS server program in ``mode`` (``hello``, ``handshake``) on a free port,
    pinned to ``cpu``, stopped by pid at the end of ``stack``."""
    port = _free_port()
    argv = [sys.executable, script("aio_tls_servers"), mode, aio._child_loop(key), HOST,
            str(port), cert.cert, cert.key]  # fmt: skip
    server = Server(key, argv, port, name=f"TLS {mode} server on {aio.LABELS[key]}",
                    bench=BENCH, env=aio._child_env(key), cpu=cpu)  # fmt: skip
    stack.callback(server.stop)
    return server


def _ready(server: Server, key: str, ctx: ssl.SSLContext) -> str:
    """Checks ``server`` (its loop, its answer over TLS); the TLS version it speaks."""
    version = wait_tls_ready(server, ctx)
    aio._check_loop(key, server.output(), server.name)
    return version


def _servers(stack: contextlib.ExitStack, mode: str, keys: Sequence[str], cert: Cert,
             failed: dict[str, str]) -> tuple[dict[str, Server], str]:  # fmt: skip
    """Every contender's server in ``mode``, started at once, then each checked (the ones that
    fail are noted in ``failed``); the TLS version they speak."""
    started = {key: _server(stack, mode, key, cert) for key in keys}
    ready: dict[str, Server] = {}
    versions: set[str] = set()
    for key, server in started.items():
        try:
            versions.add(_ready(server, key, client_context(cert)))
        except RuntimeError as e:
            _fail(mode, key, failed, e)
            server.stop()
            continue
        ready[key] = server
    return ready, "/".join(sorted(versions)) or "TLS"


def _fail(workload: str, key: str, failed: dict[str, str], e: BaseException) -> None:
    failed[key] = str(e).splitlines()[0] if str(e) else type(e).__name__
    note(f"{BENCH} {workload}: {aio.LABELS[key]} left out: {failed[key]}")


def _fds(servers: Mapping[str, Server]) -> dict[str, tuple[int, int]]:
    return {k: (s.proc.pid, aio._fd_count(s.proc.pid)) for k, s in servers.items()}


# --- results -------------------------------------------------------------------------------


def _cost(workload: str, m: Measured) -> float:
    """CPU per unit of ``workload`` (us per request or handshake, s per GiB)."""
    return m.cpu * CPU_SCALE[workload] / m.count if m.count else math.nan


def _rate(workload: str, m: Measured) -> float:
    return m.count * RATE_SCALE[workload] / m.wall if m.wall > 0 else math.nan


def _figures(workload: str, runs: Mapping[str, Sequence[Measured | None]],
             failed: Mapping[str, str]) -> dict[str, tuple[list[float], float]]:  # fmt: skip
    """Per contender measured: its rounds' CPU figures and its median rate."""
    out: dict[str, tuple[list[float], float]] = {}
    for key, ms in runs.items():
        done = [m for m in ms if m is not None]
        if key not in failed and done:
            out[key] = ([_cost(workload, m) for m in done],
                        median([_rate(workload, m) for m in done]))  # fmt: skip
    return out


def _num(value: float) -> str:
    """A figure for the notes: three significant digits, no exponent."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _note_figures(workload: str, figs: Mapping[str, tuple[list[float], float]]) -> None:
    """Every contender's median (and its rounds' spread: the machine is noisy) and rate, one
    line."""
    unit, rate_unit = UNIT[workload], RATE_UNIT[workload]
    parts = [f"{aio.LABELS[k]} {_num(median(costs))} {unit} "
             f"({_num(min(costs))}-{_num(max(costs))}), {rate:,.0f} {rate_unit}"
             for k, (costs, rate) in figs.items()]  # fmt: skip
    if parts:
        note(f"{BENCH} {workload}: " + "; ".join(parts))


def _rows(workload: str, case: str, figs: Mapping[str, tuple[list[float], float]],
          failed: Mapping[str, str]) -> list[Result]:  # fmt: skip
    """fdkit.aio's rows against each other contender measured; the rest skipped, saying
    why."""
    _note_figures(workload, figs)
    if SUBJECT not in figs:
        why = failed.get(SUBJECT, "no measurement")
        skip(BENCH, planned_ids([workload]), f"{aio.LABELS[SUBJECT]}: {why}")
        return []
    mine, my_rate = figs[SUBJECT]
    rows: list[Result] = []
    for other in OTHERS:
        if other not in figs:
            if other in failed:
                skip(BENCH, row_ids(workload, other), f"{aio.LABELS[other]}: {failed[other]}")
            continue
        theirs, their_rate = figs[other]
        name = aio.LABELS[other]
        for kind, row_id in zip(_kinds(workload, other), row_ids(workload, other), strict=True):
            if kind == "_rps":
                rows.append(compare(row_id, BENCH, case, RPS_METRIC, RATE_UNIT[workload],
                                    my_rate, their_rate, name, GOALS.get(row_id)))  # fmt: skip
            else:
                rows.append(compare(row_id, BENCH, case, METRIC[workload], UNIT[workload],
                                    median(mine), median(theirs), name,
                                    GOALS.get(row_id)))  # fmt: skip
    return rows


def _case(text: str) -> str:
    return f"{aio.LABELS[SUBJECT]}, {text}"


# --- hello: the TLS hello server under wrk -------------------------------------------------


def _hello_measure(plan: Plan, wrk: str | None, server: Server,
                   ctx: ssl.SSLContext) -> Callable[[], Measured]:  # fmt: skip
    calls = [0]

    def once() -> Measured:
        calls[0] += 1
        if wrk is None:
            run = python_tls_load(server, ctx, plan.conns, plan.tiny_requests)
        else:
            seconds = 1 if calls[0] <= plan.warmup else plan.seconds
            run = run_wrk(wrk, server, "/", plan.conns, seconds, scheme="https")
        if run.requests <= 0:
            raise aio.Failed(f"no request answered in {server.name}")
        return Measured(run.requests, run.wall, run.cpu)

    return once


def hello_workload(plan: Plan, keys: Sequence[str], cert: Cert, wrk: str | None) -> list[Result]:
    """Every contender's TLS hello server under the same load, alternating."""
    failed: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        servers, version = _servers(stack, "hello", keys, cert, failed)
        fds = _fds(servers)
        ctx = client_context(cert)
        contenders = {k: _hello_measure(plan, wrk, s, ctx) for k, s in servers.items()}
        runs = alternate(aio.guarded(contenders, "tls hello", failed), plan.rounds, plan.warmup)
        aio._note_leaks("tls hello", fds)
    load = f"wrk -t1 -c{plan.conns}" if wrk is not None else (
        f"python load generator, {plan.conns} connections (smoke test)")  # fmt: skip
    case = _case(f"asyncio.Protocol hello server, create_server(ssl=) [{version}, "
                 f"keep-alive, {load}]")  # fmt: skip
    return _rows("hello", case, _figures("hello", runs, failed), failed)


# --- client: a streams HTTPS client --------------------------------------------------------


def _client_measure(plan: Plan, client: Child) -> Callable[[], Measured]:
    n = plan.client_requests

    def once() -> Measured:
        cpu = tree_cpu([client.pid])
        answer = client.ask(f"run {n}", 30.0 + n / 500)
        used = cpu()
        words = answer.split()
        if words[:2] != ["done", str(n)]:
            raise aio.Failed(f"{client.name} answered {answer!r}")
        return Measured(n, float(words[2]), used)

    return once


def _clients(stack: contextlib.ExitStack, keys: Sequence[str], cert: Cert, port: int,
             plan: Plan, failed: dict[str, str]) -> dict[str, Child]:  # fmt: skip
    """Every contender's client program (CPU 0), checked and connected to ``port``."""
    started: dict[str, Child] = {}
    for key in keys:
        argv = [sys.executable, script("aio_tls_servers"), "client", aio._child_loop(key),
                cert.cafile]  # fmt: skip
        started[key] = aio._start_child(stack, key, argv, cpu=0)
    ready: dict[str, Child] = {}
    for key, child in started.items():
        try:
            aio._check_loop(key, child.reply(START_TIMEOUT), child.name)
            answer = child.ask(f"connect {HOST} {port} {plan.client_conns}", START_TIMEOUT)
            if answer != f"connected {plan.client_conns}":
                raise aio.Failed(f"{child.name} answered {answer!r}")
        except RuntimeError as e:
            _fail("client", key, failed, e)
            continue
        ready[key] = child
    return ready


def client_workload(plan: Plan, keys: Sequence[str], cert: Cert) -> list[Result]:
    """Every contender's streams client against one TLS hello server (fdkit.aio's, CPU 1)."""
    failed: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        server = _server(stack, "hello", SUBJECT, cert, cpu=1)
        try:
            version = _ready(server, SUBJECT, client_context(cert))
        except RuntimeError as e:
            why = str(e).splitlines()[0]
            skip(BENCH, planned_ids(["client"], keys), f"the server for the clients: {why}")
            return []
        clients = _clients(stack, keys, cert, server.port, plan, failed)
        contenders = {k: _client_measure(plan, c) for k, c in clients.items()}
        runs = alternate(aio.guarded(contenders, "tls client", failed), plan.rounds, plan.warmup)
    case = _case(f"asyncio streams client, open_connection(ssl=) [{version}, "
                 f"{plan.client_conns} keep-alive connections, one GET in flight on each; "
                 f"server: {aio.LABELS[SUBJECT]} on CPU 1]")  # fmt: skip
    return _rows("client", case, _figures("client", runs, failed), failed)


# --- handshake: new TLS connections on the server ------------------------------------------


def _handshake_measure(plan: Plan, server: Server, load: Child) -> Callable[[], Measured]:
    n = plan.handshakes

    def once() -> Measured:
        cpu = tree_cpu(server.pids())
        answer = load.ask(f"{HOST} {server.port} {n} {plan.handshake_threads}", 30.0 + n / 20)
        time.sleep(SETTLE)
        used = cpu()
        words = answer.split()
        if words[:2] != ["done", str(n)]:
            raise aio.Failed(f"the handshake client answered {answer!r}")
        if server.proc.poll() is not None:
            raise aio.Failed(f"{server.name} exited: {server.output()}")
        return Measured(n, float(words[2]), used)

    return once


def handshake_workload(plan: Plan, keys: Sequence[str], cert: Cert) -> list[Result]:
    """Every contender's one-request-per-connection TLS server under the same client."""
    failed: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        servers, version = _servers(stack, "handshake", keys, cert, failed)
        fds = _fds(servers)
        argv = [sys.executable, script("aio_tls_servers"), "handshake-client", cert.cafile]
        load = Child("handshake-client program", argv)
        stack.callback(load.stop)
        aio._pin(load.pid, 1)
        contenders = {k: _handshake_measure(plan, s, load) for k, s in servers.items()}
        runs = alternate(aio.guarded(contenders, "tls handshake", failed), plan.rounds,
                         plan.warmup)  # fmt: skip
        aio._note_leaks("tls handshake", fds)
    case = _case(f"create_server(ssl=), a new connection per request [{version}, EC P-256; "
                 f"client: {plan.handshake_threads} threads of blocking ssl sockets]")  # fmt: skip
    return _rows("handshake", case, _figures("handshake", runs, failed), failed)


# --- bulk: both ends of one TLS connection in one process ----------------------------------


def _bulk_measure(plan: Plan, program: Child) -> Callable[[], Measured]:
    calls = [0]

    def once() -> Measured:
        calls[0] += 1
        warm = calls[0] <= 1
        n, mode = (plan.bulk_warm_bytes, "check") if warm else (plan.bulk_bytes, "count")
        cpu = tree_cpu([program.pid])
        t0 = time.perf_counter()
        answer = program.ask(f"{n} {mode}", aio._time_bound(n))
        wall = time.perf_counter() - t0
        used = cpu()
        if answer != f"moved {n}":
            raise aio.Failed(f"{program.name} answered {answer!r}")
        return Measured(n, wall, used)

    return once


def bulk_workload(plan: Plan, keys: Sequence[str], cert: Cert) -> list[Result]:
    """Every contender's bulk program (CPU 0), alternating."""
    failed: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        programs: dict[str, Child] = {}
        for key in keys:
            argv = [sys.executable, script("aio_tls_servers"), "bulk", aio._child_loop(key),
                    cert.cert, cert.key, cert.cafile]  # fmt: skip
            programs[key] = aio._start_child(stack, key, argv, cpu=0)
        for key, program in list(programs.items()):
            try:
                aio._check_loop(key, program.reply(START_TIMEOUT), program.name)
            except RuntimeError as e:
                _fail("bulk", key, failed, e)
                del programs[key]
        contenders = {k: _bulk_measure(plan, p) for k, p in programs.items()}
        runs = alternate(aio.guarded(contenders, "tls bulk", failed), plan.byte_rounds, 1)
    n = plan.bulk_bytes
    size = f"{n // MiB} MiB" if n < GiB else f"{n // GiB} GiB"
    case = _case(f"TLS sink server and streams client, one loop [{size} per round, "
                 f"256 KiB writes with drain]")  # fmt: skip
    return _rows("bulk", case, _figures("bulk", runs, failed), failed)


# --- the bench -----------------------------------------------------------------------------


def _wrk(keys: Sequence[str]) -> tuple[bool, str | None]:
    """Whether the hello rows can run, and wrk's path (None at smoke size: the Python load
    generator); without wrk its rows are skipped, saying how to add it."""
    if tiny():
        return True, None
    wrk = _which("wrk")
    if wrk is None:
        skip(BENCH, planned_ids(["hello"], keys),
             f"wrk is not installed; `{install_command('wrk')}` (or `make bench-tools` in "
             "a source tree) adds these rows")  # fmt: skip
    return wrk is not None, wrk


def run(quick: bool) -> list[Result]:
    """The four workloads, each with every loop here, alternating."""
    plan = _plan(quick)
    keys = loops()
    if not keys:
        return []
    http, wrk = _wrk(keys)
    rows: list[Result] = []
    with certificate() as cert:
        if isinstance(cert, str):
            ids = planned_ids(WORKLOADS if http else WORKLOADS[1:], keys)
            skip(BENCH, ids, cert)
            return []
        if http:
            rows += hello_workload(plan, keys, cert, wrk)
        rows += client_workload(plan, keys, cert)
        rows += handshake_workload(plan, keys, cert)
        rows += bulk_workload(plan, keys, cert)
    return rows
