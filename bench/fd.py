"""The rest of IO::FD's benchmark rows: socket creation for AF_INET6 and AF_UNIX, ``listen``
with a large backlog, and read/write throughput on pipes and sockets.

Each row runs fdkit and the stdlib in the same process run, alternating round by round, and
quotes medians per CPU-second (create rows) or MiB/s of CPU (throughput rows):

* ``fd_socket_inet6_vs_stdlib``: ``fd.close(fd.socket(AF_INET6))`` vs
  ``socket.socket(AF_INET6).close()``.
* ``fd_socket_unix_vs_stdlib``: the same for ``AF_UNIX``.
* ``fd_listen_backlog_vs_stdlib``: socket + bind to 127.0.0.1:0 + ``listen(4096)`` + close,
  fdkit's int calls vs a ``socket.socket`` doing the same.
* ``fd_pipe_rw_vs_os``: 64 KiB writes and reads through a pipe, ``fd.write``/``fd.readinto``
  vs ``os.write``/``os.readv``.
* ``fd_socket_rw_vs_stdlib``: 64 KiB ``fd.send``/``fd.recv_into`` over a unix socketpair vs
  ``socket.send``/``socket.recv_into``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from functools import partial

from bench._common import Result, Sample, Timer, alternate, compare, median_of, pick
from fdkit import fd

BENCH = "fd"
CHUNK = 65536
# Goals: the create rows "not slower than the stdlib" (as socket_create); the data rows are
# the kernel's copy for both contenders, so parity within the noise (0.95x).
GOAL_CREATE = 1.0
GOAL_RW = 0.95


def _create_fdkit(family: int, n: int) -> Sample:
    make, close = fd.socket, fd.close
    t = Timer()
    with t:
        for _ in range(n):
            close(make(family, 1))
    return t.sample(n)


def _create_stdlib(family: int, n: int) -> Sample:
    make = socket.socket
    t = Timer()
    with t:
        for _ in range(n):
            make(family, socket.SOCK_STREAM).close()
    return t.sample(n)


def _listen_fdkit(n: int) -> Sample:
    t = Timer()
    with t:
        for _ in range(n):
            s = fd.socket(fd.AF_INET, fd.SOCK_STREAM)
            fd.bind(s, ("127.0.0.1", 0))
            fd.listen(s, 4096)
            fd.close(s)
    return t.sample(n)


def _listen_stdlib(n: int) -> Sample:
    t = Timer()
    with t:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            s.listen(4096)
            s.close()
    return t.sample(n)


def _pipe_fdkit(n: int) -> Sample:
    r, w = fd.pipe()
    data, buf = b"x" * CHUNK, bytearray(CHUNK)
    write, readinto = fd.write, fd.readinto
    t = Timer()
    with t:
        for _ in range(n):
            write(w, data)
            got = 0
            while got < CHUNK:
                got += readinto(r, buf)
    fd.close(r)
    fd.close(w)
    return t.sample(n * CHUNK)


def _pipe_os(n: int) -> Sample:
    r, w = os.pipe()
    data, buf = b"x" * CHUNK, bytearray(CHUNK)
    write, readv = os.write, os.readv
    t = Timer()
    with t:
        for _ in range(n):
            write(w, data)
            got = 0
            while got < CHUNK:
                got += readv(r, [buf])
    os.close(r)
    os.close(w)
    return t.sample(n * CHUNK)


def _sock_fdkit(n: int) -> Sample:
    a, b = fd.socketpair()
    fd.setsockopt(a, socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * CHUNK)
    data, buf = b"x" * CHUNK, bytearray(CHUNK)
    send, recv_into = fd.send, fd.recv_into
    t = Timer()
    with t:
        for _ in range(n):
            sent = 0
            while sent < CHUNK:
                sent += send(a, data[sent:] if sent else data)
                got = 0
                while got < sent:
                    got += recv_into(b, buf)
    fd.close(a)
    fd.close(b)
    return t.sample(n * CHUNK)


def _sock_stdlib(n: int) -> Sample:
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * CHUNK)
    data, buf = b"x" * CHUNK, bytearray(CHUNK)
    send, recv_into = a.send, b.recv_into
    t = Timer()
    with t:
        for _ in range(n):
            sent = 0
            while sent < CHUNK:
                sent += send(data[sent:] if sent else data)
                got = 0
                while got < sent:
                    got += recv_into(buf)
    a.close()
    b.close()
    return t.sample(n * CHUNK)


def _mib_rate(s: Sample) -> float:
    return s.cpu_rate / (1 << 20)


def run(quick: bool) -> list[Result]:
    """The five rows, each fdkit against the stdlib in the same run, alternating."""
    n_create = pick(quick, 20000, 8000, 300)
    n_listen = pick(quick, 4000, 1500, 50)
    n_rw = pick(quick, 8000, 3000, 50)
    rounds = pick(quick, 11, 5, 1)
    warmup = pick(quick, 1, 1, 0)
    results: list[Result] = []

    def row(
        id: str,
        case: str,
        metric: str,
        unit: str,
        fdkit: Callable[[], Sample],
        stdlib: Callable[[], Sample],
        baseline_name: str,
        rate: Callable[[Sample], float],
        goal: float,
    ) -> None:
        samples = alternate({"fdkit": fdkit, "stdlib": stdlib}, rounds, warmup)
        results.append(
            compare(
                id,
                BENCH,
                case,
                metric,
                unit,
                median_of(samples["fdkit"], rate),
                median_of(samples["stdlib"], rate),
                baseline_name,
                goal,
            )
        )

    def per_cpu(s: Sample) -> float:
        return s.cpu_rate

    for family, tag in ((socket.AF_INET6, "inet6"), (socket.AF_UNIX, "unix")):
        name = family.name
        row(
            f"fd_socket_{tag}_vs_stdlib",
            f"fd.socket({name}) + fd.close() [x{n_create}]",
            "socket+close per CPU-second",
            "ops/s",
            partial(_create_fdkit, int(family), n_create),
            partial(_create_stdlib, int(family), n_create),
            f"socket.socket({name}) + .close()",
            per_cpu,
            GOAL_CREATE,
        )
    row(
        "fd_listen_backlog_vs_stdlib",
        f"socket+bind+listen(4096)+close [x{n_listen}]",
        "listeners per CPU-second",
        "ops/s",
        partial(_listen_fdkit, n_listen),
        partial(_listen_stdlib, n_listen),
        "socket.socket: bind, listen(4096), close",
        per_cpu,
        GOAL_CREATE,
    )
    row(
        "fd_pipe_rw_vs_os",
        f"fd.write + fd.readinto, pipe, 64 KiB [x{n_rw}]",
        "MiB moved per CPU-second",
        "MiB/s",
        partial(_pipe_fdkit, n_rw),
        partial(_pipe_os, n_rw),
        "os.write + os.readv",
        _mib_rate,
        GOAL_RW,
    )
    row(
        "fd_socket_rw_vs_stdlib",
        f"fd.send + fd.recv_into, unix socketpair, 64 KiB [x{n_rw}]",
        "MiB moved per CPU-second",
        "MiB/s",
        partial(_sock_fdkit, n_rw),
        partial(_sock_stdlib, n_rw),
        "socket.send + socket.recv_into",
        _mib_rate,
        GOAL_RW,
    )
    return results
