"""The server-side protocol the parity scripts of ``tests/test_aio_parity_protocols.py`` and
``tests/test_aio_parity_loop.py`` build on, and the address they serve on.

A script subclasses :class:`Server` to record what its callbacks saw; the test then closes
every connection it made with :meth:`Server.close`, which waits for ``connection_lost``.
"""

from __future__ import annotations

import asyncio
from typing import Any

HOST = "127.0.0.1"


class Server(asyncio.Protocol):
    """A server-side protocol that keeps its transport and says when the connection is lost."""

    def __init__(self) -> None:
        self.transport: Any = None
        self.made: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.lost: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.made.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(type(exc).__name__ if exc else None)

    async def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
            await asyncio.wait_for(asyncio.shield(self.lost), 5)
