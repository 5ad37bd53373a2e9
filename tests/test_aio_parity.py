"""fdkit.aio is asyncio's loop with another engine (DESIGN.md 3b): twelve behaviours found by a
hostile pass, and the partial denial of io_uring, each as one script run on
asyncio's own loop (the oracle) and on fdkit's loop with each engine, the outputs compared.

A script records what a program can observe (which callbacks ran, with what, in which
context, what the peer read, what was raised, what was logged) and returns it; the test asserts
that fdkit's record equals asyncio's. Where asyncio's answer is plain (all the bytes, then EOF),
the test says so too, so that a broken oracle cannot make a wrong answer pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import errno
import fcntl
import json
import logging
import os
import re
import socket
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Coroutine, Sequence
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
    send_what_fits,
    server_address,
    tcp_pair,
)

HOST = "127.0.0.1"
MAX_READ = 256 * 1024  # asyncio's socket transport reads at most this much per data_received


class _Server(asyncio.Protocol):
    """A server-side protocol that keeps its transport and says when the connection is lost."""

    def __init__(self) -> None:
        self.transport: Any = None
        self.made: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.lost: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.made.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(type(exc).__name__ if exc else None)

    async def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
            await asyncio.wait_for(asyncio.shield(self.lost), 5)


# --- 1. every connection's callbacks in the context asyncio gives it -------------------------

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("parity_request", default="unset")


async def _contextvars_per_connection() -> list[tuple[int, str, str]]:
    loop = asyncio.get_running_loop()
    seen: list[tuple[int, str, str]] = []
    protos: list[_Server] = []

    class Request(_Server):
        def __init__(self) -> None:
            super().__init__()
            protos.append(self)
            self.n = len(protos)
            self._saw("factory")

        def _saw(self, where: str) -> None:
            seen.append((self.n, where, VAR.get()))
            VAR.set(f"set by {where} of connection {self.n}")

        def connection_made(self, transport: Any) -> None:
            self._saw("connection_made")
            super().connection_made(transport)

        def data_received(self, data: bytes) -> None:
            self._saw("data_received")
            self.transport.write(b"ok")

        def eof_received(self) -> None:
            self._saw("eof_received")

    VAR.set("set before create_server")
    server = await loop.create_server(Request, HOST, 0)
    VAR.set("set after create_server")
    for _ in range(2):  # one connection after the other: 1 is served and gone before 2 comes
        reader, writer = await asyncio.open_connection(*server_address(server))
        for _ in range(2):
            writer.write(b"request")
            assert await reader.readexactly(2) == b"ok"
        writer.write_eof()
        assert await protos[-1].lost is None
        writer.close()
        await writer.wait_closed()
    await close_server(server)
    return seen


@each_engine
def test_contextvars_each_connection_in_its_own_context(engine: FdkitEngine) -> None:
    """The protocol factory, connection_made, data_received and eof_received
    of connection 2 see the values asyncio shows them, never one set while serving
    connection 1 (a request id leaking from one client's connection to the next)."""
    oracle, got = both_run(engine, _contextvars_per_connection)
    assert not any(v.endswith("of connection 1") for n, _, v in oracle if n == 2), oracle
    assert got == oracle


# --- 2. a connection reset before the loop accepts it ----------------------------------------


def _reset_before_accept(host: str) -> Callable[[], Coroutine[Any, Any, list[Any]]]:
    async def main() -> list[tuple[str | None, bytes, list[str]]]:
        loop = asyncio.get_running_loop()
        n = 3
        record: list[tuple[str | None, bytes, list[str]]] = []
        all_lost = loop.create_future()

        class Collect(asyncio.Protocol):
            def __init__(self) -> None:
                self.peer: str | None = None
                self.data = b""
                self.events: list[str] = []

            def connection_made(self, transport: Any) -> None:
                # The peer's address as accept(2) gave it, though the peer is gone.
                self.peer = transport.get_extra_info("peername")[0]

            def data_received(self, data: bytes) -> None:
                self.data += data

            def eof_received(self) -> None:
                self.events.append("eof")

            def connection_lost(self, exc: Exception | None) -> None:
                self.events.append(f"lost {type(exc).__name__ if exc else None}")
                record.append((self.peer, self.data, self.events))
                if len(record) == n and not all_lost.done():
                    all_lost.set_result(None)

        server = await loop.create_server(Collect, host, 0)
        await asyncio.sleep(0.01)  # the server is accepting (on the ring: the accept is armed)
        # The loop is blocked here: the kernel completes the handshakes, nothing accepts them.
        for i in range(n):
            c = socket.create_connection(server_address(server))
            c.sendall(b"request %d" % i)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()  # RST
        with contextlib.suppress(TimeoutError):  # what did not come is missing from the record
            await asyncio.wait_for(all_lost, 1.0)
        await close_server(server)
        return sorted(record)

    return main


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@each_engine
@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_reset_before_accept_delivers_what_asyncio_delivers(engine: FdkitEngine, host: str) -> None:
    """Connections that send bytes and reset before the loop accepts them
    get connection_made (with the peer's address), their bytes, then
    connection_lost(ConnectionResetError), as on asyncio's loop; they do not vanish with their
    bytes. IPv4 and IPv6: the address of a reset connection is read with SO_PEERNAME, whose
    buffer must fit the family's sockaddr exactly."""
    if host == "::1" and not _has_ipv6_loopback():
        pytest.skip("no IPv6 loopback here")
    oracle, got = both_run(engine, _reset_before_accept(host))
    expected = [(host, b"request %d" % i, ["lost ConnectionResetError"]) for i in range(3)]
    assert oracle == expected, oracle
    assert got == oracle


# --- 3. writes reach the kernel before anything can observe their absence --------------------


async def _write_then_shutdown() -> bytes:
    loop = asyncio.get_running_loop()
    protos: list[_Server] = []

    class WriteThenShutdown(_Server):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            protos.append(self)
            transport.write(b"the reply, then FIN")
            transport.get_extra_info("socket").shutdown(socket.SHUT_WR)

    server = await loop.create_server(WriteThenShutdown, HOST, 0)
    reader, writer = await asyncio.open_connection(*server_address(server))
    try:
        data = await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
        for p in protos:
            await p.close()
        await close_server(server)
    return data


@each_engine
def test_write_then_shutdown_of_the_transports_socket(engine: FdkitEngine) -> None:
    """``transport.write(b)`` then ``get_extra_info("socket")
    .shutdown(SHUT_WR)``: the peer reads the bytes, then EOF (the FIN does not overtake
    them)."""
    oracle, got = both_run(engine, _write_then_shutdown)
    assert oracle == b"the reply, then FIN"
    assert got == oracle


def _write_while_stopped(kind: Kind) -> bytes | str:
    with kind.loop() as loop:
        holder: list[_Server] = []

        def factory() -> _Server:
            holder.append(_Server())
            return holder[-1]

        server = loop.run_until_complete(loop.create_server(factory, HOST, 0))
        peer = socket.create_connection(server_address(server))
        try:
            loop.run_until_complete(asyncio.wait_for(_made(holder), 5))
            holder[0].transport.write(b"written while the loop is stopped")
            peer.settimeout(0.5)  # the loop is not running: nothing else will send it
            try:
                got: bytes | str = peer.recv(100)
            except TimeoutError:
                got = "nothing within 0.5 s"
        finally:
            peer.close()
            for p in holder:
                loop.run_until_complete(p.close())
            loop.run_until_complete(close_server(server))
    return got


async def _made(holder: Sequence[_Server]) -> None:
    while not holder:
        await asyncio.sleep(0.001)
    await holder[0].made


@each_engine
def test_write_while_the_loop_is_stopped_is_sent_at_once(engine: FdkitEngine) -> None:
    """A ``transport.write()`` made while the loop is not running is on
    the wire when it returns: the peer reads it with the loop still stopped."""
    oracle, got = both(engine, _write_while_stopped)
    assert oracle == b"written while the loop is stopped"
    assert got == oracle


async def _write_then_block() -> bytes | str:
    loop = asyncio.get_running_loop()
    peer_saw: asyncio.Future[bytes | str] = loop.create_future()
    peers: list[socket.socket] = []
    protos: list[_Server] = []

    class ReplyThenBlock(_Server):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            protos.append(self)

        def data_received(self, data: bytes) -> None:
            self.transport.write(b"reply")
            time.sleep(0.1)  # blocking code after the write, in the same callback
            try:
                got: bytes | str = peers[0].recv(100, socket.MSG_DONTWAIT)
            except BlockingIOError:
                got = "nothing on the wire during the sleep"
            if not peer_saw.done():
                peer_saw.set_result(got)

    server = await loop.create_server(ReplyThenBlock, HOST, 0)
    peers.append(socket.create_connection(server_address(server)))
    try:
        peers[0].sendall(b"request")
        return await asyncio.wait_for(peer_saw, 5)
    finally:
        peers[0].close()
        for p in protos:
            await p.close()
        await close_server(server)


@each_engine
def test_write_then_blocking_code_in_the_same_callback(engine: FdkitEngine) -> None:
    """Data_received writes a reply then runs blocking code: the reply is
    on the wire during the blocking code (the peer reads it then)."""
    oracle, got = both_run(engine, _write_then_block)
    assert oracle == b"reply"
    assert got == oracle


# --- 4. data_received: never again after it raised; at most 256 KiB a call ------------------


async def _data_received_raises() -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    handled: list[str] = []
    loop.set_exception_handler(lambda _loop, ctx: handled.append(ctx["message"]))
    protos: list[FailingParser] = []

    class FailingParser(_Server):
        def __init__(self) -> None:
            super().__init__()
            protos.append(self)
            self.calls = 0
            self.calls_after = 0
            self.bytes_after = 0

        def data_received(self, data: bytes) -> None:
            self.calls += 1
            if self.calls > 1:
                self.calls_after += 1
                self.bytes_after += len(data)
                return
            raise ValueError("the parser failed")

    server = await loop.create_server(FailingParser, HOST, 0)
    peer = socket.create_connection(server_address(server))
    try:
        await _made(protos)
        # Megabytes queued while the loop is blocked here: one poll finds them all.
        sent = send_what_fits(peer, 8 << 20)
        time.sleep(0.05)
        lost = await asyncio.wait_for(protos[0].lost, 5)
        await asyncio.sleep(0.05)  # anything that would still come
    finally:
        peer.close()
        await close_server(server)
    p = protos[0]
    return {
        "sent over 512 KiB": sent > 2 * MAX_READ,
        "data_received calls after it raised": p.calls_after,
        "bytes handed over after it raised": p.bytes_after,
        "connection_lost": lost,
        "exception handler": handled,
    }


@each_engine
def test_data_received_is_not_called_again_after_it_raised(engine: FdkitEngine) -> None:
    """A data_received that raised gets no more bytes (the transport is
    closed at once by ``_fatal_error``), however much was already received."""
    oracle, got = both_run(engine, _data_received_raises)
    assert oracle["data_received calls after it raised"] == 0, oracle
    assert got == oracle


async def _chunk_sizes() -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    protos: list[Sizes] = []

    class Sizes(_Server):
        def __init__(self) -> None:
            super().__init__()
            protos.append(self)
            self.sizes: list[int] = []
            self.eof: asyncio.Future[None] = loop.create_future()

        def data_received(self, data: bytes) -> None:
            self.sizes.append(len(data))

        def eof_received(self) -> None:
            self.eof.set_result(None)

    server = await loop.create_server(Sizes, HOST, 0)
    peer = socket.create_connection(server_address(server))
    try:
        await _made(protos)
        sent = send_what_fits(peer, 8 << 20)  # while the loop is blocked here
        time.sleep(0.05)
        peer.shutdown(socket.SHUT_WR)
        await asyncio.wait_for(protos[0].eof, 5)
    finally:
        peer.close()
        for p in protos:
            await p.close()
        await close_server(server)
    sizes = protos[0].sizes
    return {
        "sent over 512 KiB": sent > 2 * MAX_READ,
        "all received": sum(sizes) == sent,
        "largest data_received within 256 KiB": max(sizes) <= MAX_READ,
    }


@each_engine
def test_no_data_received_above_256_kib(engine: FdkitEngine) -> None:
    """No single data_received gets more than asyncio's read size (256 KiB),
    however much is waiting (aiohttp bounds its buffers on that)."""
    oracle, got = both_run(engine, _chunk_sizes)
    assert all(oracle.values()), oracle
    assert got == oracle


async def _read_sizes_follow_max_size() -> list[tuple[str, int]]:
    loop = asyncio.get_running_loop()
    protos: list[Reads] = []

    class Reads(_Server):
        def __init__(self) -> None:
            super().__init__()
            protos.append(self)
            self.got: asyncio.Queue[int] = asyncio.Queue()

        def data_received(self, data: bytes) -> None:
            self.got.put_nowait(len(data))

    base = asyncio.selector_events._SelectorTransport  # type: ignore[attr-defined]
    server = await loop.create_server(Reads, HOST, 0)
    peer = socket.create_connection(server_address(server))
    seen: list[tuple[str, int]] = []
    try:
        await _made(protos)
        tr = protos[0].transport
        tr.pause_reading()
        seen.append(("class default", await _paused_read(tr, peer, protos, 40_000)))
        tr.max_size = 1000  # the instance's own
        seen.append(("instance 1000", await _paused_read(tr, peer, protos, 40_000)))
        del tr.max_size
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(base, "max_size", 3000)  # asyncio's class, after the transport exists
            seen.append(("base class 3000", await _paused_read(tr, peer, protos, 40_000)))
        seen.append(("restored", await _paused_read(tr, peer, protos, 40_000)))
    finally:
        peer.close()
        for p in protos:
            await p.close()
        await close_server(server)
    return seen


def _queued(fd: int) -> int:
    """The bytes waiting in socket ``fd``'s receive queue (FIONREAD)."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]  # type: ignore[no-any-return]


async def _paused_read(tr: Any, peer: socket.socket, protos: Sequence[Any], n: int) -> int:
    """The size of the first read once ``n`` bytes wait: sent while reading is paused, then
    reading resumed for one read."""
    peer.sendall(b"y" * n)
    fd = tr.get_extra_info("socket").fileno()
    deadline = time.monotonic() + 5
    # all of it in the receive queue (n fits in a loopback socket's window), however loaded
    # the machine
    while _queued(fd) < n:
        assert time.monotonic() < deadline, f"{_queued(fd)} of {n} bytes arrived in 5 s"
        await asyncio.sleep(0.005)
    tr.resume_reading()
    first: int = await asyncio.wait_for(protos[0].got.get(), 5)
    tr.pause_reading()
    left = n - first
    while left > 0:  # the rest, read as they come
        tr.resume_reading()
        left -= await asyncio.wait_for(protos[0].got.get(), 5)
        tr.pause_reading()
    return first


@each_engine
def test_read_size_follows_max_size_wherever_it_is_set(engine: FdkitEngine) -> None:
    """A read asks for ``transport.max_size`` bytes, read as asyncio reads it each time: the
    instance's own value, else the class's, also when a program changes asyncio's class
    after the transport exists."""
    oracle, got = both_run(engine, _read_sizes_follow_max_size)
    assert dict(oracle)["class default"] == 40_000, oracle  # all that waits, under 256 KiB
    assert dict(oracle)["instance 1000"] == 1000, oracle
    assert dict(oracle)["base class 3000"] == 3000, oracle
    assert got == oracle


# --- 5. BufferedProtocol: asyncio's get_buffer/buffer_updated contract ----------------------

PAYLOAD = bytes(i % 251 for i in range(1000))


async def _buffered(mode: str) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    handled: list[str] = []
    loop.set_exception_handler(lambda _loop, ctx: handled.append(ctx["message"]))
    protos: list[Tiny] = []

    class Tiny(asyncio.BufferedProtocol):
        """1-byte buffers; ``mode`` "pause": pauses every 100 bytes for a moment (and has no
        buffer to give while paused, which asyncio never asks for); "close": closes after 10
        bytes."""

        def __init__(self) -> None:
            protos.append(self)
            self.transport: Any = None
            self.buf = bytearray(1)
            self.got = bytearray()
            self.paused = False
            self.closed = False
            self.calls_while_paused = 0
            self.calls_after_close = 0
            self.lost: asyncio.Future[str | None] = loop.create_future()

        def connection_made(self, transport: Any) -> None:
            self.transport = transport

        def _call(self) -> None:
            self.calls_while_paused += self.paused
            self.calls_after_close += self.closed

        def get_buffer(self, sizehint: int) -> bytearray:
            self._call()
            return bytearray() if self.paused else self.buf

        def buffer_updated(self, nbytes: int) -> None:
            self._call()
            self.got += self.buf[:nbytes]
            if mode == "pause" and len(self.got) % 100 == 0 and not self.paused:
                self.paused = True
                self.transport.pause_reading()
                loop.call_later(0.002, self._resume)
            elif mode == "close" and len(self.got) == 10:
                self.closed = True
                self.transport.close()

        def _resume(self) -> None:
            self.paused = False
            if not self.transport.is_closing():
                self.transport.resume_reading()

        def eof_received(self) -> None:
            self._call()

        def connection_lost(self, exc: Exception | None) -> None:
            self.lost.set_result(type(exc).__name__ if exc else None)

    server = await loop.create_server(Tiny, HOST, 0)
    peer = socket.create_connection(server_address(server))
    try:
        peer.sendall(PAYLOAD)  # in one segment: one receive on the io_uring engine
        peer.shutdown(socket.SHUT_WR)
        while not protos:
            await asyncio.sleep(0.001)
        lost = await asyncio.wait_for(protos[0].lost, 5)
    finally:
        peer.close()
        await close_server(server)
    p = protos[0]
    return {
        "bytes delivered": len(p.got),
        "the payload's, in order": bytes(p.got) == PAYLOAD[: len(p.got)],
        "calls while paused": p.calls_while_paused,
        "calls after close()": p.calls_after_close,
        "connection_lost": lost,
        "exception handler": handled,
    }


@each_engine
@pytest.mark.parametrize("mode", ["pause", "close"])
def test_buffered_protocol_pause_and_close_inside_buffer_updated(
    engine: FdkitEngine, mode: str
) -> None:
    """With 1-byte buffers and 1,000 bytes sent at once, pause_reading()
    and close() made inside buffer_updated hold for the rest of what was received: no
    get_buffer while paused (an empty buffer there would kill the connection), nothing after
    close(); all 1,000 bytes delivered when pausing."""
    oracle, got = both_run(engine, lambda: _buffered(mode))
    assert oracle["bytes delivered"] == (len(PAYLOAD) if mode == "pause" else 10), oracle
    assert oracle["the payload's, in order"], oracle
    assert oracle["calls while paused"] == oracle["calls after close()"] == 0, oracle
    assert got == oracle


# --- 6. a closed fd still registered with add_reader ----------------------------------------


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


# --- 7. add_reader on what epoll cannot watch ----------------------------------------------


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


# --- 8. SystemExit / KeyboardInterrupt from data_received loses no other event --------------

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


# --- 9. eof_received after an earlier callback of the same iteration paused ------------------


def _eof_while_paused(first: str) -> Callable[[], Any]:
    async def script() -> list[str]:
        loop = asyncio.get_running_loop()
        log: list[str] = []
        protos: list[Conn] = []

        class Conn(_Server):
            def __init__(self) -> None:
                super().__init__()
                protos.append(self)
                self.name = "XY"[len(protos) - 1]

            def data_received(self, data: bytes) -> None:
                log.append(f"{self.name} data {data.decode()}")
                other = protos[1]
                other.transport.pause_reading()
                log.append("Y paused")
                loop.call_later(0.05, self._resume, other)

            def _resume(self, other: Conn) -> None:
                log.append("Y resumed")
                other.transport.resume_reading()

            def eof_received(self) -> None:
                log.append(f"{self.name} eof")

        server = await loop.create_server(Conn, HOST, 0)
        x = socket.create_connection(server_address(server))
        y = socket.create_connection(server_address(server))
        try:
            while len(protos) < 2:
                await asyncio.sleep(0.001)
            await asyncio.gather(protos[0].made, protos[1].made)
            await asyncio.sleep(0.01)
            # The loop is blocked here: X's bytes and Y's FIN wait for the same poll.
            if first == "data":
                x.sendall(b"pause Y")
                y.shutdown(socket.SHUT_WR)
            else:
                y.shutdown(socket.SHUT_WR)
                x.sendall(b"pause Y")
            time.sleep(0.05)
            await asyncio.wait_for(protos[1].lost, 5)
            await asyncio.sleep(0.06)  # the resume
        finally:
            x.close()
            y.close()
            for p in protos:
                await p.close()
            await close_server(server)
        return log

    return script


@each_engine
@pytest.mark.parametrize("first", ["data", "eof"])
def test_eof_not_delivered_to_a_transport_paused_earlier_in_the_iteration(
    engine: FdkitEngine, first: str
) -> None:
    """X's data and Y's EOF arrive together (in either order); X's
    data_received pauses Y. Y's eof_received comes in arrival order: before X's data when
    it arrived first, else after Y is resumed, never while Y is paused."""
    oracle, got = both_run(engine, _eof_while_paused(first))
    if first == "data":
        assert oracle == ["X data pause Y", "Y paused", "Y resumed", "Y eof"]
    else:
        assert oracle == ["Y eof", "X data pause Y", "Y paused", "Y resumed"]
    assert got == oracle


# --- 10. data_received replaced on the instance ---------------------------------------------


async def _replaced_data_received() -> list[tuple[str, bytes]]:
    loop = asyncio.get_running_loop()
    seen: list[tuple[str, bytes]] = []
    protos: list[Handshake] = []

    class Handshake(_Server):
        def __init__(self) -> None:
            super().__init__()
            protos.append(self)

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self.data_received = self.handshake  # type: ignore[method-assign]

        def data_received(self, data: bytes) -> None:  # the class's: never called
            seen.append(("class data_received", data))
            self.transport.write(b"ok")

        def handshake(self, data: bytes) -> None:
            seen.append(("handshake", data))
            self.data_received = self.body  # type: ignore[method-assign]
            self.transport.write(b"ok")

        def body(self, data: bytes) -> None:
            seen.append(("body", data))
            self.transport.write(b"ok")

    server = await loop.create_server(Handshake, HOST, 0)
    reader, writer = await asyncio.open_connection(*server_address(server))
    try:
        for msg in (b"hello", b"request 1", b"request 2"):
            writer.write(msg)
            await asyncio.wait_for(reader.readexactly(2), 5)
    finally:
        writer.close()
        await writer.wait_closed()
        for p in protos:
            await p.close()
        await close_server(server)
    return seen


@each_engine
def test_data_received_replaced_on_the_instance_is_honoured(engine: FdkitEngine) -> None:
    """``self.data_received = self.handshake`` (and later ``= self.body``)
    takes effect from the next bytes on, as asyncio looks the method up on each call."""
    oracle, got = both_run(engine, _replaced_data_received)
    assert oracle == [("handshake", b"hello"), ("body", b"request 1"), ("body", b"request 2")]
    assert got == oracle


# --- 11. debug mode reports a slow data_received --------------------------------------------

SLOW = 0.25


async def _slow_data_received() -> int:
    loop = asyncio.get_running_loop()
    assert loop.get_debug()
    loop.slow_callback_duration = SLOW / 2
    protos: list[_Server] = []

    class Slow(_Server):
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


# --- 12. garbage-collecting loops that were never closed ------------------------------------

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


# --- partial denial of io_uring -------------------------------------------------------------

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


# --- run_forever's iterations ---------------------------------------------------------------


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
