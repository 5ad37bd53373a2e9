"""The event loops: asyncio's Unix selector loop, on io_uring or on epoll.

``EventLoop(engine=None)`` picks the engine once, by class: :class:`UringEventLoop` where this
kernel lets us, else :class:`EpollEventLoop` (asyncio's own loop, with the reason kept in
``engine_reason`` and logged once per process on the ``fdkit.aio`` logger). No method asks
which engine it runs on.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import selectors
import socket
import struct
from asyncio import constants, events, trsock
from asyncio.log import logger
from typing import TYPE_CHECKING, Any, ClassVar, Self

from fdkit.aio._transports import RingSocketTransport

if TYPE_CHECKING:  # annotations only: a loop's import need not load fdkit.types
    from fdkit.types import EngineName as Engine

#: Every spelling of an engine that fdkit accepts, and the name it stands for.
ENGINE_NAMES: dict[str, Engine] = {"io_uring": "io_uring", "uring": "io_uring", "epoll": "epoll"}

#: The oldest kernel the io_uring engine runs on: multishot receive (6.0); provided-buffer
#: rings and multishot accept came in 5.19.
MIN_KERNEL = (6, 0)

_EVENT_READ, _EVENT_WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_SO_PEERNAME = getattr(socket, "SO_PEERNAME", 28)

_log = logging.getLogger("fdkit.aio")
_fallback_logged = False


def engine_name(value: str | None, what: str = "engine") -> Engine | None:
    """The engine ``value`` names (``"uring"`` is an alias of ``"io_uring"``); None for None.
    ``ValueError`` naming ``what`` for anything else."""
    if value is None:
        return None
    engine = ENGINE_NAMES.get(value) if isinstance(value, str) else None
    if engine is None:
        allowed = "'io_uring' (or 'uring'), 'epoll'" + (" or None" if what == "engine" else "")
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


def _kernel_version() -> tuple[int, int]:
    release = os.uname().release
    try:
        major, minor = release.split(".")[:2]
        return int(major), int("".join(c for c in minor if c.isdigit()) or 0)
    except ValueError:
        return (0, 0)


def _make_reactor(options: dict[str, int]) -> tuple[Any, str | None]:
    """A reactor proven usable (set up, registered, entered), or None and the reason."""
    from fdkit import uring
    from fdkit._fdkit import Reactor

    if _kernel_version() < MIN_KERNEL:
        return None, (
            f"the io_uring engine needs Linux {MIN_KERNEL[0]}.{MIN_KERNEL[1]} (multishot "
            f"receive); this kernel is {os.uname().release}"
        )
    ok, reason = uring.available()
    if not ok:
        return None, reason
    try:
        return Reactor(**options), None
    except OSError as exc:
        return None, f"io_uring reactor setup failed: {exc}"


def _log_fallback(reason: str | None) -> None:
    global _fallback_logged
    if not _fallback_logged:
        _fallback_logged = True
        _log.info("fdkit.aio runs on epoll: %s", reason)


def engine_available() -> Engine:
    """The engine a new loop would use here: ``"io_uring"`` or ``"epoll"``.

    ``FDKIT_AIO_ENGINE`` (``io_uring``, ``uring`` or ``epoll``) forces one; any other value is
    a ``ValueError``.
    """
    requested, _ = _requested_engine(None)
    if requested == "epoll":
        return "epoll"
    reactor, _ = _make_reactor(UringEventLoop._reactor_options)
    if reactor is None:
        return "epoll"
    reactor.close()
    return "io_uring"


_mixed: dict[tuple[type, type], type] = {}


class EventLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop; ``engine`` names what it runs on (``"io_uring"`` or ``"epoll"``).

    ``EventLoop(engine=None)`` returns a :class:`UringEventLoop` where io_uring can serve it,
    else an :class:`EpollEventLoop`; ``engine="io_uring"`` (alias ``"uring"``) requires io_uring
    (``OSError`` where it cannot run), ``engine="epoll"`` picks epoll. ``FDKIT_AIO_ENGINE`` does
    the same for ``engine=None``. A subclass of ``EventLoop`` gets the chosen engine too.
    """

    engine: ClassVar[Engine]
    #: Why the loop runs on epoll (None on io_uring).
    engine_reason: str | None = None
    _new_reactor: Any = None
    #: Until asyncio's __init__ runs: a loop refused before it is not "unclosed".
    _closed = True

    def __new__(cls, *, engine: str | None = None) -> Self:
        if issubclass(cls, (UringEventLoop, EpollEventLoop)):
            return super().__new__(cls)
        requested, asked_by = _requested_engine(engine)
        loop: Self
        if requested == "epoll":
            loop = _with_engine(cls, EpollEventLoop)
            loop.engine_reason = asked_by
            return loop
        reactor, reason = _make_reactor(UringEventLoop._reactor_options)
        if reactor is not None:
            loop = _with_engine(cls, UringEventLoop)
            loop._new_reactor = reactor
            return loop
        if requested == "io_uring":
            raise OSError(errno.ENOSYS, f"io_uring engine unavailable: {reason}")
        _log_fallback(reason)
        loop = _with_engine(cls, EpollEventLoop)
        loop.engine_reason = reason
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

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} engine={self.engine} running={self.is_running()} "
            f"closed={self.is_closed()} debug={self.get_debug()}>"
        )


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
    """asyncio's own selector loop on epoll: fdkit's loop where io_uring cannot serve."""

    engine: ClassVar[Engine] = "epoll"

    def __init__(self, *, engine: str | None = None) -> None:
        if engine_name(engine) not in (None, "epoll"):
            raise ValueError(f"an EpollEventLoop runs on epoll, not {engine!r}")
        super().__init__(selectors.EpollSelector())
        if self.engine_reason is None:
            self.engine_reason = "EpollEventLoop was asked for"


class UringEventLoop(EventLoop):
    """asyncio's selector loop whose streams receive and whose servers accept through the
    ring, one io_uring_enter(2) per iteration; readiness registrations stay in an epoll
    instance the ring watches (see :mod:`fdkit.aio._selector`)."""

    engine: ClassVar[Engine] = "io_uring"
    #: Reactor settings (ring entries, provided buffers and their size): tests shrink them.
    _reactor_options: ClassVar[dict[str, int]] = {}

    def __init__(self, *, engine: str | None = None) -> None:
        if engine_name(engine) not in (None, "io_uring"):
            raise ValueError(f"a UringEventLoop runs on io_uring, not {engine!r}")
        reactor = self.__dict__.pop("_new_reactor", None)
        if reactor is None:
            reactor, reason = _make_reactor(self._reactor_options)
            if reactor is None:
                raise OSError(errno.ENOSYS, f"io_uring engine unavailable: {reason}")
        from fdkit.aio._selector import RingSelector

        self._reactor = reactor
        try:
            selector = RingSelector(reactor)
        except BaseException:
            reactor.close()
            raise
        # Streams and listeners by fd (their reactor ids), for asyncio's _remove_reader.
        self._fd_streams: dict[int, int] = {}
        self._fd_listeners: dict[int, int] = {}
        self._multishot_accept = True
        super().__init__(selector)

    # -- streams ----------------------------------------------------------------------------

    def _make_socket_transport(
        self, sock: Any, protocol: Any, waiter: Any = None, *, extra: Any = None, server: Any = None
    ) -> Any:
        return RingSocketTransport(self, sock, protocol, waiter, extra, server)

    def _open_stream(self, fd: int) -> int:
        self._check_closed()  # type: ignore[attr-defined]
        sid: int = self._reactor.open_stream(fd)
        self._fd_streams[fd] = sid
        return sid

    def _resume_stream(
        self, sid: int, fd: int, callback: Any, args: tuple[Any, ...], context: Any = None
    ) -> Any:
        """asyncio's ``_add_reader`` for a stream: a Handle in the caller's context (or
        ``context``), run when the ring has brought something."""
        self._check_closed()  # type: ignore[attr-defined]
        handle = events.Handle(callback, args, self, context)
        old = self._selector.set_ring_reader(sid, fd, handle)  # type: ignore[attr-defined]
        if old is not None:
            old.cancel()
        self._reactor.resume(sid)
        return handle

    def _close_stream(self, sid: int, fd: int) -> None:
        if self._fd_streams.get(fd) == sid:
            del self._fd_streams[fd]
        if not self._reactor.closed:
            handle = self._selector.clear_ring_reader(sid)  # type: ignore[attr-defined]
            if handle is not None:
                handle.cancel()
            self._reactor.close_stream(sid)

    def _remove_reader(self, fd: Any) -> bool:
        if self.is_closed():
            return False
        removed = False
        if isinstance(fd, int):
            sid = self._fd_streams.get(fd)
            if sid is not None:
                # A paused stream is never reported: its key goes until resume sets a new one.
                handle = self._selector.clear_ring_reader(sid)  # type: ignore[attr-defined]
                self._reactor.pause(sid)
                if handle is not None:
                    handle.cancel()
                    removed = True
            lid = self._fd_listeners.pop(fd, None)
            if lid is not None:
                handle = self._selector.clear_ring_reader(lid)  # type: ignore[attr-defined]
                self._reactor.stop_listening(lid)
                if handle is not None:
                    handle.cancel()
                    removed = True
        return bool(super()._remove_reader(fd)) or removed  # type: ignore[misc]

    def _process_events(self, event_list: list[tuple[selectors.SelectorKey, int]]) -> None:
        # asyncio's own (CPython 3.11-3.13), with _add_callback inlined: one Python call less
        # per event, the same handles in the same order.
        ready = self._ready  # type: ignore[attr-defined]
        for key, mask in event_list:
            fileobj, (reader, writer) = key.fileobj, key.data
            if mask & _EVENT_READ and reader is not None:
                if reader._cancelled:
                    self._remove_reader(fileobj)
                else:
                    ready.append(reader)
            if mask & _EVENT_WRITE and writer is not None:
                if writer._cancelled:
                    self._remove_writer(fileobj)  # type: ignore[attr-defined]
                else:
                    ready.append(writer)

    # -- listeners --------------------------------------------------------------------------

    def _start_serving(
        self,
        protocol_factory: Any,
        sock: Any,
        sslcontext: Any = None,
        server: Any = None,
        backlog: int = 100,
        *rest: Any,
        **kwargs: Any,
    ) -> None:
        fd = sock.fileno()
        if not self._multishot_accept or kwargs or fd in self._fd_listeners:
            super()._start_serving(  # type: ignore[misc]
                protocol_factory, sock, sslcontext, server, backlog, *rest, **kwargs
            )
            return
        # One multishot accept instead of readiness + accept(2) per connection; the Handle
        # that takes the connections is made as asyncio's _add_reader makes its own.
        self._check_closed()  # type: ignore[attr-defined]
        lid: int = self._reactor.listen(fd)
        args = (lid, protocol_factory, sock, sslcontext, server, backlog, *rest)
        handle = events.Handle(self._ring_accept, args, self, None)
        self._selector.set_ring_reader(lid, fd, handle)  # type: ignore[attr-defined]
        self._fd_listeners[fd] = lid

    def _ring_accept(
        self,
        lid: int,
        protocol_factory: Any,
        sock: Any,
        sslcontext: Any = None,
        server: Any = None,
        backlog: int = 100,
        *rest: Any,
    ) -> None:
        # asyncio's _accept_connection, with accept(2) replaced by taking what the ring
        # accepted: at most ``backlog`` connections per run, each served by its own task.
        for _ in range(backlog):
            try:
                fd = self._reactor.accept(lid)
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    self._remove_reader(sock.fileno())
                    self.call_exception_handler(
                        {
                            "message": "socket.accept() out of system resource",
                            "exception": exc,
                            "socket": trsock.TransportSocket(sock),
                        }
                    )
                    self.call_later(
                        constants.ACCEPT_RETRY_DELAY,
                        self._start_serving,
                        protocol_factory,
                        sock,
                        sslcontext,
                        server,
                        backlog,
                        *rest,
                    )
                    return
                if exc.errno == errno.EINVAL:
                    # No multishot accept here (or not listening): asyncio's readiness path,
                    # which meets the same kernel and answers as asyncio does.
                    self._remove_reader(sock.fileno())
                    self._multishot_accept = False
                    self._start_serving(protocol_factory, sock, sslcontext, server, backlog, *rest)
                    return
                # The loop logs it, as asyncio's does. After one connection's error (EPROTO,
                # EPERM, ...) the reactor goes on accepting; after one that would come back on
                # every retry it has stopped, and the reader is never reported again.
                raise
            if fd is None:
                return
            conn, addr = _accepted_socket(sock, fd)
            if self._debug:  # type: ignore[attr-defined]
                logger.debug("%r got a new connection from %r: %r", server, addr, conn)
            accept = self._accept_connection2(  # type: ignore[attr-defined]
                protocol_factory, conn, {"peername": addr}, sslcontext, server, *rest
            )
            self.create_task(accept)

    def close(self) -> None:
        super().close()
        self._fd_streams.clear()
        self._fd_listeners.clear()


def _accepted_socket(listener: socket.socket, fd: int) -> tuple[socket.socket, Any]:
    """The connection the ring accepted on ``listener``, non-blocking, and its peer's address
    as accept(2) would have given it. A connection reset before it was taken still has one:
    getpeername(2) refuses a closed TCP socket, ``SO_PEERNAME`` does not."""
    conn = socket.socket(listener.family, listener.type, listener.proto, fileno=fd)
    conn.setblocking(False)
    try:
        return conn, conn.getpeername()
    except OSError:
        pass
    return conn, _peer_address(conn)


#: The size of the sockaddr SO_PEERNAME fills, by family: the kernel refuses (EINVAL) a
#: buffer larger than the address it has. See socket(7).
_SOCKADDR_SIZE = {socket.AF_INET: 16, socket.AF_INET6: 28}


def _peer_address(conn: socket.socket) -> Any:
    size = _SOCKADDR_SIZE.get(conn.family)
    if size is None:
        return "" if conn.family == socket.AF_UNIX else None
    try:
        raw = conn.getsockopt(socket.SOL_SOCKET, _SO_PEERNAME, size)
    except OSError:
        return None
    if conn.family == socket.AF_INET:
        port = struct.unpack_from("!H", raw, 2)[0]
        return (socket.inet_ntop(socket.AF_INET, raw[4:8]), port)
    port, flowinfo = struct.unpack_from("!HI", raw, 2)
    scope_id = struct.unpack_from("=I", raw, 24)[0]
    return (socket.inet_ntop(socket.AF_INET6, raw[8:24]), port, flowinfo, scope_id)
