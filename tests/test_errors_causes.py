"""What an error of fdkit says: a kernel error from ``fdkit.fd`` is the Python subclass for its
errno, with that errno and its strerror (EBADF, filesystem errors, EAGAIN, sockets), and a value
out of range or of the wrong type, or a closed object, is refused with a message that names the
real cause (the limit, the type given, "closed"), never a misleading one such as "not an int"
for an int too large.

That ``fdkit.fd`` refuses every bad fd, count, buffer, option, address or path, and random
arguments, with ValueError or TypeError and never crashes is in
``tests/test_errors_bad_arguments.py``.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import socket
import struct
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from fdkit import fd
from fdkit.types import InetAddress
from helpers import CALLS_ON_AN_FD, Fds, is_open


def raises_errno(exc_type: type[OSError], code: int, call: Callable[[], object]) -> OSError:
    """Asserts ``call`` raises exactly ``exc_type`` with ``errno == code``."""
    with pytest.raises(OSError, match=r"^\[Errno \d+\] ") as info:
        call()
    e = info.value
    assert type(e) is exc_type, f"{type(e).__name__} {e!r}, wanted {exc_type.__name__}"
    got = errno.errorcode.get(e.errno) if e.errno is not None else None
    assert e.errno == code, f"errno {got}, wanted {errno.errorcode[code]}"
    assert e.strerror == os.strerror(code)
    return e


# ---------------------------------------------------------------------------------------------
# EBADF


@pytest.fixture
def closed_fd() -> int:
    """A number that was an fd a moment ago (a pipe's read end, closed again)."""
    r, w = fd.pipe()
    fd.close(r)
    fd.close(w)
    assert not is_open(r)
    return r


EBADF_CALLS: dict[str, Callable[[int], object]] = {
    **CALLS_ON_AN_FD,
    "dup2": lambda n: fd.dup2(n, n),
    "set_blocking": lambda n: fd.set_blocking(n, False),
    "shutdown": lambda n: fd.shutdown(n, fd.SHUT_RDWR),
    "getsockopt": lambda n: fd.getsockopt(n, socket.SOL_SOCKET, socket.SO_TYPE),
    "getsockopt_bytes": lambda n: fd.getsockopt(n, socket.SOL_SOCKET, socket.SO_LINGER, 8),
    "setsockopt": lambda n: fd.setsockopt(n, socket.SOL_SOCKET, socket.SO_REUSEADDR, 1),
    "sendfile_out": lambda n: fd.sendfile(n, 0, 0, 1),
    "sendfile_in": lambda n: fd.sendfile(1, n, 0, 1),
}


@pytest.mark.parametrize("name", sorted(EBADF_CALLS))
def test_ebadf_on_closed_fd(name: str, closed_fd: int) -> None:
    raises_errno(OSError, errno.EBADF, lambda: EBADF_CALLS[name](closed_fd))
    assert not is_open(closed_fd)


def test_ebadf_dup2_target_beyond_limit(fds: Fds) -> None:
    r, _ = fds.pipe()
    raises_errno(OSError, errno.EBADF, lambda: fd.dup2(r, 2**31 - 1))


def test_poll_closed_fd_is_nval_not_error(closed_fd: int) -> None:
    assert fd.poll([(closed_fd, select.POLLIN)], 0) == [(closed_fd, select.POLLNVAL)]


def test_ebadf_wrong_direction(fds: Fds) -> None:
    r, w = fds.pipe()
    raises_errno(OSError, errno.EBADF, lambda: fd.write(r, b"x"))
    raises_errno(OSError, errno.EBADF, lambda: fd.read(w, 1))


# ---------------------------------------------------------------------------------------------
# Filesystem errors


def test_enoent_file_not_found(tmp_path: Path, fds: Fds) -> None:
    missing = tmp_path / "missing"
    raises_errno(FileNotFoundError, errno.ENOENT, lambda: fd.open(missing, fd.O_RDONLY))
    raises_errno(FileNotFoundError, errno.ENOENT, lambda: fd.stat(missing))
    raises_errno(FileNotFoundError, errno.ENOENT, lambda: fd.lstat(str(missing)))
    raises_errno(FileNotFoundError, errno.ENOENT, lambda: fd.mkstemp(dir=missing))
    raises_errno(FileNotFoundError, errno.ENOENT, lambda: fd.mkdtemp(dir=missing))
    s = fds.sock(socket.AF_UNIX)
    raises_errno(FileNotFoundError, errno.ENOENT, lambda: fd.connect(s, str(missing)))


def test_eexist_file_exists(tmp_file: Callable[[bytes], Path]) -> None:
    p = tmp_file(b"")
    raises_errno(
        FileExistsError, errno.EEXIST, lambda: fd.open(p, fd.O_WRONLY | fd.O_CREAT | fd.O_EXCL)
    )


def test_eisdir_enotdir(tmp_path: Path, tmp_file: Callable[[bytes], Path]) -> None:
    raises_errno(IsADirectoryError, errno.EISDIR, lambda: fd.open(tmp_path, fd.O_WRONLY))
    f = tmp_file(b"")
    raises_errno(NotADirectoryError, errno.ENOTDIR, lambda: fd.stat(f / "x"))
    raises_errno(NotADirectoryError, errno.ENOTDIR, lambda: fd.mkstemp(dir=f))


def test_eacces_permission(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root bypasses file permissions")
    p = tmp_path / "locked"
    p.write_bytes(b"")
    p.chmod(0)
    raises_errno(PermissionError, errno.EACCES, lambda: fd.open(p, fd.O_RDONLY))


def test_mkstemp_separator_in_prefix_is_einval(tmp_path: Path) -> None:
    raises_errno(OSError, errno.EINVAL, lambda: fd.mkstemp(prefix="a/b", dir=tmp_path))
    raises_errno(OSError, errno.EINVAL, lambda: fd.mkdtemp(suffix="/..", dir=tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_espipe_on_pipe(fds: Fds) -> None:
    r, w = fds.pipe()
    raises_errno(OSError, errno.ESPIPE, lambda: fd.lseek(r, 0))
    raises_errno(OSError, errno.ESPIPE, lambda: fd.pread(r, 1, 0))
    raises_errno(OSError, errno.ESPIPE, lambda: fd.pwrite(w, b"x", 0))


def test_einval_negative_seek(fds: Fds, tmp_file: Callable[[bytes], Path]) -> None:
    n = fds.own(fd.open(tmp_file(b"abc"), fd.O_RDONLY))
    raises_errno(OSError, errno.EINVAL, lambda: fd.lseek(n, -1))
    raises_errno(OSError, errno.EINVAL, lambda: fd.lseek(n, -10, os.SEEK_CUR))
    assert fd.lseek(n, 0, os.SEEK_CUR) == 0


# ---------------------------------------------------------------------------------------------
# EAGAIN


def test_eagain_empty_nonblocking_pipe(fds: Fds) -> None:
    r, _ = fds.pipe(os.O_NONBLOCK)
    raises_errno(BlockingIOError, errno.EAGAIN, lambda: fd.read(r, 10))
    raises_errno(BlockingIOError, errno.EAGAIN, lambda: fd.readinto(r, bytearray(10)))


def test_eagain_full_nonblocking_pipe(fds: Fds) -> None:
    _, w = fds.pipe(os.O_NONBLOCK)
    size = fd.fcntl(w, fcntl.F_GETPIPE_SZ)
    assert fd.write(w, bytes(size)) == size
    raises_errno(BlockingIOError, errno.EAGAIN, lambda: fd.write(w, b"x"))


def test_eagain_nonblocking_socket(fds: Fds) -> None:
    a, _ = fd.socketpair(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
    fds.own(a, _)
    raises_errno(BlockingIOError, errno.EAGAIN, lambda: fd.recv(a, 10))
    raises_errno(BlockingIOError, errno.EAGAIN, lambda: fd.recv_into(a, bytearray(4)))


def test_eagain_recv_dontwait_on_blocking_socket(tcp_pair: tuple[int, int]) -> None:
    c, _ = tcp_pair
    raises_errno(BlockingIOError, errno.EAGAIN, lambda: fd.recv(c, 10, socket.MSG_DONTWAIT))


def test_eagain_accept_nonblocking_listener(nb_listener: tuple[int, InetAddress]) -> None:
    lfd, _ = nb_listener
    raises_errno(BlockingIOError, errno.EAGAIN, lambda: fd.accept(lfd))
    raises_errno(BlockingIOError, errno.EAGAIN, lambda: fd.accept4(lfd, fd.NONBLOCK))


def test_einprogress_nonblocking_connect(fds: Fds, listener: tuple[int, InetAddress]) -> None:
    _, addr = listener
    c = fds.sock(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
    # Loopback may complete at once; when it does not, it is EINPROGRESS as BlockingIOError.
    try:
        fd.connect(c, addr)
    # PT017: the call may succeed (no exception to expect), so no pytest.raises.
    except BlockingIOError as e:
        assert e.errno == errno.EINPROGRESS  # noqa: PT017
    assert fd.poll([(c, fd.POLLOUT)], 5) == [(c, fd.POLLOUT)]


# ---------------------------------------------------------------------------------------------
# Sockets


def _refusing_port(fds: Fds) -> tuple[str, int]:
    """A loopback port that is bound but not listening: connecting to it is refused."""
    s = fds.sock()
    fd.bind(s, ("127.0.0.1", 0))
    addr = fd.getsockname(s)
    assert isinstance(addr, tuple)
    assert len(addr) == 2
    return addr


def test_econnrefused(fds: Fds) -> None:
    addr = _refusing_port(fds)
    c = fds.sock()
    raises_errno(ConnectionRefusedError, errno.ECONNREFUSED, lambda: fd.connect(c, addr))


def test_econnrefused_unix(fds: Fds, tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    s = fds.sock(socket.AF_UNIX)
    fd.bind(s, path)  # bound, never listening
    c = fds.sock(socket.AF_UNIX)
    raises_errno(ConnectionRefusedError, errno.ECONNREFUSED, lambda: fd.connect(c, path))


def test_epipe_send_to_closed_peer(fds: Fds) -> None:
    a, b = fd.socketpair()
    fds.own(a, b)
    fds.close(b)
    raises_errno(BrokenPipeError, errno.EPIPE, lambda: fd.send(a, b"x"))


def test_epipe_after_own_shutdown(tcp_pair: tuple[int, int]) -> None:
    c, _ = tcp_pair
    fd.shutdown(c, fd.SHUT_WR)
    raises_errno(BrokenPipeError, errno.EPIPE, lambda: fd.send(c, b"x"))


def test_epipe_write_to_pipe_without_reader(fds: Fds) -> None:
    # Python ignores SIGPIPE, so write gives EPIPE like os.write.
    r, w = fds.pipe()
    fds.close(r)
    raises_errno(BrokenPipeError, errno.EPIPE, lambda: fd.write(w, b"x"))


def test_epipe_sendfile_to_closed_peer(fds: Fds, tmp_file: Callable[[bytes], Path]) -> None:
    a, b = fd.socketpair()
    fds.own(a, b)
    fds.close(b)
    f = fds.own(fd.open(tmp_file(b"data"), fd.O_RDONLY))
    raises_errno(BrokenPipeError, errno.EPIPE, lambda: fd.sendfile(a, f))


SIGPIPE_CHILD = r"""
import signal, time
from fdkit import fd
signal.signal(signal.SIGPIPE, signal.SIG_DFL)   # a process that did not ignore SIGPIPE
a, b = fd.socketpair()
fd.close(b)
try:
    fd.send(a, b"x")
except BrokenPipeError as e:
    print("unix", e.errno, flush=True)
l = fd.socket(); fd.bind(l, ("127.0.0.1", 0)); fd.listen(l)
c = fd.socket(); fd.connect(c, fd.getsockname(l))
s, _ = fd.accept(l)
fd.close(s)
last = None
for _ in range(200):        # the first sends may go out before the peer's RST comes back
    try:
        fd.send(c, b"x" * 10)
    except (BrokenPipeError, ConnectionResetError) as e:
        last = e
        if isinstance(e, BrokenPipeError):
            break
    time.sleep(0.005)
print("tcp", type(last).__name__, flush=True)
for n in (a, l, c):
    fd.close(n)
print("alive", flush=True)
"""


def test_send_never_raises_sigpipe() -> None:
    """send() uses MSG_NOSIGNAL: a process with SIGPIPE at its default action survives."""
    out = subprocess.run(
        [sys.executable, "-c", SIGPIPE_CHILD], capture_output=True, text=True, timeout=20
    )
    assert out.returncode == 0, (out.returncode, out.stderr)
    lines = out.stdout.splitlines()
    assert lines[0] == f"unix {errno.EPIPE}"
    assert lines[1] == "tcp BrokenPipeError"
    assert lines[2] == "alive"


def test_eaddrinuse(fds: Fds, listener: tuple[int, InetAddress]) -> None:
    _, addr = listener
    s = fds.sock()
    raises_errno(OSError, errno.EADDRINUSE, lambda: fd.bind(s, addr))


def test_eaddrinuse_unix_path(fds: Fds, tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    fd.bind(fds.sock(socket.AF_UNIX), path)
    raises_errno(OSError, errno.EADDRINUSE, lambda: fd.bind(fds.sock(socket.AF_UNIX), path))


def test_eaddrinuse_abstract(fds: Fds) -> None:
    name = f"\0fdkit-err-{uuid.uuid4().hex}"
    fd.bind(fds.sock(socket.AF_UNIX), name)
    raises_errno(OSError, errno.EADDRINUSE, lambda: fd.bind(fds.sock(socket.AF_UNIX), name))


SOCKET_CALLS_ON_NON_SOCKET: dict[str, Callable[[int], object]] = {
    "listen": fd.listen,
    "accept": fd.accept,
    "accept4": fd.accept4,
    "bind": lambda n: fd.bind(n, ("127.0.0.1", 0)),
    "connect": lambda n: fd.connect(n, ("127.0.0.1", 9)),
    "shutdown": lambda n: fd.shutdown(n, fd.SHUT_RDWR),
    "getsockname": fd.getsockname,
    "getpeername": fd.getpeername,
    "getsockopt": lambda n: fd.getsockopt(n, socket.SOL_SOCKET, socket.SO_TYPE),
    "setsockopt": lambda n: fd.setsockopt(n, socket.SOL_SOCKET, socket.SO_REUSEADDR, 1),
    "recv": lambda n: fd.recv(n, 1),
    "recv_into": lambda n: fd.recv_into(n, bytearray(1)),
    "send": lambda n: fd.send(n, b"x"),
}


@pytest.mark.parametrize("name", sorted(SOCKET_CALLS_ON_NON_SOCKET))
@pytest.mark.parametrize("kind", ["pipe", "file"])
def test_enotsock(fds: Fds, tmp_file: Callable[[bytes], Path], name: str, kind: str) -> None:
    if kind == "pipe":
        n, _ = fds.pipe()
    else:
        n = fds.own(fd.open(tmp_file(b"x"), fd.O_RDWR))
    raises_errno(OSError, errno.ENOTSOCK, lambda: SOCKET_CALLS_ON_NON_SOCKET[name](n))


def test_accept_many_on_non_socket(fds: Fds) -> None:
    r, _ = fds.pipe(os.O_NONBLOCK)
    raises_errno(OSError, errno.ENOTSOCK, lambda: fd.accept_many(r))


def test_einval_socket_state(fds: Fds) -> None:
    s = fds.sock()
    raises_errno(OSError, errno.EINVAL, lambda: fd.accept(s))  # not listening
    fd.bind(s, ("127.0.0.1", 0))
    raises_errno(OSError, errno.EINVAL, lambda: fd.bind(s, ("127.0.0.1", 0)))  # bound twice
    raises_errno(OSError, errno.EINVAL, lambda: fd.accept4(s, 0x7FFF0000))  # unknown flags
    raises_errno(OSError, errno.EINVAL, lambda: fd.socket(socket.AF_INET, 99))
    raises_errno(OSError, errno.EINVAL, lambda: fd.pipe(0x4))
    u = fds.sock(socket.AF_INET, socket.SOCK_DGRAM)
    raises_errno(OSError, errno.EOPNOTSUPP, lambda: fd.listen(u))


def test_enotconn(fds: Fds) -> None:
    s = fds.sock()
    raises_errno(OSError, errno.ENOTCONN, lambda: fd.getpeername(s))
    raises_errno(OSError, errno.ENOTCONN, lambda: fd.recv(s, 1))
    raises_errno(OSError, errno.ENOTCONN, lambda: fd.shutdown(s, fd.SHUT_RD))


def test_eafnosupport(fds: Fds) -> None:
    raises_errno(OSError, errno.EAFNOSUPPORT, lambda: fd.socket(255))
    raises_errno(OSError, errno.EOPNOTSUPP, lambda: fd.socketpair(socket.AF_INET))
    s = fds.sock()
    raises_errno(OSError, errno.EAFNOSUPPORT, lambda: fd.connect(s, ("::1", 1)))


def test_enoprotoopt(fds: Fds) -> None:
    s = fds.sock()
    raises_errno(OSError, errno.ENOPROTOOPT, lambda: fd.getsockopt(s, socket.SOL_SOCKET, 9999))
    raises_errno(OSError, errno.ENOPROTOOPT, lambda: fd.setsockopt(s, socket.SOL_SOCKET, 9999, 1))


def test_econnreset_after_rst(fds: Fds) -> None:
    c, s = fds.connected()
    fd.setsockopt(c, socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    fds.close(c)
    raises_errno(ConnectionResetError, errno.ECONNRESET, lambda: fd.recv(s, 10))


# ---------------------------------------------------------------------------------------------
# Range errors say the real cause (an OverflowError is not "not int")


@pytest.mark.parametrize("level", [2**63, 2**100, -(2**63) - 1, -(2**100)], ids=str)
def test_zstd_level_too_large_for_a_c_int_is_out_of_range_not_a_type_error(level: int) -> None:
    from fdkit.atomic_pipe import AtomicPipe

    with pytest.raises(ValueError, match=rf"zstd level {level} is out of range \(-131072..=22\)"):
        AtomicPipe.pair(compression="zstd", level=level)
    r, w = AtomicPipe.pair()
    with r, w, pytest.raises(ValueError, match=f"zstd level {level} is out of range"):
        w.set_compression("zstd", level=level)


@pytest.mark.parametrize(("level", "name"), [("3", "str"), (1.5, "float"), ([], "list")])
def test_zstd_level_of_the_wrong_type_names_the_type(level: object, name: str) -> None:
    from fdkit.atomic_pipe import AtomicPipe

    with pytest.raises(TypeError, match=f"level must be an int, not {name}"):
        AtomicPipe.pair(compression="zstd", level=level)  # type: ignore[arg-type]  # misuse on purpose


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1e300, r"idle_timeout is too large: 1e\+300 seconds \(the limit is 9223372036 seconds"),
        (float("inf"), r"idle_timeout is too large: inf seconds \(the limit is 9223372036"),
        (9223372037.0, r"idle_timeout is too large: 9223372037.0 seconds"),
        (float("nan"), r"idle_timeout must be a number of seconds, got nan"),
        (-1.0, r"idle_timeout must be > 0 seconds, got -1.0"),
        (0.0, r"idle_timeout must be > 0 seconds, got 0.0"),
    ],
    ids=str,
)
def test_serve_idle_timeout_says_the_real_cause(tmp_path: Path, value: float, message: str) -> None:
    from fdkit._fdkit import serve_static

    with pytest.raises(ValueError, match=message):
        serve_static(str(tmp_path), port=0, idle_timeout=value)


@pytest.mark.parametrize(("value", "name"), [("30", "str"), (None, "NoneType"), ([], "list")])
def test_serve_idle_timeout_of_the_wrong_type_names_the_type(
    tmp_path: Path, value: object, name: str
) -> None:
    from fdkit._fdkit import serve_static

    with pytest.raises(TypeError, match=f"idle_timeout must be a number of seconds .*, not {name}"):
        serve_static(str(tmp_path), port=0, idle_timeout=value)  # type: ignore[arg-type]  # misuse on purpose


def test_serve_idle_timeout_int_too_large_for_a_float_is_too_large(tmp_path: Path) -> None:
    from fdkit._fdkit import serve_static

    with pytest.raises(ValueError, match=r"idle_timeout is too large: 1000000000.* \(the limit"):
        serve_static(str(tmp_path), port=0, idle_timeout=10**400)
    # ints are seconds too: the limit itself is allowed (the bind then fails on the dir)
    with pytest.raises(FileNotFoundError):
        serve_static(str(tmp_path / "nope"), port=0, idle_timeout=9223372036)


def test_poll_events_of_the_wrong_type_is_a_type_error(fds: Fds) -> None:
    r, _ = fds.pipe()
    with pytest.raises(TypeError, match=r"poll\(\) events must be an int, not str"):
        fd.poll([(r, "1")], 0)  # type: ignore[list-item]  # misuse on purpose
    with pytest.raises(ValueError, match=r"poll\(\) events must be in 0\.\.=65535, got 65536"):
        fd.poll([(r, 65536)], 0)


@pytest.mark.parametrize("what", ["idle_timeout", "connect_timeout"])
@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1e300, r"is too large: 1e\+300 seconds \(the limit is 9223372036 seconds"),
        (float("nan"), r"must be a number of seconds, got nan"),
        (0.0, r"must be > 0 seconds, got 0.0"),
    ],
    ids=str,
)
def test_serve_proxy_timeouts_say_the_real_cause(what: str, value: float, message: str) -> None:
    from fdkit._fdkit import serve_proxy

    with pytest.raises(ValueError, match=what + " " + message):
        serve_proxy("127.0.0.1:0", "127.0.0.1:1", **{what: value})  # type: ignore[arg-type]  # `what` names a float option


@pytest.mark.parametrize("port", [-1, 65536, 10**30])
def test_a_port_is_checked_one_way_wherever_it_is_given(tmp_path: Path, port: int) -> None:
    """serve_static's port and an address tuple's port: one check, one message."""
    from fdkit._fdkit import serve_static

    message = rf"port must be 0\.\.=65535, got {port}"
    with pytest.raises(ValueError, match=message):
        serve_static(str(tmp_path), port=port)
    s = fd.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with pytest.raises(ValueError, match=message):
            fd.bind(s, ("127.0.0.1", port))
        with pytest.raises(TypeError, match="port must be an int, not str"):
            fd.bind(s, ("127.0.0.1", "80"))  # type: ignore[arg-type]  # misuse on purpose
    finally:
        fd.close(s)


def test_a_closed_reactor_says_so_as_every_closed_object_does() -> None:
    from fdkit import uring
    from fdkit._fdkit import Reactor

    ok, reason = uring.available()
    if not ok:
        pytest.skip(f"io_uring unavailable: {reason}")
    reactor = Reactor()
    reactor.close()
    for call in (lambda: reactor.wait(0, 0), reactor.in_flight, reactor.fileno):
        with pytest.raises(ValueError, match="I/O operation on a closed Reactor"):
            call()
    reactor.close()  # idempotent
    assert reactor.closed
