"""Network programs on fdkit.aio and on asyncio's loop, the same code on both: UDP echo,
4,000 concurrent TCP connections (the fd count back to its baseline after), Unix sockets, the
``sock_*`` calls, BufferedProtocol, pause/resume reading, write flow control with water marks,
``write_eof``. Loopback only; each case bounded."""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any, cast

import pytest

from helpers import payload
from helpers.aio import Loop, each_loop, fd_count, nofile_at_least

BIG = payload(1 << 20, seed=14)


# --- UDP -------------------------------------------------------------------------------------


class UdpEcho(asyncio.DatagramProtocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # not isinstance-checked: on 3.11 asyncio's own datagram transport is no DatagramTransport
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self.transport.sendto(data, addr)


class UdpClient(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.got: dict[int, bytes] = {}
        self.arrived = asyncio.Event()
        self.errors: list[Exception] = []

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        (seq,) = struct.unpack_from("!I", data)
        self.got[seq] = data
        self.arrived.set()

    def error_received(self, exc: Exception) -> None:
        self.errors.append(exc)


def datagram(seq: int) -> bytes:
    return struct.pack("!I", seq) + payload(seq * 37 % 4000, seed=seq)


@each_loop
def test_udp_echo_many_datagrams(loop: Loop) -> None:
    """2,000 datagrams of 4 to 4,000 bytes, 16 in flight at most (well inside the default socket
    receive buffers, so loopback drops none): every echo intact and matched to its sequence
    number."""
    count, window = 2000, 16

    async def main() -> None:
        running = asyncio.get_running_loop()
        server, _ = await running.create_datagram_endpoint(UdpEcho, local_addr=("127.0.0.1", 0))
        addr = server.get_extra_info("sockname")
        client, proto = await running.create_datagram_endpoint(UdpClient, remote_addr=addr)
        try:
            assert client.get_extra_info("peername") == addr
            sent = 0
            while len(proto.got) < count:
                while sent < count and sent - len(proto.got) < window:
                    client.sendto(datagram(sent))
                    sent += 1
                proto.arrived.clear()
                try:
                    await asyncio.wait_for(proto.arrived.wait(), 2)
                except TimeoutError:
                    pytest.fail(f"{len(proto.got)} of {sent} echoes arrived, then none for 2 s")
            assert proto.errors == []
            assert sorted(proto.got) == list(range(count))
            assert all(proto.got[i] == datagram(i) for i in range(count))
        finally:
            client.close()
            server.close()

    loop.run(main())


@each_loop
def test_udp_sendto_unconnected(loop: Loop) -> None:
    """An endpoint with no remote address answers each sender at its own address."""

    async def main() -> None:
        running = asyncio.get_running_loop()
        server, _ = await running.create_datagram_endpoint(UdpEcho, local_addr=("127.0.0.1", 0))
        addr = server.get_extra_info("sockname")
        clients = [
            await running.create_datagram_endpoint(UdpClient, local_addr=("127.0.0.1", 0))
            for _ in range(3)
        ]
        try:
            for i, (t, _) in enumerate(clients):
                t.sendto(datagram(i), addr)
            for i, (_, p) in enumerate(clients):
                await asyncio.wait_for(p.arrived.wait(), 5)
                assert p.got == {i: datagram(i)}
        finally:
            for t, _ in clients:
                t.close()
            server.close()

    loop.run(main())


# --- 4,000 concurrent TCP connections ---------------------------------------------------------

CONNECTIONS = 4000


@pytest.mark.slow
@each_loop
def test_4000_concurrent_connections_fd_count_back_to_baseline(loop: Loop) -> None:
    """4,000 clients connected at once to a streams echo server on the loop under test, each
    echoing its own message; then all closed, the server too: the process's fd count is back to
    where it was before the server started (inside the loop) and before the loop (after)."""
    with nofile_at_least(2 * CONNECTIONS + 256):
        before_loop = fd_count()
        inside: dict[str, int] = {}

        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                writer.write(await reader.readline())
                await writer.drain()
                await reader.read()  # until the client closes
            finally:
                writer.close()

        async def main() -> None:
            inside["before"] = fd_count()
            server = await asyncio.start_server(echo, "127.0.0.1", 0, backlog=4096)
            port = server.sockets[0].getsockname()[1]
            connecting = asyncio.Semaphore(256)  # SYNs in flight: stay inside the SYN backlog

            async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
                async with connecting:
                    return await asyncio.open_connection("127.0.0.1", port)

            conns = await asyncio.gather(*(connect() for _ in range(CONNECTIONS)))
            inside["open"] = fd_count()

            async def talk(
                i: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
            ) -> None:
                line = f"connection {i}\n".encode()
                writer.write(line)
                assert await reader.readline() == line

            await asyncio.gather(*(talk(i, r, w) for i, (r, w) in enumerate(conns)))
            for _, w in conns:
                w.close()
            await asyncio.gather(*(w.wait_closed() for _, w in conns))
            server.close()
            await server.wait_closed()
            # the server's handlers see EOF and close their ends within a few loop turns
            for _ in range(200):
                if fd_count() == inside["before"]:
                    break
                await asyncio.sleep(0.01)
            inside["after"] = fd_count()

        loop.run(main(), timeout=30)
        assert inside["open"] >= inside["before"] + 2 * CONNECTIONS, inside
        assert inside["after"] == inside["before"], inside
        assert fd_count() == before_loop


@each_loop
def test_all_bytes_waiting_at_once_on_many_streams(loop: Loop) -> None:
    """200 streams whose peers each sent 200 kB (and EOF) before the loop looked: 40 MB waiting
    at once, more than any pool of receive buffers would hold. Every stream gets its own bytes,
    whole and in order, then EOF."""

    class Sink(asyncio.Protocol):
        def __init__(self) -> None:
            self.buf = bytearray()
            self.eof = False

        def data_received(self, data: bytes) -> None:
            self.buf += data

        def eof_received(self) -> bool:
            self.eof = True
            return False

    async def main() -> None:
        running = asyncio.get_running_loop()
        streams: list[tuple[asyncio.Transport, Sink, socket.socket, bytes]] = []
        try:
            for i in range(200):
                a, b = socket.socketpair()
                transport, proto = await running.create_connection(Sink, sock=a)
                streams.append((transport, proto, b, payload(200_000, seed=1000 + i)))
            for _, _, b, data in streams:  # the loop does not run meanwhile
                b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
                b.settimeout(5)  # a peer that cannot send it all at once fails, never hangs
                b.sendall(data)
                b.shutdown(socket.SHUT_WR)
            for _ in range(1000):
                if all(p.eof for _, p, _, _ in streams):
                    break
                await asyncio.sleep(0.01)
            for i, (_, proto, _, data) in enumerate(streams):
                assert proto.eof, i
                assert proto.buf == data, i
        finally:
            for transport, _, b, _ in streams:
                transport.close()
                b.close()

    loop.run(main())


# --- Unix sockets ----------------------------------------------------------------------------


async def echo_until_eof(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


@each_loop
def test_unix_server_and_connection(loop: Loop, tmp_path: Path) -> None:
    path = str(tmp_path / "echo.sock")

    class Client(asyncio.Protocol):
        def __init__(self) -> None:
            self.data = bytearray()
            self.done = asyncio.get_running_loop().create_future()

        def data_received(self, data: bytes) -> None:
            self.data += data

        def eof_received(self) -> bool:
            return False

        def connection_lost(self, exc: Exception | None) -> None:
            self.done.set_result(exc)

    async def main() -> None:
        running = asyncio.get_running_loop()
        server = await asyncio.start_unix_server(echo_until_eof, path)
        assert os.path.exists(path)
        async with server:
            transport, proto = await running.create_unix_connection(Client, path)
            assert transport.get_extra_info("peername") == path
            assert isinstance(transport, asyncio.Transport)
            transport.write(BIG)
            transport.write_eof()
            assert await asyncio.wait_for(proto.done, 10) is None
            assert bytes(proto.data) == BIG
            reader, writer = await asyncio.open_unix_connection(path)
            writer.write(b"line\n")
            assert await reader.readline() == b"line\n"
            writer.close()
            await writer.wait_closed()

    loop.run(main())


# --- sock_* ----------------------------------------------------------------------------------


@each_loop
def test_sock_calls_tcp(loop: Loop, tmp_path: Path) -> None:
    """sock_connect, sock_accept, sock_sendall, sock_recv, sock_recv_into and sock_sendfile on
    non-blocking TCP sockets."""
    src = tmp_path / "src"
    src.write_bytes(BIG)

    async def main() -> None:
        running = asyncio.get_running_loop()
        with socket.socket() as lst, socket.socket() as c:
            lst.bind(("127.0.0.1", 0))
            lst.listen()
            lst.setblocking(False)
            c.setblocking(False)
            accepting = asyncio.create_task(running.sock_accept(lst))
            await running.sock_connect(c, lst.getsockname())
            s, peer = await accepting
            with s:
                assert peer == c.getsockname()
                assert not s.getblocking()

                async def recv_all(n: int) -> bytes:
                    got = bytearray()
                    while len(got) < n:
                        chunk = await running.sock_recv(s, 1 << 16)
                        assert chunk, "EOF early"
                        got += chunk
                    return bytes(got)

                sending = asyncio.create_task(running.sock_sendall(c, BIG))
                assert await recv_all(len(BIG)) == BIG
                await sending

                buf = bytearray(100)
                await running.sock_sendall(c, b"0123456789")
                n = await running.sock_recv_into(s, buf)
                assert buf[:n] == b"0123456789"[:n]
                while n < 10:
                    n += await running.sock_recv_into(s, memoryview(buf)[n:])
                assert bytes(buf[:10]) == b"0123456789"

                with open(src, "rb") as f:
                    receiving = asyncio.create_task(recv_all(len(BIG) - 1000))
                    sent = await running.sock_sendfile(c, f, offset=1000)
                    assert sent == len(BIG) - 1000
                    assert f.tell() == len(BIG)
                    assert await receiving == BIG[1000:]

                c.shutdown(socket.SHUT_WR)
                assert await running.sock_recv(s, 10) == b""

    loop.run(main())


@each_loop
def test_sock_calls_udp(loop: Loop) -> None:
    async def main() -> None:
        running = asyncio.get_running_loop()
        with (
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a,
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as b,
        ):
            for s in (a, b):
                s.bind(("127.0.0.1", 0))
                s.setblocking(False)
            receiving = asyncio.create_task(running.sock_recvfrom(b, 65536))
            await asyncio.sleep(0)
            assert await running.sock_sendto(a, b"hello", b.getsockname()) == 5
            data, addr = await receiving
            assert (data, addr) == (b"hello", a.getsockname())
            await running.sock_sendto(b, b"x" * 3000, a.getsockname())
            buf = bytearray(4096)
            n, addr = await running.sock_recvfrom_into(a, buf)
            assert (bytes(buf[:n]), addr) == (b"x" * 3000, b.getsockname())

    loop.run(main())


@each_loop
def test_sock_connect_refused(loop: Loop) -> None:
    async def main() -> None:
        running = asyncio.get_running_loop()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            addr = probe.getsockname()  # bound, never listening: a connect is refused
            with socket.socket() as c:
                c.setblocking(False)
                with pytest.raises(ConnectionRefusedError):
                    await running.sock_connect(c, addr)

    loop.run(main())


# --- protocols: BufferedProtocol, pause/resume reading, water marks, write_eof ---------------


@each_loop
def test_buffered_protocol(loop: Loop) -> None:
    """A BufferedProtocol server receives 1 MB into its own buffer (get_buffer/buffer_updated),
    then EOF; the hash of what it got matches."""

    class Receiver(asyncio.BufferedProtocol):
        def __init__(self) -> None:
            self.buf = bytearray(16384)
            self.hash = hashlib.sha256()
            self.total = 0
            self.hints: list[int] = []
            self.done = asyncio.get_running_loop().create_future()

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            self.transport = transport

        def get_buffer(self, sizehint: int) -> bytearray:
            self.hints.append(sizehint)
            return self.buf

        def buffer_updated(self, nbytes: int) -> None:
            assert 0 < nbytes <= len(self.buf)
            self.hash.update(self.buf[:nbytes])
            self.total += nbytes

        def eof_received(self) -> bool:
            self.transport.write(str(self.total).encode())
            return False

        def connection_lost(self, exc: Exception | None) -> None:
            if not self.done.done():
                self.done.set_result(exc)

    async def main() -> None:
        running = asyncio.get_running_loop()
        protos: list[Receiver] = []

        def make() -> Receiver:
            protos.append(Receiver())
            return protos[-1]

        server = await running.create_server(make, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(BIG)
            writer.write_eof()
            await writer.drain()
            assert await reader.read() == str(len(BIG)).encode()
            writer.close()
            await writer.wait_closed()
            assert await asyncio.wait_for(protos[0].done, 5) is None
        assert protos[0].hash.digest() == hashlib.sha256(BIG).digest()
        assert all(isinstance(h, int) for h in protos[0].hints)

    loop.run(main())


class Collector(asyncio.Protocol):
    def __init__(self) -> None:
        self.data = bytearray()
        self.eof = asyncio.Event()
        self.lost = asyncio.get_running_loop().create_future()
        self.paused = 0
        self.resumed = 0
        self.size_at_resume: list[int] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.data += data

    def eof_received(self) -> bool:
        self.eof.set()
        return True  # keep the transport open: the test closes it

    def pause_writing(self) -> None:
        self.paused += 1

    def resume_writing(self) -> None:
        self.resumed += 1
        self.size_at_resume.append(self.transport.get_write_buffer_size())

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)


async def pair(running: asyncio.AbstractEventLoop) -> tuple[asyncio.Server, Collector, Collector]:
    """A server and a client connected over loopback, both Collectors."""
    accepted: list[Collector] = []

    def make() -> Collector:
        accepted.append(Collector())
        return accepted[-1]

    server = await running.create_server(make, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, client = await running.create_connection(Collector, "127.0.0.1", port)
    for _ in range(500):
        if accepted and hasattr(accepted[0], "transport"):
            break
        await asyncio.sleep(0.002)
    return server, client, accepted[0]


@each_loop
def test_pause_resume_reading(loop: Loop) -> None:
    async def main() -> None:
        server, client, peer = await pair(asyncio.get_running_loop())
        async with server:
            assert client.transport.is_reading()
            client.transport.pause_reading()
            assert not client.transport.is_reading()
            client.transport.pause_reading()  # twice: allowed, as in asyncio
            peer.transport.write(b"while paused")
            await asyncio.sleep(0.1)
            assert client.data == b"", "data delivered while reading was paused"
            client.transport.resume_reading()
            assert client.transport.is_reading()
            for _ in range(500):
                if client.data == b"while paused":
                    break
                await asyncio.sleep(0.002)
            assert client.data == b"while paused"
            client.transport.close()
            peer.transport.close()
            await asyncio.wait_for(client.lost, 5)

    loop.run(main())


@each_loop
def test_write_flow_control_water_marks(loop: Loop) -> None:
    """A writer whose peer does not read passes the high-water mark: pause_writing, once; when
    the peer reads, the buffer drains below the low-water mark: resume_writing, once."""
    high, low = 64 * 1024, 16 * 1024

    async def main() -> None:
        server, client, peer = await pair(asyncio.get_running_loop())
        async with server:
            peer.transport.pause_reading()
            client.transport.set_write_buffer_limits(high=high, low=low)
            assert client.transport.get_write_buffer_limits() == (low, high)
            written = 0
            for _ in range(200):  # until the kernel's buffers are full and ours passes `high`
                client.transport.write(BIG[:65536])
                written += 65536
                if client.paused:
                    break
                await asyncio.sleep(0)
            assert client.paused == 1
            assert client.transport.get_write_buffer_size() > high
            queued = client.transport.get_write_buffer_size()
            peer.transport.resume_reading()
            for _ in range(1000):
                if client.resumed:
                    break
                await asyncio.sleep(0.002)
            assert client.resumed == 1
            assert client.size_at_resume[0] <= low
            for _ in range(2000):
                if len(peer.data) == written:
                    break
                await asyncio.sleep(0.002)
            assert client.transport.get_write_buffer_size() == 0
            assert written > queued
            assert peer.data == BIG[:65536] * (written // 65536)
            with pytest.raises(ValueError, match="high"):
                client.transport.set_write_buffer_limits(high=1, low=2)
            client.transport.close()
            peer.transport.close()
            await asyncio.wait_for(client.lost, 5)

    loop.run(main())


@each_loop
def test_write_eof_half_close(loop: Loop) -> None:
    """write_eof shuts the write side only: the peer sees EOF and can still answer."""

    async def main() -> None:
        server, client, peer = await pair(asyncio.get_running_loop())
        async with server:
            assert client.transport.can_write_eof()
            client.transport.write(b"question")
            client.transport.write_eof()
            assert client.transport.is_closing() is False
            await asyncio.wait_for(peer.eof.wait(), 5)
            assert peer.data == b"question"
            peer.transport.write(b"answer")
            peer.transport.write_eof()
            await asyncio.wait_for(client.eof.wait(), 5)
            assert client.data == b"answer"
            client.transport.close()
            peer.transport.close()
            assert await asyncio.wait_for(client.lost, 5) is None
            assert await asyncio.wait_for(peer.lost, 5) is None

    loop.run(main())


# --- nothing reaches a protocol that paused reading or closed its transport --------------------


class Strict(asyncio.Protocol):
    """Logs each callback with the state the protocol put its transport in: ``open``,
    ``paused`` (after pause_reading, until resume_reading) or ``closed`` (after close with
    bytes still queued to write)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.state = "open"
        self.log: list[tuple[str, str]] = []
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.log.append(("data", self.state))
        if self.state != "open":
            return
        if self.mode == "pause":
            self.state = "paused"
            self.transport.pause_reading()
            asyncio.get_running_loop().call_later(0.02, self.resume)
        else:
            self.transport.write(b"y" * (8 << 20))  # more than the kernel takes at once
            self.state = "closed"
            self.transport.close()  # closes once the write buffer drains

    def resume(self) -> None:
        self.state = "open"
        self.transport.resume_reading()

    def eof_received(self) -> bool:
        self.log.append(("eof", self.state))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.log.append(("lost", self.state))
        if not self.lost.done():
            self.lost.set_result(exc)


async def _flood_while_blocked(mode: str) -> Strict:
    """The peer sends 150 kB and EOF while the loop is blocked, so that the loop finds all of it
    at once; returns the protocol after the connection ended."""
    running = asyncio.get_running_loop()
    a, b = socket.socketpair()
    with b:
        _, proto = await running.create_connection(lambda: Strict(mode), sock=a)

        def send() -> None:
            b.sendall(b"x" * 150_000)
            b.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send)
        sender.start()
        sender.join(5)
        time.sleep(0.05)  # the loop is blocked here: the bytes wait in the kernel
        if mode == "close":
            drain = threading.Thread(
                target=lambda: [None for _ in iter(lambda: b.recv(1 << 20), b"")]
            )
            drain.start()
        await asyncio.wait_for(proto.lost, 5)
        if mode == "close":
            b.shutdown(socket.SHUT_RDWR)
            drain.join(5)
    return proto


@each_loop
def test_no_data_after_pause_reading(loop: Loop) -> None:
    """pause_reading() in data_received: no data_received (and no eof_received) until
    resume_reading(), even when the peer's bytes were all waiting at once."""
    proto = loop.run(_flood_while_blocked("pause"))
    assert [e for e in proto.log if e[1] != "open"] == [], proto.log
    assert proto.log[-2:] == [("eof", "open"), ("lost", "open")]


@each_loop
def test_no_data_after_close(loop: Loop) -> None:
    """close() in data_received (with bytes still queued to write): no data_received or
    eof_received after it, even when the peer's bytes were all waiting at once."""
    proto = loop.run(_flood_while_blocked("close"))
    assert proto.log == [("data", "open"), ("lost", "closed")], proto.log
