"""Writers facing a full pipe or a vanished reader.

A non-blocking writer queues what the pipe cannot take (``pending_output``) and ``flush``
waits for it in poll(2), not in a loop (Perl's writer spins here); ``close`` flushes first. A
vanished reader is a ``BrokenPipeError`` whatever the SIGPIPE disposition: never a death.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable

import pytest

from fdkit.atomic_pipe import AtomicPipe
from helpers import payload

pytestmark = pytest.mark.timeout(30)

COUNT, SIZE = 40, 3000  # 40 single-chunk messages of 3,016 wire bytes: ~118 KB queued


def fill(w: AtomicPipe) -> list[bytes]:
    """Shrinks the pipe to one page, makes ``w`` non-blocking and writes far more than fits."""
    assert w.resize(4096) == 4096
    w.blocking = False
    msgs = [payload(SIZE, seed=i) for i in range(COUNT)]
    for m in msgs[:10]:
        w.write_message(m)  # queued, never BlockingIOError
    assert w.write_messages(msgs[10:]) == COUNT - 10
    assert w.pending_output >= COUNT * (SIZE + 16) - 4096
    return msgs


class Drain(threading.Thread):
    """Reads ``count`` messages (after ``delay``), then waits for EOF if asked."""

    def __init__(self, r: AtomicPipe, count: int, delay: float = 0.0, eof: bool = False) -> None:
        super().__init__(daemon=True)
        self.r, self.count, self.delay, self.eof = r, count, delay, eof
        self.got: list[bytes] = []
        self.saw_eof = False
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            time.sleep(self.delay)
            while len(self.got) < self.count and (batch := self.r.read_messages(timeout=10)):
                self.got += batch
            if self.eof:
                self.saw_eof = self.r.read_message(timeout=10) is None and self.r.eof()
        except BaseException as e:
            self.error = e


@pytest.mark.serial
def test_full_pipe_queues_and_flush_polls() -> None:
    r, w = AtomicPipe.pair()
    with r, w:
        msgs = fill(w)
        pending = w.pending_output
        cpu, wall = time.process_time(), time.monotonic()
        assert w.flush(0.5) is False  # nobody reads
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        assert 0.45 <= wall < 2.0, wall
        assert cpu < 0.1, f"{cpu:.3f} s of CPU in a {wall:.3f} s flush: it spins"
        assert w.pending_output == pending
        drain = Drain(r, COUNT)
        drain.start()
        assert w.flush(10) is True
        assert w.pending_output == 0
        drain.join(10)
        assert drain.error is None
        assert drain.got == msgs
        assert w.flush() is True
        assert w.flush(0) is True


@pytest.mark.serial
def test_close_flushes_queued_output_first() -> None:
    r, w = AtomicPipe.pair()
    with r:
        msgs = fill(w)
        drain = Drain(r, COUNT, delay=0.3, eof=True)
        drain.start()
        cpu, wall = time.process_time(), time.monotonic()
        w.close()
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        assert wall >= 0.25  # it waited for the reader...
        assert cpu < 0.1, f"{cpu:.3f} s of CPU in a {wall:.3f} s close"  # ...in poll(2)
        assert w.closed
        drain.join(10)
        assert drain.error is None
        assert drain.got == msgs
        assert drain.saw_eof


def test_a_signal_during_close_loses_nothing() -> None:
    """close() waits in poll(2); a signal whose handler returns interrupts the wait, the
    handler runs, and the flush goes on: no byte is dropped, the fd is closed once."""
    r, w = AtomicPipe.pair()
    handled: list[int] = []
    old = signal.signal(signal.SIGUSR1, lambda signum, frame: handled.append(signum))
    try:
        with r:
            msgs = fill(w)
            drain = Drain(r, COUNT, delay=0.6, eof=True)
            drain.start()
            main = threading.get_ident()
            kicker = threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGUSR1))
            kicker.start()
            w.close()
            kicker.join()
            assert handled == [signal.SIGUSR1]
            assert w.closed
            drain.join(10)
            assert drain.error is None
            assert drain.got == msgs
            assert drain.saw_eof
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_flush_to_a_vanished_reader_is_broken_pipe() -> None:
    r, w = AtomicPipe.pair()
    try:
        fill(w)
        r.close()
        with pytest.raises(BrokenPipeError):
            w.flush(5)
    finally:
        with contextlib.suppress(BrokenPipeError):
            w.close()  # what was queued cannot be delivered: close may say so again
        r.close()
    assert w.closed


@pytest.mark.parametrize("blocking", [True, False])
def test_write_to_a_vanished_reader_is_broken_pipe(blocking: bool) -> None:
    r, w = AtomicPipe.pair()
    with w:
        w.blocking = blocking
        r.close()
        calls: tuple[Callable[[], object], ...] = (
            lambda: w.write_message(b"x"),
            lambda: w.write_message(b"y" * 10_000),
            lambda: w.write_messages([b"a", b"b"]),
            lambda: w.write_burst(b"burst"),
        )
        for call in calls:
            with pytest.raises(BrokenPipeError):
                call()
        assert w.pending_output == 0


SIGPIPE_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # what a C program or a shell pipeline has
    from fdkit.atomic_pipe import AtomicPipe

    r, w = AtomicPipe.pair()
    r.close()
    said = []
    for call in (
        lambda: w.write_message(b"x"),
        lambda: w.write_message(b"y" * 10_000),
        lambda: w.write_messages([b"a", b"b"]),
        lambda: w.write_burst(b"burst"),
    ):
        try:
            call()
            said.append("wrote")
        except BrokenPipeError:
            said.append("epipe")
    w.close()
    print(",".join(said), signal.getsignal(signal.SIGPIPE) == signal.SIG_DFL, flush=True)
    # The disposition really is deadly: a plain write to a broken pipe kills us now.
    a, b = os.pipe()
    os.close(a)
    os.write(b, b"x")
    print("still alive", flush=True)
    """
)


def test_sigpipe_default_child_gets_broken_pipe_not_death() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SIGPIPE_CHILD], capture_output=True, text=True, timeout=20
    )
    assert out.stdout == "epipe,epipe,epipe,epipe True\n", out.stderr
    assert out.returncode == -signal.SIGPIPE, (out.returncode, out.stderr)  # the plain write
