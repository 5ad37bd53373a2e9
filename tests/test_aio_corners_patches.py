"""fdkit.aio in the corners, part two: what programs and tools change in asyncio's
loop class and how they make loops. Each scenario is a program run in a child Python of its own
on asyncio's ``SelectorEventLoop`` (epoll; the oracle) and on ``fdkit.aio.EventLoop`` with each
engine, and what the program observed is compared: fdkit's record must equal asyncio's.

5. class-level patches made after the loop exists (before it runs, or while it runs):
   ``BaseEventLoop.time``, ``BaseEventLoop.call_soon``, ``EpollSelector.select``,
   ``BaseSelectorEventLoop._process_events``, ``type(loop)._run_once``, the socket
   transport's ``write``; and a subclass's ``_check_closed`` and ``get_debug``: is the patch
   called, and with what;
6. a loop subclass whose ``__init__`` takes arguments of its own (a tag; a selector passed
   through, as to ``SelectorEventLoop(selector)``);
8. pytest-asyncio (a child pytest) running tests on a custom loop class, given by its
   ``pytest_asyncio_loop_factories`` hook or by an event loop policy;
9. the clock-patching technique of looptime (a dynamic subclass set as the loop's
   ``__class__``, overriding ``time``, and a patched ``select`` that fast-forwards the clock):
   ``await asyncio.sleep(100)`` completes at once, the loop's time 100 s later.

Part one, with the helpers' rationale, is ``test_aio_corners.py``. Every patch a program makes
is undone in a ``finally`` (each program runs alone in its child anyway). Where asyncio's
answer is plain, the test asserts it too, so that a broken oracle cannot make a wrong answer
pass. Everything uses the real kernel (sockets on 127.0.0.1).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from helpers.aio_corners import PRELUDE, compare
from helpers.aio_parity import FdkitEngine, each_engine

#: What every part-two program runs once its loop exists: a call_soon callback, a 0.01 s
#: sleep, and a stream echo through a server on 127.0.0.1; the result is "ping" back.
WORK = """
import selectors, socket
ran = []

def f():
    ran.append("f")

async def echo(reader, writer):
    writer.write(await reader.readexactly(4))
    await writer.drain()
    writer.close()

async def work():
    loop = asyncio.get_running_loop()
    loop.call_soon(f)
    await asyncio.sleep(0.01)
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        writer.write(b"ping")
        got = await asyncio.wait_for(reader.readexactly(4), 2)
        writer.close()
        await writer.wait_closed()
    finally:
        server.close()
        await server.wait_closed()
    return got.decode()
"""

# --- 5. class-level patches made after the loop exists ------------------------------------------

PATCH_PROGRAM = (
    PRELUDE
    + WORK
    + """
patch, when = ARGS
seen = []

def note(what):
    if what not in seen:
        seen.append(what)

def wrap(original):
    if patch == "BaseEventLoop.time":
        def time(self):
            note("called")
            return original(self)
        return time
    if patch == "BaseEventLoop.call_soon":
        def call_soon(self, callback, *args, context=None):
            note("called")
            if callback is f:
                note("with my callback f")
            return original(self, callback, *args, context=context)
        return call_soon
    if patch == "EpollSelector.select":
        def select(self, timeout=None):
            note("called")
            if timeout is not None and timeout > 0:
                note("with a timeout > 0")
            return original(self, timeout)
        return select
    if patch == "BaseSelectorEventLoop._process_events":
        def _process_events(self, event_list):
            note("called")
            if event_list and all(isinstance(k, selectors.SelectorKey) for k, _ in event_list):
                note("with (SelectorKey, events) pairs")
            return original(self, event_list)
        return _process_events
    if patch == "type(loop)._run_once":
        def _run_once(self):
            note("called")
            return original(self)
        return _run_once
    def write(self, data):
        note(["called with", bytes(data).decode()])
        return original(self, data)
    return write

loop = new_loop(KIND)
owner, name = {
    "BaseEventLoop.time": (asyncio.base_events.BaseEventLoop, "time"),
    "BaseEventLoop.call_soon": (asyncio.base_events.BaseEventLoop, "call_soon"),
    "EpollSelector.select": (selectors.EpollSelector, "select"),
    "BaseSelectorEventLoop._process_events": (
        asyncio.selector_events.BaseSelectorEventLoop, "_process_events"
    ),
    "type(loop)._run_once": (type(loop), "_run_once"),
    "_SelectorSocketTransport.write": (asyncio.selector_events._SelectorSocketTransport, "write"),
}[patch]
had = name in vars(owner)
saved = vars(owner).get(name)

def apply():
    setattr(owner, name, wrap(getattr(owner, name)))

async def main():
    if when == "while the loop runs":
        apply()
        await asyncio.sleep(0)
    return await work()

out = {}
try:
    if when == "before the loop runs":
        apply()
    out["result"] = loop.run_until_complete(main())
finally:
    if had:
        setattr(owner, name, saved)
    else:
        delattr(owner, name)
    loop.close()
out["ran"] = ran
out["my patch saw"] = seen
emit(out)
"""
)

PATCHES = {
    "BaseEventLoop.time": ["called"],
    "BaseEventLoop.call_soon": ["called", "with my callback f"],
    "EpollSelector.select": ["called", "with a timeout > 0"],
    "BaseSelectorEventLoop._process_events": ["called", "with (SelectorKey, events) pairs"],
    "type(loop)._run_once": ["called"],
    "_SelectorSocketTransport.write": [["called with", "ping"]],
}


@each_engine
@pytest.mark.parametrize("when", ["before the loop runs", "while the loop runs"])
@pytest.mark.parametrize("patch", PATCHES)
def test_class_patch_made_after_the_loop_exists(engine: FdkitEngine, patch: str, when: str) -> None:
    """A class attribute asyncio's loop calls, replaced by a wrapper of the original after the
    loop was made (before it runs, or from a task while it runs), then a callback, a sleep and
    a stream echo: the wrapper is called, with what asyncio passes (the program's callback,
    a positive select timeout while the sleep waits, (SelectorKey, events) pairs, the bytes the
    stream writes), and the program's results are the same."""
    oracle, got = compare(engine, PATCH_PROGRAM, patch, when)
    assert oracle == {"result": "ping", "ran": ["f"], "my patch saw": PATCHES[patch]}
    assert got == oracle


SUBCLASS_HOOK_PROGRAM = (
    PRELUDE
    + WORK
    + """
hook = ARGS[0]
seen = []

def counted(self, *args):
    if hook not in seen:
        seen.append(hook)
    return getattr(super(Loop, self), hook)(*args)

Loop = type("Loop", (loop_class(),), {hook: counted})
loop = Loop()
try:
    out = {"on its engine": on_its_engine(loop), "result": loop.run_until_complete(work())}
finally:
    loop.close()
out["override called"] = seen
emit(out)
"""
)


@each_engine
@pytest.mark.parametrize("hook", ["_check_closed", "get_debug"])
def test_subclass_check_closed_and_get_debug_are_called(engine: FdkitEngine, hook: str) -> None:
    """A loop subclass overriding ``_check_closed`` or ``get_debug`` (calling super): asyncio
    calls the override (``call_soon`` checks the loop is open; every Future asks its loop
    ``get_debug()``) while a callback, a sleep and a stream echo run."""
    oracle, got = compare(engine, SUBCLASS_HOOK_PROGRAM, hook)
    assert oracle == {"on its engine": True, "result": "ping", "override called": [hook]}
    assert got == oracle


# --- 6. a subclass's own constructor arguments ------------------------------------------------

CONSTRUCTOR_PROGRAM = (
    PRELUDE
    + """
import selectors
variant = ARGS[0]
Base = loop_class()

class CountingSelector(selectors.EpollSelector):
    calls = 0

    def select(self, timeout=None):
        CountingSelector.calls += 1
        return super().select(timeout)


class CountingPollSelector(selectors.PollSelector):
    def select(self, timeout=None):
        CountingSelector.calls += 1
        return super().select(timeout)

if variant == "tag":
    class Loop(Base):
        def __init__(self, tag):
            super().__init__()
            self.tag = tag

    make = lambda: Loop("mine")
else:
    class Loop(Base):
        def __init__(self, tag, selector=None):
            super().__init__(selector=selector)
            self.tag = tag

    epoll = variant == "selector passed through"
    selector_class = CountingSelector if epoll else CountingPollSelector
    make = lambda: Loop("mine", selector=selector_class())
out = {}
try:
    loop = make()
except BaseException as exc:
    out["constructed"] = err(exc)
else:
    out["constructed"] = True
    out["tag"] = loop.tag
    out["a Loop"] = isinstance(loop, Loop)
    out["on its engine"] = on_its_engine(loop)
    try:
        out["runs"] = loop.run_until_complete(asyncio.sleep(0.01, "slept"))
    finally:
        loop.close()
    if variant != "tag":
        out["the given selector's select was called"] = CountingSelector.calls > 0
emit(out)
"""
)


@each_engine
@pytest.mark.parametrize("variant", ["tag", "selector passed through", "a poll selector"])
def test_subclass_with_its_own_constructor(engine: FdkitEngine, variant: str) -> None:
    """``class Loop(LoopClass): def __init__(self, tag): super().__init__(); self.tag = tag``
    (and one taking ``selector=`` too, passing it to ``super().__init__``, as
    ``SelectorEventLoop(selector)`` takes it: an epoll selector, or a poll(2) one the core
    cannot wait on): ``Loop("mine")`` is made, keeps its tag and runs a coroutine; the given
    selector is the one the loop waits with."""
    oracle, got = compare(engine, CONSTRUCTOR_PROGRAM, variant)
    expected = {"constructed": True, "tag": "mine", "a Loop": True, "on its engine": True}
    if variant == "tag":
        assert oracle == {**expected, "runs": "slept"}
    else:
        assert oracle == {
            **expected,
            "runs": "slept",
            "the given selector's select was called": True,
        }
    assert got == oracle


# --- 8. pytest-asyncio with a custom loop class -------------------------------------------------

PLUGIN_CONFTEST = """
import asyncio, json, os, warnings
import pytest

KIND = os.environ.get("FDKIT_AIO_ENGINE", "asyncio")
if KIND == "asyncio":
    Base = asyncio.SelectorEventLoop
else:
    import fdkit.aio
    Base = fdkit.aio.EventLoop
RECORD = {}

class CustomLoop(Base):
    made = 0

    def __init__(self):
        super().__init__()
        CustomLoop.made += 1

if os.environ["CORNERS_VARIANT"] == "loop_factories hook":
    def pytest_asyncio_loop_factories(config, item):
        return {"custom": CustomLoop}
else:
    class Policy(asyncio.DefaultEventLoopPolicy):
        def new_event_loop(self):
            return CustomLoop()

    with warnings.catch_warnings():  # the policy system is deprecated from 3.14 on
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_event_loop_policy(Policy())

def pytest_sessionfinish(session):
    RECORD["loops made"] = CustomLoop.made
    with open(os.environ["CORNERS_OUT"], "w") as f:
        json.dump(RECORD, f)
"""

PLUGIN_TESTS = """
import asyncio
import pytest, pytest_asyncio
from conftest import KIND, RECORD, CustomLoop

@pytest_asyncio.fixture(loop_scope="module")
async def fixture_loop():
    await asyncio.sleep(0)
    return asyncio.get_running_loop()

async def nested():
    await asyncio.sleep(0.01)
    return "nested"

@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("n", [1, 2])
async def test_on_the_custom_loop(fixture_loop, n):
    loop = asyncio.get_running_loop()
    RECORD[f"test {n}"] = {
        "a CustomLoop": isinstance(loop, CustomLoop),
        "its class's name": type(loop).__name__,
        "on its engine": KIND == "asyncio" or loop.engine == KIND,
        "the fixture's loop": fixture_loop is loop,
        "the first test's loop": RECORD.setdefault("first loop", id(loop)) == id(loop),
        "sleep": await asyncio.sleep(0.01, "slept"),
        "a nested task": await asyncio.create_task(nested()),
    }
"""

PLUGIN_PROGRAM = (
    PRELUDE
    + """
import pytest
where, variant = ARGS
os.environ["CORNERS_VARIANT"] = variant
os.environ["CORNERS_OUT"] = os.path.join(where, "record.json")
code = pytest.main(
    ["-q", "-p", "no:cacheprovider", "-c", os.path.join(where, "pytest.ini"),
     "--rootdir", where, where]
)
with open(os.environ["CORNERS_OUT"]) as f:
    tests = json.load(f)
tests.pop("first loop", None)
emit({"pytest's exit code": int(code), "record": tests})
"""
)

PLUGIN_INI = """[pytest]
asyncio_mode = strict
asyncio_default_fixture_loop_scope = function
asyncio_default_test_loop_scope = function
filterwarnings = error
"""


@each_engine
@pytest.mark.slow  # two child pytest runs, each importing pytest and its plugins
@pytest.mark.parametrize("variant", ["loop_factories hook", "event loop policy"])
def test_pytest_asyncio_with_a_custom_loop_class(
    engine: FdkitEngine, variant: str, tmp_path: Path
) -> None:
    """pytest-asyncio (its strict mode) runs two tests and an async fixture on one
    module-scoped loop of a custom loop class (a subclass of the loop class), which its
    ``pytest_asyncio_loop_factories`` hook or an event loop policy gives: both tests run on
    that loop, the fixture too, ``asyncio.sleep`` and a nested task work, one loop is made."""
    if variant == "event loop policy" and sys.version_info >= (3, 14):
        pytest.skip(
            "asyncio deprecates event loop policies from CPython 3.14 (a warning, an "
            "error under the child's filterwarnings); the loop_factories hook is the way"
        )
    (tmp_path / "pytest.ini").write_text(PLUGIN_INI)
    (tmp_path / "conftest.py").write_text(PLUGIN_CONFTEST)
    (tmp_path / "test_custom_loop.py").write_text(PLUGIN_TESTS)
    oracle, got = compare(engine, PLUGIN_PROGRAM, str(tmp_path), variant, timeout=30)
    test = {
        "a CustomLoop": True,
        "its class's name": "CustomLoop",
        "on its engine": True,
        "the fixture's loop": True,
        "the first test's loop": True,
        "sleep": "slept",
        "a nested task": "nested",
    }
    assert oracle == {
        "pytest's exit code": 0,
        "record": {"test 1": test, "test 2": test, "loops made": 1},
    }
    assert got == oracle


# --- 9. a looptime-style clock ------------------------------------------------------------------

LOOPTIME_PROGRAM = (
    PRELUDE
    + """
import time

class FakeClock:  # looptime's technique: a mixin put first in the loop's class
    def time(self):
        return self._fake_now

def patch_event_loop(loop):
    cls = type(f"Looptime{type(loop).__name__}", (FakeClock, type(loop)), {})
    loop.__class__ = cls
    loop._fake_now = 0.0
    original = loop._selector.select

    def select(timeout=None):  # what the loop would wait for passes at once on the fake clock
        ready = original(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            return original(None)
        loop._fake_now += timeout
        return ready

    loop._selector.select = select
    return loop

loop = new_loop(KIND)
its_class = type(loop)
patch_event_loop(loop)
times = []

async def main():
    t0 = loop.time()
    await asyncio.sleep(100)
    times.append(round(loop.time() - t0, 6))
    try:
        await asyncio.wait_for(asyncio.sleep(10), 5)
    except TimeoutError:
        times.append(["TimeoutError at", round(loop.time() - t0, 6)])
    loop.call_later(1, lambda: times.append(["call_later 1 ran at", round(loop.time() - t0, 6)]))
    await asyncio.sleep(2)
    times.append(round(loop.time() - t0, 6))

start = time.monotonic()
try:
    loop.run_until_complete(main())
finally:
    loop.close()
emit({
    "the class swapped": type(loop).__name__ == f"Looptime{its_class.__name__}",
    "loop times": times,
    "took under 2 s": time.monotonic() - start < 2,
})
"""
)


@each_engine
def test_looptime_style_clock(engine: FdkitEngine) -> None:
    """looptime's way of faking a loop's clock for tests: ``loop.__class__`` swapped for a
    dynamic subclass whose ``time`` reads a fake clock, and the selector's ``select`` patched
    to move that clock by the timeout it was asked to wait: ``await asyncio.sleep(100)``
    completes at once with ``loop.time()`` 100 s later; ``wait_for(sleep(10), 5)`` times out
    5 s later; a ``call_later(1)`` runs at +106 during a ``sleep(2)``."""
    oracle, got = compare(engine, LOOPTIME_PROGRAM)
    assert oracle == {
        "the class swapped": True,
        "loop times": [100.0, ["TimeoutError at", 105.0], ["call_later 1 ran at", 106.0], 107.0],
        "took under 2 s": True,
    }
    assert got == oracle
