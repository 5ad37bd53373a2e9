"""``cp SOURCE... DEST`` as GNU cp (coreutils 9.10) does it, each decision where cp makes it:
coreutils' ``do_copy`` (the operands), ``copy_internal`` (one source: what the destination is,
``-n``/``-i``/``-u``, backups, hard links kept, directories, symlinks and special files) and
``copy_dir``. The bytes of a regular file are :mod:`fdkit.copy._regular`'s.

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

from fdkit.copy._attrs import chown_failure_ok, copy_acl, copy_xattrs, set_owner
from fdkit.copy._backup import backup_name, make_backup
from fdkit.copy._links import force_link, force_symlink
from fdkit.copy._names import Key, concat, inside, key, last_component, same_name, writable
from fdkit.copy._options import Dereference, Options, Reporter
from fdkit.copy._parents import ParentDir, make_parents, re_protect
from fdkit.copy._quote import quote, quote_if_needed
from fdkit.copy._regular import Stopped, copy_reg
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
                parent_exists, made, new = make_parents(self, dst, len(target), arg)
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
                ok &= re_protect(self, dst, made)
        return ok

    # --- --parents ------------------------------------------------------------------------

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

    def _deref(self, level: Dereference, command_line: bool) -> bool:
        return level == "always" or (level == "command_line" and command_line)

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
        o = self.options
        report = self.reporter
        new_dst = nonexistent_dst > 0
        into_self[0] = False
        try:
            src_st = os.stat(src) if level != "never" else os.lstat(src)
        except OSError as e:
            report.error(f"cannot stat {quote(src)}: {e.strerror}")
            return False
        src_mode = src_st.st_mode
        is_dir = stat.S_ISDIR(src_mode)
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
        dereference = self._deref(level, command_line)
        dst_st: os.stat_result | None = None
        have_dst_lstat = False
        dst_backup: str | None = None
        if nonexistent_dst <= 0:
            use_lstat = (
                (
                    not stat.S_ISREG(src_mode)
                    and (
                        not o.copy_as_regular
                        or (is_dir and not o.keep_directory_symlink)
                        or stat.S_ISLNK(src_mode)
                    )
                )
                or o.symbolic_link
                or o.hard_link
                or o.backup != "none"
                or o.remove_destination
            )
            if not use_lstat and nonexistent_dst < 0:
                new_dst = True
            else:
                try:
                    dst_st = os.lstat(dst) if use_lstat else os.stat(dst)
                    have_dst_lstat = use_lstat
                except OSError as e:
                    if e.errno == errno.ELOOP and o.force:
                        pass
                    elif e.errno != errno.ENOENT:
                        report.error(f"cannot stat {quote(dst)}: {e.strerror}")
                        return False
                    else:
                        new_dst = True
            if dst_st is not None:
                return_now = [False]
                keep = o.update in ("none", "none-fail")
                if not keep and not same_file_ok(o, src, src_st, dst, dst_st, level, return_now):
                    report.error(f"{quote(src)} and {quote(dst)} are the same file")
                    return False
                if o.update == "older" and not is_dir and dst_st.st_mtime_ns >= src_st.st_mtime_ns:
                    linked = self._remember(dst, src_st)
                    if linked is not None and not self._hard_link(
                        linked, dst, True, o.verbose, dereference
                    ):
                        return self._un_backup(dst, dst_backup, linked, src_st)
                    return self._skipped(dst, True)
                if not is_dir and (
                    keep or (o.interactive == "ask" and not self._overwrite_ok(dst, dst_st))
                ):
                    # Only --update=none is no failure: a declined -i is one (cp 9.2).
                    return self._skipped(dst, o.update == "none")
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
                srcbase = last_component(src)
                if (
                    o.backup != "none"
                    and srcbase not in (".", "..")
                    and not stat.S_ISDIR(dst_st.st_mode)
                ):
                    if o.backup != "numbered" and self._source_is_dst_backup(srcbase, src_st, dst):
                        report.error(
                            f"backing up {quote(dst)} might destroy source;  "
                            f"{quote(src)} not copied"
                        )
                        return False
                    try:
                        dst_backup = make_backup(dst, o.backup, o.suffix)
                    except OSError as e:
                        report.error(f"cannot backup {quote(dst)}: {e.strerror}")
                        return False
                    new_dst = True
                elif not stat.S_ISDIR(dst_st.st_mode) and (
                    o.remove_destination
                    or (
                        o.data_copy_required
                        and (
                            (o.preserve_links and dst_st.st_nlink > 1)
                            or (level == "never" and not stat.S_ISREG(src_mode))
                        )
                    )
                ):
                    try:
                        os.unlink(dst)
                    except OSError as e:
                        if e.errno != errno.ENOENT:
                            report.error(f"cannot remove {quote(dst)}: {e.strerror}")
                            return False
                    new_dst = True
                    if o.verbose:
                        report.say(f"removed {quote(dst)}")

        if command_line and self.dest_info is not None and o.backup == "none":
            lst: os.stat_result | None = dst_st if have_dst_lstat else None
            if lst is None:
                try:
                    lst = os.lstat(dst)
                except OSError:
                    lst = None
            if lst is not None and stat.S_ISLNK(lst.st_mode) and self.dest_info.seen(dst, lst):
                report.error(
                    f"will not copy {quote(src)} through just-created symlink {quote(dst)}"
                )
                return False

        if o.verbose and not is_dir:
            self._emit_verbose(src, dst, dst_backup)

        earlier: str | None = None
        if o.recursive and is_dir:
            earlier = self._remember(dst, src_st) if command_line else self.copied.get(key(src_st))
        elif (
            o.preserve_links
            and not o.hard_link
            and (
                src_st.st_nlink > 1
                or (command_line and level == "command_line")
                or level == "always"
            )
        ):
            earlier = self._remember(dst, src_st)

        if earlier is not None:
            if is_dir:
                if same_name(src, earlier):
                    report.error(
                        f"cannot copy a directory, {quote(self.top_src)}, "
                        f"into itself, {quote(self.top_dst)}"
                    )
                    into_self[0] = True
                    return self._un_backup(dst, dst_backup, earlier, src_st)
                if same_name(dst, earlier):
                    report.error(
                        f"warning: source directory {quote(self.top_src)} specified more than once"
                    )
                    return True
                if not (level == "always" or (command_line and level == "command_line")):
                    report.error(
                        f"will not create hard link {quote(dst)} to directory {quote(earlier)}"
                    )
                    return self._un_backup(dst, dst_backup, earlier, src_st)
            else:
                if not self._hard_link(earlier, dst, True, o.verbose, dereference):
                    return self._un_backup(dst, dst_backup, earlier, src_st)
                return True

        dst_mode_bits = src_mode & 0o7777
        omitted = dst_mode_bits & (0o077 if o.preserve_ownership else 0o022 if is_dir else 0)
        delayed_ok = True
        dest_is_symlink = False
        restore_dst_mode = False
        dst_mode = 0
        copied_as_regular = False

        if is_dir:
            if key(src_st) in ancestors:
                report.error(f"cannot copy cyclic symbolic link {quote(src)}")
                return self._un_backup(dst, dst_backup, earlier, src_st)
            below = (*ancestors, key(src_st))
            if new_dst or dst_st is None or not stat.S_ISDIR(dst_st.st_mode):
                try:
                    os.mkdir(dst, dst_mode_bits & ~omitted)
                except OSError as e:
                    report.error(f"cannot create directory {quote(dst)}: {e.strerror}")
                    return self._un_backup(dst, dst_backup, earlier, src_st)
                try:
                    dst_st = os.lstat(dst)
                except OSError as e:
                    report.error(f"cannot stat {quote(dst)}: {e.strerror}")
                    return self._un_backup(dst, dst_backup, earlier, src_st)
                if (dst_st.st_mode & 0o700) != 0o700:
                    dst_mode = dst_st.st_mode
                    restore_dst_mode = True
                    try:
                        os.chmod(dst, stat.S_IMODE(dst_mode) | 0o700)
                    except OSError as e:
                        report.error(f"setting permissions for {quote(dst)}: {e.strerror}")
                        return self._un_backup(dst, dst_backup, earlier, src_st)
                if not first_dir[0]:
                    self._remember(dst, dst_st)
                    first_dir[0] = True
                if o.verbose:
                    self._emit_verbose(src, dst, None)
            else:
                omitted = 0
            if o.one_file_system and parent is not None and parent.st_dev != src_st.st_dev:
                pass  # a mount point: made, not entered (cp -x)
            else:
                delayed_ok = self._copy_dir(
                    src, dst, new_dst, src_st, below, level, first_dir, into_self
                )
        elif o.symbolic_link:
            dest_is_symlink = True
            if not src.startswith("/"):
                parent_dir = os.path.dirname(dst) or "."
                try:
                    here = parent_dir == "." or os.path.samefile(".", parent_dir)
                except OSError:
                    here = True
                if not here:
                    report.error(
                        f"{quote_if_needed(dst)}: can make relative symbolic links only in "
                        "current directory"
                    )
                    return self._un_backup(dst, dst_backup, earlier, src_st)
            try:
                force_symlink(src, dst, o.force)
            except OSError as e:
                report.error(
                    f"cannot create symbolic link {quote(dst)} to {quote(src)}: {e.strerror}"
                )
                return self._un_backup(dst, dst_backup, earlier, src_st)
        elif o.hard_link:
            replace = o.force or o.interactive == "ask"
            if not self._hard_link(src, dst, replace, False, dereference):
                return self._un_backup(dst, dst_backup, earlier, src_st)
        elif stat.S_ISREG(src_mode) or (o.copy_as_regular and not stat.S_ISLNK(src_mode)):
            copied_as_regular = True
            ok, new_dst = copy_reg(
                self,
                src,
                dst,
                dst_mode_bits & 0o777,
                omitted,
                new_dst,
                src_st,
                nofollow=level == "never",
            )
            if not ok:
                return self._un_backup(dst, dst_backup, earlier, src_st)
        elif stat.S_ISFIFO(src_mode):
            try:
                os.mkfifo(dst, stat.S_IMODE(src_mode) & ~omitted)
            except OSError as e:
                report.error(f"cannot create fifo {quote(dst)}: {e.strerror}")
                return self._un_backup(dst, dst_backup, earlier, src_st)
        elif stat.S_ISBLK(src_mode) or stat.S_ISCHR(src_mode) or stat.S_ISSOCK(src_mode):
            try:
                os.mknod(dst, src_mode & ~omitted, src_st.st_rdev)
            except OSError as e:
                report.error(f"cannot create special file {quote(dst)}: {e.strerror}")
                return self._un_backup(dst, dst_backup, earlier, src_st)
        elif stat.S_ISLNK(src_mode):
            dest_is_symlink = True
            try:
                target = os.readlink(src)
            except OSError as e:
                report.error(f"cannot read symbolic link {quote(src)}: {e.strerror}")
                return self._un_backup(dst, dst_backup, earlier, src_st)
            try:
                force_symlink(target, dst, o.force)
            except OSError as e:
                same = False
                if (
                    o.update == "older"
                    and not new_dst
                    and dst_st is not None
                    and stat.S_ISLNK(dst_st.st_mode)
                ):
                    try:
                        same = os.readlink(dst) == target
                    except OSError:
                        same = False
                if not same:
                    report.error(f"cannot create symbolic link {quote(dst)}: {e.strerror}")
                    return self._un_backup(dst, dst_backup, earlier, src_st)
            if o.preserve_ownership:
                try:
                    os.chown(dst, src_st.st_uid, src_st.st_gid, follow_symlinks=False)
                except OSError as e:
                    if not chown_failure_ok(e):
                        # cp names this one unquoted.
                        report.error(f"failed to preserve ownership for {dst}: {e.strerror}")
                        if o.require_preserve:
                            return self._un_backup(dst, dst_backup, earlier, src_st)
        else:
            report.error(f"{quote(src)} has unknown file type")
            return self._un_backup(dst, dst_backup, earlier, src_st)

        if command_line and self.dest_info is not None:
            with contextlib.suppress(OSError):
                self.dest_info.record(dst, os.lstat(dst))
        if o.hard_link and not is_dir:
            return delayed_ok
        if copied_as_regular:
            return delayed_ok
        return (
            self._finish(
                src,
                dst,
                src_st,
                dst_st,
                new_dst,
                dest_is_symlink,
                is_dir,
                omitted,
                restore_dst_mode,
                dst_mode,
            )
            and delayed_ok
        )

    def _finish(
        self,
        src: str,
        dst: str,
        src_st: os.stat_result,
        dst_st: os.stat_result | None,
        new_dst: bool,
        dest_is_symlink: bool,
        is_dir: bool,
        omitted: int,
        restore_dst_mode: bool,
        dst_mode: int,
    ) -> bool:
        """A directory's, symlink's or special file's attributes, once made (and filled)."""
        o = self.options
        report = self.reporter
        src_mode = src_st.st_mode
        if o.preserve_timestamps:
            try:
                os.utime(
                    dst,
                    ns=(src_st.st_atime_ns, src_st.st_mtime_ns),
                    follow_symlinks=not dest_is_symlink,
                )
            except OSError as e:
                report.error(f"preserving times for {quote(dst)}: {e.strerror}")
                if o.require_preserve:
                    return False
        if (
            not dest_is_symlink
            and o.preserve_ownership
            and (
                new_dst
                or dst_st is None
                or (src_st.st_uid, src_st.st_gid) != (dst_st.st_uid, dst_st.st_gid)
            )
        ):
            done = set_owner(
                dst,
                src_st,
                new=new_dst,
                old=dst_st,
                preserve_mode=o.preserve_mode,
                report=lambda what, e: report.error(f"{what} {quote(dst)}: {e.strerror}"),
                require=o.require_preserve,
            )
            if done < 0:
                return False
            if done == 0:
                src_mode &= ~(stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX)
        if o.preserve_xattr:
            everything = o.attributes_only or o.require_preserve_xattr
            if (
                not copy_xattrs(
                    src,
                    dst,
                    src,
                    dst,
                    follow=not dest_is_symlink,
                    report=report.error if everything or not o.reduce_diagnostics else None,
                    report_unsupported=everything,
                )
                and o.require_preserve_xattr
            ):
                return False
        if dest_is_symlink:
            return True
        if o.preserve_mode:
            try:
                copy_acl(src, dst, src_mode, directory=is_dir)
            except OSError as e:
                report.error(f"preserving permissions for {quote(dst)}: {e.strerror}")
                if o.require_preserve:
                    return False
        elif o.explicit_no_preserve_mode and new_dst:
            default = 0o777 if is_dir or stat.S_ISSOCK(src_mode) else 0o666
            if is_dir and dst_st is not None:
                # The set-group-ID bit a new directory takes from its parent stays (cp 9.5).
                default |= dst_st.st_mode & stat.S_ISGID
            try:
                os.chmod(dst, default & ~self.umask)
            except OSError as e:
                report.error(f"preserving permissions for {quote(dst)}: {e.strerror}")
                return False
        else:
            if omitted:
                omitted &= ~self.umask
                if omitted and not restore_dst_mode:
                    if new_dst or dst_st is None:
                        try:
                            dst_st = os.lstat(dst)
                        except OSError as e:
                            report.error(f"cannot stat {quote(dst)}: {e.strerror}")
                            return False
                    dst_mode = dst_st.st_mode
                    if omitted & ~dst_mode:
                        restore_dst_mode = True
            if restore_dst_mode:
                try:
                    os.chmod(dst, stat.S_IMODE(dst_mode | omitted))
                except OSError as e:
                    report.error(f"preserving permissions for {quote(dst)}: {e.strerror}")
                    if o.require_preserve:
                        return False
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

    # --- helpers ----------------------------------------------------------------------------

    def _skipped(self, dst: str, ok: bool) -> bool:
        """An existing ``dst`` left as it is: ``--update=none-fail`` names it as an error,
        ``--debug`` says so on stdout (cp 9.4: ``-v`` alone does not). Returns ``ok``."""
        if self.options.update == "none-fail":
            self.reporter.error(f"not replacing {quote(dst)}")
        elif self.options.debug:
            self.reporter.say(f"skipped {quote(dst)}")
        return ok

    def _emit_verbose(self, src: str, dst: str, backup: str | None) -> None:
        line = f"{quote(src)} -> {quote(dst)}"
        if backup is not None:
            line += f" (backup: {quote(backup)})"
        self.reporter.say(line)

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

    def _hard_link(
        self, src: str, dst: str, replace: bool, verbose: bool, dereference: bool
    ) -> bool:
        try:
            replaced = force_link(src, dst, replace, dereference)
        except OSError as e:
            self.reporter.error(
                f"cannot create hard link {quote(dst)} to {quote(src)}: {e.strerror}"
            )
            return False
        if replaced and verbose:
            self.reporter.say(f"removed {quote(dst)}")
        return True

    def _overwrite_ok(self, dst: str, dst_st: os.stat_result) -> bool:
        o = self.options
        if stat.S_ISLNK(dst_st.st_mode) or os.geteuid() == 0 or writable(dst):
            return self.reporter.ask(f"overwrite {quote(dst)}? ")
        perms = stat.filemode(dst_st.st_mode)[1:]
        mode = f"{stat.S_IMODE(dst_st.st_mode):04o}"
        if o.remove_destination or o.force:
            return self.reporter.ask(f"replace {quote(dst)}, overriding mode {mode} ({perms})? ")
        return self.reporter.ask(f"unwritable {quote(dst)} (mode {mode}, {perms}); try anyway? ")

    def _source_is_dst_backup(self, srcbase: str, src_st: os.stat_result, dst: str) -> bool:
        suffix = self.options.suffix
        dstbase = os.path.basename(dst)
        if srcbase != dstbase + suffix:
            return False
        try:
            back = os.stat(dst + suffix)
        except OSError:
            return False
        return key(back) == key(src_st)
