"""``fdkit copy``: GNU cp's command line (coreutils 9.10: its options, its messages, its exit
status) on :mod:`fdkit.copy`'s engine, each file's bytes by the kernel's paths.

The command reads its arguments itself, as ``getopt_long`` reads cp's (:mod:`._options`), runs
:class:`fdkit.copy.Run` and shows what it does: ``-v``'s lines on stdout, errors and
prompts on stderr as ``fdkit copy: ...``, a progress line when stdout is a terminal (``-q``:
none), and with ``--log`` time-stamped details on stderr. What cp lacks is marked as fdkit's
in ``--help``: ``--atomic``, ``-q``, ``--log``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from fdkit import __version__
from fdkit.cli import _log
from fdkit.cli.copy._options import Command, parse
from fdkit.cli.copy._progress import Progress
from fdkit.copy import Copied, Reporter, Run, UsageError

__all__ = ["HELP", "Progress", "add_parser", "main"]

PROG = "fdkit copy"

HELP = f"""\
Usage: {PROG} [OPTION]... [-T] SOURCE DEST
  or:  {PROG} [OPTION]... SOURCE... DIRECTORY
  or:  {PROG} [OPTION]... -t DIRECTORY SOURCE...
Copy SOURCE to DEST, or multiple SOURCE(s) to DIRECTORY, as GNU cp 9.10 does (its
options, messages and exit status), each file's bytes by the kernel's best path: the
blocks shared (FICLONE) where the filesystem can, else copy_file_range, sendfile or
splice; holes kept. On a terminal a progress line shows bytes, throughput, elapsed time,
the ETA and the path taken; elsewhere only errors are printed.

Mandatory arguments to long options are mandatory for short options too.
  -a, --archive
         same as -dR --preserve=all
      --attributes-only
         don't copy the file data, just the attributes
      --backup[=CONTROL]
         make a backup of each existing destination file
  -b
         like --backup but does not accept an argument
      --copy-contents
         copy contents of special files when recursive
  -d
         same as --no-dereference --preserve=links
      --debug
         explain how a file is copied.  Implies -v
  -f, --force
         if an existing destination file cannot be opened, remove it and try
         again (this option is ignored when the -n option is also used)
  -i, --interactive
         prompt before overwrite (overrides a previous -n option)
  -H
         follow command-line symbolic links in SOURCE
  -L, --dereference
         always follow symbolic links in SOURCE
  -P, --no-dereference
         never follow symbolic links in SOURCE
      --keep-directory-symlink
         follow existing symlinks to directories
  -l, --link
         hard link files instead of copying
  -n, --no-clobber
         (deprecated) silently skip existing files.  See also --update
  -p
         same as --preserve=mode,ownership,timestamps
      --preserve[=ATTR_LIST]
         preserve the specified attributes
      --no-preserve=ATTR_LIST
         don't preserve the specified attributes
      --parents
         use full source file name under DIRECTORY
  -R, -r, --recursive
         copy directories recursively
      --reflink[=WHEN]
         control clone/CoW copies. See below
      --remove-destination
         remove each existing destination file before attempting to open it
         (contrast with --force)
      --sparse=WHEN
         control creation of sparse files. See below
      --strip-trailing-slashes
         remove any trailing slashes from each SOURCE argument
  -s, --symbolic-link
         make symbolic links instead of copying
  -S, --suffix=SUFFIX
         override the usual backup suffix
  -t, --target-directory=DIRECTORY
         copy all SOURCE arguments into DIRECTORY
  -T, --no-target-directory
         treat DEST as a normal file
      --update[=UPDATE]
         control which existing files are updated;
         UPDATE={{all,none,none-fail,older(default)}}
  -u
         equivalent to --update[=older].  See below
  -v, --verbose
         explain what is being done
  -x, --one-file-system
         stay on this file system
      --help
         display this help and exit
      --version
         output version information and exit

fdkit's own options (cp has none of these; they are never abbreviated):
      --atomic
         write each regular file to a temporary file beside DEST, flush it and
         rename it over DEST once complete: DEST is never seen half-written
         (other hard links to the old DEST keep the old bytes; DEST's directory
         must be writable, and a bind mount cannot be replaced)
  -q, --quiet
         no progress line and no notices
      --log
         time-stamped details on stderr (what each DEST is, the kernel path
         each file took, the summary), never mixed with -v's lines on stdout

ATTR_LIST is a comma-separated list of attributes. Attributes are 'mode' for
permissions (including any ACL and xattr permissions), 'ownership' for user
and group, 'timestamps' for file timestamps, 'links' for hard links, 'context'
for security context (refused: no SELinux here), 'xattr' for extended
attributes, and 'all' for all attributes.

By default, sparse SOURCE files are detected by lseek(SEEK_DATA/SEEK_HOLE) and
the corresponding DEST file is made sparse as well.  That is the behavior
selected by --sparse=auto.  Specify --sparse=always to create a sparse DEST
file whenever the SOURCE file contains a long enough sequence of zero bytes.
Use --sparse=never to inhibit creation of sparse files.

UPDATE controls which existing files in the destination are replaced.
'all' is the default operation when an --update option is not specified,
and results in all existing files in the destination being replaced.
'none' is like the --no-clobber option, in that no files in the
destination are replaced, and skipped files do not induce a failure.
'none-fail' also ensures no files are replaced in the destination,
but any skipped files are diagnosed and induce a failure.
'older' is the default operation when --update is specified, and results
in files being replaced if they're older than the corresponding source file.

By default or with --reflink=auto, {PROG} will try a lightweight copy, where
the data blocks are copied only when modified, falling back to a standard copy
if this is not possible.  With --reflink[=always] {PROG} will fail if CoW is
not supported, while --reflink=never ensures a standard copy is performed.

The backup suffix is '~', unless set with --suffix or SIMPLE_BACKUP_SUFFIX.
The version control method may be selected via the --backup option or through
the VERSION_CONTROL environment variable.  Here are the values:

  none, off       never make backups (even if --backup is given)
  numbered, t     make numbered backups
  existing, nil   numbered if numbered backups exist, simple otherwise
  simple, never   always make simple backups

As a special case, {PROG} makes a backup of SOURCE when the force and backup
options are given and SOURCE and DEST are the same name for an existing,
regular file.

What happens for each kind of DEST, as with cp:
  absent                    made, with SOURCE's mode less the umask (-p: SOURCE's)
  regular file              opened and written in place (truncated first): its
                            inode, other hard links, mode and owner stay, a bind
                            mount stays mounted (--atomic: replaced instead)
  device node or FIFO       opened and written into, never replaced (a FIFO with
                            no reader waits for one: a notice says so, Ctrl-C
                            stops)
  socket                    cannot be opened: refused
  symlink                   written through to its target; a dangling symlink is
                            refused (POSIXLY_CORRECT: written through)
  directory                 the copy goes to DIRECTORY/basename(SOURCE)
"""


class _Reporter(Reporter):
    """The command's reporter: -v's lines above the progress line, errors after it."""

    def __init__(self, progress: Progress, log: logging.Logger) -> None:
        super().__init__(PROG)
        self.p = progress
        self.logger = log

    def say(self, line: str) -> None:
        self.p.say(line)

    def error(self, message: str) -> None:
        self.p.end()
        super().error(message)

    def ask(self, question: str) -> bool:
        self.p.end()
        return super().ask(question)

    def notice(self, message: str) -> None:
        self.p.end()
        self.logger.info("%s", message)

    def log(self, message: str) -> None:
        self.logger.debug("%s", message)

    def begin(self, size: int) -> None:
        self.p.begin(size)

    def progress(self, done: int, path: str) -> None:
        self.p.update(done, path)

    def done(self, size: int, copied: Copied) -> None:
        self.p.done_file(size, copied.length, copied.path, holes=copied.holes)


def _usage_error(message: str, usage: bool, err: TextIO) -> int:
    err.write(f"{PROG}: {message}\n")
    if usage:
        err.write(f"Try '{PROG} --help' for more information.\n")
    err.flush()
    return 1


def main(argv: Sequence[str], out: TextIO | None = None) -> int:
    """Run ``fdkit copy ARGV...``; returns the exit status (0; 1 after any error, as cp;
    141 when the reader of a FIFO destination went away)."""
    stdout = sys.stdout if out is None else out
    try:
        command: Command = parse(argv)
    except UsageError as e:
        return _usage_error(e.message, e.usage, sys.stderr)
    if command.help:
        stdout.write(HELP)
        return 0
    if command.version:
        stdout.write(f"{PROG} (fdkit) {__version__}\n")
        return 0
    # --log asks for the details: it wins over -q, which only hides the progress line then.
    level = argparse.Namespace(quiet=command.quiet and not command.log, verbose=command.log)
    logger = _log.setup("copy", level)
    progress = Progress(0, stdout, command.quiet)
    run = Run(command.options, _Reporter(progress, logger))
    try:
        try:
            code = run.run(command.operands)
        except UsageError as e:
            return _usage_error(e.message, e.usage, sys.stderr)
        progress.finish()
    finally:
        progress.end()
    return code


def add_parser(sub: Any) -> None:
    """``copy`` in ``fdkit --help``'s list. The command reads its own arguments (:func:`main`),
    as cp does, so this parser is never asked to parse them."""
    sub.add_parser(
        "copy",
        help="copy files and trees as GNU cp does, each file by the kernel's paths",
        add_help=False,
    )
