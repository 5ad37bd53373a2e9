"""The stand-alone front end behind ``python -m fdkit.benchmarks`` and the ``bench/*.py``
scripts: the same output as ``fdkit bench``, for when the CLI is not on the path."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from fdkit import benchmarks
from fdkit.benchmarks import report
from fdkit.benchmarks._common import take_skipped


def main(argv: Sequence[str] | None = None, names: Sequence[str] = ()) -> int:
    """Run ``names`` (or those given on the command line; all by default) and print the
    table, or the JSON with ``--json``. Returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m fdkit.benchmarks" if not names else f"bench/{names[0]}.py",
        description="fdkit against its stdlib (and C) baselines, alternating in rounds; "
        "figures are medians, ratio above 1 means fdkit wins.",
    )
    if not names:
        parser.add_argument("names", nargs="*", metavar="NAME", help=", ".join(benchmarks.BENCHES))
    parser.add_argument("--quick", action="store_true", help="a short tour (seconds)")
    parser.add_argument("--json", action="store_true", help="one JSON object for machines")
    args = parser.parse_args(argv)
    chosen = list(names) or list(args.names)
    try:
        results = benchmarks.run_benches(chosen or None, args.quick)
    except ValueError as e:
        parser.error(str(e))
    if args.json:
        print(report.to_json(results, benchmarks.machine_info()))
    else:
        print(report.format_table(results, take_skipped()))
    return 0
