"""``fdkit bench``: run benchmarks side by side with their stdlib baselines.

The benchmarks themselves live in :mod:`fdkit.benchmarks` (a registry later capabilities plug
into); this module is only the command-line front end.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from typing import Any

from fdkit.cli import _log


def run(args: argparse.Namespace) -> int:
    from fdkit import benchmarks
    from fdkit.benchmarks import report
    from fdkit.benchmarks._common import take_skipped

    if args.list:
        for name, b in benchmarks.BENCHES.items():
            print(f"{name:<16} {b.description}")
        return 0
    unknown = [n for n in args.names if n not in benchmarks.BENCHES]
    if unknown:
        known = ", ".join(benchmarks.BENCHES)
        print(
            f"fdkit bench: unknown benchmark {', '.join(unknown)} (known: {known})", file=sys.stderr
        )
        return 2
    log = _log.setup("bench", args)
    log.debug("running %s%s", " ".join(args.names) or "every bench", " (--quick)" * args.quick)
    t0 = time.monotonic()
    # -q: the harness's remarks on stderr (progress, skipped tools) are dropped; what was
    # skipped still shows under the table.
    with contextlib.redirect_stderr(io.StringIO()) if args.quiet else contextlib.nullcontext():
        results = benchmarks.run_benches(args.names or None, args.quick)
    log.debug("%d rows in %.1f s", len(results), time.monotonic() - t0)
    if args.json:
        print(report.to_json(results, benchmarks.machine_info()))
    else:
        print(report.format_table(results, take_skipped()))
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmark fdkit against the standard library, side by side",
        description="Run fdkit and its stdlib (and C) baselines in the same process run, "
        "alternating in rounds, and print medians and ratios (above 1: fdkit wins).",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: all)")
    p.add_argument("--quick", action="store_true", help="a short tour (under a minute)")
    p.add_argument("--json", action="store_true", help="one JSON object for machines")
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    _log.add_verbosity(p, quiet="no remarks on stderr while running (skips still show)")
    p.set_defaults(run=run)
