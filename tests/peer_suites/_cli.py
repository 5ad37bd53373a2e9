"""The command line: runs the suites chosen on the loops chosen, then prints the report."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ._env import SetupError, cache_dir, fdkit_built, fdkit_commit, fdkit_dir, prepare, say
from ._report import (
    Difference,
    candidates,
    differences,
    flaky_on_base,
    format_report,
    suite_doc,
    verdict,
)
from ._run import RunResult, TestResult, collect, run
from ._suites import FDKIT_LOOPS, LOOPS, SUITES, Suite

#: Reruns of each difference on asyncio's loop (all must pass, or the test is flaky there).
BASE_RERUNS = 2


def engine_unavailable(loop: str) -> str | None:
    """``None`` when fdkit's loop can run on this engine here, else why not."""
    import fdkit.aio

    try:
        fdkit.aio.EventLoop(engine="epoll" if loop == "epoll" else "io_uring").close()
    except OSError as e:
        return str(e)
    return None


def _baseline_key(suite: Suite, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "sdist": suite.label,
        "python": sys.version.split()[0],
        "timeout": args.timeout or suite.timeout,
    }


def _save(path: Path, key: dict[str, Any], result: RunResult) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"key": key, "when": datetime.now(UTC).isoformat(timespec="seconds")}
    path.write_text(json.dumps({**doc, "run": result.as_json()}), encoding="utf-8")


def _load(path: Path, key: dict[str, Any], ids: list[str]) -> tuple[RunResult, str] | None:
    """A saved run of asyncio's loop that has a result for each of ``ids`` (only those kept)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if doc.get("key") != key:
        return None
    run = RunResult.from_json(doc["run"])
    if not set(ids) <= set(run.results):
        return None
    run.results = {i: run.results[i] for i in ids}
    return run, str(doc["when"])


def _progress(suite: str, loop: str, base: RunResult | None) -> Callable[[TestResult], None]:
    """Prints, as they come, the tests that hang, and those that do not pass on fdkit's loop
    where they passed on asyncio's."""

    def on_result(res: TestResult) -> None:
        if res.outcome == "hung":
            say(f"{suite}/{loop}: HUNG {res.nodeid}: {res.detail}")
        elif loop != "asyncio" and res.outcome != "passed" and base is not None:
            was = base.results.get(res.nodeid)
            if was is not None and was.outcome == "passed":
                say(f"{suite}/{loop}: {res.outcome.upper()} {res.nodeid}: {res.detail[:200]}")

    return on_result


def run_suite(suite: Suite, loops: list[str], args: argparse.Namespace) -> dict[str, Any]:
    env = prepare(suite)
    work = cache_dir() / "runs" / suite.name
    shutil.rmtree(work, ignore_errors=True)
    extra = ["-k", args.k] if args.k else []
    coll = collect(env, work / "collect", extra)
    n_desel = sum(len(v) for v in coll.deselected.values())
    say(f"{suite.label}: {len(coll.nodeids)} tests ({n_desel} deselected on every loop)")
    key = _baseline_key(suite, args)
    saved = cache_dir() / "results" / f"{suite.name}-asyncio.json"

    runs: dict[str, RunResult] = {}
    unavailable: dict[str, str] = {}
    baseline_from: str | None = None
    wanted_fdkit = [lp for lp in loops if lp != "asyncio"]
    # asyncio's loop always runs (the oracle), unless only fdkit's were asked for and a saved
    # run of asyncio's covers the tests.
    if "asyncio" not in loops and wanted_fdkit and not args.k:
        got = _load(saved, key, coll.nodeids)
        if got is not None:
            runs["asyncio"], baseline_from = got
            say(f"{suite.name}: asyncio's results from the saved run of {baseline_from}")
    for loop in ["asyncio", *wanted_fdkit]:
        if loop in runs:
            continue
        if loop != "asyncio" and (why := engine_unavailable(loop)):
            unavailable[loop] = why
            say(f"{suite.name}/{loop}: not run: {why}")
            continue
        jobs = args.jobs or suite.jobs
        say(f"{suite.name}/{loop}: running {len(coll.nodeids)} tests, -j {jobs}")
        on_result = _progress(suite.name, loop, runs.get("asyncio"))
        result = run(
            env,
            loop,
            coll.nodeids,
            work / loop,
            jobs=jobs,
            timeout=args.timeout,
            budget=args.budget * 60 if args.budget else None,
            extra=extra,
            on_result=on_result,
        )
        runs[loop] = result
        say(f"{suite.name}/{loop}: {result.counts()} in {result.seconds:.0f} s")
        if loop == "asyncio" and not args.k and not result.cut:
            _save(saved, key, result)

    # The differences, each run again alone: on asyncio's loop (flaky there?) and on fdkit's.
    diffs: dict[str, list[Difference]] = {}
    flaky: dict[str, TestResult] = {}
    base = runs.get("asyncio")
    if base is not None:
        cands = {lp: candidates(base, runs[lp]) for lp in wanted_fdkit if lp in runs}
        union = list(dict.fromkeys(n for ids in cands.values() for n in ids))
        base_reruns: list[RunResult] = []
        reruns: dict[str, RunResult] = {}
        if union and not args.no_rerun:
            for i in range(BASE_RERUNS):
                say(f"{suite.name}: {len(union)} differences again on asyncio's loop ({i + 1})")
                base_reruns.append(
                    run(env, "asyncio", union, work / f"rerun-asyncio-{i}", timeout=args.timeout)
                )
            flaky = flaky_on_base(union, base_reruns)
            for lp, ids in cands.items():
                again = [n for n in ids if n not in flaky]
                if again:
                    say(f"{suite.name}: {len(again)} differences again on {lp}")
                    reruns[lp] = run(env, lp, again, work / f"rerun-{lp}", timeout=args.timeout)
        for lp in cands:
            diffs[lp] = differences(base, runs[lp], flaky, reruns.get(lp))

    return suite_doc(
        label=suite.label,
        collected=len(coll.nodeids),
        deselected=coll.deselected,
        collect_errors=coll.errors,
        runs={lp: runs[lp] for lp in LOOPS if lp in runs},
        baseline_from=baseline_from,
        unavailable=unavailable,
        diffs=diffs,
        flaky=flaky,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.peer_suites",
        description="Run uvloop's, anyio's and aiohttp's own test suites (their PyPI sdists, "
        "downloaded once into .peer/) on asyncio's loop and on fdkit's (io_uring and epoll "
        "engines), and report every test that passes on asyncio's loop and not on fdkit's.",
    )
    ap.add_argument(
        "--suite",
        action="append",
        choices=list(SUITES),
        help="a suite to run (repeatable; default: all three)",
    )
    ap.add_argument(
        "--loop",
        action="append",
        choices=LOOPS,
        help="a loop to run on (repeatable; default: all three). An fdkit engine alone is "
        "compared with asyncio's saved results when they match, else asyncio's loop runs too",
    )
    ap.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    ap.add_argument(
        "-j",
        "--jobs",
        type=int,
        help="pytest processes at once per run, whole test files each (default: per suite, "
        "1 for uvloop and anyio, 2 for aiohttp)",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        help="seconds per test before it counts as hung (default: per suite, 20 or 60)",
    )
    ap.add_argument(
        "--budget",
        type=float,
        help="minutes for one suite on one loop before the rest is cut (default: per suite)",
    )
    ap.add_argument("-k", help="only tests matching this pytest -k expression (no baseline saved)")
    ap.add_argument("--no-rerun", action="store_true", help="do not run the differences again")
    args = ap.parse_args(argv)
    suites = [SUITES[s] for s in dict.fromkeys(args.suite or SUITES)]
    loops = list(dict.fromkeys(args.loop or LOOPS))

    say(f"fdkit from {fdkit_dir()} ({fdkit_commit()}); cache in {cache_dir()}")
    start = time.monotonic()
    doc: dict[str, Any] = {
        "fdkit": {
            "path": str(fdkit_dir()),
            "commit": fdkit_commit(),
            "built": fdkit_built(),
            "python": sys.version.split()[0],
        },
        "engines": [lp for lp in FDKIT_LOOPS if lp in loops],
        "timeouts": ", ".join(f"{s.name} {args.timeout or s.timeout:g} s" for s in suites),
        "suites": {},
    }
    try:
        for suite in suites:
            doc["suites"][suite.name] = run_suite(suite, loops, args)
    except SetupError as e:
        say(str(e))
        return 2
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    doc["seconds"] = round(time.monotonic() - start, 1)
    doc["verdict"], clean = verdict(doc)
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print(format_report(doc))
    return 0 if clean else 1
