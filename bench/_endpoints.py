"""The far ends of the byte-moving benches: source and sink processes, their data, and the CPU
figures of other processes.

The relaying process is what the zero-copy benches measure, so the endpoints run in other
processes (their CPU is not counted) and are cheap: a source sends from a page-cached file
with ``os.sendfile``; a sink splices what it receives into ``/dev/null`` through a 1 MiB pipe,
or, when asked to check the bytes, reads them into one reused buffer and hashes them.

An endpoint process is plain Python (no fdkit import; :mod:`bench.child.endpoint`) started
once per case with ``python bench/child/endpoint.py ROLE ...``; it takes one command per line
on stdin and answers one line on stdout, and exits when its stdin closes. Roles:

``source FD DATA``
    command ``N``: send N bytes on the connected socket FD (the DATA file over and over);
    answers ``sent N``.
``sink FD``
    command ``N MODE``: receive exactly N bytes (fewer at EOF) from the connected socket FD;
    MODE ``sha`` hashes them, ``count`` only counts; answers ``COUNT SHA256`` (``-`` for count).
``accept-sink FD``
    command ``MODE``: accept one connection on the listening socket FD, receive until EOF,
    close it; answers ``COUNT SHA256``.
``client DATA``
    command ``HOST PORT N``: connect, send N bytes, ``shutdown(SHUT_WR)``, read until EOF,
    close; answers ``sent N``.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from bench.child import script

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30


def _tail(f: IO[bytes], limit: int = 2000) -> str:
    """The last ``limit`` bytes of a temporary file, as text."""
    try:
        f.flush()
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - limit))
        return f.read().decode(errors="replace").strip()
    except (OSError, ValueError):
        return ""


def stop_process(proc: subprocess.Popen[bytes], sig: int, timeout: float) -> int | None:
    """Send ``sig`` to ``proc`` (by pid), wait up to ``timeout`` s, then SIGKILL it.

    Returns the exit status, or ``None`` when it had to be killed.
    """
    if proc.poll() is not None:
        return proc.returncode
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, sig)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        return None


class Child:
    """A process that takes one command line and answers one line, with timeouts.

    ``argv`` is run as is (in ``env``; this process's environment when None); stderr goes to a
    temporary file that errors quote. :meth:`stop` closes its stdin (it exits), and kills it by
    pid if it does not within the timeout.
    """

    def __init__(self, name: str, argv: Sequence[str], pass_fds: Sequence[int] = (),
                 env: Mapping[str, str] | None = None) -> None:  # fmt: skip
        self.name = name
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop)
        try:
            self.proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._err,
                pass_fds=tuple(pass_fds),
                env=env,
            )
        except BaseException:
            self._err.close()
            raise
        self._buf = b""

    @classmethod
    def endpoint(cls, role: str, *args: str, pass_fds: Sequence[int] = ()) -> Child:
        """An endpoint process (see the module docstring) in role ``role``."""
        argv = [sys.executable, script("endpoint"), role, *args]
        return cls(role, argv, pass_fds)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr_tail(self) -> str:
        return _tail(self._err)

    def _died(self, what: str) -> RuntimeError:
        rc = self.proc.poll()
        return RuntimeError(
            f"bench {self.name} process {what} (exit status {rc}): {self.stderr_tail()}"
        )

    def send(self, line: str) -> None:
        """Send one command line."""
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            stdin.write(line.encode() + b"\n")
            stdin.flush()
        except (BrokenPipeError, ValueError):
            raise self._died("is gone") from None

    def reply(self, timeout: float) -> str:
        """The next answer line, waiting at most ``timeout`` seconds."""
        stdout = self.proc.stdout
        assert stdout is not None
        fd = stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._died(f"did not answer within {timeout:g} s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                raise self._died("exited")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode()

    def ask(self, line: str, timeout: float) -> str:
        """Send a command and wait for its answer."""
        self.send(line)
        return self.reply(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Close stdin (the endpoint exits), wait, kill it by pid if it lingers."""
        try:
            if self.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    self.proc.stdin.close()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                stop_process(self.proc, signal.SIGKILL, timeout)
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self._err.close()


def write_data(path: str, size: int, data: bytes) -> None:
    """Write ``size`` bytes of ``data`` repeated (and cut) to ``path``."""
    with open(path, "wb") as f:
        left = size
        while left:
            chunk = data[: min(left, len(data))]
            f.write(chunk)
            left -= len(chunk)


def repeated_sha(data: bytes, total: int, period: int | None = None) -> str:
    """SHA-256 of ``total`` bytes of ``data[:period]`` repeated (and cut).

    ``period`` longer than ``data`` means ``data`` itself repeated up to ``period`` bytes,
    and that block repeated.
    """
    block_len = period if period is not None else len(data)
    h = hashlib.sha256()
    if block_len <= len(data):
        block = memoryview(data)[:block_len]
        left = total
        while left:
            n = min(left, block_len)
            h.update(block[:n])
            left -= n
        return h.hexdigest()
    # a period longer than data: hash data-repeated blocks of block_len
    left = total
    while left:
        in_block = min(left, block_len)
        left -= in_block
        while in_block:
            n = min(in_block, len(data))
            h.update(data[:n])
            in_block -= n
    return h.hexdigest()


def file_sha(fd: int) -> str:
    """SHA-256 of a file's content read through ``fd`` (from offset 0, position untouched)."""
    h = hashlib.sha256()
    buf = memoryview(bytearray(MiB))
    off = 0
    while True:
        n = os.preadv(fd, [buf], off)
        if n == 0:
            return h.hexdigest()
        h.update(buf[:n])
        off += n


def warm(fd: int) -> None:
    """Read a whole file once so it sits in the page cache (``os.sendfile`` to /dev/null)."""
    size = os.fstat(fd).st_size
    null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    try:
        off = 0
        while off < size:
            n = os.sendfile(null, fd, off, size - off)
            if n == 0:
                break
            off += n
    finally:
        os.close(null)


def wait_readable(fd: int, timeout: float) -> None:
    """Block (without burning CPU) until ``fd`` is readable."""
    p = select.poll()
    p.register(fd, select.POLLIN)
    if not p.poll(timeout * 1000):
        raise RuntimeError(f"nothing arrived on fd {fd} within {timeout:g} s")


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    """A connected loopback TCP pair (127.0.0.1), both ends blocking."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        a = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            a.connect(listener.getsockname())
            b, _ = listener.accept()
        except BaseException:
            a.close()
            raise
    return a, b


def stream_pair(kind: str) -> tuple[socket.socket, socket.socket]:
    """A connected stream pair: ``tcp`` (loopback) or ``unix`` (``socketpair``)."""
    if kind == "tcp":
        return tcp_pair()
    if kind == "unix":
        return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    raise ValueError(f"not a stream kind: {kind}")


@dataclass(frozen=True)
class CpuReading:
    """A process's CPU time so far, two ways (seconds)."""

    ticks: float
    """utime + stime of all its threads, live and exited, from ``/proc/PID/stat``: in clock
    ticks (``SC_CLK_TCK``, usually 100 per second), so it moves in 10 ms steps."""
    runtime: float | None
    """The sum of its live threads' run time from ``/proc/PID/task/*/schedstat``, in ns
    steps; misses threads that exited. ``None`` when unreadable."""


def process_tree(pid: int) -> list[int]:
    """``pid`` (first) and every live process under it (children, their children, ...), from
    the parent pids in ``/proc/*/stat``: the one walk of a process tree, which the serve
    bench sums CPU over and the serve tests use to find and signal workers."""
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(parents.get(p, []))
    return out


def read_cpu(pid: int) -> CpuReading:
    """The CPU time process ``pid`` has used so far (see :class:`CpuReading`)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        text = f.read()
    fields = text.rsplit(b")", 1)[1].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15
    ticks = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    runtime: float | None = 0.0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tids = []
        runtime = None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                ns = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread just exited
        if runtime is not None:
            runtime += ns / 1e9
    return CpuReading(ticks, runtime)


def cpu_between(before: CpuReading, after: CpuReading) -> float:
    """Seconds of CPU used between two readings of one process.

    The kernel's utime + stime is the reference; the per-thread run time sum measures the same
    thing in finer steps and is used when it agrees with it (within 3 ticks and 5%), which it
    does unless a thread came and went in between.
    """
    ticks = after.ticks - before.ticks
    if before.runtime is None or after.runtime is None:
        return ticks
    runtime = after.runtime - before.runtime
    tick = 1 / os.sysconf("SC_CLK_TCK")
    if runtime >= 0 and abs(runtime - ticks) <= 3 * tick + 0.05 * max(ticks, runtime):
        return runtime
    return ticks


# The kinds of a process's CPU-time clock (a clockid of ((~pid) << 3) | kind; the kernel's
# CPUCLOCK_PROF and CPUCLOCK_VIRT): user + system, and user alone.
_CPUCLOCK_PROF = 0
_CPUCLOCK_VIRT = 1


def read_user_system(pid: int) -> tuple[float, float]:
    """Process ``pid``'s user and system CPU seconds so far (all its threads, live and exited).

    These are the samples behind ``/proc/PID/stat``'s utime and stime: at each scheduler tick
    (``CONFIG_HZ``, often 250/s) the kernel charges the whole tick to the task running then,
    as user or system time, and ``/proc`` shows that split scaled to the exact run time and
    rounded to clock ticks (10 ms), too coarse to split a short run. The process's CPU-time
    clocks (``clock_gettime`` on its user+system and its user clock, which any process may
    read) give the samples themselves in ns. ``/proc/PID/stat`` is the fallback where the
    clocks cannot be read. Use the share of user time (:func:`user_share`), not the sums: a
    process that runs in short bursts is sampled less than it runs.
    """
    try:
        prof = time.clock_gettime_ns(((~pid) << 3) | _CPUCLOCK_PROF)
        user = time.clock_gettime_ns(((~pid) << 3) | _CPUCLOCK_VIRT)
        return user / 1e9, (prof - user) / 1e9
    except OSError:
        pass
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def user_share(pids: Sequence[int]) -> Callable[[], float]:
    """A reader of the share of user time in the CPU ``pids`` use from now on (their summed
    utime over utime + stime, see :func:`read_user_system`); NaN when no tick was sampled in
    between (a run too short to split)."""
    before = {pid: read_user_system(pid) for pid in pids}

    def since() -> float:
        user = system = 0.0
        for pid in pids:
            u, s = read_user_system(pid)
            user += u - before[pid][0]
            system += s - before[pid][1]
        total = user + system
        return user / total if total > 0 else math.nan

    return since
