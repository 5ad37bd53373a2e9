"""The EventLoop class: asyncio's Unix selector loop with fdkit's engine underneath."""

from __future__ import annotations

import asyncio
import errno
import os
import selectors
import socket
from asyncio import constants, selector_events, trsock
from asyncio.log import logger
from typing import Any, ClassVar, Literal

from fdkit.aio._transports import RingSocketTransport

Engine = Literal["io_uring", "epoll"]

EOF, ERROR, ACCEPTED, ACCEPT_ERROR, SINK_ERROR = 2, 3, 4, 5, 6
_ACCEPT_CONNECTION = selector_events.BaseSelectorEventLoop._accept_connection  # type: ignore[attr-defined]
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)

_engine_reason: str | None = None


def _make_reactor(engine: Engine | None = None, options: dict[str, int] | None = None) -> Any:
    """A reactor, or None (and the reason kept) where io_uring cannot serve the loop."""
    global _engine_reason
    if engine == "epoll":
        return None
    if engine is None and os.environ.get("FDKIT_AIO_ENGINE") == "epoll":
        _engine_reason = "FDKIT_AIO_ENGINE=epoll"
        return None
    from fdkit import uring
    from fdkit._fdkit import Reactor

    ok, reason = uring.available()
    if not ok:
        _engine_reason = reason
        return None
    if not uring.probe()["ops"].get("recv"):
        _engine_reason = "this kernel's io_uring has no recv"
        return None
    try:
        return Reactor(**(options or {}))
    except OSError as exc:  # provided-buffer rings need Linux 5.19, multishot recv 6.0
        _engine_reason = f"io_uring reactor setup failed: {exc}"
        return None


def engine_available() -> Engine:
    """The engine a new loop would use here: ``"io_uring"`` or ``"epoll"``.

    ``FDKIT_AIO_ENGINE=epoll`` forces epoll (to compare, or where io_uring misbehaves).
    """
    r = _make_reactor()
    if r is None:
        return "epoll"
    r.close()
    return "io_uring"


class EventLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop; ``engine`` names what it runs on (``"io_uring"`` or ``"epoll"``)."""

    engine: Engine
    #: Reactor settings (ring entries, provided buffers and their size): tests shrink them.
    _reactor_options: ClassVar[dict[str, int]] = {}

    def __init__(self, *, engine: Engine | None = None) -> None:
        """``engine``: ``"io_uring"`` requires it (OSError where it cannot run), ``"epoll"``
        picks epoll, None (the default) takes io_uring where this kernel lets us."""
        self._closed = True  # until asyncio's __init__ runs: a refused loop is not "unclosed"
        if engine not in (None, "io_uring", "epoll"):
            raise ValueError(f"engine must be 'io_uring', 'epoll' or None, not {engine!r}")
        self._reactor = _make_reactor(engine, self._reactor_options)
        if engine == "io_uring" and self._reactor is None:
            raise OSError(errno.ENOSYS, f"io_uring engine unavailable: {_engine_reason}")
        self._streams: dict[int, RingSocketTransport] = {}
        self._fd_streams: dict[int, int] = {}
        # Listeners: id -> the arguments asyncio gave _accept_connection; fd -> id.
        self._listeners: dict[int, tuple[Any, ...]] = {}
        self._fd_listeners: dict[int, int] = {}
        self._multishot_accept = True
        # Transports holding small writes for the end of this iteration.
        self._corked: list[RingSocketTransport] = []
        #: Why the loop runs on epoll (None on io_uring).
        self.engine_reason: str | None = None
        if self._reactor is None:
            self.engine = "epoll"
            self.engine_reason = "engine='epoll' was asked for" if engine else _engine_reason
            super().__init__(selectors.EpollSelector())
        else:
            from fdkit.aio._selector import RingSelector

            self.engine = "io_uring"
            super().__init__(RingSelector(self._reactor))

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} engine={self.engine} running={self.is_running()} "
            f"closed={self.is_closed()} debug={self.get_debug()}>"
        )

    # -- streams (io_uring engine) ----------------------------------------------------------

    def _make_socket_transport(
        self, sock: Any, protocol: Any, waiter: Any = None, *, extra: Any = None, server: Any = None
    ) -> Any:
        if self._reactor is None:
            return super()._make_socket_transport(  # type: ignore[misc]
                sock, protocol, waiter, extra=extra, server=server
            )
        return RingSocketTransport(self, sock, protocol, waiter, extra, server)

    def _open_stream(self, fd: int, transport: RingSocketTransport, sink: Any) -> int:
        self._check_closed()  # type: ignore[attr-defined]
        sid: int = self._reactor.open_stream(fd, sink)
        self._streams[sid] = transport
        self._fd_streams[fd] = sid
        return sid

    def _close_stream(self, sid: int, fd: int) -> None:
        self._streams.pop(sid, None)
        if self._fd_streams.get(fd) == sid:
            del self._fd_streams[fd]
        if self._reactor is not None and not self._reactor.closed:
            self._reactor.close_stream(sid)

    def _add_reader(self, fd: Any, callback: Any, *args: Any) -> Any:
        transport = getattr(callback, "__self__", None)
        if (
            isinstance(transport, RingSocketTransport)
            and transport._stream is not None
            and not args
            and getattr(callback, "__func__", None) is RingSocketTransport._read_ready
        ):
            self._check_closed()  # type: ignore[attr-defined]
            self._reactor.resume(transport._stream)
            return None
        if (
            self._reactor is not None
            and self._multishot_accept
            and transport is self
            and getattr(callback, "__func__", None) is _ACCEPT_CONNECTION
            and len(args) >= 5
            and isinstance(fd, int)
            and fd not in self._fd_listeners
        ):
            # A server's listening socket: one multishot accept instead of readiness +
            # accept(2) per connection; what follows the accept is asyncio's own.
            self._check_closed()
            lid: int = self._reactor.listen(fd)
            self._listeners[lid] = args
            self._fd_listeners[fd] = lid
            return None
        return super()._add_reader(fd, callback, *args)  # type: ignore[misc]

    def _remove_reader(self, fd: Any) -> bool:
        lid = self._fd_listeners.pop(fd, None)
        if lid is not None:
            self._listeners.pop(lid, None)
            if self._reactor is not None and not self._reactor.closed:
                self._reactor.stop_listening(lid)
            super()._remove_reader(fd)  # type: ignore[misc]
            return True
        sid = self._fd_streams.get(fd)
        if sid is not None and self._reactor is not None and not self._reactor.closed:
            self._reactor.pause(sid)
        return bool(super()._remove_reader(fd))  # type: ignore[misc]

    def _process_events(self, event_list: list[tuple[selectors.SelectorKey, int]]) -> None:
        if self._reactor is not None:
            selector: Any = self._selector  # type: ignore[attr-defined]
            pending = selector.stream_events
            if pending:
                selector.stream_events = []
                streams = self._streams
                for kind, sid, value in pending:
                    if kind in (ACCEPTED, ACCEPT_ERROR):
                        self._listener_event(kind, sid, value)
                        continue
                    transport = streams.get(sid)
                    if transport is None:
                        continue
                    if kind == EOF:
                        transport._ring_eof()
                    elif kind == ERROR:
                        transport._ring_error(value)
                    elif kind == SINK_ERROR:
                        transport._ring_sink_error(value)
            if self._corked:
                # Replies written by data_received go out now, not after this iteration's
                # callbacks: what those write is sent at the end of the iteration.
                self._uncork_all()
        super()._process_events(event_list)  # type: ignore[misc]

    def _run_once(self) -> None:
        super()._run_once()  # type: ignore[misc]
        if self._corked:
            self._uncork_all()

    def _uncork_all(self) -> None:
        corked, self._corked = self._corked, []
        for transport in corked:
            transport._uncork()

    def _listener_event(self, kind: int, lid: int, value: int) -> None:
        args = self._listeners.get(lid)
        if kind == ACCEPTED:
            if args is None:
                os.close(value)
            else:
                self._accepted(args, value)
            return
        if args is None:
            return
        del self._listeners[lid]
        sock = args[1]
        if self._fd_listeners.get(sock.fileno()) == lid:
            del self._fd_listeners[sock.fileno()]
        if value in _OUT_OF_RESOURCES:
            # asyncio's own answer: say so, stop accepting, try again a moment later.
            exc = OSError(value, os.strerror(value))
            self.call_exception_handler(
                {
                    "message": "socket.accept() out of system resource",
                    "exception": exc,
                    "socket": trsock.TransportSocket(sock),
                }
            )
            self.call_later(constants.ACCEPT_RETRY_DELAY, self._start_serving, *args)  # type: ignore[attr-defined]
        else:
            # No multishot accept here (EINVAL on old kernels): asyncio's readiness path.
            self._multishot_accept = False
            super()._add_reader(sock.fileno(), self._accept_connection, *args)  # type: ignore[misc,attr-defined]

    def _accepted(self, args: tuple[Any, ...], fd: int) -> None:
        protocol_factory, sock, sslcontext, server = args[:4]
        try:
            conn = socket.socket(sock.family, sock.type, sock.proto, fileno=fd)
        except OSError:
            os.close(fd)
            return
        try:
            conn.setblocking(False)
            addr = conn.getpeername()
        except OSError:  # gone before we looked: asyncio's accept(2) would not have seen it
            conn.close()
            return
        if self._debug:  # type: ignore[attr-defined]
            logger.debug("%r got a new connection from %r: %r", server, addr, conn)
        accept = self._accept_connection2(  # type: ignore[attr-defined]
            protocol_factory, conn, {"peername": addr}, sslcontext, server, *args[5:]
        )
        self.create_task(accept)

    def close(self) -> None:
        super().close()
        self._listeners.clear()
        self._fd_listeners.clear()
        self._streams.clear()
        self._fd_streams.clear()
