"""The programs of the aio bench (:mod:`bench.aio`), one process each, on the event loop
named by ``LOOP``: ``fdkit`` (``fdkit.aio.new_event_loop``), ``uvloop``, ``rloop`` or
``asyncio`` (the standard library's own loop).

``python aio_servers.py hello LOOP HOST PORT``
    An ``asyncio.Protocol`` keep-alive HTTP hello server: counts the request terminators in
    what arrives and answers that many fixed replies with one ``transport.write``.
``python aio_servers.py echo LOOP HOST PORT``
    An asyncio streams echo server (``asyncio.start_server``): reads up to 64 KiB, writes it
    back, ``await writer.drain()``, until EOF.
``python aio_servers.py echo-client LOOP``
    The streams echo client (``asyncio.open_connection``). Command ``HOST PORT N MODE`` on
    stdin: connect, write N bytes in 64 KiB writes (``drain`` after each) while reading the
    echo back until N bytes came, close; MODE ``check`` also compares every byte with what was
    sent. Answers ``echoed N``.
``python aio_servers.py sendfile LOOP FILE``
    Command ``HOST PORT N`` on stdin: connect (``loop.create_connection``), send the first N
    bytes of FILE with ``loop.sendfile(transport, file, 0, N, fallback=False)``, close.
    Answers ``sent N native``; when the loop has no native path
    (``SendfileNotAvailableError``) it sends with ``fallback=True`` and answers
    ``sent N fallback``; when it has no ``sendfile`` at all (``NotImplementedError``),
    ``unsupported REASON``.
``python aio_servers.py floor LIB HOST PORT``
    The hello workload's floor: no event loop of Python's, the C epoll server ``serve`` of the
    shared object LIB (``bench/c/epoll_hello.c``, compiled by the bench) called through ctypes
    on a listener made here; the same replies as ``hello``. Prints ``loop c.epoll -``.

Every program first prints ``loop MODULE.CLASS ENGINE`` (``ENGINE`` is ``loop.engine`` where
the loop has one, else ``-``); the servers then print ``listening HOST PORT``. A server stops
on SIGTERM (exit status 0); a command program when its stdin closes. A loop that cannot be
imported ends the program with status 3 and one line on stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib
import os
import signal
import socket
import sys
from collections.abc import Callable, Coroutine
from typing import Any, cast

TERM = b"\r\n\r\n"
HELLO = (
    b"HTTP/1.1 200 OK\r\nServer: fdkit-ring\r\nContent-Type: text/plain\r\n"
    b"Content-Length: 6\r\nConnection: keep-alive\r\n\r\nhallo\n"
)
CHUNK = 64 * 1024
LOOPS = ("fdkit", "uvloop", "rloop", "asyncio")
MODULES = {"fdkit": "fdkit.aio", "uvloop": "uvloop", "rloop": "rloop", "asyncio": "asyncio"}


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """The ``new_event_loop`` of loop ``name`` (exits with status 3 when it cannot be had).

    Imported by name: the contenders are optional (requirements-bench.txt), and a type
    checker run without them must not need them."""
    if name not in LOOPS:
        raise SystemExit(f"unknown loop {name!r} (one of {', '.join(LOOPS)})")
    try:
        module = importlib.import_module(MODULES[name])
    except ImportError as e:
        print(f"cannot import the {name} loop: {e}", file=sys.stderr, flush=True)
        raise SystemExit(3) from None
    return cast(Callable[[], asyncio.AbstractEventLoop], module.new_event_loop)


def describe(loop: asyncio.AbstractEventLoop) -> str:
    """``MODULE.CLASS ENGINE`` of a loop, as the first line says."""
    kind = type(loop)
    engine = getattr(loop, "engine", "-")
    return f"{kind.__module__}.{kind.__qualname__} {engine}"


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Hello(asyncio.Protocol):
    """One keep-alive connection of the hello server: ``HELLO`` per request, batched."""

    def __init__(self) -> None:
        self.pending = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.tr = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        head = self.pending + data
        n = head.count(TERM)
        if n:
            self.pending = head[head.rfind(TERM) + 4 :]
            self.tr.write(HELLO * n)
        else:
            self.pending = head
        if len(self.pending) > 65536:
            self.tr.close()


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The echo server's connection: write back what comes, until EOF."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def serve(mode: str, host: str, port: int) -> None:
    """Serve until SIGTERM."""
    loop = asyncio.get_running_loop()
    say(f"loop {describe(loop)}")
    stop: asyncio.Future[None] = loop.create_future()

    def finish() -> None:
        if not stop.done():
            stop.set_result(None)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, finish)
    server: asyncio.Server | asyncio.AbstractServer
    if mode == "hello":
        server = await loop.create_server(Hello, host, port, backlog=4096, reuse_address=True)
    else:
        server = await asyncio.start_server(echo, host, port, backlog=4096, reuse_address=True)
    say(f"listening {host} {port}")
    await stop
    server.close()


async def echo_once(host: str, port: int, n: int, check: bool) -> None:
    """One connection of the echo client: ``n`` bytes out in 64 KiB writes, all back."""
    reader, writer = await asyncio.open_connection(host, port)
    block = os.urandom(CHUNK)

    async def send() -> None:
        left = n
        while left:
            k = min(left, CHUNK)
            writer.write(block if k == CHUNK else block[:k])
            await writer.drain()
            left -= k
        if writer.can_write_eof():
            writer.write_eof()

    sender = asyncio.ensure_future(send())
    got = 0
    try:
        while got < n:
            data = await reader.read(1 << 20)
            if not data:
                raise ConnectionError(f"echo ended after {got} of {n} bytes")
            if check:
                view = memoryview(data)
                while view:
                    off = got % CHUNK
                    k = min(len(view), CHUNK - off)
                    if view[:k] != block[off : off + k]:
                        raise ValueError(f"echo differs at byte {got}")
                    view = view[k:]
                    got += k
            else:
                got += len(data)
        await sender
    finally:
        sender.cancel()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


class Closing(asyncio.Protocol):
    """A protocol whose ``lost`` future is done once the connection is closed."""

    def __init__(self) -> None:
        self.lost = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)


async def sendfile_once(host: str, port: int, path: str, n: int) -> str:
    """Connect, ``loop.sendfile`` the first ``n`` bytes of ``path``, close (and wait until
    it is closed: the loop stops between commands); the path taken."""
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_connection(Closing, host, port)
    try:
        with open(path, "rb") as f:
            try:
                await loop.sendfile(transport, f, 0, n, fallback=False)
                how = "native"
            except asyncio.SendfileNotAvailableError:
                f.seek(0)
                await loop.sendfile(transport, f, 0, n, fallback=True)
                how = "fallback"
    finally:
        transport.close()
        await asyncio.wait_for(protocol.lost, 10)
    return how


def commands(factory: Callable[[], asyncio.AbstractEventLoop],
             handle: Callable[[list[str]], Coroutine[Any, Any, str]]) -> None:  # fmt: skip
    """One loop for the program's life; each stdin line runs ``handle`` on it."""
    with asyncio.Runner(loop_factory=factory) as runner:
        say(f"loop {describe(runner.get_loop())}")
        for line in iter(sys.stdin.readline, ""):
            try:
                answer = runner.run(handle(line.split()))
            except NotImplementedError as e:
                answer = f"unsupported NotImplementedError {e}".strip()
            except Exception as e:  # one line for the bench, then the next command
                answer = f"error {type(e).__name__}: {e}".replace("\n", " ")
            say(answer)


def floor(lib: str, host: str, port: int) -> None:
    """The C hello server on ``host:port`` until SIGTERM (which ``serve`` takes: status 0)."""
    serve = ctypes.CDLL(lib).serve
    serve.argtypes = [ctypes.c_int]
    serve.restype = ctypes.c_int
    say("loop c.epoll -")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(4096)
        listener.setblocking(False)  # serve accepts until EAGAIN
        say(f"listening {host} {port}")
        rc = serve(listener.fileno())
    if rc < 0:
        raise SystemExit(f"serve: {os.strerror(-rc)}")


def main(argv: list[str]) -> None:
    if argv[0] == "floor":
        floor(argv[1], argv[2], int(argv[3]))
        return
    mode, factory = argv[0], loop_factory(argv[1])
    if mode in ("hello", "echo"):
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(serve(mode, argv[2], int(argv[3])))
    elif mode == "echo-client":

        async def one_echo(words: list[str]) -> str:
            host, port, n, check = words
            await echo_once(host, int(port), int(n), check == "check")
            return f"echoed {n}"

        commands(factory, one_echo)
    elif mode == "sendfile":
        path = argv[2]

        async def one_sendfile(words: list[str]) -> str:
            host, port, n = words
            how = await sendfile_once(host, int(port), path, int(n))
            return f"sent {n} {how}"

        commands(factory, one_sendfile)
    else:
        raise SystemExit(f"unknown mode {mode!r} (hello, echo, echo-client, sendfile or floor)")


if __name__ == "__main__":
    main(sys.argv[1:])
