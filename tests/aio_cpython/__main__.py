"""``python -m tests.aio_cpython --loop fdkit``: CPython's loop tests, a process per test."""

from __future__ import annotations

import argparse
import sys
import threading
import time

from ._cases import list_ids
from ._runner import (
    LOOPS,
    Result,
    engine_of,
    loop_available,
    print_results,
    report_line,
    run_all,
    summary,
    worker,
)
from .known_failures import known_failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.aio_cpython",
        description="Run CPython's own event-loop tests (test_asyncio mixins) against a loop, "
        "each test in its own process with a timeout.",
    )
    ap.add_argument("--loop", choices=LOOPS, default="fdkit", help="the loop under test")
    ap.add_argument(
        "--engine",
        choices=("io_uring", "epoll"),
        help="fdkit's engine (FDKIT_AIO_ENGINE in each worker; default: the one this machine "
        "offers)",
    )
    ap.add_argument("-j", "--jobs", type=int, default=3, help="tests at once (default 3)")
    ap.add_argument(
        "--timeout", type=float, default=30.0, help="seconds before a test is a HANG (30)"
    )
    ap.add_argument(
        "-k",
        dest="patterns",
        action="append",
        default=[],
        metavar="PATTERN",
        help="only tests whose id contains PATTERN (repeatable: any of them)",
    )
    ap.add_argument("--list", action="store_true", help="print the test ids and their count")
    ap.add_argument(
        "-v", "--verbose", action="store_true", help="print every test's output at the end"
    )
    ap.add_argument("--worker", metavar="ID", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        return worker(args.worker, args.loop, args.timeout)

    ids = [t for t in list_ids() if not args.patterns or any(p in t for p in args.patterns)]
    if args.list:
        print("\n".join(ids))
        print(f"{len(ids)} tests", file=sys.stderr)
        return 0
    why = loop_available(args.loop)
    if why:
        print(f"aio_cpython: {why}", file=sys.stderr)
        return 2
    if not ids:
        print("aio_cpython: no test matches", file=sys.stderr)
        return 2

    if args.engine and args.loop != "fdkit":
        print("aio_cpython: --engine is fdkit's (--loop fdkit)", file=sys.stderr)
        return 2
    env = {"FDKIT_AIO_ENGINE": args.engine} if args.engine else {}
    version = sys.version_info[:2]
    known = known_failures(engine_of(args.loop, env), version) if args.loop == "fdkit" else {}
    lock = threading.Lock()

    def show(res: Result) -> None:
        with lock:
            print(report_line(res, known), flush=True)

    print(f"{len(ids)} tests on {args.loop}, -j {args.jobs}, timeout {args.timeout:g} s")
    start = time.monotonic()
    try:
        results = run_all(
            args.loop, ids, jobs=args.jobs, timeout=args.timeout, on_result=show, env=env
        )
    except KeyboardInterrupt:
        print("aio_cpython: interrupted; running tests killed", file=sys.stderr)
        return 130
    elapsed = time.monotonic() - start
    print_results(results, sys.stdout, verbose=args.verbose)
    print(summary(results, args.loop, elapsed, args.jobs, args.timeout, env))
    bad = [r for r in results if r.status in ("fail", "error", "hang") and r.id not in known]
    fixed = [r for r in results if r.status == "pass" and r.id in known]
    for r in fixed:
        print(f"known failure now passes (delete it from known_failures.py): {r.id}")
    if bad:
        print(
            f"{len(bad)} not passing and not in known_failures.py: " + " ".join(r.id for r in bad)
        )
    return 1 if bad or fixed else 0


if __name__ == "__main__":
    sys.exit(main())
