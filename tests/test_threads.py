"""Blocking calls release the GIL, and Ctrl-C interrupts them.

Each GIL test starts a watchdog *process* first: if a blocked call held the GIL, no Python
thread here could unblock it, so the watchdog does after a few seconds and the test then fails
on its assertions instead of hanging.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fdkit import fd
from fdkit.types import InetAddress
from helpers import (
    CHILD_CALL_TAIL,
    Fds,
    interrupt_expecting_keyboard_interrupt,
    ready_child,
    syscall_numbers,
    syscall_of,
    wait_for,
)

WATCHDOG_DELAY = 4.0


def start_watchdog(
    code: str, *, pass_fds: tuple[int, ...] = (), close_fds: bool = True
) -> subprocess.Popen[bytes]:
    """A child Python that sleeps WATCHDOG_DELAY seconds, then runs ``code``."""
    script = f"import time, os, socket, sys\ntime.sleep({WATCHDOG_DELAY})\n{code}"
    return subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=pass_fds,
        close_fds=close_fds,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


class Blocked(threading.Thread):
    """Runs ``call`` in a thread, recording its native id, result or exception."""

    def __init__(self, call: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self.call = call
        self.tid: int | None = None
        self.result: object = None
        self.error: BaseException | None = None
        self.started_at = 0.0
        self.finished_at = 0.0

    def run(self) -> None:
        self.tid = threading.get_native_id()
        self.started_at = time.monotonic()
        try:
            self.result = self.call()
        except BaseException as e:
            self.error = e
        self.finished_at = time.monotonic()


def wait_in_syscall(t: Blocked, names: set[int], what: str) -> None:
    wait_for(lambda: t.tid is not None, 5, f"{what} thread to start")
    assert t.tid is not None
    tid = t.tid
    wait_for(lambda: syscall_of(tid) in names, 5, f"{what} thread to block in its syscall")


def test_accept_releases_gil(fds: Fds, listener: tuple[int, InetAddress]) -> None:
    lfd, (host, port) = listener
    watchdog = start_watchdog(f"socket.create_connection(({host!r}, {port})).close()")
    t = Blocked(lambda: fd.accept(lfd))
    try:
        t.start()
        wait_in_syscall(t, syscall_numbers("accept"), "accept")

        # The main thread keeps running Python code while the other thread waits in accept.
        spins = 0
        loop_start = time.monotonic()
        while time.monotonic() - loop_start < 0.3:
            spins += 1
        assert spins > 1000
        assert t.is_alive(), "accept returned before anyone connected"
        assert time.monotonic() - t.started_at < WATCHDOG_DELAY, "the main thread was stalled"

        c = fds.client((host, port))
        t.join(5)
        assert not t.is_alive()
        assert t.error is None, t.error
        assert isinstance(t.result, tuple)
        conn, peer = t.result
        assert peer == fd.getsockname(c) == fd.getpeername(conn)
    finally:
        if t.is_alive():  # a failed assertion above: let the thread go before cleaning up
            fds.client((host, port))
            t.join(5)
        if isinstance(t.result, tuple):
            fds.own(t.result[0])
        stop(watchdog)


def test_two_threads_blocked_in_read(fds: Fds) -> None:
    r1, w1 = fds.pipe()
    r2, w2 = fds.pipe()
    watchdog = start_watchdog(
        f"os.write({w1}, b'W'); os.write({w2}, b'W')", pass_fds=(w1, w2), close_fds=True
    )
    t1 = Blocked(lambda: fd.read(r1, 100))
    t2 = Blocked(lambda: fd.read(r2, 100))
    try:
        t1.start()
        t2.start()
        names = syscall_numbers("read")
        wait_in_syscall(t1, names, "first read")
        wait_in_syscall(t2, names, "second read")
        # Both are in read(2) at the same time, and this thread still runs.
        assert t1.tid is not None
        assert t2.tid is not None
        assert syscall_of(t1.tid) in names
        assert t1.is_alive()
        assert t2.is_alive()
        assert time.monotonic() - t1.started_at < WATCHDOG_DELAY, "the main thread was stalled"

        fd.write(w2, b"two")
        t2.join(5)
        assert not t2.is_alive()
        assert t1.is_alive(), "releasing one reader released both"
        fd.write(w1, b"one")
        t1.join(5)
        assert not t1.is_alive()
        assert (t1.error, t2.error) == (None, None)
        assert (t1.result, t2.result) == (b"one", b"two")
    finally:
        for t, w in ((t1, w1), (t2, w2)):
            if t.is_alive():
                fd.write(w, b"!")
                t.join(5)
        stop(watchdog)


def test_poll_releases_gil(fds: Fds) -> None:
    r, w = fds.pipe()
    watchdog = start_watchdog(f"os.write({w}, b'W')", pass_fds=(w,), close_fds=True)
    t = Blocked(lambda: fd.poll([(r, fd.POLLIN)], None))
    try:
        t.start()
        wait_in_syscall(t, syscall_numbers("poll"), "poll")
        assert t.is_alive()
        fd.write(w, b"x")
        t.join(5)
        assert not t.is_alive()
        assert t.result == [(r, fd.POLLIN)]
        assert t.finished_at - t.started_at < WATCHDOG_DELAY
    finally:
        if t.is_alive():
            fd.write(w, b"!")
            t.join(5)
        stop(watchdog)


def test_open_fifo_releases_gil(fds: Fds, tmp_path: Path) -> None:
    """open(2) of a FIFO waits for the other end: the GIL must be free meanwhile."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    watchdog = start_watchdog(f"os.close(os.open({str(fifo)!r}, os.O_WRONLY))")
    t = Blocked(lambda: fd.open(fifo, fd.O_RDONLY))
    try:
        t.start()
        wait_in_syscall(t, syscall_numbers("open"), "open")
        assert t.is_alive()
        assert time.monotonic() - t.started_at < WATCHDOG_DELAY, "the main thread was stalled"
        w = fds.own(fd.open(fifo, fd.O_WRONLY))
        t.join(5)
        assert not t.is_alive()
        assert t.error is None, t.error
        assert isinstance(t.result, int)
        fd.write(w, b"fifo")
        assert fd.read(t.result, 10) == b"fifo"
    finally:
        if t.is_alive():
            fds.own(fd.open(fifo, fd.O_WRONLY))
            t.join(5)
        if isinstance(t.result, int):
            fds.own(t.result)
        stop(watchdog)


def test_recv_and_accept_many_from_threads(fds: Fds) -> None:
    """Many threads hammering fd calls at once: every result lands where it belongs."""
    lfd, addr = fds.listener(blocking=False)
    clients = [fds.client(addr) for _ in range(8)]
    got = fd.accept_many(lfd)
    for conn, _ in got:
        fds.own(conn)
        fd.set_blocking(conn, True)
    by_peer = {peer: conn for conn, peer in got}
    results: dict[int, bytes] = {}

    def payload(client: int) -> bytes:
        return b"".join(b"%d:%d;" % (client, i) for i in range(200))

    def echo(client: int) -> None:
        conn = by_peer[fd.getsockname(client)]
        data = payload(client)
        sent = 0
        while sent < len(data):
            sent += fd.send(client, data[sent:])
        results[client] = fd.recv(conn, len(data), socket.MSG_WAITALL)

    threads = [threading.Thread(target=echo, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert all(not t.is_alive() for t in threads)
    assert results == {c: payload(c) for c in clients}


# ---------------------------------------------------------------------------------------------
# Ctrl-C in a child process

CHILD_PRELUDE = """
import os, sys
from fdkit import fd
def report():
    print("ready", os.getpid(), flush=True)
"""

CHILD_BLOCKERS = {
    "accept": """
l = fd.socket(); fd.bind(l, ("127.0.0.1", 0)); fd.listen(l)
report()
call = lambda: fd.accept(l)
""",
    "accept4": """
l = fd.socket(); fd.bind(l, ("127.0.0.1", 0)); fd.listen(l)
report()
call = lambda: fd.accept4(l, fd.NONBLOCK)
""",
    "poll": """
r, w = fd.pipe()
report()
call = lambda: fd.poll([(r, fd.POLLIN)], None)
""",
    "poll_timeout": """
r, w = fd.pipe()
report()
call = lambda: fd.poll([(r, fd.POLLIN)], 3600.0)
""",
    "read": """
r, w = fd.pipe()
report()
call = lambda: fd.read(r, 10)
""",
    "recv": """
a, b = fd.socketpair()
report()
call = lambda: fd.recv(a, 10)
""",
    # A socket whose buffer is already full, so the blocking call sends nothing before the
    # signal and cannot return a short count instead of being interrupted.
    "send": """
a, b = fd.socketpair(fd.AF_UNIX, fd.SOCK_STREAM | fd.SOCK_NONBLOCK)
try:
    while True:
        fd.send(a, b"x" * 65536)
except BlockingIOError:
    pass
fd.set_blocking(a, True)
report()
call = lambda: fd.send(a, b"y" * 65536)
""",
    "sendfile": """
import tempfile
a, b = fd.socketpair(fd.AF_UNIX, fd.SOCK_STREAM | fd.SOCK_NONBLOCK)
try:
    while True:
        fd.send(a, b"x" * 65536)
except BlockingIOError:
    pass
fd.set_blocking(a, True)
f, path = fd.mkstemp()
os.unlink(path)
fd.write(f, b"z" * 1_000_000)
report()
call = lambda: fd.sendfile(a, f, 0)
""",
    # Opening a FIFO for reading waits for a writer.
    "open_fifo": """
import tempfile
d = tempfile.mkdtemp()
fifo = d + "/fifo"
os.mkfifo(fifo)
report()
call = lambda: fd.open(fifo, fd.O_RDONLY)
""",
    # A listener whose accept queue is full: the kernel drops the SYN, connect waits.
    "connect": """
l = fd.socket(); fd.bind(l, ("127.0.0.1", 0)); fd.listen(l, 0)
addr = fd.getsockname(l)
first = fd.socket(); fd.connect(first, addr)
c = fd.socket()
report()
call = lambda: fd.connect(c, addr)
""",
}

SYSCALL_OF_BLOCKER = {
    "accept": "accept",
    "accept4": "accept",
    "poll": "poll",
    "poll_timeout": "poll",
    "read": "read",
    "recv": "recv",
    "send": "send",
    "sendfile": "sendfile",
    "connect": "connect",
    "open_fifo": "open",
}


@pytest.mark.parametrize("blocker", sorted(CHILD_BLOCKERS))
def test_ctrl_c_interrupts_blocking_call(blocker: str) -> None:
    code = CHILD_PRELUDE + textwrap.dedent(CHILD_BLOCKERS[blocker]) + CHILD_CALL_TAIL
    with ready_child(code) as (child, pid):
        names = syscall_numbers(SYSCALL_OF_BLOCKER[blocker])
        # Signal only once the child is inside the syscall, so the test measures interruption
        # of a blocked call (a signal before it would be handled by Python on its own).
        wait_for(lambda: syscall_of(pid, pid) in names, 10, f"the child to block in {blocker}")
        time.sleep(0.05)
        out = interrupt_expecting_keyboard_interrupt(child, pid, blocker)
        assert out.strip() == "KeyboardInterrupt"


def test_connect_finishes_after_harmless_signal() -> None:
    """A blocking connect interrupted by a signal whose handler returns is finished, not
    retried into EALREADY (PEP 475): once the listener makes room, connect returns."""
    code = textwrap.dedent(
        """
        import signal, threading, time
        from fdkit import fd
        hits = []
        signal.signal(signal.SIGUSR1, lambda *a: hits.append(1))
        l = fd.socket(); fd.bind(l, ("127.0.0.1", 0)); fd.listen(l, 0)
        addr = fd.getsockname(l)
        first = fd.socket(); fd.connect(first, addr)
        def later():
            time.sleep(0.3)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)
            time.sleep(0.2)
            conn, _ = fd.accept(l)     # room in the queue: the SYN retry gets through
            fd.close(conn)
        threading.Thread(target=later, daemon=True).start()
        c = fd.socket()
        start = time.monotonic()
        fd.connect(c, addr)
        took = time.monotonic() - start
        print(fd.getpeername(c) == addr, len(hits), took > 0.3, flush=True)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "1", "True"]


def test_signal_handler_runs_and_call_resumes(fds: Fds) -> None:
    """A signal whose handler returns normally does not end a blocking read (PEP 475): the
    read goes on and returns the data that arrives later."""
    code = textwrap.dedent(
        """
        import os, signal, sys, threading, time
        from fdkit import fd
        hits = []
        signal.signal(signal.SIGUSR1, lambda *a: hits.append(1))
        r, w = fd.pipe()
        def later():
            time.sleep(0.3)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)
            time.sleep(0.3)
            fd.write(w, b"data")
        threading.Thread(target=later, daemon=True).start()
        got = fd.read(r, 10)
        print(got.decode(), len(hits), flush=True)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=20, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["data", "1"]
