"""Zero-copy transfers: move bytes between fds inside the kernel.

* :func:`transfer` picks the best path for the two fds (copy_file_range for file→file,
  splice through a pooled internal pipe first and then sendfile for file→socket, splice when a
  side is a pipe, splice through a pooled internal pipe for socket→socket and socket→file),
  falls back at run time to the next path and finally to read/write, and remembers what worked
  for the pair. :func:`transfer_stats` says which path
  the calling thread's last transfer took and why it left any other.
  ``transfer(..., nonblocking=True)`` is the form for event loops: it never waits, and returns
  ``(moved, would_block)`` as soon as a side would block (``"read"``: the source is empty;
  ``"write"``: the destination is full), or with ``would_block`` None once the count is
  reached or the source ended. Bytes it took from the source that the full destination did
  not take stay with the (src, dst) pair (:func:`transfer_held` counts them) and the next
  transfer between the two delivers them first: nothing is lost, nothing reordered.
  :func:`fdkit.aio.transfer` drives it from any asyncio loop.
* :class:`Pipe` is a pipe pair with ``read_from``, ``write_to`` and ``tee`` (duplicate without
  consuming). ``read_from(fd)``/``write_to(fd)`` without ``n`` run to the end, as Go
  zerocopy's ``ReadFrom``/``WriteTo`` (read/write for an fd that refuses splice, waiting on
  non-blocking fds); ``close_write()`` half-closes the pipe so its consumer sees EOF; and
  ``add_mirror(fd_or_pipe)`` is a standing tee: every chunk ``write_to`` takes out is first
  copied, whole, to each mirror (a file, a socket, another Pipe).
* :func:`proxy` relays both directions between two connected stream sockets; :func:`relay`
  one direction, optionally recording it. A half-close (FIN) is passed on as a half-close; a
  reset is passed on as a reset: the bytes that arrived before it are delivered (waiting at
  most 2 s without progress), then the other TCP side is reset (``SO_LINGER`` 0 and a
  disconnect), so its peer reads ``ConnectionResetError``, never a clean EOF, and the call
  raises the error. The caller still closes both sockets.

``transfer`` keeps up to 16 idle internal pipe pairs for reuse; :func:`pipe_pool_clear`
closes them (:func:`pipe_pool_idle` counts them).

All of them release the GIL for the whole call and stop on Ctrl-C.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fdkit._fdkit import (
    Pipe,
    pipe_pool_clear,
    pipe_pool_idle,
    proxy,
    relay,
    transfer,
    transfer_held,
)
from fdkit._fdkit import transfer_stats as _transfer_stats

if TYPE_CHECKING:  # only for annotations: importing fdkit.types costs every program
    from fdkit.types import TransferStats


def transfer_stats() -> TransferStats | None:
    """The calling thread's last :func:`transfer`, or None before the first.

    ``{"path": "splice_via_pipe", "bytes": 1048576, "remembered": False,
    "fallbacks": [{"from": "sendfile", "to": "splice_via_pipe", "errno": 22,
    "reason": "refused by the kernel"}],
    "would_block": None, "held": 0}``. Paths: ``copy_file_range``, ``sendfile``,
    ``splice``, ``splice_via_pipe``, ``read_write`` (:class:`fdkit.types.TransferStats`).
    """
    return _transfer_stats()


__all__ = [
    "Pipe",
    "pipe_pool_clear",
    "pipe_pool_idle",
    "proxy",
    "relay",
    "transfer",
    "transfer_held",
    "transfer_stats",
]
