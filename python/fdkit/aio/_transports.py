"""The socket transport of the io_uring engine: asyncio's own, reading through the ring.

It *is* asyncio's selector socket transport (CPython's tests check ``isinstance``, and every
corner of writing, flow control, ``write_eof``, closing and ``sendfile`` stays the stdlib's),
except where bytes come from: a multishot receive on the reactor's provided buffers instead
of readiness + recv(2). The loop routes this transport's ``_add_reader``/``_remove_reader``
(asyncio's resume/pause) to the reactor's ``resume``/``pause``, and hands it what the reactor
received: bytes straight to the protocol's ``data_received`` from within the reactor's
poll (``_ring_data`` for a BufferedProtocol), the rest through ``_ring_eof``/``_ring_error``.
"""

from __future__ import annotations

import os
from asyncio import protocols, selector_events
from typing import Any


class RingSocketTransport(selector_events._SelectorSocketTransport):  # type: ignore[name-defined,misc]
    """asyncio's socket transport, receiving through fdkit's reactor."""

    _stream: int | None = None

    def __init__(self, loop: Any, sock: Any, *args: Any, **kwargs: Any) -> None:
        self._buffered = False
        self._stream = loop._open_stream(sock.fileno(), self, self._ring_data)
        try:
            super().__init__(loop, sock, *args, **kwargs)
        except BaseException:
            self._close_stream()
            raise

    def set_protocol(self, protocol: Any) -> None:
        self._buffered = isinstance(protocol, protocols.BufferedProtocol)
        super().set_protocol(protocol)
        if self._stream is not None:
            # The reactor hands a plain protocol its bytes itself, with no Python frame of
            # ours in between; a buffered one goes through _ring_data's get_buffer loop.
            sink = self._ring_data if self._buffered else protocol.data_received
            self._loop._reactor.set_sink(self._stream, sink)

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._loop._close_stream(self._stream, self._sock_fd)
            self._stream = None

    def _call_connection_lost(self, exc: BaseException | None) -> None:
        # The receive is cancelled before the socket closes: the ring holds its own reference
        # to the file until then, so a later socket with the same number never sees it.
        self._close_stream()
        super()._call_connection_lost(exc)

    def _ring_data(self, data: bytes) -> None:
        if self._conn_lost:
            return
        if self._buffered:
            self._feed_buffered(data)
            return
        try:
            self._protocol.data_received(data)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.data_received() call failed.")

    def _feed_buffered(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                buf = self._protocol.get_buffer(-1)
                if not len(buf):
                    raise RuntimeError("get_buffer() returned an empty buffer")
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal error: protocol.get_buffer() call failed.")
                return
            target = memoryview(buf).cast("B")
            n = min(len(target), len(view))
            target[:n] = view[:n]
            try:
                self._protocol.buffer_updated(n)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal error: protocol.buffer_updated() call failed.")
                return
            view = view[n:]

    def _ring_eof(self) -> None:
        if self._conn_lost:
            return
        self._read_ready__on_eof()

    def _ring_sink_error(self, exc: BaseException) -> None:
        self._fatal_error(exc, "Fatal error: protocol.data_received() call failed.")

    def _ring_error(self, errno: int) -> None:
        if self._conn_lost:
            return
        exc = OSError(errno, os.strerror(errno))
        self._fatal_error(exc, "Fatal read error on socket transport")
