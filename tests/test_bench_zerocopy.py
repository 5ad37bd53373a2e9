"""The relay benches (zerocopy, proxy) at smoke-test size: their rows, their C relay, and the
endpoint processes and readings they measure with (bench/_endpoints.py)."""

from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path

import pytest

from helpers.bench import (
    HAVE_GCC,
    HEADLINES,
    RESULTS_TIMEOUT,
    RowContract,
    bench_rows,
    python_m_bench,
    tiny_env,
)

# isort: split
# (bench/ is importable once helpers.bench has put the source tree on sys.path)
from bench import _common, _endpoints, zerocopy
from bench._common import TINY_ENV

pytestmark = pytest.mark.source_tree


class TestRows(RowContract):
    """The rows of zerocopy and proxy (see RowContract)."""


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_zerocopy_covers_every_kind_and_names_the_path() -> None:
    rows = bench_rows("zerocopy")
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
def test_proxy_rows() -> None:
    (row,) = [r for r in bench_rows("proxy") if r.id == "proxy_vs_asyncio"]
    assert row.unit == "s/GiB"
    assert row.baseline_name.startswith("asyncio proxy")


@pytest.mark.parametrize(
    ("script", "ids"),
    [
        # a run without --quick: the copy row is the full run's copy_file_1g
        ("zerocopy", [zerocopy.COPY_ID, *HEADLINES["zerocopy"][:-1]]),
        ("proxy", HEADLINES["proxy"]),
    ],
)
def test_zero_copy_scripts_print_json(script: str, ids: list[str]) -> None:
    proc = python_m_bench(script, "--json", env=tiny_env())
    assert proc.returncode == 0, proc.stderr
    got = [r["id"] for r in json.loads(proc.stdout)["results"]]
    for i in ids:
        if HAVE_GCC or not i.endswith("_vs_c"):
            assert got.count(i) == 1, got


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


# ------------------------------------------------------------------------- the endpoints


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
