"""The EventLoop class: asyncio's Unix selector loop with fdkit's engine underneath."""

from __future__ import annotations

import asyncio
import os
import selectors
from typing import Literal

Engine = Literal["io_uring", "epoll"]


def engine_available() -> Engine:
    """The engine a new loop would use here: ``"io_uring"`` or ``"epoll"``.

    ``FDKIT_AIO_ENGINE=epoll`` forces epoll (to compare, or where io_uring misbehaves).
    """
    if os.environ.get("FDKIT_AIO_ENGINE") == "epoll":
        return "epoll"
    return "epoll"  # the io_uring engine lands next


class EventLoop(asyncio.unix_events._UnixSelectorEventLoop):  # type: ignore[name-defined,misc]
    """An asyncio event loop; ``engine`` names what it runs on."""

    engine: Engine

    def __init__(self) -> None:
        self.engine = engine_available()
        super().__init__(selectors.EpollSelector())
