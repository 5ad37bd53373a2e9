"""fdkit.aio's module-level calls, as uvloop's users reach for them: ``run`` takes what
``uvloop.run`` takes (``loop_factory``, ``debug``, the rest for ``asyncio.run``) and behaves as
``asyncio.run``; ``install()`` makes asyncio's policy give fdkit's loops, warning where
asyncio deprecates policies; ``dir(fdkit.aio)`` lists the public names only."""

from __future__ import annotations

import asyncio
import functools
import inspect
import subprocess
import sys

import pytest

import fdkit.aio
from helpers.aio import PYTHON, python_env


async def _loop_info() -> tuple[str, str, bool]:
    loop = asyncio.get_running_loop()
    return type(loop).__name__, loop.engine, loop.get_debug()  # type: ignore[attr-defined]


def test_dir_lists_the_public_names_only() -> None:
    names = dir(fdkit.aio)
    assert names == sorted(fdkit.aio.__all__)
    for name in names:
        assert not name.startswith("_"), name
        assert getattr(fdkit.aio, name) is not None
    for helper in ("Any", "TypeVar", "asyncio", "sys", "warnings", "Coroutine"):
        assert helper not in names


def test_run_on_the_default_loop_and_with_a_loop_factory() -> None:
    name, engine, debug = fdkit.aio.run(_loop_info())
    assert (name, engine) in (("UringEventLoop", "io_uring"), ("EpollEventLoop", "epoll"))
    assert debug is False
    epoll = functools.partial(fdkit.aio.EventLoop, engine="epoll")
    assert fdkit.aio.run(_loop_info(), loop_factory=epoll, debug=True) == (
        "EpollEventLoop",
        "epoll",
        True,
    )


def test_run_refuses_a_loop_not_fdkits_and_closes_it() -> None:
    made: list[asyncio.AbstractEventLoop] = []

    def stdlib_loop() -> asyncio.AbstractEventLoop:
        made.append(asyncio.SelectorEventLoop())
        return made[-1]

    coro = _loop_info()
    with pytest.raises(TypeError, match=r"made a _UnixSelectorEventLoop, not an fdkit\.aio\."):
        fdkit.aio.run(coro, loop_factory=stdlib_loop)
    coro.close()
    assert made[0].is_closed()


def test_run_passes_the_other_arguments_on_as_asyncio_run_would() -> None:
    coro = _loop_info()
    with pytest.raises(TypeError) as fdkit_error:
        fdkit.aio.run(coro, no_such_argument=1)
    coro.close()
    if sys.version_info >= (3, 12):
        coro = _loop_info()
        with pytest.raises(TypeError) as asyncio_error:
            asyncio.run(coro, no_such_argument=1)  # type: ignore[call-arg]
        coro.close()
        assert str(fdkit_error.value) == str(asyncio_error.value)
    else:
        assert "no_such_argument" in str(fdkit_error.value)


def test_run_inside_a_running_loop_is_asyncios_error() -> None:
    async def nested() -> str:
        inner = _loop_info()
        try:
            fdkit.aio.run(inner)
        except RuntimeError as e:
            return str(e)
        finally:
            inner.close()
        return "no error"

    assert fdkit.aio.run(nested()) == asyncio.run(nested())


def test_run_has_uvloop_runs_signature() -> None:
    uvloop = pytest.importorskip("uvloop")
    ours = inspect.signature(fdkit.aio.run).parameters
    theirs = inspect.signature(uvloop.run).parameters
    assert list(ours) == list(theirs)
    assert [p.kind for p in ours.values()] == [p.kind for p in theirs.values()]


INSTALL = """
import asyncio, sys, warnings
warnings.simplefilter("error")  # any warning fails, but the one expected from 3.14
import fdkit.aio
if sys.version_info >= (3, 14):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fdkit.aio.install()
    assert [w.category for w in caught] == [DeprecationWarning], caught
    assert caught[0].filename == "<string>", caught[0].filename  # the caller's line
    print("warned:", caught[0].message)
else:
    fdkit.aio.install()
loop = asyncio.new_event_loop()
print(type(loop).__name__)
loop.close()
async def main():
    return type(asyncio.get_running_loop()).__name__
print(asyncio.run(main()))
"""


def test_install_makes_asyncios_loops_fdkits() -> None:
    """In a child process (the policy is process-wide): after install(), asyncio's own
    new_event_loop() and run() make fdkit loops; no warning before Python 3.14, one
    DeprecationWarning at the caller from 3.14 (asyncio deprecates policies there)."""
    done = subprocess.run(
        [PYTHON, "-c", INSTALL],
        capture_output=True,
        text=True,
        timeout=60,
        env=python_env(),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    if sys.version_info >= (3, 14):
        assert lines.pop(0).startswith("warned: fdkit.aio.install() sets an asyncio event loop")
    assert lines[0] in ("UringEventLoop", "EpollEventLoop"), done.stdout
    assert lines[1] == lines[0]
