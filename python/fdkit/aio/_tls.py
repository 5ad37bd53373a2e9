"""TLS on fdkit's loops: asyncio's SSL protocol and app transport, their per-record path native.

A TLS connection on an fdkit loop is asyncio's: ``asyncio.sslproto.SSLProtocol`` over fdkit's
socket transport, the program's protocol given asyncio's app transport. What asyncio runs in
Python for every record, fdkit's core runs on those same objects, calling the ``ssl.SSLObject``
and its two ``ssl.MemoryBIO`` through their C methods:

- reading (``SSLProtocol.buffer_updated`` while the connection is up): recv(2) into the
  incoming BIO, ``read`` the records into the app protocol's ``data_received``, then the
  protocol's outgoing bytes to the socket and its flow control, as ``_do_read`` does;
- writing (``transport.write(data)`` of ``bytes`` while nothing waits in the backlog): the
  ``SSLObject``'s ``write``, the outgoing BIO to the socket, flow control, as
  ``_write_appdata`` does.

The native path reads and sets the attributes asyncio's methods read and set, and stands for
asyncio's own methods only: :func:`native_ok` holds while each method it replaces resolves on
its class to a function whose source is one this file knows (CPython 3.11 to 3.13's, and any
later version whose source is the same). A class patched, a subclass of ``SSLProtocol`` or of
``SSLObject`` (``SSLContext.sslobject_class``), an app protocol that reads into its own buffer,
a connection in its handshake or its shutdown: asyncio's Python runs, as on asyncio's loop.

The app transport's class is a subclass of asyncio's ``_SSLProtocolTransport`` adding only the
native ``write``; it carries asyncio's module and name, so its repr is asyncio's (as fdkit's
socket transport carries ``_SelectorSocketTransport``'s).
"""

from __future__ import annotations

import _ssl
import hashlib
import inspect
import ssl
import textwrap
from asyncio import selector_events, sslproto
from types import FrameType, TracebackType
from typing import Any

from fdkit._fdkit import install_tls
from fdkit.aio._native import _handled


class _SSLProtocolTransport(sslproto._SSLProtocolTransport):
    # No slots, no attributes: asyncio's app transport with a native ``write``, so that an
    # instance asyncio made can be given this class.
    __slots__ = ()


_SSLProtocolTransport.__module__ = sslproto.__name__


class SSLProtocol(sslproto.SSLProtocol):
    """asyncio's SSL protocol, the attributes its per-record methods read kept in slots (its
    code sets and reads them as before), which the core reads by offset instead of through the
    instance's dict. fdkit's loops make connections with it; ``start_tls`` makes asyncio's."""

    __slots__ = (
        "_app_protocol",
        "_app_protocol_is_buffer",
        "_app_reading_paused",
        "_app_transport",
        "_app_writing_paused",
        "_incoming",
        "_incoming_high_water",
        "_incoming_low_water",
        "_outgoing",
        "_outgoing_high_water",
        "_outgoing_low_water",
        "_ssl_buffer",
        "_ssl_reading_paused",
        "_ssl_writing_paused",
        "_sslobj",
        "_state",
        "_transport",
        "_write_backlog",
        "_write_buffer_size",
    )


SSLProtocol.__module__ = sslproto.__name__

# The methods the native path stands for, with the SHA-256 (first 16 hex digits) of the source
# of the version it follows: the same in CPython 3.11, 3.12 and 3.13.
_KNOWN: dict[tuple[type, str], str] = {
    (sslproto.SSLProtocol, "get_buffer"): "25cc435d7aeb2b8b",
    (sslproto.SSLProtocol, "buffer_updated"): "24ff23a9a0895527",
    (sslproto.SSLProtocol, "_do_read"): "3538792f7c148ebe",
    (sslproto.SSLProtocol, "_do_read__copied"): "3556e3bcea409747",
    (sslproto.SSLProtocol, "_process_outgoing"): "8dc33aa4f061661e",
    (sslproto.SSLProtocol, "_control_app_writing"): "e08f2f112c094534",
    (sslproto.SSLProtocol, "_get_write_buffer_size"): "c9e7a0c6f71155d4",
    (sslproto.SSLProtocol, "_control_ssl_reading"): "ca011bd080585c73",
    (sslproto.SSLProtocol, "_get_read_buffer_size"): "81969bcc88835c47",
    (sslproto.SSLProtocol, "_write_appdata"): "b9b33f8922959a65",
    (sslproto.SSLProtocol, "_do_write"): "4930db09442e439b",
    (sslproto._SSLProtocolTransport, "write"): "e0168874c3902b23",
    (ssl.SSLObject, "read"): "cd1affd00594ba6b",
    (ssl.SSLObject, "write"): "a38fb83b54df5d29",
    (ssl.SSLObject, "pending"): "d3a3f90383cf0323",
    (selector_events._SelectorSocketTransport, "_read_ready__get_buffer"): "84f63ac03c5a6a2d",  # type: ignore[attr-defined]
}

# Each function looked at, and whether its source is the one expected (the function is kept,
# so its id is not reused).
_seen: dict[int, tuple[Any, bool]] = {}


def _fingerprint(func: Any) -> str | None:
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return None
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def _is_known(func: Any, digest: str) -> bool:
    seen = _seen.get(id(func))
    if seen is None or seen[0] is not func:
        seen = _seen[id(func)] = (func, _fingerprint(func) == digest)
    return seen[1]


def native_ok() -> bool:
    """Whether each method the native path stands for is, as its class resolves it, asyncio's
    (or ssl's) function of a source this file follows. The core asks again whenever one of the
    classes changed (CPython retags a class when it or a base changes)."""
    for (cls, name), digest in _KNOWN.items():
        if cls is sslproto._SSLProtocolTransport:
            func = _behind_write()  # what the native write stands for
        else:
            func = getattr(cls, name, None)
        if func is None or not _is_known(func, digest):
            return False
    return True


def _behind_write() -> Any:
    """The ``write`` the classes after fdkit's app transport in its MRO define."""
    for klass in _SSLProtocolTransport.__mro__[1:]:
        if "write" in klass.__dict__:
            return klass.__dict__["write"]
    return None


def adopt(app_transport: Any) -> Any:
    """Gives asyncio's app transport ``app_transport`` fdkit's class (its native ``write``),
    unless its SSL context has a message callback (``_msg_callback``, which OpenSSL calls for
    every record: the record path then leaves the connection to ``_ssl``'s methods and
    asyncio's Python); an object of any other class is left alone. Returns it."""
    if type(app_transport) is sslproto._SSLProtocolTransport:
        context = getattr(app_transport._ssl_protocol, "_sslcontext", None)
        if getattr(context, "_msg_callback", None) is None:
            app_transport.__class__ = _SSLProtocolTransport
    return app_transport


# --- errors, as asyncio's methods meet them ---------------------------------------------------


Entry = tuple[FrameType, int, int]
# asyncio's SSL protocol class, whose private methods typeshed does not declare.
_SSLProtocol: Any = sslproto.SSLProtocol


def _read_entries() -> dict[str, list[Entry]]:
    """The traceback entries asyncio's ``_do_read`` gives an exception caught in it: raised by
    the app protocol's ``data_received`` (key ``"protocol"``) or by the ``SSLObject``'s
    ``read`` (key ``"read"``), in ``_do_read__copied``; caught as ``fdkit.aio._native`` catches
    the socket transport's."""
    got: dict[str, list[Entry]] = {}
    for where in ("protocol", "read"):

        class _SSLObject:
            calls = 0

            def read(self, n: int, fail: bool = where == "read") -> bytes:
                self.calls += 1
                if fail:
                    raise ssl.SSLError
                if self.calls > 1:
                    raise ssl.SSLWantReadError
                return b"x"

        class _App:
            def data_received(self, data: bytes) -> None:
                raise LookupError

        class _Proto:
            _state = sslproto.SSLProtocolState.WRAPPED
            _app_reading_paused = False
            _app_protocol_is_buffer = False
            max_size = 1
            _sslobj = _SSLObject()
            _app_protocol = _App()
            tb: TracebackType | None = None
            _do_read__copied = _SSLProtocol._do_read__copied

            def _fatal_error(self, exc: BaseException, message: str) -> None:
                self.tb = exc.__traceback__

        p = _Proto()
        _SSLProtocol._do_read(p)
        entries: list[Entry] = []
        tb = p.tb
        codes = (_SSLProtocol._do_read.__code__, _SSLProtocol._do_read__copied.__code__)
        for code in codes:
            if tb is None or tb.tb_frame.f_code is not code:
                break
            tb.tb_frame.clear()
            entries.append((tb.tb_frame, tb.tb_lasti, tb.tb_lineno))
            tb = tb.tb_next
        if len(entries) == len(codes):
            got[where] = entries
    return got


_READ_ENTRIES = _read_entries()


def _with_entries(exc: BaseException, entries: list[Entry]) -> None:
    tb = exc.__traceback__
    for frame, lasti, lineno in reversed(entries):
        tb = TracebackType(tb, frame, lasti, lineno)
    exc.__traceback__ = tb


def read_failed(protocol: Any, exc: BaseException, where: str) -> None:
    """asyncio's ``_do_read`` on ``exc`` (an ``Exception``), raised by the app protocol
    (``where == "protocol"``), by the ``SSLObject`` (``"read"``) or after them (``""``): the
    SSL protocol's ``_fatal_error``, the traceback starting where asyncio's starts."""
    entries = _READ_ENTRIES.get(where)
    if entries is not None:
        _with_entries(exc, entries)
    _handled(exc, protocol._fatal_error, exc, "Fatal error on SSL protocol")


def write_failed(protocol: Any, exc: BaseException) -> None:
    """asyncio's ``_write_appdata`` on ``exc`` (an ``Exception``): the SSL protocol's
    ``_fatal_error``."""
    _handled(exc, protocol._fatal_error, exc, "Fatal error on SSL protocol")


def buffer_failed(transport: Any, exc: BaseException) -> None:
    """asyncio's ``_read_ready__get_buffer`` on ``exc`` from ``buffer_updated``: the socket
    transport's ``_fatal_error``."""
    _handled(exc, transport._fatal_error, exc,
             "Fatal error: protocol.buffer_updated() call failed.")  # fmt: skip


def recv_failed(transport: Any, exc: BaseException) -> None:
    """asyncio's ``_read_ready__get_buffer`` on ``exc`` from ``recv_into``."""
    _handled(exc, transport._fatal_error, exc, "Fatal read error on socket transport")


def _probe() -> tuple[str, ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO, ssl.MemoryBIO] | None:
    """What the core proves OpenSSL's direct calls on (``_fdkit.install_tls``): ``_ssl``'s
    shared object, a client ``SSLObject`` over two new ``MemoryBIO``s, and a ``MemoryBIO`` whose
    EOF was written. None where ``_ssl`` is not a shared object of its own."""
    path = getattr(_ssl, "__file__", None)
    if not isinstance(path, str):
        return None
    incoming, outgoing, eof = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    eof.write_eof()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    sslobject = context.wrap_bio(incoming, outgoing, server_hostname="probe.invalid")
    return path, sslobject, incoming, outgoing, eof


#: Whether the record path calls OpenSSL directly (else ``_ssl``'s methods).
DIRECT = install_tls(
    _SSLProtocolTransport,
    SSLProtocol,
    native_ok,
    selector_events._SelectorSocketTransport._read_ready__get_buffer,  # type: ignore[attr-defined]
    _probe(),
)
