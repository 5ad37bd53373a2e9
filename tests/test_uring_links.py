"""fdkit.uring.Ring's submission flags, linked chains, registered files and buffers, and the
path and message ops, against the real kernel: a linked write after a failed read is
cancelled with ECANCELED, a hardlink goes on, a link_timeout cancels a recv that never gets data,
skip_success posts nothing on success yet leaves nothing in flight, fixed files and buffers
round-trip, openat/statx/fsync/sendmsg/recvmsg work, accept can return the peer's address,
completions name their fd, and wait() tells a timeout from an idle ring."""

from __future__ import annotations

import errno
import os
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fdkit import fd, uring
from fdkit.uring import Completion, Ring
from helpers import Fds

_ok, _reason = uring.available()
pytestmark = pytest.mark.skipif(not _ok, reason=f"io_uring unavailable: {_reason}")


def need(*ops: str) -> None:
    """Skips the test (saying which) when the kernel lacks one of ``ops``."""
    missing = [op for op in ops if not uring.probe()["ops"].get(op)]
    if missing:
        pytest.skip(f"this kernel lacks io_uring ops {missing}")


def need_skip_success() -> None:
    if not uring.probe()["skip_success"]:
        pytest.skip("IOSQE_CQE_SKIP_SUCCESS needs Linux 5.17+ (IORING_FEAT_CQE_SKIP)")


@pytest.fixture
def ring() -> Iterator[Ring]:
    with Ring(64) as r:
        yield r


def drain(ring: Ring, within: float = 10.0) -> list[Completion]:
    """Every completion until nothing is in flight (bounded), sorted by user_data."""
    deadline = time.monotonic() + within
    out: list[Completion] = []
    while True:
        out += ring.wait(1, timeout=0.2)
        if ring.in_flight == 0:
            return sorted(out, key=lambda c: c.user_data)
        assert time.monotonic() < deadline, f"still in flight after {within} s: {out}"


def results(cs: list[Completion]) -> list[tuple[int, str, int]]:
    return [(c.user_data, c.op, c.result) for c in cs]


# -- links -------------------------------------------------------------------------------------


def test_a_linked_write_after_a_failed_read_completes_with_ecanceled(ring: Ring, fds: Fds) -> None:
    r, w = fds.pipe()
    ring.read(w, 8, 1, link=True)  # reading a pipe's write end: EBADF
    ring.write(w, b"never", 2)
    got = drain(ring)
    assert results(got) == [(1, "read", -errno.EBADF), (2, "write", -errno.ECANCELED)]
    assert isinstance(got[1].error, OSError)
    assert got[1].error.errno == errno.ECANCELED
    assert [c.fd for c in got] == [w, w]
    fd.set_blocking(r, False)
    with pytest.raises(BlockingIOError):
        fd.read(r, 8)  # the write never ran


def test_a_hardlink_goes_on_after_a_failure(ring: Ring, fds: Fds) -> None:
    r, w = fds.pipe()
    ring.read(w, 8, 1, hardlink=True)
    ring.write(w, b"still", 2)
    assert results(drain(ring)) == [(1, "read", -errno.EBADF), (2, "write", 5)]
    assert fd.read(r, 8) == b"still"


def test_linked_ops_run_in_order(ring: Ring, fds: Fds) -> None:
    r, w = fds.pipe()
    ring.write(w, b"first", 1, link=True)
    ring.read(r, 5, 2, link=True)
    ring.write(w, b"second", 3)
    got = drain(ring)
    assert [c.data for c in got] == [None, b"first", None]
    assert fd.read(r, 16) == b"second"


def test_a_link_timeout_cancels_a_recv_that_never_gets_data(ring: Ring, fds: Fds) -> None:
    need("recv", "link_timeout")
    a, _b = fds.connected()
    t = time.monotonic()
    ring.recv(a, 16, 1, link=True)
    ring.link_timeout(0.05, 2)
    recv, lt = drain(ring)
    assert time.monotonic() - t < 5
    # io_uring_prep_link_timeout(3): the op is cancelled (ECANCELED; EINTR for some ops) and
    # the timeout itself reports ETIME.
    assert recv.result in (-errno.ECANCELED, -errno.EINTR), recv
    assert (lt.op, lt.result) == ("link_timeout", -errno.ETIME)


def test_a_link_timeout_reports_ecanceled_when_its_op_wins(ring: Ring, fds: Fds) -> None:
    need("recv", "link_timeout")
    a, b = fds.connected()
    fd.send(b, b"here")
    ring.recv(a, 16, 1, link=True)
    ring.link_timeout(5, 2)
    recv, lt = drain(ring)
    assert (recv.result, recv.data) == (4, b"here")
    assert (lt.op, lt.result) == ("link_timeout", -errno.ECANCELED)


def test_link_misuse_raises_and_queues_nothing(ring: Ring, fds: Fds) -> None:
    need("link_timeout", "accept")
    with pytest.raises(ValueError, match="link_timeout must follow"):
        ring.link_timeout(1, 1)
    with pytest.raises(ValueError, match="exclude"):
        ring.nop(2, link=True, hardlink=True)
    lfd, _addr = fds.listener()
    with pytest.raises(ValueError, match="multishot"):
        ring.accept(lfd, 3, multishot=True, link=True)
    with pytest.raises(ValueError, match="multishot"):
        ring.accept(lfd, 3, multishot=True, address=True)
    assert ring.in_flight == 0
    ring.nop(4)  # the flags of a refused op do not leak onto the next one
    assert results(drain(ring)) == [(4, "nop", 0)]


def test_drain_and_async_complete_normally(ring: Ring, fds: Fds) -> None:
    r, w = fds.pipe()
    ring.write(w, b"a", 1, async_=True)
    ring.nop(2, drain=True)
    assert results(drain(ring)) == [(1, "write", 1), (2, "nop", 0)]
    assert fd.read(r, 8) == b"a"


# -- skip_success ------------------------------------------------------------------------------


def test_skip_success_posts_nothing_yet_leaves_nothing_in_flight(ring: Ring, fds: Fds) -> None:
    need_skip_success()
    r, w = fds.pipe()
    ring.write(w, b"quiet", 1, skip_success=True)
    assert ring.in_flight == 1
    assert drain(ring) == []
    assert ring.in_flight == 0
    assert fd.read(r, 8) == b"quiet"
    # A chain of them: only the last op reports.
    for ud in range(10, 13):
        ring.nop(ud, link=True, skip_success=True)
    ring.nop(20)
    assert results(drain(ring)) == [(20, "nop", 0)]
    # Many in a row, so slots are reused: no stray completion, nothing left behind.
    for ud in range(300):
        ring.nop(ud, skip_success=True)
    ring.nop(999)
    assert results(drain(ring)) == [(999, "nop", 0)]


def test_a_failing_skip_success_op_reports_and_its_chain_posts_nothing(
    ring: Ring, fds: Fds
) -> None:
    need_skip_success()
    r, w = fds.pipe()
    ring.read(w, 8, 1, link=True, skip_success=True)  # fails: EBADF
    ring.write(w, b"x", 2, link=True)
    ring.nop(3)
    # The kernel posts the failure and skips the cancelled ops' completions; the ring
    # releases them all the same.
    assert results(drain(ring)) == [(1, "read", -errno.EBADF)]
    ring.nop(4)
    assert results(drain(ring)) == [(4, "nop", 0)]
    fd.set_blocking(r, False)
    with pytest.raises(BlockingIOError):
        fd.read(r, 8)


def test_skip_success_is_refused_where_a_new_fd_would_be_lost(ring: Ring, fds: Fds) -> None:
    need_skip_success()
    lfd, _addr = fds.listener()
    with pytest.raises(ValueError, match="skip_success"):
        ring.accept(lfd, 1, skip_success=True)
    with pytest.raises(ValueError, match="skip_success"):
        ring.socket(socket.AF_INET, socket.SOCK_STREAM, 2, skip_success=True)
    assert ring.in_flight == 0


def test_a_cancelled_close_fd_still_closes_its_fd(ring: Ring, fds: Fds) -> None:
    r, w = fds.pipe()
    victim = os.dup(r)
    ring.read(w, 8, 1, link=True)  # fails, so the close is cancelled
    ring.close_fd(victim, 2)
    got = drain(ring)
    assert results(got)[1] == (2, "close_fd", -errno.ECANCELED)
    with pytest.raises(OSError, match="Bad file descriptor") as e:
        os.fstat(victim)  # the ring closed it itself: it was handed over
    assert e.value.errno == errno.EBADF


# -- registered files and buffers --------------------------------------------------------------


def test_fixed_files_round_trip(ring: Ring, fds: Fds) -> None:
    r, w = fds.pipe()
    ring.register_files([r, w, -1])
    ring.write(1, b"by index", 1, fixed=True)
    ring.read(0, 64, 2, fixed=True)
    got = drain(ring)
    assert [(c.fd, c.fixed) for c in got] == [(1, True), (0, True)]
    assert got[1].data == b"by index"
    ring.read(2, 8, 3, fixed=True)  # an empty slot
    ring.read(9, 8, 4, fixed=True)  # past the table
    assert [c.result for c in drain(ring)] == [-errno.EBADF, -errno.EBADF]
    with pytest.raises(ValueError, match="already registered"):
        ring.register_files([r])
    ring.unregister_files()
    ring.read(0, 8, 5, fixed=True)
    assert drain(ring)[0].result < 0
    with pytest.raises(OSError, match="No such device or address"):
        ring.unregister_files()


def test_fixed_buffers_round_trip_and_are_never_lent_to_python(ring: Ring, fds: Fds) -> None:
    need("read_fixed", "write_fixed")
    r, w = fds.pipe()
    with pytest.raises(ValueError, match="register_buffers"):
        ring.read_fixed(r, 0, 8, 1)
    ring.register_buffers(2, 4096)
    assert ring.buffer_bytes(0, 4) == b"\0\0\0\0"
    ring.write_fixed(w, 0, b"from buffer 0", 1, link=True)  # copied in, then written
    ring.read_fixed(r, 1, 64, 2)
    wrote, read = drain(ring)
    assert (wrote.op, wrote.result) == ("write_fixed", 13)
    assert (read.op, read.result, read.data) == ("read_fixed", 13, b"from buffer 0")
    assert ring.buffer_bytes(1, 13) == b"from buffer 0"
    # An int writes what the buffer already holds.
    ring.write_fixed(w, 1, 4, 3)
    drain(ring)
    assert fd.read(r, 16) == b"from"
    ring.fill_buffer(0, b"XY", offset=2)
    assert ring.buffer_bytes(0, 6) == b"frXY b"
    with pytest.raises(ValueError, match="larger than the buffer"):
        ring.read_fixed(r, 0, 4097, 4)
    with pytest.raises(ValueError, match="no such registered buffer"):
        ring.buffer_bytes(5)
    # While the kernel may write into a buffer, Python can neither touch nor free it.
    ring.read_fixed(r, 0, 8, 5)
    ring.submit()
    for attempt in (
        lambda: ring.fill_buffer(0, b"no"),
        lambda: ring.buffer_bytes(0),
        ring.unregister_buffers,
    ):
        with pytest.raises(OSError, match="busy") as e:
            attempt()
        assert e.value.errno == errno.EBUSY
    fd.write(w, b"late")
    (late,) = drain(ring)
    assert late.data == b"late"
    ring.unregister_buffers()
    with pytest.raises(ValueError, match="no buffers registered"):
        ring.buffer_bytes(0)


# -- path and message ops ----------------------------------------------------------------------


def test_openat_write_fsync_statx(ring: Ring, fds: Fds, tmp_path: Path) -> None:
    need("openat", "statx", "fsync", "write")
    path = tmp_path / "f"
    ring.openat(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 1, mode=0o640)
    (opened,) = drain(ring)
    assert (opened.op, opened.error) == ("openat", None)
    f = fds.own(opened.result)
    assert fd.get_cloexec(f)
    ring.write(f, b"hello", 2, offset=0, link=True)
    ring.fsync(f, 3, datasync=True)
    assert results(drain(ring)) == [(2, "write", 5), (3, "fsync", 0)]
    ring.statx(path, 4)
    (st,) = drain(ring)
    assert st.statx is not None
    real = os.stat(path)
    assert (st.statx["size"], st.statx["ino"], st.statx["mode"]) == (5, real.st_ino, real.st_mode)
    assert stat.S_IMODE(st.statx["mode"]) == 0o640 & ~_umask()
    assert st.statx["mtime_ns"] == real.st_mtime_ns
    dirfd = fds.own(os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY))
    ring.openat("missing", os.O_RDONLY, 5, dir_fd=dirfd)
    ring.statx("f", 6, dir_fd=dirfd)
    missing, rel = drain(ring)
    assert missing.result == -errno.ENOENT
    assert isinstance(missing.error, FileNotFoundError)
    assert rel.statx is not None
    assert rel.statx["ino"] == real.st_ino


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


def test_sendmsg_recvmsg_over_udp(ring: Ring, fds: Fds) -> None:
    need("sendmsg", "recvmsg")
    a = fds.own(fd.socket(fd.AF_INET, fd.SOCK_DGRAM))
    b = fds.own(fd.socket(fd.AF_INET, fd.SOCK_DGRAM))
    fd.bind(a, ("127.0.0.1", 0))
    fd.bind(b, ("127.0.0.1", 0))
    ring.recvmsg(b, 64, 1)
    parts: list[bytes | bytearray | memoryview] = [
        b"dgram ",
        bytearray(b"in "),
        memoryview(b"parts"),
    ]
    ring.sendmsg(a, parts, 2, address=fd.getsockname(b))
    got, sent = drain(ring)
    assert (sent.op, sent.result) == ("sendmsg", 14)
    assert (got.op, got.data, got.address, got.fd) == (
        "recvmsg",
        b"dgram in parts",
        fd.getsockname(a),
        b,
    )


def test_accept_can_return_the_peer_address(ring: Ring, fds: Fds) -> None:
    lfd, addr = fds.listener()
    ring.accept(lfd, 1, address=True)
    ring.submit()
    client = fds.client(addr)
    (c,) = drain(ring)
    fds.own(c.result)
    assert (c.op, c.fd, c.address) == ("accept", lfd, fd.getsockname(client))
    ring.accept(lfd, 2)  # without it: no address
    ring.submit()
    fds.client(addr)
    (plain,) = drain(ring)
    fds.own(plain.result)
    assert plain.address is None


# -- wait: timeout or idle ---------------------------------------------------------------------


def test_wait_tells_a_timeout_from_nothing_in_flight(ring: Ring, fds: Fds) -> None:
    r, _w = fds.pipe()
    assert ring.wait(timeout=0.01, timeout_error=True) == []  # idle: nothing to wait for
    ring.read(r, 8, 1)
    assert ring.wait(timeout=0.01) == []  # the default: [] too ...
    assert ring.in_flight == 1  # ... and in_flight says it timed out
    with pytest.raises(TimeoutError):
        ring.wait(timeout=0.01, timeout_error=True)
    ring.cancel(1, 2)
    assert {c.op for c in drain(ring)} == {"read", "cancel"}
    assert ring.wait(timeout=0.01, timeout_error=True) == []


def test_probe_names_the_new_ops() -> None:
    ops = uring.probe()["ops"]
    for op in ("link_timeout", "openat", "statx", "fsync", "sendmsg", "recvmsg"):
        assert op in ops
    assert ops["read_fixed"] == ops["write_fixed"]
    assert isinstance(uring.probe()["skip_success"], bool)


def test_the_sqe_keywords_are_the_ones_the_stub_types() -> None:
    """The native side names its SQE keywords in one list; fdkit.types.SqeFlags must match."""
    from typing import get_type_hints

    from fdkit.types import SqeFlags

    with Ring() as ring, pytest.raises(TypeError, match="unexpected keyword argument 'lnk'") as e:
        ring.nop(1, lnk=True)  # type: ignore[call-arg]  # misuse on purpose
    native = str(e.value).split("the SQE flags are ", 1)[1].rstrip(")").split(", ")
    assert native == list(get_type_hints(SqeFlags))


@pytest.mark.parametrize("name", ["link", "hardlink", "drain", "async_", "skip_success"])
def test_each_sqe_keyword_is_taken_by_every_op_shape(name: str) -> None:
    """The keywords work on an op with no other keywords (nop) and on one with some (read),
    and refuse a value that is not a bool, as a bool argument does."""
    if name == "skip_success":
        need_skip_success()
    with Ring() as ring:
        r, w = os.pipe()
        try:
            os.write(w, b"x")
            ring.nop(1, **{name: False})
            ring.read(r, 1, 2, fixed=False, **{name: name != "skip_success"})
            ring.nop(3)
            got = {c.user_data for c in ring.wait(3, timeout=5)}
            while ring.in_flight:
                got |= {c.user_data for c in ring.wait(1, timeout=5)}
            assert got == {1, 2, 3}
            with pytest.raises(TypeError, match=f"argument '{name}'"):
                ring.nop(4, **{name: 1})  # type: ignore[arg-type]  # misuse on purpose
        finally:
            os.close(r)
            os.close(w)
