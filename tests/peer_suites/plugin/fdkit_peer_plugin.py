"""The pytest plugin the harness loads into a peer suite's own pytest (``-p fdkit_peer_plugin``).

It runs inside the suite's venv (``.peer/venv-<suite>``), where the harness package itself is not
importable (the suites have a ``tests`` package of their own), so it is one file, configured by
environment variables:

- ``PEER_SUITE``: ``uvloop``, ``anyio`` or ``aiohttp``: which hook points the suite at the loop.
- ``PEER_LOOP``: ``asyncio`` (the suite untouched) or an fdkit engine, ``io_uring`` or ``epoll``.
- ``PEER_CONFIG``: a JSON file: ``{"deselect": [{"kind", "value", "reason"}], "only": path|null}``.
- ``PEER_RESULTS``: a JSON-lines file this plugin appends to, one flushed line per event, so the
  harness sees how far a run got even when a test hangs or kills the process.

The hooks (one per suite, found in each sdist's conftest and test base):

- uvloop: ``uvloop._testbase.AIOTestCase.new_loop`` (the base of its ``*AIO*`` test classes,
  asyncio's loop) returns fdkit's loop; ``is_asyncio_loop()`` says yes for any loop that is an
  ``asyncio.BaseEventLoop`` (fdkit's is asyncio's Unix loop with another engine), where uvloop's
  base only says so for loops defined in the ``asyncio`` package.
- anyio: the ``anyio_backend`` parameter ``("asyncio", options)`` (or plain ``"asyncio"``) of each
  collected test becomes ``("asyncio", {**options, "loop_factory": fdkit's})``: anyio's own
  pytest plugin then runs the test in ``asyncio.Runner(loop_factory=...)``.
- aiohttp: the ``loop_factory`` parameter its pytest plugin gives the ``loop`` fixture
  (``--aiohttp-loop=pyloop``: ``asyncio.new_event_loop``) becomes fdkit's; coroutine tests that
  take no ``loop`` fixture run on ``setup_test_loop()``, whose default becomes fdkit's too.

Each result line counts the fdkit loops the test made (``loops``): the proof that the hook took.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import os
import re
import time
from pathlib import Path
from typing import IO, Any

import pytest

SUITE = os.environ.get("PEER_SUITE", "")
LOOP = os.environ.get("PEER_LOOP", "asyncio")

_loops_made = 0
_out: IO[str] | None = None


def _emit(record: dict[str, Any]) -> None:
    global _out
    if _out is None:
        path = os.environ.get("PEER_RESULTS")
        if not path:
            return
        _out = open(path, "a", encoding="utf-8")  # noqa: SIM115 (open for the whole run)
    _out.write(json.dumps(record) + "\n")
    _out.flush()


def fdkit_loop() -> asyncio.AbstractEventLoop:
    """A new fdkit loop on the engine under test (counted)."""
    global _loops_made
    from fdkit.aio import EventLoop

    loop = EventLoop(engine="epoll") if LOOP == "epoll" else EventLoop(engine="io_uring")
    _loops_made += 1
    return loop


# --- pointing each suite at the loop ----------------------------------------------------------


def _hook_uvloop() -> None:
    tb: Any = importlib.import_module("uvloop._testbase")

    def new_loop(self: Any) -> asyncio.AbstractEventLoop:
        return fdkit_loop()

    def is_asyncio_loop(self: Any) -> bool:
        return isinstance(self.loop, asyncio.BaseEventLoop)

    tb.AIOTestCase.new_loop = new_loop
    tb.AIOTestCase.is_asyncio_loop = is_asyncio_loop


def _hook_aiohttp() -> None:
    plugin: Any = importlib.import_module("aiohttp.pytest_plugin")
    plugin.setup_test_loop = functools.partial(plugin.setup_test_loop, fdkit_loop)


def _retarget_items(items: list[pytest.Item]) -> None:
    """Replace the loop parameter of each collected test (anyio, aiohttp) with fdkit's."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None:
            continue
        params: dict[str, Any] = callspec.params
        if SUITE == "anyio" and "anyio_backend" in params:
            backend = params["anyio_backend"]
            if _plain_backend(backend, "asyncio"):
                options = {} if isinstance(backend, str) else dict(backend[1])
                params["anyio_backend"] = ("asyncio", {**options, "loop_factory": fdkit_loop})
        elif SUITE == "aiohttp" and params.get("loop_factory") is asyncio.new_event_loop:
            params["loop_factory"] = fdkit_loop


def pytest_configure(config: pytest.Config) -> None:
    _emit({"event": "configure", "suite": SUITE, "loop": LOOP, "pid": os.getpid()})
    if LOOP == "asyncio":
        return
    if SUITE == "uvloop":
        _hook_uvloop()
    elif SUITE == "aiohttp":
        _hook_aiohttp()


# --- choosing the tests -----------------------------------------------------------------------


def _config() -> dict[str, Any]:
    path = os.environ.get("PEER_CONFIG")
    if not path:
        return {"deselect": [], "only": None}
    return dict(json.loads(Path(path).read_text(encoding="utf-8")))


def _plain_backend(backend: Any, name: str) -> bool:
    """Whether an ``anyio_backend`` value is ``name`` on its own loop (no factory, no uvloop)."""
    if isinstance(backend, str):
        return backend == name
    if isinstance(backend, tuple) and len(backend) == 2 and backend[0] == name:
        options = dict(backend[1])
        return options.get("loop_factory") is None and not options.get("use_uvloop")
    return False


def _unittest_class(item: pytest.Item) -> type | None:
    cls = getattr(item, "cls", None)
    return cls if isinstance(cls, type) else None


def _matches(item: pytest.Item, rule: dict[str, str]) -> bool:
    kind, value = rule["kind"], rule["value"]
    if kind == "nodeid":  # a prefix of the node id (a file, a class, one test)
        return item.nodeid == value or item.nodeid.startswith((value + "::", value + "["))
    if kind == "contains":
        return value in item.nodeid
    if kind == "regex":
        return re.search(value, item.nodeid) is not None
    if kind == "marker":
        return item.get_closest_marker(value) is not None
    if kind == "anyio_backend_not":  # anyio_backend is another backend or loop than `value`
        callspec = getattr(item, "callspec", None)
        if callspec is None or "anyio_backend" not in callspec.params:
            return False
        return not _plain_backend(callspec.params["anyio_backend"], value)
    if kind == "class_not_subclass":  # a test whose class is not a subclass of module:Class
        module, _, name = value.partition(":")
        base = getattr(importlib.import_module(module), name)
        cls = _unittest_class(item)
        return cls is None or not issubclass(cls, base)
    raise ValueError(f"unknown deselection kind {kind!r}")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    cfg = _config()
    only: set[str] | None = None
    if cfg.get("only"):
        only = set(Path(cfg["only"]).read_text(encoding="utf-8").split("\n")) - {""}
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    deselected: dict[str, list[str]] = {}
    for item in items:
        rule = next((r for r in cfg.get("deselect", []) if _matches(item, r)), None)
        if rule is not None:
            deselected.setdefault(rule["reason"], []).append(item.nodeid)
            dropped.append(item)
        elif only is not None and item.nodeid not in only:
            dropped.append(item)
        else:
            keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    if LOOP != "asyncio":
        _retarget_items(items)
    _emit({"event": "collected", "nodeids": [i.nodeid for i in items], "deselected": deselected})


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _emit({"event": "collect_error", "nodeid": report.nodeid, "detail": _short(report)})


# --- recording the results --------------------------------------------------------------------

_phases: dict[str, list[pytest.TestReport]] = {}
_started: dict[str, tuple[float, int]] = {}


def _short(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The last line of the failure that says what it was, and the test's own last frame."""
    if report.longrepr is None:
        return ""
    if isinstance(report.longrepr, tuple):  # a skip: (path, lineno, reason)
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        first = str(crash.message).strip().splitlines()[0] if crash.message else ""
        if "sub-exception" in first:  # an ExceptionGroup: say what the first one was
            inner = [
                line.strip(" |+-")
                for line in str(report.longrepr).splitlines()
                if line.lstrip().startswith("|")
                and ("Error: " in line or "Warning: " in line)
                and "PytestUnraisableExceptionWarning" not in line
            ]
            first += f" ({inner[0]}, ...)" if inner else ""
        return first[:300]
    text = str(report.longrepr).strip().splitlines()
    errors = [line for line in text if line.startswith("E ") or "Error" in line]
    return (errors[-1] if errors else text[-1] if text else "")[:300]


def _outcome(reports: list[pytest.TestReport]) -> tuple[str, str, str]:
    """(outcome, phase, detail) as pytest's summary counts them."""
    for rep in reports:
        if rep.when == "setup" and rep.failed:
            return "error", "setup", _short(rep)
    call = next((r for r in reports if r.when == "call"), None)
    if call is not None and call.failed:
        return "failed", "call", _short(call)
    for rep in reports:
        if rep.when == "teardown" and rep.failed:
            return "error", "teardown", _short(rep)
    for rep in reports:
        if rep.skipped:
            if hasattr(rep, "wasxfail"):
                return "skipped", rep.when, f"xfail: {rep.wasxfail}"
            return "skipped", rep.when, _short(rep)
    return "passed", "call", ""


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _started[nodeid] = (time.monotonic(), _loops_made)
    _emit({"event": "start", "nodeid": nodeid})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _phases.setdefault(report.nodeid, []).append(report)


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    start, loops = _started.pop(nodeid, (time.monotonic(), _loops_made))
    outcome, phase, detail = _outcome(_phases.pop(nodeid, []))
    _emit(
        {
            "event": "result",
            "nodeid": nodeid,
            "outcome": outcome,
            "phase": phase,
            "detail": detail,
            "seconds": round(time.monotonic() - start, 3),
            "loops": _loops_made - loops,
        }
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    global _out
    _emit({"event": "finish", "loops": _loops_made})
    if _out is not None:
        _out.close()
        _out = None
