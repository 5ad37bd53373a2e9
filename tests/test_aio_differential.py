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

``FUZZ_EXAMPLES`` programs per test (40 by default, under a minute for the file); ``make
fuzz-aio`` is the long run. Programs that failed once are replayed first (hypothesis's
database); a failure prints the smallest program found and the step where the traces part,
with both traces. :data:`KNOWN` are programs of the differences a hostile pass found in the
io_uring engine before it took nothing early, run every time.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings

from helpers.aio_fuzz import (
    Abort,
    Act,
    Arm,
    Call,
    Close,
    PauseReading,
    PeerClose,
    PeerDrain,
    PeerReset,
    PeerSend,
    PeerShutWr,
    Program,
    ResumeReading,
    Sched,
    SetLimits,
    SetProtocol,
    Trace,
    Write,
    format_trace,
    programs,
    run_program,
)
from helpers.aio_parity import ASYNCIO, FdkitEngine, Kind, each_engine, fdkit_kind

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


def _known(test: Callable[..., Any]) -> Callable[..., Any]:
    for program in KNOWN:
        test = example(program=program)(test)
    return test


def _run(kind: Kind, program: Program) -> Trace:
    return run_program(kind.new, program)


def _first_difference(oracle: Trace, got: Trace) -> str:
    for a, b in zip(oracle, got, strict=False):
        if a != b:
            return f"step {a[0]!r}"
    return f"the end: {len(oracle)} steps against {len(got)}"


def _assert_same(oracle_name: str, oracle: Trace, name: str, got: Trace) -> None:
    if got == oracle:
        return
    raise AssertionError(
        f"the traces part at {_first_difference(oracle, got)}\n"
        f"--- {oracle_name}\n{format_trace(oracle)}\n--- {name}\n{format_trace(got)}"
    )


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
