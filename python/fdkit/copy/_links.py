"""Hard and symbolic links made as gnulib's ``force_linkat`` and ``force_symlinkat`` make
them: an existing destination replaced by a rename (never missing in between)."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable


def _temporary_name(dst: str, n: int) -> str:
    head, base = os.path.split(dst)
    return os.path.join(head, f".{base}.fdkit-{os.getpid()}-{n}")


def _replace_by(make: Callable[[str], None], dst: str) -> None:
    """Make something at a temporary name beside ``dst`` (``make(name)``) and rename it over
    ``dst``: ``dst`` is never missing (gnulib's ``force_linkat``/``force_symlinkat``)."""
    for n in range(100):
        tmp = _temporary_name(dst, n)
        try:
            make(tmp)
        except FileExistsError:
            continue
        try:
            os.rename(tmp, dst)
        except OSError:
            os.unlink(tmp)
            raise
        if os.path.lexists(tmp):  # dst was already this file: rename(2) did nothing
            os.unlink(tmp)
        return
    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dst)


def _link(src: str, dst: str, follow: bool) -> None:
    """``linkat(src, dst)``, following a symlink ``src`` when ``follow``. (``os.link`` calls
    link(2), which never follows one, unless it is given a directory fd.)"""
    if not follow:
        os.link(src, dst, follow_symlinks=False)
        return
    here = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.link(src, dst, src_dir_fd=here, follow_symlinks=True)
    finally:
        os.close(here)


def force_link(src: str, dst: str, replace: bool, follow: bool) -> bool:
    """``link(src, dst)``; with ``replace``, an existing ``dst`` is replaced. True when it
    was."""
    try:
        _link(src, dst, follow)
        return False
    except FileExistsError:
        if not replace:
            raise
    _replace_by(lambda tmp: _link(src, tmp, follow), dst)
    return True


def force_symlink(target: str, dst: str, force: bool) -> None:
    try:
        os.symlink(target, dst)
    except FileExistsError:
        if not force:
            raise
        _replace_by(lambda tmp: os.symlink(target, tmp), dst)
