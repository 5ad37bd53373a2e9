"""Moving bytes between fds: ``fdkit.zerocopy.transfer`` against the stdlib ways and C.

The bench process is the relaying middle, and its CPU is what is measured: a source process
feeds it (``os.sendfile`` from a page-cached file), a sink process drains it (``splice`` into
``/dev/null``), so neither endpoint's CPU is counted (see :mod:`._endpoints`). Files are
opened by the relay itself. The sink checks it got exactly N bytes every time, and the SHA-256
of the stream in each contender's first (warm-up) run.

Kinds (source→destination): tcp→tcp, unix→tcp, tcp→unix, unix→unix (through the relay, over
loopback TCP or a unix ``socketpair``), file→tcp, tcp→file, file→file. Sizes are the bytes
per transfer call: a socket source streams N bytes and the relay moves them in calls of
``size`` bytes (4 KiB, 64 KiB, 1 MiB, and 1 GiB in one call in full mode); a file source is a
file of ``size`` bytes the relay sends N/size times from offset 0 (a small file served again
and again). Established connections are reused across rounds, so per-connection costs are
left out and the 4 KiB case measures per-transfer fixed cost.

Contenders, alternating in rounds, each moving the same k messages of ``size`` bytes:

* Python ``recv_into``/``sendall`` loop with a 64 KiB buffer (``readinto``/``write`` on the
  file side of the file kinds);
* an ``os.splice`` loop through a pipe of the default size (64 KiB);
* ``socket.sendfile`` (file→socket) or ``os.sendfile`` (file→file), file sources only;
* ``shutil.copyfileobj`` (file sources only: it copies until EOF);
* an ``os.copy_file_range`` loop (file→file);
* C: splice through a pipe raised to 1 MiB (``F_SETPIPE_SZ``; the default when EPERM), the
  practical limit, and a read/write loop with a 64 KiB buffer (``c/splice_relay.c``);
* ``fdkit.zerocopy.transfer(src, dst, size)`` per message (``src_offset=0`` for files); the
  path it took (``transfer_stats()["path"]``) is shown in each row's case.

Figures: CPU seconds of the relaying process per GiB moved (``time.process_time``), and MiB/s
of wall time from the first byte being readable to the relay's last write. File→file: before
every measurement the source file is read once (warm page cache) and the destination is a new
file, unlinked afterwards, the same for every contender.

``copy_file_1g`` copies one file of 1 GiB with ``transfer(src, dst)`` (opening and closing both
files included) and with ``shutil.copyfile``, alternating, wall time. ``--quick`` copies 128 MiB,
in the row ``copy_file_128m`` (the id says the size; smoke-test size keeps that id).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import io
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from bench._common import (
    Result,
    Sample,
    Timer,
    alternate,
    compare,
    load_c,
    median_of,
    note,
    pick,
)
from bench._endpoints import (
    Child,
    GiB,
    KiB,
    MiB,
    file_sha,
    repeated_sha,
    stream_pair,
    wait_readable,
    warm,
    write_data,
)
from fdkit import zerocopy

BENCH = "zerocopy"
GOAL_VS_LOOP = 2.0  # at most 1/2 the CPU per GiB of the recv_into/sendall loop, at >= 64 KiB
GOAL_VS_C = round(1 / 1.1, 3)  # within 1.1x of the C splice relay's CPU per GiB
GOAL_RATE = 1.0  # never slower in bytes/s than the best stdlib path
GOAL_COPY = 1.0  # a file copy no slower than shutil.copyfile

BUF = 64 * KiB  # the Python loops' buffer and the os.splice loop's request size
C_PIPE = MiB  # the C splice relay's pipe size
CPU_UNIT = "s/GiB"
RATE_UNIT = "MiB/s"
REPLY_TIMEOUT = 300.0  # seconds an endpoint may take to answer (1 GiB on a slow day)

KINDS = ("tcp_tcp", "unix_tcp", "tcp_unix", "unix_unix", "file_tcp", "tcp_file", "file_file")
SIZE_IDS = {4 * KiB: "4k", 64 * KiB: "64k", MiB: "1m", GiB: "1g"}
COPY_ID = "copy_file_1g"  # the full run copies 1 GiB
COPY_QUICK_ID = "copy_file_128m"  # --quick copies 128 MiB
STDLIB = ("py_loop", "os_splice", "sendfile", "copyfileobj", "copy_file_range")


def _size_text(n: int) -> str:
    for unit, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n} B"


def _kind_text(kind: str) -> str:
    return kind.replace("_", "→")


# --- endpoints as the relay sees them ------------------------------------------------------


@dataclass
class End:
    """One side of the relay: a connected stream socket, or a regular file's fd."""

    kind: str  # "tcp", "unix" or "file"
    fd: int
    sock: socket.socket | None = None

    @property
    def is_file(self) -> bool:
        return self.sock is None


# A mover relays k messages of ``size`` bytes from src to dst (a file source: from offset 0
# each time); every byte or an exception.
Mover = Callable[[End, End, int, int], None]


def _labels(kind: str) -> dict[str, str]:
    src, dst = kind.split("_")
    read = "readinto" if src == "file" else "recv_into"
    write = "write" if dst == "file" else "sendall"
    return {
        "py_loop": f"Python {read}/{write} loop (64 KiB)",
        "os_splice": "os.splice loop (64 KiB pipe)",
        "sendfile": "os.sendfile loop" if dst == "file" else "socket.sendfile",
        "copyfileobj": "shutil.copyfileobj",
        "copy_file_range": "os.copy_file_range loop",
        "c_splice": "C splice relay (1 MiB pipe)",
        "c_rw": "C read/write loop (64 KiB)",
        "fdkit": "transfer",
    }


def _short(moved: int, want: int, who: str) -> EOFError:
    return EOFError(f"{who}: the source ended after {moved} of {want} bytes")


def _py_loop(src: End, dst: End, size: int, k: int) -> None:
    view = memoryview(bytearray(BUF))
    with contextlib.ExitStack() as stack:
        write: Callable[[memoryview], object]
        if dst.sock is not None:
            write = dst.sock.sendall
        else:
            write = stack.enter_context(io.FileIO(dst.fd, "wb", closefd=False)).write
        if src.sock is not None:
            recv_into = src.sock.recv_into
            for _ in range(k):
                left = size
                while left:
                    n = recv_into(view, left if left < BUF else BUF)
                    if not n:
                        raise _short(size - left, size, "recv_into loop")
                    write(view[:n])
                    left -= n
            return
        f = stack.enter_context(io.FileIO(src.fd, "rb", closefd=False))
        for _ in range(k):
            f.seek(0)
            left = size
            while left:
                n = f.readinto(view[: left if left < BUF else BUF]) or 0
                if not n:
                    raise _short(size - left, size, "readinto loop")
                write(view[:n])
                left -= n


def _os_splice(src: End, dst: End, size: int, k: int) -> None:
    r, w = os.pipe()
    try:
        splice = os.splice
        s, d = src.fd, dst.fd
        from_file = src.is_file
        for _ in range(k):
            off = 0
            left = size
            while left:
                want = left if left < BUF else BUF
                n = splice(s, w, want, off if from_file else None)
                if not n:
                    raise _short(size - left, size, "os.splice loop")
                off += n
                left -= n
                while n:
                    n -= splice(r, d, n)
    finally:
        os.close(r)
        os.close(w)


def _sendfile(src: End, dst: End, size: int, k: int) -> None:
    if dst.sock is not None:
        with io.FileIO(src.fd, "rb", closefd=False) as f:
            send = dst.sock.sendfile
            for _ in range(k):
                if send(f, 0, size) != size:
                    raise _short(0, size, "socket.sendfile")
        return
    sendfile, s, d = os.sendfile, src.fd, dst.fd
    for _ in range(k):
        off = 0
        while off < size:
            n = sendfile(d, s, off, size - off)
            if not n:
                raise _short(off, size, "os.sendfile")
            off += n


def _copyfileobj(src: End, dst: End, size: int, k: int) -> None:
    copy = shutil.copyfileobj
    with contextlib.ExitStack() as stack:
        fsrc = stack.enter_context(open(src.fd, "rb", closefd=False))
        if dst.sock is not None:
            fdst: io.BufferedIOBase = stack.enter_context(dst.sock.makefile("wb"))
        else:
            fdst = stack.enter_context(open(dst.fd, "wb", closefd=False))
        for _ in range(k):
            fsrc.seek(0)
            copy(fsrc, fdst)
            fdst.flush()


def _copy_file_range(src: End, dst: End, size: int, k: int) -> None:
    cfr, s, d = os.copy_file_range, src.fd, dst.fd
    for _ in range(k):
        off = 0
        while off < size:
            n = cfr(s, d, size - off, off)
            if not n:
                raise _short(off, size, "os.copy_file_range")
            off += n


def _fdkit_transfer(src: End, dst: End, size: int, k: int) -> None:
    transfer, s, d = zerocopy.transfer, src.fd, dst.fd
    if src.is_file:
        for _ in range(k):
            off = 0
            while off < size:
                n = transfer(s, d, size - off, src_offset=off)
                if not n:
                    raise _short(off, size, "transfer")
                off += n
    else:
        for _ in range(k):
            left = size
            while left:
                n = transfer(s, d, left)
                if not n:
                    raise _short(size - left, size, "transfer")
                left -= n


def _c_movers(lib: ctypes.CDLL) -> dict[str, Mover]:
    splice_fn = lib.relay_splice
    splice_fn.argtypes = (
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_longlong,
        ctypes.c_longlong,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.POINTER(ctypes.c_int),
    )
    splice_fn.restype = ctypes.c_longlong
    rw_fn = lib.relay_rw
    rw_fn.argtypes = (
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_longlong,
        ctypes.c_longlong,
        ctypes.c_int,
        ctypes.c_int,
    )
    rw_fn.restype = ctypes.c_longlong
    got_pipe = ctypes.c_int(0)
    warned: list[bool] = []

    def check(moved: int, size: int, k: int, who: str) -> None:
        if moved < 0:
            raise OSError(-moved, f"{who}: {os.strerror(-moved)}")
        if moved != size * k:
            raise _short(moved, size * k, who)

    def c_splice(src: End, dst: End, size: int, k: int) -> None:
        moved = splice_fn(src.fd, dst.fd, size, k, int(src.is_file), C_PIPE, ctypes.byref(got_pipe))
        check(moved, size, k, "C splice relay")
        if got_pipe.value != C_PIPE and not warned:
            warned.append(True)
            note(f"the C splice relay's pipe is {got_pipe.value} bytes, not 1 MiB (EPERM)")

    def c_rw(src: End, dst: End, size: int, k: int) -> None:
        check(rw_fn(src.fd, dst.fd, size, k, int(src.is_file), BUF), size, k, "C read/write")

    return {"c_splice": c_splice, "c_rw": c_rw}


def _movers(kind: str, lib: ctypes.CDLL | None) -> dict[str, Mover]:
    src, dst = kind.split("_")
    out: dict[str, Mover] = {"py_loop": _py_loop, "os_splice": _os_splice}
    if src == "file":
        out["sendfile"] = _sendfile
        out["copyfileobj"] = _copyfileobj
        if dst == "file":
            out["copy_file_range"] = _copy_file_range
    if lib is not None:
        out.update(_c_movers(lib))
    out["fdkit"] = _fdkit_transfer
    return out


# --- a case: one kind, its endpoints, its measurements ---------------------------------------


@dataclass
class Workdir:
    """The temporary directory: the random data, and source files by size (kept open)."""

    path: str
    data: bytes
    data_path: str
    files: dict[int, int] = field(default_factory=dict)  # size -> O_RDONLY fd

    def source_file(self, size: int) -> int:
        """A file of ``size`` bytes (the data repeated), opened read-only."""
        fd = self.files.get(size)
        if fd is None:
            path = os.path.join(self.path, f"src-{size}")
            write_data(path, size, self.data)
            fd = self.files[size] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        return fd

    def close(self) -> None:
        for fd in self.files.values():
            os.close(fd)
        self.files.clear()


@contextlib.contextmanager
def _workdir(data_size: int) -> Iterator[Workdir]:
    with tempfile.TemporaryDirectory(prefix="fdkit-bench-zc-") as d:
        data = os.urandom(data_size)
        data_path = os.path.join(d, "data")
        write_data(data_path, data_size, data)
        w = Workdir(d, data, data_path)
        try:
            yield w
        finally:
            w.close()


class Rig:
    """The endpoints of one kind: endpoint processes for socket sides, files for file sides.

    Connections are made once and reused by every measurement of the kind.
    """

    def __init__(self, kind: str, work: Workdir) -> None:
        self.kind = kind
        self.work = work
        self.src_kind, self.dst_kind = kind.split("_")
        self.source: Child | None = None
        self.sink: Child | None = None
        self.src_sock: socket.socket | None = None
        self.dst_sock: socket.socket | None = None
        self._expected: dict[tuple[int, int], str] = {}
        try:
            if self.src_kind != "file":
                self.src_sock, theirs = stream_pair(self.src_kind)
                with theirs:
                    n = str(theirs.fileno())
                    self.source = Child.endpoint("source", n, work.data_path, pass_fds=[int(n)])
            if self.dst_kind != "file":
                self.dst_sock, theirs = stream_pair(self.dst_kind)
                with theirs:
                    n = str(theirs.fileno())
                    self.sink = Child.endpoint("sink", n, pass_fds=[int(n)])
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        # Sockets first: an endpoint blocked on its connection then sees EOF or EPIPE.
        for s in (self.src_sock, self.dst_sock):
            if s is not None:
                s.close()
        for child in (self.source, self.sink):
            if child is not None:
                child.stop()

    def expected_sha(self, size: int, k: int) -> str:
        key = (size, k)
        if key not in self._expected:
            data = self.work.data
            if self.src_kind == "file":
                self._expected[key] = repeated_sha(data, size * k, size)
            else:
                self._expected[key] = repeated_sha(data, size * k)
        return self._expected[key]

    def measure(self, mover: Mover, who: str, size: int, k: int, check: bool) -> Sample:
        """One measurement: k messages of ``size`` bytes through ``mover``, verified."""
        total = size * k
        mode = "sha" if check else "count"
        if self.src_sock is not None:
            src = End(self.src_kind, self.src_sock.fileno(), self.src_sock)
        else:
            src = End("file", self.work.source_file(size))
            warm(src.fd)
        dst_path = os.path.join(self.work.path, "dst")
        dst_fd = -1
        try:
            if self.dst_sock is not None:
                dst = End(self.dst_kind, self.dst_sock.fileno(), self.dst_sock)
            else:
                flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
                dst_fd = os.open(dst_path, flags, 0o600)
                dst = End("file", dst_fd)
            if self.sink is not None:
                self.sink.send(f"{total} {mode}")
            if self.source is not None:
                self.source.send(str(total))
                wait_readable(src.fd, REPLY_TIMEOUT)
            gc.collect()
            t = Timer()
            with t:
                mover(src, dst, size, k)
            if self.source is not None:
                answer = self.source.reply(REPLY_TIMEOUT)
                if answer != f"sent {total}":
                    raise RuntimeError(f"source answered {answer!r}")
            if self.sink is not None:
                got, digest = self.sink.reply(REPLY_TIMEOUT).split()
            else:
                got = str(os.fstat(dst_fd).st_size)
                digest = file_sha(dst_fd) if check else "-"
        finally:
            if dst_fd >= 0:
                os.close(dst_fd)
                os.unlink(dst_path)
        where = f"{who} [{_kind_text(self.kind)}, {_size_text(size)} x{k}]"
        if int(got) != total:
            raise RuntimeError(f"{where}: the sink got {got} of {total} bytes")
        if check and digest != self.expected_sha(size, k):
            raise RuntimeError(f"{where}: the bytes that arrived differ from those sent (sha256)")
        return t.sample(total)


def _cpu_per_gib(s: Sample) -> float:
    return s.cpu_ns / 1e9 / (s.count / GiB) if s.count else float("nan")


def _mib_per_s(s: Sample) -> float:
    return s.count / MiB / (s.wall_ns / 1e9) if s.wall_ns > 0 else float("nan")


@dataclass
class Plan:
    """What to run: per kind, its cases as (bytes per call, bytes per measurement, rounds)."""

    cases: dict[str, list[tuple[int, int, int]]]
    warmup: int
    copy_size: int
    copy_rounds: int
    copy_id: str  # the row id of the copy, which names its size


def _plan(quick: bool) -> Plan:
    """Sizes and rounds: tcp→tcp carries the headline rows, so it gets more of both.

    A measurement must move a few hundred MiB for its CPU figure to settle on this kind of
    machine (at 64 MiB, rounds of one contender spread 2x; at 256 MiB, about 1.3x).
    """
    full: dict[str, list[tuple[int, int, int]]] = {}
    quick_: dict[str, list[tuple[int, int, int]]] = {}
    tiny_: dict[str, list[tuple[int, int, int]]] = {}
    for kind in KINDS:
        if kind == "tcp_tcp":
            full[kind] = [(4 * KiB, 128 * MiB, 7), (64 * KiB, 512 * MiB, 7), (MiB, 512 * MiB, 7)]
            quick_[kind] = [(4 * KiB, 32 * MiB, 5), (64 * KiB, 128 * MiB, 5), (MiB, 128 * MiB, 5)]
            tiny_[kind] = [(4 * KiB, 256 * KiB, 1), (64 * KiB, MiB, 1), (MiB, 2 * MiB, 1)]
        else:
            full[kind] = [(4 * KiB, 64 * MiB, 5), (64 * KiB, 256 * MiB, 5), (MiB, 256 * MiB, 5)]
            quick_[kind] = [(MiB, 64 * MiB, 3)]
            tiny_[kind] = [(64 * KiB, MiB, 1)]
        full[kind].append((GiB, GiB, 3))
    return Plan(
        cases=pick(quick, full, quick_, tiny_),
        warmup=1,  # the warm-up run is the one that checks the sha256: tiny mode too
        copy_size=pick(quick, GiB, 128 * MiB, 4 * MiB),
        copy_rounds=pick(quick, 5, 3, 1),
        copy_id=COPY_QUICK_ID if quick else COPY_ID,
    )


def _path_taken(fallbacks: set[str]) -> str:
    """The path the calling thread's last transfer took; its fallbacks go into ``fallbacks``."""
    stats = zerocopy.transfer_stats()
    if stats is None:
        return "?"
    for f in stats["fallbacks"]:
        fallbacks.add(f"{f['from']} -> {f['to']} (errno {f['errno']}: {f['reason']})")
    return stats["path"]


def _run_case(
    rig: Rig, size: int, k: int, movers: dict[str, Mover], rounds: int, warmup: int
) -> tuple[dict[str, list[Sample]], set[str]]:
    labels = _labels(rig.kind)
    paths: set[str] = set()
    runs: dict[str, int] = dict.fromkeys(movers, 0)
    fallbacks: set[str] = set()

    def contender(key: str) -> Callable[[], Sample]:
        def once() -> Sample:
            runs[key] += 1
            sample = rig.measure(movers[key], labels[key], size, k, check=runs[key] == 1)
            if key == "fdkit":
                paths.add(_path_taken(fallbacks))
            return sample

        return once

    samples = alternate({key: contender(key) for key in movers}, rounds, warmup)
    if fallbacks:
        where = f"{_kind_text(rig.kind)} {_size_text(size)}"
        note(f"zerocopy {where}: transfer fell back: {'; '.join(sorted(fallbacks))}")
    return samples, paths


def _case_rows(
    kind: str,
    size: int,
    k: int,
    samples: dict[str, list[Sample]],
    paths: set[str],
    labels: dict[str, str],
) -> list[Result]:
    def cpu(key: str) -> float:
        return median_of(samples[key], _cpu_per_gib)

    def rate(key: str) -> float:
        return median_of(samples[key], _mib_per_s)

    sid = SIZE_IDS.get(size, f"{size}b")
    path = "/".join(sorted(paths)) or "?"
    case = f"transfer [{_kind_text(kind)}, {_size_text(size)} x{k}, path {path}]"
    stdlib = [key for key in STDLIB if key in samples]
    best_cpu = min(stdlib, key=cpu)
    best_rate = max(stdlib, key=rate)
    note(
        f"zerocopy {_kind_text(kind)} {_size_text(size)} x{k}: "
        + "; ".join(
            f"{labels[key]}{' [' + path + ']' if key == 'fdkit' else ''} "
            f"{cpu(key):.3f} {CPU_UNIT}, {rate(key):,.0f} {RATE_UNIT}"
            for key in samples
        )
    )
    rows: list[Result] = []

    def row(
        id: str, metric: str, unit: str, fig: Callable[[str], float], base: str, goal: float | None
    ) -> None:
        rows.append(
            compare(id, BENCH, case, metric, unit, fig("fdkit"), fig(base), labels[base], goal)
        )

    cpu_metric = "relay CPU per GiB moved"
    rate_metric = "bytes per second (wall)"
    prefix = f"zc_{kind}_{sid}"
    if kind == "tcp_tcp" and size in (64 * KiB, MiB):
        row(f"transfer_tcp_tcp_{sid}", cpu_metric, CPU_UNIT, cpu, "py_loop", GOAL_VS_LOOP)
    row(f"{prefix}_cpu", cpu_metric, CPU_UNIT, cpu, best_cpu, None)
    if kind == "tcp_tcp" and size == 4 * KiB:
        row("transfer_small_4k", rate_metric, RATE_UNIT, rate, best_rate, GOAL_RATE)
    else:
        row(f"{prefix}_rate", rate_metric, RATE_UNIT, rate, best_rate, None)
    if "c_splice" in samples:
        if kind == "tcp_tcp" and size == MiB:
            row("transfer_vs_c", cpu_metric, CPU_UNIT, cpu, "c_splice", GOAL_VS_C)
        else:
            row(f"{prefix}_c_cpu", cpu_metric, CPU_UNIT, cpu, "c_splice", None)
    return rows


# --- copy_file_1g -----------------------------------------------------------------------------


def _fs_type(path: str) -> str:
    """The file system type holding ``path`` (longest mount point prefix in /proc/mounts)."""
    best, fstype = "", "?"
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mnt = parts[1].replace("\\040", " ")
                inside = path == mnt or path.startswith(mnt.rstrip("/") + "/")
                if inside and len(mnt) > len(best):
                    best, fstype = mnt, parts[2]
    except OSError:
        pass
    return fstype


def _copy_rows(work: Workdir, plan: Plan) -> list[Result]:
    size, rounds, warmup = plan.copy_size, plan.copy_rounds, plan.warmup
    src = os.path.join(work.path, "copy-src")
    write_data(src, size, work.data)
    expected = repeated_sha(work.data, size)
    dst = os.path.join(work.path, "copy-dst")
    paths: set[str] = set()
    fallbacks: set[str] = set()

    def fdkit_copy() -> None:
        s = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
        try:
            d = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                zerocopy.transfer(s, d)
            finally:
                os.close(d)
        finally:
            os.close(s)

    def shutil_copy() -> None:
        shutil.copyfile(src, dst)

    runs: dict[str, int] = {}

    def contender(key: str, copy: Callable[[], None]) -> Callable[[], Sample]:
        def once() -> Sample:
            runs[key] = runs.get(key, 0) + 1
            fd = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
            try:
                warm(fd)
            finally:
                os.close(fd)
            try:
                gc.collect()
                t = Timer()
                with t:
                    copy()
                if key == "fdkit":
                    paths.add(_path_taken(fallbacks))
                fd = os.open(dst, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    got = os.fstat(fd).st_size
                    if got != size:
                        raise RuntimeError(f"copy_file ({key}): {got} of {size} bytes copied")
                    if runs[key] == 1 and file_sha(fd) != expected:
                        raise RuntimeError(f"copy_file ({key}): the copy differs (sha256)")
                finally:
                    os.close(fd)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(dst)
            return t.sample(size)

        return once

    try:
        samples = alternate(
            {
                "fdkit": contender("fdkit", fdkit_copy),
                "shutil": contender("shutil", shutil_copy),
            },
            rounds,
            warmup,
        )
    finally:
        os.unlink(src)

    def wall(key: str) -> float:
        return median_of(samples[key], lambda s: s.wall_ns / 1e6)

    def cpu(key: str) -> float:
        return median_of(samples[key], _cpu_per_gib)

    if fallbacks:
        note(f"zerocopy copy_file: transfer fell back: {'; '.join(sorted(fallbacks))}")
    path = "/".join(sorted(paths)) or "?"
    case = f"transfer(src, dst) [{_size_text(size)} file, {_fs_type(work.path)}, path {path}]"
    base = "shutil.copyfile"
    return [
        compare(plan.copy_id, BENCH, case, "copy wall time", "ms", wall("fdkit"), wall("shutil"),
                base, GOAL_COPY),
        compare("copy_file_cpu", BENCH, case, "CPU per GiB copied", CPU_UNIT, cpu("fdkit"),
                cpu("shutil"), base),
    ]  # fmt: skip


def run(quick: bool) -> list[Result]:
    """Every kind and size with every contender that applies, alternating; then the copy."""
    plan = _plan(quick)
    lib = load_c("splice_relay")
    data_size = min(16 * MiB, max(v for cases in plan.cases.values() for _, v, _ in cases))
    results: list[Result] = []
    try:
        with _workdir(data_size) as work:
            for kind, cases in plan.cases.items():
                movers = _movers(kind, lib)
                labels = _labels(kind)
                rig = Rig(kind, work)
                try:
                    for size, volume, rounds in cases:
                        k = max(1, volume // size)
                        samples, paths = _run_case(rig, size, k, movers, rounds, plan.warmup)
                        results.extend(_case_rows(kind, size, k, samples, paths, labels))
                finally:
                    rig.close()
            results.extend(_copy_rows(work, plan))
    finally:
        zerocopy.pipe_pool_clear()  # the idle internal pipes transfer keeps: leave no fd open
    return results
