"""The peer-suite harness (``make peer-tests``) without downloading anything.

A small suite is written on the spot and run through the harness as a peer suite would be
(its pytest in a child process, the plugin loaded): the counts, a hang stopped by the per-test
timeout, a hang that even pytest-timeout cannot stop (the watchdog kills it), a crash, the
restarts that run the tests after them, a deselection, the budget. Then the comparison: what
counts as a difference, what is set aside as flaky on asyncio's loop, and the report.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from peer_suites._env import SuiteEnv
from peer_suites._report import (
    candidates,
    differences,
    flaky_on_base,
    format_report,
    suite_doc,
    verdict,
)
from peer_suites._run import RunResult, TestResult, collect, run, shards
from peer_suites._suites import LOOPS, SUITES, Deselect, Suite

# `make peer-tests` runs from the source tree: its harness is checked there, once, not against
# each installed wheel.
pytestmark = pytest.mark.source_tree

FAKE_TESTS = """
import os
import re
import signal
import time

import pytest


def test_pass():
    pass


def test_fail():
    assert 1 == 2, "one is not two"


def test_hang():
    time.sleep(600)


def test_after_hang():
    pass


def test_hang_holding_the_gil():
    # The regex engine never lets the GIL go: pytest-timeout's thread cannot act.
    re.match(r"(a+)+$", "a" * 64 + "b")


def test_crash():
    os.kill(os.getpid(), signal.SIGKILL)


def test_after_crash():
    pass


@pytest.mark.skip(reason="skipped on purpose")
def test_skip():
    pass


def test_left_out():
    raise AssertionError("deselected: never runs")
"""


def _fake_env(tmp_path: Path, **changes: object) -> SuiteEnv:
    src = tmp_path / "src"
    (src / "tests").mkdir(parents=True)
    (src / "tests" / "test_fake.py").write_text(FAKE_TESTS, encoding="utf-8")
    fields: dict[str, object] = {
        "name": "fake",
        "project": "fake",
        "version": "0",
        "install": (),
        "constraints": None,
        "pytest_args": (),
        "paths": ("tests",),
        "drop": (),
        "timeout": 2.0,
        "budget": 300.0,
        "jobs": 1,
        "deselect": (Deselect("contains", "test_left_out", "left out on purpose"),),
    }
    fields.update(changes)
    return SuiteEnv(Suite(**fields), src, Path(sys.executable))  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_run_outlives_hangs_and_crashes(tmp_path: Path) -> None:
    env = _fake_env(tmp_path)
    coll = collect(env, tmp_path / "work" / "collect")
    assert coll.deselected == {"left out on purpose": ["tests/test_fake.py::test_left_out"]}
    assert len(coll.nodeids) == 8
    assert coll.errors == []

    seen: list[str] = []
    result = run(
        env,
        "asyncio",
        coll.nodeids,
        tmp_path / "work" / "run",
        grace=2.0,
        on_result=lambda r: seen.append(r.nodeid),
    )
    got = {n.rsplit("::", 1)[1]: r for n, r in result.results.items()}
    assert {name: r.outcome for name, r in got.items()} == {
        "test_pass": "passed",
        "test_fail": "failed",
        "test_hang": "hung",
        "test_after_hang": "passed",
        "test_hang_holding_the_gil": "hung",
        "test_crash": "error",
        "test_after_crash": "passed",
        "test_skip": "skipped",
    }
    assert "one is not two" in got["test_fail"].detail
    assert "pytest-timeout" in got["test_hang"].detail
    assert "no progress" in got["test_hang_holding_the_gil"].detail
    assert got["test_crash"].detail == "crashed: pytest killed by SIGKILL"
    assert got["test_skip"].detail == "skipped on purpose"
    assert result.restarts == 3
    assert not result.cut
    assert list(result.results) == coll.nodeids  # the suite's order
    assert sorted(seen) == sorted(coll.nodeids)
    assert result.counts() == {
        "passed": 3,
        "failed": 1,
        "error": 1,
        "skipped": 1,
        "hung": 2,
        "not run": 0,
    }
    assert RunResult.from_json(result.as_json()).results == result.results


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_budget_cuts_the_run(tmp_path: Path) -> None:
    env = _fake_env(tmp_path, timeout=30.0, budget=6.0)
    ids = [f"tests/test_fake.py::{t}" for t in ("test_pass", "test_hang", "test_after_hang")]
    result = run(env, "asyncio", ids, tmp_path / "run")
    assert result.cut
    assert [r.outcome for r in result.results.values()] == ["passed", "not run", "not run"]
    assert result.seconds < 30


def test_shards_keep_files_whole_and_balanced() -> None:
    ids = [f"a.py::t{i}" for i in range(5)] + [f"b.py::t{i}" for i in range(3)]
    ids += [f"c.py::t{i}" for i in range(2)]
    parts = shards(ids, 2)
    assert sorted(map(len, parts)) == [5, 5]
    for part in parts:
        files = {i.split("::")[0] for i in part}
        assert all(
            sum(1 for i in ids if i.startswith(f)) == sum(1 for i in part if i.startswith(f))
            for f in files
        )
        assert part == [i for i in ids if i in part]
    assert shards(ids, 1) == [ids]
    assert shards(ids, 8) == [ids[:5], ids[5:8], ids[8:]]


def _run(loop: str, **outcomes: str) -> RunResult:
    r = RunResult("s", loop)
    r.results = {
        n: TestResult(n, o, f"why {n}" if o != "passed" else "") for n, o in outcomes.items()
    }
    return r


def test_differences_are_asyncio_passes_only() -> None:
    base = _run("asyncio", a="passed", b="passed", c="failed", d="passed", e="passed", f="passed")
    fdkit = _run("io_uring", a="passed", b="failed", c="failed", d="hung", e="skipped")
    # b, d, e did not pass on fdkit; f is missing from fdkit's run; c fails on asyncio too.
    assert candidates(base, fdkit) == ["b", "d", "e", "f"]

    reruns = [_run("asyncio", b="passed", d="passed", e="passed"), _run("asyncio", b="passed")]
    reruns[1].results["d"] = TestResult("d", "failed", "flaky")
    reruns[1].results["e"] = TestResult("e", "passed")
    flaky = flaky_on_base(["b", "d", "e", "f"], reruns)
    assert {n: r.outcome for n, r in flaky.items()} == {"d": "failed", "f": "not run"}

    again = _run("io_uring", b="failed", e="passed")
    diffs = differences(base, fdkit, flaky, again)
    assert [(d.nodeid, d.outcome, d.intermittent) for d in diffs] == [
        ("b", "failed", False),
        ("e", "skipped", True),
    ]
    assert diffs[0].rerun == "failed again: why b"


def test_report_names_each_difference_and_deselection() -> None:
    base = _run("asyncio", a="passed", b="passed")
    fdkit = _run("io_uring", a="passed", b="failed")
    epoll = _run("epoll", a="passed", b="passed")
    diffs = {"io_uring": differences(base, fdkit, {}, None), "epoll": []}
    doc: dict[str, Any] = {
        "fdkit": {"path": "/x/python", "commit": "abc", "python": "3.11"},
        "engines": ["io_uring", "epoll"],
        "timeouts": "s 60 s",
        "suites": {
            "s": suite_doc(
                label="s 1.0",
                collected=2,
                deselected={"needs the Internet": ["t::net"]},
                collect_errors=[],
                runs={"asyncio": base, "io_uring": fdkit, "epoll": epoll},
                baseline_from=None,
                unavailable={},
                diffs=diffs,
                flaky={},
            )
        },
    }
    doc["verdict"], clean = verdict(doc)
    assert not clean
    text = format_report(doc)
    assert "io_uring: 1 (s 1)" in text
    assert "s: b\n        failed: why b" in text
    assert "epoll: none" in text
    assert "1 tests: needs the Internet\n      t::net" in text
    assert text.endswith("peer-tests: 1 differences, 0 hung on fdkit's loop")

    diffs["io_uring"] = []
    doc["suites"]["s"] = {**doc["suites"]["s"], "differences": {"io_uring": [], "epoll": []}}
    assert verdict(doc) == ("peer-tests: 0 differences, 0 hung on fdkit's loop — clean", True)


def test_the_three_suites_leave_out_the_same_on_every_loop() -> None:
    assert LOOPS == ("asyncio", "io_uring", "epoll")
    assert {s.label for s in SUITES.values()} == {
        "uvloop 0.23.0",
        "anyio 4.16.0",
        "aiohttp 3.14.5",
    }
    for suite in SUITES.values():
        assert all(d.reason for d in suite.deselect), suite.name
        assert f"{suite.project}=={suite.version}" in suite.install
