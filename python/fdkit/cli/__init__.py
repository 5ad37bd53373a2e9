"""The ``fdkit`` command: one entry point, one module per subcommand.

Errors print one clear line on stderr and exit non-zero; ``--help`` works everywhere.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from fdkit import __version__
from fdkit.cli import copy, doctor, pipe_cat, proxy, serve


class _Subcommand(argparse.ArgumentParser):
    """A subcommand's parser: an unknown option or a surplus argument is its own error, so
    ``fdkit copy a b --bogus`` prints ``usage: fdkit copy [-h] [-q | -v] SRC DST`` and
    ``fdkit copy: error: unrecognized arguments: --bogus``, as git, cargo or pip do. (A plain
    subparser hands what it does not know back to the top-level parser, whose usage line names
    none of the subcommand's options.)"""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extra = super().parse_known_args(args, namespace)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed, extra


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fdkit",
        description="Linux I/O at kernel speed: fd-native syscalls, zero-copy, io_uring.",
    )
    parser.add_argument("--version", action="version", version=f"fdkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Subcommand)
    copy.add_parser(sub)
    doctor.add_parser(sub)
    pipe_cat.add_parser(sub)
    proxy.add_parser(sub)
    serve.add_parser(sub)
    return parser


#: The exit status after stdout's reader went away (EPIPE): 128 + SIGPIPE, what the shell
#: reports for ``cat``, ``grep`` or ``yes`` killed by SIGPIPE in ``... | head -1``. Scripts
#: under ``set -o pipefail`` already expect it there; 0 would claim the output was all
#: delivered (it was not), 1 would look like a real failure.
EXIT_EPIPE = 141


def reader_gone() -> int:
    """stdout's reader went away: stop quietly, as a Unix tool killed by SIGPIPE does.

    Python ignores SIGPIPE, so a write to a closed pipe raises ``BrokenPipeError`` instead of
    ending the process. What is left in ``sys.stdout``'s buffer would be written again by the
    interpreter's final flush, which would fail and print "Exception ignored ... BrokenPipeError"
    and exit 120: fd 1 is pointed at /dev/null first, so that flush succeeds silently (the
    recipe in the ``signal`` module's documentation). Returns :data:`EXIT_EPIPE`.
    """
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return EXIT_EPIPE


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["copy"]:
        # cp's command line, read as cp reads it (its own getopt, its messages, exit 1).
        try:
            return copy.main(argv[1:])
        except KeyboardInterrupt:
            print("fdkit: interrupted", file=sys.stderr)
            return 130
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        code: int = args.run(args)
    except KeyboardInterrupt:
        print("fdkit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        raise  # handled in main: not an error to print
    except (OSError, ValueError) as e:
        print(f"fdkit {args.command}: {e}", file=sys.stderr)
        return 1
    return code


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            code = _run(argv)
        finally:
            # Whatever is still buffered goes out now, where EPIPE can be handled, rather
            # than in the interpreter's exit flush (also after --help, a SystemExit).
            if sys.stdout is not None:
                sys.stdout.flush()
    except BrokenPipeError:
        return reader_gone()
    return code
