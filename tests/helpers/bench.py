"""What the tests of the benchmark harness share: the headline ids and goals they hold the
benches to, what this machine lets each bench measure, ``python -m bench`` as a subprocess, the
smoke-size run of each bench (once per pytest process), and :class:`RowContract`, the checks
every bench's rows must pass.

The harness is ``bench/`` of the source tree, imported from there (and run as ``python -m
bench`` from the repository root, as ``make bench`` does); the installed package has none.
Importing this module from a test file skips that file where there is no ``bench/``.

Speed is never asserted (the figures at smoke size mean nothing); what is checked is that every
bench runs, cleans up after itself, and reports rows ``python -m bench`` can print.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from fdkit import uring
from helpers import open_fds

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
# The harness is the source tree's bench/ (the wheel does not carry it): import it from there.
if not (REPO / "bench" / "__init__.py").is_file():
    pytest.skip(f"no bench/ harness beside {TESTS}", allow_module_level=True)
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import bench as benchmarks  # noqa: E402
from bench import _common, aio, aio_anatomy, aio_tls, report, serve, tour  # noqa: E402
from bench._common import TINY_ENV, Result, Skipped, is_rate  # noqa: E402

#: The per-test timeout of the tests that take a bench's rows: the first test to ask pays for
#: the bench's smoke-size run (child processes, servers, wrk), which on a loaded 2-core
#: machine can take over the default 60 s (aio_anatomy under callgrind alone takes about 60).
RESULTS_TIMEOUT = pytest.mark.timeout(300)

#: The fields of a result row, in the order of the JSON document's objects.
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
HAVE_NGINX = serve._which("nginx") is not None  # the bench installs nothing at smoke size
HAVE_H2O = serve._which("h2o") is not None
URING_OK = uring.available()[0]
MAKE = shutil.which("make")

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


def epoll_id(row_id: str) -> str:
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
    # each needs its contenders on this machine: see serve_available
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
    # io_uring engine's rows): see aio_available
    "aio": [
        *AIO_URING_GOALS,
        "aio_hello_vs_asyncio",  # its goal is retired (_common.RETIRED_GOALS)
        "aio_hello_vs_epoll_engine",
        "aio_hello_c1_vs_epoll_engine",
        "aio_uvicorn_vs_epoll_engine",
        "aio_sendfile_vs_epoll_engine",
        *(epoll_id(i) for i in AIO_URING_GOALS if not i.endswith("_vs_epoll_engine")),
    ],
    # fdkit.aio's engines: no Python call of the loop's beside the protocol's own
    "aio_anatomy": ["aio_hello_py_calls_per_req", "aio_epoll_hello_py_calls_per_req"],
    # fdkit.aio's default loop with TLS; the uvloop rows need uvloop: see aio_tls_available
    "aio_tls": [
        "aio_tls_hello_vs_uvloop",
        "aio_tls_hello_vs_asyncio",
        "aio_tls_client_vs_uvloop",
        "aio_tls_handshake_vs_uvloop",
        "aio_tls_bulk_vs_uvloop",
    ],
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


# ---------------------------------------------------------------- what this machine measures


def serve_available(row_id: str) -> bool:
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


def aio_lacking(row_id: str) -> list[str]:
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


def aio_available(row_id: str) -> bool:
    return not aio_lacking(row_id)


def anatomy_key(row_id: str) -> str:
    """The loop an aio_anatomy row measures (a key of bench.aio)."""
    (key,) = [k for k in aio_anatomy.LOOPS if row_id.startswith(aio_anatomy.ID_HEAD[k] + "_hello_")]
    return key


def anatomy_lacking(row_id: str) -> list[str]:
    """What the aio_anatomy bench lacks here to produce ``row_id``: its loop, and io_uring for
    the io_uring engine's."""
    key = anatomy_key(row_id)
    lacking = ["io_uring"] if key == "fdkit" and not URING_OK else []
    return lacking + aio.missing([aio.MODULES[key]])


def anatomy_available(row_id: str) -> bool:
    return not anatomy_lacking(row_id)


def aio_tls_lacking(row_id: str) -> list[str]:
    """What the aio_tls bench lacks here to produce ``row_id`` at smoke size (no wrk needed
    then; the certificate comes from openssl, else trustme, a test requirement): fdkit.aio and
    the loop the row names."""
    other = row_id.rsplit("_vs_", 1)[1]
    return aio.missing([aio.MODULES[aio_tls.SUBJECT], aio.MODULES[other]])


def aio_tls_available(row_id: str) -> bool:
    return not aio_tls_lacking(row_id)


def expected_headlines(bench: str) -> list[str]:
    """The headline ids of ``bench`` it can produce on this machine."""
    return [
        i
        for i in HEADLINES.get(bench, [])
        if (HAVE_GCC or not i.endswith("_vs_c"))
        and (bench != "serve" or serve_available(i))
        and (bench != "aio" or aio_available(i))
        and (bench != "aio_anatomy" or anatomy_available(i))
        and (bench != "aio_tls" or aio_tls_available(i))
    ]


@contextmanager
def smoke_size() -> Iterator[None]:
    """The benches' smoke-test size (``FDKIT_BENCH_TINY=1``) for the duration."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(TINY_ENV, "1")
        yield


def planned_ids(bench: str) -> set[str]:
    """Every row id ``bench`` (serve, aio, aio_anatomy or aio_tls: the benches that list
    theirs) can produce, at every size and in every variant."""
    if bench == "serve":
        with pytest.MonkeyPatch.context() as mp:
            mp.delenv(TINY_ENV, raising=False)
            plans = [serve._plan(quick=False), serve._plan(quick=True)]
        with smoke_size():
            plans.append(serve._plan(quick=True))
        return {i for plan in plans for i in serve.planned_ids(plan)}
    if bench == "aio":
        return {*aio.planned_ids(), *aio.planned_ids(variant=aio.CONTENDED)}
    if bench == "aio_anatomy":
        return set(aio_anatomy.planned_ids())
    if bench == "aio_tls":
        return set(aio_tls.planned_ids())
    raise ValueError(f"{bench} lists no planned ids")


def check_aio_rows(rows: list[Result], variant: str = "") -> None:
    """Each row's unit fits its kind, its case names the engine it measures (io_uring for
    ``aio_W_vs_X``, epoll for ``aio_epoll_W_vs_X``), its baseline the other contender."""
    units = {"": ("us/req", "s/GiB"), "_rps": ("req/s",), "_p99": ("ms p99",)}
    units |= {"_rate": ("MiB/s",), "_user": ("us/req",), "_kernel": ("us/req",)}
    for r in rows:
        assert r.id.endswith(variant), r
        row_id = r.id.removesuffix(variant)
        workloads = "|".join(sorted(aio.WORKLOADS, key=len, reverse=True))  # hello_c1 first
        m = re.fullmatch(rf"aio_(epoll_)?({workloads})(.*)_vs_(\w+)", row_id)
        assert m is not None, r
        subject = "epoll_engine" if m[1] else "fdkit"
        kind, other = m[3], m[4]
        assert other != subject, r
        assert r.unit in units[kind], r
        assert r.case.startswith(f"fdkit.aio ({aio.ENGINE[subject]}), "), r.case
        assert r.baseline_name.startswith(aio.LABELS[other]), r
        if kind in ("_user", "_kernel"):
            assert m[2] in aio.HELLOS, r  # the split is the hello workloads'


# ------------------------------------------------------------------------- processes, fds


def python_m_bench(
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


def tiny_env() -> dict[str, str]:
    """This process's environment with the smoke-test size asked for, for ``python -m bench``."""
    return dict(os.environ, **{TINY_ENV: "1"})


def children() -> set[int]:
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


def no_subprocess(monkeypatch: pytest.MonkeyPatch) -> None:
    """Makes any subprocess the code under test starts fail the test."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"the bench tried to run {args}")

    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)


def bench_tools() -> list[tuple[str, str]]:
    """``make bench-tools``' ``(command, Debian package)`` pairs, read from the Makefile's
    ``BENCH_TOOLS``."""
    for line in (REPO / "Makefile").read_text().splitlines():
        if line.startswith("BENCH_TOOLS :="):
            pairs = line.split(":=", 1)[1].split()
            return [(tool, pkg) for tool, _, pkg in (p.partition(":") for p in pairs)]
    raise AssertionError("no BENCH_TOOLS in the Makefile")


def fake_bin(
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
        scripts |= {tool: "exit 0" for tool, _ in bench_tools()}
    for name, body in scripts.items():
        f = bin_ / name
        f.write_text(f"#!/bin/sh\n{body}\n")
        f.chmod(0o755)
    return bin_


def missing_packages() -> list[str]:
    """What bench-tools finds missing with PATH = the fake bin (plus the sbin dirs it adds)."""
    return [
        pkg
        for tool, pkg in bench_tools()
        if shutil.which(tool, path="/nonexistent:/usr/sbin:/sbin") is None
    ]


# ------------------------------------------------------------------ each bench, run once


#: The test file that runs each bench and checks its rows (:class:`RowContract` there, and the
#: bench's own checks). ``make test`` runs pytest with ``-n 2 --dist loadfile``: a bench taken
#: by two files on two workers runs twice. The cheap benches (a few seconds in all) are taken
#: by test_bench_contract.py too, for the ids across benches; the costly ones
#: (:data:`RUN_ALONE`) by their own file alone.
RUN_BY = {
    "accept": "test_bench_fd",
    "socket_create": "test_bench_fd",
    "memory": "test_bench_fd",
    "file_open": "test_bench_fd",
    "fd": "test_bench_fd",
    "zerocopy": "test_bench_zerocopy",
    "proxy": "test_bench_zerocopy",
    "atomic_pipe": "test_bench_atomic_pipe",
    "serve": "test_bench_serve",
    "aio": "test_bench_aio",
    "aio_anatomy": "test_bench_aio",
    "aio_tls": "test_bench_aio_tls",
}
#: The costly benches (seconds to a minute at smoke size): only their own file may run them.
RUN_ALONE = ("serve", "aio", "aio_anatomy", "aio_tls")
#: The test file that runs each bench's ``--contended`` variant (another run than the quiet
#: one, as costly: a file of its own, which the other worker can take).
CONTENDED_RUN_BY = {"aio": "test_bench_aio_contended"}


@dataclass(frozen=True)
class BenchRun:
    """One bench's run at smoke size: its rows, the rows it recorded as skipped (and why), and
    what it left behind: fds (``/proc/self/fd`` entries) and child processes."""

    rows: list[Result]
    skipped: list[Skipped]
    fds_left: list[int]
    children_left: list[int]


_runs: dict[tuple[str, bool], BenchRun | Exception] = {}


def bench_run(name: str, contended: bool = False) -> BenchRun:
    """Bench ``name`` (its ``--contended`` variant if asked) run at smoke size, once per pytest
    process: the first call runs it, later calls (from any test file) get the same run, or the
    same exception when it failed."""
    if name in RUN_ALONE:
        by = CONTENDED_RUN_BY[name] if contended else RUN_BY[name]
        here = Path(os.environ.get("PYTEST_CURRENT_TEST", "").split("::")[0]).stem
        assert here == by, f"{name}{' --contended' * contended} is run by {by}.py only, not {here}"
    key = (name, contended)
    if key not in _runs:
        try:
            _runs[key] = _run(name, contended)
        except Exception as e:
            _runs[key] = e
    run = _runs[key]
    if isinstance(run, Exception):
        raise run
    return run


def _run(name: str, contended: bool) -> BenchRun:
    b = benchmarks.BENCHES[name]
    with smoke_size():
        _common.take_skipped()  # what earlier code recorded is not this run's
        fds, kids = set(open_fds()), children()
        rows = b.run(quick=True, contended=True) if contended else b.run(quick=True)
        fds_left, kids_left = set(open_fds()) - fds, children() - kids
        return BenchRun(rows, _common.take_skipped(), sorted(fds_left), sorted(kids_left))


def bench_rows(name: str) -> list[Result]:
    """The rows of bench ``name`` at smoke size (see :func:`bench_run`)."""
    return bench_run(name).rows


def check_tour(text: str) -> list[str]:
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


class RowContract:
    """What every bench's rows keep, checked in the file that runs the bench: a test class of
    that file derives from this one and its tests run once per bench :data:`RUN_BY` gives it,
    on that bench's run at smoke size (the first test pays for it: see ``RESULTS_TIMEOUT``)."""

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        here = Path(str(metafunc.module.__file__)).stem
        metafunc.parametrize("bench", [b for b, f in RUN_BY.items() if f == here])

    @pytest.mark.slow
    @RESULTS_TIMEOUT
    def test_leaves_no_fd_or_process_behind(self, bench: str) -> None:
        run = bench_run(bench)
        assert not run.fds_left, f"{bench} left fds open: {run.fds_left}"
        assert not run.children_left, f"{bench} left child processes behind: {run.children_left}"

    @pytest.mark.slow
    @RESULTS_TIMEOUT
    def test_rows_follow_the_schema(self, bench: str) -> None:
        rows = bench_rows(bench)
        assert rows, f"{bench} returned no rows"
        ids = [r.id for r in rows]
        assert len(ids) == len(set(ids)), ids
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
    @RESULTS_TIMEOUT
    def test_headline_ids_exist_once_with_goals(self, bench: str) -> None:
        rows = bench_rows(bench)
        ids = [r.id for r in rows]
        for headline in expected_headlines(bench):
            assert ids.count(headline) == 1, f"{headline} in {ids}"
        all_headlines = {i for v in HEADLINES.values() for i in v}
        for r in rows:
            assert (r.goal is not None) == (r.id in all_headlines), r

    @pytest.mark.slow
    @RESULTS_TIMEOUT
    def test_every_goal_is_a_ratio_the_table_judges(self, bench: str) -> None:
        """A goal is the ratio a headline row must reach: positive and finite, shown as
        ``≥GOALx``, and judged ✓ exactly when the measured ratio reaches it (at the goal counts,
        just under does not); the last line counts the rows that met theirs."""
        rows = bench_rows(bench)
        edge = [
            _common.compare("edge_at", "b", "c", "m", "ops/s", 150.0, 100.0, "base", goal=1.5),
            _common.compare("edge_under", "b", "c", "m", "us/op", 1.0, 1.49, "base", goal=1.5),
        ]
        assert [r.met for r in edge] == [True, False]
        goals = [r for r in (*rows, *edge) if r.goal is not None]
        assert len(goals) - len(edge) >= len(expected_headlines(bench))
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

    @pytest.mark.slow
    @RESULTS_TIMEOUT
    def test_json_round_trips(self, bench: str) -> None:
        rows = bench_rows(bench)
        machine = benchmarks.machine_info()
        doc = json.loads(report.to_json(rows, machine))
        assert set(doc) == {"machine", "results"}
        assert doc["machine"] == json.loads(json.dumps(machine))
        for key in ("kernel", "cpu_count", "cpu_model", "python", "fdkit"):
            assert key in doc["machine"]
        assert [list(d) for d in doc["results"]] == [FIELDS] * len(rows)
        assert [Result(**d) for d in doc["results"]] == rows

    @pytest.mark.slow
    @RESULTS_TIMEOUT
    def test_table_shows_every_row_and_verdict(self, bench: str) -> None:
        rows = bench_rows(bench)
        lines = report.format_table(rows).splitlines()
        for r in rows:
            (line,) = [ln for ln in lines if ln.split(" ", 1)[0] == r.id]
            assert r.baseline_name in line
            if r.goal is not None:
                assert line.rstrip().endswith(("✓", "✗", f"retired ({r.retired})"))
        assert "goals met" in lines[-1]

    @pytest.mark.slow
    @RESULTS_TIMEOUT
    def test_tour_of_a_run_fits_and_says_what_each_row_means(self, bench: str) -> None:
        """The tour of this bench's run (with the rows it skipped): its stops' lines give each
        row's verdict and peer, or say why it was not measured; the other benches' stops are
        "not measured here"; every line fits."""
        run = bench_run(bench)
        lines = check_tour(tour.format_tour(run.rows, run.skipped))
        by_id = {r.id: r for r in run.rows}
        for stop, line in zip(tour.STOPS, lines, strict=True):
            r = by_id.get(stop.row)
            if r is None:
                assert "not measured here" in line, line
                continue
            assert stop.peer in line, line
            assert line[0] == ("○" if r.retired else "✓" if r.met else "✗"), (r, line)
            assert (f"(goal {r.goal:g}x)" in line) == (line[0] == "✗"), line
            assert ("goal retired" in line) == (line[0] == "○"), line
