"""What the tests of ``zerocopy.transfer`` share (``tests/test_zerocopy_transfer_*.py``): a
transfer with the stats it left, and the files and socket pairs they move bytes between, each
owned by the test's :class:`helpers.Fds` so that it is closed whatever happens.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from fdkit import fd, zerocopy
from fdkit.types import TransferStats
from helpers import Fds


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
