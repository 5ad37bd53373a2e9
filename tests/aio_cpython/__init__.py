"""CPython's own event-loop tests (test_asyncio's mixins) run against a loop, one process each.

``python -m tests.aio_cpython --loop fdkit|asyncio|uvloop [-j N] [--timeout S] [-k PATTERN]``
(from the source tree; from ``tests/`` itself, ``python -m aio_cpython``) prints one line per
test (PASS/FAIL/ERROR/SKIP/HANG and seconds) and a summary. ``tests/test_aio_cpython.py`` runs
the whole set on fdkit's loop under ``make test`` and holds it to ``known_failures.py``.

- ``_cases``: CPython's Unix selector-loop test classes with the loop replaced (the 147 of 3.11).
- ``_runner``: the worker (one test) and the parent (a process per test, a timeout, ``-j``).
- ``known_failures``: the table of tests fdkit's loop fails, each with its reason.

Private attributes of CPython's loops that these tests touch (a loop that is not asyncio's
own selector loop needs them, or the tests that use them fail): ``_default_executor``
(test_utils.TestCase.close_loop, every test), ``_run_once``, ``_run_once_counter``,
``_clock_resolution``, ``_selector`` (test_events.test_timeout_rounding),
``_start_serving``/``_stop_serving`` (test_events.test_create_server_*: replaced by mocks),
``_sendfile_native`` (test_sendfile: replaced to force the fallback), and, only where the loop
is a ``selector_events.BaseSelectorEventLoop``, ``_internal_fds``/``_csock``/``_ssock``
(test_events.test_internal_fds).
"""

from __future__ import annotations

from ._cases import compose, list_ids
from ._runner import LOOPS, Result, loop_available, run_all
from .known_failures import KNOWN_FAILURES, Known, known_failures

__all__ = [
    "KNOWN_FAILURES",
    "LOOPS",
    "Known",
    "Result",
    "compose",
    "known_failures",
    "list_ids",
    "loop_available",
    "run_all",
]
