"""The ``fdkit`` command: one entry point, one module per subcommand.

Errors print one clear line on stderr and exit non-zero; ``--help`` works everywhere.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from fdkit import __version__
from fdkit.cli import bench, copy, doctor, pipe_cat, proxy, serve


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fdkit",
        description="Linux I/O at kernel speed: fd-native syscalls, zero-copy, io_uring.",
    )
    parser.add_argument("--version", action="version", version=f"fdkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    bench.add_parser(sub)
    copy.add_parser(sub)
    doctor.add_parser(sub)
    pipe_cat.add_parser(sub)
    proxy.add_parser(sub)
    serve.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        code: int = args.run(args)
    except KeyboardInterrupt:
        print("fdkit: interrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError) as e:
        print(f"fdkit {args.command}: {e}", file=sys.stderr)
        return 1
    return code
