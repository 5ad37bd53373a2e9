"""The EventLoop class: asyncio's Unix selector loop with fdkit's engine underneath."""

from __future__ import annotations

import asyncio
import os
import selectors
from typing import Any, Literal

from fdkit.aio._transports import RingSocketTransport

Engine = Literal["io_uring", "epoll"]

DATA, EOF, ERROR = 1, 2, 3

_engine_reason: str | None = None


def _make_reactor() -> Any:
    """A reactor, or None (and the reason kept) where io_uring cannot serve the loop."""
    global _engine_reason
    if os.environ.get("FDKIT_AIO_ENGINE") == "epoll":
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
        return Reactor()
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

    def __init__(self) -> None:
        self._reactor = _make_reactor()
        self._streams: dict[int, RingSocketTransport] = {}
        self._fd_streams: dict[int, int] = {}
        if self._reactor is None:
            self.engine = "epoll"
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

    def _open_stream(self, fd: int, transport: RingSocketTransport) -> int:
        self._check_closed()  # type: ignore[attr-defined]
        sid: int = self._reactor.open_stream(fd)
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
        return super()._add_reader(fd, callback, *args)  # type: ignore[misc]

    def _remove_reader(self, fd: Any) -> bool:
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
                    transport = streams.get(sid)
                    if transport is None:
                        continue
                    if kind == DATA:
                        transport._ring_data(value)
                    elif kind == EOF:
                        transport._ring_eof()
                    else:
                        transport._ring_error(value)
        super()._process_events(event_list)  # type: ignore[misc]

    def close(self) -> None:
        super().close()
        self._streams.clear()
        self._fd_streams.clear()
