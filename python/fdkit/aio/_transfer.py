"""``await fdkit.aio.transfer(src_fd, dst_fd, count=None)``: zero-copy between two fds,
awaiting instead of blocking, on any asyncio loop."""

from __future__ import annotations

import asyncio
import operator
import os
import stat
from typing import TYPE_CHECKING

from fdkit import _fdkit
from fdkit.aio._readiness import wait_ready

if TYPE_CHECKING:
    from fdkit.types import TransferPath

#: The most one native call moves before the loop runs its other callbacks: a source and a
#: destination that never block (a file into /dev/null, a fast local peer) must not hold the
#: loop for the whole transfer. A few ms of copying at the kernel's speed.
CHUNK = 4 << 20


def _check_fd(fd: int, what: str) -> int:
    fd = operator.index(fd)
    if fd < 0:
        raise ValueError(f"{what} must be a non-negative int, got {fd}")
    mode = os.fstat(fd).st_mode
    may_wait = stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)
    if may_wait and os.get_blocking(fd):
        # What asyncio's loop.sock_sendfile says of a blocking socket: a blocking fd would
        # put the whole loop to sleep inside the kernel call.
        raise ValueError(
            f"{what} {fd} must be non-blocking (os.set_blocking({fd}, False)): "
            "a blocking socket, pipe or device would stall the event loop"
        )
    return fd


async def transfer(src_fd: int, dst_fd: int, count: int | None = None) -> tuple[int, TransferPath]:
    """Moves ``count`` bytes (until the source ends when None) from ``src_fd`` to ``dst_fd``
    by the kernel paths of :func:`fdkit.zerocopy.transfer` (copy_file_range, sendfile,
    splice, splice through an internal pipe, read/write), awaiting instead of blocking.

    Returns ``(bytes moved, path)``, the path as ``zerocopy.transfer_stats()`` names it.
    Works on any asyncio loop: when a side would block, it waits through
    ``loop.add_reader``/``loop.add_writer`` on that side and removes the registration
    afterwards. Sockets, pipes and devices must be non-blocking (``ValueError`` otherwise,
    as ``loop.sock_sendfile`` says); the fds must not be watched by anyone else meanwhile.

    A peer reset raises ``ConnectionResetError`` (a vanished reader ``BrokenPipeError``),
    never a clean end. Cancelled, it returns at once and leaves nothing registered; bytes it
    had taken from the source that the full destination did not take yet (at most one
    internal pipe's worth) stay with the (src, dst) pair, counted by
    :func:`fdkit.zerocopy.transfer_held`, and the next transfer between the two delivers them
    first.
    """
    if count is not None:
        if isinstance(count, bool) or not isinstance(count, int):
            raise TypeError(f"count must be a non-negative integer or None (got {count!r})")
        if count < 0:
            raise ValueError(f"count must be a non-negative integer or None (got {count!r})")
    loop = asyncio.get_running_loop()
    src_fd = _check_fd(src_fd, "src_fd")
    dst_fd = _check_fd(dst_fd, "dst_fd")
    total = 0
    path: TransferPath | None = None
    while True:
        want = CHUNK if count is None else min(CHUNK, count - total)
        moved, would_block = _fdkit.transfer(src_fd, dst_fd, want, nonblocking=True)
        total += moved
        if moved or path is None:
            stats = _fdkit.transfer_stats()
            if stats is not None:
                path = stats["path"]
        if would_block is None:
            if moved < want or (count is not None and total >= count):
                break  # the source ended, or the count is reached
            await asyncio.sleep(0)  # a whole chunk without blocking: let the loop breathe
        else:
            await wait_ready(
                loop, dst_fd if would_block == "write" else src_fd, would_block == "write"
            )
    assert path is not None
    return total, path
