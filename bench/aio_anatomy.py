"""The anatomy of a hello request: the calls each event loop makes per request, in Python.

The ``hello`` server of the aio bench (:mod:`bench.child.aio_servers`, the same
``asyncio.Protocol``) runs on each loop: fdkit.aio's io_uring engine and its epoll engine
(``FDKIT_AIO_ENGINE``, checked as in :mod:`bench.aio`), asyncio's own loop, uvloop and rloop;
its program is ``aio_servers.py hello-calls``, which counts with ``sys.setprofile`` in the
loop's thread what cProfile counts as calls: every call of a Python function (also one made by
C or Rust code, and a coroutine resumed) and every call of a C function from Python code. Each
call is the protocol's own when its code lives in the protocol's module
(``bench/child/aio_servers.py``: ``Hello.data_received``, and the C functions it calls, such as
``bytes.count`` or a transport's ``write`` written in C), else the loop's (its Python
functions, and the C functions they call). A loop whose per-request path is native makes no
call of its own: only the protocol's remain.

The load is ``aio_servers.py hello-client`` on CPU 1 (the server on CPU 0): C keep-alive
connections, one request in flight on each as wrk keeps them (wrk is not used: its count of
requests includes what it sent around the window). Per round, the bench reads the server's
counts, has the client send N requests (each answer checked), reads the counts again: their
difference divided by N. The connections are made, and warmed up with a few requests each,
before the first round, so their set-up is not counted. The figures are counts: the hook slows
the server down, which changes how many requests one loop iteration finds ready (the
iteration's own calls are shared among them), and nothing else.

Rows, one pair per loop L (``aio``, ``aio_epoll``, ``asyncio``, ``uvloop``, ``rloop``):
``L_hello_py_calls_per_req`` (every call, as cProfile's total counts them) and
``L_hello_py_frames_per_req`` (the calls of Python functions only: the frames run). In each,
``fdkit`` is loop L's figure (the column of the loop measured, whichever it is), ``baseline``
the protocol's own share of it, so ``ratio`` = own ÷ all (1.0: the loop made no call of its
own). The calls rows of fdkit.aio's two engines carry goal 1.0 (no Python call of the
loop's beside the protocol's own); the others are figures. The loop's busiest functions
are on stderr.

Then the same ``hello`` server, without the hook, under callgrind: the instructions its
process runs in user space per request, counted (exact, whatever else the machine runs; the
kernel's work left out). Rows ``aio_hello_instr_vs_L`` and ``aio_epoll_hello_instr_vs_L`` for L
in asyncio, uvloop, rloop: fdkit.aio's engine against loop L (``ratio`` = L's count ÷ fdkit's).
Needs valgrind (``make bench-tools``); skipped, saying so, without it.

Modes: full (64 connections, 3 rounds of 20,000 requests), ``--quick`` (64, one round of
5,000), tiny (``FDKIT_BENCH_TINY``: 4 connections, 400 requests).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import aio
from bench._common import Result, alternate, compare, median, note, pick, skip
from bench._endpoints import Child
from bench.child import script
from bench.serve import START_TIMEOUT, _free_port

BENCH = "aio_anatomy"
# the loops measured (keys of bench.aio), and the first word of their rows' ids
LOOPS = ("fdkit", "epoll_engine", "asyncio", "uvloop", "rloop")
ID_HEAD = {"fdkit": "aio", "epoll_engine": "aio_epoll", "asyncio": "asyncio",
           "uvloop": "uvloop", "rloop": "rloop"}  # fmt: skip
KINDS = ("calls", "frames")  # every call (Python and C functions), Python functions only
# the goal of fdkit.aio's engines: no call of the loop's own, only the protocol's
GOALS = {"aio_hello_py_calls_per_req": 1.0, "aio_epoll_hello_py_calls_per_req": 1.0}
UNIT = "calls/req"
OWN = "the Hello protocol's own (bench/child/aio_servers.py)"
TOP = 8  # the loop's busiest functions named on stderr, per loop


def row_id(key: str, kind: str) -> str:
    """The id of loop ``key``'s row of ``kind`` (``calls`` or ``frames``)."""
    return f"{ID_HEAD[key]}_hello_py_{kind}_per_req"


def planned_ids() -> list[str]:
    """Every row id ``run`` produces when every loop is here."""
    return [row_id(k, kind) for k in LOOPS for kind in KINDS] + planned_instr_ids()


@dataclass(frozen=True)
class Plan:
    conns: int
    requests: int  # per round
    rounds: int
    warm_per_conn: int  # requests per connection before the first round


def _plan(quick: bool) -> Plan:
    return pick(quick, Plan(64, 20_000, 3, 4), Plan(64, 5_000, 1, 4), Plan(4, 400, 1, 4))


# --- counts --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Calls:
    """The calls of one round, per request: by kind (``py`` Python functions, ``c`` C functions
    called from Python) and owner (the protocol's, the loop's); the loop's busiest functions
    (and the functions of the loop's that call C functions most) by name."""

    own_py: float
    own_c: float
    loop_py: float
    loop_c: float
    busiest: tuple[tuple[str, float], ...] = ()

    @property
    def calls(self) -> float:
        return self.own_py + self.own_c + self.loop_py + self.loop_c

    @property
    def own_calls(self) -> float:
        return self.own_py + self.own_c

    @property
    def frames(self) -> float:
        return self.own_py + self.loop_py


def _counts(answer: str) -> dict[str, object]:
    words = answer.split(" ", 1)
    if words[0] != "calls" or len(words) < 2:
        raise aio.Failed(f"the server answered {answer[:200]!r} to `calls`")
    doc = json.loads(words[1])
    if not isinstance(doc, dict):
        raise aio.Failed("the server's counts are not a JSON object")
    return doc


def _short(name: str) -> str:
    """``FILE:LINE:QUALNAME`` as ``DIR/FILE.py:QUALNAME`` (the end of the path suffices)."""
    path, _, rest = name.partition(":")
    qualname = rest.partition(":")[2]
    return "/".join(path.split("/")[-2:]) + ":" + qualname


def per_request(before: Mapping[str, object], after: Mapping[str, object], n: int) -> Calls:
    """The calls made between two snapshots of ``hello-calls``, per request of ``n``."""
    own = f"{after['own']}:"

    def diff(kind: str) -> dict[str, int]:
        a, b = before.get(kind, {}), after.get(kind, {})
        if not isinstance(a, dict) or not isinstance(b, dict):
            raise aio.Failed(f"the server's counts have no {kind!r} table")
        out = {k: int(v) - int(a.get(k, 0)) for k, v in b.items()}
        return {k: v for k, v in out.items() if v > 0}

    py, c = diff("py"), diff("c")
    loop_py = {k: v for k, v in py.items() if not k.startswith(own)}
    loop_c = {k: v for k, v in c.items() if not k.startswith(own)}
    named = [(_short(k), v) for k, v in loop_py.items()]
    named += [(f"C calls from {_short(k)}", v) for k, v in loop_c.items()]
    busiest = sorted(named, key=lambda kv: -kv[1])[:TOP]
    return Calls(
        own_py=sum(v for k, v in py.items() if k.startswith(own)) / n,
        own_c=sum(v for k, v in c.items() if k.startswith(own)) / n,
        loop_py=sum(loop_py.values()) / n,
        loop_c=sum(loop_c.values()) / n,
        busiest=tuple((name, v / n) for name, v in busiest),
    )


# --- running -------------------------------------------------------------------------------


def _available() -> list[str]:
    """The loops that can run here; the rows of the others are skipped, saying why."""
    keys: list[str] = []
    for key in LOOPS:
        ids = [row_id(key, kind) for kind in KINDS]
        lacking = aio.missing([aio.MODULES[key]])
        if lacking:
            skip(BENCH, ids, f"{', '.join(lacking)} is not installed; "
                             f"{aio.install_hint(lacking)} adds these rows")  # fmt: skip
        elif key == "fdkit" and (why := aio.uring_unavailable()) is not None:
            skip(BENCH, ids, f"fdkit.aio's io_uring engine cannot run here: {why}")
        else:
            keys.append(key)
    return keys


@dataclass
class Pair:
    """One loop's counting server (CPU 0) and its client (CPU 1)."""

    server: Child
    client: Child
    port: int


def _start(stack: contextlib.ExitStack, key: str, plan: Plan) -> Pair:
    """``key``'s counting server and its client, connected and warmed up (raises
    RuntimeError: the server is on another loop, or did not start, or the client failed)."""
    port = _free_port()
    argv = [sys.executable, script("aio_servers"), "hello-calls", aio._child_loop(key),
            "127.0.0.1", str(port)]  # fmt: skip
    server = aio._start_child(stack, key, argv, cpu=0)
    aio._check_loop(key, server.reply(START_TIMEOUT), f"hello-calls server for {key}")
    listening = server.reply(START_TIMEOUT)
    if not listening.startswith("listening "):
        raise RuntimeError(f"the hello-calls server for {key} said {listening!r}")
    client = Child(f"hello client of {key}", [sys.executable, script("aio_servers"),
                                               "hello-client"])  # fmt: skip
    stack.callback(client.stop)
    aio._pin(client.pid, 1)
    _expect(client.ask(f"connect 127.0.0.1 {port} {plan.conns}", START_TIMEOUT), "connected")
    warm = plan.conns * plan.warm_per_conn
    _expect(client.ask(f"run {warm}", _bound(warm)), "done")
    return Pair(server, client, port)


def _expect(answer: str, word: str) -> None:
    if answer.split()[:1] != [word]:
        raise aio.Failed(f"the hello client answered {answer!r}")


def _bound(n: int) -> float:
    """Seconds ``n`` counted requests may take (200 a second, a tenth of the slowest loop
    seen here under the hook, plus start-up)."""
    return 15.0 + n / 200


def _measure(pair: Pair, n: int) -> Callable[[], Calls]:
    def once() -> Calls:
        before = _counts(pair.server.ask("calls", START_TIMEOUT))
        answer = pair.client.ask(f"run {n}", _bound(n))
        after = _counts(pair.server.ask("calls", START_TIMEOUT))
        if answer.split()[:2] != ["done", str(n)]:
            raise aio.Failed(f"the hello client answered {answer!r}")
        calls = per_request(before, after, n)
        if calls.own_py <= 0:
            raise aio.Failed("no call of the protocol's was counted: the hook is not in place")
        return calls

    return once


def _note(key: str, rounds: Sequence[Calls]) -> None:
    c = rounds[-1]
    note(f"aio_anatomy: {aio.LABELS[key]}: {median([r.calls for r in rounds]):.2f} calls/req "
         f"(the protocol's {c.own_py:.2f} Python + {c.own_c:.2f} C; the loop's {c.loop_py:.2f} "
         f"Python + {c.loop_c:.2f} C)" + ("; the loop's busiest: " + ", ".join(
             f"{name} {per:.2f}" for name, per in c.busiest) if c.busiest else ""))  # fmt: skip


def _rows(key: str, rounds: Sequence[Calls], plan: Plan) -> list[Result]:
    case = (f"{aio.LABELS[key]}, asyncio.Protocol hello server, calls per request counted in "
            f"its loop's thread (sys.setprofile) [{plan.conns} keep-alive connections, a "
            f"request in flight on each, {plan.requests:,} requests per round]")  # fmt: skip
    calls_id, frames_id = (row_id(key, kind) for kind in KINDS)
    return [
        compare(calls_id, BENCH, case, "calls per request as cProfile counts them (Python "
                "and C functions); baseline: the protocol's own", UNIT,
                median([r.calls for r in rounds]), median([r.own_calls for r in rounds]), OWN,
                GOALS.get(calls_id)),
        compare(frames_id, BENCH, case, "Python function calls (frames) per request; "
                "baseline: the protocol's own", UNIT, median([r.frames for r in rounds]),
                median([r.own_py for r in rounds]), OWN, GOALS.get(frames_id)),
    ]  # fmt: skip


# --- instructions ---------------------------------------------------------------------------
#
# The same hello server (the plain ``hello`` program: no hook) under callgrind, which counts the
# instructions its process runs in user space while the client's requests are answered
# (instrumentation on for the round only, ``callgrind_control``; a dump per round). A count is
# exact and does not depend on what else the machine runs, so it ranks the loops' user-space
# work where two shared cores make CPU time noisy; it leaves the kernel's work out. Rows: each
# fdkit.aio engine against each other loop, ``aio_hello_instr_vs_uvloop`` and so on.

INSTR_OTHERS = ("asyncio", "uvloop", "rloop")
INSTR_UNIT = "instr/req"


def instr_row_id(subject: str, other: str) -> str:
    """The id of fdkit.aio engine ``subject``'s instructions row against loop ``other``."""
    return f"{ID_HEAD[subject]}_hello_instr_vs_{other}"


def planned_instr_ids() -> list[str]:
    return [instr_row_id(s, o) for s in ("fdkit", "epoll_engine") for o in INSTR_OTHERS]


def _callgrind_missing() -> str | None:
    lacking = [t for t in ("valgrind", "callgrind_control") if shutil.which(t) is None]
    if lacking:
        return f"{' and '.join(lacking)} not found (`make bench-tools` installs valgrind)"
    return None


@dataclass
class Counted:
    """One loop's hello server under callgrind and its client."""

    pair: Pair
    out: Path  # callgrind's output file; each round's dump is OUT.N


def _start_counted(stack: contextlib.ExitStack, key: str, plan: Plan, tmp: Path) -> Counted:
    port = _free_port()
    out = tmp / f"callgrind.{key}"
    argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
            sys.executable, script("aio_servers"), "hello", aio._child_loop(key), "127.0.0.1",
            str(port)]  # fmt: skip
    server = Child(f"hello server on {key} under callgrind", argv, env=aio._child_env(key))
    stack.callback(server.stop)
    aio._pin(server.pid, 0)
    aio._check_loop(key, server.reply(START_TIMEOUT * 4), f"hello server for {key}")
    client = Child(f"hello client of {key}", [sys.executable, script("aio_servers"),
                                               "hello-client"])  # fmt: skip
    stack.callback(client.stop)
    aio._pin(client.pid, 1)
    _expect(client.ask(f"connect 127.0.0.1 {port} {plan.conns}", START_TIMEOUT * 4), "connected")
    warm = plan.conns * plan.warm_per_conn
    _expect(client.ask(f"run {warm}", _bound(warm)), "done")
    return Counted(Pair(server, client, port), out)


def _callgrind(pid: int, *args: str) -> None:
    done = subprocess.run(["callgrind_control", *args, str(pid)], capture_output=True,
                          text=True, timeout=START_TIMEOUT)  # fmt: skip
    if done.returncode != 0:
        raise aio.Failed(f"callgrind_control {' '.join(args)}: {done.stderr.strip()[:200]}")


def dump_total(path: Path) -> int:
    """The instructions a callgrind dump counted (its ``totals:`` line)."""
    for line in path.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise aio.Failed(f"{path} has no totals line")


def _measure_instr(c: Counted, n: int) -> Callable[[], float]:
    dumps = [0]

    def once() -> float:
        pid = c.pair.server.pid
        _callgrind(pid, "--instr=on")
        answer = c.pair.client.ask(f"run {n}", _bound(n))
        _callgrind(pid, "--instr=off")
        _callgrind(pid, "--dump")
        dumps[0] += 1
        if answer.split()[:2] != ["done", str(n)]:
            raise aio.Failed(f"the hello client answered {answer!r}")
        return dump_total(c.out.with_name(f"{c.out.name}.{dumps[0]}")) / n

    return once


def run_instructions(plan: Plan, keys: Sequence[str]) -> list[Result]:
    """fdkit.aio's engines against the other loops here, in instructions per request."""
    subjects = [k for k in ("fdkit", "epoll_engine") if k in keys]
    others = [k for k in INSTR_OTHERS if k in keys]
    missing = _callgrind_missing()
    if missing is not None:
        skip(BENCH, planned_instr_ids(), missing)
        return []
    failed: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fdkit-callgrind-")))
        counted: dict[str, Counted] = {}
        for key in subjects + others:
            try:
                counted[key] = _start_counted(stack, key, plan, tmp)
            except RuntimeError as e:  # aio.Failed too
                failed[key] = str(e).splitlines()[0] if str(e) else type(e).__name__
                note(f"aio_anatomy: {aio.LABELS[key]} under callgrind left out: {failed[key]}")
        contenders = {k: _measure_instr(c, plan.requests) for k, c in counted.items()}
        runs = alternate(aio.guarded(contenders, "instructions", failed), plan.rounds, 0)
    per = {k: median([v for v in vs if v is not None]) for k, vs in runs.items()}
    note("aio_anatomy: instructions per hello request (callgrind): " + ", ".join(
        f"{aio.LABELS[k]} {v:,.0f}" for k, v in per.items()))  # fmt: skip
    rows: list[Result] = []
    case = (f"asyncio.Protocol hello server, user-space instructions per request counted by "
            f"callgrind [{plan.conns} keep-alive connections, a request in flight on each, "
            f"{plan.requests:,} requests per round]")  # fmt: skip
    for s in subjects:
        for o in others:
            if s in per and o in per:
                rows.append(compare(instr_row_id(s, o), BENCH, f"{aio.LABELS[s]}, {case}",
                                    "instructions per request (user space)", INSTR_UNIT,
                                    per[s], per[o], aio.LABELS[o]))  # fmt: skip
            else:
                why = failed.get(s) or failed.get(o) or "no measurement"
                skip(BENCH, [instr_row_id(s, o)], why)
    return rows


def run(quick: bool) -> list[Result]:
    """Every loop here, its counting server under the same load, alternating rounds."""
    plan = _plan(quick)
    keys = _available()
    failed: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        pairs: dict[str, Pair] = {}
        for key in keys:
            try:
                pairs[key] = _start(stack, key, plan)
            except RuntimeError as e:  # aio.Failed too
                failed[key] = str(e).splitlines()[0] if str(e) else type(e).__name__
                note(f"aio_anatomy: {aio.LABELS[key]} left out: {failed[key]}")
        contenders = {k: _measure(p, plan.requests) for k, p in pairs.items()}
        runs = alternate(aio.guarded(contenders, "anatomy", failed), plan.rounds, 0)
    rows: list[Result] = []
    for key in LOOPS:
        if key in failed:
            skip(BENCH, [row_id(key, kind) for kind in KINDS], f"{aio.LABELS[key]}: {failed[key]}")
            continue
        rounds = [r for r in runs.get(key, []) if r is not None]
        if rounds:
            _note(key, rounds)
            rows += _rows(key, rounds, plan)
    return rows + run_instructions(plan, keys)
