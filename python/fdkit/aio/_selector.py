"""RingSelector: the ``selectors`` interface of fdkit's io_uring engine.

Readiness registrations (``add_reader``/``add_writer``: the self-pipe, datagram and pipe
transports, ``sock_*``, a transport's writes) live in an epoll instance, so they keep epoll's
semantics exactly: a closed fd leaves the set and never feeds a later owner of its number, a
regular file or a closed fd is refused with epoll_ctl(2)'s error. The ring watches that epoll's
fd, together with the streams' receives and the listeners' accepts, in one io_uring_enter(2);
epoll_wait(2) runs only when the epoll fd is ready.

``select()`` waits and reports, nothing more: a stream or a listener with something to take
is reported with its reader Handle as a selector key's data, as epoll reports an fd, and
asyncio's own ``_process_events`` puts that Handle on the ready queue, where it runs in its
context, timed in debug mode, after whatever ran before it in the iteration. The reactor is
given each ``(key, EVENT_READ)`` pair when the reader is set, and its ``poll()`` returns the
pairs of what is ready: the list ``select()`` answers, built without a Python loop.
"""

from __future__ import annotations

import selectors
from typing import Any

from fdkit._fdkit import Reactor

_EVENT_READ = selectors.EVENT_READ
#: What the reactor reports when the epoll instance has something (always first in the list).
_EPOLL_READY = object()


class RingSelector(selectors.EpollSelector):
    """An epoll selector whose ``select()`` is one io_uring_enter(2) on ``reactor``."""

    def __init__(self, reactor: Reactor) -> None:
        super().__init__()
        self._reactor = reactor
        self._epoll_fd = self._selector.fileno()  # type: ignore[attr-defined]
        # Streams and listeners by reactor id: the key asyncio's _process_events reads, its
        # data (reader Handle, None); no key while the reader is removed (a paused stream).
        self._ring_keys: dict[int, selectors.SelectorKey] = {}
        reactor.set_interest(self._epoll_fd, _EVENT_READ, _EPOLL_READY)

    def set_ring_reader(self, ident: int, fd: int, handle: Any) -> Any:
        """Sets the reader Handle of stream or listener ``ident`` (on ``fd``); returns the
        one it replaces."""
        old = self._ring_keys.get(ident)
        key = selectors.SelectorKey(fd, fd, _EVENT_READ, (handle, None))
        self._ring_keys[ident] = key
        self._reactor.report(ident, (key, _EVENT_READ))
        return None if old is None else old.data[0]

    def clear_ring_reader(self, ident: int) -> Any:
        """Forgets the reader of ``ident``; returns its Handle (None if there was none)."""
        old = self._ring_keys.pop(ident, None)
        return None if old is None else old.data[0]

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout < 0:
            timeout = 0
        ready: list[Any] = self._reactor.poll(timeout)
        if ready and ready[0] is _EPOLL_READY:
            ready[0:1] = super().select(0)
        return ready

    def close(self) -> None:
        super().close()
        self._ring_keys.clear()
        self._reactor.close()
