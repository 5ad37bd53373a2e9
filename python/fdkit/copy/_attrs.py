"""A copy's attributes as cp keeps them: owner (``set_owner``), permissions with POSIX ACLs
(``copy_acl``) and extended attributes (``copy_xattrs``); the owner and the extended attributes
in cp's order for ``-p``/``--preserve`` (``keep_owner_and_xattrs``). A target is an open fd or
a path (never followed when it is a symlink's own attributes that are meant)."""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import stat
from collections.abc import Callable

from fdkit.copy._options import Options, Reporter
from fdkit.copy._quote import quote

Target = int | str

#: POSIX ACLs: kept with the mode (``--preserve=mode``), not as extended attributes.
ACL_ACCESS = "system.posix_acl_access"
ACL_DEFAULT = "system.posix_acl_default"

#: Extended attributes never copied as such (libattr's ``/etc/xattr.conf``): ACLs (copied with
#: the mode) and those that belong to one filesystem or one machine.
_NOT_COPIED = (
    "system.nfs4_acl",
    "system.nfs4acl",
    ACL_ACCESS,
    ACL_DEFAULT,
    "trusted.SGI_*",
    "xfsroot.*",
    "user.Beagle.*",
    "security.evm",
    "afs.*",
)

#: Errnos meaning "this filesystem has no such attributes": silent unless asked for by name.
UNSUPPORTED = frozenset({errno.ENOTSUP, errno.ENODATA})


def is_root() -> bool:
    return os.geteuid() == 0


def chown_failure_ok(e: OSError) -> bool:
    """A non-root user may fail to give a copy its source's owner (``cp -p``); root may not."""
    return e.errno in (errno.EPERM, errno.EINVAL) and not is_root()


def _chown(target: Target, uid: int, gid: int) -> None:
    if isinstance(target, int):
        os.fchown(target, uid, gid)
    else:
        os.chown(target, uid, gid, follow_symlinks=False)


def _chmod(target: Target, mode: int) -> None:
    if isinstance(target, int):
        os.fchmod(target, mode)
    else:
        os.chmod(target, mode)


def set_owner(
    target: Target,
    src: os.stat_result,
    *,
    new: bool,
    old: os.stat_result | None,
    preserve_mode: bool,
    report: Callable[[str, OSError], None],
    require: bool,
) -> int:
    """Give ``target`` the owner and group of ``src``, as cp's ``set_owner``: 1 done, 0 not
    done but permitted to fail (a non-root user; the group alone is tried), -1 failed (the
    error is reported as ``report(what, error)``)."""
    if not new and preserve_mode and old is not None:
        # Never a window where the old, more generous mode meets the new owner.
        restrictive = old.st_mode & src.st_mode & stat.S_IRWXU
        try:
            _chmod(target, restrictive)
        except OSError as e:
            if not (e.errno in (errno.EPERM, errno.EINVAL) and not is_root()):
                report("clearing permissions for", e)
            return -1 if require else 0
    try:
        _chown(target, src.st_uid, src.st_gid)
        return 1
    except OSError as e:
        if e.errno in (errno.EPERM, errno.EINVAL):
            with contextlib.suppress(OSError):
                _chown(target, -1, src.st_gid)
        if not chown_failure_ok(e):
            report("failed to preserve ownership for", e)
            if require:
                return -1
    return 0


def _getxattr(target: Target, name: str, follow: bool) -> bytes | None:
    try:
        return os.getxattr(target, name, follow_symlinks=follow)
    except OSError as e:
        if e.errno in UNSUPPORTED:
            return None
        raise


def copy_acl(src: Target, dst: Target, mode: int, *, directory: bool) -> None:
    """Give ``dst`` the permission bits ``mode`` and ``src``'s POSIX ACLs (the access ACL, and
    a directory's default ACL), or none where ``src`` has none. Raises ``OSError``."""
    _chmod(dst, stat.S_IMODE(mode))
    for name in (ACL_ACCESS, ACL_DEFAULT) if directory else (ACL_ACCESS,):
        value = _getxattr(src, name, True)
        if value is not None:
            try:
                os.setxattr(dst, name, value)
            except OSError as e:
                if e.errno not in UNSUPPORTED:
                    raise
        elif _getxattr(dst, name, True) is not None:
            os.removexattr(dst, name)


def copy_xattrs(
    src: Target,
    dst: Target,
    src_name: str,
    dst_name: str,
    *,
    follow: bool,
    report: Callable[[str], None] | None,
    report_unsupported: bool,
) -> bool:
    """Copy ``src``'s extended attributes to ``dst`` (not followed when ``follow`` is false),
    as libattr's ``attr_copy_fd``/``attr_copy_file`` for cp. Each failure is reported (as a
    message naming the attribute and file, quoted by the caller) unless ``report`` is None,
    or it means "not supported here" and ``report_unsupported`` is false. True when every
    attribute was copied."""

    def failed(message: str, e: OSError) -> None:
        if report is not None and (report_unsupported or e.errno not in UNSUPPORTED):
            report(f"{message}: {e.strerror}")

    src_follow = follow or isinstance(src, int)
    dst_follow = follow or isinstance(dst, int)
    try:
        names = os.listxattr(src, follow_symlinks=src_follow)
    except OSError as e:
        if e.errno in UNSUPPORTED:
            return True
        failed(f"listing attributes of {quote(src_name)}", e)
        return False
    ok = True
    for name in names:
        if any(fnmatch.fnmatchcase(name, p) for p in _NOT_COPIED):
            continue
        if name.startswith("trusted.") and not is_root():
            continue
        try:
            value = os.getxattr(src, name, follow_symlinks=src_follow)
        except OSError as e:
            failed(f"getting attribute {quote(name)} of {quote(src_name)}", e)
            ok = False
            continue
        try:
            os.setxattr(dst, name, value, follow_symlinks=dst_follow)
        except OSError as e:
            failed(f"setting attribute {quote(name)} for {quote(dst_name)}", e)
            ok = False
    return ok


def keep_owner_and_xattrs(
    o: Options,
    report: Reporter,
    src: Target,
    dst: Target,
    src_name: str,
    dst_name: str,
    src_st: os.stat_result,
    dst_st: os.stat_result | None,
    *,
    new: bool,
    chown: bool,
    follow: bool,
) -> tuple[int, bool] | None:
    """``-p``/``--preserve``'s owner (when ``chown``) and then extended attributes, from ``src``
    to ``dst`` (fds or paths; ``src_name`` and ``dst_name`` in the messages), as cp gives them
    to a regular file (by its fds) and to what else it makes (by its name, ``follow`` false for
    a symlink). ``dst_st``: the destination before, ``new``: made by this copy.

    Returns None when a failure stops the copy (an owner ``-p`` requires), else the mode the
    copy is to get (``src_st``'s, without the set-ID and sticky bits when the owner was not
    kept) and whether the extended attributes that had to be copied were."""
    src_mode = src_st.st_mode
    if chown:
        done = set_owner(
            dst,
            src_st,
            new=new,
            old=dst_st,
            preserve_mode=o.preserve_mode,
            report=lambda what, e: report.error(f"{what} {quote(dst_name)}: {e.strerror}"),
            require=o.require_preserve,
        )
        if done < 0:
            return None
        if done == 0:
            src_mode &= ~(stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX)
    if o.preserve_xattr:
        everything = o.attributes_only or o.require_preserve_xattr
        if (
            not copy_xattrs(
                src,
                dst,
                src_name,
                dst_name,
                follow=follow,
                report=report.error if everything or not o.reduce_diagnostics else None,
                report_unsupported=everything,
            )
            and o.require_preserve_xattr
        ):
            return src_mode, False
    return src_mode, True
