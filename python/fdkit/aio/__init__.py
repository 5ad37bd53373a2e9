"""fdkit.aio: an asyncio event loop on io_uring (epoll where io_uring is denied).

Change one line and an asyncio program runs on it::

    fdkit.aio.run(main())                                    # like asyncio.run
    asyncio.Runner(loop_factory=fdkit.aio.new_event_loop)    # the plug point from 3.12 on
    uvicorn --loop fdkit.aio:new_event_loop app:app

The loop is asyncio's own Unix loop (so every asyncio API behaves as the stdlib documents it)
with its selector and its socket transports replaced: sockets are watched by the ring,
streams receive through multishot recv on provided buffers, and a write goes to the socket at
once, queueing only what the kernel did not take. ``loop.engine`` says which engine runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from fdkit.aio._atomic_pipe import (
    drain,
    messages,
    read_message,
    read_messages,
    write_message,
    write_messages,
)
from fdkit.aio._loop import EventLoop, engine_available
from fdkit.aio._transfer import transfer

__all__ = [
    "EventLoop",
    "EventLoopPolicy",
    "drain",
    "engine_available",
    "messages",
    "new_event_loop",
    "read_message",
    "read_messages",
    "run",
    "transfer",
    "write_message",
    "write_messages",
]

_T = TypeVar("_T")


def new_event_loop() -> EventLoop:
    """A new fdkit event loop (io_uring when this kernel lets us, else epoll)."""
    return EventLoop()


def run(main: Coroutine[Any, Any, _T], *, debug: bool | None = None) -> _T:
    """Run ``main`` on a new fdkit loop and close it, as :func:`asyncio.run` does."""
    with asyncio.Runner(debug=debug, loop_factory=new_event_loop) as runner:
        return runner.run(main)


class EventLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """A policy whose loops are fdkit's (Python 3.11–3.13; from 3.12 prefer ``loop_factory``)."""

    def _loop_factory(self) -> EventLoop:
        return new_event_loop()
