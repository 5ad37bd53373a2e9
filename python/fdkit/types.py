"""The closed sets of strings fdkit takes and returns, and the shapes of the dicts it returns.

Import them to annotate your own code::

    from fdkit.types import Engine, ServeStats, TransferStats

The dicts are plain ``dict`` objects at run time; these ``TypedDict`` classes say which keys
they carry (a test checks the keys the native code produces against them, so they cannot
drift).
"""

# No `from __future__ import annotations` here: Python 3.11 only sees NotRequired in a
# TypedDict whose annotations are real objects (ServeStats.__optional_keys__).
from typing import Literal, NotRequired, TypedDict

__all__ = [
    "Address",
    "AtomicPipeMode",
    "CompletionOp",
    "Engine",
    "EngineName",
    "Inet6Address",
    "InetAddress",
    "ListenInfo",
    "MixedEvent",
    "ProtocolErrorKind",
    "ProxyStats",
    "ServeDefaults",
    "ServeStaticStats",
    "ServeStats",
    "SqeFlags",
    "Statx",
    "StoppedBy",
    "TransferFallback",
    "TransferPath",
    "TransferStats",
    "WouldBlock",
    "ZstdCodec",
]

#: An IPv4 socket address: ``(host, port)``.
InetAddress = tuple[str, int]

#: An IPv6 socket address: ``(host, port, flowinfo, scope_id)``.
Inet6Address = tuple[str, int, int, int]

#: A socket address as ``fdkit.fd`` takes and returns it, spelled as in :mod:`socket`: IPv4,
#: IPv6 (``(host, port, flowinfo)`` is accepted too), or an AF_UNIX path (``str``/``bytes``,
#: a leading NUL for the abstract namespace). An IPv4 or IPv6 socket made by ``fd.socket``
#: with a literal family is typed so that its addresses are ``InetAddress``/``Inet6Address``.
Address = InetAddress | tuple[str, int, int] | Inet6Address | str | bytes

#: ``AtomicPipe.from_fd(mode, fd)``: ``'r'``/``'w'``, or Perl's ``'<&'``/``'>&'``
#: (``'<&='``/``'>&='``). ``AtomicPipe.mode`` reports ``'r'`` or ``'w'``.
AtomicPipeMode = Literal["r", "w", "<&", ">&", "<&=", ">&="]

#: The one compression codec an atomic pipe speaks (``compression=``, ``set_compression``).
ZstdCodec = Literal["zstd"]

#: What ``AtomicPipe.get_line_burst_or_data`` says it returned.
MixedEvent = Literal["message", "burst", "line"]

#: ``ProtocolError.kind``: what was wrong with the stream (``"protocol_error"`` for a kind
#: newer than this list).
ProtocolErrorKind = Literal[
    "truncated_chunk",
    "truncated_burst",
    "incomplete_message",
    "chunk_too_large",
    "chunk_out_of_order",
    "missing_frame_end",
    "bad_burst",
    "bad_compressed_data",
    "protocol_error",
]

#: An engine by its name: what a server runs (its stats, its ``on_listen`` info) and what
#: ``fdkit.aio``'s loops are (``EventLoop.engine``).
EngineName = Literal["io_uring", "epoll"]

#: ``serve(engine=...)``: an :data:`EngineName`, or ``"auto"`` (io_uring where the kernel
#: allows it, else epoll), or ``"uring"``, an alias of ``"io_uring"``. Derived from
#: :data:`EngineName`: the choice adds those two spellings to the names.
Engine = Literal["auto", EngineName, "uring"]

#: How ``serve`` was stopped (None when the server returned on its own).
StoppedBy = Literal["SIGINT", "SIGTERM"]

#: The paths ``zerocopy.transfer`` can take (``transfer_stats()["path"]``).
TransferPath = Literal["copy_file_range", "sendfile", "splice", "splice_via_pipe", "read_write"]

#: ``Completion.op``: the name of the ``Ring`` method that queued the operation (a multishot
#: accept is ``"accept"``, told apart by ``more``; ``close_fd`` is ``"close_fd"``).
CompletionOp = Literal[
    "nop",
    "socket",
    "accept",
    "connect",
    "recv",
    "recv_multishot",
    "send",
    "send_zc",
    "read",
    "write",
    "splice",
    "tee",
    "shutdown",
    "close_fd",
    "poll_add",
    "timeout",
    "cancel",
    "link_timeout",
    "openat",
    "statx",
    "fsync",
    "sendmsg",
    "recvmsg",
    "read_fixed",
    "write_fixed",
]


class SqeFlags(TypedDict, total=False):
    """The submission flags every ``Ring`` operation takes as keywords
    (``ring.nop(1, link=True)``): ``link`` (the next operation waits for this one and is
    cancelled if it fails), ``hardlink`` (waits, and goes on when it fails), ``drain`` (waits
    for every operation before it), ``async_`` (``IOSQE_ASYNC``: straight to a kernel worker)
    and ``skip_success`` (``IOSQE_CQE_SKIP_SUCCESS``: no completion when it succeeds)."""

    link: bool
    hardlink: bool
    drain: bool
    async_: bool
    skip_success: bool


class Statx(TypedDict):
    """``Completion.statx``: what a ``Ring.statx`` found (see statx(2); times in ns)."""

    mask: int
    mode: int
    ino: int
    nlink: int
    uid: int
    gid: int
    size: int
    blksize: int
    blocks: int
    atime_ns: int
    mtime_ns: int
    ctime_ns: int
    btime_ns: int
    dev: int
    rdev: int


# One path ``transfer`` left for the next one, and why. "from" is a keyword: the functional
# form is the only way to spell this TypedDict.
TransferFallback = TypedDict(
    "TransferFallback",
    {"from": TransferPath, "to": TransferPath, "errno": int | None, "reason": str},
)


#: The side a non-blocking ``transfer`` stopped at: wait for ``"read"``-ability of the source
#: or ``"write"``-ability of the destination.
WouldBlock = Literal["read", "write"]


class TransferStats(TypedDict):
    """``zerocopy.transfer_stats()``: the calling thread's last ``transfer``.

    ``would_block`` (``nonblocking=True`` only): the side that would have blocked, None when
    finished. ``held``: bytes taken from the source and kept for the next transfer of the pair.
    """

    path: TransferPath
    bytes: int
    remembered: bool
    fallbacks: list[TransferFallback]
    would_block: WouldBlock | None
    held: int


class ServeStaticStats(TypedDict):
    """The counters one static server returns when it stops."""

    requests: int
    connections: int
    timeouts: int
    refused: int
    peak_connections: int
    max_connections: int


class ServeStats(ServeStaticStats):
    """``fdkit.serve(...)``: the counters (added up across workers), the engine and what
    stopped it; ``workers`` only when ``workers > 1``."""

    engine: EngineName | None
    stopped_by: StoppedBy | None
    workers: NotRequired[int]


class ServeDefaults(TypedDict):
    """``_fdkit.SERVE_DEFAULTS``: the defaults of ``serve_static``'s keywords, written once in
    the native module; ``fdkit.serve`` and ``fdkit serve`` take theirs from here."""

    host: str
    port: int
    engine: Engine
    idle_timeout: float
    max_connections: int
    reuse_port: bool
    quiet: bool
    listing: bool
    access_log: bool


class ListenInfo(TypedDict):
    """What ``serve_static(on_listen=...)`` is called with once the socket listens."""

    host: str
    port: int
    engine: EngineName
    fallback: str | None


class ProxyStats(TypedDict):
    """``serve_proxy(...)``: the forwarding proxy's counters when it stops."""

    connections: int
    bytes_up: int
    bytes_down: int
    upstream_failures: int
    peak_connections: int
    max_connections: int
