"""Waiting for an fd to become readable or writable on any asyncio loop.

Through ``loop.add_reader``/``loop.add_writer`` only (so it works on asyncio's own loops and
on fdkit's), one registration per (fd, direction) however many coroutines wait on it: a loop
keeps one callback per fd and direction, so two waiters registering their own would unseat
each other. The registration is removed when the fd fires and when the last waiter leaves,
cancelled or not: nothing stays registered after a wait.
"""

from __future__ import annotations

import asyncio
import weakref

_Key = tuple[int, bool]  # (fd, writable)
_Table = dict[_Key, list["asyncio.Future[None]"]]

_tables: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Table] = weakref.WeakKeyDictionary()


def _unregister(loop: asyncio.AbstractEventLoop, key: _Key) -> None:
    fd, writable = key
    if writable:
        loop.remove_writer(fd)
    else:
        loop.remove_reader(fd)


def _fire(loop: asyncio.AbstractEventLoop, table: _Table, key: _Key) -> None:
    waiters = table.pop(key, [])
    _unregister(loop, key)
    for fut in waiters:
        if not fut.done():
            fut.set_result(None)


async def wait_ready(loop: asyncio.AbstractEventLoop, fd: int, writable: bool) -> None:
    """Until ``fd`` is readable (``writable=False``) or writable, without blocking ``loop``."""
    table = _tables.get(loop)
    if table is None:
        table = _tables[loop] = {}
    key = (fd, writable)
    fut: asyncio.Future[None] = loop.create_future()
    waiters = table.get(key)
    if waiters is None:
        waiters = table[key] = [fut]
        try:
            if writable:
                loop.add_writer(fd, _fire, loop, table, key)
            else:
                loop.add_reader(fd, _fire, loop, table, key)
        except BaseException:
            del table[key]
            raise
    else:
        waiters.append(fut)
    try:
        await fut
    finally:
        current = table.get(key)
        if current is not None and fut in current:  # left before the fd fired
            current.remove(fut)
            if not current:
                del table[key]
                _unregister(loop, key)
