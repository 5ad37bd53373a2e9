"""fdkit.aio: asyncio's event loop with its per-request path native, on epoll or io_uring.

Change one line and an asyncio program runs on it::

    fdkit.aio.run(main())                                    # like asyncio.run
    asyncio.Runner(loop_factory=fdkit.aio.new_event_loop)    # the plug point from 3.12 on
    uvicorn --loop fdkit.aio:new_event_loop app:app

The loop is asyncio's own Unix loop (so every asyncio API behaves as the stdlib documents it)
whose iteration, timers and socket reads and writes run in Rust. Its default engine is epoll;
``engine="io_uring"`` or ``FDKIT_AIO_ENGINE=io_uring`` puts its waits through io_uring: every
registration still lives in an epoll instance, whose events the ring reads in the
io_uring_enter(2) that sleeps (``IORING_OP_EPOLL_WAIT``, Linux 6.15; before, the ring sleeps
until that instance is readable). On either engine bytes and connections are taken with recv(2)
and accept(2) when asyncio's callbacks take them, never earlier. ``loop.engine`` says which
engine runs, ``loop.engine_reason`` why a loop runs on epoll, :func:`engine_unavailable` whether
the io_uring engine could run here.
"""

from __future__ import annotations

import asyncio
import sys
import warnings
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from fdkit.aio._atomic_pipe import (
    drain,
    messages,
    read_message,
    read_messages,
    write_message,
    write_messages,
)
from fdkit.aio._loop import (
    EpollEventLoop,
    EventLoop,
    UringEventLoop,
    engine_available,
    engine_unavailable,
)
from fdkit.aio._transfer import transfer

__all__ = [
    "EpollEventLoop",
    "EventLoop",
    "EventLoopPolicy",
    "UringEventLoop",
    "drain",
    "engine_available",
    "engine_unavailable",
    "install",
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
    """A new fdkit event loop: on epoll, or on io_uring where ``FDKIT_AIO_ENGINE`` asks."""
    return EventLoop()


def run(
    main: Coroutine[Any, Any, _T],
    *,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
    debug: bool | None = None,
    **run_kwargs: Any,
) -> _T:
    """Run ``main`` on a new fdkit loop and close it, as :func:`asyncio.run` does.

    Takes what ``uvloop.run`` takes: ``loop_factory`` makes the loop (default
    :func:`new_event_loop`; e.g. ``functools.partial(EventLoop, engine="epoll")``) and must
    make an :class:`EventLoop` (``TypeError`` otherwise, as uvloop's refuses a loop not its
    own); ``run_kwargs`` go to :func:`asyncio.run` (3.12+) or :class:`asyncio.Runner` (3.11).
    """
    factory = new_event_loop if loop_factory is None else loop_factory

    def fdkit_loop() -> asyncio.AbstractEventLoop:
        loop = factory()
        if not isinstance(loop, EventLoop):
            loop.close()
            raise TypeError(
                f"fdkit.aio.run(): loop_factory={factory!r} made a {type(loop).__qualname__}, "
                "not an fdkit.aio.EventLoop"
            )
        return loop

    if sys.version_info >= (3, 12):
        return asyncio.run(main, debug=debug, loop_factory=fdkit_loop, **run_kwargs)
    if asyncio.events._get_running_loop() is not None:
        raise RuntimeError("asyncio.run() cannot be called from a running event loop")
    with asyncio.Runner(debug=debug, loop_factory=fdkit_loop, **run_kwargs) as runner:
        return runner.run(main)


def install() -> None:
    """Make fdkit's loop the one asyncio's policy gives (``asyncio.new_event_loop()``,
    ``asyncio.run`` without a factory), as ``uvloop.install()`` does: sets
    ``asyncio.set_event_loop_policy(fdkit.aio.EventLoopPolicy())``.

    From Python 3.14, where asyncio deprecates its policies (gone in 3.16), this warns
    ``DeprecationWarning`` at the caller, as asyncio's own ``set_event_loop_policy`` does:
    prefer :func:`run` or ``asyncio.Runner(loop_factory=fdkit.aio.new_event_loop)``.
    """
    policy = __getattr__("EventLoopPolicy")()
    if sys.version_info < (3, 14):
        asyncio.set_event_loop_policy(policy)
        return
    warnings.warn(
        "fdkit.aio.install() sets an asyncio event loop policy, which asyncio deprecates from "
        "Python 3.14 (removed in 3.16); use fdkit.aio.run(main) or "
        "asyncio.Runner(loop_factory=fdkit.aio.new_event_loop)",
        DeprecationWarning,
        stacklevel=2,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_event_loop_policy(policy)


def __dir__() -> list[str]:
    # The public names only (not the typing helpers and modules imported here).
    return sorted(__all__)


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
