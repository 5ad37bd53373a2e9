"""CPython's own event-loop tests against fdkit.aio: the proof of compatibility.

One run of the whole set per engine and session (``aio_cpython.run_all``: each test in its own
process, three at a time, a timeout each; about 20 s a run here), on io_uring (skipped where
this machine has none, a failure under ``FDKIT_REQUIRE_URING=1``) and on epoll, then the
claims about each: the set is CPython's (147 tests on 3.11, 179 on 3.14 and 3.15), the loop
that ran is fdkit's on that engine, none hangs, every failure is in
``aio_cpython/known_failures.py`` with its reason or fails on asyncio's loop too (the oracle:
every test that passes there passes on fdkit's), every entry there still fails (and passes on
asyncio's loop), and at least 140 of 3.11's 147 pass (all but 7 elsewhere).
``python -m tests.aio_cpython --loop fdkit [--engine epoll]`` prints the same run test by test.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import fdkit.aio
from aio_cpython import KNOWN_FAILURES, Result, known_failures, list_ids, run_all
from aio_cpython._cases import MODULES
from aio_cpython._runner import Runner, summary
from helpers.aio import URING_SKIP, URING_WHY

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

JOBS = 3
TIMEOUT = 30.0
VERSION = sys.version_info[:2]
#: The size of the set on each Python (CPython adds tests in minor releases, never drops them).
MIN_TESTS = {(3, 11): 147, (3, 12): 153, (3, 13): 155, (3, 14): 179, (3, 15): 179}
#: How many may fail (known failures and skips together): at least 140 of 147 pass.
MAX_NOT_PASSING = 7
#: The class fdkit.aio.EventLoop() returns on each engine.
FDKIT_LOOPS = {"io_uring": fdkit.aio.UringEventLoop, "epoll": fdkit.aio.EpollEventLoop}


@dataclass(frozen=True)
class Run:
    engine: str
    results: list[Result]
    known: dict[str, str]

    def having(self, *statuses: str) -> list[Result]:
        return [r for r in self.results if r.status in statuses]


def _show(results: list[Result]) -> str:
    return "\n".join(f"  {r.status.upper()} {r.id}: {r.detail}" for r in results)


@pytest.fixture(scope="session", params=sorted(FDKIT_LOOPS))
def fdkit_run(request: pytest.FixtureRequest) -> Run:
    engine: str = request.param
    if engine == "io_uring" and URING_WHY is not None:
        if os.environ.get("FDKIT_REQUIRE_URING") == "1":  # `make test` where io_uring is
            pytest.fail(f"{URING_SKIP}, and FDKIT_REQUIRE_URING=1")
        pytest.skip(URING_SKIP)
    env = {"FDKIT_AIO_ENGINE": engine}
    start = time.monotonic()
    results = run_all("fdkit", list_ids(), jobs=JOBS, timeout=TIMEOUT, env=env)
    line = summary(results, "fdkit", time.monotonic() - start, JOBS, TIMEOUT, env)
    # The summary on the terminal, past pytest's capture (the per-test lines: run the CLI).
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capman is not None:
        with capman.global_and_fixture_disabled():
            reporter.write_line(f"\naio_cpython: {line}")
    return Run(engine, results, known_failures(engine, VERSION))


def test_the_set_is_cpythons() -> None:
    ids = list_ids()
    assert len(ids) == len(set(ids))
    by_module = {m: sum(t.startswith(f"{m}.") for t in ids) for m in MODULES}
    assert all(by_module.values()), by_module
    if VERSION in MIN_TESTS:
        assert len(ids) >= MIN_TESTS[VERSION], by_module
    if VERSION == (3, 11):
        assert len(ids) == 147, by_module


def test_the_loop_that_ran_is_fdkits(fdkit_run: Run) -> None:
    """Every test that passed made its loops through fdkit, on the engine of the run (the
    composition fell back neither to asyncio's own loop nor to the other engine)."""
    cls = FDKIT_LOOPS[fdkit_run.engine]
    expected = {f"{cls.__module__}.{cls.__qualname__}[{fdkit_run.engine}]"}
    wrong = [(r.id, r.loops) for r in fdkit_run.having("pass") if set(r.loops) != expected]
    assert not wrong, wrong


def test_none_hangs(fdkit_run: Run) -> None:
    hangs = fdkit_run.having("hang")
    assert not hangs, "hung (killed after the timeout):\n" + "\n\n".join(
        f"{r.id}: {r.detail}\n{r.output[-3000:]}" for r in hangs
    )


def test_every_failure_is_known(fdkit_run: Run) -> None:
    """A test that fails on fdkit's loop is in known_failures.py, or fails on asyncio's loop
    here too (run on those alone): what passes on asyncio's loop passes on fdkit's."""
    unknown = [r for r in fdkit_run.having("fail", "error") if r.id not in fdkit_run.known]
    if unknown:
        oracle = run_all("asyncio", [r.id for r in unknown], jobs=JOBS, timeout=TIMEOUT)
        passing = {r.id for r in oracle if r.status == "pass"}
        unknown = [r for r in unknown if r.id in passing]
    assert not unknown, (
        "failing on fdkit's loop, passing on asyncio's, and not in "
        "aio_cpython/known_failures.py:\n"
        + _show(unknown)
        + "\n\n"
        + "\n\n".join(f"== {r.id}\n{r.output[-3000:]}" for r in unknown)
    )


def test_known_failures_still_fail(fdkit_run: Run) -> None:
    """The table stays true: an entry whose test passes now (or no longer exists) is stale."""
    ids = {r.id for r in fdkit_run.results}
    stale = {tid: reason for tid, reason in fdkit_run.known.items() if tid not in ids}
    assert not stale, f"known_failures.py names tests this Python does not have: {stale}"
    malformed = [t for t in KNOWN_FAILURES if t.count(".") != 1 or t.split(".")[0] not in MODULES]
    assert not malformed, f"known_failures.py: ids are <module>.<test method>: {malformed}"
    fixed = [r.id for r in fdkit_run.having("pass") if r.id in fdkit_run.known]
    assert not fixed, f"these pass now: delete them from aio_cpython/known_failures.py: {fixed}"


def test_enough_pass(fdkit_run: Run) -> None:
    not_passing = [r for r in fdkit_run.results if r.status != "pass"]
    assert len(not_passing) <= MAX_NOT_PASSING, _show(not_passing)
    if VERSION == (3, 11):
        assert len(fdkit_run.having("pass")) >= 140, _show(not_passing)


def test_known_failures_pass_on_asyncio(fdkit_run: Run) -> None:
    """Each known failure is fdkit's: the same test passes on asyncio's own loop here."""
    if not fdkit_run.known:
        pytest.skip(f"no known failures for engine {fdkit_run.engine} on {VERSION}")
    oracle = run_all("asyncio", sorted(fdkit_run.known), jobs=JOBS, timeout=TIMEOUT)
    assert all(r.status == "pass" for r in oracle), _show(oracle)


def _dead(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


@pytest.mark.parametrize("worker_ends", [False, True], ids=["hangs", "exits"])
def test_a_worker_and_what_it_started_are_killed(worker_ends: bool) -> None:
    """The harness itself: a worker that never ends is a HANG after the timeout; either way
    it and the process it started (which holds no pipe of ours) are killed, by the worker's
    pid (its process group), and the run goes on."""
    prog = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],\n"
        "                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print('child', p.pid, flush=True)\n"
        f"time.sleep({0 if worker_ends else 120})\n"
    )
    start = time.monotonic()
    res = Runner("asyncio", timeout=3.0).spawn("probe", [sys.executable, "-c", prog])
    assert time.monotonic() - start < 20
    if worker_ends:  # no result line: a worker that dies without one is an error, not a pass
        assert (res.status, res.detail) == ("error", "worker died without a result (exit status 0)")
    else:
        assert (res.status, res.detail) == ("hang", "killed after 3 s, while running")
    child = int(res.output.split("child", 1)[1].split()[0])
    deadline = time.monotonic() + 5
    while not _dead(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not _dead(child):
        os.kill(child, 9)
        pytest.fail(f"the worker's child {child} outlived it")
