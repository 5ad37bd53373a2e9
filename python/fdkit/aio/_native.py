"""The native iteration of fdkit's loops, and the Python paths it takes where asyncio's would.

:func:`install` gives a loop its ``LoopCore`` (``fdkit._fdkit``): ``_run_once``, ``call_soon``,
``call_at``, ``call_later``, ``time`` and ``_timer_handle_cancelled`` become the core's, which
do what asyncio's do on the same objects (the ``_ready`` deque, asyncio's Handles) without a
Python frame. A loop subclass that overrides one of them keeps its own.

The functions below are what the core calls where asyncio's behaviour is Python's to give: an
exception from a callback (``Handle._run``'s handler), debug mode's run of a Handle, a
``call_at`` with a ``when`` that is not a plain number or in debug mode. Each is asyncio's code
for the Python version running, with the timer heap being the core's.
"""

from __future__ import annotations

import sys
from asyncio import base_events, events, format_helpers
from asyncio.log import logger
from typing import Any

from fdkit._fdkit import LoopCore
from fdkit.aio._transports import SocketTransport

__all__ = ["SocketTransport", "install", "python_call_at", "report_error", "run_debug"]

_DEBUG_FORMAT = sys.version_info >= (3, 13)  # _format_callback_source(..., debug=)

#: The loop methods the core replaces: attribute on the loop -> the core's method.
_NATIVE = {
    "_run_once": "run_once",
    "call_soon": "call_soon",
    "call_at": "call_at",
    "call_later": "call_later",
    "time": "time",
    "_timer_handle_cancelled": "timer_handle_cancelled",
}


def install(loop: Any, ring: Any = None) -> LoopCore:
    """Gives ``loop`` (an fdkit EventLoop, after asyncio's ``__init__``) its native core."""
    from fdkit.aio._loop import EventLoop

    core = LoopCore(loop, loop._selector, ring, sys.modules[__name__])
    core.set_scheduled(loop.__dict__.pop("_scheduled_list", []))
    loop.__dict__["_core"] = core
    cls = type(loop)

    def kept(*names: str) -> bool:  # none of ``names`` overridden by a subclass
        return all(getattr(cls, n) is getattr(EventLoop, n) for n in names)

    # Each native method with the methods asyncio's calls (call_later calls call_at and time).
    needs = {
        "call_soon": ("call_soon", "_call_soon"),
        "call_later": ("call_later", "call_at", "time"),
        "_run_once": ("_run_once", "_process_events", "_add_callback", "time"),
    }
    for name, native in _NATIVE.items():
        if kept(*needs.get(name, (name,))):
            setattr(loop, name, getattr(core, native))
    return core


def report_error(handle: events.Handle, exc: BaseException) -> None:
    """What ``Handle._run`` does with ``exc``, raised by ``handle``'s callback."""
    if _DEBUG_FORMAT:
        cb = format_helpers._format_callback_source(  # type: ignore[call-arg]
            handle._callback,  # type: ignore[attr-defined]
            handle._args,  # type: ignore[attr-defined]
            debug=handle._loop.get_debug(),  # type: ignore[attr-defined]
        )
    else:
        cb = format_helpers._format_callback_source(
            handle._callback,  # type: ignore[attr-defined]
            handle._args,  # type: ignore[attr-defined]
        )
    context: dict[str, Any] = {
        "message": f"Exception in callback {cb}",
        "exception": exc,
        "handle": handle,
    }
    if handle._source_traceback:  # type: ignore[attr-defined]
        context["source_traceback"] = handle._source_traceback  # type: ignore[attr-defined]
    handle._loop.call_exception_handler(context)  # type: ignore[attr-defined]


def run_debug(loop: Any, handle: events.Handle) -> None:
    """``_run_once``'s run of one Handle in debug mode (timed, the slow ones logged)."""
    try:
        loop._current_handle = handle
        t0 = loop.time()
        handle._run()
        dt = loop.time() - t0
        if dt >= loop.slow_callback_duration:
            logger.warning(
                "Executing %s took %.3f seconds",
                base_events._format_handle(handle),  # type: ignore[attr-defined]
                dt,
            )
    finally:
        loop._current_handle = None


def python_call_at(
    loop: Any, when: Any, callback: Any, *args: Any, context: Any = None
) -> events.TimerHandle:
    """asyncio's ``BaseEventLoop.call_at``, the heap being the core's."""
    if when is None:
        raise TypeError("when cannot be None")
    loop._check_closed()
    if loop._debug:
        loop._check_thread()
        loop._check_callback(callback, "call_at")
    timer = events.TimerHandle(when, callback, args, loop, context)
    if timer._source_traceback:
        del timer._source_traceback[-1]
    loop._core.push_timer(timer)
    timer._scheduled = True
    return timer
