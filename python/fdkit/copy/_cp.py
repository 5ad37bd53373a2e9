"""``cp SOURCE... DEST`` as GNU cp (coreutils 9.10) does it, each decision where cp makes it:
coreutils' ``do_copy`` (the operands), ``copy_internal`` (one source: what the destination is,
``-n``/``-i``/``-u``, backups, hard links kept, then what is made for each kind of source) and
``copy_dir``. What is made is :mod:`fdkit.copy._regular`'s (a regular file's bytes and
attributes) and :mod:`fdkit.copy._make`'s (a directory, a symlink, a hard link, a special file,
and their attributes).

:class:`Run` reports through a :class:`~fdkit.copy._options.Reporter` and returns cp's exit
status; the ``fdkit copy`` command is its front.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import stat
from dataclasses import dataclass, field

from fdkit.copy._backup import backup_name, make_backup
from fdkit.copy._make import (
    Made,
    finish,
    make_dir,
    make_file,
    make_hard_link,
)
from fdkit.copy._names import Key, concat, inside, key, last_component, same_name, writable
from fdkit.copy._options import Dereference, Options, Reporter
from fdkit.copy._parents import ParentDir, make_parents, re_protect
from fdkit.copy._quote import quote
from fdkit.copy._regular import Stopped
from fdkit.copy._same import same_file_ok


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@dataclass
class _Files:
    """Names already met, by (dev, ino), for one kind of check."""

    names: dict[Key, list[str]] = field(default_factory=dict)

    def seen(self, name: str, st: os.stat_result) -> bool:
        return any(same_name(name, other) for other in self.names.get(key(st), ()))

    def record(self, name: str, st: os.stat_result) -> None:
        self.names.setdefault(key(st), []).append(name)


@dataclass
class _Dest:
    """The destination of one source, as :meth:`Run._copy` finds it: its stat (None: none, or
    not looked at), whether that is its ``lstat``, whether it is to be made anew (``new``) and
    the name of its backup."""

    new: bool
    st: os.stat_result | None = None
    lstat: bool = False
    backup: str | None = None


def _follows(level: Dereference, command_line: bool) -> bool:
    """Whether a symlink source at this ``level`` is followed (``-L``; ``-H`` on the command
    line)."""
    return level == "always" or (level == "command_line" and command_line)


class UsageError(Exception):
    """A command line cp refuses before copying; ``usage``: cp adds "Try 'cp --help'"."""

    def __init__(self, message: str, *, usage: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.usage = usage


class Run:
    """One ``cp`` command: its options, its reporter and what it has made so far."""

    def __init__(self, options: Options, reporter: Reporter | None = None) -> None:
        self.options = options
        self.reporter = reporter if reporter is not None else Reporter()
        self.umask = _umask()
        # Source (dev, ino) to the name of its first copy (cp's remember_copied).
        self.copied: dict[Key, str] = {}
        self.src_info: _Files | None = None
        self.dest_info: _Files | None = None
        self.top_src = ""
        self.top_dst = ""

    # --- the operands (cp's do_copy) ------------------------------------------------------

    def check(self, files: list[str]) -> tuple[list[str], str | None, bool]:
        """The sources, the target directory (None: one source, one destination) and whether
        the destination is known not to exist; raises :class:`UsageError` as cp refuses."""
        o = self.options
        target = o.target_directory
        if len(files) <= (target is None):
            if not files:
                raise UsageError("missing file operand")
            raise UsageError(f"missing destination file operand after {quote(files[0])}")
        new_dst = False
        if o.no_target_directory:
            if target is not None:
                raise UsageError(
                    "cannot combine --target-directory (-t) and --no-target-directory (-T)",
                    usage=False,
                )
            if len(files) > 2:
                raise UsageError(f"extra operand {quote(files[2])}")
        elif target is not None:
            try:
                if not stat.S_ISDIR(os.stat(target).st_mode):
                    raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
            except OSError as e:
                raise UsageError(
                    f"target directory {quote(target)}: {e.strerror}", usage=False
                ) from None
        else:
            last = files[-1]
            try:
                is_dir = stat.S_ISDIR(os.stat(last).st_mode)
                error: OSError = NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
            except OSError as e:
                is_dir = False
                error = e
            if is_dir:
                target = last
                files = files[:-1]
            else:
                if error.errno == errno.ENOENT:
                    new_dst = True
                if len(files) > 2:
                    raise UsageError(f"target {quote(last)}: {error.strerror}", usage=False)
        if target is None and o.parents:
            raise UsageError("with --parents, the destination must be a directory")
        return files, target, new_dst

    def run(self, files: list[str]) -> int:
        """Copy as ``cp [OPTION]... FILES`` does; returns the exit status (0, 1, or 141 when
        a FIFO's reader went away). Raises :class:`UsageError` before copying anything."""
        sources, target, new_dst = self.check(list(files))
        try:
            return 0 if self._run(sources, target, new_dst) else 1
        except Stopped as e:
            return e.code

    def _run(self, sources: list[str], target: str | None, new_dst: bool) -> bool:
        o = self.options
        if target is None:
            src, dest = sources
            opts = o
            if (
                o.force
                and o.backup != "none"
                and src == dest
                and not new_dst
                and os.path.isfile(dest)
            ):
                # 'cp --force --backup foo foo' copies foo to its backup name.
                dest = backup_name(dest, o.backup, o.suffix)
                opts = dataclasses.replace(o, backup="none")
            saved = self.options
            self.options = opts
            try:
                return self.copy(src, dest, -1 if new_dst else 0)
            finally:
                self.options = saved
        if len(sources) >= 2:
            self.src_info = _Files()
            self.dest_info = _Files()
        ok = True
        for arg in sources:
            if o.strip_trailing_slashes:
                arg = arg.rstrip("/") or ("/" if arg else arg)
            parent_exists = True
            made: list[ParentDir] = []
            new = False
            if o.parents:
                dst = concat(target, arg.rstrip("/") or arg)
                parent_exists, made, new = make_parents(
                    o, self.reporter, self.umask, dst, len(target), arg
                )
            else:
                base = last_component(arg)
                if base == "..":
                    base = "."
                dst = concat(target, base)
            if not parent_exists:
                ok = False
                continue
            ok &= self.copy(arg, dst, 1 if new else 0)
            if o.parents:
                ok &= re_protect(o, self.reporter, made)
        return ok

    # --- one source (cp's copy and copy_internal) -------------------------------------------

    def copy(self, src: str, dst: str, nonexistent_dst: int) -> bool:
        """One operand: ``src`` to ``dst``. ``nonexistent_dst``: 1, ``dst`` does not exist;
        -1, not even as a dangling symlink... as cp's; 0, unknown."""
        self.top_src, self.top_dst = src, dst
        first_dir = [False]
        into_self = [False]
        return self._copy(
            src,
            dst,
            nonexistent_dst,
            None,
            (),
            self.options.dereference,
            True,
            first_dir,
            into_self,
        )

    def _copy(
        self,
        src: str,
        dst: str,
        nonexistent_dst: int,
        parent: os.stat_result | None,
        ancestors: tuple[Key, ...],
        level: Dereference,
        command_line: bool,
        first_dir: list[bool],
        into_self: list[bool],
    ) -> bool:
        """cp's ``copy_internal``: the source, the destination, the links kept, then what is
        made for the kind of source (a directory and its entries; else
        :func:`~fdkit.copy._make.make_file`) and its attributes."""
        o = self.options
        into_self[0] = False
        src_st = self._source(src, dst, level, command_line)
        if isinstance(src_st, bool):
            return src_st
        is_dir = stat.S_ISDIR(src_st.st_mode)
        dereference = _follows(level, command_line)
        d = _Dest(new=nonexistent_dst > 0)
        if nonexistent_dst <= 0:
            if not _stat_dst(o, self.reporter, dst, src_st, nonexistent_dst, d):
                return False
            if d.st is not None:
                done = self._existing_dst(src, dst, src_st, d.st, level, command_line, d)
                if done is not None:
                    return done
        if command_line and o.backup == "none" and self._through_new_symlink(src, dst, d):
            return False
        if o.verbose and not is_dir:
            _emit_verbose(self.reporter, src, dst, d.backup)
        earlier = self._earlier(dst, src_st, level, command_line, is_dir)
        if earlier is not None:
            done = self._copied_before(src, dst, src_st, earlier, level, command_line, d, into_self)
            if done is not None:
                return done

        omitted = (src_st.st_mode & 0o7777) & (
            0o077 if o.preserve_ownership else 0o022 if is_dir else 0
        )
        made = Made(d.st, d.new, omitted)
        delayed_ok = True
        if is_dir:
            if not self._make_dir(src, dst, src_st, ancestors, first_dir, made):
                return self._un_backup(dst, d.backup, earlier, src_st)
            if o.one_file_system and parent is not None and parent.st_dev != src_st.st_dev:
                pass  # a mount point: made, not entered (cp -x)
            else:
                below = (*ancestors, key(src_st))
                delayed_ok = self._copy_dir(
                    src, dst, d.new, src_st, below, level, first_dir, into_self
                )
        elif not make_file(
            o, self.reporter, self.umask, src, dst, src_st, level, dereference, made
        ):
            return self._un_backup(dst, d.backup, earlier, src_st)

        if command_line and self.dest_info is not None:
            with contextlib.suppress(OSError):
                self.dest_info.record(dst, os.lstat(dst))
        if not is_dir and (o.hard_link or made.regular):
            return delayed_ok  # the attributes are given (a regular file's) or shared (a link)
        return (
            finish(o, self.reporter, self.umask, src, dst, src_st, made, directory=is_dir)
            and delayed_ok
        )

    def _source(
        self, src: str, dst: str, level: Dereference, command_line: bool
    ) -> os.stat_result | bool:
        """``src``'s stat, or whether the run goes on without it (after an error, or the
        warning that a source is named twice)."""
        o = self.options
        report = self.reporter
        try:
            src_st = os.stat(src) if level != "never" else os.lstat(src)
        except OSError as e:
            report.error(f"cannot stat {quote(src)}: {e.strerror}")
            return False
        is_dir = stat.S_ISDIR(src_st.st_mode)
        if is_dir and not o.recursive:
            report.error(f"-r not specified; omitting directory {quote(src)}")
            return False
        if command_line and is_dir and inside(src, dst):
            # cp finds this once it has made a copy inside the copy; fdkit before making any.
            report.error(f"cannot copy a directory, {quote(src)}, into itself, {quote(dst)}")
            return False
        if command_line and self.src_info is not None:
            if not is_dir and o.backup == "none" and self.src_info.seen(src, src_st):
                report.error(f"warning: source file {quote(src)} specified more than once")
                return True
            self.src_info.record(src, src_st)
        return src_st

    def _existing_dst(
        self,
        src: str,
        dst: str,
        src_st: os.stat_result,
        dst_st: os.stat_result,
        level: Dereference,
        command_line: bool,
        d: _Dest,
    ) -> bool | None:
        """A destination that exists: the same file, ``-u``, ``-n``, ``-i``, a directory and a
        file in each other's way, a file this run made; then backed up or removed as asked.
        Returns what :meth:`_copy` returns when it stops here, None when it goes on."""
        o = self.options
        report = self.reporter
        is_dir = stat.S_ISDIR(src_st.st_mode)
        return_now = [False]
        keep = o.update in ("none", "none-fail")
        if not keep and not same_file_ok(o, src, src_st, dst, dst_st, level, return_now):
            report.error(f"{quote(src)} and {quote(dst)} are the same file")
            return False
        if o.update == "older" and not is_dir and dst_st.st_mtime_ns >= src_st.st_mtime_ns:
            linked = self._remember(dst, src_st)
            if linked is not None and not make_hard_link(
                report, linked, dst, True, o.verbose, _follows(level, command_line)
            ):
                return self._un_backup(dst, d.backup, linked, src_st)
            return _skipped(o, report, dst, True)
        if not is_dir and (
            keep or (o.interactive == "ask" and not _overwrite_ok(o, report, dst, dst_st))
        ):
            # Only --update=none is no failure: a declined -i is one (cp 9.2).
            return _skipped(o, report, dst, o.update == "none")
        if return_now[0]:
            return True
        if is_dir != stat.S_ISDIR(dst_st.st_mode) and o.backup == "none":
            # With --backup (cp 9.5) a file in a directory's way is backed up, and a
            # directory in a file's way is met further on, where it cannot be opened.
            if is_dir:
                what = f"non-directory {quote(dst)} with directory {quote(src)}"
            else:
                what = f"directory {quote(dst)} with non-directory {quote(src)}"
            report.error(f"cannot overwrite {what}")
            return False
        if (
            not stat.S_ISDIR(dst_st.st_mode)
            and command_line
            and o.backup != "numbered"
            and self.dest_info is not None
            and self.dest_info.seen(dst, dst_st)
        ):
            report.error(f"will not overwrite just-created {quote(dst)} with {quote(src)}")
            return False
        return None if _make_room(o, report, src, dst, src_st, dst_st, level, d) else False

    def _through_new_symlink(self, src: str, dst: str, d: _Dest) -> bool:
        """Whether ``dst`` is a symlink this run made (then refused, reported)."""
        if self.dest_info is None:
            return False
        lst: os.stat_result | None = d.st if d.lstat else None
        if lst is None:
            try:
                lst = os.lstat(dst)
            except OSError:
                lst = None
        if lst is not None and stat.S_ISLNK(lst.st_mode) and self.dest_info.seen(dst, lst):
            self.reporter.error(
                f"will not copy {quote(src)} through just-created symlink {quote(dst)}"
            )
            return True
        return False

    def _earlier(
        self,
        dst: str,
        src_st: os.stat_result,
        level: Dereference,
        command_line: bool,
        is_dir: bool,
    ) -> str | None:
        """The name of an earlier copy of ``src_st``'s inode, for a directory met again or a
        hard link kept (``--preserve=links``, ``-L``, ``-H``); None after recording ``dst``
        as its first."""
        o = self.options
        if o.recursive and is_dir:
            return self._remember(dst, src_st) if command_line else self.copied.get(key(src_st))
        if (
            o.preserve_links
            and not o.hard_link
            and (
                src_st.st_nlink > 1
                or (command_line and level == "command_line")
                or level == "always"
            )
        ):
            return self._remember(dst, src_st)
        return None

    def _copied_before(
        self,
        src: str,
        dst: str,
        src_st: os.stat_result,
        earlier: str,
        level: Dereference,
        command_line: bool,
        d: _Dest,
        into_self: list[bool],
    ) -> bool | None:
        """A source whose inode was copied before, to ``earlier``: a directory into itself
        (``into_self[0]`` set), named twice, or linked where cp does not link a directory; else
        a hard link to the earlier copy. Returns what :meth:`_copy` returns when it stops
        here, None when a directory is copied again."""
        o = self.options
        report = self.reporter
        if not stat.S_ISDIR(src_st.st_mode):
            if not make_hard_link(
                report, earlier, dst, True, o.verbose, _follows(level, command_line)
            ):
                return self._un_backup(dst, d.backup, earlier, src_st)
            return True
        if same_name(src, earlier):
            report.error(
                f"cannot copy a directory, {quote(self.top_src)}, "
                f"into itself, {quote(self.top_dst)}"
            )
            into_self[0] = True
            return self._un_backup(dst, d.backup, earlier, src_st)
        if same_name(dst, earlier):
            report.error(
                f"warning: source directory {quote(self.top_src)} specified more than once"
            )
            return True
        if not (level == "always" or (command_line and level == "command_line")):
            report.error(f"will not create hard link {quote(dst)} to directory {quote(earlier)}")
            return self._un_backup(dst, d.backup, earlier, src_st)
        return None

    def _make_dir(
        self,
        src: str,
        dst: str,
        src_st: os.stat_result,
        ancestors: tuple[Key, ...],
        first_dir: list[bool],
        made: Made,
    ) -> bool:
        """The directory ``dst`` for the directory ``src``, unless it is there (a cyclic
        symlink refused); the first one a command-line source makes is remembered."""
        if key(src_st) in ancestors:
            self.reporter.error(f"cannot copy cyclic symbolic link {quote(src)}")
            return False
        if not (made.new or made.st is None or not stat.S_ISDIR(made.st.st_mode)):
            made.omitted = 0
            return True
        dst_st = make_dir(self.reporter, dst, (src_st.st_mode & 0o7777) & ~made.omitted, made)
        if dst_st is None:
            return False
        if not first_dir[0]:
            self._remember(dst, dst_st)
            first_dir[0] = True
        if self.options.verbose:
            _emit_verbose(self.reporter, src, dst, None)
        return True

    def _copy_dir(
        self,
        src: str,
        dst: str,
        new_dst: bool,
        src_st: os.stat_result,
        ancestors: tuple[Key, ...],
        level: Dereference,
        first_dir: list[bool],
        into_self: list[bool],
    ) -> bool:
        """Each entry of ``src`` into ``dst``, in inode order as cp reads them (the fastest
        order on ext4; cp sorts so too)."""
        try:
            with os.scandir(src) as it:
                names = [e.name for e in sorted(it, key=lambda e: e.inode())]
        except OSError as e:
            self.reporter.error(f"cannot access {quote(src)}: {e.strerror}")
            return False
        below: Dereference = "never" if level == "command_line" else level
        ok = True
        made_first = False
        for name in names:
            local_first = [first_dir[0]]
            local_into_self = [False]
            ok &= self._copy(
                concat(src, name),
                concat(dst, name),
                1 if new_dst else 0,
                src_st,
                ancestors,
                below,
                False,
                local_first,
                local_into_self,
            )
            if local_into_self[0]:
                into_self[0] = True
                break
            made_first |= local_first[0]
        first_dir[0] = made_first
        return ok

    # --- what this run has copied -------------------------------------------------------------

    def _remember(self, dst: str, st: os.stat_result) -> str | None:
        """The name of the earlier copy of ``st``'s inode, or None after recording ``dst`` as
        its first (cp's ``remember_copied``)."""
        k = key(st)
        earlier = self.copied.get(k)
        if earlier is None:
            self.copied[k] = dst
        return earlier

    def _un_backup(
        self, dst: str, backup: str | None, earlier: str | None, src_st: os.stat_result
    ) -> bool:
        """A failed copy: forget it was made, and put the backup back. Returns False."""
        if earlier is None:
            self.copied.pop(key(src_st), None)
        if backup is not None:
            try:
                os.rename(backup, dst)
            except OSError as e:
                self.reporter.error(f"cannot un-backup {quote(dst)}: {e.strerror}")
            else:
                if self.options.verbose:
                    self.reporter.say(f"{quote(backup)} -> {quote(dst)} (unbackup)")
        return False


# --- the destination ------------------------------------------------------------------------------


def _stat_dst(
    o: Options, report: Reporter, dst: str, src_st: os.stat_result, nonexistent_dst: int, d: _Dest
) -> bool:
    """``dst``'s stat (or lstat, as cp chooses) into ``d``; False after an error."""
    src_mode = src_st.st_mode
    use_lstat = (
        (
            not stat.S_ISREG(src_mode)
            and (
                not o.copy_as_regular
                or (stat.S_ISDIR(src_mode) and not o.keep_directory_symlink)
                or stat.S_ISLNK(src_mode)
            )
        )
        or o.symbolic_link
        or o.hard_link
        or o.backup != "none"
        or o.remove_destination
    )
    if not use_lstat and nonexistent_dst < 0:
        d.new = True
        return True
    try:
        d.st = os.lstat(dst) if use_lstat else os.stat(dst)
        d.lstat = use_lstat
    except OSError as e:
        if e.errno == errno.ELOOP and o.force:
            pass
        elif e.errno != errno.ENOENT:
            report.error(f"cannot stat {quote(dst)}: {e.strerror}")
            return False
        else:
            d.new = True
    return True


def _make_room(
    o: Options,
    report: Reporter,
    src: str,
    dst: str,
    src_st: os.stat_result,
    dst_st: os.stat_result,
    level: Dereference,
    d: _Dest,
) -> bool:
    """An existing destination backed up (``--backup``) or removed (``--remove-destination``;
    a file with other hard links under ``--preserve=links``; one a special file is to
    replace), then to be made anew (``d.new``). False after an error, reported."""
    srcbase = last_component(src)
    if o.backup != "none" and srcbase not in (".", "..") and not stat.S_ISDIR(dst_st.st_mode):
        if o.backup != "numbered" and _source_is_dst_backup(o.suffix, srcbase, src_st, dst):
            report.error(f"backing up {quote(dst)} might destroy source;  {quote(src)} not copied")
            return False
        try:
            d.backup = make_backup(dst, o.backup, o.suffix)
        except OSError as e:
            report.error(f"cannot backup {quote(dst)}: {e.strerror}")
            return False
        d.new = True
    elif not stat.S_ISDIR(dst_st.st_mode) and (
        o.remove_destination
        or (
            o.data_copy_required
            and (
                (o.preserve_links and dst_st.st_nlink > 1)
                or (level == "never" and not stat.S_ISREG(src_st.st_mode))
            )
        )
    ):
        try:
            os.unlink(dst)
        except OSError as e:
            if e.errno != errno.ENOENT:
                report.error(f"cannot remove {quote(dst)}: {e.strerror}")
                return False
        d.new = True
        if o.verbose:
            report.say(f"removed {quote(dst)}")
    return True


def _skipped(o: Options, report: Reporter, dst: str, ok: bool) -> bool:
    """An existing ``dst`` left as it is: ``--update=none-fail`` names it as an error,
    ``--debug`` says so on stdout (cp 9.4: ``-v`` alone does not). Returns ``ok``."""
    if o.update == "none-fail":
        report.error(f"not replacing {quote(dst)}")
    elif o.debug:
        report.say(f"skipped {quote(dst)}")
    return ok


def _emit_verbose(report: Reporter, src: str, dst: str, backup: str | None) -> None:
    line = f"{quote(src)} -> {quote(dst)}"
    if backup is not None:
        line += f" (backup: {quote(backup)})"
    report.say(line)


def _overwrite_ok(o: Options, report: Reporter, dst: str, dst_st: os.stat_result) -> bool:
    if stat.S_ISLNK(dst_st.st_mode) or os.geteuid() == 0 or writable(dst):
        return report.ask(f"overwrite {quote(dst)}? ")
    perms = stat.filemode(dst_st.st_mode)[1:]
    mode = f"{stat.S_IMODE(dst_st.st_mode):04o}"
    if o.remove_destination or o.force:
        return report.ask(f"replace {quote(dst)}, overriding mode {mode} ({perms})? ")
    return report.ask(f"unwritable {quote(dst)} (mode {mode}, {perms}); try anyway? ")


def _source_is_dst_backup(suffix: str, srcbase: str, src_st: os.stat_result, dst: str) -> bool:
    dstbase = os.path.basename(dst)
    if srcbase != dstbase + suffix:
        return False
    try:
        back = os.stat(dst + suffix)
    except OSError:
        return False
    return key(back) == key(src_st)
