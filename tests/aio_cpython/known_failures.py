"""The one table of CPython loop tests that fdkit's loop is known to fail, each with its reason.

Keyed by test id (``<CPython module>.<test method>``, as ``python -m tests.aio_cpython``
prints it). ``tests/test_aio_cpython.py`` holds the table to the truth both ways: a failure
missing from it fails the suite, and so does an entry whose test now passes (delete the entry).
An entry can be limited to some engines (default: both, io_uring and epoll, which share the
native core) or to some Python versions (CPython's tests differ between them).

Per-version notes on the set itself (not failures; ``python -m tests.aio_cpython --list``):
- 3.11: 147 tests. 3.12: 153, adding ``test_events.test_create_server_trsock`` and
  ``test_subprocess.test_communicate_none_input``, ``test_create_subprocess_env_exec``,
  ``test_create_subprocess_env_shell``, ``test_subprocess_concurrent_wait``,
  ``test_subprocess_protocol_events``. 3.13: 155, adding
  ``test_events.test_datagram_send_to_non_listening_address`` and
  ``test_subprocess.test_subprocess_send_signal_race``. 3.14 (Debian's 3.14.10): 179, adding
  24 (``call_soon_threadsafe`` handle cancellation, datagram write errors and close, named
  FIFOs, empty ``writelines`` chunks, sendfile offsets, ``sock_accept`` racing, certificate
  failures leaving no cycles, subprocess pipes cancelled, the watcher's class). 3.15 (3.15.2):
  the same 179.
- 3.12 and 3.13 run the subprocess tests with ``PidfdChildWatcher`` (their default), so there
  the loop's ``add_reader`` on a pidfd reaps children; 3.11 uses ``ThreadedChildWatcher``.
  From 3.14 there are no child watchers to choose: each loop makes its own (a pidfd one where
  pidfds work), and the mixin takes its loop from the policy's ``new_event_loop``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Known:
    """Why a test fails on fdkit, and where that holds."""

    reason: str
    engines: frozenset[str] = field(default_factory=lambda: frozenset({"io_uring", "epoll"}))
    #: ``None``: every supported version; else the ``(major, minor)`` versions it fails on.
    versions: frozenset[tuple[int, int]] | None = None

    def applies(self, engine: str, version: tuple[int, int]) -> bool:
        return engine in self.engines and (self.versions is None or version in self.versions)


KNOWN_FAILURES: dict[str, Known] = {}


def known_failures(engine: str, version: tuple[int, int]) -> dict[str, str]:
    """The entries that hold for this engine and Python version: test id → reason."""
    return {tid: k.reason for tid, k in KNOWN_FAILURES.items() if k.applies(engine, version)}
