"""TLS on fdkit's loops: asyncio's SSL protocol and app transport, their per-record path native.

A TLS connection on an fdkit loop is asyncio's: ``asyncio.sslproto.SSLProtocol`` over fdkit's
socket transport, the program's protocol given asyncio's app transport. What asyncio runs in
Python for every record, fdkit's core runs on those same objects, driving the ``ssl.SSLObject``
and its two ``ssl.MemoryBIO`` through OpenSSL's own calls on TLS 1.3 where the first TLS
connection's probe proved where ``_ssl`` keeps them (:func:`adopt`), else through their C
methods; an error is raised by ``_ssl`` itself either way (see ``openssl.rs``):

- reading (``SSLProtocol.buffer_updated`` while the connection is up): recv(2) into the
  incoming BIO, ``read`` the records into the app protocol's ``data_received``, then the
  protocol's outgoing bytes to the socket and its flow control, as ``_do_read`` does;
- writing (``transport.write(data)`` of ``bytes`` while nothing waits in the backlog): the
  ``SSLObject``'s ``write``, the outgoing BIO to the socket, flow control, as
  ``_write_appdata`` does.

The native path reads and sets the attributes asyncio's methods read and set, and stands for
asyncio's own methods only: :func:`native_ok` holds while each method it replaces resolves on
its class to a function whose source is one this file knows (CPython 3.11 to 3.15 share it). A
class patched, a subclass of ``SSLProtocol`` or of ``SSLObject``
(``SSLContext.sslobject_class``), an app protocol that reads into its own buffer, a connection
in its handshake or its shutdown: asyncio's Python runs, as on asyncio's loop.

The app transport's class is a subclass of asyncio's ``_SSLProtocolTransport`` adding only the
native ``write``, and connections fdkit makes get :class:`SSLProtocol`, a subclass keeping the
record state in slots; both carry asyncio's module and name, so their reprs are asyncio's (as
fdkit's socket transport carries ``_SelectorSocketTransport``'s). An exception met on a native
path gets asyncio's traceback entries (:func:`failed`). Its ``__init__`` is asyncio's own code,
but the 256 KiB receive buffer asyncio zeroes for each connection is one per thread
(:func:`_thread_buffer`): a connection costs a tenth of the memory, and less CPU to make.
"""

from __future__ import annotations

import _ssl
import builtins
import collections
import functools
import inspect
import ssl
import textwrap
import threading
import types
from asyncio import selector_events, sslproto
from typing import Any

from fdkit._fdkit import TLS_RECORD_FIELDS, install_tls, load_direct
from fdkit.aio._native import Entry, Marker, _handled, entries_of, with_entries


class _SSLProtocolTransport(sslproto._SSLProtocolTransport):
    # No slots, no attributes: asyncio's app transport with a native ``write``, so that an
    # instance asyncio made can be given this class.
    __slots__ = ()


_SSLProtocolTransport.__module__ = sslproto.__name__


class _ThreadBuffers(threading.local):
    def __init__(self) -> None:
        self.by_size: dict[int, bytearray] = {}


_buffers = _ThreadBuffers()


def _thread_buffer(size: Any) -> bytearray:
    """What ``bytearray(self.max_size)`` gives asyncio's ``SSLProtocol.__init__`` on fdkit's
    loops: one buffer of that size per thread instead of a zeroed one per connection.

    asyncio uses ``_ssl_buffer`` only between ``get_buffer`` and ``buffer_updated``, which the
    socket transport calls back to back in one thread (``recv_into`` between them), and
    ``buffer_updated`` copies what arrived into the incoming BIO first. So the connections of
    one thread can share it; threads cannot (``recv_into`` lets go of the GIL)."""
    if type(size) is not int:
        return bytearray(size)  # a buffer of its own, or the error asyncio's call would raise
    by_size = _buffers.by_size
    buf = by_size.get(size)
    if buf is None:
        buf = by_size[size] = bytearray(size)
    return buf


class _InitGlobals(dict):  # type: ignore[type-arg]
    # Globals that read through to asyncio's module as it is at the time of the call (a
    # patched ``sslproto.ssl`` is seen), ``bytearray`` apart. A name neither holds raises
    # KeyError here and is then looked up in the builtins, as for any function.
    __missing__ = sslproto.__dict__.__getitem__


def _sharing_init(init: Any) -> Any:
    """asyncio's ``SSLProtocol.__init__``, the same code object (so the same lines in a
    traceback, and whatever this Python's version of it does), with ``bytearray`` bound to
    :func:`_thread_buffer`."""
    names = _InitGlobals(__builtins__=builtins.__dict__, __name__=sslproto.__name__,
                         __file__=sslproto.__file__, bytearray=_thread_buffer)  # fmt: skip
    func = types.FunctionType(init.__code__, names, init.__name__, init.__defaults__,
                              init.__closure__)  # fmt: skip
    func.__kwdefaults__ = init.__kwdefaults__
    func.__qualname__ = init.__qualname__
    func.__module__ = init.__module__
    func.__doc__ = init.__doc__
    return func


class SSLProtocol(sslproto.SSLProtocol):
    """asyncio's SSL protocol, the attributes its per-record methods read kept in slots (its
    code sets and reads them as before), which the core reads by offset instead of through the
    instance's dict. fdkit's loops make connections with it; ``start_tls`` makes asyncio's."""

    # The names the core reads by offset, from the core itself.
    __slots__ = TLS_RECORD_FIELDS

    __init__ = _sharing_init(sslproto.SSLProtocol.__init__)


SSLProtocol.__module__ = sslproto.__name__

# The ``__init__`` the sharing one copies, and the SHA-256 (first 16 hex digits) of the source
# it knows calls ``bytearray`` for ``_ssl_buffer`` alone: the same in CPython 3.11 to 3.15.
_ASYNCIO_INIT = sslproto.SSLProtocol.__init__
_INIT_DIGEST = "62951f2a7675781f"


def init_shares_buffer() -> bool:
    """Whether :class:`SSLProtocol`'s own ``__init__`` may run: asyncio's ``__init__`` is the
    one it copies (a program may have patched it since) and of a source this file knows. When
    not, ``_make_ssl_transport`` calls asyncio's ``__init__`` as it is now."""
    return sslproto.SSLProtocol.__init__ is _ASYNCIO_INIT and _is_known(_ASYNCIO_INIT, _INIT_DIGEST)


# The methods the native path stands for, with the SHA-256 (first 16 hex digits) of the source
# of the version it follows: the same in CPython 3.11 to 3.15.
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
    import hashlib  # on the first TLS connection: an import need not load OpenSSL's digests

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
            funcs = [_behind_write()]  # what the native write stands for
        elif cls is sslproto.SSLProtocol:
            # asyncio's class, and fdkit's slotted subclass as it resolves the name
            funcs = [getattr(cls, name, None), getattr(SSLProtocol, name, None)]
        else:
            funcs = [getattr(cls, name, None)]
        if any(f is None or not _is_known(f, digest) for f in funcs):
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
    global DIRECT
    if DIRECT is None:
        DIRECT = load_direct(_probe())
    if type(app_transport) is sslproto._SSLProtocolTransport:
        context = getattr(app_transport._ssl_protocol, "_sslcontext", None)
        if getattr(context, "_msg_callback", None) is None:
            app_transport.__class__ = _SSLProtocolTransport
    return app_transport


# --- errors, as asyncio's methods meet them ---------------------------------------------------
#
# An exception met on a native path gets the traceback entries asyncio's methods would have
# given it, from where it is caught (or, leaving the loop, from the loop's own entries): each
# chain below is captured once by running asyncio's own functions on stand-ins, the innermost
# raising at the site, so every entry has asyncio's code, line and instruction.

# asyncio's SSL protocol class, whose private methods typeshed does not declare.
_SSLProtocol: Any = sslproto.SSLProtocol
_AppTransport: Any = sslproto._SSLProtocolTransport
_read_ready: Any = selector_events._SelectorSocketTransport._read_ready  # type: ignore[attr-defined]
_get_buffer_read: Any = selector_events._SelectorSocketTransport._read_ready__get_buffer  # type: ignore[attr-defined]
_WRAPPED = sslproto.SSLProtocolState.WRAPPED


def _raise(*args: Any) -> Any:
    raise Marker


class _Proto:
    """A stand-in SSL protocol: asyncio's per-record methods, state of a connection that is up,
    one of them (or of its objects) raising, as a chain's site asks."""

    _state = _WRAPPED
    _app_reading_paused = False
    _app_protocol_is_buffer = False
    _ssl_writing_paused = False
    _write_buffer_size = 0
    max_size = 1
    buffer_updated = _SSLProtocol.buffer_updated
    _do_read = _SSLProtocol._do_read
    _do_read__copied = _SSLProtocol._do_read__copied
    _process_outgoing = _SSLProtocol._process_outgoing
    _write_appdata = _SSLProtocol._write_appdata
    _do_write = _SSLProtocol._do_write

    def __init__(self, site: str) -> None:
        self.site = site
        self._write_backlog: Any = collections.deque()

        class _SSLObj:
            calls = 0

            def read(self, n: int, buf: Any = None) -> bytes:
                self.calls += 1
                if site == "read":
                    raise Marker
                if site in ("eof", "shutdown") or self.calls > 1:
                    if self.calls > 1 and site not in ("eof", "shutdown"):
                        raise ssl.SSLWantReadError
                    return b""
                return b"x"

            def write(self, data: bytes) -> int:
                if site == "w_write":
                    raise Marker
                return len(data)

        class _BIO:
            pending = 0

            def write(self, data: Any) -> int:
                if site == "feed":
                    raise Marker
                return len(data)

            def read(self) -> bytes:
                return b"x" if site in ("outgoing", "w_outgoing") else b""

        class _App:
            def data_received(self, data: bytes) -> None:
                if site == "protocol":
                    raise Marker

        class _Tr:
            def write(self, data: bytes) -> None:
                if site in ("outgoing", "w_outgoing"):
                    raise Marker

        self._sslobj = _SSLObj()
        self._incoming = self._outgoing = _BIO()
        self._app_protocol = _App()
        self._transport = _Tr()
        self._ssl_buffer_view = memoryview(bytearray(1))
        if site == "do_write":
            self._write_backlog.append(b"x")
            self._do_write = _raise
        if site == "buffered":
            self._app_protocol_is_buffer = True
        if site == "ssl_reading":
            self._app_reading_paused = True

    def _do_read__buffered(self) -> None:
        if self.site == "buffered":
            raise Marker

    def _call_eof_received(self) -> None:
        if self.site == "eof":
            raise Marker

    def _start_shutdown(self) -> None:
        if self.site == "shutdown":
            raise Marker

    def _control_app_writing(self) -> None:
        if self.site in ("app_writing", "w_app_writing"):
            raise Marker

    def _control_ssl_reading(self) -> None:
        if self.site == "ssl_reading":
            raise Marker

    def _do_read_raising(self) -> None:
        raise Marker

    def _fatal_error(self, exc: BaseException, message: str = "") -> None:
        raise AssertionError("no stand-in reaches _fatal_error") from exc


# Where each native read site is, as the functions of asyncio's _do_read that lead to it.
_READ_CHAINS: dict[str, tuple[Any, ...]] = {
    "feed": (),
    "protocol": (_SSLProtocol._do_read, _SSLProtocol._do_read__copied),
    "read": (_SSLProtocol._do_read, _SSLProtocol._do_read__copied),
    "eof": (_SSLProtocol._do_read, _SSLProtocol._do_read__copied),
    "shutdown": (_SSLProtocol._do_read, _SSLProtocol._do_read__copied),
    "buffered": (_SSLProtocol._do_read,),
    "do_write": (_SSLProtocol._do_read,),
    "outgoing": (_SSLProtocol._do_read, _SSLProtocol._process_outgoing),
    "app_writing": (_SSLProtocol._do_read, _SSLProtocol._process_outgoing),
    "ssl_reading": (_SSLProtocol._do_read,),
}
# ... and each write site, as the functions of _write_appdata that lead to it.
_WRITE_CHAINS: dict[str, tuple[Any, ...]] = {
    "w_write": (_SSLProtocol._write_appdata, _SSLProtocol._do_write),
    "w_outgoing": (_SSLProtocol._write_appdata, _SSLProtocol._do_write,
                   _SSLProtocol._process_outgoing),
    "w_app_writing": (_SSLProtocol._write_appdata, _SSLProtocol._do_write,
                      _SSLProtocol._process_outgoing),
}  # fmt: skip


def _read_chain(site: str) -> list[Entry] | None:
    functions = _READ_CHAINS[site]
    if not functions:
        return []
    return entries_of(lambda: _SSLProtocol._do_read(_Proto(site)), *functions)


def _write_chain(site: str) -> list[Entry] | None:
    return entries_of(lambda: _SSLProtocol._write_appdata(_Proto(site), (b"x",)),
                    *_WRITE_CHAINS[site])  # fmt: skip


class _Sock:
    fail = False

    def recv_into(self, buf: Any) -> int:
        if self.fail:
            raise Marker
        return 1


class _SockTransport:
    """A stand-in socket transport reading for a stand-in SSL protocol whose ``_do_read`` (or,
    at site ``feed``, its incoming BIO's write) raises."""

    _conn_lost = 0
    _sock = _Sock()

    def __init__(self, site: str) -> None:
        proto = _Proto(site)
        if site != "feed":
            proto._do_read = proto._do_read_raising
        proto.get_buffer = lambda n: bytearray(1)  # type: ignore[attr-defined]
        self._protocol = proto
        self._read_ready_cb = lambda: _get_buffer_read(self)

    def _fatal_error(self, exc: BaseException, message: str = "") -> None:
        raise AssertionError("no stand-in reaches _fatal_error") from exc


def _buffer_prefix(site: str) -> list[Entry] | None:
    """``_read_ready__get_buffer`` and ``buffer_updated`` down to the site (``feed``: the
    incoming BIO's write, else the call of ``_do_read``)."""
    tr = _SockTransport(site)
    return entries_of(lambda: _get_buffer_read(tr), _get_buffer_read, _SSLProtocol.buffer_updated)


def _recv_chains() -> dict[str, list[Entry]]:
    """The entries of an exception from ``recv_into``: caught by ``_read_ready__get_buffer``
    (key ``ssl``), or leaving the loop through ``_read_ready`` (key ``exit``)."""
    got: dict[str, list[Entry]] = {}
    for how, call, functions in (
        ("ssl", _get_buffer_read, (_get_buffer_read,)),
        ("exit", _read_ready, (_read_ready, _get_buffer_read)),
    ):
        tr = _SockTransport("recv")
        tr._sock = _Sock()
        tr._sock.fail = True
        entries = entries_of(functools.partial(call, tr), *functions)
        if entries is not None:
            got[how] = entries
    return got


def _ready_prefix(site: str) -> list[Entry] | None:
    """The same from ``_read_ready``, which a SystemExit leaves through."""
    tr = _SockTransport(site)
    return entries_of(lambda: _read_ready(tr), _read_ready, _get_buffer_read,
                      _SSLProtocol.buffer_updated)  # fmt: skip


def _write_prefix() -> list[Entry] | None:
    """The app transport's ``write`` at its call of ``_write_appdata``."""

    class _App:
        _ssl_protocol = _Proto("w_write")

    _App._ssl_protocol._write_appdata = _raise
    return entries_of(lambda: _AppTransport.write(_App(), b"x"), _AppTransport.write)


def _chains() -> dict[tuple[str, str], list[Entry]]:
    """Every chain, by ``(how, site)``: ``how`` is ``ssl`` (caught by ``_do_read`` or
    ``_write_appdata``), ``buffer`` (caught by ``_read_ready__get_buffer``) or ``exit`` (leaving
    the loop). A chain that cannot be captured (another asyncio) is left out: its exception
    then starts where the core met it."""
    got: dict[tuple[str, str], list[Entry]] = {}
    for site in _READ_CHAINS:
        inner = _read_chain(site)
        if inner is None:
            continue
        got["ssl", site] = inner
        buffer_site, ready_site = _buffer_prefix(site), _ready_prefix(site)
        if buffer_site is not None:
            got["buffer", site] = buffer_site + inner
        if ready_site is not None:
            got["exit", site] = ready_site + inner
    for how, entries in _recv_chains().items():
        got[how, "recv"] = entries
    write = _write_prefix()
    for site in _WRITE_CHAINS:
        inner = _write_chain(site)
        if inner is None:
            continue
        got["ssl", site] = inner
        if write is not None:
            got["exit", site] = write + inner
    return got


# Captured on the first error (errors are rare; an import need not pay for them).
_CHAINS: dict[tuple[str, str], list[Entry]] | None = None


def _chain(how: str, site: str) -> list[Entry] | None:
    """The entries of ``(how, site)`` (see :func:`_chains`), None when not captured."""
    global _CHAINS
    if _CHAINS is None:
        _CHAINS = _chains()
    return _CHAINS.get((how, site))


def failed(site: str, protocol: Any, transport: Any, exc: BaseException) -> BaseException | None:
    """What asyncio does with ``exc``, raised at the native path's ``site`` (a key of
    ``_READ_CHAINS`` or ``_WRITE_CHAINS``) of SSL protocol ``protocol`` (over socket transport
    ``transport``; None on a write): an ``Exception`` to the SSL protocol's ``_fatal_error``,
    SystemExit and KeyboardInterrupt raised on (out of the loop), any other exception of a read
    to the socket transport's ``_fatal_error``; its traceback with asyncio's entries. Returns
    the exception to raise (the core raises it, so that no frame of this function joins its
    traceback), or None."""
    if isinstance(exc, (SystemExit, KeyboardInterrupt)):
        how = "exit"
    elif isinstance(exc, Exception) and site != "feed":  # buffer_updated's write is not in a try
        how = "ssl"
    else:
        how = "exit" if transport is None else "buffer"
    entries = _chain(how, site)
    if entries is not None:
        with_entries(exc, entries)
    if how == "exit":
        return exc
    if how == "ssl":
        _handled(exc, protocol._fatal_error, exc, "Fatal error on SSL protocol")
    else:
        _handled(exc, transport._fatal_error, exc,
                 "Fatal error: protocol.buffer_updated() call failed.")  # fmt: skip
    return None


def recv_failed(transport: Any, exc: BaseException) -> BaseException | None:
    """asyncio's ``_read_ready__get_buffer`` on ``exc`` from ``recv_into``: the socket
    transport's ``_fatal_error``, or, for SystemExit and KeyboardInterrupt (a signal handler's,
    run when recv(2) was interrupted), the exception to raise out of the loop; its traceback
    with asyncio's entries."""
    leaving = isinstance(exc, (SystemExit, KeyboardInterrupt))
    entries = _chain("exit" if leaving else "ssl", "recv")
    if entries is not None:
        with_entries(exc, entries)
    if leaving:
        return exc
    _handled(exc, transport._fatal_error, exc, "Fatal read error on socket transport")
    return None


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


install_tls(
    _SSLProtocolTransport,
    SSLProtocol,
    native_ok,
    selector_events._SelectorSocketTransport._read_ready__get_buffer,  # type: ignore[attr-defined]
)
#: Whether the record path calls OpenSSL directly (else ``_ssl``'s methods): None until the
#: first TLS connection proves it (:func:`adopt`).
DIRECT: bool | None = None
