"""The socket transport of fdkit's loops: asyncio's own, with its hot paths native.

It *is* asyncio's selector socket transport (CPython's tests check ``isinstance``; writing,
flow control, ``write_eof``, closing and ``sendfile`` are the stdlib's code), with two paths run
by ``fdkit._fdkit`` where asyncio runs Python:

- reading: when the loop runs the reader Handle asyncio registered (``_read_ready``) for a
  plain ``socket.socket`` and a protocol without ``get_buffer``, recv(2) and
  ``protocol.data_received`` are called from the loop's core, in the Handle's context, with
  asyncio's error handling (``_fatal_error``, ``_read_ready__on_eof``);
- writing: ``write(data)`` of ``bytes`` while nothing is buffered is one send(2); what the
  kernel does not take is buffered by :meth:`SocketTransport._write_rest` exactly as asyncio's
  ``write`` buffers it; any other call is asyncio's ``write``.

In debug mode, with a patched ``Handle._run``, or for a socket subclass, asyncio's own Python
methods run instead, so what they observe is what they observe on asyncio's loop.
"""

from __future__ import annotations

import sys
from asyncio import selector_events
from typing import Any

from fdkit._fdkit import install_write

_BYTEARRAY_BUFFER = sys.version_info < (3, 12)  # 3.11 buffers in a bytearray, later a deque
# What asyncio's write() does once send(2) fell short, which differs by version; probed on the
# class rather than assumed from the version. 3.15's transport registers its writer through its
# own ``_add_writer`` (in the transport's context) and keeps ``_buffer_size``, the byte count of
# ``_buffer``, in step with every change to it.
_OWN_ADD_WRITER = hasattr(selector_events._SelectorTransport, "_add_writer")  # type: ignore[attr-defined]
_BUFFER_SIZE = "_buffer_size" in selector_events._SelectorTransport.__init__.__code__.co_names  # type: ignore[attr-defined]


class SocketTransport(selector_events._SelectorSocketTransport):  # type: ignore[name-defined,misc]
    """asyncio's socket transport, reading and writing through fdkit's core."""

    # The attributes the native paths read live in slots (asyncio's code sets and reads them
    # as before), read by offset instead of through the dict.
    __slots__ = (
        "_buffer",
        "_conn_lost",
        "_empty_waiter",
        "_eof",
        "_protocol",
        "_read_ready_cb",
        "_sock",
    )

    def _write_rest(self, data: bytes, n: int) -> None:
        # The rest of asyncio's write() once send(2) took ``n`` of ``len(data)`` bytes (0 on
        # EAGAIN): register the writer, buffer the rest, maybe pause the protocol.
        if _BYTEARRAY_BUFFER:
            if n:
                data = data[n:]
            self._loop._add_writer(self._sock_fd, self._write_ready)
            self._buffer.extend(data)
        else:
            rest: Any = memoryview(data)[n:] if n else data
            if _OWN_ADD_WRITER:
                self._add_writer(self._sock_fd, self._write_ready)
            else:
                self._loop._add_writer(self._sock_fd, self._write_ready)
            self._buffer.append(rest)
            if _BUFFER_SIZE:
                self._buffer_size += len(rest)
        self._maybe_pause_protocol()


# asyncio's name and module, so that its repr, and every message naming the transport's class,
# reads as on asyncio's loop.
SocketTransport.__name__ = SocketTransport.__qualname__ = "_SelectorSocketTransport"
SocketTransport.__module__ = selector_events.__name__
install_write(SocketTransport)
