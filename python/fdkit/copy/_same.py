"""cp's ``same_file_ok``: whether copying a source onto a destination that may be the same
file is safe (a symlink to it, a hard link of it, a backup first), as coreutils decides it."""

from __future__ import annotations

import os
import stat

from fdkit.copy._names import key, same_name
from fdkit.copy._options import Dereference, Options


def same_file_ok(
    o: Options,
    src: str,
    src_st: os.stat_result,
    dst: str,
    dst_st: os.stat_result,
    level: Dereference,
    return_now: list[bool],
) -> bool:
    """cp's ``same_file_ok``: whether copying ``src`` onto ``dst`` is safe although they
    may be one file; ``return_now[0]`` set when there is nothing left to do."""
    same = key(src_st) == key(dst_st)
    if same and o.hard_link:
        return_now[0] = True
        return True
    if level == "never":
        same_link = same
        if stat.S_ISLNK(src_st.st_mode) and stat.S_ISLNK(dst_st.st_mode):
            sn = same_name(src, dst)
            if not sn:
                if o.backup != "none":
                    return True
                if same_link:
                    return_now[0] = True
                    return True
            return not sn
        src_link, dst_link = src_st, dst_st
    else:
        if not same:
            return True
        try:
            dst_link = os.lstat(dst)
            src_link = os.lstat(src)
        except OSError:
            return True
        same_link = key(src_link) == key(dst_link)
        if (
            stat.S_ISLNK(src_link.st_mode)
            and stat.S_ISLNK(dst_link.st_mode)
            and o.remove_destination
        ):
            return True
    if o.backup != "none":
        if not same_link:
            # Backing up dst would leave a symlink src dangling: cp refuses now.
            return not (
                level != "never"
                and stat.S_ISLNK(src_link.st_mode)
                and not stat.S_ISLNK(dst_link.st_mode)
            )
        return not same_name(src, dst)
    if o.remove_destination:
        if stat.S_ISLNK(dst_link.st_mode):
            return True
        if same_link and dst_link.st_nlink > 1 and not same_name(src, dst):
            return True
    if not stat.S_ISLNK(src_link.st_mode) and not stat.S_ISLNK(dst_link.st_mode):
        if key(src_link) != key(dst_link):
            return True
        if o.hard_link:
            return_now[0] = True
            return True
    if o.symbolic_link and stat.S_ISLNK(dst_link.st_mode):
        return True
    if level == "never":
        try:
            s = src_link if not stat.S_ISLNK(src_link.st_mode) else os.stat(src)
            d = dst_link if not stat.S_ISLNK(dst_link.st_mode) else os.stat(dst)
        except OSError:
            return True
        if key(s) != key(d):
            return True
        if o.hard_link:
            return_now[0] = not stat.S_ISLNK(dst_link.st_mode)
            return True
    return False
