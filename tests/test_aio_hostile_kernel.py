"""fdkit.aio takes nothing early (DESIGN.md 3b): what the kernel holds for a connection (its
bytes, its place in the backlog, its fd, the memory its peer would fill) stays in the kernel
until asyncio's loop would take it. Six of the classes of behaviour in which a hostile pass found
fdkit's io_uring engine unlike asyncio, each as one script run on asyncio's own loop (the
oracle) and on fdkit's loop with each engine, the outputs compared:

1. a paused connection handed to a new owner (dup, then abort) keeps its bytes in the kernel;
2. a connection closed with bytes unread is reset (RST), not ended (FIN);
3. a paused connection flooded by its peer does not grow the process;
4. connections wait in the backlog while the loop is stopped or blocked, and after
   ``server.close()`` and ``loop.close()``, for another owner of the listening socket;
5. an RLIMIT_NOFILE lowered after ``create_server`` bounds the fds accepts make;
6. a paused transport dropped without ``close()`` closes its connection when collected.

The other classes (the loop's thread, other threads, the order and the names of callbacks, a
socket subclass) are in ``tests/test_aio_hostile_callbacks.py``; the protocol and the waits
both files use are in ``tests/helpers/aio_hostile.py``.

A script records what a program can observe (what the peer or the fd's next owner read, which
callbacks ran, what was raised or reported, how far RSS and fd numbers went) and returns it; the
test asserts that fdkit's record equals asyncio's. Where asyncio's answer is plain (all 5,000
bytes, a reset), the test says so too, so that a broken oracle cannot make a wrong answer pass.
"""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import sys
import time
import warnings
from typing import Any

import pytest

from helpers.aio_hostile import (
    HOST,
    PAUSES,
    REQUEST,
    Conn,
    finish,
    one_connection,
    read_all,
    result_within,
    until,
)
from helpers.aio_parity import (
    NEW_LOOP,
    FdkitEngine,
    Kind,
    both,
    both_run,
    close_server,
    each_engine,
    program_json,
    server_address,
)

# --- 1. hand-off: a paused connection's bytes stay in the kernel for its next owner -----------

PAYLOAD = bytes(i % 251 for i in range(5000))


async def _hand_off(pause: str) -> dict[str, Any]:
    server, peer, conn = await one_connection(pause=pause)
    owner: socket.socket | None = None
    try:
        for half in (PAYLOAD[:2500], PAYLOAD[2500:]):  # while the transport is paused
            peer.sendall(half)
            await asyncio.sleep(0.05)  # the loop runs
        owner = socket.socket(fileno=os.dup(conn.transport.get_extra_info("socket").fileno()))
        conn.transport.abort()
        lost = await result_within(conn.lost)
        read = read_all(owner, len(PAYLOAD))
    finally:
        if owner is not None:
            owner.close()
        await finish(server, peer, conn)
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
    server, peer, conn = await one_connection(pause=pause)
    try:
        peer.sendall(b"bytes the server never reads")
        await asyncio.sleep(0.05)
        conn.transport.close()
        lost = await result_within(conn.lost)
        await asyncio.sleep(0.05)
        read = read_all(peer, 100)
    finally:
        await finish(server, peer, conn)
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


# --- 6. a paused transport dropped without close() ------------------------------------------


async def _dropped_paused_transport(pause: str) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    protos: list[Conn] = []
    lost: list[str | None] = []
    server = await loop.create_server(lambda: Conn(protos, pause=pause), HOST, 0)
    peer = socket.create_connection(server_address(server))
    try:
        await until(lambda: protos and protos[0].made.done())
        if pause == "after its first read":
            peer.sendall(REQUEST)
            await until(lambda: not protos[0].transport.is_reading())
        protos[0].lost.add_done_callback(lambda f: lost.append(f.result()))
        await asyncio.sleep(0.02)
        # The program forgets the connection: no close(), no reference left.
        protos.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)  # "unclosed transport"
            gc.collect()
            await asyncio.sleep(0.05)
            gc.collect()
        read = read_all(peer, 100)
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
