"""fdkit.aio in the corners, part one: odd values, hooks and handlers. Each scenario
is a program run in a child Python of its own on asyncio's ``SelectorEventLoop`` (epoll; the
oracle) and on ``fdkit.aio.EventLoop`` with each engine, and what the program observed is
compared: fdkit's record must equal asyncio's.

0. nest_asyncio 1.6: a nested ``run_until_complete`` from inside the running loop;
1. NaN, infinite, huge and non-float timer values through call_later, call_at, asyncio.sleep
   and asyncio.wait_for: what is raised where, which callbacks run, in which order;
2. a loop subclass overriding ``time``, ``_run_once``, ``_process_events`` or
   ``_add_callback`` (each calling super), and ``loop._scheduled``, asyncio's heap itself;
3. odd ``transport.max_size`` values (huge, negative, a float, 0, a large valid one);
4. what an exception handler sees (``sys.exc_info()``, ``logging.exception``), what a handler
   that raises leaves in asyncio's log (``__context__``), and debug mode's log of a failed
   write;
7. smaller ones: Ctrl-C between two ready callbacks, a callback replacing ``loop._ready``, a bad
   ``when`` at ``call_at``, SystemExit's traceback, ``call_soon``'s name in a Handle, and a
   signal during an io_uring wait.

``test_aio_corners_patches.py`` holds part two: class patches made after the loop exists, a
subclass's constructor, pytest-asyncio and a looptime-style clock.

Children, because today several of these hang, spin or abort fdkit's process: a child that
hangs fails its test saying "hung" (``helpers/aio_corners.py``). Where asyncio's answer is
plain, the test asserts it too, so that a broken oracle cannot make a wrong answer pass.
Everything uses the real kernel (sockets on 127.0.0.1).
"""

from __future__ import annotations

import sys

import pytest

from helpers.aio_corners import PRELUDE, compare
from helpers.aio_parity import FdkitEngine, each_engine

# --- 0. nest_asyncio -------------------------------------------------------------------------

NEST_ASYNCIO_PROGRAM = (
    PRELUDE
    + """
import nest_asyncio
loop = new_loop(KIND)
try:
    nest_asyncio.apply(loop)
except Exception as exc:
    emit({"apply failed": err(exc)})
    raise SystemExit(0)
handled = []
loop.set_exception_handler(
    lambda lp, ctx: handled.append([masked(ctx.get("message")), err(ctx.get("exception"))])
)

async def inner():
    await asyncio.sleep(0.01)
    return "inner"

async def outer():
    got = loop.run_until_complete(inner())  # re-entered from the running loop
    await asyncio.sleep(0)
    return ["outer", got]

out = {}
try:
    out["result"] = loop.run_until_complete(outer())
except BaseException as exc:
    out["raised"] = err(exc)
out["exception handler got"] = handled
loop.close()
emit(out)
"""
)


@each_engine
def test_nest_asyncio_nested_run_until_complete(engine: FdkitEngine) -> None:
    """``nest_asyncio.apply(loop)`` (1.6.0: it puts its own ``_run_once``, ``run_forever`` and
    ``run_until_complete`` on the loop's class), then a coroutine calling
    ``loop.run_until_complete(inner())`` from inside the running loop: the inner result comes
    back, the outer coroutine finishes, the exception handler hears nothing."""
    oracle, got = compare(engine, NEST_ASYNCIO_PROGRAM)
    expected = {"result": ["outer", "inner"], "exception handler got": []}
    if "apply failed" in oracle:
        # nest_asyncio 1.6 reaches into asyncio's internals of the versions it knows.
        pytest.skip(f"nest_asyncio cannot patch asyncio's own loop on this Python: {oracle}")
    assert oracle == expected
    assert got == oracle


# --- 1. odd timer values -----------------------------------------------------------------------

TIMER_PROGRAM = (
    PRELUDE
    + """
from decimal import Decimal
from fractions import Fraction
api, name = ARGS
VALUES = {
    "nan": float("nan"), "+inf": float("inf"), "-inf": float("-inf"), "1e308": 1e308,
    "1<<1000": 1 << 1000, "1<<1024": 1 << 1024, "Decimal": Decimal("0.01"),
    "Fraction": Fraction(1, 100), "str": "0.01",
}
value = VALUES[name]
loop = new_loop(KIND)
ran = []
handled = []
loop.set_exception_handler(
    lambda lp, ctx: handled.append([masked(ctx.get("message")), err(ctx.get("exception"))])
)
out = {"at the call": None}

async def main():
    if api == "asyncio.sleep":
        task = asyncio.ensure_future(asyncio.sleep(value, "slept"))
    else:
        task = asyncio.ensure_future(asyncio.wait_for(asyncio.sleep(0.05, "inner"), value))
    task.add_done_callback(lambda t: ran.append("task done"))
    await asyncio.sleep(0.2)  # a sleep of value 0.01 or a wait_for's inner sleep ends first
    if not task.done():
        task.cancel()
        ran.append("task pending after 0.2 s: cancelled")
    try:
        out["task result"] = await task
    except BaseException as exc:
        out["task raised"] = err(exc)
    ran.append("main done")

async def plain():
    await asyncio.sleep(0.05)
    ran.append("main done")

loop.call_soon(ran.append, "soon")
try:
    if api == "call_later":
        loop.call_later(value, ran.append, "timer")
    elif api == "call_at":
        loop.call_at(value, ran.append, "timer")
except BaseException as exc:
    out["at the call"] = err(exc)
coro = main() if api in ("asyncio.sleep", "asyncio.wait_for") else plain()
out["run_until_complete"] = run_outcome(loop, coro)
out["ran"] = ran
out["exception handler got"] = handled
loop.close()
emit(out)
"""
)

TIMER_VALUES = ("nan", "+inf", "-inf", "1e308", "1<<1000", "1<<1024", "Decimal", "Fraction", "str")
TIMER_APIS = ("call_later", "call_at", "asyncio.sleep", "asyncio.wait_for")


@each_engine
@pytest.mark.parametrize("api", TIMER_APIS)
@pytest.mark.parametrize("value", TIMER_VALUES)
def test_odd_timer_values(engine: FdkitEngine, api: str, value: str) -> None:
    """A NaN, infinite, huge (1e308, ints of 1,001 and 1,025 bits) or non-float (Decimal, Fraction,
    str) delay or deadline given to call_later, call_at, asyncio.sleep or asyncio.wait_for,
    beside a call_soon callback, while ``run_until_complete`` runs a short sleep: what is
    raised at the call and out of the loop (type and message), which callbacks ran in which
    order, what the exception handler got. asyncio runs a NaN timer at once (``when >=
    end_time`` is false for NaN); some of these raise out of its ``_run_once``."""
    oracle, got = compare(engine, TIMER_PROGRAM, api, value)
    if api in ("call_later", "call_at") and value in ("nan", "-inf"):
        assert oracle["ran"] == ["soon", "timer", "main done"], oracle
    if value == "+inf":
        assert "timer" not in oracle["ran"], oracle
        assert oracle["run_until_complete"] == "returned", oracle
    assert got == oracle


# --- 2. a loop subclass overriding a hook; loop._scheduled -------------------------------------

HOOK_PROGRAM = (
    PRELUDE
    + """
import socket
hook = ARGS[0]
calls = []

def counted(name):
    def method(self, *args):
        if name not in calls:
            calls.append(name)
        return getattr(super(Loop, self), name)(*args)
    method.__name__ = name
    return method

Loop = type("Loop", (loop_class(),), {} if hook == "none" else {hook: counted(hook)})
loop = Loop()
out = {"on its engine": on_its_engine(loop)}
ran = []
scheduled = loop._scheduled
out["loop._scheduled is loop._scheduled"] = loop._scheduled is scheduled
out["loop._scheduled is a list"] = type(scheduled) is list
handle = loop.call_later(30, ran.append, "never")
out["after call_later: the list holds the TimerHandle"] = handle in scheduled
out["after call_later: loop._scheduled[0] is the TimerHandle"] = (
    len(loop._scheduled) == 1 and loop._scheduled[0] is handle
)
handle.cancel()

async def main():
    r, w = socket.socketpair()
    try:
        loop.add_reader(r, lambda: ran.append(["read", r.recv(10).decode()]))
        loop.call_later(0.01, ran.append, "call_later 0.01")
        w.send(b"x")
        got = await asyncio.sleep(0.03, "slept")
        loop.remove_reader(r)
    finally:
        r.close()
        w.close()
    ran.append(got)
    return "main done"

try:
    out["result"] = loop.run_until_complete(main())
except BaseException as exc:
    out["raised"] = err(exc)
out["ran"] = ran
out["hooks called"] = calls
loop.close()
emit(out)
"""
)

HOOKS = ("none", "time", "_run_once", "_process_events", "_add_callback")


@each_engine
@pytest.mark.parametrize("hook", HOOKS)
def test_loop_subclass_overriding_a_hook(engine: FdkitEngine, hook: str) -> None:
    """``class Loop(LoopClass)`` overriding ``time``, ``_run_once``, ``_process_events`` or
    ``_add_callback``, each calling super (or none of them): a reader's callback, a
    ``call_later(0.01)`` and ``asyncio.sleep(0.03)`` run, in that order, the override is
    called; ``loop._scheduled`` is one list (asyncio's heap), which holds the TimerHandle
    ``call_later`` returned."""
    oracle, got = compare(engine, HOOK_PROGRAM, hook)
    assert oracle == {
        "on its engine": True,
        "loop._scheduled is loop._scheduled": True,
        "loop._scheduled is a list": True,
        "after call_later: the list holds the TimerHandle": True,
        "after call_later: loop._scheduled[0] is the TimerHandle": True,
        "result": "main done",
        "ran": [["read", "x"], "call_later 0.01", "slept"],
        "hooks called": [] if hook == "none" else [hook],
    }
    assert got == oracle


# --- 3. odd transport.max_size values ---------------------------------------------------------

MAX_SIZE_PROGRAM = (
    PRELUDE
    + """
import socket, time
value = {"1<<40": 1 << 40, "-1": -1, "2.5": 2.5, "0": 0, "1<<24": 1 << 24}[ARGS[0]]
loop = new_loop(KIND)
handled = []
MORE = 5

def handler(lp, ctx):
    if len(handled) < MORE:
        handled.append([masked(ctx.get("message")), err(ctx.get("exception"))])
    elif len(handled) == MORE:
        handled.append("more")

loop.set_exception_handler(handler)
seen = {"data_received": [], "eof_received": False, "connection_lost": "not called"}

class P(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
        transport.max_size = value

    def data_received(self, data):
        seen["data_received"].append(data.decode())

    def eof_received(self):
        seen["eof_received"] = True

    def connection_lost(self, exc):
        seen["connection_lost"] = err(exc)

async def until(cond, bound):
    end = time.monotonic() + bound
    while not cond() and time.monotonic() < end:
        await asyncio.sleep(0.005)

async def main():
    protos = []
    server = await loop.create_server(lambda: protos.append(P()) or protos[-1], "127.0.0.1", 0)
    peer = socket.create_connection(server.sockets[0].getsockname()[:2])
    try:
        await until(lambda: protos, 2.0)
        peer.sendall(b"hello")
        await until(lambda: seen["connection_lost"] != "not called" or seen["data_received"], 1.0)
        await asyncio.sleep(0.05)
        try:
            peer.shutdown(socket.SHUT_WR)
        except OSError:  # the transport closed the connection already
            pass
        await until(lambda: seen["connection_lost"] != "not called", 1.0)
    finally:
        peer.close()
        for p in protos:
            p.transport.abort()
        server.close()
        await server.wait_closed()

loop.run_until_complete(main())
loop.close()
emit({**seen, "exception handler got": handled})
"""
)


@each_engine
@pytest.mark.parametrize("value", ["1<<40", "-1", "2.5", "0", "1<<24"])
def test_transport_max_size_odd_values(engine: FdkitEngine, value: str) -> None:
    """``transport.max_size`` set in connection_made to ``1 << 40``, -1, 2.5, 0 or ``1 << 24``,
    then the peer sends "hello" and shuts its side down: what data_received and eof_received
    got, the exception handler's reports (the first five), connection_lost's exception. asyncio
    reads with ``sock.recv(max_size)``: a failed read is one "Fatal read error" and the
    transport closes; ``recv(0)`` reads b"", which is end of file."""
    oracle, got = compare(engine, MAX_SIZE_PROGRAM, value, twice=True)
    if value == "1<<24":
        assert oracle == {
            "data_received": ["hello"],
            "eof_received": True,
            "connection_lost": None,
            "exception handler got": [],
        }
    elif value != "0":
        assert oracle["data_received"] == [], oracle
        assert len(oracle["exception handler got"]) == 1, oracle
        assert oracle["exception handler got"][0][0] == "Fatal read error on socket transport"
    assert got == oracle


# --- 4. what an exception handler sees --------------------------------------------------------

HANDLER_PROGRAM = (
    PRELUDE
    + """
import logging, socket, struct, time
variant = ARGS[0]
loop = new_loop(KIND)
out = {}

class Keep(logging.Handler):  # the formatted text of each record, as a log file gets it
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        self.records = []

    def emit(self, record):
        self.records.append((record, self.format(record)))

def summary(record, text):
    exc = record.exc_info[1] if record.exc_info else None
    context = getattr(exc, "__context__", None)
    return {
        "message": record.getMessage().splitlines()[0].rsplit(": ", 1)[-1],
        "exc_info": err(exc),
        "with its traceback": bool(record.exc_info and record.exc_info[2] is not None),
        "__context__": err(context),
        "logged 'NoneType: None'": "NoneType: None" in text,
        "last line": masked(text.splitlines()[-1]),
    }

mine, asyncio_log = Keep(), Keep()
logging.getLogger("corner").addHandler(mine)
logging.getLogger("corner").propagate = False
logging.getLogger("asyncio").addHandler(asyncio_log)
logging.getLogger("asyncio").setLevel(logging.DEBUG)
logging.getLogger("asyncio").propagate = False

def handler(lp, ctx):
    out.setdefault("handler got", []).append(
        [masked(ctx.get("message")), err(ctx.get("exception")), err(sys.exc_info()[1])]
    )
    if variant == "callback, the handler raises":
        raise RuntimeError("handler failed")
    logging.getLogger("corner").exception("x")

loop.set_exception_handler(handler)

def boom():
    raise ZeroDivisionError("boom")

async def write_after_reset():
    made, lost = loop.create_future(), loop.create_future()

    class P(asyncio.Protocol):
        def connection_made(self, transport):
            transport.pause_reading()  # the reset is seen by the write, not a read
            made.set_result(transport)

        def connection_lost(self, exc):
            lost.set_result(err(exc))

    server = await loop.create_server(P, "127.0.0.1", 0)
    peer = socket.create_connection(server.sockets[0].getsockname()[:2])
    transport = await asyncio.wait_for(made, 2)
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    peer.close()  # RST
    await asyncio.sleep(0.05)
    transport.write(b"after the reset")
    out["connection_lost"] = await asyncio.wait_for(lost, 2)
    server.close()
    await server.wait_closed()

if variant.startswith("callback"):
    loop.call_soon(boom)
    loop.run_until_complete(asyncio.sleep(0.02))
else:
    loop.set_debug(True)
    loop.run_until_complete(write_after_reset())
loop.close()
out["my logging.exception"] = [summary(*r) for r in mine.records]
out["asyncio's log"] = [summary(*r) for r in asyncio_log.records if "rror" in r[0].getMessage()]
emit(out)
"""
)

HANDLER_VARIANTS = (
    "callback, the handler logs",
    "callback, the handler raises",
    "write after a reset, debug mode",
)


@each_engine
@pytest.mark.parametrize("variant", HANDLER_VARIANTS)
def test_exception_handler_context(engine: FdkitEngine, variant: str) -> None:
    """What ``set_exception_handler``'s handler sees when a call_soon callback raises:
    ``sys.exc_info()`` is the callback's error (asyncio calls the handler inside its ``except``
    block), so ``logging.exception`` in the handler logs that traceback, not "NoneType: None";
    an error the handler raises reaches asyncio's log ("Unhandled error in exception handler")
    with the callback's error as its ``__context__``. In debug mode, ``write()`` on a
    connection the peer reset logs "Fatal write error on socket transport" with its
    traceback; the handler is not called (an OSError)."""
    oracle, got = compare(engine, HANDLER_PROGRAM, variant)
    boom = ["ZeroDivisionError", "boom"]
    if variant == "callback, the handler logs":
        assert oracle["handler got"][0][1:] == [boom, boom], oracle
        assert oracle["my logging.exception"][0]["last line"] == "ZeroDivisionError: boom"
        assert not oracle["my logging.exception"][0]["logged 'NoneType: None'"]
    elif variant == "callback, the handler raises":
        [logged] = oracle["asyncio's log"]
        assert logged["message"] == "Unhandled error in exception handler", oracle
        assert logged["exc_info"] == ["RuntimeError", "handler failed"]
        assert logged["__context__"] == boom
    else:
        assert "handler got" not in oracle, oracle
        [logged] = oracle["asyncio's log"]
        assert logged["message"] == "Fatal write error on socket transport", oracle
        assert logged["with its traceback"], oracle
        assert not logged["logged 'NoneType: None'"], oracle
    assert got == oracle


# --- 7. smaller corners ------------------------------------------------------------------------

SIGINT_PROGRAM = (
    PRELUDE
    + """
import signal
callbacks = ARGS[0]
loop = new_loop(KIND)
ran = []

def python_callback(i):
    ran.append(i)
    if i == 0:
        os.kill(os.getpid(), signal.SIGINT)

for i in range(3):
    if callbacks == "Python functions":
        loop.call_soon(python_callback, i)
    elif i == 0:  # a C function: Ctrl-C arrives while no Python code runs
        loop.call_soon(os.kill, os.getpid(), signal.SIGINT)
    else:
        loop.call_soon(ran.append, i)
out = {}
out["run_until_complete"] = run_outcome(loop, asyncio.sleep(0.05))
out["ran"] = ran
loop.close()
emit(out)
"""
)


@each_engine
@pytest.mark.parametrize("callbacks", ["Python functions", "C functions"])
def test_sigint_between_ready_callbacks(engine: FdkitEngine, callbacks: str) -> None:
    """The first of three ready callbacks sends SIGINT to its own process (Ctrl-C): on
    asyncio, KeyboardInterrupt comes out of ``run_until_complete`` before the next callback
    (Python checks for signals as soon as Python code runs: in the callback, or in
    ``Handle._run`` after a C callback returns), not after the whole batch."""
    oracle, got = compare(engine, SIGINT_PROGRAM, callbacks)
    assert oracle == {
        "run_until_complete": ["KeyboardInterrupt", ""],
        "ran": [0] if callbacks == "Python functions" else [],
    }
    assert got == oracle


READY_PROGRAM = (
    PRELUDE
    + """
import collections
loop = new_loop(KIND)
ran = []

def replace_ready():
    ran.append("replacer")
    old = loop._ready
    new = collections.deque([asyncio.Handle(ran.append, ("from the new deque",), loop, None)])
    new.extend(old)
    loop._ready = new
    loop.call_soon(ran.append, "call_soon in the replacer")
    ran.append(["the new deque is loop._ready", loop._ready is new])

loop.call_soon(replace_ready)
loop.call_soon(ran.append, "queued after the replacer")
loop.run_until_complete(asyncio.sleep(0))
loop.run_until_complete(asyncio.sleep(0.01))
loop.close()
emit(ran)
"""
)


@each_engine
def test_callback_replacing_loop_ready(engine: FdkitEngine) -> None:
    """A callback replaces ``loop._ready`` with a new deque holding a Handle followed by what
    was queued: asyncio's ``_run_once`` pops from ``self._ready`` each time, so the new
    deque's Handle runs in the same iteration, before what was queued after the replacer;
    a ``call_soon`` from the replacer goes into the new deque."""
    oracle, got = compare(engine, READY_PROGRAM)
    assert oracle[:4] == [
        "replacer",
        ["the new deque is loop._ready", True],
        "from the new deque",
        "queued after the replacer",
    ], oracle
    assert got == oracle


BAD_WHEN_PROGRAM = (
    PRELUDE
    + """
heap = ARGS[0]
loop = new_loop(KIND)
ran = []
out = {"at call_at": None}
if heap == "a timer queued":
    loop.call_later(30, ran.append, "in 30 s")
try:
    loop.call_at("bad", ran.append, "bad")
except BaseException as exc:
    out["at call_at"] = err(exc)
loop.call_soon(ran.append, "soon")
out["run_until_complete"] = run_outcome(loop, asyncio.sleep(0.01))
out["ran"] = ran
loop.close()
emit(out)
"""
)


@each_engine
@pytest.mark.parametrize("heap", ["no timer queued", "a timer queued"])
def test_call_at_bad_when(engine: FdkitEngine, heap: str) -> None:
    """``call_at("bad", cb)``: asyncio pushes it on its heap, comparing it with the timers
    there: with a timer queued the comparison raises TypeError at the call, and the bad
    TimerHandle stays in the heap (``heappush`` appends before it compares), so the next
    reordering of the heap raises out of ``run_until_complete`` too; with none queued, the
    TypeError comes out of ``run_until_complete`` (``_run_once`` compares it with the time)
    before any callback runs."""
    oracle, got = compare(engine, BAD_WHEN_PROGRAM, heap)
    if heap == "a timer queued":
        assert oracle == {
            "at call_at": ["TypeError", "'<' not supported between instances of 'str' and 'float'"],
            "run_until_complete": [
                "TypeError",
                "'<' not supported between instances of 'float' and 'str'",
            ],
            "ran": ["soon"],
        }
    else:
        assert oracle == {
            "at call_at": None,
            "run_until_complete": [
                "TypeError",
                "'>=' not supported between instances of 'str' and 'float'",
            ],
            "ran": [],
        }
    assert got == oracle


SYSTEM_EXIT_PROGRAM = (
    PRELUDE
    + """
import traceback
loop = new_loop(KIND)

def exits():
    raise SystemExit(3)

loop.call_soon(exits)
try:
    loop.run_until_complete(asyncio.sleep(0.01))
    names = "returned"
except SystemExit as exc:
    names = [f.name for f in traceback.extract_tb(exc.__traceback__)]
    names = names[names.index("run_until_complete"):]
loop.close()
emit(names)
"""
)


@each_engine
def test_system_exit_traceback(engine: FdkitEngine) -> None:
    """SystemExit raised in a callback comes out of ``run_until_complete`` with a traceback
    through the loop's frames, as a crash report shows it: ``run_forever``, ``_run_once``,
    ``Handle._run``, the callback."""
    oracle, got = compare(engine, SYSTEM_EXIT_PROGRAM)
    assert oracle[0] == "run_until_complete", oracle
    assert oracle[-3:] == ["_run_once", "_run", "exits"], oracle
    assert got == oracle


NAMES_PROGRAM = (
    PRELUDE
    + """
loop = new_loop(KIND)

def f():
    pass

handle = loop.call_soon(loop.call_soon, f)
out = {
    "loop.call_soon.__qualname__": loop.call_soon.__qualname__,
    "loop.call_later.__qualname__": loop.call_later.__qualname__,
    "repr(loop.call_soon(loop.call_soon, f))": masked(repr(handle)),
}
loop.run_until_complete(asyncio.sleep(0))
loop.close()
emit(out)
"""
)


@each_engine
def test_call_soon_name_in_handle_repr(engine: FdkitEngine) -> None:
    """``loop.call_soon.__qualname__`` is asyncio's (``BaseEventLoop.call_soon``), and so is the
    name a Handle's repr (and an "Exception in callback" message) gives it."""
    oracle, got = compare(engine, NAMES_PROGRAM)
    # From 3.13 a Handle's repr shows its callback's arguments in debug mode only.
    args = "<function f at 0x?>" if sys.version_info < (3, 13) else ""
    assert oracle == {
        "loop.call_soon.__qualname__": "BaseEventLoop.call_soon",
        "loop.call_later.__qualname__": "BaseEventLoop.call_later",
        "repr(loop.call_soon(loop.call_soon, f))": f"<Handle BaseEventLoop.call_soon({args})>",
    }
    assert got == oracle


SIGALRM_PROGRAM = (
    PRELUDE
    + """
import signal, time
loop = new_loop(KIND)
alarms = []
signal.signal(signal.SIGALRM, lambda *a: alarms.append("SIGALRM"))
signal.setitimer(signal.ITIMER_REAL, 0.05)
t0 = time.monotonic()
loop.run_until_complete(asyncio.sleep(0.3))
took = time.monotonic() - t0
loop.close()
emit({"handler ran": alarms, "the sleep lasted 0.3 s": 0.3 <= took + 0.001, "within 1 s": took < 1})
"""
)


def test_signal_during_uring_wait_resumes_it() -> None:
    """A SIGALRM with a Python handler arrives 0.05 s into ``await asyncio.sleep(0.3)``: the
    handler runs and the sleep still lasts 0.3 s, as on asyncio (the wait is resumed, PEP
    475), on fdkit's io_uring engine too (its wait must not end early for a signal)."""
    oracle, got = compare("io_uring", SIGALRM_PROGRAM, twice=True)
    assert oracle == {
        "handler ran": ["SIGALRM"],
        "the sleep lasted 0.3 s": True,
        "within 1 s": True,
    }
    assert got == oracle
