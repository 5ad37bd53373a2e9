"""RingSelector: the selector of fdkit's io_uring engine.

Every registration (``add_reader``/``add_writer``, the transports' reads and writes, the
listeners) lives in an epoll instance, so it keeps epoll's semantics exactly: a closed fd leaves
the set and never feeds a later owner of its number, a regular file or a closed fd is refused
with epoll_ctl(2)'s error, and nothing is read or accepted before asyncio's callback asks for
it. The ring only waits for that instance: the loop's core has the ring read its events
(``IORING_OP_EPOLL_WAIT``, Linux 6.15) in the io_uring_enter(2) that sleeps, or, before 6.15,
reads what is ready with epoll_wait(2) (no wait) and only when nothing is has the ring wait for
the instance to become readable, with the iteration's timeout (one io_uring_enter(2)). The
one-shot op a wait arms is taken back before it returns, so nothing of the ring is armed
between waits.

``select()`` is the second way, for a caller of the selector's own API (a program that replaced
a step of the loop's iteration).
"""

from __future__ import annotations

import selectors
from typing import Any

from fdkit._fdkit import Reactor

#: The epoll selector's own ``select``, as the ring's wait stands for it.
_EPOLL_SELECT = selectors.EpollSelector.select


class RingSelector(selectors.EpollSelector):
    """An epoll selector whose waits are made by ``reactor``'s ring."""

    def __init__(self, reactor: Reactor) -> None:
        super().__init__()
        self._reactor = reactor

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if selectors.EpollSelector.select is not _EPOLL_SELECT:
            # A program replaced the epoll selector's select (a test plugin, a tracer): it gets
            # the call asyncio's loop makes, with the iteration's timeout.
            return super().select(timeout)
        ready: list[Any] = super().select(0)
        if ready or (timeout is not None and timeout <= 0):
            return ready
        self._reactor.wait(self._selector.fileno(), timeout)  # type: ignore[attr-defined]
        return super().select(0)

    def close(self) -> None:
        super().close()
        self._reactor.close()
