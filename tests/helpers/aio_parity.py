"""The same script on three loops: asyncio's own (the oracle) and fdkit's two engines.

A parity test writes its script once, as a coroutine function (or, where the loop must be
driven by hand or isolated in a child process, a function of the loop or a program), runs it
on asyncio's ``SelectorEventLoop`` and on ``fdkit.aio.EventLoop(engine=...)``, and compares
what the script observed: fdkit's output must equal asyncio's.

Everything here uses the real kernel: real sockets on 127.0.0.1, real files.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import json
import logging
import socket
import subprocess
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, get_args

import pytest

import fdkit.aio
from fdkit.types import EngineName
from helpers.aio import PYTHON, URING_SKIP, URING_WHY, fd_count, python_env

_T = TypeVar("_T")

FdkitEngine = EngineName
ENGINES: tuple[FdkitEngine, ...] = get_args(EngineName)

#: How long one script may run on one loop before the test fails (each takes far less).
RUN_TIMEOUT = 15.0


@dataclass(frozen=True)
class Kind:
    """A loop implementation: ``asyncio``, or fdkit's ``io_uring`` or ``epoll`` engine."""

    name: str

    def new(self) -> asyncio.AbstractEventLoop:
        """A new loop of this kind (the caller closes it)."""
        if self.name == "asyncio":
            return asyncio.SelectorEventLoop()
        loop = fdkit.aio.EventLoop(engine=self.name)
        assert loop.engine == self.name, (loop.engine, loop.engine_reason)
        return loop

    @contextmanager
    def loop(self) -> Iterator[asyncio.AbstractEventLoop]:
        """A new loop of this kind for a script that drives it by hand; closed after."""
        lp = self.new()
        try:
            yield lp
        finally:
            lp.close()

    def __str__(self) -> str:
        return self.name


ASYNCIO = Kind("asyncio")

#: ``@each_engine``: a test runs once per fdkit engine, as its ``engine`` argument.
each_engine = pytest.mark.parametrize("engine", ENGINES)


def fdkit_kind(engine: FdkitEngine) -> Kind:
    """fdkit's loop on ``engine``; skips the test when this machine cannot run it."""
    if engine == "io_uring" and URING_WHY is not None:
        pytest.skip(URING_SKIP)
    return Kind(engine)


def run(
    kind: Kind,
    script: Callable[[], Coroutine[Any, Any, _T]],
    *,
    debug: bool = False,
    timeout: float = RUN_TIMEOUT,
) -> _T:
    """Runs ``script()`` on a new loop of ``kind`` as ``asyncio.run`` does (in a context of its
    own, so that nothing it sets leaks into the next run), failing the test past ``timeout``."""

    async def bounded() -> _T:
        try:
            return await asyncio.wait_for(script(), timeout)
        except TimeoutError:
            pytest.fail(f"{kind}: the script ran over {timeout:g} s")

    def go() -> _T:
        with asyncio.Runner(debug=debug, loop_factory=kind.new) as runner:
            return runner.run(bounded())

    return contextvars.Context().run(go)


def _fds_left(call: Callable[[], _T]) -> tuple[_T, int]:
    """``call()``'s result and how many more fds this process has open after it."""
    gc.collect()
    before = fd_count()
    out = call()
    gc.collect()
    return out, fd_count() - before


def both(
    engine: FdkitEngine,
    script: Callable[[Kind], _T],
) -> tuple[_T, _T]:
    """``(asyncio's output, fdkit's output)`` of ``script(kind)`` run on each loop kind.

    Also fails the test when a run leaves fds open: asyncio's always, fdkit's when its output
    is asyncio's (else the test's comparison of the outputs says more)."""
    got_kind = fdkit_kind(engine)
    oracle, oracle_fds = _fds_left(lambda: script(ASYNCIO))
    got, got_fds = _fds_left(lambda: script(got_kind))
    assert oracle_fds == 0, f"asyncio: the script left {oracle_fds} fds open"
    if got == oracle:
        assert got_fds == 0, f"{got_kind}: the script left {got_fds} fds open (asyncio: none)"
    return oracle, got


def both_run(
    engine: FdkitEngine,
    script: Callable[[], Coroutine[Any, Any, _T]],
    *,
    debug: bool = False,
) -> tuple[_T, _T]:
    """``(asyncio's output, fdkit's output)`` of the coroutine ``script()`` run on each."""
    return both(engine, lambda kind: run(kind, script, debug=debug))


def run_program(
    kind: Kind, code: str, *args: str, wrapper: list[str] | None = None, timeout: float = 20.0
) -> subprocess.CompletedProcess[str]:
    """Runs ``code`` in a child Python with ``sys.argv[1]`` the loop kind's name (the program
    makes its loop with :data:`NEW_LOOP`), under ``wrapper`` (e.g. ``no_uring.py``) if given."""
    cmd = [*(wrapper or []), PYTHON, "-c", code, kind.name, *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=python_env(), check=False
    )


def server_address(server: asyncio.AbstractServer) -> tuple[str, int]:
    """The host and port a server listens on (its first socket)."""
    sockets = server.sockets  # type: ignore[attr-defined]
    host, port = sockets[0].getsockname()[:2]
    return host, port


async def close_server(server: asyncio.AbstractServer) -> None:
    """Closes ``server`` and waits until it is closed."""
    server.close()
    await server.wait_closed()


class LogRecords(logging.Handler):
    """Keeps the records of WARNING and above a logger gives it."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def program_json(kind: Kind, code: str, *args: str) -> Any:
    """What ``code`` printed as JSON, run by :func:`run_program` on ``kind``'s loop; the test
    fails (with the child's stderr) when it did not exit 0."""
    r = run_program(kind, code, *args)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


#: Source a child program starts with: ``new_loop(sys.argv[1])`` makes the loop to test.
NEW_LOOP = """\
import asyncio, sys

def new_loop(kind):
    if kind == "asyncio":
        return asyncio.SelectorEventLoop()
    import fdkit.aio
    loop = fdkit.aio.EventLoop(engine=kind)
    assert loop.engine == kind, (loop.engine, loop.engine_reason)
    return loop
"""


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    """A connected TCP pair on 127.0.0.1, both ends blocking (the listener is closed)."""
    with socket.create_server(("127.0.0.1", 0)) as lst:
        a = socket.create_connection(lst.getsockname()[:2])
        try:
            b, _ = lst.accept()
        except BaseException:
            a.close()
            raise
    return a, b


def send_what_fits(sock: socket.socket, limit: int) -> int:
    """Sends bytes on ``sock`` without blocking until the kernel takes no more or ``limit``
    were sent; returns how many (the socket is left non-blocking)."""
    sock.setblocking(False)
    chunk = bytes(range(256)) * 256  # 64 KiB
    sent = 0
    while sent < limit:
        try:
            sent += sock.send(chunk[: min(len(chunk), limit - sent)])
        except BlockingIOError:
            break
    return sent
