"""``zerocopy.proxy`` (both directions between two stream sockets) and ``zerocopy.relay`` (one
direction, optionally recorded with tee).

The layout for a proxy test: ``client ⇄ a ⇄ proxy ⇄ b ⇄ server``; the proxy runs in a thread
under :func:`helpers.bounded`-style bounded joins, clients and servers are threads too.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fdkit import fd, zerocopy
from helpers import Fds, Feeder, Sink, bounded, payload, sha256, unix_stream_pair

pytestmark = pytest.mark.timeout(30)


def pair(kind: str, fds: Fds) -> tuple[int, int]:
    if kind == "tcp":
        return fds.connected()
    if kind == "unix":
        return unix_stream_pair(fds)
    a, b = fd.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    fds.own(a, b)
    return a, b


class Proxy(threading.Thread):
    """``zerocopy.proxy(a, b, **kwargs)`` in a thread, keeping its result or exception."""

    def __init__(self, a: int, b: int, **kwargs: Any) -> None:
        super().__init__(daemon=True)
        self.a, self.b, self.kwargs = a, b, kwargs
        self.result: tuple[int, int] | None = None
        self.error: BaseException | None = None
        self.elapsed = 0.0

    def run(self) -> None:
        start = time.monotonic()
        try:
            self.result = zerocopy.proxy(self.a, self.b, **self.kwargs)
        except BaseException as e:
            self.error = e
        self.elapsed = time.monotonic() - start

    def wait(self, timeout: float = 10.0) -> Proxy:
        self.join(timeout)
        if self.is_alive():
            # Free it so the test can fail instead of hanging: shut both sockets down.
            for n in (self.a, self.b):
                with contextlib.suppress(OSError):
                    fd.shutdown(n, socket.SHUT_RDWR)
            self.join(5)
            pytest.fail(f"proxy did not end within {timeout} s", pytrace=False)
        return self


def reset_close(fds: Fds, n: int) -> None:
    """Closes a socket so that its peer gets a RST (SO_LINGER 0; unread data does it for
    unix sockets too)."""
    with contextlib.suppress(OSError):
        fd.setsockopt(n, socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    fds.close(n)


def recv_exactly(n: int, size: int, timeout: float = 5.0) -> bytes:
    out = bytearray()
    deadline = time.monotonic() + timeout
    while len(out) < size:
        assert fd.poll([(n, fd.POLLIN)], max(0.0, deadline - time.monotonic())), (
            f"only {len(out)} of {size} bytes arrived"
        )
        chunk = fd.recv(n, size - len(out))
        assert chunk, f"EOF after {len(out)} of {size} bytes"
        out += chunk
    return bytes(out)


def expect_eof(n: int, timeout: float = 5.0) -> None:
    assert fd.poll([(n, fd.POLLIN)], timeout), "no EOF arrived"
    assert fd.recv(n, 100) == b""


# ---------------------------------------------------------------------------------------------
# proxy


@pytest.mark.parametrize(
    ("a_kind", "b_kind"), [("tcp", "tcp"), ("unix", "tcp"), ("tcp", "socketpair")]
)
def test_both_directions_intact_with_concurrent_traffic(a_kind: str, b_kind: str, fds: Fds) -> None:
    client, a = pair(a_kind, fds)
    b, server = pair(b_kind, fds)
    up, down = payload(6 << 20, seed=1), payload(5 << 20, seed=2)
    proxy = Proxy(a, b)
    proxy.start()
    # Each end writes its whole stream while reading the other: neither direction may wait
    # for the other to drain.
    to_server = Feeder(client, up, then=lambda: fd.shutdown(client, socket.SHUT_WR))
    to_client = Feeder(server, down, then=lambda: fd.shutdown(server, socket.SHUT_WR))
    at_server, at_client = Sink(server), Sink(client)
    threads = (to_server, to_client, at_server, at_client)
    for t in threads:
        t.start()
    try:
        # The proxy ends when both directions have ended (or fails): wait for it first, so a
        # failing proxy fails the test at once.
        proxy.wait(20)
        assert proxy.error is None, (
            f"{proxy.error!r} after {at_server.received} bytes up, {at_client.received} bytes down"
        )
        for t in threads:
            t.finish()
    except BaseException:
        for n in (client, server):
            with contextlib.suppress(OSError):
                fd.shutdown(n, socket.SHUT_RDWR)
        for t in threads:
            t.join(5)
        raise
    assert proxy.result == (len(up), len(down))
    assert (at_server.received, at_server.digest) == (len(up), sha256(up))
    assert (at_client.received, at_client.digest) == (len(down), sha256(down))


def test_many_small_messages_ping_pong(fds: Fds) -> None:
    """Request/response traffic: each small message crosses the proxy before the next is
    sent, so a proxy that waited for a full buffer would stall."""
    client, a = pair("tcp", fds)
    b, server = pair("tcp", fds)
    proxy = Proxy(a, b)
    proxy.start()
    try:
        for i in range(200):
            msg = b"ping %d" % i
            fd.send(client, msg)
            assert recv_exactly(server, len(msg)) == msg
            fd.send(server, b"pong %d" % i)
            assert recv_exactly(client, len(b"pong %d" % i)) == b"pong %d" % i
        fd.shutdown(client, socket.SHUT_WR)
        expect_eof(server)
        fd.shutdown(server, socket.SHUT_WR)
        expect_eof(client)
    finally:
        proxy.wait()
    assert proxy.error is None
    assert proxy.result == (
        sum(len(b"ping %d" % i) for i in range(200)),
        sum(len(b"pong %d" % i) for i in range(200)),
    )


@pytest.mark.parametrize("first", ["client", "server"])
def test_half_close_is_passed_on(first: str, fds: Fds) -> None:
    """One side shuts down writing: the other sees EOF yet can still send back, and the proxy
    keeps running until that direction ends too."""
    client, a = pair("tcp", fds)
    b, server = pair("tcp", fds)
    quiet, talker = (client, server) if first == "client" else (server, client)
    proxy = Proxy(a, b)
    proxy.start()
    try:
        fd.send(quiet, b"request")
        fd.shutdown(quiet, socket.SHUT_WR)
        assert recv_exactly(talker, 7) == b"request"
        expect_eof(talker)
        time.sleep(0.1)
        assert proxy.is_alive(), "the proxy ended after one half-close"
        reply = payload(3 << 20, seed=3)
        feeder = Feeder(talker, reply, then=lambda: fd.shutdown(talker, socket.SHUT_WR))
        sink = Sink(quiet, keep=True)
        feeder.start()
        sink.start()
        feeder.finish()
        assert bytes(sink.finish().kept) == reply
    finally:
        proxy.wait()
    assert proxy.error is None, proxy.error
    expected = (7, len(reply)) if first == "client" else (len(reply), 7)
    assert proxy.result == expected


@pytest.mark.parametrize("first", ["client", "server"])
def test_one_direction_ends_while_the_other_still_has_bytes_in_flight(first: str, fds: Fds) -> None:
    """One side says a few bytes and shuts down; the other uploads 4 MiB into a reader that
    only starts after 0.3 s, so the proxy's pipe still holds bytes when the uploader shuts
    down too. That side is then shut down both ways (by its peer and by the proxy passing the
    first half-close on): poll reports POLLHUP for it, which is not an error, and every byte
    must still arrive."""
    client, a = pair("tcp", fds)
    b, server = pair("tcp", fds)
    short, long_ = (client, server) if first == "client" else (server, client)
    proxy = Proxy(a, b)
    proxy.start()
    fd.send(short, b"short")
    fd.shutdown(short, socket.SHUT_WR)
    assert recv_exactly(long_, 5) == b"short"
    expect_eof(long_)
    upload = payload(4 << 20, seed=9)
    feeder = Feeder(long_, upload, then=lambda: fd.shutdown(long_, socket.SHUT_WR))
    sink = Sink(short, keep=True)
    feeder.start()
    time.sleep(0.3)
    sink.start()
    try:
        proxy.wait(20)
        assert proxy.error is None, f"{proxy.error!r} after {sink.received} bytes"
        feeder.finish()
        sink.finish()
    except BaseException:
        for n in (client, server):
            with contextlib.suppress(OSError):
                fd.shutdown(n, socket.SHUT_RDWR)
        feeder.join(5)
        sink.join(5)
        raise
    assert bytes(sink.kept) == upload
    assert sorted(proxy.result or ()) == [5, len(upload)]


@pytest.mark.parametrize("side", ["client", "server"])
@pytest.mark.parametrize("traffic", ["idle", "streaming"])
def test_reset_on_either_side_ends_both(side: str, traffic: str, fds: Fds) -> None:
    """A RST on one side ends the proxy promptly with an OSError (no hang); the caller can then
    close both sockets."""
    client, a = pair("tcp", fds)
    b, server = pair("tcp", fds)
    proxy = Proxy(a, b)
    proxy.start()
    fd.send(client, b"hi")
    assert recv_exactly(server, 2) == b"hi"
    feeders: list[Feeder] = []
    if traffic == "streaming":
        # The surviving side keeps sending toward the one that resets.
        survivor = server if side == "client" else client
        feeders.append(Feeder(survivor, payload(32 << 20), then=None))
        feeders[0].start()
    time.sleep(0.05)
    reset_close(fds, client if side == "client" else server)
    proxy.wait(5)
    assert isinstance(proxy.error, OSError), (proxy.result, proxy.error)
    assert proxy.elapsed < 5
    # The survivor's peer (a or b) is still open: the caller closes it; the survivor sees
    # the connection end then.
    fds.close(a)
    fds.close(b)
    for f in feeders:
        f.join(10)
        assert not f.is_alive()


@pytest.mark.parametrize("side", ["client", "server"])
def test_reset_after_half_close_still_ends_the_proxy(side: str, fds: Fds) -> None:
    """A side shuts down writing (its direction is finished), then resets. The proxy must
    notice the reset and end, although nothing flows the other way: "a reset on either side
    ends both"."""
    client, a = pair("tcp", fds)
    b, server = pair("tcp", fds)
    gone, other = (client, server) if side == "client" else (server, client)
    proxy = Proxy(a, b)
    proxy.start()
    fd.send(gone, b"last words")
    fd.shutdown(gone, socket.SHUT_WR)
    assert recv_exactly(other, 10) == b"last words"
    expect_eof(other)
    reset_close(fds, gone)
    proxy.join(2)
    ended = not proxy.is_alive()
    if not ended:
        # Unblock it for the cleanup (the bug: it would wait for `other` forever).
        fd.send(other, b"x")
        proxy.wait(5)
    assert ended, "proxy still running 2 s after a RST on a half-closed side"
    assert isinstance(proxy.error, OSError), proxy.error


@pytest.mark.serial
def test_idle_timeout_raises_timeout_error(fds: Fds) -> None:
    _, a = pair("tcp", fds)
    b, _ = pair("tcp", fds)
    proxy = Proxy(a, b, idle_timeout=0.3)
    proxy.start()
    proxy.wait(5)
    assert isinstance(proxy.error, TimeoutError), proxy.error
    assert 0.25 <= proxy.elapsed < 2.0, proxy.elapsed


def test_idle_timeout_counts_from_the_last_byte(fds: Fds) -> None:
    client, a = pair("tcp", fds)
    b, server = pair("tcp", fds)
    proxy = Proxy(a, b, idle_timeout=0.4)
    proxy.start()
    # Traffic every 0.15 s for 1 s keeps it alive past its 0.4 s timeout...
    for i in range(7):
        fd.send(client, b"%d" % i)
        assert recv_exactly(server, 1) == b"%d" % i
        time.sleep(0.15)
    assert proxy.is_alive(), proxy.error
    # ...and then silence ends it.
    proxy.wait(5)
    assert isinstance(proxy.error, TimeoutError), proxy.error
    assert proxy.elapsed > 1.0


def test_idle_timeout_with_a_half_closed_side(fds: Fds) -> None:
    client, a = pair("tcp", fds)
    b, server = pair("tcp", fds)
    proxy = Proxy(a, b, idle_timeout=0.3)
    proxy.start()
    fd.shutdown(client, socket.SHUT_WR)
    expect_eof(server)
    proxy.wait(5)
    assert isinstance(proxy.error, TimeoutError), proxy.error


@pytest.mark.parametrize("ending", ["normal", "reset", "timeout"])
@pytest.mark.parametrize(("a_blocking", "b_blocking"), [(True, False), (False, True)])
def test_blocking_modes_are_restored(
    ending: str, a_blocking: bool, b_blocking: bool, fds: Fds
) -> None:
    client, a = pair("tcp", fds)
    b, server = pair("tcp", fds)
    fd.set_blocking(a, a_blocking)
    fd.set_blocking(b, b_blocking)
    proxy = Proxy(a, b, idle_timeout=0.3 if ending == "timeout" else None)
    proxy.start()
    if ending == "normal":
        fd.send(client, b"x")
        fd.shutdown(client, socket.SHUT_WR)
        fd.shutdown(server, socket.SHUT_WR)
    elif ending == "reset":
        fd.send(client, b"x")
        assert recv_exactly(server, 1) == b"x"
        reset_close(fds, client)
    proxy.wait(5)
    assert (proxy.error is None) == (ending == "normal"), proxy.error
    assert fd.get_blocking(a) is a_blocking
    assert fd.get_blocking(b) is b_blocking


def test_proxy_argument_errors(fds: Fds, tmp_path: Path) -> None:
    _, a = pair("tcp", fds)
    b, _ = pair("tcp", fds)
    r, w = fds.pipe()
    f = fds.own(fd.open(tmp_path / "f", fd.O_RDWR | fd.O_CREAT, 0o600))
    for x, y in ((r, b), (a, w), (f, b)):
        with pytest.raises(OSError, match="Socket operation on non-socket") as e:
            zerocopy.proxy(x, y)
        assert e.value.errno == 88, e.value  # ENOTSOCK
    with pytest.raises(OSError, match="Bad file descriptor") as e:
        zerocopy.proxy(a, 4999)
    assert e.value.errno == 9  # EBADF
    for bad in (0, -1, float("nan"), float("inf"), -0.5):
        with pytest.raises(ValueError, match="idle_timeout"):
            zerocopy.proxy(a, b, idle_timeout=bad)
    for bad_type in ("1", b"1", [1]):
        with pytest.raises(TypeError):
            zerocopy.proxy(a, b, idle_timeout=bad_type)  # type: ignore[arg-type]  # misuse on purpose
    with pytest.raises(ValueError, match="fd must be a non-negative int"):
        zerocopy.proxy(-1, b)
    with pytest.raises(TypeError):
        zerocopy.proxy("a", b)  # type: ignore[arg-type]  # misuse on purpose
    # Nothing was changed by the refused calls.
    assert fd.get_blocking(a)
    assert fd.get_blocking(b)


def test_proxy_on_a_listening_socket_fails_cleanly(fds: Fds) -> None:
    lfd, _ = fds.listener()
    _, a = pair("tcp", fds)
    out = bounded(lambda: zerocopy.proxy(a, lfd), timeout=5, unblock=lambda: fd.shutdown(a, 2))
    assert isinstance(out.error, OSError), out.result


# ---------------------------------------------------------------------------------------------
# relay


@pytest.mark.parametrize("record_kind", ["file", "pipe", "append_file", "none"])
@pytest.mark.parametrize("dst_kind", ["tcp", "file", "append_file"])
def test_relay_recording_equals_relayed_bytes(
    record_kind: str, dst_kind: str, fds: Fds, tmp_path: Path
) -> None:
    """Everything relayed is recorded, byte for byte, whether the recording and the
    destination take splice or refuse it (O_APPEND) and need a copy."""
    data = payload(5 << 20, seed=4)
    far, src = pair("tcp", fds)
    feeder = Feeder(far, data, then=lambda: fd.shutdown(far, socket.SHUT_WR))
    sinks: list[Sink] = []
    closers: list[Callable[[], None]] = []
    if dst_kind == "tcp":
        dst, dst_far = pair("tcp", fds)
        sinks.append(Sink(dst_far, keep=True))
        closers.append(lambda: fd.shutdown(dst, socket.SHUT_WR))
    else:
        flags = fd.O_WRONLY | fd.O_CREAT | (fd.O_APPEND if dst_kind == "append_file" else 0)
        dst = fds.own(fd.open(tmp_path / "dst", flags, 0o600))
    record: int | None = None
    if record_kind == "pipe":
        rec_r, rec_w = fds.pipe()
        record = rec_w
        sinks.append(Sink(rec_r, keep=True))
        closers.append(lambda: fds.close(rec_w))
    elif record_kind != "none":
        flags = fd.O_WRONLY | fd.O_CREAT | (fd.O_APPEND if record_kind == "append_file" else 0)
        record = fds.own(fd.open(tmp_path / "rec", flags, 0o600))
    for t in [feeder, *sinks]:
        t.start()
    out = bounded(lambda: zerocopy.relay(src, dst, record_fd=record), timeout=20)
    for c in closers:
        c()
    feeder.finish()
    for s in sinks:
        s.finish()
    assert out.get() == len(data)
    relayed = bytes(sinks[0].kept) if dst_kind == "tcp" else (tmp_path / "dst").read_bytes()
    assert sha256(relayed) == sha256(data)
    if record_kind == "pipe":
        assert sha256(bytes(sinks[-1].kept)) == sha256(data)
    elif record_kind != "none":
        assert sha256((tmp_path / "rec").read_bytes()) == sha256(data)


@pytest.mark.parametrize("with_record", [False, True])
def test_relay_from_a_source_that_refuses_splice(
    with_record: bool, fds: Fds, tmp_path: Path
) -> None:
    """/proc/self/cmdline refuses splice: relay copies through memory to the destination and
    the recording alike."""
    with open("/proc/self/cmdline", "rb") as f:
        expect = f.read()
    src = fds.own(fd.open("/proc/self/cmdline", fd.O_RDONLY))
    dst, dst_far = pair("socketpair", fds)
    sink = Sink(dst_far, keep=True)
    sink.start()
    record = fds.own(fd.open(tmp_path / "rec", fd.O_WRONLY | fd.O_CREAT, 0o600))
    n = zerocopy.relay(src, dst, record_fd=record if with_record else None)
    fd.shutdown(dst, socket.SHUT_WR)
    assert bytes(sink.finish().kept) == expect
    assert n == len(expect)
    assert (tmp_path / "rec").read_bytes() == (expect if with_record else b"")


def test_relay_camera_to_client_and_recording_with_a_slow_client(fds: Fds, tmp_path: Path) -> None:
    """A camera socket relayed to a client socket and recorded to a file: the client reads
    slowly, which must not lose or reorder anything in either copy."""
    data = payload(2 << 20, seed=5)
    camera, src = pair("unix", fds)
    dst, client = pair("tcp", fds)
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        fd.setsockopt(dst, socket.SOL_SOCKET, opt, 16384)
        fd.setsockopt(client, socket.SOL_SOCKET, opt, 16384)
    record = fds.own(fd.open(tmp_path / "rec", fd.O_WRONLY | fd.O_CREAT, 0o600))
    feeder = Feeder(camera, data, then=lambda: fd.shutdown(camera, socket.SHUT_WR), chunk=8192)
    sink = Sink(client, keep=True, chunk=65536, pause=0.001)
    feeder.start()
    sink.start()
    out = bounded(lambda: zerocopy.relay(src, dst, record_fd=record), timeout=20)
    fd.shutdown(dst, socket.SHUT_WR)
    feeder.finish()
    assert out.get() == len(data)
    assert bytes(sink.finish().kept) == data
    assert (tmp_path / "rec").read_bytes() == data


@pytest.mark.serial
def test_relay_with_a_slow_non_blocking_recording(fds: Fds) -> None:
    """The recording is a small non-blocking pipe drained slowly: relay waits for it in poll
    (no spin) and the recording still gets every byte, in order."""
    data = payload(256 << 10, seed=6)
    far, src = pair("unix", fds)
    dst, dst_far = pair("socketpair", fds)
    rec_r, rec_w = fds.pipe()
    fd.fcntl(rec_w, 1031, 4096)  # F_SETPIPE_SZ: one page
    fd.set_blocking(rec_w, False)
    feeder = Feeder(far, data, then=lambda: fd.shutdown(far, socket.SHUT_WR))
    sink = Sink(dst_far, keep=True)
    recording = Sink(rec_r, keep=True, chunk=4096, pause=0.003)
    for t in (feeder, sink, recording):
        t.start()

    def run() -> tuple[int, float]:
        cpu0 = time.thread_time()
        n = zerocopy.relay(src, dst, record_fd=rec_w)
        return n, time.thread_time() - cpu0

    out = bounded(run, timeout=20)
    fd.shutdown(dst, socket.SHUT_WR)
    fds.close(rec_w)
    feeder.finish()
    n, cpu = out.get()
    assert n == len(data)
    assert bytes(sink.finish().kept) == data
    assert bytes(recording.finish().kept) == data
    assert out.elapsed > 0.1
    assert cpu < 0.15 * out.elapsed, f"{cpu:.2f} s CPU in {out.elapsed:.2f} s: a busy loop?"


def test_relay_to_a_peer_that_goes_away(fds: Fds, tmp_path: Path) -> None:
    far, src = pair("tcp", fds)
    dst, dst_far = pair("tcp", fds)
    record = fds.own(fd.open(tmp_path / "rec", fd.O_WRONLY | fd.O_CREAT, 0o600))
    feeder = Feeder(far, payload(64 << 20), then=None)
    feeder.start()

    def go_away() -> None:
        assert len(recv_exactly(dst_far, 100_000)) == 100_000
        reset_close(fds, dst_far)

    t = threading.Thread(target=go_away, daemon=True)
    t.start()
    out = bounded(
        lambda: zerocopy.relay(src, dst, record_fd=record),
        timeout=10,
        unblock=lambda: fd.shutdown(src, socket.SHUT_RDWR),
    )
    t.join(5)
    assert isinstance(out.error, (BrokenPipeError, ConnectionResetError)), out.result
    # The recording holds at least what the client got, and never more than was read.
    assert (tmp_path / "rec").stat().st_size >= 100_000
    # The reset is passed back to the source: the far writer's blocked write fails with it.
    feeder.join(10)
    assert not feeder.is_alive()
    assert isinstance(feeder.error, (BrokenPipeError, ConnectionResetError)), feeder.error


def test_relay_argument_errors(fds: Fds) -> None:
    far, src = pair("socketpair", fds)
    dst, _ = pair("socketpair", fds)
    fd.send(far, b"hello")
    fd.shutdown(far, socket.SHUT_WR)
    # A closed recording fd is EBADF (once there is something to record), not a hang.
    out = bounded(lambda: zerocopy.relay(src, dst, record_fd=4999), timeout=5)
    assert isinstance(out.error, OSError), out.result
    assert out.error.errno == 9, out.result
    out = bounded(lambda: zerocopy.relay(4999, dst), timeout=5)
    assert isinstance(out.error, OSError), out.result
    assert out.error.errno == 9, out.result
    out = bounded(lambda: zerocopy.relay(src, 4999), timeout=5)
    assert isinstance(out.error, OSError), out.result
    assert out.error.errno == 9, out.result
    with pytest.raises(ValueError, match="fd must be a non-negative int"):
        zerocopy.relay(src, dst, record_fd=-1)
    with pytest.raises(ValueError, match="fd must be a non-negative int"):
        zerocopy.relay(src, 2**31)
    with pytest.raises(TypeError):
        zerocopy.relay(src, dst, record_fd="3")  # type: ignore[arg-type]  # misuse on purpose
    with pytest.raises(TypeError):
        zerocopy.relay(src)  # type: ignore[call-arg]  # misuse on purpose


# ---------------------------------------------------------------------------------------------
# resets are passed on as resets


def send_then(n: int, data: bytes, *, reset: bool) -> None:
    """Sends all of ``data`` (blocking), then ends the stream: a RST (SO_LINGER 0 + close, the
    caller closes) or a FIN (shutdown SHUT_WR)."""
    fd.set_blocking(n, True)
    view = memoryview(data)
    while view:
        view = view[fd.write(n, view) :]
    if reset:
        fd.setsockopt(n, socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    else:
        fd.shutdown(n, socket.SHUT_WR)


@pytest.mark.parametrize("side", ["server", "client"])
def test_proxy_passes_a_reset_on_as_a_reset(side: str, fds: Fds) -> None:
    """One end sends 1 MB then resets. The other end reads everything the proxy got (a prefix of
    what was sent: the resetting side's own unsent bytes are dropped by its kernel) and then
    ECONNRESET, never a clean EOF, although the caller closes both proxy sockets in the usual
    way after the call."""
    client, a = pair("tcp", fds)
    b, server = pair("tcp", fds)
    gone, other = (server, client) if side == "server" else (client, server)
    sent = payload(1 << 20, seed=7)
    sink = Sink(other, keep=True)
    sink.start()
    proxy = Proxy(a, b)
    proxy.start()
    send_then(gone, sent, reset=True)
    fds.close(gone)
    proxy.wait(10)
    assert isinstance(proxy.error, ConnectionResetError), (proxy.result, proxy.error)
    fds.close(a)
    fds.close(b)
    sink.join(10)
    assert not sink.is_alive()
    assert isinstance(sink.error, ConnectionResetError), (
        f"{side} reset reached the other end as {'EOF' if sink.eof else sink.error!r} "
        f"after {sink.received} bytes"
    )
    assert sent.startswith(bytes(sink.kept)), f"{sink.received} bytes are not a prefix"


@pytest.mark.parametrize("side", ["server", "client"])
def test_proxy_passes_a_fin_on_as_a_fin(side: str, fds: Fds) -> None:
    """The same exchange ended by a FIN: every byte, then a clean EOF (no reset)."""
    client, a = pair("tcp", fds)
    b, server = pair("tcp", fds)
    gone, other = (server, client) if side == "server" else (client, server)
    sent = payload(1 << 20, seed=8)
    sink = Sink(other, keep=True)
    sink.start()
    proxy = Proxy(a, b)
    proxy.start()
    send_then(gone, sent, reset=False)
    sink.finish(10)
    assert sink.eof
    assert bytes(sink.kept) == sent
    fd.shutdown(other, socket.SHUT_WR)
    proxy.wait(10)
    assert proxy.error is None, proxy.error
    assert sorted(proxy.result or ()) == [0, len(sent)]
    # The side that half-closed still reads its peer's FIN, not a reset.
    expect_eof(gone)


def test_proxy_resets_a_side_with_bytes_still_in_flight_after_what_it_can_deliver(
    fds: Fds,
) -> None:
    """The server sends 4 MB and resets while the client does not read: the proxy's pipe and the
    client's socket buffers are full. The proxy may not wait for the client forever: it gives up
    within a bounded time and resets the client, which then reads a prefix and ECONNRESET."""
    client, a = pair("tcp", fds)
    b, server = pair("tcp", fds)
    sent = payload(32 << 20, seed=9)
    # Small socket buffers (no autotuning up to tcp_rmem's 32 MB): the stream backs up soon.
    for n, opt in ((client, socket.SO_RCVBUF), (a, socket.SO_SNDBUF), (b, socket.SO_RCVBUF)):
        fd.setsockopt(n, socket.SOL_SOCKET, opt, 64 << 10)
    fd.setsockopt(server, socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
    proxy = Proxy(a, b)
    proxy.start()
    # Fill everything between the server and the idle client, then reset the server.
    fd.set_blocking(server, False)
    n = 0
    while n < len(sent):
        try:
            n += fd.write(server, sent[n : n + (256 << 10)])
        except BlockingIOError:
            if not fd.poll([(server, fd.POLLOUT)], 0.3):
                break
    assert n < len(sent), "nothing backed up"
    reset_close(fds, server)
    proxy.wait(15)
    assert isinstance(proxy.error, ConnectionResetError), (proxy.result, proxy.error)
    assert proxy.elapsed < 10
    fds.close(a)
    fds.close(b)
    sink = Sink(client, keep=True)
    sink.start()
    sink.join(10)
    assert not sink.is_alive()
    assert isinstance(sink.error, ConnectionResetError), (sink.eof, sink.error, sink.received)
    assert sent.startswith(bytes(sink.kept))


def test_relay_passes_a_source_reset_on_to_the_destination(fds: Fds) -> None:
    far, src = pair("tcp", fds)
    dst, dst_far = pair("tcp", fds)
    sent = payload(1 << 20, seed=10)
    sink = Sink(dst_far, keep=True)
    sink.start()

    def feed_then_reset() -> None:
        send_then(far, sent, reset=True)
        fds.close(far)

    feeder = threading.Thread(target=feed_then_reset, daemon=True)
    feeder.start()
    out = bounded(
        lambda: zerocopy.relay(src, dst),
        timeout=10,
        unblock=lambda: fd.shutdown(src, socket.SHUT_RDWR),
    )
    feeder.join(10)
    assert isinstance(out.error, ConnectionResetError), out.result
    fds.close(src)
    fds.close(dst)
    sink.join(10)
    assert not sink.is_alive()
    assert isinstance(sink.error, ConnectionResetError), (sink.eof, sink.error, sink.received)
    assert sent.startswith(bytes(sink.kept))


def test_relay_passes_a_destination_reset_back_to_the_source(fds: Fds) -> None:
    """The destination's reader resets; the source's writer learns it as a reset too (not a
    clean EOF) when the relay next has bytes for the dead destination."""
    far, src = pair("tcp", fds)
    dst, dst_far = pair("tcp", fds)
    fd.send(far, b"x" * 1000)

    def reader_resets() -> None:
        assert recv_exactly(dst_far, 1000) == b"x" * 1000
        reset_close(fds, dst_far)
        time.sleep(0.05)
        # The relay splices this toward the dead destination: EPIPE or ECONNRESET.
        fd.send(far, b"more")

    t = threading.Thread(target=reader_resets, daemon=True)
    t.start()
    out = bounded(
        lambda: zerocopy.relay(src, dst),
        timeout=10,
        unblock=lambda: fd.shutdown(src, socket.SHUT_RDWR),
    )
    t.join(5)
    assert isinstance(out.error, (BrokenPipeError, ConnectionResetError)), out.result
    fds.close(src)
    fds.close(dst)
    assert fd.poll([(far, fd.POLLIN)], 5), "the source's writer heard nothing"
    with pytest.raises(ConnectionResetError):
        fd.recv(far, 100)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1e300, r"idle_timeout is too large: 1e\+300 seconds \(the limit is 9223372036"),
        (float("nan"), r"idle_timeout must be a number of seconds, got nan"),
        (0.0, r"idle_timeout must be > 0 seconds, got 0.0"),
    ],
    ids=str,
)
def test_proxy_idle_timeout_says_the_real_cause(value: float, message: str) -> None:
    """Before: 1e300 raised PanicException (Duration::from_secs_f64 overflow)."""
    a, b = socket.socketpair()
    with a, b, pytest.raises(ValueError, match=message):
        zerocopy.proxy(a.fileno(), b.fileno(), idle_timeout=value)
