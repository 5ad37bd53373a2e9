"""fdkit.aio takes nothing early (DESIGN.md 3b): the eleven classes of behaviour in
which a hostile pass found fdkit's io_uring engine unlike asyncio, each as one script run on
asyncio's own loop (the oracle) and on fdkit's loop with each engine, the outputs compared.

1. a paused connection handed to a new owner (dup, then abort) keeps its bytes in the kernel;
2. a connection closed with bytes unread is reset (RST), not ended (FIN);
3. a paused connection flooded by its peer does not grow the process;
4. connections wait in the backlog while the loop is stopped or blocked, and after
   ``server.close()`` and ``loop.close()``, for another owner of the listening socket;
5. an RLIMIT_NOFILE lowered after ``create_server`` bounds the fds accepts make;
6. C code blocking in the loop's thread is not interrupted (EINTR) by the loop's streams;
7. ``writer.close()`` or ``pause_reading()`` from another thread, as asyncio tolerates them;
8. a paused transport dropped without ``close()`` closes its connection when collected;
9. a stream, a UDP socket and a pipe ready together are served in asyncio's order;
10. a socket subclass's ``recv`` is what the transport reads with;
11. the repr of a reading transport, and the callback names debug mode and a patched
    ``Handle._run`` see.

A script records what a program can observe (what the peer or the fd's next owner read, which
callbacks ran and in which order, what was raised or reported, how far RSS and fd numbers went)
and returns it; the test asserts that fdkit's record equals asyncio's. Where asyncio's answer is
plain (all 5,000 bytes, a reset), the test says so too, so that a broken oracle cannot make a
wrong answer pass.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import gc
import itertools
import json
import logging
import os
import re
import select
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from helpers.aio_parity import (
    NEW_LOOP,
    FdkitEngine,
    Kind,
    LogRecords,
    both,
    both_run,
    close_server,
    each_engine,
    program_json,
    run_program,
    server_address,
    tcp_pair,
)

HOST = "127.0.0.1"


async def _until(cond: Callable[[], object], timeout: float = 5.0) -> None:
    """Lets the loop run until ``cond()`` holds or ``timeout`` passed (the record says which)."""
    end = time.monotonic() + timeout
    while not cond() and time.monotonic() < end:
        await asyncio.sleep(0.002)


def _outcome(exc: BaseException | None) -> str | None:
    return None if exc is None else type(exc).__name__


async def _result_within(fut: asyncio.Future[Any], timeout: float = 2.0) -> Any:
    """``fut``'s result, or a sentence saying it had none within ``timeout`` s (a script
    records what it saw rather than raising: a TimeoutError would read as a hung script)."""
    try:
        return await asyncio.wait_for(asyncio.shield(fut), timeout)
    except TimeoutError:
        return f"nothing within {timeout:g} s"


#: Where a paused transport was paused: before asyncio's first read of it, or after a read.
PAUSES = ("in connection_made", "after its first read")
REQUEST = b"a request"


class _Conn(asyncio.Protocol):
    """A server-side protocol that keeps its transport, its bytes and how the connection ended;
    pauses reading as ``pause`` (one of :data:`PAUSES`) says, if given."""

    def __init__(self, into: list[_Conn], *, pause: str | None = None) -> None:
        into.append(self)
        self.pause = pause
        self.transport: Any = None
        self.data = bytearray()
        self.calls = 0
        self.eof = False
        loop = asyncio.get_running_loop()
        self.made: asyncio.Future[None] = loop.create_future()
        self.lost: asyncio.Future[str | None] = loop.create_future()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        if self.pause == "in connection_made":
            transport.pause_reading()
        self.made.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.calls += 1
        self.data += data
        if self.pause == "after its first read" and self.calls == 1:
            self.transport.pause_reading()

    def eof_received(self) -> None:
        self.eof = True

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(_outcome(exc))

    async def close(self) -> None:
        """Closes the connection if the script has not (abort: whatever state it is in)."""
        if self.transport is not None and not self.lost.done():
            self.transport.abort()
            await _result_within(self.lost)


async def _one_connection(
    *, pause: str | None = None
) -> tuple[asyncio.AbstractServer, socket.socket, _Conn]:
    """A server with one connection from a blocking peer socket, its protocol made; paused
    as ``pause`` says (after reading :data:`REQUEST`, which the peer sends, if so)."""
    loop = asyncio.get_running_loop()
    protos: list[_Conn] = []
    server = await loop.create_server(lambda: _Conn(protos, pause=pause), HOST, 0)
    peer = socket.create_connection(server_address(server))
    try:
        await _until(lambda: protos)
        conn = protos[0]
        await asyncio.wait_for(conn.made, 5)
        if pause == "after its first read":
            peer.sendall(REQUEST)
            await _until(lambda: not conn.transport.is_reading())
        await asyncio.sleep(0.02)
    except BaseException:
        peer.close()
        for p in protos:
            await p.close()
        await close_server(server)
        raise
    return server, peer, conn


async def _finish(server: asyncio.AbstractServer, peer: socket.socket, *conns: _Conn) -> None:
    peer.close()
    for c in conns:
        await c.close()
    await close_server(server)


def _read_all(sock: socket.socket, want: int, timeout: float = 2.0) -> bytes | str:
    """What ``sock`` reads until ``want`` bytes, EOF or ``timeout`` s of silence; when it read
    nothing: ``b""`` for EOF, the error's name, or "nothing within ..."."""
    sock.settimeout(timeout)
    got = bytearray()
    try:
        while len(got) < want:
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
    except TimeoutError:
        if not got:
            return f"nothing within {timeout:g} s"
    except OSError as exc:
        if not got:
            return type(exc).__name__
    return bytes(got)


# --- 1. hand-off: a paused connection's bytes stay in the kernel for its next owner -----------

PAYLOAD = bytes(i % 251 for i in range(5000))


async def _hand_off(pause: str) -> dict[str, Any]:
    server, peer, conn = await _one_connection(pause=pause)
    owner: socket.socket | None = None
    try:
        for half in (PAYLOAD[:2500], PAYLOAD[2500:]):  # while the transport is paused
            peer.sendall(half)
            await asyncio.sleep(0.05)  # the loop runs
        owner = socket.socket(fileno=os.dup(conn.transport.get_extra_info("socket").fileno()))
        conn.transport.abort()
        lost = await _result_within(conn.lost)
        read = _read_all(owner, len(PAYLOAD))
    finally:
        if owner is not None:
            owner.close()
        await _finish(server, peer, conn)
    return {
        "data_received got": bytes(conn.data),
        "connection_lost": lost,
        "the new owner reads": len(read) if isinstance(read, bytes) else read,
        "the payload, in order": read == PAYLOAD,
    }


async def _hand_offs() -> dict[str, dict[str, Any]]:
    return {pause: await _hand_off(pause) for pause in PAUSES}


@each_engine
def test_hand_off_of_a_paused_connection_keeps_its_bytes(engine: FdkitEngine) -> None:
    """A server pauses reading (in connection_made, or after reading a request), the peer
    sends 5,000 bytes while the loop runs, the server dup()s the transport's socket and aborts
    the transport (as a hot restart hands a connection to its successor): the new owner reads
    all 5,000 bytes, as on asyncio's loop; the loop took none of them."""
    oracle, got = both_run(engine, _hand_offs)
    expected = {
        "connection_lost": None,
        "the new owner reads": 5000,
        "the payload, in order": True,
    }
    assert oracle == {
        "in connection_made": {"data_received got": b"", **expected},
        "after its first read": {"data_received got": REQUEST, **expected},
    }
    assert got == oracle


# --- 2. closing with bytes unread resets the connection --------------------------------------


async def _close_with_unread(pause: str) -> dict[str, Any]:
    server, peer, conn = await _one_connection(pause=pause)
    try:
        peer.sendall(b"bytes the server never reads")
        await asyncio.sleep(0.05)
        conn.transport.close()
        lost = await _result_within(conn.lost)
        await asyncio.sleep(0.05)
        read = _read_all(peer, 100)
    finally:
        await _finish(server, peer, conn)
    return {"data_received got": bytes(conn.data), "connection_lost": lost, "the peer reads": read}


async def _closes_with_unread() -> dict[str, dict[str, Any]]:
    return {pause: await _close_with_unread(pause) for pause in PAUSES}


@each_engine
def test_close_with_unread_bytes_resets_the_connection(engine: FdkitEngine) -> None:
    """A paused transport closed while the peer's bytes are unread in the kernel: the kernel
    sends RST, the peer's recv raises ConnectionResetError, as on asyncio's loop (not a clean
    EOF, which would tell the peer its bytes were taken)."""
    oracle, got = both_run(engine, _closes_with_unread)
    assert oracle == {
        pause: {
            "data_received got": b"" if pause == "in connection_made" else REQUEST,
            "connection_lost": None,
            "the peer reads": "ConnectionResetError",
        }
        for pause in PAUSES
    }
    assert got == oracle


# --- 3. a paused connection flooded by its peer does not grow the process --------------------

FLOOD_PROGRAM = (
    NEW_LOOP
    + """
import fcntl, gc, json, socket, struct, termios, threading, time
FLOOD = 64 << 20  # at most this much, for at most FLOOD_TIME seconds, each time
FLOOD_TIME = 0.2
MIB = 1 << 20
REQUEST = b"a request"

def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")

def queued(sock, request):  # bytes in a socket's receive (FIONREAD) or send (TIOCOUTQ) queue
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), request, b"\\0" * 4))[0]

loop = new_loop(sys.argv[1])
conns = []

class Paused(asyncio.Protocol):
    def __init__(self, pause):
        self.pause = pause
        self.data = b""

    def connection_made(self, transport):
        self.transport = transport
        if self.pause == "in connection_made":
            transport.pause_reading()
        conns.append(self)

    def data_received(self, data):
        self.data += data
        self.transport.pause_reading()

async def until(cond, timeout):
    end = time.monotonic() + timeout
    while not cond() and time.monotonic() < end:
        await asyncio.sleep(0.002)

CHUNK = bytes(MIB)

def flood(peer, sent):
    peer.settimeout(0.05)
    chunk = CHUNK
    end = time.monotonic() + FLOOD_TIME
    while sent[0] < FLOOD and time.monotonic() < end:
        try:
            sent[0] += peer.send(chunk)
        except TimeoutError:
            pass

async def blocked(flooder):  # a callback that blocks the loop while the flood runs
    flooder.join()

out, raw = {}, {}
for pause, loop_state in [
    ("in connection_made", "running"),
    ("after its first read", "running"),
    ("after its first read", "blocked in a callback"),
    ("after its first read", "stopped"),
]:
    server = loop.run_until_complete(loop.create_server(lambda: Paused(pause), "127.0.0.1", 0))
    peer = socket.create_connection(server.sockets[0].getsockname())
    loop.run_until_complete(until(lambda: conns, 5))
    conn = conns.pop()
    if pause == "after its first read":
        peer.sendall(REQUEST)
        loop.run_until_complete(until(lambda: conn.data, 5))
    loop.run_until_complete(asyncio.sleep(0.05))
    gc.collect()
    before = rss()
    sent = [0]
    flooder = threading.Thread(target=flood, args=(peer, sent))
    flooder.start()
    if loop_state == "running":
        loop.run_until_complete(until(lambda: not flooder.is_alive(), FLOOD_TIME + 5))
    elif loop_state == "blocked in a callback":
        loop.run_until_complete(blocked(flooder))
    flooder.join()
    loop.run_until_complete(asyncio.sleep(0.1))  # what the loop would still take
    gc.collect()
    growth = rss() - before
    server_sock = conn.transport.get_extra_info("socket")
    taken = sent[0] - queued(peer, termios.TIOCOUTQ) - queued(server_sock, termios.FIONREAD)
    out[f"paused {pause}, loop {loop_state}"] = {
        "data_received got": conn.data.decode(),
        "the kernel stopped the flood": sent[0] < FLOOD,
        "the server took 64 KiB or more from the kernel": taken >= 64 << 10,
        "RSS grew by 4 MiB or more": growth >= 4 * MIB,
    }
    raw[f"paused {pause}, loop {loop_state}"] = {
        "sent MiB": sent[0] / MIB, "taken": taken, "RSS growth MiB": growth / MIB,
    }
    peer.close()
    conn.transport.abort()
    server.close()
    loop.run_until_complete(server.wait_closed())
    loop.run_until_complete(asyncio.sleep(0.01))
loop.close()
print(json.dumps({"record": out, "measured": raw}))
"""
)


@each_engine
@pytest.mark.slow  # four floods, each in a child on each loop: 4-5 s
def test_paused_connection_flooded_by_its_peer_does_not_grow_the_process(
    engine: FdkitEngine,
) -> None:
    """A peer sends up to 64 MiB for 0.2 s to a paused connection (paused in
    connection_made, or after reading a request; the loop running, blocked in a callback or
    stopped meanwhile): on asyncio's loop the kernel's buffers fill and the peer's sends stop;
    the server takes nothing out of the kernel (what the peer sent is in the peer's send queue
    or the server's receive queue) and its RSS does not grow (by 4 MiB or more), nor on
    fdkit's loop."""

    def script(kind: Kind) -> dict[str, Any]:
        out: dict[str, Any] = program_json(kind, FLOOD_PROGRAM)
        return out

    oracle, got = both(engine, script)
    assert set(oracle["record"]) == {
        "paused in connection_made, loop running",
        *(
            f"paused after its first read, loop {s}"
            for s in ("running", "blocked in a callback", "stopped")
        ),
    }, oracle
    for name, record in oracle["record"].items():
        assert record == {
            "data_received got": "" if "connection_made" in name else REQUEST.decode(),
            "the kernel stopped the flood": True,
            "the server took 64 KiB or more from the kernel": False,
            "RSS grew by 4 MiB or more": False,
        }, oracle
    assert got["record"] == oracle["record"], (got, oracle)


# --- 4. accept hoarding: connections stay in the backlog until asyncio would accept ----------


def _accept_all(listener: socket.socket, wait: float = 0.2) -> list[bytes]:
    """Accepts on ``listener`` until nothing comes for ``wait`` s; what each connection sent."""
    listener.settimeout(wait)
    got: list[bytes] = []
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            break
        with conn:
            conn.settimeout(1.0)
            try:
                got.append(conn.recv(100))
            except OSError as exc:
                got.append(type(exc).__name__.encode())
    return sorted(got)


def _hoarding(kind: Kind) -> dict[str, Any]:
    n = 5
    out: dict[str, Any] = {}
    clients: list[socket.socket] = []
    made: list[Any] = []

    class Made(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            made.append(transport)

    def connect(tag: str, addr: tuple[str, int]) -> None:
        for i in range(n):
            c = socket.create_connection(addr)
            clients.append(c)
            c.sendall(b"%s %d" % (tag.encode(), i))
        time.sleep(0.05)  # every handshake done: all n in the listener's backlog

    listener = socket.create_server((HOST, 0))
    # The listening socket's other owner: a sibling worker, or a successor it is handed to.
    sibling = listener.dup()
    try:
        with kind.loop() as loop:
            server = loop.run_until_complete(loop.create_server(Made, sock=listener))
            addr = server_address(server)
            loop.run_until_complete(asyncio.sleep(0.05))  # serving (on the ring: accept armed)

            connect("stopped", addr)  # between run_until_complete calls
            out["loop stopped: the sibling accepts"] = _accept_all(sibling)

            async def blocked() -> list[bytes]:
                connect("blocked", addr)
                return _accept_all(sibling)

            out["loop blocked in a callback: the sibling accepts"] = loop.run_until_complete(
                blocked()
            )

            connect("closed", addr)  # then server.close() and loop.close(): the hand-off
            server.close()
            loop.run_until_complete(server.wait_closed())
            # asyncio's server.close() closes the socket it was given (the sibling's dup stays)
            out["the socket given to create_server, after server.close()"] = (
                "closed" if listener.fileno() == -1 else "open"
            )
            loop.run_until_complete(asyncio.sleep(0.05))  # what it accepted reaches the protocol
            out["the loop accepted"] = len(made)
            for t in made:
                t.abort()
            loop.run_until_complete(asyncio.sleep(0.01))
        out["after server.close() and loop.close(): the successor accepts"] = _accept_all(sibling)
    finally:
        for c in clients:
            c.close()
        sibling.close()
        listener.close()
    return out


@each_engine
def test_connections_stay_in_the_backlog_until_the_loop_accepts(engine: FdkitEngine) -> None:
    """Connections that arrive while the loop is stopped (between run_until_complete calls)
    or blocked in a callback stay in the listening socket's backlog, where another owner of
    the socket (a pre-fork sibling, a successor it is handed to) accepts them all; those
    waiting when ``server.close()`` (which closes the socket given to ``create_server(sock=)``,
    not its dup) and ``loop.close()`` run are left there too, not reset, for the successor.
    The loop itself accepts none of them, as on asyncio's loop."""
    oracle, got = both(engine, _hoarding)
    assert oracle == {
        "loop stopped: the sibling accepts": [b"stopped %d" % i for i in range(5)],
        "loop blocked in a callback: the sibling accepts": [b"blocked %d" % i for i in range(5)],
        "the socket given to create_server, after server.close()": "closed",
        "the loop accepted": 0,
        "after server.close() and loop.close(): the successor accepts": [
            b"closed %d" % i for i in range(5)
        ],
    }
    assert got == oracle


# --- 5. RLIMIT_NOFILE lowered after create_server bounds the accepted fds --------------------

RLIMIT_PROGRAM = (
    NEW_LOOP
    + '''
import json, resource, socket, subprocess, time
LIMIT = 64
N = 100
CLIENTS = """
import socket, sys
sys.stdin.readline()  # "go": connect once the server's limit is lowered
conns = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(int(sys.argv[2]))]
print("connected", flush=True)
sys.stdin.read()
"""

loop = new_loop(sys.argv[1])
messages = []
loop.set_exception_handler(lambda _loop, ctx: messages.append(ctx["message"]))
transports = []
fds = []

class Made(asyncio.Protocol):
    def connection_made(self, transport):
        transports.append(transport)
        fds.append(transport.get_extra_info("socket").fileno())

async def until(cond, timeout):
    end = time.monotonic() + timeout
    while not cond() and time.monotonic() < end:
        await asyncio.sleep(0.005)

server = loop.run_until_complete(loop.create_server(Made, "127.0.0.1", 0, backlog=N))
port = server.sockets[0].getsockname()[1]
loop.run_until_complete(asyncio.sleep(0.05))
clients = subprocess.Popen(
    [sys.executable, "-c", CLIENTS, str(port), str(N)],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, hard))
clients.stdin.write("go\\n")
clients.stdin.flush()
connected = clients.stdout.readline().strip()  # all N in the backlog (or accepted)
loop.run_until_complete(asyncio.sleep(0.5))
out = {
    "clients": connected,
    "accepted some": len(fds) > 0,
    "highest accepted fd": max(fds) if max(fds, default=0) >= LIMIT else f"below {LIMIT}",
    "reported": sorted(set(messages)),
}
# The limit raised again: the loop's retry accepts the rest.
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
loop.run_until_complete(until(lambda: len(fds) == N, 5))
out["accepted once the limit is raised"] = len(fds)
clients.stdin.close()
clients.wait(10)
for t in transports:
    t.close()
server.close()
loop.run_until_complete(server.wait_closed())
loop.run_until_complete(asyncio.sleep(0.01))
loop.close()
print(json.dumps(out))
'''
)


@each_engine
def test_rlimit_nofile_lowered_after_create_server_is_obeyed(engine: FdkitEngine) -> None:
    """RLIMIT_NOFILE lowered to 64 after create_server, then 100 clients connect: the loop
    accepts up to the limit and no further (no accepted fd numbered 64 or more), reports
    "socket.accept() out of system resource" and, once the limit is raised again, accepts the
    rest on its retry, as asyncio's loop does."""

    def script(kind: Kind) -> dict[str, Any]:
        out: dict[str, Any] = program_json(kind, RLIMIT_PROGRAM)
        return out

    oracle, got = both(engine, script)
    assert oracle == {
        "clients": "connected",
        "accepted some": True,
        "highest accepted fd": "below 64",
        "reported": ["socket.accept() out of system resource"],
        "accepted once the limit is raised": 100,
    }
    assert got == oracle


# --- 6. C code blocking in the loop's thread is not interrupted -----------------------------


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

            async def start() -> tuple[asyncio.AbstractServer, socket.socket, _Conn]:
                return await _one_connection()

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
                loop.run_until_complete(_until(lambda: len(conn.data) == sent, 5))
                received = len(conn.data)
            finally:
                loop.run_until_complete(_finish(server, peer, conn))
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


# --- 7. writer.close() or pause_reading() from another thread --------------------------------


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
            self.raised = _outcome(exc)
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
        await _until(lambda: writers)
        writer = writers[0]
        thread = _InAnotherThread(writer.close)
        thread.start()
        await asyncio.sleep(0.3)  # nothing wakes the loop before this timer
        thread.join()
        out["raised in the thread"] = thread.raised
        out["is_closing()"] = writer.is_closing()
        out["wait_closed()"] = await _result_within(asyncio.ensure_future(writer.wait_closed()))
        out["the handler's read()"] = await _result_within(handler_done)
        out["the peer reads"] = _read_all(peer, 100)
    finally:
        peer.close()
        for w in writers:
            w.transport.abort()
        await asyncio.sleep(0.01)
        await close_server(server)
    return out


async def _pause_reading_from_another_thread() -> dict[str, Any]:
    server, peer, conn = await _one_connection()
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
        await _until(lambda: len(conn.data) >= 17, 2)
        out["received after resume_reading()"] = bytes(conn.data)
    finally:
        await _finish(server, peer, conn)
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


# --- 8. a paused transport dropped without close() ------------------------------------------


async def _dropped_paused_transport(pause: str) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    protos: list[_Conn] = []
    lost: list[str | None] = []
    server = await loop.create_server(lambda: _Conn(protos, pause=pause), HOST, 0)
    peer = socket.create_connection(server_address(server))
    try:
        await _until(lambda: protos and protos[0].made.done())
        if pause == "after its first read":
            peer.sendall(REQUEST)
            await _until(lambda: not protos[0].transport.is_reading())
        protos[0].lost.add_done_callback(lambda f: lost.append(f.result()))
        await asyncio.sleep(0.02)
        # The program forgets the connection: no close(), no reference left.
        protos.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)  # "unclosed transport"
            gc.collect()
            await asyncio.sleep(0.05)
            gc.collect()
        read = _read_all(peer, 100)
    finally:
        peer.close()
        if sys.version_info[:2] == (3, 12):
            # 3.12's Server counts its connections (_active_count): one whose transport is
            # collected without close() never detaches, and wait_closed() waits for ever, on
            # asyncio's loop as on fdkit's (3.11 does not wait, 3.13 holds a WeakSet).
            server.close()
        else:
            await close_server(server)
    return {"the peer reads": read, "connection_lost calls": lost}


async def _dropped_paused_transports() -> dict[str, dict[str, Any]]:
    return {pause: await _dropped_paused_transport(pause) for pause in PAUSES}


@each_engine
def test_paused_transport_dropped_without_close_closes_its_connection(
    engine: FdkitEngine,
) -> None:
    """A paused transport (and its protocol) dropped without close() and collected: its
    socket is closed (asyncio's ``__del__``, with a ResourceWarning) and the peer reads EOF,
    without connection_lost, as on asyncio's loop; nothing holds the connection open."""
    oracle, got = both_run(engine, _dropped_paused_transports)
    assert oracle == {
        pause: {"the peer reads": b"", "connection_lost calls": []} for pause in PAUSES
    }
    assert got == oracle


# --- 9. a stream, a UDP socket and a pipe ready in the same iteration -----------------------

SOURCES = ("stream", "datagram", "pipe")


async def _ready_together() -> dict[str, list[str]]:
    loop = asyncio.get_running_loop()
    log: list[str] = []

    class Stream(_Conn):
        def data_received(self, data: bytes) -> None:
            log.append("stream")

    class Datagram(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
            log.append("datagram")

    class Pipe(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            log.append("pipe")

    protos: list[_Conn] = []
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
        await _until(lambda: protos and protos[0].made.done())
        await asyncio.sleep(0.02)
        for order in itertools.permutations(SOURCES):
            log.clear()
            # The loop is blocked here: all three become ready, in this order, before its poll.
            for name in order:
                send[name]()
                time.sleep(0.01)
            await _until(lambda: len(log) == 3, 2)
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


# --- 10. a socket subclass's recv is what the transport reads with --------------------------


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
    protos: list[_Conn] = []
    try:
        if how == "create_connection":
            await loop.create_connection(lambda: _Conn(protos), sock=sock)
        else:
            await loop.connect_accepted_socket(lambda: _Conn(protos), sock=sock)
        conn = protos[0]
        peer.sendall(b"hello")
        peer.shutdown(socket.SHUT_WR)
        await _until(lambda: conn.eof, 5)
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


# --- 11. what repr, debug mode and a patched Handle._run show --------------------------------

_STATE = re.compile(r"\b(read|write)=(<[^>]*>|\w+)")


async def _transport_reprs() -> dict[str, dict[str, str]]:
    server, peer, conn = await _one_connection()
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
        await _finish(server, peer, conn)
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

    class Slow(_Conn):
        def data_received(self, data: bytes) -> None:
            time.sleep(SLOW)
            self.transport.write(b"ok")

    records = LogRecords()
    logger = logging.getLogger("asyncio")
    logger.addHandler(records)
    protos: list[_Conn] = []
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
