"""How fdkit.aio's io_uring engine waits, and what a wait costs in syscalls.

Where the kernel runs ``IORING_OP_EPOLL_WAIT`` (Linux 6.15) the ring reads the loop's epoll
instance itself: a wait that sleeps is one io_uring_enter(2), as it is one epoll_wait(2) on the
epoll engine. Before 6.15, or with ``FDKIT_AIO_RING_WAIT=poll``, the ring polls the epoll fd
once epoll_wait(2) found nothing, and epoll_wait(2) reads the events after: three syscalls for
a wait that sleeps. ``loop.ring_wait`` says which. The syscalls are counted by strace(1) on a
child process (``make test-tools`` installs strace; without it the count skips).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

import fdkit.aio
from fdkit import uring
from fdkit._fdkit import Reactor
from helpers.aio import python_env

_ok, _why = uring.available()
needs_uring = pytest.mark.skipif(not _ok, reason=f"io_uring unavailable: {_why}")


def _kernel_reads_epoll() -> bool:
    reactor = Reactor()
    try:
        return reactor.reads_epoll
    finally:
        reactor.close()


def _ring_wait(monkeypatch: pytest.MonkeyPatch, value: str | None) -> str | None:
    if value is None:
        monkeypatch.delenv("FDKIT_AIO_RING_WAIT", raising=False)
    else:
        monkeypatch.setenv("FDKIT_AIO_RING_WAIT", value)
    loop = fdkit.aio.EventLoop(engine="io_uring")
    try:
        assert isinstance(loop, fdkit.aio.UringEventLoop)
        return loop.ring_wait
    finally:
        loop.close()


@needs_uring
def test_the_ring_reads_epoll_where_the_kernel_runs_the_op(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    expected = "epoll_wait" if _kernel_reads_epoll() else "poll"
    assert _ring_wait(monkeypatch, None) == expected
    assert _ring_wait(monkeypatch, "epoll_wait") == expected
    assert _ring_wait(monkeypatch, "poll") == "poll"


@needs_uring
def test_an_unknown_ring_wait_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(
        ValueError, match="FDKIT_AIO_RING_WAIT must be 'epoll_wait' or 'poll', not 'Poll'"
    ):
        _ring_wait(monkeypatch, "Poll")


#: The loop under test: ROUNDS round trips with the echo peer, each awaited (so each makes the
#: loop wait with nothing ready), then the counts strace takes.
_CHILD = """
import asyncio, sys
import fdkit.aio

ROUNDS = int(sys.argv[2])

async def main():
    reader, writer = await asyncio.open_connection("127.0.0.1", int(sys.argv[1]))
    for i in range(ROUNDS):
        writer.write(b"ping %06d\\n" % i)
        assert await reader.readline() == b"ping %06d\\n" % i
    writer.close()
    await writer.wait_closed()
    print(asyncio.get_running_loop().engine, getattr(asyncio.get_running_loop(), "ring_wait", "-"))

fdkit.aio.run(main())
"""

_WAITS = ("io_uring_enter", "epoll_wait", "epoll_pwait", "epoll_pwait2")


def _echo_server() -> tuple[socket.socket, threading.Thread]:
    """A blocking echo peer in a thread of this process (its syscalls are not the child's),
    answering each line after two milliseconds: long enough that the loop, even slowed by strace,
    has looked and found nothing, so that each round trip is a wait that sleeps."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn, conn.makefile("rb") as lines:
            for line in lines:
                time.sleep(0.002)
                conn.sendall(line)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return listener, t


def _wait_syscalls(engine: str, ring_wait: str, rounds: int) -> tuple[str, int]:
    """The loop's first line and how many wait syscalls its process made for ``rounds``."""
    listener, thread = _echo_server()
    out = f"/tmp/fdkit-ring-wait-{os.getpid()}-{engine}-{ring_wait}.strace"
    env = python_env() | {"FDKIT_AIO_ENGINE": engine, "FDKIT_AIO_RING_WAIT": ring_wait}
    try:
        done = subprocess.run(
            [
                "strace",
                "-f",
                "-c",
                "-o",
                out,
                "-e",
                "trace=" + ",".join(_WAITS),
                sys.executable,
                "-c",
                _CHILD,
                str(listener.getsockname()[1]),
                str(rounds),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        with open(out) as f:
            table = f.read()
    finally:
        listener.close()
        thread.join(timeout=10)
        if os.path.exists(out):
            os.unlink(out)
    calls = 0
    for line in table.splitlines():
        fields = line.split()
        if fields and fields[-1] in _WAITS and re.fullmatch(r"\d+", fields[3]):
            calls += int(fields[3])
    return done.stdout.strip(), calls


@needs_uring
@pytest.mark.skipif(shutil.which("strace") is None, reason="strace not installed (make test-tools)")
def test_a_wait_costs_the_io_uring_engine_what_it_costs_the_epoll_engine() -> None:
    """Per awaited round trip, the io_uring engine makes no more wait syscalls than the epoll
    engine where the ring reads epoll; the poll of older kernels makes more (the counts are
    taken the same way on each, in one test, so they compare)."""
    rounds = 400
    first, by_epoll = _wait_syscalls("epoll", "epoll_wait", rounds)
    assert first == "epoll -"
    first, by_poll = _wait_syscalls("io_uring", "poll", rounds)
    assert first == "io_uring poll"
    if not _kernel_reads_epoll():
        pytest.skip("this kernel has no IORING_OP_EPOLL_WAIT (Linux 6.15): the ring polls")
    first, by_ring = _wait_syscalls("io_uring", "epoll_wait", rounds)
    assert first == "io_uring epoll_wait"
    # Start-up and shut-down make a few waits of their own on every engine.
    assert by_ring <= by_epoll + 20, (by_ring, by_epoll)
    assert by_ring >= rounds, (by_ring, rounds)
    assert by_poll >= by_ring + rounds, (by_poll, by_ring)
