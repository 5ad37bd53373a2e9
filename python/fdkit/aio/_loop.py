"""The event loops: asyncio's Unix selector loop, on epoll or on io_uring.

``EventLoop(engine=None)`` picks the engine once, by class: :class:`EpollEventLoop` by default,
:class:`UringEventLoop` when ``engine="io_uring"`` or ``FDKIT_AIO_ENGINE=io_uring`` asks for it
(``OSError`` where this kernel or sandbox cannot run it). epoll is the default because the
io_uring engine, whose registrations live in an epoll instance too, spends more CPU per wait
than epoll_wait(2) itself (a ring wait is armed on the instance's wait queue and its completion
posted through task work); docs/aio.md "Which engine" has the measurements. No method asks
which engine it runs on.
"""

from __future__ import annotations

import asyncio
import errno
import os
import selectors
from asyncio import constants, sslproto
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypedDict

from fdkit._fdkit import ENGINE_NAMES, install_loop_methods
from fdkit.aio import _native, _tls
from fdkit.aio._transports import SocketTransport

if TYPE_CHECKING:  # annotations only: a loop's import need not load fdkit.types
    from fdkit.types import EngineName as Engine

# Every spelling of an engine that fdkit accepts, and the name it stands for, is the native
# module's ENGINE_NAMES (one list, in the core, for fdkit serve and these loops).

#: ``engine_reason`` of a loop that runs on epoll because nobody asked for an engine.
DEFAULT_REASON = (
    "epoll is fdkit.aio's default engine "
    "(io_uring on request: engine='io_uring' or FDKIT_AIO_ENGINE=io_uring)"
)


def engine_name(value: str | None, what: str = "engine", *, none_ok: bool = True) -> Engine | None:
    """The engine ``value`` names (``ENGINE_NAMES``: ``"uring"`` is an alias of ``"io_uring"``);
    None for None where ``none_ok`` (no engine chosen). ``ValueError`` naming ``what`` for
    anything else."""
    if value is None and none_ok:
        return None
    engine = ENGINE_NAMES.get(value) if isinstance(value, str) else None
    if engine is None:
        allowed = ", ".join(map(repr, ENGINE_NAMES))
        if what == "engine" and none_ok:
            allowed += " or None"
        raise ValueError(f"{what} must be {allowed}, not {value!r}")
    return engine


def _requested_engine(engine: str | None) -> tuple[Engine | None, str | None]:
    """The engine asked for (argument first, then ``FDKIT_AIO_ENGINE``) and who asked."""
    if engine is not None:
        return engine_name(engine), f"engine={engine!r} was asked for"
    env = os.environ.get("FDKIT_AIO_ENGINE")
    if env:
        return engine_name(env, "FDKIT_AIO_ENGINE"), f"FDKIT_AIO_ENGINE={env}"
    return None, None


class _ReactorOptions(TypedDict, total=False):
    """``_fdkit.Reactor``'s keywords (``_fdkit.REACTOR_DEFAULTS`` has their defaults)."""

    entries: int
    epoll_wait: bool


#: ``FDKIT_AIO_RING_WAIT``'s values: how the io_uring engine waits.
RING_WAITS = ("epoll_wait", "poll")


def _ring_wait_asked() -> bool:
    """Whether ``FDKIT_AIO_RING_WAIT`` lets the ring read epoll (``epoll_wait``, the default)
    or asks for the poll of the epoll fd that kernels before 6.15 get (``poll``)."""
    env = os.environ.get("FDKIT_AIO_RING_WAIT")
    if not env:
        return True
    if env not in RING_WAITS:
        raise ValueError(
            f"FDKIT_AIO_RING_WAIT must be {' or '.join(map(repr, RING_WAITS))}, not {env!r}"
        )
    return env == "epoll_wait"


def _make_reactor(options: _ReactorOptions) -> tuple[Any, str | None]:
    """A reactor proven usable (set up, a no-op entered and reaped), or None and the reason."""
    from fdkit import _fdkit, uring

    if "epoll_wait" not in options:
        options = {**options, "epoll_wait": _ring_wait_asked()}

    # The kernel floor is the core's (its static server checks the same).
    old_kernel = _fdkit.uring_kernel_check("the io_uring engine")
    if old_kernel is not None:
        return None, old_kernel
    ok, reason = uring.available()
    if not ok:
        return None, reason
    try:
        return _fdkit.Reactor(**options), None
    except OSError as exc:
        return None, f"io_uring reactor setup failed: {exc}"


def _uring_unavailable(reason: str | None) -> OSError:
    """The error of a loop asked for io_uring where it cannot run, with the reason."""
    return OSError(errno.ENOSYS, f"io_uring engine unavailable: {reason}")


def engine_unavailable(engine: str) -> str | None:
    """Why a loop on ``engine`` cannot run here, or None where it can.

    epoll always can; the io_uring engine (alias ``"uring"``) needs Linux 6.0 and an io_uring
    that this process may use (seccomp, ``kernel.io_uring_disabled``), proven by setting up a
    reactor and entering a no-op, as ``EventLoop(engine="io_uring")`` does. ``ValueError`` for a
    name that is no engine.
    """
    if engine_name(engine, none_ok=False) == "epoll":
        return None
    reactor, reason = _make_reactor(UringEventLoop._reactor_options)
    if reactor is None:
        return reason
    reactor.close()
    return None


def engine_available() -> Engine:
    """The engine ``EventLoop()`` runs on here: ``"epoll"``, or ``"io_uring"`` where
    ``FDKIT_AIO_ENGINE`` asks for it.

    ``FDKIT_AIO_ENGINE`` (``io_uring``, ``uring`` or ``epoll``) picks one; any other value is a
    ``ValueError``, and asking for io_uring where it cannot run an ``OSError``, as a new loop
    would raise. Whether the io_uring engine could run is :func:`engine_unavailable`'s answer.
    """
    requested, _ = _requested_engine(None)
    if requested != "io_uring":
        return "epoll"
    reason = engine_unavailable("io_uring")
    if reason is not None:
        raise _uring_unavailable(reason)
    return "io_uring"


_mixed: dict[tuple[type, type], type] = {}


class EventLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop; ``engine`` names what it runs on (``"epoll"`` or ``"io_uring"``).

    ``EventLoop(engine=None)`` returns an :class:`EpollEventLoop`, the default engine;
    ``engine="io_uring"`` (alias ``"uring"``) returns a :class:`UringEventLoop` (``OSError``
    where io_uring cannot run here), ``engine="epoll"`` an :class:`EpollEventLoop`.
    ``FDKIT_AIO_ENGINE`` does the same for ``engine=None``. A subclass of ``EventLoop`` gets the
    chosen engine too.
    """

    # The attributes the native iteration reads and sets live in slots (asyncio's code sets
    # and reads them as before: ``_scheduled`` is asyncio's heapq list), read by offset
    # instead of through the dict; ``_core`` is the loop's LoopCore.
    __slots__ = (
        "_core",
        "_debug",
        "_ready",
        "_scheduled",
        "_selector",
        "_stopping",
        "_timer_cancelled_count",
    )

    engine: ClassVar[Engine]
    #: Why the loop runs on epoll: the default, or who asked for it (None on io_uring).
    engine_reason: str | None = None
    _new_reactor: Any = None
    #: Until asyncio's __init__ runs: a loop refused before it is not "unclosed".
    _closed = True

    def __new__(cls, *args: Any, engine: str | None = None, **kwargs: Any) -> Self:
        # ``args`` and ``kwargs`` are for ``__init__`` (a subclass's own, or ``selector``).
        if issubclass(cls, (UringEventLoop, EpollEventLoop)):
            return super().__new__(cls)
        requested, asked_by = _requested_engine(engine)
        loop: Self
        if requested != "io_uring":
            loop = _with_engine(cls, EpollEventLoop)
            loop.engine_reason = DEFAULT_REASON if requested is None else asked_by
            return loop
        reactor, reason = _make_reactor(UringEventLoop._reactor_options)
        if reactor is None:
            raise _uring_unavailable(reason)
        loop = _with_engine(cls, UringEventLoop)
        loop._new_reactor = reactor
        return loop

    def _close_self_pipe(self) -> None:
        # A loop collected unclosed in a garbage cycle may find its self-pipe socket finalized
        # before it (fd -1): asyncio's own loop then prints "ValueError: Invalid file
        # descriptor: -1" from its finalizer. Closing the fd took it out of epoll already;
        # what is left is the other end.
        ssock = self._ssock  # type: ignore[has-type]
        if ssock is not None and ssock.fileno() == -1:
            self._ssock = None
            self._csock.close()  # type: ignore[has-type]
            self._csock = None
            self._internal_fds -= 1  # type: ignore[attr-defined]
            return
        super()._close_self_pipe()  # type: ignore[misc]

    def _make_socket_transport(
        self,
        sock: Any,
        protocol: Any,
        waiter: Any = None,
        *,
        extra: Any = None,
        server: Any = None,
        context: Any = None,
    ) -> Any:
        self._ensure_fd_no_transport(sock)  # type: ignore[attr-defined]
        if context is None:
            return SocketTransport(self, sock, protocol, waiter, extra, server)
        # From 3.15 the transport's callbacks run in the context asyncio passes (its __init__
        # takes it; before 3.15 asyncio passes none).
        return SocketTransport(self, sock, protocol, waiter, extra, server, context)

    def _make_ssl_transport(
        self,
        rawsock: Any,
        protocol: Any,
        sslcontext: Any,
        waiter: Any = None,
        *,
        server_side: bool = False,
        server_hostname: Any = None,
        extra: Any = None,
        server: Any = None,
        ssl_handshake_timeout: Any = constants.SSL_HANDSHAKE_TIMEOUT,
        ssl_shutdown_timeout: Any = constants.SSL_SHUTDOWN_TIMEOUT,
        context: Any = None,
    ) -> Any:
        # asyncio's own (selector_events), over fdkit's socket transport, the app transport
        # given the native write (fdkit.aio._tls). From 3.12 asyncio first checks the fd has
        # no transport; from 3.15 it passes the callbacks' context on.
        if _SSL_ENSURES_FD:
            self._ensure_fd_no_transport(rawsock)  # type: ignore[attr-defined]
        # fdkit's __init__ (asyncio's code, the receive buffer shared), or asyncio's __init__
        # as a program left it.
        ssl_protocol = _tls.SSLProtocol.__new__(_tls.SSLProtocol)
        init = (
            _tls.SSLProtocol.__init__
            if _tls.init_shares_buffer()
            else sslproto.SSLProtocol.__init__
        )
        init(
            ssl_protocol, self, protocol, sslcontext, waiter, server_side, server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
        )  # fmt: skip
        _tls.adopt(ssl_protocol._app_transport)
        if context is None:
            SocketTransport(self, rawsock, ssl_protocol, extra=extra, server=server)
        else:
            SocketTransport(self, rawsock, ssl_protocol, extra=extra, server=server,
                            context=context)  # fmt: skip
        return ssl_protocol._app_transport

    async def start_tls(self, transport: Any, protocol: Any, sslcontext: Any, **kwargs: Any) -> Any:
        """Upgrade an existing connection to TLS: asyncio's ``start_tls`` (same arguments,
        result and errors); the app transport it returns writes through the native path."""
        # asyncio's, its app transport given the native write: no program has seen it yet
        # (start_tls makes it, and calls no connection_made).
        return _tls.adopt(await super().start_tls(transport, protocol, sslcontext, **kwargs))

    def __setattr__(self, name: str, value: Any) -> None:
        # Setting one of the methods the core stands for (mock.patch.object, a test plugin)
        # makes asyncio's Python run for the calls it affects: the core hears of it here.
        _object_setattr(self, name, value)
        if name in _WATCHED:
            _native.changed(self)

    def __delattr__(self, name: str) -> None:
        _object_delattr(self, name)
        if name in _WATCHED:
            _native.changed(self)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} engine={self.engine} running={self.is_running()} "
            f"closed={self.is_closed()} debug={self.get_debug()}>"
        )


# Whether asyncio's _make_ssl_transport checks the fd first (3.12 on).
_SSL_ENSURES_FD = "_ensure_fd_no_transport" in (
    asyncio.selector_events.BaseSelectorEventLoop._make_ssl_transport.__code__.co_names  # type: ignore[attr-defined]
)
_object_setattr = object.__setattr__
_object_delattr = object.__delattr__
# asyncio's loop methods the core runs natively become method descriptors on EventLoop (see
# fdkit.aio._native); the names the core must hear of when set on a loop come back.
_WATCHED = frozenset(install_loop_methods(EventLoop))


def _with_engine(cls: type, engine_cls: type) -> Any:
    """A new instance of ``cls`` on ``engine_cls`` (a subclass mixing both for ``cls`` other
    than :class:`EventLoop` itself, made once)."""
    if cls is EventLoop:
        return object.__new__(engine_cls)
    mixed = _mixed.get((cls, engine_cls))
    if mixed is None:
        mixed = _mixed[(cls, engine_cls)] = type(cls.__name__, (cls, engine_cls), {})
        mixed.__module__ = cls.__module__
        mixed.__qualname__ = cls.__qualname__
    return object.__new__(mixed)


class EpollEventLoop(EventLoop):
    """asyncio's selector loop on epoll, its per-request path native: the default engine."""

    engine: ClassVar[Engine] = "epoll"

    def __init__(self, selector: Any = None, *, engine: str | None = None) -> None:
        # ``selector`` as asyncio's SelectorEventLoop takes it: an EpollSelector is waited on
        # natively; any other selector's own ``select`` runs (asyncio's _run_once then).
        if engine_name(engine) not in (None, "epoll"):
            raise ValueError(f"an EpollEventLoop runs on epoll, not {engine!r}")
        super().__init__(selectors.EpollSelector() if selector is None else selector)
        _native.install(self, EventLoop)
        if self.engine_reason is None:
            self.engine_reason = "EpollEventLoop was asked for"


class UringEventLoop(EventLoop):
    """asyncio's selector loop whose waits go through io_uring. Every registration lives in an
    epoll instance; the ring reads its events (``IORING_OP_EPOLL_WAIT``, Linux 6.15: one
    io_uring_enter(2) per wait, ``ring_wait == "epoll_wait"``), or, on older kernels or with
    ``FDKIT_AIO_RING_WAIT=poll``, waits for it to become readable while it has nothing ready
    (a one-shot ``IORING_OP_POLL_ADD`` on the epoll fd, ``ring_wait == "poll"``). Bytes and
    connections are taken with recv(2) and accept(2) when asyncio would take them, never
    earlier (see :mod:`fdkit.aio._selector`)."""

    engine: ClassVar[Engine] = "io_uring"
    #: Reactor settings (ring entries, epoll_wait): tests change them.
    _reactor_options: ClassVar[_ReactorOptions] = {}
    #: The loop's ``_fdkit.Reactor`` (None for a loop given its own selector).
    _reactor: Any

    def __init__(self, selector: Any = None, *, engine: str | None = None) -> None:
        # A ``selector`` given (as to asyncio's SelectorEventLoop) is what the loop waits with,
        # its own ``select`` called as asyncio calls it; the ring then has nothing to do.
        if engine_name(engine) not in (None, "io_uring"):
            raise ValueError(f"a UringEventLoop runs on io_uring, not {engine!r}")
        reactor = self.__dict__.pop("_new_reactor", None)
        if reactor is None:
            reactor, reason = _make_reactor(self._reactor_options)
            if reactor is None:
                raise _uring_unavailable(reason)
        if selector is not None:
            reactor.close()
            self._reactor = None
            super().__init__(selector)
            _native.install(self, EventLoop)
            return
        from fdkit.aio._selector import RingSelector

        self._reactor = reactor
        try:
            selector = RingSelector(reactor)
        except BaseException:
            reactor.close()
            raise
        super().__init__(selector)
        _native.install(self, EventLoop, reactor)

    @property
    def ring_wait(self) -> str | None:
        """How the ring waits: ``"epoll_wait"`` (it reads the epoll instance) or ``"poll"``;
        None for a loop given its own selector (which it waits with)."""
        if self._reactor is None:
            return None
        return "epoll_wait" if self._reactor.reads_epoll else "poll"
