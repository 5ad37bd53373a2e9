"""Accepting connections: drain a backlog pre-filled with N loopback connections.

Five contenders drain the same backlog, one after another in alternating rounds:

(a) ``socket.accept()`` in a loop on a blocking listener, exactly N times;
(b) a non-blocking listener with ``selectors.DefaultSelector``, accepting until
    ``BlockingIOError``;
(c) ``fdkit.fd.accept()`` in a loop on a blocking listener, exactly N times;
(d) ``fdkit.fd.accept_many()`` on a non-blocking listener until it returns ``[]``;
(e) a C ``accept4`` loop (compiled with gcc, called once through ctypes) until ``EAGAIN``.

Two variants: "reset" (every client sets ``SO_LINGER (1, 0)`` and closes before the drain, so
the drain measures accept itself; Linux still hands out reset connections that sit in the
accept queue, and every contender must drain exactly N) and "live" (clients stay open).
Only the drain is timed; filling the backlog and closing the accepted sockets are not.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gc
import os
import selectors
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from bench._common import (
    Result,
    Sample,
    Timer,
    alternate,
    compare,
    load_c,
    median_of,
    note,
    pick,
    raise_nofile,
)
from fdkit import fd

BENCH = "accept"
GOAL_CPU = 1.6
GOAL_VS_C = 0.9
BATCH = 64  # accept_many's max per call (its default)
_LINGER_RESET = struct.pack("ii", 1, 0)

# contender key -> label shown in the table
LABELS = {
    "stdlib_accept": "socket.accept() loop",
    "stdlib_selectors": "selectors + socket.accept()",
    "fd_accept": "fd.accept() loop",
    "fd_accept_many": f"fd.accept_many(max={BATCH})",
    "c_accept4": "C accept4 loop",
}
STDLIB = ("stdlib_accept", "stdlib_selectors")
VARIANTS = ("reset", "live")


class Backlog:
    """A loopback listener (backlog 4096) and the clients that fill its accept queue."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self.listener.bind(("127.0.0.1", 0))
            self.listener.listen(4096)
        except BaseException:
            self.listener.close()
            raise
        self.address = self.listener.getsockname()
        self.fd = self.listener.fileno()

    def close(self) -> None:
        self.drain_leftovers()
        self.listener.close()

    def queued(self) -> int:
        """Connections waiting in the accept queue (``tcpi_unacked`` on a listener)."""
        info = self.listener.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
        return int(struct.unpack_from("8B6I", info)[8 + 4])

    def fill(self, reset: bool) -> list[socket.socket]:
        """Queue N completed connections; returns the clients still open (none if reset)."""
        clients: list[socket.socket] = []
        try:
            for _ in range(self.n):
                c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                clients.append(c)
                c.setblocking(False)
                err = c.connect_ex(self.address)
                if err not in (0, errno.EINPROGRESS):
                    raise OSError(err, os.strerror(err))
            deadline = time.monotonic() + 10.0
            while (q := self.queued()) < self.n:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {q} of {self.n} handshakes completed in 10 s")
                time.sleep(0.001)
            if reset:
                self.reset(clients)
                clients = []
                time.sleep(0.002)  # let loopback deliver the last RSTs
            return clients
        except BaseException:
            self.reset(clients)
            self.drain_leftovers()
            raise

    @staticmethod
    def reset(clients: list[socket.socket]) -> None:
        """Close clients with an RST (no TIME_WAIT left behind)."""
        for c in clients:
            with contextlib.suppress(OSError):
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
            c.close()

    def drain_leftovers(self) -> int:
        """Accept and close whatever is still queued; returns how many there were."""
        self.listener.setblocking(False)
        n = 0
        while True:
            try:
                conn, _ = self.listener.accept()
            except BlockingIOError:
                return n
            except OSError:
                continue
            conn.close()
            n += 1


# A drain fills ``out`` (so an interrupted drain still leaves its fds for the clean-up) and
# times only the accepting with ``t``.
Drain = Callable[[Backlog, Timer, list[Any]], None]


def _stdlib_accept(b: Backlog, t: Timer, out: list[Any]) -> None:
    b.listener.setblocking(True)
    accept = b.listener.accept
    append = out.append
    with t:
        for _ in range(b.n):
            append(accept())


def _stdlib_selectors(b: Backlog, t: Timer, out: list[Any]) -> None:
    b.listener.setblocking(False)
    accept = b.listener.accept
    append = out.append
    n = b.n
    with selectors.DefaultSelector() as sel:
        sel.register(b.listener, selectors.EVENT_READ)
        with t:
            while len(out) < n:
                events = sel.select(timeout=1.0)
                if not events:
                    break
                for _ in events:
                    while True:
                        try:
                            append(accept())
                        except BlockingIOError:
                            break


def _fd_accept(b: Backlog, t: Timer, out: list[Any]) -> None:
    b.listener.setblocking(True)
    accept = fd.accept
    lfd = b.fd
    append = out.append
    with t:
        for _ in range(b.n):
            append(accept(lfd))


def _fd_accept_many(b: Backlog, t: Timer, out: list[Any]) -> None:
    b.listener.setblocking(False)
    accept_many = fd.accept_many
    lfd = b.fd
    extend = out.extend
    with t:
        while batch := accept_many(lfd, BATCH):
            extend(batch)


def _c_drain(lib: ctypes.CDLL) -> Drain:
    drain = lib.drain
    drain.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int))
    drain.restype = ctypes.c_int

    def run(b: Backlog, t: Timer, out: list[Any]) -> None:
        b.listener.setblocking(False)
        fds = (ctypes.c_int * (b.n + 1))()
        with t:
            got = drain(b.fd, b.n + 1, fds)
        if got < 0:
            raise OSError(-got, os.strerror(-got))
        out.extend(fds[:got])

    return run


def _close_accepted(accepted: list[Any]) -> None:
    for item in accepted:
        conn = item[0] if isinstance(item, tuple) else item
        if isinstance(conn, socket.socket):
            conn.close()
        else:
            os.close(conn)


def _measure(b: Backlog, drain: Drain, reset: bool, label: str) -> Callable[[], Sample]:
    def once() -> Sample:
        clients = b.fill(reset)
        accepted: list[Any] = []
        try:
            gc.collect()
            t = Timer()
            drain(b, t, accepted)
        finally:
            Backlog.reset(clients)
            _close_accepted(accepted)
            left = b.drain_leftovers()
        if len(accepted) != b.n:
            raise RuntimeError(
                f"{label} drained {len(accepted)} of {b.n} queued connections ({left} left over)"
            )
        return t.sample(len(accepted))

    return once


def run(quick: bool) -> list[Result]:
    """Drain the pre-filled backlog with every contender, both variants, alternating."""
    n = pick(quick, 2000, 1000, 64)
    rounds = pick(quick, 15, 5, 1)
    warmup = pick(quick, 1, 1, 0)
    limit = raise_nofile()
    if limit < 2 * n + 64:
        n = max(16, (limit - 64) // 2)
        note(f"RLIMIT_NOFILE is {limit}: accept bench uses {n} connections")

    drains: dict[str, Drain] = {
        "stdlib_accept": _stdlib_accept,
        "stdlib_selectors": _stdlib_selectors,
        "fd_accept": _fd_accept,
        "fd_accept_many": _fd_accept_many,
    }
    lib = load_c("accept_loop")
    if lib is not None:
        drains["c_accept4"] = _c_drain(lib)

    b = Backlog(n)
    try:
        contenders = {
            f"{v}/{key}": _measure(b, drain, v == "reset", LABELS[key])
            for v in VARIANTS
            for key, drain in drains.items()
        }
        samples = alternate(contenders, rounds, warmup)
    finally:
        b.close()

    results: list[Result] = []
    for v in VARIANTS:

        def cpu(key: str, v: str = v) -> float:
            return median_of(samples[f"{v}/{key}"], lambda s: s.cpu_us_per_op)

        def rate(key: str, v: str = v) -> float:
            return median_of(samples[f"{v}/{key}"], lambda s: s.wall_rate)

        where = f"[{v}, {n} queued]"
        if v == "reset":
            best = min(STDLIB, key=cpu)
            results.append(
                compare(
                    "accept_cpu",
                    BENCH,
                    f"{LABELS['fd_accept_many']} {where}",
                    "CPU per accept",
                    "us/accept",
                    cpu("fd_accept_many"),
                    cpu(best),
                    LABELS[best],
                    GOAL_CPU,
                )
            )
            if "c_accept4" in drains:
                results.append(
                    compare(
                        "accept_vs_c",
                        BENCH,
                        f"{LABELS['fd_accept_many']} {where}",
                        "accepts per second",
                        "accepts/s",
                        rate("fd_accept_many"),
                        rate("c_accept4"),
                        LABELS["c_accept4"],
                        GOAL_VS_C,
                    )
                )
        for metric, unit, fig in (
            ("CPU per accept", "us/accept", cpu),
            ("accepts per second", "accepts/s", rate),
        ):
            suffix = "cpu" if unit == "us/accept" else "rate"
            for key in drains:
                if key == "fd_accept_many":
                    continue
                # fd.accept is the like-for-like rival of socket.accept; the rest face
                # accept_many.
                mine = "fd_accept" if key == "fd_accept" else "fd_accept_many"
                theirs = "stdlib_accept" if key == "fd_accept" else key
                results.append(
                    compare(
                        f"accept_{v}_{key}_{suffix}",
                        BENCH,
                        f"{LABELS[mine]} {where}",
                        metric,
                        unit,
                        fig(mine),
                        fig(theirs),
                        LABELS[theirs],
                    )
                )
    return results
