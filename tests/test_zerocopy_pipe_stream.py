"""``zerocopy.Pipe`` as Go zerocopy's ``Pipe``: ``read_from``/``write_to`` that run to the end
(``n=None``) with a userspace fallback and waits on non-blocking fds, ``close_write()`` (a
half-close), and the standing tee (``add_mirror``): every chunk that leaves the pipe reaches
every mirror, whole and once, whatever the fd (file, socket, another Pipe, an O_APPEND file)."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from fdkit import zerocopy
from helpers import Feeder, Sink, payload, sha256

pytestmark = pytest.mark.timeout(60)


class Run(threading.Thread):
    """Runs ``call`` in a thread, keeping its result or its exception."""

    def __init__(self, call: object) -> None:
        super().__init__(daemon=True)
        self.call = call
        self.result: object = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.call()  # type: ignore[operator]
        except BaseException as e:
            self.error = e

    def value(self, timeout: float = 20.0) -> object:
        self.join(timeout)
        assert not self.is_alive(), "still running"
        if self.error is not None:
            raise self.error
        return self.result


def test_read_from_and_write_to_run_to_the_end(tmp_path: Path) -> None:
    data = payload(3 << 20, seed=1)  # far more than the pipe holds: both must run at once
    src = tmp_path / "src"
    src.write_bytes(data)
    dst = tmp_path / "dst"
    sfd = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    dfd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        with zerocopy.Pipe() as p:

            def produce() -> int:
                n = p.read_from(sfd)
                p.close_write()
                return n

            producer = Run(produce)
            producer.start()
            assert p.write_to(dfd) == len(data)  # returns at the pipe's end
            assert producer.value() == len(data)
            assert p.fds[1] == -1
            assert p.write_to(dfd) == 0  # still the end
    finally:
        os.close(sfd)
        os.close(dfd)
    assert dst.read_bytes() == data


def test_single_shot_forms_are_unchanged() -> None:
    r, w = os.pipe2(os.O_CLOEXEC)
    try:
        os.write(w, b"x" * 1000)
        with zerocopy.Pipe() as p:
            assert p.read_from(r, 100) == 100
            assert p.pending == 100
            out_r, out_w = os.pipe2(os.O_CLOEXEC)
            try:
                assert p.write_to(out_w, 30) == 30
                assert os.read(out_r, 100) == b"x" * 30
            finally:
                os.close(out_r)
                os.close(out_w)
    finally:
        os.close(r)
        os.close(w)


def test_userspace_fallback_both_ways(tmp_path: Path) -> None:
    # procfs files refuse splice (EINVAL) and an O_APPEND file refuses it as a destination.
    expected = Path("/proc/self/cmdline").read_bytes()
    src = os.open("/proc/self/cmdline", os.O_RDONLY | os.O_CLOEXEC)
    out = tmp_path / "log"
    out.write_bytes(b"head:")
    dst = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    try:
        probe_r, probe_w = os.pipe2(os.O_CLOEXEC)
        try:
            with pytest.raises(OSError, match="Invalid argument"):
                os.splice(src, probe_w, 10)  # really a path splice cannot take
        finally:
            os.close(probe_r)
            os.close(probe_w)
        with zerocopy.Pipe() as p:
            assert p.read_from(src) == len(expected)
            p.close_write()
            assert p.write_to(dst) == len(expected)
    finally:
        os.close(src)
        os.close(dst)
    assert out.read_bytes() == b"head:" + expected


def test_waits_on_non_blocking_fds() -> None:
    data = payload(1 << 20, seed=2)
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    try:
        for s in (a, b, c, d):
            s.setblocking(False)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        feeder = Feeder(
            b.fileno(), data, chunk=7000, pause=0.001, then=lambda: b.shutdown(socket.SHUT_WR)
        )
        sink = Sink(d.fileno(), pause=0.001)
        with zerocopy.Pipe(nonblocking=True) as p:
            feeder.start()
            sink.start()

            def produce() -> int:
                n = p.read_from(a.fileno())  # waits for the slow feeder, never spins out
                p.close_write()
                return n

            producer = Run(produce)
            producer.start()
            assert p.write_to(c.fileno()) == len(data)  # waits for the slow sink
            c.shutdown(socket.SHUT_WR)
            assert producer.value() == len(data)
        feeder.finish()
        sink.finish(20)
        assert sink.digest == sha256(data)
    finally:
        for s in (a, b, c, d):
            s.close()


def test_close_write_is_a_half_close() -> None:
    with zerocopy.Pipe() as p:
        r, w = p.fds
        os.write(w, b"last words")
        p.close_write()
        p.close_write()  # twice is harmless
        assert p.fds == (r, -1)
        assert not p.closed
        assert os.read(p.fileno(), 100) == b"last words"
        assert os.read(p.fileno(), 100) == b""  # EOF while the object lives
        with pytest.raises(ValueError, match="write end is closed"):
            p.read_from(r, 10)
        with pytest.raises(ValueError, match="write end is closed"):
            p.read_from(r)
        assert p.size > 0  # the read end still answers
    assert p.closed


def test_close_from_another_thread_ends_a_run_to_the_end() -> None:
    a, b = socket.socketpair()
    try:
        p = zerocopy.Pipe()
        waiting = Run(lambda: p.read_from(a.fileno()))  # nothing ever comes
        waiting.start()
        time.sleep(0.1)
        start = time.monotonic()
        p.close()
        with pytest.raises(ValueError, match="closed"):
            waiting.value(5)
        assert time.monotonic() - start < 2
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("writes", ["large", "tiny"])
def test_standing_tee_copies_every_chunk_to_every_mirror(writes: str, tmp_path: Path) -> None:
    # Tiny writes leave one small page buffer per write in the pipe: the tee into each mirror's
    # private pipe must still take whole chunks.
    data = payload(1 << 20, seed=3) if writes == "large" else payload(200_000, seed=4)
    rec = tmp_path / "recording"
    appended = tmp_path / "appended"
    appended.write_bytes(b"")
    rec_fd = os.open(rec, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    app_fd = os.open(appended, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)  # refuses splice
    sock_a, sock_b = socket.socketpair()
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    try:
        with zerocopy.Pipe() as p, zerocopy.Pipe() as side:
            p.add_mirror(rec_fd)
            p.add_mirror(side)
            p.add_mirror(sock_a.fileno())
            p.add_mirror(app_fd)
            assert p.mirrors == [rec_fd, side, sock_a.fileno(), app_fd]
            side_sink = Sink(side.fileno(), pause=0.0005)
            sock_sink = Sink(sock_b.fileno())
            out_sink = Sink(out_r)
            for t in (side_sink, sock_sink, out_sink):
                t.start()
            chunk = 256 << 10 if writes == "large" else 37
            feeder = Feeder(p.fds[1], data, chunk=chunk, then=p.close_write)
            feeder.start()
            assert p.write_to(out_w) == len(data)
            feeder.finish(20)
            side.close_write()
            sock_a.shutdown(socket.SHUT_WR)
            os.close(out_w)
            out_w = -1
            for t in (side_sink, sock_sink, out_sink):
                t.finish(20)
                assert t.digest == sha256(data)
        assert rec.read_bytes() == data
        assert appended.read_bytes() == data
    finally:
        os.close(rec_fd)
        os.close(app_fd)
        sock_a.close()
        sock_b.close()
        os.close(out_r)
        if out_w >= 0:
            os.close(out_w)


def test_mirrors_with_single_shot_write_to_and_removal() -> None:
    rec_r, rec_w = os.pipe2(os.O_CLOEXEC)
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    try:
        with zerocopy.Pipe() as p:
            p.add_mirror(rec_w)
            os.write(p.fds[1], b"0123456789")
            assert p.write_to(out_w, 4) == 4  # one chunk, mirrored first
            assert os.read(rec_r, 100) == b"0123"
            assert os.read(out_r, 100) == b"0123"
            p.remove_mirror(rec_w)
            assert p.mirrors == []
            with pytest.raises(ValueError, match="not a mirror"):
                p.remove_mirror(rec_w)
            assert p.write_to(out_w, 100) == 6
            assert os.read(out_r, 100) == b"456789"
            with pytest.raises(ValueError, match="itself"):
                p.add_mirror(p)
            with pytest.raises(TypeError, match="Pipe or an fd"):
                p.add_mirror("recording.bin")  # type: ignore[arg-type]
            with pytest.raises(OSError, match="Bad file descriptor"):
                p.add_mirror(999_999)  # EBADF at once, not at the first chunk
    finally:
        for n in (rec_r, rec_w, out_r, out_w):
            os.close(n)
