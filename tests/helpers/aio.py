"""The loops the ``fdkit.aio`` tests run the same code on: asyncio's own Unix loop (the oracle)
and fdkit's, the default one (epoll) and the io_uring engine's. A test takes ``loop`` through
:data:`each_loop` and runs its coroutine with ``loop.run(main())``, which also checks that the
coroutine really ran on that loop.

Everything here uses the real kernel: real sockets on 127.0.0.1 / ::1, real pipes, real files.
"""

from __future__ import annotations

import asyncio
import functools
import os
import resource
import subprocess
import sys
from collections.abc import Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

import fdkit.aio
from helpers import open_fds

_T = TypeVar("_T")

#: How long one test's coroutine may run before the test fails (each test is far shorter).
RUN_TIMEOUT = 20.0


@dataclass(frozen=True)
class Loop:
    """One event loop implementation, as each of its front doors names it."""

    name: str
    #: what ``asyncio.Runner(loop_factory=...)`` takes
    factory: Callable[[], asyncio.AbstractEventLoop]
    #: the class every loop it makes is an instance of
    cls: type[asyncio.AbstractEventLoop]
    #: how a script runs a coroutine on it (``asyncio.run`` or ``fdkit.aio.run``)
    run_call: str
    #: uvicorn's ``--loop`` value for it
    uvicorn_loop: str
    #: what a child program's environment (or this process's, for a factory named by a string)
    #: needs for ``run_call`` and ``uvicorn_loop`` to give this loop
    env: Mapping[str, str] = field(default_factory=dict)

    def run(self, main: Coroutine[Any, Any, _T], *, timeout: float = RUN_TIMEOUT) -> _T:
        """Runs ``main`` on a new loop of this kind (closed after), as ``asyncio.run`` does,
        failing the test when it takes longer than ``timeout`` seconds."""

        async def bounded() -> _T:
            running = asyncio.get_running_loop()
            assert isinstance(running, self.cls), (self.name, type(running))
            try:
                return await asyncio.wait_for(main, timeout)
            except TimeoutError:
                pytest.fail(f"{self.name}: the test's coroutine ran over {timeout:g} s")

        with asyncio.Runner(loop_factory=self.factory) as runner:
            return runner.run(bounded())

    def new(self) -> asyncio.AbstractEventLoop:
        """A new loop of this kind, for the tests that drive one by hand (the caller closes it)."""
        loop = self.factory()
        assert isinstance(loop, self.cls)
        return loop

    def __str__(self) -> str:
        return self.name


ASYNCIO = Loop(
    name="asyncio",
    factory=asyncio.SelectorEventLoop,
    cls=asyncio.SelectorEventLoop,
    run_call="asyncio.run",
    uvicorn_loop="asyncio",
)
#: fdkit's loop as a program gets it without naming an engine (epoll)
FDKIT = Loop(
    name="fdkit",
    factory=fdkit.aio.new_event_loop,
    cls=fdkit.aio.EpollEventLoop,
    run_call="fdkit.aio.run",
    uvicorn_loop="fdkit.aio:new_event_loop",
)
#: fdkit's loop on its io_uring engine, asked for as a deployment asks (``FDKIT_AIO_ENGINE``)
FDKIT_URING = Loop(
    name="fdkit-io_uring",
    factory=functools.partial(fdkit.aio.EventLoop, engine="io_uring"),
    cls=fdkit.aio.UringEventLoop,
    run_call="fdkit.aio.run",
    uvicorn_loop="fdkit.aio:new_event_loop",
    env={"FDKIT_AIO_ENGINE": "io_uring"},
)
LOOPS = (ASYNCIO, FDKIT, FDKIT_URING)

#: Why fdkit.aio's io_uring engine cannot run here (None where it can), asked once per process.
URING_WHY = fdkit.aio.engine_unavailable("io_uring")
#: What a test of the io_uring engine says when it skips for that.
URING_SKIP = f"io_uring engine unavailable here: {URING_WHY}"
#: ``@needs_uring_engine``: skips a test of the io_uring engine where it cannot run.
needs_uring_engine = pytest.mark.skipif(URING_WHY is not None, reason=URING_SKIP)


def _params(loops: tuple[Loop, ...]) -> list[Any]:
    """``loops`` as parameters named for each, the io_uring engine's skipped (with the reason)
    where it cannot run."""
    return [
        pytest.param(k, id=k.name, marks=[needs_uring_engine] if k is FDKIT_URING else [])
        for k in loops
    ]


#: ``@each_loop`` runs a test once on each of :data:`LOOPS`, as its ``loop`` argument.
each_loop = pytest.mark.parametrize("loop", _params(LOOPS))
#: ``@each_fdkit_loop``: once on each of fdkit's, for a test that runs asyncio's itself.
each_fdkit_loop = pytest.mark.parametrize("loop", _params((FDKIT, FDKIT_URING)))


def fd_count() -> int:
    """How many fds this process has open (``/proc/self/fd``, the listing's own fd left out)."""
    return len(open_fds())


@contextmanager
def nofile_at_least(n: int) -> Iterator[int]:
    """Raises the soft RLIMIT_NOFILE to the hard limit for the block (restored after); skips the
    test when the hard limit is below ``n``. Yields the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = hard if hard != resource.RLIM_INFINITY else max(soft, n)
    if top < n:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {n} fds this test needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, top), hard))
    try:
        yield resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def python_env() -> dict[str, str]:
    """The environment for a child Python that must import the fdkit (and tests' helpers) this
    test process imports."""
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def stop(child: subprocess.Popen[Any], timeout: float = 5.0) -> None:
    """Stops a child by its pid: SIGTERM, then SIGKILL after ``timeout``; always reaped."""
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout)
    for f in (child.stdin, child.stdout, child.stderr):
        if f is not None:
            f.close()


PYTHON = sys.executable
