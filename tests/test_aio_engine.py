"""fdkit.aio's io_uring engine: what the CPython suites cannot see from outside.

The engine keeps every registration in epoll and only waits through the ring: an idle loop
sleeps in io_uring_enter(2); nothing is taken early (a server's connections wait in the kernel's
accept queue, a paused transport's bytes in its socket, until asyncio takes them, as on
asyncio's own loop); nothing of the ring is armed while callbacks run; a signal handler ends an
idle wait; the reactor closed from another thread while the loop waits closes after the wait;
streams paused and resumed lose nothing; a closed connection's late bytes never reach the next
owner of its fd number; a loop closed with transports open leaks no fd; a forked child's copy
never touches the parent's ring. A loop made without naming an engine runs on epoll; asked for
io_uring where it cannot run, it raises and says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import platform
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import fdkit.aio
from fdkit.aio import EpollEventLoop, EventLoop, UringEventLoop
from fdkit.aio._loop import DEFAULT_REASON
from helpers import run_python_without_uring, syscall_of
from helpers.aio import URING_WHY, needs_uring_engine

needs_uring = needs_uring_engine


def run(coro: Any, loop_cls: Callable[[], EventLoop] = UringEventLoop) -> Any:
    with asyncio.Runner(loop_factory=loop_cls) as runner:
        return runner.run(coro)


def test_the_default_engine_is_epoll_and_io_uring_comes_on_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FDKIT_AIO_ENGINE", raising=False)

    async def main() -> tuple[str, str | None]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, EpollEventLoop)
        return loop.engine, loop.engine_reason

    assert run(main(), EventLoop) == ("epoll", DEFAULT_REASON)
    assert run(main(), fdkit.aio.new_event_loop) == ("epoll", DEFAULT_REASON)
    assert fdkit.aio.engine_available() == "epoll"
    assert fdkit.aio.engine_unavailable("epoll") is None
    if URING_WHY is not None:
        return
    assert fdkit.aio.engine_unavailable("io_uring") is None
    for asked in ({"engine": "io_uring"}, {"engine": "uring"}):
        loop = EventLoop(**asked)
        try:
            assert (type(loop), loop.engine, loop.engine_reason) == (
                UringEventLoop,
                "io_uring",
                None,
            )
        finally:
            loop.close()
    monkeypatch.setenv("FDKIT_AIO_ENGINE", "io_uring")
    assert fdkit.aio.engine_available() == "io_uring"
    assert run(_engine_of(), EventLoop) == "io_uring"


async def _engine_of() -> str:
    return asyncio.get_running_loop().engine  # type: ignore[attr-defined,no-any-return]


def test_engine_epoll_on_request_and_bad_engine_refused() -> None:
    loop = EventLoop(engine="epoll")
    try:
        assert loop.engine == "epoll"
        assert loop.engine_reason == "engine='epoll' was asked for"
    finally:
        loop.close()
    with pytest.raises(ValueError, match="engine must be"):
        EventLoop(engine="kqueue")


def test_without_io_uring_the_default_loop_serves_and_asking_for_io_uring_says_why() -> None:
    code = (
        "import asyncio, errno, fdkit.aio\n"
        "async def main():\n"
        "    async def echo(r, w):\n"
        "        w.write(await r.read(5)); await w.drain(); w.close()\n"
        "    s = await asyncio.start_server(echo, '127.0.0.1', 0)\n"
        "    r, w = await asyncio.open_connection(*s.sockets[0].getsockname())\n"
        "    w.write(b'hello'); data = await r.read(); w.close(); s.close()\n"
        "    loop = asyncio.get_running_loop()\n"
        "    return loop.engine, loop.engine_reason, data\n"
        "print(fdkit.aio.run(main()))\n"
        "why = fdkit.aio.engine_unavailable('io_uring')\n"
        "try:\n"
        "    fdkit.aio.EventLoop(engine='io_uring')\n"
        "except OSError as e:\n"
        "    print(repr((why, e.errno == errno.ENOSYS, e.strerror)))\n"
    )
    r = run_python_without_uring(code)
    assert r.returncode == 0, r.stderr
    served, refused = r.stdout.splitlines()
    assert eval(served) == ("epoll", DEFAULT_REASON, b"hello")
    why, enosys, message = eval(refused)
    assert "ENOSYS" in why, why
    assert enosys
    assert message == f"io_uring engine unavailable: {why}"


class _Collect(asyncio.Protocol):
    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.paused = False
        self.calls_while_paused = 0
        self.eof = asyncio.get_running_loop().create_future()
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.paused:
            self.calls_while_paused += 1
        self.chunks.append(data)

    def eof_received(self) -> None:
        self.eof.set_result(None)


@needs_uring
def test_pause_reading_holds_bytes_in_flight_and_resume_delivers_them_in_order() -> None:
    payload = os.urandom(4 * 1024 * 1024)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        proto: list[_Collect] = []

        def factory() -> _Collect:
            proto.append(_Collect())
            return proto[0]

        server = await loop.create_server(factory, "127.0.0.1", 0)
        _r, w = await asyncio.open_connection(*server.sockets[0].getsockname())
        w.write(payload)
        writer_done = asyncio.ensure_future(w.drain())
        while not proto or not proto[0].chunks:
            await asyncio.sleep(0.001)
        p = proto[0]
        # Paused after the first bytes, ten times, while the sender keeps sending.
        for _ in range(10):
            p.transport.pause_reading()
            p.paused = True
            await asyncio.sleep(0.01)
            p.paused = False
            p.transport.resume_reading()
            await asyncio.sleep(0.002)
        await writer_done
        w.write_eof()
        await asyncio.wait_for(p.eof, 10)
        assert p.calls_while_paused == 0
        assert hashlib.sha256(b"".join(p.chunks)).digest() == hashlib.sha256(payload).digest()
        w.close()
        p.transport.close()
        server.close()
        await server.wait_closed()

    run(main())


@needs_uring
def test_a_closed_connections_late_bytes_never_reach_the_next_owner_of_its_fd() -> None:
    """Transport A is closed while its peer keeps sending; B, accepted right after, usually
    gets A's fd number. B must see only its own peer's bytes."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        seen: dict[str, list[bytes]] = {}
        fds: dict[str, int] = {}

        class Named(asyncio.Protocol):
            def connection_made(self, transport: Any) -> None:
                self.transport = transport
                self.name: str | None = None

            def data_received(self, data: bytes) -> None:
                if self.name is None:
                    self.name = data[:1].decode()
                    fds[self.name] = self.transport.get_extra_info("socket").fileno()
                    seen[self.name] = []
                    if self.name == "A":
                        self.transport.close()
                        return
                seen[self.name].append(data)

        server = await loop.create_server(Named, "127.0.0.1", 0)
        addr = server.sockets[0].getsockname()
        ca = socket.create_connection(addr)
        ca.sendall(b"A" * 100)
        while "A" not in fds:
            await asyncio.sleep(0.001)
        # A's peer keeps sending into the closed connection (bytes that may be in flight).
        with contextlib.suppress(OSError):
            ca.send(b"a" * 65536, socket.MSG_DONTWAIT)
        await asyncio.sleep(0.01)
        cb = socket.create_connection(addr)
        cb.sendall(b"B" * 10)
        while "B" not in fds:
            await asyncio.sleep(0.001)
        cb.sendall(b"b" * 1000)
        cb.shutdown(socket.SHUT_WR)
        for _ in range(200):
            if sum(map(len, seen["B"])) >= 1000 - 10 + 10:
                break
            await asyncio.sleep(0.005)
        data = b"".join(seen["B"])
        assert set(data) <= set(b"Bb"), data[:40]
        ca.close()
        cb.close()
        server.close()
        await server.wait_closed()

    run(main())


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _armed_polls(reactor: Any) -> int | None:
    """Polls the kernel holds armed for the reactor's ring (its fdinfo's ``PollList``), or None
    where this kernel's fdinfo does not list them."""
    with open(f"/proc/self/fdinfo/{reactor.fileno()}") as f:
        lines = f.read().splitlines()
    if "PollList:" not in lines:
        return None
    armed = 0
    for line in lines[lines.index("PollList:") + 1 :]:
        if not line[:1].isspace():
            break
        armed += 1
    return armed


def _assert_nothing_armed(loop: Any) -> None:
    reactor = loop._reactor
    assert reactor.in_flight() == 0
    assert _armed_polls(reactor) in (0, None)


def _accept_queue(sock: Any) -> int:
    """How many connections wait in a listening TCP socket's accept queue (``tcpi_unacked`` of
    a listener's TCP_INFO)."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return struct.unpack_from("I", info, 24)[0]  # type: ignore[no-any-return]


def _unread(sock: Any) -> int:
    """Bytes waiting in a socket's receive queue (FIONREAD)."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))[0]  # type: ignore[no-any-return]


#: asyncio's loop, the oracle, and fdkit's on each engine.
_NEW_LOOPS = pytest.mark.parametrize(
    "factory",
    [asyncio.new_event_loop, pytest.param(UringEventLoop, marks=needs_uring), EpollEventLoop],
    ids=["asyncio", "io_uring", "epoll"],
)
_IO_URING_ENTER = 426  # the same number on x86_64 and aarch64 (the generic syscall table)

#: ``@each_ring_wait``: a test runs once per way the ring waits (``FDKIT_AIO_RING_WAIT``):
#: reading the epoll instance (``epoll_wait``; where the kernel lacks the op, the loop polls
#: anyway, which the test then checks twice) and polling its fd (``poll``).
each_ring_wait = pytest.mark.parametrize("ring_wait", ["epoll_wait", "poll"])


@needs_uring
@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "aarch64"), reason="syscall numbers of x86_64/aarch64"
)
@each_ring_wait
def test_an_idle_loop_sleeps_in_io_uring_enter(
    ring_wait: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While nothing is ready the loop's thread sleeps in io_uring_enter(2), the ring waiting for
    the epoll instance (read from /proc/self/task/<tid>/syscall by another thread)."""
    monkeypatch.setenv("FDKIT_AIO_RING_WAIT", ring_wait)
    tid = threading.get_native_id()
    seen: list[int | None] = []  # None: the thread was runnable, not blocked in a syscall

    def sample() -> None:
        for _ in range(20):
            time.sleep(0.01)
            seen.append(syscall_of(tid))

    async def main() -> None:
        sampler = threading.Thread(target=sample)
        sampler.start()
        await asyncio.sleep(0.4)
        sampler.join()

    run(main())
    assert seen.count(_IO_URING_ENTER) >= len(seen) // 2, seen


@needs_uring
@each_ring_wait
def test_nothing_of_the_ring_is_armed_while_callbacks_run(
    ring_wait: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Waits that time out, waits that end with readiness, callbacks that run between them:
    whenever a callback runs, the ring has no op in flight and the kernel holds no poll armed
    for it (a late completion would interrupt the thread's blocking calls, and the poll holds a
    reference to the epoll instance)."""
    monkeypatch.setenv("FDKIT_AIO_RING_WAIT", ring_wait)
    checks = 0

    async def main() -> None:
        nonlocal checks
        loop = asyncio.get_running_loop()

        async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while data := await r.read(4096):
                _assert_nothing_armed(loop)
                w.write(data)
                await w.drain()
            w.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        r, w = await asyncio.open_connection(*server.sockets[0].getsockname())
        for i in range(30):
            await asyncio.sleep(0.002 if i % 2 else 0)  # a wait that times out, then none
            _assert_nothing_armed(loop)
            w.write(b"ping %d" % i)
            assert await r.read(100) == b"ping %d" % i
            _assert_nothing_armed(loop)
            checks += 2
        w.close()
        await w.wait_closed()
        server.close()
        await server.wait_closed()
        _assert_nothing_armed(loop)

    run(main())
    assert checks == 60


@_NEW_LOOPS
def test_a_server_takes_no_connection_before_asyncio_accepts(factory: Any) -> None:
    """Connections made while the loop is busy wait in the kernel's accept queue, where
    ``ss``, the backlog and RLIMIT_NOFILE see them, until asyncio's accept callback runs: an
    engine that accepted ahead (a multishot accept) would have taken them already. asyncio's
    own loop is the oracle."""

    async def main() -> tuple[int, int, int]:
        handled: list[Any] = []
        server = await asyncio.start_server(lambda r, w: handled.append(w), "127.0.0.1", 0)
        listener = server.sockets[0]
        await asyncio.sleep(0.05)  # the loop has waited, the listener registered
        clients = [socket.create_connection(listener.getsockname()) for _ in range(5)]
        time.sleep(0.2)  # the loop is busy in this callback
        queued = _accept_queue(listener)
        while len(handled) < 5:
            await asyncio.sleep(0.01)
        left = _accept_queue(listener)
        for w in handled:
            w.close()
        for c in clients:
            c.close()
        server.close()
        await server.wait_closed()
        return queued, left, len(handled)

    with asyncio.Runner(loop_factory=factory) as runner:
        assert runner.run(main()) == (5, 0, 5)


@_NEW_LOOPS
def test_a_paused_transport_leaves_the_bytes_in_its_socket(factory: Any) -> None:
    """A paused transport's peer keeps sending; while the loop waits (through the ring on
    fdkit's engine) the bytes stay in the socket's receive queue, none taken, none delivered,
    until resume_reading(). asyncio's own loop is the oracle."""
    size = 32 * 1024

    async def main() -> tuple[int, int, int]:
        loop = asyncio.get_running_loop()
        got = bytearray()
        made = loop.create_future()

        class Collect(asyncio.Protocol):
            def connection_made(self, transport: Any) -> None:
                made.set_result(transport)

            def data_received(self, data: bytes) -> None:
                got.extend(data)

        server = await loop.create_server(Collect, "127.0.0.1", 0)
        peer = socket.create_connection(server.sockets[0].getsockname())
        transport = await asyncio.wait_for(made, 10)
        transport.pause_reading()
        peer.sendall(b"x" * size)
        await asyncio.sleep(0.2)
        unread, early = _unread(transport.get_extra_info("socket")), len(got)
        transport.resume_reading()
        while len(got) < size:
            await asyncio.sleep(0.01)
        peer.close()
        transport.close()
        server.close()
        await server.wait_closed()
        return unread, early, len(got)

    with asyncio.Runner(loop_factory=factory) as runner:
        assert runner.run(main()) == (size, 0, size)


class _Alarm(Exception):
    pass


@_NEW_LOOPS
def test_a_signal_handler_that_raises_ends_an_idle_wait(factory: Any) -> None:
    """A loop with nothing to do waits with no timeout; SIGALRM's Python handler raises, and
    run_forever() ends with that exception, as asyncio's loop does (the ring's wait ends with
    the signal, and nothing is left armed)."""

    def on_alarm(signum: int, frame: Any) -> None:
        raise _Alarm

    old = signal.signal(signal.SIGALRM, on_alarm)
    loop = factory()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        t = time.monotonic()
        with pytest.raises(_Alarm):
            loop.run_forever()
        assert time.monotonic() - t < 5
        if factory is UringEventLoop:
            _assert_nothing_armed(loop)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        loop.close()


@needs_uring
def test_the_reactor_closed_from_another_thread_while_it_waits_closes_after_the_wait() -> None:
    """close() from another thread while the loop's thread waits neither raises nor blocks: the
    reactor says closed at once, the wait ends as it would have (its timeout), and the ring's fd
    is gone after it. A second thread's wait meanwhile is refused, as asyncio refuses a loop's
    use from another thread."""
    from fdkit._fdkit import Reactor

    reactor = Reactor()
    ring_fd = reactor.fileno()
    ep = select.epoll()
    result: list[Any] = []
    waiter = threading.Thread(target=lambda: result.append(reactor.wait(ep.fileno(), 0.5)))
    try:
        waiter.start()
        time.sleep(0.1)
        with pytest.raises(RuntimeError, match="in use by another thread"):
            reactor.wait(ep.fileno(), 0)
        t = time.monotonic()
        reactor.close()
        assert time.monotonic() - t < 0.1, "close() waited for the wait"
        assert reactor.closed
        waiter.join(5)
        assert result == [False]
        with pytest.raises(ValueError, match="closed Reactor"):
            reactor.fileno()
        with pytest.raises(ValueError, match="closed Reactor"):
            reactor.wait(ep.fileno(), 0)
        with contextlib.suppress(OSError):
            assert "io_uring" not in os.readlink(f"/proc/self/fd/{ring_fd}")
        reactor.close()  # idempotent
    finally:
        waiter.join(5)
        reactor.close()
        ep.close()


@needs_uring
def test_a_signal_whose_handler_returns_lets_the_wait_go_on() -> None:
    """``Reactor.wait`` called from Python retries after a signal whose handler returns
    (PEP 475), for what is left of its timeout."""
    from fdkit._fdkit import Reactor

    calls: list[int] = []
    old = signal.signal(signal.SIGALRM, lambda signum, frame: calls.append(signum))
    reactor = Reactor()
    ep = select.epoll()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        t = time.monotonic()
        assert reactor.wait(ep.fileno(), 0.3) is False
        assert time.monotonic() - t >= 0.28
        assert calls == [signal.SIGALRM]
        assert reactor.in_flight() == 0
        r, w = os.pipe()
        ep.register(r, select.EPOLLIN)
        os.write(w, b"x")
        assert reactor.wait(ep.fileno()) is True
        os.close(r)
        os.close(w)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        reactor.close()
        ep.close()


@needs_uring
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_closing_a_loop_with_transports_and_a_server_open_leaks_no_fd() -> None:
    before = _open_fds()
    loop = UringEventLoop()
    peers: list[socket.socket] = []
    kept: list[Any] = []

    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: kept.append(w), "127.0.0.1", 0)
        addr = server.sockets[0].getsockname()
        for _ in range(20):
            kept.append(await asyncio.open_connection(*addr))  # reading, nothing sent
        for _ in range(5):
            peers.append(socket.create_connection(addr))  # accepted, then left
        await asyncio.sleep(0.05)
        _assert_nothing_armed(loop)

    loop.run_until_complete(main())
    reactor = loop._reactor
    loop.close()  # nothing closed the transports or the server: the loop's close must cope
    assert reactor.closed
    for p in peers:
        p.close()
    kept.clear()
    import gc

    gc.collect()
    assert _open_fds() <= before


@needs_uring
def test_pause_reading_inside_data_received_stops_the_rest_of_the_batch() -> None:
    """2 MiB sent at once: asyncio reads it in many chunks. A protocol that pauses in
    data_received must get no further call until it resumes, and lose nothing."""
    payload = os.urandom(2 * 1024 * 1024)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        class Pausing(asyncio.Protocol):
            def __init__(self) -> None:
                self.paused = False
                self.early = 0
                self.chunks: list[bytes] = []

            def connection_made(self, transport: Any) -> None:
                self.transport = transport

            def data_received(self, data: bytes) -> None:
                if self.paused:
                    self.early += 1
                self.chunks.append(data)
                self.paused = True
                self.transport.pause_reading()
                loop.call_soon(self.resume)

            def resume(self) -> None:
                self.paused = False
                self.transport.resume_reading()

            def eof_received(self) -> None:
                done.set_result(self)

        server = await loop.create_server(Pausing, "127.0.0.1", 0)
        peer = socket.create_connection(server.sockets[0].getsockname())
        peer.setblocking(False)
        await loop.sock_sendall(peer, payload)
        peer.shutdown(socket.SHUT_WR)
        p = await asyncio.wait_for(done, 30)
        assert p.early == 0
        assert b"".join(p.chunks) == payload
        assert len(p.chunks) > 1
        peer.close()
        p.transport.close()
        server.close()
        await server.wait_closed()

    run(main())


@needs_uring
def test_a_data_received_that_raises_goes_to_the_exception_handler_and_the_loop_goes_on() -> None:
    contexts: list[dict[str, Any]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _l, ctx: contexts.append(ctx))
        lost = loop.create_future()

        class Boom(asyncio.Protocol):
            def data_received(self, data: bytes) -> None:
                raise ZeroDivisionError("boom")

            def connection_lost(self, exc: BaseException | None) -> None:
                lost.set_result(exc)

        server = await loop.create_server(Boom, "127.0.0.1", 0)
        peer = socket.create_connection(server.sockets[0].getsockname())
        peer.sendall(b"x")
        exc = await asyncio.wait_for(lost, 10)
        assert isinstance(exc, ZeroDivisionError)
        await asyncio.sleep(0)
        peer.close()
        server.close()
        await server.wait_closed()

    run(main())
    assert len(contexts) == 1
    assert contexts[0]["message"] == "Fatal error: protocol.data_received() call failed."
    assert isinstance(contexts[0]["exception"], ZeroDivisionError)


# A fork in a multi-threaded process, which Python 3.12+ warns of (a DeprecationWarning that
# `-W error` made os.fork() raise from 3.15; 3.12-3.14 dropped it): this test forks so.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
@needs_uring
def test_a_forked_childs_copy_of_the_loop_never_touches_the_parents_ring() -> None:
    """After fork(2) the ring is shared: a child that closes (or collects) its copy of the loop
    must not cancel or reap anything, or the parent's completions vanish into the child."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, EventLoop)

        handled = loop.create_future()

        async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while data := await r.read(4096):
                w.write(data)
                await w.drain()
            w.close()
            await w.wait_closed()
            handled.set_result(None)

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        r, w = await asyncio.open_connection(*server.sockets[0].getsockname())
        w.write(b"before")
        assert await asyncio.wait_for(r.readexactly(6), 10) == b"before"
        pid = os.fork()
        if pid == 0:  # the child: every use of the shared ring is refused, close is harmless
            code = 1
            try:
                reactor = loop._reactor  # type: ignore[attr-defined]
                assert reactor.closed
                try:
                    reactor.wait(loop._selector._selector.fileno(), 0)  # type: ignore[attr-defined]
                except RuntimeError as exc:
                    code = 0 if "forked" in str(exc) else 3
                reactor.close()
                del reactor
                import gc

                gc.collect()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        for i in range(200):  # the parent's ring still waits
            msg = f"after {i}".encode()
            w.write(msg)
            assert await asyncio.wait_for(r.readexactly(len(msg)), 10) == msg
        w.close()
        await w.wait_closed()
        await asyncio.wait_for(handled, 10)
        server.close()
        await server.wait_closed()

    run(main())


@_NEW_LOOPS
def test_small_writes_arrive_whole_in_order_and_go_out_at_once(factory: Any) -> None:
    """Small writes mixed with a large write, a write_eof and an abort: the peer gets every
    byte in order, and a small write is on its way at once (nothing counts in
    get_write_buffer_size() after it); abort() still sends what was written before it.
    asyncio's own loop is the oracle."""
    big = os.urandom(300_000)

    async def main() -> tuple[bytes, bytes, list[int]]:
        loop = asyncio.get_running_loop()
        sizes: list[int] = []

        class Writer(asyncio.Protocol):
            def connection_made(self, transport: Any) -> None:
                self.transport = transport

            def data_received(self, data: bytes) -> None:
                t = self.transport
                if data == b"go":
                    t.write(b"head,")
                    t.write(b"body,")
                    sizes.append(t.get_write_buffer_size())
                    t.write(big)
                    t.write(b",tail")
                    t.write_eof()
                elif data == b"abort":
                    t.write(b"bye")
                    t.abort()

        server = await loop.create_server(Writer, "127.0.0.1", 0)
        addr = server.sockets[0].getsockname()
        got = []
        for cmd in (b"go", b"abort"):
            r, w = await asyncio.open_connection(*addr)
            w.write(cmd)
            got.append(await asyncio.wait_for(r.read(), 10))
            w.close()
            await w.wait_closed()
        server.close()
        await server.wait_closed()
        return got[0], got[1], sizes

    with asyncio.Runner(loop_factory=factory) as runner:
        first, second, sizes = runner.run(main())
    assert first == b"head,body," + big + b",tail"
    assert second == b"bye"
    assert sizes == [0]  # sent at once, as asyncio does


_EMFILE_PROGRAM = """
import asyncio, resource, subprocess, sys
import fdkit.aio
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (48, hard))
CLIENT = (
    "import resource, socket, sys\\n"
    "h = resource.getrlimit(resource.RLIMIT_NOFILE)[1]\\n"
    "resource.setrlimit(resource.RLIMIT_NOFILE, (h, h))\\n"
    "cs = [socket.create_connection((sys.argv[1], int(sys.argv[2]))) for _ in range(80)]\\n"
    "print('ok', flush=True)\\n"
    "sys.stdin.read()\\n"
)
async def main():
    loop = asyncio.get_running_loop()
    msgs = []
    loop.set_exception_handler(lambda _l, ctx: msgs.append(ctx["message"]))
    conns = []
    async def handler(r, w):
        conns.append(w)
    server = await asyncio.start_server(handler, "127.0.0.1", 0, backlog=128)
    host, port = server.sockets[0].getsockname()
    p = subprocess.Popen([sys.executable, "-c", CLIENT, host, str(port)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert (await loop.run_in_executor(None, p.stdout.readline)) == b"ok\\n"
        await asyncio.sleep(0.5)
        first = len(conns)
        for w in conns:
            w.close()
        conns.clear()
        for _ in range(100):  # asyncio retries 1 s after EMFILE; the rest come in then
            await asyncio.sleep(0.05)
            if len(conns) >= 80 - first - 2:
                break
        print(repr((first, len(conns), sorted(set(msgs)))))
        for w in conns:
            w.close()
    finally:
        p.stdin.close()
        p.wait()
    server.close()
    await server.wait_closed()
factory = {
    "io_uring": lambda: fdkit.aio.EventLoop(engine="io_uring"),
    "epoll": fdkit.aio.new_event_loop,
    "asyncio": asyncio.new_event_loop,
}[sys.argv[1]]
with asyncio.Runner(loop_factory=factory) as runner:
    runner.run(main())
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "loop_name", ["asyncio", pytest.param("io_uring", marks=needs_uring), "epoll"]
)
def test_a_server_out_of_fds_says_so_and_accepts_the_rest_once_fds_are_back(
    loop_name: str,
) -> None:
    """``ulimit -n 48`` and 80 clients: accept(2) fails with EMFILE; the loop answers
    as asyncio's does (the exception handler hears "socket.accept() out of system resource",
    accepting resumes a second later) and the waiting clients are served once fds are free.
    The second round is bounded by the fds the first one freed, so it serves the rest or as
    many as the first, whichever is fewer (both loops serve about 38 + 38 of the 80 here; the
    io_uring engine holds one fd more, its epoll instance)."""
    r = subprocess.run(
        [sys.executable, "-c", _EMFILE_PROGRAM, loop_name],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    first, rest, msgs = eval(r.stdout)
    assert 0 < first < 80
    assert rest >= min(80 - first, first) - 2
    assert msgs == ["socket.accept() out of system resource"]
