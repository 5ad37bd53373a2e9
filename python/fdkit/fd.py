"""fd-native syscalls: plain integer fds in, plain integer fds out.

Every function here is the native one from the Rust core (no Python wrapper in the way) except
the three ``stat`` calls, which wrap the kernel's fields in :class:`StatResult`, and
``fcntl``, which gives record locks as :class:`Lock`.

* Every fd created here is close-on-exec from birth (``socket``, ``socketpair``, ``accept``,
  ``accept4``, ``accept_many``, ``open``, ``pipe``, ``dup``, ``mkstemp``, and the fds
  ``recv_fds``/``recvmsg`` receive, with ``MSG_CMSG_CLOEXEC``); pass ``cloexec=False`` to opt
  out. ``dup2`` follows ``os.dup2`` instead: inheritable unless ``cloexec=True``.
* Kernel errors raise ``OSError`` subclasses with ``.errno`` set; misuse raises ``ValueError``
  or ``TypeError``. Calls that can block release the GIL and honour Ctrl-C.
* Addresses are spelled as in :mod:`socket`: ``(host, port)`` for IPv4,
  ``(host, port, flowinfo, scope_id)`` for IPv6, ``str``/``bytes`` paths for AF_UNIX (a
  leading NUL for the abstract namespace).
"""

from __future__ import annotations

import fcntl as _fcntl_mod
import os as _os
import select as _select
import socket as _socket
import termios as _termios
from typing import Final, NamedTuple, overload

from fdkit._fdkit import (
    accept,
    accept4,
    accept_many,
    bind,
    close,
    connect,
    dup,
    dup2,
    get_blocking,
    get_cloexec,
    getpeername,
    getsockname,
    getsockopt,
    ioctl,
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
    recv_fds,
    recv_into,
    recvfrom,
    recvfrom_into,
    recvmsg,
    send,
    send_fds,
    sendfile,
    sendmsg,
    sendto,
    set_blocking,
    set_cloexec,
    setsockopt,
    shutdown,
    socket,
    socketpair,
    splice,
    tee,
    write,
)
from fdkit._fdkit import fcntl as _fcntl
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
POLLPRI: Final = _select.POLLPRI
POLLRDHUP: Final = _select.POLLRDHUP
POLLNVAL: Final = _select.POLLNVAL
SEEK_SET: Final = _os.SEEK_SET
SEEK_CUR: Final = _os.SEEK_CUR
SEEK_END: Final = _os.SEEK_END
SEEK_DATA: Final = _os.SEEK_DATA
SEEK_HOLE: Final = _os.SEEK_HOLE
SOCK_SEQPACKET: Final = _socket.SOCK_SEQPACKET
SOL_TCP: Final = _socket.SOL_TCP
SCM_RIGHTS: Final = _socket.SCM_RIGHTS
MSG_PEEK: Final = _socket.MSG_PEEK
MSG_TRUNC: Final = _socket.MSG_TRUNC
MSG_CTRUNC: Final = _socket.MSG_CTRUNC
MSG_DONTWAIT: Final = _socket.MSG_DONTWAIT
MSG_CMSG_CLOEXEC: Final = _socket.MSG_CMSG_CLOEXEC
# splice(2)/tee(2) flags, as the Python `splice` module names them.
SPLICE_F_MOVE: Final = 1
SPLICE_F_NONBLOCK: Final = 2
SPLICE_F_MORE: Final = 4
SPLICE_F_GIFT: Final = 8
# fcntl(2) record locks: the commands and the lock types.
F_GETLK: Final = _fcntl_mod.F_GETLK
F_SETLK: Final = _fcntl_mod.F_SETLK
F_SETLKW: Final = _fcntl_mod.F_SETLKW
F_OFD_GETLK: Final = _fcntl_mod.F_OFD_GETLK
F_OFD_SETLK: Final = _fcntl_mod.F_OFD_SETLK
F_OFD_SETLKW: Final = _fcntl_mod.F_OFD_SETLKW
F_RDLCK: Final = _fcntl_mod.F_RDLCK
F_WRLCK: Final = _fcntl_mod.F_WRLCK
F_UNLCK: Final = _fcntl_mod.F_UNLCK
# ioctl(2) requests with an int argument (see `ioctl`); the socket names are the tty ones.
FIONREAD: Final = _termios.FIONREAD
SIOCINQ: Final = _termios.FIONREAD
TIOCOUTQ: Final = _termios.TIOCOUTQ
SIOCOUTQ: Final = _termios.TIOCOUTQ
SIOCOUTQNSD: Final = 0x894B  # <linux/sockios.h>, the same on every architecture
FIONBIO: Final = _termios.FIONBIO
FIOCLEX: Final = _termios.FIOCLEX
FIONCLEX: Final = _termios.FIONCLEX


class Lock(NamedTuple):
    """A ``struct flock``: the record lock ``fcntl``'s lock commands take and return.

    ``type`` is ``F_RDLCK``, ``F_WRLCK`` or ``F_UNLCK``; ``start`` counts from ``whence``
    (``SEEK_SET``/``SEEK_CUR``/``SEEK_END``); ``len`` 0 means to the end of the file, however
    far it grows. ``pid`` is what ``F_GETLK`` reports about the holder (-1 for an OFD lock);
    leave it 0 when setting a lock.
    """

    type: int
    whence: int = _os.SEEK_SET
    start: int = 0
    len: int = 0
    pid: int = 0


@overload
def fcntl(fd: int, cmd: int, arg: int = 0) -> int: ...
@overload
def fcntl(fd: int, cmd: int, arg: Lock | tuple[int, int, int, int, int]) -> Lock: ...
def fcntl(fd: int, cmd: int, arg: int | Lock | tuple[int, int, int, int, int] = 0) -> int | Lock:
    """``fcntl(2)``: the int commands (``F_GETFL``, ``F_SETPIPE_SZ``, …) return an int; the
    record-lock commands (``F_GETLK``, ``F_SETLK``, ``F_SETLKW``, ``F_OFD_*``) take a
    :class:`Lock` and return it as the kernel left it (for the ``GETLK`` forms, the lock in
    the way, or ``type=F_UNLCK`` when none is). ``F_SETLKW`` waits with the GIL released.
    Other pointer-taking commands raise ``ValueError``."""
    got = _fcntl(fd, cmd, arg)
    if isinstance(got, tuple):
        return Lock._make(got)
    return got


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
    "FIOCLEX",
    "FIONBIO",
    "FIONCLEX",
    "FIONREAD",
    "F_GETLK",
    "F_OFD_GETLK",
    "F_OFD_SETLK",
    "F_OFD_SETLKW",
    "F_RDLCK",
    "F_SETLK",
    "F_SETLKW",
    "F_UNLCK",
    "F_WRLCK",
    "MSG_CMSG_CLOEXEC",
    "MSG_CTRUNC",
    "MSG_DONTWAIT",
    "MSG_PEEK",
    "MSG_TRUNC",
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
    "POLLNVAL",
    "POLLOUT",
    "POLLPRI",
    "POLLRDHUP",
    "SCM_RIGHTS",
    "SEEK_CUR",
    "SEEK_DATA",
    "SEEK_END",
    "SEEK_HOLE",
    "SEEK_SET",
    "SHUT_RD",
    "SHUT_RDWR",
    "SHUT_WR",
    "SIOCINQ",
    "SIOCOUTQ",
    "SIOCOUTQNSD",
    "SOCK_CLOEXEC",
    "SOCK_DGRAM",
    "SOCK_NONBLOCK",
    "SOCK_SEQPACKET",
    "SOCK_STREAM",
    "SOL_SOCKET",
    "SOL_TCP",
    "SO_REUSEADDR",
    "SO_REUSEPORT",
    "SPLICE_F_GIFT",
    "SPLICE_F_MORE",
    "SPLICE_F_MOVE",
    "SPLICE_F_NONBLOCK",
    "TIOCOUTQ",
    "Lock",
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
    "ioctl",
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
    "recv_fds",
    "recv_into",
    "recvfrom",
    "recvfrom_into",
    "recvmsg",
    "send",
    "send_fds",
    "sendfile",
    "sendmsg",
    "sendto",
    "set_blocking",
    "set_cloexec",
    "setsockopt",
    "shutdown",
    "socket",
    "socketpair",
    "splice",
    "stat",
    "tee",
    "write",
]
