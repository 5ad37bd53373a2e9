"""Names as cp compares them: one directory entry (``same_name``), a path inside a directory
(``inside``), ``DIR/BASE`` (``concat``), an inode's key, a file the user may write."""

from __future__ import annotations

import os

Key = tuple[int, int]  # (st_dev, st_ino)


def key(st: os.stat_result) -> Key:
    return (st.st_dev, st.st_ino)


def same_name(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` are one directory entry: the same last component in the same
    directory (gnulib's ``same_name``)."""
    if os.path.basename(a.rstrip("/")) != os.path.basename(b.rstrip("/")):
        return False
    try:
        return os.path.samefile(os.path.dirname(a) or ".", os.path.dirname(b) or ".")
    except OSError:
        return False


def last_component(name: str) -> str:
    stripped = name.rstrip("/")
    return os.path.basename(stripped) if stripped else "/"


def concat(directory: str, base: str) -> str:
    """gnulib's ``file_name_concat``: ``DIR/BASE`` with one slash between them."""
    stripped = directory.rstrip("/")
    if stripped and os.path.basename(stripped):
        sep = "" if base.startswith("/") else "/"
        return stripped + sep + base
    # DIR is the root (or empty).
    return (directory or "") + base.lstrip("/") if directory else base


def inside(src: str, dst: str) -> bool:
    """Whether ``dst`` is below the directory ``src`` (``cp -r a a/b``)."""
    real_src = os.path.realpath(src)
    real_dst = os.path.join(
        os.path.realpath(os.path.dirname(os.path.abspath(dst))), os.path.basename(dst)
    )
    return real_dst != real_src and os.path.commonpath([real_src, real_dst]) == real_src


def writable(path: str) -> bool:
    try:
        return os.access(path, os.W_OK, effective_ids=os.access in os.supports_effective_ids)
    except OSError:
        return False
