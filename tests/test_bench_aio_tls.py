"""The aio_tls bench at smoke size (fdkit.aio's default loop with TLS against uvloop and
asyncio's loop: a hello server, a streams client, new connections, bulk bytes): its rows and
ids, every planned row made or skipped with a reason, the certificate it makes, and how it
leaves out a contender that is missing or fails."""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from helpers.bench import (
    HEADLINES,
    RESULTS_TIMEOUT,
    RowContract,
    aio_tls_lacking,
    bench_rows,
    bench_run,
    no_subprocess,
)

# isort: split
# (bench/ is importable once helpers.bench has put the source tree on sys.path)
from bench import _common, aio, aio_tls
from bench._common import TINY_ENV, Result

pytestmark = pytest.mark.source_tree

IDS = [
    "aio_tls_hello_vs_uvloop",
    "aio_tls_hello_rps_vs_uvloop",
    "aio_tls_hello_vs_asyncio",
    "aio_tls_client_vs_uvloop",
    "aio_tls_client_vs_asyncio",
    "aio_tls_handshake_vs_uvloop",
    "aio_tls_handshake_vs_asyncio",
    "aio_tls_bulk_vs_uvloop",
    "aio_tls_bulk_vs_asyncio",
]


class TestRows(RowContract):
    """The rows of aio_tls (see RowContract)."""


def test_aio_tls_ids_and_goals() -> None:
    """The ids are a contract: one CPU row per workload and other loop, wrk's rate against
    uvloop; the goals are the headline rows'."""
    assert aio_tls.planned_ids() == IDS
    assert aio_tls.GOALS == {
        "aio_tls_hello_vs_uvloop": 1.15,
        "aio_tls_hello_vs_asyncio": 2.0,
        "aio_tls_client_vs_uvloop": 1.1,
        "aio_tls_handshake_vs_uvloop": 1.0,
        "aio_tls_bulk_vs_uvloop": 1.0,
    }
    assert set(aio_tls.GOALS) == set(HEADLINES["aio_tls"])
    assert aio_tls.planned_ids(["bulk"], ["asyncio"]) == ["aio_tls_bulk_vs_asyncio"]


@pytest.mark.slow
@pytest.mark.parametrize("row_id", HEADLINES["aio_tls"])
@RESULTS_TIMEOUT
def test_aio_tls_headline_ids(row_id: str) -> None:
    """Each headline id comes out once at smoke size, with its goal, or its loop is not here
    (`make bench` installs requirements-bench.txt; `make test` does not) and this says so."""
    if lacking := aio_tls_lacking(row_id):
        pytest.skip(f"{', '.join(lacking)} not here: {aio.install_hint(lacking)}")
    rows = [r for r in bench_rows("aio_tls") if r.id == row_id]
    assert len(rows) == 1, [r.id for r in bench_rows("aio_tls")]
    assert rows[0].goal == aio_tls.GOALS[row_id]


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_aio_tls_rows_are_made_or_skipped_with_a_reason() -> None:
    """Every planned row is made once or recorded as skipped with a reason; asyncio's rows
    (the stdlib: always here) are made for every workload."""
    run = bench_run("aio_tls")
    made = [r.id for r in run.rows]
    assert len(made) == len(set(made))
    skipped = {i: s.reason for s in run.skipped if s.bench == "aio_tls" for i in s.ids}
    for row_id in IDS:
        assert (row_id in made) != (row_id in skipped), row_id
        assert row_id in made or skipped[row_id], row_id
    assert {f"aio_tls_{w}_vs_asyncio" for w in aio_tls.WORKLOADS} <= set(made)
    assert [i for i in IDS if i in made] == made  # in table order


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_aio_tls_rows_name_their_contenders() -> None:
    """Each row measures fdkit.aio's epoll engine against the loop its id names, in its
    workload's unit."""
    for r in bench_rows("aio_tls"):
        m = re.fullmatch(r"aio_tls_(hello|client|handshake|bulk)(_rps)?_vs_(uvloop|asyncio)", r.id)
        assert m is not None, r
        workload, rps, other = m.groups()
        assert r.unit == (aio_tls.RATE_UNIT if rps else aio_tls.UNIT)[workload], r
        assert r.case.startswith("fdkit.aio (epoll), "), r.case
        assert r.baseline_name == aio.LABELS[other], r
        assert "TLS" in r.case or workload == "bulk", r.case


def test_aio_tls_fdkit_runs_on_its_epoll_engine() -> None:
    """fdkit.aio's programs run with FDKIT_AIO_ENGINE=epoll and must say so."""
    assert aio_tls.SUBJECT == "epoll_engine"
    env = aio._child_env(aio_tls.SUBJECT)
    assert env is not None
    assert env["FDKIT_AIO_ENGINE"] == "epoll"
    assert aio._child_loop(aio_tls.SUBJECT) == "fdkit"
    with pytest.raises(RuntimeError, match="the io_uring engine, not epoll"):
        aio._check_loop(aio_tls.SUBJECT, "loop fdkit.aio._loop.UringEventLoop io_uring\n", "x")


def test_aio_tls_without_uvloop_its_rows_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aio, "missing", lambda names: [n for n in names if n == "uvloop"])
    _common.take_skipped()
    assert aio_tls.loops() == ["epoll_engine", "asyncio"]
    (sk,) = _common.take_skipped()
    assert sk.bench == "aio_tls"
    assert list(sk.ids) == [i for i in IDS if i.endswith("_vs_uvloop")]
    assert "uvloop is not installed" in sk.reason
    assert "-m pip install uvloop==" in sk.reason  # the pin of requirements-bench.txt


def test_aio_tls_without_fdkit_aio_skips_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aio, "missing", lambda names: [n for n in names if n == "fdkit.aio"])
    no_subprocess(monkeypatch)
    _common.take_skipped()
    assert aio_tls.run(quick=True) == []
    (sk,) = _common.take_skipped()
    assert list(sk.ids) == IDS
    assert "fdkit.aio is not installed" in sk.reason


def _record(ran: list[str], name: str) -> Callable[..., list[Result]]:
    def called(*args: object) -> list[Result]:
        ran.append(name)
        return []

    return called


def every_contender_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every loop counts as installed (uvloop is a bench requirement, not a test one), so that
    a test of another missing piece sees that piece's skip alone."""
    monkeypatch.setattr(aio, "missing", lambda names: [])


def test_aio_tls_without_wrk_skips_the_hello_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without wrk (and not at smoke size, where a Python load replaces it) the hello rows are
    skipped, saying how to add wrk; the other workloads need no wrk."""
    monkeypatch.delenv(TINY_ENV, raising=False)
    monkeypatch.setattr(aio_tls, "_which", lambda name: None)
    every_contender_here(monkeypatch)
    ran: list[str] = []
    for workload in aio_tls.WORKLOADS:
        monkeypatch.setattr(aio_tls, f"{workload}_workload", _record(ran, workload))
    _common.take_skipped()
    assert aio_tls.run(quick=True) == []
    (sk,) = _common.take_skipped()
    assert "wrk is not installed" in sk.reason
    assert list(sk.ids) == [i for i in IDS if i.startswith("aio_tls_hello")]
    assert ran == ["client", "handshake", "bulk"]


def test_aio_tls_without_a_certificate_skips_every_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aio_tls, "_openssl_cert", lambda where: None)
    monkeypatch.setattr(aio_tls, "_trustme_cert", lambda where: None)
    every_contender_here(monkeypatch)
    no_subprocess(monkeypatch)
    _common.take_skipped()
    assert aio_tls.run(quick=True) == []
    (sk,) = _common.take_skipped()
    assert list(sk.ids) == IDS
    assert "neither the openssl command nor the trustme package" in sk.reason


@pytest.mark.parametrize("maker", ["openssl", "trustme"])
def test_aio_tls_certificate_serves_tls_to_a_checking_client(
    maker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The throwaway certificate (openssl's self-signed one, or trustme's) is an EC P-256
    certificate for 127.0.0.1 that a client checking the host name accepts; its directory
    is removed after."""
    if maker == "trustme":
        monkeypatch.setattr(shutil, "which", lambda name: None)
    elif shutil.which("openssl") is None:
        pytest.skip("no openssl command here")
    with aio_tls.certificate() as cert:
        assert isinstance(cert, aio_tls.Cert), cert
        assert (cert.cafile == cert.cert) == (maker == "openssl")
        _check_served(cert)
        where = Path(cert.cert).parent
    assert not where.exists()


def _check_served(cert: aio_tls.Cert) -> None:
    """One TLS handshake against ``cert``, checked by a client that trusts ``cert.cafile``."""
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert.cert, cert.key)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def accept() -> None:
            conn, _ = listener.accept()
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"ok")

        t = threading.Thread(target=accept)
        t.start()
        try:
            with aio_tls._tls_connect(port, aio_tls.client_context(cert)) as tls:
                assert tls.recv(2) == b"ok"
                der = tls.getpeercert(binary_form=True)
                assert der is not None
                assert b"\x06\x08\x2a\x86\x48\xce\x3d\x03\x01\x07" in der  # prime256v1's OID
        finally:
            t.join(10)


def test_aio_tls_a_failing_contender_is_left_out_with_its_rows() -> None:
    """A contender that failed takes its rows (skipped with why); fdkit.aio failing takes the
    workload's; the others' rows are made from what was measured."""
    _common.take_skipped()
    m = aio_tls.Measured(1000, 1.0, 0.01)
    runs: dict[str, Sequence[aio_tls.Measured | None]] = {
        "epoll_engine": [m], "uvloop": [None], "asyncio": [aio_tls.Measured(1000, 1.0, 0.02)],
    }  # fmt: skip
    failed = {"uvloop": "it hung"}
    figs = aio_tls._figures("client", runs, failed)
    rows = aio_tls._rows("client", "c", figs, failed)
    assert [(r.id, r.fdkit, r.baseline, r.ratio) for r in rows] == [
        ("aio_tls_client_vs_asyncio", 10.0, 20.0, 2.0)
    ]
    (sk,) = _common.take_skipped()
    assert sk.ids == ("aio_tls_client_vs_uvloop",)
    assert sk.reason == f"{aio.LABELS['uvloop']}: it hung"
    failed = {"epoll_engine": "it failed"}
    assert aio_tls._rows("bulk", "c", aio_tls._figures("bulk", runs, failed), failed) == []
    (sk,) = _common.take_skipped()
    assert list(sk.ids) == aio_tls.planned_ids(["bulk"])


@pytest.mark.slow
def test_aio_tls_hello_server_on_asyncio_answers_over_tls() -> None:
    """The TLS hello server program (here on asyncio's loop) says which loop it runs, answers
    every request of the Python load over TLS with the hello reply, and exits with status 0
    on SIGTERM."""
    with aio_tls.certificate() as cert, contextlib.ExitStack() as stack:
        assert isinstance(cert, aio_tls.Cert), cert
        server = aio_tls._server(stack, "hello", "asyncio", cert)
        ctx = aio_tls.client_context(cert)
        assert aio_tls._ready(server, "asyncio", ctx).startswith("TLS")
        run = aio_tls.python_tls_load(server, ctx, 2, 10)
        assert run.requests == 20
        server.stop()
        assert server.proc.returncode == 0


@pytest.mark.slow
def test_aio_tls_bulk_program_checks_the_bytes() -> None:
    """The bulk program moves N bytes over TLS on one loop and, in check mode, compares what
    arrived with what was sent."""
    from bench.child import script

    with aio_tls.certificate() as cert:
        assert isinstance(cert, aio_tls.Cert), cert
        argv = [sys.executable, script("aio_tls_servers"), "bulk", "asyncio", cert.cert,
                cert.key, cert.cafile]  # fmt: skip
        proc = subprocess.run(argv, input="1000000 check\n300000 count\n", capture_output=True,
                              text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("loop asyncio."), lines
    assert lines[1:] == ["moved 1000000", "moved 300000"]


def test_aio_tls_child_unknown_mode_says_so() -> None:
    from bench.child import script

    proc = subprocess.run([sys.executable, script("aio_tls_servers"), "nope"],
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert proc.returncode != 0
    assert "unknown mode 'nope'" in proc.stderr
