"""fdkit.aio against the other asyncio event loops: uvloop, rloop and the standard library's.

Same method as :mod:`bench.serve`: every program under test is its own process, pinned to
CPU 0 (the load, wrk or a client, to CPU 1); the figure is the **CPU time of that process
per request** (or per GiB): ``utime + stime`` from ``/proc/PID/stat``, in ns steps from
``/proc/PID/task/*/schedstat`` when the two agree (:func:`._endpoints.cpu_between`), read
before the load starts and after it ends; the contenders alternate in rounds (A B C D,
B C D A, ...) and the medians are compared. ``ratio`` = the contender's CPU ÷ fdkit.aio's.

fdkit.aio is measured on each of its engines, both contenders of the same rounds: the
io_uring engine (key ``fdkit``: its program runs with ``FDKIT_AIO_ENGINE=io_uring``) and the
epoll engine (key ``epoll_engine``: ``FDKIT_AIO_ENGINE=epoll``); each program's first line
must name the engine it was given. Each engine is compared with every other contender (the
epoll engine is one of the io_uring engine's, not the other way round).

Workloads (the programs are :mod:`bench.child.aio_servers` and :mod:`bench.child.aio_uvicorn`,
each given the loop's name; each prints the loop class it runs on, which is checked):

* ``hello``: an ``asyncio.Protocol`` keep-alive HTTP hello server (one write per batch of
  requests) under ``wrk -t1 -c64 --latency``: server CPU per request, requests/s, p99, and
  the CPU read apart into user-space and kernel time (utime and stime, see
  :func:`._endpoints.read_user_system`). Its floor is a contender too: a C epoll server
  answering the same bytes (``bench/c/epoll_hello.c``, compiled with gcc as the other C
  contenders, run by ``aio_servers.py floor``).
* ``hello_c1``: the same server under ``wrk -t1 -c1 --latency``: one keep-alive connection,
  so each request finds the loop asleep and wakes it (the cost of a wait that sleeps, where
  the engines differ most); the same figures, the floor included.
* ``uvicorn``: uvicorn + httptools serving a 6-line ASGI hello app, the loop given as
  ``uvicorn --loop`` takes it (``fdkit.aio:new_event_loop``); same figures.
* ``streams``: an asyncio streams echo server (``start_server``) and its client
  (``open_connection``, on the same loop, pinned to CPU 1) moving N bytes in 64 KiB writes;
  the server's CPU per GiB echoed (the client's is on stderr). The first (warm-up) round
  checks every byte.
* ``sendfile``: ``loop.sendfile(transport, file)`` of a 1 GiB file (sparse, on tmpfs when
  ``/dev/shm`` is there: no disk) to a sink process that splices into ``/dev/null``; the
  sending process's CPU per GiB. ``fallback=False`` first: a loop with no native path is
  measured with asyncio's read/write fallback and the row says so; a loop with no
  ``sendfile`` at all (uvloop) is left out with a note. The warm-up round checks SHA-256.

A contender that cannot be imported is skipped with the ``pip install`` that adds it
(``make bench`` and ``make demo`` install ``requirements-bench.txt``); wrk missing skips the
HTTP rows (``make bench-tools``); where the io_uring engine cannot run (no io_uring, a
seccomp profile that denies it) its rows are skipped, saying why, and the epoll engine's stay.
A contender that fails, hangs (every measurement has a time bound) or answers wrong is left
out of that workload with a note; one whose server holds more fds after a workload than
before is named on stderr (a leak).

Rows: ``aio_W_vs_X`` (the io_uring engine's CPU against X's) and ``aio_epoll_W_vs_X`` (the
epoll engine's) for each workload W and contender X (``uvloop``, ``asyncio``, ``rloop``;
``epoll_engine`` for the io_uring engine's rows; ``floor`` for hello), with companions
``aio[_epoll]_W_rps_vs_X`` and ``..._p99_vs_X`` (HTTP) or ``..._rate_vs_X`` (bytes), and for
hello ``..._hello_user_vs_X`` and ``..._hello_kernel_vs_X`` (not against the floor, whose
user time is too small to sample).

Modes: full (5 rounds of 2 s after a 1 s warm-up; 3 rounds of 512 MiB echoed and 1 GiB sent),
``--quick`` (one 1 s round; 64 MiB, 256 MiB), tiny (``FDKIT_BENCH_TINY``: serve's small Python
load generator instead of wrk, a few MiB, and 12,000 hello requests: enough scheduler ticks to
split user and kernel time).

``--contended`` (``run(quick, contended=True)``): the same workloads with a CPU burner (a
busy-loop process) pinned to the load's CPU 1 for the whole run, so the load generator shares
its core; the measured programs keep CPU 0. Every row id gets the suffix ``_contended``.

The Python calls each loop makes per hello request are :mod:`bench.aio_anatomy`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.metadata
import importlib.util
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from bench._common import Result, alternate, compare, load_c, median, note, pick, skip, tiny
from bench._endpoints import Child, GiB, MiB, file_sha, stop_process, user_share, warm
from bench.child import script
from bench.serve import (
    HELLO,
    SETTLE,
    START_TIMEOUT,
    Run,
    Server,
    _free_port,
    _which,
    install_command,
    run_python_load,
    run_wrk,
    tree_cpu,
)

BENCH = "aio"
# the contenders that are event loops: fdkit.aio on its io_uring engine, fdkit.aio on its epoll
# engine, and the other loops; the hello workload adds FLOOR
LOOPS = ("fdkit", "epoll_engine", "uvloop", "rloop", "asyncio")
# the contenders measured against the others (fdkit.aio's engines), and their rows' id prefix
SUBJECTS = ("fdkit", "epoll_engine")
PREFIX = {"fdkit": "", "epoll_engine": "epoll_"}
# the engine each of fdkit.aio's contenders is given (FDKIT_AIO_ENGINE) and must report
ENGINE = {"fdkit": "io_uring", "epoll_engine": "epoll"}
OTHERS = ("uvloop", "asyncio", "rloop", "epoll_engine")
FLOOR = "floor"  # the C epoll hello server (bench/c/epoll_hello.c), hello only
FLOOR_SOURCE = "epoll_hello"
WORKLOADS = ("hello", "hello_c1", "uvicorn", "streams", "sendfile")
HELLOS = ("hello", "hello_c1")  # the asyncio.Protocol hello server, under 64 and 1 connections
CONTENDED = "_contended"  # the suffix of every row id of a --contended run
# (row id, goal): the ratios the io_uring engine sets out to reach; the
# epoll engine's rows (aio_epoll_...) have the same goals 0.05 lower
URING_GOALS = {
    "aio_hello_user_vs_uvloop": 1.25,
    "aio_hello_user_vs_rloop": 1.2,
    "aio_hello_vs_uvloop": 1.1,
    "aio_hello_vs_rloop": 1.05,
    "aio_hello_vs_floor": 0.85,
    "aio_hello_p99_vs_uvloop": 1.0,
    "aio_uvicorn_vs_uvloop": 1.1,
    "aio_uvicorn_vs_rloop": 1.1,
    "aio_streams_vs_uvloop": 1.5,
    "aio_sendfile_vs_asyncio": 1.0,
}
EPOLL_GOAL_BELOW = 0.05
# Every other row shows a figure only. The io_uring engine against the epoll engine: never
# slower, also when the load's CPU is busy; aio_hello_vs_asyncio's goal is retired
# (_common.RETIRED_GOALS) but stays in the row.
GOALS = {
    **URING_GOALS,
    **{"aio_epoll_" + i.removeprefix("aio_"): round(g - EPOLL_GOAL_BELOW, 2)
       for i, g in URING_GOALS.items()},
    "aio_hello_vs_asyncio": 1.6,
    **{f"aio_{w}_vs_epoll_engine{v}": 1.0 for w in WORKLOADS for v in ("", CONTENDED)},
}  # fmt: skip
# the module each loop is imported from, and the distribution that provides it
MODULES = {"fdkit": "fdkit.aio", "epoll_engine": "fdkit.aio", "uvloop": "uvloop",
           "rloop": "rloop", "asyncio": "asyncio"}  # fmt: skip
# the class each contender's program must report running on (a prefix of MODULE.CLASS)
LOOP_CLASS = {"fdkit": "fdkit.aio.", "epoll_engine": "fdkit.aio.", "uvloop": "uvloop.",
              "rloop": "rloop.", "asyncio": "asyncio.", FLOOR: "c.epoll"}  # fmt: skip
# the loop name each contender's program is given, and what its environment adds
CHILD_LOOP = {"epoll_engine": "fdkit"}
CHILD_ENV = {k: {"FDKIT_AIO_ENGINE": e} for k, e in ENGINE.items()}
# what the uvicorn workload needs beyond the loop
UVICORN_NEEDS = ("uvicorn", "httptools")
CPU_UNIT = "us/req"
RATE_UNIT = "req/s"
LATENCY_UNIT = "ms p99"
GIB_UNIT = "s/GiB"
MIB_RATE_UNIT = "MiB/s"
FD_LEAK_SLACK = 2  # more fds than this after a workload than before it is named as a leak

T = TypeVar("T")


# --- contenders ----------------------------------------------------------------------------


def _requirement(dist: str) -> str:
    """``dist==VERSION`` as pinned in requirements-bench.txt (just ``dist`` without a pin)."""
    path = Path(__file__).resolve().parent.parent / "requirements-bench.txt"
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            spec = line.split("#", 1)[0].strip()
            if re.match(rf"{re.escape(dist)}\s*==", spec, re.I):
                return spec.replace(" ", "")
    return dist


def install_hint(dists: Sequence[str]) -> str:
    """The command that installs ``dists`` into this interpreter, for a skip note."""
    reqs = " ".join(_requirement(d) for d in dists)
    return f"`{sys.executable} -m pip install {reqs}` (or `make bench` in a source tree)"


def missing(names: Sequence[str]) -> list[str]:
    """Which of the modules ``names`` this interpreter cannot import (found, not imported)."""
    out = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(name)
    return out


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _labels() -> dict[str, str]:
    return {
        "fdkit": "fdkit.aio (io_uring)",
        "epoll_engine": "fdkit.aio (epoll)",
        "uvloop": f"uvloop {_version('uvloop')}",
        "rloop": f"rloop {_version('rloop')}",
        "asyncio": f"asyncio {sys.version.split()[0]}",
        FLOOR: f"C epoll hello server (bench/c/{FLOOR_SOURCE}.c)",
    }


LABELS = _labels()
# the program that asks which engine a new fdkit.aio loop runs on (see uring_unavailable)
PROBE = "import fdkit.aio; loop = fdkit.aio.new_event_loop(); print(loop.engine); loop.close()"


def _child_loop(key: str) -> str:
    """The loop name ``key``'s program is given."""
    return CHILD_LOOP.get(key, key)


def _child_env(key: str) -> dict[str, str] | None:
    """The environment of ``key``'s program (None: this process's)."""
    extra = CHILD_ENV.get(key)
    return None if extra is None else {**os.environ, **extra}


@functools.cache
def uring_unavailable() -> str | None:
    """Why fdkit.aio's io_uring engine cannot run here (None: it can), asked once of a program
    in the io_uring contender's environment (``FDKIT_AIO_ENGINE=io_uring``), as its programs
    are started: a seccomp profile that denies io_uring, an old kernel, a failed setup."""
    try:
        proc = subprocess.run([sys.executable, "-c", PROBE], env=_child_env("fdkit"),
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    if proc.returncode == 0 and proc.stdout.split() == [ENGINE["fdkit"]]:
        return None
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    return lines[-1] if lines else f"the probe exited with status {proc.returncode}"


def _loop_line(text: str) -> tuple[str, str] | None:
    """``(MODULE.CLASS, ENGINE)`` from a program's ``loop ...`` line, or None."""
    m = re.search(r"^loop (\S+) (\S+)$", text, re.M)
    return None if m is None else (m.group(1), m.group(2))


def _check_loop(key: str, text: str, what: str) -> None:
    """The program for ``key`` must say it runs on that loop, and fdkit.aio's on the engine
    ``key`` names (raises RuntimeError)."""
    found = _loop_line(text)
    if found is None or not found[0].startswith(LOOP_CLASS[key]):
        raise RuntimeError(f"{what} for {key} runs on {found}, not {LOOP_CLASS[key]}*")
    engine = ENGINE.get(key)
    if engine is not None and found[1] != engine:
        raise RuntimeError(f"{what} for {key} runs on the {found[1]} engine, not {engine}")


# --- ids -----------------------------------------------------------------------------------


def _kinds(workload: str, other: str) -> tuple[str, ...]:
    """The rows of an engine against ``other`` in ``workload``: CPU first, then the
    companions (the hello workload's user/kernel split is against the other loops, not the C
    floor)."""
    if workload in HELLOS and other != FLOOR:
        return ("", "_rps", "_p99", "_user", "_kernel")
    if workload in (*HELLOS, "uvicorn"):
        return ("", "_rps", "_p99")
    return ("", "_rate")


def others(workload: str, subject: str = "fdkit") -> tuple[str, ...]:
    """The contenders fdkit.aio's engine ``subject`` is compared with in ``workload``."""
    keys = (*OTHERS, FLOOR) if workload in HELLOS else OTHERS
    return tuple(k for k in keys if k != subject)


def row_ids(workload: str, other: str, variant: str = "", subject: str = "fdkit") -> list[str]:
    """The row ids of fdkit.aio's engine ``subject`` against ``other`` in ``workload`` (the
    first is the CPU row); ``variant`` is ``CONTENDED`` for a --contended run."""
    head = f"aio_{PREFIX[subject]}{workload}"
    return [f"{head}{k}_vs_{other}{variant}" for k in _kinds(workload, other)]


def planned_ids(workloads: Sequence[str] = WORKLOADS, variant: str = "") -> list[str]:
    """Every row id ``run`` produces when every contender is here: per workload, the io_uring
    engine's rows, then the epoll engine's."""
    return [i for w in workloads for s in SUBJECTS for o in others(w, s)
            for i in row_ids(w, o, variant, s)]  # fmt: skip


def involving(workload: str, key: str, variant: str = "") -> list[str]:
    """The planned rows of ``workload`` that need contender ``key``: an engine's own rows, and
    every engine's rows against it."""
    return [i for s in SUBJECTS for o in others(workload, s) if key in (s, o)
            for i in row_ids(workload, o, variant, s)]  # fmt: skip


# --- plan ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    conns: int
    seconds: int
    rounds: int
    warmup: int
    tiny_requests: int
    tiny_hello_requests: int  # enough for the scheduler tick to sample user and kernel time
    echo_bytes: int
    sendfile_bytes: int
    byte_rounds: int
    variant: str = ""  # CONTENDED: a CPU burner on the load's CPU, and the ids' suffix


def _plan(quick: bool, contended: bool = False) -> Plan:
    plan = pick(
        quick,
        Plan(64, 2, 5, 1, 0, 0, 512 * MiB, GiB, 3),
        Plan(64, 1, 1, 0, 0, 0, 64 * MiB, 256 * MiB, 1),
        Plan(4, 0, 1, 0, 25, 3000, 4 * MiB, 4 * MiB, 1),
    )
    return dataclasses.replace(plan, variant=CONTENDED) if contended else plan


def _conditions(plan: Plan) -> str:
    """What the case text adds for the run's variant."""
    return "; CPU 1 busy (a CPU burner beside the load)" if plan.variant else ""


# --- running contenders --------------------------------------------------------------------


class Failed(RuntimeError):
    """A contender could not do a measurement (the reason is the message)."""


def guarded(contenders: dict[str, Callable[[], T]], what: str,
            failed: dict[str, str]) -> dict[str, Callable[[], T | None]]:  # fmt: skip
    """Each contender's measurement, where a failure (an error, a time bound reached) is
    noted, recorded in ``failed`` and ends that contender's part in the case (it then returns
    None): one hanging loop must not stop the bench."""

    def wrap(key: str, fn: Callable[[], T]) -> Callable[[], T | None]:
        def once() -> T | None:
            if key in failed:
                return None
            try:
                return fn()
            except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as e:
                failed[key] = str(e).splitlines()[0] if str(e) else type(e).__name__
                note(f"aio {what}: {LABELS[key]} left out: {failed[key]}")
                return None

        return once

    return {k: wrap(k, fn) for k, fn in contenders.items()}


def _fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def _note_leaks(what: str, before: dict[str, tuple[int, int]]) -> None:
    """Names a contender whose process holds more fds than before the workload."""
    time.sleep(0.2)  # the last connections' closes arrive
    for key, (pid, n0) in before.items():
        n1 = _fd_count(pid)
        if n0 >= 0 and n1 > n0 + FD_LEAK_SLACK:
            note(f"aio {what}: {LABELS[key]} holds {n1 - n0} more fds than before the run "
                 f"({n0} -> {n1}): a leak")  # fmt: skip


def _wait_line(server: Server, pattern: str) -> None:
    """Waits until the server's output has a line starting with ``pattern``."""
    deadline = time.monotonic() + START_TIMEOUT
    while not re.search(rf"^{re.escape(pattern)}", server.output(), re.M):
        if server.proc.poll() is not None:
            raise RuntimeError(
                f"{server.name} exited with status {server.proc.returncode}: {server.output()}"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(f"{server.name} not ready within {START_TIMEOUT:g} s")
        time.sleep(0.02)


def _pin(pid: int, cpu: int) -> None:
    if (os.cpu_count() or 1) >= 2 and hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(pid, {cpu})


def _start_child(stack: contextlib.ExitStack, key: str, argv: Sequence[str], cpu: int,
                 pass_fds: Sequence[int] = ()) -> Child:  # fmt: skip
    """``key``'s command program on ``cpu`` (stopped by pid at the end of ``stack``)."""
    child = Child(f"{argv[2]} program on {key}", argv, pass_fds, env=_child_env(key))
    stack.callback(child.stop)
    _pin(child.pid, cpu)
    return child


def _skip_new(ids: Sequence[str], taken: set[str], reason: str) -> None:
    """Records the ``ids`` not in ``taken`` as skipped for ``reason`` (and adds them to it): a
    row two causes leave out is listed once."""
    fresh = [i for i in ids if i not in taken]
    taken.update(fresh)
    skip(BENCH, fresh, reason)


def _available(workload: str, needs: Sequence[str] = (), variant: str = "") -> list[str]:
    """The loops that can run ``workload`` here (one of fdkit.aio's engines at least, or
    none); the rows of the others are skipped, saying why."""
    lacking = missing([MODULES["fdkit"], *needs])
    if lacking:
        skip(BENCH, planned_ids([workload], variant), f"{', '.join(lacking)} is not installed; "
             f"{install_hint(lacking)} adds these rows")  # fmt: skip
        return []
    keys: list[str] = []
    taken: set[str] = set()
    for key in LOOPS:
        if key == "fdkit" and (why := uring_unavailable()) is not None:
            _skip_new(involving(workload, key, variant), taken,
                      f"fdkit.aio's io_uring engine cannot run here: {why}")  # fmt: skip
            continue
        lacking = missing([MODULES[key]])
        if lacking:
            _skip_new(involving(workload, key, variant), taken,
                      f"{', '.join(lacking)} is not installed; {install_hint(lacking)} adds "
                      "these rows")  # fmt: skip
            continue
        keys.append(key)
    return keys if any(k in SUBJECTS for k in keys) else []


def _floor_lib(workload: str, keys: Sequence[str], variant: str) -> str | None:
    """The compiled C floor server (its shared object's path), or None after skipping the
    floor rows of ``workload`` for the engines in ``keys`` (no gcc, or the compile failed:
    :func:`._common.compile_c` says which)."""
    lib = load_c(FLOOR_SOURCE)
    if lib is None:
        ids = [i for s in SUBJECTS if s in keys for i in row_ids(workload, FLOOR, variant, s)]
        skip(BENCH, ids,
             f"the C floor server bench/c/{FLOOR_SOURCE}.c could not be built (gcc)")  # fmt: skip
        return None
    return str(lib._name)


# --- HTTP workloads (hello, hello_c1, uvicorn) ---------------------------------------------


Figures = dict[str, dict[str, float]]


def _http_argv(workload: str, key: str, port: int, floor: str | None) -> list[str]:
    if key == FLOOR:
        assert floor is not None
        return [sys.executable, script("aio_servers"), "floor", floor, "127.0.0.1", str(port)]
    if workload in HELLOS:
        return [sys.executable, script("aio_servers"), "hello", _child_loop(key), "127.0.0.1",
                str(port)]  # fmt: skip
    return [sys.executable, script("aio_uvicorn"), _child_loop(key), "127.0.0.1", str(port)]


def _http_servers(stack: contextlib.ExitStack, workload: str, keys: Sequence[str],
                  failed: dict[str, str], floor: str | None) -> dict[str, Server]:  # fmt: skip
    """Every contender's server for ``workload`` started at once, then each checked (its loop,
    and ``GET /`` answering the hello bytes)."""
    started: dict[str, Server] = {}
    for key in keys:
        port = _free_port()
        s = Server(key, _http_argv(workload, key, port, floor), port, bench=BENCH,
                   name=f"{workload} server on {LABELS[key]}", env=_child_env(key))  # fmt: skip
        stack.callback(s.stop)
        started[key] = s
    ready: dict[str, Server] = {}
    for key, s in started.items():
        try:
            s.wait_ready("/", HELLO)
            _check_loop(key, s.output(), s.name)
        except RuntimeError as e:
            failed[key] = str(e).splitlines()[0]
            note(f"aio {workload}: {LABELS[key]} left out: {failed[key]}")
            s.stop()
            continue
        s.name = f"{workload} server on {LABELS[key]}"
        ready[key] = s
    return ready


def _fig(value: float) -> str:
    """A figure for the notes (``?`` when it could not be measured)."""
    return f"{value:.2f}" if math.isfinite(value) else "?"


def _spread(values: Sequence[float]) -> str:
    """``min-max`` of a contender's rounds, for the notes (the machine is noisy)."""
    return f"{min(values):.3g}-{max(values):.3g}" if values else "-"


@dataclass
class Served:
    """One load run against one HTTP server, and the share of user time in its CPU."""

    run: Run
    user_share: float

    @property
    def user_us(self) -> float:
        return self.run.cpu_us * self.user_share

    @property
    def kernel_us(self) -> float:
        return self.run.cpu_us * (1 - self.user_share)


def _http_measure(workload: str, wrk: str | None, plan: Plan,
                  server: Server) -> Callable[[], Served]:  # fmt: skip
    calls = [0]
    per_conn = plan.tiny_hello_requests if workload in HELLOS else plan.tiny_requests
    conns = _conns(workload, plan)

    def once() -> Served:
        calls[0] += 1
        share = user_share(server.pids())
        if wrk is None:
            run = run_python_load(server, "/", conns, per_conn)
        else:
            warm = calls[0] <= plan.warmup
            run = run_wrk(wrk, server, "/", conns, 1 if warm else plan.seconds)
        if run.requests <= 0:
            raise Failed(f"no request answered in {server.name}")
        return Served(run, share())

    return once


_HTTP_METRICS = {
    "": ("server CPU per request (utime+stime)", CPU_UNIT, "cpu"),
    "_rps": ("requests per second (wrk)", RATE_UNIT, "rate"),
    "_p99": ("p99 latency (wrk)", LATENCY_UNIT, "p99"),
    "_user": ("server user-space CPU per request (utime)", CPU_UNIT, "user"),
    "_kernel": ("server kernel CPU per request (stime)", CPU_UNIT, "kernel"),
}


def _http_rows(workload: str, case: str, figs: Figures, other: str, variant: str,
               subject: str = "fdkit") -> list[Result]:  # fmt: skip
    """The rows of fdkit.aio's engine ``subject`` against ``other`` (both in ``figs``)."""
    a, b, name = figs[subject], figs[other], LABELS[other]
    rows: list[Result] = []
    unsplit: list[str] = []
    for kind, row_id in zip(_kinds(workload, other), row_ids(workload, other, variant, subject),
                            strict=True):  # fmt: skip
        metric, unit, fig = _HTTP_METRICS[kind]
        if fig in ("user", "kernel") and not (a[fig] > 0 and b[fig] > 0):
            unsplit.append(row_id)  # a run too short for the scheduler tick to split it
            continue
        rows.append(compare(row_id, BENCH, case, metric, unit, a[fig], b[fig], name,
                            GOALS.get(row_id)))  # fmt: skip
    skip(BENCH, unsplit, "no user/kernel split: no scheduler tick sampled the run")
    return rows


def _left_out(workload: str, failed: dict[str, str], variant: str = "") -> list[Result]:
    """Records the rows that need a contender in ``failed`` as skipped (each row once: all
    of them when both of fdkit.aio's engines failed)."""
    taken: set[str] = set()
    for key, why in failed.items():
        _skip_new(involving(workload, key, variant), taken, f"{LABELS[key]}: {why}")
    return []


def _measured(figs: Mapping[str, object]) -> list[tuple[str, str]]:
    """``(subject, other)`` for every row pair measured: each of fdkit.aio's engines in
    ``figs`` against each other contender in ``figs``, in the order of the planned ids."""
    return [(s, o) for s in SUBJECTS if s in figs for o in (*OTHERS, FLOOR)
            if o != s and o in figs]  # fmt: skip


def _engines_note(workload: str, plan: Plan, cost: Mapping[str, float], unit: str) -> None:
    """The io_uring engine next to the epoll engine, one line (the rows have it too)."""
    a, b = cost.get("fdkit", math.nan), cost.get("epoll_engine", math.nan)
    if math.isfinite(a) and math.isfinite(b) and a > 0:
        where = " with CPU 1 busy" if plan.variant else ""
        note(f"aio {workload}{where}: fdkit.aio engines: {LABELS['fdkit']} {a:.3g} {unit}, "
             f"{LABELS['epoll_engine']} {b:.3g} {unit}: epoll/io_uring = {b / a:.2f}x")  # fmt: skip


def _conns(workload: str, plan: Plan) -> int:
    """The keep-alive connections of ``workload``'s load: one for ``hello_c1``."""
    return 1 if workload == "hello_c1" else plan.conns


def http_workload(workload: str, wrk: str | None, plan: Plan) -> list[Result]:
    """``hello``, ``hello_c1`` or ``uvicorn``: every contender's server under the same load,
    alternating."""
    needs = UVICORN_NEEDS if workload == "uvicorn" else ()
    keys = _available(workload, needs, plan.variant)
    if not keys:
        return []
    floor = _floor_lib(workload, keys, plan.variant) if workload in HELLOS else None
    if floor is not None:
        keys.append(FLOOR)
    failed: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        servers = _http_servers(stack, workload, keys, failed, floor)
        if not any(s in servers for s in SUBJECTS):
            return _left_out(workload, failed, plan.variant)
        fds = {k: (s.proc.pid, _fd_count(s.proc.pid)) for k, s in servers.items()}
        contenders = {k: _http_measure(workload, wrk, plan, s) for k, s in servers.items()}
        runs = alternate(guarded(contenders, workload, failed), plan.rounds, plan.warmup)
        _note_leaks(workload, fds)
    done = {k: [r for r in rs if r is not None] for k, rs in runs.items() if k not in failed}
    figs: Figures = {
        k: {
            "cpu": median([r.run.cpu_us for r in rs]),
            "rate": median([r.run.rate for r in rs]),
            "p99": median([r.run.p99_ms for r in rs]),
            "user": median([r.user_us for r in rs]),
            "kernel": median([r.kernel_us for r in rs]),
        }
        for k, rs in done.items()
    }
    busy = " (CPU 1 busy)" if plan.variant else ""
    if figs:
        note(f"aio {workload}{busy} c{_conns(workload, plan)}: " + "; ".join(
            f"{LABELS[k]} {f['cpu']:.2f} us/req ({_spread([r.run.cpu_us for r in done[k]])}; "
            f"user {_fig(f['user'])} + kernel {_fig(f['kernel'])}), "
            f"{f['rate']:,.0f} req/s, p99 {f['p99']:.2f} ms"
            for k, f in figs.items()))  # fmt: skip
    _engines_note(workload, plan, {k: f["cpu"] for k, f in figs.items()}, CPU_UNIT)
    load = "wrk -t1" if wrk is not None else "python load generator (smoke test)"
    what = ("asyncio.Protocol hello" if workload in HELLOS
            else "uvicorn + httptools, ASGI hello")  # fmt: skip
    conns = _conns(workload, plan)
    kept = "keep-alive connection" if conns == 1 else "keep-alive connections"
    tail = f", {what} [{conns} {kept}, {load}{_conditions(plan)}]"
    rows: list[Result] = []
    for subject, other in _measured(figs):
        rows += _http_rows(workload, LABELS[subject] + tail, figs, other, plan.variant, subject)
    _left_out(workload, failed, plan.variant)
    return rows


# --- byte workloads (streams, sendfile) ----------------------------------------------------


@dataclass
class Moved:
    """One byte-moving measurement: bytes, wall seconds, the measured process's CPU seconds,
    and the other end's (the echo client's; 0 for sendfile)."""

    count: int
    wall: float
    cpu: float
    peer_cpu: float = 0.0
    how: str = ""

    @property
    def cpu_per_gib(self) -> float:
        return self.cpu * GiB / self.count if self.count else math.nan

    @property
    def peer_per_gib(self) -> float:
        return self.peer_cpu * GiB / self.count if self.count else math.nan

    @property
    def mib_s(self) -> float:
        return self.count / MiB / self.wall if self.wall > 0 else math.nan


def _time_bound(n: int) -> float:
    """Seconds a measurement of ``n`` bytes may take before the contender counts as hung
    (20 MiB/s, a tenth of the slowest loop seen here, plus start-up)."""
    return 15.0 + n / (20 * MiB)


def _byte_rows(workload: str, case: str, figs: dict[str, list[Moved]], other: str,
               metric: str, variant: str, subject: str = "fdkit") -> list[Result]:  # fmt: skip
    """The rows of fdkit.aio's engine ``subject`` against ``other`` (both in ``figs``)."""
    a, b = figs[subject], figs[other]
    name = LABELS[other] + (f" ({b[0].how})" if b[0].how else "")
    cpu_id, rate_id = row_ids(workload, other, variant, subject)
    return [
        compare(cpu_id, BENCH, case, metric, GIB_UNIT, median([m.cpu_per_gib for m in a]),
                median([m.cpu_per_gib for m in b]), name, GOALS.get(cpu_id)),
        compare(rate_id, BENCH, case, "MiB/s (wall)", MIB_RATE_UNIT,
                median([m.mib_s for m in a]), median([m.mib_s for m in b]), name,
                GOALS.get(rate_id)),
    ]  # fmt: skip


def _byte_results(workload: str, case: Callable[[str, str], str],
                  runs: dict[str, list[Moved | None]], failed: dict[str, str], metric: str,
                  plan: Plan) -> list[Result]:  # fmt: skip
    """The rows of every pair measured; ``case(subject, how)`` is the case text of an
    engine's rows (``how``: the path its measurements took, ``native`` or ``fallback``)."""
    figs = {k: [m for m in ms if m is not None] for k, ms in runs.items() if k not in failed}
    figs = {k: ms for k, ms in figs.items() if ms}
    busy = " (CPU 1 busy)" if plan.variant else ""
    if figs:
        note(f"aio {workload}{busy}: " + "; ".join(
            f"{LABELS[k]}{' (' + ms[0].how + ')' if ms[0].how else ''} "
            f"{median([m.cpu_per_gib for m in ms]):.3f} s/GiB "
            f"({_spread([m.cpu_per_gib for m in ms])})"
            + (f" (client {median([m.peer_per_gib for m in ms]):.3f})" if ms[0].peer_cpu else "")
            + f", {median([m.mib_s for m in ms]):,.0f} MiB/s"
            for k, ms in figs.items()))  # fmt: skip
    cost = {k: median([m.cpu_per_gib for m in ms]) for k, ms in figs.items()}
    _engines_note(workload, plan, cost, GIB_UNIT)
    rows: list[Result] = []
    for subject, other in _measured(figs):
        text = case(subject, figs[subject][0].how)
        rows += _byte_rows(workload, text, figs, other, metric, plan.variant, subject)
    _left_out(workload, failed, plan.variant)
    return rows


def streams_workload(plan: Plan) -> list[Result]:
    """The streams echo: server (CPU 0) and client (CPU 1) on the same loop, per loop."""
    keys = _available("streams", variant=plan.variant)
    if not keys:
        return []
    n = plan.echo_bytes
    failed: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        pairs: dict[str, tuple[Server, Child]] = {}
        for key in keys:
            port = _free_port()
            loop = _child_loop(key)
            argv = [sys.executable, script("aio_servers"), "echo", loop, "127.0.0.1", str(port)]
            server = Server(key, argv, port, name=f"echo server on {LABELS[key]}", bench=BENCH,
                            env=_child_env(key))  # fmt: skip
            stack.callback(server.stop)
            client = _start_child(stack, key, [sys.executable, script("aio_servers"),
                                               "echo-client", loop], cpu=1)  # fmt: skip
            pairs[key] = (server, client)
        for key, (server, client) in list(pairs.items()):
            try:
                _wait_line(server, "listening")
                _check_loop(key, server.output(), server.name)
                _check_loop(key, client.reply(START_TIMEOUT), f"echo client on {key}")
            except RuntimeError as e:
                failed[key] = str(e).splitlines()[0]
                note(f"aio streams: {LABELS[key]} left out: {failed[key]}")
                del pairs[key]
        fds = {k: (s.proc.pid, _fd_count(s.proc.pid)) for k, (s, _) in pairs.items()}

        def measure(server: Server, client: Child) -> Callable[[], Moved]:
            calls = [0]

            def once() -> Moved:
                calls[0] += 1
                mode = "check" if calls[0] == 1 else "count"
                cpu, peer = tree_cpu(server.pids()), tree_cpu([client.pid])
                t0 = time.perf_counter()
                answer = client.ask(f"127.0.0.1 {server.port} {n} {mode}", _time_bound(n))
                wall = time.perf_counter() - t0
                time.sleep(SETTLE)
                if answer != f"echoed {n}":
                    raise Failed(f"echo client answered {answer!r}")
                return Moved(n, wall, cpu(), peer())

            return once

        contenders = {k: measure(s, c) for k, (s, c) in pairs.items()}
        runs = alternate(guarded(contenders, "streams", failed), plan.byte_rounds, 1)
        _note_leaks("streams", fds)
    size = f"{n // MiB} MiB" if n < GiB else f"{n // GiB} GiB"

    def case(subject: str, how: str) -> str:
        return (f"{LABELS[subject]}, asyncio streams echo (start_server/open_connection, "
                f"same loop both ends) [64 KiB writes, {size} per round"
                f"{_conditions(plan)}]")  # fmt: skip

    return _byte_results("streams", case, runs, failed, "echo server CPU per GiB echoed", plan)


@contextlib.contextmanager
def _sparse_file(size: int) -> Iterator[str]:
    """A ``size``-byte file on tmpfs when there is one: random first and last MiB, a hole
    between (no disk, and no memory for the hole)."""
    shm = "/dev/shm"
    where = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="fdkit-bench-aio-", dir=where) as d:
        path = os.path.join(d, "data")
        edge = min(MiB, size // 2)
        with open(path, "wb") as f:
            f.write(os.urandom(edge))
            f.truncate(size)
            f.seek(size - edge)
            f.write(os.urandom(edge))
        yield path


class Sink:
    """A loopback listener and the accept-sink endpoint on it (CPU 1); both replaced when a
    failed sender leaves the sink stuck (a connection its loop never closes: rloop's here)."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self.stack = stack
        self.port = 0
        self.child = self._start()

    def _start(self) -> Child:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        with listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(16)
            self.port = listener.getsockname()[1]
            fd = listener.fileno()
            child = Child.endpoint("accept-sink", str(fd), pass_fds=[fd])
        self.stack.callback(child.stop)
        _pin(child.pid, 1)
        return child

    def unblock(self) -> None:
        """After a failed send: take the sink's answer for the connection the sender made;
        when none comes (no connection, or one left open), the sink is killed by pid and a
        new one started on a new listener (the old one's queue dies with it)."""
        try:
            self.child.reply(1.0)
        except RuntimeError:
            stop_process(self.child.proc, signal.SIGKILL, 5.0)
            self.child = self._start()


def sendfile_workload(plan: Plan) -> list[Result]:
    """``loop.sendfile`` of one file per round into a sink process, per loop."""
    keys = _available("sendfile", variant=plan.variant)
    if not keys:
        return []
    n = plan.sendfile_bytes
    failed: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        path = stack.enter_context(_sparse_file(n))
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        stack.callback(os.close, fd)
        warm(fd)
        sink = Sink(stack)
        senders: dict[str, Child] = {}
        for key in keys:
            argv = [sys.executable, script("aio_servers"), "sendfile", _child_loop(key), path]
            senders[key] = _start_child(stack, key, argv, cpu=0)
        for key, sender in list(senders.items()):
            try:
                _check_loop(key, sender.reply(START_TIMEOUT), f"sendfile program on {key}")
            except RuntimeError as e:
                failed[key] = str(e).splitlines()[0]
                note(f"aio sendfile: {LABELS[key]} left out: {failed[key]}")
                del senders[key]
        expected: list[str] = []

        def measure(sender: Child) -> Callable[[], Moved]:
            calls = [0]

            def once() -> Moved:
                calls[0] += 1
                mode = "sha" if calls[0] == 1 else "count"
                if mode == "sha" and not expected:
                    expected.append(file_sha(fd))
                sink.child.send(mode)
                cpu = tree_cpu([sender.pid])
                t0 = time.perf_counter()
                answer = sender.ask(f"127.0.0.1 {sink.port} {n}", _time_bound(n))
                wall = time.perf_counter() - t0
                time.sleep(SETTLE)
                used = cpu()
                words = answer.split()
                if words[0] != "sent":
                    sink.unblock()
                    if words[0] == "unsupported":
                        raise Failed(f"no loop.sendfile ({answer.split(' ', 1)[1]})")
                    raise Failed(f"the sendfile program answered {answer!r}")
                got = sink.child.reply(_time_bound(n)).split()
                if words[:2] != ["sent", str(n)] or got[0] != str(n):
                    raise Failed(f"sent {answer!r}, the sink got {got[0]} of {n} bytes")
                if mode == "sha" and got[1] != expected[0]:
                    raise Failed("the sink got other bytes than the file's")
                return Moved(n, wall, used, how=words[2] if len(words) > 2 else "")

            return once

        contenders = {k: measure(s) for k, s in senders.items()}
        runs = alternate(guarded(contenders, "sendfile", failed), plan.byte_rounds, 1)
    size = f"{n // MiB} MiB" if n < GiB else f"{n // GiB} GiB"

    def case(subject: str, how: str) -> str:
        return (f"{LABELS[subject]}, loop.sendfile(transport, file) over TCP ({how or '?'}) "
                f"[{size} per round, file on tmpfs{_conditions(plan)}]")  # fmt: skip

    return _byte_results("sendfile", case, runs, failed, "sender CPU per GiB", plan)


# --- the bench -----------------------------------------------------------------------------


BURNER = "while True: pass"  # the CPU burner of --contended: a busy loop, no system calls


@contextlib.contextmanager
def _burner(plan: Plan) -> Iterator[None]:
    """For a --contended run, a busy-loop process pinned to the load's CPU 1 from start to end
    (stopped by pid); nothing otherwise."""
    if not plan.variant:
        yield
        return
    if (os.cpu_count() or 1) < 2:
        note("aio: one CPU here: the CPU burner shares it with every program")
    proc = subprocess.Popen([sys.executable, "-c", BURNER], stdin=subprocess.DEVNULL)
    try:
        _pin(proc.pid, 1)
        yield
    finally:
        stop_process(proc, signal.SIGTERM, 5.0)


def run(quick: bool, contended: bool = False) -> list[Result]:
    """The four workloads, each with every loop here, alternating; ``contended``: with a CPU
    burner on the load's CPU (every id suffixed ``_contended``)."""
    plan = _plan(quick, contended)
    wrk: str | None = None
    rows: list[Result] = []
    http = True
    if not tiny():
        wrk = _which("wrk")
        http = wrk is not None
        if wrk is None:
            skip(BENCH, planned_ids((*HELLOS, "uvicorn"), plan.variant),
                 f"wrk is not installed; `{install_command('wrk')}` (or `make bench-tools` in a "
                 "source tree) adds these rows")  # fmt: skip
    with _burner(plan):
        if http:
            rows += http_workload("hello", wrk, plan)
            rows += http_workload("hello_c1", wrk, plan)
            rows += http_workload("uvicorn", wrk, plan)
        rows += streams_workload(plan)
        rows += sendfile_workload(plan)
    return rows
