"""Ctrl-C and the GIL around long zero-copy calls.

Each Ctrl-C test runs a child Python blocked in ``transfer``/``proxy``/``relay``/``Pipe`` on a
peer that never sends (or never reads), waits until the child sits in the expected syscall,
sends SIGINT and expects KeyboardInterrupt within a few seconds. The child is killed by pid if
anything goes wrong.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from fdkit import fd, zerocopy
from helpers import (
    CHILD_CALL_TAIL,
    Fds,
    bounded,
    interrupt_expecting_keyboard_interrupt,
    payload,
    ready_child,
    syscall_of,
    wait_for,
)

pytestmark = pytest.mark.timeout(30)

# The syscalls a blocked zero-copy call can sit in.
BLOCKING_SYSCALLS = {
    "x86_64": {
        "read": 0,
        "write": 1,
        "poll": 7,
        "sendfile": 40,
        "sendto": 44,
        "recvfrom": 45,
        "ppoll": 271,
        "splice": 275,
        "tee": 276,
        "copy_file_range": 326,
    },
    "aarch64": {
        "read": 63,
        "write": 64,
        "ppoll": 73,
        "sendfile": 71,
        "sendto": 206,
        "recvfrom": 207,
        "splice": 76,
        "tee": 77,
        "copy_file_range": 285,
    },
}


def numbers() -> set[int]:
    table = BLOCKING_SYSCALLS.get(os.uname().machine)
    if table is None:
        pytest.skip(f"syscall numbers for {os.uname().machine} not known to the tests")
    return set(table.values())


PRELUDE = """
import os, socket, sys, tempfile, threading
from fdkit import fd, zerocopy
def report():
    print("ready", os.getpid(), flush=True)
def tcp_pair():
    l = socket.create_server(("127.0.0.1", 0))
    c = socket.create_connection(l.getsockname())
    s, _ = l.accept()
    l.close()
    return c, s
def quietly(f):  # f() in a thread, until the far end goes away
    def run():
        try:
            f()
        except OSError:
            pass
    threading.Thread(target=run, daemon=True).start()
def full_unix_pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    try:
        while True:
            a.send(b"x" * 65536)
    except BlockingIOError:
        pass
    a.setblocking(True)
    return a, b
"""

BLOCKERS = {
    # splice from a TCP socket that never sends (TCP splice blocks inside the kernel).
    "transfer_tcp_tcp": """
c, s = tcp_pair(); c2, s2 = tcp_pair()
report()
call = lambda: zerocopy.transfer(s.fileno(), c2.fileno())
""",
    # unix socket → pipe: splice says EAGAIN, transfer waits in poll.
    "transfer_unix_pipe": """
a, b = socket.socketpair(); r, w = os.pipe()
report()
call = lambda: zerocopy.transfer(b.fileno(), w)
""",
    # A small count through the pooled pipe on an empty non-blocking source: poll.
    "transfer_small_nonblocking": """
a, b = socket.socketpair(); b.setblocking(False); r, w = os.pipe()
report()
call = lambda: zerocopy.transfer(b.fileno(), w, 100)
""",
    # A file into a socket whose buffer is full and whose peer never reads.
    "transfer_file_full_socket": """
a, b = full_unix_pair()
f = tempfile.TemporaryFile(); f.truncate(64 << 20); f.seek(0)
report()
call = lambda: zerocopy.transfer(f.fileno(), a.fileno())
""",
    # A pipe source that never gets data, into a file.
    "transfer_pipe_file": """
r, w = os.pipe()
f = tempfile.TemporaryFile()
report()
call = lambda: zerocopy.transfer(r, f.fileno())
""",
    "proxy": """
c1, a = tcp_pair(); b, s2 = tcp_pair()
report()
call = lambda: zerocopy.proxy(a.fileno(), b.fileno())
""",
    "proxy_with_idle_timeout": """
c1, a = tcp_pair(); b, s2 = tcp_pair()
report()
call = lambda: zerocopy.proxy(a.fileno(), b.fileno(), idle_timeout=3600)
""",
    "relay": """
c, s = tcp_pair(); c2, s2 = tcp_pair()
report()
call = lambda: zerocopy.relay(s.fileno(), c2.fileno())
""",
    "relay_record": """
c, s = tcp_pair(); c2, s2 = tcp_pair()
f = tempfile.TemporaryFile()
report()
call = lambda: zerocopy.relay(s.fileno(), c2.fileno(), record_fd=f.fileno())
""",
    "pipe_read_from": """
c, s = tcp_pair()
p = zerocopy.Pipe()
report()
call = lambda: p.read_from(s.fileno(), 1000)
""",
    "pipe_tee": """
p = zerocopy.Pipe(); q = zerocopy.Pipe()
report()
call = lambda: p.tee(q, 1000)
""",
}


@pytest.mark.parametrize("blocker", sorted(BLOCKERS))
def test_ctrl_c_interrupts(blocker: str) -> None:
    names = numbers()
    code = PRELUDE + textwrap.dedent(BLOCKERS[blocker]) + CHILD_CALL_TAIL
    with ready_child(code) as (child, pid):
        wait_for(lambda: syscall_of(pid, pid) in names, 10, f"the child to block in {blocker}")
        # Waits wake every 10-20 ms to look at a closing flag (crates/fdkit-py/src/closable.rs):
        # a sample may catch that moment, so a spinner is told apart by most samples.
        samples = []
        for _ in range(10):
            time.sleep(0.01)
            samples.append(syscall_of(pid, pid) in names)
        assert sum(samples) >= 8, f"the child is spinning, not blocked: {samples}"
        out = interrupt_expecting_keyboard_interrupt(child, pid, blocker)
        assert out.strip() == "KeyboardInterrupt"


BUSY = {
    # Every splice moves a whole chunk: the transfer never waits and never comes up short.
    "zero_to_null": """
z = os.open("/dev/zero", os.O_RDONLY); n = os.open("/dev/null", os.O_WRONLY)
report()
call = lambda: zerocopy.transfer(z, n, 10**15)
""",
    "zero_to_pipe": """
z = os.open("/dev/zero", os.O_RDONLY); n = os.open("/dev/null", os.O_WRONLY)
r, w = os.pipe()
threading.Thread(target=lambda: zerocopy.transfer(r, n), daemon=True).start()
report()
call = lambda: zerocopy.transfer(z, w, 10**15)
""",
    # A proxy under a flood: every poll returns at once, every splice moves a full chunk.
    "proxy_saturated": """
client, a = socket.socketpair(); b, server = socket.socketpair()
z = os.open("/dev/zero", os.O_RDONLY); n = os.open("/dev/null", os.O_WRONLY)
quietly(lambda: zerocopy.transfer(z, client.fileno(), 10**15))
quietly(lambda: zerocopy.transfer(server.fileno(), n))
report()
call = lambda: zerocopy.proxy(a.fileno(), b.fileno())
""",
    "relay_saturated": """
src_far, src = socket.socketpair(); dst, dst_far = socket.socketpair()
z = os.open("/dev/zero", os.O_RDONLY); n = os.open("/dev/null", os.O_WRONLY)
quietly(lambda: zerocopy.transfer(z, src_far.fileno(), 10**15))
quietly(lambda: zerocopy.transfer(dst_far.fileno(), n))
report()
call = lambda: zerocopy.relay(src.fileno(), dst.fileno(), record_fd=n)
""",
    "small_counts_in_a_loop": """
z = os.open("/dev/zero", os.O_RDONLY); n = os.open("/dev/null", os.O_WRONLY)
report()
def call():
    while True:
        zerocopy.transfer(z, n, 16384)
""",
}


@pytest.mark.parametrize("busy", sorted(BUSY))
def test_ctrl_c_interrupts_a_transfer_that_never_blocks(busy: str) -> None:
    """A transfer that always has data and room (gigabytes per second, no EINTR, no short
    count, no wait) must still notice Ctrl-C: "The GIL is released for the whole transfer;
    Ctrl-C interrupts it"."""
    code = PRELUDE + textwrap.dedent(BUSY[busy]) + CHILD_CALL_TAIL
    with ready_child(code) as (child, pid):
        time.sleep(0.3)
        interrupt_expecting_keyboard_interrupt(child, pid, busy, within=3)


def test_transfer_releases_the_gil(fds: Fds) -> None:
    """While one thread is blocked in a transfer, Python code runs in the others; the
    transfer then finishes once data arrives."""
    c, s = fds.connected()
    null = fds.own(fd.open("/dev/null", fd.O_WRONLY))
    started = threading.Event()

    def call() -> int:
        started.set()
        return zerocopy.transfer(s, null)

    result: list[object] = []
    t = threading.Thread(target=lambda: result.append(call()), daemon=True)
    t.start()
    try:
        started.wait(5)
        spins = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.3:
            spins += 1
        assert spins > 1000, "the main thread was starved: the GIL is held"
        assert t.is_alive()
        fd.send(c, payload(100_000))
        fd.shutdown(c, 1)
        t.join(5)
        assert not t.is_alive()
        assert result == [100_000]
    finally:
        if t.is_alive():
            fd.shutdown(s, 2)
            t.join(5)


def test_harmless_signal_does_not_stop_a_transfer() -> None:
    """A signal whose handler returns (PEP 475) lets the transfer carry on and finish with
    every byte."""
    code = textwrap.dedent(
        """
        import signal, socket, threading, time, os
        from fdkit import zerocopy
        hits = []
        signal.signal(signal.SIGUSR1, lambda *a: hits.append(1))
        a, b = socket.socketpair()
        r, w = os.pipe()
        data = os.urandom(50_000)
        def later():
            for _ in range(3):
                time.sleep(0.1)
                signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)
            a.sendall(data)
            a.shutdown(socket.SHUT_WR)
        threading.Thread(target=later, daemon=True).start()
        got = []
        reader = threading.Thread(target=lambda: got.append(
            b"".join(iter(lambda: os.read(r, 1 << 20), b""))))
        reader.start()
        n = zerocopy.transfer(b.fileno(), w)
        os.close(w)
        reader.join(5)
        print(n, len(hits), got[0] == data, flush=True)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=20, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["50000", "3", "True"]


def test_exception_from_a_signal_handler_ends_the_transfer_with_it() -> None:
    code = textwrap.dedent(
        """
        import signal, socket, threading, time
        from fdkit import zerocopy
        class Stop(Exception):
            pass
        def handler(*a):
            raise Stop()
        signal.signal(signal.SIGUSR1, handler)
        a, b = socket.socketpair(); c, d = socket.socketpair()
        threading.Timer(0.2, lambda: signal.pthread_kill(
            threading.main_thread().ident, signal.SIGUSR1)).start()
        try:
            zerocopy.transfer(b.fileno(), c.fileno())
        except Stop:
            print("stopped", flush=True)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=20, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "stopped"


def test_bounded_helper_reports_a_hang() -> None:
    """The suite's own guard: a call that never returns fails the test instead of hanging."""
    r, w = fd.pipe()
    try:
        with pytest.raises(pytest.fail.Exception):
            bounded(lambda: fd.read(r, 1), timeout=0.2, unblock=lambda: fd.write(w, b"x"))
    finally:
        fd.close(r)
        fd.close(w)
