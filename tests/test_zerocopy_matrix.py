"""``zerocopy.transfer`` across every pair of fd kinds and the sizes around the boundaries.

Sources: a regular file, a pipe, a TCP socket, a unix stream socket, a socketpair, /dev/zero
and a file on tmpfs; destinations: the same kinds with /dev/null for /dev/zero. Every case
checks that the bytes arrive intact (sha256), that the return value is the number of bytes
moved, and that ``transfer_stats()`` names the path the kinds call for (or records why the
kernel made it fall back). The other ends of pipes and sockets are threads, so no side can
wait on a full buffer forever; every join is bounded.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fdkit import fd, zerocopy
from fdkit.types import TransferStats
from helpers import Fds, Feeder, Sink, payload, sha256, unix_stream_pair

pytestmark = pytest.mark.timeout(30)

SOURCES = ["file", "pipe", "tcp", "unix", "socketpair", "zero", "tmpfs"]
DESTINATIONS = ["file", "pipe", "tcp", "unix", "socketpair", "null", "tmpfs"]
# 0, 1, PIPE_BUF-1, PIPE_BUF, PIPE_BUF+1, 64 KiB (the default pipe size), 8 MiB.
SIZES = [0, 1, 4095, 4096, 4097, 65536, 8 << 20]

FILES = {"file", "tmpfs"}
SOCKETS = {"tcp", "unix", "socketpair"}
SMALL_TRANSFER = 64 << 10  # counts up to this skip the statx calls and the plan
PATHS = {"copy_file_range", "sendfile", "splice", "splice_via_pipe", "read_write"}


@dataclass
class End:
    """One side of a transfer: its fd, and what to do once the transfer returned."""

    fd: int
    # Source: the bytes it will yield. Destination: unused.
    data: bytes = b""
    threads: list[Feeder | Sink] = field(default_factory=list)
    # Destination: called after the transfer; returns the bytes that arrived (None for
    # /dev/null) as (length, sha256).
    collect: Callable[[], tuple[int, str] | None] = lambda: None
    # Sockets to shut down if the test fails, so that the helper threads end.
    sockets: list[int] = field(default_factory=list)


def file_in(directory: Path, name: str, data: bytes, fds: Fds) -> int:
    p = directory / name
    p.write_bytes(data)
    return fds.own(fd.open(p, fd.O_RDONLY))


def stream_pair(kind: str, fds: Fds) -> tuple[int, int]:
    """A connected stream pair of the given kind: ``(one end, other end)``."""
    if kind == "tcp":
        return fds.connected()
    if kind == "unix":
        return unix_stream_pair(fds)
    a, b = fd.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    fds.own(a, b)
    return a, b


def make_source(kind: str, data: bytes, fds: Fds, tmp: Path, shm: Path) -> End:
    if kind == "file":
        return End(file_in(tmp, "src", data, fds), data)
    if kind == "tmpfs":
        return End(file_in(shm, "src", data, fds), data)
    if kind == "zero":
        return End(fds.own(fd.open("/dev/zero", fd.O_RDONLY)), bytes(len(data)))
    if kind == "pipe":
        r, w = fds.pipe()
        return End(r, data, [Feeder(w, data, then=lambda: fds.close(w))])
    far, near = stream_pair(kind, fds)
    feeder = Feeder(far, data, then=lambda: fd.shutdown(far, socket.SHUT_WR))
    return End(near, data, [feeder], sockets=[near, far])


def make_destination(kind: str, fds: Fds, tmp: Path, shm: Path) -> End:
    if kind in FILES:
        p = (tmp if kind == "file" else shm) / "dst"
        n = fds.own(fd.open(p, fd.O_WRONLY | fd.O_CREAT | fd.O_TRUNC, 0o600))

        def read_back() -> tuple[int, str]:
            data = p.read_bytes()
            return len(data), sha256(data)

        return End(n, collect=read_back)
    if kind == "null":
        return End(fds.own(fd.open("/dev/null", fd.O_WRONLY)))
    if kind == "pipe":
        r, w = fds.pipe()
        sink = Sink(r)

        def drained_pipe() -> tuple[int, str]:
            fds.close(w)
            sink.finish()
            return sink.received, sink.digest

        return End(w, threads=[sink], collect=drained_pipe)
    near, far = stream_pair(kind, fds)
    sink = Sink(far)

    def drained_socket() -> tuple[int, str]:
        fd.shutdown(near, socket.SHUT_WR)
        sink.finish()
        return sink.received, sink.digest

    return End(near, threads=[sink], collect=drained_socket, sockets=[near, far])


def first_path(src: str, dst: str, count: int | None) -> str:
    """The path ``transfer`` must try first (``plan`` in transfer.rs, and the small-transfer
    shortcut): counts up to 64 KiB splice through a pooled pipe without looking at the fd
    kinds; otherwise file→file copy_file_range, a pipe on either side splice, file→socket
    through the pooled pipe (measured cheaper than sendfile), file→anything else sendfile,
    the rest through the pooled pipe."""
    if count is not None and count <= SMALL_TRANSFER:
        return "splice_via_pipe"
    if src in FILES and dst in FILES:
        return "copy_file_range"
    if src == "pipe" or dst == "pipe":
        return "splice"
    if src in FILES and dst not in SOCKETS:
        return "sendfile"
    return "splice_via_pipe"


def may_fall_back(src: str, dst: str, count: int | None) -> bool:
    """Whether the kernel may legitimately refuse the first path for these kinds.

    copy_file_range between two filesystems (ext4 under /tmp, tmpfs under /dev/shm) is EXDEV
    on Linux >= 5.19; /dev/zero and /dev/null support splice only on some kernels.
    """
    small = count is not None and count <= SMALL_TRANSFER
    cross_fs = not small and src in FILES and dst in FILES and src != dst
    return cross_fs or src == "zero" or dst == "null"


def check_stats(stats: TransferStats | None, moved: int, planned: str, may_fall: bool) -> None:
    """The stats agree with the return value, and every fallback is explained and chained:
    ``planned → … → stats["path"]``."""
    assert stats is not None
    assert set(stats) == {"path", "bytes", "fallbacks", "remembered", "would_block", "held"}
    assert stats["bytes"] == moved
    assert stats["path"] in PATHS
    fallbacks = stats["fallbacks"]
    for f in fallbacks:
        assert set(f) == {"from", "to", "errno", "reason"}
        assert isinstance(f["reason"], str), f
        assert f["reason"], f
        assert f["errno"] is None or isinstance(f["errno"], int)
    chain = [f["from"] for f in fallbacks] + [stats["path"]]
    assert all(f["to"] == nxt for f, nxt in zip(fallbacks, chain[1:], strict=True)), stats
    if stats["remembered"]:
        # An earlier transfer between the same two files (a /dev node reopened on the same fd
        # number) found this path: it starts there, skipping the ones that failed.
        assert not fallbacks or fallbacks[0]["from"] == stats["path"] or may_fall, stats
        return
    assert chain[0] == planned, stats
    if not may_fall:
        assert not fallbacks, f"unexpected fallback for a pair that supports {planned}: {stats}"


def run_case(
    src_kind: str,
    dst_kind: str,
    size: int,
    count: int | None,
    fds: Fds,
    tmp: Path,
    shm: Path,
) -> tuple[int, TransferStats | None]:
    data = payload(size)
    src = make_source(src_kind, data, fds, tmp, shm)
    dst = make_destination(dst_kind, fds, tmp, shm)
    threads = src.threads + dst.threads
    for t in threads:
        t.start()
    try:
        moved = zerocopy.transfer(src.fd, dst.fd, count)
        stats = zerocopy.transfer_stats()
        got = dst.collect()
        for t in src.threads:
            t.finish()
    except BaseException:
        # A failed transfer or check: unblock the helper threads before the fds close.
        for n in src.sockets + dst.sockets:
            with contextlib.suppress(OSError):
                fd.shutdown(n, socket.SHUT_RDWR)
        raise
    finally:
        for t in threads:
            t.join(10)
    assert moved == size, (moved, size)
    if got is not None:
        assert got == (size, sha256(src.data)), "the bytes that arrived differ from the source"
    # A file's position moves by what was read from it or written to it.
    if src_kind in FILES:
        assert fd.lseek(src.fd, 0, os.SEEK_CUR) == size
    if dst_kind in FILES:
        assert fd.lseek(dst.fd, 0, os.SEEK_CUR) == size
    return moved, stats


@pytest.mark.parametrize("size", SIZES, ids=str)
@pytest.mark.parametrize("dst_kind", DESTINATIONS)
@pytest.mark.parametrize("src_kind", SOURCES)
def test_matrix_with_count(
    src_kind: str, dst_kind: str, size: int, fds: Fds, tmp_path: Path, shm_dir: Path
) -> None:
    moved, stats = run_case(src_kind, dst_kind, size, size, fds, tmp_path, shm_dir)
    planned = first_path(src_kind, dst_kind, size)
    check_stats(stats, moved, planned, may_fall_back(src_kind, dst_kind, size))
    if size <= SMALL_TRANSFER:
        # No fstat, no plan: nothing to remember either.
        assert stats is not None
        assert not stats["remembered"]


@pytest.mark.parametrize("size", [0, 1, 100_003], ids=str)
@pytest.mark.parametrize("dst_kind", DESTINATIONS)
@pytest.mark.parametrize("src_kind", [s for s in SOURCES if s != "zero"])
def test_matrix_until_eof(
    src_kind: str, dst_kind: str, size: int, fds: Fds, tmp_path: Path, shm_dir: Path
) -> None:
    """count=None moves everything until the source ends, by the planned path whatever the
    size (nothing is known to be small)."""
    moved, stats = run_case(src_kind, dst_kind, size, None, fds, tmp_path, shm_dir)
    check_stats(
        stats, moved, first_path(src_kind, dst_kind, None), may_fall_back(src_kind, dst_kind, None)
    )


def test_expected_paths_on_this_kernel(fds: Fds, tmp_path: Path, shm_dir: Path) -> None:
    """The headline paths, exactly, with no fallback: what docs/zerocopy.md's table promises."""
    cases = {
        ("file", "file"): "copy_file_range",
        ("tmpfs", "tmpfs"): "copy_file_range",
        ("file", "tcp"): "splice_via_pipe",
        ("file", "unix"): "splice_via_pipe",
        ("file", "null"): "sendfile",
        ("file", "pipe"): "splice",
        ("pipe", "file"): "splice",
        ("pipe", "tcp"): "splice",
        ("tcp", "pipe"): "splice",
        ("pipe", "pipe"): "splice",
        ("tcp", "tcp"): "splice_via_pipe",
        ("unix", "tcp"): "splice_via_pipe",
        ("tcp", "unix"): "splice_via_pipe",
        ("socketpair", "file"): "splice_via_pipe",
        ("tcp", "tmpfs"): "splice_via_pipe",
    }
    for (src, dst), path in cases.items():
        _, stats = run_case(src, dst, 1 << 20, 1 << 20, fds, tmp_path, shm_dir)
        assert stats is not None
        assert (stats["path"], stats["fallbacks"]) == (path, []), (src, dst, stats)
        fds.close_all()


def test_cross_filesystem_copy_falls_back_with_exdev(
    fds: Fds, tmp_path: Path, shm_dir: Path
) -> None:
    """ext4 → tmpfs: copy_file_range says EXDEV (Linux >= 5.19), sendfile carries on."""
    for src, dst in (("file", "tmpfs"), ("tmpfs", "file")):
        _, stats = run_case(src, dst, 3 << 20, None, fds, tmp_path, shm_dir)
        assert stats is not None
        if stats["remembered"]:
            continue
        if stats["path"] == "copy_file_range":
            pytest.skip("this kernel copies across filesystems with copy_file_range")
        assert stats["fallbacks"][0]["from"] == "copy_file_range"
        assert stats["fallbacks"][0]["errno"] == errno.EXDEV, stats
        assert stats["path"] == "sendfile", stats
        fds.close_all()


def test_transfer_stats_is_per_thread(fds: Fds) -> None:
    import threading

    r, w = fds.pipe()
    fd.write(w, b"abc")
    zerocopy.transfer(r, fds.own(fd.open("/dev/null", fd.O_WRONLY)), 3)
    seen: list[object] = []
    t = threading.Thread(target=lambda: seen.append(zerocopy.transfer_stats()))
    t.start()
    t.join(5)
    assert seen == [None], "another thread's stats leaked into a fresh thread"
    stats = zerocopy.transfer_stats()
    assert stats is not None
    assert stats["bytes"] == 3
