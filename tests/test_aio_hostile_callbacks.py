"""fdkit.aio takes nothing early (DESIGN.md 3b): what a program's own code meets when it runs
beside the loop (C code in the loop's thread, calls from other threads, the order and the names
of the loop's callbacks, a socket subclass) is what it meets beside asyncio's loop. Five of the
classes of behaviour in which a hostile pass found fdkit's io_uring engine unlike asyncio, each
as one script run on asyncio's own loop (the oracle) and on fdkit's loop with each engine, the
outputs compared:

1. C code blocking in the loop's thread is not interrupted (EINTR) by the loop's streams;
2. ``writer.close()`` or ``pause_reading()`` from another thread, as asyncio tolerates them;
3. a stream, a UDP socket and a pipe ready together are served in asyncio's order;
4. a socket subclass's ``recv`` is what the transport reads with;
5. the repr of a reading transport, and the callback names debug mode and a patched
   ``Handle._run`` see.

What the kernel holds for a connection (bytes, backlog, fds, memory) is in
``tests/test_aio_hostile_kernel.py``; the protocol and the waits both files use are in
``tests/helpers/aio_hostile.py``.

A script records what a program can observe (what a C call returned, what the peer read, which
callbacks ran and in which order, what was raised or logged) and returns it; the test asserts
that fdkit's record equals asyncio's. Where asyncio's answer is plain (no EINTR, the order the
sources became ready in), the test says so too, so that a broken oracle cannot make a wrong
answer pass.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import itertools
import json
import logging
import os
import re
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from helpers.aio_hostile import (
    HOST,
    Conn,
    finish,
    one_connection,
    outcome,
    read_all,
    result_within,
    until,
)
from helpers.aio_parity import (
    NEW_LOOP,
    FdkitEngine,
    Kind,
    LogRecords,
    both,
    both_run,
    close_server,
    each_engine,
    run_program,
    server_address,
    tcp_pair,
)

# --- 1. C code blocking in the loop's thread is not interrupted -----------------------------


def _blocking_c_calls(kind: Kind) -> dict[str, Any]:
    libc = ctypes.CDLL(None, use_errno=True)
    empty = select.epoll()  # nothing in it: epoll_wait(2) only times out
    events = ctypes.create_string_buffer(64)  # room for one struct epoll_event on any arch
    calls: list[tuple[int, str | None, bool]] = []
    sent = 0

    def trickle(peer: socket.socket) -> None:
        nonlocal sent
        for _ in range(5):
            time.sleep(0.02)
            peer.sendall(b"x" * 100)
            sent += 100

    try:
        with kind.loop() as loop:

            async def start() -> tuple[asyncio.AbstractServer, socket.socket, Conn]:
                return await one_connection()

            server, peer, conn = loop.run_until_complete(start())
            try:
                # Between run_until_complete calls, with the connection reading (not paused),
                # its peer sends while this thread is blocked in C code.
                for _ in range(3):
                    sender = threading.Thread(target=trickle, args=(peer,))
                    sender.start()
                    ctypes.set_errno(0)
                    start_t = time.monotonic()
                    rc = libc.epoll_wait(empty.fileno(), events, 1, 200)
                    err = ctypes.get_errno()
                    elapsed = time.monotonic() - start_t
                    sender.join()
                    calls.append(
                        (rc, errno.errorcode.get(err) if rc < 0 else None, elapsed >= 0.19)
                    )
                loop.run_until_complete(until(lambda: len(conn.data) == sent, 5))
                received = len(conn.data)
            finally:
                loop.run_until_complete(finish(server, peer, conn))
    finally:
        empty.close()
    return {"epoll_wait(200 ms)": calls, "all bytes received after": received == sent}


@each_engine
def test_blocking_c_call_in_the_loops_thread_gets_no_eintr(engine: FdkitEngine) -> None:
    """Between run_until_complete calls, with bytes arriving on a connection the loop reads,
    a raw epoll_wait(2) made by C code in the loop's thread (ctypes: no retry on EINTR, as
    Python's own calls have) times out after its 200 ms, as on asyncio's loop: nothing the
    loop set up interrupts the thread. The loop then receives every byte."""
    oracle, got = both(engine, _blocking_c_calls)
    assert oracle == {"epoll_wait(200 ms)": [(0, None, True)] * 3, "all bytes received after": True}
    assert got == oracle


# --- 2. writer.close() or pause_reading() from another thread --------------------------------


class _InAnotherThread(threading.Thread):
    """Makes ``call()`` after ``delay`` s (the loop waiting in its poll by then); ``raised``:
    the name of what it raised, or None."""

    def __init__(self, call: Callable[[], object], delay: float = 0.05) -> None:
        super().__init__()
        self.call = call
        self.delay = delay
        self.raised: str | None = "never called"

    def run(self) -> None:
        time.sleep(self.delay)
        try:
            self.call()
        except Exception as exc:
            self.raised = outcome(exc)
        else:
            self.raised = None


async def _writer_close_from_another_thread() -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    writers: list[asyncio.StreamWriter] = []
    handler_done = loop.create_future()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            await reader.read()
        finally:
            if not handler_done.done():
                handler_done.set_result("returned")

    server = await asyncio.start_server(handler, HOST, 0)
    peer = socket.create_connection(server_address(server))
    out: dict[str, Any] = {}
    try:
        await until(lambda: writers)
        writer = writers[0]
        thread = _InAnotherThread(writer.close)
        thread.start()
        await asyncio.sleep(0.3)  # nothing wakes the loop before this timer
        thread.join()
        out["raised in the thread"] = thread.raised
        out["is_closing()"] = writer.is_closing()
        out["wait_closed()"] = await result_within(asyncio.ensure_future(writer.wait_closed()))
        out["the handler's read()"] = await result_within(handler_done)
        out["the peer reads"] = read_all(peer, 100)
    finally:
        peer.close()
        for w in writers:
            w.transport.abort()
        await asyncio.sleep(0.01)
        await close_server(server)
    return out


async def _pause_reading_from_another_thread() -> dict[str, Any]:
    server, peer, conn = await one_connection()
    out: dict[str, Any] = {}
    try:
        thread = _InAnotherThread(conn.transport.pause_reading)
        thread.start()
        await asyncio.sleep(0.3)
        thread.join()
        out["raised in the thread"] = thread.raised
        out["is_reading()"] = conn.transport.is_reading()
        peer.sendall(b"sent while paused")
        await asyncio.sleep(0.1)
        out["received while paused"] = bytes(conn.data)
        conn.transport.resume_reading()
        await until(lambda: len(conn.data) >= 17, 2)
        out["received after resume_reading()"] = bytes(conn.data)
    finally:
        await finish(server, peer, conn)
    return out


@each_engine
@pytest.mark.parametrize("call", ["writer.close()", "transport.pause_reading()"])
def test_close_or_pause_from_another_thread(engine: FdkitEngine, call: str) -> None:
    """``writer.close()`` or ``transport.pause_reading()`` called from another thread while
    the loop waits in its poll: asyncio's loop raises nothing; the close takes effect once the
    loop wakes (``wait_closed()`` returns, the handler's read() ends, the peer reads EOF), the
    pause at once (nothing delivered until resume_reading())."""
    if call == "writer.close()":
        oracle, got = both_run(engine, _writer_close_from_another_thread)
        assert oracle == {
            "raised in the thread": None,
            "is_closing()": True,
            "wait_closed()": None,
            "the handler's read()": "returned",
            "the peer reads": b"",
        }
    else:
        oracle, got = both_run(engine, _pause_reading_from_another_thread)
        assert oracle == {
            "raised in the thread": None,
            "is_reading()": False,
            "received while paused": b"",
            "received after resume_reading()": b"sent while paused",
        }
    assert got == oracle


# --- 3. a stream, a UDP socket and a pipe ready in the same iteration -----------------------

SOURCES = ("stream", "datagram", "pipe")


async def _ready_together() -> dict[str, list[str]]:
    loop = asyncio.get_running_loop()
    log: list[str] = []

    class Stream(Conn):
        def data_received(self, data: bytes) -> None:
            log.append("stream")

    class Datagram(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
            log.append("datagram")

    class Pipe(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            log.append("pipe")

    protos: list[Conn] = []
    server = await loop.create_server(lambda: Stream(protos), HOST, 0)
    tcp_peer = socket.create_connection(server_address(server))
    udp, _ = await loop.create_datagram_endpoint(Datagram, local_addr=(HOST, 0))
    udp_peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r, w = os.pipe()
    pipe, _ = await loop.connect_read_pipe(Pipe, os.fdopen(r, "rb", buffering=0))
    udp_addr = udp.get_extra_info("sockname")
    send: dict[str, Callable[[], object]] = {
        "stream": lambda: tcp_peer.sendall(b"s"),
        "datagram": lambda: udp_peer.sendto(b"d", udp_addr),
        "pipe": lambda: os.write(w, b"p"),
    }
    out: dict[str, list[str]] = {}
    try:
        await until(lambda: protos and protos[0].made.done())
        await asyncio.sleep(0.02)
        for order in itertools.permutations(SOURCES):
            log.clear()
            # The loop is blocked here: all three become ready, in this order, before its poll.
            for name in order:
                send[name]()
                time.sleep(0.01)
            await until(lambda: len(log) == 3, 2)
            await asyncio.sleep(0.01)
            out[" ".join(order)] = list(log)
    finally:
        tcp_peer.close()
        udp_peer.close()
        os.close(w)
        udp.close()
        pipe.close()
        for p in protos:
            await p.close()
        await close_server(server)
        await asyncio.sleep(0.01)
    return out


@each_engine
def test_stream_datagram_and_pipe_ready_together_run_in_asyncios_order(
    engine: FdkitEngine,
) -> None:
    """A TCP stream, a UDP endpoint and a read pipe become ready while the loop is blocked,
    in each of the six orders: their callbacks (data_received, datagram_received) run in the
    order asyncio's loop runs them, which is the order they became ready in."""
    oracle, got = both_run(engine, _ready_together)
    assert oracle == {" ".join(o): list(o) for o in itertools.permutations(SOURCES)}
    assert got == oracle


# --- 4. a socket subclass's recv is what the transport reads with ---------------------------


class _UpperSocket(socket.socket):
    """A socket whose ``recv`` upper-cases what it reads and counts its calls."""

    recv_calls = 0

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        self.recv_calls += 1
        return super().recv(bufsize, flags).upper()


async def _read_through_subclass(how: str) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    peer, mine = tcp_pair()
    sock = _UpperSocket(mine.family, mine.type, mine.proto, fileno=mine.detach())
    protos: list[Conn] = []
    try:
        if how == "create_connection":
            await loop.create_connection(lambda: Conn(protos), sock=sock)
        else:
            await loop.connect_accepted_socket(lambda: Conn(protos), sock=sock)
        conn = protos[0]
        peer.sendall(b"hello")
        peer.shutdown(socket.SHUT_WR)
        await until(lambda: conn.eof, 5)
        await conn.close()
    finally:
        peer.close()
        sock.close()
    return {
        "received": bytes(conn.data),
        "eof": conn.eof,
        "recv override called": sock.recv_calls > 0,
    }


async def _subclass_recv() -> dict[str, dict[str, Any]]:
    return {
        how: await _read_through_subclass(how)
        for how in ("create_connection", "connect_accepted_socket")
    }


@each_engine
def test_socket_subclass_recv_is_called(engine: FdkitEngine) -> None:
    """A socket subclass overriding ``recv`` (websockets' tests pass one), given to
    create_connection(sock=...) or connect_accepted_socket(sock=...): the transport reads
    through the override, as asyncio's does (``self._sock.recv``); data_received gets what
    the override returns."""
    oracle, got = both_run(engine, _subclass_recv)
    expected = {"received": b"HELLO", "eof": True, "recv override called": True}
    assert oracle == {"create_connection": expected, "connect_accepted_socket": expected}
    assert got == oracle


# --- 5. what repr, debug mode and a patched Handle._run show ---------------------------------

_STATE = re.compile(r"\b(read|write)=(<[^>]*>|\w+)")


async def _transport_reprs() -> dict[str, dict[str, str]]:
    server, peer, conn = await one_connection()
    out: dict[str, dict[str, str]] = {}
    try:
        await asyncio.sleep(0.01)
        t = conn.transport
        out["reading"] = dict(_STATE.findall(repr(t)))
        t.pause_reading()
        out["paused"] = dict(_STATE.findall(repr(t)))
        t.resume_reading()
        await asyncio.sleep(0.01)
        out["resumed"] = dict(_STATE.findall(repr(t)))
    finally:
        await finish(server, peer, conn)
    return out


SLOW = 0.2


def _method_name(handle_repr: str) -> str:
    """The callback's name in a Handle's repr: ``_read_ready`` in
    ``<Handle _SelectorSocketTransport._read_ready() created at ...>``."""
    m = re.match(r"<Handle ([\w.<>]+)\(", handle_repr)
    return m.group(1).rsplit(".", 1)[-1] if m else handle_repr


async def _slow_callbacks_named() -> list[str]:
    loop = asyncio.get_running_loop()
    assert loop.get_debug()
    loop.slow_callback_duration = SLOW / 2

    class Slow(Conn):
        def data_received(self, data: bytes) -> None:
            time.sleep(SLOW)
            self.transport.write(b"ok")

    records = LogRecords()
    logger = logging.getLogger("asyncio")
    logger.addHandler(records)
    protos: list[Conn] = []
    server = await loop.create_server(lambda: Slow(protos), HOST, 0)
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
    return [
        _method_name(str(r.args[0]))
        for r in records.records
        if str(r.msg).startswith("Executing") and isinstance(r.args, tuple)
    ]


PATCHED_RUN_PROGRAM = (
    NEW_LOOP
    + """
import json, socket, time
if sys.argv[1] != "asyncio":
    import fdkit.aio  # the program imports its loop before the detector patches asyncio
when = sys.argv[2]
seen = []
original = asyncio.events.Handle._run

def _run(self):  # a slow-callback detector's: the names of the transports' and loop's callbacks
    owner = getattr(self._callback, "__self__", None)
    if isinstance(owner, (asyncio.BaseTransport, asyncio.AbstractEventLoop)):
        func = getattr(self._callback, "__func__", self._callback)
        seen.append(getattr(func, "__name__", type(func).__name__))
    original(self)

def patch():
    asyncio.events.Handle._run = _run

async def main():
    if when == "while the loop runs":
        patch()
    loop = asyncio.get_running_loop()
    made = []

    class Echo(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport
            made.append(self)

        def data_received(self, data):
            self.transport.write(data)

    server = await loop.create_server(Echo, "127.0.0.1", 0)
    peer = socket.create_connection(server.sockets[0].getsockname())
    peer.sendall(b"request")
    end = time.monotonic() + 5
    while time.monotonic() < end:  # until the echo is back
        try:
            if peer.recv(100, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                break
        except BlockingIOError:
            pass
        await asyncio.sleep(0.002)
    peer.close()
    for p in made:
        p.transport.close()
    server.close()
    await server.wait_closed()
    await asyncio.sleep(0.01)

if when == "before the loop is made":
    patch()
loop = new_loop(sys.argv[1])
try:
    loop.run_until_complete(main())
finally:
    loop.close()
print(json.dumps(sorted(set(seen))))
"""
)

PATCH_TIMES = ("before the loop is made", "while the loop runs")


def _patched_handle_run(kind: Kind) -> dict[str, list[str]]:
    """The names of the transport's and the loop's callbacks that a patched ``Handle._run``
    saw while a server accepted a connection and echoed a request (a child program each)."""
    out: dict[str, list[str]] = {}
    for when in PATCH_TIMES:
        r = run_program(kind, PATCHED_RUN_PROGRAM, when)
        assert r.returncode == 0, r.stderr[-3000:]
        out[when] = json.loads(r.stdout)
    return out


@each_engine
@pytest.mark.parametrize("what", ["repr", "debug mode", "patched Handle._run"])
def test_reading_transport_repr_and_callback_names(engine: FdkitEngine, what: str) -> None:
    """A reading transport's repr says ``read=polling`` (``read=idle`` while paused); debug
    mode's slow-callback warning for a slow data_received names asyncio's reader callback
    (``_read_ready``); a patched ``asyncio.events.Handle._run`` sees the transport's and the
    server's callbacks under asyncio's names (``_read_ready``, ``_accept_connection``...)."""
    if what == "repr":
        reprs = both_run(engine, _transport_reprs)
        idle = "<idle, bufsize=0>"
        assert reprs[0] == {
            "reading": {"read": "polling", "write": idle},
            "paused": {"read": "idle", "write": idle},
            "resumed": {"read": "polling", "write": idle},
        }
        assert reprs[1] == reprs[0]
    elif what == "debug mode":
        slow = both_run(engine, _slow_callbacks_named, debug=True)
        assert slow[0] == ["_read_ready"]
        assert slow[1] == slow[0]
    else:
        patched = both(engine, _patched_handle_run)
        for names in patched[0].values():
            assert {"_read_ready", "_accept_connection"} <= set(names), patched[0]
        assert patched[1] == patched[0]
