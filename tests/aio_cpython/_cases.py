"""CPython's own event-loop test classes, composed for a loop factory.

Each class here is CPython's concrete class for its Unix selector loop on epoll (or, where the
module has one selector class, that one), subclassed with only the loop creation replaced:

=================  ==========================================  ================================
id prefix          CPython's class (the mixins it composes)    loop comes from
=================  ==========================================  ================================
``test_events``    ``EPollEventLoopTests`` (UnixEventLoop-     ``create_event_loop()``
                   TestsMixin → EventLoopTestsMixin,
                   SubprocessTestsMixin, test_utils.TestCase)
``test_sock_...``  ``EPollEventLoopTests`` (BaseSockTests-     ``create_event_loop()``
                   Mixin)
``test_sendfile``  ``EPollEventLoopTests`` (SendfileTestsBase  ``create_event_loop()``
                   = SendfileMixin + SockSendfileMixin)
``test_server``    ``BaseStartServer`` + unittest.TestCase     ``new_loop()``
``test_sslproto``  ``SelectorStartTLSTests`` (BaseStartTLS)    ``new_loop()``
``test_subprocess`` ``SubprocessWatcherMixin`` (SubprocessMix-  the event loop policy
                   in) with the version's default watcher
=================  ==========================================  ================================

That is 147 tests on CPython 3.11 (73 + 13 + 20 + 1 + 11 + 29). CPython's
``SelectorStartServerTests`` adds one test of its own (``test_start_unix_server_1``, defined
on the concrete class, not in ``BaseStartServer``): it is not in the 147. CPython runs the
subprocess mixin once per child watcher; here it runs once, with the watcher asyncio's own
policy installs by default (3.11: ``ThreadedChildWatcher``; 3.12 and 3.13:
``PidfdChildWatcher`` where pidfds work, else ``ThreadedChildWatcher``; 3.14 and later have no
watcher to choose: each loop makes its own, ``_PidfdChildWatcher`` where pidfds work).

``SubprocessWatcherMixin`` takes its loop from ``asyncio.get_event_loop_policy()``, so the
worker installs a policy whose loops come from the factory (for fdkit its own
``EventLoopPolicy``).

The stdlib ``test`` package is untyped and not in typeshed: it is imported with importlib and
the classes are built with ``type()``.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import unittest
from collections.abc import Callable
from typing import Any

LoopFactory = Callable[[], asyncio.AbstractEventLoop]

#: The composed classes, by id prefix (the CPython module they come from).
MODULES = (
    "test_events",
    "test_sock_lowlevel",
    "test_sendfile",
    "test_server",
    "test_sslproto",
    "test_subprocess",
)


def _mod(name: str) -> Any:
    return importlib.import_module(f"test.test_asyncio.{name}")


def _default_watcher() -> Any:
    """The child watcher asyncio's Unix policy creates when none was set, on this Python."""
    unix_events: Any = importlib.import_module("asyncio.unix_events")
    if sys.version_info >= (3, 12) and unix_events.can_use_pidfd():
        return unix_events.PidfdChildWatcher()
    return unix_events.ThreadedChildWatcher()


def compose(factory: LoopFactory) -> dict[str, type[unittest.TestCase]]:
    """CPython's test classes with their loop made by ``factory``, keyed by module name."""

    def create_event_loop(self: Any) -> asyncio.AbstractEventLoop:
        return factory()

    def get_watcher(self: Any) -> Any:
        return _default_watcher()

    def make(name: str, bases: tuple[type, ...], ns: dict[str, Any]) -> type[unittest.TestCase]:
        cls = type(name, bases, {"__module__": __name__, "__qualname__": name, **ns})
        return cls

    events, sock, sendfile = _mod("test_events"), _mod("test_sock_lowlevel"), _mod("test_sendfile")
    server, sslproto, subproc = _mod("test_server"), _mod("test_sslproto"), _mod("test_subprocess")
    loop_ns = {"create_event_loop": create_event_loop}
    new_loop_ns = {"new_loop": create_event_loop}
    return {
        "test_events": make("EventLoopTests", (events.EPollEventLoopTests,), loop_ns),
        "test_sock_lowlevel": make("SockTests", (sock.EPollEventLoopTests,), loop_ns),
        "test_sendfile": make("SendfileTests", (sendfile.EPollEventLoopTests,), loop_ns),
        "test_server": make(
            "StartServerTests", (server.BaseStartServer, unittest.TestCase), new_loop_ns
        ),
        "test_sslproto": make("StartTLSTests", (sslproto.SelectorStartTLSTests,), new_loop_ns),
        "test_subprocess": make(
            "SubprocessTests",
            (subproc.SubprocessWatcherMixin, _mod("utils").TestCase),
            # 3.11 instantiates ``Watcher``; 3.12 and 3.13 call ``_get_watcher``.
            {"Watcher": staticmethod(_default_watcher), "_get_watcher": get_watcher},
        ),
    }


def list_ids() -> list[str]:
    """Every composed test as ``<module>.<method>``, in CPython's order."""

    def unused() -> asyncio.AbstractEventLoop:
        raise AssertionError("listing only")

    loader = unittest.TestLoader()
    return [
        f"{mod}.{name}"
        for mod, cls in compose(unused).items()
        for name in loader.getTestCaseNames(cls)
    ]
