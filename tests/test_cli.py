"""The installed `fdkit` command, run as a user runs it: in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

FDKIT = shutil.which("fdkit", path=os.path.dirname(sys.executable)) or "fdkit"


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FDKIT, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_help_lists_the_subcommands() -> None:
    r = run("--help")
    assert r.returncode == 0
    assert "bench" in r.stdout and "doctor" in r.stdout


@pytest.mark.parametrize("sub", ["bench", "doctor"])
def test_every_subcommand_has_help(sub: str) -> None:
    r = run(sub, "--help")
    assert r.returncode == 0
    assert f"usage: fdkit {sub}" in r.stdout


def test_no_command_prints_help_and_fails() -> None:
    r = run()
    assert r.returncode == 2
    assert "usage: fdkit" in r.stdout


def test_python_dash_m_runs_the_same_command() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "fdkit", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0
    assert r.stdout.startswith("fdkit ")


def test_doctor_reports_this_kernel() -> None:
    r = run("doctor", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["kernel"] == os.uname().release
    with open("/proc/sys/fs/pipe-max-size") as f:
        assert info["pipe_max_size"] == f.read().strip()
    import resource

    assert info["rlimit_nofile"]["soft"] == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    u = info["io_uring"]
    assert isinstance(u["available"], bool)
    if u["available"]:
        assert u["reason"] is None and u["ops"]["nop"] is True
    else:
        assert u["reason"].startswith("io_uring_setup")
    for check in ("splice", "copy_file_range", "sendfile"):
        assert isinstance(info["checks"][check]["ok"], bool)
    # Text mode names the same facts.
    text = run("doctor")
    assert text.returncode == 0
    assert "io_uring" in text.stdout and "RLIMIT_NOFILE" in text.stdout


def test_bench_rejects_an_unknown_name_in_one_line() -> None:
    r = run("bench", "no-such-bench")
    assert r.returncode == 2
    assert "unknown benchmark" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_bench_list_names_the_registered_benches() -> None:
    r = run("bench", "--list")
    assert r.returncode == 0
    assert "accept" in r.stdout
