"""The socket transport of the io_uring engine: asyncio's own, reading through the ring.

It *is* asyncio's selector socket transport (CPython's tests check ``isinstance``, and every
corner of writing, flow control, ``write_eof``, closing and ``sendfile`` stays the stdlib's),
except where bytes come from: its reader Handle runs when the ring's multishot receive has
brought something, and takes it from the reactor where asyncio's calls ``recv(2)``. Everything
else about reading, from the Handle's context to what a protocol's exception does, is asyncio's
own code path.
"""

from __future__ import annotations

from asyncio import selector_events
from typing import Any


class RingSocketTransport(selector_events._SelectorSocketTransport):  # type: ignore[name-defined,misc]
    """asyncio's socket transport, receiving through fdkit's reactor."""

    _stream: int | None = None
    _read_handle: Any = None

    def __init__(self, loop: Any, sock: Any, *args: Any, **kwargs: Any) -> None:
        self._ring_recv = loop._reactor.recv
        self._stream = loop._open_stream(sock.fileno())
        try:
            super().__init__(loop, sock, *args, **kwargs)
        except BaseException:
            self._close_stream()
            raise

    def _add_reader(self, fd: int, callback: Any, *args: Any) -> None:
        # asyncio's resume (and first start) of reading: the ring's receive, not epoll. The
        # Handle calls the read path set_protocol chose (what asyncio's _read_ready would call
        # each time; set_protocol remakes the Handle, in the same context, when it changes).
        if not self.is_reading() or self._stream is None:
            return
        if callback == self._read_ready and not args:
            callback = self._read_ready_cb
        self._read_handle = self._loop._resume_stream(self._stream, fd, callback, args)

    def set_protocol(self, protocol: Any) -> None:
        super().set_protocol(protocol)
        handle = self._read_handle
        if (
            handle is not None
            and not handle.cancelled()
            and self._stream is not None
            and handle._callback != self._read_ready_cb
        ):
            self._read_handle = self._loop._resume_stream(
                self._stream, self._sock_fd, self._read_ready_cb, (), handle._context
            )

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._loop._close_stream(self._stream, self._sock_fd)
            self._stream = None

    def _call_connection_lost(self, exc: BaseException | None) -> None:
        # The receive is cancelled before the socket closes: the ring holds its own reference
        # to the file until then, so the peer would not see the close.
        self._close_stream()
        super()._call_connection_lost(exc)

    # asyncio's two read paths (CPython 3.11-3.13, unchanged since), with recv(2) and
    # recv_into(2) replaced by taking what the ring received (``_stream`` is None only
    # after connection_lost, when ``_conn_lost`` is set: the reactor then answers None).

    def _read_ready__get_buffer(self) -> None:
        if self._conn_lost:
            return
        try:
            buf = self._protocol.get_buffer(-1)
            if not len(buf):
                raise RuntimeError("get_buffer() returned an empty buffer")
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.get_buffer() call failed.")
            return
        try:
            view = memoryview(buf).cast("B")
            data = self._ring_recv(self._stream or 0, len(view))
            if data is None:
                return
            nbytes = len(data)
            view[:nbytes] = data
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal read error on socket transport")
            return
        if not nbytes:
            self._read_ready__on_eof()
            return
        try:
            self._protocol.buffer_updated(nbytes)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.buffer_updated() call failed.")

    def _read_ready__data_received(self) -> None:
        if self._conn_lost:
            return
        try:
            data = self._ring_recv(self._stream or 0, self.max_size)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal read error on socket transport")
            return
        if data is None:
            return
        if not data:
            self._read_ready__on_eof()
            return
        try:
            self._protocol.data_received(data)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.data_received() call failed.")
