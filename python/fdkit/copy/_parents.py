"""``--parents``: the directories of each source made under the target directory (cp's
``make_dir_parents_private``), and their attributes set once the copy is in (``re_protect``)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass

from fdkit.copy._attrs import chown_failure_ok, copy_acl
from fdkit.copy._options import Options, Reporter
from fdkit.copy._quote import quote


@dataclass
class ParentDir:
    """A directory ``--parents`` met or made, with its source's attributes."""

    path: str
    st: os.stat_result
    mode: int = 0
    restore_mode: bool = False


def make_parents(
    o: Options, report: Reporter, umask: int, dst: str, offset: int, arg: str
) -> tuple[bool, list[ParentDir], bool]:
    """``--parents``: make the directories of ``arg`` under the target (cp's
    ``make_dir_parents_private``). Returns whether they exist now, those whose attributes
    are set after the copy, and whether the last one was made here."""
    made: list[ParentDir] = []
    new_dst = False
    parent = os.path.dirname(dst.rstrip("/"))
    if len(parent) <= offset:
        return True, made, False
    try:
        st = os.stat(parent)
    except OSError:
        st = None
    if st is not None:
        if not stat.S_ISDIR(st.st_mode):
            report.error(f"{quote(parent)} exists but is not a directory")
            return False, made, False
        return True, made, False
    # Each component of the source's directory part, made under the target when missing.
    rel = dst[offset:].lstrip("/")
    parts = rel.split("/")[:-1]
    done = dst[: len(dst) - len(rel)]
    src_done = ""
    for part in parts:
        if not part:
            continue
        done = done + part if done.endswith("/") or not done else done + "/" + part
        src_done = part if not src_done else src_done + "/" + part
        src_dir = src_done if not arg.startswith("/") else "/" + src_done
        try:
            dst_st = os.stat(done)
            missing = False
        except OSError:
            missing = True
            dst_st = None
        record = missing or o.preserve_ownership or o.preserve_mode or o.preserve_timestamps
        entry: ParentDir | None = None
        if record:
            try:
                src_st = os.stat(src_dir)
                if not stat.S_ISDIR(src_st.st_mode):
                    raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
            except OSError as e:
                report.error(f"failed to get attributes of {quote(src_dir)}: {e.strerror}")
                return False, made, new_dst
            entry = ParentDir(done, src_st)
            made.append(entry)
        if missing:
            assert entry is not None
            new_dst = True
            if not _make_parent(o, report, umask, entry, src_dir):
                return False, made, new_dst
        elif dst_st is not None and not stat.S_ISDIR(dst_st.st_mode):
            report.error(f"{quote(done)} exists but is not a directory")
            return False, made, new_dst
        else:
            new_dst = False
    return True, made, new_dst


def _make_parent(o: Options, report: Reporter, umask: int, entry: ParentDir, src_dir: str) -> bool:
    """The missing directory ``entry.path``, made for the source directory ``src_dir`` with
    u+rwx to be written into; the mode it is to get once the copy is in, in ``entry``."""
    done = entry.path
    mode = entry.st.st_mode
    omit = mode & (0o077 if o.preserve_ownership else 0o022 if o.preserve_mode else 0)
    mkdir_mode = 0o777 if o.explicit_no_preserve_mode else stat.S_IMODE(mode)
    try:
        os.mkdir(done, mkdir_mode & ~omit)
    except OSError as e:
        report.error(f"cannot make directory {quote(done)}: {e.strerror}")
        return False
    if o.verbose:
        report.say(f"{src_dir} -> {done}")
    try:
        now = os.lstat(done)
    except OSError as e:
        report.error(f"failed to get attributes of {quote(done)}: {e.strerror}")
        return False
    if not o.preserve_mode:
        if omit & ~now.st_mode:
            omit &= ~umask
        if omit & ~now.st_mode or (now.st_mode & 0o700) != 0o700:
            entry.mode = now.st_mode | omit
            entry.restore_mode = True
    accessible = now.st_mode | 0o700
    if now.st_mode != accessible:
        try:
            os.chmod(done, stat.S_IMODE(accessible))
        except OSError as e:
            report.error(f"setting permissions for {quote(done)}: {e.strerror}")
            return False
    return True


def re_protect(o: Options, report: Reporter, made: list[ParentDir]) -> bool:
    """``--parents``: the attributes of the directories made, once the copy is in."""
    for entry in reversed(made):
        path = entry.path
        if o.preserve_timestamps:
            try:
                os.utime(path, ns=(entry.st.st_atime_ns, entry.st.st_mtime_ns))
            except OSError as e:
                report.error(f"failed to preserve times for {quote(path)}: {e.strerror}")
                return False
        if o.preserve_ownership:
            try:
                os.chown(path, entry.st.st_uid, entry.st.st_gid, follow_symlinks=False)
            except OSError as e:
                if not chown_failure_ok(e):
                    report.error(f"failed to preserve ownership for {quote(path)}: {e.strerror}")
                    return False
                with contextlib.suppress(OSError):
                    os.chown(path, -1, entry.st.st_gid, follow_symlinks=False)
        if o.preserve_mode:
            try:
                copy_acl(path.rstrip("/"), path, entry.st.st_mode, directory=True)
            except OSError as e:
                report.error(f"preserving permissions for {quote(path)}: {e.strerror}")
                return False
        elif entry.restore_mode:
            try:
                os.chmod(path, stat.S_IMODE(entry.mode))
            except OSError as e:
                report.error(f"failed to preserve permissions for {quote(path)}: {e.strerror}")
                return False
    return True
