"""What the tests of ``zerocopy.transfer`` share (``tests/test_zerocopy_transfer_*.py``): a
transfer with the stats it left, and the files, socket pairs, fed stream sources and drained
destinations they move bytes between, each owned by the test's :class:`helpers.Fds` so that it
is closed whatever happens.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from fdkit import fd, zerocopy
from fdkit.types import TransferStats
from helpers import Fds, Feeder, Sink, unix_stream_pair


def transfer_with_stats(*args: Any, **kwargs: Any) -> tuple[int, TransferStats]:
    """``transfer`` and its stats, read in the same thread (the stats are per thread)."""
    n = zerocopy.transfer(*args, **kwargs)
    stats = zerocopy.transfer_stats()
    assert stats is not None
    return n, stats


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


def fed_stream(kind: str, data: bytes, fds: Fds, chunk: int = 256 << 10) -> tuple[int, Feeder]:
    """A stream source of ``kind`` (``pipe``, ``tcp``, ``unix``: an AF_UNIX pair made by
    listen/connect/accept, ``socketpair``) and the feeder, not yet started, that writes
    ``data`` into it, then ends it."""
    if kind == "pipe":
        src, w = fds.pipe()
        return src, Feeder(w, data, then=lambda: fds.close(w), chunk=chunk)
    pairs = {"tcp": fds.connected, "unix": lambda: unix_stream_pair(fds)}
    far, src = pairs.get(kind, lambda: sockpair(fds))()
    return src, Feeder(far, data, then=lambda: fd.shutdown(far, socket.SHUT_WR), chunk=chunk)


def drained_dst(
    kind: str, fds: Fds, file_dir: Path | None = None
) -> tuple[int, Path | None, Sink | None]:
    """A destination of ``kind``: ``file`` (``dst`` in ``file_dir``), ``null``, ``pipe``,
    ``tcp`` or ``socketpair``; with the path of the file, or the started sink that keeps what
    reaches the pipe or socket."""
    if kind == "file":
        assert file_dir is not None
        dst, path = dst_file(file_dir, fds)
        return dst, path, None
    if kind == "null":
        return devnull(fds), None, None
    if kind == "pipe":
        r, dst = fds.pipe()
        sink = Sink(r, keep=True)
    else:
        dst, far = fds.connected() if kind == "tcp" else sockpair(fds)
        sink = Sink(far, keep=True)
    sink.start()
    return dst, None, sink


def sunk(kind: str, dst: int, sink: Sink, fds: Fds) -> bytes:
    """Ends the write side ``dst`` of a ``pipe`` or socket destination and returns all that its
    sink kept."""
    fds.close(dst) if kind == "pipe" else fd.shutdown(dst, socket.SHUT_WR)
    return bytes(sink.finish().kept)
