"""The three peer suites: which sdist, what their tests need, how they run, what is left out.

Every deselection here applies to all three loops alike (the plugin applies it at collection,
before the loop is chosen), and each carries the reason the report prints.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

#: The loops a suite runs on: asyncio's own (the oracle) and fdkit's, one per engine.
LOOPS = ("asyncio", "io_uring", "epoll")
FDKIT_LOOPS = ("io_uring", "epoll")

# The pytest that fdkit's own suite uses (requirements-test.txt), where a suite pins none.
PYTEST = ("pytest==9.2.0", "pytest-timeout==2.4.0")


@dataclass(frozen=True)
class Deselect:
    """Tests left out on every loop. ``kind`` is how the plugin matches (see its ``_matches``)."""

    kind: str  # nodeid | contains | regex | marker | anyio_backend_not | class_not_subclass
    value: str
    reason: str

    def as_json(self) -> dict[str, str]:
        return {"kind": self.kind, "value": self.value, "reason": self.reason}


@dataclass(frozen=True)
class Suite:
    name: str
    project: str  # the PyPI name
    version: str
    #: What the suite's venv gets (pip requirement specs): the project's wheel and its tests' deps.
    install: tuple[str, ...]
    #: A constraints file inside the sdist (the project's own pins for its test deps), or None.
    constraints: str | None
    #: pytest arguments after the harness's own (their ``addopts`` stay unless overridden here).
    pytest_args: tuple[str, ...]
    paths: tuple[str, ...]
    #: Top-level directories of the sdist removed once unpacked: the project's source package,
    #: which would shadow the installed wheel (uncompiled: ``uvloop.loop`` missing) for any
    #: ``python -c`` a test starts in the sdist's directory.
    drop: tuple[str, ...]
    timeout: float  # seconds per test before it counts as hung
    budget: float  # seconds for one loop's whole run before the rest is cut
    jobs: int  # pytest processes at once (whole test files each)
    deselect: tuple[Deselect, ...] = field(default=())

    @property
    def label(self) -> str:
        return f"{self.project} {self.version}"


NETWORK = "needs the Internet (this machine reaches only package registries)"


def _resolves(host: str, family: socket.AddressFamily) -> bool:
    try:
        return bool(socket.getaddrinfo(host, 0, family, socket.SOCK_STREAM))
    except OSError:
        return False


#: Whether ``localhost`` has an IPv6 address here (/etc/hosts); some tests bind it with AF_INET6.
LOCALHOST_IPV6 = _resolves("localhost", socket.AF_INET6)

UVLOOP = Suite(
    name="uvloop",
    project="uvloop",
    version="0.23.0",
    # uvloop itself must be there: its test base (uvloop/_testbase.py) imports it. Its `test`
    # extra minus flake8/pycodestyle/mypy, which only test_sourcecode (uvloop's lint) uses.
    install=(
        "uvloop==0.23.0",
        "aiohttp==3.14.5",
        "psutil",
        "pyOpenSSL~=26.4.0",
        *PYTEST,
    ),
    constraints=None,
    # Their addopts (--capture=no --assert=plain --tb=native --import-mode=importlib) stay.
    pytest_args=(),
    paths=("tests",),
    drop=("uvloop",),
    timeout=60.0,
    budget=20 * 60.0,
    jobs=1,  # a minute; its signal and subprocess tests are sensitive to timing
    deselect=(
        Deselect(
            "class_not_subclass",
            "uvloop._testbase:AIOTestCase",
            "not an asyncio-loop test: uvloop's own loop (the UV classes), its policy, "
            "libuv, Cython and source-code checks",
        ),
        *(
            Deselect(
                "nodeid",
                f"tests/test_dns.py::Test_AIO_DNS::test_getaddrinfo_{n}",
                f"resolve example.com, which {NETWORK}: "
                "without it both sides fail alike and the test shows nothing",
            )
            for n in (1, 2, 4, 5, 6, 11)
        ),
    ),
)

ANYIO = Suite(
    name="anyio",
    project="anyio",
    version="4.16.0",
    # Their `test` dependency group, less coverage (not a test) and uvloop (the asyncio+uvloop
    # parameter is left out below; the few tests that import uvloop themselves then skip).
    install=(
        "anyio==4.16.0",
        "blockbuster>=1.5.29",
        "hypothesis>=4.18.2",
        "psutil>=5.9",
        "pytest-mock>=3.14",
        "trustme>=1.0.0",
        "truststore>=0.9.1",
        *PYTEST,
    ),
    constraints=None,
    pytest_args=(),  # their [tool.pytest] addopts stay (-p anyio, -p no:trio, ...)
    paths=("tests",),
    drop=(),  # src/ layout: nothing to shadow the wheel
    timeout=20.0,  # their own per-test timeout
    budget=20 * 60.0,
    jobs=1,  # two minutes
    deselect=(
        Deselect(
            "anyio_backend_not",
            "asyncio",
            "another backend or loop than asyncio's default (trio, asyncio+uvloop, "
            "asyncio+eager): not the loop under test",
        ),
        # anyio marks `network` whole classes that only use the loopback (TCP listeners, UDP
        # sockets: loop tests that matter here): they run; these two need more.
        Deselect(
            "nodeid",
            "tests/test_sockets.py::test_getaddrinfo",
            f"resolves faß.de, which {NETWORK}",
        ),
        Deselect(
            "nodeid",
            "tests/test_lazyimport.py::test_sourceless_install",
            "builds anyio from its source into a new venv (pip, build deps from a registry): "
            "packaging, no loop",
        ),
        *(
            ()
            if LOCALHOST_IPV6
            else (
                Deselect(
                    "regex",
                    r"^tests/test_sockets\.py::"
                    r"(TestTCPStream|TestTCPListener|TestUDPSocket|TestConnectedUDPSocket)::"
                    r"(.*[\[-](ipv6|dualstack|multi)[\]-]"
                    r"|test_tcp_listener_same_port\[asyncio-localhost-"
                    r"|test_tcp_listener_(retry_after_partial_failure|total_bind_failure)\[)",
                    "`localhost` has no IPv6 address on this machine (/etc/hosts), and these "
                    "bind or resolve it as IPv6 or count two addresses for it (they fail on "
                    "every loop, and the sockets they leak make later tests fail at random)",
                ),
            )
        ),
    ),
)

AIOHTTP = Suite(
    name="aiohttp",
    project="aiohttp",
    version="3.14.5",
    # The wheel, and the test deps of requirements/test-common*.in (pinned by their
    # requirements/test.txt), less what only CI jobs use: pytest-xdist, pytest-cov,
    # pytest-codspeed (benchmarks), python-on-whales (Autobahn in docker), mypy.
    install=(
        "aiohttp==3.14.5",
        "aiodns",
        "blockbuster",
        "brotli",
        "backports.zstd",
        "coverage",  # not to measure: their filterwarnings names one of its warnings
        "freezegun",
        "gunicorn",
        "isal",
        "proxy.py",
        "pytest",
        "pytest-mock",
        "pytest-timeout",
        "trustme",
        "zlib_ng",
    ),
    constraints="requirements/test.txt",
    # Their addopts run xdist, pytest-cov and doctests of every module: replaced by these
    # (their marker selection kept, as a deselection below, so the report counts it).
    pytest_args=("-o", "addopts=", "--strict-markers"),
    paths=("tests",),
    drop=("aiohttp",),
    timeout=60.0,
    budget=45 * 60.0,
    jobs=2,  # 5,600 tests: about 25 minutes a loop in one process
    deselect=(
        *(
            Deselect(
                "marker",
                m,
                f"marked `{m}`: left out by aiohttp's own pytest.ini (`-m 'not {m}'`)",
            )
            for m in ("dev_mode", "autobahn", "internal")
        ),
        *(
            (
                Deselect(
                    "regex",
                    r"^tests/test_web_urldispatcher\.py::"
                    r"test_static_(directory|file)_without_read_permission\[",
                    "run as root here, where a file without read permission can still be "
                    "read (they fail on every loop)",
                ),
            )
            if os.geteuid() == 0
            else ()
        ),
    ),
)

SUITES: dict[str, Suite] = {s.name: s for s in (UVLOOP, ANYIO, AIOHTTP)}
