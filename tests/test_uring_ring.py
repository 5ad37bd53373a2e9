"""fdkit.uring.Ring against the real kernel: every op on pipes, loopback sockets and files,
errors as OSError with errno, multishot accept of 1,000 connections, a provided-buffer ring
running dry without losing data, cancel and timeout, completion-queue overflow, closing with
ops in flight, threads and signals, and misuse that must raise instead of crashing."""

from __future__ import annotations

import errno
import gc
import os
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fdkit import fd, uring
from fdkit.uring import Completion, Ring
from helpers import (
    Fds,
    interrupt_expecting_keyboard_interrupt,
    is_open,
    payload,
    ready_child,
    syscall_of,
    wait_for,
)

_ok, _reason = uring.available()
pytestmark = pytest.mark.skipif(not _ok, reason=f"io_uring unavailable: {_reason}")


def need(*ops: str) -> None:
    """Skips the test when the kernel lacks one of ``ops``."""
    missing = [op for op in ops if not uring.probe()["ops"].get(op)]
    if missing:
        pytest.skip(f"this kernel lacks io_uring ops {missing}")


def need_kernel(major: int, minor: int, what: str) -> None:
    """Skips the test on kernels older than ``major.minor`` (multishot ops, buffer rings)."""
    release = os.uname().release.split("-")[0].split(".")
    have = (int(release[0]), int(release[1]))
    if have < (major, minor):
        pytest.skip(f"{what} needs Linux {major}.{minor}+, this is {os.uname().release}")


@pytest.fixture
def ring() -> Iterator[Ring]:
    with Ring() as r:
        yield r


def wait_n(ring: Ring, n: int, within: float = 10.0) -> list[Completion]:
    """The next ``n`` completions (bounded: fails after ``within`` seconds)."""
    deadline = time.monotonic() + within
    out: list[Completion] = []
    while len(out) < n:
        assert time.monotonic() < deadline, f"only {len(out)} of {n} completions: {out}"
        out += ring.wait(n - len(out), timeout=0.5)
    return out


def one(ring: Ring) -> Completion:
    (c,) = wait_n(ring, 1)
    return c


def read_exact(n: int, fd_: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = fd.read(fd_, n - len(out))
        if not chunk:
            break
        out += chunk
    return out


# -- every op -----------------------------------------------------------------------------


def test_nop_returns_its_user_data_across_the_whole_u64_range(ring: Ring) -> None:
    for ud in (0, 7, 2**63, 2**64 - 1):
        ring.nop(ud)
    got = wait_n(ring, 4)
    assert [c.user_data for c in got] == [0, 7, 2**63, 2**64 - 1]
    for c in got:
        assert (c.result, c.error, c.more, c.notif, c.buffer_id, c.data, c.op) == (
            0,
            None,
            False,
            False,
            None,
            None,
            "nop",
        )
    assert ring.in_flight == 0


def test_wait_with_nothing_in_flight_returns_an_empty_list_at_once(ring: Ring) -> None:
    t = time.monotonic()
    assert ring.wait() == []
    assert ring.wait(5, timeout=None) == []
    assert time.monotonic() - t < 0.5


def test_write_and_read_through_a_pipe(ring: Ring, fds: Fds) -> None:
    r, w = fds.pipe()
    ring.write(w, b"hello ring", 1)
    assert one(ring).result == 10
    ring.read(r, 100, 2)
    c = one(ring)
    assert (c.result, c.data, c.op) == (10, b"hello ring", "read")


def test_read_and_write_a_file_at_offsets(ring: Ring, fds: Fds, tmp_path: Path) -> None:
    f = fds.own(fd.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o600))
    ring.write(f, b"0123456789", 1, offset=0)
    assert one(ring).result == 10
    ring.write(f, bytearray(b"AB"), 2, offset=4)
    assert one(ring).result == 2
    ring.read(f, 100, 3, offset=2)
    assert one(ring).data == b"23AB6789"
    # Without an offset: the file position, which advances.
    fd.lseek(f, 0, os.SEEK_SET)
    ring.read(f, 3, 4)
    ring.submit()
    assert one(ring).data == b"012"
    ring.read(f, 3, 5)
    assert one(ring).data == b"3AB"


def test_socket_connect_accept_send_recv_shutdown_close_on_loopback(ring: Ring, fds: Fds) -> None:
    need("socket", "connect", "accept", "send", "recv", "shutdown", "close")
    lfd, addr = fds.listener()
    ring.socket(socket.AF_INET, socket.SOCK_STREAM, 1)
    c = one(ring)
    assert c.op == "socket"
    assert c.error is None
    cfd = fds.own(c.result)
    assert fd.get_cloexec(cfd)

    ring.accept(lfd, 2)
    ring.connect(cfd, addr, 3)
    got = sorted(wait_n(ring, 2), key=lambda c: c.user_data)
    assert got[1].result == 0, got
    sfd = fds.own(got[0].result)
    assert fd.get_cloexec(sfd)
    assert fd.getpeername(sfd) == fd.getsockname(cfd)

    ring.send(cfd, b"ping", 4)
    assert one(ring).result == 4
    ring.recv(sfd, 16, 5)
    assert one(ring).data == b"ping"

    ring.shutdown(cfd, socket.SHUT_WR, 6)
    assert one(ring).result == 0
    ring.recv(sfd, 16, 7)
    eof = one(ring)
    assert (eof.result, eof.data) == (0, b"")

    fds.forget(sfd)
    ring.close_fd(sfd, 8)
    closed = one(ring)
    # The op is named after the method ("close_fd", not "close").
    assert (closed.op, closed.result, closed.fd, closed.fixed) == ("close_fd", 0, sfd, False)
    with pytest.raises(OSError, match="Bad file descriptor") as e:
        fd.fstat(sfd)
    assert e.value.errno == errno.EBADF


def test_errors_are_oserrors_with_errno_and_subclass(ring: Ring, fds: Fds) -> None:
    r, w = fds.pipe()
    fds.close(r)
    fds.close(w)
    ring.recv(r, 8, 1)
    c = one(ring)
    assert c.result == -errno.EBADF
    assert isinstance(c.error, OSError)
    assert c.error.errno == errno.EBADF
    assert c.data is None

    lfd, addr = fds.listener()
    fds.close(lfd)  # nobody listens on that port any more
    s = fds.sock(socket.AF_INET, socket.SOCK_STREAM)
    ring.connect(s, addr, 2)
    c = one(ring)
    assert isinstance(c.error, ConnectionRefusedError)
    assert c.error.errno == errno.ECONNREFUSED


def test_poll_add_reports_readiness(ring: Ring, fds: Fds) -> None:
    r, w = fds.pipe()
    ring.poll_add(r, select.POLLIN, 1)
    assert ring.wait(timeout=0.05) == []
    fd.write(w, b"x")
    assert one(ring).result & select.POLLIN


def test_splice_and_tee_between_pipes(ring: Ring, fds: Fds) -> None:
    need("splice", "tee")
    r1, w1 = fds.pipe()
    r2, w2 = fds.pipe()
    r3, w3 = fds.pipe()
    fd.write(w1, b"spliced bytes")
    ring.tee(r1, w3, 100, 1)
    assert one(ring).result == 13
    ring.splice(r1, w2, 100, 2)
    assert one(ring).result == 13
    assert read_exact(13, r2) == b"spliced bytes"
    assert read_exact(13, r3) == b"spliced bytes"
    c, s = fds.connected()
    ring.splice(c, s, 10, 3)
    error = one(ring).error
    assert error is not None
    assert error.errno == errno.EINVAL


def test_send_zc_reports_the_result_then_the_notification(ring: Ring, fds: Fds) -> None:
    need("send_zc")
    c, s = fds.connected()
    data = payload(100_000, 3)
    ring.send_zc(c, data, 11)
    got = wait_n(ring, 2)
    assert got[0].result == len(data)
    assert got[0].more
    assert not got[0].notif
    assert got[1].notif
    assert not got[1].more
    assert read_exact(len(data), s) == data


def test_send_keeps_bytes_alive_and_copies_mutable_buffers(ring: Ring, fds: Fds) -> None:
    c, s = fds.connected()
    ring.send(c, payload(5000, 1) + b"!", 1)  # the only reference is the ring's
    buf = bytearray(b"original")
    ring.send(c, buf, 2)
    buf[:] = b"CHANGED!"
    del buf
    got = wait_n(ring, 2)
    assert [x.result for x in got] == [5001, 8]
    assert read_exact(5009, s) == payload(5000, 1) + b"!" + b"original"


# -- multishot accept and receive ---------------------------------------------------------


def test_multishot_accept_of_1000_connections(ring: Ring, fds: Fds) -> None:
    need_kernel(5, 19, "multishot accept")
    lfd, addr = fds.listener(backlog=1024)
    ring.accept(lfd, 77, multishot=True)
    ring.submit()
    accepted = 0
    for _batch in range(10):
        clients = [fds.client(addr) for _ in range(100)]
        got: list[int] = []
        deadline = time.monotonic() + 10
        while len(got) < len(clients):
            assert time.monotonic() < deadline, f"accepted {accepted + len(got)}"
            for c in ring.wait(timeout=0.5):
                assert c.user_data == 77, c
                # Named after the method called ("accept", not "accept_multishot").
                assert (c.op, c.fd) == ("accept", lfd), c
                assert c.more, c
                assert c.error is None, c
                got.append(fds.own(c.result))
        accepted += len(got)
        for n in clients + got:
            fds.close(n)
    assert accepted == 1000
    ring.cancel(77, 78)
    target, cancel = wait_n(ring, 2)
    assert (target.user_data, target.more) == (77, False)
    assert target.error is not None
    assert target.error.errno == errno.ECANCELED
    assert (cancel.user_data, cancel.op, cancel.result) == (78, "cancel", 0)


def test_provided_buffer_exhaustion_then_rearm_loses_no_data(ring: Ring, fds: Fds) -> None:
    need_kernel(6, 0, "multishot receive on a buffer ring")
    c, s = fds.connected()
    ring.provide_buffers(3, 2, 16)  # 32 bytes of buffers for 20,000 bytes
    sent = payload(20_000, 7)
    received = bytearray()
    enobufs = 0
    ring.recv_multishot(s, 3, 9)
    at = 0
    deadline = time.monotonic() + 20
    while len(received) < len(sent):
        assert time.monotonic() < deadline, f"received {len(received)}"
        if at < len(sent):
            at += fd.send(c, sent[at : at + 2000])
        for comp in ring.wait(timeout=0.5):
            assert comp.user_data == 9
            if comp.data:
                assert len(comp.data) <= 16
                assert comp.buffer_id in (0, 1)
                received += comp.data
            if not comp.more:
                assert comp.error is not None, comp
                assert comp.error.errno == errno.ENOBUFS, comp
                enobufs += 1
                ring.recv_multishot(s, 3, 9)  # re-arm: the data waits in the socket
    assert bytes(received) == sent
    assert enobufs > 0, "the buffer ring never ran dry"
    fds.close(c)
    fin = one(ring)
    assert (fin.result, fin.data, fin.more) == (0, b"", False)


# -- cancel and timeout -------------------------------------------------------------------


def test_cancel_completes_after_its_targets(ring: Ring, fds: Fds) -> None:
    ring.cancel(12345, 1)
    c = one(ring)
    assert c.error is not None
    assert c.error.errno == errno.ENOENT
    _, s = fds.connected()
    ring.recv(s, 8, 5)
    ring.recv(s, 8, 5)
    ring.submit()
    ring.cancel(5, 6)
    got = wait_n(ring, 3)
    assert [x.user_data for x in got] == [5, 5, 6]
    assert all(x.error is not None and x.error.errno == errno.ECANCELED for x in got[:2])
    assert got[2].result == 0
    assert got[2].error is None
    assert ring.in_flight == 0


def test_timeout_expires_with_etime_and_wait_honours_its_timeout(ring: Ring) -> None:
    t = time.monotonic()
    ring.timeout(0.05, 1)
    c = one(ring)
    took = time.monotonic() - t
    assert c.error is not None
    assert c.error.errno == errno.ETIME
    assert 0.045 <= took < 2, took

    ring.timeout(3600, 2)
    t = time.monotonic()
    assert ring.wait(timeout=0.1) == []
    assert 0.095 <= time.monotonic() - t < 2
    ring.cancel(2, 3)
    target, cancel = wait_n(ring, 2)
    assert target.error is not None
    assert target.error.errno == errno.ECANCELED
    assert (cancel.user_data, cancel.result) == (3, 0)


def test_timeout_with_a_count_completes_after_that_many_completions(ring: Ring) -> None:
    ring.timeout(3600, 1, count=2)
    ring.nop(2)
    ring.nop(3)
    got = wait_n(ring, 3)
    by_ud = {c.user_data: c for c in got}
    assert by_ud[1].result == 0
    assert by_ud[1].error is None


# -- the queues ---------------------------------------------------------------------------


def test_completion_queue_overflow_loses_nothing() -> None:
    with Ring(8, cq_entries=16, defer_taskrun=False) as ring:
        assert ring.cq_entries == 16
        for i in range(200):
            ring.nop(i)
            if i % 8 == 7:
                ring.submit()
        got = ring.wait(0)  # even a wait for nothing flushes the whole overflow list
        assert [c.user_data for c in got] == list(range(200))


def test_a_full_submission_queue_is_submitted_for_you() -> None:
    with Ring(4) as ring:
        assert ring.sq_entries == 4
        for i in range(100):
            ring.nop(i)
        assert sorted(c.user_data for c in wait_n(ring, 100)) == list(range(100))


def test_a_queue_that_cannot_be_submitted_raises_oserror() -> None:
    if not uring.probe()["defer_taskrun"]:
        pytest.skip("SINGLE_ISSUER|DEFER_TASKRUN rings unsupported here")
    ring = Ring(4, defer_taskrun=True)
    errors: list[BaseException] = []
    queued = 0

    def other_thread() -> None:
        # Only the creating thread may enter a SINGLE_ISSUER ring: the fifth op finds the
        # queue full and its submission refused.
        nonlocal queued
        try:
            for i in range(10):
                ring.nop(i)
                queued += 1
        except OSError as e:
            errors.append(e)
        try:
            ring.wait(timeout=0.1)
        except OSError as e:
            errors.append(e)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join(10)
    assert not t.is_alive()
    assert queued == 4
    assert [getattr(e, "errno", None) for e in errors] == [errno.EEXIST, errno.EEXIST]
    # The creator can still submit and reap them.
    assert sorted(c.user_data for c in wait_n(ring, 4)) == [0, 1, 2, 3]
    ring.close()


# -- closing ------------------------------------------------------------------------------


def test_closing_a_ring_with_ops_in_flight_cancels_and_reaps_them(fds: Fds) -> None:
    need_kernel(6, 0, "multishot receive on a buffer ring")
    lfd, _ = fds.listener()
    _, s = fds.connected()
    r, w = fds.pipe()
    ring = Ring()
    ring.provide_buffers(1, 4, 64)
    ring.recv(s, 1 << 16, 1)
    ring.recv_multishot(s, 1, 2)
    ring.accept(lfd, 3, multishot=True)
    ring.timeout(3600, 4)
    ring.read(r, 100, 5)
    r2, w2 = fds.pipe()
    ring.write(w2, b"x" * 10, 6)  # completes, never reaped
    ring.submit()
    ring.nop(7)  # queued, never submitted
    assert ring.in_flight == 7
    t = time.monotonic()
    ring.close()
    assert time.monotonic() - t < 2
    assert ring.closed
    assert ring.fd == -1
    assert ring.in_flight == 0
    ring.close()  # twice is harmless
    # The fds the ops used are untouched.
    fd.write(w, b"still open")
    assert fd.read(r, 100) == b"still open"
    assert fd.read(r2, 100) == b"x" * 10
    with pytest.raises(ValueError, match="closed Ring"):
        ring.nop(1)
    with pytest.raises(ValueError, match="closed Ring"):
        ring.wait()


def test_garbage_collecting_an_open_ring_cancels_and_closes_it(fds: Fds) -> None:
    c, s = fds.connected()
    ring = Ring()
    ring.recv(s, 100, 1)
    ring.submit()
    ring_fd = ring.fd
    assert "io_uring" in os.readlink(f"/proc/self/fd/{ring_fd}")
    del ring
    gc.collect()
    assert not is_open(ring_fd)
    # The receive was cancelled, not left to swallow the next bytes.
    fd.send(c, b"after")
    assert fd.recv(s, 100) == b"after"


def test_context_manager_closes(fds: Fds) -> None:
    with Ring(8) as ring:
        ring.nop(1)
        assert repr(ring).startswith("<Ring fd=")
    assert ring.closed
    assert repr(ring) == "<Ring closed>"


# -- threads and signals ------------------------------------------------------------------


def test_wait_releases_the_gil(fds: Fds) -> None:
    c, s = fds.connected()
    ring = Ring(defer_taskrun=False)
    ring.recv(s, 10, 1)
    out: list[list[Completion]] = []
    t = threading.Thread(target=lambda: out.append(ring.wait(timeout=5)))
    t.start()
    time.sleep(0.1)  # needs the GIL while the other thread waits
    started = time.monotonic()
    fd.send(c, b"wake")
    t.join(5)
    assert not t.is_alive()
    assert time.monotonic() - started < 1
    assert out[0][0].data == b"wake"
    ring.close()


def test_many_threads_share_one_ring() -> None:
    ring = Ring(16, defer_taskrun=False)
    per_thread = 500

    def producer(base: int) -> None:
        for i in range(per_thread):
            ring.nop(base + i)

    threads = [threading.Thread(target=producer, args=(k * 10_000,)) for k in range(4)]
    seen: list[int] = []
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while len(seen) < 4 * per_thread:
        assert time.monotonic() < deadline, len(seen)
        seen += [c.user_data for c in ring.wait(timeout=0.05)]
    for t in threads:
        t.join(5)
    assert sorted(seen) == sorted(k * 10_000 + i for k in range(4) for i in range(per_thread))
    ring.close()


class _Alarm(Exception):
    pass


def test_a_signal_handler_interrupts_wait_and_nothing_is_lost(ring: Ring) -> None:
    def handler(signum: int, frame: object) -> None:
        raise _Alarm

    old = signal.signal(signal.SIGALRM, handler)
    try:
        ring.timeout(3600, 1)
        ring.nop(2)
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        t = time.monotonic()
        with pytest.raises(_Alarm):
            ring.wait(2, timeout=None)  # the nop arrives; the hour-long timeout never does
        assert time.monotonic() - t < 1.5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    # The nop reaped before the interruption is still there.
    assert [c.user_data for c in ring.wait(1, timeout=1)] == [2]


IO_URING_ENTER = 426  # the same number on every architecture (the unified syscall table)

CHILD = """
import os, sys
from fdkit.uring import Ring
ring = Ring()
ring.timeout(3600, 1)
print("ready", os.getpid(), flush=True)
try:
    ring.wait()
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
    sys.exit(42)
sys.exit(0)
"""


def test_ctrl_c_interrupts_a_blocked_wait() -> None:
    with ready_child(CHILD) as (child, pid):
        wait_for(lambda: syscall_of(pid, pid) == IO_URING_ENTER, 10, "the child to block")
        out = interrupt_expecting_keyboard_interrupt(child, pid, "Ring.wait")
        assert "KeyboardInterrupt" in out


# -- misuse -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "exc"),
    [
        (lambda: Ring(0), ValueError),
        (lambda: Ring(-1), ValueError),
        (lambda: Ring(1 << 20), ValueError),
        (lambda: Ring("8"), TypeError),  # type: ignore[arg-type]  # misuse on purpose
        (lambda: Ring(8, cq_entries=4), ValueError),
    ],
)
def test_bad_ring_arguments_raise(call: Callable[[], object], exc: type[Exception]) -> None:
    with pytest.raises(exc):
        call()


def test_misuse_raises_and_never_crashes(ring: Ring, fds: Fds) -> None:
    c, _s = fds.connected()
    bad: list[tuple[Callable[[], object], type[Exception]]] = [
        (lambda: ring.recv(-1, 10, 1), ValueError),
        (lambda: ring.recv(c, -5, 1), ValueError),
        (lambda: ring.recv(c, 1 << 40, 1), ValueError),
        (lambda: ring.recv(c, 10, -1), ValueError),
        (lambda: ring.recv(c, 10, 2**64), ValueError),
        # Wrong types on purpose: the binding must say TypeError.
        (lambda: ring.recv(c, 10, "1"), TypeError),  # type: ignore[arg-type]  # misuse on purpose
        (lambda: ring.send(c, 123, 1), TypeError),  # type: ignore[arg-type]  # misuse on purpose
        (lambda: ring.send(c, "text", 1), TypeError),  # type: ignore[arg-type]  # misuse on purpose
        (lambda: ring.provide_buffers(1, 3, 16), ValueError),
        (lambda: ring.provide_buffers(1, 4, 0), ValueError),
        (lambda: ring.provide_buffers(1 << 16, 4, 16), ValueError),
        (lambda: ring.provide_buffers(1, 32768, 1 << 24), ValueError),
        (lambda: ring.recv_multishot(c, 99, 1), ValueError),
        (lambda: ring.timeout(-1, 1), ValueError),
        (lambda: ring.timeout(float("nan"), 1), ValueError),
        (lambda: ring.shutdown(c, 7, 1), ValueError),
        (lambda: ring.socket(1 << 20, 1, 1), ValueError),
        (lambda: ring.connect(c, ("127.0.0.1", 99999), 1), ValueError),
        (lambda: ring.wait(-1), ValueError),
        (lambda: ring.wait(1, timeout=-1), ValueError),
    ]
    for call, exc in bad:
        with pytest.raises(exc):
            call()
    ring.provide_buffers(1, 4, 16)
    with pytest.raises(ValueError, match="already"):
        ring.provide_buffers(1, 4, 16)
    assert ring.in_flight == 0
    ring.nop(5)
    assert one(ring).user_data == 5


def test_the_rings_own_fd_as_an_argument_is_refused_by_the_kernel(ring: Ring) -> None:
    ring.read(ring.fd, 10, 1)
    ring.write(ring.fd, b"x", 2)
    ring.close_fd(ring.fd, 3)
    ring.splice(ring.fd, ring.fd, 10, 4)
    got = {c.user_data: c for c in wait_n(ring, 4)}
    assert all(got[ud].error is not None for ud in (1, 2, 3, 4)), got
    error = got[3].error
    assert error is not None
    assert error.errno == errno.EBADF
    ring.nop(5)
    assert one(ring).user_data == 5  # and the ring still works


@pytest.mark.parametrize("value", [1e19, 1e300, float("inf")], ids=str)
def test_huge_timeouts_are_refused_as_too_large_not_a_panic(ring: Ring, value: float) -> None:
    """Before: `wait(0, timeout=1e19)` raised PanicException (Instant overflow), and
    `timeout(1e300, …)` said "must be >= 0 seconds"."""
    with pytest.raises(ValueError, match=r"timeout is too large: .* \(the limit is 9223372036"):
        ring.wait(0, timeout=value)
    with pytest.raises(ValueError, match=r"timeout is too large: .* \(the limit is 9223372036"):
        ring.timeout(value, 1)
    with pytest.raises(ValueError, match=r"timeout must be >= 0 seconds, got -1.0"):
        ring.wait(0, timeout=-1.0)
