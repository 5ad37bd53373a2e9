"""How fdkit.aio picks its engine: once, by class; epoll unless io_uring is asked for; one
spelling of each name; an unknown ``FDKIT_AIO_ENGINE`` refused; io_uring asked for where it
cannot run refused with the reason, never a silent fallback; importing never touches the names
that later Pythons deprecate."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

import fdkit.aio
from fdkit.aio import EpollEventLoop, EventLoop, UringEventLoop
from fdkit.aio._loop import DEFAULT_REASON
from helpers import run_python_without_uring
from helpers.aio import URING_WHY
from helpers.aio import needs_uring_engine as needs_uring


def test_a_loop_nobody_chose_an_engine_for_runs_on_epoll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FDKIT_AIO_ENGINE", raising=False)
    for make in (EventLoop, fdkit.aio.new_event_loop, fdkit.aio.EventLoopPolicy().new_event_loop):
        loop = make()
        try:
            assert type(loop) is EpollEventLoop
            assert (loop.engine, loop.engine_reason) == ("epoll", DEFAULT_REASON)
        finally:
            loop.close()
    assert fdkit.aio.engine_available() == "epoll"


def test_epoll_is_a_class_of_its_own() -> None:
    loop = EventLoop(engine="epoll")
    try:
        assert type(loop) is EpollEventLoop
        assert isinstance(loop, EventLoop)
        assert isinstance(loop, asyncio.SelectorEventLoop)
        assert loop.engine == "epoll"
        assert loop.engine_reason == "engine='epoll' was asked for"
    finally:
        loop.close()


@needs_uring
@pytest.mark.parametrize("name", ["io_uring", "uring"])
def test_io_uring_and_its_alias_pick_the_uring_class(
    name: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FDKIT_AIO_ENGINE", raising=False)
    loop = EventLoop(engine=name)
    try:
        assert type(loop) is UringEventLoop
        assert loop.engine == "io_uring"
        assert loop.engine_reason is None
    finally:
        loop.close()


@needs_uring
@pytest.mark.parametrize(
    ("env", "cls"),
    [("io_uring", UringEventLoop), ("uring", UringEventLoop), ("epoll", EpollEventLoop)],
)
def test_the_environment_variable_takes_the_same_names(
    env: str, cls: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FDKIT_AIO_ENGINE", env)
    loop = EventLoop()
    try:
        assert type(loop) is cls
    finally:
        loop.close()
    assert fdkit.aio.engine_available() == cls.engine


@pytest.mark.parametrize("bad", ["epol", "IO_URING", "auto", ""])
def test_an_unknown_engine_is_a_value_error_naming_it(
    bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FDKIT_AIO_ENGINE", raising=False)
    with pytest.raises(ValueError, match=f"engine must be .* not {bad!r}"):
        EventLoop(engine=bad)
    if bad:
        monkeypatch.setenv("FDKIT_AIO_ENGINE", bad)
        with pytest.raises(ValueError, match=f"^FDKIT_AIO_ENGINE must be .* not {bad!r}$"):
            fdkit.aio.new_event_loop()


def test_a_subclass_of_eventloop_keeps_its_methods_and_gets_an_engine() -> None:
    class Mine(EventLoop):
        def hello(self) -> str:
            return f"hello from {self.engine}"

    loop = Mine(engine="epoll")
    try:
        assert isinstance(loop, Mine)
        assert isinstance(loop, EpollEventLoop)
        assert loop.hello() == "hello from epoll"
        assert type(loop).__name__ == "Mine"
    finally:
        loop.close()
    again = Mine(engine="epoll")
    try:
        assert type(again) is type(loop)  # the mixed class is made once
    finally:
        again.close()


def test_engine_classes_refuse_the_other_engine() -> None:
    with pytest.raises(ValueError, match="runs on epoll"):
        EpollEventLoop(engine="io_uring")
    with pytest.raises(ValueError, match="runs on io_uring"):
        UringEventLoop(engine="epoll")


def test_engine_unavailable_names_engines_as_the_loop_does() -> None:
    assert fdkit.aio.engine_unavailable("epoll") is None
    assert fdkit.aio.engine_unavailable("uring") == fdkit.aio.engine_unavailable("io_uring")
    with pytest.raises(ValueError, match=r"engine must be .* not 'kqueue'"):
        fdkit.aio.engine_unavailable("kqueue")
    for bad in (None, 6, b"epoll"):
        with pytest.raises(ValueError, match=rf"engine must be .* not {bad!r}$"):
            fdkit.aio.engine_unavailable(bad)  # type: ignore[arg-type]


_DENIED = """
import logging, os, sys
import fdkit.aio
fmt = "%(name)s %(levelname)s %(message)s"
logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format=fmt)
for _ in range(3):
    loop = fdkit.aio.new_event_loop()
    print("engine", loop.engine, loop.engine_reason == fdkit.aio._loop.DEFAULT_REASON)
    loop.close()
os.environ["FDKIT_AIO_ENGINE"] = "io_uring"
try:
    fdkit.aio.new_event_loop()
except OSError as e:
    print("refused", e.strerror)
"""


def test_where_io_uring_is_denied_the_default_loop_is_silent_and_asking_for_it_is_refused() -> None:
    """Under a seccomp filter that denies io_uring (as Docker's default profile does), loops
    made without naming an engine run on epoll as anywhere else, and nothing is logged; a loop
    asked for by ``FDKIT_AIO_ENGINE=io_uring`` is an ``OSError`` with the reason."""
    r = run_python_without_uring(_DENIED)
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if not line.startswith("asyncio DEBUG")]
    assert lines[:3] == ["engine epoll True"] * 3, lines
    assert len(lines) == 4, lines  # nothing from fdkit's loggers
    assert lines[3].startswith("refused io_uring engine unavailable: io_uring_setup: ENOSYS"), lines


_DEPRECATED_POLICY_NAMES = """
import asyncio, sys, warnings
# What Python 3.14 deprecates (and 3.16 removes): touching any of these from here on warns,
# and -W error makes the warning an exception. On 3.14 and later asyncio's own names warn
# already; before, they are poisoned here as 3.14 does.
NAMES = ["AbstractEventLoopPolicy", "DefaultEventLoopPolicy", "get_event_loop_policy",
         "set_event_loop_policy"]
if sys.version_info < (3, 14):
    saved = {n: getattr(asyncio, n) for n in NAMES}
    for n in NAMES:
        delattr(asyncio, n)
    def __getattr__(name):
        if name in saved:
            warnings.warn(f"asyncio.{name} is deprecated", DeprecationWarning, stacklevel=2)
            return saved[name]
        raise AttributeError(name)
    asyncio.__getattr__ = __getattr__
import fdkit.aio
loop = fdkit.aio.new_event_loop()
loop.close()
fdkit.aio.run(asyncio.sleep(0))
with asyncio.Runner(loop_factory=fdkit.aio.new_event_loop) as runner:
    runner.run(asyncio.sleep(0))
policy = fdkit.aio.EventLoopPolicy()
loop = policy.new_event_loop()
print(type(loop).__name__ in ("UringEventLoop", "EpollEventLoop"))
loop.close()
try:
    asyncio.set_event_loop_policy(policy)
except DeprecationWarning as e:
    print("set:", e)
"""


def test_fdkit_aio_touches_no_name_python_3_14_deprecates() -> None:
    """Under ``-W error``, importing fdkit.aio, making a loop, running a coroutine with
    ``fdkit.aio.run`` and with a ``Runner``'s ``loop_factory``, and making and using
    ``EventLoopPolicy`` never reach asyncio's deprecated policy names (3.14's own warnings,
    poisoned here before 3.14); setting the policy is the program's deprecated call, and
    asyncio's ``set_event_loop_policy`` warns of it as it does for any policy."""
    r = subprocess.run(
        [sys.executable, "-W", "error", "-c", _DEPRECATED_POLICY_NAMES],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "True"
    assert r.stdout.splitlines()[1].startswith("set: "), r.stdout
    assert "set_event_loop_policy" in r.stdout


def test_the_policy_still_makes_fdkit_loops() -> None:
    policy = fdkit.aio.EventLoopPolicy()
    loop = policy.new_event_loop()
    try:
        assert isinstance(loop, EventLoop)
    finally:
        loop.close()


def test_doctor_require_io_uring_asks_whether_the_io_uring_engine_can_run() -> None:
    """``--require io_uring`` holds where fdkit.aio's io_uring engine can run, whichever engine
    the default loop gets; under a filter that denies io_uring it exits 1 and says why."""
    args = ["doctor", "-q", "--require", "io_uring"]
    denied = run_python_without_uring(f"import sys, fdkit.cli\nsys.exit(fdkit.cli.main({args!r}))")
    assert denied.returncode == 1, denied
    assert "io_uring is required and unavailable: io_uring_setup: ENOSYS" in denied.stderr
    if URING_WHY is None:
        for engine in ("epoll", "io_uring"):
            env = {**os.environ, "FDKIT_AIO_ENGINE": engine}
            ok = subprocess.run(
                [sys.executable, "-m", "fdkit", *args],
                capture_output=True,
                text=True,
                timeout=60,
                env=env,
            )
            assert ok.returncode == 0, ok
