"""The programs of the aio_tls bench (:mod:`bench.aio_tls`), one process each, on the event
loop named by ``LOOP`` as :mod:`bench.child.aio_servers` takes it (``fdkit``, ``uvloop``,
``rloop``, ``asyncio``). ``CERT`` and ``KEY`` are PEM files (the bench's throwaway EC
certificate for ``127.0.0.1`` and its key); clients trust the certificates of the PEM file
``CAFILE`` (the certificate itself when it is self-signed) and check the host name
``127.0.0.1``.

``python aio_tls_servers.py hello LOOP HOST PORT CERT KEY``
    The aio bench's ``hello`` server (the same ``asyncio.Protocol``, the same replies) behind
    TLS: ``loop.create_server(Hello, ssl=ctx)``.
``python aio_tls_servers.py handshake LOOP HOST PORT CERT KEY``
    A TLS server answering one request per connection: once a request terminator has come,
    one ``HELLO`` reply and ``transport.close()`` (TLS close_notify, then the TCP close).
``python aio_tls_servers.py client LOOP CAFILE``
    A streams HTTPS client. Command ``connect HOST PORT C`` opens C keep-alive connections
    (``asyncio.open_connection(host, port, ssl=ctx)``; answers ``connected C``); ``run N``
    sends N ``GET /`` requests over them, one in flight on each connection, each answer read
    with ``readexactly`` and checked to be ``HELLO`` (answers ``done N SECONDS``).
``python aio_tls_servers.py bulk LOOP CERT KEY CAFILE``
    Both ends of a TLS connection on one loop. Command ``N MODE``: a sink server
    (``create_server(ssl=)``, an ``asyncio.Protocol`` that counts what ``data_received``
    gets), a streams client (``open_connection(ssl=)``) writing N bytes in 256 KiB writes
    with ``await writer.drain()`` after each, both closed once the sink has all N; MODE
    ``check`` also compares the SHA-256 of what the sink got with what was sent. Answers
    ``moved N``.
``python aio_tls_servers.py handshake-client CAFILE``
    The load of ``handshake``, plain Python (blocking ``ssl`` sockets, no event loop).
    Command ``HOST PORT N T``: T threads open N TLS connections in all, one after another
    on each thread: connect, handshake, one ``GET /``, the reply checked, read until the
    server's close, close. Answers ``done N SECONDS``.

Every loop program first prints ``loop MODULE.CLASS ENGINE``; the servers then print
``listening HOST PORT`` and stop on SIGTERM (exit status 0); a command program answers one
line per command (``error ...`` when it failed) and exits when its stdin closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import ssl
import sys
import threading
import time
from pathlib import Path
from typing import cast

# Run by path, this program's directory is on sys.path and the harness's root is not: put it
# there so that the aio bench's hello server and helpers are imported as the modules they are.
if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.child.aio_servers import (
    HELLO,
    REQUEST,
    TERM,
    Hello,
    commands,
    describe,
    loop_factory,
    say,
    stop_on_signals,
)

BLOCK = 256 * 1024  # the bulk client's write size
TIMEOUT = 60.0  # seconds a program waits for its peer before it gives up
HOST_NAME = "127.0.0.1"  # the name clients check the certificate against (its subjectAltName)


def server_context(cert: str, key: str) -> ssl.SSLContext:
    """The servers' TLS context: the certificate and its key, Python's defaults otherwise."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    return ctx


def client_context(cafile: str) -> ssl.SSLContext:
    """The clients' TLS context: trusts the certificates in ``cafile``, checks the host
    name."""
    return ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)


class OneReply(asyncio.Protocol):
    """One connection of the handshake server: one ``HELLO`` for the first request, then
    ``close()``."""

    def __init__(self) -> None:
        self.head = b""
        self.answered = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.tr = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.answered:
            return
        self.head += data
        if TERM in self.head:
            self.answered = True
            self.tr.write(HELLO)
            self.tr.close()


async def serve(mode: str, host: str, port: int, ctx: ssl.SSLContext) -> None:
    """Serve ``hello`` or ``handshake`` over TLS until SIGTERM."""
    loop = asyncio.get_running_loop()
    say(f"loop {describe(loop)}")
    stop, _ = stop_on_signals(loop)
    factory = Hello if mode == "hello" else OneReply
    server = await loop.create_server(factory, host, port, ssl=ctx, backlog=4096,
                                      reuse_address=True)  # fmt: skip
    say(f"listening {host} {port}")
    await stop
    server.close()


# --- the streams client --------------------------------------------------------------------

Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def connect(host: str, port: int, count: int, ctx: ssl.SSLContext) -> list[Conn]:
    """``count`` TLS connections, handshakes done."""
    return [await asyncio.open_connection(host, port, ssl=ctx, server_hostname=HOST_NAME)
            for _ in range(count)]  # fmt: skip


async def requests(conn: Conn, n: int) -> None:
    """``n`` requests on one connection, one at a time, every answer checked."""
    reader, writer = conn
    for _ in range(n):
        writer.write(REQUEST)
        answer = await reader.readexactly(len(HELLO))
        if answer != HELLO:
            raise ValueError(f"the server answered {answer[:80]!r}")


async def run_requests(conns: list[Conn], n: int) -> None:
    """``n`` requests over ``conns``, all connections busy at once."""
    share, extra = divmod(n, len(conns))
    await asyncio.gather(*(requests(c, share + (i < extra)) for i, c in enumerate(conns)))


async def close_all(conns: list[Conn]) -> None:
    for _, writer in conns:
        writer.close()
    for _, writer in conns:
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            await asyncio.wait_for(writer.wait_closed(), 10)
    conns.clear()


def client(name: str, cafile: str) -> None:
    """The ``client`` program (see the module docstring)."""
    ctx = client_context(cafile)
    conns: list[Conn] = []

    async def handle(words: list[str]) -> str:
        if words[:1] == ["connect"]:
            await close_all(conns)
            conns.extend(await connect(words[1], int(words[2]), int(words[3]), ctx))
            return f"connected {len(conns)}"
        if words[:1] == ["run"] and conns:
            n = int(words[1])
            t0 = time.perf_counter()
            await asyncio.wait_for(run_requests(conns, n), TIMEOUT + n / 1000)
            return f"done {n} {time.perf_counter() - t0:.3f}"
        return f"error unknown command {' '.join(words)!r}"

    commands(loop_factory(name), handle)


# --- bulk ----------------------------------------------------------------------------------


class Sink(asyncio.Protocol):
    """The bulk server's connection: counts the bytes (and hashes them when asked); ``done``
    is set once ``n`` have come."""

    def __init__(self, n: int, check: bool, done: asyncio.Future[bytes]) -> None:
        self.left = n
        self.sha = hashlib.sha256() if check else None
        self.done = done

    def data_received(self, data: bytes) -> None:
        self.left -= len(data)
        if self.sha is not None:
            self.sha.update(data)
        if self.left <= 0 and not self.done.done():
            self.done.set_result(self.sha.digest() if self.sha is not None else b"")

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError(f"the sink lost its connection: {exc}"))


def sent_digest(block: bytes, n: int) -> bytes:
    """The SHA-256 of what the bulk client sends: ``block`` repeated, cut at ``n`` bytes."""
    sha = hashlib.sha256()
    for off in range(0, n, len(block)):
        sha.update(block[: min(len(block), n - off)])
    return sha.digest()


async def send(writer: asyncio.StreamWriter, block: bytes, n: int) -> None:
    """``n`` bytes of ``block`` repeated, in ``len(block)`` writes, ``drain`` after each."""
    left = n
    while left:
        k = min(left, len(block))
        writer.write(block if k == len(block) else block[:k])
        await writer.drain()
        left -= k


async def bulk_once(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, block: bytes,
                    n: int, check: bool) -> None:  # fmt: skip
    """One bulk transfer of ``n`` bytes, both ends on the running loop."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[bytes] = loop.create_future()
    sinks: list[Sink] = []

    def sink() -> Sink:
        sinks.append(Sink(n, check, done))
        return sinks[-1]

    server = await loop.create_server(sink, "127.0.0.1", 0, ssl=server_ctx)
    try:
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_ctx, server_hostname=HOST_NAME
        )
        try:
            await asyncio.wait_for(send(writer, block, n), TIMEOUT + n / (20 << 20))
            digest = await asyncio.wait_for(done, TIMEOUT)
        finally:
            writer.close()
            with contextlib.suppress(OSError, asyncio.TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), 10)
        if check and digest != sent_digest(block, n):
            raise ValueError("the sink got other bytes than were sent")
    finally:
        server.close()


def bulk(name: str, cert: str, key: str, cafile: str) -> None:
    """The ``bulk`` program (see the module docstring)."""
    server_ctx, client_ctx = server_context(cert, key), client_context(cafile)
    block = os.urandom(BLOCK)

    async def handle(words: list[str]) -> str:
        n, mode = int(words[0]), words[1]
        await bulk_once(server_ctx, client_ctx, block, n, mode == "check")
        return f"moved {n}"

    commands(loop_factory(name), handle)


# --- the handshake load --------------------------------------------------------------------


def one_handshake(host: str, port: int, ctx: ssl.SSLContext) -> None:
    """Connect, handshake, one request and its reply, read until the server's close."""
    with socket.create_connection((host, port), timeout=TIMEOUT) as raw:
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with ctx.wrap_socket(raw, server_hostname=HOST_NAME) as s:
            s.sendall(REQUEST)
            got = b""
            while len(got) < len(HELLO):
                chunk = s.recv(65536)
                if not chunk:
                    raise ConnectionError(f"the server closed after {len(got)} bytes")
                got += chunk
            if got != HELLO:
                raise ValueError(f"the server answered {got[:80]!r}")
            with contextlib.suppress(OSError):  # close_notify, or a plain TCP close
                while s.recv(65536):
                    pass


def handshakes(host: str, port: int, n: int, threads: int, ctx: ssl.SSLContext) -> None:
    """``n`` connections over ``threads`` threads; the first error is raised."""
    errors: list[BaseException] = []
    share, extra = divmod(n, threads)

    def work(count: int) -> None:
        try:
            for _ in range(count):
                if errors:
                    return
                one_handshake(host, port, ctx)
        except (OSError, ValueError) as e:
            errors.append(e)

    workers = [threading.Thread(target=work, args=(share + (i < extra),)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    if errors:
        raise errors[0]


def handshake_client(cafile: str) -> None:
    """The ``handshake-client`` program (see the module docstring)."""
    ctx = client_context(cafile)
    for line in iter(sys.stdin.readline, ""):
        try:
            host, port, n, threads = line.split()
            t0 = time.perf_counter()
            handshakes(host, int(port), int(n), int(threads), ctx)
            say(f"done {n} {time.perf_counter() - t0:.3f}")
        except (OSError, ValueError) as e:
            say(f"error {type(e).__name__}: {e}".replace("\n", " "))


def main(argv: list[str]) -> None:
    mode = argv[0]
    if mode in ("hello", "handshake"):
        name, host, port, cert, key = argv[1:6]
        with asyncio.Runner(loop_factory=loop_factory(name)) as runner:
            runner.run(serve(mode, host, int(port), server_context(cert, key)))
    elif mode == "client":
        client(argv[1], argv[2])
    elif mode == "bulk":
        bulk(argv[1], argv[2], argv[3], argv[4])
    elif mode == "handshake-client":
        handshake_client(argv[1])
    else:
        raise SystemExit(
            f"unknown mode {mode!r} (hello, handshake, client, bulk or handshake-client)"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
