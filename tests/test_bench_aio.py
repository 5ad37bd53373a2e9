"""The event loop benches at smoke-test size. aio (fdkit.aio's two engines against asyncio,
uvloop, rloop and a C floor): its rows and ids, the CPU readings it splits, and how it leaves
out a contender that is missing, fails, or runs on another loop than it should (its
--contended variant: test_bench_aio_contended.py). aio_anatomy (the Python calls, and the
instructions under callgrind, each loop spends per hello request): its rows and ids, and how
it reads a callgrind dump and splits the calls between the protocol and the loop."""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.bench import (
    AIO_URING_GOALS,
    HAVE_GCC,
    HEADLINES,
    RESULTS_TIMEOUT,
    URING_OK,
    RowContract,
    aio_available,
    aio_lacking,
    anatomy_available,
    bench_rows,
    check_aio_rows,
    epoll_id,
    no_subprocess,
)

# isort: split
# (bench/ is importable once helpers.bench has put the source tree on sys.path)
from bench import _common, _endpoints, aio, aio_anatomy, serve
from bench._common import TINY_ENV, Result

pytestmark = pytest.mark.source_tree


class TestRows(RowContract):
    """The rows of aio and aio_anatomy (see RowContract)."""


@pytest.mark.slow
@pytest.mark.parametrize("row_id", HEADLINES["aio"])
@RESULTS_TIMEOUT
def test_aio_headline_ids(row_id: str) -> None:
    """Each headline id of the aio bench comes out once at smoke size, with its goal, or its
    contender is not here (`make bench` installs requirements-bench.txt; `make test` does
    not) and this says so."""
    if lacking := aio_lacking(row_id):
        pytest.skip(f"{', '.join(lacking)} not here: {aio.install_hint(lacking)}")
    ids = [r.id for r in bench_rows("aio")]
    assert ids.count(row_id) == 1, ids
    (row,) = [r for r in bench_rows("aio") if r.id == row_id]
    assert row.goal == aio.GOALS[row_id]


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_aio_rows() -> None:
    """Every row is one of fdkit.aio's engines against one other loop, in the unit of its
    workload; the asyncio rows (the stdlib: always here) come out for every workload, the
    epoll engine's always, the io_uring engine's where io_uring runs."""
    rows = bench_rows("aio")
    ids = [r.id for r in rows]
    assert set(ids) <= set(aio.planned_ids())
    assert len(ids) == len(set(ids))
    check_aio_rows(rows)
    workloads = ["hello", "hello_c1", "streams", "sendfile"]
    if not aio.missing(aio.UVICORN_NEEDS):
        workloads.append("uvicorn")
    stdlib = [f"aio_epoll_{w}_vs_asyncio" for w in workloads]
    stdlib += [f"aio_{w}_vs_asyncio" for w in workloads] if URING_OK else []
    assert set(stdlib) <= set(ids)
    for row_id in ("aio_sendfile_vs_asyncio", "aio_epoll_sendfile_vs_asyncio"):
        for sendfile in [r for r in rows if r.id == row_id]:
            assert "(native)" in sendfile.baseline_name  # asyncio's own os.sendfile path
            assert "(native)" in sendfile.case  # and fdkit.aio's engine's


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_aio_user_and_kernel_split_add_up() -> None:
    """The hello workload's CPU per request is read apart into user and kernel time, which
    add up to it, for each of fdkit.aio's engines and each loop it is compared with."""
    rows = {r.id: r for r in bench_rows("aio")}
    for subject in aio.SUBJECTS:
        for other in aio.others("hello", subject):
            ids = aio.row_ids("hello", other, "", subject)
            if other == aio.FLOOR:  # no split against the floor
                assert not [i for i in ids if "_user_" in i or "_kernel_" in i], ids
                continue
            cpu_id, user_id, kernel_id = ids[0], ids[3], ids[4]
            if user_id not in rows:
                assert not aio_available(cpu_id), cpu_id
                continue
            cpu, user, kernel = rows[cpu_id], rows[user_id], rows[kernel_id]
            for side in ("fdkit", "baseline"):
                total = getattr(user, side) + getattr(kernel, side)
                assert math.isclose(total, getattr(cpu, side), rel_tol=1e-9), (side, cpu_id)
    assert not [i for i in rows if re.match(r"aio_(epoll_)?hello_(user|kernel)_vs_floor", i)]


@pytest.mark.serial
def test_user_share_of_a_busy_process() -> None:
    """read_user_system reads a process's utime and stime finer than /proc's 10 ms ticks;
    a busy loop's CPU is almost all user time."""
    child = subprocess.Popen([sys.executable, "-c", aio.BURNER])
    try:
        share = _endpoints.user_share([child.pid])
        time.sleep(0.5)
        assert share() > 0.8
        user, system = _endpoints.read_user_system(child.pid)
        cpu = _endpoints.read_cpu(child.pid)
        assert math.isclose(user + system, cpu.ticks, abs_tol=0.1)
    finally:
        child.kill()
        child.wait(10)
    me = _endpoints.user_share([os.getpid()])
    assert math.isnan(me()) or 0 <= me() <= 1  # nothing sampled yet, or a share


def test_aio_split_rows_left_out_when_no_tick_sampled_them() -> None:
    """A run too short for the scheduler tick to sample it has no user/kernel split: those
    rows are skipped, saying so, and the total CPU rows stay."""
    _common.take_skipped()
    figs = {
        "fdkit": {"cpu": 2.0, "rate": 10.0, "p99": 1.0, "user": math.nan, "kernel": math.nan},
        "uvloop": {"cpu": 3.0, "rate": 10.0, "p99": 1.0, "user": 1.0, "kernel": 2.0},
    }
    rows = aio._http_rows("hello", "case", figs, "uvloop", "")
    assert [r.id for r in rows] == ["aio_hello_vs_uvloop", "aio_hello_rps_vs_uvloop",
                                    "aio_hello_p99_vs_uvloop"]  # fmt: skip
    (sk,) = _common.take_skipped()
    assert sk.ids == ("aio_hello_user_vs_uvloop", "aio_hello_kernel_vs_uvloop")
    assert "no user/kernel split" in sk.reason
    figs["epoll_engine"] = figs.pop("fdkit")  # the same for the epoll engine's rows
    rows = aio._http_rows("hello", "case", figs, "uvloop", "", "epoll_engine")
    assert [r.id for r in rows] == ["aio_epoll_hello_vs_uvloop", "aio_epoll_hello_rps_vs_uvloop",
                                    "aio_epoll_hello_p99_vs_uvloop"]  # fmt: skip
    assert [r.goal for r in rows] == [1.05, None, 0.95]
    (sk,) = _common.take_skipped()
    assert sk.ids == ("aio_epoll_hello_user_vs_uvloop", "aio_epoll_hello_kernel_vs_uvloop")


@pytest.mark.skipif(not HAVE_GCC, reason="no gcc for the C floor server")
def test_aio_floor_server_answers_as_the_python_hello_server(tmp_path: Path) -> None:
    """The C floor (bench/c/epoll_hello.c, through aio_servers.py floor) answers one fixed
    reply per request terminator, also when requests arrive split and pipelined, and exits
    with status 0 on SIGTERM."""
    from bench import child
    from bench.child import aio_servers

    lib = _common.load_c(aio.FLOOR_SOURCE)
    assert lib is not None
    port = serve._free_port()
    argv = [sys.executable, child.script("aio_servers"), "floor", str(lib._name), "127.0.0.1",
            str(port)]  # fmt: skip
    server = serve.Server(aio.FLOOR, argv, port, name="floor", bench="aio")
    try:
        server.wait_ready("/", serve.HELLO)
        aio._check_loop(aio.FLOOR, server.output(), "floor")
        request = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n"
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            stream = request * 3
            for cut in (5, 33, 34, 35, 70, len(stream)):  # terminators split across sends
                s.sendall(stream[:cut])
                stream = stream[cut:]
                time.sleep(0.02)
            want = aio_servers.HELLO * 3
            got = b""
            while len(got) < len(want):
                chunk = s.recv(65536)
                assert chunk, got
                got += chunk
            assert got == want
    finally:
        server.stop()
    assert server.proc.returncode == 0


def test_aio_engines_are_fdkit_aio_each_on_its_engine() -> None:
    """fdkit.aio's two contenders run the same program, with FDKIT_AIO_ENGINE=io_uring or
    FDKIT_AIO_ENGINE=epoll in its environment, and each must say it runs on that engine (the
    io_uring engine's rows never measure a loop that fell back to epoll)."""
    uring, epoll = "loop fdkit.aio._loop.UringEventLoop io_uring\n", (
        "loop fdkit.aio._loop.EpollEventLoop epoll\n")  # fmt: skip
    for key, engine in (("fdkit", "io_uring"), ("epoll_engine", "epoll")):
        assert aio._child_loop(key) == "fdkit"
        env = aio._child_env(key)
        assert env is not None
        assert env["FDKIT_AIO_ENGINE"] == engine
    aio._check_loop("epoll_engine", epoll, "hello server")
    aio._check_loop("fdkit", uring, "hello server")
    with pytest.raises(RuntimeError, match="the io_uring engine, not epoll"):
        aio._check_loop("epoll_engine", uring, "x")
    with pytest.raises(RuntimeError, match="the epoll engine, not io_uring"):
        aio._check_loop("fdkit", epoll, "x")
    assert aio._child_env("uvloop") is None


def test_aio_ids_per_engine_keep_the_old_ones_and_their_goals() -> None:
    """The io_uring engine's rows keep the ids the bench always had (a contract: aio_W_vs_X),
    the epoll engine's are aio_epoll_W_vs_X against the same contenders but itself; the goals
    are the io_uring engine's, 0.05 lower for the epoll engine, and every goal names a row."""
    old = [f"aio_{w}{k}_vs_{o}" for w in ("hello", "uvicorn") for o in ("uvloop", "asyncio",
           "rloop", "epoll_engine") for k in ("", "_rps", "_p99")]  # fmt: skip
    old += [f"aio_hello{k}_vs_{o}" for o in ("uvloop", "asyncio", "rloop", "epoll_engine")
            for k in ("_user", "_kernel")]  # fmt: skip
    old += [f"aio_hello{k}_vs_floor" for k in ("", "_rps", "_p99")]
    old += [f"aio_{w}{k}_vs_{o}" for w in ("streams", "sendfile") for o in ("uvloop", "asyncio",
            "rloop", "epoll_engine") for k in ("", "_rate")]  # fmt: skip
    # hello_c1, added later: the hello rows, under one connection
    old += [i.replace("aio_hello", "aio_hello_c1", 1) for i in old if i.startswith("aio_hello")]
    planned = aio.planned_ids()
    assert len(planned) == len(set(planned))
    uring = [i for i in planned if not i.startswith("aio_epoll_")]
    assert sorted(uring) == sorted(old)
    epoll = [i for i in planned if i.startswith("aio_epoll_")]
    assert sorted(epoll) == sorted(epoll_id(i) for i in old if "_vs_epoll_engine" not in i)
    for row_id, goal in AIO_URING_GOALS.items():
        assert aio.GOALS[row_id] == goal, row_id
        if not row_id.endswith("_vs_epoll_engine"):
            assert aio.GOALS[epoll_id(row_id)] == pytest.approx(goal - 0.05), row_id
    for row_id in aio.GOALS:
        assert row_id.removesuffix(aio.CONTENDED) in planned, row_id
    assert not [i for i in aio.GOALS if i.startswith("aio_epoll_") and i.endswith("_contended")]
    assert set(aio.planned_ids(variant=aio.CONTENDED)) == {i + aio.CONTENDED for i in planned}


def test_aio_rows_of_a_missing_contender_are_listed_once() -> None:
    """A contender left out takes the rows that need it: an engine's own rows and the rows
    against it; a row two causes take is listed once."""
    _common.take_skipped()
    aio._left_out("streams", {"fdkit": "it hung", "uvloop": "it failed"})
    uring, uvloop = _common.take_skipped()
    assert set(uring.ids) == {i for i in aio.planned_ids(["streams"]) if not i.startswith(
        "aio_epoll_")}  # fmt: skip
    assert uvloop.ids == ("aio_epoll_streams_vs_uvloop", "aio_epoll_streams_rate_vs_uvloop")
    assert uring.reason == "fdkit.aio (io_uring): it hung"
    aio._left_out("sendfile", {"epoll_engine": "no"})
    (sk,) = _common.take_skipped()
    assert set(sk.ids) == {"aio_sendfile_vs_epoll_engine", "aio_sendfile_rate_vs_epoll_engine"} | {
        i for i in aio.planned_ids(["sendfile"]) if i.startswith("aio_epoll_")}  # fmt: skip


def test_aio_without_io_uring_the_epoll_engine_rows_remain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the io_uring engine cannot run (a seccomp profile that denies io_uring), its rows
    are skipped saying why and the epoll engine's are measured against every other loop."""
    monkeypatch.setattr(aio, "uring_unavailable", lambda: "io_uring_setup: EPERM")
    monkeypatch.setattr(aio, "missing", lambda names: [n for n in names if n == "uvloop"])
    _common.take_skipped()
    assert aio._available("hello") == ["epoll_engine", "rloop", "asyncio"]
    uring, uvloop = _common.take_skipped()
    assert set(uring.ids) == {i for i in aio.planned_ids(["hello"]) if not i.startswith(
        "aio_epoll_")}  # fmt: skip
    assert uring.reason == "fdkit.aio's io_uring engine cannot run here: io_uring_setup: EPERM"
    assert set(uvloop.ids) == set(aio.row_ids("hello", "uvloop", "", "epoll_engine"))
    figs = {k: {"cpu": 2.0, "rate": 1.0, "p99": 1.0, "user": 1.0, "kernel": 1.0}
            for k in ("epoll_engine", "rloop", "asyncio", aio.FLOOR)}  # fmt: skip
    assert aio._measured(figs) == [("epoll_engine", "asyncio"), ("epoll_engine", "rloop"),
                                   ("epoll_engine", aio.FLOOR)]  # fmt: skip


@pytest.mark.skipif(not URING_OK, reason="no io_uring here")
def test_aio_io_uring_probe() -> None:
    """The probe of the io_uring engine runs a loop as its programs do: None where io_uring
    runs; else the last line the program wrote (the error that says why)."""
    assert aio.uring_unavailable.__wrapped__() is None


def test_aio_io_uring_probe_says_why_it_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aio, "PROBE", "raise OSError('io_uring is denied here')")
    assert aio.uring_unavailable.__wrapped__() == "OSError: io_uring is denied here"


def test_aio_missing_contender_is_skipped_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Only uvloop missing, whatever this environment has installed (a clean clone has none of
    # requirements-bench.txt: the real check would name rloop too).
    monkeypatch.setattr(aio, "missing", lambda names: [n for n in names if n == "uvloop"])
    monkeypatch.setattr(aio, "uring_unavailable", lambda: None)
    _common.take_skipped()
    keys = aio._available("hello")
    assert "uvloop" not in keys
    assert keys[:2] == ["fdkit", "epoll_engine"]
    (sk,) = _common.take_skipped()
    assert sk.bench == "aio"
    assert sk.ids == (*aio.row_ids("hello", "uvloop"),
                      *aio.row_ids("hello", "uvloop", "", "epoll_engine"))  # fmt: skip
    assert "uvloop is not installed" in sk.reason
    assert "-m pip install uvloop==0.23.0`" in sk.reason  # the pin of requirements-bench.txt
    assert "uvloop is not installed" in capsys.readouterr().err


def test_aio_without_fdkit_aio_skips_the_whole_workload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aio, "missing", lambda names: [n for n in names if n == "fdkit.aio"])
    _common.take_skipped()
    assert aio._available("streams") == []
    (sk,) = _common.take_skipped()
    assert set(sk.ids) == set(aio.planned_ids(["streams"]))


def test_aio_without_wrk_skips_the_http_rows_and_runs_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(TINY_ENV, raising=False)
    monkeypatch.setattr(aio, "_which", lambda name: None)
    no_subprocess(monkeypatch)
    ran: list[str] = []

    def workload(name: str) -> Callable[[aio.Plan], list[Result]]:
        def called(plan: aio.Plan) -> list[Result]:
            ran.append(name)
            return []

        return called

    monkeypatch.setattr(aio, "streams_workload", workload("streams"))
    monkeypatch.setattr(aio, "sendfile_workload", workload("sendfile"))
    _common.take_skipped()
    assert aio.run(quick=True) == []
    (sk,) = _common.take_skipped()
    assert "wrk is not installed" in sk.reason
    assert sk.ids == tuple(aio.planned_ids([*aio.HELLOS, "uvicorn"]))
    assert ran == ["streams", "sendfile"]  # the byte workloads need no wrk


def test_aio_a_failing_contender_is_left_out_and_the_others_go_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls: list[str] = []

    def hangs() -> int:
        calls.append("rloop")
        raise RuntimeError("bench echo-client program on rloop did not answer within 15 s")

    failed: dict[str, str] = {}
    contenders: dict[str, Callable[[], int]] = {"fdkit": lambda: 1, "rloop": hangs}
    runs = _common.alternate(aio.guarded(contenders, "streams", failed), rounds=3, warmup=1)
    assert runs == {"fdkit": [1, 1, 1], "rloop": [None, None, None]}
    assert calls == ["rloop"]  # tried once, never again
    assert failed == {"rloop": "bench echo-client program on rloop did not answer within 15 s"}
    assert f"aio streams: {aio.LABELS['rloop']} left out" in capsys.readouterr().err


def test_aio_checks_the_loop_each_program_runs_on() -> None:
    aio._check_loop("uvloop", "loop uvloop.Loop -\nlistening 127.0.0.1 1\n", "hello server")
    with pytest.raises(RuntimeError, match="not uvloop"):
        aio._check_loop("uvloop", "loop asyncio.unix_events._UnixSelectorEventLoop -\n", "x")
    with pytest.raises(RuntimeError, match="runs on None"):
        aio._check_loop("fdkit", "Traceback (most recent call last):\n", "x")


def test_aio_child_without_its_loop_exits_saying_so() -> None:
    from bench import child

    proc = subprocess.run(
        [sys.executable, child.script("aio_servers"), "echo-client", "no-such-loop"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode != 0
    assert "unknown loop 'no-such-loop'" in proc.stderr


# ---------------------------------------------------------------------- aio_anatomy


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_aio_anatomy_rows() -> None:
    """Two rows per loop here (every call; Python functions only), each the loop's figure
    against the protocol's own share of it: one data_received a request (one request in flight
    on each connection), never more than the whole; asyncio's loop, written in Python, makes
    calls of its own. Only fdkit.aio's engines' calls rows carry a goal."""
    rows = {r.id: r for r in bench_rows("aio_anatomy")}
    assert len(rows) == len(bench_rows("aio_anatomy"))
    assert set(rows) <= set(aio_anatomy.planned_ids())
    for key in aio_anatomy.LOOPS:
        calls_id, frames_id = (aio_anatomy.row_id(key, kind) for kind in aio_anatomy.KINDS)
        if not anatomy_available(calls_id):
            assert calls_id not in rows
            assert frames_id not in rows
            continue
        calls, frames = rows[calls_id], rows[frames_id]
        for r in (calls, frames):
            assert r.unit == "calls/req"
            assert r.case.startswith(aio.LABELS[key] + ", "), r.case
            assert r.baseline_name == aio_anatomy.OWN
            assert 0 < r.baseline <= r.fdkit, r
        assert frames.baseline == pytest.approx(1.0, abs=0.05)  # Hello.data_received
        assert frames.fdkit <= calls.fdkit
        assert frames.baseline <= calls.baseline
        assert calls.goal == (1.0 if key in aio.SUBJECTS else None)
        assert frames.goal is None
    if "asyncio_hello_py_calls_per_req" in rows:
        assert rows["asyncio_hello_py_frames_per_req"].ratio < 0.5  # _run_once, Handle._run...
    for row_id in aio_anatomy.planned_instr_ids():
        if row_id not in rows:
            continue
        r = rows[row_id]
        other = row_id.rsplit("_vs_", 1)[1]
        assert r.unit == "instr/req"
        assert r.baseline_name == aio.LABELS[other]
        # a request's protocol call alone runs thousands of instructions: the counts are of
        # the rounds, not of an idle server whose instrumentation was off
        assert r.fdkit > 2000, r
        assert r.baseline > 2000, r
        assert r.goal is None


def test_aio_anatomy_reads_a_callgrind_dump(tmp_path: Path) -> None:
    """A round's instructions are the ``totals:`` line of its callgrind dump."""
    dump = tmp_path / "callgrind.fdkit.1"
    dump.write_text("version: 1\ncreator: callgrind-3.19.0\npart: 1\nevents: Ir\n"
                    "summary: 0\ntotals: 21122070\n")  # fmt: skip
    assert aio_anatomy.dump_total(dump) == 21_122_070
    dump.write_text("version: 1\n")
    with pytest.raises(aio.Failed, match="no totals line"):
        aio_anatomy.dump_total(dump)


def test_aio_anatomy_counts_the_protocols_calls_apart() -> None:
    """CallCounter (what hello-calls installs with sys.setprofile) counts calls of Python
    functions by callee and calls of C functions by caller; per_request splits them between
    the protocol's module (bench/child/aio_servers.py) and the rest (the loop's)."""
    from bench.child import aio_servers

    class Transport:  # the loop's, here: this module's
        def write(self, data: bytes) -> None:
            self.last = data  # no call

    hello = aio_servers.Hello()
    hello.tr = Transport()  # type: ignore[assignment]
    counter = aio_servers.CallCounter()
    before = counter.snapshot()
    sys.setprofile(counter)
    try:
        for _ in range(10):
            hello.data_received(aio_servers.REQUEST)
    finally:
        sys.setprofile(None)
    after = counter.snapshot()
    json.dumps(after)  # what the program answers, one line
    calls = aio_anatomy.per_request(before, after, 10)
    assert calls.own_py == 1.0  # data_received
    assert calls.loop_py == 1.0  # Transport.write
    assert calls.own_c >= 2.0  # bytes.count, bytes.rfind, len
    assert calls.loop_c == pytest.approx(0.1)  # sys.setprofile(None), once, from here
    assert calls.busiest[0][0].endswith("Transport.write")
    assert calls.calls == calls.own_calls + calls.loop_py + calls.loop_c


def test_aio_anatomy_per_request_takes_the_difference() -> None:
    own = "/x/bench/child/aio_servers.py"
    before = {"own": own, "py": {f"{own}:1:Hello.data_received": 5, "/a/events.py:9:H._run": 7},
              "c": {f"{own}:1:Hello.data_received": 10}}  # fmt: skip
    after = {"own": own, "py": {f"{own}:1:Hello.data_received": 105, "/a/events.py:9:H._run": 207,
             "/a/loop.py:3:L.select": 50}, "c": {f"{own}:1:Hello.data_received": 310,
             "/a/events.py:9:H._run": 100}}  # fmt: skip
    calls = aio_anatomy.per_request(before, after, 100)
    assert (calls.own_py, calls.own_c, calls.loop_py, calls.loop_c) == (1.0, 3.0, 2.5, 1.0)
    assert calls.calls == 7.5
    assert calls.frames == 3.5
    assert calls.busiest == (("a/events.py:H._run", 2.0), ("C calls from a/events.py:H._run", 1.0),
                             ("a/loop.py:L.select", 0.5))  # fmt: skip
    with pytest.raises(aio.Failed, match="the server answered"):
        aio_anatomy._counts("error unknown command 'x'")


def test_aio_anatomy_ids() -> None:
    assert aio_anatomy.planned_ids() == [
        f"{head}_hello_py_{kind}_per_req"
        for head in ("aio", "aio_epoll", "asyncio", "uvloop", "rloop")
        for kind in ("calls", "frames")
    ] + [
        f"{head}_hello_instr_vs_{other}"
        for head in ("aio", "aio_epoll")
        for other in ("asyncio", "uvloop", "rloop")
    ]
    assert set(aio_anatomy.GOALS) == set(HEADLINES["aio_anatomy"])
