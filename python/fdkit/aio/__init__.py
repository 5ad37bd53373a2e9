"""fdkit.aio: an asyncio event loop on io_uring (epoll where io_uring is denied).

Change one line and an asyncio program runs on it::

    fdkit.aio.run(main())                                    # like asyncio.run
    asyncio.Runner(loop_factory=fdkit.aio.new_event_loop)    # the plug point from 3.12 on
    uvicorn --loop fdkit.aio:new_event_loop app:app

The loop is asyncio's own Unix loop (so every asyncio API behaves as the stdlib documents it)
whose waits go through io_uring: every registration lives in an epoll instance, and when nothing
is ready and the iteration may sleep, the ring sleeps until that instance is readable, in one
io_uring_enter(2). Bytes and connections are taken with recv(2) and accept(2) when asyncio's
callbacks take them, never earlier. ``loop.engine`` says which engine runs,
``loop.engine_reason`` why a loop runs on epoll.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from fdkit.aio._atomic_pipe import (
    drain,
    messages,
    read_message,
    read_messages,
    write_message,
    write_messages,
)
from fdkit.aio._loop import EpollEventLoop, EventLoop, UringEventLoop, engine_available
from fdkit.aio._transfer import transfer

__all__ = [
    "EpollEventLoop",
    "EventLoop",
    "EventLoopPolicy",
    "UringEventLoop",
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


if TYPE_CHECKING:

    class EventLoopPolicy(asyncio.DefaultEventLoopPolicy):
        """A policy whose loops are fdkit's."""


def __getattr__(name: str) -> Any:
    # EventLoopPolicy is made on first use, for programs that still set a policy: asyncio's
    # policies are deprecated from Python 3.14 (removed in 3.16), and importing fdkit.aio or
    # running a loop the documented ways (run, a Runner's loop_factory) must not touch them.
    if name == "EventLoopPolicy":
        policy = _make_policy()
        globals()["EventLoopPolicy"] = policy
        return policy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _make_policy() -> type:
    # asyncio's Unix policy class itself (unix_events._UnixDefaultEventLoopPolicy, 3.11 to
    # 3.15), not the public name asyncio.DefaultEventLoopPolicy, whose every read warns from
    # 3.14: asking for fdkit's policy warns of nothing; asyncio.set_event_loop_policy, the
    # deprecated call, warns as it does for any policy.
    from asyncio import unix_events

    base: Any = getattr(unix_events, "_UnixDefaultEventLoopPolicy", None)
    if base is None:
        raise AttributeError(
            "fdkit.aio.EventLoopPolicy: this Python has no asyncio event loop policies; "
            "use fdkit.aio.run or asyncio.Runner(loop_factory=fdkit.aio.new_event_loop)"
        )

    class EventLoopPolicy(base):  # type: ignore[misc]
        """A policy whose loops are fdkit's (from 3.12 prefer ``loop_factory``)."""

        def _loop_factory(self) -> EventLoop:
            return new_event_loop()

    EventLoopPolicy.__module__ = __name__
    return EventLoopPolicy
