"""RingSelector: the ``selectors`` interface over fdkit's io_uring reactor.

asyncio's selector loop asks a selector for readiness (``add_reader``/``add_writer``, the
self-pipe, datagram and pipe transports, ``sock_*``). This one answers from the reactor's
one-shot polls, re-armed after each report (level-triggered, like epoll's default mode), in
the same io_uring_enter(2) that reaps the streams' received bytes. Those stream events are
kept in ``stream_events`` for the loop to hand to its transports.
"""

from __future__ import annotations

import selectors
from typing import Any

from fdkit._fdkit import Reactor

READY = 0


class RingSelector(selectors._BaseSelectorImpl):
    """A selector whose ``select()`` is one io_uring_enter(2) on ``reactor``."""

    _fd_to_key: dict[int, selectors.SelectorKey]

    def __init__(self, reactor: Reactor) -> None:
        super().__init__()
        self._reactor = reactor
        #: ``(kind, stream id, value)`` tuples from the last ``select()``, for the loop.
        self.stream_events: list[tuple[int, int, Any]] = []

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        key = super().register(fileobj, events, data)
        try:
            self._reactor.set_interest(key.fd, events)
        except BaseException:
            super().unregister(fileobj)
            raise
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        key = super().unregister(fileobj)
        if not self._reactor.closed:
            self._reactor.remove_interest(key.fd)
        return key

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        try:
            key: selectors.SelectorKey = self._fd_to_key[self._fileobj_lookup(fileobj)]  # type: ignore[attr-defined]
        except KeyError:
            raise KeyError(f"{fileobj!r} is not registered") from None
        if events != key.events:
            if not events or events & ~(selectors.EVENT_READ | selectors.EVENT_WRITE):
                raise ValueError(f"Invalid events: {events!r}")
            self._reactor.set_interest(key.fd, events)
            key = key._replace(events=events, data=data)
            self._fd_to_key[key.fd] = key
        elif data != key.data:
            key = key._replace(data=data)
            self._fd_to_key[key.fd] = key
        return key

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = []
        fd_to_key = self._fd_to_key
        stream_events = self.stream_events
        for event in self._reactor.poll(timeout):
            if event[0] == READY:
                key = fd_to_key.get(event[1])
                if key is not None:
                    mask = event[2] & key.events
                    if mask:
                        ready.append((key, mask))
            else:
                stream_events.append(event)
        return ready

    def close(self) -> None:
        super().close()
        self._reactor.close()
