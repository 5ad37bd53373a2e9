"""The command's log lines: on stderr, as many as ``-q``/``-v`` ask for, time-stamped with ``-v``.

Every subcommand takes ``-q/--quiet`` and ``-v/--verbose`` (:func:`add_verbosity`) and gets its
logger from :func:`setup`. Three kinds of lines, three places:

* **output** (what the command is for: a table, the decoded messages, the proxy's start line
  and summary) goes to stdout, untouched by these flags unless a subcommand says otherwise;
* **log lines** (notices while working, and with ``-v`` the details) go to stderr as
  ``fdkit copy: waiting for a reader on FIFO 'out'``; with ``-v`` every line has the time
  first, ``2025-01-31 12:00:00 fdkit copy: ...``, as ``python -m http.server``, nginx and
  granian stamp theirs, so a long run can be read later;
* **errors** stay one plain line, ``fdkit copy: cannot open 'x': No such file or directory``,
  like every Unix tool's (``cp``, ``cat``), and are never silenced by ``-q``.

Levels: ``-q`` shows warnings only, the default shows notices (INFO), ``-v`` adds the details
(DEBUG). A stdlib :class:`logging.Logger` under ``fdkit.cli.<command>``, so an embedding program
can route or silence it like any other; it does not propagate to the root logger.
"""

from __future__ import annotations

import argparse
import logging
import sys

#: The time at the head of every log line: local time, to the second (``%Y-%m-%d %H:%M:%S``,
#: the form granian and Python's own ``logging`` default use).
DATEFMT = "%Y-%m-%d %H:%M:%S"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun in the number it takes: ``1 connection``, ``0 connections``,
    ``2 connections`` (``plural`` when adding an s is wrong)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def add_verbosity(
    p: argparse.ArgumentParser,
    quiet: str = "no notices on stderr",
    verbose: str = "more detail on stderr, time-stamped",
) -> None:
    """``-q/--quiet`` and ``-v/--verbose`` (one or the other) on subcommand parser ``p``;
    ``quiet`` and ``verbose`` say what each does for this command."""
    group = p.add_mutually_exclusive_group()
    group.add_argument("-q", "--quiet", action="store_true", help=quiet)
    group.add_argument("-v", "--verbose", action="store_true", help=verbose)


def level(args: argparse.Namespace) -> int:
    """The logging level ``-q``/``-v`` chose: WARNING, INFO (neither) or DEBUG."""
    if getattr(args, "quiet", False):
        return logging.WARNING
    if getattr(args, "verbose", False):
        return logging.DEBUG
    return logging.INFO


class _Stderr(logging.Handler):
    """Writes each line to whatever ``sys.stderr`` is at the time of the record (not the one
    at setup: tests and embedding programs replace it), flushed at once."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = sys.stderr
            if stream is not None:
                stream.write(self.format(record) + "\n")
                stream.flush()
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)


def setup(command: str, args: argparse.Namespace | None = None) -> logging.Logger:
    """The logger of ``fdkit <command>``, writing lines to stderr at the level of ``args`` (see
    :func:`level`; INFO without ``args``), time-stamped at ``-v``'s level. Calling it again
    replaces the handler, so each run of the command sets its level afresh."""
    logger = logging.getLogger(f"fdkit.cli.{command}")
    handler = _Stderr()
    at = level(args) if args is not None else logging.INFO
    stamp = "%(asctime)s " if at <= logging.DEBUG else ""
    handler.setFormatter(logging.Formatter(f"{stamp}fdkit {command}: %(message)s", DATEFMT))
    for old in list(logger.handlers):
        logger.removeHandler(old)
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(at)
    return logger
