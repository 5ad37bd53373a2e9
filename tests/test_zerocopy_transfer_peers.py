"""``zerocopy.transfer`` and the other ends of its fds: a reader that goes away mid
transfer (BrokenPipeError or ConnectionResetError, promptly), a source that resets, and no
death by SIGPIPE whatever the process's disposition; non-blocking fds at slow ends, where the
transferring thread waits in poll on the side that would block instead of spinning; and
``nonblocking=True`` for event loops, which never waits, says which side would block, and
keeps what a full destination did not take for the next transfer.

Every call that could hang on a bug runs under :func:`helpers.bounded`; the other ends of
pipes and sockets are threads with bounded joins.

Counts, offsets and bad arguments are in test_zerocopy_transfer_counts.py, forced fallbacks
in test_zerocopy_transfer_fallbacks.py; what they share is in helpers/zerocopy_transfer.py.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fdkit import fd, zerocopy
from helpers import (
    Fds,
    Feeder,
    Sink,
    bounded,
    payload,
    sha256,
    unix_stream_pair,
)
from helpers.zerocopy_transfer import dst_file, sockpair, src_file, transfer_with_stats

pytestmark = pytest.mark.timeout(30)

F_SETPIPE_SZ = 1031


def reset_close(fds: Fds, n: int) -> None:
    """Closes a TCP socket with SO_LINGER 0: the peer gets a RST, not a FIN."""
    fd.setsockopt(n, socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    fds.close(n)


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
