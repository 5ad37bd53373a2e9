"""Skips for lack of io_uring are visible, and fail under ``FDKIT_REQUIRE_URING=1``:
``make test`` sets the variable on a machine that has io_uring, so that io_uring
vanishing (a seccomp profile, a kernel setting, a broken probe) cannot pass as a green run.

The suite is run in a child pytest under ``helpers/no_uring.py``, a seccomp filter that makes
the io_uring syscalls fail with ENOSYS, as on a kernel built without them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
NO_URING = TESTS / "helpers" / "no_uring.py"
#: Tests that need io_uring, each skipped in its own way (a module-level ``skipif``, a helper
#: calling ``pytest.skip``, the serve ``engine`` fixture, a ``skipif`` on one test), and the
#: three that do not ([Pipe], [AtomicPipe], [epoll]).
NODES = [
    "test_uring_ring.py::test_nop_returns_its_user_data_across_the_whole_u64_range",
    "test_binding_module.py::test_exit_returns_none_and_closes",
    "test_serve_http.py::test_start_line_names_the_directory_engine_and_workers",
    "test_threads_close.py::test_ring_close_ends_a_blocked_wait",
]
NEED_URING, OTHERS = 4, 3


def run_without_uring(*args: str, require: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "FDKIT_REQUIRE_URING"}
    if require:
        env["FDKIT_REQUIRE_URING"] = "1"
    return subprocess.run(
        [sys.executable, str(NO_URING), sys.executable, *args],
        cwd=TESTS,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def seccomp() -> None:
    probe = run_without_uring(
        "-c", "import fdkit.uring as u; print(u.available()[0])", require=False
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot install a seccomp filter here: {probe.stderr.strip()[-300:]}")
    assert probe.stdout.split() == ["False"], probe


def outcomes(r: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """The counts of pytest's last line (``3 passed, 4 skipped in 1.2s``)."""
    last = r.stdout.strip().splitlines()[-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", last)}


def run_nodes(*, require: bool) -> subprocess.CompletedProcess[str]:
    args = ["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:randomly", *NODES]
    return run_without_uring(*args, require=require)


def test_without_io_uring_the_tests_skip_and_say_why(seccomp: None) -> None:
    r = run_nodes(require=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert outcomes(r) == {"passed": OTHERS, "skipped": NEED_URING}, r.stdout
    skips = [line for line in r.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skips, skips
    assert all("io_uring unavailable: io_uring_setup: ENOSYS" in s for s in skips), skips


def test_fdkit_require_uring_turns_those_skips_into_failures(seccomp: None) -> None:
    r = run_nodes(require=True)
    assert r.returncode == 1, r.stdout + r.stderr
    counts = outcomes(r)
    assert counts.get("passed") == OTHERS, r.stdout
    assert "skipped" not in counts, r.stdout
    assert counts.get("failed", 0) + counts.get("errors", 0) == NEED_URING, r.stdout
    assert (
        r.stdout.count("FDKIT_REQUIRE_URING=1, but the test skipped: io_uring unavailable")
        >= NEED_URING
    ), r.stdout
