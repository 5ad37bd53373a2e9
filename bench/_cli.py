"""The one front end of the harness: ``python -m bench``, what ``make bench`` and ``make demo``
run from the repository root. The harness is not in the installed package, and no command of
the package runs it.

Progress notes go to stderr, so stdout carries only the table, the tour or the JSON document.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import bench
from bench import _common, report, tour

PROG = "python -m bench"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options ``python -m bench`` takes."""
    parser.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: all)")
    parser.add_argument(
        "--quick", action="store_true", help="short runs, every row (a few minutes)"
    )
    parser.add_argument(
        "--tour",
        action="store_true",
        help="short runs of the benches with a headline, then one line per capability "
        "(`make demo`); no NAME",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object for machines")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument(
        "--contended",
        action="store_true",
        help="with a CPU burner on the load's CPU (aio; row ids suffixed _contended)",
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no remarks on stderr while running (skipped rows still show, errors still say so)",
    )


def _check_names(names: Sequence[str], contended: bool) -> str | None:
    """The error line for a name that is unknown (or has no --contended variant), or None."""
    unknown = [n for n in names if n not in bench.BENCHES]
    if unknown:
        known = ", ".join(bench.BENCHES)
        return f"{PROG}: unknown benchmark {', '.join(unknown)} (known: {known})"
    plain = [n for n in names if contended and not bench.BENCHES[n].contended]
    if plain:
        only = ", ".join(bench.contended_names())
        return f"{PROG}: no --contended variant for {', '.join(plain)} (only {only})"
    return None


def run_tour() -> int:
    """The tour of ``make demo``: each bench of :func:`tour.benches` in quick mode, remarks
    dropped, one progress line per bench on stderr; then the tour on stdout."""
    names = tour.benches()
    results: list[_common.Result] = []
    t0 = time.monotonic()
    print(f"{PROG}: {len(names)} benches in quick mode, a line as each ends", file=sys.stderr)
    with _common.quiet():
        for k, name in enumerate(names, 1):
            t = time.monotonic()
            results += bench.run_benches([name], quick=True)
            print(f"  {name} ({k}/{len(names)}): {time.monotonic() - t:.0f} s", file=sys.stderr)
    print(f"{PROG}: {time.monotonic() - t0:.0f} s in all\n", file=sys.stderr, flush=True)
    print(tour.format_tour(results, _common.take_skipped()))
    return 0


def run(
    names: Sequence[str],
    quick: bool,
    as_json: bool,
    list_only: bool,
    contended: bool = False,
) -> int:
    """List the benches, or run ``names`` (all when empty) and print the table or the JSON;
    ``contended``: their --contended variants (all that have one when ``names`` is empty).

    An unknown name, or one without a contended variant under ``contended``, is one line on
    stderr naming the known ones, and status 2. Returns the exit status.
    """
    if list_only:
        for name, b in bench.BENCHES.items():
            print(f"{name:<16} {b.description}")
        return 0
    error = _check_names(names, contended)
    if error:
        print(error, file=sys.stderr)
        return 2
    results = bench.run_benches(list(names) or None, quick, contended)
    if as_json:
        print(report.to_json(results, bench.machine_info()))
    else:
        print(report.format_table(results, _common.take_skipped()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench [NAME...] [--quick | --tour] [--json] [--list] [--contended] [-q]``;
    returns the exit status."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="fdkit against its stdlib (and C) baselines, alternating in rounds; "
        "figures are medians, ratio above 1 means fdkit wins. Run from the repository root.",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.tour:
        if args.names or args.json or args.contended or args.list:
            parser.error("--tour takes no NAME, --json, --list or --contended")
        return run_tour()
    if args.quiet:
        with _common.quiet():
            return run(args.names, args.quick, args.json, args.list, args.contended)
    return run(args.names, args.quick, args.json, args.list, args.contended)
