"""Runs each composed CPython test in its own process, a few at a time, each with a timeout.

The parent lists the test ids, then starts one worker per test: ``python -m aio_cpython
--worker ID --loop NAME`` with this package's parent directory (``tests/``) on ``PYTHONPATH``,
so it runs the same from the source tree and from the copy ``make test-wheels`` makes, and
with its own scratch directory as cwd (CPython's tests write ``os_helper.TESTFN`` there). The
worker starts a new session: a test that outlives its timeout is killed with its whole
process group (children it spawned too), by the worker's pid, and counted as a HANG, with the
stacks faulthandler dumped just before. The run goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import importlib
import json
import os
import select
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from ._cases import LoopFactory, compose

PACKAGE = Path(__file__).resolve().parent
#: The marker line a worker prints last, followed by its result as JSON.
MARKER = "@@aio_cpython-result "
LOOPS = ("fdkit", "asyncio", "uvloop")
STATUSES = ("pass", "fail", "error", "skip", "hang")


@dataclass(frozen=True)
class Result:
    id: str
    status: str  # one of STATUSES
    seconds: float
    detail: str  # one line: the reason for anything but a pass
    output: str  # everything the worker printed (traceback, faulthandler's stacks)
    #: The classes of the loops the test made through the factory or the policy, with the
    #: engine in brackets where the loop names one (``fdkit.aio._loop.EventLoop[io_uring]``).
    loops: tuple[str, ...] = ()


# --- the loops --------------------------------------------------------------------------------


def loop_available(name: str) -> str | None:
    """``None`` when the loop ``name`` can run here, else why not."""
    if name not in LOOPS:
        return f"unknown loop {name!r} (one of {', '.join(LOOPS)})"
    if name == "uvloop":
        try:
            importlib.import_module("uvloop")
        except ImportError as e:
            return f"uvloop is not importable here ({e})"
    return None


# asyncio's Unix policy class and the setter, without the names 3.14 deprecates (whose use
# would only print DeprecationWarnings into every test's output); CPython's own tests do the
# same.
_DEFAULT_POLICY: Any = importlib.import_module("asyncio.unix_events")._UnixDefaultEventLoopPolicy
_set_policy: Callable[[Any], None] = getattr(
    asyncio.events, "_set_event_loop_policy", asyncio.set_event_loop_policy
)


def loop_spec(name: str) -> tuple[LoopFactory, Callable[[], asyncio.AbstractEventLoopPolicy]]:
    """The loop factory and the event loop policy (for the subprocess tests) of ``name``."""
    if name == "fdkit":
        import fdkit.aio

        return fdkit.aio.new_event_loop, fdkit.aio.EventLoopPolicy
    if name == "asyncio":
        # Exactly CPython's EPollEventLoopTests loop.
        def new_asyncio() -> asyncio.AbstractEventLoop:
            return asyncio.SelectorEventLoop(selectors.EpollSelector())

        return new_asyncio, _DEFAULT_POLICY
    if name == "uvloop":
        uvloop: Any = importlib.import_module("uvloop")

        # test_utils.TestCase.close_loop, run after every test, reads ``_default_executor``,
        # a private attribute uvloop's loop lacks: provided (as None: close() shuts uvloop's
        # own executor down), or nearly every test would error on it.
        class UvloopLoop(uvloop.Loop):  # type: ignore[misc]
            _default_executor = None

        def new_uvloop() -> asyncio.AbstractEventLoop:
            loop: asyncio.AbstractEventLoop = UvloopLoop()
            return loop

        # uvloop's own policy has no child watcher API, which the subprocess mixin calls.
        class UvloopPolicy(_DEFAULT_POLICY):  # type: ignore[misc]
            def _loop_factory(self) -> asyncio.AbstractEventLoop:
                return new_uvloop()

        return new_uvloop, UvloopPolicy
    raise ValueError(loop_available(name))


def engine_of(name: str, env: Mapping[str, str] | None = None) -> str:
    """What runs underneath: fdkit's ``loop.engine`` (``FDKIT_AIO_ENGINE`` in ``env``, the
    workers' extra environment, first), else the loop's name."""
    if name != "fdkit":
        return name
    import fdkit.aio

    forced = (env or {}).get("FDKIT_AIO_ENGINE")
    if forced:
        return fdkit.aio._loop.engine_name(forced, "FDKIT_AIO_ENGINE") or "epoll"
    return fdkit.aio.engine_available()


# --- the worker (one test, in its own process) ------------------------------------------------


def worker(test_id: str, loop_name: str, timeout: float) -> int:
    """Runs one test on ``loop_name`` and prints its result after ``MARKER``."""
    # Just before the parent kills a hung test, show where every thread is.
    faulthandler.enable()
    faulthandler.dump_traceback_later(max(timeout - 2.0, timeout * 0.8), exit=False)
    factory, policy = loop_spec(loop_name)
    # The class of every loop the test got from the factory or the policy: the parent checks
    # that the loop under test is the one that ran.
    made: set[str] = set()

    def record(loop: asyncio.AbstractEventLoop) -> asyncio.AbstractEventLoop:
        name = f"{type(loop).__module__}.{type(loop).__qualname__}"
        engine = getattr(loop, "engine", None)  # fdkit's loop says what it runs on
        made.add(f"{name}[{engine}]" if engine else name)
        return loop

    class RecordingPolicy(policy):  # type: ignore[valid-type,misc]
        def new_event_loop(self) -> asyncio.AbstractEventLoop:
            return record(super().new_event_loop())

    _set_policy(RecordingPolicy())
    module, _, method = test_id.partition(".")
    case = compose(lambda: record(factory()))[module](method)
    result = unittest.TextTestRunner(stream=sys.stderr, verbosity=2).run(unittest.TestSuite([case]))
    status, detail = "pass", ""
    if result.errors:
        status, detail = "error", _last_line(result.errors[0][1])
    elif result.failures:
        status, detail = "fail", _last_line(result.failures[0][1])
    elif result.unexpectedSuccesses:
        status, detail = "fail", "unexpected success"
    elif result.skipped:
        status, detail = "skip", result.skipped[0][1]
    sys.stderr.flush()
    print(
        MARKER + json.dumps({"status": status, "detail": detail, "loops": sorted(made)}), flush=True
    )
    faulthandler.cancel_dump_traceback_later()
    return 0


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


# --- the parent -------------------------------------------------------------------------------


class Runner:
    """Starts the workers and kills what is left of them, by pid, on a timeout or an abort."""

    def __init__(
        self, loop_name: str, timeout: float, env: Mapping[str, str] | None = None
    ) -> None:
        self.loop_name = loop_name
        self.timeout = timeout
        #: Set in each worker's environment (``FDKIT_AIO_ENGINE`` picks fdkit's engine).
        self.env = dict(env or {})
        self._live: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self.aborted = False

    def command(self, test_id: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            PACKAGE.name,
            "--worker",
            test_id,
            "--loop",
            self.loop_name,
            "--timeout",
            str(self.timeout),
        ]

    def spawn(self, test_id: str, argv: list[str] | None = None) -> Result:
        """Runs ``argv`` (the worker for ``test_id`` by default) and reads its result."""
        env = {**os.environ, **self.env}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(PACKAGE.parent), env.get("PYTHONPATH", "")) if p
        )
        env.pop("PYTEST_CURRENT_TEST", None)
        scratch = tempfile.mkdtemp(prefix="aio-cpython-")
        start = time.monotonic()
        try:
            with self._lock:
                if self.aborted:
                    return Result(test_id, "skip", 0.0, "run aborted", "")
                proc = subprocess.Popen(
                    argv or self.command(test_id),
                    cwd=scratch,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                self._live[proc.pid] = proc
            try:
                raw, hung = self._wait(proc)
            finally:
                with self._lock:
                    self._live.pop(proc.pid, None)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        seconds = time.monotonic() - start
        output = raw.decode(errors="replace")
        return _interpret(test_id, output, proc.returncode, hung, seconds, self.timeout)

    def _wait(self, proc: subprocess.Popen[bytes]) -> tuple[bytes, bool]:
        """Waits for the worker to end (at most the timeout), then kills its process group:
        the worker itself if it hung, whatever it left running if it did not. Its output, and
        whether it hung.

        The group is killed while the worker is still unreaped (a zombie at worst), so its pid,
        which is the group's id, cannot have gone to another process meanwhile.
        """
        assert proc.stdout is not None
        out = proc.stdout
        chunks: list[bytes] = []
        reader = threading.Thread(target=lambda: chunks.append(out.read()), daemon=True)
        reader.start()
        try:
            pidfd = os.pidfd_open(proc.pid)
        except OSError:  # no pidfds (Linux < 5.3): wait by reaping, then kill what is left
            pidfd = -1
        if pidfd >= 0:
            try:
                poller = select.poll()
                poller.register(pidfd, select.POLLIN)  # readable once the process has exited
                hung = not poller.poll(self.timeout * 1000)
                self._kill(proc)
            finally:
                os.close(pidfd)
            proc.wait()
        else:
            try:
                proc.wait(timeout=self.timeout)
                hung = False
            except subprocess.TimeoutExpired:
                hung = True
            self._kill(proc)
            proc.wait()
        # EOF once the group is gone; a process that left the group (setsid) and kept the pipe
        # open would hold it: the output is then what came before.
        reader.join(timeout=5.0)
        if not reader.is_alive():
            out.close()
        return b"".join(chunks), hung

    def _kill(self, proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()

    def abort(self) -> None:
        """Kills every running worker (Ctrl-C); tests not started yet are not started."""
        with self._lock:
            self.aborted = True
            live = list(self._live.values())
        for proc in live:
            self._kill(proc)


def _interpret(
    test_id: str, output: str, rc: int | None, hung: bool, seconds: float, timeout: float
) -> Result:
    reported: dict[str, Any] | None = None
    for line in output.splitlines():
        if line.startswith(MARKER):
            reported = json.loads(line[len(MARKER) :])
    if hung:
        where = "after it finished (at exit)" if reported else "while running"
        return Result(test_id, "hang", seconds, f"killed after {timeout:g} s, {where}", output)
    if reported is None:
        why = f"killed by signal {-rc}" if rc is not None and rc < 0 else f"exit status {rc}"
        return Result(test_id, "error", seconds, f"worker died without a result ({why})", output)
    loops = tuple(reported.get("loops", ()))
    if rc != 0 and reported["status"] == "pass":
        return Result(test_id, "error", seconds, f"passed, then exit status {rc}", output, loops)
    return Result(test_id, reported["status"], seconds, reported["detail"], output, loops)


def run_all(
    loop_name: str,
    ids: Iterable[str],
    *,
    jobs: int = 3,
    timeout: float = 30.0,
    on_result: Callable[[Result], None] | None = None,
    env: Mapping[str, str] | None = None,
) -> list[Result]:
    """Runs every test of ``ids`` on ``loop_name``, ``env`` set in each worker's environment;
    the results in the order of ``ids``."""
    why = loop_available(loop_name)
    if why:
        raise ValueError(why)
    ids = list(ids)
    runner = Runner(loop_name, timeout, env)
    results: dict[str, Result] = {}

    def one(test_id: str) -> None:
        res = runner.spawn(test_id)
        results[test_id] = res
        if on_result is not None:
            on_result(res)

    pool = ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="aio-cpython")
    try:
        for fut in [pool.submit(one, t) for t in ids]:
            fut.result()
    except BaseException:
        runner.abort()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return [results[t] for t in ids]


def report_line(res: Result, known: dict[str, str]) -> str:
    line = f"{res.status.upper():5} {res.seconds:6.2f}s  {res.id}"
    if res.status != "pass" and res.detail:
        line += f"  -- {res.detail[:160]}"
    if res.id in known:
        line += f"  [known: {known[res.id]}]"
    return line


def summary(
    results: list[Result],
    loop_name: str,
    seconds: float,
    jobs: int,
    timeout: float,
    env: Mapping[str, str] | None = None,
) -> str:
    counts = {s: sum(r.status == s for r in results) for s in STATUSES}
    v = sys.version_info
    engine = engine_of(loop_name, env)
    return (
        f"{loop_name} (engine {engine}) on CPython {v.major}.{v.minor}.{v.micro}: "
        f"{len(results)} tests, "
        + ", ".join(f"{counts[s]} {s}" for s in STATUSES)
        + f" in {seconds:.1f} s (-j {jobs}, timeout {timeout:g} s)"
    )


def print_results(results: list[Result], out: TextIO, *, verbose: bool) -> None:
    """The output of every test that did not pass (or of all with ``verbose``)."""
    for res in results:
        if verbose or res.status in ("fail", "error", "hang"):
            out.write(f"\n===== {res.status.upper()} {res.id} =====\n{res.output.rstrip()}\n")
