"""Atomic pipe messages from asyncio (``fdkit.aio.read_message``/``messages``/
``write_message``), on asyncio's own loop and on fdkit's: whole messages only, none lost,
the loop never blocked, nothing left registered."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

import fdkit.aio
from fdkit.atomic_pipe import AtomicPipe
from helpers import payload

pytestmark = pytest.mark.timeout(60)

T = TypeVar("T")
LoopFactory = Callable[[], asyncio.AbstractEventLoop]
SIZES = [1, 100, 4079, 4080, 4081, 9000, 70_000]


@pytest.fixture(params=[asyncio.new_event_loop, fdkit.aio.new_event_loop], ids=["asyncio", "fdkit"])
def loop_factory(request: pytest.FixtureRequest) -> LoopFactory:
    factory: LoopFactory = request.param
    return factory


def run(factory: LoopFactory, coro: Coroutine[Any, Any, T], timeout: float = 20) -> T:
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(asyncio.wait_for(coro, timeout))


def registered(loop: asyncio.AbstractEventLoop, fd: int) -> bool:
    return loop.remove_reader(fd) | loop.remove_writer(fd)


def test_roundtrip_through_a_small_pipe(loop_factory: LoopFactory) -> None:
    """Messages far bigger than the pipe: the writer awaits room, the reader assembles."""
    msgs = [payload(n, seed=i) for i, n in enumerate(SIZES * 6)]
    r, w = AtomicPipe.pair()

    async def main() -> list[bytes]:
        loop = asyncio.get_running_loop()
        w.resize(4096)

        async def write() -> None:
            for m in msgs:
                await fdkit.aio.write_message(w, m)
            assert w.pending_output == 0
            w.close()

        writer = asyncio.ensure_future(write())
        got = [m async for m in fdkit.aio.messages(r)]
        await writer
        assert await fdkit.aio.read_message(r) is None  # EOF stays EOF
        assert not registered(loop, r.fileno())
        return got

    with r, w:
        assert run(loop_factory, main()) == msgs


def test_many_writers_whole_messages_none_lost(loop_factory: LoopFactory) -> None:
    """Four writer threads (each its own AtomicPipe on the same pipe, so their chunks
    interleave) and three coroutines sharing an async writer: every message arrives whole,
    each writer's in its order."""
    r, w = AtomicPipe.pair()
    per = 60
    threads: list[threading.Thread] = []
    dups = [AtomicPipe.from_fd("w", os.dup(w.fileno())) for _ in range(4)]

    def thread_writer(p: AtomicPipe, k: int) -> None:
        with p:
            for i in range(per):
                p.write_message(b"t%d:%d:" % (k, i) + payload(SIZES[i % len(SIZES)], seed=i))

    async def main() -> list[tuple[int, int, bytes]]:
        async def coro_writer(k: int) -> None:
            for i in range(per):
                await fdkit.aio.write_message(w, b"c%d:%d:" % (k, i) + payload(300 * i, seed=k))
                if i % 7 == 0:
                    await asyncio.sleep(0)

        for k, p in enumerate(dups):
            t = threading.Thread(target=thread_writer, args=(p, k), daemon=True)
            threads.append(t)
            t.start()
        coros = asyncio.gather(*(coro_writer(k) for k in range(3)))
        got: list[tuple[int, int, bytes]] = []
        while len(got) < 7 * per:
            m = await fdkit.aio.read_message(r, with_writer=True)
            assert m is not None
            got.append(m)
        await coros
        return got

    with r, w:
        got = run(loop_factory, main())
    for t in threads:
        t.join(10)
    streams: dict[bytes, list[int]] = {}
    for _pid, _tid, data in got:
        name, i, body = data.split(b":", 2)
        streams.setdefault(name, []).append(int(i))
        k = int(name[1:])
        if name.startswith(b"t"):
            assert body == payload(SIZES[int(i) % len(SIZES)], seed=int(i))
        else:
            assert body == payload(300 * int(i), seed=k)
    assert len(streams) == 7
    for name, order in streams.items():
        if name.startswith(b"t"):
            assert order == list(range(per)), name  # one thread: in order
        else:
            assert sorted(order) == list(range(per)), name


def test_a_partial_message_is_awaited_not_returned(loop_factory: LoopFactory) -> None:
    """A writer thread stalls halfway through a multi-chunk message: the reader waits (the
    loop goes on running other tasks) and then returns the message whole."""
    r, w = AtomicPipe.pair()
    msg = payload(50_000, seed=3)
    gate = threading.Event()

    def writer() -> None:
        w.resize(4096)  # the first chunks fill the pipe; the writer blocks until read
        time.sleep(0.05)  # the reader is waiting first, so the loop must run the ticker
        w.write_message(msg)
        gate.wait(10)
        w.close()

    async def main() -> tuple[bytes | None, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.005)

        tick = asyncio.ensure_future(ticker())
        got = await fdkit.aio.read_message(r)
        gate.set()
        assert await fdkit.aio.read_message(r) is None
        tick.cancel()
        return got, ticks

    t = threading.Thread(target=writer, daemon=True)
    with r:
        t.start()
        got, ticks = run(loop_factory, main())
    t.join(10)
    assert got == msg
    assert ticks >= 1


def test_a_burst_of_small_messages(loop_factory: LoopFactory) -> None:
    r, w = AtomicPipe.pair()
    msgs = [b"m%d" % i for i in range(20_000)]

    async def main() -> list[bytes]:
        async def write() -> None:
            assert await fdkit.aio.write_messages(w, msgs) == len(msgs)
            w.close()

        writer = asyncio.ensure_future(write())
        got: list[bytes] = []
        while batch := await fdkit.aio.read_messages(r, 500):
            assert len(batch) <= 500
            got += batch
        await writer
        return got

    with r, w:
        assert run(loop_factory, main()) == msgs


@pytest.mark.serial
def test_a_slow_reader_is_awaited_not_spun_on(loop_factory: LoopFactory) -> None:
    r, w = AtomicPipe.pair()
    msgs = [payload(8000, seed=i) for i in range(60)]

    async def main() -> tuple[list[bytes], float, float]:
        w.resize(4096)

        async def slow() -> list[bytes]:
            out = []
            async for m in fdkit.aio.messages(r):
                out.append(m)
                await asyncio.sleep(0.005)
            return out

        reader = asyncio.ensure_future(slow())
        cpu, wall = time.process_time(), time.monotonic()
        for m in msgs:
            await fdkit.aio.write_message(w, m)
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        w.close()
        return await reader, cpu, wall

    with r, w:
        got, cpu, wall = run(loop_factory, main())
    assert got == msgs
    assert wall > 0.2
    assert cpu < 0.5 * wall, f"{cpu:.3f} s of CPU in {wall:.3f} s: the writer spins"


def test_a_cancelled_read_loses_nothing(loop_factory: LoopFactory) -> None:
    r, w = AtomicPipe.pair()

    async def main() -> bytes | None:
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(fdkit.aio.read_message(r))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not registered(loop, r.fileno())
        await fdkit.aio.write_message(w, b"kept")
        return await fdkit.aio.read_message(r)

    with r, w:
        assert run(loop_factory, main()) == b"kept"


def test_two_readers_share_one_pipe(loop_factory: LoopFactory) -> None:
    """Two coroutines wait on one pipe: neither unseats the other's wait."""
    r, w = AtomicPipe.pair()

    async def main() -> set[bytes | None]:
        loop = asyncio.get_running_loop()
        a = asyncio.ensure_future(fdkit.aio.read_message(r))
        b = asyncio.ensure_future(fdkit.aio.read_message(r))
        await asyncio.sleep(0.02)
        await fdkit.aio.write_message(w, b"one")
        await fdkit.aio.write_message(w, b"two")
        got = set(await asyncio.gather(a, b))
        assert not registered(loop, r.fileno())
        return got

    with r, w:
        assert run(loop_factory, main()) == {b"one", b"two"}


def test_a_vanished_reader_is_broken_pipe(loop_factory: LoopFactory) -> None:
    r, w = AtomicPipe.pair()

    async def main() -> None:
        r.close()
        with pytest.raises(BrokenPipeError):
            await fdkit.aio.write_message(w, b"x" * 10_000)

    try:
        run(loop_factory, main())
    finally:
        with contextlib.suppress(BrokenPipeError):
            w.close()
