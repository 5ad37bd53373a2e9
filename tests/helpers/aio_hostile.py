"""What the hostile-pass scripts (``tests/test_aio_hostile_kernel.py`` and
``tests/test_aio_hostile_callbacks.py``) share: a server-side protocol that keeps its bytes and
how its connection ended (:class:`Conn`), a server with one connection made to it
(:func:`one_connection`) and torn down again (:func:`finish`), and waits bounded in time that
return what they saw rather than raise, so that a script's record says what went wrong.

Everything here uses the real kernel: real sockets on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from typing import Any

from helpers.aio_parity import close_server, server_address

HOST = "127.0.0.1"


async def until(cond: Callable[[], object], timeout: float = 5.0) -> None:
    """Lets the loop run until ``cond()`` holds or ``timeout`` passed (the record says which)."""
    end = time.monotonic() + timeout
    while not cond() and time.monotonic() < end:
        await asyncio.sleep(0.002)


def outcome(exc: BaseException | None) -> str | None:
    return None if exc is None else type(exc).__name__


async def result_within(fut: asyncio.Future[Any], timeout: float = 2.0) -> Any:
    """``fut``'s result, or a sentence saying it had none within ``timeout`` s (a script
    records what it saw rather than raising: a TimeoutError would read as a hung script)."""
    try:
        return await asyncio.wait_for(asyncio.shield(fut), timeout)
    except TimeoutError:
        return f"nothing within {timeout:g} s"


#: Where a paused transport was paused: before asyncio's first read of it, or after a read.
PAUSES = ("in connection_made", "after its first read")
REQUEST = b"a request"


class Conn(asyncio.Protocol):
    """A server-side protocol that keeps its transport, its bytes and how the connection ended;
    pauses reading as ``pause`` (one of :data:`PAUSES`) says, if given."""

    def __init__(self, into: list[Conn], *, pause: str | None = None) -> None:
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
            self.lost.set_result(outcome(exc))

    async def close(self) -> None:
        """Closes the connection if the script has not (abort: whatever state it is in)."""
        if self.transport is not None and not self.lost.done():
            self.transport.abort()
            await result_within(self.lost)


async def one_connection(
    *, pause: str | None = None
) -> tuple[asyncio.AbstractServer, socket.socket, Conn]:
    """A server with one connection from a blocking peer socket, its protocol made; paused
    as ``pause`` says (after reading :data:`REQUEST`, which the peer sends, if so)."""
    loop = asyncio.get_running_loop()
    protos: list[Conn] = []
    server = await loop.create_server(lambda: Conn(protos, pause=pause), HOST, 0)
    peer = socket.create_connection(server_address(server))
    try:
        await until(lambda: protos)
        conn = protos[0]
        await asyncio.wait_for(conn.made, 5)
        if pause == "after its first read":
            peer.sendall(REQUEST)
            await until(lambda: not conn.transport.is_reading())
        await asyncio.sleep(0.02)
    except BaseException:
        peer.close()
        for p in protos:
            await p.close()
        await close_server(server)
        raise
    return server, peer, conn


async def finish(server: asyncio.AbstractServer, peer: socket.socket, *conns: Conn) -> None:
    peer.close()
    for c in conns:
        await c.close()
    await close_server(server)


def read_all(sock: socket.socket, want: int, timeout: float = 2.0) -> bytes | str:
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
