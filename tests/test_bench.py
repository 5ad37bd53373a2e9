"""The benchmarks' contract, at smoke-test size: result schema, headline ids, ratios, JSON.

The harness is ``bench/`` of the source tree, imported from there (and run as ``python -m
bench`` from the repository root, as ``make bench`` does); the installed package has none.

Speed is never asserted here (the figures at this size mean nothing); what is checked is that
every bench runs, cleans up after itself, and reports rows ``python -m bench`` can print.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest

from fdkit import uring

REPO = Path(__file__).resolve().parent.parent
# The harness is the source tree's bench/ (the wheel does not carry it): import it from there.
if not (REPO / "bench" / "__init__.py").is_file():
    pytest.skip(f"no bench/ harness beside {REPO / 'tests'}", allow_module_level=True)
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import bench as benchmarks  # noqa: E402
from bench import (  # noqa: E402
    _common,
    _endpoints,
    aio,
    aio_anatomy,
    atomic_pipe,
    report,
    serve,
    tour,
    zerocopy,
)
from bench._common import TINY_ENV, Result, is_rate  # noqa: E402

# The harness is a tool of the source tree, not of the package: `make test` checks its contract
# once; the runs against each installed wheel leave it out (the fdkit code it drives has tests
# of its own there).
pytestmark = pytest.mark.source_tree

#: The per-test timeout of the tests that use `results`: the whole tiny run of every bench
#: (child processes, servers, wrk) falls within the first one's, and on a loaded 2-core machine
#: it took over the default 60 s.
RESULTS_TIMEOUT = pytest.mark.timeout(300)

FIELDS = [
    "id",
    "bench",
    "case",
    "metric",
    "unit",
    "fdkit",
    "baseline",
    "baseline_name",
    "ratio",
    "goal",
]
HAVE_GCC = shutil.which("gcc") is not None or shutil.which("cc") is not None
# The goals for fdkit.aio's io_uring engine (rows aio_W_vs_X, the ids the bench always had);
# the epoll engine's rows (aio_epoll_W_vs_X) have each 0.05 lower.
AIO_URING_GOALS = {
    "aio_hello_user_vs_uvloop": 1.25,
    "aio_hello_user_vs_rloop": 1.2,
    "aio_hello_vs_uvloop": 1.1,
    "aio_hello_vs_rloop": 1.05,
    "aio_hello_vs_floor": 0.85,
    "aio_uvicorn_vs_uvloop": 1.1,
    "aio_uvicorn_vs_rloop": 1.1,
    "aio_streams_vs_uvloop": 1.5,
    "aio_streams_vs_epoll_engine": 1.0,
    "aio_sendfile_vs_asyncio": 1.0,
    "aio_hello_p99_vs_uvloop": 1.0,
}


def _epoll_id(row_id: str) -> str:
    """The epoll engine's row of the io_uring engine's ``row_id``."""
    return "aio_epoll_" + row_id.removeprefix("aio_")


# bench -> its headline ids; the *_vs_c ones need gcc.
HEADLINES = {
    "accept": ["accept_cpu", "accept_vs_c"],
    "socket_create": ["socket_create", "socket_vs_c"],
    "memory": ["fd_memory"],
    "file_open": ["file_open", "file_vs_c"],
    "fd": [
        "fd_socket_inet6_vs_stdlib",
        "fd_socket_unix_vs_stdlib",
        "fd_listen_backlog_vs_stdlib",
        "fd_pipe_rw_vs_os",
        "fd_socket_rw_vs_stdlib",
    ],
    "zerocopy": [
        "transfer_tcp_tcp_64k",
        "transfer_tcp_tcp_1m",
        "transfer_vs_c",
        "transfer_small_4k",
        "copy_file_128m",  # --quick (and smoke size); the full run's is copy_file_1g
    ],
    "proxy": ["proxy_vs_asyncio"],
    # the rows with a goal ratio; the other two headlines are in ATOMIC_PIPE_HEADLINES
    "atomic_pipe": [
        "atomic_pipe_batch_100b",
        "atomic_pipe_10k_vs_raw",
        "atomic_pipe_4writers_100b",
    ],
    # each needs its contenders on this machine: see _serve_available
    "serve": [
        "serve_vs_nginx_6b",
        "serve_vs_nginx_4k",
        "serve_vs_nginx_1m",
        "serve_epoll_vs_nginx_4k",
        "serve_vs_h2o_6b",
        "serve_vs_h2o_4k",
        "serve_vs_h2o_1m",
        "serve_vs_floor_6b",
        "serve_vs_nginx_2w_4k",
        "ring_hello_vs_asyncio",
    ],
    # each needs its contender here (importable, or gcc for the C floor; io_uring for the
    # io_uring engine's rows): see _aio_available
    "aio": [
        *AIO_URING_GOALS,
        "aio_hello_vs_asyncio",  # its goal is retired (_common.RETIRED_GOALS)
        "aio_hello_vs_epoll_engine",
        "aio_uvicorn_vs_epoll_engine",
        "aio_sendfile_vs_epoll_engine",
        *(_epoll_id(i) for i in AIO_URING_GOALS if not i.endswith("_vs_epoll_engine")),
    ],
    # fdkit.aio's engines: no Python call of the loop's beside the protocol's own
    "aio_anatomy": ["aio_hello_py_calls_per_req", "aio_epoll_hello_py_calls_per_req"],
}
# the --contended run's rows with a goal: the io_uring engine against the epoll engine
AIO_CONTENDED_HEADLINES = [f"aio_{w}_vs_epoll_engine_contended" for w in aio.WORKLOADS]
# every headline id (a contract); atomic_pipe_call_100b has an absolute goal only (300k
# msg/s, in its case text) and atomic_pipe_mixed_100k none, so they carry no goal ratio
ATOMIC_PIPE_HEADLINES = [
    "atomic_pipe_batch_100b",
    "atomic_pipe_call_100b",
    "atomic_pipe_10k_vs_raw",
    "atomic_pipe_4writers_100b",
    "atomic_pipe_mixed_100k",
]


HAVE_NGINX = serve._which("nginx") is not None  # the bench installs nothing at smoke size
HAVE_H2O = serve._which("h2o") is not None
URING_OK = uring.available()[0]


def _bench(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m bench ARGS`` from the repository root, as ``make bench`` runs it."""
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def _serve_available(row_id: str) -> bool:
    """Whether the serve bench can produce ``row_id`` here (nginx, h2o installed; gcc for the
    C floor; io_uring)."""
    if row_id.startswith("ring_hello"):
        return URING_OK
    if "nginx" in row_id and not HAVE_NGINX:
        return False
    if "_h2o_" in row_id and not HAVE_H2O:
        return False
    if "_floor_" in row_id and not HAVE_GCC:
        return False
    return URING_OK or row_id.startswith("serve_epoll")


def _aio_lacking(row_id: str) -> list[str]:
    """What the aio bench lacks here to produce ``row_id`` at smoke size (no wrk needed then):
    io_uring for the io_uring engine's rows (``aio_W_vs_X``; the epoll engine's are
    ``aio_epoll_W_vs_X``), the contender the row names (a module, gcc for the C floor), and
    uvicorn with httptools for the uvicorn rows."""
    other = row_id.removesuffix(aio.CONTENDED).rsplit("_vs_", 1)[1]
    needs = list(aio.UVICORN_NEEDS) if "_uvicorn" in row_id else []
    lacking = []
    if not row_id.startswith("aio_epoll_") and not URING_OK:
        lacking.append("io_uring")
    if other == aio.FLOOR:
        lacking += [] if HAVE_GCC else ["gcc"]
    else:
        needs.append(aio.MODULES[other])
    return lacking + aio.missing(needs)


def _aio_available(row_id: str) -> bool:
    return not _aio_lacking(row_id)


def _anatomy_key(row_id: str) -> str:
    """The loop an aio_anatomy row measures (a key of bench.aio)."""
    (key,) = [k for k in aio_anatomy.LOOPS if row_id.startswith(aio_anatomy.ID_HEAD[k] + "_hello_")]
    return key


def _anatomy_lacking(row_id: str) -> list[str]:
    """What the aio_anatomy bench lacks here to produce ``row_id``: its loop, and io_uring for
    the io_uring engine's."""
    key = _anatomy_key(row_id)
    lacking = ["io_uring"] if key == "fdkit" and not URING_OK else []
    return lacking + aio.missing([aio.MODULES[key]])


def _anatomy_available(row_id: str) -> bool:
    return not _anatomy_lacking(row_id)


def _expected_headlines(bench: str) -> list[str]:
    return [
        i
        for i in HEADLINES.get(bench, [])
        if (HAVE_GCC or not i.endswith("_vs_c"))
        and (bench != "serve" or _serve_available(i))
        and (bench != "aio" or _aio_available(i))
        and (bench != "aio_anatomy" or _anatomy_available(i))
    ]


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _children() -> set[int]:
    """Processes whose parent is this one (zombies included)."""
    me, out = os.getpid(), set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(b")", 1)[1].split()[1]) == me:
            out.add(int(name))
    return out


@pytest.fixture(scope="module")
def tiny_env() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(TINY_ENV, "1")
        yield


@pytest.fixture(scope="module")
def results(tiny_env: None) -> dict[str, list[Result]]:
    """Every registered bench, run once at smoke-test size; no fd may be left open. About 20 s
    on an idle machine; the first test to use it pays for it (see RESULTS_TIMEOUT)."""
    before = _open_fds()
    out = {name: b.run(quick=True) for name, b in benchmarks.BENCHES.items()}
    leaked = _open_fds() - before
    assert not leaked, f"benches left fds open: {sorted(leaked)}"
    assert not _children(), "benches left child processes behind"
    return out


def test_registry_lists_every_bench() -> None:
    assert set(HEADLINES) <= set(benchmarks.BENCHES)
    for name, b in benchmarks.BENCHES.items():
        assert b.name == name
        assert b.description


@pytest.mark.slow
@pytest.mark.parametrize("bench", list(benchmarks.BENCHES))
@RESULTS_TIMEOUT
def test_rows_follow_the_schema(results: dict[str, list[Result]], bench: str) -> None:
    rows = results[bench]
    assert rows, f"{bench} returned no rows"
    for r in rows:
        assert isinstance(r, Result)
        assert [f.name for f in dataclasses.fields(r)] == FIELDS
        assert r.bench == bench
        for text in (r.id, r.case, r.metric, r.unit, r.baseline_name):
            assert isinstance(text, str)
            assert text
        for figure in (r.fdkit, r.baseline, r.ratio):
            assert isinstance(figure, float)
            assert math.isfinite(figure), r
            assert figure > 0, r
        expected = r.fdkit / r.baseline if is_rate(r.unit) else r.baseline / r.fdkit
        assert math.isclose(r.ratio, expected, rel_tol=1e-9), r
        assert r.goal is None or (isinstance(r.goal, float) and r.goal > 0)


@pytest.mark.slow
@pytest.mark.parametrize("bench", list(HEADLINES))
@RESULTS_TIMEOUT
def test_headline_ids_exist_once_with_goals(results: dict[str, list[Result]], bench: str) -> None:
    ids = [r.id for r in results[bench]]
    for headline in _expected_headlines(bench):
        assert ids.count(headline) == 1, f"{headline} in {ids}"
    all_headlines = {i for v in HEADLINES.values() for i in v}
    for r in results[bench]:
        assert (r.goal is not None) == (r.id in all_headlines), r


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_ids_unique_across_benches(results: dict[str, list[Result]]) -> None:
    ids = [r.id for rows in results.values() for r in rows]
    assert len(ids) == len(set(ids))


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_accept_has_every_contender_and_variant(results: dict[str, list[Result]]) -> None:
    ids = {r.id for r in results["accept"]}
    contenders = ["stdlib_accept", "stdlib_selectors", "fd_accept"]
    contenders += ["c_accept4"] if HAVE_GCC else []
    for variant in ("reset", "live"):
        for key in contenders:
            for metric in ("cpu", "rate"):
                assert f"accept_{variant}_{key}_{metric}" in ids


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_every_goal_is_a_ratio_the_table_judges(results: dict[str, list[Result]]) -> None:
    """A goal is the ratio a headline row must reach: positive and finite, shown as ``≥GOALx``,
    and judged ✓ exactly when the measured ratio reaches it (at the goal counts, just under
    does not); the last line counts the rows that met theirs. (This replaces a test that
    restated every goal's value: a change detector, not a check.)"""
    rows = [r for v in results.values() for r in v]
    edge = [
        _common.compare("edge_at", "b", "c", "m", "ops/s", 150.0, 100.0, "base", goal=1.5),
        _common.compare("edge_under", "b", "c", "m", "us/op", 1.0, 1.49, "base", goal=1.5),
    ]
    assert [r.met for r in edge] == [True, False]
    goals = [r for r in (*rows, *edge) if r.goal is not None]
    assert len(goals) > len(edge)
    lines = report.format_table([*rows, *edge]).splitlines()
    for r in goals:
        assert r.goal is not None, r
        assert math.isfinite(r.goal), r
        assert r.goal > 0, r
        (line,) = [ln for ln in lines if ln.split(" ", 1)[0] == r.id]
        assert f"≥{r.goal:g}x" in line, line
        verdict = f"retired ({r.retired})" if r.retired else "✓" if r.ratio >= r.goal else "✗"
        assert line.rstrip().endswith(verdict), (r, line)
    judged = [r for r in goals if not r.retired]
    met = sum(1 for r in judged if r.met)
    retired = len(goals) - len(judged)
    assert f"goals met: {met}/{len(judged)}" in lines[-1], lines[-1]
    assert (f"({retired} retired)" in lines[-1]) == (retired > 0), lines[-1]


def test_a_retired_goal_is_shown_and_not_counted() -> None:
    """A goal in RETIRED_GOALS keeps its row and its goal (the JSON keeps one shape) but is
    shown as retired, with why, and left out of the count of goals met."""
    assert _common.RETIRED_GOALS, "nothing retired: this test has nothing to check"
    row_id, why = next(iter(_common.RETIRED_GOALS.items()))
    assert row_id in {i for v in HEADLINES.values() for i in v}  # a goal that exists
    retired = _common.compare(row_id, "b", "c", "m", "us/op", 2.0, 1.0, "base", goal=1.6)
    missed = _common.compare("x", "b", "c", "m", "us/op", 2.0, 1.0, "base", goal=1.6)
    assert retired.retired == why
    assert missed.retired is None
    assert _common.compare(row_id, "b", "c", "m", "us/op", 2.0, 1.0, "base").retired is None
    lines = report.format_table([retired, missed]).splitlines()
    assert lines[2].endswith(f"retired ({why})"), lines[2]
    assert lines[3].endswith("✗"), lines[3]
    assert lines[-1].endswith("goals met: 0/1 (1 retired)"), lines[-1]
    assert json.loads(report.to_json([retired], {}))["results"][0]["goal"] == 1.6


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_json_round_trips(results: dict[str, list[Result]]) -> None:
    rows = [r for v in results.values() for r in v]
    machine = benchmarks.machine_info()
    doc = json.loads(report.to_json(rows, machine))
    assert set(doc) == {"machine", "results"}
    assert doc["machine"] == json.loads(json.dumps(machine))
    for key in ("kernel", "cpu_count", "cpu_model", "python", "fdkit"):
        assert key in doc["machine"]
    assert [list(d) for d in doc["results"]] == [FIELDS] * len(rows)
    assert [Result(**d) for d in doc["results"]] == rows


def test_json_has_no_nan() -> None:
    bad = _common.compare("x", "b", "c", "m", "us/op", math.nan, 1.0, "base")
    doc = json.loads(report.to_json([bad], {}))
    assert doc["results"][0]["fdkit"] is None
    assert doc["results"][0]["ratio"] is None


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_table_shows_every_row_and_verdict(results: dict[str, list[Result]]) -> None:
    rows = [r for v in results.values() for r in v]
    table = report.format_table(rows)
    lines = table.splitlines()
    for r in rows:
        (line,) = [ln for ln in lines if ln.split(" ", 1)[0] == r.id]
        assert r.baseline_name in line
        if r.goal is not None:
            assert line.rstrip().endswith(("✓", "✗", f"retired ({r.retired})"))
    assert "goals met" in lines[-1]


def test_ratio_direction() -> None:
    rate = _common.compare("r", "b", "c", "m", "ops/s", 300.0, 100.0, "base")
    cost = _common.compare("c", "b", "c", "m", "us/op", 1.0, 4.0, "base", goal=3.0)
    assert rate.ratio == 3.0
    assert cost.ratio == 4.0
    assert cost.met


def test_alternate_is_round_robin() -> None:
    calls: list[str] = []
    contenders: dict[str, Callable[[], None]] = {k: partial(calls.append, k) for k in "abc"}
    out = _common.alternate(contenders, rounds=3, warmup=1)
    assert calls == list("abc" + "bca" + "cab" + "abc")
    assert {k: len(v) for k, v in out.items()} == {"a": 3, "b": 3, "c": 3}


def test_unknown_bench_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown benchmark"):
        benchmarks.run_benches(["no-such-bench"], quick=True)


def test_missing_gcc_skips_the_c_contender(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert _common.compile_c("never_built", "int f(void) { return 1; }") is None
    assert "gcc not found" in capsys.readouterr().err


def test_bad_c_source_is_skipped_not_fatal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if not HAVE_GCC:
        pytest.skip("gcc not installed")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _common.compile_c("broken", "this is not C") is None
    assert "gcc failed" in capsys.readouterr().err
    assert list((tmp_path / "fdkit-bench").iterdir()) == []


def test_compile_c_caches(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if not HAVE_GCC:
        pytest.skip("gcc not installed")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    lib = _common.compile_c("answer", "int answer(void) { return 42; }")
    assert lib is not None
    assert lib.answer() == 42
    (so,) = (tmp_path / "fdkit-bench").iterdir()
    monkeypatch.setattr(shutil, "which", lambda name: None)  # a cache hit needs no gcc
    again = _common.compile_c("answer", "int answer(void) { return 42; }")
    assert again is not None
    assert again.answer() == 42
    assert list((tmp_path / "fdkit-bench").iterdir()) == [so]


def test_bench_script_prints_json() -> None:
    env = dict(os.environ, **{TINY_ENV: "1"})
    proc = _bench("memory", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [r["id"] for r in doc["results"]] == ["fd_memory"]


@pytest.mark.parametrize(
    ("script", "ids"),
    [
        # a run without --quick: the copy row is the full run's copy_file_1g
        ("zerocopy", [zerocopy.COPY_ID, *HEADLINES["zerocopy"][:-1]]),
        ("proxy", HEADLINES["proxy"]),
        ("atomic_pipe", ATOMIC_PIPE_HEADLINES),
    ],
)
def test_zero_copy_scripts_print_json(script: str, ids: list[str]) -> None:
    env = dict(os.environ, **{TINY_ENV: "1"})
    proc = _bench(script, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    got = [r["id"] for r in json.loads(proc.stdout)["results"]]
    for i in ids:
        if HAVE_GCC or not i.endswith("_vs_c"):
            assert got.count(i) == 1, got


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_zerocopy_covers_every_kind_and_names_the_path(results: dict[str, list[Result]]) -> None:
    rows = results["zerocopy"]
    ids = {r.id for r in rows}
    for kind in zerocopy.KINDS:
        if kind != "tcp_tcp":
            assert any(i.startswith(f"zc_{kind}_") for i in ids), (kind, sorted(ids))
    assert {"zc_tcp_tcp_4k_cpu", "zc_tcp_tcp_64k_rate", "zc_tcp_tcp_1m_rate"} <= ids
    for r in rows:
        assert "path " in r.case, r.case
        assert "path ?" not in r.case, r.case
        assert r.unit in ("s/GiB", "MiB/s", "ms"), r
    by_id = {r.id: r for r in rows}
    assert by_id["transfer_tcp_tcp_64k"].baseline_name.startswith("Python recv_into/sendall")
    assert by_id["transfer_small_4k"].unit == "MiB/s"
    assert by_id["copy_file_128m"].baseline_name == "shutil.copyfile"


def test_copy_row_says_the_size_it_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    """The full run copies 1 GiB in copy_file_1g (the id the README and JSON readers know);
    --quick copies 128 MiB, so its row is copy_file_128m."""
    monkeypatch.delenv(TINY_ENV, raising=False)
    full, quick = zerocopy._plan(quick=False), zerocopy._plan(quick=True)
    assert (full.copy_id, full.copy_size) == ("copy_file_1g", 1 << 30)
    assert (quick.copy_id, quick.copy_size) == ("copy_file_128m", 128 << 20)


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_proxy_rows(results: dict[str, list[Result]]) -> None:
    (row,) = [r for r in results["proxy"] if r.id == "proxy_vs_asyncio"]
    assert row.unit == "s/GiB"
    assert row.baseline_name.startswith("asyncio proxy")


def test_c_relay_moves_every_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not HAVE_GCC:
        pytest.skip("gcc not installed")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    lib = _common.load_c("splice_relay")
    assert lib is not None
    movers = zerocopy._c_movers(lib)
    data = os.urandom(100_000)
    src_path = tmp_path / "src"
    src_path.write_bytes(data)
    for key in ("c_splice", "c_rw"):
        # a file served 3 times into a file, from offset 0 each time
        dst_path = tmp_path / f"dst-{key}"
        s = os.open(src_path, os.O_RDONLY)
        d = os.open(dst_path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            movers[key](zerocopy.End("file", s), zerocopy.End("file", d), len(data), 3)
        finally:
            os.close(s)
            os.close(d)
        assert dst_path.read_bytes() == data * 3
        # a stream, in messages of 4000 bytes; an early EOF is an error, not a hang
        a, b = _endpoints.stream_pair("unix")
        c, e = _endpoints.stream_pair("tcp")
        with a, b, c, e:
            b.sendall(data[:40_000])
            src = zerocopy.End("unix", a.fileno(), a)
            dst = zerocopy.End("tcp", c.fileno(), c)
            movers[key](src, dst, 4000, 10)
            got = bytearray()
            while len(got) < 40_000:
                got += e.recv(65536)
            assert bytes(got) == data[:40_000]
            b.shutdown(socket.SHUT_WR)
            with pytest.raises(EOFError):
                movers[key](src, dst, 4000, 1)


@pytest.mark.parametrize("period", [None, 1000, 4096, 10_000])
def test_repeated_sha(period: int | None) -> None:
    data = os.urandom(4096)
    block = data if period is None else (data * 3)[:period]
    total = 25_000
    expected = hashlib.sha256((block * (total // len(block) + 1))[:total]).hexdigest()
    assert _endpoints.repeated_sha(data, total, period) == expected


def test_cpu_between_keeps_the_kernel_figure_when_threads_vanish() -> None:
    tick = 1 / os.sysconf("SC_CLK_TCK")
    before = _endpoints.CpuReading(ticks=1.0, runtime=1.0)
    agree = _endpoints.CpuReading(ticks=1.0 + 50 * tick, runtime=1.0 + 50 * tick + 0.004)
    assert _endpoints.cpu_between(before, agree) == pytest.approx(50 * tick + 0.004)
    vanished = _endpoints.CpuReading(ticks=1.0 + 50 * tick, runtime=1.0 + 10 * tick)
    assert _endpoints.cpu_between(before, vanished) == pytest.approx(50 * tick)


def test_endpoint_child_reports_a_crash() -> None:
    child = _endpoints.Child.endpoint("no-such-role")
    try:
        with pytest.raises(RuntimeError, match="no-such-role"):
            child.ask("1", timeout=30)
    finally:
        child.stop()


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_atomic_pipe_rows(results: dict[str, list[Result]]) -> None:
    rows = results["atomic_pipe"]
    by_id = {r.id: r for r in rows}
    for i in ATOMIC_PIPE_HEADLINES:
        assert [r.id for r in rows].count(i) == 1, i
        assert by_id[i].unit == "msg/s"
    assert by_id["atomic_pipe_batch_100b"].baseline_name.startswith("multiprocessing.Queue")
    assert by_id["atomic_pipe_call_100b"].baseline_name.startswith("multiprocessing.Queue")
    assert "≥1M msg/s" in by_id["atomic_pipe_batch_100b"].case
    assert "≥300k msg/s" in by_id["atomic_pipe_call_100b"].case
    assert by_id["atomic_pipe_10k_vs_raw"].baseline_name.startswith("unframed pipe")
    assert "4 writers" in by_id["atomic_pipe_4writers_100b"].case
    assert by_id["atomic_pipe_mixed_100k"].baseline_name.startswith("fdkit normal mode")
    assert any(r.baseline_name.startswith("multiprocessing.Pipe") for r in rows)
    for key in ("zstd", "zstd_dict"):
        size = by_id[f"atomic_pipe_{key}_json_size"]
        assert size.unit == "B/msg", size
        assert size.ratio > 1, size


def _traffic(count: int, mixed: bool = False) -> tuple[list[list[bytes]], atomic_pipe.Expect]:
    """Two writers' shares of ``count`` 100 B messages, and what the reader must get."""
    load = atomic_pipe.Load(100, count, writers=2, mixed=mixed)
    shares = atomic_pipe._shares(load)
    return shares, atomic_pipe._expect(load, shares)


class _LossyRaw(atomic_pipe.RawChannel):
    """Writes one byte of each message wrong: same count, same length, wrong content."""

    def write(self, msgs: list[bytes]) -> None:
        super().write([b"?" + m[1:] for m in msgs])


CHANNELS: dict[str, tuple[Callable[[], atomic_pipe.Channel], bool]] = {
    "raw": (partial(atomic_pipe.RawChannel, 100), False),
    "mp_queue": (atomic_pipe.QueueChannel, False),
    "mp_pipe": (atomic_pipe.PipeChannel, False),
    "fdkit_batch": (partial(atomic_pipe.FdkitChannel, "batch", "batch", {}), False),
    "fdkit_call": (partial(atomic_pipe.FdkitChannel, "call", "call", {}), False),
    "fdkit_mixed": (
        partial(atomic_pipe.FdkitChannel, "groups", "mixed", {"mixed_data_mode": True}),
        True,
    ),
}


@pytest.mark.parametrize("name", list(CHANNELS))
def test_atomic_pipe_measure_catches_a_short_stream(name: str) -> None:
    """Every contender delivers and verifies 2 writers x 150 messages; a reader waiting for
    more than was sent ends with EOFError (not a hang, not a figure), and no writer process
    or fd is left behind."""
    make, mixed = CHANNELS[name]
    shares, want = _traffic(300, mixed)
    sample = atomic_pipe._measure(make, shares, want, check=True)
    assert sample.count == 300
    assert sample.wall_ns > 0
    more = dataclasses.replace(want, count=want.count + 1, nbytes=want.nbytes + 100)
    with pytest.raises(EOFError):
        atomic_pipe._measure(make, shares, more, check=False)
    assert not _children()


def test_atomic_pipe_measure_catches_wrong_content() -> None:
    shares, want = _traffic(50)
    atomic_pipe._measure(partial(atomic_pipe.RawChannel, 100), shares, want, check=False)
    with pytest.raises(RuntimeError, match="not the messages sent"):
        atomic_pipe._measure(partial(_LossyRaw, 100), shares, want, check=True)
    assert not _children()


# ------------------------------------------------------------------------------ serve


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_serve_rows(results: dict[str, list[Result]]) -> None:
    rows = results["serve"]
    by_id = {r.id: r for r in rows}
    for r in rows:
        assert r.unit in ("us/req", "req/s", "ms p99"), r
        assert r.baseline_name in serve.LABELS.values(), r
    # every CPU row comes with its requests/s and p99 rows
    for r in rows:
        if r.unit == "us/req":
            base = r.id.split("_vs_")
            assert f"{base[0]}_rps_vs_{base[1]}" in by_id, r.id
            assert f"{base[0]}_p99_vs_{base[1]}" in by_id, r.id
    if HAVE_NGINX and URING_OK:
        for size in ("6b", "4k", "1m"):
            row = by_id[f"serve_vs_nginx_{size}"]
            assert row.baseline_name.startswith("nginx")
            assert row.unit == "us/req"
            assert f"{size} file" in row.case
        assert "serve_vs_asyncio_4k" in by_id  # the smoke size runs the asyncio server too
    if URING_OK:
        assert by_id["ring_hello_vs_asyncio"].baseline_name == serve.LABELS["asyncio_hello"]
    for i in _expected_headlines("serve"):
        assert i in by_id, i
    goals = {"serve_vs_h2o_6b": 1.25, "serve_vs_h2o_4k": 1.25, "serve_vs_h2o_1m": 1.0,
             "serve_vs_floor_6b": 0.9, "serve_vs_nginx_2w_4k": 1.3}  # fmt: skip
    for i, goal in goals.items():
        if i in by_id:
            assert (by_id[i].unit, by_id[i].goal) == ("us/req", goal), by_id[i]
    if "serve_vs_h2o_4k" in by_id:
        assert by_id["serve_vs_h2o_4k"].baseline_name == serve.LABELS["h2o"]
    if "serve_vs_floor_6b" in by_id:  # the floor answers the 6 B file only
        assert by_id["serve_vs_floor_6b"].baseline_name == serve.LABELS["floor"]
        assert not any(r.startswith("serve_vs_floor_") for r in by_id if "6b" not in r)
    if "serve_vs_nginx_2w_4k" in by_id:
        row = by_id["serve_vs_nginx_2w_4k"]
        assert row.baseline_name == serve.LABELS["nginx_2w"]
        assert row.case.startswith(serve.LABELS["fdkit_2w"])


@pytest.mark.slow
def test_serve_script_prints_json() -> None:
    env = dict(os.environ, **{TINY_ENV: "1"})
    proc = _bench("serve", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    got = [r["id"] for r in json.loads(proc.stdout)["results"]]
    for i in _expected_headlines("serve"):
        assert got.count(i) == 1, got


WRK_OUTPUT = """\
Running 2s test @ http://127.0.0.1:41234/hallo.txt
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   462.50us   88.10us   3.21ms   91.23%
    Req/Sec   138.51k     4.12k  142.00k    85.00%
  Latency Distribution
     50%  450.00us
     75%  490.00us
     90%  540.00us
     99%    1.02ms
  275632 requests in 2.00s, 38.12MB read
  Socket errors: connect 0, read 3, write 0, timeout 0
  Non-2xx or 3xx responses: 7
Requests/sec: 137801.33
Transfer/sec:     19.06MB
"""


def test_parse_wrk() -> None:
    out = serve.parse_wrk(WRK_OUTPUT)
    assert out.requests == 275632
    assert out.seconds == pytest.approx(2.0)
    assert out.rate == pytest.approx(137801.33)
    assert out.p99_ms == pytest.approx(1.02)
    assert out.non_2xx == 7
    assert out.socket_errors == {"connect": 0, "read": 3, "write": 0, "timeout": 0}
    micro = WRK_OUTPUT.replace("99%    1.02ms", "99%  812.00us").replace("in 2.00s", "in 1.50m")
    assert serve.parse_wrk(micro).p99_ms == pytest.approx(0.812)
    assert serve.parse_wrk(micro).seconds == pytest.approx(90.0)
    with pytest.raises(ValueError, match="unexpected wrk output"):
        serve.parse_wrk("unable to connect to 127.0.0.1:1 Connection refused")


def test_nginx_config(tmp_path: Path) -> None:
    assert "worker_processes 2;" in serve._nginx_conf(tmp_path, tmp_path, 1, workers=2).read_text()
    conf = serve._nginx_conf(tmp_path, tmp_path / "www", 12345).read_text()
    for directive in (
        "worker_processes 1;",
        "daemon off;",
        "sendfile on;",
        "open_file_cache max=1000",
        "access_log off;",
        "listen 127.0.0.1:12345",
        f"root {tmp_path / 'www'};",
        f"pid {tmp_path / 'nginx.pid'};",
    ):
        assert directive in conf, directive
    assert ("user " in conf) == (os.geteuid() == 0)  # run as the current user


def test_h2o_config(tmp_path: Path) -> None:
    """h2o as the comparison sets it: one thread, no pre-compressed files, no access log, root
    only as root (h2o refuses root without a `user`)."""
    conf = serve._h2o_conf(tmp_path, tmp_path / "www", 12345).read_text()
    for directive in (
        "num-threads: 1\n",
        "file.send-compressed: OFF\n",
        "  host: 127.0.0.1\n  port: 12345\n",
        f"file.dir: {tmp_path / 'www'}\n",
        f"pid-file: {tmp_path / 'h2o.pid'}\n",
    ):
        assert directive in conf, directive
    assert "access-log" not in conf
    assert ("user: root\n" in conf) == (os.geteuid() == 0)


@pytest.mark.skipif(not HAVE_H2O, reason="h2o is not installed (make bench-tools)")
def test_h2o_serves_the_bench_files(tmp_path: Path) -> None:
    """The generated config starts Debian's h2o, which serves the files whole, and stops on
    SIGTERM."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "hallo.txt").write_bytes(serve.HELLO)
    (root / "4k.bin").write_bytes(os.urandom(4096))
    port = serve._free_port()
    h2o = serve._which("h2o")
    assert h2o is not None
    server = serve.Server("h2o", [h2o, "-c", str(serve._h2o_conf(tmp_path, root, port))], port)
    try:
        server.wait_ready("/hallo.txt", serve.HELLO)
        assert serve.http_get(port, "/4k.bin") == (200, (root / "4k.bin").read_bytes())
    finally:
        server.stop()
    assert server.proc.returncode is not None


def _no_subprocess(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"the bench tried to run {args}")

    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)


@pytest.mark.parametrize(("uid", "sudo"), [(0, ""), (1000, "sudo ")])
def test_find_tool_installs_nothing_and_names_the_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], uid: int, sudo: str
) -> None:
    monkeypatch.delenv(TINY_ENV, raising=False)
    monkeypatch.setattr(serve, "_which", lambda name: None)
    monkeypatch.setattr(os, "geteuid", lambda: uid)
    _no_subprocess(monkeypatch)
    _common.take_skipped()
    assert serve.find_tool("nginx", ["serve_vs_nginx_6b", "serve_rps_vs_nginx_6b"]) is None
    err = capsys.readouterr().err
    assert "nginx is not installed" in err
    assert f"`{sudo}apt-get install nginx`" in err
    assert "make bench-tools" in err
    (sk,) = _common.take_skipped()
    assert sk.bench == "serve"
    assert sk.ids == ("serve_vs_nginx_6b", "serve_rps_vs_nginx_6b")


def test_serve_without_wrk_skips_every_row_it_would_have(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(TINY_ENV, raising=False)
    monkeypatch.setattr(serve, "_which", lambda name: None)
    _no_subprocess(monkeypatch)
    _common.take_skipped()
    assert serve.run(quick=True) == []  # no wrk: nothing runs, nothing fails
    (sk,) = _common.take_skipped()
    assert "wrk is not installed" in sk.reason
    assert "apt-get install wrk" in sk.reason
    assert set(HEADLINES["serve"]) <= set(sk.ids)
    assert sk.ids == tuple(serve.planned_ids(serve._plan(quick=True)))
    assert "wrk is not installed" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize(
    ("tool", "first"),
    [("nginx", "serve_vs_nginx_6b, serve_epoll_vs_nginx_6b,"), ("h2o", "serve_vs_h2o_6b,")],
)
def test_serve_without_a_peer_skips_only_its_rows(
    tiny_env: None, monkeypatch: pytest.MonkeyPatch, tool: str, first: str
) -> None:
    real = serve._which
    monkeypatch.setattr(serve, "_which", lambda name: None if name == tool else real(name))
    _common.take_skipped()
    rows = serve.run(quick=True)
    skipped = _common.take_skipped()
    (sk,) = [s for s in skipped if f"{tool} is not installed" in s.reason]
    plan = serve._plan(quick=True)
    tool_ids = [i for i in serve.planned_ids(plan) if f"_vs_{tool}_" in i]
    assert sk.ids == tuple(tool_ids)
    got = {r.id for r in rows}
    assert not got & set(tool_ids)
    assert got <= set(serve.planned_ids(plan))  # planned_ids knows every id run makes
    table = report.format_table(rows, [sk])
    assert f"skipped: {first}" in table
    assert f"{len(tool_ids)} rows skipped" in table.splitlines()[-1]
    # the JSON keeps its shape: the skipped rows are left out, as before
    doc = json.loads(report.to_json(rows, {}))
    assert set(doc) == {"machine", "results"}
    assert [d["id"] for d in doc["results"]] == [r.id for r in rows]


def _bench_tool_list() -> list[tuple[str, str]]:
    """``make bench-tools``' ``(command, Debian package)`` pairs, read from the Makefile's
    ``BENCH_TOOLS``."""
    for line in (REPO / "Makefile").read_text().splitlines():
        if line.startswith("BENCH_TOOLS :="):
            pairs = line.split(":=", 1)[1].split()
            return [(tool, pkg) for tool, _, pkg in (p.partition(":") for p in pairs)]
    raise AssertionError("no BENCH_TOOLS in the Makefile")


def _fake_bin(
    tmp_path: Path, uid: int = 0, apt: bool = True, sudo: bool = False, tools: bool = False
) -> Path:
    """A PATH holding only fakes: ``apt-get`` (and ``sudo`` when asked) record their argv in
    ``tmp_path/calls`` and succeed, ``id`` says ``uid``; every tool of ``make bench-tools``
    (wrk, nginx, ...) when ``tools``."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    record = tmp_path / "calls"
    scripts = {
        "apt-get": f'echo "apt-get $*" >> {record}',
        "sudo": f'echo "sudo $*" >> {record}',
    }
    if not apt:
        del scripts["apt-get"]
    if not sudo:
        del scripts["sudo"]
    scripts["id"] = f"echo {uid}"
    if tools:
        scripts |= {tool: "exit 0" for tool, _ in _bench_tool_list()}
    for name, body in scripts.items():
        f = bin_ / name
        f.write_text(f"#!/bin/sh\n{body}\n")
        f.chmod(0o755)
    return bin_


def test_bench_never_runs_apt_get(tmp_path: Path) -> None:
    """With wrk missing, `python -m bench serve --quick` once ran `apt-get update` and
    `apt-get install` as root. A fake apt-get first on PATH must never be called; the run
    says which tool is missing and the command that installs it, and shows the skip."""
    bin_ = _fake_bin(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != TINY_ENV}
    env["PATH"] = str(bin_)  # no wrk here (nginx may still be found in /usr/sbin)
    proc = _bench("serve", "--quick", timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "calls").exists(), (tmp_path / "calls").read_text()
    sudo = "" if os.geteuid() == 0 else "sudo "
    assert f"wrk is not installed; `{sudo}apt-get install wrk`" in proc.stderr
    assert "skipped: serve_vs_nginx_6b," in proc.stdout
    assert "rows skipped" in proc.stdout.splitlines()[-1]
    js = _bench("serve", "--quick", "--json", timeout=120, env=env)
    assert js.returncode == 0, js.stderr
    assert json.loads(js.stdout)["results"] == []
    assert not (tmp_path / "calls").exists()


MAKE = shutil.which("make")


def _bench_tools(bin_: Path) -> subprocess.CompletedProcess[str]:
    assert MAKE is not None
    return subprocess.run(
        [MAKE, "-s", "-C", str(REPO), "bench-tools"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": str(bin_), "HOME": os.environ.get("HOME", "/")},
        check=False,
    )


def _missing_packages() -> list[str]:
    """What bench-tools finds missing with PATH = the fake bin (plus the sbin dirs it adds)."""
    return [
        pkg
        for tool, pkg in _bench_tool_list()
        if shutil.which(tool, path="/nonexistent:/usr/sbin:/sbin") is None
    ]


@pytest.mark.skipif(MAKE is None, reason="no make")
def test_make_bench_tools_installs_what_is_missing_as_root(tmp_path: Path) -> None:
    proc = _bench_tools(_fake_bin(tmp_path, uid=0))
    assert proc.returncode == 0, proc.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    missing = " ".join(_missing_packages())
    assert calls == [f"apt-get install -y -qq --no-install-recommends {missing}"]


@pytest.mark.skipif(MAKE is None, reason="no make")
def test_make_bench_tools_as_a_user_uses_passwordless_sudo(tmp_path: Path) -> None:
    proc = _bench_tools(_fake_bin(tmp_path, uid=1000, sudo=True))
    assert proc.returncode == 0, proc.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    missing = " ".join(_missing_packages())
    assert calls == [
        "sudo -n true",
        f"sudo apt-get install -y -qq --no-install-recommends {missing}",
    ]


@pytest.mark.skipif(MAKE is None, reason="no make")
def test_make_bench_tools_as_a_user_only_prints_the_command(tmp_path: Path) -> None:
    proc = _bench_tools(_fake_bin(tmp_path, uid=1000))  # no usable sudo on this PATH
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "calls").exists()
    missing = " ".join(_missing_packages())
    assert f"to install them run: sudo apt-get install -y {missing}" in proc.stdout


@pytest.mark.skipif(MAKE is None, reason="no make")
def test_make_bench_tools_without_apt_does_not_fail(tmp_path: Path) -> None:
    proc = _bench_tools(_fake_bin(tmp_path, uid=0, apt=False))
    assert proc.returncode == 0, proc.stderr
    assert "no apt-get here" in proc.stdout
    assert not (tmp_path / "calls").exists()


@pytest.mark.skipif(MAKE is None, reason="no make")
def test_make_bench_tools_with_the_tools_present_does_nothing(tmp_path: Path) -> None:
    proc = _bench_tools(_fake_bin(tmp_path, uid=0, tools=True))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert not (tmp_path / "calls").exists()


@pytest.mark.skipif(MAKE is None, reason="no make")
def test_make_test_does_not_need_bench_tools() -> None:
    """`make test` must work on a machine without apt: it does not depend on bench-tools,
    while `make demo` and `make bench` do."""
    assert MAKE is not None
    plan = subprocess.run(
        [MAKE, "-p", "-n", "-C", str(REPO), "help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    ).stdout
    deps = {}
    for line in plan.splitlines():
        name, sep, rest = line.partition(":")
        if sep and name in ("test", "demo", "bench", "lint") and not rest.startswith("="):
            deps[name] = rest.split()
    for tools in ("bench-tools", "bench-deps"):  # apt packages; the aio bench's contenders
        assert tools in deps["demo"]
        assert tools in deps["bench"]
        assert tools not in deps["test"]
        assert tools not in deps["lint"]


def test_serve_process_tree_sums_children() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; subprocess.run(['sleep', '30'])"],
    )
    try:
        deadline = time.monotonic() + 10
        while len(tree := _endpoints.process_tree(child.pid)) < 2:
            assert time.monotonic() < deadline, tree
            time.sleep(0.02)
        assert tree[0] == child.pid
        cpu = serve.tree_cpu(tree)
        assert cpu() >= 0.0
    finally:
        for pid in reversed(_endpoints.process_tree(child.pid)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        child.wait(10)


# ------------------------------------------------------------------ where the harness lives


def _as_installed(tmp_path: Path) -> dict[str, str]:
    """An environment importing fdkit from a copy of ``python/fdkit`` alone (what the wheel
    carries: the library and the CLI) under ``tmp_path/site``."""
    site = tmp_path / "site"
    shutil.copytree(
        REPO / "python" / "fdkit", site / "fdkit", ignore=shutil.ignore_patterns("__pycache__")
    )
    return dict(os.environ, PYTHONPATH=str(site))


def _fdkit(
    env: dict[str, str], cwd: Path, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fdkit", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _imported_modules(path: Path) -> set[str]:
    """The top-level names of every module ``path`` imports (absolute imports only)."""
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_the_package_never_reaches_for_the_harness(tmp_path: Path) -> None:
    """The package carries no harness and no command that runs one: no module of python/fdkit
    imports `bench`, or looks for a source tree to import it from; installed alone (here: a
    copy of python/fdkit), `fdkit bench` is an invalid choice, inside a clone as outside."""
    for path in sorted((REPO / "python" / "fdkit").rglob("*.py")):
        assert "bench" not in _imported_modules(path), path
        assert 'importlib.import_module("bench' not in path.read_text(), path
    env = _as_installed(tmp_path)
    for cwd in (tmp_path, REPO):
        r = _fdkit(env, cwd, "bench", "--list")
        assert r.returncode == 2, (cwd, r.stdout, r.stderr)
        assert "invalid choice: 'bench'" in r.stderr
        helped = _fdkit(env, cwd, "--help")
        assert helped.returncode == 0
        assert "bench" not in helped.stdout


def test_python_dash_m_bench_is_the_same_front_end() -> None:
    """`python -m bench` from the repository root: --list, and one line for an unknown name."""
    listed = _bench("--list")
    assert listed.returncode == 0, listed.stderr
    assert [ln.split()[0] for ln in listed.stdout.splitlines()] == list(benchmarks.BENCHES)
    bad = _bench("no-such-bench")
    assert bad.returncode == 2
    assert bad.stdout == ""
    (line,) = bad.stderr.splitlines()
    assert line.startswith("python -m bench: unknown benchmark no-such-bench (known: accept,")


def test_child_programs_are_files_of_the_harness() -> None:
    """The asyncio servers, the asyncio proxy, the endpoint and the memory holder are modules
    in bench/child/ (linted and type-checked), run by path; none is kept in a string."""
    from bench import child

    for name in ("asyncio_servers", "asyncio_proxy", "endpoint", "memory_holder", "aio_servers",
                 "aio_uvicorn"):  # fmt: skip
        assert Path(child.script(name)) == REPO / "bench" / "child" / f"{name}.py"
    with pytest.raises(FileNotFoundError, match="no child program"):
        child.script("no_such_child")


VENV_PY = REPO / ".venv" / "bin" / "python"


@pytest.mark.skipif(MAKE is None or not VENV_PY.exists(), reason="no make, or no .venv here")
def test_make_bench_json_prints_the_document_alone(tmp_path: Path) -> None:
    """`make bench JSON=1` prints the JSON document alone on stdout: no command echoed by make,
    and bench-tools' words (here: installing the missing tools with a fake apt-get) on
    stderr. The set-up stamps are taken as done (-o) so that nothing is rebuilt here."""
    assert MAKE is not None
    bin_ = _fake_bin(tmp_path, uid=0)
    stamps = ["-o", ".venv/.fdkit-built-release", "-o", ".venv/.deps-installed"]
    stamps += ["-o", ".venv/.bench-deps-installed"]
    proc = subprocess.run(
        [MAKE, *stamps, "bench", "BENCH=memory", "JSON=1"],
        cwd=REPO,  # as a user types it there (`make -C DIR` makes make print its directory)
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": str(bin_), "HOME": os.environ.get("HOME", "/"), TINY_ENV: "1"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # the whole of stdout, nothing before or after
    assert [r["id"] for r in doc["results"]] == ["fd_memory"]
    assert set(doc) == {"machine", "results"}
    if _missing_packages():
        assert "bench-tools: installing" in proc.stderr
        assert (tmp_path / "calls").exists()


# ------------------------------------------------------------------------------ aio


@pytest.mark.slow
@pytest.mark.parametrize("row_id", HEADLINES["aio"])
@RESULTS_TIMEOUT
def test_aio_headline_ids(results: dict[str, list[Result]], row_id: str) -> None:
    """Each id of issues 11, 16 and 23 comes out once at smoke size, or its contender is not
    here (`make bench` installs requirements-bench.txt; `make test` does not) and this says
    so."""
    if lacking := _aio_lacking(row_id):
        pytest.skip(f"{', '.join(lacking)} not here: {aio.install_hint(lacking)}")
    ids = [r.id for r in results["aio"]]
    assert ids.count(row_id) == 1, ids
    (row,) = [r for r in results["aio"] if r.id == row_id]
    assert row.goal == aio.GOALS[row_id]


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_aio_rows(results: dict[str, list[Result]]) -> None:
    """Every row is one of fdkit.aio's engines against one other loop, in the unit of its
    workload; the asyncio rows (the stdlib: always here) come out for every workload, the
    epoll engine's always, the io_uring engine's where io_uring runs."""
    rows = results["aio"]
    ids = [r.id for r in rows]
    assert set(ids) <= set(aio.planned_ids())
    assert len(ids) == len(set(ids))
    _check_aio_rows(rows)
    workloads = ["hello", "streams", "sendfile"]
    if not aio.missing(aio.UVICORN_NEEDS):
        workloads.append("uvicorn")
    stdlib = [f"aio_epoll_{w}_vs_asyncio" for w in workloads]
    stdlib += [f"aio_{w}_vs_asyncio" for w in workloads] if URING_OK else []
    assert set(stdlib) <= set(ids)
    for row_id in ("aio_sendfile_vs_asyncio", "aio_epoll_sendfile_vs_asyncio"):
        for sendfile in [r for r in rows if r.id == row_id]:
            assert "(native)" in sendfile.baseline_name  # asyncio's own os.sendfile path
            assert "(native)" in sendfile.case  # and fdkit.aio's engine's


def _check_aio_rows(rows: list[Result], variant: str = "") -> None:
    """Each row's unit fits its kind, its case names the engine it measures (io_uring for
    ``aio_W_vs_X``, epoll for ``aio_epoll_W_vs_X``), its baseline the other contender."""
    units = {"": ("us/req", "s/GiB"), "_rps": ("req/s",), "_p99": ("ms p99",)}
    units |= {"_rate": ("MiB/s",), "_user": ("us/req",), "_kernel": ("us/req",)}
    for r in rows:
        assert r.id.endswith(variant), r
        row_id = r.id.removesuffix(variant)
        m = re.fullmatch(r"aio_(epoll_)?(hello|uvicorn|streams|sendfile)(.*)_vs_(\w+)", row_id)
        assert m is not None, r
        subject = "epoll_engine" if m[1] else "fdkit"
        kind, other = m[3], m[4]
        assert other != subject, r
        assert r.unit in units[kind], r
        assert r.case.startswith(f"fdkit.aio ({aio.ENGINE[subject]}), "), r.case
        assert r.baseline_name.startswith(aio.LABELS[other]), r
        if kind in ("_user", "_kernel"):
            assert m[2] == "hello", r  # the split is the hello workload's


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_aio_user_and_kernel_split_add_up(results: dict[str, list[Result]]) -> None:
    """The hello workload's CPU per request is read apart into user and kernel time, which
    add up to it, for each of fdkit.aio's engines and each loop it is compared with."""
    rows = {r.id: r for r in results["aio"]}
    for subject in aio.SUBJECTS:
        for other in aio.others("hello", subject):
            ids = aio.row_ids("hello", other, "", subject)
            if other == aio.FLOOR:  # no split against the floor
                assert not [i for i in ids if "_user_" in i or "_kernel_" in i], ids
                continue
            cpu_id, user_id, kernel_id = ids[0], ids[3], ids[4]
            if user_id not in rows:
                assert not _aio_available(cpu_id), cpu_id
                continue
            cpu, user, kernel = rows[cpu_id], rows[user_id], rows[kernel_id]
            for side in ("fdkit", "baseline"):
                total = getattr(user, side) + getattr(kernel, side)
                assert math.isclose(total, getattr(cpu, side), rel_tol=1e-9), (side, cpu_id)
    assert not [i for i in rows if re.match(r"aio_(epoll_)?hello_(user|kernel)_vs_floor", i)]


@pytest.fixture(scope="module")
def aio_contended(tiny_env: None) -> list[Result]:
    """The aio bench's --contended variant at smoke size; no fd or process left behind (the
    CPU burner is stopped)."""
    before = _open_fds()
    rows = benchmarks.BENCHES["aio"].run(quick=True, contended=True)
    assert not _open_fds() - before
    assert not _children(), "the contended run left child processes behind"
    return rows


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_aio_contended_ids_are_suffixed(
    results: dict[str, list[Result]], aio_contended: list[Result]
) -> None:
    """Every row of the --contended run is a planned id suffixed ``_contended`` (never one
    of the quiet run's), its case says the load's CPU was busy, and only the io_uring engine
    against the epoll engine carries a goal there."""
    ids = [r.id for r in aio_contended]
    assert ids
    assert set(ids) <= set(aio.planned_ids(variant=aio.CONTENDED))
    assert not set(ids) & {r.id for r in results["aio"]}
    assert len(ids) == len(set(ids))
    _check_aio_rows(aio_contended, aio.CONTENDED)
    for r in aio_contended:
        assert "CPU 1 busy" in r.case, r.case
        assert r.goal == aio.GOALS.get(r.id), r
        assert (r.goal is not None) == (r.id in AIO_CONTENDED_HEADLINES), r
    for row_id in AIO_CONTENDED_HEADLINES:
        assert ids.count(row_id) == (1 if _aio_available(row_id) else 0), row_id
    quiet = {r.id.removesuffix(aio.CONTENDED) for r in aio_contended}
    assert {"aio_epoll_hello_vs_asyncio", "aio_epoll_streams_vs_asyncio"} <= quiet
    if URING_OK:
        assert {"aio_hello_vs_asyncio", "aio_streams_vs_asyncio"} <= quiet


def test_aio_contended_is_a_flag_of_the_aio_bench_only() -> None:
    """`python -m bench aio --contended` (what `make bench BENCH="aio --contended"` runs)
    takes the flag; a bench without that variant is one line on stderr and status 2."""
    bad = _bench("accept", "aio", "--contended")
    assert bad.returncode == 2
    assert bad.stdout == ""
    (line,) = bad.stderr.splitlines()
    assert line == "python -m bench: no --contended variant for accept (only aio)"
    assert benchmarks.contended_names() == ["aio"]
    with pytest.raises(ValueError, match="no --contended variant for memory"):
        benchmarks.run_benches(["memory"], quick=True, contended=True)
    with pytest.raises(ValueError, match="memory has no --contended variant"):
        benchmarks.BENCHES["memory"].run(quick=True, contended=True)


@pytest.mark.serial
def test_aio_burner_runs_on_the_load_cpu_and_is_stopped() -> None:
    """The --contended run's CPU burner is a busy process on CPU 1 while the workloads run,
    stopped (by pid) when they end; a quiet run starts none."""
    plan = aio._plan(quick=True, contended=True)
    before = _children()
    with aio._burner(plan):
        (pid,) = _children() - before
        if (os.cpu_count() or 1) >= 2:
            assert os.sched_getaffinity(pid) == {1}
        time.sleep(0.3)
        user, system = _endpoints.read_user_system(pid)
        assert user > 0.1
        assert system < user
    assert _children() == before
    with aio._burner(aio._plan(quick=True)):
        assert _children() == before


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


def test_aio_ids_per_engine_keep_the_old_ones_and_the_issue_goals() -> None:
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
    planned = aio.planned_ids()
    assert len(planned) == len(set(planned))
    uring = [i for i in planned if not i.startswith("aio_epoll_")]
    assert sorted(uring) == sorted(old)
    epoll = [i for i in planned if i.startswith("aio_epoll_")]
    assert sorted(epoll) == sorted(_epoll_id(i) for i in old if "_vs_epoll_engine" not in i)
    for row_id, goal in AIO_URING_GOALS.items():
        assert aio.GOALS[row_id] == goal, row_id
        if not row_id.endswith("_vs_epoll_engine"):
            assert aio.GOALS[_epoll_id(row_id)] == pytest.approx(goal - 0.05), row_id
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
    _no_subprocess(monkeypatch)
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
    assert sk.ids == tuple(aio.planned_ids(["hello", "uvicorn"]))
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
def test_aio_anatomy_rows(results: dict[str, list[Result]]) -> None:
    """Two rows per loop here (every call; Python functions only), each the loop's figure
    against the protocol's own share of it: one data_received a request (one request in flight
    on each connection), never more than the whole; asyncio's loop, written in Python, makes
    calls of its own. Only fdkit.aio's engines' calls rows carry a goal."""
    rows = {r.id: r for r in results["aio_anatomy"]}
    assert len(rows) == len(results["aio_anatomy"])
    assert set(rows) <= set(aio_anatomy.planned_ids())
    for key in aio_anatomy.LOOPS:
        calls_id, frames_id = (aio_anatomy.row_id(key, kind) for kind in aio_anatomy.KINDS)
        if not _anatomy_available(calls_id):
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


# ------------------------------------------------------------------ the tour (make demo)


def test_tour_stops_are_headline_rows_of_their_benches() -> None:
    """Each line of the tour is a headline row (a row with a goal) of a registered bench,
    each row once, and the tour runs only the benches its lines need."""
    rows = [s.row for s in tour.STOPS]
    assert len(rows) == len(set(rows))
    for stop in tour.STOPS:
        assert stop.bench in benchmarks.BENCHES, stop
        assert stop.row in HEADLINES[stop.bench], stop
    assert tour.benches() == list(dict.fromkeys(s.bench for s in tour.STOPS))
    assert set(tour.benches()) < set(benchmarks.BENCHES)


def _check_tour(text: str) -> list[str]:
    """The tour's shape: a headline, one line per stop (its capability after the mark), the
    full table's place last; every line within 100 columns. Returns the stops' lines."""
    lines = text.splitlines()
    assert len(lines) == 1 + len(tour.STOPS) + 1, text
    for line in lines:
        assert len(line) <= tour.WIDTH, line
    assert "goals met" in lines[0]
    assert lines[-1] == "full table: make bench (BENCH=name for one, JSON=1 for JSON)"
    for stop, line in zip(tour.STOPS, lines[1:-1], strict=True):
        assert line[0] in "✓✗○ ", line
        assert line[2:].startswith(f"{stop.label} "), line
    return lines[1:-1]


@RESULTS_TIMEOUT
def test_tour_of_a_run_fits_and_says_what_each_row_means(
    results: dict[str, list[Result]],
) -> None:
    rows = [r for v in results.values() for r in v]
    skipped = _common.take_skipped()
    lines = _check_tour(tour.format_tour(rows, skipped))
    by_id = {r.id: r for r in rows}
    for stop, line in zip(tour.STOPS, lines, strict=True):
        r = by_id.get(stop.row)
        if r is None:
            assert "not measured here" in line, line
            continue
        assert stop.peer in line, line
        assert line[0] == ("○" if r.retired else "✓" if r.met else "✗"), (r, line)
        assert (f"(goal {r.goal:g}x)" in line) == (line[0] == "✗"), line
        assert ("goal retired" in line) == (line[0] == "○"), line


@pytest.mark.parametrize("ratio", [0.0123, 0.5, 0.999, 1.0, 1.234, 9.99, 123.4, math.nan])
def test_tour_lines_fit_whatever_the_figures(ratio: float) -> None:
    """Every stop's line fits in 100 columns without being cut, for a row far behind, just
    under or over its goal, far ahead, or without a figure; a cost behind its peer reads
    "more", ahead "less" (or the stop's own words)."""
    rows = []
    for stop in tour.STOPS:
        unit = "msg/s" if stop.bench == "atomic_pipe" else "us/req"
        fdkit = 100.0 * ratio if is_rate(unit) else 100.0 / ratio
        rows.append(_common.compare(stop.row, stop.bench, "c", "m", unit, fdkit, 100.0, "b",
                                    goal=1.25))  # fmt: skip
    lines = _check_tour(tour.format_tour(rows))
    for stop, line in zip(tour.STOPS, lines, strict=True):
        assert "…" not in line, line
        if stop.bench != "atomic_pipe" and math.isfinite(ratio):
            word = (stop.better or "less") if ratio >= 1 else (stop.worse or "more")
            assert f"x {word} " in line, line


def test_tour_line_of_a_skipped_row_says_why() -> None:
    stop = tour.STOPS[0]
    reason = "wrk is not installed; `apt-get install wrk` adds these rows " + "x" * 200
    line = tour.tour_line(stop, None, [_common.Skipped(stop.bench, (stop.row,), reason)])
    assert len(line) == tour.WIDTH
    assert line.endswith("…")
    assert "not measured here: wrk is not installed" in line
    assert "see `make bench`" in tour.tour_line(stop, None)


def test_tour_takes_no_names() -> None:
    bad = _bench("--tour", "accept")
    assert bad.returncode == 2
    assert "--tour takes no NAME" in bad.stderr


@pytest.mark.skipif(MAKE is None, reason="no make")
def test_make_demo_runs_the_tour() -> None:
    assert MAKE is not None
    stamps = ["-o", ".venv/.fdkit-built", "-o", ".venv/.deps-installed"]
    stamps += ["-o", ".venv/.bench-deps-installed", "-o", "bench-tools"]
    # As a user types it: not as a sub-make of `make test` (whose MAKEFLAGS and MAKELEVEL
    # would make this one print the directories it enters).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    plan = subprocess.run(
        [MAKE, "-n", *stamps, "demo"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.strip().endswith("-m bench --tour"), plan.stdout


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_tour_runs_end_to_end() -> None:
    """`python -m bench --tour` (what `make demo` runs) at smoke-test size: the tour alone on
    stdout, in shape; on stderr only its short progress lines."""
    env = dict(os.environ, **{TINY_ENV: "1"})
    proc = _bench("--tour", timeout=580, env=env)
    assert proc.returncode == 0, proc.stderr
    _check_tour(proc.stdout)
    for line in proc.stderr.splitlines():
        assert len(line) <= tour.WIDTH, line


def test_tour_ratios_keep_as_many_digits_as_a_quick_run_deserves() -> None:
    got = [tour.times(r) for r in (0.5, 1.234, 1.996, 2.04, 9.96, 31.4)]
    assert got == ["0.50x", "1.23x", "2.0x", "2.0x", "10x", "31x"]


def test_quiet_drops_the_remarks_not_the_output() -> None:
    """`python -m bench -q` (what `fdkit bench -q` did): nothing on stderr while running, the
    output all there; an error still says so."""
    env = dict(os.environ, **{TINY_ENV: "1"})
    loud = _bench("memory", "--json", env=env)
    assert "smoke-test sizes" in loud.stderr  # a remark, which -q drops
    quiet = _bench("-q", "memory", "--json", env=env)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""
    assert [r["id"] for r in json.loads(quiet.stdout)["results"]] == ["fd_memory"]
    bad = _bench("-q", "no-such-bench")
    assert bad.returncode == 2
    assert "unknown benchmark no-such-bench" in bad.stderr
