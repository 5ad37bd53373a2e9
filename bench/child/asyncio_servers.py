"""The asyncio contenders of the serve bench (:mod:`bench.serve`), one process each.

``python asyncio_servers.py static ROOT HOST PORT``
    An asyncio Protocol keep-alive static file server with an open-file cache: it writes the
    head with the transport and sends the body with ``os.sendfile`` on the socket
    (``loop.sendfile`` for what does not fit the socket buffer at once).
``python asyncio_servers.py hello HOST PORT``
    An asyncio Protocol server that answers the Ring hello server's bytes the same way:
    count the request terminators, one write per batch.

Both print ``asyncio MODE server listening on HOST:PORT`` once bound, and stop on SIGTERM or
SIGINT. Standard library only: the hello Protocol and the stop on a signal are
``aio_servers``' (which imports nothing else at its top either).
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from collections.abc import Callable
from email.utils import formatdate
from functools import partial
from pathlib import Path
from typing import cast

# Run by path, this program's directory is on sys.path and the harness's root is not: put it
# there so that what it shares with the aio bench's programs is imported as the module it is.
if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.child.aio_servers import TERM, Hello, stop_on_signals

TYPES = {".txt": "text/plain", ".html": "text/html", ".bin": "application/octet-stream"}
NOT_FOUND = (
    b"HTTP/1.1 404 Not Found\r\nServer: asyncio\r\nContent-Length: 10\r\n"
    b"Content-Type: text/plain\r\n\r\nnot found\n"
)

Entry = tuple[int, int, bytes]
"""An open file: (fd, size, response head without the Date line)."""


class Site:
    """The served directory and its open-file cache (a file is opened once, kept open)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.files: dict[bytes, Entry] = {}
        self._date_second = 0
        self._date = b""

    def date_line(self) -> bytes:
        """The ``Date:`` header line, formatted once per second."""
        now = int(time.time())
        if now != self._date_second:
            self._date_second = now
            self._date = b"Date: " + formatdate(now, usegmt=True).encode() + b"\r\n"
        return self._date

    def lookup(self, target: bytes) -> Entry | None:
        """The cached entry for request target ``target``, or None (not found, or refused)."""
        entry = self.files.get(target)
        if entry is not None:
            return entry
        path = target.split(b"?", 1)[0].decode("latin-1")
        if ".." in path or "\0" in path or not path.startswith("/"):
            return None
        full = os.path.join(self.root, path.lstrip("/"))
        try:
            fd = os.open(full, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        st = os.fstat(fd)
        kind = TYPES.get(os.path.splitext(full)[1], "application/octet-stream")
        head = (
            f"HTTP/1.1 200 OK\r\nServer: asyncio\r\nContent-Type: {kind}\r\n"
            f"Content-Length: {st.st_size}\r\n"
            f"Last-Modified: {formatdate(st.st_mtime, usegmt=True)}\r\n"
        ).encode()
        self.files[target] = entry = (fd, st.st_size, head)
        return entry


class Static(asyncio.Protocol):
    """One keep-alive connection of the static server; requests are answered in order."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.buf = b""
        self.queue: list[bytes] = []
        self.busy = False
        self.closed = False
        self.fd = -1
        self.sending: asyncio.Future[None] | None = None  # the body loop.sendfile is sending

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.tr = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.fd = sock.fileno()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            i = self.buf.find(TERM)
            if i < 0:
                break
            self.queue.append(self.buf[:i])
            self.buf = self.buf[i + 4 :]
        if len(self.buf) > 65536:
            self.tr.close()
            return
        if not self.busy:
            self.process()

    def process(self) -> None:
        """Answer the queued requests until one body has to wait for the socket."""
        while self.queue and not self.closed:
            request = self.queue.pop(0)
            parts = request.split(b"\r\n", 1)[0].split()
            if len(parts) != 3:
                self.tr.close()
                return
            method, target, _ = parts
            entry = self.site.lookup(target)
            if entry is None:
                self.tr.write(NOT_FOUND)
                continue
            fd, size, head = entry
            self.tr.write(head + self.site.date_line() + b"\r\n")
            if method == b"HEAD":
                continue
            sent = 0
            if self.tr.get_write_buffer_size() == 0:
                try:
                    while sent < size:
                        n = os.sendfile(self.fd, fd, sent, size - sent)
                        if n == 0:
                            break
                        sent += n
                except BlockingIOError:
                    pass
                except OSError:
                    self.tr.close()
                    return
            if sent < size:
                self.busy = True
                self.sending = asyncio.ensure_future(self.rest(fd, sent, size))
                return

    async def rest(self, fd: int, offset: int, size: int) -> None:
        """Send the rest of a body with ``loop.sendfile``, then carry on with the queue."""
        try:
            with os.fdopen(os.dup(fd), "rb") as f:
                await asyncio.get_running_loop().sendfile(self.tr, f, offset, size - offset)
        except (OSError, RuntimeError):
            self.tr.close()
            return
        self.busy = False
        self.process()


async def main(argv: list[str]) -> None:
    """Serve until SIGTERM or SIGINT (``argv`` as in the module docstring)."""
    mode = argv[0]
    make: Callable[[], asyncio.Protocol]
    if mode == "static":
        host, port = argv[2], int(argv[3])
        make = partial(Static, Site(argv[1]))
    elif mode == "hello":
        host, port = argv[1], int(argv[2])
        make = Hello
    else:
        raise SystemExit(f"unknown mode {mode!r} (static or hello)")
    loop = asyncio.get_running_loop()
    stop, _ = stop_on_signals(loop)
    server = await loop.create_server(make, host, port, backlog=4096, reuse_address=True)
    h, p = server.sockets[0].getsockname()[:2]
    print(f"asyncio {mode} server listening on {h}:{p}", flush=True)
    await stop
    server.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
