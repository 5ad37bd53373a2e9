"""Atomic pipe messages from asyncio: whole messages in, whole messages out, the loop never
blocked.

Module functions that take the :class:`~fdkit.atomic_pipe.AtomicPipe` (rather than methods on
it): the pipe is a native class shared with threads and processes, and these are a thin
driver over what it already has (``read_message(timeout=0)``, a non-blocking writer's queue
and ``flush(0)``), waiting through ``loop.add_reader``/``loop.add_writer`` so they work on any
asyncio loop. Any number of coroutines may read or write one pipe at once: they share one
registration per direction.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Literal, overload

from fdkit.aio._readiness import wait_ready

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer as Buffer

    from fdkit._fdkit import AtomicPipe

Message = tuple[int, int, bytes]


@overload
async def read_message(
    pipe: AtomicPipe, *, with_writer: Literal[False] = False
) -> bytes | None: ...
@overload
async def read_message(pipe: AtomicPipe, *, with_writer: Literal[True]) -> Message | None: ...
async def read_message(pipe: AtomicPipe, *, with_writer: bool = False) -> bytes | Message | None:
    """The next whole message from a reading ``pipe``, None at the end of the stream (every
    writer gone and every message returned). ``with_writer=True`` gives ``(pid, tid, data)``.

    Waits for the pipe to be readable without blocking the loop; the pipe's own blocking mode
    is left as it is. A broken stream raises :class:`~fdkit.atomic_pipe.ProtocolError` after
    the whole messages before the break were returned.
    """
    loop = asyncio.get_running_loop()
    while True:
        msg = pipe.read_message(0, with_writer=with_writer)  # type: ignore[call-overload]
        if msg is not None:
            return msg  # type: ignore[no-any-return]
        if pipe.eof():
            return None
        await wait_ready(loop, pipe.fileno(), False)


async def read_messages(pipe: AtomicPipe, max: int = 1024) -> list[bytes]:
    """Up to ``max`` whole messages: waits for the first, then takes what has arrived. ``[]``
    at the end of the stream."""
    loop = asyncio.get_running_loop()
    while True:
        batch = pipe.read_messages(max, 0)
        if batch or pipe.eof():
            return batch
        await wait_ready(loop, pipe.fileno(), False)


async def messages(pipe: AtomicPipe) -> AsyncIterator[bytes]:
    """``async for msg in fdkit.aio.messages(pipe)``: every message until the end of the
    stream. One at a time, so leaving the loop early loses none: the rest stay in the pipe."""
    while (msg := await read_message(pipe)) is not None:
        yield msg


def _nonblocking(pipe: AtomicPipe) -> None:
    # A blocking writer facing a full pipe would put the loop to sleep inside write(2); a
    # non-blocking one queues what the pipe does not take (``pending_output``).
    if pipe.blocking:
        pipe.blocking = False


async def drain(pipe: AtomicPipe) -> None:
    """Until the pipe has taken everything queued on this writer (``pending_output == 0``),
    writing as room appears. ``BrokenPipeError`` when the reader is gone."""
    loop = asyncio.get_running_loop()
    while pipe.pending_output:
        if pipe.flush(0):
            return
        await wait_ready(loop, pipe.fileno(), True)


async def write_message(pipe: AtomicPipe, data: Buffer) -> None:
    """Writes one message (atomic chunks of at most ``PIPE_BUF`` bytes, which the kernel never
    interleaves with other writers' chunks) and waits until the pipe has taken it.

    Puts the writer in non-blocking mode (as ``loop.connect_write_pipe`` does): what the pipe
    cannot take at once is queued and written as room appears, never blocking the loop.
    Coroutines sharing one writer queue their messages whole, in call order.
    """
    _nonblocking(pipe)
    pipe.write_message(data)
    await drain(pipe)


async def write_messages(pipe: AtomicPipe, messages: Iterable[Buffer]) -> int:
    """Writes many messages (chunks of consecutive ones share writes while they fit in
    ``PIPE_BUF``) and waits until the pipe has taken them. Returns how many."""
    _nonblocking(pipe)
    n = pipe.write_messages(messages)
    await drain(pipe)
    return n


__all__ = [
    "drain",
    "messages",
    "read_message",
    "read_messages",
    "write_message",
    "write_messages",
]
