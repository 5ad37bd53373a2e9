# Type stubs for the native module, written by hand and checked by `mypy.stubtest` (make lint).
from collections.abc import Callable, Iterable, Iterator
from os import PathLike
from socket import AddressFamily
from typing import Any, ClassVar, Literal, NewType, TypeAlias, final, overload

from _typeshed import HasFileno, ReadableBuffer, WriteableBuffer
from typing_extensions import Unpack, disjoint_base

from fdkit.types import (
    Address,
    AtomicPipeMode,
    CompletionOp,
    Engine,
    Inet6Address,
    InetAddress,
    ListenInfo,
    MixedEvent,
    ProtocolErrorKind,
    ProxyStats,
    ServeDefaults,
    ServeStaticStats,
    SqeFlags,
    Statx,
    TransferStats,
    WouldBlock,
    ZstdCodec,
)

__version__: str

_Path: TypeAlias = str | bytes | PathLike[str] | PathLike[bytes]
_Inet4Address: TypeAlias = InetAddress
_Inet6Address: TypeAlias = Inet6Address
_Address: TypeAlias = Address

# A socket fd is a plain int at run time. `socket()` called with a literal AF_INET or AF_INET6
# returns one of these subtypes of int, so that `accept`, `accept_many`, `getsockname` and
# `getpeername` on it can say the address's shape: `for conn, (host, port) in accept_many(...)`
# then type-checks. With any other family (or an int from elsewhere) the address is `_Address`.
_Inet4Fd = NewType("_Inet4Fd", int)
_Inet6Fd = NewType("_Inet6Fd", int)
_AF_INET: TypeAlias = Literal[AddressFamily.AF_INET, 2]
_AF_INET6: TypeAlias = Literal[AddressFamily.AF_INET6, 10]
_StatTuple: TypeAlias = tuple[int, int, int, int, int, int, int, int, int, int, int, int, int]

# Sockets
@overload
def socket(
    family: _AF_INET = 2, type: int = 1, proto: int = 0, *, cloexec: bool = True
) -> _Inet4Fd: ...
@overload
def socket(
    family: _AF_INET6, type: int = 1, proto: int = 0, *, cloexec: bool = True
) -> _Inet6Fd: ...
@overload
def socket(family: int, type: int = 1, proto: int = 0, *, cloexec: bool = True) -> int: ...
def socketpair(
    family: int = 1, type: int = 1, proto: int = 0, *, cloexec: bool = True
) -> tuple[int, int]: ...
def bind(fd: int, address: _Address) -> None: ...
def listen(fd: int, backlog: int = 4096) -> None: ...
@overload
def accept(fd: _Inet4Fd, *, cloexec: bool = True) -> tuple[_Inet4Fd, _Inet4Address]: ...
@overload
def accept(fd: _Inet6Fd, *, cloexec: bool = True) -> tuple[_Inet6Fd, _Inet6Address]: ...
@overload
def accept(fd: int, *, cloexec: bool = True) -> tuple[int, _Address]: ...
@overload
def accept4(
    fd: _Inet4Fd, flags: int = 0, *, cloexec: bool = True
) -> tuple[_Inet4Fd, _Inet4Address]: ...
@overload
def accept4(
    fd: _Inet6Fd, flags: int = 0, *, cloexec: bool = True
) -> tuple[_Inet6Fd, _Inet6Address]: ...
@overload
def accept4(fd: int, flags: int = 0, *, cloexec: bool = True) -> tuple[int, _Address]: ...
@overload
def accept_many(
    fd: _Inet4Fd, max: int | None = 64, flags: int = ..., *, cloexec: bool = True
) -> list[tuple[_Inet4Fd, _Inet4Address]]: ...
@overload
def accept_many(
    fd: _Inet6Fd, max: int | None = 64, flags: int = ..., *, cloexec: bool = True
) -> list[tuple[_Inet6Fd, _Inet6Address]]: ...
@overload
def accept_many(
    fd: int, max: int | None = 64, flags: int = ..., *, cloexec: bool = True
) -> list[tuple[int, _Address]]: ...
def connect(fd: int, address: _Address) -> None: ...
def shutdown(fd: int, how: int) -> None: ...
@overload
def getsockname(fd: _Inet4Fd) -> _Inet4Address: ...
@overload
def getsockname(fd: _Inet6Fd) -> _Inet6Address: ...
@overload
def getsockname(fd: int) -> _Address: ...
@overload
def getpeername(fd: _Inet4Fd) -> _Inet4Address: ...
@overload
def getpeername(fd: _Inet6Fd) -> _Inet6Address: ...
@overload
def getpeername(fd: int) -> _Address: ...
@overload
def getsockopt(fd: int, level: int, optname: int, buflen: None = None) -> int: ...
@overload
def getsockopt(fd: int, level: int, optname: int, buflen: int) -> bytes: ...
def setsockopt(fd: int, level: int, optname: int, value: int | ReadableBuffer) -> None: ...

# Datagrams and ancillary data
def sendto(fd: int, data: ReadableBuffer, address: _Address, flags: int = 0) -> int: ...
def recvfrom(fd: int, n: int, flags: int = 0) -> tuple[bytes, _Address | None]: ...
def recvfrom_into(
    fd: int, buffer: WriteableBuffer, nbytes: int = 0, flags: int = 0
) -> tuple[int, _Address | None]: ...
def sendmsg(
    fd: int,
    buffers: Iterable[ReadableBuffer],
    ancdata: Iterable[tuple[int, int, ReadableBuffer]] | None = None,
    flags: int = 0,
    address: _Address | None = None,
) -> int: ...
def recvmsg(
    fd: int, bufsize: int, ancbufsize: int = 0, flags: int = 0, *, cloexec: bool = True
) -> tuple[bytes, list[tuple[int, int, bytes]], int, _Address | None]: ...
def send_fds(
    fd: int,
    buffers: Iterable[ReadableBuffer],
    fds: Iterable[int],
    flags: int = 0,
    address: _Address | None = None,
) -> int: ...
def recv_fds(
    fd: int, bufsize: int, maxfds: int, flags: int = 0, *, cloexec: bool = True
) -> tuple[bytes, list[int], int, _Address | None]: ...

# Reading and writing
def read(fd: int, n: int) -> bytes: ...
def readinto(fd: int, buffer: WriteableBuffer) -> int: ...
def pread(fd: int, n: int, offset: int) -> bytes: ...
def write(fd: int, data: ReadableBuffer) -> int: ...
def pwrite(fd: int, data: ReadableBuffer, offset: int) -> int: ...
def recv(fd: int, n: int, flags: int = 0) -> bytes: ...
def recv_into(fd: int, buffer: WriteableBuffer, nbytes: int = 0, flags: int = 0) -> int: ...
def send(fd: int, data: ReadableBuffer, flags: int = 0) -> int: ...
def sendfile(
    out_fd: int, in_fd: int, offset: int | None = None, count: int | None = None
) -> int: ...
def lseek(fd: int, offset: int, whence: int = 0) -> int: ...
def splice(
    fd_in: int,
    fd_out: int,
    count: int,
    *,
    off_in: int | None = None,
    off_out: int | None = None,
    flags: int = 0,
) -> int: ...
def tee(fd_in: int, fd_out: int, count: int, flags: int = 0) -> int: ...

# Files, pipes, fd flags
def open(path: _Path, flags: int, mode: int = 0o777, *, cloexec: bool = True) -> int: ...
def close(fd: int) -> None: ...
def pipe(flags: int = 0, *, cloexec: bool = True) -> tuple[int, int]: ...
def dup(fd: int, *, cloexec: bool = True) -> int: ...
def dup2(fd: int, fd2: int, *, cloexec: bool = False) -> int: ...
@overload
def fcntl(fd: int, cmd: int, arg: int | None = None) -> int: ...
@overload
def fcntl(
    fd: int, cmd: int, arg: tuple[int, int, int, int, int]
) -> tuple[int, int, int, int, int]: ...
def ioctl(fd: int, request: int, arg: int = 0) -> int: ...
def get_blocking(fd: int) -> bool: ...
def set_blocking(fd: int, blocking: bool) -> None: ...
def get_cloexec(fd: int) -> bool: ...
def set_cloexec(fd: int, cloexec: bool = True) -> None: ...
def mkstemp(
    suffix: _Path | None = None,
    prefix: _Path | None = None,
    dir: _Path | None = None,
    *,
    cloexec: bool = True,
) -> tuple[int, str]: ...
def mkdtemp(
    suffix: _Path | None = None, prefix: _Path | None = None, dir: _Path | None = None
) -> str: ...
def stat(path: _Path) -> _StatTuple: ...
def lstat(path: _Path) -> _StatTuple: ...
def fstat(fd: int) -> _StatTuple: ...
def poll(fds: Iterable[tuple[int, int]], timeout: float | None = None) -> list[tuple[int, int]]: ...

# io_uring
def uring_probe() -> dict[str, Any]: ...

@final
class Completion:
    @property
    def user_data(self) -> int: ...
    @property
    def result(self) -> int: ...
    @property
    def error(self) -> OSError | None: ...
    @property
    def more(self) -> bool: ...
    @property
    def notif(self) -> bool: ...
    @property
    def buffer_id(self) -> int | None: ...
    @property
    def data(self) -> bytes | None: ...
    @property
    def op(self) -> CompletionOp: ...
    @property
    def fd(self) -> int | None: ...  # the fd the op was on (a registered-file index if fixed)
    @property
    def fixed(self) -> bool: ...
    @property
    def address(self) -> _Address | None: ...  # accept(address=True)'s peer, recvmsg's sender
    @property
    def statx(self) -> Statx | None: ...

@final
class Reactor:
    # fdkit.aio's io_uring engine (private): wait() sleeps in one io_uring_enter(2) until the
    # loop's epoll instance is readable (True) or the timeout passes (False), and leaves
    # nothing armed in the ring when it returns.
    def __new__(cls, *, entries: int = 8) -> Reactor: ...
    def wait(self, epoll_fd: int, timeout: float | None = None) -> bool: ...
    def in_flight(self) -> int: ...
    def fileno(self) -> int: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...

@final
class LoopCore:
    # fdkit.aio's native iteration (private): asyncio's _run_once, call_soon, call_at,
    # call_later, time and _timer_handle_cancelled on the loop's own objects;
    # fdkit.aio._native.install makes one per loop.

    def __new__(
        cls, loop_: Any, selector: Any, ring: Reactor | None, support: Any, owner: type
    ) -> LoopCore: ...
    def call_soon(self, callback: Any, *args: Any, context: Any = None) -> Any: ...
    def call_at(self, when: Any, callback: Any, *args: Any, context: Any = None) -> Any: ...
    def call_later(self, delay: Any, callback: Any, *args: Any, context: Any = None) -> Any: ...
    def time(self) -> float: ...
    def create_task(self, coro: Any, *, name: Any = None, context: Any = None) -> Any: ...
    def get_debug(self) -> Any: ...
    def check_closed(self) -> None: ...
    def timer_handle_cancelled(self, handle: Any) -> None: ...
    def push_timer(self, timer: Any) -> None: ...
    def scheduled(self) -> list[Any]: ...
    def set_scheduled(self, timers: Any) -> None: ...
    cancelled_count: int
    def run_once(self) -> None: ...
    def seal(self) -> None: ...
    def clear(self) -> None: ...

# Makes cls.write fdkit's native socket-transport write (private to fdkit.aio).
def install_write(cls: type) -> None: ...

@final
class Ring:
    def __new__(
        cls, entries: int = 256, *, defer_taskrun: bool | None = None, cq_entries: int | None = None
    ) -> Ring: ...
    # Every op takes the SQE flags as keywords (**sqe: link, hardlink, drain, async_,
    # skip_success); ops on an fd take fixed=True (fd: an index into register_files).
    def nop(
        self,
        user_data: int,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def socket(
        self,
        family: int,
        type: int,
        user_data: int,
        *,
        proto: int = 0,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def accept(
        self,
        fd: int,
        user_data: int,
        *,
        multishot: bool = False,
        address: bool = False,
        fixed: bool = False,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def connect(
        self,
        fd: int,
        address: _Address,
        user_data: int,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def recv(
        self,
        fd: int,
        nbytes: int,
        user_data: int,
        *,
        flags: int = 0,
        fixed: bool = False,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def recv_multishot(
        self,
        fd: int,
        group: int,
        user_data: int,
        *,
        fixed: bool = False,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def provide_buffers(self, group: int, count: int, size: int) -> None: ...
    def send(
        self,
        fd: int,
        data: ReadableBuffer,
        user_data: int,
        *,
        flags: int = 0,
        fixed: bool = False,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def send_zc(
        self,
        fd: int,
        data: ReadableBuffer,
        user_data: int,
        *,
        flags: int = 0,
        fixed: bool = False,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def read(
        self,
        fd: int,
        nbytes: int,
        user_data: int,
        *,
        offset: int | None = None,
        fixed: bool = False,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def write(
        self,
        fd: int,
        data: ReadableBuffer,
        user_data: int,
        *,
        offset: int | None = None,
        fixed: bool = False,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def splice(
        self,
        fd_in: int,
        fd_out: int,
        nbytes: int,
        user_data: int,
        *,
        off_in: int | None = None,
        off_out: int | None = None,
        flags: int = 0,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def tee(
        self,
        fd_in: int,
        fd_out: int,
        nbytes: int,
        user_data: int,
        *,
        flags: int = 0,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def shutdown(
        self,
        fd: int,
        how: int,
        user_data: int,
        *,
        fixed: bool = False,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def close_fd(
        self,
        fd: int,
        user_data: int,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def poll_add(
        self,
        fd: int,
        events: int,
        user_data: int,
        *,
        multishot: bool = False,
        fixed: bool = False,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def timeout(
        self,
        seconds: float,
        user_data: int,
        *,
        count: int = 0,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def cancel(
        self,
        target_user_data: int,
        user_data: int,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def link_timeout(
        self,
        seconds: float,
        user_data: int,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def openat(
        self,
        path: _Path,
        flags: int,
        user_data: int,
        *,
        mode: int = 0o777,
        dir_fd: int | None = None,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def statx(
        self,
        path: _Path,
        user_data: int,
        *,
        dir_fd: int | None = None,
        flags: int = 0,
        mask: int = 0x7FF,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def fsync(
        self,
        fd: int,
        user_data: int,
        *,
        datasync: bool = False,
        fixed: bool = False,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def sendmsg(
        self,
        fd: int,
        buffers: Iterable[ReadableBuffer],
        user_data: int,
        *,
        address: _Address | None = None,
        flags: int = 0,
        fixed: bool = False,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def recvmsg(
        self,
        fd: int,
        nbytes: int,
        user_data: int,
        *,
        flags: int = 0,
        fixed: bool = False,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def register_files(self, fds: Iterable[int]) -> None: ...
    def unregister_files(self) -> None: ...
    def register_buffers(self, count: int, size: int) -> None: ...
    def unregister_buffers(self) -> None: ...
    def fill_buffer(self, index: int, data: ReadableBuffer, *, offset: int = 0) -> None: ...
    def buffer_bytes(self, index: int, nbytes: int | None = None, *, offset: int = 0) -> bytes: ...
    def read_fixed(
        self,
        fd: int,
        buf_index: int,
        nbytes: int,
        user_data: int,
        *,
        offset: int | None = None,
        fixed: bool = False,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def write_fixed(
        self,
        fd: int,
        buf_index: int,
        data: ReadableBuffer | int,
        user_data: int,
        *,
        offset: int | None = None,
        fixed: bool = False,
        **sqe: Unpack[SqeFlags],
    ) -> None: ...
    def submit(self) -> int: ...
    def wait(
        self, min_complete: int = 1, timeout: float | None = None, *, timeout_error: bool = False
    ) -> list[Completion]: ...
    def fileno(self) -> int: ...
    @property
    def fd(self) -> int: ...  # the older spelling of fileno(), kept as an alias
    @property
    def closed(self) -> bool: ...
    @property
    def defer_taskrun(self) -> bool: ...
    @property
    def sq_entries(self) -> int: ...
    @property
    def cq_entries(self) -> int: ...
    @property
    def in_flight(self) -> int: ...
    def close(self) -> None: ...
    def __enter__(self) -> Ring: ...
    def __exit__(self, *_args: object) -> None: ...

# Zero-copy
@overload
def transfer(
    src_fd: int,
    dst_fd: int,
    count: int | None = None,
    *,
    src_offset: int | None = None,
    dst_offset: int | None = None,
    nonblocking: Literal[False] = False,
) -> int: ...
@overload
def transfer(
    src_fd: int,
    dst_fd: int,
    count: int | None = None,
    *,
    src_offset: int | None = None,
    dst_offset: int | None = None,
    nonblocking: Literal[True],
) -> tuple[int, WouldBlock | None]: ...
def transfer_held(src_fd: int, dst_fd: int) -> int: ...
def transfer_stats() -> TransferStats | None: ...
def proxy(a_fd: int, b_fd: int, *, idle_timeout: float | None = None) -> tuple[int, int]: ...
def relay(src_fd: int, dst_fd: int, *, record_fd: int | None = None) -> int: ...
def pipe_pool_clear() -> int: ...
def pipe_pool_idle() -> int: ...

# A pipe size in bytes (Pipe.size, AtomicPipe.size, max_size): an int; calling it returns the
# same number, for code written with the older `size()` spelling.
class PipeSize(int):
    def __call__(self) -> int: ...

@final
class Pipe:
    def __new__(cls, size: int | None = None, *, nonblocking: bool = False) -> Pipe: ...
    def read_from(self, fd: int, n: int | None = None, *, offset: int | None = None) -> int: ...
    def write_to(self, fd: int, n: int | None = None, *, offset: int | None = None) -> int: ...
    def tee(self, other: Pipe, n: int) -> int: ...
    def close_write(self) -> None: ...
    def add_mirror(self, target: Pipe | int) -> None: ...
    def remove_mirror(self, target: Pipe | int) -> None: ...
    @property
    def mirrors(self) -> list[Pipe | int]: ...
    @property
    def size(self) -> PipeSize: ...
    def resize(self, size: int) -> int: ...
    @property
    def max_size(self) -> PipeSize: ...
    def resize_or_max(self, size: int) -> int: ...
    @property
    def pending(self) -> int: ...
    def fileno(self) -> int: ...  # the read end; fds has both
    @property
    def fds(self) -> tuple[int, int]: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> Pipe: ...
    def __exit__(self, *_args: object) -> None: ...

# The forwarding proxy (fdkit proxy)

def serve_proxy(
    listen: str,
    upstream: str,
    *,
    record: _Path | None = None,
    max_connections: int = 4096,
    idle_timeout: float | None = None,
    connect_timeout: float = 10.0,
    pipe_size: int | None = None,
    quiet: bool = False,
    on_listen: Callable[[str, str], object] | None = None,
    resolve_every: float | None = 5.0,
    on_notice: Callable[[str], object] | None = None,
) -> ProxyStats: ...

# The static file server (fdkit serve)

SERVE_DEFAULTS: ServeDefaults

# The defaults below are SERVE_DEFAULTS' (tests/test_serve_defaults.py compares them).
def serve_static(
    directory: _Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    engine: Engine = "auto",
    idle_timeout: float = 30.0,
    max_connections: int = 10000,
    reuse_port: bool = False,
    quiet: bool = False,
    on_listen: Callable[[ListenInfo], object] | None = None,
    listing: bool = False,
    access_log: bool = False,
) -> ServeStaticStats: ...

# Atomic pipe messages (fdkit.atomic_pipe)

class ProtocolError(ValueError):
    writer: tuple[int, int] | None
    offset: int
    kind: ProtocolErrorKind
    fatal: bool

_Dictionary: TypeAlias = ReadableBuffer | str | PathLike[str] | PathLike[bytes] | None

@final
class AtomicPipe:
    PIPE_BUF: ClassVar[int]
    @staticmethod
    def pair(
        *,
        mixed_data_mode: bool = ...,
        compression: ZstdCodec | None = ...,
        level: int = ...,
        dictionary: _Dictionary = ...,
        keep_compressed: bool = ...,
    ) -> tuple[AtomicPipe, AtomicPipe]: ...
    @staticmethod
    def new(
        *,
        mixed_data_mode: bool = ...,
        compression: ZstdCodec | None = ...,
        level: int = ...,
        dictionary: _Dictionary = ...,
        keep_compressed: bool = ...,
    ) -> AtomicPipeEnds: ...
    @staticmethod
    def from_fd(
        mode: AtomicPipeMode,
        fd: int,
        *,
        dup: bool = False,
        pipe_only: bool = True,
        mixed_data_mode: bool = ...,
        compression: ZstdCodec | None = ...,
        level: int = ...,
        dictionary: _Dictionary = ...,
        keep_compressed: bool = ...,
    ) -> AtomicPipe: ...
    @staticmethod
    def from_file(
        file: HasFileno,
        mode: AtomicPipeMode | None = None,
        *,
        mixed_data_mode: bool = ...,
        compression: ZstdCodec | None = ...,
        level: int = ...,
        dictionary: _Dictionary = ...,
        keep_compressed: bool = ...,
    ) -> AtomicPipe: ...
    @staticmethod
    def read_fifo(
        path: _Path,
        *,
        read_write: bool = False,
        mixed_data_mode: bool = ...,
        compression: ZstdCodec | None = ...,
        level: int = ...,
        dictionary: _Dictionary = ...,
        keep_compressed: bool = ...,
    ) -> AtomicPipe: ...
    @staticmethod
    def write_fifo(
        path: _Path,
        *,
        mixed_data_mode: bool = ...,
        compression: ZstdCodec | None = ...,
        level: int = ...,
        dictionary: _Dictionary = ...,
        keep_compressed: bool = ...,
    ) -> AtomicPipe: ...
    def fileno(self) -> int: ...
    @property
    def mode(self) -> Literal["r", "w"]: ...
    @property
    def closed(self) -> bool: ...
    @property
    def is_reader(self) -> bool: ...
    @property
    def is_writer(self) -> bool: ...
    def clone_reader(self) -> AtomicPipe: ...
    def clone_writer(self) -> AtomicPipe: ...
    def write_message(self, data: ReadableBuffer) -> int: ...
    def write_messages(self, messages: Iterable[ReadableBuffer]) -> int: ...
    def write_burst(self, data: ReadableBuffer) -> int | None: ...
    def fits_in_burst(self, data: ReadableBuffer) -> int | None: ...
    @property
    def pending_output(self) -> int: ...
    def flush(self, timeout: float | None = None) -> bool: ...
    # With compression and keep_compressed, each message's bytes are a Decompressed.
    @overload
    def read_message(
        self, timeout: float | None = None, *, with_writer: Literal[False] = False
    ) -> bytes | None: ...
    @overload
    def read_message(
        self, timeout: float | None = None, *, with_writer: Literal[True]
    ) -> tuple[int, int, bytes] | None: ...
    @overload
    def read_messages(
        self, max: int = 1024, timeout: float | None = None, *, with_writer: Literal[False] = False
    ) -> list[bytes]: ...
    @overload
    def read_messages(
        self, max: int = 1024, timeout: float | None = None, *, with_writer: Literal[True]
    ) -> list[tuple[int, int, bytes]]: ...
    def __iter__(self) -> Iterator[bytes]: ...
    def __next__(self) -> bytes: ...
    def eof(self) -> bool: ...
    def fill_buffer(self, timeout: float | None = None) -> int: ...
    @property
    def read_size(self) -> int: ...
    @read_size.setter
    def read_size(self, n: int) -> None: ...
    def set_mixed_data_mode(self) -> None: ...
    @property
    def mixed_data_mode(self) -> bool: ...
    def get_line_burst_or_data(
        self, peek_line: bool = False, timeout: float | None = None
    ) -> tuple[MixedEvent | Literal["peek"], bytes] | tuple[None, None]: ...
    def set_compression(
        self,
        codec: ZstdCodec | None = "zstd",
        *,
        level: int | None = None,
        dictionary: _Dictionary = None,
        keep_compressed: bool | None = None,
    ) -> None: ...
    @property
    def compression(self) -> ZstdCodec | None: ...
    @property
    def compression_level(self) -> int | None: ...
    @compression_level.setter
    def compression_level(self, level: int | None) -> None: ...
    @property
    def compression_dictionary(self) -> bytes | None: ...
    @compression_dictionary.setter
    def compression_dictionary(self, dictionary: _Dictionary) -> None: ...
    @property
    def keep_compressed(self) -> bool: ...
    @keep_compressed.setter
    def keep_compressed(self, keep: bool) -> None: ...
    @property
    def blocking(self) -> bool: ...
    @blocking.setter
    def blocking(self, blocking: bool) -> None: ...
    @property
    def size(self) -> PipeSize: ...
    @property
    def max_size(self) -> PipeSize: ...
    def resize(self, size: int) -> int: ...
    def resize_or_max(self, size: int) -> int: ...
    def close(self) -> None: ...
    def __enter__(self) -> AtomicPipe: ...
    def __exit__(self, *_args: object) -> None: ...

@disjoint_base
class Decompressed(bytes):
    compressed: bytes

@final
class AtomicPipeEnds:
    def reader(self) -> AtomicPipe: ...
    def writer(self) -> AtomicPipe: ...
    def clone_reader(self) -> AtomicPipe: ...
    def clone_writer(self) -> AtomicPipe: ...
    @property
    def is_reader(self) -> bool: ...
    @property
    def is_writer(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> AtomicPipeEnds: ...
    def __exit__(self, *_args: object) -> None: ...
    def __getattr__(self, name: str) -> Any: ...
