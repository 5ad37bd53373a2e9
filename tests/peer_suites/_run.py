"""Runs a suite's own pytest on one loop, in the suite's venv, and survives hangs and crashes.

One pytest process at a time per shard (``-j`` shards, split by test file), started in a new
session. The plugin appends a flushed line when a test starts and when it ends, so the parent
always knows which test is running. A test that outlives the per-test timeout is stopped by
pytest-timeout's thread method (stacks dumped, the process exits), or, if even that cannot
act, killed with its process group once nothing has moved for the timeout plus a grace; either
way it counts as **hung** and pytest starts again on the tests not yet run. A test during which
the process dies counts as an error (``crashed``). Past the run's overall budget the rest is
cut and counted as not run, so no suite can keep ``make peer-tests`` waiting for ever.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ._env import PLUGIN_DIR, SuiteEnv

#: The outcomes a test can have, in the order the counts are printed.
OUTCOMES = ("passed", "failed", "error", "skipped", "hung", "not run")
#: Seconds past the per-test timeout before the parent kills a process that shows no progress.
GRACE = 30.0
#: Seconds a pytest process may take to start and collect before it counts as stuck.
COLLECT_LIMIT = 600.0
#: The banner pytest-timeout's thread method prints before it ends the process.
TIMEOUT_BANNER = "+ Timeout +"


@dataclass(frozen=True)
class TestResult:
    nodeid: str
    outcome: str  # one of OUTCOMES
    detail: str = ""  # one line: why, for anything but a pass
    seconds: float = 0.0
    loops: int = 0  # fdkit loops the test made (0 on asyncio's loop)

    __test__ = False  # not a pytest test class, whatever its name


@dataclass
class Collection:
    """What the suite holds once the deselections are applied (the same for every loop)."""

    nodeids: list[str]
    deselected: dict[str, list[str]]  # reason -> node ids
    errors: list[tuple[str, str]]  # (node id, detail) of files pytest could not collect


@dataclass
class RunResult:
    suite: str
    loop: str
    results: dict[str, TestResult] = field(default_factory=dict)
    seconds: float = 0.0
    restarts: int = 0  # pytest processes started again after a hang or a crash
    cut: bool = False  # the overall budget ran out
    fdkit_loops: int = 0

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(OUTCOMES, 0)
        for r in self.results.values():
            counts[r.outcome] += 1
        return counts

    def as_json(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "loop": self.loop,
            "seconds": round(self.seconds, 1),
            "restarts": self.restarts,
            "cut": self.cut,
            "fdkit_loops": self.fdkit_loops,
            "counts": self.counts(),
            "results": [asdict(r) for r in self.results.values()],
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RunResult:
        run = cls(
            suite=doc["suite"],
            loop=doc["loop"],
            seconds=doc["seconds"],
            restarts=doc["restarts"],
            cut=doc["cut"],
            fdkit_loops=doc["fdkit_loops"],
        )
        run.results = {r["nodeid"]: TestResult(**r) for r in doc["results"]}
        return run


class _Tail:
    """Reads the complete lines a results file has gained since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def read(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self.partial + data
        *lines, self.partial = data.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]


def _pytest_cmd(env: SuiteEnv, timeout: float, extra: Iterable[str]) -> list[str]:
    # -P: the sdist's own source package (uvloop/, aiohttp/ beside tests/) must not shadow the
    # installed wheel, as it would with the working directory first on sys.path.
    return [
        str(env.python),
        "-P",
        "-m",
        "pytest",
        "-p",
        "fdkit_peer_plugin",
        "-p",
        "no:cacheprovider",
        "--continue-on-collection-errors",
        "--timeout",
        f"{timeout:g}",
        "-o",
        "timeout_method=thread",
        "-rfE",
        *env.suite.pytest_args,
        *extra,
        *env.suite.paths,
    ]


def _child_env(env: SuiteEnv, loop: str, results: Path, config: Path) -> dict[str, str]:
    child = dict(os.environ)
    for var in ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_ADDOPTS", "FDKIT_AIO_ENGINE"):
        child.pop(var, None)
    child.update(
        PYTHONPATH=str(PLUGIN_DIR),
        VIRTUAL_ENV=str(env.python.parent.parent),
        PATH=f"{env.python.parent}{os.pathsep}{child.get('PATH', '')}",
        PEER_SUITE=env.suite.name,
        PEER_LOOP=loop,
        PEER_RESULTS=str(results),
        PEER_CONFIG=str(config),
        PYTHONFAULTHANDLER="1",
    )
    if loop == "epoll":
        # Loops a test makes by other ways than the hook (fdkit.aio.new_event_loop, a policy)
        # then use the engine under test too.
        child["FDKIT_AIO_ENGINE"] = "epoll"
    return child


def _write_config(path: Path, env: SuiteEnv, only: Path | None) -> None:
    doc = {"deselect": [d.as_json() for d in env.suite.deselect], "only": str(only or "")}
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")


def collect(env: SuiteEnv, workdir: Path, extra: Iterable[str] = ()) -> Collection:
    """The suite's test ids after the deselections (pytest --collect-only, asyncio's loop)."""
    workdir.mkdir(parents=True, exist_ok=True)
    results, config, log = (
        workdir / "collect.jsonl",
        workdir / "config.json",
        workdir / "collect.log",
    )
    results.unlink(missing_ok=True)
    _write_config(config, env, None)
    cmd = _pytest_cmd(env, env.suite.timeout, ["--collect-only", "-q", *extra])
    with log.open("wb") as out:
        proc = subprocess.run(
            cmd,
            cwd=env.src,
            env=_child_env(env, "asyncio", results, config),
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=900,
            check=False,
        )
    coll = Collection([], {}, [])
    got = False
    for rec in _Tail(results).read():
        if rec["event"] == "collected":
            got = True
            coll.nodeids = rec["nodeids"]
            coll.deselected = rec["deselected"]
        elif rec["event"] == "collect_error":
            coll.errors.append((rec["nodeid"], rec["detail"]))
    if not got:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise RuntimeError(f"collecting {env.suite.name} failed (exit {proc.returncode}):\n{tail}")
    return coll


def shards(nodeids: list[str], jobs: int) -> list[list[str]]:
    """``jobs`` lists of test ids, whole files each (module fixtures set up once), balanced by
    count, each in the suite's own order."""
    by_file: dict[str, list[str]] = {}
    for nodeid in nodeids:
        by_file.setdefault(nodeid.split("::", 1)[0], []).append(nodeid)
    bins: list[list[str]] = [[] for _ in range(max(1, jobs))]
    for ids in sorted(by_file.values(), key=len, reverse=True):
        min(bins, key=len).extend(ids)
    order = {nodeid: i for i, nodeid in enumerate(nodeids)}
    return [sorted(b, key=order.__getitem__) for b in bins if b]


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _died(rc: int) -> str:
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"


def _run_shard(
    env: SuiteEnv,
    loop: str,
    ids: list[str],
    workdir: Path,
    *,
    timeout: float,
    grace: float,
    deadline: float,
    extra: list[str],
    on_result: Callable[[TestResult], None],
    stop: threading.Event,
) -> tuple[dict[str, TestResult], int, bool, int]:
    """Runs ``ids`` until each has a result (or ``stop`` is set: then the pytest running is
    killed and what came so far returned); returns (results, restarts, cut, fdkit loops)."""
    results: dict[str, TestResult] = {}
    remaining = list(ids)
    attempt, fdkit_loops, cut = 0, 0, False

    def record(res: TestResult) -> None:
        results[res.nodeid] = res
        on_result(res)

    while remaining:
        attempt += 1
        stem = workdir / f"attempt{attempt}"
        only, jsonl, config, log = (
            stem.with_suffix(s) for s in (".ids", ".jsonl", ".json", ".log")
        )
        only.write_text("\n".join(remaining) + "\n", encoding="utf-8")
        jsonl.unlink(missing_ok=True)
        _write_config(config, env, only)
        tail = _Tail(jsonl)
        current: str | None = None
        started_at = last_move = time.monotonic()
        progressed = collected = False
        killed_for: str | None = None
        with log.open("wb") as out:
            proc = subprocess.Popen(
                _pytest_cmd(env, timeout, extra),
                cwd=env.src,
                env=_child_env(env, loop, jsonl, config),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            while True:
                try:
                    proc.wait(timeout=0.5)
                    exited = True
                except subprocess.TimeoutExpired:
                    exited = False
                for rec in tail.read():
                    last_move = time.monotonic()
                    if rec["event"] == "collected":
                        collected = True
                    elif rec["event"] == "start":
                        current, started_at = rec["nodeid"], time.monotonic()
                    elif rec["event"] == "result":
                        current = None
                        progressed = True
                        fdkit_loops += rec["loops"]
                        fields = {k: rec[k] for k in ("nodeid", "outcome", "detail", "seconds")}
                        record(TestResult(**fields, loops=rec["loops"]))
                if exited:
                    break
                if stop.is_set():
                    _kill(proc)
                    return results, attempt - 1, cut, fdkit_loops
                now = time.monotonic()
                if now - last_move > (timeout + grace if collected else COLLECT_LIMIT):
                    killed_for = f"no progress for {now - last_move:.0f} s: killed"
                    _kill(proc)
                    break
                if now > deadline:
                    cut = True
                    killed_for = "the run's overall budget ran out"
                    _kill(proc)
                    break
        rc = proc.returncode
        if current is not None and current not in results:
            ran = time.monotonic() - started_at
            text = log.read_bytes()[-200_000:].decode(errors="replace")
            if TIMEOUT_BANNER in text:
                record(TestResult(current, "hung", f"over {timeout:g} s (pytest-timeout)", ran))
            elif killed_for and not cut:
                record(TestResult(current, "hung", killed_for, ran))
            elif cut and ran < timeout:
                record(TestResult(current, "not run", killed_for or "", ran))
            elif cut:
                record(TestResult(current, "hung", f"ran {ran:.0f} s; {killed_for}", ran))
            else:
                record(TestResult(current, "error", f"crashed: pytest {_died(rc)}", ran))
            progressed = True
        remaining = [i for i in remaining if i not in results]
        if cut or (remaining and not progressed):
            why = killed_for if cut else f"pytest ended ({_died(rc)}) before running them"
            for nodeid in remaining:
                record(TestResult(nodeid, "not run", f"{why} (see {log})"))
            remaining = []
    return results, attempt - 1, cut, fdkit_loops


def run(
    env: SuiteEnv,
    loop: str,
    ids: list[str],
    workdir: Path,
    *,
    jobs: int = 1,
    timeout: float | None = None,
    budget: float | None = None,
    grace: float = GRACE,
    extra: Iterable[str] = (),
    on_result: Callable[[TestResult], None] = lambda r: None,
) -> RunResult:
    """Runs the tests ``ids`` of a suite on ``loop``, ``jobs`` pytest processes at a time."""
    timeout = env.suite.timeout if timeout is None else timeout
    budget = env.suite.budget if budget is None else budget
    start = time.monotonic()
    deadline = start + budget
    out = RunResult(env.suite.name, loop)
    lock = threading.Lock()
    stop = threading.Event()

    def shard_main(k: int, part: list[str]) -> None:
        d = workdir / f"shard{k}"
        d.mkdir(parents=True, exist_ok=True)
        res, restarts, cut, loops = _run_shard(
            env,
            loop,
            part,
            d,
            timeout=timeout,
            grace=grace,
            deadline=deadline,
            extra=list(extra),
            on_result=on_result,
            stop=stop,
        )
        with lock:
            out.results.update(res)
            out.restarts += restarts
            out.cut |= cut
            out.fdkit_loops += loops

    parts = shards(ids, jobs)
    threads = [threading.Thread(target=shard_main, args=(k, p)) for k, p in enumerate(parts)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except BaseException:  # Ctrl-C: no pytest of ours outlives the harness
        stop.set()
        for t in threads:
            t.join()
        raise
    # In the suite's order, as collected.
    out.results = {i: out.results[i] for i in ids if i in out.results}
    out.seconds = time.monotonic() - start
    return out
