"""The differential fuzzer's programs, the driver that runs one on a loop, and its trace.

A :class:`Program` is a list of steps: transport calls (writes of 1 B to 1 MiB, writelines,
pause and resume reading, write buffer limits, close, abort, write_eof, set_protocol to a
Protocol or a BufferedProtocol), protocol callbacks armed to raise, to call the transport or
to echo, batches of call_soon/call_at/call_later callbacks that spawn and cancel each other
and call the transport, and the acts of a peer: a plain socket on 127.0.0.1 that sends,
half-closes, resets, closes, reads or never reads; on a loop in debug mode or not.
:func:`run_program` runs one on a new loop and returns its :data:`Trace`: what a program can
see, step by step. The same program on asyncio's loop and on fdkit's must give equal traces.

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
  gives their order apart from the rest.
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import logging
import os
import random
import re
import select
import socket
import struct
import termios
import time
from asyncio import selector_events
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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


Effect = Raise | Spawn | Cancel | Act


@dataclass(frozen=True)
class Call:
    """A callback scheduled by ``how``: ``soon`` (call_soon), ``threadsafe``
    (call_soon_threadsafe), ``at`` and ``later`` (call_at / call_later, already due, ordered
    by ``order``) or ``future`` (call_at, a few ms ahead, ordered by ``order``: it may only
    raise and cancel other ``future`` ones); ``cancel``: cancelled right after it is
    scheduled. Its ``effects`` run in order when it is called."""

    how: str
    order: int = 0
    cancel: bool = False
    effects: tuple[Effect, ...] = ()


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


@dataclass(frozen=True)
class Program:
    """A connection (the transport's side made by ``create_connection(sock=...)``, or
    accepted by ``create_server`` if ``server``), its first protocol (see
    :class:`SetProtocol`), the steps, and the loop's debug mode (``debug``)."""

    steps: tuple[Step, ...]
    server: bool = False
    buffer: int | None = None
    keep_open: bool = False
    debug: bool = False


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
    )
)


def _effects(depth: int, future: bool) -> st.SearchStrategy[tuple[Effect, ...]]:
    one: list[st.SearchStrategy[Effect]] = [st.builds(Cancel, index=st.integers(0, 15))]
    if not future:
        one.append(st.builds(Act, action=actions))
        if depth > 0:
            one.append(st.builds(Spawn, call=_calls(depth - 1, children=True)))
    body = st.lists(st.one_of(*one), max_size=3 if depth > 1 else 2)
    return st.tuples(body, st.booleans()).map(lambda b: (*b[0], Raise()) if b[1] else tuple(b[0]))


def _calls(depth: int, children: bool = False) -> st.SearchStrategy[Call]:
    hows = ["soon", "threadsafe", "at", "later"] + ([] if children else ["future"])

    def build(how: str) -> st.SearchStrategy[Call]:
        return st.builds(
            Call,
            how=st.just(how),
            order=st.integers(0, 9),
            cancel=st.booleans() if not children else st.just(False),
            effects=_effects(depth, future=how == "future"),
        )

    return st.sampled_from(hows).flatmap(build)


sched = st.builds(
    Sched,
    calls=st.lists(_calls(2), min_size=1, max_size=5).map(tuple),
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
)
programs = st.builds(
    Program,
    steps=st.lists(steps, min_size=2, max_size=20).map(tuple),
    server=st.booleans(),
    buffer=st.one_of(st.none(), st.sampled_from([1, 7, 4096, 65536])),
    keep_open=st.booleans(),
    debug=st.sampled_from([False, False, False, True]),
)


# --- the driver -------------------------------------------------------------------------------


class FuzzError(Exception):
    """What an armed callback raises."""


_HEX = re.compile(r"0x[0-9a-fA-F]+")
_FD = re.compile(r"fd=-?\d+")
_TRANSPORT_CLASS = re.compile(r"\b\w*SocketTransport\b")


def norm(text: str) -> str:
    """``text`` without what differs from run to run (addresses, fd numbers), and with the
    transport's class named ``SocketTransport`` (fdkit's is a subclass of asyncio's, named
    otherwise: the setup records that it is asyncio's)."""
    text = _TRANSPORT_CLASS.sub("SocketTransport", _HEX.sub("0x?", text))
    return _FD.sub("fd=N", text)


def describe(exc: BaseException | None) -> tuple[str, str] | None:
    """An exception as a trace shows it: its type's name and its message."""
    if exc is None:
        return None
    return (type(exc).__name__, norm(str(exc)))


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
        self.run.event(("log", record.name, record.levelname, norm(record.getMessage())))


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
    # the current batch's callbacks
    handles: list[asyncio.Handle] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    ran: set[int] = field(default_factory=set)
    t0: float = 0.0
    timer_events: list[tuple[Any, ...]] = field(default_factory=list)  # the future's lane
    timeouts: int = 0

    # -- recording -------------------------------------------------------------------------------

    def event(self, ev: tuple[Any, ...]) -> None:
        self.events.append(ev)

    def received(self, pid: int, data: bytes) -> None:
        start = self.delivered
        self.delivered += len(data)
        if data != self.inbound[start : self.delivered]:
            self.delivered_ok = False
        self.event(("data", pid, len(data)))

    def on_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        proto = context.get("protocol")
        pid = proto.pid if isinstance(proto, _Proto) else None
        handle = context.get("handle")
        future = any(
            h is handle for h, c in zip(self.handles, self.calls, strict=False) if c.how == "future"
        )
        (self.timer_events if future else self.events).append(
            (
                "handler",
                norm(str(context.get("message"))),
                describe(context.get("exception")),
                tuple(sorted(context)),
                pid,
            )
        )

    def record(self, label: Any) -> None:
        """Closes the step: its events (deliveries merged) and the state after it."""
        self.trace.append((label, _merge(self.events), self.state()))
        self.events = []

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
        return (
            *tstate,
            ("delivered", self.delivered, self.delivered_ok),
            ("peer_read", read, self.peer_ok),
            ("peer", self.peer_state, self.peer_end),
            ("fds", fd_count() - self.baseline_fds),
        )

    # -- running the loop ------------------------------------------------------------------------

    def tick(self, timeout: float = 0.0) -> None:
        """One iteration of the loop (``timeout`` 0), or iterations for ``timeout`` seconds."""
        loop = self.loop
        if timeout <= 0:
            loop.call_soon(loop.stop)
            loop.run_forever()
            return
        handle = loop.call_later(timeout, loop.stop)
        try:
            loop.run_forever()
        finally:
            handle.cancel()

    def settle(self, what: str, done: Callable[[], bool], pump: Callable[[], bool]) -> None:
        """Runs the loop until ``done()`` and then nothing new happens; ``pump()`` is the
        peer's part between iterations (True if it moved something)."""
        timeout = SETTLE_TIMEOUT if self.timeouts == 0 else SETTLE_TIMEOUT / 5
        deadline = time.monotonic() + timeout
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
            elif time.monotonic() > deadline:
                self.timeouts += 1
                self.event(("settle_timeout", what))
                return
            else:
                quiet = 0
                self.tick(0.0005)

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
        return all(i in self.ran or h.cancelled() for i, h in enumerate(self.handles))

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
        except Exception as exc:
            outcome = describe(exc)
        if echo is None or outcome is not None:
            self.event(("act", name, outcome, t.get_write_buffer_size()))

    def run_call(self, cid: int) -> None:
        self.ran.add(cid)
        future = self.calls[cid].how == "future"
        lane = self.timer_events if future else self.events
        lane.append(("call", cid))
        for effect in self.calls[cid].effects:
            if isinstance(effect, Raise):
                raise FuzzError(f"callback {cid}")
            if isinstance(effect, Spawn):
                self.schedule(effect.call)
            elif isinstance(effect, Cancel):
                # Within its lane: the timers in the future, or the others.
                mine = [i for i, c in enumerate(self.calls) if (c.how == "future") == future]
                target = mine[effect.index % len(mine)]
                self.handles[target].cancel()
                lane.append(("cancel", target))
            else:
                self.act(effect.action)

    def schedule(self, call: Call) -> None:
        loop = self.loop
        cid = len(self.calls)
        self.calls.append(call)
        # Distinct whens, far apart: ``order`` first, then the order of scheduling. Those
        # already due are 1,000 s in the past, 10 s per order and 50 ms per callback apart, so
        # that call_later's own reading of the clock cannot reorder them; those in the future
        # are given to call_at, from the batch's start.
        past = self.t0 - 1000.0 + call.order * 10.0 + cid * 0.05
        handle: asyncio.Handle
        if call.how == "soon":
            handle = loop.call_soon(self.run_call, cid)
        elif call.how == "threadsafe":
            handle = loop.call_soon_threadsafe(self.run_call, cid)
        elif call.how == "at":
            handle = loop.call_at(past, self.run_call, cid)
        elif call.how == "later":
            handle = loop.call_later(past - loop.time(), self.run_call, cid)
        else:
            when = self.t0 + FUTURE_BASE + call.order * FUTURE_GAP + cid * FUTURE_GAP / 64
            handle = loop.call_at(when, self.run_call, cid)
        self.handles.append(handle)
        if call.cancel:
            handle.cancel()

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
            self.t0 = self.loop.time()
            for call in step.calls:
                self.schedule(call)
            self.settle("batch", lambda: self.batch_done() and self.stream_settled(), self.no_pump)
            self.event(("timers", tuple(self.timer_events)))
            self.event(
                ("calls", tuple((i in self.ran, h.cancelled()) for i, h in enumerate(self.handles)))
            )
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
            self.server = loop.run_until_complete(
                loop.create_server(self.protocol_factory, HOST, 0)
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
                    loop.run_until_complete(
                        loop.create_connection(self.protocol_factory, sock=sock)
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

    def cleanup(self) -> None:
        """After an error in the driver: closes what is left."""
        if self.peer is not None:
            self.peer.close()
        t = self.transport
        if t is not None and not self.lost:
            t.abort()
        if self.server is not None:
            self.server.close()
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


def run_program(new_loop: Callable[[], asyncio.AbstractEventLoop], program: Program) -> Trace:
    """Runs ``program`` on a new loop from ``new_loop`` (closed after); returns its trace."""
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()  # no collection pause in the middle of a step
    loop = new_loop()
    run = _Run(program, loop)
    loop.set_exception_handler(run.on_exception)
    loop.set_debug(program.debug)
    loop.slow_callback_duration = 3600.0  # debug mode's warning of slow callbacks: timing
    capture = _Capture(run)
    loggers = [logging.getLogger("asyncio"), logging.getLogger("fdkit")]
    for lg in loggers:
        lg.addHandler(capture)
    try:
        run.baseline_fds = fd_count()
        run.connect()
        if run.transport is not None:
            for i, step in enumerate(program.steps):
                bound = _write_bound(step)
                if any(p.echo or p.armed for p in run.protocols):  # may write when called
                    bound += DIRECT_WRITES
                if bound > DIRECT_WRITES - run.kernel_pending:
                    run.fill()
                run.step(step)
                run.record(i)
            run.teardown()
    except BaseException:
        run.cleanup()
        raise
    finally:
        for lg in loggers:
            lg.removeHandler(capture)
        loop.close()
        if gc_was_enabled:
            gc.enable()
    return run.trace


def format_trace(trace: Trace) -> str:
    """A trace as text, one line per event."""
    lines = []
    for label, events, state in trace:
        lines.append(f"[{label}]")
        lines.extend(f"    {ev!r}" for ev in events)
        lines.append(f"    => {state!r}")
    return "\n".join(lines)
