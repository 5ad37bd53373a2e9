"""The pool of internal pipes behind ``transfer``, ``relay`` and ``proxy``: bounded, never
leaking an fd, never handing out a pipe that still holds bytes, and degrading to read/write
when no pipe can be had.

The pool's idle pipes are visible in /proc/self/fd; ``pipe_pool_clear()`` closes them, so each
test starts from an empty pool and can account for every fd.
"""

from __future__ import annotations

import fcntl
import functools
import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fdkit import fd, zerocopy
from helpers import Fds, Feeder, Sink, bounded, open_fds, payload, wait_for

pytestmark = pytest.mark.timeout(30)

POOL_CAPACITY = 16
F_GETPIPE_SZ = 1032


def pipe_fds() -> dict[int, str]:
    return {n: t for n, t in open_fds().items() if t.startswith("pipe:")}


def prefilled_source(fds: Fds, data: bytes) -> int:
    """A unix stream socket holding ``data`` (small enough for its buffer) followed by EOF."""
    a, b = fd.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    fds.own(a, b)
    assert fd.send(a, data) == len(data)
    fds.close(a)
    return b


def dead_destination(fds: Fds) -> int:
    """A unix stream socket whose peer is gone: every write is EPIPE."""
    a, b = fd.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    fds.own(a, b)
    fds.close(b)
    return a


def fill_socket_buffer(n: int) -> int:
    """Writes to a non-blocking socket until it would block; returns the bytes written."""
    total = 0
    chunk = b"F" * 65536
    while True:
        try:
            total += fd.send(n, chunk)
        except BlockingIOError:
            return total


def transfer_into_sink(fds: Fds, data: bytes, count: int | None = None) -> bytes:
    """A fresh source holding ``data`` → a fresh socket read by a thread: what arrived."""
    src = prefilled_source(fds, data)
    dst, far = fd.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    fds.own(dst, far)
    sink = Sink(far, keep=True)
    sink.start()
    moved = zerocopy.transfer(src, dst, count)
    fd.shutdown(dst, socket.SHUT_WR)
    got = bytes(sink.finish().kept)
    assert moved == len(got)
    return got


@pytest.fixture(autouse=True)
def empty_pool() -> None:
    zerocopy.pipe_pool_clear()
    assert zerocopy.pipe_pool_idle() == 0


def test_pool_pipes_are_nonblocking_cloexec_and_raised_toward_1mib(fds: Fds) -> None:
    before = pipe_fds()
    assert transfer_into_sink(fds, payload(100_000)) == payload(100_000)
    new = sorted(set(pipe_fds()) - set(before))
    assert zerocopy.pipe_pool_idle() == 1
    assert len(new) == 2, new
    max_size = int(Path("/proc/sys/fs/pipe-max-size").read_text())
    for n in new:
        assert not fd.get_blocking(n)
        assert fd.get_cloexec(n)
        size = fcntl.fcntl(n, F_GETPIPE_SZ)
        assert size == 1 << 20 or size == max_size or size == 65536, size
    assert zerocopy.pipe_pool_clear() == 1
    assert pipe_fds() == before


def test_sequential_transfers_reuse_one_pipe(fds: Fds) -> None:
    before = open_fds()
    for i in range(20):
        data = payload(50_000 + i, seed=i)
        local = Fds()
        try:
            assert transfer_into_sink(local, data) == data
        finally:
            local.close_all()
        assert zerocopy.pipe_pool_idle() == 1
    assert len(open_fds()) - len(before) == 2


def test_pool_is_bounded_and_clear_releases_every_fd(fds: Fds) -> None:
    """20 transfers hold a pipe each at the same time; when they end the pool keeps 16 and
    closes the other 4; ``pipe_pool_clear`` then brings the fd table back to where it was."""
    n = POOL_CAPACITY + 4
    srcs, feeders, outs = [], [], []
    devnull = fds.own(fd.open("/dev/null", fd.O_WRONLY))
    for _ in range(n):
        far, near = fd.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        fds.own(far, near)
        srcs.append((far, near))
    before = open_fds()
    threads = []
    for _, near in srcs:
        out: list[object] = []
        outs.append(out)
        # count=None: the plan's path, splice through a pooled pipe (socket → /dev/null).
        t = threading.Thread(
            target=lambda near=near, out=out: out.append(zerocopy.transfer(near, devnull)),
            daemon=True,
        )
        t.start()
        threads.append(t)
    try:
        # Every transfer took its pipe before waiting for data.
        pipes_before = len([t for t in before.values() if t.startswith("pipe:")])
        wait_for(
            lambda: len(pipe_fds()) - pipes_before >= 2 * n,
            10,
            f"{n} transfers to hold a pipe each",
        )
        for i, (far, _) in enumerate(srcs):
            shut = lambda far=far: fd.shutdown(far, socket.SHUT_WR)  # noqa: E731
            feeders.append(Feeder(far, payload(30_000, seed=i), then=shut))
            feeders[-1].start()
        for t in threads:
            t.join(10)
        for f in feeders:
            f.finish()
    finally:
        for far, _ in srcs:
            fd.shutdown(far, socket.SHUT_RDWR)
        for t in threads:
            t.join(10)
    assert all(not t.is_alive() for t in threads)
    assert outs == [[30_000]] * n
    assert zerocopy.pipe_pool_idle() == POOL_CAPACITY
    new = {k: v for k, v in open_fds().items() if before.get(k) != v}
    assert len(new) == 2 * POOL_CAPACITY
    assert all(v.startswith("pipe:") for v in new.values())
    assert zerocopy.pipe_pool_clear() == POOL_CAPACITY
    assert open_fds() == before


def test_failed_transfer_never_returns_its_pipe_with_bytes(fds: Fds) -> None:
    """The destination is dead while the internal pipe holds up to 1 MiB of the source: the
    pipe is closed, not pooled, and the next transfer gets exactly its own bytes."""
    assert transfer_into_sink(fds, payload(10_000, seed=1)) == payload(10_000, seed=1)
    assert zerocopy.pipe_pool_idle() == 1
    first = payload(150_000, seed=2)
    src = prefilled_source(fds, first)
    dst = dead_destination(fds)
    with pytest.raises(BrokenPipeError):
        zerocopy.transfer(src, dst)
    stats = zerocopy.transfer_stats()
    assert stats is not None
    assert stats["bytes"] == 0
    # The bytes left the source (they were in the internal pipe) and went nowhere.
    rest = fd.recv(src, 1 << 20, socket.MSG_DONTWAIT)
    assert len(rest) < len(first)
    assert zerocopy.pipe_pool_idle() == 0, "a pipe holding bytes went back to the pool"
    second = payload(100_000, seed=3)
    assert transfer_into_sink(fds, second) == second
    assert zerocopy.pipe_pool_idle() == 1


@pytest.mark.parametrize("count", [10_000, 300_000, None], ids=["small", "large", "eof"])
def test_interleaved_failures_and_successes(count: int | None, fds: Fds) -> None:
    """Failures that strand bytes in a pooled pipe, between successes that check their output
    byte for byte; the pool never grows past what is in use and every fd is accounted for."""
    before = open_fds()
    for i in range(15):
        local = Fds()
        try:
            size = count or 150_000
            data = payload(min(size, 150_000), seed=100 + i)
            src = prefilled_source(local, data)
            with pytest.raises(BrokenPipeError):
                zerocopy.transfer(src, dead_destination(local), count)
            good = payload(min(size, 150_000), seed=200 + i)
            assert transfer_into_sink(local, good, count) == good
        finally:
            local.close_all()
        assert zerocopy.pipe_pool_idle() <= 1
    after = open_fds()
    new = {k: v for k, v in after.items() if before.get(k) != v}
    assert len(new) == 2 * zerocopy.pipe_pool_idle(), new
    zerocopy.pipe_pool_clear()
    assert open_fds() == before


def test_other_failures_leak_nothing(fds: Fds, tmp_path: Path) -> None:
    """ESPIPE after the pipe was filled, EBADF, a reset source, a proxy and a relay that
    fail: afterwards only the pool's idle pipes are new, and clearing it restores the table."""
    (tmp_path / "f").write_bytes(payload(300_000))
    before = open_fds()
    for _ in range(5):
        local = Fds()
        try:
            f = local.own(fd.open(tmp_path / "f", fd.O_RDONLY))
            a, b = fd.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            local.own(a, b)
            # file → socket fills the internal pipe, then the destination offset is ESPIPE.
            with pytest.raises(OSError, match="Illegal seek"):
                zerocopy.transfer(f, a, None, dst_offset=0)
            with pytest.raises(OSError, match="Bad file descriptor"):
                zerocopy.transfer(f, 99_999)
            # relay and proxy onto dead peers, with bytes in flight.
            src = prefilled_source(local, payload(100_000))
            _, rec_w = local.pipe()
            with pytest.raises(BrokenPipeError):
                zerocopy.relay(src, dead_destination(local), record_fd=rec_w)
            c, s = fd.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            local.own(c, s)
            fd.send(c, payload(100_000))
            dead = dead_destination(local)
            out = bounded(functools.partial(zerocopy.proxy, s, dead))
            assert isinstance(out.error, OSError), out.result
        finally:
            local.close_all()
    new = {k: v for k, v in open_fds().items() if before.get(k) != v}
    assert len(new) == 2 * zerocopy.pipe_pool_idle(), new
    assert zerocopy.pipe_pool_idle() <= POOL_CAPACITY
    zerocopy.pipe_pool_clear()
    assert open_fds() == before


OUT_OF_FDS_CHILD = """
import json, os, resource, socket, sys, threading
from fdkit import zerocopy

def pair():
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

def filled(data):
    a, b = pair()
    a.sendall(data)
    a.close()
    return b

def drain(s):
    got = bytearray()
    while chunk := s.recv(1 << 20):
        got += chunk
    return bytes(got)

data = os.urandom(100_000)
# Everything the calls below need, made before the fd table is full.
src1, src2, src3, src4 = filled(data), filled(data), filled(data), filled(data)
dsts = [pair() for _ in range(4)]
rec_r, rec_w = os.pipe()
sinks = []
results = {}
for d_near, d_far in dsts:
    t = threading.Thread(target=lambda s=d_far: results.setdefault(s.fileno(), drain(s)))
    t.start()
    sinks.append(t)
rec = []
def read_recording():
    rec.append(b"".join(iter(lambda: os.read(rec_r, 1 << 20), b"")))
rt = threading.Thread(target=read_recording)
rt.start()

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
zerocopy.pipe_pool_clear()
fillers = []
try:
    while True:
        fillers.append(os.dup(0))
except OSError:
    pass

out = {}
out["transfer"] = zerocopy.transfer(src1.fileno(), dsts[0][0].fileno())
out["transfer_stats"] = zerocopy.transfer_stats()
out["small"] = zerocopy.transfer(src2.fileno(), dsts[1][0].fileno(), 16384)
out["small_stats"] = zerocopy.transfer_stats()
out["relay"] = zerocopy.relay(src3.fileno(), dsts[2][0].fileno())
out["relay_record"] = zerocopy.relay(src4.fileno(), dsts[3][0].fileno(), record_fd=rec_w)
for f in fillers:
    os.close(f)
os.close(rec_w)
for d_near, _ in dsts:
    d_near.shutdown(socket.SHUT_WR)
for t in sinks + [rt]:
    t.join(10)
got = [results[d_far.fileno()] for _, d_far in dsts]
out["intact"] = [got[0] == data, got[1] == data[:16384], got[2] == data, got[3] == data]
out["recorded"] = rec[0] == data
out["idle"] = zerocopy.pipe_pool_idle()
print(json.dumps(out))
"""


def test_out_of_fds_degrades_to_read_write() -> None:
    """With the fd table full no internal pipe can be made: transfer and relay (with and
    without a recording) fall back to read/write and still move every byte; the stats say
    EMFILE."""
    out = subprocess.run(
        [sys.executable, "-c", OUT_OF_FDS_CHILD],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["intact"] == [True, True, True, True]
    assert res["recorded"] is True
    assert (res["transfer"], res["small"], res["relay"], res["relay_record"]) == (
        100_000,
        16384,
        100_000,
        100_000,
    )
    for key in ("transfer_stats", "small_stats"):
        stats = res[key]
        assert stats["path"] == "read_write", stats
        assert stats["fallbacks"], stats
        assert stats["fallbacks"][-1]["errno"] == 24, stats  # EMFILE
        assert stats["fallbacks"][-1]["to"] == "read_write"
        assert stats["fallbacks"][-1]["reason"]


def test_pool_survives_many_threads(fds: Fds) -> None:
    """Eight threads, each doing 20 transfers through the pool with distinct payloads: every
    output is its own input, and the pool ends bounded."""
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        local = Fds()
        try:
            for i in range(20):
                data = payload(20_000 + 997 * k + i, seed=k)
                assert transfer_into_sink(local, data) == data
                local.close_all()
        except BaseException as e:  # reported below
            errors.append(e)
        finally:
            local.close_all()

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert all(not t.is_alive() for t in threads)
    assert errors == []
    assert 1 <= zerocopy.pipe_pool_idle() <= 8


def test_small_transfers_share_the_pool(fds: Fds) -> None:
    before = open_fds()
    for i in range(50):
        data = payload(100 + i * 300, seed=i)
        local = Fds()
        try:
            assert transfer_into_sink(local, data, len(data)) == data
        finally:
            local.close_all()
    assert zerocopy.pipe_pool_idle() == 1
    new = {k: v for k, v in open_fds().items() if before.get(k) != v}
    assert len(new) == 2


def test_pipe_pool_clear_when_empty_is_zero() -> None:
    assert zerocopy.pipe_pool_clear() == 0
    assert zerocopy.pipe_pool_idle() == 0
