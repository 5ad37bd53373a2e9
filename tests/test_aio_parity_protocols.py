"""fdkit.aio is asyncio's loop with another engine (DESIGN.md 3b): what a stream protocol's
callbacks get from their transport, in seven behaviours found by a hostile pass, each as one
script run on asyncio's own loop (the oracle) and on fdkit's loop with each engine, the outputs
compared.

1. every connection's callbacks run in the context asyncio gives it;
2. a connection reset before the loop accepts it delivers its bytes, then the reset;
3. writes reach the kernel before anything can observe their absence;
4. data_received is never called again after it raised, and gets at most ``max_size`` bytes;
5. pause_reading() and close() inside a BufferedProtocol's buffer_updated hold;
6. eof_received waits for a transport paused earlier in the same iteration;
7. data_received replaced on the instance is honoured.

What a program sees of the loop itself (fds registered with add_reader, exceptions out of
run_until_complete, debug mode, loops never closed, io_uring partly denied, run_forever's
iterations) is in ``tests/test_aio_parity_loop.py``.

A script records what a program can observe (which callbacks ran, with what, in which
context, what the peer read, what was raised, what was logged) and returns it; the test asserts
that fdkit's record equals asyncio's. Where asyncio's answer is plain (all the bytes, then EOF),
the test says so too, so that a broken oracle cannot make a wrong answer pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import fcntl
import socket
import struct
import termios
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import pytest

from helpers.aio_parity import (
    FdkitEngine,
    Kind,
    both,
    both_run,
    close_server,
    each_engine,
    send_what_fits,
    server_address,
)
from helpers.aio_parity_server import HOST, Server

MAX_READ = 256 * 1024  # asyncio's socket transport reads at most this much per data_received


# --- 1. every connection's callbacks in the context asyncio gives it -------------------------

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("parity_request", default="unset")


async def _contextvars_per_connection() -> list[tuple[int, str, str]]:
    loop = asyncio.get_running_loop()
    seen: list[tuple[int, str, str]] = []
    protos: list[Server] = []

    class Request(Server):
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
    protos: list[Server] = []

    class WriteThenShutdown(Server):
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
        holder: list[Server] = []

        def factory() -> Server:
            holder.append(Server())
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


async def _made(holder: Sequence[Server]) -> None:
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
    protos: list[Server] = []

    class ReplyThenBlock(Server):
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

    class FailingParser(Server):
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

    class Sizes(Server):
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

    class Reads(Server):
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


# --- 6. eof_received after an earlier callback of the same iteration paused ------------------


def _eof_while_paused(first: str) -> Callable[[], Any]:
    async def script() -> list[str]:
        loop = asyncio.get_running_loop()
        log: list[str] = []
        protos: list[Conn] = []

        class Conn(Server):
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


# --- 7. data_received replaced on the instance ----------------------------------------------


async def _replaced_data_received() -> list[tuple[str, bytes]]:
    loop = asyncio.get_running_loop()
    seen: list[tuple[str, bytes]] = []
    protos: list[Handshake] = []

    class Handshake(Server):
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
