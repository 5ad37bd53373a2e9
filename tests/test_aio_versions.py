"""What asyncio changed in 3.14 and 3.15, on fdkit's loops as on asyncio's own.

fdkit's native core does on asyncio's objects what asyncio's Python does, so each Python's
change to that Python is a behaviour the core must follow: 3.14's ``create_task`` passes any
keyword on to the task (``eager_start``) or the task factory; 3.15's socket transport counts
its buffered bytes (``_buffer_size``, which ``get_write_buffer_size`` and flow control read)
and runs its callbacks in the context asyncio gives it; 3.15's ``_run_once`` takes the timers
due before ``now + max(clock resolution, ulp(now))``. Each script runs on asyncio's loop (the
oracle) and on fdkit's with each engine, on every Python: where a version lacks the change, both
loops show the older behaviour.
"""

from __future__ import annotations

import asyncio
import contextvars
import socket
from typing import Any

from helpers.aio_parity import FdkitEngine, Kind, both, both_run, each_engine


async def _eager_start() -> list[Any]:
    loop = asyncio.get_running_loop()
    seen: list[Any] = []

    async def step() -> str:
        seen.append("first step")
        await asyncio.sleep(0)
        return "done"

    coro = step()
    try:
        task = loop.create_task(coro, eager_start=True)  # type: ignore[call-arg]
    except TypeError as e:  # before 3.14: asyncio's create_task takes no such keyword
        coro.close()
        return [type(e).__name__, str(e)]
    seen.append(f"created (done: {task.done()})")
    seen.append(await task)
    return seen


@each_engine
def test_create_task_passes_eager_start_on_as_asyncio_does(engine: FdkitEngine) -> None:
    """3.14: ``loop.create_task(coro, eager_start=True)`` runs the first step before it
    returns (aiohttp asks for it); before 3.14, asyncio's own TypeError."""
    oracle, got = both_run(engine, _eager_start)
    assert got == oracle
    assert oracle[0] in ("first step", "TypeError"), oracle


async def _factory_keywords() -> list[Any]:
    loop = asyncio.get_running_loop()
    calls: list[Any] = []

    def factory(lp: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        calls.append(sorted(kwargs))
        kwargs.pop("flavour", None)
        return asyncio.Task(coro, loop=lp, **kwargs)

    loop.set_task_factory(factory)
    try:
        await loop.create_task(asyncio.sleep(0), name="n")
        coro = asyncio.sleep(0)
        try:
            await loop.create_task(coro, flavour="x")  # type: ignore[call-arg]
        except TypeError as e:  # before 3.14: asyncio's create_task takes no such keyword
            coro.close()
            calls.append(type(e).__name__)
    finally:
        loop.set_task_factory(None)
    return calls


@each_engine
def test_a_task_factory_gets_the_keywords_asyncio_gives_it(engine: FdkitEngine) -> None:
    """A task factory is called with what asyncio passes it on that version (3.14: every
    keyword of the call; before, only ``context``, with the name set afterwards)."""
    oracle, got = both_run(engine, _factory_keywords)
    assert got == oracle


async def _buffered_write() -> list[Any]:
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    events: list[Any] = []

    class Proto(asyncio.Protocol):
        def pause_writing(self) -> None:
            events.append("pause_writing")

        def resume_writing(self) -> None:
            events.append("resume_writing")

    transport, _ = await loop.create_connection(Proto, sock=a)
    try:
        transport.set_write_buffer_limits(high=64 * 1024)
        chunk = b"x" * (256 * 1024)
        sent = 0
        for _ in range(64):  # until the kernel's buffers are full and more than 64 KiB wait
            transport.write(chunk)
            sent += len(chunk)
            if "pause_writing" in events:
                break
        waiting = transport.get_write_buffer_size()
        events.append(("buffered", 0 < waiting <= sent))
        b.setblocking(False)
        got = 0
        while got < sent:  # the peer reads it all; the buffer drains
            try:
                got += len(b.recv(1 << 20))
            except BlockingIOError:
                await asyncio.sleep(0.001)
        events.append(("drained", transport.get_write_buffer_size(), got == sent))
    finally:
        transport.close()
        b.close()
        await asyncio.sleep(0)
    return events


@each_engine
def test_bytes_the_kernel_does_not_take_are_counted_and_pause_the_protocol(
    engine: FdkitEngine,
) -> None:
    """What one ``write`` cannot send at once is buffered and counted (3.15 keeps the count in
    ``_buffer_size``): ``get_write_buffer_size`` says so, the protocol is paused above the high
    mark and resumed once the peer has read it all."""
    oracle, got = both_run(engine, _buffered_write)
    assert oracle == [
        "pause_writing",
        ("buffered", True),
        "resume_writing",
        ("drained", 0, True),
    ]
    assert got == oracle


_var: contextvars.ContextVar[str] = contextvars.ContextVar("_var", default="unset")


async def _connection_context() -> list[str]:
    loop = asyncio.get_running_loop()
    seen: list[str] = []
    a, b = socket.socketpair()

    class Proto(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            seen.append(f"made: {_var.get()}")
            _var.set("set in connection_made")

        def data_received(self, data: bytes) -> None:
            seen.append(f"data: {_var.get()}")

    _var.set("caller's")
    transport, _ = await loop.create_connection(Proto, sock=a)
    _var.set("caller's, later")
    try:
        b.sendall(b"ping")
        for _ in range(200):
            if len(seen) == 2:
                break
            await asyncio.sleep(0.005)
    finally:
        transport.close()
        b.close()
        await asyncio.sleep(0)
    return seen


@each_engine
def test_a_connections_callbacks_run_in_the_context_asyncio_gives_them(
    engine: FdkitEngine,
) -> None:
    """``connection_made`` and ``data_received`` (read by fdkit's core) see the context asyncio
    runs them in: 3.15 gives the transport a copy of the caller's, shared by its callbacks."""
    oracle, got = both_run(engine, _connection_context)
    assert oracle[0] == "made: caller's"
    assert got == oracle


def _coarse_clock(kind: Kind) -> list[int]:
    """A loop whose clock reads a time so large that its double's ulp exceeds the clock's
    resolution: a timer due exactly then."""
    with kind.loop() as loop:
        now = float(2**40)  # ulp(2**40) is 2**-12 s, far above a nanosecond
        loop.time = lambda: now  # type: ignore[method-assign]
        ran: list[int] = []
        loop.call_at(now, ran.append, 1)
        for _ in range(3):  # three iterations, none waiting (a callback is always ready)
            loop.call_soon(int)
            loop._run_once()  # type: ignore[attr-defined]
        return ran


@each_engine
def test_a_timer_due_now_on_a_coarse_clock_runs_as_on_asyncios_loop(engine: FdkitEngine) -> None:
    """3.15 takes the timers due before ``now + max(clock resolution, ulp(now))``, so one due at
    ``now`` runs however coarse the double; before, ``now + resolution`` rounds to ``now`` and
    the timer waits (with a zero timeout each iteration). Both loops do the version's."""
    oracle, got = both(engine, _coarse_clock)
    assert oracle in ([], [1])
    assert got == oracle
