"""Bad arguments to ``fdkit.fd`` are refused with ``ValueError`` or ``TypeError``, never a crash,
a hang or another exception: fds out of range or not ints, counts, buffers, option values,
addresses and paths from fixed tables, then random arguments of every kind (hypothesis), which
may raise only ValueError, TypeError or OSError (EBADF for an fd number that is not open).

Kernel errors (the errno and the Python subclass), and the messages that must name the real
cause of a refusal, are in ``tests/test_errors_causes.py``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fdkit import fd
from helpers import CALLS_ON_AN_FD, Fds

# ---------------------------------------------------------------------------------------------
# Bad arguments: fds

FD_CALLS: dict[str, Callable[[Any], object]] = {
    **CALLS_ON_AN_FD,
    "dup2_src": lambda n: fd.dup2(n, 2**31 - 1),
    "dup2_dst": lambda n: fd.dup2(0, n),
    "set_blocking": lambda n: fd.set_blocking(n, True),
    "shutdown": lambda n: fd.shutdown(n, 0),
    "getsockopt": lambda n: fd.getsockopt(n, 1, 1),
    "setsockopt": lambda n: fd.setsockopt(n, 1, 2, 1),
    "sendfile_out": lambda n: fd.sendfile(n, 2**31 - 1),
    "sendfile_in": lambda n: fd.sendfile(2**31 - 1, n),
    "poll": lambda n: fd.poll([(n, select.POLLIN)], 0),
}


@pytest.mark.parametrize("name", sorted(FD_CALLS))
@pytest.mark.parametrize("bad", [-1, -(2**31), 2**31, 2**40, 2**63, 2**64, 2**100, -(2**100)])
def test_out_of_range_fd_is_value_error(name: str, bad: int) -> None:
    with pytest.raises(ValueError, match=r"fd must be a non-negative int|fd out of range"):
        FD_CALLS[name](bad)


@pytest.mark.parametrize("name", sorted(FD_CALLS))
@pytest.mark.parametrize(
    "bad",
    ["3", 3.0, None, b"3", [3], object()],
    ids=["str", "float", "None", "bytes", "list", "object"],
)
def test_non_int_fd_is_type_error(name: str, bad: object) -> None:
    with pytest.raises(TypeError):
        FD_CALLS[name](bad)


def test_fd_accepts_index_objects(fds: Fds) -> None:
    class Idx:
        def __init__(self, n: int) -> None:
            self.n = n

        def __index__(self) -> int:
            return self.n

    r, w = fds.pipe()
    fd.write(Idx(w), b"i")  # type: ignore[arg-type]  # an __index__ object on purpose
    assert fd.read(Idx(r), 1) == b"i"  # type: ignore[arg-type]  # an __index__ object on purpose


# ---------------------------------------------------------------------------------------------
# Bad arguments: counts, buffers, options


def test_negative_count_is_value_error(fds: Fds, tmp_file: Callable[[bytes], Path]) -> None:
    r, _ = fds.pipe()
    f = fds.own(fd.open(tmp_file(b"abc"), fd.O_RDWR))
    a, b = fd.socketpair()
    fds.own(a, b)
    for call in (
        lambda: fd.read(r, -1),
        lambda: fd.pread(f, -1, 0),
        lambda: fd.pread(f, 1, -1),
        lambda: fd.pwrite(f, b"x", -1),
        lambda: fd.recv(a, -1),
        lambda: fd.recv_into(a, bytearray(2), -1),
        lambda: fd.sendfile(a, f, -1),
        lambda: fd.sendfile(a, f, 0, -1),
        lambda: fd.getsockopt(a, socket.SOL_SOCKET, socket.SO_LINGER, -1),
        lambda: fd.read(r, -(2**100)),
    ):
        with pytest.raises(ValueError, match=r"count out of range|must be a non-negative int"):
            call()


def test_huge_count_read_returns_what_is_there(fds: Fds, tmp_file: Callable[[bytes], Path]) -> None:
    r, w = fds.pipe()
    fd.write(w, b"abc")
    # MemoryError is allowed: the process could not reserve the (clamped) buffer.
    with contextlib.suppress(MemoryError):
        assert fd.read(r, 2**62) == b"abc"
    f = fds.own(fd.open(tmp_file(b"file data"), fd.O_RDONLY))
    for n in (2**62, 2**63 - 1, 2**64 - 1):
        with contextlib.suppress(MemoryError, ValueError):
            assert fd.pread(f, n, 0) == b"file data"
    a, b = fd.socketpair()
    fds.own(a, b)
    fd.send(a, b"sock")
    with contextlib.suppress(MemoryError):
        assert fd.recv(b, 2**62) == b"sock"


def test_huge_count_on_empty_nonblocking_pipe(fds: Fds) -> None:
    r, _ = fds.pipe(os.O_NONBLOCK)
    with pytest.raises((BlockingIOError, MemoryError)):
        fd.read(r, 2**62)
    for n in (2**64, 2**100):
        with pytest.raises(ValueError, match="count out of range"):
            fd.read(r, n)


def test_non_int_count_is_type_error(fds: Fds) -> None:
    r, _ = fds.pipe(os.O_NONBLOCK)
    for bad in ("1", 1.0, None, b"1"):
        with pytest.raises(TypeError):
            fd.read(r, bad)  # type: ignore[arg-type]  # misuse on purpose


def test_read_only_buffer_is_type_error(fds: Fds) -> None:
    r, w = fds.pipe()
    a, b = fd.socketpair()
    fds.own(a, b)
    fd.write(w, b"data")
    fd.send(a, b"data")
    for ro in (b"abcd", memoryview(b"abcd"), memoryview(bytearray(4)).toreadonly()):
        with pytest.raises(TypeError):
            fd.recv_into(b, ro)
        with pytest.raises(TypeError):
            fd.readinto(r, ro)
    for not_buffer in ("str", 4, None, [0, 0]):
        with pytest.raises(TypeError):
            fd.recv_into(b, not_buffer)  # type: ignore[arg-type]  # misuse on purpose
        with pytest.raises(TypeError):
            fd.readinto(r, not_buffer)  # type: ignore[arg-type]  # misuse on purpose
    # Nothing was consumed by the refused calls.
    assert fd.read(r, 10) == b"data"
    assert fd.recv(b, 10) == b"data"


def test_nbytes_larger_than_buffer_is_value_error(fds: Fds) -> None:
    a, b = fd.socketpair()
    fds.own(a, b)
    fd.send(a, b"0123456789")
    buf = bytearray(4)
    with pytest.raises(ValueError, match=r"nbytes \d+ is larger than the buffer"):
        fd.recv_into(b, buf, 5)
    with pytest.raises(ValueError, match="count out of range"):
        fd.recv_into(b, buf, 2**70)
    assert buf == bytes(4)
    assert fd.recv(b, 100) == b"0123456789"


def test_non_contiguous_buffer_refused(fds: Fds) -> None:
    r, w = fds.pipe()
    with pytest.raises((ValueError, TypeError)):
        fd.write(w, memoryview(b"abcdef")[::2])
    with pytest.raises((ValueError, TypeError)):
        fd.readinto(r, memoryview(bytearray(6))[::2])


def test_write_non_buffer_is_type_error(fds: Fds) -> None:
    _, w = fds.pipe()
    a, _b = fd.socketpair()
    fds.own(a, _b)
    for bad in ("text", 5, None, [1, 2]):
        with pytest.raises(TypeError):
            fd.write(w, bad)  # type: ignore[arg-type]  # misuse on purpose
        with pytest.raises(TypeError):
            fd.send(a, bad)  # type: ignore[arg-type]  # misuse on purpose


def test_bad_option_values(fds: Fds) -> None:
    s = fds.sock()
    with pytest.raises(ValueError, match="is out of range for this argument"):
        fd.setsockopt(s, socket.SOL_SOCKET, socket.SO_RCVBUF, 2**40)
    with pytest.raises(ValueError, match="option value is"):
        fd.setsockopt(s, socket.SOL_SOCKET, socket.SO_LINGER, bytes(2000))
    with pytest.raises(TypeError):
        fd.setsockopt(s, socket.SOL_SOCKET, socket.SO_LINGER, "text")  # type: ignore[arg-type]  # misuse on purpose
    for buflen in (0, 1025, 2**40):
        with pytest.raises(ValueError, match="buflen must be"):
            fd.getsockopt(s, socket.SOL_SOCKET, socket.SO_LINGER, buflen)


def test_bad_enum_like_arguments(fds: Fds, tmp_file: Callable[[bytes], Path]) -> None:
    s = fds.sock()
    with pytest.raises(ValueError, match="invalid shutdown how"):
        fd.shutdown(s, 3)
    with pytest.raises(ValueError, match="invalid shutdown how"):
        fd.shutdown(s, -1)
    f = fds.own(fd.open(tmp_file(b""), fd.O_RDONLY))
    with pytest.raises(ValueError, match="invalid whence"):
        fd.lseek(f, 0, 7)
    lfd, _ = fds.listener(blocking=False)
    for bad in (0, -1, -(2**40)):
        with pytest.raises(ValueError, match="max must be at least"):
            fd.accept_many(lfd, bad)


def test_bad_poll_arguments(fds: Fds) -> None:
    r, _ = fds.pipe()
    for timeout in (-1, -0.5, float("nan"), float("-inf")):
        with pytest.raises(ValueError, match="timeout must be"):
            fd.poll([(r, fd.POLLIN)], timeout)
    with pytest.raises(TypeError):
        fd.poll([r], 0)  # type: ignore[list-item]  # misuse on purpose
    with pytest.raises(TypeError):
        fd.poll([(r,)], 0)  # type: ignore[list-item]  # misuse on purpose
    with pytest.raises(TypeError):
        fd.poll([(r, fd.POLLIN, 0)], 0)  # type: ignore[list-item]  # misuse on purpose
    with pytest.raises(TypeError):
        fd.poll(5, 0)  # type: ignore[arg-type]  # misuse on purpose
    with pytest.raises(TypeError):
        fd.poll([(r, fd.POLLIN)], "1")  # type: ignore[arg-type]  # misuse on purpose
    for events in (-1, 65536, 2**70):
        with pytest.raises(ValueError, match=r"poll\(\) events must be in"):
            fd.poll([(r, events)], 0)
    with pytest.raises(ValueError, match="fd must be a non-negative int"):
        fd.poll([(-1, fd.POLLIN)], 0)


def test_poll_infinite_timeout_with_ready_fd(fds: Fds) -> None:
    _, w = fds.pipe()
    assert fd.poll([(w, fd.POLLOUT)], float("inf")) == [(w, fd.POLLOUT)]
    assert fd.poll([(w, fd.POLLOUT)], 1e300) == [(w, fd.POLLOUT)]


# ---------------------------------------------------------------------------------------------
# Bad arguments: addresses and paths

BAD_ADDRESSES: list[tuple[object, type[Exception]]] = [
    (("127.0.0.1",), ValueError),
    ((), ValueError),
    (("::1", 80, 0, 0, 0), ValueError),
    (("127.0.0.1", 70000), ValueError),
    (("127.0.0.1", -1), ValueError),
    (("127.0.0.1", 2**80), ValueError),
    (("127.0.0.1", "x"), TypeError),
    (("127.0.0.1", None), TypeError),
    (("127.0.0.1", 80.0), TypeError),
    ((123, 80), TypeError),
    ((b"127.0.0.1", 80), TypeError),
    ((None, 80), TypeError),
    (("::1", 80, -1, 0), ValueError),
    (("::1", 80, 0, 2**32), ValueError),
    (("::1", 80, "x", 0), TypeError),
    ({"host": "127.0.0.1", "port": 80}, TypeError),
    (["127.0.0.1", 80], TypeError),
    (None, TypeError),
    (80, TypeError),
    (80.5, TypeError),
    ("a\0b", ValueError),
    (b"a\0b", ValueError),
    ("x" * 200, ValueError),
    (b"\0" + b"x" * 200, ValueError),
]


def _param_id(v: object) -> str:
    return v.__name__ if isinstance(v, type) else repr(v)[:40]


@pytest.mark.parametrize(("address", "exc"), BAD_ADDRESSES, ids=_param_id)
@pytest.mark.parametrize("call", ["bind", "connect"])
def test_bad_address_shapes(fds: Fds, address: object, exc: type[Exception], call: str) -> None:
    family = socket.AF_UNIX if isinstance(address, (str, bytes)) else socket.AF_INET
    s = fds.sock(family)
    with pytest.raises(exc):
        getattr(fd, call)(s, address)
    # Nothing was bound or connected.
    assert fd.getsockname(s) in (("0.0.0.0", 0), "")


@pytest.mark.parametrize(
    "call",
    [
        lambda p: fd.open(p, fd.O_RDONLY),
        fd.stat,
        fd.lstat,
        lambda p: fd.mkstemp(dir=p),
        lambda p: fd.mkstemp(prefix=p),
        lambda p: fd.mkstemp(suffix=p),
        lambda p: fd.mkdtemp(dir=p),
        lambda p: fd.mkdtemp(prefix=p),
    ],
    ids=[
        "open",
        "stat",
        "lstat",
        "mkstemp-dir",
        "mkstemp-prefix",
        "mkstemp-suffix",
        "mkdtemp-dir",
        "mkdtemp-prefix",
    ],
)
@pytest.mark.parametrize("path", ["a\0b", b"a\0b", Path("a\0b")], ids=repr)
def test_embedded_nul_in_path_is_value_error(
    call: Callable[[object], object], path: object
) -> None:
    with pytest.raises(ValueError, match="embedded null byte in path"):
        call(path)


@pytest.mark.parametrize(
    "bad", [None, 123, 1.5, ["a"], object()], ids=["None", "int", "float", "list", "object"]
)
def test_bad_path_type_is_type_error(bad: object) -> None:
    with pytest.raises(TypeError):
        fd.open(bad, fd.O_RDONLY)  # type: ignore[arg-type]  # misuse on purpose
    with pytest.raises(TypeError):
        fd.stat(bad)  # type: ignore[arg-type]  # misuse on purpose


def test_fspath_raising_is_type_error() -> None:
    class Broken:
        def __fspath__(self) -> str:
            raise RuntimeError("no path")

    with pytest.raises((TypeError, RuntimeError)):
        fd.stat(Broken())


# ---------------------------------------------------------------------------------------------
# Random arguments (hypothesis): only ValueError, TypeError or OSError; never anything else.

ALLOWED = (ValueError, TypeError, OSError)

# Numbers that cannot be open fds here (negative, or past any fd limit), so that a random call
# never touches a real fd of this process (pytest's capture files, stdin...).
not_an_fd_int = st.one_of(
    st.integers(max_value=-1),
    st.integers(min_value=1 << 21, max_value=(1 << 31) - 1),
    st.integers(min_value=1 << 31),
)
junk = st.one_of(
    st.none(),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.tuples(st.integers(), st.integers()),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.builds(object),
    st.complex_numbers(allow_nan=False),
)
any_int = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64, -(2**63)]),
)

FUZZ_SETTINGS = settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@FUZZ_SETTINGS
@given(x=st.one_of(not_an_fd_int, junk))
@pytest.mark.parametrize("name", sorted(FD_CALLS))
def test_fuzz_fd_argument(name: str, x: object) -> None:
    try:
        FD_CALLS[name](x)
    # PT017: the call may succeed (no exception to expect), so no pytest.raises.
    except ALLOWED as e:
        if isinstance(x, int) and 0 <= x < 2**31:
            assert type(e) is OSError, repr(e)  # noqa: PT017
            assert e.errno == errno.EBADF, repr(e)  # noqa: PT017
        elif isinstance(x, int):
            assert type(e) is ValueError, repr(e)  # noqa: PT017
        else:
            assert type(e) is TypeError, repr(e)  # noqa: PT017
    else:
        # Only poll reports a closed fd instead of raising.
        assert name == "poll"
        assert isinstance(x, int)
        assert 0 <= x < 2**31


class Scratch(TypedDict):
    """What :func:`scratch` hands out: fds by role, and the scratch directory."""

    r: int
    w: int
    a: int
    b: int
    f: int
    tcp: int
    lfd: int
    dir: str


@contextlib.contextmanager
def scratch() -> Iterator[Scratch]:
    """Fresh fds for one example: a non-blocking pipe, a non-blocking socketpair, a small
    file, an unbound TCP socket and a non-blocking listener. Closed afterwards."""
    made: list[int] = []
    tmpdir = tempfile.mkdtemp(prefix="fdkit-fuzz-")
    try:
        r, w = fd.pipe(os.O_NONBLOCK)
        made += [r, w]
        a, b = fd.socketpair(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
        made += [a, b]
        path = os.path.join(tmpdir, "f")
        with open(path, "wb") as fobj:
            fobj.write(b"0123456789")
        f = fd.open(path, fd.O_RDWR)
        made.append(f)
        tcp = fd.socket()
        made.append(tcp)
        lfd = fd.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
        made.append(lfd)
        fd.bind(lfd, ("127.0.0.1", 0))
        fd.listen(lfd)
        yield {"r": r, "w": w, "a": a, "b": b, "f": f, "tcp": tcp, "lfd": lfd, "dir": tmpdir}
    finally:
        for n in made:
            fd.close(n)
        for name in os.listdir(tmpdir):
            p = os.path.join(tmpdir, name)
            if os.path.isdir(p) and not os.path.islink(p):
                os.rmdir(p)
            else:
                os.unlink(p)
        os.rmdir(tmpdir)


def _close_results(name: str, result: object) -> None:
    """Closes the fds a fuzzed call created (only calls that create fds: the results of the
    others are counts and positions, not fds)."""
    creates = name.split(".")[0]
    if creates in ("socket", "open"):
        assert isinstance(result, int)
        fd.close(result)
    elif creates in ("socketpair", "pipe"):
        assert isinstance(result, tuple)
        fd.close(result[0])
        fd.close(result[1])
    elif creates in ("accept4", "accept_many"):
        raise AssertionError(f"{name} accepted from an empty listener: {result!r}")


# fcntl commands a random call must not run: they create fds, change the shared flags, or
# arrange for signals to be sent to random processes.
UNSAFE_FCNTL = {
    fcntl.F_DUPFD,
    fcntl.F_DUPFD_CLOEXEC,
    fcntl.F_SETFD,
    fcntl.F_SETFL,
    fcntl.F_SETOWN,
    10,  # F_SETSIG
    fcntl.F_SETLEASE,
    fcntl.F_NOTIFY,
    fcntl.F_SETPIPE_SZ,
    fcntl.F_ADD_SEALS,
}

# (name, call) for every int-like argument that is not an fd; `s` is the scratch fds.
INT_ARG_CALLS: dict[str, Callable[[Scratch, Any], object]] = {
    "read.n": lambda s, x: fd.read(s["r"], x),
    "pread.n": lambda s, x: fd.pread(s["f"], x, 0),
    "pread.offset": lambda s, x: fd.pread(s["f"], 4, x),
    "pwrite.offset": lambda s, x: fd.pwrite(s["f"], b"z", x),
    "recv.n": lambda s, x: fd.recv(s["a"], x),
    "recv.flags": lambda s, x: fd.recv(s["a"], 4, x),
    "recv_into.nbytes": lambda s, x: fd.recv_into(s["a"], bytearray(8), x),
    "recv_into.flags": lambda s, x: fd.recv_into(s["a"], bytearray(8), 0, x),
    "send.flags": lambda s, x: fd.send(s["a"], b"q", x),
    "sendfile.offset": lambda s, x: fd.sendfile(s["a"], s["f"], x, 4),
    "sendfile.count": lambda s, x: fd.sendfile(s["a"], s["f"], 0, x),
    "lseek.offset": lambda s, x: fd.lseek(s["f"], x, os.SEEK_SET),
    "lseek.offset_cur": lambda s, x: fd.lseek(s["f"], x, os.SEEK_CUR),
    "lseek.whence": lambda s, x: fd.lseek(s["f"], 0, x),
    "listen.backlog": lambda s, x: fd.listen(s["tcp"], x),
    "shutdown.how": lambda s, x: fd.shutdown(s["a"], x),
    "accept4.flags": lambda s, x: fd.accept4(s["lfd"], x),
    "accept_many.max": lambda s, x: fd.accept_many(s["lfd"], x),
    "accept_many.flags": lambda s, x: fd.accept_many(s["lfd"], 4, x),
    "getsockopt.level": lambda s, x: fd.getsockopt(s["tcp"], x, socket.SO_TYPE),
    "getsockopt.optname": lambda s, x: fd.getsockopt(s["tcp"], socket.SOL_SOCKET, x),
    "getsockopt.buflen": lambda s, x: fd.getsockopt(s["tcp"], socket.SOL_SOCKET, 13, x),
    "setsockopt.value": lambda s, x: fd.setsockopt(s["tcp"], socket.SOL_SOCKET, 8, x),
    "setsockopt.level": lambda s, x: fd.setsockopt(s["tcp"], x, 99999, 1),
    "socket.family": lambda s, x: fd.socket(x, socket.SOCK_STREAM),
    "socket.type": lambda s, x: fd.socket(socket.AF_UNIX, x),
    "socket.proto": lambda s, x: fd.socket(socket.AF_UNIX, socket.SOCK_STREAM, x),
    "socketpair.family": lambda s, x: fd.socketpair(x),
    "pipe.flags": lambda s, x: fd.pipe(x),
    "open.flags": lambda s, x: (
        fd.open(os.path.join(s["dir"], "f"), x & ~os.O_CREAT)
        if isinstance(x, int)
        else fd.open(os.path.join(s["dir"], "f"), x)
    ),
    "open.mode": lambda s, x: fd.open(os.path.join(s["dir"], "new"), fd.O_CREAT | fd.O_RDWR, x),
    "fcntl.cmd": lambda s, x: (
        None if isinstance(x, int) and x in UNSAFE_FCNTL else fd.fcntl(s["r"], x, 0)
    ),
    "fcntl.arg": lambda s, x: fd.fcntl(s["r"], fcntl.F_GETFL, x),
    "poll.events": lambda s, x: fd.poll([(s["r"], x)], 0),
    "poll.timeout": lambda s, x: fd.poll([(s["w"], fd.POLLOUT)], x),
}


@FUZZ_SETTINGS
@given(x=st.one_of(any_int, junk))
@pytest.mark.parametrize("name", sorted(INT_ARG_CALLS))
def test_fuzz_int_arguments(name: str, x: object) -> None:
    """Random ints (including ones far outside C's ranges) and random objects for every
    integer argument that is not an fd: ValueError, TypeError or OSError, never OverflowError
    or anything else."""
    with scratch() as s:
        try:
            result = INT_ARG_CALLS[name](s, x)
        # PT017: the call may succeed (no exception to expect), so no pytest.raises.
        except ALLOWED as e:
            assert not isinstance(e, OverflowError)  # noqa: PT017
            if isinstance(e, OSError):
                assert e.errno is not None  # noqa: PT017
        except MemoryError:
            assert name in ("read.n", "pread.n", "recv.n")
        else:
            if name.startswith("accept_many") and result == []:
                return
            _close_results(name, result)


@FUZZ_SETTINGS
@given(
    x=st.one_of(
        junk,
        st.text(max_size=120),
        st.binary(max_size=120),
        st.tuples(),
        st.lists(
            st.one_of(
                st.sampled_from(["127.0.0.1", "::1"]),
                any_int,
                junk,
            ),
            max_size=6,
        ).map(tuple),
    )
)
@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_fuzz_addresses(family: int, x: object) -> None:
    """Random address shapes for bind on IPv4 and IPv6 sockets (no traffic leaves the host:
    nothing connects; hosts are loopback/any literals or not strings at all, so no name is
    looked up)."""
    s = fd.socket(family)
    try:
        fd.bind(s, x)  # type: ignore[arg-type]  # misuse on purpose
    # PT017: the call may succeed (no exception to expect), so no pytest.raises.
    except ALLOWED as e:
        assert not isinstance(e, OverflowError), repr(e)  # noqa: PT017
    finally:
        fd.close(s)


@FUZZ_SETTINGS
@given(name=st.text(max_size=110))
def test_fuzz_abstract_unix_names(name: str) -> None:
    s = fd.socket(socket.AF_UNIX)
    try:
        fd.bind(s, "\0fdkit-fuzz-" + name)
    # PT017: the call may succeed (no exception to expect), so no pytest.raises.
    except ALLOWED as e:
        assert not isinstance(e, OverflowError), repr(e)  # noqa: PT017
    else:
        got = fd.getsockname(s)
        assert got == ("\0fdkit-fuzz-" + name).encode("utf-8", "surrogateescape")
    finally:
        fd.close(s)


@FUZZ_SETTINGS
@given(
    x=st.one_of(
        junk,
        st.binary(max_size=64),
        st.binary(max_size=64).map(bytearray),
        st.binary(max_size=64).map(lambda b: memoryview(b)),
        st.binary(max_size=64).map(lambda b: memoryview(bytearray(b))),
    )
)
@pytest.mark.parametrize("call", ["write", "send", "readinto", "recv_into", "pwrite"])
def test_fuzz_buffers(call: str, x: object) -> None:
    with scratch() as s:
        try:
            if call == "write":
                n = fd.write(s["w"], x)  # type: ignore[arg-type]  # misuse on purpose
                assert n == len(x)  # type: ignore[arg-type]  # accepted, so a buffer
                if n:
                    assert fd.read(s["r"], 100) == bytes(x)  # type: ignore[call-overload]  # accepted, so a buffer
            elif call == "send":
                n = fd.send(s["a"], x)  # type: ignore[arg-type]  # misuse on purpose
                assert n == len(x)  # type: ignore[arg-type]  # accepted, so a buffer
                if n:
                    assert fd.recv(s["b"], 100) == bytes(x)  # type: ignore[call-overload]  # accepted, so a buffer
            elif call == "pwrite":
                n = fd.pwrite(s["f"], x, 0)  # type: ignore[arg-type]  # misuse on purpose
                assert fd.pread(s["f"], n, 0) == bytes(x)  # type: ignore[call-overload]  # accepted, so a buffer
            elif call == "readinto":
                fd.write(s["w"], b"hello")
                n = fd.readinto(s["r"], x)  # type: ignore[arg-type]  # misuse on purpose
                assert bytes(x)[:n] == b"hello"[:n]  # type: ignore[call-overload]  # accepted, so a buffer
            else:
                fd.send(s["b"], b"hello")
                n = fd.recv_into(s["a"], x)  # type: ignore[arg-type]  # misuse on purpose
                assert bytes(x)[:n] == b"hello"[:n]  # type: ignore[call-overload]  # accepted, so a buffer
        # PT017: the call may succeed (no exception to expect), so no pytest.raises.
        except ALLOWED as e:
            assert type(e) in (TypeError, ValueError), repr(e)  # noqa: PT017
