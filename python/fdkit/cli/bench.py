"""``fdkit bench``: run benchmarks side by side with their stdlib baselines.

The harness is not part of the installed package (the wheel carries the library and the CLI
only): it lives in the source tree's ``bench/`` directory, which ``make bench`` and
``make demo`` run as ``python -m bench``. This command is a front door to it. It looks for an
fdkit checkout, first the one this fdkit package runs from (an editable install: ``make
setup``), then the current directory and its parents (a clone, with fdkit installed from a
wheel), and runs that harness against the fdkit being imported. With no checkout it says so
in one line and exits with status 1.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from fdkit.cli import _log

#: What ``fdkit bench`` says when no source tree is around (an installed wheel).
NO_HARNESS = (
    "fdkit bench: the benchmarks are not in the installed package; they run from a source "
    "checkout of fdkit: `make bench` (or `fdkit bench`) in a clone"
)


def _candidates() -> list[Path]:
    """Where a checkout may be: the tree this package runs from, then the current directory
    and its parents."""
    import fdkit

    out = [Path(fdkit.__file__).resolve().parent.parent.parent]  # <root>/python/fdkit
    try:
        cwd = Path.cwd()
    except OSError:  # the current directory was removed
        return out
    return [*out, cwd, *cwd.parents]


def _is_checkout(root: Path) -> bool:
    """An fdkit source tree: the harness in ``bench/`` beside the package in ``python/fdkit``."""
    return (root / "bench" / "_cli.py").is_file() and (
        root / "python" / "fdkit" / "__init__.py"
    ).is_file()


def find_harness() -> ModuleType | None:
    """The source tree's ``bench._cli`` module, imported from the first checkout found (see the
    module docstring), or None when there is none."""
    for root in _candidates():
        if _is_checkout(root):
            if str(root) not in sys.path:
                sys.path.insert(0, str(root))
            return importlib.import_module("bench._cli")
    return None


def run(args: argparse.Namespace) -> int:
    harness = find_harness()
    if harness is None:
        print(NO_HARNESS, file=sys.stderr)
        return 1
    log = _log.setup("bench", args)
    log.debug("running %s%s", " ".join(args.names) or "every bench", " (--quick)" * args.quick)
    t0 = time.monotonic()
    # -q: the harness's remarks on stderr (progress, skipped tools) are dropped; what was
    # skipped still shows under the table. Never its errors: an unknown name still says so.
    known = getattr(getattr(harness, "bench", None), "BENCHES", {})
    hush = args.quiet and all(n in known for n in args.names)
    with contextlib.redirect_stderr(io.StringIO()) if hush else contextlib.nullcontext():
        status: int = harness.run(args.names, args.quick, args.json, args.list, prog="fdkit bench")
    log.debug("finished in %.1f s", time.monotonic() - t0)
    return status


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmark fdkit against the standard library, side by side (source checkout)",
        description="Run fdkit and its stdlib (and C) baselines in the same process run, "
        "alternating in rounds, and print medians and ratios (above 1: fdkit wins). The "
        "harness lives in a source checkout's bench/ directory, not in the installed package: "
        "run this inside a clone of fdkit (or `make bench` there).",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: all)")
    p.add_argument("--quick", action="store_true", help="a short tour (under a minute)")
    p.add_argument("--json", action="store_true", help="one JSON object for machines")
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    _log.add_verbosity(p, quiet="no remarks on stderr while running (skips still show)")
    p.set_defaults(run=run)
