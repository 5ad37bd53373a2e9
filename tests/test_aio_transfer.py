"""``await fdkit.aio.transfer``: the kernel paths of ``zerocopy.transfer`` from asyncio.

Every case runs on asyncio's own loop and on fdkit's (asyncio is the oracle: the same code
must behave the same). The other ends are coroutines on the same loop (``sock_recv``,
``sock_sendall``) or threads with bounded joins; every run is bounded by ``wait_for``.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

import fdkit.aio
from fdkit import zerocopy
from helpers import payload, sha256

pytestmark = pytest.mark.timeout(60)

T = TypeVar("T")
LoopFactory = Callable[[], asyncio.AbstractEventLoop]


@pytest.fixture(params=[asyncio.new_event_loop, fdkit.aio.new_event_loop], ids=["asyncio", "fdkit"])
def loop_factory(request: pytest.FixtureRequest) -> LoopFactory:
    factory: LoopFactory = request.param
    return factory


def run(factory: LoopFactory, coro: Coroutine[Any, Any, T], timeout: float = 20) -> T:
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(asyncio.wait_for(coro, timeout))


def nb_pair(family: int = socket.AF_UNIX) -> tuple[socket.socket, socket.socket]:
    if family == socket.AF_UNIX:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    else:
        with socket.create_server(("127.0.0.1", 0)) as srv:
            a = socket.create_connection(srv.getsockname())
            b, _ = srv.accept()
    a.setblocking(False)
    b.setblocking(False)
    return a, b


def data_file(tmp_path: Path, data: bytes) -> int:
    p = tmp_path / "src"
    p.write_bytes(data)
    return os.open(p, os.O_RDONLY | os.O_CLOEXEC)


async def recv_all(sock: socket.socket, limit: int | None = None) -> bytes:
    """Everything until EOF (or ``limit`` bytes) through the loop."""
    loop = asyncio.get_running_loop()
    out = bytearray()
    while limit is None or len(out) < limit:
        chunk = await loop.sock_recv(sock, 1 << 20)
        if not chunk:
            break
        out += chunk
    return bytes(out)


async def send_then_eof(sock: socket.socket, data: bytes) -> None:
    await asyncio.get_running_loop().sock_sendall(sock, data)
    sock.shutdown(socket.SHUT_WR)


def registered(loop: asyncio.AbstractEventLoop, fd: int) -> bool:
    """Whether a reader or writer is registered for ``fd`` (removing it: a probe)."""
    return loop.remove_reader(fd) | loop.remove_writer(fd)


def test_file_to_socket(loop_factory: LoopFactory, tmp_path: Path) -> None:
    data = payload(5 << 20, seed=1)
    src = data_file(tmp_path, data)
    out, peer = nb_pair(socket.AF_INET)

    async def main() -> tuple[tuple[int, str], bytes]:
        reader = asyncio.ensure_future(recv_all(peer))
        result = await fdkit.aio.transfer(src, out.fileno())
        out.shutdown(socket.SHUT_WR)
        return result, await reader

    try:
        (moved, path), got = run(loop_factory, main())
    finally:
        os.close(src)
        out.close()
        peer.close()
    assert moved == len(data)
    assert path in ("splice_via_pipe", "sendfile")
    assert got == data


def test_socket_to_socket(loop_factory: LoopFactory) -> None:
    data = payload(3 << 20, seed=2)
    feed, src = nb_pair(socket.AF_INET)
    dst, peer = nb_pair(socket.AF_INET)

    async def main() -> tuple[tuple[int, str], bytes]:
        feeder = asyncio.ensure_future(send_then_eof(feed, data))
        reader = asyncio.ensure_future(recv_all(peer))
        result = await fdkit.aio.transfer(src.fileno(), dst.fileno())
        dst.shutdown(socket.SHUT_WR)
        await feeder
        return result, await reader

    try:
        (moved, path), got = run(loop_factory, main())
    finally:
        for s in (feed, src, dst, peer):
            s.close()
    assert (moved, path) == (len(data), "splice_via_pipe")
    assert got == data


def test_pipe_to_socket(loop_factory: LoopFactory) -> None:
    data = payload(2 << 20, seed=3)
    r, w = os.pipe()
    os.set_blocking(r, False)
    dst, peer = nb_pair()

    def write_all() -> None:
        with open(w, "wb", closefd=True) as f:  # blocking writer in a thread, then EOF
            f.write(data)

    writer = threading.Thread(target=write_all, daemon=True)

    async def main() -> tuple[tuple[int, str], bytes]:
        reader = asyncio.ensure_future(recv_all(peer))
        writer.start()
        result = await fdkit.aio.transfer(r, dst.fileno())
        dst.shutdown(socket.SHUT_WR)
        return result, await reader

    try:
        (moved, path), got = run(loop_factory, main())
    finally:
        writer.join(10)
        os.close(r)
        dst.close()
        peer.close()
    assert (moved, path) == (len(data), "splice")
    assert got == data


def test_socket_to_file(loop_factory: LoopFactory, tmp_path: Path) -> None:
    data = payload(3 << 20, seed=4)
    feed, src = nb_pair(socket.AF_INET)
    dst = os.open(tmp_path / "dst", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)

    async def main() -> tuple[int, str]:
        feeder = asyncio.ensure_future(send_then_eof(feed, data))
        result = await fdkit.aio.transfer(src.fileno(), dst)
        await feeder
        return result

    try:
        moved, path = run(loop_factory, main())
    finally:
        os.close(dst)
        feed.close()
        src.close()
    assert (moved, path) == (len(data), "splice_via_pipe")
    assert (tmp_path / "dst").read_bytes() == data


@pytest.mark.serial
def test_a_slow_reader_is_awaited_not_spun_on(loop_factory: LoopFactory, tmp_path: Path) -> None:
    """The destination fills again and again: the transfer waits in the loop's poll, so the
    process's CPU time stays a small part of the wall time."""
    data = payload(4 << 20, seed=5)
    src = data_file(tmp_path, data)
    dst, peer = nb_pair()  # unix: ~200 KB of buffer, far less than the file

    async def slow_reader() -> bytes:
        loop = asyncio.get_running_loop()
        out = bytearray()
        while chunk := await loop.sock_recv(peer, 128 << 10):
            out += chunk
            await asyncio.sleep(0.01)  # ~12 MB/s at most
        return bytes(out)

    async def main() -> tuple[int, float, float, bytes]:
        reader = asyncio.ensure_future(slow_reader())
        cpu, wall = time.process_time(), time.monotonic()
        moved, _ = await fdkit.aio.transfer(src, dst.fileno())
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        dst.shutdown(socket.SHUT_WR)
        return moved, cpu, wall, await reader

    try:
        moved, cpu, wall, got = run(loop_factory, main())
    finally:
        os.close(src)
        dst.close()
        peer.close()
    assert moved == len(data)
    assert got == data
    assert wall > 0.2, f"{wall:.3f} s: the reader was not slow, the case proves nothing"
    assert cpu < 0.5 * wall, f"{cpu:.3f} s of CPU in {wall:.3f} s: the transfer spins"


def test_a_peer_reset_is_connection_reset_not_eof(loop_factory: LoopFactory) -> None:
    feed, src = nb_pair(socket.AF_INET)
    dst, peer = nb_pair()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        drain = asyncio.ensure_future(recv_all(peer))
        task = asyncio.ensure_future(fdkit.aio.transfer(src.fileno(), dst.fileno()))
        await loop.sock_sendall(feed, payload(256 << 10, seed=6))
        await asyncio.sleep(0.05)
        assert not task.done()
        # SO_LINGER 0: close sends a reset, not a FIN.
        feed.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        feed.close()
        with pytest.raises(ConnectionResetError):
            await task
        assert not registered(loop, src.fileno())
        assert not registered(loop, dst.fileno())
        dst.shutdown(socket.SHUT_WR)
        await drain

    try:
        run(loop_factory, main())
    finally:
        for s in (feed, src, dst, peer):
            s.close()


def test_a_vanished_destination_is_a_connection_error(
    loop_factory: LoopFactory, tmp_path: Path
) -> None:
    src = data_file(tmp_path, payload(4 << 20, seed=7))
    dst, peer = nb_pair(socket.AF_INET)

    async def main() -> None:
        task = asyncio.ensure_future(fdkit.aio.transfer(src, dst.fileno()))
        await asyncio.sleep(0.05)
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            await task

    try:
        run(loop_factory, main())
    finally:
        os.close(src)
        dst.close()
        peer.close()


def test_cancellation_leaves_nothing_registered_and_loses_no_byte(
    loop_factory: LoopFactory, tmp_path: Path
) -> None:
    """Cancelled while the destination is full: nothing stays registered, and the bytes it
    had taken from the file are delivered first by the next transfer of the pair."""
    data = payload(4 << 20, seed=8)
    src = data_file(tmp_path, data)
    dst, peer = nb_pair()

    async def main() -> tuple[int, int, int, bytes]:
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(fdkit.aio.transfer(src, dst.fileno()))
        await asyncio.sleep(0.1)  # nobody reads: the transfer waits for room
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        held = zerocopy.transfer_held(src, dst.fileno())
        left = registered(loop, dst.fileno()) or registered(loop, src)
        reader = asyncio.ensure_future(recv_all(peer))
        moved, _ = await fdkit.aio.transfer(src, dst.fileno())
        dst.shutdown(socket.SHUT_WR)
        return held, int(left), moved, await reader

    try:
        held, left, moved, got = run(loop_factory, main())
    finally:
        os.close(src)
        dst.close()
        peer.close()
    assert not left
    assert held > 0  # the pipe chunk was bigger than the socket's room: the hard case
    assert sha256(got) == sha256(data)
    assert 0 < moved < len(data)


def test_cancellation_while_waiting_for_data(loop_factory: LoopFactory) -> None:
    feed, src = nb_pair()
    dst, peer = nb_pair()

    async def main() -> bytes:
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(fdkit.aio.transfer(src.fileno(), dst.fileno()))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not registered(loop, src.fileno())
        await loop.sock_sendall(feed, b"after")
        feed.shutdown(socket.SHUT_WR)
        assert await fdkit.aio.transfer(src.fileno(), dst.fileno()) == (5, "splice_via_pipe")
        return await loop.sock_recv(peer, 100)

    try:
        assert run(loop_factory, main()) == b"after"
    finally:
        for s in (feed, src, dst, peer):
            s.close()


def test_64_mib_intact(loop_factory: LoopFactory, tmp_path: Path) -> None:
    data = os.urandom(64 << 20)
    want = hashlib.sha256(data).hexdigest()
    src = data_file(tmp_path, data)
    del data
    dst, peer = nb_pair()

    async def hash_all() -> tuple[int, str]:
        loop = asyncio.get_running_loop()
        h, n = hashlib.sha256(), 0
        buf = bytearray(1 << 20)
        while m := await loop.sock_recv_into(peer, buf):
            h.update(memoryview(buf)[:m])
            n += m
        return n, h.hexdigest()

    async def main() -> tuple[int, tuple[int, str]]:
        reader = asyncio.ensure_future(hash_all())
        moved, _ = await fdkit.aio.transfer(src, dst.fileno())
        dst.shutdown(socket.SHUT_WR)
        return moved, await reader

    try:
        moved, (n, got) = run(loop_factory, main(), timeout=40)
    finally:
        os.close(src)
        dst.close()
        peer.close()
    assert moved == n == 64 << 20
    assert got == want


@pytest.mark.parametrize("count", [0, 1, 1000, 65536, (1 << 20) + 7, 3 << 20])
def test_count_limits(loop_factory: LoopFactory, count: int) -> None:
    """A socket source with more than ``count``: exactly ``count`` bytes move, the rest stay."""
    data = payload(4 << 20, seed=9)
    feed, src = nb_pair()
    dst, peer = nb_pair()

    async def main() -> tuple[int, bytes, bytes]:
        loop = asyncio.get_running_loop()
        feeder = asyncio.ensure_future(send_then_eof(feed, data))
        reader = asyncio.ensure_future(recv_all(peer))
        moved, _ = await fdkit.aio.transfer(src.fileno(), dst.fileno(), count)
        dst.shutdown(socket.SHUT_WR)
        rest = await recv_all(src)
        await feeder
        assert not registered(loop, src.fileno())
        return moved, await reader, rest

    try:
        moved, got, rest = run(loop_factory, main())
    finally:
        for s in (feed, src, dst, peer):
            s.close()
    assert moved == count
    assert got == data[:count]
    assert rest == data[count:]


def test_misuse_raises_what_asyncio_raises(loop_factory: LoopFactory, tmp_path: Path) -> None:
    src = data_file(tmp_path, b"x")
    blocking, other = socket.socketpair()
    bad = (1 << 20) - 1  # never open: above every fd this test process reaches

    async def main() -> None:
        with pytest.raises(ValueError, match="non-blocking"):
            await fdkit.aio.transfer(src, blocking.fileno())
        with pytest.raises(ValueError, match="non-negative"):
            await fdkit.aio.transfer(src, other.fileno(), -1)
        with pytest.raises(TypeError):
            await fdkit.aio.transfer(src, other.fileno(), "1")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await fdkit.aio.transfer(src, other.fileno(), 1.5)  # type: ignore[arg-type]
        with pytest.raises(OSError, match="Bad file descriptor") as e:
            await fdkit.aio.transfer(src, bad)
        assert e.value.errno == 9  # EBADF

    try:
        run(loop_factory, main())
    finally:
        os.close(src)
        blocking.close()
        other.close()
