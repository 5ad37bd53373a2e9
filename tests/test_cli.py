"""The installed `fdkit` command, run as a user runs it: in a subprocess."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

import fdkit.aio

FDKIT = shutil.which("fdkit", path=os.path.dirname(sys.executable)) or "fdkit"


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FDKIT, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_help_lists_the_subcommands() -> None:
    r = run("--help")
    assert r.returncode == 0
    for sub in ("copy", "doctor", "pipe-cat", "proxy", "serve"):
        assert sub in r.stdout


def test_there_is_no_bench_subcommand() -> None:
    """The benchmarks run from a source tree (`make bench`, `python -m bench`), never from the
    installed command: `fdkit --help` does not list `bench`, and `fdkit bench` is argparse's
    invalid choice (status 2)."""
    helped = run("--help")
    assert helped.returncode == 0
    assert "bench" not in helped.stdout
    for args in (["bench"], ["bench", "--list"]):
        r = run(*args)
        assert r.returncode == 2, r
        assert r.stdout == ""
        assert r.stderr.startswith("usage: fdkit [-h]"), r.stderr
        assert "fdkit: error: argument COMMAND: invalid choice: 'bench'" in r.stderr, r.stderr


@pytest.mark.parametrize("sub", ["copy", "doctor"])
def test_every_subcommand_has_help(sub: str) -> None:
    r = run(sub, "--help")
    assert r.returncode == 0
    assert f"usage: fdkit {sub}" in r.stdout.lower()  # copy says it as cp: "Usage:"


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
        assert info["pipe_max_size"] == int(f.read())
    import resource

    assert info["rlimit_nofile"]["soft"] == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    u = info["io_uring"]
    assert isinstance(u["available"], bool)
    if u["available"]:
        assert u["reason"] is None
        assert u["ops"]["nop"] is True
    else:
        assert u["reason"].startswith("io_uring_setup")
    # fdkit.aio: the engine a new loop gets here and why not io_uring; whether the io_uring
    # engine could run (uring_reason) and how its ring would wait.
    assert info["aio"]["engine"] == fdkit.aio.engine_available()
    assert (info["aio"]["reason"] is None) == (info["aio"]["engine"] == "io_uring")
    assert info["aio"]["uring_reason"] == fdkit.aio.engine_unavailable("io_uring")
    assert (info["aio"]["ring_wait"] is None) == (info["aio"]["uring_reason"] is not None)
    if u["available"] and info["aio"]["uring_reason"] is None:
        assert info["aio"]["ring_wait"] in ("epoll_wait", "poll")
    for check in ("splice", "copy_file_range", "sendfile"):
        assert isinstance(info["checks"][check]["ok"], bool)
    # Text mode names the same facts.
    text = run("doctor")
    assert text.returncode == 0
    assert "io_uring" in text.stdout
    assert "RLIMIT_NOFILE" in text.stdout


#: Every field of ``doctor --json`` and the JSON types it may take (None: null). A field added
#: to doctor must be added here, with its type.
DOCTOR_TYPES: dict[str, Any] = {
    "fdkit": str,
    "python": str,
    "kernel": str,
    "machine": str,
    "cpus": (int, None),
    "io_uring": {
        "available": bool,
        "reason": (str, None),
        "ops": bool,  # each op's name → bool
        "defer_taskrun": bool,
        "skip_success": bool,
    },
    "pipe_default_size": (int, None),
    "pipe_max_size": (int, None),
    "rlimit_nofile": {"soft": (int, None), "hard": (int, None)},
    "somaxconn": (int, None),
    "checks": {"splice": {"ok": bool, "detail": str}},  # each check alike
    "aio": {
        "engine": (str, None),
        "reason": (str, None),
        "uring_reason": (str, None),
        "ring_wait": (str, None),
    },
}


def _json_type_errors(value: Any, expected: Any, where: str) -> list[str]:
    """Where ``value`` (parsed JSON) is not of the ``expected`` type (see DOCTOR_TYPES)."""
    if isinstance(expected, dict):
        if not isinstance(value, dict):
            return [f"{where}: {value!r} is not an object"]
        if set(value) != set(expected):
            return [f"{where}: fields {sorted(value)}, expected {sorted(expected)}"]
        return [
            e for k, v in value.items() for e in _json_type_errors(v, expected[k], f"{where}.{k}")
        ]
    kinds = expected if isinstance(expected, tuple) else (expected,)
    # JSON has one number type, and bool is not a number here: True is not a size.
    for kind in kinds:
        if kind is None and value is None:
            return []
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return []
        if kind in (str, bool) and type(value) is kind:
            return []
    return [
        f"{where}: {value!r} is not {' or '.join(getattr(k, '__name__', 'null') for k in kinds)}"
    ]


def test_doctor_json_gives_every_field_one_type() -> None:
    """Numbers are numbers (pipe_max_size and somaxconn were strings, pipe_default_size an int),
    yes/no are booleans, what is unknown is null."""
    r = run("doctor", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    shape = dict(DOCTOR_TYPES)
    # The op and check names are the kernel's and the doctor's list; their values are typed.
    shape["io_uring"] = dict(
        DOCTOR_TYPES["io_uring"], ops={op: bool for op in info["io_uring"]["ops"]}
    )
    shape["checks"] = {name: DOCTOR_TYPES["checks"]["splice"] for name in info["checks"]}
    assert set(info["checks"]) == {"splice", "copy_file_range", "sendfile"}
    assert info["io_uring"]["ops"] or not info["io_uring"]["available"]
    assert _json_type_errors(info, shape, "doctor") == []
    with open("/proc/sys/net/core/somaxconn") as f:
        assert info["somaxconn"] == int(f.read())
    assert info["pipe_default_size"] > 0


# ---------------------------------------------------------------------------------------------
# A closed stdout (`fdkit doctor | (exec 0<&-)`) ends every command quietly


def _with_closed_stdout(
    cmd: list[str], *, unbuffered: bool = False
) -> subprocess.CompletedProcess[bytes]:
    """Runs ``cmd`` with stdout a pipe whose reader is gone, as after `| head -0`: the first
    write that reaches the pipe gets EPIPE. Python's stdout is buffered, as it is for a user,
    unless ``unbuffered`` (``PYTHONUNBUFFERED=1``, which some machines set for everything)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run(
            cmd, stdout=w, stderr=subprocess.PIPE, timeout=60, check=False, env=env
        )
    finally:
        os.close(w)


@pytest.mark.parametrize(
    "argv",
    [
        ["doctor"],
        ["doctor", "--json"],
    ],
    ids=" ".join,
)
@pytest.mark.parametrize("how", ["fdkit", "python -m fdkit"])
def test_closed_stdout_exits_quietly_with_141(argv: list[str], how: str) -> None:
    """No "[Errno 32] Broken pipe", no "Exception ignored" from the exit flush: nothing on
    stderr, and the status a tool killed by SIGPIPE gives (128 + 13)."""
    cmd = [FDKIT] if how == "fdkit" else [sys.executable, "-m", "fdkit"]
    proc = _with_closed_stdout([*cmd, *argv])
    assert proc.stderr == b""
    assert proc.returncode == 141


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("argv", [["--help"], ["serve", "--help"], ["--version"]], ids=" ".join)
def test_closed_stdout_after_help_is_quiet(argv: list[str], unbuffered: bool) -> None:
    """Nothing on stderr, whichever write meets EPIPE. Buffered (a user's stdout), the help
    sits in the buffer until fdkit's own flush, which finds the reader gone: 141, as for any
    other command. Unbuffered, argparse's write of the help fails and argparse swallows it
    (and exits 0); nothing is left for the exit flush to complain about."""
    proc = _with_closed_stdout([FDKIT, *argv], unbuffered=unbuffered)
    assert proc.stderr == b""
    assert proc.returncode == (0 if unbuffered else 141)


def test_closed_stdout_in_a_shell_pipeline() -> None:
    """`fdkit doctor | (exec 0<&-)`: a reader that closes the pipe at once ends the command
    with SIGPIPE's status (141) and not one line on stderr."""
    proc = subprocess.run(
        ["bash", "-c", f"'{FDKIT}' doctor | (exec 0<&-); echo ${{PIPESTATUS[0]}}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.stderr == ""
    assert proc.stdout.split() == ["141"]


# ---------------------------------------------------------------------------------------------
# `fdkit serve` names the listen address when the socket fails, not DIR


def _www(tmp_path: Path) -> Path:
    www = tmp_path / "www"
    www.mkdir()
    (www / "a.txt").write_text("a\n")
    return www


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_address_in_use_names_the_address(tmp_path: Path, workers: str) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = run("serve", str(_www(tmp_path)), "--port", str(port), "--workers", workers)
    assert r.returncode == 1
    assert r.stderr == f"fdkit serve: cannot listen on 127.0.0.1:{port}: Address already in use\n"


def test_serve_address_not_available_names_the_address(tmp_path: Path) -> None:
    # 192.0.2.1 (TEST-NET-1) is on no interface here: bind(2) fails at once with
    # EADDRNOTAVAIL, and nothing is ever sent to it.
    r = run("serve", str(_www(tmp_path)), "--host", "192.0.2.1", "--port", "0")
    assert r.returncode == 1
    assert r.stderr == (
        "fdkit serve: cannot listen on 192.0.2.1:0: Cannot assign requested address\n"
    )


def _unprivileged_port_start() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_unprivileged_port_start") as f:
            return int(f.read())
    except OSError:
        return 1024


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the command as nobody")
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
@pytest.mark.skipif(_unprivileged_port_start() <= 80, reason="port 80 is not privileged here")
def test_serve_port_80_as_non_root_blames_the_port_not_the_directory() -> None:
    """Binding port 80 without the privilege names the address that could not be bound, not
    the directory served (which is readable): no `Permission denied: '<DIR>'`."""
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    # An interpreter under a private home (pyenv's in /root) may not start as nobody at all.
    py = subprocess.run([*nobody, sys.executable, "-c", ""], capture_output=True, timeout=60)
    if py.returncode != 0:
        pytest.skip(f"nobody cannot run {sys.executable}: {py.stderr.decode(errors='replace')}")
    www = Path(tempfile.mkdtemp(prefix="fdkit-serve-80-"))  # under /tmp: nobody can reach it
    try:
        www.chmod(0o755)
        (www / "a.txt").write_text("a\n")
        proc = subprocess.run(
            [*nobody, FDKIT, "serve", str(www), "--host", "0.0.0.0", "--port", "80"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        shutil.rmtree(www)
    assert proc.returncode == 1
    assert proc.stderr.startswith("fdkit serve: cannot listen on 0.0.0.0:80: Permission denied")
    assert "below 1024" in proc.stderr
    assert str(www) not in proc.stderr


def test_serve_missing_directory_still_names_the_directory(tmp_path: Path) -> None:
    r = run("serve", str(tmp_path / "nope"), "--port", "0")
    assert r.returncode == 1
    assert str(tmp_path / "nope") in r.stderr
    assert "cannot listen" not in r.stderr


# ---------------------------------------------------------------------------------------------
# A duration too large says so, with the limit (not "must be positive, got
# 1000000000000…")


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["serve", "{dir}", "--port", "0", "--idle-timeout", "{t}"], "--idle-timeout"),
        (["proxy", "127.0.0.1:0", "127.0.0.1:9", "--idle-timeout", "{t}"], "--idle-timeout"),
        (["proxy", "127.0.0.1:0", "127.0.0.1:9", "--connect-timeout", "{t}"], "--connect-timeout"),
    ],
    ids=lambda v: v if isinstance(v, str) else v[0],
)
@pytest.mark.parametrize("t", ["1e300", "inf", "9223372037"])
def test_cli_duration_too_large_names_the_limit(
    tmp_path: Path, argv: list[str], option: str, t: str
) -> None:
    r = run(*(a.format(dir=tmp_path, t=t) for a in argv), timeout=30)
    assert r.returncode in (1, 2)
    assert r.stderr.splitlines() == [
        f"fdkit {argv[0]}: {option} is too large: '{t}' seconds "
        "(the limit is 9223372036 seconds, about 292 years)"
    ]


# ---------------------------------------------------------------------------------------------
# Every subcommand by the habits of the tools it replaces

# The time at the head of a log line (fdkit.cli._log.DATEFMT), then the command.
STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"

# A valid command line for each subcommand, so that only the flag added after it is wrong.
VALID = {
    "copy": ["copy", "a", "b"],
    "doctor": ["doctor"],
    "pipe-cat": ["pipe-cat", "-"],
    "proxy": ["proxy", "127.0.0.1:0", "127.0.0.1:9"],
    "serve": ["serve", "."],
}


@pytest.mark.parametrize("sub", sorted(set(VALID) - {"copy"}))
def test_a_bad_flag_prints_the_subcommands_own_usage(sub: str) -> None:
    """Not the top-level `usage: fdkit [-h] [--version] COMMAND ...`, which names none of the
    subcommand's options: `usage: fdkit copy [-h] [-q | -v] SRC DST`, as git or pip do."""
    r = run(*VALID[sub], "--bogus", timeout=30)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.startswith(f"usage: fdkit {sub} "), r.stderr
    assert r.stderr.splitlines()[-1] == f"fdkit {sub}: error: unrecognized arguments: --bogus"


def test_copy_refuses_a_bad_flag_in_cps_words_and_status() -> None:
    """`fdkit copy` reads its command line as cp reads its own: cp's message, cp's hint,
    exit status 1 (argparse's is 2)."""
    r = run(*VALID["copy"], "--bogus", timeout=30)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (
        "fdkit copy: unrecognized option '--bogus'\nTry 'fdkit copy --help' for more information.\n"
    )


def test_a_surplus_argument_names_the_subcommand_too() -> None:
    r = run("pipe-cat", "a", "b")
    assert r.returncode == 2
    assert r.stderr.startswith("usage: fdkit pipe-cat ")
    assert r.stderr.splitlines()[-1] == "fdkit pipe-cat: error: unrecognized arguments: b"


def test_a_bad_flag_before_the_subcommand_is_the_top_levels() -> None:
    r = run("--bogus", "doctor")
    assert r.returncode == 2
    assert r.stderr.startswith("usage: fdkit [-h]")
    assert r.stderr.splitlines()[-1] == "fdkit: error: unrecognized arguments: --bogus"


def test_copy_takes_quiet_and_verbose_together() -> None:
    """copy's -v is cp's (its lines on stdout), -q fdkit's (no progress, no notices): one
    does not exclude the other."""
    r = run("copy", "--help")
    assert "-q, --quiet" in r.stdout
    assert "-v, --verbose" in r.stdout
    both = run("copy", "-q", "-v", "/dev/null", "/dev/null", timeout=30)
    assert both.returncode == 1
    assert both.stderr == "fdkit copy: '/dev/null' and '/dev/null' are the same file\n"


@pytest.mark.parametrize("sub", ["doctor", "pipe-cat", "proxy"])
def test_every_subcommand_takes_quiet_and_verbose(sub: str) -> None:
    r = run(sub, "--help")
    assert r.returncode == 0
    assert "-q, --quiet" in r.stdout
    assert "-v, --verbose" in r.stdout
    both = run(*VALID[sub], "-q", "-v", timeout=30)
    assert both.returncode == 2
    assert both.stderr.splitlines()[-1] == (
        f"fdkit {sub}: error: argument -v/--verbose: not allowed with argument -q/--quiet"
    )


def test_doctor_verbose_logs_each_check_on_stderr_with_a_timestamp() -> None:
    plain = run("doctor")
    assert plain.returncode == 0
    assert plain.stderr == ""
    r = run("doctor", "-v")
    assert r.returncode == 0
    assert "io_uring" in r.stdout
    assert "RLIMIT_NOFILE" in r.stdout
    lines = r.stderr.splitlines()
    assert lines, "no log lines"
    for line in lines:
        assert re.fullmatch(STAMP + r" fdkit doctor: .+ \(\d+\.\d ms\)", line), line
    for check in ("io_uring probe", "splice", "copy_file_range", "sendfile"):
        assert any(f" fdkit doctor: {check}: " in line for line in lines), (check, lines)


def test_doctor_quiet_prints_only_what_does_not_work() -> None:
    full = run("doctor", "--json")
    info = json.loads(full.stdout)
    r = run("doctor", "-q")
    assert r.returncode == 0
    assert r.stderr == ""
    broken = [name for name, c in info["checks"].items() if not c["ok"]]
    u = info["io_uring"]
    missing = [op for op, ok in u["ops"].items() if not ok] if u["available"] else []
    expected = len(broken) + (not u["available"]) + bool(missing)
    assert len(r.stdout.splitlines()) == expected, r.stdout
    assert "RLIMIT_NOFILE" not in r.stdout
    assert "somaxconn" not in r.stdout
    for name in broken:
        assert name in r.stdout


@pytest.mark.parametrize(
    ("flags", "stamped", "shown"),
    [([], False, ["notice"]), (["-v"], True, ["detail", "notice"]), (["-q"], False, [])],
)
def test_log_lines_are_time_stamped_only_with_verbose(
    flags: list[str], stamped: bool, shown: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A notice reads ``fdkit copy: ...``; with ``-v`` every line starts with the time, as
    the docs show; ``-q`` keeps warnings only."""
    import argparse

    from fdkit.cli import _log

    parser = argparse.ArgumentParser()
    _log.add_verbosity(parser)
    log = _log.setup("copy", parser.parse_args(flags))
    log.debug("detail")
    log.info("notice")
    lines = capsys.readouterr().err.splitlines()
    assert [line.rsplit(": ", 1)[1] for line in lines] == shown
    for line in lines:
        if stamped:
            assert re.fullmatch(STAMP + " fdkit copy: .+", line), line
        else:
            assert line.startswith("fdkit copy: "), line
