"""The asyncio contender of the proxy bench (:mod:`bench.proxy`).

``python asyncio_proxy.py LISTEN_HOST LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT``

A plain asyncio forwarding proxy: ``loop.sock_recv_into``/``loop.sock_sendall`` with a 64 KiB
buffer per direction, half-close propagated. Prints ``asyncio proxy listening on HOST:PORT``
once bound; stops on SIGTERM or SIGINT (``aio_servers``' stop on a signal). Standard library
only.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from pathlib import Path

# Run by path, this program's directory is on sys.path and the harness's root is not: put it
# there so that what it shares with the aio bench's programs is imported as the module it is.
if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.child.aio_servers import stop_on_signals

BUF = 64 * 1024


async def pump(loop: asyncio.AbstractEventLoop, a: socket.socket, b: socket.socket) -> None:
    """Copy ``a`` to ``b`` until EOF (or an error), then shut ``b``'s write side."""
    buf = bytearray(BUF)
    view = memoryview(buf)
    try:
        while True:
            n = await loop.sock_recv_into(a, buf)
            if not n:
                break
            await loop.sock_sendall(b, view[:n])
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_WR)


async def handle(
    loop: asyncio.AbstractEventLoop, client: socket.socket, upstream_addr: tuple[str, int]
) -> None:
    """Relay one client connection to a new upstream connection, both directions."""
    up = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    up.setblocking(False)
    try:
        await loop.sock_connect(up, upstream_addr)
        await asyncio.gather(pump(loop, client, up), pump(loop, up, client))
    except OSError:
        pass
    finally:
        client.close()
        up.close()


async def main(argv: list[str]) -> None:
    """Proxy until SIGTERM or SIGINT (``argv`` as in the module docstring)."""
    lhost, lport, uhost, uport = argv[0], int(argv[1]), argv[2], int(argv[3])
    loop = asyncio.get_running_loop()
    stop, _ = stop_on_signals(loop)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((lhost, lport))
    listener.listen(1024)
    listener.setblocking(False)
    host, port = listener.getsockname()
    print(f"asyncio proxy listening on {host}:{port}", flush=True)
    tasks: set[asyncio.Task[None]] = set()

    async def acceptor() -> None:
        while True:
            conn, _ = await loop.sock_accept(listener)
            conn.setblocking(False)
            task = loop.create_task(handle(loop, conn, (uhost, uport)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    acc = loop.create_task(acceptor())
    await stop
    acc.cancel()
    for task in list(tasks):
        task.cancel()
    await asyncio.gather(acc, *tasks, return_exceptions=True)
    listener.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
