"""The one front end of the harness: ``python -m bench`` (what ``make bench`` and ``make demo``
run from the repository root) and ``fdkit bench`` (which finds this source tree and calls
:func:`run`). Both print the same table, or the same JSON with ``--json``.

Progress notes go to stderr, so stdout carries only the table or the JSON document.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import bench
from bench import report
from bench._common import take_skipped


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options ``python -m bench`` takes (``fdkit bench`` declares the same ones)."""
    parser.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: all)")
    parser.add_argument("--quick", action="store_true", help="a short tour (under a minute)")
    parser.add_argument("--json", action="store_true", help="one JSON object for machines")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument(
        "--contended",
        action="store_true",
        help="with a CPU burner on the load's CPU (aio; row ids suffixed _contended)",
    )


def run(
    names: Sequence[str],
    quick: bool,
    as_json: bool,
    list_only: bool,
    prog: str = "python -m bench",
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
    unknown = [n for n in names if n not in bench.BENCHES]
    if unknown:
        known = ", ".join(bench.BENCHES)
        print(f"{prog}: unknown benchmark {', '.join(unknown)} (known: {known})", file=sys.stderr)
        return 2
    plain = [n for n in names if contended and not bench.BENCHES[n].contended]
    if plain:
        only = ", ".join(bench.contended_names())
        print(f"{prog}: no --contended variant for {', '.join(plain)} (only {only})",
              file=sys.stderr)  # fmt: skip
        return 2
    results = bench.run_benches(list(names) or None, quick, contended)
    if as_json:
        print(report.to_json(results, bench.machine_info()))
    else:
        print(report.format_table(results, take_skipped()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench [NAME...] [--quick] [--json] [--list] [--contended]``; returns the
    exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="fdkit against its stdlib (and C) baselines, alternating in rounds; "
        "figures are medians, ratio above 1 means fdkit wins. Run from the repository root.",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run(args.names, args.quick, args.json, args.list, contended=args.contended)
