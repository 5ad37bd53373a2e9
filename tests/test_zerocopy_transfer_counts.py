"""``zerocopy.transfer`` told what to move: a count smaller than a file or a stream (and
nothing past it taken from a stream), a count beyond the end, streams that end first,
offsets on either side or both (the file positions stay), offsets past the end, offsets on
pipes and sockets (ESPIPE); what it refuses: closed fds, fds open the wrong way, a
directory, arguments of the wrong type or range (ValueError/TypeError, never a crash); and
where it must stop by itself: a huge count at a huge offset, a file copied onto its own end.

Every call that could hang on a bug runs under :func:`helpers.bounded`; the other ends of
pipes and sockets are threads with bounded joins.

Peers that go away and non-blocking ends are in test_zerocopy_transfer_peers.py, forced
fallbacks in test_zerocopy_transfer_fallbacks.py; what they share is in
helpers/zerocopy_transfer.py.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fdkit import fd, zerocopy
from helpers import Fds, bounded, is_open, payload
from helpers.zerocopy_transfer import (
    devnull,
    drained_dst,
    dst_file,
    fed_stream,
    src_file,
    sunk,
    transfer_with_stats,
)

pytestmark = pytest.mark.timeout(30)


def read_all(n: int) -> bytes:
    """Everything readable from a blocking fd until EOF."""
    out = bytearray()
    while chunk := fd.read(n, 1 << 20):
        out += chunk
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# Counts, EOF and offsets


@pytest.mark.parametrize("count", [5000, 70_000], ids=["small", "large"])
@pytest.mark.parametrize("dst_kind", ["file", "pipe", "tcp", "null"])
def test_count_smaller_than_the_file_then_the_rest(
    count: int, dst_kind: str, fds: Fds, tmp_path: Path
) -> None:
    data = payload(200_000, seed=1)
    src = src_file(tmp_path, data, fds)
    dst, path, sink = drained_dst(dst_kind, fds, tmp_path)
    first = zerocopy.transfer(src, dst, count)
    assert first == count
    assert fd.lseek(src, 0, os.SEEK_CUR) == count
    rest = zerocopy.transfer(src, dst)
    assert rest == len(data) - count
    assert fd.lseek(src, 0, os.SEEK_CUR) == len(data)
    assert zerocopy.transfer(src, dst) == 0, "a second transfer at EOF moves nothing"
    if path is not None:
        assert path.read_bytes() == data
    elif sink is not None:
        assert sunk(dst_kind, dst, sink, fds) == data


@pytest.mark.parametrize("count", [5000, 70_000], ids=["small", "large"])
@pytest.mark.parametrize("src_kind", ["tcp", "unix", "pipe"])
@pytest.mark.parametrize("dst_kind", ["file", "pipe"])
def test_count_smaller_than_a_stream_takes_no_more(
    count: int, src_kind: str, dst_kind: str, fds: Fds, tmp_path: Path
) -> None:
    """A stream source keeps every byte past ``count``: nothing is read ahead into the
    internal pipe or a buffer and lost."""
    data = payload(200_000, seed=2)
    src, feeder = fed_stream(src_kind, data, fds)
    feeder.start()
    dst, path, sink = drained_dst(dst_kind, fds, tmp_path)
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
        assert sunk(dst_kind, dst, sink, fds) == data[:count]
    else:
        assert path is not None
        assert path.read_bytes() == data[:count]


@pytest.mark.parametrize("count", [100, 10_000, 10**9, 2**63 - 1], ids=str)
@pytest.mark.parametrize("dst_kind", ["file", "tcp", "pipe", "null"])
def test_count_beyond_the_end_of_a_file_returns_what_was_there(
    count: int, dst_kind: str, fds: Fds, tmp_path: Path
) -> None:
    size = min(count, 100_000) - 1 if count < 10**9 else 100_000
    data = payload(size, seed=3)
    src = src_file(tmp_path, data, fds)
    dst, path, sink = drained_dst(dst_kind, fds, tmp_path)
    n, stats = transfer_with_stats(src, dst, count)
    assert n == size == stats["bytes"]
    if path is not None:
        assert path.read_bytes() == data
    elif sink is not None:
        assert sunk(dst_kind, dst, sink, fds) == data


@pytest.mark.parametrize("count", [10_000, 10**9], ids=["small", "large"])
@pytest.mark.parametrize("src_kind", ["tcp", "socketpair", "pipe"])
def test_stream_ending_before_the_count(
    count: int, src_kind: str, fds: Fds, tmp_path: Path
) -> None:
    data = payload(3000 if count == 10_000 else 300_000, seed=4)
    src, feeder = fed_stream(src_kind, data, fds, chunk=1000)
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
    dst, _, sink = drained_dst(dst_kind, fds)
    n = zerocopy.transfer(src, dst, count, src_offset=777)
    expect = data[777:] if count is None else data[777 : 777 + count]
    assert n == len(expect)
    assert fd.lseek(src, 0, os.SEEK_CUR) == 3
    if sink is not None:
        assert sunk(dst_kind, dst, sink, fds) == expect


@pytest.mark.parametrize("count", [1000, 300_000], ids=["small", "large"])
@pytest.mark.parametrize("src_kind", ["pipe", "tcp"])
def test_dst_offset_from_streams(count: int, src_kind: str, fds: Fds, tmp_path: Path) -> None:
    """splice (pipe → file) and splice through the internal pipe (socket → file) write at the
    offset, leaving the file position alone."""
    data = payload(count, seed=8)
    src, feeder = fed_stream(src_kind, data, fds)
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
