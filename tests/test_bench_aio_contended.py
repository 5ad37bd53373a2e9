"""The aio bench's --contended variant at smoke size (a CPU burner busy on the load's CPU while
the workloads run): its rows, the flag that asks for it, and the burner, stopped when they end.
"""

from __future__ import annotations

import os
import time

import pytest

from helpers.bench import (
    AIO_CONTENDED_HEADLINES,
    RESULTS_TIMEOUT,
    URING_OK,
    aio_available,
    bench_run,
    check_aio_rows,
    children,
    python_m_bench,
)

# isort: split
# (bench/ is importable once helpers.bench has put the source tree on sys.path)
import bench as benchmarks
from bench import _endpoints, aio
from bench._common import Result

pytestmark = pytest.mark.source_tree


@pytest.fixture
def aio_contended() -> list[Result]:
    """The rows of the aio bench's --contended variant at smoke size (run once, as
    bench_rows runs each bench)."""
    return bench_run("aio", contended=True).rows


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_aio_contended_leaves_no_fd_or_process_behind() -> None:
    """The --contended run, like every bench's run, leaves no fd open and no process behind:
    its CPU burner is stopped."""
    run = bench_run("aio", contended=True)
    assert not run.fds_left, f"the contended run left fds open: {run.fds_left}"
    assert not run.children_left, f"the contended run left processes: {run.children_left}"


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_aio_contended_ids_are_suffixed(aio_contended: list[Result]) -> None:
    """Every row of the --contended run is a planned id suffixed ``_contended`` (never one
    of the quiet run's), its case says the load's CPU was busy, and only the io_uring engine
    against the epoll engine carries a goal there."""
    ids = [r.id for r in aio_contended]
    assert ids
    assert set(ids) <= set(aio.planned_ids(variant=aio.CONTENDED))
    assert not set(ids) & set(aio.planned_ids())  # which the quiet run's rows keep to
    assert len(ids) == len(set(ids))
    check_aio_rows(aio_contended, aio.CONTENDED)
    for r in aio_contended:
        assert "CPU 1 busy" in r.case, r.case
        assert r.goal == aio.GOALS.get(r.id), r
        assert (r.goal is not None) == (r.id in AIO_CONTENDED_HEADLINES), r
    for row_id in AIO_CONTENDED_HEADLINES:
        assert ids.count(row_id) == (1 if aio_available(row_id) else 0), row_id
    quiet = {r.id.removesuffix(aio.CONTENDED) for r in aio_contended}
    assert {"aio_epoll_hello_vs_asyncio", "aio_epoll_streams_vs_asyncio"} <= quiet
    if URING_OK:
        assert {"aio_hello_vs_asyncio", "aio_streams_vs_asyncio"} <= quiet


def test_aio_contended_is_a_flag_of_the_aio_bench_only() -> None:
    """`python -m bench aio --contended` (what `make bench BENCH="aio --contended"` runs)
    takes the flag; a bench without that variant is one line on stderr and status 2."""
    bad = python_m_bench("accept", "aio", "--contended")
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
    before = children()
    with aio._burner(plan):
        (pid,) = children() - before
        if (os.cpu_count() or 1) >= 2:
            assert os.sched_getaffinity(pid) == {1}
        time.sleep(0.3)
        user, system = _endpoints.read_user_system(pid)
        assert user > 0.1
        assert system < user
    assert children() == before
    with aio._burner(aio._plan(quick=True)):
        assert children() == before
