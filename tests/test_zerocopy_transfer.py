"""``zerocopy.transfer`` semantics: counts, offsets, EOF, peers that go away, non-blocking fds
without busy loops, forced fallbacks, and bad arguments.

Every call that could hang on a bug runs under :func:`helpers.bounded`; the other ends of
pipes and sockets are threads with bounded joins.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fdkit import fd, zerocopy
from fdkit.types import TransferStats
from helpers import (
    Fds,
    Feeder,
    Sink,
    bounded,
    is_open,
    payload,
    sha256,
    unix_stream_pair,
)

pytestmark = pytest.mark.timeout(30)

F_SETPIPE_SZ = 1031


def transfer_with_stats(*args: Any, **kwargs: Any) -> tuple[int, TransferStats]:
    """``transfer`` and its stats, read in the same thread (the stats are per thread)."""
    n = zerocopy.transfer(*args, **kwargs)
    stats = zerocopy.transfer_stats()
    assert stats is not None
    return n, stats


def read_all(n: int) -> bytes:
    """Everything readable from a blocking fd until EOF."""
    out = bytearray()
    while chunk := fd.read(n, 1 << 20):
        out += chunk
    return bytes(out)


def src_file(tmp_path: Path, data: bytes, fds: Fds, name: str = "src") -> int:
    p = tmp_path / name
    p.write_bytes(data)
    return fds.own(fd.open(p, fd.O_RDONLY))


def dst_file(tmp_path: Path, fds: Fds, name: str = "dst", flags: int = 0) -> tuple[int, Path]:
    p = tmp_path / name
    return fds.own(fd.open(p, fd.O_WRONLY | fd.O_CREAT | flags, 0o600)), p


def sockpair(fds: Fds) -> tuple[int, int]:
    a, b = fd.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    fds.own(a, b)
    return a, b


def devnull(fds: Fds) -> int:
    return fds.own(fd.open("/dev/null", fd.O_WRONLY))


def reset_close(fds: Fds, n: int) -> None:
    """Closes a TCP socket with SO_LINGER 0: the peer gets a RST, not a FIN."""
    fd.setsockopt(n, socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    fds.close(n)


# ---------------------------------------------------------------------------------------------
# Counts, EOF and offsets


@pytest.mark.parametrize("count", [5000, 70_000], ids=["small", "large"])
@pytest.mark.parametrize("dst_kind", ["file", "pipe", "tcp", "null"])
def test_count_smaller_than_the_file_then_the_rest(
    count: int, dst_kind: str, fds: Fds, tmp_path: Path
) -> None:
    data = payload(200_000, seed=1)
    src = src_file(tmp_path, data, fds)
    sink: Sink | None = None
    if dst_kind == "file":
        dst, path = dst_file(tmp_path, fds)
    elif dst_kind == "null":
        dst = devnull(fds)
    elif dst_kind == "pipe":
        r, dst = fds.pipe()
        sink = Sink(r, keep=True)
    else:
        dst, far = fds.connected()
        sink = Sink(far, keep=True)
    if sink:
        sink.start()
    first = zerocopy.transfer(src, dst, count)
    assert first == count
    assert fd.lseek(src, 0, os.SEEK_CUR) == count
    rest = zerocopy.transfer(src, dst)
    assert rest == len(data) - count
    assert fd.lseek(src, 0, os.SEEK_CUR) == len(data)
    assert zerocopy.transfer(src, dst) == 0, "a second transfer at EOF moves nothing"
    if dst_kind == "file":
        assert path.read_bytes() == data
    elif sink is not None:
        if dst_kind == "pipe":
            fds.close(dst)
        else:
            fd.shutdown(dst, socket.SHUT_WR)
        assert bytes(sink.finish().kept) == data


@pytest.mark.parametrize("count", [5000, 70_000], ids=["small", "large"])
@pytest.mark.parametrize("src_kind", ["tcp", "unix", "pipe"])
@pytest.mark.parametrize("dst_kind", ["file", "pipe"])
def test_count_smaller_than_a_stream_takes_no_more(
    count: int, src_kind: str, dst_kind: str, fds: Fds, tmp_path: Path
) -> None:
    """A stream source keeps every byte past ``count``: nothing is read ahead into the
    internal pipe or a buffer and lost."""
    data = payload(200_000, seed=2)
    if src_kind == "pipe":
        src, w = fds.pipe()
        feeder = Feeder(w, data, then=lambda: fds.close(w))
    else:
        far, src = fds.connected() if src_kind == "tcp" else unix_stream_pair(fds)
        feeder = Feeder(far, data, then=lambda: fd.shutdown(far, socket.SHUT_WR))
    feeder.start()
    sink: Sink | None = None
    if dst_kind == "file":
        dst, path = dst_file(tmp_path, fds)
    else:
        r, dst = fds.pipe()
        sink = Sink(r, keep=True)
        sink.start()
    try:
        # Let the whole stream arrive first (up to the socket/pipe buffer), so that an
        # over-read would have something to take.
        time.sleep(0.05)
        out = bounded(lambda: zerocopy.transfer(src, dst, count))
        assert out.get() == count
        rest = read_all(src)
    finally:
        if src_kind != "pipe":
            fd.shutdown(src, socket.SHUT_RDWR)
        feeder.join(10)
    feeder.finish()
    assert rest == data[count:], "bytes past the count were consumed from the source"
    if sink is not None:
        fds.close(dst)
        assert bytes(sink.finish().kept) == data[:count]
    else:
        assert path.read_bytes() == data[:count]


@pytest.mark.parametrize("count", [100, 10_000, 10**9, 2**63 - 1], ids=str)
@pytest.mark.parametrize("dst_kind", ["file", "tcp", "pipe", "null"])
def test_count_beyond_the_end_of_a_file_returns_what_was_there(
    count: int, dst_kind: str, fds: Fds, tmp_path: Path
) -> None:
    size = min(count, 100_000) - 1 if count < 10**9 else 100_000
    data = payload(size, seed=3)
    src = src_file(tmp_path, data, fds)
    sink: Sink | None = None
    if dst_kind == "file":
        dst, path = dst_file(tmp_path, fds)
    elif dst_kind == "null":
        dst = devnull(fds)
    elif dst_kind == "pipe":
        r, dst = fds.pipe()
        sink = Sink(r, keep=True)
    else:
        dst, far = fds.connected()
        sink = Sink(far, keep=True)
    if sink:
        sink.start()
    n, stats = transfer_with_stats(src, dst, count)
    assert n == size == stats["bytes"]
    if dst_kind == "file":
        assert path.read_bytes() == data
    elif sink is not None:
        fds.close(dst) if dst_kind == "pipe" else fd.shutdown(dst, socket.SHUT_WR)
        assert bytes(sink.finish().kept) == data


@pytest.mark.parametrize("count", [10_000, 10**9], ids=["small", "large"])
@pytest.mark.parametrize("src_kind", ["tcp", "socketpair", "pipe"])
def test_stream_ending_before_the_count(
    count: int, src_kind: str, fds: Fds, tmp_path: Path
) -> None:
    data = payload(3000 if count == 10_000 else 300_000, seed=4)
    if src_kind == "pipe":
        src, w = fds.pipe()
        feeder = Feeder(w, data, then=lambda: fds.close(w), chunk=1000)
    else:
        far, src = fds.connected() if src_kind == "tcp" else sockpair(fds)
        feeder = Feeder(far, data, then=lambda: fd.shutdown(far, socket.SHUT_WR), chunk=1000)
    dst, path = dst_file(tmp_path, fds)
    feeder.start()
    out = bounded(lambda: zerocopy.transfer(src, dst, count))
    feeder.finish()
    assert out.get() == len(data)
    assert path.read_bytes() == data


@pytest.mark.parametrize("count", [1000, 100_000], ids=["small", "large"])
def test_offsets_on_file_to_file(count: int, fds: Fds, tmp_path: Path) -> None:
    """With offsets, both sides are read/written there and neither file position moves."""
    data = payload(300_000, seed=5)
    src = src_file(tmp_path, data, fds)
    before = bytes([0xAA]) * 250_000
    (tmp_path / "dst").write_bytes(before)
    dst = fds.own(fd.open(tmp_path / "dst", fd.O_RDWR))
    fd.lseek(src, 5, os.SEEK_SET)
    fd.lseek(dst, 7, os.SEEK_SET)
    n, stats = transfer_with_stats(src, dst, count, src_offset=10, dst_offset=20)
    assert n == count
    # Small counts splice through a pooled pipe at the offsets; large ones copy_file_range.
    assert stats["path"] == ("splice_via_pipe" if count <= 64 << 10 else "copy_file_range"), stats
    assert stats["fallbacks"] == [], stats
    assert fd.lseek(src, 0, os.SEEK_CUR) == 5
    assert fd.lseek(dst, 0, os.SEEK_CUR) == 7
    got = (tmp_path / "dst").read_bytes()
    expect = before[:20] + data[10 : 10 + count] + before[20 + count :]
    assert got == expect


def test_offset_on_one_side_only(fds: Fds, tmp_path: Path) -> None:
    data = payload(100_000, seed=6)
    src = src_file(tmp_path, data, fds)
    dst, path = dst_file(tmp_path, fds)
    # Destination at an offset, source from its position (which advances).
    fd.lseek(src, 1000, os.SEEK_SET)
    assert zerocopy.transfer(src, dst, None, dst_offset=50_000) == 99_000
    assert fd.lseek(src, 0, os.SEEK_CUR) == 100_000
    assert fd.lseek(dst, 0, os.SEEK_CUR) == 0
    assert path.read_bytes() == bytes(50_000) + data[1000:]
    # Source at an offset, destination at its position (which advances).
    dst2, path2 = dst_file(tmp_path, fds, "dst2")
    assert zerocopy.transfer(src, dst2, 30_000, src_offset=123) == 30_000
    assert fd.lseek(src, 0, os.SEEK_CUR) == 100_000
    assert fd.lseek(dst2, 0, os.SEEK_CUR) == 30_000
    assert path2.read_bytes() == data[123:30_123]


@pytest.mark.parametrize("count", [1000, 100_000, None], ids=["small", "large", "eof"])
@pytest.mark.parametrize("dst_kind", ["tcp", "pipe", "null"])
def test_src_offset_to_streams(count: int | None, dst_kind: str, fds: Fds, tmp_path: Path) -> None:
    """sendfile (socket), splice (pipe) and read/write read at the offset too."""
    data = payload(200_000, seed=7)
    src = src_file(tmp_path, data, fds)
    fd.lseek(src, 3, os.SEEK_SET)
    sink: Sink | None = None
    if dst_kind == "null":
        dst = devnull(fds)
    elif dst_kind == "pipe":
        r, dst = fds.pipe()
        sink = Sink(r, keep=True)
    else:
        dst, far = fds.connected()
        sink = Sink(far, keep=True)
    if sink:
        sink.start()
    n = zerocopy.transfer(src, dst, count, src_offset=777)
    expect = data[777:] if count is None else data[777 : 777 + count]
    assert n == len(expect)
    assert fd.lseek(src, 0, os.SEEK_CUR) == 3
    if sink is not None:
        fds.close(dst) if dst_kind == "pipe" else fd.shutdown(dst, socket.SHUT_WR)
        assert bytes(sink.finish().kept) == expect


@pytest.mark.parametrize("count", [1000, 300_000], ids=["small", "large"])
@pytest.mark.parametrize("src_kind", ["pipe", "tcp"])
def test_dst_offset_from_streams(count: int, src_kind: str, fds: Fds, tmp_path: Path) -> None:
    """splice (pipe → file) and splice through the internal pipe (socket → file) write at the
    offset, leaving the file position alone."""
    data = payload(count, seed=8)
    if src_kind == "pipe":
        src, w = fds.pipe()
        feeder = Feeder(w, data, then=lambda: fds.close(w))
    else:
        far, src = fds.connected()
        feeder = Feeder(far, data, then=lambda: fd.shutdown(far, socket.SHUT_WR))
    dst, path = dst_file(tmp_path, fds)
    fd.write(dst, b"head")
    feeder.start()
    out = bounded(lambda: zerocopy.transfer(src, dst, count, dst_offset=10_000))
    feeder.finish()
    assert out.get() == count
    assert fd.lseek(dst, 0, os.SEEK_CUR) == 4
    assert path.read_bytes() == b"head" + bytes(10_000 - 4) + data


@pytest.mark.parametrize("count", [1000, 100_000, None], ids=["small", "large", "eof"])
def test_offset_at_or_past_the_end_moves_nothing(
    count: int | None, fds: Fds, tmp_path: Path
) -> None:
    data = payload(50_000, seed=9)
    src = src_file(tmp_path, data, fds)
    dst, path = dst_file(tmp_path, fds)
    a, _ = fds.connected()
    for off in (50_000, 10**12):
        assert zerocopy.transfer(src, dst, count, src_offset=off) == 0
        assert zerocopy.transfer(src, a, count, src_offset=off) == 0
    assert path.read_bytes() == b""
    assert fd.lseek(src, 0, os.SEEK_CUR) == 0


@pytest.mark.parametrize("count", [1000, 100_000], ids=["small", "large"])
def test_offsets_on_unseekable_fds_are_espipe(count: int, fds: Fds, tmp_path: Path) -> None:
    """An offset on a pipe or socket side is ESPIPE whatever path the count picks; the
    stream loses nothing it did not report."""
    r, w = fds.pipe()
    a, b = fds.connected()
    dst, _ = dst_file(tmp_path, fds)
    src = src_file(tmp_path, payload(200_000), fds)
    fd.write(w, b"x" * 100)
    fd.send(a, b"y" * 100)
    calls: list[Callable[[], int]] = [
        lambda: zerocopy.transfer(r, dst, count, src_offset=0),
        lambda: zerocopy.transfer(b, dst, count, src_offset=0),
        lambda: zerocopy.transfer(src, w, count, dst_offset=0),
        lambda: zerocopy.transfer(src, a, count, dst_offset=0),
    ]
    for call in calls:
        out = bounded(call)
        assert isinstance(out.error, OSError), (call, out.result)
        assert out.error.errno == errno.ESPIPE, out.error


# ---------------------------------------------------------------------------------------------
# Peers that go away


class ClosingReader(threading.Thread):
    """Reads ``limit`` bytes from ``n`` and then closes it (with unread data: a RST for TCP)."""

    def __init__(self, fds: Fds, n: int, limit: int) -> None:
        super().__init__(daemon=True)
        self.fds, self.n, self.limit, self.got = fds, n, limit, 0

    def run(self) -> None:
        while self.got < self.limit:
            data = fd.read(self.n, min(65536, self.limit - self.got))
            if not data:
                break
            self.got += len(data)
        self.fds.close(self.n)


def sparse_file(tmp_path: Path, size: int, fds: Fds) -> int:
    p = tmp_path / "sparse"
    with open(p, "wb") as f:
        f.truncate(size)
    return fds.own(fd.open(p, fd.O_RDONLY))


@pytest.mark.parametrize(
    ("src_kind", "dst_kind"),
    [
        ("file", "tcp"),  # sendfile
        ("file", "unix"),  # sendfile
        ("file", "pipe"),  # splice
        ("tcp", "tcp"),  # splice through the internal pipe
        ("unix", "socketpair"),  # splice through the internal pipe
        ("pipe", "tcp"),  # splice
        ("tcp", "pipe"),  # splice
        ("zero", "tcp"),  # splice through the internal pipe
    ],
)
def test_destination_peer_closes_mid_transfer(
    src_kind: str, dst_kind: str, fds: Fds, tmp_path: Path
) -> None:
    """The reader goes away after 100 KB of a much longer stream: a clean BrokenPipeError or
    ConnectionResetError, promptly, and the process lives on."""
    big = 256 << 20
    feeder: Feeder | None = None
    count: int | None = None
    if src_kind == "file":
        src = sparse_file(tmp_path, big, fds)
    elif src_kind == "zero":
        src = fds.own(fd.open("/dev/zero", fd.O_RDONLY))
        count = big
    elif src_kind == "pipe":
        src, w = fds.pipe()
        feeder = Feeder(w, payload(8 << 20), then=lambda: fds.close(w))
    else:
        far, src = fds.connected() if src_kind == "tcp" else unix_stream_pair(fds)
        feeder = Feeder(far, payload(8 << 20), then=lambda: fd.shutdown(far, socket.SHUT_WR))
    if dst_kind == "pipe":
        reader_end, dst = fds.pipe()
    elif dst_kind == "socketpair":
        dst, reader_end = sockpair(fds)
    else:
        dst, reader_end = fds.connected() if dst_kind == "tcp" else unix_stream_pair(fds)
    reader = ClosingReader(fds, reader_end, 100_000)
    reader.start()
    if feeder:
        feeder.start()

    def unblock() -> None:
        for n in (src, dst):
            if dst_kind != "pipe" or n != dst:
                with contextlib.suppress(OSError):
                    fd.shutdown(n, socket.SHUT_RDWR)

    out = bounded(lambda: zerocopy.transfer(src, dst, count), timeout=10, unblock=unblock)
    reader.join(5)
    assert isinstance(out.error, (BrokenPipeError, ConnectionResetError)), (
        out.result,
        out.error,
    )
    assert reader.got >= 100_000 or reader.got > 0
    if feeder is not None:
        # Unblock a feeder still writing into the source (a shutdown wakes a blocked sender
        # with EPIPE; a closed read end does it for a pipe), then let it go.
        if src_kind == "pipe":
            fds.close(src)
        else:
            fd.shutdown(feeder.fd, socket.SHUT_RDWR)
        feeder.join(10)
        assert not feeder.is_alive()


@pytest.mark.parametrize("dst_kind", ["socketpair", "pipe"])
def test_small_transfer_to_a_closed_peer(dst_kind: str, fds: Fds, tmp_path: Path) -> None:
    src = src_file(tmp_path, payload(10_000), fds)
    if dst_kind == "pipe":
        r, dst = fds.pipe()
        fds.close(r)
    else:
        dst, peer = sockpair(fds)
        fds.close(peer)
    with pytest.raises(BrokenPipeError):
        zerocopy.transfer(src, dst, 10_000, src_offset=0)
    with pytest.raises(BrokenPipeError):
        zerocopy.transfer(src, dst, None, src_offset=0)


@pytest.mark.parametrize("count", [10_000, None], ids=["small", "eof"])
def test_source_peer_resets_mid_transfer(count: int | None, fds: Fds, tmp_path: Path) -> None:
    """A RST on the source socket ends the transfer with ConnectionResetError (the bytes
    already delivered stay delivered)."""
    far, src = fds.connected()
    dst, path = dst_file(tmp_path, fds)
    fd.send(far, b"abc")

    def reset_later() -> None:
        time.sleep(0.2)
        reset_close(fds, far)

    t = threading.Thread(target=reset_later, daemon=True)
    t.start()
    out = bounded(lambda: transfer_with_stats(src, dst, count), timeout=10)
    t.join(5)
    assert isinstance(out.error, ConnectionResetError), (out.result, out.error)
    assert path.read_bytes() == b"abc"


SIGPIPE_CHILD = """
import os, signal, socket, sys, threading
from fdkit import zerocopy
{setup}
keep = []
def dead_socket():
    a, b = socket.socketpair()
    b.close()
    keep.append(a)
    return a
def dead_pipe():
    r, w = os.pipe()
    os.close(r)
    return w
f = os.open(sys.argv[1], os.O_RDONLY)
def feed(c):
    def run():
        try:
            c.sendall(b"x" * 300000)
        except OSError:
            pass
    keep.append(c)
    threading.Thread(target=run, daemon=True).start()
cases = {{
    "sendfile": lambda: zerocopy.transfer(f, dead_socket().fileno(), None, src_offset=0),
    "read_write": lambda: zerocopy.transfer(f, dead_socket().fileno(), 1000, src_offset=0),
    "splice_pipe": lambda: zerocopy.transfer(f, dead_pipe(), None, src_offset=0),
}}
def via_pipe():
    c, s = socket.socketpair()
    feed(c)
    keep.append(s)
    return zerocopy.transfer(s.fileno(), dead_socket().fileno())
cases["splice_via_pipe"] = via_pipe
def prox():
    c, a = socket.socketpair()
    b = dead_socket()
    keep.append(a)
    feed(c)
    return zerocopy.proxy(a.fileno(), b.fileno())
cases["proxy"] = prox
def rel():
    c, a = socket.socketpair()
    keep.append(a)
    feed(c)
    return zerocopy.relay(a.fileno(), dead_socket().fileno())
cases["relay"] = rel
for name in {names}:
    try:
        cases[name]()
        print(name, "returned", flush=True)
    except OSError as e:
        print(name, type(e).__name__, flush=True)
print("alive", flush=True)
"""


def run_sigpipe_child(tmp_path: Path, setup: str, names: list[str]) -> list[str]:
    p = tmp_path / "data"
    p.write_bytes(payload(4 << 20))
    code = SIGPIPE_CHILD.format(setup=setup, names=names)
    out = subprocess.run(
        [sys.executable, "-c", code, str(p)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 0, (
        f"the child died (returncode {out.returncode}): {out.stdout!r} {out.stderr!r}"
    )
    return out.stdout.splitlines()


def test_no_sigpipe_death_with_pythons_default_disposition(tmp_path: Path) -> None:
    names = ["sendfile", "read_write", "splice_pipe", "splice_via_pipe", "proxy", "relay"]
    lines = run_sigpipe_child(tmp_path, "", names)
    assert lines[-1] == "alive"
    for line, name in zip(lines, names, strict=False):
        what, outcome = line.split()
        assert what == name
        assert outcome in {"BrokenPipeError", "ConnectionResetError"}, line


def test_proxy_and_relay_never_die_of_sigpipe(tmp_path: Path) -> None:
    """No death by SIGPIPE: a program that restored SIGPIPE's default action (as CLI tools
    piping to `head` do) gets an error from proxy/relay (sends use MSG_NOSIGNAL, EPIPE is
    handled); it is not killed by the kernel's splice to a dead socket."""
    setup = "signal.signal(signal.SIGPIPE, signal.SIG_DFL)"
    lines = run_sigpipe_child(tmp_path, setup, ["proxy", "relay"])
    assert lines[-1] == "alive"


# ---------------------------------------------------------------------------------------------
# Non-blocking fds: wait on the side that would block, never spin


def small_buffers(n: int) -> None:
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        fd.setsockopt(n, socket.SOL_SOCKET, opt, 4096)


def stream_end(kind: str, fds: Fds, role: str) -> tuple[int, int]:
    """``(transfer side, far side)`` for a source (``role="src"``) or destination."""
    if kind == "pipe":
        r, w = fds.pipe()
        fd.fcntl(w, F_SETPIPE_SZ, 4096)
        return (r, w) if role == "src" else (w, r)
    if kind == "tcp":
        a, b = fds.connected()
    elif kind == "unix":
        a, b = unix_stream_pair(fds)
    else:
        a, b = sockpair(fds)
    small_buffers(a)
    small_buffers(b)
    return a, b


SLOW_CASES = [
    ("tcp", "tcp", None),  # splice through the internal pipe
    ("unix", "socketpair", None),
    ("pipe", "pipe", None),  # splice: a full destination pipe must not look like no data
    ("pipe", "tcp", None),
    ("tcp", "pipe", None),
    ("tcp", "file", None),
    # A file into a full socket, through the pooled pipe. (Unix, not TCP: loopback TCP with
    # tiny buffers paces itself with its own timers, far slower than the sink.)
    ("file", "unix", None),
    ("file", "pipe", None),  # splice into a full pipe
    ("zero", "unix", 96 << 10),  # /dev/zero never blocks: only the destination is slow
    ("tcp", "tcp", 16 << 10),  # the small-count path
]


@pytest.mark.serial
@pytest.mark.parametrize(("src_kind", "dst_kind", "count"), SLOW_CASES)
def test_non_blocking_slow_ends_do_not_spin(
    src_kind: str, dst_kind: str, count: int | None, fds: Fds, tmp_path: Path
) -> None:
    """Both fds non-blocking, the source trickles (a chunk every 20 ms) and the destination is
    drained slowly: every byte arrives and the transferring thread sleeps in poll meanwhile."""
    total = count if count is not None else 96 << 10
    chunk = total // 24
    data = payload(total, seed=10)
    feeder: Feeder | None = None
    if src_kind == "file":
        # A file never blocks: only the destination is slow.
        src = src_file(tmp_path, data, fds)
    elif src_kind == "zero":
        src = fds.own(fd.open("/dev/zero", fd.O_RDONLY))
        data = bytes(total)
    else:
        src, far = stream_end(src_kind, fds, "src")
        closer = (
            (lambda: fds.close(far))
            if src_kind == "pipe"
            else (lambda: fd.shutdown(far, socket.SHUT_WR))
        )
        feeder = Feeder(far, data, then=closer, chunk=chunk, pause=0.02)
    if dst_kind == "file":
        dst, path = dst_file(tmp_path, fds)
        sink = None
    else:
        dst, far_dst = stream_end(dst_kind, fds, "dst")
        # Drains 4 KiB at a time with pauses; when the source never blocks (a file, /dev/zero)
        # the destination alone has to make the transfer last (TCP with 4 KiB buffers is slow
        # enough by itself).
        never_blocks = src_kind in ("file", "zero") and dst_kind != "tcp"
        sink = Sink(far_dst, keep=True, chunk=4096, pause=0.02 if never_blocks else 0.005)
        sink.start()
    fd.set_blocking(src, False)
    fd.set_blocking(dst, False)
    if feeder:
        feeder.start()
    wall0, cpu0, proc0 = time.monotonic(), time.thread_time(), time.process_time()
    n = zerocopy.transfer(src, dst, count)
    wall, cpu = time.monotonic() - wall0, time.thread_time() - cpu0
    proc = time.process_time() - proc0
    assert n == total
    if feeder:
        feeder.finish()
    if sink is not None:
        if dst_kind == "pipe":
            fds.close(dst)
        else:
            fd.shutdown(dst, socket.SHUT_WR)
        got = bytes(sink.finish().kept)
    else:
        got = path.read_bytes()
    assert sha256(got) == sha256(data)
    assert wall > 0.3, f"the trickle should have taken a while ({wall:.2f} s)"
    assert cpu < 0.15 * wall, f"transfer used {cpu:.2f} s CPU in {wall:.2f} s: a busy loop?"
    assert proc < 0.5, f"the process used {proc:.2f} s CPU in {wall:.2f} s"


@pytest.mark.serial
def test_full_destination_pipe_is_not_mistaken_for_an_empty_source(fds: Fds) -> None:
    """pipe → pipe with the destination full and the source full too: transfer must wait for
    room in the destination (POLLOUT), not for data that is already there, and must not spin
    while the destination stays full."""
    r1, w1 = fds.pipe(os.O_NONBLOCK)
    r2, w2 = fds.pipe(os.O_NONBLOCK)
    fd.fcntl(w2, F_SETPIPE_SZ, 4096)
    data = payload(200_000, seed=11)
    feeder = Feeder(w1, data, then=lambda: fds.close(w1))
    sink = Sink(r2, keep=True, chunk=4096, pause=0.01)
    fd.write(w2, b"\0" * 4096)  # full before the transfer starts
    feeder.start()
    time.sleep(0.05)  # the source fills up too
    # Nobody drains the destination for 0.3 s: the transfer must sleep meanwhile.
    timer = threading.Timer(0.3, sink.start)
    timer.start()

    def run() -> tuple[int, float]:
        cpu0 = time.thread_time()
        n = zerocopy.transfer(r1, w2)
        return n, time.thread_time() - cpu0

    out = bounded(run, timeout=20)
    timer.join(5)
    n, cpu = out.get()
    assert n == len(data)
    assert cpu < 0.15 * out.elapsed, f"{cpu:.2f} s CPU in {out.elapsed:.2f} s: a busy loop?"
    feeder.finish()
    fds.close(w2)
    assert bytes(sink.finish().kept) == b"\0" * 4096 + data


# ---------------------------------------------------------------------------------------------
# Forced fallbacks: every byte still moves, and the stats say why


def check_chain(stats: TransferStats) -> list[tuple[str, int | None]]:
    chain = [f["from"] for f in stats["fallbacks"]] + [stats["path"]]
    for f, nxt in zip(stats["fallbacks"], chain[1:], strict=True):
        assert f["to"] == nxt, stats
        assert f["reason"], stats
    return [(f["from"], f["errno"]) for f in stats["fallbacks"]]


@pytest.mark.parametrize("src_kind", ["file", "tmpfs", "pipe", "tcp", "zero"])
@pytest.mark.parametrize("size", [10_000, 3 << 20], ids=["small", "3MiB"])
def test_append_only_destination(
    src_kind: str, size: int, fds: Fds, tmp_path: Path, shm_dir: Path
) -> None:
    """O_APPEND: copy_file_range says EBADF, sendfile and splice say EINVAL; bytes already
    spliced into the internal pipe are copied out, the rest goes by read/write, appended
    after what the file held."""
    data = bytes(size) if src_kind == "zero" else payload(size, seed=12)
    feeder: Feeder | None = None
    if src_kind in ("file", "tmpfs"):
        src = src_file(tmp_path if src_kind == "file" else shm_dir, data, fds)
    elif src_kind == "zero":
        src = fds.own(fd.open("/dev/zero", fd.O_RDONLY))
    elif src_kind == "pipe":
        src, w = fds.pipe()
        feeder = Feeder(w, data, then=lambda: fds.close(w))
    else:
        far, src = fds.connected()
        feeder = Feeder(far, data, then=lambda: fd.shutdown(far, socket.SHUT_WR))
    (tmp_path / "log").write_bytes(b"existing\n")
    dst = fds.own(fd.open(tmp_path / "log", fd.O_WRONLY | fd.O_APPEND))
    if feeder:
        feeder.start()
    out = bounded(lambda: transfer_with_stats(src, dst, size))
    if feeder:
        feeder.finish()
    n, stats = out.get()
    assert n == size
    assert (tmp_path / "log").read_bytes() == b"existing\n" + data
    if size <= 64 << 10:
        assert stats["path"] == "read_write"
        return
    assert stats["path"] == "read_write", stats
    fallbacks = check_chain(stats)
    if stats["remembered"]:
        return
    expected = {
        "file": [("copy_file_range", errno.EBADF), ("sendfile", errno.EINVAL)],
        "pipe": [("splice", errno.EINVAL)],
        "tcp": [("splice_via_pipe", errno.EINVAL)],
        "zero": [("splice_via_pipe", errno.EINVAL)],
    }
    # ext4 → tmpfs is EXDEV before O_APPEND is even looked at.
    if src_kind == "tmpfs":
        assert fallbacks[0][0] == "copy_file_range", stats
        assert fallbacks[1:] == [("sendfile", errno.EINVAL)], stats
    else:
        assert fallbacks == expected[src_kind], stats


def test_copy_file_range_across_filesystems_moves_every_byte(
    fds: Fds, tmp_path: Path, shm_dir: Path
) -> None:
    data = payload(5 << 20, seed=13)
    for src_dir, dst_dir in ((tmp_path, shm_dir), (shm_dir, tmp_path)):
        src = src_file(src_dir, data, fds, "cross-src")
        dst, path = dst_file(dst_dir, fds, "cross-dst")
        n, stats = transfer_with_stats(src, dst)
        assert n == len(data)
        assert path.read_bytes() == data
        chain = check_chain(stats)
        if stats["path"] != "copy_file_range" and not stats["remembered"]:
            assert chain[0] == ("copy_file_range", errno.EXDEV), stats
        fds.close(src)
        fds.close(dst)


def proc_and_sys_files() -> list[str]:
    candidates = [
        "/proc/self/cmdline",  # splice/sendfile: EINVAL
        "/proc/self/environ",
        "/proc/filesystems",  # seq_file: sendfile works, st_size is 0
        "/proc/version",
        "/sys/devices/system/cpu/possible",  # sysfs: sendfile returns 0, st_size is 4096
        "/sys/kernel/mm/transparent_hugepage/enabled",
    ]
    return [p for p in candidates if os.path.exists(p)]


@pytest.mark.parametrize("path", proc_and_sys_files())
@pytest.mark.parametrize("dst_kind", ["file", "tmpfs", "socketpair", "pipe"])
def test_proc_and_sys_sources(
    path: str, dst_kind: str, fds: Fds, tmp_path: Path, shm_dir: Path
) -> None:
    """/proc and sysfs files report a size of 0 or 4096 whatever they hold, and refuse
    splice or make copy_file_range/sendfile return 0 with data left: the content must still
    arrive whole, by whichever path works."""
    with open(path, "rb") as f:
        expect = f.read()
    src = fds.own(fd.open(path, fd.O_RDONLY))
    sink: Sink | None = None
    if dst_kind in ("file", "tmpfs"):
        dst, out_path = dst_file(tmp_path if dst_kind == "file" else shm_dir, fds)
    elif dst_kind == "pipe":
        r, dst = fds.pipe()
        sink = Sink(r, keep=True)
    else:
        dst, far = sockpair(fds)
        sink = Sink(far, keep=True)
    if sink:
        sink.start()
    out = bounded(lambda: transfer_with_stats(src, dst))
    n, stats = out.get()
    if sink is not None:
        fds.close(dst) if dst_kind == "pipe" else fd.shutdown(dst, socket.SHUT_WR)
        got = bytes(sink.finish().kept)
    else:
        got = out_path.read_bytes()
    assert got == expect, stats
    assert n == len(expect) == stats["bytes"]
    check_chain(stats)
    if dst_kind in ("file", "tmpfs") and not stats["remembered"]:
        # procfs/sysfs → a disk or tmpfs file: copy_file_range cannot work across them.
        assert stats["fallbacks"], stats
        assert stats["fallbacks"][0]["from"] == "copy_file_range"
    if path.startswith("/sys/") and dst_kind != "pipe" and not stats["remembered"]:
        # sendfile from sysfs returns 0 before the end: the reason says so.
        reasons = {f["reason"] for f in stats["fallbacks"] if f["from"] == "sendfile"}
        if reasons:
            assert any("0" in r or "refused" in r for r in reasons), stats


# ---------------------------------------------------------------------------------------------
# Bad arguments: ValueError/TypeError/OSError, never a crash


def never_open_fd() -> int:
    n = 4000
    while is_open(n):
        n += 1
    return n


@pytest.mark.parametrize("count", [10, 100_000, None], ids=["small", "large", "eof"])
def test_closed_fds_are_ebadf(count: int | None, fds: Fds, tmp_path: Path) -> None:
    src = src_file(tmp_path, payload(200_000), fds)
    dst, _ = dst_file(tmp_path, fds)
    stale = never_open_fd()
    for a, b in ((stale, dst), (src, stale), (stale, stale)):
        with pytest.raises(OSError, match="Bad file descriptor") as e:
            zerocopy.transfer(a, b, count)
        assert e.value.errno == errno.EBADF, e.value


@pytest.mark.parametrize("count", [10, 100_000, None], ids=["small", "large", "eof"])
def test_wrong_direction_fds(count: int | None, fds: Fds, tmp_path: Path) -> None:
    """A write-only source or a read-only destination: EBADF, after trying every path (each
    refuses it), not a crash or a silent 0."""
    (tmp_path / "f").write_bytes(payload(200_000))
    wo = fds.own(fd.open(tmp_path / "f", fd.O_WRONLY))
    ro = fds.own(fd.open(tmp_path / "f", fd.O_RDONLY))
    ro2 = fds.own(fd.open(tmp_path / "f", fd.O_RDONLY))
    with pytest.raises(OSError, match="Bad file descriptor") as e:
        zerocopy.transfer(wo, devnull(fds), count)
    assert e.value.errno == errno.EBADF
    with pytest.raises(OSError, match="Bad file descriptor") as e:
        zerocopy.transfer(ro, ro2, count)
    assert e.value.errno == errno.EBADF
    _, w = fds.pipe()
    fd.write(w, b"z" * 100)
    with pytest.raises(OSError, match="Bad file descriptor") as e:
        zerocopy.transfer(w, devnull(fds), count)
    assert e.value.errno == errno.EBADF


def test_directory_source(fds: Fds, tmp_path: Path) -> None:
    d = fds.own(fd.open(tmp_path, fd.O_RDONLY))
    for count in (10, 100_000, None):
        with pytest.raises(OSError, match="Is a directory") as e:
            zerocopy.transfer(d, devnull(fds), count)
        assert e.value.errno in (errno.EISDIR, errno.EINVAL), e.value


BAD_ARGS: list[tuple[tuple[Any, ...], dict[str, Any], type[BaseException]]] = [
    ((-1, 1), {}, ValueError),
    ((1, -1), {}, ValueError),
    ((2**31, 1), {}, ValueError),
    ((1, 2**31), {}, ValueError),
    ((2**64, 1), {}, ValueError),
    ((-(2**70), 1), {}, ValueError),
    (("3", 1), {}, TypeError),
    ((3.0, 1), {}, TypeError),
    ((None, 1), {}, TypeError),
    ((b"3", 1), {}, TypeError),
    ((0, 1, -1), {}, ValueError),
    ((0, 1, 2**64), {}, ValueError),
    ((0, 1, 1.5), {}, TypeError),
    ((0, 1, "10"), {}, TypeError),
    ((0, 1), {"src_offset": -1}, ValueError),
    ((0, 1), {"dst_offset": -5}, ValueError),
    ((0, 1), {"src_offset": 2**64}, ValueError),
    ((0, 1), {"dst_offset": "0"}, TypeError),
    ((0, 1), {"bogus": 1}, TypeError),
    ((0,), {}, TypeError),
    ((0, 1, 2, 3), {}, TypeError),
]


@pytest.mark.parametrize(("args", "kwargs", "exc"), BAD_ARGS, ids=repr)
def test_bad_arguments(args: tuple[Any, ...], kwargs: dict[str, Any], exc: type) -> None:
    # No fd is touched: the arguments are refused before any syscall (0 and 1 are only
    # placeholders for valid fds).
    with pytest.raises(exc):
        zerocopy.transfer(*args, **kwargs)


def test_bool_and_index_objects_are_ints(fds: Fds, tmp_path: Path) -> None:
    class Idx:
        def __init__(self, v: int) -> None:
            self.v = v

        def __index__(self) -> int:
            return self.v

    src = src_file(tmp_path, b"hello world", fds)
    dst, path = dst_file(tmp_path, fds)
    # The stub says int; any __index__ object is accepted at run time, which is the point here.
    idx = zerocopy.transfer(Idx(src), Idx(dst), Idx(5), src_offset=Idx(6))  # type: ignore[call-overload]
    assert idx == 5
    assert path.read_bytes() == b"world"
    assert zerocopy.transfer(src, dst, True) == 1


def test_huge_count_on_a_huge_sparse_file_is_bounded_by_eof(fds: Fds, tmp_path: Path) -> None:
    """count near 2**63 with an offset near 2**62: no overflow, no crash, just EOF."""
    src = src_file(tmp_path, b"x" * 10, fds)
    dst, _ = dst_file(tmp_path, fds)
    assert zerocopy.transfer(src, dst, 2**63 - 1, src_offset=2**62) == 0
    assert zerocopy.transfer(src, dst, 2**63 - 1, src_offset=5) == 5


def test_same_file_both_sides_is_bounded(tmp_path: Path) -> None:
    """transfer(f, f): a copy of a file onto its own end must not grow it forever. Run in a
    child with a 64 MiB file-size limit and a timeout, so a bug cannot fill the disk."""
    code = textwrap.dedent(
        """
        import os, resource, signal, sys
        from fdkit import zerocopy
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))
        f = os.open(sys.argv[1], os.O_RDWR)
        try:
            n = zerocopy.transfer(f, f)
            print("returned", n, os.fstat(f).st_size, flush=True)
        except OSError as e:
            print("error", e.errno, os.fstat(f).st_size, flush=True)
        """
    )
    p = tmp_path / "self"
    p.write_bytes(payload(100_000))
    out = subprocess.run(
        [sys.executable, "-c", code, str(p)],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    _, _, size = out.stdout.split()
    assert int(size) <= 200_000, f"transfer(f, f) grew the file to {size} bytes: {out.stdout}"


def test_remembered_path_does_not_outlive_the_files(tmp_path: Path) -> None:
    """What worked is remembered per (fd number, device, inode) pair. Once both files are closed
    and deleted, a new pair of files can get the same fd numbers and inodes (ext4 reuses both
    at once): it must not inherit the old pair's fallback. Here the old destination was
    O_APPEND (read/write only); the new one takes copy_file_range."""
    data = payload(100_000, seed=14)

    def once(append: bool) -> tuple[tuple[int, ...], TransferStats]:
        (tmp_path / "src").write_bytes(data)
        s = fd.open(tmp_path / "src", fd.O_RDONLY)
        t = fd.open(tmp_path / "dst", fd.O_WRONLY | fd.O_CREAT | (fd.O_APPEND if append else 0))
        try:
            ids = (s, fd.fstat(s).st_ino, t, fd.fstat(t).st_ino)
            n, stats = transfer_with_stats(s, t)
            assert n == len(data)
        finally:
            fd.close(s)
            fd.close(t)
        assert (tmp_path / "dst").read_bytes() == data
        if append:
            # Free the inodes for the next pair. The next pair's files stay: a later test
            # must not meet its memory on reused inodes in turn.
            (tmp_path / "src").unlink()
            (tmp_path / "dst").unlink()
        return ids, stats

    old_ids, old = once(append=True)
    assert old["path"] == "read_write"
    new_ids, new = once(append=False)
    if new_ids != old_ids:
        pytest.skip("the kernel did not reuse the fd numbers and inodes this time")
    assert (new["path"], new["remembered"]) == ("copy_file_range", False), (
        f"a new pair of files inherited the old pair's fallback: {new}"
    )


# --- nonblocking=True: for event loops -----------------------------------------------------


def nb_socketpair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    a.setblocking(False)
    b.setblocking(False)
    return a, b


def test_nonblocking_says_which_side_would_block() -> None:
    feed, src = nb_socketpair()
    dst, peer = nb_socketpair()
    with feed, src, dst, peer:
        assert zerocopy.transfer(src.fileno(), dst.fileno(), nonblocking=True) == (0, "read")
        stats = zerocopy.transfer_stats()
        assert stats is not None
        assert (stats["would_block"], stats["held"]) == ("read", 0)
        feed.send(b"hello")
        assert zerocopy.transfer(src.fileno(), dst.fileno(), nonblocking=True) == (5, "read")
        feed.shutdown(socket.SHUT_WR)
        assert zerocopy.transfer(src.fileno(), dst.fileno(), nonblocking=True) == (0, None)
        assert peer.recv(100) == b"hello"
        # The count reached is finished too, with data left in the source.
        feed2, src2 = nb_socketpair()
        with feed2, src2:
            feed2.send(b"abcdef")
            assert zerocopy.transfer(src2.fileno(), dst.fileno(), 4, nonblocking=True) == (
                4,
                None,
            )
            assert src2.recv(10) == b"ef"


def test_nonblocking_parks_what_a_full_destination_did_not_take(tmp_path: Path) -> None:
    """The chunk spliced into the internal pipe is larger than the socket's room: the rest
    stays with the pair (``transfer_held``) and the next transfer, even a blocking one,
    delivers it first. Nothing is lost or reordered; the call never waited."""
    data = payload(4 << 20, seed=11)
    (tmp_path / "src").write_bytes(data)
    src = os.open(tmp_path / "src", os.O_RDONLY | os.O_CLOEXEC)
    dst, peer = nb_socketpair()
    try:
        t = time.monotonic()
        moved, would_block = zerocopy.transfer(src, dst.fileno(), nonblocking=True)
        assert time.monotonic() - t < 1.0
        stats = zerocopy.transfer_stats()
        assert stats is not None
        assert would_block == "write" == stats["would_block"]
        assert stats["held"] > 0
        assert zerocopy.transfer_held(src, dst.fileno()) == stats["held"]
        sink = Sink(peer.fileno(), keep=True)
        sink.start()
        dst.setblocking(True)
        rest = bounded(lambda: zerocopy.transfer(src, dst.fileno())).get()
        assert zerocopy.transfer_held(src, dst.fileno()) == 0
        dst.shutdown(socket.SHUT_WR)
        sink.join(10)
        assert moved + rest == len(data)
        assert sink.error is None
        assert sha256(bytes(sink.kept)) == sha256(data)
    finally:
        os.close(src)
        dst.close()
        peer.close()


def test_nonblocking_src_offset_plus_moved_is_the_next_offset(tmp_path: Path) -> None:
    data = payload(3 << 20, seed=12)
    (tmp_path / "src").write_bytes(data)
    src = os.open(tmp_path / "src", os.O_RDONLY | os.O_CLOEXEC)
    dst, peer = nb_socketpair()
    got = bytearray()
    offset = 0
    try:
        while True:
            moved, would_block = zerocopy.transfer(
                src, dst.fileno(), src_offset=offset, nonblocking=True
            )
            offset += moved
            if would_block is None:
                break
            with contextlib.suppress(BlockingIOError):
                got += peer.recv(150_000)
        dst.close()
        peer.setblocking(True)
        while chunk := peer.recv(1 << 20):
            got += chunk
    finally:
        os.close(src)
        dst.close()
        peer.close()
    assert offset == len(data)
    assert bytes(got) == data
