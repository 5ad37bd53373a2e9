"""fdkit.aio is asyncio's loop with another engine (DESIGN.md 3b): what a program sees of the
loop itself, in behaviours found by a hostile pass and in the partial denial of io_uring, each as
one script run on asyncio's own loop (the oracle) and on fdkit's loop with each engine, the
outputs compared.

1. an fd closed while registered with add_reader is released and feeds no later owner;
2. add_reader on what epoll cannot watch (a file, a directory, a closed fd) raises;
3. SystemExit or KeyboardInterrupt from data_received ends run_until_complete and loses no
   other event received with it;
4. debug mode reports a slow data_received;
5. loops garbage-collected without close() report nothing asyncio's loop does not;
6. io_uring partly denied (a seccomp filter) is detected, and the program runs on epoll;
7. run_forever's iterations, and ``_run_once`` called by hand or replaced on the instance.

What a stream protocol's callbacks get from their transport is in
``tests/test_aio_parity_protocols.py``.

A script records what a program can observe (which callbacks ran, with what, in which
context, what the peer read, what was raised, what was logged) and returns it; the test asserts
that fdkit's record equals asyncio's. Where asyncio's answer is plain (all the bytes, then EOF),
the test says so too, so that a broken oracle cannot make a wrong answer pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import NO_URING, is_open
from helpers.aio import python_env
from helpers.aio_parity import (
    ASYNCIO,
    NEW_LOOP,
    FdkitEngine,
    Kind,
    LogRecords,
    both,
    both_run,
    close_server,
    each_engine,
    fdkit_kind,
    run_program,
    server_address,
    tcp_pair,
)
from helpers.aio_parity_server import HOST, Server

# --- 1. a closed fd still registered with add_reader ----------------------------------------


async def _closed_while_registered() -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    a, peer = tcp_pair()
    new, new_peer = tcp_pair()  # made now, so that none of them takes a's number
    a.setblocking(False)
    number = a.fileno()
    stale: list[bytes | str] = []

    def on_readable() -> None:  # the callback of the fd's first owner, never removed
        try:
            stale.append(os.read(number, 100))
        except OSError as exc:
            stale.append(type(exc).__name__)
        loop.remove_reader(number)

    owner: socket.socket | None = None
    try:
        loop.add_reader(number, on_readable)
        await asyncio.sleep(0.02)  # the registration reaches the kernel
        a.close()  # without remove_reader: the program forgot it
        assert not is_open(number)
        # The number's next owner: another connection, given a's number.
        os.dup2(new.fileno(), number, inheritable=False)
        owner = socket.socket(fileno=number)
        new.close()
        await asyncio.sleep(0.02)
        try:
            peer_reads: bytes | str = peer.recv(100, socket.MSG_DONTWAIT)
        except BlockingIOError:
            peer_reads = "nothing: the closed socket is still open"
        new_peer.sendall(b"the new owner's bytes")
        # (asyncio: this peer's connection is closed, the bytes go nowhere or fail)
        with contextlib.suppress(OSError):
            peer.sendall(b"the first owner's peer's bytes")
        await asyncio.sleep(0.05)
        loop.remove_reader(number)
        try:
            owner_reads: bytes | str = owner.recv(100, socket.MSG_DONTWAIT)
        except BlockingIOError:
            owner_reads = "nothing: its bytes were taken"
    finally:
        for s in (a, new, new_peer, peer, owner):
            if s is not None:
                s.close()
    return {
        "the first owner's peer reads": peer_reads,
        "the stale callback read": stale,
        "the new owner reads": owner_reads,
    }


@each_engine
def test_closing_a_registered_fd_releases_it_and_feeds_no_later_owner(
    engine: FdkitEngine,
) -> None:
    """An fd closed while registered with add_reader (no remove_reader) is
    released at once (its peer reads EOF), and the stale callback never fires for the socket
    that gets the fd's number next: that socket reads its own bytes."""
    oracle, got = both_run(engine, _closed_while_registered)
    assert oracle == {
        "the first owner's peer reads": b"",
        "the stale callback read": [],
        "the new owner reads": b"the new owner's bytes",
    }
    assert got == oracle


# --- 2. add_reader on what epoll cannot watch ----------------------------------------------


def _unwatchable_fds(tmp: Path) -> Callable[[], Any]:
    async def script() -> list[tuple[str, Any, int, bool]]:
        loop = asyncio.get_running_loop()
        calls = 0

        def callback() -> None:
            nonlocal calls
            calls += 1

        (tmp / "file").write_bytes(b"a regular file")
        file_fd = os.open(tmp / "file", os.O_RDONLY)
        dir_fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)

        def closed() -> int:  # a number no fd has, right before add_reader
            n = os.open(os.devnull, os.O_RDONLY)
            os.close(n)
            return n

        out: list[tuple[str, Any, int, bool]] = []
        try:
            fds: list[tuple[str, Callable[[], int]]] = [
                ("file", lambda: file_fd),
                ("directory", lambda: dir_fd),
                ("closed fd", closed),
            ]
            for what, fd_of in fds:
                calls = 0
                fd = fd_of()
                outcome: Any
                try:
                    loop.add_reader(fd, callback)
                    outcome = "accepted"
                except OSError as exc:
                    outcome = (type(exc).__name__, errno.errorcode.get(exc.errno or 0))
                await asyncio.sleep(0.05)
                removed = loop.remove_reader(fd)
                out.append((what, outcome, calls, removed))
        finally:
            os.close(file_fd)
            os.close(dir_fd)
        return out

    return script


@each_engine
def test_add_reader_on_what_epoll_cannot_watch_raises(engine: FdkitEngine, tmp_path: Path) -> None:
    """Add_reader on a regular file or a directory raises PermissionError
    (EPERM), on a closed fd OSError (EBADF), as epoll does; the callback never runs (no spin)."""
    oracle, got = both_run(engine, _unwatchable_fds(tmp_path))
    assert oracle == [
        ("file", ("PermissionError", "EPERM"), 0, False),
        ("directory", ("PermissionError", "EPERM"), 0, False),
        ("closed fd", ("OSError", "EBADF"), 0, False),
    ]
    assert got == oracle


# --- 3. SystemExit / KeyboardInterrupt from data_received loses no other event --------------

BASE_EXCEPTION_PROGRAM = (
    NEW_LOOP
    + """
import gc, json, os, socket, time, warnings
warnings.simplefilter("ignore", ResourceWarning)  # the fd count below says what leaked
exc_name = sys.argv[2]
EXC = {"KeyboardInterrupt": KeyboardInterrupt, "SystemExit": SystemExit}[exc_name]

def nfds():
    return len(os.listdir("/proc/self/fd"))

base = nfds()
loop = new_loop(sys.argv[1])
made, eofs, lost = [], [], []
raised = []

class P(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
        made.append(self)

    def data_received(self, data):
        if data == b"raise" and not raised:
            raised.append(exc_name)
            raise EXC()

    def eof_received(self):
        eofs.append(made.index(self))

    def connection_lost(self, exc):
        lost.append(made.index(self))

async def until(cond, timeout):
    end = loop.time() + timeout
    while not cond() and loop.time() < end:
        await asyncio.sleep(0.005)

server = loop.run_until_complete(loop.create_server(P, "127.0.0.1", 0))
addr = server.sockets[0].getsockname()
a = socket.create_connection(addr)
b = socket.create_connection(addr)
loop.run_until_complete(until(lambda: len(made) == 2, 5))
others = []

def burst():
    # The loop is blocked here: three new connections, b's EOF and a's bytes that make
    # data_received raise wait for the same poll.
    others.extend(socket.create_connection(addr) for _ in range(3))
    b.shutdown(socket.SHUT_WR)
    a.sendall(b"raise")
    time.sleep(0.05)

loop.call_soon(burst)
out = {}
try:
    loop.run_until_complete(until(lambda: len(made) == 5 and eofs, 2))
    out["propagated"] = None
except EXC:
    out["propagated"] = exc_name
# The program goes on with the same loop: what was received with the exception is served.
loop.run_until_complete(until(lambda: len(made) == 5 and eofs, 1))
out["connections served"] = len(made)
out["EOFs delivered"] = eofs
for p in made:
    p.transport.close()
server.close()
loop.run_until_complete(server.wait_closed())
loop.run_until_complete(asyncio.sleep(0.01))
out["connections lost"] = sorted(lost)
loop.close()
for s in [a, b, *others]:
    s.close()
del made[:], server, p
gc.collect()
out["fds left after loop.close()"] = nfds() - base
print(json.dumps(out))
"""
)


@each_engine
@pytest.mark.parametrize("exc", ["KeyboardInterrupt", "SystemExit"])
def test_base_exception_from_data_received_loses_no_other_event(
    engine: FdkitEngine, exc: str
) -> None:
    """Data_received raising KeyboardInterrupt or SystemExit ends
    run_until_complete with it; the events received in the same poll (three new connections,
    another connection's EOF) are not lost: the program's next run serves them, and after
    loop.close() as many fds are left as with asyncio's loop (none)."""

    def script(kind: Kind) -> Any:
        r = run_program(kind, BASE_EXCEPTION_PROGRAM, exc)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout)

    oracle, got = both(engine, script)
    assert oracle == {
        "propagated": exc,
        "connections served": 5,
        "EOFs delivered": [1],
        "connections lost": [0, 1, 2, 3, 4],
        "fds left after loop.close()": 0,
    }
    assert got == oracle


# --- 4. debug mode reports a slow data_received ---------------------------------------------

SLOW = 0.25


async def _slow_data_received() -> int:
    loop = asyncio.get_running_loop()
    assert loop.get_debug()
    loop.slow_callback_duration = SLOW / 2
    protos: list[Server] = []

    class Slow(Server):
        def __init__(self) -> None:
            super().__init__()
            protos.append(self)

        def data_received(self, data: bytes) -> None:
            time.sleep(SLOW)
            self.transport.write(b"ok")

    records = LogRecords()
    logger = logging.getLogger("asyncio")
    logger.addHandler(records)
    server = await loop.create_server(Slow, HOST, 0)
    reader, writer = await asyncio.open_connection(*server_address(server))
    try:
        writer.write(b"request")
        await asyncio.wait_for(reader.readexactly(2), 5)
    finally:
        logger.removeHandler(records)
        writer.close()
        await writer.wait_closed()
        for p in protos:
            await p.close()
        await close_server(server)
    # "Executing <Handle ...> took 0.250 seconds": the callbacks that took SLOW or longer
    slow = [
        r
        for r in records.records
        if str(r.msg).startswith("Executing")
        and isinstance(r.args, tuple)
        and float(r.args[-1]) >= SLOW  # type: ignore[arg-type]
    ]
    return len(slow)


@each_engine
def test_debug_mode_reports_a_slow_data_received(engine: FdkitEngine) -> None:
    """In debug mode a data_received that blocks longer than
    ``slow_callback_duration`` is reported ("Executing ... took 0.250 seconds") on the
    asyncio logger, once."""
    oracle, got = both_run(engine, _slow_data_received, debug=True)
    assert oracle == 1
    assert got == oracle


# --- 5. garbage-collecting loops that were never closed -------------------------------------

NEVER_CLOSED_PROGRAM = (
    NEW_LOOP
    + '''
import gc, json, socket, warnings
warnings.simplefilter("ignore", ResourceWarning)  # "unclosed event loop": the program's fault
reports = []
sys.unraisablehook = lambda u: reports.append(f"{type(u.exc_value).__name__}: {u.exc_value}")
scenario = sys.argv[2]

async def busy(loop):
    """A loop left with everything open: a server, a connection both ways, a pending read,
    a pending future, a timer, a reader on a socket."""
    async def handler(reader, writer):
        await reader.read()

    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
    writer.write(b"x")
    a, b = socket.socketpair()
    loop.add_reader(a.fileno(), lambda: None)
    loop.call_later(3600, print)
    await asyncio.sleep(0.01)
    return [server, reader, writer, loop.create_task(reader.read()), loop.create_future(), a, b]

if scenario == "busy":
    for i in range(30):
        loop = new_loop(sys.argv[1])
        keep = loop.run_until_complete(busy(loop)) if i % 2 else []
        del loop, keep
        if i % 5 == 4:
            gc.collect()
elif scenario == "self-pipe finalized first":
    # The cyclic GC finalizes the objects of a cycle in the order of its lists: here the
    # loop's self-pipe socket comes before the loop (held from outside during a collection
    # in which the loop was reachable only through a container made after it), so the
    # socket is closed when BaseEventLoop.__del__ calls close().
    loop = new_loop(sys.argv[1])
    holder = [loop]
    ssock = loop._ssock
    del loop
    gc.collect()
    del ssock
    holder.clear()
gc.collect()
print(json.dumps(reports))
'''
)


@each_engine
@pytest.mark.parametrize("scenario", ["busy", "self-pipe finalized first"])
def test_gc_of_never_closed_loops_reports_nothing_asyncio_does_not(
    engine: FdkitEngine, scenario: str
) -> None:
    """Loops dropped without close() (idle, or with a server, connections,
    pending reads, futures, timers and readers), then collected: nothing reported
    ("Exception ignored in ...") that asyncio's loop does not report.

    What was once seen in 3,000 loops ("ValueError: Invalid file descriptor: -1") is
    asyncio's own: BaseEventLoop.__del__ calls close(), whose _close_self_pipe() reads
    ``self._ssock.fileno()``; when the cyclic GC has finalized the self-pipe socket first
    (its order among the objects of the garbage cycle depends on the GC lists' history), that
    is -1 and the selector raises. asyncio's own loop does it too (about as often over
    thousands of never-closed loops); the second scenario makes the order deterministic.
    fdkit's loop finds the socket finalized and reports nothing, in both.
    """

    def script(kind: Kind) -> list[str]:
        r = run_program(kind, NEVER_CLOSED_PROGRAM, scenario)
        assert r.returncode == 0, r.stderr[-3000:]
        reports: list[str] = json.loads(r.stdout)
        return reports

    oracle, got = both(engine, script)
    if scenario == "busy":
        assert oracle == [], oracle
    else:
        assert oracle == ["ValueError: Invalid file descriptor: -1"], oracle
    assert got == [], (got, oracle)


# --- 6. partial denial of io_uring ----------------------------------------------------------

DENIAL_PROGRAM = (
    NEW_LOOP
    + """
import json
import fdkit.aio, fdkit.uring

async def main():
    async def echo(reader, writer):
        writer.write(await reader.read(5))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
    writer.write(b"hello")
    data = await reader.read()
    writer.close()
    server.close()
    await server.wait_closed()
    loop = asyncio.get_running_loop()
    return data.decode(), getattr(loop, "engine", None), getattr(loop, "engine_reason", None)

out = {
    "uring.available()": list(fdkit.uring.available()),
    "engine_unavailable": fdkit.aio.engine_unavailable("io_uring"),
}
run = asyncio.run if sys.argv[1] == "asyncio" else fdkit.aio.run
try:
    out["data"], out["engine"], out["engine_reason"] = run(main())
except Exception as exc:
    out["data"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""
)

DENIAL_NAMED = re.compile(
    r"EPERM|not permitted|permission|denied|io_uring_(enter|register)", re.IGNORECASE
)


@pytest.mark.parametrize("syscall", ["enter", "register"])
def test_partial_denial_of_io_uring_is_detected(syscall: str) -> None:
    """Partial denial: a seccomp filter that lets io_uring_setup through but fails
    only io_uring_enter (or only io_uring_register) with EPERM. ``uring.available()`` says no,
    with a reason; ``fdkit.aio.run()`` runs the program on epoll, the default (its output is
    asyncio.run's under the same filter), and ``fdkit.aio.engine_unavailable("io_uring")``
    names the denial; ``fdkit doctor`` does not say "io_uring yes"."""
    fdkit_kind("io_uring")  # skips where io_uring is unavailable anyway
    wrapper = [sys.executable, str(NO_URING), "--deny", syscall, "--errno", "EPERM"]

    def script(kind: Kind) -> dict[str, Any]:
        r = run_program(kind, DENIAL_PROGRAM, wrapper=wrapper)
        if r.returncode == 77:
            pytest.skip("no seccomp filter for this architecture")
        assert r.returncode == 0, r.stderr[-3000:]
        out: dict[str, Any] = json.loads(r.stdout)
        return out

    oracle = script(ASYNCIO)
    assert oracle["data"] == "hello", oracle
    got = script(Kind("io_uring"))  # the program's own choice: fdkit.aio.run()
    assert got["data"] == oracle["data"], got
    available, why = got["uring.available()"]
    assert available is False, f"uring.available() under a denied io_uring_{syscall}: {got}"
    assert why, got
    assert got["engine"] == "epoll", got
    assert DENIAL_NAMED.search(got["engine_unavailable"] or ""), got
    doctor = subprocess.run(
        [*wrapper, sys.executable, "-m", "fdkit", "doctor"],
        capture_output=True, text=True, timeout=30, env=python_env(), check=False,
    )  # fmt: skip
    assert not re.search(r"^io_uring\s+yes", doctor.stdout, re.MULTILINE), doctor.stdout


# --- 7. run_forever's iterations ------------------------------------------------------------


def _iterations(kind: Kind) -> dict[str, Any]:
    """What a program sees of the loop's iterations: ``_run_once`` called by hand runs one;
    replaced on the instance from a callback, ``run_forever`` calls the replacement from the
    next iteration on; ``stop()`` ends ``run_forever`` after the iteration it was called in."""
    with kind.loop() as loop:
        ran: list[int] = []

        def chain(i: int) -> None:
            ran.append(i)
            if i < 5:
                loop.call_soon(chain, i + 1)

        loop.call_soon(chain, 0)
        loop._run_once()  # type: ignore[attr-defined]
        after_one = list(ran)
        loop._run_once()  # type: ignore[attr-defined]
        after_two = list(ran)

        calls: list[int] = []
        original = loop._run_once  # type: ignore[attr-defined]

        def counting() -> None:
            calls.append(len(ran))
            original()

        def replace() -> None:
            loop._run_once = counting  # type: ignore[attr-defined]

        def stop_at(n: int) -> None:
            ran.append(100 + n)
            if n == 3:
                loop.stop()
            else:
                loop.call_soon(stop_at, n + 1)

        loop.call_soon(replace)
        loop.call_soon(stop_at, 0)
        loop.run_forever()
        replaced_calls = list(calls)
        del loop._run_once  # type: ignore[attr-defined]
        loop.call_soon(stop_at, 2)
        loop.run_forever()  # the class's _run_once again: asyncio's on asyncio, fdkit's on fdkit
        return {
            "one _run_once": after_one,
            "two": after_two,
            "ran": ran,
            "replacement called": replaced_calls,
            "replacement not called after del": calls == replaced_calls,
        }


@each_engine
def test_iterations_as_run_forever_and_a_direct_call_make_them(engine: FdkitEngine) -> None:
    """``loop._run_once()`` called by hand runs exactly one iteration; ``run_forever`` runs
    iterations until ``stop()``, and calls a ``_run_once`` a callback put on the instance from
    the next iteration on, as asyncio's loop does."""
    oracle, got = both(engine, _iterations)
    assert oracle["one _run_once"] == [0], oracle
    assert oracle["replacement called"], oracle
    assert got == oracle
