"""fd-native syscalls: plain integer fds in, plain integer fds out.

Every function here is the native one from the Rust core (no Python wrapper in the way) except
the three ``stat`` calls, which wrap the kernel's fields in :class:`StatResult`.

* Every fd created here is close-on-exec from birth; pass ``cloexec=False`` to opt out.
* Kernel errors raise ``OSError`` subclasses with ``.errno`` set; misuse raises ``ValueError``
  or ``TypeError``. Calls that can block release the GIL and honour Ctrl-C.
* Addresses are spelled as in :mod:`socket`: ``(host, port)`` for IPv4,
  ``(host, port, flowinfo, scope_id)`` for IPv6, ``str``/``bytes`` paths for AF_UNIX (a
  leading NUL for the abstract namespace).
"""

from __future__ import annotations

import os as _os
import select as _select
import socket as _socket
from typing import Final, NamedTuple

from fdkit._fdkit import (
    accept,
    accept4,
    accept_many,
    bind,
    close,
    connect,
    dup,
    dup2,
    fcntl,
    get_blocking,
    get_cloexec,
    getpeername,
    getsockname,
    getsockopt,
    listen,
    lseek,
    mkdtemp,
    mkstemp,
    open,
    pipe,
    poll,
    pread,
    pwrite,
    read,
    readinto,
    recv,
    recv_into,
    send,
    sendfile,
    set_blocking,
    set_cloexec,
    setsockopt,
    shutdown,
    socket,
    socketpair,
    write,
)
from fdkit._fdkit import fstat as _fstat
from fdkit._fdkit import lstat as _lstat
from fdkit._fdkit import stat as _stat

# The constants callers pass, re-exported so `from fdkit import fd` is enough. `Final` keeps
# their literal types: `socket(AF_INET)` is then known to give an IPv4 socket (see the stub).
AF_INET: Final = _socket.AF_INET
AF_INET6: Final = _socket.AF_INET6
AF_UNIX: Final = _socket.AF_UNIX
SOCK_STREAM: Final = _socket.SOCK_STREAM
SOCK_DGRAM: Final = _socket.SOCK_DGRAM
SOCK_NONBLOCK: Final = _socket.SOCK_NONBLOCK
SOCK_CLOEXEC: Final = _socket.SOCK_CLOEXEC
NONBLOCK: Final = SOCK_NONBLOCK
CLOEXEC: Final = SOCK_CLOEXEC
SOL_SOCKET: Final = _socket.SOL_SOCKET
SO_REUSEADDR: Final = _socket.SO_REUSEADDR
SO_REUSEPORT: Final = _socket.SO_REUSEPORT
SHUT_RD: Final = _socket.SHUT_RD
SHUT_WR: Final = _socket.SHUT_WR
SHUT_RDWR: Final = _socket.SHUT_RDWR
O_RDONLY: Final = _os.O_RDONLY
O_WRONLY: Final = _os.O_WRONLY
O_RDWR: Final = _os.O_RDWR
O_CREAT: Final = _os.O_CREAT
O_EXCL: Final = _os.O_EXCL
O_TRUNC: Final = _os.O_TRUNC
O_APPEND: Final = _os.O_APPEND
O_NONBLOCK: Final = _os.O_NONBLOCK
O_CLOEXEC: Final = _os.O_CLOEXEC
POLLIN: Final = _select.POLLIN
POLLOUT: Final = _select.POLLOUT
POLLERR: Final = _select.POLLERR
POLLHUP: Final = _select.POLLHUP


class StatResult(NamedTuple):
    """What ``stat``/``fstat``/``lstat`` report, every field at the kernel's full width.

    Times are integer nanoseconds since the epoch (no float rounding).
    """

    st_dev: int
    st_ino: int
    st_mode: int
    st_nlink: int
    st_uid: int
    st_gid: int
    st_rdev: int
    st_size: int
    st_blksize: int
    st_blocks: int
    st_atime_ns: int
    st_mtime_ns: int
    st_ctime_ns: int


def stat(path: str | bytes | _os.PathLike[str] | _os.PathLike[bytes]) -> StatResult:
    """``stat(2)``: describe the file at ``path``, following symlinks."""
    return StatResult._make(_stat(path))


def lstat(path: str | bytes | _os.PathLike[str] | _os.PathLike[bytes]) -> StatResult:
    """``lstat(2)``: describe a symlink itself rather than its target."""
    return StatResult._make(_lstat(path))


def fstat(fd: int) -> StatResult:
    """``fstat(2)``: describe the open file ``fd``."""
    return StatResult._make(_fstat(fd))


__all__ = [
    "AF_INET",
    "AF_INET6",
    "AF_UNIX",
    "CLOEXEC",
    "NONBLOCK",
    "O_APPEND",
    "O_CLOEXEC",
    "O_CREAT",
    "O_EXCL",
    "O_NONBLOCK",
    "O_RDONLY",
    "O_RDWR",
    "O_TRUNC",
    "O_WRONLY",
    "POLLERR",
    "POLLHUP",
    "POLLIN",
    "POLLOUT",
    "SHUT_RD",
    "SHUT_RDWR",
    "SHUT_WR",
    "SOCK_CLOEXEC",
    "SOCK_DGRAM",
    "SOCK_NONBLOCK",
    "SOCK_STREAM",
    "SOL_SOCKET",
    "SO_REUSEADDR",
    "SO_REUSEPORT",
    "StatResult",
    "accept",
    "accept4",
    "accept_many",
    "bind",
    "close",
    "connect",
    "dup",
    "dup2",
    "fcntl",
    "fstat",
    "get_blocking",
    "get_cloexec",
    "getpeername",
    "getsockname",
    "getsockopt",
    "listen",
    "lseek",
    "lstat",
    "mkdtemp",
    "mkstemp",
    "open",
    "pipe",
    "poll",
    "pread",
    "pwrite",
    "read",
    "readinto",
    "recv",
    "recv_into",
    "send",
    "sendfile",
    "set_blocking",
    "set_cloexec",
    "setsockopt",
    "shutdown",
    "socket",
    "socketpair",
    "stat",
    "write",
]
