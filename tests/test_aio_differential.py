"""The differential fuzzer (DESIGN.md 3b): hypothesis writes programs, each runs on asyncio's
own loop (the oracle) and on fdkit's loop with each engine, and the traces must be equal.

A program (``helpers.aio_fuzz``) is a connection on 127.0.0.1 and a list of steps: writes of
1 B to 1 MiB (bytes, bytearray, memoryview, not contiguous, empty, not bytes), writelines,
pause and resume reading, write buffer limits, close, abort, write_eof, set_protocol
(Protocol and BufferedProtocol), protocol callbacks that raise or call the transport,
batches of call_soon/call_at/call_later callbacks that spawn, cancel and raise, and a peer
that sends, half-closes, resets, closes, drains or never reads; in debug mode or not. Its
trace is what the program saw: the callbacks in order, the bytes each side got, what each call
and the exception handler were given, what was logged, write buffer sizes and limits,
pause_writing/resume_writing, connection_lost's argument, the fds open. The driver keeps out
what the kernel's timing decides (how received bytes are chunked, how much send(2) takes, when
a timer fires against I/O), so that two runs on asyncio's loop give the same trace: the first
test checks that, or a difference with fdkit would mean nothing.

Programs also go into the corners where programs and tools change or stretch the
loop: a loop subclass overriding asyncio's hooks (``time``, ``_run_once``,
``_process_events``, ``_add_callback``, ``call_soon``, ``call_at``, ``_check_closed``,
``get_debug``, ``create_task``: the trace says which were called in each step, and what
call_soon and call_at were given), class patches made mid-run (the loop class's ``time`` and
``_run_once``, ``BaseEventLoop.call_soon``, ``BaseSelectorEventLoop._process_events``,
``EpollSelector.select``, the socket transport's ``write``; undone when the program ends), NaN,
infinite, huge and non-float timer values (what each call_at/call_later raised, which timers
ran, what the loop's runs raised), odd ``transport.max_size`` values, exception handlers that
log with ``logging.exception`` (the traceback logged, and whether ``sys.exc_info()`` was set in
the handler) or raise, and SIGUSR1 raised mid-batch by a callback (the Python handler's record
among the batch's). Each run of the loop is bounded: a loop that hangs (a NaN timer or a
subclass's ``time`` once hung fdkit's loop) fails the test with "the loop hung at
step ..." after a few seconds; a program a loop may abort the process on (``max_size`` of
``1 << 40``) runs in a forked child.

``FUZZ_EXAMPLES`` programs per test (40 by default, under a minute for the file); ``make
fuzz-aio`` is the long run. Programs that failed once are replayed first (hypothesis's
database); a failure prints the smallest program found and the step where the traces part,
with both traces. :data:`KNOWN` are programs of the differences a hostile pass found in the
io_uring engine before it took nothing early, and :data:`CORNERS` one or more programs per
corner class above, run every time.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings

import fdkit.aio
from helpers.aio_fuzz import (
    HOOKS,
    Abort,
    Act,
    Arm,
    Call,
    Close,
    Patch,
    PauseReading,
    PeerClose,
    PeerDrain,
    PeerReset,
    PeerSend,
    PeerShutWr,
    Program,
    Raise,
    ResumeReading,
    Sched,
    SetLimits,
    SetMaxSize,
    SetProtocol,
    Signal,
    Trace,
    Write,
    format_trace,
    hung,
    programs,
    run_program,
)
from helpers.aio_parity import ASYNCIO, FdkitEngine, Kind, each_engine, fdkit_kind
from helpers.fuzz_traces import assert_same_traces

#: Programs per test: a few dozen in ``make test``, thousands in ``make fuzz-aio``.
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES") or 40)

SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# A failing program is shrunk by running it again and again: room for that, and for the long
# run (a passing file takes well under a minute at 40 programs per test).
pytestmark = pytest.mark.timeout(600 + EXAMPLES)

#: Programs run every time, from what a hostile pass found in the first io_uring engine: a paused
#: transport aborted with bytes unread (asyncio resets the connection; that engine had taken the
#: bytes and sent a FIN), a peer's reset that a paused transport meets on its next write
#: (ConnectionResetError; that engine had taken the error: BrokenPipeError), bytes that arrive
#: while the loop is stopped and then a pause, callbacks made ready together with a stream's bytes,
#: a flooded paused transport closed, flow control through a drain in debug mode.
KNOWN = (
    Program(steps=(PauseReading(), PeerSend(5000), Abort(), PeerDrain())),
    Program(steps=(PeerSend(3000), PauseReading(), PeerSend(2000), ResumeReading()), server=True),
    Program(steps=(PauseReading(), PeerReset(), Write(10), ResumeReading())),
    Program(
        steps=(
            PauseReading(),
            PeerSend(4000),
            Sched(
                calls=(
                    Call("soon", effects=(Act(ResumeReading()),)),
                    Call("at", order=1),
                    Call("future", order=2),
                    Call("soon", order=0),
                ),
                peer_bytes=100,
            ),
        ),
        buffer=7,
    ),
    Program(steps=(PauseReading(), *[PeerSend(16384)] * 4, Close(), PeerClose())),
    Program(
        steps=(
            SetLimits(100_000, 1000),
            Write(1 << 20),
            Write(70000, form="memoryview"),
            SetProtocol(buffer=4096),
            Arm("resume_writing", "write"),
            PeerDrain(),
            Close(),
            PeerShutWr(),
            PeerDrain(),
        ),
        debug=True,
    ),
)


#: A batch of every kind of callback, with bytes arriving: what the corners run under.
_BATCH = Sched(
    calls=(
        Call("soon", effects=(Act(Write(10)),)),
        Call("at", order=1),
        Call("later", order=2),
        Call("future", order=3),
        Call("threadsafe"),
    ),
    peer_bytes=100,
)
_RAISING = Sched(
    calls=(
        Call("soon", effects=(Raise(),)),
        Call("at", order=1, effects=(Raise(),)),
        Call("future", order=2, effects=(Raise(),)),
    )
)

#: Programs of each corner, run every time: a loop subclass overriding each hook
#: (on fdkit's loop once, one overriding time, _run_once, _process_events or
#: _add_callback hung at the first due timer); class patches made mid-run; NaN and -inf
#: timers (fdkit: hung), infinite and huge ones, non-float ones (int, Fraction, Decimal, an int
#: too big for a float); odd max_size values (negative, a float, 0, 1 << 40, 1 << 24);
#: exception handlers that log with exc_info, that raise, and asyncio's default one logging in
#: debug mode; SIGUSR1 raised mid-batch, its handler recording or raising.
CORNERS = (
    *(
        Program(steps=(PeerSend(100), _BATCH, Write(10), PeerClose()), server=True, hooks=(hook,))
        for hook in HOOKS
    ),
    Program(
        steps=(
            PeerSend(100),
            Patch("time"),
            Patch("call_soon"),
            Patch("select"),
            _BATCH,
            Patch("process_events"),
            Patch("run_once"),
            Patch("write"),
            Write(10),
            PeerSend(10),
            PeerDrain(),
        )
    ),
    Program(
        steps=(
            Sched(
                calls=(
                    Call("at", when="nan"),
                    Call("later", when="nan"),
                    Call("at", when="-inf"),
                    Call("soon"),
                )
            ),
            Write(10),
        )
    ),
    Program(
        steps=(
            Sched(
                calls=(
                    Call("at", when="inf"),
                    Call("later", when="inf"),
                    Call("at", when="huge"),
                    Call("later", when="-inf"),
                    Call("at", order=1),
                    Call("future", order=2),
                )
            ),
            PeerSend(10),
        )
    ),
    Program(
        steps=(
            Sched(
                calls=(
                    Call("at", when="int"),
                    Call("later", when="int"),
                    Call("at", when="fraction"),
                    Call("later", when="fraction"),
                    Call("at", when="decimal"),
                    Call("later", when="decimal"),
                    Call("at", when="bigint"),
                    Call("later", when="bigint"),
                    Call("at", order=3),
                )
            ),
            PeerSend(10),
        )
    ),
    *(
        Program(steps=(SetMaxSize(value), PeerSend(5000), Write(10), PeerShutWr()))
        for value in (-1, 0.5, 0, 1 << 40, 1 << 24)
    ),
    Program(
        steps=(_RAISING, Arm("data_received", "raise"), PeerSend(10), PeerReset(), Write(10)),
        handler="log",
    ),
    Program(steps=(_RAISING, Arm("eof_received", "raise"), PeerShutWr()), handler="raise"),
    Program(
        steps=(_RAISING, PauseReading(), PeerReset(), Write(10), ResumeReading()),
        handler="default",
        debug=True,
    ),
    Program(
        steps=(
            Sched(
                calls=(
                    Call("soon", effects=(Signal(),)),
                    Call("soon"),
                    Call("at", order=1, effects=(Signal(raises=True),)),
                    Call("at", order=2),
                    Call("threadsafe", effects=(Signal(), Act(Write(5)))),
                )
            ),
            PeerSend(10),
        )
    ),
)


def _known(test: Callable[..., Any]) -> Callable[..., Any]:
    for program in (*KNOWN, *CORNERS):
        test = example(program=program)(test)
    return test


def new_loop(kind: Kind) -> Callable[..., asyncio.AbstractEventLoop]:
    """``kind``'s loops for the driver: ``new()``, or ``new(derive)`` an instance of a
    subclass ``derive(base)`` of asyncio's ``SelectorEventLoop`` or ``fdkit.aio.EventLoop``
    (on ``kind``'s engine), as a program subclasses the loop it uses."""

    def new(derive: Callable[[type], type] | None = None) -> asyncio.AbstractEventLoop:
        if derive is None:
            return kind.new()
        if kind == ASYNCIO:
            return derive(asyncio.SelectorEventLoop)()  # type: ignore[no-any-return]
        loop = derive(fdkit.aio.EventLoop)(engine=kind.name)
        assert loop.engine == kind.name, (loop.engine, loop.engine_reason)
        return loop  # type: ignore[no-any-return]

    return new


def _run(kind: Kind, program: Program) -> Trace:
    return run_program(new_loop(kind), program)


def _assert_same(oracle_name: str, oracle: Trace, name: str, got: Trace) -> None:
    assert_same_traces(oracle_name, oracle, name, got, format_trace=format_trace, hung=hung,
                       unit="steps")  # fmt: skip


@SETTINGS
@given(program=programs)
@_known
def test_the_fuzzer_is_deterministic_on_asyncio(program: Program) -> None:
    """The same program twice on asyncio's loop: equal traces (else the fuzzer would report
    the kernel's timing as a difference of fdkit's)."""
    first = _run(ASYNCIO, program)
    _assert_same("asyncio", first, "asyncio again", _run(ASYNCIO, program))


@each_engine
@SETTINGS
@given(program=programs)
@_known
def test_fdkit_traces_equal_asyncio(engine: FdkitEngine, program: Program) -> None:
    """Any program: fdkit's loop shows it what asyncio's shows it."""
    kind = fdkit_kind(engine)
    oracle = _run(ASYNCIO, program)
    _assert_same("asyncio", oracle, str(kind), _run(kind, program))
