"""asyncio streams with TLS on fdkit.aio and on asyncio's loop: a TLS echo server and clients, an
in-band upgrade with ``start_tls`` on both ends, and a certificate the client does not trust.
Certificates come from a throwaway CA (``trustme``) made for this module."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable

import pytest
import trustme

from helpers import payload
from helpers.aio import Loop, each_loop

BIG = payload(1 << 20, seed=13)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def server_ctx(ca: trustme.CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(ctx)
    return ctx


@pytest.fixture(scope="module")
def client_ctx(ca: trustme.CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(ctx)
    return ctx


async def echo_until_eof(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()
        await writer.wait_closed()


async def read_exactly_echo(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes
) -> bytes:
    """Writes ``data`` while reading its echo (neither side's buffers fill up); returns the echo."""

    async def send() -> None:
        view = memoryview(data)
        for i in range(0, len(view), 100_000):
            writer.write(view[i : i + 100_000])
            await writer.drain()

    sender = asyncio.create_task(send())
    got = await reader.readexactly(len(data))
    await sender
    return got


@each_loop
def test_tls_stream_echo(
    loop: Loop, server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext
) -> None:
    async def main() -> None:
        server = await asyncio.start_server(echo_until_eof, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]

        async def client(i: int) -> None:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client_ctx, server_hostname="localhost"
            )
            tls = writer.get_extra_info("ssl_object")
            assert isinstance(tls, ssl.SSLObject)
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
            for n in range(5):
                line = f"client {i} line {n}\n".encode()
                writer.write(line)
                assert await reader.readline() == line
            if i == 0:
                assert await read_exactly_echo(reader, writer, BIG) == BIG
            writer.close()
            await writer.wait_closed()

        async with server:
            await asyncio.gather(*(client(i) for i in range(8)))

    loop.run(main())


@each_loop
def test_tls_start_tls_upgrade(
    loop: Loop, server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext
) -> None:
    """A plaintext conversation upgraded in band (as SMTP's STARTTLS), both ends by
    ``StreamWriter.start_tls``; the echo after it goes through TLS."""
    seen: list[object] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert await reader.readline() == b"STARTTLS\n"
        writer.write(b"GO\n")
        await writer.drain()
        await writer.start_tls(server_ctx)
        seen.append(writer.get_extra_info("ssl_object"))
        await echo_until_eof(reader, writer)

    async def main() -> None:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            assert writer.get_extra_info("ssl_object") is None
            writer.write(b"STARTTLS\n")
            assert await reader.readline() == b"GO\n"
            await writer.start_tls(client_ctx, server_hostname="localhost")
            assert isinstance(writer.get_extra_info("ssl_object"), ssl.SSLObject)
            writer.write(b"secret\n")
            assert await reader.readline() == b"secret\n"
            assert await read_exactly_echo(reader, writer, BIG[:300_000]) == BIG[:300_000]
            writer.close()
            await writer.wait_closed()
        assert len(seen) == 1
        assert isinstance(seen[0], ssl.SSLObject)

    loop.run(main())


@each_loop
def test_tls_untrusted_certificate(loop: Loop, server_ctx: ssl.SSLContext) -> None:
    """A client that trusts another CA refuses the server's certificate: SSLCertVerificationError,
    as on asyncio's loop; the server goes on serving the next client."""
    other = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    trustme.CA().configure_trust(other)
    good = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)

    async def main() -> None:
        server = await asyncio.start_server(echo_until_eof, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        async with server:
            with pytest.raises(ssl.SSLCertVerificationError):
                await asyncio.open_connection(
                    "127.0.0.1", port, ssl=other, server_hostname="localhost"
                )
            with pytest.raises(ssl.SSLCertVerificationError):
                await asyncio.open_connection(
                    "127.0.0.1", port, ssl=good, server_hostname="localhost"
                )

    loop.run(main())
