"""Child programs for the corner tests (``tests/test_aio_corners*.py``): one scenario, one fresh
Python, run on asyncio's loop (the oracle) and on fdkit's loop with one engine, and what each
program observed compared.

A corner scenario runs in a child of its own because on a wrong loop it may hang, spin a CPU,
grow without bound or abort the process: the child is bounded in time (a hang fails the test,
saying "hung") and in address space (a runaway queue or buffer fails in the child, not the
machine). A program prints one JSON line, its record, last on its stdout.
"""

from __future__ import annotations

import json
import signal
import subprocess
from typing import Any

import pytest

from helpers.aio_parity import ASYNCIO, NEW_LOOP, FdkitEngine, Kind, fdkit_kind, run_program

#: How long one corner program may run before it counts as hung (each takes well under 2 s).
CHILD_TIMEOUT = 10.0

#: Source a corner program starts with (after :data:`NEW_LOOP`): ``KIND`` (``"asyncio"``,
#: ``"epoll"`` or ``"io_uring"``), ``ARGS`` (the scenario's arguments), ``loop_class()`` (the
#: class a program subclasses or patches: ``asyncio.SelectorEventLoop``, or
#: ``fdkit.aio.EventLoop``, whose engine ``FDKIT_AIO_ENGINE`` picks in the child), ``err(exc)``
#: (an exception as ``[type name, message]``, addresses masked), ``masked(text)`` and
#: ``emit(record)``.
PRELUDE = (
    NEW_LOOP
    + """
import json, os, re, resource
_AS = 8 << 30  # a runaway queue or buffer fails here, not the machine
resource.setrlimit(resource.RLIMIT_AS, (_AS, _AS))
KIND = sys.argv[1]
ARGS = sys.argv[2:]

def loop_class():
    if KIND == "asyncio":
        return asyncio.SelectorEventLoop
    import fdkit.aio
    assert os.environ["FDKIT_AIO_ENGINE"] == KIND
    return fdkit.aio.EventLoop

def on_its_engine(loop):
    return KIND == "asyncio" or loop.engine == KIND

def masked(text):
    return re.sub(r"0x[0-9a-f]+", "0x?", str(text))

def err(exc):
    return None if exc is None else [type(exc).__name__, masked(exc)]

def emit(record):
    print(json.dumps(record, sort_keys=True))

def run_outcome(loop, coro):  # what run_until_complete(coro) came to: "returned", or its error
    try:
        loop.run_until_complete(coro)
    except BaseException as exc:
        return err(exc)
    return "returned"
"""
)


def _who(kind: Kind) -> str:
    return "asyncio (the oracle)" if kind == ASYNCIO else f"fdkit.aio on {kind}"


def record(kind: Kind, code: str, *args: str, timeout: float = CHILD_TIMEOUT) -> Any:
    """The record ``code`` (which starts with :data:`PRELUDE`) printed, run in a child on
    ``kind``'s loop; the test fails saying "hung" past ``timeout`` s (the child is killed), or
    how the child died (an exit status, a signal) with its stderr."""
    wrapper = None if kind == ASYNCIO else ["env", f"FDKIT_AIO_ENGINE={kind.name}"]
    try:
        r = run_program(kind, code, *args, wrapper=wrapper, timeout=timeout)
    except subprocess.TimeoutExpired:
        r = None  # failed outside the except block: the child's source is no help here
    if r is None:
        pytest.fail(f"{_who(kind)}: hung: {list(args)} did not exit within {timeout:g} s")
    if r.returncode != 0:
        if r.returncode < 0:
            how = f"was killed by {signal.Signals(-r.returncode).name}"
        else:
            how = f"exited {r.returncode}"
        err = r.stderr if len(r.stderr) <= 3000 else f"{r.stderr[:1500]}\n...\n{r.stderr[-1500:]}"
        pytest.fail(f"{_who(kind)}: {list(args)} {how}; its stderr:\n{err}")
    lines = r.stdout.strip().splitlines()
    assert lines, f"{_who(kind)}: {list(args)} printed no record; stderr:\n{r.stderr[-3000:]}"
    return json.loads(lines[-1])


def compare(
    engine: FdkitEngine, code: str, *args: str, twice: bool = False, timeout: float = CHILD_TIMEOUT
) -> tuple[Any, Any]:
    """``(asyncio's record, fdkit's record)`` of ``code`` run with ``args`` on each loop, each
    in a child of its own. ``twice``: asyncio's run twice, and the test fails unless both
    records are equal (a scenario where timing could matter must be deterministic there)."""
    kind = fdkit_kind(engine)  # skips before anything runs where the engine cannot
    oracle = record(ASYNCIO, code, *args, timeout=timeout)
    if twice:
        again = record(ASYNCIO, code, *args, timeout=timeout)
        assert again == oracle, f"asyncio's own record differs between two runs: {oracle} {again}"
    return oracle, record(kind, code, *args, timeout=timeout)
