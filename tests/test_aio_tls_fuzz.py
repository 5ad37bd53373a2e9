"""The TLS differential fuzzer: hypothesis writes programs over one TLS connection, each runs
in a child process on asyncio's own loop (the oracle) and on fdkit's loop with each engine, and
the traces must be equal.

A program (``helpers.aio_tls_fuzz``) is a TLS connection on 127.0.0.1 whose two ends are on the
loop under test (``create_server(ssl=...)`` and ``create_connection(ssl=...,
server_hostname="localhost")``, certificates of a throwaway CA), and a list of steps, each on
either end: writes of 1 B to 1 MiB (bytes, which fdkit's native record path takes; bytearray,
memoryview, a memoryview that is not contiguous, empty, a str), writelines, pause and resume
reading, write buffer limits (0 and invalid ones too), get_write_buffer_size, close (twice),
abort, write_eof (refused on TLS), set_protocol to a new Protocol or BufferedProtocol, protocol
callbacks armed to react once (data_received, get_buffer, buffer_updated, eof_received,
connection_lost: raise an Exception or a BaseException, write, close, abort, pause reading)
or get_buffer to return an empty buffer; one iteration of the loop, or a run until quiet. Its
trace is what the program saw, step by step: each end's callbacks (data as totals, every byte
checked; connection_lost's exception with its traceback's functions), the exception handler's
contexts, what each call returned or raised and logged, pause_writing/resume_writing, what was
logged, and each end's state.

The driver keeps out what the kernel's timing decides (how records are chunked, how much
``send(2)`` takes, when I/O is seen against an iteration of the loop): see the docstring of
``helpers/aio_tls_fuzz.py``. :func:`test_tls_fuzzer_is_deterministic_on_asyncio` checks that a
program gives asyncio's loop the same trace twice; where fdkit's trace differs from asyncio's,
the test runs asyncio's again, to tell a difference of fdkit's from one of the fuzzer's.

``FUZZ_EXAMPLES`` programs per test (25 by default: well under a minute for the file on two
workers). Programs that failed once are replayed first (hypothesis's database, ``.hypothesis/``);
a failure prints the smallest program found, the step where the traces part, and both traces.
:data:`KNOWN` are programs of the paths the fuzzer was built for, run every time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from helpers.aio_parity import FdkitEngine, each_engine, fdkit_kind
from helpers.aio_tls_fuzz import (
    CALLBACKS,
    ENDS,
    REACTIONS,
    SURE_PAUSE,
    Abort,
    Arm,
    Close,
    GetBufferSize,
    PauseReading,
    Program,
    Quiet,
    ResumeReading,
    SetLimits,
    SetProtocol,
    Sleep,
    Step,
    Trace,
    Write,
    WriteEof,
    Writelines,
    close_fork_server,
    format_trace,
    hung,
    run_program,
)
from helpers.fuzz_traces import assert_same_traces

#: Programs per test: a few dozen by default, hundreds in a long run.
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))

SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Each program is two or three children of a fraction of a second; a failing one is shrunk by
# running it again and again.
pytestmark = pytest.mark.timeout(600 + 4 * EXAMPLES)


# --- strategies -------------------------------------------------------------------------------


def _weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of the strategies, each ``weight`` times as likely (hypothesis's one_of draws a
    branch uniformly, after flattening nested one_of: each branch is wrapped to stay one)."""
    return st.one_of(*(s.map(lambda x: x) for weight, s in choices for _ in range(weight)))


_END = st.sampled_from(ENDS)
_SIZES = st.one_of(
    st.integers(1, 64),
    st.integers(1, 1 << 16),
    st.integers(1, 1 << 20),
    st.sampled_from([16383, 16384, 16385, 65536, 200_000, SURE_PAUSE, 1 << 20]),
)
_LIMITS = st.one_of(st.none(), st.sampled_from([0, 1, 100, 4096, 16384, 65536, 1 << 20]))
#: What a write gives: mostly bytes (what fdkit's native path takes), rarely a memoryview that
#: is not contiguous (a fatal error, the connection's end).
_FORMS = ["bytes"] * 12 + ["bytearray"] * 2 + ["memoryview"] * 2 + ["empty", "str", "strided"]

_writes = st.builds(
    Write,
    end=_END,
    size=_SIZES,
    form=st.sampled_from(_FORMS),
    seed=st.integers(0, 7),
    repeat=st.sampled_from([1, 1, 1, 1, 2, 7]),
)
_writelines = st.builds(
    Writelines, end=_END, sizes=st.lists(_SIZES, max_size=4).map(tuple), seed=st.integers(0, 7)
)
_buffers = st.one_of(st.none(), st.sampled_from([1024, 4096, 65536, 300_000]))
_set_protocol = st.builds(SetProtocol, end=_END, buffer=_buffers, keep_open=st.booleans())
#: Callbacks to arm, the data path's more often (they have more to meet).
_CALLBACKS = [*CALLBACKS[:3], *CALLBACKS]
_arm = st.one_of(
    st.builds(
        Arm, end=_END, callback=st.sampled_from(_CALLBACKS), how=st.sampled_from(REACTIONS[:-1])
    ),
    st.builds(Arm, end=_END, callback=st.just("get_buffer"), how=st.just("empty")),
)

steps: st.SearchStrategy[Step] = _weighted(
    (8, _writes),
    (2, _writelines),
    (2, st.builds(PauseReading, end=_END)),
    (3, st.builds(ResumeReading, end=_END)),
    (2, st.builds(SetLimits, end=_END, high=_LIMITS, low=_LIMITS)),
    (2, st.builds(GetBufferSize, end=_END)),
    (2, _set_protocol),
    (4, _arm),
    (1, st.builds(WriteEof, end=_END)),
    (1, st.builds(Close, end=_END)),
    (1, st.builds(Abort, end=_END)),
    (5, st.just(Sleep())),
    (5, st.just(Quiet())),
)
programs = st.builds(
    Program,
    steps=st.lists(steps, min_size=1, max_size=30).map(tuple),
    client_buffer=_buffers,
    server_buffer=_buffers,
    keep_open=st.booleans(),
)

#: Programs run every time, one per path the fuzzer was built for: a flood that pauses asyncio's
#: SSL protocol's writing, writes into its outgoing buffer, a high-water mark under it, the
#: drain; bytes held while reading is paused and a callback armed on the data path; close twice
#: and what the transport says after; a high-water mark of 0 (pause or resume on each call);
#: a write of a buffer that is not contiguous (a fatal error of the SSL protocol) next to
#: callbacks raising on both ends' close; an abort with bytes unread (a TCP reset the other end
#: reads), and callbacks of the data path that close or raise a BaseException.
KNOWN = (
    Program(
        steps=(
            Write("client", 1 << 20),
            Write("client", 5000),
            GetBufferSize("client"),
            SetLimits("client", 100, None),
            Write("client", 100_000),
            Quiet(),
            Abort("server"),
            Quiet(),
        ),
        server_buffer=4096,
    ),
    Program(
        steps=(
            PauseReading("server"),
            Write("client", 200_000),
            Sleep(),
            Sleep(),
            ResumeReading("server"),
            Sleep(),
            Arm("server", "data_received"),
            Write("client", 10),
            Quiet(),
            Write("client", 10, repeat=7),
        )
    ),
    Program(
        steps=(
            SetProtocol("server", 7000),
            Write("client", 300_000),
            Close("client"),
            Close("client"),
            Quiet(),
            WriteEof("server"),
            Write("client", 100, form="memoryview"),
        )
    ),
    Program(
        steps=(
            SetLimits("client", 0, 0),
            Write("client", 100),
            Sleep(),
            Write("server", 100),
            Quiet(),
            Write("client", 400_000),
            Write("client", 10),
            Quiet(),
            SetLimits("client", 4096, None),
        )
    ),
    Program(
        steps=(
            Arm("client", "connection_lost"),
            Arm("server", "eof_received"),
            Write("server", 100, form="strided"),
            Quiet(),
            GetBufferSize("server"),
        ),
        client_buffer=1024,
    ),
    Program(steps=(Write("client", 100), Abort("server"), Quiet())),
    Program(
        steps=(
            Arm("server", "buffer_updated", "close"),
            Arm("client", "data_received", "base"),
            Write("client", 40_000),
            Write("server", 100),
            Quiet(),
        ),
        server_buffer=1024,
    ),
)


def _known(test: Callable[..., Any]) -> Callable[..., Any]:
    for program in KNOWN:
        test = example(program=program)(test)
    return test


@pytest.fixture(autouse=True, scope="module")
def _fork_server() -> Iterator[None]:
    """The programs' fork server ends with the module (its pipes are this process's fds)."""
    yield
    close_fork_server()


# --- comparing traces -------------------------------------------------------------------------


def _assert_same(oracle_name: str, oracle: Trace, name: str, got: Trace) -> None:
    assert_same_traces(oracle_name, oracle, name, got, format_trace=format_trace, hung=hung,
                       unit="entries")  # fmt: skip


@SETTINGS
@given(program=programs)
@_known
def test_tls_fuzzer_is_deterministic_on_asyncio(program: Program) -> None:
    """The same program twice on asyncio's loop: equal traces (else the fuzzer would report the
    kernel's timing as a difference of fdkit's)."""
    first = run_program("asyncio", program)
    _assert_same("asyncio", first, "asyncio again", run_program("asyncio", program))


@each_engine
@SETTINGS
@given(program=programs)
@_known
def test_tls_programs_match_asyncio(engine: FdkitEngine, program: Program) -> None:
    """Any program: fdkit's loop shows its TLS connection what asyncio's shows it."""
    kind = fdkit_kind(engine)
    oracle = run_program("asyncio", program)
    got = run_program(kind.name, program)
    if got != oracle:
        again = run_program("asyncio", program)
        if again != oracle:
            _assert_same(
                "asyncio", oracle, "asyncio again (the fuzzer's fault, not fdkit's)", again
            )
    _assert_same("asyncio", oracle, str(kind), got)
