"""``zerocopy.Pipe``: a pipe pair as an object, with splice in (``read_from``), splice out
(``write_to``), ``tee`` to other pipes, sizes, and ValueError once closed."""

from __future__ import annotations

import errno
import gc
import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from fdkit import fd, zerocopy
from helpers import Fds, Feeder, Sink, bounded, is_open, open_fds, payload, sha256

pytestmark = pytest.mark.timeout(30)

PAGE = os.sysconf("SC_PAGE_SIZE")


def max_size() -> int:
    return int(Path("/proc/sys/fs/pipe-max-size").read_text())


def test_basics() -> None:
    with zerocopy.Pipe() as p:
        r, w = p.fds
        assert r != w
        assert is_open(r)
        assert is_open(w)
        assert fd.get_blocking(r)
        assert fd.get_blocking(w)
        assert fd.get_cloexec(r)
        assert fd.get_cloexec(w)
        assert p.size == 16 * PAGE  # the kernel default
        assert p.pending == 0
        assert not p.closed
        assert repr(p) == f"<Pipe read={r} write={w}>"
        fd.write(w, b"abc")
        assert p.pending == 3
        assert fd.read(r, 10) == b"abc"
        assert p.max_size == max_size()
    assert p.closed
    assert not is_open(r)
    assert not is_open(w)
    assert repr(p) == "<Pipe closed>"


def test_nonblocking_pipe() -> None:
    with zerocopy.Pipe(nonblocking=True) as p, zerocopy.Pipe() as q:
        r, w = p.fds
        assert not fd.get_blocking(r)
        assert not fd.get_blocking(w)
        null = fd.open("/dev/null", fd.O_WRONLY)
        try:
            with pytest.raises(BlockingIOError):
                p.write_to(null, 100)
            with pytest.raises(BlockingIOError):
                p.tee(q, 100)
        finally:
            fd.close(null)


@pytest.mark.parametrize(
    ("asked", "got"),
    [(PAGE, PAGE), (5000, 2 * PAGE), (1 << 20, 1 << 20), (0, PAGE), (3 * PAGE, 4 * PAGE)],
)
def test_size_argument_and_resize_round_up(asked: int, got: int) -> None:
    with zerocopy.Pipe(asked) as p:
        assert p.size == got
    with zerocopy.Pipe() as p:
        assert p.resize(asked) == got
        assert p.size == got


def test_resize_below_what_it_holds_is_ebusy() -> None:
    with zerocopy.Pipe(1 << 20) as p:
        fd.write(p.fds[1], b"x" * 200_000)
        with pytest.raises(OSError, match="Device or resource busy") as e:
            p.resize(PAGE)
        assert e.value.errno == errno.EBUSY
        assert p.size == 1 << 20
        assert p.pending == 200_000


def test_resize_or_max() -> None:
    with zerocopy.Pipe() as p:
        assert p.resize_or_max(1 << 20) == p.size == 1 << 20
        # Above pipe-max-size: EPERM for an unprivileged process, which then gets the maximum;
        # root (CAP_SYS_RESOURCE) may go above it.
        got = p.resize_or_max(4 * p.max_size)
        assert got == p.size
        assert got == p.max_size or (os.geteuid() == 0 and got == 4 * p.max_size)


def test_bad_sizes() -> None:
    with pytest.raises(ValueError, match="must be a non-negative int"):
        zerocopy.Pipe(-1)
    with pytest.raises(TypeError):
        zerocopy.Pipe("1")  # type: ignore[arg-type]  # misuse on purpose
    with zerocopy.Pipe() as p:
        with pytest.raises(ValueError, match="must be a non-negative int"):
            p.resize(-PAGE)
        with pytest.raises(ValueError, match="count out of range"):
            p.resize_or_max(2**64)
        with pytest.raises(TypeError):
            p.resize(1.5)  # type: ignore[arg-type]  # misuse on purpose


def test_read_from_and_write_to_files_with_offsets(fds: Fds, tmp_path: Path) -> None:
    data = payload(300_000, seed=1)
    (tmp_path / "src").write_bytes(data)
    src = fds.own(fd.open(tmp_path / "src", fd.O_RDONLY))
    dst = fds.own(fd.open(tmp_path / "dst", fd.O_RDWR | fd.O_CREAT, 0o600))
    fd.lseek(src, 11, os.SEEK_SET)
    with zerocopy.Pipe(1 << 20) as p:
        assert p.read_from(src, 100_000, offset=1000) == 100_000
        assert fd.lseek(src, 0, os.SEEK_CUR) == 11, "an offset leaves the position alone"
        assert p.pending == 100_000
        assert p.write_to(dst, 40_000, offset=500) == 40_000
        assert fd.lseek(dst, 0, os.SEEK_CUR) == 0
        assert p.write_to(dst, 60_000) == 60_000
        assert fd.lseek(dst, 0, os.SEEK_CUR) == 60_000
        assert p.pending == 0
        # Without an offset the file position is used and advances.
        assert p.read_from(src, 50) == 50
        assert fd.lseek(src, 0, os.SEEK_CUR) == 61
        assert p.write_to(dst, 50) == 50
        # At the end of the file: 0.
        assert p.read_from(src, 100, offset=len(data)) == 0
        assert p.read_from(src, 0) == 0
        assert p.write_to(dst, 0) == 0
    got = (tmp_path / "dst").read_bytes()
    assert got[:60_000] == data[41_000:101_000]
    assert got[60_000:60_050] == data[11:61]


def test_read_from_and_write_to_sockets(fds: Fds) -> None:
    a, b = fds.connected()
    c, d = fds.connected()
    data = payload(3 << 20, seed=2)
    feeder = Feeder(a, data, then=lambda: fd.shutdown(a, socket.SHUT_WR))
    sink = Sink(d)
    feeder.start()
    sink.start()

    def pump() -> int:
        moved = 0
        with zerocopy.Pipe(1 << 20) as p:
            while n := p.read_from(b, 1 << 20):
                while n:
                    m = p.write_to(c, n)
                    n -= m
                    moved += m
        return moved

    out = bounded(pump, timeout=20)
    fd.shutdown(c, socket.SHUT_WR)
    feeder.finish()
    sink.finish()
    assert out.get() == len(data)
    assert (sink.received, sink.digest) == (len(data), sha256(data))


def test_tee_duplicates_without_consuming() -> None:
    with zerocopy.Pipe() as p, zerocopy.Pipe() as q:
        fd.write(p.fds[1], b"0123456789")
        assert p.tee(q, 4) == 4
        assert (p.pending, q.pending) == (10, 4)
        assert p.tee(q, 100) == 10
        assert (p.pending, q.pending) == (10, 14)
        assert fd.read(q.fds[0], 100) == b"012301234567" + b"89"
        assert fd.read(p.fds[0], 100) == b"0123456789"


def test_tee_to_two_sinks(fds: Fds, tmp_path: Path) -> None:
    """One source pipe teed to two pipes, each drained to a different destination (a TCP
    client and a file); the source is then consumed. Both sinks get identical bytes."""
    data = payload(4 << 20, seed=3)
    far, camera = fds.connected()
    client, client_far = fds.connected()
    rec = fds.own(fd.open(tmp_path / "rec", fd.O_WRONLY | fd.O_CREAT, 0o600))
    null = fds.own(fd.open("/dev/null", fd.O_WRONLY))
    feeder = Feeder(far, data, then=lambda: fd.shutdown(far, socket.SHUT_WR))
    sink = Sink(client_far, keep=True)
    feeder.start()
    sink.start()

    def drain(pipe: zerocopy.Pipe, dst: int, n: int) -> None:
        while n:
            n -= pipe.write_to(dst, n)

    def run() -> int:
        total = 0
        with (
            zerocopy.Pipe(1 << 20) as src,
            zerocopy.Pipe(1 << 20) as q1,
            zerocopy.Pipe(1 << 20) as q2,
        ):
            while n := src.read_from(camera, 1 << 20):
                assert src.tee(q1, n) == n
                assert src.tee(q2, n) == n
                drain(q1, client, n)
                drain(q2, rec, n)
                drain(src, null, n)
                total += n
        return total

    out = bounded(run, timeout=20)
    fd.shutdown(client, socket.SHUT_WR)
    feeder.finish()
    assert out.get() == len(data)
    assert bytes(sink.finish().kept) == data
    assert (tmp_path / "rec").read_bytes() == data


def test_camera_to_client_and_recording(fds: Fds, tmp_path: Path) -> None:
    """The README's loop, verbatim: ``p.tee(rec, n); rec.write_to(recording, n);
    p.write_to(client, n)`` — with partial writes to the socket handled."""
    data = payload(3 << 20, seed=4)
    cam_far, camera_fd = fds.connected()
    client_fd, viewer = fds.connected()
    recording_fd = fds.own(fd.open(tmp_path / "rec.bin", fd.O_WRONLY | fd.O_CREAT, 0o600))
    feeder = Feeder(cam_far, data, then=lambda: fd.shutdown(cam_far, socket.SHUT_WR))
    sink = Sink(viewer, keep=True, pause=0.001)
    feeder.start()
    sink.start()

    def run() -> None:
        with zerocopy.Pipe() as p, zerocopy.Pipe() as rec:
            p.resize_or_max(1 << 20)
            rec.resize_or_max(1 << 20)
            while n := p.read_from(camera_fd, 1 << 20):
                assert p.tee(rec, n) == n
                left = n
                while left:
                    left -= rec.write_to(recording_fd, left)
                left = n
                while left:
                    left -= p.write_to(client_fd, left)

    bounded(run, timeout=20).get()
    fd.shutdown(client_fd, socket.SHUT_WR)
    feeder.finish()
    assert bytes(sink.finish().kept) == data
    assert (tmp_path / "rec.bin").read_bytes() == data


def test_closed_pipe_raises_value_error(fds: Fds) -> None:
    p = zerocopy.Pipe()
    q = zerocopy.Pipe()
    r, w = fds.pipe()
    p.close()
    p.close()  # twice is harmless
    assert p.closed
    calls: dict[str, Callable[[], object]] = {
        "read_from": lambda: p.read_from(r, 1),
        "write_to": lambda: p.write_to(w, 1),
        "tee": lambda: p.tee(q, 1),
        "tee_into_closed": lambda: q.tee(p, 1),
        "size": lambda: p.size,
        "resize": lambda: p.resize(PAGE),
        "resize_or_max": lambda: p.resize_or_max(PAGE),
        "pending": lambda: p.pending,
        "fds": lambda: p.fds,
    }
    for name, call in calls.items():
        # PT012: the fail names the call when it does not raise.
        with pytest.raises(ValueError, match="closed"):  # noqa: PT012
            call()
            pytest.fail(f"{name} on a closed Pipe did not raise")
    # The closed Pipe still works as a (no-op) context manager exit.
    # __exit__ returns None (it never swallows an exception); the stub says so, the test
    # checks the object does.
    assert p.__exit__(None, None, None) is None  # type: ignore[func-returns-value]
    q.close()


def test_context_manager_closes_on_exception() -> None:
    used: list[tuple[zerocopy.Pipe, int, int]] = []

    def use_then_fail() -> None:
        with zerocopy.Pipe() as p:
            used.append((p, *p.fds))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        use_then_fail()
    ((p, r, w),) = used
    assert p.closed
    assert not is_open(r)
    assert not is_open(w)


def test_dropped_pipes_close_their_fds() -> None:
    before = open_fds()
    for _ in range(200):
        zerocopy.Pipe()
    pipes = [zerocopy.Pipe() for _ in range(200)]
    del pipes
    gc.collect()
    assert open_fds() == before


def test_bad_fds_and_counts(fds: Fds) -> None:
    with zerocopy.Pipe() as p:
        with pytest.raises(OSError, match="Bad file descriptor") as e:
            p.read_from(4999, 10)
        assert e.value.errno == errno.EBADF
        with pytest.raises(OSError, match="Bad file descriptor") as e:
            p.write_to(4999, 10)
        assert e.value.errno == errno.EBADF
        with pytest.raises(ValueError, match="fd must be a non-negative int"):
            p.read_from(-1, 10)
        with pytest.raises(ValueError, match="must be a non-negative int"):
            p.write_to(0, -10)
        with pytest.raises(ValueError, match="must be a non-negative int"):
            p.read_from(0, 10, offset=-1)
        with pytest.raises(TypeError):
            p.tee(3, 10)  # type: ignore[arg-type]  # misuse on purpose
        with pytest.raises(TypeError):
            p.read_from("0", 10)  # type: ignore[arg-type]  # misuse on purpose
        # Teeing a pipe into itself: the kernel says EINVAL.
        fd.write(p.fds[1], b"x")
        with pytest.raises(OSError, match="Invalid argument") as e:
            p.tee(p, 1)
        assert e.value.errno == errno.EINVAL
        # splice at an offset on a pipe: ESPIPE.
        r, w = fds.pipe()
        fd.write(w, b"abc")
        with pytest.raises(OSError, match="Illegal seek") as e:
            p.read_from(r, 3, offset=0)
        assert e.value.errno == errno.ESPIPE


def test_write_to_a_pipe_without_reader_is_broken_pipe(fds: Fds) -> None:
    r, w = fds.pipe()
    fds.close(r)
    with zerocopy.Pipe() as p:
        fd.write(p.fds[1], b"data")
        with pytest.raises(BrokenPipeError):
            p.write_to(w, 4)
        assert p.pending == 4, "a failed splice consumed nothing"


def test_huge_counts_are_clamped_not_refused(fds: Fds, tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"z" * 1000)
    f = fds.own(fd.open(tmp_path / "f", fd.O_RDONLY))
    with zerocopy.Pipe() as p:
        assert p.read_from(f, 2**63 - 1) == 1000
        null = fds.own(fd.open("/dev/null", fd.O_WRONLY))
        assert p.write_to(null, 2**62) == 1000
