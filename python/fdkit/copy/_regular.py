"""One file's bytes and attributes as ``cp`` copies them (coreutils' ``copy_reg``).

An existing destination is opened and written in place (``O_WRONLY|O_TRUNC``): its inode, its
other hard links, its mode and owner stay, a bind mount stays mounted, and a writable file in a
directory the user cannot write is still written. A new one is made with ``O_CREAT|O_EXCL``
(the source's permission bits, less the umask). ``-f`` removes a destination that cannot be
opened and makes it anew. Then the bytes go by the kernel's paths (:mod:`fdkit.copy._data`),
and ``-p`` and ``--preserve`` give the times, the owner, the extended attributes and the mode,
in cp's order (the owner before the mode: chown clears the set-user-ID bits).

``atomic`` (fdkit's ``--atomic``, which cp lacks): a regular destination is written to a
temporary file beside it, given its attributes, flushed (``fsync``) and renamed over it only
when complete; a reader never sees it half-written, and other hard links to the old file keep
the old bytes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from dataclasses import dataclass

from fdkit.copy._attrs import copy_acl, is_root, keep_owner_and_xattrs
from fdkit.copy._data import CLONE_FAILURE_ERRNOS, Copied, DataError, copy_data
from fdkit.copy._options import Options, Reporter
from fdkit.copy._quote import quote


class Stopped(Exception):
    """The run stops here with exit status ``code``: the reader of a FIFO destination went
    away (cp dies of SIGPIPE then, silently: 141)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _kind(st: os.stat_result | None, *, atomic: bool) -> str:
    """What the destination is, for the log."""
    if st is None:
        return "new file"
    if stat.S_ISREG(st.st_mode):
        return "regular file, replaced" if atomic else "regular file, written in place"
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        return "device, written into"
    if stat.S_ISFIFO(st.st_mode):
        return "FIFO, written into"
    return "not a regular file"


def _open_existing(report: Reporter, dst: str, flags: int) -> int:
    """Open an existing destination for writing; a FIFO with no reader is waited for, with a
    notice first (cp waits there silently)."""
    try:
        st = os.stat(dst)
    except OSError:
        st = None
    if st is None or not stat.S_ISFIFO(st.st_mode):
        return os.open(dst, flags | os.O_NOCTTY)
    try:
        fd = os.open(dst, flags | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as e:
        if e.errno != errno.ENXIO:
            raise
        report.notice(f"waiting for a reader on FIFO {dst!r} (Ctrl-C to stop)")
        return os.open(dst, flags | os.O_NOCTTY)
    try:
        os.set_blocking(fd, True)
    except OSError:
        os.close(fd)
        raise
    return fd


class _Temporary:
    """``--atomic``: the temporary file that becomes ``target`` by ``rename``."""

    def __init__(self, target: str) -> None:
        self.target = target
        directory = os.path.dirname(os.path.abspath(target))
        self.fd, self.path = tempfile.mkstemp(
            prefix=f".{os.path.basename(target)}.", suffix=".fdkit-tmp", dir=directory
        )

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)


@dataclass
class _File:
    """One regular file on its way: the source (its name, open fd and stat) and the destination
    (its name; the mode it is to get; the bits left out of the mode it is made with, and those
    added to it, u+w for the extended attributes; whether it is made anew; its open fd; what it
    was before, for the log and ``--atomic``; ``--atomic``'s temporary file)."""

    src: str
    src_fd: int
    src_st: os.stat_result
    dst: str
    dst_mode: int
    omitted: int
    new_dst: bool
    extra: int = 0
    dst_fd: int = -1
    old_st: os.stat_result | None = None
    temp: _Temporary | None = None


def copy_reg(
    o: Options,
    report: Reporter,
    umask: int,
    src: str,
    dst: str,
    dst_mode: int,
    omitted: int,
    new_dst: bool,
    src_st: os.stat_result,
    *,
    nofollow: bool,
) -> tuple[bool, bool]:
    """Copy the regular file (or, read as one, the FIFO or device) ``src`` to ``dst``. Returns
    whether it succeeded (failures are reported) and whether ``dst`` was made anew."""
    try:
        src_fd = os.open(src, os.O_RDONLY | os.O_NOCTTY | (os.O_NOFOLLOW if nofollow else 0))
    except OSError as e:
        report.error(f"cannot open {quote(src)} for reading: {e.strerror}")
        return False, new_dst
    f = _File(src, src_fd, src_st, dst, dst_mode, omitted, new_dst)
    try:
        return _copy_open(o, report, umask, f), f.new_dst
    finally:
        os.close(src_fd)


def _copy_open(o: Options, report: Reporter, umask: int, f: _File) -> bool:
    try:
        open_st = os.fstat(f.src_fd)
    except OSError as e:
        report.error(f"cannot fstat {quote(f.src)}: {e.strerror}")
        return False
    if (open_st.st_dev, open_st.st_ino) != (f.src_st.st_dev, f.src_st.st_ino):
        report.error(f"skipping file {quote(f.src)}, as it was replaced while being copied")
        return False
    if not f.new_dst and not _open_old(o, report, f):
        return False
    if f.new_dst:
        if not _open_new(o, report, umask, f):
            return False
    else:
        f.omitted = f.extra = 0
    try:
        return _fill(o, report, umask, f, open_st)
    except BaseException:
        if f.temp is not None:
            os.close(f.dst_fd)
            f.temp.discard()
        raise


def _open_old(o: Options, report: Reporter, f: _File) -> bool:
    """The destination that exists, opened for writing in place (``--atomic``: the temporary
    file beside it, with its owner and mode). One that is gone, or that ``-f`` removed, is to be
    made anew (``f.new_dst``). False after an error, reported."""
    dst = f.dst
    try:
        f.old_st = os.stat(dst)
    except OSError:
        f.old_st = None
    old_st = f.old_st
    if o.atomic and old_st is not None and stat.S_ISREG(old_st.st_mode):
        if not (is_root() or o.force or os.access(dst, os.W_OK)):
            report.error(f"cannot create regular file {quote(dst)}: Permission denied")
            return False
        try:
            f.temp = _Temporary(os.path.realpath(dst))
        except OSError as e:
            report.error(f"cannot create regular file {quote(dst)}: {e.strerror}")
            return False
        f.dst_fd = f.temp.fd
        with contextlib.suppress(OSError):
            os.fchown(f.dst_fd, old_st.st_uid, old_st.st_gid)
        os.fchmod(f.dst_fd, stat.S_IMODE(old_st.st_mode))
        return True
    flags = os.O_WRONLY | (os.O_TRUNC if o.data_copy_required else 0)
    dest_errno = 0
    try:
        f.dst_fd = _open_existing(report, dst, flags)
    except OSError as e:
        dest_errno = e.errno or 0
        dest_error = e
    if f.dst_fd < 0 and dest_errno != errno.ENOENT and o.force:
        try:
            os.unlink(dst)
            if o.verbose:
                report.say(f"removed {quote(dst)}")
        except OSError as e:
            if e.errno != errno.ENOENT:
                report.error(f"cannot remove {quote(dst)}: {e.strerror}")
                return False
        dest_errno = errno.ENOENT
    if f.dst_fd < 0 and dest_errno == errno.ENOENT:
        f.new_dst = True
        f.old_st = None
    elif f.dst_fd < 0:
        report.error(f"cannot create regular file {quote(dst)}: {dest_error.strerror}")
        return False
    return True


def _open_new(o: Options, report: Reporter, umask: int, f: _File) -> bool:
    """The destination made (``--atomic``: the temporary file to become it), with the mode
    ``f.dst_mode`` less ``f.omitted`` (u+w added when extended attributes are to be copied:
    ``f.extra``). False after an error, reported."""
    dst = f.dst
    # To allow copying xattrs on read-only files, made with u+w (cp does so too).
    open_mode = (f.dst_mode & ~f.omitted) | (
        stat.S_IWUSR if o.preserve_xattr and not is_root() else 0
    )
    f.extra = open_mode & ~f.dst_mode
    try:
        if o.atomic:
            if os.path.islink(dst) and not o.open_dangling_dest_symlink:
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST))
            f.temp = _Temporary(dst)
            f.dst_fd = f.temp.fd
            os.fchmod(f.dst_fd, open_mode & ~umask)
        else:
            f.dst_fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, open_mode)
    except OSError as e:
        code = e.errno
        if code == errno.EEXIST and os.path.islink(dst):
            if not o.open_dangling_dest_symlink:
                report.error(f"not writing through dangling symlink {quote(dst)}")
                return False
            try:
                f.dst_fd = os.open(dst, os.O_WRONLY | os.O_CREAT, open_mode)
            except OSError as e2:
                code = e2.errno
        if f.dst_fd < 0:
            if code == errno.EISDIR and dst.endswith("/"):
                code = errno.ENOTDIR
            message = os.strerror(code or 0)
            report.error(f"cannot create regular file {quote(dst)}: {message}")
            return False
    return True


def _fill(o: Options, report: Reporter, umask: int, f: _File, open_st: os.stat_result) -> bool:
    """The bytes, then the attributes, into the open ``f.dst_fd``; closes it (and with
    ``--atomic`` renames the temporary file over the destination)."""
    dst = f.dst
    temp = f.temp
    ok = True
    closed = False
    try:
        if o.data_copy_required:
            ok = _bytes(o, report, f, open_st)
        if ok:
            ok = _attributes(o, report, umask, f)
        if temp is not None and ok:
            try:
                os.fsync(f.dst_fd)
            except OSError as e:
                report.error(f"error writing {quote(dst)}: {e.strerror}")
                ok = False
    finally:
        try:
            os.close(f.dst_fd)
        except OSError as e:
            report.error(f"failed to close {quote(dst)}: {e.strerror}")
            ok = False
        closed = True
    if temp is not None:
        if ok:
            try:
                os.rename(temp.path, temp.target)
            except OSError as e:
                report.error(f"cannot create regular file {quote(dst)}: {e.strerror}")
                ok = False
        if not ok:
            temp.discard()
    return ok and closed


def _bytes(o: Options, report: Reporter, f: _File, st: os.stat_result) -> bool:
    src, dst = f.src, f.dst
    sparse_src = st.st_blocks * 512 < st.st_size
    report.log(
        f"copying {src!r} ({_human(st.st_size)}{', sparse' if sparse_src else ''}) "
        f"to {dst!r} ({_kind(f.old_st, atomic=f.temp is not None)})"
    )
    report.begin(st.st_size)
    copied: Copied | None = None
    try:
        copied = copy_data(
            f.src_fd, f.dst_fd, reflink=o.reflink, sparse=o.sparse, progress=report.progress
        )
    except DataError as e:
        err = e.error
        reason = err.strerror or str(err)
        if err.errno == errno.EPIPE:
            raise Stopped(141) from None
        if e.step == "clone":
            report.error(f"failed to clone {quote(dst)} from {quote(src)}: {reason}")
            if o.reflink == "always" and f.new_dst and f.temp is None:
                _remove_failed_clone(report, dst, f.dst_fd, err)
        elif e.step == "read":
            report.error(f"error reading {quote(src)}: {reason}")
        elif e.step == "write":
            report.error(f"error writing {quote(dst)}: {reason}")
        elif e.step == "lseek":
            report.error(f"cannot lseek {quote(src)}: {reason}")
        elif e.step == "extend":
            report.error(f"failed to extend {quote(dst)}: {reason}")
        else:  # copy_file_range, which does not say which side failed
            report.error(f"error copying {quote(src)} to {quote(dst)}: {reason}")
        return False
    finally:
        if o.debug:
            report.say(_debug_line(o.reflink, o.sparse, copied))
    report.done(st.st_size, copied)
    return True


def _remove_failed_clone(report: Reporter, dst: str, dst_fd: int, err: OSError) -> None:
    """``--reflink=always`` made ``dst`` and could not clone into it: it goes, as cp 9.2 has
    it, unless the clone failed midway (EIO, ENOSPC...) and left bytes in it."""
    if err.errno in CLONE_FAILURE_ERRNOS:
        try:
            if os.lseek(dst_fd, 0, os.SEEK_END) != 0:
                return
        except OSError:
            return
    try:
        os.unlink(dst)
    except OSError as e:
        if e.errno != errno.ENOENT:
            report.error(f"cannot remove {quote(dst)}: {e.strerror}")


def _debug_line(reflink: str, sparse: str, copied: Copied | None) -> str:
    """cp's ``--debug`` line (coreutils 9.2 and later) for one file."""
    if copied is None:
        return "copy offload: unknown, reflink: unknown, sparse detection: unknown"
    if copied.cloned:
        offload = "unknown"
    elif copied.path == "read_write":
        offload = "no"
    elif copied.path in ("copy_file_range", "sendfile", "splice", "splice_via_pipe"):
        offload = "yes"
    else:
        offload = "avoided"
    shared = "no" if reflink == "never" else "yes" if copied.cloned else "unsupported"
    if sparse == "always" and copied.holes:
        detection = "zeros"
    elif copied.holes:
        detection = "SEEK_HOLE"
    else:
        detection = "no"
    return f"copy offload: {offload}, reflink: {shared}, sparse detection: {detection}"


def _attributes(o: Options, report: Reporter, umask: int, f: _File) -> bool:
    """Times, owner, extended attributes and mode, in cp's order."""
    dst, dst_fd, src_st = f.dst, f.dst_fd, f.src_st
    if o.preserve_timestamps:
        try:
            os.utime(dst_fd, ns=(src_st.st_atime_ns, src_st.st_mtime_ns))
        except OSError as e:
            report.error(f"preserving times for {quote(dst)}: {e.strerror}")
            if o.require_preserve:
                return False
    dst_st: os.stat_result | None = None
    chown = False
    if o.preserve_ownership:
        dst_st = os.fstat(dst_fd)
        chown = (dst_st.st_uid, dst_st.st_gid) != (src_st.st_uid, src_st.st_gid)
    kept = keep_owner_and_xattrs(
        o,
        report,
        f.src_fd,
        dst_fd,
        f.src,
        dst,
        src_st,
        dst_st,
        new=f.new_dst,
        chown=chown,
        follow=True,
    )
    if kept is None:
        return False
    src_mode, ok = kept
    if o.preserve_mode:
        try:
            copy_acl(f.src_fd, dst_fd, src_mode, directory=False)
        except OSError as e:
            report.error(f"preserving permissions for {quote(dst)}: {e.strerror}")
            if o.require_preserve:
                ok = False
    elif o.explicit_no_preserve_mode and f.new_dst:
        try:
            os.fchmod(dst_fd, 0o666 & ~umask)
        except OSError as e:
            report.error(f"preserving permissions for {quote(dst)}: {e.strerror}")
            ok = False
    elif f.omitted | f.extra:
        omitted = f.omitted & ~umask
        if omitted | f.extra:
            try:
                os.fchmod(dst_fd, f.dst_mode & ~umask)
            except OSError as e:
                report.error(f"preserving permissions for {quote(dst)}: {e.strerror}")
                if o.require_preserve:
                    ok = False
    return ok
