"""Atomic pipe messages: writer processes into one pipe, the bench process reading them whole.

fdkit's ``AtomicPipe`` against the ways Python moves messages between processes today, in the
same run, alternating in rounds (medians reported):

* ``multiprocessing.Queue`` (``put``/``get``: pickling, a feeder thread, locks);
* ``multiprocessing.Pipe(duplex=False)`` with ``send_bytes``/``recv_bytes`` (length-prefixed);
* the unframed pipe, the limit: one ``os.write`` per message of the same bytes, read with
  ``os.readv`` into a 64 KiB buffer; no framing, so the reader only counts bytes;
* fdkit, batched: ``write_messages(all of them)`` / ``read_messages()`` (chunks of several
  small messages share one ``write(2)`` while together <= PIPE_BUF);
* fdkit, one call per message: ``write_message`` / ``read_message``.

Every measurement forks its writer processes (1 or 4) from this process; each builds nothing
after the fork (its share of the messages is inherited), says it is ready on a pipe and waits
for the start signal: the parent closing a "go" pipe, which wakes every writer at once. The
timed section runs from that signal until the reader (this process) has every message: it
counts them and their bytes, and anything short, extra (checked at EOF once the writers have
exited) or a writer that did not exit 0 is an error, never a figure. In each contender's
warm-up round the reader also keeps the messages and checks them against what was sent (as a
multiset: across writers only the per-writer order is defined). Every pipe has the kernel's
default size (64 KiB). Figures are messages per second of wall time, end to end.

Cases: 100-byte messages from 1 writer and from 4 writers (the same total), 10 KB messages
from 1 writer, mixed data mode (100,000 messages of 100 B with a plain line after every 10,
read with ``get_line_burst_or_data``; baseline: the same messages in normal mode read with
``read_message``, one call per item like the mixed reader, which is what mixed mode costs),
and zstd on compressible JSON (about 2 KB log batches; msg/s against the same messages
uncompressed, and wire bytes per message against the JSON's own size: the compression ratio).
"""

from __future__ import annotations

import contextlib
import json
import math
import multiprocessing
import os
import random
import select
import signal
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import Connection
from typing import Any, Self

from bench._common import (
    Result,
    Sample,
    Timer,
    alternate,
    compare,
    median_of,
    note,
    pick,
)
from fdkit.atomic_pipe import AtomicPipe

BENCH = "atomic_pipe"
GOAL_VS_QUEUE = 10.0  # the goal: >= 10x multiprocessing.Queue on 100 B messages
GOAL_VS_RAW = 0.5  # the goal: 10 KB messages at >= 50% of the unframed pipe's rate
ABS_BATCH = 1_000_000  # the absolute goals, msg/s, 100 B, 1 writer
ABS_CALL = 300_000

UNIT = "msg/s"
SIZE_UNIT = "B/msg"
KiB = 1024
RAW_BUF = 64 * KiB  # the unframed reader's buffer: the default pipe size
POOL = 1000  # distinct messages per writer, cycled (10 KB x 1000 = 10 MB, not 200 MB)
LINE = b"a plain line between the framed messages\n"
LINE_EVERY = 10  # mixed mode: a plain line after every 10 messages
READY_TIMEOUT = 60.0  # seconds for the writers to fork and say they are ready
EXIT_TIMEOUT = 60.0  # seconds for the writers to exit once the reader has everything
EOF_WAIT = 5.0  # seconds the EOF check waits for the last writer's close to be seen

LABELS = {
    "batch": "fdkit write_messages/read_messages",
    "call": "fdkit write_message/read_message",
    "mp_queue": "multiprocessing.Queue put/get",
    "mp_pipe": "multiprocessing.Pipe send_bytes/recv_bytes",
    "raw": "unframed pipe, os.write/os.readv (the limit)",
    "mixed": "fdkit mixed mode, get_line_burst_or_data",
    "normal": "fdkit normal mode, read_message",
    "mixed_tenth": "fdkit mixed mode, a tenth of the messages",
    "plain": "fdkit uncompressed, write_messages/read_messages",
    "zstd": "fdkit zstd level 3, write_messages/read_messages",
    "zstd_dict": "fdkit zstd level 3 + raw dictionary, write_messages/read_messages",
}


# --- what is sent ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    """One case's traffic: ``count`` messages of ``size`` bytes (JSON: about that size),
    split evenly over ``writers`` processes; ``mixed``: a plain line after every
    :data:`LINE_EVERY` messages of each writer."""

    size: int
    count: int
    writers: int = 1
    json: bool = False
    mixed: bool = False


def _filled(head: bytes, size: int) -> bytes:
    body = head + b"abcdefghijklmnopqrstuvwxyz0123456789" * (size // 36 + 1)
    return body[:size]


_LEVELS = ("DEBUG", "INFO", "INFO", "INFO", "WARNING", "ERROR")
_LOGGERS = ("app.http", "app.db", "app.worker", "app.cache", "urllib3.connectionpool")
_PATHS = ("/api/v1/items", "/api/v1/users", "/healthz", "/static/app.js", "/api/v1/orders")


def _json_doc(rng: random.Random, writer: int, seq: int, size: int) -> bytes:
    """A batch of log records as JSON, about ``size`` bytes: repetitive keys and values with
    varying numbers, as compressible as real structured logs."""
    records: list[dict[str, object]] = []
    doc: dict[str, object] = {"writer": writer, "seq": seq, "records": records}
    while True:
        records.append(
            {
                "ts": round(1_700_000_000 + seq + rng.random(), 6),
                "level": rng.choice(_LEVELS),
                "logger": rng.choice(_LOGGERS),
                "pid": 4000 + writer,
                "path": rng.choice(_PATHS),
                "status": rng.choice((200, 200, 200, 201, 304, 404, 500)),
                "ms": round(rng.uniform(0.1, 250.0), 3),
                "msg": f"request {rng.randrange(10**6)} handled for user {rng.randrange(5000)}",
            }
        )
        out = json.dumps(doc, separators=(",", ":")).encode()
        if len(out) >= size:
            return out


def _pool(load: Load, writer: int, n: int, seed: int = 0) -> list[bytes]:
    k = max(1, min(POOL, n))
    if load.json:
        rng = random.Random(seed * 1_000_003 + writer)
        return [_json_doc(rng, writer, i, load.size) for i in range(k)]
    return [_filled(f"w{writer} m{i} ".encode(), load.size) for i in range(k)]


def _shares(load: Load) -> list[list[bytes]]:
    """Each writer's messages, in order: its pool of distinct messages, cycled."""
    out = []
    for w in range(load.writers):
        n = load.count // load.writers + (1 if w < load.count % load.writers else 0)
        pool = _pool(load, w, n)
        out.append([pool[i % len(pool)] for i in range(n)])
    return out


def _dictionary(load: Load) -> bytes:
    """A raw zstd dictionary: JSON like the traffic's but not from it (another seed)."""
    sample = _pool(Load(load.size, 64, json=True), 0, 64, seed=7)
    return b"".join(sample)[: 16 * KiB]


@dataclass(frozen=True)
class Expect:
    """What the reader must get: messages, their bytes in all, plain lines (mixed mode)."""

    count: int
    nbytes: int
    lines: int


def _expect(load: Load, shares: list[list[bytes]]) -> Expect:
    lines = sum(math.ceil(len(s) / LINE_EVERY) for s in shares) if load.mixed else 0
    return Expect(sum(map(len, shares)), sum(len(m) for s in shares for m in s), lines)


def _short(who: str, got: int, want: int) -> EOFError:
    return EOFError(f"{who}: the writers closed the pipe after {got} of {want} messages")


# --- the contenders ------------------------------------------------------------------------------


class Channel:
    """One way from the writer processes to this one. Made before the fork; ``write`` runs in
    each writer process, ``read`` (timed) and the rest in this one."""

    def in_child(self) -> None:
        """In a writer, before it says it is ready: close what only the reader needs."""

    def parent_after_fork(self) -> None:
        """In the reader, after the fork: close the write side, so EOF comes when the
        writers exit (a dead writer then ends a read instead of hanging it)."""

    def write(self, msgs: list[bytes]) -> None:
        """In a writer: send every message, make sure all of it is in the pipe."""
        raise NotImplementedError

    def read(self, want: Expect, seen: Counter[bytes] | None) -> int:
        """Read every message (lines too), returning the message bytes read; ``seen``: also
        count every message read in ``seen``. Raises EOFError when the pipe ends early."""
        raise NotImplementedError

    def at_eof(self) -> bool:
        """Once the writers have exited: whether nothing is left to read."""
        raise NotImplementedError

    def close(self) -> None:
        """Close everything this channel still holds in this process."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FdkitChannel(Channel):
    """An ``AtomicPipe.pair``. ``writing``: "batch" (one ``write_messages`` of the whole
    share), "call" (``write_message`` each) or "groups" (``write_messages`` of
    :data:`LINE_EVERY` at a time, each group followed by a plain line in mixed mode).
    ``reading``: "batch" (``read_messages``), "call" (``read_message``) or "mixed"
    (``get_line_burst_or_data``)."""

    def __init__(self, writing: str, reading: str, options: Mapping[str, Any]) -> None:
        self.writing = writing
        self.reading = reading
        self.r, self.w = AtomicPipe.pair(**options)
        self.r.blocking = True  # mixed mode made it non-blocking (as Perl): blocking reads

    def in_child(self) -> None:
        self.r.close()

    def parent_after_fork(self) -> None:
        self.w.close()

    def write(self, msgs: list[bytes]) -> None:
        w = self.w
        if self.writing == "batch":
            if w.write_messages(msgs) != len(msgs):
                raise RuntimeError("write_messages wrote fewer messages than given")
        elif self.writing == "call":
            write_message = w.write_message
            for m in msgs:
                write_message(m)
        else:
            line = LINE if w.mixed_data_mode else None
            fd = w.fileno()
            for i in range(0, len(msgs), LINE_EVERY):
                w.write_messages(msgs[i : i + LINE_EVERY])
                if line is not None:
                    os.write(fd, line)  # < PIPE_BUF on a blocking pipe: all of it, atomically
        w.close()

    def read(self, want: Expect, seen: Counter[bytes] | None) -> int:
        if self.reading == "batch":
            return self._read_batch(want, seen)
        if self.reading == "call":
            return self._read_call(want, seen)
        return self._read_mixed(want, seen)

    def _read_batch(self, want: Expect, seen: Counter[bytes] | None) -> int:
        read_messages = self.r.read_messages
        got = nbytes = 0
        while got < want.count:
            batch = read_messages()
            if not batch:
                raise _short("read_messages", got, want.count)
            got += len(batch)
            nbytes += sum(map(len, batch))
            if seen is not None:
                seen.update(batch)
        if got != want.count:
            raise RuntimeError(f"read_messages: {got} messages, {want.count} sent")
        return nbytes

    def _read_call(self, want: Expect, seen: Counter[bytes] | None) -> int:
        read_message = self.r.read_message
        nbytes = 0
        for got in range(want.count):
            m = read_message()
            if m is None:
                raise _short("read_message", got, want.count)
            nbytes += len(m)
            if seen is not None:
                seen[m] += 1
        return nbytes

    def _read_mixed(self, want: Expect, seen: Counter[bytes] | None) -> int:
        get = self.r.get_line_burst_or_data
        got = lines = nbytes = 0
        while got < want.count or lines < want.lines:
            kind, data = get()
            if kind is None or data is None:
                raise _short("get_line_burst_or_data", got, want.count)
            if kind == "message":
                got += 1
                nbytes += len(data)
                if seen is not None:
                    seen[data] += 1
            elif kind == "line" and (seen is None or data == LINE):
                lines += 1
            else:
                raise RuntimeError(f"mixed mode: unexpected {kind} {data[:60]!r}")
        if (got, lines) != (want.count, want.lines):
            raise RuntimeError(f"mixed mode: {got} messages and {lines} lines, expected {want}")
        return nbytes

    def at_eof(self) -> bool:
        if self.reading == "mixed":
            # (None, None): nothing there (the shape Perl's mixed mode has)
            left: object = self.r.get_line_burst_or_data(timeout=EOF_WAIT)[0]
        else:
            left = self.r.read_messages(timeout=EOF_WAIT)
        return not left and self.r.eof()

    def close(self) -> None:
        self.r.close()
        self.w.close()


def _conn_at_eof(conn: Connection) -> bool:
    if not conn.poll(EOF_WAIT):
        return False  # neither data nor EOF: a writer is still holding the pipe open
    try:
        conn.recv_bytes()
    except EOFError:
        return True
    return False


class QueueChannel(Channel):
    """``multiprocessing.Queue`` (fork context, as a forked writer needs)."""

    def __init__(self) -> None:
        self.q = multiprocessing.get_context("fork").Queue()
        # The queue's own pipe ends: the stubs do not declare them. The parent closes its write
        # end after the fork so that EOF comes through when the writers exit.
        self.reader: Connection = vars(self.q)["_reader"]
        self.writer: Connection = vars(self.q)["_writer"]

    def in_child(self) -> None:
        self.reader.close()

    def parent_after_fork(self) -> None:
        self.writer.close()

    def write(self, msgs: list[bytes]) -> None:
        put = self.q.put
        for m in msgs:
            put(m)
        self.q.close()
        self.q.join_thread()  # the feeder thread has written everything

    def read(self, want: Expect, seen: Counter[bytes] | None) -> int:
        get = self.q.get
        nbytes = 0
        for got in range(want.count):
            try:
                m = get()
            except EOFError:
                raise _short("Queue.get", got, want.count) from None
            nbytes += len(m)
            if seen is not None:
                seen[m] += 1
        return nbytes

    def at_eof(self) -> bool:
        return _conn_at_eof(self.reader)

    def close(self) -> None:
        self.reader.close()
        self.writer.close()
        self.q.close()


class PipeChannel(Channel):
    """``multiprocessing.Pipe(duplex=False)``: length-prefixed ``send_bytes``/``recv_bytes``.
    A message up to 16 KiB goes out in one ``write(2)`` with its header, so 100 B messages
    from several writers stay whole."""

    def __init__(self) -> None:
        self.r, self.w = multiprocessing.get_context("fork").Pipe(duplex=False)

    def in_child(self) -> None:
        self.r.close()

    def parent_after_fork(self) -> None:
        self.w.close()

    def write(self, msgs: list[bytes]) -> None:
        send_bytes = self.w.send_bytes
        for m in msgs:
            send_bytes(m)
        self.w.close()

    def read(self, want: Expect, seen: Counter[bytes] | None) -> int:
        recv_bytes = self.r.recv_bytes
        nbytes = 0
        for got in range(want.count):
            try:
                m = recv_bytes()
            except EOFError:
                raise _short("recv_bytes", got, want.count) from None
            nbytes += len(m)
            if seen is not None:
                seen[m] += 1
        return nbytes

    def at_eof(self) -> bool:
        return _conn_at_eof(self.r)

    def close(self) -> None:
        self.r.close()
        self.w.close()


class RawChannel(Channel):
    """The same bytes with no framing: one ``os.write`` per message, the reader counts bytes
    (``os.readv`` into one reused buffer). Messages of one size only: that is how a check
    cuts the stream back into messages (whole, since each write <= PIPE_BUF is atomic, or
    there is one writer)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.r, self.w = os.pipe2(os.O_CLOEXEC)

    def in_child(self) -> None:
        os.close(self.r)
        self.r = -1

    def parent_after_fork(self) -> None:
        os.close(self.w)
        self.w = -1

    def write(self, msgs: list[bytes]) -> None:
        write, fd = os.write, self.w
        for m in msgs:
            n = write(fd, m)
            while n < len(m):  # a blocking pipe writes all unless a signal cut it short
                n += write(fd, m[n:])
        os.close(fd)
        self.w = -1

    def read(self, want: Expect, seen: Counter[bytes] | None) -> int:
        buf = bytearray(RAW_BUF)
        bufs, readv, fd, size = [buf], os.readv, self.r, self.size
        pending = bytearray()  # a check's partial message, carried to the next read
        nbytes = 0
        while nbytes < want.nbytes:
            n = readv(fd, bufs)
            if not n:
                raise _short("os.readv", nbytes // size, want.count)
            nbytes += n
            if seen is not None:
                pending += buf[:n]
                whole = len(pending) - len(pending) % size
                seen.update(bytes(pending[i : i + size]) for i in range(0, whole, size))
                del pending[:whole]
        return nbytes

    def at_eof(self) -> bool:
        ready, _, _ = select.select([self.r], [], [], EOF_WAIT)
        return bool(ready) and os.read(self.r, 1) == b""

    def close(self) -> None:
        for fd in (self.r, self.w):
            if fd >= 0:
                os.close(fd)
        self.r = self.w = -1


# --- the writer processes --------------------------------------------------------------------


class Writers:
    """Writer processes forked from this one, one per share, each waiting for the start.

    Forking happens here, untimed; :meth:`go` is the start signal (closing the "go" pipe
    wakes every writer at once); :meth:`reap` waits for them to exit 0. Leaving the ``with``
    block early kills (SIGKILL) and reaps whatever is still running, so nothing outlives a
    failed measurement.
    """

    def __init__(self, channel: Channel, shares: list[list[bytes]]) -> None:
        self.pids: list[int] = []
        self._fds: list[int] = []
        ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
        go_r, go_w = os.pipe2(os.O_CLOEXEC)
        self._fds = [ready_r, ready_w, go_r, go_w]
        try:
            for share in shares:
                self.pids.append(self._fork(channel, share, ready_r, ready_w, go_r, go_w))
            self._close(ready_w, go_r)
            channel.parent_after_fork()
            self._wait_ready(ready_r, len(shares))
        except BaseException:
            self.stop()
            raise
        self._ready_r, self._go_w = ready_r, go_w

    @staticmethod
    def _fork(
        channel: Channel, share: list[bytes], ready_r: int, ready_w: int, go_r: int, go_w: int
    ) -> int:
        sys.stdout.flush()  # or the writer would print what is still buffered a second time
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            return pid
        code = 1
        try:  # the writer: never returns, whatever happens
            os.close(ready_r)
            os.close(go_w)
            channel.in_child()
            os.write(ready_w, b".")
            os.close(ready_w)  # a writer that dies before this shows as EOF, not a hang
            os.read(go_r, 1)  # returns b"" when the parent closes the go pipe: the start
            os.close(go_r)
            channel.write(share)
            code = 0
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(code)

    @staticmethod
    def _wait_ready(fd: int, n: int) -> None:
        got = 0
        deadline = time.monotonic() + READY_TIMEOUT
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{n - got} of {n} writer processes never became ready")
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, n - got)
                if not chunk:
                    raise RuntimeError(f"{n - got} of {n} writer processes died before starting")
                got += len(chunk)

    def _close(self, *fds: int) -> None:
        for fd in fds:
            if fd in self._fds:
                self._fds.remove(fd)
                os.close(fd)

    def go(self) -> None:
        """The start signal."""
        self._close(self._go_w)

    def reap(self) -> None:
        """Wait for every writer to exit; a non-zero exit or a hang is an error."""
        deadline = time.monotonic() + EXIT_TIMEOUT
        bad = []
        while self.pids:
            pid = self.pids[0]
            done, status = os.waitpid(pid, os.WNOHANG)
            if not done:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"writer process {pid} did not exit")
                time.sleep(0.001)
                continue
            self.pids.pop(0)
            code = os.waitstatus_to_exitcode(status)
            if code:
                bad.append(f"{pid} exited with {code}")
        if bad:
            raise RuntimeError("writer processes failed: " + ", ".join(bad))

    def stop(self) -> None:
        """Kill and reap whatever is still running; close the signalling pipes."""
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in self.pids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self.pids.clear()
        self._close(*list(self._fds))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _measure(
    make: Callable[[], Channel], shares: list[list[bytes]], want: Expect, check: bool
) -> Sample:
    """One measurement: fork the writers, start them, read everything (timed), verify.
    ``check``: also compare the messages read with those sent (as a multiset)."""
    seen: Counter[bytes] | None = Counter() if check else None
    with make() as ch:
        with Writers(ch, shares) as writers:
            t = Timer()
            with t:
                writers.go()
                nbytes = ch.read(want, seen)
            writers.reap()
        if nbytes != want.nbytes:
            raise RuntimeError(f"read {nbytes} bytes of messages, {want.nbytes} were sent")
        if not ch.at_eof():
            raise RuntimeError("the pipe did not end at EOF after the last message")
    if seen is not None and seen != Counter(m for s in shares for m in s):
        raise RuntimeError("the messages read are not the messages sent")
    return t.sample(want.count)


def _contender(
    make: Callable[[], Channel], shares: list[list[bytes]], want: Expect
) -> Callable[[], Sample]:
    """A contender for :func:`alternate`: its first run (the warm-up round) also checks
    the content of every message."""
    first = [True]

    def measure() -> Sample:
        check, first[0] = first[0], False
        return _measure(make, shares, want, check)

    return measure


def _wire_bytes(options: Mapping[str, Any], shares: list[list[bytes]]) -> int:
    """The bytes an fdkit writer puts on the wire for ``shares`` (counted raw, untimed)."""
    with FdkitChannel("batch", "batch", options) as ch, Writers(ch, shares) as writers:
        writers.go()
        total, fd = 0, ch.r.fileno()
        while chunk := os.read(fd, RAW_BUF):
            total += len(chunk)
        writers.reap()
    return total


# --- the cases -----------------------------------------------------------------------------


def _makers(load: Load, keys: list[str]) -> dict[str, Callable[[], Channel]]:
    none: dict[str, Any] = {}
    zstd: dict[str, Any] = {"compression": "zstd"}
    table: dict[str, Callable[[], Channel]] = {
        "batch": partial(FdkitChannel, "batch", "batch", none),
        "call": partial(FdkitChannel, "call", "call", none),
        "mp_queue": QueueChannel,
        "mp_pipe": PipeChannel,
        "raw": partial(RawChannel, load.size),
        "mixed": partial(FdkitChannel, "groups", "mixed", {"mixed_data_mode": True}),
        "normal": partial(FdkitChannel, "groups", "call", none),
        "plain": partial(FdkitChannel, "batch", "batch", none),
        "zstd": partial(FdkitChannel, "batch", "batch", zstd),
    }
    if "zstd_dict" in keys:
        table["zstd_dict"] = partial(
            FdkitChannel, "batch", "batch", {**zstd, "dictionary": _dictionary(load)}
        )
    return {k: table[k] for k in keys}


@dataclass
class Case:
    """One case run: its load, and each contender's median msg/s."""

    load: Load
    rates: dict[str, float]
    shares: list[list[bytes]]

    def text(self, extra: str = "") -> str:
        size = f"{self.load.size} B" if self.load.size < 1000 else f"{self.load.size // 1000} KB"
        if self.load.json:
            avg = sum(len(m) for s in self.shares for m in s) / max(1, self.load.count)
            size = f"JSON ~{avg:,.0f} B"
        who = f"{self.load.writers} writer" + ("s" if self.load.writers > 1 else "")
        lines = f", a line every {LINE_EVERY}" if self.load.mixed else ""
        return f"{size} x{self.load.count:,}, {who}{lines}{extra}"


def _run_case(
    load: Load, keys: list[str], rounds: int, also: Mapping[str, tuple[str, Load]] | None = None
) -> Case:
    """``keys`` on ``load``; ``also``: more contenders, each a key run on another load."""
    shares = _shares(load)
    want = _expect(load, shares)
    makers = _makers(load, keys)
    contenders = {k: _contender(m, shares, want) for k, m in makers.items()}
    for name, (key, other) in (also or {}).items():
        other_shares = _shares(other)
        make = _makers(other, [key])[key]
        contenders[name] = _contender(make, other_shares, _expect(other, other_shares))
    samples = alternate(contenders, rounds)
    rates = {k: median_of(v, lambda s: s.wall_rate) for k, v in samples.items()}
    case = Case(load, rates, shares)
    note(f"{BENCH} [{case.text()}]: " + "; ".join(f"{k} {r:,.0f} {UNIT}" for k, r in rates.items()))
    return case


def _row(
    id: str, case: Case, key: str, base: str, goal: float | None = None, extra: str = ""
) -> Result:
    return compare(
        id,
        BENCH,
        f"{LABELS[key]} [{case.text(extra)}]",
        "messages per second, end to end (start signal to the last message read)",
        UNIT,
        case.rates[key],
        case.rates[base],
        LABELS[base],
        goal,
    )


def _absolute(case: Case, key: str, goal: int) -> str:
    got = case.rates[key]
    verdict = "met" if got >= goal else "missed"
    note(f"{BENCH}: {LABELS[key]} at {got:,.0f} {UNIT}: absolute goal >= {goal:,} {verdict}")
    text = f"{goal / 1e6:g}M" if goal >= 1_000_000 else f"{goal // 1000}k"
    return f"; absolute goal ≥{text} {UNIT}"


def run(quick: bool) -> list[Result]:
    """Every case, contenders alternating in rounds; rows against each baseline."""
    n_small = pick(quick, 300_000, 60_000, 400)
    n_large = pick(quick, 40_000, 8_000, 100)
    n_mixed = pick(quick, 100_000, 100_000, 1_000)
    n_json = pick(quick, 50_000, 10_000, 100)
    rounds = pick(quick, 7, 3, 1)
    fives = ["batch", "call", "mp_queue", "mp_pipe", "raw"]

    one = _run_case(Load(100, n_small), fives, rounds)
    big = _run_case(Load(10_000, n_large), fives, rounds)
    four = _run_case(Load(100, n_small, writers=4), fives, rounds)
    # The same mixed-mode traffic at a tenth of the volume: a reader that rescans what it
    # parsed (the peer's) would be far slower at 100,000 than at 10,000; a linear one is not.
    tenth = Load(100, n_mixed // 10, mixed=True)
    mixed = _run_case(
        Load(100, n_mixed, mixed=True),
        ["mixed", "normal"],
        rounds,
        {"mixed_tenth": ("mixed", tenth)},
    )
    zjson = _run_case(Load(2000, n_json, json=True), ["plain", "zstd", "zstd_dict"], rounds)

    rows = [
        _row("atomic_pipe_batch_100b", one, "batch", "mp_queue", GOAL_VS_QUEUE,
             _absolute(one, "batch", ABS_BATCH)),
        _row("atomic_pipe_call_100b", one, "call", "mp_queue", None,
             _absolute(one, "call", ABS_CALL)),
        _row("atomic_pipe_10k_vs_raw", big, "batch", "raw", GOAL_VS_RAW),
        _row("atomic_pipe_4writers_100b", four, "batch", "mp_queue", GOAL_VS_QUEUE),
        _row("atomic_pipe_mixed_100k", mixed, "mixed", "normal"),
        _row("atomic_pipe_mixed_100k_vs_tenth", mixed, "mixed", "mixed_tenth"),
        _row("atomic_pipe_batch_100b_vs_mp_pipe", one, "batch", "mp_pipe"),
        _row("atomic_pipe_call_100b_vs_mp_pipe", one, "call", "mp_pipe"),
        _row("atomic_pipe_batch_100b_vs_raw", one, "batch", "raw"),
        _row("atomic_pipe_call_100b_vs_raw", one, "call", "raw"),
        _row("atomic_pipe_10k_vs_mp_queue", big, "batch", "mp_queue"),
        _row("atomic_pipe_10k_vs_mp_pipe", big, "batch", "mp_pipe"),
        _row("atomic_pipe_call_10k_vs_raw", big, "call", "raw"),
        _row("atomic_pipe_4writers_call_100b", four, "call", "mp_queue"),
        _row("atomic_pipe_4writers_100b_vs_mp_pipe", four, "batch", "mp_pipe"),
        _row("atomic_pipe_4writers_100b_vs_raw", four, "batch", "raw"),
        _row("atomic_pipe_zstd_json", zjson, "zstd", "plain"),
        _row("atomic_pipe_zstd_dict_json", zjson, "zstd_dict", "plain"),
    ]  # fmt: skip
    return rows + _size_rows(zjson)


def _size_rows(case: Case) -> list[Result]:
    """Wire bytes per message with zstd against the JSON's own size: the compression ratio
    (framing included). Measured once over every distinct message, untimed."""
    shares = [sorted(set(case.shares[0]))]
    json_bytes = sum(map(len, shares[0])) / len(shares[0])
    zstd: dict[str, Any] = {"compression": "zstd"}
    out = []
    for key, options in (
        ("zstd", zstd),
        ("zstd_dict", {**zstd, "dictionary": _dictionary(case.load)}),
    ):
        wire = _wire_bytes(options, shares) / len(shares[0])
        out.append(
            compare(
                f"atomic_pipe_{key}_json_size",
                BENCH,
                f"{LABELS[key]} [{case.text()}]",
                "wire bytes per message (framing included); ratio = compression ratio",
                SIZE_UNIT,
                wire,
                json_bytes,
                "the JSON, uncompressed and unframed",
            )
        )
    return out
