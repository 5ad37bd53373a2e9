"""The TLS differential fuzzer's programs, the driver that runs one in a child process, and its
trace (``tests/test_aio_tls_fuzz.py`` writes the programs with hypothesis).

A :class:`Program` is a list of steps over ONE TLS connection, both of whose ends are on the
loop under test: a server made by ``loop.create_server(..., ssl=server_ctx)`` and a client made
by ``loop.create_connection(..., ssl=client_ctx, server_hostname="localhost")``, on 127.0.0.1,
with certificates of a throwaway CA (``trustme``, made once per child). A step acts on one end:
``write`` (1 B to 1 MiB, as bytes, bytearray, memoryview, a memoryview that is not contiguous,
an empty bytes or a str), ``writelines``, ``pause_reading``/``resume_reading``,
``set_write_buffer_limits`` (0 included, invalid ones too), ``get_write_buffer_size``,
``close``, ``abort``, ``write_eof`` (refused on TLS), ``set_protocol`` of a new Protocol or
BufferedProtocol (whose ``get_buffer`` returns a memoryview: asyncio's own
``_do_read__buffered`` slices the buffer it gets, and a bytearray's slice is a copy), a protocol
callback armed to react once (data_received, get_buffer, buffer_updated, eof_received,
connection_lost: raise an Exception or a BaseException, write, close, abort, pause reading;
get_buffer: return an empty buffer); or it runs the loop: one iteration (what ``await
asyncio.sleep(0)`` gives the loop) or until quiet. The teardown runs the loop until quiet,
aborts both ends and closes the server.

:func:`run_program` runs a program in a child process (forked, for each run, by a fork server
that imported asyncio, ssl, trustme and fdkit once; the certificates are made in the child) on
asyncio's ``SelectorEventLoop`` or on fdkit's loop with an engine, and returns its
:data:`Trace`, one entry per step: for each end, its protocols' callbacks in order (made; data
as one total per run of consecutive deliveries, every byte checked against what the other end
wrote; eof; lost with the exception's type, message and traceback's functions), the exception
handler's contexts that concern it (message, exception type and message, the context's keys,
the type names of transport and protocol, the traceback's functions; hex addresses masked)
and what each call of the step returned or raised (with what it logged); apart, in order, its
pause_writing/resume_writing; what was logged while the loop ran (a sorted list); then the
state of each end (is_closing, is_reading, the write buffer's size and limits, the read
buffer's size, the socket open or not, bytes delivered). A child that runs past
:data:`CHILD_TIMEOUT` is killed and its trace ends with ``["child", "hung", ...]``; one run
of its loop past :data:`HANG_TIMEOUT` ends it with a ``hung`` log at the step it was in; a
child killed by a signal, with ``["child", "crashed", signal]``.

A trace holds only what asyncio defines, whatever the kernel's timing:

- **One thing moves at a time.** The driver runs the loop by hand, one iteration at a time
  (``call_soon(stop)``, ``run_forever``), and makes its calls while the loop is stopped.
  After each call and each iteration it waits, without running the loop, until the kernel has
  taken what was sent to the other end's socket (``TCP_INFO``'s bytes received there against
  what this end's socket transmitted; a closed socket's FIN or RST seen by ``poll``). So each
  iteration meets all the I/O there is, as asyncio does on an idle machine.
- **Bytes, not chunks.** How records are split between ``data_received`` calls is timing:
  consecutive deliveries are one event of their total; ``get_buffer``'s size hint (the SSL
  protocol's incoming buffer) is left out.
- **Writes the kernel surely takes whole, or surely does not.** How much of a write ``send(2)``
  takes is the kernel's business; that is what pauses asyncio's SSL protocol (its socket
  transport's buffer over 64 KiB), and what a TLS transport's write buffer size and flow
  control show. Both sockets' buffers are fixed (:data:`SNDBUF`, :data:`RCVBUF`), so the
  kernel takes at most ``2 * SNDBUF`` and a bit per ``send``. While a direction has at most
  :data:`CLEAR_BUDGET` encrypted bytes the other end's app has not got, every write is taken
  whole ("clear"): its buffer stays empty. A write past the budget is a flood, allowed only
  while the receiving end reads with nothing armed on its data path, and the loop does not
  run until it is drained: the steps that may follow it are writes, ``get_write_buffer_size``
  and ``set_write_buffer_limits`` on either end; any other step first runs the loop until all
  of it arrived (a step of its own, ``drain``). A flood of at least :data:`SURE_PAUSE` bytes
  surely pauses the SSL protocol's writing, so the writes after it fill its outgoing buffer
  exactly ("paused"); one between the two leaves the sender's write buffer size and flow
  control unknown until the drain ("unsure": the trace says ``"?"`` and ``("flow",
  "coarse")``). Elsewhere writes are cut to what fits the budget (the trace has the size
  written).
- **Flow control: what asyncio defines.** pause_writing/resume_writing are an end's lane of
  their own (how they interleave with data arriving is timing). An end whose high-water mark
  is 0 pauses or resumes on every read; how many reads a drained flood took is timing, so its
  flow events are not compared from such a drain on, until a ``set_write_buffer_limits`` with
  a high-water mark above 0 while its buffer is empty (the flow events of that call included).
- **Runs until quiet end quiet.** "Until quiet" runs the loop until all bytes written arrived
  (or cannot: the receiver paused, closing, or gone) and nothing changed for
  :data:`QUIET_TICKS` iterations: callbacks, bytes delivered, sockets, the kernel's counters.
  No timer of asyncio's TLS (handshake and shutdown timeouts) comes due in a program.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import random
import re
import select
import signal
import socket
import ssl
import struct
import subprocess
import sys
import termios
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

HOST = "127.0.0.1"
ENDS = ("client", "server")

#: One trace entry per step: ``[label, step, client, server, loop, state]`` (plain JSON data).
Trace = list[list[Any]]

#: Both sockets' buffers, set once the connection is up (the kernel doubles them; fixed, they
#: are not autotuned): one ``send`` takes at most ``2 * SNDBUF`` and a segment.
SNDBUF = 64 * 1024
RCVBUF = 128 * 1024
#: TLS 1.3 records: at most this much data each, and their overhead (header, type, tag) with
#: room to spare.
RECORD = 16384
RECORD_OVERHEAD = 32
#: Encrypted bytes of a direction its receiving app has not got that the kernel surely takes
#: whole, and sends at once (well under one ``send``'s ``2 * SNDBUF`` and the receiver's
#: window), without its SSL protocol pausing its socket's reading (256 KiB).
CLEAR_BUDGET = 64 * 1024
#: A write of at least this much from a clear direction surely leaves more than the socket
#: transport's high-water mark (64 KiB) in its buffer: SSL writing pauses.
SURE_PAUSE = 320 * 1024
#: Iterations with nothing new that make the loop quiet.
QUIET_TICKS = 4
#: How long a run until quiet may go on with nothing moving (a loop that never gets there).
QUIET_TIMEOUT = 3.0
#: How long the driver waits for the kernel to deliver what was sent (it takes microseconds).
SYNC_TIMEOUT = 1.0
#: How long one run of the loop may take (each takes microseconds), and a child in all.
HANG_TIMEOUT = 5.0
CHILD_TIMEOUT = 90.0


# --- the program model ------------------------------------------------------------------------


@dataclass(frozen=True)
class Write:
    """``transport.write`` of ``size`` bytes as ``form`` (bytes, bytearray, memoryview,
    ``strided``: a memoryview of every other byte, not contiguous; ``empty``: ``b""``;
    ``str``: TypeError), ``repeat`` times (asyncio logs each write past the 5th on a closed
    TLS transport)."""

    end: str
    size: int
    form: str = "bytes"
    seed: int = 0
    repeat: int = 1


@dataclass(frozen=True)
class Writelines:
    """``transport.writelines`` of buffers of these sizes (bytes and bytearray in turn)."""

    end: str
    sizes: tuple[int, ...]
    seed: int = 0


@dataclass(frozen=True)
class WriteEof:
    """``transport.write_eof()`` (NotImplementedError on TLS)."""

    end: str


@dataclass(frozen=True)
class Close:
    """``transport.close()`` (a second one drops the transport's SSL protocol)."""

    end: str


@dataclass(frozen=True)
class Abort:
    """``transport.abort()``."""

    end: str


@dataclass(frozen=True)
class PauseReading:
    """``transport.pause_reading()``."""

    end: str


@dataclass(frozen=True)
class ResumeReading:
    """``transport.resume_reading()``."""

    end: str


@dataclass(frozen=True)
class SetLimits:
    """``transport.set_write_buffer_limits(high, low)`` (may be invalid: ValueError)."""

    end: str
    high: int | None
    low: int | None


@dataclass(frozen=True)
class GetBufferSize:
    """``transport.get_write_buffer_size()``."""

    end: str


@dataclass(frozen=True)
class SetProtocol:
    """``transport.set_protocol`` of a new protocol: a BufferedProtocol with a buffer of
    ``buffer`` bytes if ``buffer`` is set, else a Protocol; ``keep_open`` is what its
    eof_received returns (asyncio logs that it has no effect on TLS)."""

    end: str
    buffer: int | None = None
    keep_open: bool = False


@dataclass(frozen=True)
class Arm:
    """The end's current protocol's next call of ``callback`` (:data:`CALLBACKS`) reacts
    (:data:`REACTIONS`): raises an Exception (``raise``) or a BaseException that is not one
    (``base``: asyncio's ``_do_read`` lets it through, to the socket transport), or calls the
    transport before it returns (``write`` 100 bytes, ``close``, ``abort``, ``pause``
    reading); ``empty`` (get_buffer only): returns an empty buffer."""

    end: str
    callback: str
    how: str = "raise"


@dataclass(frozen=True)
class Sleep:
    """One iteration of the loop: what ``await asyncio.sleep(0)`` gives it."""


@dataclass(frozen=True)
class Quiet:
    """Runs the loop until quiet (see the module's docstring)."""


Step = (
    Write
    | Writelines
    | WriteEof
    | Close
    | Abort
    | PauseReading
    | ResumeReading
    | SetLimits
    | GetBufferSize
    | SetProtocol
    | Arm
    | Sleep
    | Quiet
)

#: The protocol callbacks that can be armed; the first three are on the data path.
CALLBACKS = ("data_received", "get_buffer", "buffer_updated", "eof_received", "connection_lost")
DATA_PATH = frozenset(CALLBACKS[:3])
#: Their reactions.
REACTIONS = ("raise", "base", "write", "close", "abort", "pause", "empty")


@dataclass(frozen=True)
class Program:
    """The steps, and each end's first protocol: a BufferedProtocol with a buffer of
    ``client_buffer`` (``server_buffer``) bytes if set, else a Protocol."""

    steps: tuple[Step, ...]
    client_buffer: int | None = None
    server_buffer: int | None = None
    keep_open: bool = False


def enc_bound(n: int) -> int:
    """The most bytes ``n`` bytes of data given to one ``SSLObject.write`` take as records."""
    return n + RECORD_OVERHEAD * (-(-n // RECORD)) if n > 0 else 0


def _fit(room: int) -> int:
    """The most data whose records fit in ``room`` bytes."""
    n = max(0, room - RECORD_OVERHEAD * (-(-room // RECORD)))
    while enc_bound(n + 1) <= room:
        n += 1
    return n


def _flood_compatible(step: Step) -> bool:
    """Whether a step may come while a flood is in flight (it never runs the loop, nor breaks
    the connection)."""
    if isinstance(step, Write):
        return step.form != "strided"
    return isinstance(step, Writelines | GetBufferSize | SetLimits | WriteEof)


# --- what a trace shows -----------------------------------------------------------------------

_HEX = re.compile(r"0x[0-9a-fA-F]+")
_FD = re.compile(r"fd=-?\d+")
_PORT = re.compile(r"'127\.0\.0\.1', \d+")


def norm(text: str) -> str:
    """``text`` without what differs from run to run: addresses, fd numbers, ports."""
    return _PORT.sub("'127.0.0.1', N", _FD.sub("fd=N", _HEX.sub("0x?", text)))


def describe(exc: BaseException | None) -> list[str] | None:
    """An exception as a trace shows it: its type's name and its message."""
    if exc is None:
        return None
    return [type(exc).__name__, norm(str(exc))]


def tb_names(exc: BaseException | None) -> list[str] | None:
    """The functions of an exception's traceback, outermost first (the native record path
    gives an exception the frames asyncio's own methods would have)."""
    if exc is None:
        return None
    return [f.name for f in traceback.extract_tb(exc.__traceback__)]


def _type_name(obj: Any) -> str | None:
    return None if obj is None else type(obj).__name__


_BLOCK = random.Random(7).randbytes((1 << 20) + 65536)


def payload(seed: int, size: int) -> bytes:
    """``size`` (at most 1 MiB) bytes made from ``seed``, the same every run."""
    start = (seed * 4099) % 65536
    return _BLOCK[start : start + size]


# --- the kernel's side ------------------------------------------------------------------------

#: ioctl(2): the bytes of a TCP socket's send queue not sent yet (linux/sockios.h).
SIOCOUTQNSD = 0x894B


def _ioctl_int(fd: int, request: int) -> int:
    return int(struct.unpack("i", fcntl.ioctl(fd, request, b"\0\0\0\0"))[0])


def _tcp_counters(sock: Any) -> tuple[int, int]:
    """``(sent, received)``: the stream's bytes this socket transmitted (acknowledged or in
    flight, not those waiting in its send queue) and received (``TCP_INFO``'s
    ``tcpi_bytes_acked`` and ``tcpi_bytes_received``)."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
    acked, received = struct.unpack_from("QQ", info, 120)
    fd = sock.fileno()
    unacked = _ioctl_int(fd, termios.TIOCOUTQ) - _ioctl_int(fd, SIOCOUTQNSD)
    return acked + unacked, received


# --- the driver (the child process) -----------------------------------------------------------


class Hung(KeyboardInterrupt):
    """What the watchdog raises in a run of the loop past :data:`HANG_TIMEOUT`."""


class _Watchdog:
    """Bounds each run of the loop with SIGALRM: its Python handler runs wherever the loop
    checks for signals, and raises :class:`Hung`."""

    def __init__(self) -> None:
        signal.signal(signal.SIGALRM, self._fire)
        self.armed = False

    def _fire(self, signum: int, frame: Any) -> None:
        if self.armed:
            self.armed = False
            raise Hung(f"one run of the loop took over {HANG_TIMEOUT:g} s")

    def run(self, call: Callable[[], Any]) -> Any:
        if self.armed:
            return call()
        self.armed = True
        signal.setitimer(signal.ITIMER_REAL, HANG_TIMEOUT)
        try:
            return call()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            self.armed = False


class _Proto:
    """What both protocol classes share: recording, and the armed callbacks."""

    end: _End
    pid: int
    keep_open: bool
    armed: dict[str, str]

    def _setup(self, end: _End, keep_open: bool) -> None:
        self.end = end
        self.pid = len(end.protocols)
        self.keep_open = keep_open
        self.armed = {}
        end.protocols.append(self)
        end.run.owners[id(self)] = (self, end.name)

    def _react(self, callback: str) -> None:
        how = self.armed.pop(callback, None)
        if how is None:
            return
        end = self.end
        end.event(["reacts", self.pid, callback, how])
        if how == "raise":
            raise FuzzError(end.name, f"{callback} of protocol {self.pid}")
        if how == "base":
            raise FuzzBaseError(end.name, f"{callback} of protocol {self.pid}")
        reactions: dict[str, Step] = {
            "write": Write(end.name, 100, seed=self.pid),
            "close": Close(end.name),
            "abort": Abort(end.name),
            "pause": PauseReading(end.name),
        }
        action = reactions.get(how)
        if action is not None:
            end.run.act(action)

    def connection_made(self, transport: Any) -> None:
        self.end.made(self.pid, transport)

    def eof_received(self) -> bool:
        self.end.event(["eof", self.pid])
        self._react("eof_received")
        return self.keep_open

    def connection_lost(self, exc: Exception | None) -> None:
        self.end.lost = True
        self.end.event(["lost", self.pid, describe(exc), tb_names(exc)])
        self._react("connection_lost")

    def pause_writing(self) -> None:
        self.end.flow_event(["pause_writing", self.pid])

    def resume_writing(self) -> None:
        self.end.flow_event(["resume_writing", self.pid])


class FuzzProtocol(_Proto, asyncio.Protocol):
    """A Protocol that records each callback."""

    def __init__(self, end: _End, keep_open: bool) -> None:
        self._setup(end, keep_open)

    def data_received(self, data: bytes) -> None:
        self.end.received(self.pid, data)
        self._react("data_received")


class FuzzBufferedProtocol(_Proto, asyncio.BufferedProtocol):
    """A BufferedProtocol that records each callback; its buffer has ``size`` bytes, given as
    a memoryview."""

    def __init__(self, end: _End, keep_open: bool, size: int) -> None:
        self._setup(end, keep_open)
        self.buf = bytearray(size)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.armed.get("get_buffer") == "empty":
            del self.armed["get_buffer"]
            self.end.event(["reacts", self.pid, "get_buffer", "empty"])
            return memoryview(bytearray())
        self._react("get_buffer")
        return memoryview(self.buf)

    def buffer_updated(self, nbytes: int) -> None:
        self.end.received(self.pid, bytes(self.buf[:nbytes]))
        self._react("buffer_updated")


class FuzzError(Exception):
    """What an armed callback of ``end``'s protocol raises."""

    def __init__(self, end: str, message: str) -> None:
        super().__init__(message)
        self.end = end


class FuzzBaseError(BaseException):
    """What an armed callback of ``end``'s protocol raises that is not an Exception."""

    def __init__(self, end: str, message: str) -> None:
        super().__init__(message)
        self.end = end


@dataclass
class _End:
    """One end of the connection, as the driver sees it."""

    run: _Run
    name: str
    protocols: list[_Proto] = field(default_factory=list)
    transport: Any = None  # the app transport
    sock: Any = None  # its socket (the socket transport's TransportSocket)
    events: list[list[Any]] = field(default_factory=list)
    flow: list[list[Any]] = field(default_factory=list)
    lost: bool = False
    # what this end wrote (its stream, as accepted), and the records of each write still in
    # flight: (end offset in the stream, encrypted size bound)
    stream: bytearray = field(default_factory=bytearray)
    writes: list[tuple[int, int]] = field(default_factory=list)
    # what it got of the other end's stream, and whether every byte was right
    delivered: int = 0
    delivered_ok: bool = True
    # its writing: clear, paused (SSL writing surely paused by a flood) or unsure
    mode: str = "clear"
    flow_exact: bool = True
    # the socket: open when last looked at; the FIN or RST of its close seen by the peer
    open: bool = True
    close_seen: bool = True

    @property
    def peer(self) -> _End:
        return self.run.ends[1 - ENDS.index(self.name)]

    def event(self, ev: list[Any]) -> None:
        self.events.append(ev)

    def flow_event(self, ev: list[Any]) -> None:
        if self.flow_exact:
            self.flow.append(ev)

    def made(self, pid: int, transport: Any) -> None:
        self.event(["made", pid])
        self.transport = transport

    def received(self, pid: int, data: bytes) -> None:
        start = self.delivered
        self.delivered += len(data)
        if data != self.peer.stream[start : self.delivered]:
            self.delivered_ok = False
        last = self.events[-1] if self.events else None
        if last is not None and last[0] == "data" and last[1] == pid:
            last[2] += len(data)
        else:
            self.event(["data", pid, len(data)])

    def protocol(self) -> _Proto:
        return self.protocols[-1]

    def in_flight(self) -> int:
        """The encrypted size bound of what this end wrote that the other's app has not got."""
        got = self.peer.delivered
        return sum(enc for end, enc in self.writes if end > got)

    def forget_delivered(self) -> None:
        got = self.peer.delivered
        self.writes = [w for w in self.writes if w[0] > got]
        if not self.writes and self.mode != "clear":
            self.mode = "clear"

    def fileno(self) -> int:
        return -1 if self.sock is None else int(self.sock.fileno())

    def safe(self, call: Callable[[], Any]) -> Any:
        """``call()``'s value, or what it raised."""
        try:
            return call()
        except Exception as exc:
            return ["raised", *(describe(exc) or [])]

    def high_water(self) -> int | None:
        limits = self.safe(lambda: self.transport.get_write_buffer_limits())
        return limits[1] if isinstance(limits, tuple) else None

    def state(self) -> list[Any]:
        t = self.transport
        if t is None:
            return ["no transport"]
        size: Any = "?" if self.mode == "unsure" else self.safe(t.get_write_buffer_size)
        return [
            ["closing", self.safe(t.is_closing)],
            ["reading", self.safe(t.is_reading)],
            ["buffer", size],
            ["limits", self.safe(lambda: list(t.get_write_buffer_limits()))],
            ["read_buffer", self.safe(t.get_read_buffer_size)],
            ["socket_open", self.fileno() >= 0],
            ["delivered", self.delivered, self.delivered_ok],
            ["flow", "exact" if self.flow_exact else "coarse"],
        ]


@dataclass
class _Run:
    """One program on one loop."""

    program: Program
    loop: asyncio.AbstractEventLoop
    sink: Callable[[list[Any]], None]
    ends: list[_End] = field(default_factory=list)
    # id -> (object, end name): what the exception handler's contexts are attributed by
    owners: dict[int, tuple[Any, str]] = field(default_factory=dict)
    logs: list[list[Any]] = field(default_factory=list)  # what the loop's runs logged
    calling: _End | None = None  # the end whose call the driver is making
    server: Any = None
    base: list[int] = field(default_factory=lambda: [0, 0])
    dog: _Watchdog = field(default_factory=_Watchdog)
    sync_timeouts: int = 0
    baseline_fds: int = 0
    running: bool = False  # the loop is: a callback's write may not flood

    def __post_init__(self) -> None:
        self.ends = [_End(self, name) for name in ENDS]

    # -- recording -------------------------------------------------------------------------------

    def attribute(self, *objs: Any) -> _End | None:
        for obj in objs:
            owner = self.owners.get(id(obj))
            if owner is not None and owner[0] is obj:
                return self.ends[ENDS.index(owner[1])]
        return None

    def on_exception(self, loop: Any, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        ev = [
            "handler",
            norm(str(context.get("message"))),
            describe(exc),
            sorted(context),
            _type_name(context.get("transport")),
            _type_name(context.get("protocol")),
            tb_names(exc),
        ]
        end = self.attribute(context.get("protocol"), context.get("transport"))
        if end is None and isinstance(exc, FuzzError | FuzzBaseError):  # the end's callback
            end = self.ends[ENDS.index(exc.end)]
        if end is None:
            self.logs.append(ev)
        else:
            end.event(ev)

    def on_log(self, record: logging.LogRecord) -> None:
        ev = ["log", record.name, record.levelname, norm(record.getMessage())]
        if self.calling is not None:
            self.calling.event(ev)
        else:
            self.logs.append(ev)

    def record(self, label: Any, step: Step | str) -> None:
        """Closes a step: its events, and the state after it."""
        for end in self.ends:
            end.forget_delivered()
        entry = [label, repr(step) if not isinstance(step, str) else step]
        for end in self.ends:
            entry.append({"events": end.events, "flow": end.flow})
            end.events, end.flow = [], []
        entry.append(sorted(self.logs, key=json.dumps))
        self.logs = []
        entry.append({end.name: end.state() for end in self.ends})
        self.sink(entry)

    # -- running the loop ------------------------------------------------------------------------

    def tick(self) -> None:
        """One iteration of the loop, then the kernel's delivery of what it sent."""
        self.loop.call_soon(self.loop.stop)
        self.running = True
        try:
            self.dog.run(self.loop.run_forever)
        except (Exception, FuzzBaseError) as exc:
            self.logs.append(["loop_raised", describe(exc), tb_names(exc)])
        finally:
            self.running = False
        self.sync()

    def synced(self) -> bool:
        """Whether the kernel has delivered what each socket sent: the other socket received
        each byte transmitted; a closed socket's FIN or RST reached the other."""
        ok = True
        for i, a in enumerate(self.ends):
            b = a.peer
            fa, fb = a.fileno(), b.fileno()
            if fa >= 0 and fb >= 0:
                sent, _ = _tcp_counters(a.sock)
                _, got = _tcp_counters(b.sock)
                if got + self.base[i] < sent:
                    ok = False
            if fa < 0 and a.open:
                a.open = False
                a.close_seen = False
            if not a.close_seen:
                if fb < 0:
                    a.close_seen = True
                else:
                    mask = select.POLLRDHUP | select.POLLHUP | select.POLLERR
                    poller = select.poll()
                    poller.register(fb, mask)
                    if poller.poll(0):
                        a.close_seen = True
                    else:
                        ok = False
        return ok

    def calibrate(self) -> None:
        """Measures what each socket counts as transmitted beyond what the other counts as
        received once all arrived (the SYN, for the side that connected): the counters,
        stable for a few milliseconds with the loop stopped."""
        last: list[int] = []
        since = time.monotonic()
        deadline = since + SYNC_TIMEOUT
        while time.monotonic() < deadline:
            now = [_tcp_counters(a.sock)[0] - _tcp_counters(a.peer.sock)[1] for a in self.ends]
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since > 0.005:
                break
            time.sleep(0.0002)
        self.base = last

    def sync(self) -> None:
        deadline = time.monotonic() + SYNC_TIMEOUT
        while not self.synced():
            if time.monotonic() > deadline:
                self.sync_timeouts += 1
                # What a socket left unsent when it closed may never arrive (a window
                # closed): given up on, that close counts as seen.
                for end in self.ends:
                    end.close_seen = True
                return
            time.sleep(0.0001)

    def signature(self) -> tuple[Any, ...]:
        """What changes while the loop does anything (see :meth:`quiet`)."""
        sig: list[Any] = [len(self.logs)]
        for end in self.ends:
            t = end.transport
            sig += [len(end.events), len(end.flow), end.delivered, end.lost, end.fileno() >= 0]
            sig.append(end.safe(t.is_closing) if t is not None else None)
            sig.append(end.safe(t.get_read_buffer_size) if t is not None else None)
            if end.fileno() >= 0:
                sig.append(_tcp_counters(end.sock))
        return tuple(repr(s) for s in sig)

    def settled(self, sender: _End) -> bool:
        """Whether all a direction can deliver was delivered."""
        r = sender.peer
        if r.delivered >= len(sender.stream) or r.lost or sender.lost:
            return True
        if r.transport is None or sender.transport is None:
            return True
        return bool(
            r.safe(r.transport.is_closing) is not False
            or r.safe(r.transport.is_reading) is not True
        )

    def quiet(self) -> None:
        """Runs the loop until all bytes written arrived (or cannot), and nothing changed for
        :data:`QUIET_TICKS` iterations."""
        deadline = time.monotonic() + QUIET_TIMEOUT
        sig = self.signature()
        calm = 0
        while True:
            self.tick()
            now = self.signature()
            if now != sig:
                sig, calm = now, 0
                deadline = time.monotonic() + QUIET_TIMEOUT
            elif all(self.settled(end) for end in self.ends):
                calm += 1
                if calm >= QUIET_TICKS:
                    break
            else:
                calm = 0
                time.sleep(0.0005)
            if time.monotonic() > deadline:
                self.logs.append(["quiet_timeout"])
                break

    # -- the connection --------------------------------------------------------------------------

    def new_protocol(
        self, end: _End, buffer: int | None, keep_open: bool
    ) -> FuzzProtocol | FuzzBufferedProtocol:
        if buffer is None:
            return FuzzProtocol(end, keep_open)
        return FuzzBufferedProtocol(end, keep_open, buffer)

    def connect(self) -> None:
        import trustme

        ca = trustme.CA()
        server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ca.issue_cert("localhost", HOST).configure_cert(server_ctx)
        client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the certificate
        ca.configure_trust(client_ctx)
        loop, p = self.loop, self.program
        client, server = self.ends

        def server_protocol() -> FuzzProtocol | FuzzBufferedProtocol:
            return self.new_protocol(server, p.server_buffer, p.keep_open)

        self.server = self.dog.run(
            lambda: loop.run_until_complete(
                loop.create_server(server_protocol, HOST, 0, ssl=server_ctx)
            )
        )
        port = self.server.sockets[0].getsockname()[1]
        self.dog.run(
            lambda: loop.run_until_complete(
                loop.create_connection(
                    lambda: self.new_protocol(client, p.client_buffer, p.keep_open),
                    HOST,
                    port,
                    ssl=client_ctx,
                    server_hostname="localhost",
                )
            )
        )
        deadline = time.monotonic() + QUIET_TIMEOUT
        while server.transport is None and time.monotonic() < deadline:
            self.tick()
        for end in self.ends:
            t = end.transport
            if t is None:
                continue
            end.sock = t.get_extra_info("socket")
            end.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
            end.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
            ssl_protocol = getattr(t, "_ssl_protocol", None)
            for obj in (t, ssl_protocol, getattr(ssl_protocol, "_transport", None)):
                if obj is not None:
                    self.owners[id(obj)] = (obj, end.name)
        if client.transport is not None and server.transport is not None:
            self.calibrate()
            self.quiet()  # the handshake's last records, the session tickets
        for end in self.ends:
            end.event(
                [
                    "extra",
                    _type_name(end.transport),
                    None if end.transport is None else end.transport.get_extra_info("cipher"),
                ]
            )
        self.record("setup", "setup")

    def teardown(self) -> None:
        """What is in flight is delivered, then both ends are aborted, the server closed."""
        if any(end.mode != "clear" for end in self.ends):
            self.drain("teardown")
        self.quiet()
        for end in self.ends:
            t = end.transport
            if t is not None and not end.lost:
                end.safe(t.abort)
        self.quiet()
        if self.server is not None:
            self.server.close()
            self.quiet()
        self.record("teardown", "teardown")

    def cleanup(self) -> None:
        """After a hang: closes what is left without running the loop."""
        for end in self.ends:
            sock = getattr(end.sock, "_sock", None)
            if isinstance(sock, socket.socket):
                sock.close()
        if self.server is not None:
            for s in self.server.sockets:
                with contextlib.suppress(Exception):
                    s.close()

    # -- steps -----------------------------------------------------------------------------------

    def admit(self, end: _End, sizes: list[int], strided: bool = False) -> list[int]:
        """How much of writes of ``sizes`` the program makes, and the end's mode after (see
        the module's docstring): whole when clear and within the budget, or a flood (whole)
        when the receiver can take one, else cut to fit the budget."""
        peer = end.peer
        closing = end.safe(end.transport.is_closing) is not False
        if closing or end.lost or end.mode != "clear":
            return sizes  # dropped by asyncio, or into a flood already paused or unsure
        total = sum(enc_bound(n) for n in sizes)
        room = CLEAR_BUDGET - end.in_flight()
        if total <= room:
            return sizes
        can_flood = (
            not self.running
            and not strided
            and not peer.lost
            and peer.transport is not None
            and peer.safe(peer.transport.is_closing) is False
            and peer.safe(peer.transport.is_reading) is True
            and not any(DATA_PATH & set(e.protocol().armed) for e in self.ends)
        )
        if can_flood:
            end.mode = "paused" if sum(sizes) >= SURE_PAUSE else "unsure"
            if end.mode == "unsure":
                end.flow_exact = False
            return sizes
        out = []
        for n in sizes:
            n = min(n, _fit(room))
            room -= enc_bound(n)
            out.append(n)
        return out

    def accept(self, end: _End, data: bytes) -> None:
        """``data`` was written and taken (not dropped: the transport was not closing)."""
        end.stream += data
        end.writes.append((len(end.stream), enc_bound(len(data))))

    def act(self, step: Step) -> None:
        """One call of an end's transport; its outcome (and what it logged) is an event."""
        assert not isinstance(step, Sleep | Quiet)
        end = self.ends[ENDS.index(step.end)]
        t = end.transport
        if t is None:
            end.event(["no transport"])
            return
        name = type(step).__name__
        calling, self.calling = self.calling, end
        outcome: Any = None
        try:
            if isinstance(step, Write):
                outcomes: list[Any] = []
                written: list[int] = []
                for _ in range(step.repeat):
                    taking = end.safe(t.is_closing) is False
                    n = step.size
                    if step.form not in ("str", "empty"):  # bytes that go out
                        (n,) = self.admit(end, [n], strided=step.form == "strided")
                    data = payload(step.seed, n)
                    arg: Any = data
                    if step.form == "bytearray":
                        arg = bytearray(data)
                    elif step.form == "memoryview":
                        arg = memoryview(data)
                    elif step.form == "strided":
                        arg = memoryview(data)[::2]
                        data = data[::2]
                    elif step.form == "empty":
                        arg = data = b""
                    elif step.form == "str":
                        arg = "x" * n
                    try:
                        t.write(arg)
                    except (Exception, FuzzBaseError) as exc:
                        outcomes.append([*(describe(exc) or []), tb_names(exc)])
                    else:
                        outcomes.append(None)
                        if taking and step.form != "str":
                            self.accept(end, data)
                    written.append(n)
                name = f"write({written}, {step.form})"
                outcome = outcomes
            elif isinstance(step, Writelines):
                taking = end.safe(t.is_closing) is False
                sizes = self.admit(end, list(step.sizes))
                parts = [payload(step.seed + i, n) for i, n in enumerate(sizes)]
                name = f"writelines({sizes})"
                t.writelines([p if i % 2 else bytearray(p) for i, p in enumerate(parts)])
                if taking:
                    for p in parts:
                        if p:
                            self.accept(end, p)
            elif isinstance(step, WriteEof):
                t.write_eof()
            elif isinstance(step, Close):
                t.close()
            elif isinstance(step, Abort):
                t.abort()
            elif isinstance(step, PauseReading):
                t.pause_reading()
            elif isinstance(step, ResumeReading):
                t.resume_reading()
            elif isinstance(step, SetLimits):
                t.set_write_buffer_limits(step.high, step.low)
                if not end.flow_exact and end.mode == "clear" and end.high_water():
                    # At an empty buffer, a high-water mark above 0 leaves the protocol
                    # resumed: its flow control is known again (this call's events are not).
                    end.flow_exact = True
            elif isinstance(step, GetBufferSize):
                outcome = t.get_write_buffer_size()
                if end.mode == "unsure":
                    outcome = "?"
            elif isinstance(step, SetProtocol):
                proto = self.new_protocol(end, step.buffer, step.keep_open)
                t.set_protocol(proto)
                outcome = proto.pid
            elif isinstance(step, Arm):
                end.protocol().armed[step.callback] = step.how
        except (Exception, FuzzBaseError) as exc:
            outcome = [*(describe(exc) or []), tb_names(exc)]
        finally:
            self.calling = calling
        end.event(["call", name, outcome])

    def drain(self, index: Any) -> None:
        """Runs the loop until the floods in flight arrived: a step of its own."""
        unsure = [end for end in self.ends if end.mode == "unsure"]
        for end in self.ends:
            if end.high_water() == 0:  # it pauses or resumes on each read: how many is timing
                end.flow_exact = False
        self.quiet()
        for end in self.ends:
            end.forget_delivered()
        for end in unsure:
            high = end.high_water()
            if end.mode == "clear" and high:  # drained: resumed, if it had paused at all
                end.flow_exact = True
        self.record(f"{index}:drain", "drain")

    def step(self, index: int, step: Step) -> None:
        flooded = any(end.mode != "clear" for end in self.ends)
        if flooded and not _flood_compatible(step):
            self.drain(index)
        if isinstance(step, Sleep):
            self.tick()
        elif isinstance(step, Quiet):
            self.quiet()
        else:
            self.act(step)
            self.sync()
        self.record(index, step)


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd")) - 1


class _Capture(logging.Handler):
    def __init__(self, run: _Run) -> None:
        super().__init__(logging.WARNING)
        self.run = run

    def emit(self, record: logging.LogRecord) -> None:
        self.run.on_log(record)


def new_loop(kind: str) -> asyncio.AbstractEventLoop:
    """A new loop of ``kind``: ``asyncio``, or an fdkit engine's name."""
    if kind == "asyncio":
        return asyncio.SelectorEventLoop()
    import fdkit.aio

    loop = fdkit.aio.EventLoop(engine=kind)
    assert loop.engine == kind, (loop.engine, loop.engine_reason)
    return loop


def run_here(kind: str, program: Program, sink: Callable[[list[Any]], None]) -> None:
    """Runs ``program`` on a new loop of ``kind`` in this process, giving ``sink`` each entry
    of its trace as it is made."""
    loop = new_loop(kind)
    run = _Run(program, loop, sink)
    loop.set_exception_handler(run.on_exception)
    capture = _Capture(run)
    loggers = [logging.getLogger("asyncio"), logging.getLogger("fdkit")]
    for lg in loggers:
        lg.addHandler(capture)
    run.baseline_fds = _fd_count()
    label: Any = "setup"
    fds: int | None = None
    try:
        run.connect()
        if all(end.transport is not None for end in run.ends):
            for i, step in enumerate(program.steps):
                label = i
                run.step(i, step)
            label = "teardown"
            run.teardown()
            fds = _fd_count() - run.baseline_fds
    except Hung:
        run.logs.append(["hung", HANG_TIMEOUT])
        run.record(label, "hung")
        run.cleanup()
        os._exit(0)  # the loop cannot be closed: its run never ended
    finally:
        for lg in loggers:
            lg.removeHandler(capture)
    loop.close()
    sink(["end", "fds left open", fds])
    if run.sync_timeouts:
        print(f"sync timeouts: {run.sync_timeouts}", file=sys.stderr)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def _zygote_main() -> None:
    """The fork server: modules imported once; for each request on stdin (a JSON line:
    the loop's kind, the program's repr), a forked child runs the program, its trace's entries
    on stdout (``TRACE`` lines), then ``END`` and its wait status (``STDERR`` first, with its
    stderr, if it failed)."""
    import tempfile

    import trustme  # noqa: F401  (imported once, for the children)

    import fdkit.aio  # noqa: F401

    for line in sys.stdin.buffer:
        kind, text = json.loads(line)
        with tempfile.TemporaryFile() as err:
            pid = os.fork()
            if pid == 0:  # the child: never returns
                code = 0
                try:
                    os.dup2(err.fileno(), 2)
                    program = eval(text, globals())  # the repr made by run_program

                    def sink(entry: list[Any]) -> None:
                        _write_all(1, ("TRACE " + json.dumps(entry) + "\n").encode())

                    run_here(kind, program, sink)
                except BaseException:
                    code = 1
                    with contextlib.suppress(BaseException):
                        traceback.print_exc()
                finally:
                    with contextlib.suppress(BaseException):
                        sys.stderr.flush()
                    os._exit(code)
            _write_all(1, f"PID {pid}\n".encode())
            _, status = os.waitpid(pid, 0)
            _write_all(1, b"\n")  # a child killed mid-line left that line unfinished
            if status:
                err.seek(0)
                tail = err.read().decode(errors="replace")[-4000:]
                _write_all(1, f"STDERR {json.dumps(tail)}\n".encode())
            _write_all(1, f"END {os.waitstatus_to_exitcode(status)}\n".encode())


# --- the parent's side ------------------------------------------------------------------------


class _Zygote:
    """A fork server (:func:`_zygote_main`) of the test process's."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-I", os.path.abspath(__file__), "--zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            bufsize=0,
        )
        self.buf = b""

    def readline(self, deadline: float) -> str | None:
        """The next line, or None past ``deadline``."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise EOFError("the fork server exited")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def run(self, kind: str, program: Program, timeout: float) -> tuple[list[str], Any, str]:
        """The lines of ``program``'s run on ``kind``, its exit code (None: killed past
        ``timeout``) and its stderr if it failed."""
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps([kind, repr(program)]) + "\n").encode())
        first = self.readline(time.monotonic() + 60.0)  # the server may be importing still
        deadline = time.monotonic() + timeout
        if first is None or not first.startswith("PID "):
            raise AssertionError(f"the fork server did not start a child: {first!r}")
        pid = int(first[4:])
        lines: list[str] = []
        stderr = ""
        killed = False
        while True:
            line = self.readline(deadline)
            if line is None:  # hung: the child is killed, and the server says so
                os.kill(pid, signal.SIGKILL)
                killed = True
                deadline = time.monotonic() + 30.0
                continue
            if line.startswith("END "):
                return lines, None if killed else int(line[4:]), stderr
            if line.startswith("STDERR "):
                stderr = json.loads(line[7:])
            else:
                lines.append(line)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()


_zygotes: list[_Zygote] = []


def close_fork_server() -> None:
    """Ends this process's fork server, if it started one (its pipes are fds of this
    process's)."""
    while _zygotes:
        _zygotes.pop().close()


def run_program(kind: str, program: Program, timeout: float = CHILD_TIMEOUT) -> Trace:
    """``program``'s trace on a new loop of ``kind`` (``asyncio`` or an fdkit engine), run in a
    child process (forked by a fork server that has imported what it needs). Past ``timeout``
    the child is killed and the trace ends with ``["child", "hung", ...]``; killed by a
    signal, with ``["child", "crashed", signal]``; a child that fails otherwise fails the test
    with its stderr."""
    if not _zygotes:
        _zygotes.append(_Zygote())
    zygote = _zygotes[0]
    try:
        lines, code, stderr = zygote.run(kind, program, timeout)
    except BaseException:
        close_fork_server()  # in an unknown state: the next run starts another
        raise
    trace: Trace = []
    for line in lines:
        if line.startswith("TRACE "):
            with contextlib.suppress(ValueError):  # the last line of a child killed mid-line
                trace.append(json.loads(line[6:]))
    if code is None:
        trace.append(["child", "hung", f"killed after {timeout:g} s"])
    elif code < 0:
        trace.append(["child", "crashed", signal.Signals(-code).name])
    elif code != 0:
        raise AssertionError(f"{kind}: the program's child failed ({code}):\n{stderr}")
    return trace


def format_trace(trace: Trace) -> str:
    """A trace as text, one line per lane."""
    lines = []
    for entry in trace:
        if len(entry) != 6:
            lines.append(f"  {entry!r}")
            continue
        label, step, client, server, logs, state = entry
        lines.append(f"[{label}] {step}")
        for name, lane in (("client", client), ("server", server)):
            if lane["events"]:
                lines.append(f"    {name}: {lane['events']}")
            if lane["flow"]:
                lines.append(f"    {name} flow: {lane['flow']}")
        if logs:
            lines.append(f"    loop: {logs}")
        for name in ENDS:
            lines.append(f"    => {name} {state[name]}")
    return "\n".join(lines)


def hung(trace: Trace) -> str | None:
    """Where a trace says its loop hung or its child died: the step and what."""
    for i, entry in enumerate(trace):
        if entry[:1] == ["child"]:
            after = trace[i - 1][0] if i else None
            return f"the child {entry[1]} ({entry[2]}) after step {after!r}"
        if len(entry) == 6 and any(log[:1] == ["hung"] for log in entry[4]):
            return f"the loop hung (one run over {HANG_TIMEOUT:g} s) at step {entry[0]!r}"
    return None


if __name__ == "__main__" and sys.argv[1:] == ["--zygote"]:
    _zygote_main()
