"""Bad input and faults on fdkit.aio, with asyncio's own loop as the oracle: every misuse raises
what asyncio raises (the same class and message; for the kernel's refusals the same OSError
subclass and errno), a callback's exception goes to the exception handler and the loop goes on,
Ctrl-C stops ``fdkit.aio.run`` as it stops ``asyncio.run``, closing a loop with operations in
flight neither hangs nor leaves fds, and a cancelled connect or read never hands its reply to the
next owner of its fd number."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from helpers import open_fds
from helpers.aio import (
    ASYNCIO,
    FDKIT,
    PYTHON,
    Loop,
    each_fdkit_loop,
    each_loop,
    fd_count,
    python_env,
    stop,
)

# --- misuse: the same exception as asyncio ---------------------------------------------------

Probe = Callable[[asyncio.AbstractEventLoop], object]


def _nothing() -> None:
    pass


async def _coro_fn() -> None:
    pass


@contextmanager
def _closing_coro() -> Iterator[Coroutine[Any, Any, None]]:
    """A coroutine the probe hands to a call that refuses it; closed after (never awaited)."""
    coro = _coro_fn()
    try:
        yield coro
    finally:
        coro.close()


def _closed(call: Callable[[asyncio.AbstractEventLoop], object]) -> Probe:
    def probe(loop: asyncio.AbstractEventLoop) -> object:
        loop.close()
        return call(loop)

    return probe


def _debug(call: Callable[[asyncio.AbstractEventLoop], object]) -> Probe:
    def probe(loop: asyncio.AbstractEventLoop) -> object:
        loop.set_debug(True)
        return call(loop)

    return probe


def _running(call: Callable[[asyncio.AbstractEventLoop], Coroutine[Any, Any, object]]) -> Probe:
    """Runs the coroutine ``call(loop)`` makes on the loop (the misuse happens inside it)."""

    def probe(loop: asyncio.AbstractEventLoop) -> object:
        return loop.run_until_complete(call(loop))

    return probe


def _run_until_complete_closed(loop: asyncio.AbstractEventLoop) -> object:
    fut = loop.create_future()
    loop.close()
    return loop.run_until_complete(fut)


def _create_task_closed(loop: asyncio.AbstractEventLoop) -> object:
    loop.close()
    with _closing_coro() as coro:
        return loop.create_task(coro)


def _future_of_other_loop(loop: asyncio.AbstractEventLoop) -> object:
    other = ASYNCIO.new()
    try:
        return loop.run_until_complete(other.create_future())
    finally:
        other.close()


async def _run_forever_inside(loop: asyncio.AbstractEventLoop) -> object:
    return loop.run_forever()


async def _run_until_complete_inside(loop: asyncio.AbstractEventLoop) -> object:
    with _closing_coro() as coro:
        return loop.run_until_complete(coro)


async def _other_loop_inside(loop: asyncio.AbstractEventLoop) -> object:
    other = type(loop)()
    try:
        with _closing_coro() as coro:
            return other.run_until_complete(coro)
    finally:
        other.close()


async def _await_foreign_future(loop: asyncio.AbstractEventLoop) -> object:
    other = ASYNCIO.new()
    try:
        return await other.create_future()
    finally:
        other.close()


async def _connection_no_address(loop: asyncio.AbstractEventLoop) -> object:
    return await loop.create_connection(asyncio.Protocol)


async def _connection_host_and_sock(loop: asyncio.AbstractEventLoop) -> object:
    with socket.socket() as s:
        return await loop.create_connection(asyncio.Protocol, "127.0.0.1", 1, sock=s)  # type: ignore[call-overload]


async def _server_hostname_without_ssl(loop: asyncio.AbstractEventLoop) -> object:
    return await loop.create_connection(asyncio.Protocol, "127.0.0.1", 1, server_hostname="x")


async def _handshake_timeout_without_ssl(loop: asyncio.AbstractEventLoop) -> object:
    return await loop.create_connection(asyncio.Protocol, "127.0.0.1", 1, ssl_handshake_timeout=1)


async def _server_host_and_sock(loop: asyncio.AbstractEventLoop) -> object:
    with socket.socket() as s:
        return await loop.create_server(asyncio.Protocol, "127.0.0.1", 0, sock=s)  # type: ignore[call-overload]


async def _server_udp_sock(loop: asyncio.AbstractEventLoop) -> object:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        return await loop.create_server(asyncio.Protocol, sock=s)


async def _datagram_stream_sock(loop: asyncio.AbstractEventLoop) -> object:
    with socket.socket() as s:
        return await loop.create_datagram_endpoint(asyncio.DatagramProtocol, sock=s)


async def _sock_recv_blocking(loop: asyncio.AbstractEventLoop) -> object:
    a, b = socket.socketpair()
    with a, b:
        return await loop.sock_recv(a, 10)


async def _sock_accept_not_listening(loop: asyncio.AbstractEventLoop) -> object:
    with socket.socket() as s:
        s.setblocking(False)
        return await loop.sock_accept(s)


async def _start_tls_not_a_context(loop: asyncio.AbstractEventLoop) -> object:
    a, b = socket.socketpair()
    with a, b:
        transport, _ = await loop.create_connection(asyncio.Protocol, sock=a)
        try:
            return await loop.start_tls(transport, asyncio.Protocol(), "not a context")  # type: ignore[arg-type]
        finally:
            transport.close()


async def _sendfile_bad_count(loop: asyncio.AbstractEventLoop) -> object:
    a, b = socket.socketpair()
    with a, b, tempfile.TemporaryFile() as f:
        transport, _ = await loop.create_connection(asyncio.Protocol, sock=a)
        try:
            return await loop.sendfile(transport, f, count=-1)
        finally:
            transport.close()


async def _sock_sendfile_text_file(loop: asyncio.AbstractEventLoop) -> object:
    a, b = socket.socketpair()
    a.setblocking(False)
    with a, b, tempfile.TemporaryFile("w+") as f:
        return await loop.sock_sendfile(a, f)  # type: ignore[arg-type]


async def _connect_refused(loop: asyncio.AbstractEventLoop) -> object:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening
        return await loop.create_connection(asyncio.Protocol, *s.getsockname())


async def _bind_used_tcp(loop: asyncio.AbstractEventLoop) -> object:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        return await loop.create_server(asyncio.Protocol, *s.getsockname())


async def _bind_used_udp(loop: asyncio.AbstractEventLoop) -> object:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, local_addr=s.getsockname()
        )


async def _unix_connect_missing(loop: asyncio.AbstractEventLoop) -> object:
    return await loop.create_unix_connection(asyncio.Protocol, "/nonexistent-fdkit-dir/no.sock")


async def _unix_server_on_regular_file(loop: asyncio.AbstractEventLoop) -> object:
    with tempfile.NamedTemporaryFile() as f:
        return await loop.create_unix_server(asyncio.Protocol, f.name)


async def _sock_connect_refused(loop: asyncio.AbstractEventLoop) -> object:
    with socket.socket() as probe, socket.socket() as c:
        probe.bind(("127.0.0.1", 0))
        c.setblocking(False)
        await loop.sock_connect(c, probe.getsockname())
        return None


@dataclass(frozen=True)
class Misuse:
    name: str
    probe: Probe
    #: what asyncio raises (checked first, so that the oracle is what the test believes)
    raises: type[BaseException]
    #: compare errno instead of the message (the message carries a port or path)
    kernel: bool = False


MISUSES = [
    # a closed loop
    Misuse("run_forever_closed", _closed(lambda lp: lp.run_forever()), RuntimeError),
    Misuse("run_until_complete_closed", _run_until_complete_closed, RuntimeError),
    Misuse("call_soon_closed", _closed(lambda lp: lp.call_soon(_nothing)), RuntimeError),
    Misuse("call_later_closed", _closed(lambda lp: lp.call_later(1, _nothing)), RuntimeError),
    Misuse("call_at_closed", _closed(lambda lp: lp.call_at(lp.time(), _nothing)), RuntimeError),
    Misuse(
        "call_soon_threadsafe_closed",
        _closed(lambda lp: lp.call_soon_threadsafe(_nothing)),
        RuntimeError,
    ),
    Misuse("create_task_closed", _create_task_closed, RuntimeError),
    Misuse(
        "run_in_executor_closed",
        _closed(lambda lp: lp.run_in_executor(None, _nothing)),
        RuntimeError,
    ),
    Misuse("add_reader_closed", _closed(lambda lp: lp.add_reader(0, _nothing)), RuntimeError),
    # a running loop
    Misuse("run_forever_running", _running(_run_forever_inside), RuntimeError),
    Misuse("run_until_complete_running", _running(_run_until_complete_inside), RuntimeError),
    Misuse("other_loop_inside_running", _running(_other_loop_inside), RuntimeError),
    Misuse("await_other_loops_future", _running(_await_foreign_future), RuntimeError),
    Misuse("run_until_complete_other_loops_future", _future_of_other_loop, ValueError),
    # bad arguments
    Misuse("call_soon_not_callable_debug", _debug(lambda lp: lp.call_soon(42)), TypeError),  # type: ignore[arg-type]
    Misuse("call_soon_coroutine_fn_debug", _debug(lambda lp: lp.call_soon(_coro_fn)), TypeError),
    Misuse("call_later_delay_none", lambda lp: lp.call_later(None, _nothing), TypeError),  # type: ignore[arg-type]
    Misuse("call_later_delay_str", lambda lp: lp.call_later("1", _nothing), TypeError),  # type: ignore[arg-type]
    Misuse("run_until_complete_int", lambda lp: lp.run_until_complete(42), TypeError),  # type: ignore[arg-type]
    Misuse("create_task_int", lambda lp: lp.create_task(42), TypeError),  # type: ignore[arg-type]
    Misuse("set_exception_handler_int", lambda lp: lp.set_exception_handler(42), TypeError),  # type: ignore[arg-type]
    Misuse(
        "run_in_executor_coroutine_fn_debug",
        _debug(lambda lp: lp.run_in_executor(None, _coro_fn)),
        TypeError,
    ),
    Misuse("add_reader_negative_fd", lambda lp: lp.add_reader(-1, _nothing), ValueError),
    Misuse("add_reader_str", lambda lp: lp.add_reader("x", _nothing), ValueError),  # type: ignore[arg-type]
    Misuse(
        "add_signal_handler_bad_number",
        lambda lp: lp.add_signal_handler(10_000, _nothing),
        ValueError,
    ),
    Misuse(
        "add_signal_handler_sigkill",
        lambda lp: lp.add_signal_handler(signal.SIGKILL, _nothing),
        RuntimeError,
    ),
    Misuse(
        "add_signal_handler_coroutine_fn",
        lambda lp: lp.add_signal_handler(signal.SIGUSR1, _coro_fn),
        TypeError,
    ),
    Misuse(
        "remove_signal_handler_bad_number", lambda lp: lp.remove_signal_handler(10_000), ValueError
    ),
    Misuse("create_connection_no_address", _running(_connection_no_address), ValueError),
    Misuse("create_connection_host_and_sock", _running(_connection_host_and_sock), ValueError),
    Misuse("server_hostname_without_ssl", _running(_server_hostname_without_ssl), ValueError),
    Misuse(
        "ssl_handshake_timeout_without_ssl", _running(_handshake_timeout_without_ssl), ValueError
    ),
    Misuse("create_server_host_and_sock", _running(_server_host_and_sock), ValueError),
    Misuse("create_server_udp_sock", _running(_server_udp_sock), ValueError),
    Misuse("datagram_endpoint_stream_sock", _running(_datagram_stream_sock), ValueError),
    Misuse("sock_recv_blocking_socket_debug", _debug(_running(_sock_recv_blocking)), ValueError),
    Misuse("start_tls_not_a_context", _running(_start_tls_not_a_context), TypeError),
    Misuse("sendfile_negative_count", _running(_sendfile_bad_count), ValueError),
    Misuse("sock_sendfile_text_file", _running(_sock_sendfile_text_file), ValueError),
    # the kernel's refusals
    Misuse("sock_accept_not_listening", _running(_sock_accept_not_listening), OSError, kernel=True),
    Misuse("connect_refused", _running(_connect_refused), ConnectionRefusedError, kernel=True),
    Misuse(
        "sock_connect_refused", _running(_sock_connect_refused), ConnectionRefusedError, kernel=True
    ),
    Misuse("bind_used_tcp_port", _running(_bind_used_tcp), OSError, kernel=True),
    Misuse("bind_used_udp_port", _running(_bind_used_udp), OSError, kernel=True),
    Misuse(
        "unix_connect_missing_path", _running(_unix_connect_missing), FileNotFoundError, kernel=True
    ),
    Misuse(
        "unix_server_on_regular_file", _running(_unix_server_on_regular_file), OSError, kernel=True
    ),
]


def _normalized(message: str) -> str:
    """A message without what differs from run to run (task numbers, addresses) or from loop
    to loop (fd numbers: the io_uring loop holds one fd more than asyncio's, its ring)."""
    message = re.sub(r"Task-\d+", "Task-?", message)
    return re.sub(r"fd=\d+", "fd=?", re.sub(r"0x[0-9a-f]+", "0x?", message))


def _outcome(loop: Loop, misuse: Misuse) -> tuple[object, ...]:
    lp = loop.new()
    try:
        misuse.probe(lp)
    except Exception as e:  # the misuse's answer is what the test compares
        if misuse.kernel:  # an OSError with its errno, or the wrong kind of answer
            if isinstance(e, OSError) and e.errno is not None:
                return type(e), errno.errorcode.get(e.errno, str(e.errno))
            return type(e), str(e)
        return type(e), _normalized(str(e))
    finally:
        if not lp.is_closed():
            lp.run_until_complete(lp.shutdown_default_executor())
            lp.close()
    return ("no exception",)


@pytest.mark.parametrize("misuse", [pytest.param(m, id=m.name) for m in MISUSES])
def test_misuse_raises_what_asyncio_raises(misuse: Misuse) -> None:
    oracle = _outcome(ASYNCIO, misuse)
    assert isinstance(oracle[0], type), f"asyncio raised nothing for {misuse.name}"
    assert issubclass(oracle[0], misuse.raises), oracle
    assert _outcome(FDKIT, misuse) == oracle


def test_misuse_never_kills_the_interpreter() -> None:
    """Every misuse above, in one child process on fdkit's loop, one after the other: the child
    lives through them all and exits 0 (a crash would end it with a signal)."""
    script = (
        "import test_aio_faults as t\n"
        "from helpers.aio import FDKIT\n"
        "for m in t.MISUSES:\n"
        "    t._outcome(FDKIT, m)\n"
        "print('alive', len(t.MISUSES))\n"
    )
    out = subprocess.run(
        [PYTHON, "-c", script], capture_output=True, text=True, timeout=30, env=python_env(),
        cwd=os.path.dirname(os.path.abspath(__file__)), check=False,
    )  # fmt: skip
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])
    assert out.stdout.strip() == f"alive {len(MISUSES)}"


# --- a callback's exception goes to the exception handler ------------------------------------


@each_loop
def test_callback_exception_goes_to_handler_and_loop_goes_on(loop: Loop) -> None:
    seen: list[dict[str, Any]] = []
    after: list[str] = []

    def boom() -> None:
        raise ZeroDivisionError("from a callback")

    lp = loop.new()
    try:
        lp.set_exception_handler(lambda _lp, ctx: seen.append(ctx))
        lp.call_soon(boom)
        lp.call_soon(after.append, "call_soon")
        lp.call_later(0.001, boom)
        lp.call_later(0.002, after.append, "call_later")
        lp.call_soon(42)  # type: ignore[arg-type]  # not debug: accepted, fails when run
        lp.call_soon_threadsafe(boom)
        lp.call_later(0.05, lp.stop)
        lp.run_forever()
        assert after == ["call_soon", "call_later"]
        kinds = sorted(type(c["exception"]).__name__ for c in seen)
        assert kinds == ["TypeError", "ZeroDivisionError", "ZeroDivisionError", "ZeroDivisionError"]
        assert all(c["message"].startswith("Exception in callback") for c in seen)
        assert all("handle" in c for c in seen)
        # the loop still runs coroutines after all that
        assert lp.run_until_complete(asyncio.sleep(0, "still running")) == "still running"
    finally:
        lp.close()


@each_loop
def test_protocol_exception_goes_to_handler_and_server_goes_on(loop: Loop) -> None:
    """data_received raising: the handler hears of it, that connection is closed, the server
    and the loop serve the next client."""
    seen: list[dict[str, Any]] = []

    class Flaky(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            if data.startswith(b"bad"):
                raise ValueError("bad request")
            self.transport.write(data)

    async def main() -> None:
        running = asyncio.get_running_loop()
        running.set_exception_handler(lambda _lp, ctx: seen.append(ctx))
        server = await running.create_server(Flaky, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"bad\n")
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the loop
            writer.close()
            await writer.wait_closed()
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"good\n")
            assert await reader.readline() == b"good\n"
            writer.close()
            await writer.wait_closed()
        assert len(seen) == 1
        assert isinstance(seen[0]["exception"], ValueError)
        assert "data_received" in seen[0]["message"]

    loop.run(main())


@each_loop
def test_default_exception_handler_logs(loop: Loop, caplog: pytest.LogCaptureFixture) -> None:
    """Without a handler of its own, the loop logs the exception on the ``asyncio`` logger."""

    def boom() -> None:
        raise KeyError("logged")

    lp = loop.new()
    try:
        with caplog.at_level("ERROR", logger="asyncio"):
            lp.call_soon(boom)
            lp.call_soon(lp.stop)
            lp.run_forever()
    finally:
        lp.close()
    records = [r for r in caplog.records if r.name == "asyncio"]
    assert len(records) == 1
    assert records[0].message.startswith("Exception in callback")
    assert records[0].exc_info is not None
    assert isinstance(records[0].exc_info[1], KeyError)


# --- Ctrl-C ----------------------------------------------------------------------------------

CTRL_C = r"""
import asyncio, sys, fdkit.aio
import {module}

held = []  # the server's ends, kept open (3.13 closes a StreamWriter that is collected)

async def main():
    server = await asyncio.start_server(lambda r, w: held.append(w), "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
    print("ready", flush=True)
    try:
        if sys.argv[1] == "read":
            await reader.read()  # waits on a socket
        else:
            await asyncio.sleep(3600)  # waits on a timer
    except asyncio.CancelledError:
        print("cancelled", flush=True)
        raise
    finally:
        for w in [writer, *held]:
            w.close()
        server.close()
        print("cleanup", flush=True)

{run}(main())
"""


def _ctrl_c(loop: Loop, wait: str) -> tuple[int, str, str, float]:
    module = loop.run_call.rsplit(".", 1)[0]
    child = subprocess.Popen(
        [PYTHON, "-c", CTRL_C.format(module=module, run=loop.run_call), wait],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**python_env(), **loop.env},
    )  # fmt: skip
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line == "ready\n", (line, child.stderr.read() if child.stderr else "")
        sent = time.monotonic()
        os.kill(child.pid, signal.SIGINT)
        try:
            out, err = child.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{loop.run_call}: SIGINT did not stop the program within 10 s")
        return child.returncode, out, err, time.monotonic() - sent
    finally:
        stop(child)


@pytest.mark.parametrize("wait", ["timer", "read"])
@each_fdkit_loop
def test_ctrl_c_stops_run_like_asyncio_run(loop: Loop, wait: str) -> None:
    """SIGINT to a program in ``fdkit.aio.run(main())``: the main task is cancelled (its
    ``finally`` runs), KeyboardInterrupt ends the program, the exit status is asyncio.run's."""
    oracle = _ctrl_c(ASYNCIO, wait)
    got = _ctrl_c(loop, wait)
    for _, out, err, took in (oracle, got):
        assert out == "cancelled\ncleanup\n", (out, err)
        assert err.rstrip().endswith("KeyboardInterrupt"), err[-2000:]
        assert took < 5
    assert got[0] == oracle[0] == -signal.SIGINT


# --- closing a loop with operations in flight -------------------------------------------------


@contextmanager
def _quiet_gc() -> Iterator[list[str]]:
    """Collects what finalizers report (unraisable exceptions, ResourceWarnings) instead of
    letting pytest turn them into errors: abandoning a loop with work in flight makes both loops
    report the same way. Yields the list of reports."""
    reports: list[str] = []
    old = sys.unraisablehook

    def hook(u: Any) -> None:
        reports.append(type(u.exc_value).__name__)

    sys.unraisablehook = hook
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            yield reports
            gc.collect()
    finally:
        sys.unraisablehook = old


async def _in_flight(ops: dict[str, Any]) -> None:
    """Starts one of each kind of operation and leaves them all pending."""
    running = asyncio.get_running_loop()

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.read()
        except asyncio.CancelledError:
            # ends normally: 3.12.0-3.12.1's StreamReaderProtocol raises in its done-callback
            # for a handler that ends cancelled, and then never closes the connection
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(20)]
    ops["server"] = server
    ops["reads"] = [running.create_task(r.read()) for r, _ in conns]
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen()
    lst.setblocking(False)
    a, b = socket.socketpair()
    a.setblocking(False)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", 0))
    u.setblocking(False)
    ops["socks"] = [lst, a, b, u]
    ops["accept"] = running.create_task(running.sock_accept(lst))
    ops["recv"] = running.create_task(running.sock_recv(a, 100))
    ops["recvfrom"] = running.create_task(running.sock_recvfrom(u, 100))
    ops["timer"] = running.call_later(3600, print, "never")
    ops["sleep"] = running.create_task(asyncio.sleep(3600))
    await asyncio.sleep(0.05)  # every op reaches the kernel
    assert not any(t.done() for t in ops["reads"])


@each_loop
def test_close_with_ops_in_flight_runner(loop: Loop) -> None:
    """The main coroutine returns with reads, an accept, a recv and a sleep pending: the runner
    cancels them all (each task ends cancelled), closing does not hang, and once the program
    drops its objects no fd is left."""
    baseline = fd_count()
    ops: dict[str, Any] = {}
    started = time.monotonic()
    with _quiet_gc():
        loop.run(_in_flight(ops))
        assert time.monotonic() - started < 5
        waits = [ops["accept"], ops["recv"], ops["recvfrom"], ops["sleep"]]
        assert all(t.cancelled() for t in waits), waits
        # a read ends cancelled, or at EOF when its server-side handler was cancelled first
        # (asyncio closes the transport of a handler that ends in an exception)
        assert all(t.cancelled() or t.result() == b"" for t in ops["reads"])
        tasks = [*waits, *ops["reads"]]
        for s in ops["socks"]:
            s.close()
        ops.clear()
        del tasks
    assert fd_count() == baseline


@each_loop
def test_close_with_ops_in_flight_bare_close(loop: Loop) -> None:
    """``loop.close()`` straight away with operations pending (no runner): it returns at once,
    nothing hangs, the loop's own fds (epoll or the ring, the self-pipe) are closed by then, and
    once the program drops its objects no fd is left."""
    baseline = fd_count()
    ops: dict[str, Any] = {}
    with _quiet_gc() as reports:
        before = open_fds()
        lp = loop.new()
        own = {n: t for n, t in open_fds().items() if before.get(n) != t}
        assert own, "the loop opened no fd of its own (epoll, ring, self-pipe)?"
        lp.set_exception_handler(lambda _lp, _ctx: None)  # "Task was destroyed but it is pending!"
        lp.run_until_complete(_in_flight(ops))
        started = time.monotonic()
        lp.close()
        assert time.monotonic() - started < 2
        assert lp.is_closed()
        now = open_fds()
        assert not [n for n, t in own.items() if now.get(n) == t], (
            "close() left the loop's fds open"
        )
        for s in ops["socks"]:
            s.close()
        ops.clear()
        del lp
    assert fd_count() == baseline
    assert all(r in ("RuntimeError",) for r in reports), reports


# --- a cancelled connect or read never delivers to the next owner of its fd ------------------


@each_loop
def test_cancelled_connects_never_misdeliver(loop: Loop) -> None:
    """1,500 requests, 150 at a time, to an echo server, each on its own connection; about half
    are cancelled at a random point (while connecting, writing or reading). Every request that
    completes gets its own reply, never another's (uvloop's bug class: a reply delivered to the
    wrong request after a cancelled connect, when fd numbers are reused)."""
    rng = random.Random(11)
    total, at_once = 1500, 150

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                await asyncio.sleep(0)
                writer.write(line)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def main() -> tuple[int, int]:
        server = await asyncio.start_server(echo, "127.0.0.1", 0, backlog=1024)
        port = server.sockets[0].getsockname()[1]
        gate = asyncio.Semaphore(at_once)
        done = cancelled = 0

        async def request(i: int) -> None:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                for k in range(3):
                    msg = f"request {i} part {k}\n".encode()
                    writer.write(msg)
                    reply = await reader.readline()
                    assert reply == msg, (i, k, reply)
            finally:
                writer.close()

        async def one(i: int) -> None:
            nonlocal done, cancelled
            async with gate:
                task = asyncio.create_task(request(i))
                if rng.random() < 0.5:
                    for _ in range(rng.randrange(6)):
                        await asyncio.sleep(0)
                    task.cancel()
                try:
                    await task
                    done += 1
                except asyncio.CancelledError:
                    cancelled += 1

        async with server:
            await asyncio.gather(*(one(i) for i in range(total)))
        return done, cancelled

    baseline = fd_count()
    done, cancelled = loop.run(main(), timeout=30)
    assert done + cancelled == total
    assert done > total // 4
    assert cancelled > total // 10
    assert fd_count() == baseline


@each_loop
def test_cancelled_sock_recv_never_reaches_the_fds_next_owner(loop: Loop) -> None:
    """A sock_recv is cancelled, its socket closed, and a new socket gets the same fd number;
    then the old peer writes. The new socket's sock_recv gets only what its own peer sent."""

    async def main() -> int:
        running = asyncio.get_running_loop()
        reused = 0
        for i in range(300):
            old, old_peer = socket.socketpair()
            old.setblocking(False)
            number = old.fileno()
            pending = running.create_task(running.sock_recv(old, 100))
            await asyncio.sleep(0)
            pending.cancel()
            with pytest.raises(asyncio.CancelledError):
                await pending
            old.close()
            new, new_peer = socket.socketpair()
            with new, new_peer, old_peer:
                new.setblocking(False)
                reused += new.fileno() == number
                # a pending op may keep the old socket alive in the kernel (io_uring holds a
                # reference to its file), or the send finds the other end gone
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    old_peer.send(f"old {i}".encode())
                receiving = running.create_task(running.sock_recv(new, 100))
                await asyncio.sleep(0)
                new_peer.send(f"new {i}".encode())
                assert await asyncio.wait_for(receiving, 5) == f"new {i}".encode()
        return reused

    baseline = fd_count()
    reused = loop.run(main())
    assert reused > 150, "the fd numbers were not reused: the test proves nothing here"
    assert fd_count() == baseline
