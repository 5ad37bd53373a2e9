"""What a ``cp`` run was asked to do (:class:`Options`, cp's ``struct cp_options``) and where it
says what it does (:class:`Reporter`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Literal

from fdkit.copy._backup import Backup
from fdkit.copy._data import Copied, Reflink, Sparse

#: Which symlinks among the sources are followed: ``never`` (``-P``, the default of ``-r``),
#: ``command_line`` (``-H``: the operands only), ``always`` (``-L``, the default without ``-r``).
Dereference = Literal["never", "command_line", "always"]

#: Whether to ask before an existing destination is replaced: ``unspecified`` (no), ``ask``
#: (``-i``), ``skip`` (``-n``, which also makes ``update`` ``none``).
Interactive = Literal["unspecified", "ask", "skip"]

#: Which existing destinations are replaced (cp 9.6's ``--update=WHEN``, apart from ``-i``):
#: ``all``, ``older`` (``-u``: those older than their source), ``none`` (none, and a skipped
#: file is no failure: ``-n``), ``none-fail`` (none, each skipped file named as an error).
Update = Literal["all", "older", "none", "none-fail"]


@dataclass(frozen=True)
class Options:
    """cp's options, after the command line is read (``-a`` is already its parts)."""

    recursive: bool = False
    dereference: Dereference = "always"
    interactive: Interactive = "unspecified"
    update: Update = "all"
    #: ``-f``: a destination that cannot be opened is removed and made anew.
    force: bool = False
    remove_destination: bool = False
    hard_link: bool = False
    symbolic_link: bool = False
    preserve_mode: bool = False
    preserve_ownership: bool = False
    preserve_timestamps: bool = False
    preserve_links: bool = False
    preserve_xattr: bool = False
    #: ``--preserve=xattr`` named: its failures are errors (with ``-a`` they are silent).
    require_preserve_xattr: bool = False
    #: ``-p``/``--preserve``: a failure to keep an attribute is an error.
    require_preserve: bool = False
    explicit_no_preserve_mode: bool = False
    #: ``-a``: unsupported attributes are not reported.
    reduce_diagnostics: bool = False
    attributes_only: bool = False
    copy_contents: bool = False
    one_file_system: bool = False
    sparse: Sparse = "auto"
    reflink: Reflink = "auto"
    backup: Backup = "none"
    suffix: str = "~"
    parents: bool = False
    strip_trailing_slashes: bool = False
    target_directory: str | None = None
    no_target_directory: bool = False
    verbose: bool = False
    #: ``--debug``: how each file was copied, after its ``-v`` line.
    debug: bool = False
    #: fdkit's own: a regular file is written to a temporary file beside it and renamed over
    #: it once complete (never half-written; other hard links keep the old bytes).
    atomic: bool = False
    #: ``POSIXLY_CORRECT``: a dangling symlink destination is written through.
    open_dangling_dest_symlink: bool = False
    #: ``--keep-directory-symlink`` (cp 9.5): a source directory goes into the directory a
    #: destination symlink points to. As in cp, only with ``copy_contents`` (else the symlink
    #: is a non-directory the directory cannot overwrite).
    keep_directory_symlink: bool = False

    @property
    def copy_as_regular(self) -> bool:
        """A FIFO or device source is read as a file (without ``-r``, or ``--copy-contents``)."""
        return not self.recursive or self.copy_contents

    @property
    def data_copy_required(self) -> bool:
        return not self.attributes_only


class Reporter:
    """Where a run says what it does: cp's ``-v`` lines, its errors and prompts, the progress
    of the bytes and the log. This one writes the lines to stdout and the errors and prompts to
    stderr as cp does, under ``program``'s name, and shows no progress; the command line gives
    a subclass with the progress line and the log."""

    def __init__(self, program: str = "cp") -> None:
        self.program = program

    def say(self, line: str) -> None:
        """A line of ``-v`` (``'a' -> 'b'``, ``removed 'b'``) on stdout."""
        print(line, flush=True)

    def error(self, message: str) -> None:
        """One error (or warning), without the program's name."""
        sys.stdout.flush()
        print(f"{self.program}: {message}", file=sys.stderr, flush=True)

    def ask(self, question: str) -> bool:
        """cp's prompt (``overwrite 'b'? ``) on stderr and a line from stdin, whatever it is:
        yes when it starts with ``y`` or ``Y``; end of input is no."""
        sys.stdout.flush()
        sys.stderr.write(f"{self.program}: {question}")
        sys.stderr.flush()
        answer = sys.stdin.readline() if sys.stdin is not None else ""
        return answer[:1] in ("y", "Y")

    def notice(self, message: str) -> None:
        """Something the user waits on (a FIFO with no reader)."""

    def log(self, message: str) -> None:
        """A detail: what each file is and which kernel path copied it."""

    def begin(self, size: int) -> None:
        """A file's bytes start to move (``size``: its stat size)."""

    def progress(self, done: int, path: str) -> None:
        """``done`` bytes of the current file are copied, by kernel path ``path``."""

    def done(self, size: int, copied: Copied) -> None:
        """The current file is complete."""
