"""Helpers the test modules share (imported as ``from helpers import ...``): fd
bookkeeping, polling with a deadline, syscall numbers, children to interrupt, payloads, the far
ends of pipes and sockets, and bounded calls. Fixtures and hooks live in ``conftest.py``;
helpers of one family live in the submodules (``helpers.wire``, ``helpers.serve``,
``helpers.terminal``).

Everything here uses the real kernel: real sockets on 127.0.0.1 / ::1, real pipes, real files.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from fdkit import fd
from fdkit.types import Address

PROC_FD = "/proc/self/fd"

#: The calls of :mod:`fdkit.fd` that take an fd first, each given a number ``n`` and otherwise
#: arguments that do not matter: what an fd that is out of range or closed must be refused by.
CALLS_ON_AN_FD: dict[str, Callable[[int], object]] = {
    "read": lambda n: fd.read(n, 1),
    "readinto": lambda n: fd.readinto(n, bytearray(1)),
    "write": lambda n: fd.write(n, b"x"),
    "pread": lambda n: fd.pread(n, 1, 0),
    "pwrite": lambda n: fd.pwrite(n, b"x", 0),
    "lseek": lambda n: fd.lseek(n, 0),
    "close": fd.close,
    "dup": fd.dup,
    "fcntl": lambda n: fd.fcntl(n, fcntl.F_GETFL),
    "get_blocking": fd.get_blocking,
    "get_cloexec": fd.get_cloexec,
    "set_cloexec": fd.set_cloexec,
    "fstat": fd.fstat,
    "bind": lambda n: fd.bind(n, ("127.0.0.1", 0)),
    "listen": fd.listen,
    "accept": fd.accept,
    "accept4": fd.accept4,
    "accept_many": fd.accept_many,
    "connect": lambda n: fd.connect(n, ("127.0.0.1", 9)),
    "getsockname": fd.getsockname,
    "getpeername": fd.getpeername,
    "recv": lambda n: fd.recv(n, 1),
    "recv_into": lambda n: fd.recv_into(n, bytearray(1)),
    "send": lambda n: fd.send(n, b"x"),
}

#: The seccomp wrapper that runs a command where io_uring is denied (see its docstring).
NO_URING = Path(__file__).with_name("no_uring.py")


def run_python_without_uring(code: str) -> subprocess.CompletedProcess[str]:
    """``python -c code`` under :data:`NO_URING` (io_uring's syscalls fail with ENOSYS, as on
    a kernel without it); skips the test where the filter cannot be installed (exit 77)."""
    r = subprocess.run(
        [sys.executable, str(NO_URING), sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if r.returncode == 77:
        pytest.skip("no seccomp filter for this architecture")
    return r


def open_fds() -> dict[int, str]:
    """The fds open in this process, each with what it points to (``readlink``).

    Listing ``/proc/self/fd`` opens a directory fd that shows up in the listing and is closed
    by the time the listing returns: an entry whose link can no longer be read was that
    directory fd (or an fd another thread closed meanwhile) and is left out.
    """
    out: dict[int, str] = {}
    for name in os.listdir(PROC_FD):
        try:
            out[int(name)] = os.readlink(f"{PROC_FD}/{name}")
        except FileNotFoundError:
            continue
    return out


def is_open(n: int) -> bool:
    """Whether ``n`` is an open fd in this process (without touching it)."""
    return os.path.lexists(f"{PROC_FD}/{n}")


class Fds:
    """The fds one test owns: closed at the end of the test unless the test closed them.

    Tests close through :meth:`close` so that the tracker never closes a number twice (a
    second close could hit an fd something else has been given meanwhile).
    """

    def __init__(self) -> None:
        self.owned: list[int] = []

    def own(self, *fds: int) -> int:
        """Registers fds the test created; returns the first, for ``x = fds.own(fd.socket())``."""
        for n in fds:
            assert isinstance(n, int), n
            assert n >= 0, n
            assert n not in self.owned, f"fd {n} registered twice"
            self.owned.append(n)
        return fds[0]

    def close(self, n: int) -> None:
        """Closes a registered fd now (and forgets it)."""
        self.owned.remove(n)
        fd.close(n)

    def forget(self, n: int) -> None:
        """Drops an fd the test closed some other way (e.g. by ``dup2`` over it)."""
        self.owned.remove(n)

    def close_all(self) -> None:
        errors = []
        while self.owned:
            n = self.owned.pop()
            try:
                fd.close(n)
            except OSError as e:
                errors.append((n, e))
        assert not errors, f"closing the test's fds failed: {errors}"

    # Builders: each registers what it creates.

    def sock(self, *args: int, **kwargs: bool) -> int:
        return self.own(fd.socket(*args, **kwargs))

    def pipe(self, flags: int = 0, **kwargs: bool) -> tuple[int, int]:
        r, w = fd.pipe(flags, **kwargs)
        self.own(r, w)
        return r, w

    def listener(
        self, family: int = socket.AF_INET, *, blocking: bool = True, backlog: int = 128
    ) -> tuple[int, Address]:
        """A TCP listener on loopback, port 0: ``(fd, address)``."""
        host = "127.0.0.1" if family == socket.AF_INET else "::1"
        lfd = self.sock(family, socket.SOCK_STREAM)
        fd.setsockopt(lfd, socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        fd.bind(lfd, (host, 0))
        fd.listen(lfd, backlog)
        if not blocking:
            fd.set_blocking(lfd, False)
        return lfd, fd.getsockname(lfd)

    def connected(self, family: int = socket.AF_INET) -> tuple[int, int]:
        """A connected TCP pair on loopback: ``(client, server)``; the listener is closed."""
        lfd, addr = self.listener(family)
        c = self.sock(family, socket.SOCK_STREAM)
        fd.connect(c, addr)
        s, _ = fd.accept(lfd)
        self.own(s)
        self.close(lfd)
        return c, s

    def client(self, addr: Address, family: int = socket.AF_INET) -> int:
        c = self.sock(family, socket.SOCK_STREAM)
        fd.connect(c, addr)
        return c


def ipv6_loopback() -> bool:
    """Whether ``::1`` can be bound here."""
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


def wait_for(cond: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    """Polls ``cond`` until true; fails the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.005)


#: The end of a child program (see :func:`ready_child`) that runs its ``call()``: it prints
#: ``KeyboardInterrupt`` and exits 42 when Ctrl-C interrupts it, ``returned`` and 0 otherwise.
CHILD_CALL_TAIL = """
try:
    call()
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
    sys.exit(42)
print("returned", flush=True)
sys.exit(0)
"""


@contextmanager
def ready_child(code: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """``python -c code``, which prints ``ready <pid>`` once it is set up: yields the child and
    that pid once the line came (within 20 s); kills the child if it still runs afterwards."""
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert fd.poll([(child.stdout.fileno(), fd.POLLIN)], 20), "the child never got ready"
        line = child.stdout.readline().split()
        err = child.stderr.read() if child.poll() is not None and child.stderr else ""
        assert line[:1] == ["ready"], (line, err)
        yield child, int(line[1])
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        child.communicate(timeout=10)


def interrupt_expecting_keyboard_interrupt(
    child: subprocess.Popen[str], pid: int, what: str, within: float = 5.0
) -> str:
    """Sends SIGINT to ``pid``; the child must exit 42 (its KeyboardInterrupt handler) within
    ``within`` seconds. Returns its stdout. The caller still kills the child in ``finally``."""
    sent = time.monotonic()
    os.kill(pid, signal.SIGINT)
    try:
        out, err = child.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what}: the child did not react to SIGINT within {within:g} s", pytrace=False)
    assert time.monotonic() - sent < within
    assert child.returncode == 42, (child.returncode, out, err)
    return out


def syscall_of(tid: int, pid: int | None = None) -> int | None:
    """The number of the syscall thread ``tid`` is blocked in, or None if it is running.

    Reads ``/proc/<pid>/task/<tid>/syscall`` (first field: the syscall number, ``running`` or
    ``-1`` when not in a syscall).
    """
    pid = os.getpid() if pid is None else pid
    try:
        with open(f"/proc/{pid}/task/{tid}/syscall") as f:
            first = f.read().split(maxsplit=1)[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    except PermissionError:
        pytest.skip("/proc/<pid>/syscall is not readable here")
    try:
        n = int(first)
    except ValueError:
        return None
    return n if n >= 0 else None


# x86_64 and aarch64 syscall numbers for the calls the blocking tests wait in.
SYSCALLS = {
    "x86_64": {
        "read": {0},
        "accept": {43, 288},
        "poll": {7, 271},
        "recv": {45},
        "send": {44},
        "sendfile": {40},
        "connect": {42},
        "open": {2, 257},
    },
    "aarch64": {
        "read": {63},
        "accept": {202, 242},
        "poll": {73},
        "recv": {207},
        "send": {206},
        "sendfile": {71},
        "connect": {203},
        "open": {56},
    },
}


def syscall_numbers(name: str) -> set[int]:
    machine = os.uname().machine
    if machine not in SYSCALLS:
        pytest.skip(f"syscall numbers for {machine} not known to the tests")
    return SYSCALLS[machine][name]


def errno_name(n: int) -> str:
    return errno.errorcode.get(n, str(n))


# ---------------------------------------------------------------------------------------------
# fdkit.zerocopy: payloads, the far ends of pipes and sockets, unix stream pairs


@functools.lru_cache(maxsize=32)
def payload(n: int, seed: int = 0) -> bytes:
    """``n`` pseudo-random bytes, the same for the same ``(n, seed)``: a stream no copy path
    could fake by repeating, dropping or reordering chunks."""
    return random.Random(seed * 1_000_003 + n).randbytes(n)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Feeder(threading.Thread):
    """The far end of a source: writes ``data`` to ``fd`` a chunk at a time (pausing between
    chunks when asked), then runs ``then`` (a close or a shutdown). An OSError (the other side
    went away) ends it and is kept in ``error``."""

    def __init__(
        self,
        fd_: int,
        data: bytes,
        *,
        then: Callable[[], None] | None = None,
        chunk: int = 256 << 10,
        pause: float = 0.0,
    ) -> None:
        super().__init__(daemon=True)
        self.fd, self.data, self.then, self.chunk, self.pause = fd_, data, then, chunk, pause
        self.sent = 0
        self.error: OSError | None = None

    def run(self) -> None:
        view = memoryview(self.data)
        try:
            while self.sent < len(view):
                try:
                    self.sent += fd.write(self.fd, view[self.sent : self.sent + self.chunk])
                except BlockingIOError:
                    fd.poll([(self.fd, fd.POLLOUT)], 1.0)
                    continue
                if self.pause:
                    time.sleep(self.pause)
        except OSError as e:
            self.error = e
        finally:
            if self.then is not None:
                try:
                    self.then()
                except OSError as e:
                    self.error = self.error or e

    def finish(self, timeout: float = 10.0) -> Feeder:
        """Waits for the feeder (bounded) and checks it wrote everything."""
        self.join(timeout)
        assert not self.is_alive(), f"the feeder is stuck after {self.sent} bytes"
        assert self.error is None, self.error
        assert self.sent == len(self.data)
        return self


class Sink(threading.Thread):
    """The far end of a destination: reads ``fd`` until EOF (pausing between reads when
    asked), hashing what arrives and keeping it when ``keep``. An OSError ends it and is kept
    in ``error``."""

    def __init__(
        self, fd_: int, *, keep: bool = False, chunk: int = 256 << 10, pause: float = 0.0
    ) -> None:
        super().__init__(daemon=True)
        self.fd, self.keep, self.chunk, self.pause = fd_, keep, chunk, pause
        self.hash = hashlib.sha256()
        self.received = 0
        self.kept = bytearray()
        self.eof = False
        self.error: OSError | None = None

    def run(self) -> None:
        try:
            while True:
                try:
                    data = fd.read(self.fd, self.chunk)
                except BlockingIOError:
                    fd.poll([(self.fd, fd.POLLIN)], 1.0)
                    continue
                if not data:
                    self.eof = True
                    return
                self.hash.update(data)
                self.received += len(data)
                if self.keep:
                    self.kept += data
                if self.pause:
                    time.sleep(self.pause)
        except OSError as e:
            self.error = e

    def finish(self, timeout: float = 10.0) -> Sink:
        """Waits for EOF (bounded) and checks nothing failed on the way."""
        self.join(timeout)
        assert not self.is_alive(), f"no EOF on the sink after {self.received} bytes"
        assert self.error is None, self.error
        return self

    @property
    def digest(self) -> str:
        return self.hash.hexdigest()


def unix_stream_pair(fds: Fds) -> tuple[int, int]:
    """A connected AF_UNIX stream pair made by listen/connect/accept on an abstract address
    (unlike ``socketpair``): ``(client, server)``; the listener is closed."""
    name = f"\0fdkit-zc-{uuid.uuid4().hex}"
    lfd = fds.sock(socket.AF_UNIX, socket.SOCK_STREAM)
    fd.bind(lfd, name)
    fd.listen(lfd, 8)
    c = fds.sock(socket.AF_UNIX, socket.SOCK_STREAM)
    fd.connect(c, name)
    s, _ = fd.accept(lfd)
    fds.own(s)
    fds.close(lfd)
    return c, s


class Outcome:
    """What a call run by :func:`bounded` did: its result or its exception, and how long."""

    def __init__(self) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.elapsed = 0.0

    def get(self) -> Any:
        """The result, or the call's exception re-raised."""
        if self.error is not None:
            raise self.error
        return self.result


def bounded(
    call: Callable[[], Any], timeout: float = 10.0, unblock: Callable[[], object] | None = None
) -> Outcome:
    """Runs ``call`` in a thread and waits at most ``timeout`` seconds for it: a call that
    hangs fails the test (after ``unblock`` was given a chance to free it) instead of hanging
    the suite."""
    out = Outcome()

    def run() -> None:
        start = time.monotonic()
        try:
            out.result = call()
        except BaseException as e:
            out.error = e
        out.elapsed = time.monotonic() - start

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        if unblock is not None:
            unblock()
        t.join(5)
        pytest.fail(f"the call did not return within {timeout} s", pytrace=False)
    return out
