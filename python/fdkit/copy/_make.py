"""What ``cp`` makes for each kind of source (coreutils' ``copy_internal``, once the destination
is decided): a directory (its entries are :class:`~fdkit.copy._cp.Run`'s); for any other source
(:func:`make_file`) a symlink to it (``-s``), a hard link (``-l``), a copy of a regular file
(:mod:`fdkit.copy._regular`'s, with its attributes), a FIFO, device node or socket, or a copy of
a symlink. Then the attributes of what is not a regular file (:func:`finish`).

Each function takes the options and the reporter it needs (never the run), reports its
failures and returns whether it succeeded (:func:`make_dir`: the new directory's stat, or None).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from fdkit.copy._attrs import chown_failure_ok, copy_acl, keep_owner_and_xattrs
from fdkit.copy._links import force_link, force_symlink
from fdkit.copy._options import Dereference, Options, Reporter
from fdkit.copy._quote import quote, quote_if_needed
from fdkit.copy._regular import copy_reg


@dataclass
class Made:
    """The destination, as its attributes need it: its stat as last known (``st``, None when
    unknown), whether this copy made it (``new``), the permission bits left out of the mode it
    was made with (``omitted``), whether it is a symlink (``symlink``) or was copied as a
    regular file (``regular``: its attributes are given), and the mode to restore once it is
    filled (``restore_mode``, ``mode``: a directory made u+rwx to be written into)."""

    st: os.stat_result | None
    new: bool
    omitted: int
    symlink: bool = False
    regular: bool = False
    restore_mode: bool = False
    mode: int = 0


def make_file(
    o: Options,
    report: Reporter,
    umask: int,
    src: str,
    dst: str,
    src_st: os.stat_result,
    level: Dereference,
    dereference: bool,
    made: Made,
) -> bool:
    """What is made for a source that is not a directory: a symlink to it (``-s``), a
    hard link (``-l``), a copy of a regular file (or, read as one, a FIFO or device), a
    special file, a symlink's copy. False after an error, reported."""
    src_mode = src_st.st_mode
    if o.symbolic_link:
        made.symlink = True
        return make_symlink(o, report, src, dst)
    if o.hard_link:
        replace = o.force or o.interactive == "ask"
        return make_hard_link(report, src, dst, replace, False, dereference)
    if stat.S_ISREG(src_mode) or (o.copy_as_regular and not stat.S_ISLNK(src_mode)):
        made.regular = True
        ok, made.new = copy_reg(
            o,
            report,
            umask,
            src,
            dst,
            src_mode & 0o777,
            made.omitted,
            made.new,
            src_st,
            nofollow=level == "never",
        )
        return ok
    if (
        stat.S_ISFIFO(src_mode)
        or stat.S_ISBLK(src_mode)
        or stat.S_ISCHR(src_mode)
        or stat.S_ISSOCK(src_mode)
    ):
        return make_special(report, dst, src_st, made.omitted)
    if stat.S_ISLNK(src_mode):
        made.symlink = True
        return copy_symlink(o, report, src, dst, src_st, made.st, made.new)
    report.error(f"{quote(src)} has unknown file type")
    return False


def make_dir(report: Reporter, dst: str, mode: int, made: Made) -> os.stat_result | None:
    """``mkdir dst`` with ``mode``; returns its stat (also ``made.st``), None after an error.
    A directory the user cannot write into or enter is made so (u+rwx), its mode restored by
    :func:`finish`."""
    try:
        os.mkdir(dst, mode)
    except OSError as e:
        report.error(f"cannot create directory {quote(dst)}: {e.strerror}")
        return None
    try:
        st = made.st = os.lstat(dst)
    except OSError as e:
        report.error(f"cannot stat {quote(dst)}: {e.strerror}")
        return None
    if (st.st_mode & 0o700) != 0o700:
        made.mode = st.st_mode
        made.restore_mode = True
        try:
            os.chmod(dst, stat.S_IMODE(made.mode) | 0o700)
        except OSError as e:
            report.error(f"setting permissions for {quote(dst)}: {e.strerror}")
            return None
    return st


def make_hard_link(
    report: Reporter, src: str, dst: str, replace: bool, verbose: bool, dereference: bool
) -> bool:
    """``dst``, a hard link to ``src`` (``-l``, or the first copy of a source's inode), the
    destination replaced when ``replace`` (``removed 'dst'`` said when ``verbose``)."""
    try:
        replaced = force_link(src, dst, replace, dereference)
    except OSError as e:
        report.error(f"cannot create hard link {quote(dst)} to {quote(src)}: {e.strerror}")
        return False
    if replaced and verbose:
        report.say(f"removed {quote(dst)}")
    return True


def make_symlink(o: Options, report: Reporter, src: str, dst: str) -> bool:
    """``-s``: ``dst``, a symlink to ``src`` (a relative ``src`` only in the current
    directory, as cp has it)."""
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
            return False
    try:
        force_symlink(src, dst, o.force)
    except OSError as e:
        report.error(f"cannot create symbolic link {quote(dst)} to {quote(src)}: {e.strerror}")
        return False
    return True


def copy_symlink(
    o: Options,
    report: Reporter,
    src: str,
    dst: str,
    src_st: os.stat_result,
    dst_st: os.stat_result | None,
    new_dst: bool,
) -> bool:
    """The symlink ``src`` copied as a symlink to ``dst`` (``-u``: one already there with the
    same target is no failure), with its owner under ``-p``."""
    try:
        target = os.readlink(src)
    except OSError as e:
        report.error(f"cannot read symbolic link {quote(src)}: {e.strerror}")
        return False
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
            return False
    if o.preserve_ownership:
        try:
            os.chown(dst, src_st.st_uid, src_st.st_gid, follow_symlinks=False)
        except OSError as e:
            if not chown_failure_ok(e):
                # cp names this one unquoted.
                report.error(f"failed to preserve ownership for {dst}: {e.strerror}")
                if o.require_preserve:
                    return False
    return True


def make_special(report: Reporter, dst: str, src_st: os.stat_result, omitted: int) -> bool:
    """A FIFO, device node or socket like ``src_st``'s at ``dst``, made without the
    permission bits ``omitted``."""
    mode = src_st.st_mode
    fifo = stat.S_ISFIFO(mode)
    try:
        if fifo:
            os.mkfifo(dst, stat.S_IMODE(mode) & ~omitted)
        else:
            os.mknod(dst, mode & ~omitted, src_st.st_rdev)
    except OSError as e:
        what = "fifo" if fifo else "special file"
        report.error(f"cannot create {what} {quote(dst)}: {e.strerror}")
        return False
    return True


def finish(
    o: Options,
    report: Reporter,
    umask: int,
    src: str,
    dst: str,
    src_st: os.stat_result,
    made: Made,
    *,
    directory: bool,
) -> bool:
    """A directory's, symlink's or special file's attributes, once made (and filled): times,
    owner, extended attributes and mode, in cp's order."""
    if o.preserve_timestamps:
        try:
            os.utime(
                dst,
                ns=(src_st.st_atime_ns, src_st.st_mtime_ns),
                follow_symlinks=not made.symlink,
            )
        except OSError as e:
            report.error(f"preserving times for {quote(dst)}: {e.strerror}")
            if o.require_preserve:
                return False
    old = made.st
    chown = (
        not made.symlink
        and o.preserve_ownership
        and (made.new or old is None or (src_st.st_uid, src_st.st_gid) != (old.st_uid, old.st_gid))
    )
    kept = keep_owner_and_xattrs(
        o,
        report,
        src,
        dst,
        src,
        dst,
        src_st,
        old,
        new=made.new,
        chown=chown,
        follow=not made.symlink,
    )
    if kept is None or not kept[1]:
        return False
    if made.symlink:
        return True
    return _mode(o, report, umask, src, dst, kept[0], made, directory=directory)


def _mode(
    o: Options,
    report: Reporter,
    umask: int,
    src: str,
    dst: str,
    src_mode: int,
    made: Made,
    *,
    directory: bool,
) -> bool:
    """The mode (and ACLs) :func:`finish` gives: the source's (``-p``), the default one
    (``--no-preserve=mode``), or the bits the copy was made without, restored."""
    if o.preserve_mode:
        try:
            copy_acl(src, dst, src_mode, directory=directory)
        except OSError as e:
            report.error(f"preserving permissions for {quote(dst)}: {e.strerror}")
            if o.require_preserve:
                return False
        return True
    if o.explicit_no_preserve_mode and made.new:
        default = 0o777 if directory or stat.S_ISSOCK(src_mode) else 0o666
        if directory and made.st is not None:
            # The set-group-ID bit a new directory takes from its parent stays (cp 9.5).
            default |= made.st.st_mode & stat.S_ISGID
        try:
            os.chmod(dst, default & ~umask)
        except OSError as e:
            report.error(f"preserving permissions for {quote(dst)}: {e.strerror}")
            return False
        return True
    omitted, restore, mode = made.omitted, made.restore_mode, made.mode
    if omitted:
        omitted &= ~umask
        if omitted and not restore:
            st = made.st
            if made.new or st is None:
                try:
                    st = os.lstat(dst)
                except OSError as e:
                    report.error(f"cannot stat {quote(dst)}: {e.strerror}")
                    return False
            mode = st.st_mode
            if omitted & ~mode:
                restore = True
    if restore:
        try:
            os.chmod(dst, stat.S_IMODE(mode | omitted))
        except OSError as e:
            report.error(f"preserving permissions for {quote(dst)}: {e.strerror}")
            if o.require_preserve:
                return False
    return True
