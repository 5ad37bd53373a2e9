"""The native iteration of fdkit's loops, and the Python paths it takes where asyncio's would.

:func:`install` gives a loop its ``LoopCore`` (``fdkit._fdkit``). ``_run_once``, ``call_soon``,
``call_at``, ``call_later``, ``time``, ``_timer_handle_cancelled``, ``create_task``,
``get_debug`` and ``_check_closed`` are method descriptors on ``EventLoop`` (installed once,
``install_loop_methods``) that run the core's version, on the loop's own objects (the
``_ready`` deque, the ``_scheduled`` heap, asyncio's Handles), without a Python frame, while
nothing they stand for was changed; otherwise asyncio's own method runs. docs/aio.md, "What a
program may change", has the rule.

The functions below are what the core calls where asyncio's behaviour is Python's to give: an
exception from a callback (``Handle._run``'s handler), debug mode's run of a Handle, a read or
write error of the socket transport. Each is asyncio's code for the Python version running; the
core calls each as asyncio does, inside the ``except`` block's state.
"""

from __future__ import annotations

import collections
import contextvars
import selectors
import sys
from asyncio import base_events, events, format_helpers, selector_events
from asyncio.log import logger
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

from fdkit._fdkit import LoopCore
from fdkit.aio._transports import SocketTransport

__all__ = [
    "SocketTransport",
    "changed",
    "install",
    "passing",
    "read_error",
    "report_error",
    "run_debug",
    "write_error",
]

_DEBUG_FORMAT = sys.version_info >= (3, 13)  # _format_callback_source(..., debug=)
#: Read by the core: asyncio's ``_run_once`` runs the timers due before ``now +
#: max(_clock_resolution, math.ulp(now))`` (3.15; a bound past ``now`` however large ``now``
#: grows), not ``now + _clock_resolution``. Probed on asyncio's code, not by version.
END_TIME_ULP = "ulp" in base_events.BaseEventLoop._run_once.__code__.co_names  # type: ignore[attr-defined]


def _asyncio_select() -> Any:
    """``EpollSelector.select`` when it is the standard library's own (the native wait stands
    for it), else None."""
    select = selectors.EpollSelector.select
    code = getattr(select, "__code__", None)
    if code is None or code.co_filename != selectors.__file__:
        return None
    return select


_EPOLL_SELECT = _asyncio_select()


def _selects(selector: Any, ring: Any) -> list[tuple[type, Any]]:
    """The ``(class, select)`` pairs the native wait on ``selector`` stands for: while each
    class's ``select`` is that function, the core waits itself; none for a selector it cannot
    wait on (not an epoll selector)."""
    if _EPOLL_SELECT is None or not isinstance(selector, selectors.EpollSelector):
        return []
    if ring is None:
        return [(type(selector), _EPOLL_SELECT)]
    from fdkit.aio._selector import RingSelector

    return [(type(selector), RingSelector.select), (selectors.EpollSelector, _EPOLL_SELECT)]


def install(loop: Any, loop_class: type, ring: Any = None) -> LoopCore:
    """Gives ``loop`` (an fdkit EventLoop, after asyncio's ``__init__``) its native core;
    ``loop_class`` is fdkit's ``EventLoop``, the class whose methods the core stands for."""
    selector = loop._selector
    core = LoopCore(
        loop, selector, ring, sys.modules[__name__], loop_class, _selects(selector, ring)
    )
    loop._core = core
    return core


def changed(loop: Any) -> None:
    """Tells ``loop``'s core that one of the methods it stands for was set on, or deleted
    from, the loop instance."""
    try:
        core = loop._core
    except AttributeError:  # asyncio's __init__, before install()
        return
    core.changed()


def _run_frame() -> tuple[FrameType, int, int] | None:
    """A frame of asyncio's ``Handle._run`` (with its instruction and line at the callback's
    call), caught once from a Handle whose callback raises: the traceback of an exception a
    callback raises under the core starts at the callback, and is given this entry first, so
    that it reads, and prints, as it does on asyncio's loop."""

    class _Probe:
        tb: TracebackType | None = None

        def get_debug(self) -> bool:
            return False

        def call_exception_handler(self, context: dict[str, Any]) -> None:
            self.tb = context["exception"].__traceback__

    def _raise() -> None:
        raise LookupError

    probe = _Probe()
    events.Handle(_raise, (), probe, contextvars.Context())._run()  # type: ignore[arg-type]
    tb = probe.tb
    if tb is None or tb.tb_frame.f_code is not events.Handle._run.__code__:
        return None
    tb.tb_frame.clear()
    return tb.tb_frame, tb.tb_lasti, tb.tb_lineno


_RUN_FRAME = _run_frame()


def _run_once_frames() -> list[tuple[FrameType, int, int]]:
    """Frames of asyncio's ``_run_once`` (at its ``handle._run()`` call) and of
    ``Handle._run`` (at the callback's call), outermost first, caught once from a SystemExit
    raised by a callback: the traceback of what a callback lets through (SystemExit,
    KeyboardInterrupt) under the core is given these, so that it reads as on asyncio's loop.
    Empty where asyncio's ``_run_once`` could not be run on a stand-in loop."""

    class _Selector:
        def select(self, timeout: Any) -> list[Any]:
            return []

    class _Probe:
        _timer_cancelled_count = 0
        _stopping = False
        _debug = False
        _clock_resolution = 1e-09
        _current_handle = None
        _selector = _Selector()

        def __init__(self) -> None:
            self._ready: collections.deque[Any] = collections.deque()
            self._scheduled: list[Any] = []

        def time(self) -> float:
            return 0.0

        def _process_events(self, event_list: Any) -> None:
            pass

        def get_debug(self) -> bool:
            return False

    def _raise() -> None:
        raise SystemExit

    probe = _Probe()
    probe._ready.append(events.Handle(_raise, (), probe, contextvars.Context()))  # type: ignore[arg-type]
    codes = (base_events.BaseEventLoop._run_once.__code__, events.Handle._run.__code__)  # type: ignore[attr-defined]
    try:
        base_events.BaseEventLoop._run_once(probe)  # type: ignore[attr-defined]
    except SystemExit as exc:
        tb = exc.__traceback__
    except Exception:
        return []
    else:
        return []
    got = []
    while tb is not None:
        if tb.tb_frame.f_code in codes:
            tb.tb_frame.clear()
            got.append((tb.tb_frame, tb.tb_lasti, tb.tb_lineno))
        tb = tb.tb_next
    return got if [f.f_code for f, _, _ in got] == list(codes) else []


_RUN_ONCE_FRAMES = _run_once_frames()


def passing(exc: BaseException, handle_ran: bool) -> None:
    """Gives ``exc`` (SystemExit or KeyboardInterrupt, leaving the core's iteration) the
    traceback entries asyncio's has: ``_run_once``'s, and ``Handle._run``'s where the core ran
    the Handle itself (``handle_ran``; False when it was raised between two callbacks)."""
    if not _RUN_ONCE_FRAMES:
        return
    tb = exc.__traceback__
    entries = _RUN_ONCE_FRAMES if handle_ran else _RUN_ONCE_FRAMES[:1]
    for frame, lasti, lineno in reversed(entries):
        tb = TracebackType(tb, frame, lasti, lineno)
    exc.__traceback__ = tb


def _read_frames() -> dict[bool, tuple[FrameType, int, int]]:
    """Frames of asyncio's ``_SelectorSocketTransport._read_ready__data_received`` at its
    ``recv`` call (key True) and at its ``data_received`` call (key False), caught as
    :func:`_run_frame` catches ``Handle._run``'s: asyncio's traceback of a read error or of an
    exception from ``data_received`` starts in that method."""
    got: dict[bool, tuple[FrameType, int, int]] = {}
    code = selector_events._SelectorSocketTransport._read_ready__data_received.__code__  # type: ignore[attr-defined]
    for failing_recv in (True, False):

        class _Sock:
            def recv(self, n: int, fail: bool = failing_recv) -> bytes:
                if fail:
                    raise ConnectionResetError
                return b"x"

        class _Protocol:
            def data_received(self, data: bytes) -> None:
                raise LookupError

        class _Transport:
            _conn_lost = 0
            max_size = 1
            _sock = _Sock()
            _protocol = _Protocol()
            tb: TracebackType | None = None

            def _fatal_error(self, exc: BaseException, message: str) -> None:
                self.tb = exc.__traceback__

        tr = _Transport()
        selector_events._SelectorSocketTransport._read_ready__data_received(tr)  # type: ignore[attr-defined]
        if tr.tb is not None and tr.tb.tb_frame.f_code is code:
            tr.tb.tb_frame.clear()
            got[failing_recv] = (tr.tb.tb_frame, tr.tb.tb_lasti, tr.tb.tb_lineno)
    return got


_READ_FRAMES = _read_frames()


Entry = tuple[FrameType, int, int]


class Marker(SystemExit):
    """Raised by a stand-in at the site whose traceback entries are wanted: asyncio's code lets
    SystemExit through everywhere."""


def entries_of(call: Callable[[], object], *functions: Any) -> list[Entry] | None:
    """The traceback entries of ``functions`` (each calling the next) in the traceback of the
    :class:`Marker` that ``call()`` raises, their frames cleared; None when they are not
    exactly those (another asyncio)."""
    try:
        call()
    except Marker as exc:
        tb = exc.__traceback__
    else:
        return None
    codes = [f.__code__ for f in functions]
    got: list[Entry] = []
    while tb is not None:
        if tb.tb_frame.f_code in codes:
            tb.tb_frame.clear()
            got.append((tb.tb_frame, tb.tb_lasti, tb.tb_lineno))
        tb = tb.tb_next
    return got if [e[0].f_code for e in got] == codes else None


def _leaving_frames() -> dict[bool, list[Entry]]:
    """The entries of asyncio's ``_read_ready`` and ``_read_ready__data_received`` in the
    traceback of a SystemExit raised by ``recv`` (key True) or by ``data_received`` (key
    False): what it carries out of the loop, under ``Handle._run``'s."""
    got: dict[bool, list[Entry]] = {}
    cls = selector_events._SelectorSocketTransport  # type: ignore[attr-defined]
    for failing_recv in (True, False):

        class _Sock:
            def recv(self, n: int, fail: bool = failing_recv) -> bytes:
                if fail:
                    raise Marker
                return b"x"

        class _Protocol:
            def data_received(self, data: bytes) -> None:
                raise Marker

        class _Transport:
            _conn_lost = 0
            max_size = 1
            _sock = _Sock()
            _protocol = _Protocol()

            def __init__(self) -> None:
                self._read_ready_cb = lambda: cls._read_ready__data_received(self)

        entries = entries_of(lambda: cls._read_ready(_Transport()), cls._read_ready,
                             cls._read_ready__data_received)  # fmt: skip
        if entries is not None:
            got[failing_recv] = entries
    return got


_LEAVING_FRAMES = _leaving_frames()


def with_entries(exc: BaseException, entries: list[Entry]) -> None:
    """Puts ``entries`` before those of ``exc``'s traceback."""
    tb = exc.__traceback__
    for frame, lasti, lineno in reversed(entries):
        tb = TracebackType(tb, frame, lasti, lineno)
    exc.__traceback__ = tb


def leaving_read(exc: BaseException, in_recv: bool) -> BaseException:
    """``exc`` (SystemExit or KeyboardInterrupt from recv(2)'s signal handlers when
    ``in_recv``, else from ``data_received``) with the entries asyncio's read methods give it
    on its way out of the loop; the core raises it."""
    with_entries(exc, _LEAVING_FRAMES.get(in_recv, []))
    return exc


def _write_frame() -> tuple[FrameType, int, int] | None:
    """A frame of asyncio's ``_SelectorSocketTransport.write`` at its ``send`` call (see
    :func:`_read_frames`)."""

    class _Sock:
        def send(self, data: bytes) -> int:
            raise ConnectionResetError

    class _Transport:
        _eof = False
        _empty_waiter = None
        _conn_lost = 0
        _buffer = b""
        _sock = _Sock()
        tb: TracebackType | None = None

        def _fatal_error(self, exc: BaseException, message: str) -> None:
            self.tb = exc.__traceback__

    tr = _Transport()
    write = selector_events._SelectorSocketTransport.write  # type: ignore[attr-defined]
    write(tr, b"x")
    if tr.tb is None or tr.tb.tb_frame.f_code is not write.__code__:
        return None
    tr.tb.tb_frame.clear()
    return tr.tb.tb_frame, tr.tb.tb_lasti, tr.tb.tb_lineno


_WRITE_FRAME = _write_frame()


def _handled(exc: BaseException, call: Callable[..., object], *args: Any) -> None:
    """``call(*args)`` as asyncio's ``except`` block runs its exception handler: with ``exc``
    being handled (``sys.exc_info()``, so ``logging.exception`` logs its traceback; the
    ``__context__`` of what ``call`` raises). ``exc``'s traceback is left as it was."""
    tb = exc.__traceback__
    try:
        raise exc
    except BaseException:
        exc.__traceback__ = tb
        call(*args)


def write_error(transport: Any, exc: BaseException) -> None:
    """asyncio's ``write`` on ``exc`` from send(2): ``_fatal_error``, the traceback starting in
    ``write`` as asyncio's does."""
    if _WRITE_FRAME is not None:
        frame, lasti, lineno = _WRITE_FRAME
        exc.__traceback__ = TracebackType(exc.__traceback__, frame, lasti, lineno)
    _handled(exc, transport._fatal_error, exc, "Fatal write error on socket transport")


def read_error(transport: Any, exc: BaseException, in_recv: bool) -> None:
    """asyncio's ``_read_ready__data_received`` on ``exc`` (from recv(2) when ``in_recv``, else
    from ``data_received``): the transport's ``_fatal_error`` with asyncio's message, the
    traceback starting where asyncio's starts."""
    where = _READ_FRAMES.get(in_recv)
    if where is not None:
        frame, lasti, lineno = where
        exc.__traceback__ = TracebackType(exc.__traceback__, frame, lasti, lineno)
    if in_recv:
        message = "Fatal read error on socket transport"
    else:
        message = "Fatal error: protocol.data_received() call failed."
    _handled(exc, transport._fatal_error, exc, message)


def report_error(handle: Any, exc: BaseException) -> None:
    """What ``Handle._run`` does with ``exc``, raised by ``handle``'s callback."""
    fmt: Any = format_helpers._format_callback_source
    if _RUN_FRAME is not None:
        frame, lasti, lineno = _RUN_FRAME
        exc.__traceback__ = TracebackType(exc.__traceback__, frame, lasti, lineno)
    if _DEBUG_FORMAT:
        cb = fmt(
            handle._callback,
            handle._args,
            debug=handle._loop.get_debug(),
        )
    else:
        cb = fmt(
            handle._callback,
            handle._args,
        )
    context: dict[str, Any] = {
        "message": f"Exception in callback {cb}",
        "exception": exc,
        "handle": handle,
    }
    if handle._source_traceback:
        context["source_traceback"] = handle._source_traceback
    _handled(exc, handle._loop.call_exception_handler, context)


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
