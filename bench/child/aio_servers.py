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
``python aio_servers.py hello-calls LOOP HOST PORT``
    The ``hello`` server counting the calls its loop's thread makes (:class:`CallCounter`,
    installed with ``sys.setprofile`` once it listens, removed when it stops). Command
    ``calls`` on stdin answers ``calls JSON``: the counts so far (:meth:`CallCounter.snapshot`);
    the server stops when its stdin closes (or on SIGTERM).
``python aio_servers.py hello-client``
    The load of ``hello-calls``, plain Python (``selectors``, no event loop of the bench's):
    command ``connect HOST PORT C`` opens C keep-alive connections (``connected C``); ``run N``
    sends N ``GET /`` requests over them, one in flight on each connection as wrk keeps them,
    and checks every answer is ``HELLO`` (``done N SECONDS``). Exits when its stdin closes.

Every loop program first prints ``loop MODULE.CLASS ENGINE`` (``ENGINE`` is ``loop.engine``
where the loop has one, else ``-``); the servers then print ``listening HOST PORT``. A server
stops on SIGTERM (exit status 0); a command program when its stdin closes. A loop that cannot
be imported ends the program with status 3 and one line on stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib
import json
import os
import selectors
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from types import CodeType, FrameType
from typing import Any, cast

TERM = b"\r\n\r\n"
HELLO = (
    b"HTTP/1.1 200 OK\r\nServer: fdkit-ring\r\nContent-Type: text/plain\r\n"
    b"Content-Length: 6\r\nConnection: keep-alive\r\n\r\nhallo\n"
)
CHUNK = 64 * 1024
REQUEST = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n"
CLIENT_TIMEOUT = 30.0  # seconds hello-client waits for an answer before it gives up
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


def stop_on_signals(
    loop: asyncio.AbstractEventLoop,
) -> tuple[asyncio.Future[None], Callable[[], None]]:
    """A future that SIGTERM or SIGINT completes (a server runs until it is done), and the
    function that completes it, for the other reasons to stop."""
    stop: asyncio.Future[None] = loop.create_future()

    def finish() -> None:
        if not stop.done():
            stop.set_result(None)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, finish)
    return stop, finish


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


class CallCounter:
    """The calls made in the thread it is installed in (``sys.setprofile(counter)``): every
    call of a Python function (a ``call`` event, what cProfile counts as a call: also a
    function called by C or Rust code, and a generator or coroutine resumed), by its code
    object; and every call of a C function from Python code (``c_call``), by the calling
    code. The hook's own work is not counted (a profile function is not profiled); it slows
    the thread down, so the figures are counts, not times."""

    def __init__(self) -> None:
        self.py: dict[CodeType, int] = {}
        self.c: dict[CodeType, int] = {}

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            code = frame.f_code
            self.py[code] = self.py.get(code, 0) + 1
        elif event == "c_call":
            code = frame.f_code
            self.c[code] = self.c.get(code, 0) + 1

    def snapshot(self) -> dict[str, Any]:
        """``{"own": FILE, "py": {NAME: N}, "c": {NAME: N}}``: the counts so far, NAME being
        ``FILE:LINE:QUALNAME`` of the code (the called function's for ``py``, the caller's
        for ``c``), FILE this module's file for the protocol's own functions. Safe from
        another thread (each dict is copied by one C call, under the GIL)."""
        py, c = dict(self.py), dict(self.c)
        return {"own": __file__, "py": _by_name(py), "c": _by_name(c)}


def _by_name(counts: dict[CodeType, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for code, n in counts.items():
        name = f"{code.co_filename}:{code.co_firstlineno}:{code.co_qualname}"
        out[name] = out.get(name, 0) + n
    return out


def answer_calls(counter: CallCounter, done: Callable[[], None]) -> None:
    """The command thread of ``hello-calls``: ``calls`` answers the counts; at the end of
    stdin ``done`` runs (it stops the server)."""
    for line in iter(sys.stdin.readline, ""):
        if line.split() == ["calls"]:
            say("calls " + json.dumps(counter.snapshot()))
        else:
            say(f"error unknown command {line.strip()!r}")
    done()


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


async def serve(mode: str, host: str, port: int, counter: CallCounter | None = None) -> None:
    """Serve until SIGTERM; with ``counter``, count the calls of the loop's thread while
    serving (and serve until stdin closes too: see :func:`answer_calls`)."""
    loop = asyncio.get_running_loop()
    say(f"loop {describe(loop)}")
    stop, finish = stop_on_signals(loop)
    server: asyncio.Server | asyncio.AbstractServer
    if mode == "hello":
        server = await loop.create_server(Hello, host, port, backlog=4096, reuse_address=True)
    else:
        server = await asyncio.start_server(echo, host, port, backlog=4096, reuse_address=True)
    say(f"listening {host} {port}")
    if counter is None:
        await stop
    else:

        def done() -> None:  # stdin closed: stop serving (unless it has already stopped)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(finish)

        threading.Thread(target=answer_calls, args=(counter, done), daemon=True).start()
        sys.setprofile(counter)
        try:
            await stop
        finally:
            sys.setprofile(None)
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


def hello_requests(socks: list[socket.socket], n: int) -> None:
    """``n`` hello requests over ``socks``, one in flight on each connection (a new one as
    each answer comes, as wrk keeps them), every answer checked to be ``HELLO``."""
    sel = selectors.DefaultSelector()
    pending = {s.fileno(): bytearray() for s in socks}
    sent = answered = 0
    try:
        for s in socks[:n]:
            s.sendall(REQUEST)
            sent += 1
            sel.register(s, selectors.EVENT_READ)
        while answered < n:
            events = sel.select(CLIENT_TIMEOUT)
            if not events:
                raise TimeoutError(f"no answer within {CLIENT_TIMEOUT:g} s ({answered} of {n})")
            for key, _ in events:
                s = cast(socket.socket, key.fileobj)
                buf = pending[key.fd]
                data = s.recv(1 << 16)
                if not data:
                    raise ConnectionError(f"the server closed a connection ({answered} of {n})")
                buf += data
                while len(buf) >= len(HELLO):
                    if buf[: len(HELLO)] != HELLO:
                        raise ValueError(f"the server answered {bytes(buf[:80])!r}")
                    del buf[: len(HELLO)]
                    answered += 1
                    if sent < n:
                        s.sendall(REQUEST)
                        sent += 1
    finally:
        sel.close()


def hello_client() -> None:
    """The ``hello-client`` program (see the module docstring)."""
    socks: list[socket.socket] = []
    try:
        for line in iter(sys.stdin.readline, ""):
            words = line.split()
            try:
                if words[:1] == ["connect"]:
                    host, port, count = words[1], int(words[2]), int(words[3])
                    for _ in range(count):
                        s = socket.create_connection((host, port), timeout=CLIENT_TIMEOUT)
                        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        socks.append(s)
                    say(f"connected {len(socks)}")
                elif words[:1] == ["run"] and socks:
                    n = int(words[1])
                    t0 = time.perf_counter()
                    hello_requests(socks, n)
                    say(f"done {n} {time.perf_counter() - t0:.3f}")
                else:
                    say(f"error unknown command {line.strip()!r}")
            except (OSError, ValueError) as e:
                say(f"error {type(e).__name__}: {e}".replace("\n", " "))
    finally:
        for s in socks:
            s.close()


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
    if argv[0] == "hello-client":
        hello_client()
        return
    mode, factory = argv[0], loop_factory(argv[1])
    if mode in ("hello", "echo"):
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(serve(mode, argv[2], int(argv[3])))
    elif mode == "hello-calls":
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(serve("hello", argv[2], int(argv[3]), CallCounter()))
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
        raise SystemExit(
            f"unknown mode {mode!r} (hello, hello-calls, hello-client, echo, "
            "echo-client, sendfile or floor)"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
