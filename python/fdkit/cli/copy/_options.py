"""``fdkit copy``'s command line, read as GNU cp 9.10 reads its own: every option of
``cp --help`` but the SELinux ones (``-Z``, ``--context``), and fdkit's ``--atomic``, ``-q`` and
``--log``. A mistake is cp's message and exit status 1."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

from fdkit.cli.copy._getopt import GetoptError, Option, argmatch, getopt
from fdkit.copy import Backup, Dereference, Interactive, Options, Update, UsageError

OPTIONS: tuple[Option, ...] = (
    # cp's long options, in cp's order (getopt names the ambiguous ones in this order).
    Option("archive", "a", "none", "a"),
    Option("attributes-only", None, "none", "attributes-only"),
    Option("backup", None, "optional", "backup"),
    Option("copy-contents", None, "none", "copy-contents"),
    Option("debug", None, "none", "debug"),
    Option("dereference", "L", "none", "L"),
    Option("force", "f", "none", "f"),
    Option("interactive", "i", "none", "i"),
    Option("link", "l", "none", "l"),
    Option("no-clobber", "n", "none", "n"),
    Option("no-dereference", "P", "none", "P"),
    Option("no-preserve", None, "required", "no-preserve"),
    Option("no-target-directory", "T", "none", "T"),
    Option("one-file-system", "x", "none", "x"),
    Option("parents", None, "none", "parents"),
    Option("path", None, "none", "parents"),  # cp's old name for --parents
    Option("preserve", None, "optional", "preserve"),
    Option("recursive", "R", "none", "R"),
    Option("remove-destination", None, "none", "remove-destination"),
    Option("sparse", None, "required", "sparse"),
    Option("reflink", None, "optional", "reflink"),
    Option("strip-trailing-slashes", None, "none", "strip-trailing-slashes"),
    Option("suffix", "S", "required", "S"),
    Option("symbolic-link", "s", "none", "s"),
    Option("target-directory", "t", "required", "t"),
    Option("update", None, "optional", "update"),
    Option("verbose", "v", "none", "v"),
    Option("keep-directory-symlink", None, "none", "keep-directory-symlink"),
    Option("help", None, "none", "help"),
    Option("version", None, "none", "version"),
    # cp's short options without a long name.
    Option(None, "b", "none", "backup"),
    Option(None, "d", "none", "d"),
    Option(None, "H", "none", "H"),
    Option(None, "p", "none", "p"),
    Option(None, "r", "none", "R"),
    Option(None, "u", "none", "update"),
    # fdkit's own, never abbreviated.
    Option("atomic", None, "none", "atomic", exact=True),
    Option("quiet", "q", "none", "quiet", exact=True),
    Option("log", None, "none", "log", exact=True),
)

SPARSE = (("never", "never"), ("auto", "auto"), ("always", "always"))
REFLINK = (("auto", "auto"), ("always", "always"), ("never", "never"))
UPDATE: tuple[tuple[str, Update], ...] = (
    ("all", "all"),
    ("none", "none"),
    ("none-fail", "none-fail"),
    ("older", "older"),
)
PRESERVE = (
    ("mode", "mode"),
    ("timestamps", "timestamps"),
    ("ownership", "ownership"),
    ("links", "links"),
    ("context", "context"),
    ("xattr", "xattr"),
    ("all", "all"),
)


@dataclass(frozen=True)
class Command:
    """What the command line asks for: the copy's options, the operands, and fdkit's own
    ``-q`` and ``--log``; or ``--help``/``--version``."""

    options: Options
    operands: list[str]
    quiet: bool = False
    log: bool = False
    help: bool = False
    version: bool = False


@dataclass
class _Preserve:
    mode: bool = False
    ownership: bool = False
    timestamps: bool = False
    links: bool = False
    xattr: bool = False
    require_xattr: bool = False
    require_context: bool = False
    explicit_no_mode: bool = False


def _decode_preserve(arg: str, p: _Preserve, on: bool) -> None:
    """cp's ``decode_preserve_arg``: each word of ``--preserve=LIST``/``--no-preserve=LIST``."""
    context = "--preserve" if on else "--no-preserve"
    for word in arg.split(","):
        what = argmatch(context, word, PRESERVE)
        if what == "mode":
            p.mode = on
            p.explicit_no_mode = not on
        elif what == "timestamps":
            p.timestamps = on
        elif what == "ownership":
            p.ownership = on
        elif what == "links":
            p.links = on
        elif what == "context":
            p.require_context = on
        elif what == "xattr":
            p.xattr = on
            p.require_xattr = on
        else:  # all (the SELinux context only where SELinux is: never here)
            p.mode = p.timestamps = p.ownership = p.links = p.xattr = on
            p.explicit_no_mode = not on


def parse(argv: Sequence[str]) -> Command:
    """Read ``argv`` (the arguments after ``copy``) as cp reads its own; raises
    :class:`UsageError` with cp's message."""
    operands: list[str] = []
    dereference: Dereference | None = None
    interactive: Interactive = "unspecified"
    p = _Preserve()
    flags: dict[str, bool] = {}
    sparse = "auto"
    reflink = "auto"
    make_backups = False
    control: str | None = None
    suffix: str | None = None
    target: str | None = None
    update: Update = "all"
    require_preserve = False
    reduce_diagnostics = False
    try:
        for key, value in getopt(argv, OPTIONS, operands):
            if key == "help":
                return Command(Options(), [], help=True)
            if key == "version":
                return Command(Options(), [], version=True)
            if key == "sparse":
                assert value is not None
                sparse = argmatch("--sparse", value, SPARSE)
            elif key == "reflink":
                reflink = "always" if value is None else argmatch("--reflink", value, REFLINK)
            elif key == "a":
                dereference = "never"
                p.links = p.ownership = p.mode = p.timestamps = p.xattr = True
                require_preserve = True
                reduce_diagnostics = True
                flags["recursive"] = True
            elif key == "backup":
                make_backups = True
                if value is not None:
                    control = value
            elif key == "d":
                p.links = True
                dereference = "never"
            elif key == "f":
                flags["force"] = True
            elif key == "H":
                dereference = "command_line"
            elif key == "i":
                interactive = "ask"
            elif key == "l":
                flags["hard_link"] = True
            elif key == "L":
                dereference = "always"
            elif key == "n":
                interactive = "skip"
            elif key == "P":
                dereference = "never"
            elif key == "no-preserve":
                assert value is not None
                _decode_preserve(value, p, False)
            elif key == "preserve" and value is not None:
                _decode_preserve(value, p, True)
                require_preserve = True
            elif key in ("preserve", "p"):
                p.ownership = p.mode = p.timestamps = True
                require_preserve = True
            elif key == "t":
                if target is not None:
                    raise UsageError("multiple target directories specified", usage=False)
                target = value
            elif key == "update":
                # Apart from -i and -n (cp 9.6): the last --update says which files.
                update = "older" if value is None else argmatch("--update", value, UPDATE)
            elif key == "v":
                flags["verbose"] = True
            elif key == "debug":
                flags["debug"] = flags["verbose"] = True
            elif key == "S":
                make_backups = True
                suffix = value
            else:
                flags[_FLAG_NAMES[key]] = True
    except GetoptError as e:
        raise UsageError(str(e)) from None

    o = Options(
        recursive=flags.get("recursive", False),
        force=flags.get("force", False),
        hard_link=flags.get("hard_link", False),
        symbolic_link=flags.get("symbolic_link", False),
        attributes_only=flags.get("attributes_only", False),
        copy_contents=flags.get("copy_contents", False),
        one_file_system=flags.get("one_file_system", False),
        remove_destination=flags.get("remove_destination", False),
        parents=flags.get("parents", False),
        strip_trailing_slashes=flags.get("strip_trailing_slashes", False),
        no_target_directory=flags.get("no_target_directory", False),
        verbose=flags.get("verbose", False),
        debug=flags.get("debug", False),
        atomic=flags.get("atomic", False),
        target_directory=target,
        interactive=interactive,
        update=update,
        preserve_mode=p.mode,
        preserve_ownership=p.ownership,
        preserve_timestamps=p.timestamps,
        preserve_links=p.links,
        preserve_xattr=p.xattr,
        require_preserve_xattr=p.require_xattr,
        require_preserve=require_preserve,
        explicit_no_preserve_mode=p.explicit_no_mode,
        reduce_diagnostics=reduce_diagnostics,
        sparse=sparse,  # type: ignore[arg-type]
        reflink=reflink,  # type: ignore[arg-type]
        open_dangling_dest_symlink="POSIXLY_CORRECT" in os.environ,
        keep_directory_symlink=flags.get("keep_directory_symlink", False),
    )
    if o.reflink == "auto" and o.sparse == "never":
        # A clone or copy_file_range could carry the source's holes (cp 9.4).
        o = replace(o, reflink="never")
    if o.hard_link and o.symbolic_link:
        raise UsageError("cannot make both hard and symbolic links")
    if o.interactive == "skip":
        o = replace(o, update="none")
    if make_backups and o.update in ("none", "none-fail"):
        raise UsageError("--backup is mutually exclusive with -n or --update=none-fail")
    if o.reflink == "always" and o.sparse != "auto":
        raise UsageError("--reflink can be used only with --sparse=auto")
    backup: Backup = _backup_type(control) if make_backups else "none"
    if dereference is None:
        dereference = "never" if o.recursive and not o.hard_link else "always"
    o = replace(o, backup=backup, suffix=simple_suffix(suffix), dereference=dereference)
    if p.require_context:
        raise UsageError(
            "cannot preserve security context without an SELinux-enabled kernel", usage=False
        )
    return Command(o, operands, quiet=flags.get("quiet", False), log=flags.get("log", False))


#: Options that only set a flag: their key, and the flag's name.
_FLAG_NAMES = {
    "R": "recursive",
    "s": "symbolic_link",
    "T": "no_target_directory",
    "x": "one_file_system",
    "attributes-only": "attributes_only",
    "copy-contents": "copy_contents",
    "parents": "parents",
    "remove-destination": "remove_destination",
    "strip-trailing-slashes": "strip_trailing_slashes",
    "keep-directory-symlink": "keep_directory_symlink",
    "atomic": "atomic",
    "quiet": "quiet",
    "log": "log",
}


#: The words ``--backup=CONTROL`` and ``VERSION_CONTROL`` take, in cp's order, and the kind each
#: means.
CONTROLS: dict[str, Backup] = {
    "none": "none",
    "off": "none",
    "simple": "simple",
    "never": "simple",
    "existing": "existing",
    "nil": "existing",
    "numbered": "numbered",
    "t": "numbered",
}


def _backup_type(control: str | None) -> Backup:
    """gnulib's ``xget_version``: ``--backup=CONTROL``, else ``VERSION_CONTROL``, else
    ``existing``."""
    choices = tuple(CONTROLS.items())
    try:
        if control:
            return argmatch("backup type", control, choices)
        env = os.environ.get("VERSION_CONTROL")
        if env:
            return argmatch("$VERSION_CONTROL", env, choices)
    except GetoptError as e:
        raise UsageError(str(e)) from None
    return "existing"


def simple_suffix(suffix: str | None) -> str:
    """The suffix of a simple backup: ``suffix`` (``-S``), else ``SIMPLE_BACKUP_SUFFIX``, else
    ``~``; one that is empty or holds a ``/`` is ``~``, as cp has it."""
    if suffix is None:
        suffix = os.environ.get("SIMPLE_BACKUP_SUFFIX")
    if not suffix or "/" in suffix:
        return "~"
    return suffix
