"""The serve bench at smoke-test size: its rows, wrk's output read, the nginx and h2o it compares
with (their configs, and a tool that is missing: skipped, never installed by the bench), and
``make bench-tools``, which installs them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.bench import (
    HAVE_H2O,
    HAVE_NGINX,
    HEADLINES,
    MAKE,
    REPO,
    RESULTS_TIMEOUT,
    URING_OK,
    RowContract,
    bench_rows,
    expected_headlines,
    fake_bin,
    missing_packages,
    no_subprocess,
    python_m_bench,
    smoke_size,
    tiny_env,
)

# isort: split
# (bench/ is importable once helpers.bench has put the source tree on sys.path)
from bench import _common, _endpoints, report, serve
from bench._common import TINY_ENV

pytestmark = pytest.mark.source_tree


class TestRows(RowContract):
    """The rows of serve (see RowContract)."""


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_serve_rows() -> None:
    rows = bench_rows("serve")
    by_id = {r.id: r for r in rows}
    with smoke_size():
        assert set(by_id) <= set(serve.planned_ids(serve._plan(quick=True)))
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
    for i in expected_headlines("serve"):
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
    proc = python_m_bench("serve", "--json", env=tiny_env())
    assert proc.returncode == 0, proc.stderr
    got = [r["id"] for r in json.loads(proc.stdout)["results"]]
    for i in expected_headlines("serve"):
        assert got.count(i) == 1, got


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


# ------------------------------------------------------------------------------ wrk


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


# ------------------------------------------------------------------------- nginx and h2o


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


# ------------------------------------------------------------------ a peer or wrk missing


@pytest.mark.parametrize(("uid", "sudo"), [(0, ""), (1000, "sudo ")])
def test_find_tool_installs_nothing_and_names_the_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], uid: int, sudo: str
) -> None:
    monkeypatch.delenv(TINY_ENV, raising=False)
    monkeypatch.setattr(serve, "_which", lambda name: None)
    monkeypatch.setattr(os, "geteuid", lambda: uid)
    no_subprocess(monkeypatch)
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
    no_subprocess(monkeypatch)
    _common.take_skipped()
    assert serve.run(quick=True) == []  # no wrk: nothing runs, nothing fails
    (sk,) = _common.take_skipped()
    assert "wrk is not installed" in sk.reason
    assert "apt-get install wrk" in sk.reason
    assert set(HEADLINES["serve"]) <= set(sk.ids)
    assert sk.ids == tuple(serve.planned_ids(serve._plan(quick=True)))
    assert "wrk is not installed" in capsys.readouterr().err


@pytest.fixture
def tiny() -> Iterator[None]:
    with smoke_size():
        yield


@pytest.mark.slow
@pytest.mark.parametrize(
    ("tool", "first"),
    [("nginx", "serve_vs_nginx_6b, serve_epoll_vs_nginx_6b,"), ("h2o", "serve_vs_h2o_6b,")],
)
def test_serve_without_a_peer_skips_only_its_rows(
    tiny: None, monkeypatch: pytest.MonkeyPatch, tool: str, first: str
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


def test_bench_never_runs_apt_get(tmp_path: Path) -> None:
    """With wrk missing, `python -m bench serve --quick` once ran `apt-get update` and
    `apt-get install` as root. A fake apt-get first on PATH must never be called; the run
    says which tool is missing and the command that installs it, and shows the skip."""
    bin_ = fake_bin(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != TINY_ENV}
    env["PATH"] = str(bin_)  # no wrk here (nginx may still be found in /usr/sbin)
    proc = python_m_bench("serve", "--quick", timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "calls").exists(), (tmp_path / "calls").read_text()
    sudo = "" if os.geteuid() == 0 else "sudo "
    assert f"wrk is not installed; `{sudo}apt-get install wrk`" in proc.stderr
    assert "skipped: serve_vs_nginx_6b," in proc.stdout
    assert "rows skipped" in proc.stdout.splitlines()[-1]
    js = python_m_bench("serve", "--quick", "--json", timeout=120, env=env)
    assert js.returncode == 0, js.stderr
    assert json.loads(js.stdout)["results"] == []
    assert not (tmp_path / "calls").exists()


# ------------------------------------------------------------------------ make bench-tools


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


@pytest.mark.skipif(MAKE is None, reason="no make")
def test_make_bench_tools_installs_what_is_missing_as_root(tmp_path: Path) -> None:
    proc = _bench_tools(fake_bin(tmp_path, uid=0))
    assert proc.returncode == 0, proc.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    missing = " ".join(missing_packages())
    assert calls == [f"apt-get install -y -qq --no-install-recommends {missing}"]


@pytest.mark.skipif(MAKE is None, reason="no make")
def test_make_bench_tools_as_a_user_uses_passwordless_sudo(tmp_path: Path) -> None:
    proc = _bench_tools(fake_bin(tmp_path, uid=1000, sudo=True))
    assert proc.returncode == 0, proc.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    missing = " ".join(missing_packages())
    assert calls == [
        "sudo -n true",
        f"sudo apt-get install -y -qq --no-install-recommends {missing}",
    ]


@pytest.mark.skipif(MAKE is None, reason="no make")
def test_make_bench_tools_as_a_user_only_prints_the_command(tmp_path: Path) -> None:
    proc = _bench_tools(fake_bin(tmp_path, uid=1000))  # no usable sudo on this PATH
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "calls").exists()
    missing = " ".join(missing_packages())
    assert f"to install them run: sudo apt-get install -y {missing}" in proc.stdout


@pytest.mark.skipif(MAKE is None, reason="no make")
def test_make_bench_tools_without_apt_does_not_fail(tmp_path: Path) -> None:
    proc = _bench_tools(fake_bin(tmp_path, uid=0, apt=False))
    assert proc.returncode == 0, proc.stderr
    assert "no apt-get here" in proc.stdout
    assert not (tmp_path / "calls").exists()


@pytest.mark.skipif(MAKE is None, reason="no make")
def test_make_bench_tools_with_the_tools_present_does_nothing(tmp_path: Path) -> None:
    proc = _bench_tools(fake_bin(tmp_path, uid=0, tools=True))
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
