"""Other projects' own test suites on fdkit's loop (``make peer-tests``): the loop keeps
the promises they test.

``python -m tests.peer_suites [--suite uvloop|anyio|aiohttp] [--loop asyncio|io_uring|epoll]
[--json] [-j N] [--timeout S] [--budget MIN] [-k EXPR]`` runs uvloop 0.23.0's, anyio 4.16.0's and
aiohttp 3.14.5's tests, from their PyPI sdists (downloaded at run time into ``.peer/``; none of
their code is in this repository), on asyncio's loop and on fdkit's with each engine, and
prints the counts per suite and loop and every test that passes on asyncio's loop and not on
fdkit's. It downloads, so it is not part of ``make test``; its logic is tested there
(``tests/test_peer_suites.py``) on a small suite made on the spot.

- ``_cli``: the command line (``__main__`` runs it).
- ``_suites``: the three suites: versions, test deps, pytest options, what is left out and why.
- ``_env``: the sdist (``pip download``), unpacked, and a venv per suite with fdkit importable.
- ``_run``: the suite's pytest on one loop, hang- and crash-proof (per-test timeout, a watchdog,
  restarts on the tests not yet run, an overall budget).
- ``_report``: the differences (each run again alone, to set aside tests flaky on asyncio) and
  the report, as text or JSON.
- ``plugin/fdkit_peer_plugin.py``: loaded into the suite's pytest: the hook that points it at
  fdkit's loop, the deselections, and a result line per test.

Nothing here has a ``test_`` name: fdkit's own pytest run (``testpaths = ["tests"]``) imports
none of it, except through ``tests/test_peer_suites.py``.
"""
