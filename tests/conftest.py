"""Shared fixtures and hooks for the fdkit tests: an fd leak check around every test module, an
fd tracker that closes what a test leaves open, loopback listeners and connected pairs, and
skips for lack of io_uring turned into failures under ``FDKIT_REQUIRE_URING=1``.
Helpers that tests import live in ``helpers/`` (``from helpers import Fds``), not here.

Everything here uses the real kernel: real sockets on 127.0.0.1 / ::1, real pipes, real files.
"""

from __future__ import annotations

# libffi built with static trampolines (Debian's, under its CPython 3.14 and 3.15) keeps an fd
# open on its own library from ctypes' import on, for the life of the process: imported here,
# before any module's listing of its fds, it is no module's leak whichever test imports it first.
import ctypes  # noqa: F401
import gc
import os
import shutil
import sysconfig
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest

import fdkit
from fdkit import fd, zerocopy
from fdkit.types import Address, InetAddress
from helpers import Fds, ipv6_loopback, open_fds
from helpers.serve import ENGINES, _engine_args

# `make test` runs this suite in the source tree, on the editable build of python/; `make
# test-wheels` copies tests/ (with examples/ and bench/) out of the tree and runs it on a wheel
# installed in a fresh venv. There fdkit must come from that venv, and the tests marked
# source_tree (they run the Makefile, read the README) skip. An unpacked sdist (no Makefile)
# counts as installed too: its tests run against the wheel built from it.
SOURCE_TREE = (Path(__file__).resolve().parent.parent / "Makefile").is_file()


def pytest_sessionstart(session: pytest.Session) -> None:
    if SOURCE_TREE:
        return
    where = Path(fdkit.__file__).resolve()
    site = {Path(sysconfig.get_path(k)).resolve() for k in ("purelib", "platlib")}
    if not any(where.is_relative_to(s) for s in site):
        raise pytest.UsageError(f"testing fdkit from {where}, not the one installed in {site}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if SOURCE_TREE:
        return
    skip = pytest.mark.skip(reason="needs the source tree; this run tests an installed wheel")
    for item in items:
        if item.get_closest_marker("source_tree"):
            item.add_marker(skip)


def _settled_fds() -> dict[int, str]:
    # Objects that own fds (socket.socket, subprocess pipes) close them when collected, and
    # `transfer` keeps idle internal pipes for reuse on purpose: neither is a leak.
    gc.collect()
    zerocopy.pipe_pool_clear()
    return open_fds()


@pytest.fixture(autouse=True, scope="module")
def _no_fd_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails the module when it leaves fds open, or closes fds it did not own.

    Compares ``(fd, target)`` pairs before and after the module: a new pair is a leak (or an fd
    number a test closed and something else reused), a missing pair is an fd a test closed
    without owning it. Pytest's own fds (capture files, faulthandler) are open before the first
    module starts and are in both listings.
    """
    before = _settled_fds()
    yield
    after = _settled_fds()
    if before == after:
        return
    # A thread from a test may still be finishing a close: give it a moment, then look again.
    deadline = time.monotonic() + 1.0
    while before != after and time.monotonic() < deadline:
        time.sleep(0.02)
        after = _settled_fds()
    leaked = {n: t for n, t in after.items() if before.get(n) != t}
    lost = {n: t for n, t in before.items() if after.get(n) != t}
    if leaked or lost:
        pytest.fail(
            f"{request.node.name}: fds leaked {sorted(leaked.items())}, "
            f"fds closed that the module did not own {sorted(lost.items())}",
            pytrace=False,
        )


@pytest.fixture
def fds() -> Iterator[Fds]:
    tracker = Fds()
    try:
        yield tracker
    finally:
        tracker.close_all()


@pytest.fixture
def listener(fds: Fds) -> tuple[int, InetAddress]:
    """A blocking TCP listener on 127.0.0.1, port 0: ``(fd, (host, port))``."""
    return _inet(fds.listener())


@pytest.fixture
def nb_listener(fds: Fds) -> tuple[int, InetAddress]:
    """A non-blocking TCP listener on 127.0.0.1, port 0: ``(fd, (host, port))``."""
    return _inet(fds.listener(blocking=False))


def _inet(listener: tuple[int, Address]) -> tuple[int, InetAddress]:
    """An IPv4 listener's address as the ``(host, port)`` it is."""
    lfd, addr = listener
    assert isinstance(addr, tuple)
    assert len(addr) == 2
    return lfd, addr


@pytest.fixture
def tcp_pair(fds: Fds) -> tuple[int, int]:
    """A connected TCP pair on 127.0.0.1: ``(client_fd, server_fd)``."""
    return fds.connected()


@pytest.fixture
def tmp_file(tmp_path: Path) -> Callable[[bytes], Path]:
    """Makes a file under ``tmp_path`` holding the given bytes; returns its path."""
    count = 0

    def make(data: bytes = b"") -> Path:
        nonlocal count
        count += 1
        p = tmp_path / f"file{count}"
        p.write_bytes(data)
        return p

    return make


@pytest.fixture
def ipv6() -> None:
    if not ipv6_loopback():
        pytest.skip("no IPv6 on loopback (::1 cannot be bound)")


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    """A fresh directory on the tmpfs at /dev/shm, removed after the test."""
    base = Path("/dev/shm")
    if not base.is_dir():
        pytest.skip("no /dev/shm")
    d = Path(fd.mkdtemp(prefix="fdkit-zc-", dir=base))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module", params=list(ENGINES))
def engine(request: pytest.FixtureRequest) -> str:
    """The ``fdkit serve`` engine, each in turn: ``epoll`` and ``uring`` (skipped without
    io_uring, with the reason)."""
    name: str = request.param
    _engine_args(name)
    return name


# --- hooks ---------------------------------------------------------------------------------

#: Every skip for lack of io_uring gives a reason that starts with this.
URING_UNAVAILABLE = "io_uring unavailable"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """With ``FDKIT_REQUIRE_URING=1`` (``make test`` sets it on a machine that has io_uring), a
    test skipped because io_uring is unavailable fails instead: io_uring vanishing (a seccomp
    profile, a kernel setting, a broken probe) must not turn the io_uring tests into silent
    skips."""
    report = yield
    if (
        report.skipped
        and os.environ.get("FDKIT_REQUIRE_URING") == "1"
        and not hasattr(report, "wasxfail")
        and isinstance(report.longrepr, tuple)
        and URING_UNAVAILABLE in report.longrepr[2]
    ):
        report.outcome = "failed"
        reason = report.longrepr[2].removeprefix("Skipped: ")
        report.longrepr = f"FDKIT_REQUIRE_URING=1, but the test skipped: {reason}"
    return report
