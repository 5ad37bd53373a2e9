"""The differential fuzzer's programs, the driver that runs one on a loop, and its trace.

A :class:`Program` is a list of steps: transport calls (writes of 1 B to 1 MiB, writelines,
pause and resume reading, write buffer limits, close, abort, write_eof, set_protocol to a
Protocol or a BufferedProtocol), protocol callbacks armed to raise, to call the transport or
to echo, batches of call_soon/call_at/call_later callbacks that spawn and cancel each other
and call the transport, and the acts of a peer: a plain socket on 127.0.0.1 that sends,
half-closes, resets, closes, reads or never reads; on a loop in debug mode or not.
:func:`run_program` runs one on a new loop and returns its :data:`Trace`: what a program can
see, step by step. The same program on asyncio's loop and on fdkit's must give equal traces.

Programs also go into the corners where programs and tools change or stretch the loop (issue
32): the loop an instance of a subclass overriding hooks of :data:`HOOKS` (each records that
it was called, under which of the driver's calls of the loop's API, and what call_soon and
call_at were given), class patches made mid-run (:class:`Patch`, undone when the program
ends), NaN, infinite, huge and non-float timer values (:data:`ODD_WHENS`: what each call
raised, which timers ran, what the loop's runs raised), odd ``transport.max_size`` values
(:class:`SetMaxSize`), exception handlers that log with ``logging.exception`` or raise
(:data:`HANDLERS`: the log's traceback, and whether ``sys.exc_info()`` was set in the
handler), and SIGUSR1 raised by a callback mid-batch (:class:`Signal`).

A loop's run is bounded (:data:`HANG_TIMEOUT`, SIGALRM: a native loop that holds the GIL
leaves a watchdog thread no chance, but checks for signals): a loop that hangs ends the trace
with ``("hung", seconds)`` at the step it hung in. A program that may abort the process (a
huge ``max_size``) runs in a forked child; its trace ends with ``("crashed", signal)`` if the
child dies.

A trace holds only what asyncio defines, whatever the kernel's timing:

- **One thing moves at a time.** The driver runs the loop by hand, with ``stop``: a peer's
  act is done while the loop is stopped, and the driver waits (without running the loop) until
  the kernel has it at the transport's socket (the peer's send queue sent, the FIN or RST seen
  by ``poll``); then it runs the loop until what asyncio must do with it is done (all bytes
  delivered, EOF or connection_lost seen) and nothing more happens for a few iterations. The
  peer leaves at most 32 KiB unread, so that the kernel takes all it sends at once.
- **Bytes, not chunks.** How received bytes are split between data_received (or buffer_updated)
  calls is the kernel's business: consecutive deliveries to a protocol are merged into one
  event of their total, and every byte is checked against what the peer sent.
- **Write buffer sizes are exact.** How much of a write send(2) takes is the kernel's (TCP's
  window, delayed ACKs, window probes), so the driver keeps it out of play: while the kernel's
  side of the stream is empty, a program writes at most 32 KiB into it (taken whole, every
  time); before a step that may write more, the driver fills the socket's send queue and the
  peer's receive queue through the socket's fd (only while the transport's own buffer is
  empty, so the stream's order is known) and then shrinks the socket's send buffer far below
  what it holds: the kernel takes nothing more, nor reports the socket writable, until the
  peer's ``PeerDrain`` step reads everything (the peer reads nowhere else). So a write
  buffers all of its bytes, pause_writing comes exactly past the high water mark and
  resume_writing only in a drain, once. The peer strips the filler from what it reads and
  checks the rest against what was written; once its stream ends in a reset, how much it got
  is left out (the kernel drops what it had taken and not sent yet).
- **Callbacks in asyncio's order.** ``call_soon`` callbacks and timers already due (``call_at``
  or ``call_later`` in the past, distinct ``when``) run in the loop's own order, iteration by
  iteration, interleaved with the transport's callbacks as asyncio interleaves them (all the
  I/O they meet is in the kernel already). Timers in the future fire when the clock says, so
  they are a lane of their own: they only record, raise and cancel each other, and the trace
  gives their order apart from the rest. Timers with odd times are a lane of their own too,
  given as a set once their batch is done (see :class:`Call`).
- **Hooks and patches: whether, not how often.** How many times the loop iterates in a step is
  timing: the trace says which hooks and patches were called in a step (and under which call
  of the loop's API), not how often; a loop's run that raised is said once per step.
- **Floods are cut short.** A step whose events never end without bytes moving (a loop
  reporting the same error for ever) settles after :data:`SETTLE_TIMEOUT`.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import gc
import logging
import os
import pickle
import random
import re
import select
import selectors
import signal
import socket
import struct
import sys
import termios
import time
import traceback
import warnings
from asyncio import base_events, selector_events
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from decimal import Decimal
from fractions import Fraction
from typing import Any, Self

from hypothesis import strategies as st

HOST = "127.0.0.1"

#: A trace: one tuple per step (its events and the state after it), plain data to compare.
Trace = list[tuple[Any, ...]]

# Socket buffers, fixed so that the kernel's share of a stream is small and never autotuned.
TRANSPORT_SNDBUF = 128 * 1024
TRANSPORT_RCVBUF = 128 * 1024
PEER_SNDBUF = 128 * 1024
PEER_RCVBUF = 64 * 1024
#: The most a peer leaves unread at the transport: it always fits the kernel, in one read.
PEER_PENDING_CAP = 32 * 1024
#: What may be written straight into an empty kernel (all of it is taken at once).
DIRECT_WRITES = 32 * 1024
#: Timers "in the future" fire this long after their batch starts, and this far apart (an
#: order apart; callbacks of one order a 64th of that apart).
FUTURE_BASE = 0.002
FUTURE_GAP = 0.0005
#: How long one step may take to settle (a loop that never does what asyncio did).
SETTLE_TIMEOUT = 1.0
#: Consecutive loop iterations with nothing new that make a step settled.
QUIET_TICKS = 4

_FILLER = b"\xfe" * (64 * 1024)


# --- the program model ------------------------------------------------------------------------


@dataclass(frozen=True)
class Write:
    """``transport.write`` of ``size`` bytes as ``form``: bytes, bytearray, memoryview, a
    memoryview of every other byte (not contiguous), an empty bytes (ignored by asyncio) or a
    str (TypeError); ``repeat`` times (asyncio warns past the 5th write on a lost
    connection)."""

    size: int
    form: str = "bytes"
    seed: int = 0
    repeat: int = 1


@dataclass(frozen=True)
class Writelines:
    """``transport.writelines`` of buffers of these sizes."""

    sizes: tuple[int, ...]
    seed: int = 0


@dataclass(frozen=True)
class WriteEof:
    """``transport.write_eof()``."""


@dataclass(frozen=True)
class Close:
    """``transport.close()``."""


@dataclass(frozen=True)
class Abort:
    """``transport.abort()``."""


@dataclass(frozen=True)
class PauseReading:
    """``transport.pause_reading()``."""


@dataclass(frozen=True)
class ResumeReading:
    """``transport.resume_reading()``."""


@dataclass(frozen=True)
class SetLimits:
    """``transport.set_write_buffer_limits(high, low)`` (may be invalid: ValueError)."""

    high: int | None
    low: int | None


@dataclass(frozen=True)
class SetProtocol:
    """``transport.set_protocol`` of a new protocol: a BufferedProtocol with a buffer of
    ``buffer`` bytes if ``buffer`` is set, else a Protocol; ``keep_open`` is what its
    eof_received returns."""

    buffer: int | None = None
    keep_open: bool = False


@dataclass(frozen=True)
class Arm:
    """The current protocol's next call of ``callback`` (one of :data:`CALLBACKS`) reacts:
    ``raise``s, or calls the transport (``pause`` reading, ``close``, ``abort``,
    ``write_eof``, ``write`` 100 bytes) before it returns; ``empty``: get_buffer returns an
    empty buffer; ``echo``: from now on, data_received and buffer_updated write back what they
    get. A reaction a callback cannot have does nothing."""

    callback: str
    how: str = "raise"


@dataclass(frozen=True)
class SetMaxSize:
    """``transport.max_size = value``: what a Protocol's transport asks ``recv`` for on each
    read (a BufferedProtocol's reads go by its buffer). asyncio reads it on its error path: a
    negative or float value is a fatal read error (ValueError, TypeError), 0 reads ``b""``
    (taken for EOF), ``1 << 40`` a MemoryError (where the kernel will not overcommit a TiB;
    such a program runs in a child process: it may abort one), ``1 << 24`` a large valid
    one."""

    value: Any


@dataclass(frozen=True)
class Patch:
    """Patches, mid-run, a class attribute asyncio's code calls with a wrapper that records
    that it was called and calls the original; undone when the program ends, whatever
    happens. ``target`` (:data:`PATCH_TARGETS`): ``time`` and ``run_once`` on the loop's own
    class, ``call_soon`` on ``BaseEventLoop``, ``process_events`` on
    ``BaseSelectorEventLoop``, ``select`` on ``selectors.EpollSelector``, ``write`` on
    asyncio's socket transport class."""

    target: str


#: What :class:`Patch` patches: (where, the attribute); ``loop`` is the loop's own class.
PATCH_TARGETS: dict[str, tuple[str, str]] = {
    "time": ("loop", "time"),
    "run_once": ("loop", "_run_once"),
    "call_soon": ("BaseEventLoop", "call_soon"),
    "process_events": ("BaseSelectorEventLoop", "_process_events"),
    "select": ("EpollSelector", "select"),
    "write": ("_SelectorSocketTransport", "write"),
}

#: The protocol callbacks that can be armed.
CALLBACKS = (
    "data_received",
    "eof_received",
    "get_buffer",
    "buffer_updated",
    "pause_writing",
    "resume_writing",
    "connection_lost",
)
#: Their reactions.
REACTIONS = ("raise", "pause", "close", "abort", "write_eof", "write", "empty", "echo")

Action = (
    Write
    | Writelines
    | WriteEof
    | Close
    | Abort
    | PauseReading
    | ResumeReading
    | SetLimits
    | SetProtocol
    | Arm
    | SetMaxSize
    | Patch
)


@dataclass(frozen=True)
class Raise:
    """The callback raises (after its other effects): the loop's exception handler sees it."""


@dataclass(frozen=True)
class Spawn:
    """The callback schedules another one."""

    call: Call


@dataclass(frozen=True)
class Cancel:
    """The callback cancels the ``index``-th handle of its batch (modulo their number)."""

    index: int


@dataclass(frozen=True)
class Act:
    """The callback calls the transport."""

    action: Action


@dataclass(frozen=True)
class Signal:
    """The callback raises SIGUSR1 (``signal.raise_signal``) mid-batch; the program's Python
    handler records it (and raises, if ``raises``: the callback then raises that)."""

    raises: bool = False


Effect = Raise | Spawn | Cancel | Act | Signal

#: Odd ``when`` values of :class:`Call` (``at``: the time; ``later``: the delay): ``nan``
#: (asyncio runs the timer at once: ``when >= end`` is false), ``inf`` and ``huge`` (1e300:
#: never due), ``-inf`` (due), ``bigint`` (10**400: never due for call_at; call_later's
#: ``time() + delay`` raises OverflowError), and an ``int``, a ``Fraction`` or a ``Decimal``
#: in the past (call_later's ``float + Decimal`` raises TypeError).
ODD_WHENS = ("nan", "inf", "-inf", "huge", "bigint", "int", "fraction", "decimal")
#: The odd whens asyncio never runs (the driver does not wait for them; it cancels them when
#: their batch ends, so that they leave the timer heap).
NEVER_DUE = frozenset({"inf", "huge", "bigint"})


@dataclass(frozen=True)
class Call:
    """A callback scheduled by ``how``: ``soon`` (call_soon), ``threadsafe``
    (call_soon_threadsafe), ``at`` and ``later`` (call_at / call_later, already due, ordered
    by ``order``) or ``future`` (call_at, a few ms ahead, ordered by ``order``: it may only
    raise and cancel other ``future`` ones); ``cancel``: cancelled right after it is
    scheduled. Its ``effects`` run in order when it is called.

    ``when`` (``at`` and ``later`` only, not spawned; one of :data:`ODD_WHENS`) gives it an
    odd time: what the call raised is in the trace, and the odd timers are a lane of their
    own, recorded as a set once the batch is done (asyncio's heap orders a NaN, or equal
    times, as it happens to); they have no effects. A batch with a NaN timer has no other
    timer but odd ones that come due (:func:`tame_nan`): a NaN in asyncio's heap compares
    neither below nor above anything, so the heap pops the timers around it out of order,
    and hides those below it, for ever under a timer that is never due (even the driver's
    own ``stop``: asyncio's loop then waits a day)."""

    how: str
    order: int = 0
    cancel: bool = False
    effects: tuple[Effect, ...] = ()
    when: str | None = None


@dataclass(frozen=True)
class Sched:
    """Schedules ``calls`` while the loop is stopped; first, if ``peer_bytes``, the peer sends
    that many bytes and they reach the transport's socket (asyncio runs the callbacks already
    scheduled before the transport's reader)."""

    calls: tuple[Call, ...]
    peer_bytes: int = 0


@dataclass(frozen=True)
class PeerSend:
    """The peer sends ``size`` bytes (fewer when the transport has not taken what it had)."""

    size: int
    seed: int = 0


@dataclass(frozen=True)
class PeerShutWr:
    """The peer half-closes: ``shutdown(SHUT_WR)``."""


@dataclass(frozen=True)
class PeerReset:
    """The peer resets the connection: ``SO_LINGER`` 0, then close."""


@dataclass(frozen=True)
class PeerClose:
    """The peer closes (a FIN, or an RST if it left bytes unread)."""


@dataclass(frozen=True)
class PeerDrain:
    """The peer reads until the transport has nothing more to send."""


Step = Action | Sched | PeerSend | PeerShutWr | PeerReset | PeerClose | PeerDrain


#: The loop methods a program's loop class may override (:attr:`Program.hooks`).
HOOKS = (
    "time",
    "_run_once",
    "_process_events",
    "_add_callback",
    "call_soon",
    "call_at",
    "_check_closed",
    "get_debug",
    "create_task",
)
#: What the loop's exception handler does (:attr:`Program.handler`).
HANDLERS = ("record", "log", "raise", "default")


@dataclass(frozen=True)
class Program:
    """A connection (the transport's side made by ``create_connection(sock=...)``, or
    accepted by ``create_server`` if ``server``), its first protocol (see
    :class:`SetProtocol`), the steps, and the loop's debug mode (``debug``).

    ``hooks`` (sorted, from :data:`HOOKS`): the loop is an instance of a subclass of the
    loop's class that overrides these methods, each recording that it was called and calling
    ``super()``. ``handler``: the loop's exception handler records what it is given
    (``record``), also logs it with ``logging.exception`` (``log``), or records and raises
    (``raise``); ``default``: no handler is set (asyncio's default one logs). Past
    ``record``, the handler's event says whether ``sys.exc_info()`` was set in it."""

    steps: tuple[Step, ...]
    server: bool = False
    buffer: int | None = None
    keep_open: bool = False
    debug: bool = False
    hooks: tuple[str, ...] = ()
    handler: str = "record"


# --- strategies -------------------------------------------------------------------------------

_SIZES = st.one_of(
    st.integers(1, 64),
    st.integers(1, 1 << 16),
    st.integers(1, 1 << 20),
    st.sampled_from([16383, 16384, 16385, 65535, 65536, 65537, 262144, 1 << 20]),
)
_LIMITS = st.one_of(st.none(), st.sampled_from([0, 1, 100, 4096, 16384, 65536, 1 << 20]))

_writes = st.builds(
    Write,
    size=_SIZES,
    form=st.sampled_from(
        ["bytes", "bytes", "bytes", "bytearray", "memoryview", "strided", "empty", "str"]
    ),
    seed=st.integers(0, 7),
    repeat=st.sampled_from([1, 1, 1, 1, 1, 2, 7]),
)
_writelines = st.builds(
    Writelines, sizes=st.lists(_SIZES, max_size=4).map(tuple), seed=st.integers(0, 7)
)
_set_protocol = st.builds(
    SetProtocol,
    buffer=st.one_of(st.none(), st.sampled_from([1, 7, 4096, 65536, 300000])),
    keep_open=st.booleans(),
)
_arm = st.builds(
    Arm,
    callback=st.sampled_from(CALLBACKS),
    how=st.sampled_from(["raise", *REACTIONS]),
)
#: max_size values: invalid (negative, a float), 0, huge (1 << 40), large valid, ordinary.
MAX_SIZES = (-1, 0, 0.5, 1 << 40, 1 << 24, 4096)
_max_size = st.builds(SetMaxSize, value=st.sampled_from(MAX_SIZES))
_patch = st.builds(Patch, target=st.sampled_from(sorted(PATCH_TARGETS)))
actions: st.SearchStrategy[Action] = st.deferred(
    lambda: _weighted(
        (4, _writes),
        (1, _writelines),
        (2, st.just(PauseReading())),
        (2, st.just(ResumeReading())),
        (1, st.builds(SetLimits, high=_LIMITS, low=_LIMITS)),
        (1, _set_protocol),
        (2, _arm),
        (1, st.just(WriteEof())),
        (1, st.just(Close())),
        (1, st.just(Abort())),
        (1, _max_size),
        (1, _patch),
    )
)


def _effects(depth: int, lane: str) -> st.SearchStrategy[tuple[Effect, ...]]:
    """A callback's effects; the ``future`` timers' lane only cancels (within its lane) and
    raises, the odd timers' has none."""
    if lane == "odd":
        return st.just(())
    one: list[st.SearchStrategy[Effect]] = [st.builds(Cancel, index=st.integers(0, 15))]
    if lane == "main":
        one.append(st.builds(Act, action=actions))
        one.append(st.builds(Signal, raises=st.sampled_from([False, False, True])))
        if depth > 0:
            one.append(st.builds(Spawn, call=_calls(depth - 1, children=True)))
    body = st.lists(st.one_of(*one), max_size=3 if depth > 1 else 2)
    return st.tuples(body, st.booleans()).map(lambda b: (*b[0], Raise()) if b[1] else tuple(b[0]))


def _calls(depth: int, children: bool = False) -> st.SearchStrategy[Call]:
    hows = ["soon", "threadsafe", "at", "later"] + ([] if children else ["future"])

    def build(how: str, when: str | None) -> st.SearchStrategy[Call]:
        lane = "future" if how == "future" else "odd" if when is not None else "main"
        return st.builds(
            Call,
            how=st.just(how),
            order=st.integers(0, 9),
            cancel=st.booleans() if not children else st.just(False),
            effects=_effects(depth, lane),
            when=st.just(when),
        )

    def pick(how: str) -> st.SearchStrategy[Call]:
        if children or how not in ("at", "later"):
            return build(how, None)
        whens = _weighted((6, st.none()), (1, st.sampled_from(ODD_WHENS)))
        return whens.flatmap(lambda when: build(how, when))

    return st.sampled_from(hows).flatmap(pick)


def tame_nan(calls: tuple[Call, ...]) -> tuple[Call, ...]:
    """A batch as :class:`Call` says it may be: with a NaN timer, its other timers are odd
    ones that come due, or ``soon`` callbacks."""
    if not any(c.when == "nan" for c in calls):
        return calls
    out = []
    for c in calls:
        if c.how in ("at", "later", "future") and (c.when is None or c.when in NEVER_DUE):
            c = replace(c, how="soon", when=None)
        out.append(c)
    return tuple(out)


sched = st.builds(
    Sched,
    calls=st.lists(_calls(2), min_size=1, max_size=5).map(tuple).map(tame_nan),
    peer_bytes=st.one_of(st.just(0), st.integers(1, 4096)),
)


def _weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of the strategies, each ``weight`` times as likely (hypothesis's one_of draws a
    branch uniformly, after flattening nested one_of: each branch is wrapped to stay one)."""
    return st.one_of(*(s.map(lambda x: x) for weight, s in choices for _ in range(weight)))


steps: st.SearchStrategy[Step] = _weighted(
    (6, _writes),
    (2, _writelines),
    (4, st.just(PauseReading())),
    (2, st.just(ResumeReading())),
    (2, st.builds(SetLimits, high=_LIMITS, low=_LIMITS)),
    (2, _set_protocol),
    (3, _arm),
    (1, st.just(WriteEof())),
    (1, st.just(Close())),
    (1, st.just(Abort())),
    (5, sched),
    (
        5,
        st.builds(
            PeerSend,
            size=st.one_of(st.integers(1, 64), st.integers(1, 16384)),
            seed=st.integers(0, 7),
        ),
    ),
    (4, st.just(PeerDrain())),
    (1, st.just(PeerShutWr())),
    (1, st.just(PeerReset())),
    (1, st.just(PeerClose())),
    (1, _max_size),
    (1, _patch),
)
programs = st.builds(
    Program,
    steps=st.lists(steps, min_size=2, max_size=20).map(tuple),
    server=st.booleans(),
    buffer=st.one_of(st.none(), st.sampled_from([1, 7, 4096, 65536])),
    keep_open=st.booleans(),
    debug=st.sampled_from([False, False, False, True]),
    hooks=_weighted(
        (3, st.just(())),
        (
            1,
            st.lists(st.sampled_from(HOOKS), min_size=1, max_size=3, unique=True).map(
                lambda h: tuple(sorted(h))
            ),
        ),
    ),
    handler=st.sampled_from(["record"] * 5 + ["log", "raise", "default"]),
)


# --- the driver -------------------------------------------------------------------------------


class FuzzError(Exception):
    """What an armed callback raises; ``lane``: where what is logged about it goes (the lane
    of the timer that raised it, the future's; else the rest)."""

    def __init__(self, message: str, lane: list[tuple[Any, ...]] | None = None) -> None:
        super().__init__(message)
        self.lane = lane


def _lane_of(exc: BaseException | None) -> list[tuple[Any, ...]] | None:
    """The lane of a FuzzError in ``exc``'s chain, if any."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        lane = getattr(exc, "lane", None)
        if isinstance(lane, list):
            return lane
        exc = exc.__context__
    return None


_HEX = re.compile(r"0x[0-9a-fA-F]+")
_FD = re.compile(r"fd=-?\d+")
_PORT = re.compile(r"'127\.0\.0\.1', \d+")
_TRANSPORT_CLASS = re.compile(r"\b\w*SocketTransport\b")


def norm(text: str) -> str:
    """``text`` without what differs from run to run (addresses, fd numbers, ports), and with the
    transport's class named ``SocketTransport`` (fdkit's is a subclass of asyncio's, named
    otherwise: the setup records that it is asyncio's)."""
    text = _TRANSPORT_CLASS.sub("SocketTransport", _HEX.sub("0x?", text))
    return _PORT.sub("'127.0.0.1', N", _FD.sub("fd=N", text))


def describe(exc: BaseException | None) -> tuple[str, str] | None:
    """An exception as a trace shows it: its type's name and its message."""
    if exc is None:
        return None
    return (type(exc).__name__, norm(str(exc)))


_FRAME = re.compile(r'  File "([^"\n]+)", line (\d+), in ([^\n]+)\n?((?:    [^\n]*(?:\n|$))*)')
_CREATED_AT = re.compile(r"created at ([^\s>]+):(\d+)")
_WHEN = re.compile(r"\bwhen=[^\s>]+")
_FRAME_SUMMARY = re.compile(r"<FrameSummary file ([^,\n]+), line (\d+) in ([^>\n]+)>")
_NO_FRAME = re.compile(r"<->(, )?|(, )?<->")
_DRIVER_FILE = os.path.basename(__file__)


def _driver_file(path: str) -> bool:
    return os.path.basename(path) == _DRIVER_FILE


def norm_log(text: str) -> str:
    """A log message or traceback as a trace shows it: :func:`norm`, with the frames of a
    formatted stack (debug mode's "Object created at") and the "created at" of a handle's repr
    kept only where they are this driver's (which of asyncio's or fdkit's own frames a stack
    holds is their implementation's business), without their source lines, and a timer
    handle's ``when`` (the clock's) left out."""

    def frame(m: re.Match[str]) -> str:
        if not _driver_file(m.group(1)):
            return ""
        return f'  File "{_DRIVER_FILE}", line {m.group(2)}, in {m.group(3)}\n'

    def created(m: re.Match[str]) -> str:
        return f"created at {_DRIVER_FILE}:{m.group(2)}" if _driver_file(m.group(1)) else ""

    def summary(m: re.Match[str]) -> str:  # a FrameSummary's repr (a context dict's)
        return f"<{_DRIVER_FILE}:{m.group(2)} {m.group(3)}>" if _driver_file(m.group(1)) else "<->"

    text = _NO_FRAME.sub("", _FRAME_SUMMARY.sub(summary, text))
    text = _WHEN.sub("when=?", _CREATED_AT.sub(created, _FRAME.sub(frame, text)))
    return norm(text).rstrip()


def exc_chain(exc: BaseException | None) -> tuple[str, ...]:
    """An exception as a log's traceback shows it, oldest first: each exception of its
    ``__cause__``/``__context__`` chain with this driver's frames it went through (asyncio's
    and fdkit's own left out); ``NoneType: None`` where there was none (``exc_info`` outside
    an ``except`` block)."""
    if exc is None:
        return ("NoneType: None",)
    out: list[str] = []
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        frames = [
            f.name for f in traceback.extract_tb(exc.__traceback__) if _driver_file(f.filename)
        ]
        link = ""
        nxt: BaseException | None = None
        if exc.__cause__ is not None:
            link, nxt = "caused by", exc.__cause__
        elif exc.__context__ is not None and not exc.__suppress_context__:
            link, nxt = "while handling", exc.__context__
        where = f" in {'/'.join(frames)}" if frames else ""
        out.append(f"{type(exc).__name__}: {norm(str(exc))}{where} {link}".rstrip())
        exc = nxt
    return tuple(reversed(out))


def _arg(value: Any, ints: bool = True) -> str:
    """A callback's argument as a trace shows it (an int's value only where ``ints``)."""
    if value is None or isinstance(value, bool) or (ints and isinstance(value, int)):
        return repr(value)
    if isinstance(value, BaseException):
        return f"{type(value).__name__}({norm(str(value))})"
    return norm(type(value).__name__)


def callback_of(callback: Any, args: tuple[Any, ...]) -> tuple[str, tuple[str, ...]]:
    """A scheduled callback as a trace shows it: its name and its arguments' (the values of
    ints only for the driver's own callbacks: others' are fd numbers)."""
    name = getattr(callback, "__name__", None) or type(callback).__name__
    mine = getattr(getattr(callback, "__self__", None), "__module__", None) == __name__
    return (norm(str(name)), tuple(_arg(a, mine) for a in args))


# --- what loop hooks and class patches saw ----------------------------------------------------

#: The run whose loop's hooks and patches record what they see (one at a time).
_active: list[_Run] = []


def saw(name: str, detail: Any = None) -> None:
    """A hook or a patch was called (``detail``: its callback, for call_soon and call_at),
    under the driver's current call of the loop's API."""
    if _active:
        run = _active[0]
        run.seen.setdefault(f"{name}@{run.op}", set()).add(detail)


_hooked: dict[tuple[type, tuple[str, ...]], type] = {}


def hooked_class(base: type, hooks: tuple[str, ...]) -> type:
    """A subclass of the loop class ``base`` overriding ``hooks`` (of :data:`HOOKS`), each
    recording that it was called (:func:`saw`) and calling ``super()``; one per ``base`` and
    ``hooks``. The overrides are the class's own methods, as a program's subclass has them."""
    key = (base, hooks)
    cls = _hooked.get(key)
    if cls is not None:
        return cls

    class FuzzLoop(base):  # type: ignore[misc]
        def time(self) -> float:
            saw("time")
            return super().time()  # type: ignore[no-any-return]

        def _run_once(self) -> None:
            saw("_run_once")
            super()._run_once()

        def _process_events(self, event_list: Any) -> None:
            saw("_process_events")
            super()._process_events(event_list)

        def _add_callback(self, handle: Any) -> None:
            saw("_add_callback")
            super()._add_callback(handle)

        def call_soon(self, callback: Any, *args: Any, context: Any = None) -> Any:
            saw("call_soon", callback_of(callback, args))
            return super().call_soon(callback, *args, context=context)

        def call_at(self, when: Any, callback: Any, *args: Any, context: Any = None) -> Any:
            saw("call_at", callback_of(callback, args))
            return super().call_at(when, callback, *args, context=context)

        def _check_closed(self) -> None:
            saw("_check_closed")
            super()._check_closed()

        def get_debug(self) -> bool:
            saw("get_debug")
            return super().get_debug()  # type: ignore[no-any-return]

        def create_task(self, coro: Any, **kwargs: Any) -> Any:
            saw("create_task")
            return super().create_task(coro, **kwargs)

    for name in HOOKS:
        if name not in hooks:
            delattr(FuzzLoop, name)
    _hooked[key] = FuzzLoop
    return FuzzLoop


def _patch_owner(where: str, loop: asyncio.AbstractEventLoop) -> type:
    owners: dict[str, type] = {
        "loop": type(loop),
        "BaseEventLoop": base_events.BaseEventLoop,
        "BaseSelectorEventLoop": selector_events.BaseSelectorEventLoop,
        "EpollSelector": selectors.EpollSelector,
        "_SelectorSocketTransport": selector_events._SelectorSocketTransport,  # type: ignore[attr-defined]
    }
    return owners[where]


def _wrapper(target: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """What :class:`Patch` puts in place of ``original``: records, then calls it."""
    if target == "call_soon":

        def call_soon(self: Any, callback: Any, *args: Any, context: Any = None) -> Any:
            saw("patch:call_soon", callback_of(callback, args))
            return original(self, callback, *args, context=context)

        wrapper: Callable[..., Any] = call_soon
    else:
        name = f"patch:{target}"

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            saw(name)
            return original(self, *args, **kwargs)

    try:
        return functools.wraps(original)(wrapper)
    except (AttributeError, TypeError):
        return wrapper


_MISSING = object()


# --- bounding the loop's runs -----------------------------------------------------------------

#: How long one run of the loop (one ``run_forever``, or ``run_until_complete`` at the
#: connection) may take before the driver calls the loop hung: each takes milliseconds.
HANG_TIMEOUT = 3.0


class Hung(KeyboardInterrupt):
    """What the watchdog raises in a loop run past :data:`HANG_TIMEOUT`: a KeyboardInterrupt,
    which asyncio's handles and tasks let through, as a native loop does."""


class _Watchdog:
    """Bounds the loop's runs with SIGALRM (``ITIMER_REAL``): a Python handler runs wherever
    the loop checks for signals (fdkit's native wait does; a loop that holds the GIL rules out
    a watchdog thread), and raises :class:`Hung`. Holds SIGALRM for a program's run, then
    gives back the handler and the timer it found (pytest-timeout's, less the time spent)."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.old_handler: Any = None
        self.old_timer: tuple[float, float] = (0.0, 0.0)
        self.entered = 0.0

    def __enter__(self) -> Self:
        self.old_timer = signal.setitimer(signal.ITIMER_REAL, 0)
        self.old_handler = signal.signal(signal.SIGALRM, self.fire)
        self.entered = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        self.since = None
        signal.signal(signal.SIGALRM, self.old_handler)
        delay, interval = self.old_timer
        if delay > 0:
            left = delay - (time.monotonic() - self.entered)
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001), interval)

    def fire(self, signum: int, frame: Any) -> None:
        since = self.since
        if since is not None and time.monotonic() - since >= HANG_TIMEOUT * 0.9:
            self.since = None
            raise Hung(f"one run of the loop took over {HANG_TIMEOUT:g} s")

    def run(self, call: Callable[[], Any]) -> Any:
        """``call()`` (a run of the loop), bounded."""
        if self.since is not None:  # nested: the outer run bounds it
            return call()
        self.since = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, HANG_TIMEOUT)
        try:
            return call()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            self.since = None


def payload(seed: int, size: int) -> bytes:
    """``size`` bytes made from ``seed`` (the same every run)."""
    block = random.Random(seed).randbytes(4096)
    return (block * (size // 4096 + 1))[:size]


def fd_count() -> int:
    """How many fds this process has open (the listing's own fd left out)."""
    return len(os.listdir("/proc/self/fd")) - 1


#: ioctl(2): the bytes of a TCP socket's send queue not sent yet (linux/sockios.h).
SIOCOUTQNSD = 0x894B


def _outq(fd: int, request: int = SIOCOUTQNSD) -> int:
    """Bytes in a socket's send queue: not sent yet (SIOCOUTQNSD), or not acknowledged yet
    (``termios.TIOCOUTQ``, SIOCOUTQ)."""
    raw = fcntl.ioctl(fd, request, b"\0\0\0\0")
    return int(struct.unpack("i", raw)[0])


def _wait_poll(fd: int, mask: int, timeout: float) -> bool:
    """Until ``fd`` polls with one of ``mask``'s events (without taking anything)."""
    poller = select.poll()
    poller.register(fd, mask)
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if any(ev & mask for _, ev in poller.poll(max(0, int(left * 1000)))):
            return True
        if left <= 0:
            return False


class _Capture(logging.Handler):
    def __init__(self, run: _Run) -> None:
        super().__init__(logging.DEBUG)
        self.run = run

    def emit(self, record: logging.LogRecord) -> None:
        ev: tuple[Any, ...] = ("log", record.name, record.levelname, norm_log(record.getMessage()))
        lane = getattr(record, "fuzz_lane", None)
        if record.exc_info:  # the traceback logged: its exceptions, or "NoneType: None"
            ev += (exc_chain(record.exc_info[1]),)
            lane = lane or _lane_of(record.exc_info[1])
        # With the events of the callback it is about (a timer in the future's lane).
        (self.run.events if lane is None else lane).append(ev)


#: The logger of the exception handler of a ``log`` or ``raise`` program.
HANDLER_LOG = logging.getLogger("fuzz.handler")


class _Proto:
    """What both protocol classes share: recording and arming."""

    run: _Run
    pid: int
    keep_open: bool
    armed: dict[str, str]
    echo: bool = False

    def _setup(self, run: _Run, keep_open: bool) -> None:
        self.run = run
        self.pid = len(run.protocols)
        self.keep_open = keep_open
        self.armed = {}
        run.protocols.append(self)

    def _maybe_raise(self, callback: str) -> None:
        """The armed reaction of ``callback``, if any (a raise last)."""
        how = self.armed.pop(callback, None)
        if how is None:
            return
        if how == "echo":
            self.echo = True
            return
        run = self.run
        run.event(("reacts", self.pid, callback, how))
        if how == "raise":
            raise FuzzError(f"{callback} of protocol {self.pid}")
        reactions: dict[str, Action] = {
            "pause": PauseReading(),
            "close": Close(),
            "abort": Abort(),
            "write_eof": WriteEof(),
            "write": Write(100, seed=self.pid),
        }
        action = reactions.get(how)
        if action is not None and run.transport is not None:
            run.act(action)

    def _echo(self, data: bytes) -> None:
        if self.echo and self.run.transport is not None:
            self.run.act(Write(len(data)), echo=data)

    def connection_made(self, transport: Any) -> None:
        self.run.event(("made", self.pid))
        self.run.transport = transport

    def eof_received(self) -> bool:
        self.run.event(("eof", self.pid, self.run.delivered))
        self.run.eof_seen = True
        self._maybe_raise("eof_received")
        return self.keep_open

    def pause_writing(self) -> None:
        transport = self.run.transport
        size = transport.get_write_buffer_size() if transport is not None else None
        self.run.event(("pause_writing", self.pid, size))
        self._maybe_raise("pause_writing")

    def resume_writing(self) -> None:
        self.run.event(("resume_writing", self.pid))
        self._maybe_raise("resume_writing")

    def connection_lost(self, exc: Exception | None) -> None:
        self.run.lost = True
        self.run.event(("lost", self.pid, describe(exc), self.run.delivered))
        self._maybe_raise("connection_lost")


class FuzzProtocol(_Proto, asyncio.Protocol):
    """A Protocol that records each callback."""

    def __init__(self, run: _Run, keep_open: bool) -> None:
        self._setup(run, keep_open)

    def data_received(self, data: bytes) -> None:
        self.run.received(self.pid, data)
        self._echo(data)
        self._maybe_raise("data_received")


class FuzzBufferedProtocol(_Proto, asyncio.BufferedProtocol):
    """A BufferedProtocol that records each callback; its buffer has ``size`` bytes."""

    def __init__(self, run: _Run, keep_open: bool, size: int) -> None:
        self._setup(run, keep_open)
        self.buf = bytearray(size)

    def get_buffer(self, sizehint: int) -> bytearray:
        self.run.event(("get_buffer", self.pid, sizehint))
        if self.armed.get("get_buffer") == "empty":
            del self.armed["get_buffer"]
            return bytearray()
        self._maybe_raise("get_buffer")
        return self.buf

    def buffer_updated(self, nbytes: int) -> None:
        data = bytes(self.buf[:nbytes])
        self.run.received(self.pid, data)
        self._echo(data)
        self._maybe_raise("buffer_updated")


def _merge(events: list[tuple[Any, ...]]) -> tuple[tuple[Any, ...], ...]:
    """Consecutive deliveries to one protocol as one ``("data", pid, nbytes, sizehints)``."""
    out: list[tuple[Any, ...]] = []
    for ev in events:
        if ev[0] in ("data", "get_buffer"):
            n = ev[2] if ev[0] == "data" else 0
            hints = frozenset([ev[2]]) if ev[0] == "get_buffer" else frozenset()
            last = out[-1] if out else None
            if last is not None and last[0] == "data" and last[1] == ev[1]:
                out[-1] = ("data", ev[1], last[2] + n, last[3] | hints)
            else:
                out.append(("data", ev[1], n, hints))
        else:
            out.append(ev)
    return tuple(
        ("data", ev[1], ev[2], tuple(sorted(ev[3]))) if ev[0] == "data" else ev for ev in out
    )


@dataclass
class _Run:
    """One program on one loop."""

    program: Program
    loop: asyncio.AbstractEventLoop
    events: list[tuple[Any, ...]] = field(default_factory=list)
    trace: Trace = field(default_factory=list)
    protocols: list[_Proto] = field(default_factory=list)
    transport: Any = None
    server: Any = None
    peer: socket.socket | None = None
    tsock: Any = None
    baseline_fds: int = 0
    lost: bool = False
    eof_seen: bool = False
    eof_called: bool = False
    # peer -> transport: what the peer sent, and how much of it reached a protocol, intact
    inbound: bytearray = field(default_factory=bytearray)
    delivered: int = 0
    delivered_ok: bool = True
    # transport -> peer: what was written and filled, in stream order, and what the peer read
    outbound: bytearray = field(default_factory=bytearray)
    fills: list[tuple[int, int]] = field(default_factory=list)
    kernel_full: bool = False
    kernel_pending: int = 0  # bytes written straight into the kernel since the last drain
    peer_read: int = 0
    peer_ok: bool = True
    peer_state: str = "open"  # open, shut (SHUT_WR), reset, closed
    peer_end: Any = None  # what the peer's reading ended with: "eof" or an exception
    # the current batch's callbacks (a handle is None where scheduling it raised)
    handles: list[asyncio.Handle | None] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    ran: set[int] = field(default_factory=set)
    t0: float = 0.0
    timer_events: list[tuple[Any, ...]] = field(default_factory=list)  # the future's lane
    odd_events: list[tuple[Any, ...]] = field(default_factory=list)  # the odd timers' lane
    batch: int = -1
    batches: list[tuple[list[Call], list[asyncio.Handle | None]]] = field(default_factory=list)
    timeouts: int = 0
    signal_raises: bool = False
    # the corners: what hooks and patches saw in this step, the patches to undo, what the
    # loop's runs raised in this step, signals handled, the watchdog of the loop's runs
    seen: dict[str, set[Any]] = field(default_factory=dict)
    patches: list[tuple[type, str, Any]] = field(default_factory=list)
    loop_raised: set[Any] = field(default_factory=set)
    signals: int = 0
    op: str = "other"  # the call of the loop's API (or ``run``) the driver is in
    dog: _Watchdog = field(default_factory=_Watchdog)
    sink: Callable[[tuple[Any, ...]], None] | None = None

    # -- recording -------------------------------------------------------------------------------

    def event(self, ev: tuple[Any, ...]) -> None:
        self.events.append(ev)

    def received(self, pid: int, data: bytes) -> None:
        start = self.delivered
        self.delivered += len(data)
        if data != self.inbound[start : self.delivered]:
            self.delivered_ok = False
        self.event(("data", pid, len(data)))

    def lane(self, call: Call) -> list[tuple[Any, ...]]:
        """Where a callback's events go: the future's lane, the odd timers', or the rest."""
        if call.how == "future":
            return self.timer_events
        return self.odd_events if call.when is not None else self.events

    def on_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        proto = context.get("protocol")
        pid = proto.pid if isinstance(proto, _Proto) else None
        handle = context.get("handle")
        lane = self.events
        for h, c in zip(self.handles, self.calls, strict=False):
            if h is handle and handle is not None:
                lane = self.lane(c)
        ev: tuple[Any, ...] = (
            "handler",
            norm(str(context.get("message"))),
            describe(context.get("exception")),
            tuple(sorted(context)),
            pid,
        )
        how = self.program.handler
        if how == "record":
            lane.append(ev)
            return
        # Whether the handler runs where the error is being handled, as asyncio calls it.
        info = sys.exc_info()[1]
        lane.append((*ev, ("exc_info", describe(info), info is context.get("exception"))))
        if how == "log":
            msg = norm(str(context.get("message")))
            HANDLER_LOG.exception("handler: %s", msg, extra={"fuzz_lane": lane})
        elif how == "raise":
            raise FuzzError("exception handler", lane)

    def record(self, label: Any) -> None:
        """Closes the step: its events (deliveries merged) and the state after it."""
        events = _merge(self.events)
        if self.loop_raised:  # each once: how many runs of the loop met it is timing
            events += (("loop_raised", tuple(sorted(self.loop_raised, key=repr))),)
        entry = (label, events, self.state())
        self.trace.append(entry)
        self.events = []
        self.loop_raised = set()
        self.seen = {}
        if self.sink is not None:
            self.sink(entry)

    def state(self) -> tuple[Any, ...]:
        t = self.transport
        tstate: tuple[Any, ...] = ()
        if t is not None:
            tstate = (
                ("closing", t.is_closing()),
                ("reading", t.is_reading()),
                ("buffer", t.get_write_buffer_size()),
                ("limits", t.get_write_buffer_limits()),
                ("socket_open", self.tsock_fd() >= 0),
                ("repr", norm(repr(t))),
            )
        # What the peer read, but not once its stream ended in a reset: bytes the transport's
        # kernel had taken but not sent yet when it reset the connection are lost, and how
        # many there were depends on how far the peer's reads had opened its window.
        read: int | None = self.peer_read - self.filled_before(self.peer_read)
        if self.peer_end not in (None, "eof"):
            read = None
        corners: tuple[Any, ...] = ()
        if self.program.hooks or self.patches:
            # Which hooks and patches were called in the step (how often is timing), each
            # with the call of the loop's API it was called under (``call_soon``, ``run``, ...),
            # and the callbacks call_soon and call_at were given.
            corners = (
                ("seen", tuple(sorted(self.seen))),
                (
                    "callbacks",
                    tuple(sorted((name, *d) for name, ds in self.seen.items() for d in ds if d)),
                ),
            )
        return (
            *tstate,
            ("delivered", self.delivered, self.delivered_ok),
            ("peer_read", read, self.peer_ok),
            ("peer", self.peer_state, self.peer_end),
            ("fds", fd_count() - self.baseline_fds),
            *corners,
        )

    # -- running the loop ------------------------------------------------------------------------

    def tick(self, timeout: float = 0.0) -> None:
        """One iteration of the loop (``timeout`` 0), or iterations for ``timeout`` seconds."""
        loop = self.loop
        if timeout <= 0:
            self.call("call_soon", loop.call_soon, loop.stop)
            self.run_forever()
            return
        handle = self.call("call_later", loop.call_later, timeout, loop.stop)
        try:
            self.run_forever()
        finally:
            handle.cancel()

    def call(self, op: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, a call of the loop's API named ``op``: the hooks and patches called
        under it are recorded as called by it (``run``: by the loop's run)."""
        prev, self.op = self.op, op
        try:
            return fn(*args)
        finally:
            self.op = prev

    def run_forever(self) -> None:
        """``loop.run_forever()``, bounded (:class:`Hung`); what it raises is recorded."""
        try:
            self.call("run", self.dog.run, self.loop.run_forever)
        except Exception as exc:
            self.loop_raised.add(describe(exc))

    def settle(self, what: str, done: Callable[[], bool], pump: Callable[[], bool]) -> None:
        """Runs the loop until ``done()`` and then nothing new happens; ``pump()`` is the
        peer's part between iterations (True if it moved something)."""
        timeout = SETTLE_TIMEOUT if self.timeouts == 0 else SETTLE_TIMEOUT / 5
        deadline = time.monotonic() + timeout
        progress = self.progress()
        quiet = 0
        while True:
            before = len(self.events)
            moved = pump()
            self.tick(0.0 if quiet < QUIET_TICKS - 1 else 0.001)
            moved = pump() or moved
            if moved or len(self.events) != before:
                quiet = 0
            elif done():
                quiet += 1
                if quiet >= QUIET_TICKS:
                    return
            else:
                quiet = 0
                self.tick(0.0005)
            if quiet == 0:  # never done, or events that never end (bytes moving restart it)
                now, moved_bytes = time.monotonic(), self.progress()
                if moved_bytes != progress:
                    progress, deadline = moved_bytes, now + timeout
                elif now > deadline:
                    self.timeouts += 1
                    self.event(("settle_timeout", what))
                    return

    def progress(self) -> tuple[Any, ...]:
        """What moves while a stream makes progress (not while a loop floods a handler)."""
        return (self.delivered, self.peer_read, len(self.outbound), self.lost, self.eof_seen)

    def stream_settled(self) -> bool:
        """Whether the transport has done what asyncio does with what reached its socket."""
        t = self.transport
        if t is None:
            return False
        if self.lost or self.eof_seen or not t.is_reading():
            return True
        if self.delivered < len(self.inbound):
            return False
        return self.peer_state == "open"

    def batch_done(self) -> bool:
        """Whether each callback of the batch ran, was cancelled or will never run."""
        return all(
            i in self.ran or h is None or h.cancelled() or c.when in NEVER_DUE
            for i, (h, c) in enumerate(zip(self.handles, self.calls, strict=True))
        )

    def no_pump(self) -> bool:
        return False

    # -- the transport's socket, as the kernel sees it -------------------------------------------

    def tsock_fd(self) -> int:
        return -1 if self.tsock is None else int(self.tsock.fileno())

    def filled_before(self, raw: int) -> int:
        """How many of the stream's first ``raw`` bytes were filler."""
        return sum(max(0, min(raw, start + n) - start) for start, n in self.fills)

    def fill(self) -> None:
        """Fills the kernel's side of the transport's stream, so that writes buffer: writes
        the socket's fd until EAGAIN, then shrinks its send buffer far below what it holds,
        so that the kernel takes no more (nor reports it writable) until the peer drains it,
        whatever its timers (delayed ACKs, window probes) move meanwhile."""
        t = self.transport
        fd = self.tsock_fd()
        if (
            self.kernel_full
            or fd < 0
            or self.lost
            or self.eof_called
            or self.peer_state not in ("open", "shut")
            or t.is_closing()
            or t.get_write_buffer_size()
        ):
            return
        assert not os.get_blocking(fd)
        self.tsock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, TRANSPORT_SNDBUF)
        start = len(self.outbound)
        total = 0
        while True:
            try:
                total += os.write(fd, _FILLER)
            except BlockingIOError:
                break
        self.tsock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)
        self.outbound += _FILLER[:1] * total
        self.fills.append((start, total))
        self.kernel_full = True

    def unfill(self) -> None:
        """Gives the transport's socket its send buffer back, for the peer's drain."""
        if self.kernel_full and self.tsock_fd() >= 0:
            self.tsock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, TRANSPORT_SNDBUF)
        self.kernel_full = False
        self.kernel_pending = 0

    def allow(self, size: int) -> int:
        """How much of a write of ``size`` bytes the program makes: all of it when the kernel
        is full (asyncio buffers it all), else what the kernel surely takes whole."""
        if self.kernel_full:
            return size
        size = min(size, DIRECT_WRITES - self.kernel_pending)
        self.kernel_pending += size
        return size

    # -- steps -----------------------------------------------------------------------------------

    def act(self, action: Action, echo: bytes | None = None) -> None:
        """One transport call; its outcome (and the buffer after it) is an event, but for the
        write of an ``echo`` of received bytes."""
        t = self.transport
        name = type(action).__name__
        outcome: Any = None
        op, self.op = self.op, "transport"
        try:
            if isinstance(action, Write):
                for _ in range(action.repeat):
                    if echo is None:
                        data = payload(action.seed, self.allow(action.size))
                    else:
                        data = echo[: self.allow(len(echo))]
                    name = f"Write({len(data)}x{action.repeat})"
                    arg: Any
                    if action.form == "bytearray":
                        arg = bytearray(data)
                    elif action.form == "memoryview":
                        arg = memoryview(data)
                    elif action.form == "strided":  # not contiguous: send(2) cannot take it
                        arg = memoryview(data)[::2]
                        data = data[::2]
                    elif action.form == "empty":
                        arg = data = b""
                    elif action.form == "str":
                        arg = "x" * len(data)
                    else:
                        arg = data
                    t.write(arg)
                    self.outbound += data
            elif isinstance(action, Writelines):
                parts = [
                    payload(action.seed + i, self.allow(n)) for i, n in enumerate(action.sizes)
                ]
                name = f"Writelines({[len(p) for p in parts]})"
                t.writelines([p if i % 2 else bytearray(p) for i, p in enumerate(parts)])
                self.outbound += b"".join(parts)
            elif isinstance(action, WriteEof):
                t.write_eof()
                self.eof_called = True
            elif isinstance(action, Close):
                t.close()
            elif isinstance(action, Abort):
                t.abort()
            elif isinstance(action, PauseReading):
                t.pause_reading()
            elif isinstance(action, ResumeReading):
                t.resume_reading()
            elif isinstance(action, SetLimits):
                t.set_write_buffer_limits(action.high, action.low)
            elif isinstance(action, SetProtocol):
                proto: _Proto
                if action.buffer is None:
                    proto = FuzzProtocol(self, action.keep_open)
                else:
                    proto = FuzzBufferedProtocol(self, action.keep_open, action.buffer)
                t.set_protocol(proto)
                outcome = proto.pid
            elif isinstance(action, Arm):
                self.protocols[-1].armed[action.callback] = action.how
            elif isinstance(action, SetMaxSize):
                t.max_size = action.value
            elif isinstance(action, Patch):
                self.patch(action.target)
        except Exception as exc:
            outcome = describe(exc)
        finally:
            self.op = op
        if echo is None or outcome is not None:
            self.event(("act", name, outcome, t.get_write_buffer_size()))

    def run_call(self, cid: int, batch: int) -> None:
        if batch != self.batch:  # an odd timer of an earlier batch, run late
            self.event(("late_call", batch, cid))
            return
        self.ran.add(cid)
        call = self.calls[cid]
        lane = self.lane(call)
        lane.append(("call", cid))
        for effect in call.effects:
            if isinstance(effect, Raise):
                raise FuzzError(f"callback {cid}", lane)
            if isinstance(effect, Spawn):
                self.schedule(effect.call)
            elif isinstance(effect, Cancel):
                # Within its lane: the timers in the future, or the others.
                mine = [i for i, c in enumerate(self.calls) if self.lane(c) is lane]
                target = mine[effect.index % len(mine)]
                handle = self.handles[target]
                if handle is not None:
                    handle.cancel()
                lane.append(("cancel", target))
            elif isinstance(effect, Signal):
                self.signal_raises = effect.raises
                signal.raise_signal(signal.SIGUSR1)
            else:
                self.act(effect.action)

    def on_signal(self, signum: int, frame: Any) -> None:
        """The program's SIGUSR1 handler (:class:`Signal`)."""
        self.signals += 1
        self.event(("signal", self.signals))
        if self.signal_raises:
            self.signal_raises = False
            raise FuzzError(f"signal handler {self.signals}")

    def schedule(self, call: Call) -> None:
        loop = self.loop
        cid = len(self.calls)
        self.calls.append(call)
        # Distinct whens, far apart: ``order`` first, then the order of scheduling. Those
        # already due are 1,000 s in the past, 10 s per order and 50 ms per callback apart, so
        # that call_later's own reading of the clock cannot reorder them; those in the future
        # are given to call_at, from the batch's start.
        past = self.t0 - 1000.0 + call.order * 10.0 + cid * 0.05
        batch = self.batch
        handle: asyncio.Handle | None
        if call.when is not None:
            try:
                handle = self.schedule_odd(call, cid, past)
            except Exception as exc:
                handle = None
                self.event(("scheduled", cid, describe(exc)))
            else:
                self.event(("scheduled", cid, None))
        elif call.how == "soon":
            handle = self.call("call_soon", loop.call_soon, self.run_call, cid, batch)
        elif call.how == "threadsafe":
            handle = self.call(
                "call_soon_threadsafe", loop.call_soon_threadsafe, self.run_call, cid, batch
            )
        elif call.how == "at":
            handle = self.call("call_at", loop.call_at, past, self.run_call, cid, batch)
        elif call.how == "later":
            delay = past - self.call("time", loop.time)
            handle = self.call("call_later", loop.call_later, delay, self.run_call, cid, batch)
        else:
            when = self.t0 + FUTURE_BASE + call.order * FUTURE_GAP + cid * FUTURE_GAP / 64
            handle = self.call("call_at", loop.call_at, when, self.run_call, cid, batch)
        self.handles.append(handle)
        if call.cancel and handle is not None:
            handle.cancel()

    def schedule_odd(self, call: Call, cid: int, past: float) -> asyncio.Handle:
        """call_at or call_later with an odd time (:data:`ODD_WHENS`); raises what it raises."""
        loop = self.loop
        at = call.how == "at"
        fixed = {
            "nan": float("nan"),
            "inf": float("inf"),
            "-inf": float("-inf"),
            "huge": 1e300,
            "bigint": 10**400,
        }
        value: Any
        if call.when in fixed:
            value = fixed[call.when]
        else:
            now = 0.0 if at else self.call("time", loop.time)
            kind = {"int": int, "fraction": Fraction, "decimal": Decimal}[str(call.when)]
            value = kind(past - now)
        if at:
            return self.call("call_at", loop.call_at, value, self.run_call, cid, self.batch)  # type: ignore[no-any-return]
        return self.call("call_later", loop.call_later, value, self.run_call, cid, self.batch)  # type: ignore[no-any-return]

    def patch(self, target: str) -> None:
        """:class:`Patch`: the wrapper in place; :meth:`unpatch` undoes it."""
        where, attr = PATCH_TARGETS[target]
        owner = _patch_owner(where, self.loop)
        original = getattr(owner, attr)
        self.patches.append((owner, attr, owner.__dict__.get(attr, _MISSING)))
        setattr(owner, attr, _wrapper(target, original))

    def unpatch(self) -> None:
        """Undoes the program's patches, the last first."""
        while self.patches:
            owner, attr, old = self.patches.pop()
            if old is _MISSING:
                delattr(owner, attr)
            else:
                setattr(owner, attr, old)

    def peer_send(self, size: int, seed: int) -> None:
        peer = self.peer
        if peer is None or self.peer_state != "open" or self.lost or self.tsock_fd() < 0:
            self.event(("peer_send", None))
            return
        n = min(size, PEER_PENDING_CAP - (len(self.inbound) - self.delivered))
        if n <= 0:
            self.event(("peer_send", 0))
            return
        data = payload(100 + seed, n)
        try:
            sent = peer.send(data)
        except OSError as exc:
            self.event(("peer_send", describe(exc)))
            return
        self.inbound += data[:sent]
        self.event(("peer_send", sent))
        # Until the kernel has them at the transport's socket: acknowledged, or sent 2 ms ago
        # (an ACK may be delayed; on loopback a segment sent is a segment received).
        start = time.monotonic()
        while _outq(peer.fileno(), termios.TIOCOUTQ):
            elapsed = time.monotonic() - start
            if elapsed > SETTLE_TIMEOUT or (elapsed > 0.002 and not _outq(peer.fileno())):
                break
            time.sleep(0.0002)

    def wait_transport_sees(self, mask: int) -> None:
        fd = self.tsock_fd()
        if fd >= 0:
            _wait_poll(fd, mask, SETTLE_TIMEOUT)

    def peer_pump(self) -> bool:
        """The peer reads what there is; True if it read anything or its stream ended."""
        peer = self.peer
        if peer is None or self.peer_end is not None:
            return False
        moved = False
        while True:
            try:
                chunk = peer.recv(1 << 20)
            except BlockingIOError:
                return moved
            except OSError as exc:
                self.peer_end = describe(exc)
                return True
            if not chunk:
                self.peer_end = "eof"
                return True
            start = self.peer_read
            self.peer_read += len(chunk)
            if chunk != self.outbound[start : self.peer_read]:
                self.peer_ok = False
            moved = True

    def peer_act(self, step: PeerShutWr | PeerReset | PeerClose) -> None:
        peer = self.peer
        if peer is None or self.peer_state in ("reset", "closed"):
            self.event(("peer_gone",))
            return
        if isinstance(step, PeerShutWr):
            if self.peer_state != "open":
                self.event(("peer_shut_already",))
                return
            try:
                peer.shutdown(socket.SHUT_WR)
            except OSError as exc:  # the transport's side has reset the connection
                self.event(("peer_shutdown", describe(exc)))
                return
            self.peer_state = "shut"
            self.wait_transport_sees(select.POLLRDHUP | select.POLLHUP)
            return
        if isinstance(step, PeerReset):
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()
        self.peer = None
        self.peer_state = "reset" if isinstance(step, PeerReset) else "closed"
        self.wait_transport_sees(select.POLLRDHUP | select.POLLHUP | select.POLLERR)

    def drained(self) -> bool:
        if self.peer_end is not None:
            return True
        fd = self.tsock_fd()
        if fd < 0 or self.transport.get_write_buffer_size():
            return False
        return _outq(fd) == 0

    def step(self, step: Step) -> None:
        if isinstance(step, PeerSend):
            self.peer_send(step.size, step.seed)
        elif isinstance(step, PeerShutWr | PeerReset | PeerClose):
            self.peer_act(step)
        elif isinstance(step, PeerDrain):
            if self.peer is None:
                self.event(("peer_gone",))
            else:
                self.unfill()
                self.settle(
                    "drain", lambda: self.drained() and self.stream_settled(), self.peer_pump
                )
            return
        elif isinstance(step, Sched):
            if step.peer_bytes:
                self.peer_send(step.peer_bytes, 7)
            self.handles, self.calls, self.ran, self.timer_events = [], [], set(), []
            self.odd_events = []
            self.batch = len(self.batches)
            self.batches.append((self.calls, self.handles))
            self.t0 = self.call("time", self.loop.time)
            for call in step.calls:
                self.schedule(call)
            self.settle("batch", lambda: self.batch_done() and self.stream_settled(), self.no_pump)
            self.event(("timers", tuple(self.timer_events)))
            if any(c.when is not None for c in self.calls):
                self.event(("odd", tuple(sorted(self.odd_events, key=repr))))
            self.event(
                (
                    "calls",
                    tuple(
                        (i in self.ran, h is not None and h.cancelled())
                        for i, h in enumerate(self.handles)
                    ),
                )
            )
            # The timers never due leave the heap (cancelled, then dropped by an iteration),
            # so that the next batch starts with a heap of its own timers.
            never = [
                h
                for h, c in zip(self.handles, self.calls, strict=True)
                if h is not None and c.when in NEVER_DUE and not h.cancelled()
            ]
            for h in never:
                h.cancel()
            if never:
                self.tick()
            return
        else:
            self.act(step)
        self.settle("step", self.stream_settled, self.no_pump)

    # -- the connection ------------------------------------------------------------------------

    def protocol_factory(self) -> FuzzProtocol | FuzzBufferedProtocol:
        p = self.program
        if p.buffer is None:
            return FuzzProtocol(self, p.keep_open)
        return FuzzBufferedProtocol(self, p.keep_open, p.buffer)

    def connect(self) -> None:
        loop = self.loop
        if self.program.server:
            self.server = self.call(
                "run",
                self.dog.run,
                lambda: loop.run_until_complete(loop.create_server(self.protocol_factory, HOST, 0)),
            )
            listener = self.server.sockets[0]
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, TRANSPORT_RCVBUF)
            self.peer = peer = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, PEER_SNDBUF)
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, PEER_RCVBUF)
            peer.connect(listener.getsockname())
            self.settle("accept", lambda: self.transport is not None, self.no_pump)
        else:
            with socket.create_server((HOST, 0)) as lst:
                lst.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, PEER_SNDBUF)
                lst.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, PEER_RCVBUF)
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, TRANSPORT_RCVBUF)
                    sock.connect(lst.getsockname())
                    self.peer = peer = lst.accept()[0]
                    self.call(
                        "run",
                        self.dog.run,
                        lambda: loop.run_until_complete(
                            loop.create_connection(self.protocol_factory, sock=sock)
                        ),
                    )
                except BaseException:
                    sock.close()
                    raise
            self.settle("connect", lambda: self.transport is not None, self.no_pump)
        peer.setblocking(False)
        t = self.transport
        if t is None:
            self.record("setup")
            return
        self.tsock = t.get_extra_info("socket")
        self.tsock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, TRANSPORT_SNDBUF)
        self.event(
            (
                "extra",
                t.get_extra_info("peername") == peer.getsockname(),
                t.get_extra_info("sockname") == peer.getpeername(),
                self.tsock.fileno() >= 0,
                isinstance(t, selector_events._SelectorSocketTransport),  # type: ignore[attr-defined]
            )
        )
        self.record("setup")

    def teardown(self) -> None:
        t = self.transport
        if t is not None and not self.lost:
            t.abort()
            self.settle("abort", lambda: self.lost, self.no_pump)
        if self.peer is not None:
            self.settle("peer_end", lambda: self.peer_end is not None, self.peer_pump)
            self.peer.close()
            self.peer = None
        if self.server is not None:
            self.server.close()
            self.settle("server_close", lambda: True, self.no_pump)
        self.record("teardown")

    def close_leftovers(self) -> None:
        """After the loop is closed: the socket of a transport it never closed (it hung, or
        never did what asyncio does), closed, so that no ResourceWarning of it lands in a
        later test (the trace has it: the fds open)."""
        t = self.transport
        sock = getattr(t, "_sock", None)
        if isinstance(sock, socket.socket):
            sock.close()
            with contextlib.suppress(AttributeError):
                t._sock = None

    def cleanup(self, run_loop: bool = True) -> None:
        """After an error in the driver or a hung loop (not run again): closes what is
        left."""
        if self.peer is not None:
            self.peer.close()
            self.peer = None
        t = self.transport
        if t is not None and not self.lost:
            t.abort()
        if self.server is not None:
            self.server.close()
        if run_loop:
            for _ in range(3):
                self.tick()


def _write_bound(step: Step | Call) -> int:
    """The most a step (with the callbacks it schedules) may write."""
    if isinstance(step, Write):
        return step.size * step.repeat
    if isinstance(step, Writelines):
        return sum(step.sizes)
    if isinstance(step, Sched):
        return sum(_write_bound(c) for c in step.calls)
    if isinstance(step, Call):
        total = 0
        for eff in step.effects:
            if isinstance(eff, Act):
                total += _write_bound(eff.action)
            elif isinstance(eff, Spawn):
                total += _write_bound(eff.call)
        return total
    return 0


#: Makes a program's loop: ``new_loop()``, or ``new_loop(derive)`` for a program with
#: :attr:`Program.hooks`: an instance of ``derive(base)``, a subclass of the loop's class
#: ``base`` (the caller's choice: asyncio's SelectorEventLoop, fdkit.aio.EventLoop).
LoopFactory = Callable[..., asyncio.AbstractEventLoop]

#: A ``max_size`` from which a program runs in a child process (a loop may abort on it).
ABORT_RISK_MAX_SIZE = 1 << 32
#: How long a program run in a child process may take in all.
CHILD_TIMEOUT = 120.0


def _walk(items: tuple[Any, ...]) -> Iterator[Any]:
    """Every step, call, effect and action of a program's steps (or of calls, effects)."""
    for item in items:
        yield item
        if isinstance(item, Sched):
            yield from _walk(item.calls)
        elif isinstance(item, Call):
            yield from _walk(item.effects)
        elif isinstance(item, Spawn):
            yield from _walk((item.call,))
        elif isinstance(item, Act):
            yield from _walk((item.action,))


def may_abort(program: Program) -> bool:
    """Whether a loop may abort the process on ``program`` (a huge ``max_size``)."""
    return any(
        isinstance(x, SetMaxSize)
        and isinstance(x.value, int)
        and abs(x.value) >= ABORT_RISK_MAX_SIZE
        for x in _walk(program.steps)
    )


def run_program(new_loop: LoopFactory, program: Program) -> Trace:
    """Runs ``program`` on a new loop from ``new_loop`` (closed after); returns its trace.

    Each run of the loop is bounded: past :data:`HANG_TIMEOUT`, the trace ends with the step
    it was in, its last event ``("hung", seconds)``, and the loop is not run again. A program
    a loop may abort on (:func:`may_abort`) runs in a forked child process, whose trace
    ends, if it dies, with ``("crashed", how)``."""
    if may_abort(program):
        return _run_in_child(new_loop, program)
    return _run_here(new_loop, program)


def _run_here(
    new_loop: LoopFactory,
    program: Program,
    sink: Callable[[tuple[Any, ...]], None] | None = None,
) -> Trace:
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()  # no collection pause in the middle of a step
    hooks = program.hooks
    loop = new_loop(lambda base: hooked_class(base, hooks)) if hooks else new_loop()
    run = _Run(program, loop, sink=sink)
    _active.append(run)
    if program.handler != "default":
        loop.set_exception_handler(run.on_exception)
    loop.set_debug(program.debug)
    loop.slow_callback_duration = 3600.0  # debug mode's warning of slow callbacks: timing
    capture = _Capture(run)
    loggers = [logging.getLogger("asyncio"), logging.getLogger("fdkit"), HANDLER_LOG]
    for lg in loggers:
        lg.addHandler(capture)
    asyncio_level = loggers[0].level
    if program.handler == "default":  # what asyncio logs, debug mode's debug logs too
        loggers[0].setLevel(logging.DEBUG)
    old_usr1 = signal.signal(signal.SIGUSR1, run.on_signal)
    label: Any = "setup"
    try:
        with run.dog:
            try:
                run.baseline_fds = fd_count()
                run.connect()
                if run.transport is not None:
                    for i, step in enumerate(program.steps):
                        label = i
                        bound = _write_bound(step)
                        if any(p.echo or p.armed for p in run.protocols):  # may write when called
                            bound += DIRECT_WRITES
                        if bound > DIRECT_WRITES - run.kernel_pending:
                            run.fill()
                        run.step(step)
                        run.record(i)
                    label = "teardown"
                    run.teardown()
            except Hung:
                run.event(("hung", HANG_TIMEOUT))
                run.record(label)
                run.cleanup(run_loop=False)
            except BaseException as exc:
                # A Hung never leaves here: pytest takes a KeyboardInterrupt for ^C.
                with contextlib.suppress(Hung):
                    run.cleanup()
                raise exc
    finally:
        _active.remove(run)
        run.unpatch()
        signal.signal(signal.SIGUSR1, old_usr1)
        loggers[0].setLevel(asyncio_level)
        for lg in loggers:
            lg.removeHandler(capture)
        loop.close()
        run.close_leftovers()
        if gc_was_enabled:
            gc.enable()
    return run.trace


def _send(fd: int, message: Any) -> None:
    data = pickle.dumps(message)
    data = struct.pack("!I", len(data)) + data
    while data:
        data = data[os.write(fd, data) :]


def _run_in_child(new_loop: LoopFactory, program: Program) -> Trace:
    """:func:`_run_here` in a forked child, its trace sent back step by step."""
    r, w = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
        pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 0
        try:
            os.close(r)
            _run_here(new_loop, program, sink=lambda entry: _send(w, ("entry", entry)))
        except BaseException:
            code = 1
            with contextlib.suppress(BaseException):
                _send(w, ("error", traceback.format_exc()))
        finally:
            os._exit(code)
    os.close(w)
    trace: Trace = []
    error: str | None = None
    buf = b""
    deadline = time.monotonic() + CHILD_TIMEOUT
    timed_out = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                timed_out = True
                break
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            buf += chunk
            while len(buf) >= 4:
                (n,) = struct.unpack("!I", buf[:4])
                if len(buf) < 4 + n:
                    break
                kind, value = pickle.loads(buf[4 : 4 + n])
                buf = buf[4 + n :]
                if kind == "entry":
                    trace.append(value)
                else:
                    error = value
    finally:
        os.close(r)
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if timed_out:
        trace.append(("child", (("hung", CHILD_TIMEOUT),), ()))
    elif os.WIFSIGNALED(status):
        how = signal.Signals(os.WTERMSIG(status)).name
        trace.append(("child", (("crashed", how),), ()))
    elif error is not None:
        raise AssertionError(f"the program's run in a child process failed:\n{error}")
    return trace


#: Past this many events in a step, format_trace shows its first and last ones only.
SHOW_EVENTS = 60


def format_trace(trace: Trace) -> str:
    """A trace as text, one line per event (a step's flood of events cut short)."""
    lines = []
    for label, events, state in trace:
        lines.append(f"[{label}]")
        shown = list(events)
        if len(shown) > SHOW_EVENTS:
            cut = len(shown) - SHOW_EVENTS
            shown = [*shown[: SHOW_EVENTS // 2], f"... {cut} more ...", *shown[-SHOW_EVENTS // 2 :]]
        lines.extend(f"    {ev!r}" if not isinstance(ev, str) else f"    {ev}" for ev in shown)
        lines.append(f"    => {state!r}")
    return "\n".join(lines)


def hung(trace: Trace) -> str | None:
    """Where a trace says the loop hung or its process died: the step and what."""
    for label, events, _ in trace:
        for ev in events:
            if isinstance(ev, tuple) and ev and ev[0] in ("hung", "crashed"):
                what = (
                    f"hung (one run of the loop over {ev[1]:g} s)"
                    if ev[0] == "hung"
                    else f"crashed ({ev[1]})"
                )
                return f"the loop {what} at step {label!r}"
    return None
