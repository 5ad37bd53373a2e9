"""``shutil``'s copy functions, each file's bytes by the kernel's paths.

Signatures, return values, exceptions and every decision (the same file, a named pipe, a
symlink, a directory destination, a dangling symlink in a tree) are those of :mod:`shutil`
(CPython 3.11 to 3.13); only how the bytes move differs: :func:`fdkit.copy._data.copy_data`
(FICLONE, copy_file_range, holes kept) where shutil calls ``sendfile`` and then ``read``.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from fdkit.copy._data import DataError, copy_data

StrPath = str | os.PathLike[str]
StrOrBytesPath = str | bytes | os.PathLike[str] | os.PathLike[bytes]
_Path = TypeVar("_Path", bound=StrOrBytesPath)


def _samefile(src: Any, dst: Any) -> bool:
    if isinstance(src, os.DirEntry):
        try:
            return os.path.samestat(src.stat(), os.stat(dst))
        except OSError:
            return False
    try:
        return os.path.samefile(src, dst)
    except OSError:
        return False


def _stat(fn: Any) -> os.stat_result:
    return fn.stat() if isinstance(fn, os.DirEntry) else os.stat(fn)


def _islink(fn: Any) -> bool:
    return fn.is_symlink() if isinstance(fn, os.DirEntry) else os.path.islink(fn)


def copyfile(src: StrOrBytesPath, dst: _Path, *, follow_symlinks: bool = True) -> _Path:
    """Copy the bytes of ``src`` to ``dst`` and return ``dst``, as :func:`shutil.copyfile`.

    ``dst`` is opened as shutil opens it (``open(dst, "wb")``: created, or truncated and
    written in place, through a symlink, keeping its mode and its other hard links), and the
    bytes go by the kernel's paths: the blocks shared (``FICLONE``) where the filesystem can,
    else ``copy_file_range``, with the source's holes kept.

    Raises :class:`shutil.SameFileError` when both name one file,
    :class:`shutil.SpecialFileError` for a named pipe, ``IsADirectoryError`` and the other
    ``OSError`` subclasses as shutil does. With ``follow_symlinks=False`` a symlink ``src``
    is copied as a new symlink.
    """
    s: Any = src  # str, bytes, a path-like or an os.DirEntry, as shutil takes them
    d: Any = dst
    if _samefile(s, d):
        raise shutil.SameFileError(f"{s!r} and {d!r} are the same file")
    for fn in (s, d):
        try:
            st = _stat(fn)
        except OSError:
            continue  # most likely does not exist
        if stat.S_ISFIFO(st.st_mode):
            name = fn.path if isinstance(fn, os.DirEntry) else fn
            raise shutil.SpecialFileError(f"`{name}` is a named pipe")
    if not follow_symlinks and _islink(s):
        os.symlink(os.readlink(s), d)
        return dst
    with open(s, "rb", buffering=0) as fsrc:
        try:
            with open(d, "wb", buffering=0) as fdst:
                try:
                    copy_data(fsrc.fileno(), fdst.fileno())
                except DataError as e:
                    err = e.error
                    raise OSError(err.errno, err.strerror, fsrc.name, None, fdst.name) from None
        except IsADirectoryError as e:
            # As shutil says it: the directory dst names does not exist (dst ends in "/").
            if not os.path.exists(d):
                raise FileNotFoundError(f"Directory does not exist: {d}") from e
            raise
    return dst


def copymode(src: StrPath, dst: StrPath, *, follow_symlinks: bool = True) -> None:
    """Copy the permission bits of ``src`` to ``dst``: :func:`shutil.copymode` itself."""
    shutil.copymode(src, dst, follow_symlinks=follow_symlinks)


def copystat(src: StrPath, dst: StrPath, *, follow_symlinks: bool = True) -> None:
    """Copy the permission bits, times, flags and extended attributes of ``src`` to ``dst``:
    :func:`shutil.copystat` itself."""
    shutil.copystat(src, dst, follow_symlinks=follow_symlinks)


def _into(src: Any, dst: Any) -> Any:
    if os.path.isdir(dst):
        return os.path.join(dst, os.path.basename(src))
    return dst


def copy(src: StrPath, dst: StrPath, *, follow_symlinks: bool = True) -> Any:
    """Copy the bytes and the permission bits of ``src`` to ``dst`` (a file or a directory to
    copy into) and return the file's destination, as :func:`shutil.copy` (``cp src dst``)."""
    dst = _into(src, dst)
    copyfile(src, dst, follow_symlinks=follow_symlinks)
    copymode(src, dst, follow_symlinks=follow_symlinks)
    return dst


def copy2(src: StrPath, dst: StrPath, *, follow_symlinks: bool = True) -> Any:
    """Copy the bytes and the metadata (:func:`copystat`: mode, times to the nanosecond,
    flags, extended attributes) of ``src`` to ``dst`` and return the file's destination, as
    :func:`shutil.copy2` (``cp -p src dst``)."""
    dst = _into(src, dst)
    copyfile(src, dst, follow_symlinks=follow_symlinks)
    copystat(src, dst, follow_symlinks=follow_symlinks)
    return dst


def copytree(
    src: StrPath,
    dst: _Path,
    symlinks: bool = False,
    ignore: Callable[[Any, list[str]], Iterable[str]] | None = None,
    copy_function: Callable[[Any, Any], object] = copy2,
    ignore_dangling_symlinks: bool = False,
    dirs_exist_ok: bool = False,
) -> _Path:
    """Copy the tree at ``src`` to ``dst`` and return ``dst``, as :func:`shutil.copytree`.

    Each file goes through ``copy_function`` (this module's :func:`copy2` unless told: the
    kernel's paths); directories are made with ``os.makedirs`` (``FileExistsError`` unless
    ``dirs_exist_ok``) and get :func:`copystat` after their contents. ``symlinks``: copy
    symlinks as symlinks, else what they point to; ``ignore(dir, names)`` returns the names
    to leave out; ``ignore_dangling_symlinks`` skips a symlink to nothing instead of failing
    on it. Every failure is collected and raised at the end as one :class:`shutil.Error`
    whose ``args[0]`` lists ``(src, dst, why)``.
    """
    with os.scandir(src) as it:
        entries = list(it)
    _copytree(
        entries, src, dst, symlinks, ignore, copy_function, ignore_dangling_symlinks, dirs_exist_ok
    )
    return dst


def _copytree(
    entries: list[os.DirEntry[str]],
    src: Any,
    dst: Any,
    symlinks: bool,
    ignore: Callable[[Any, list[str]], Iterable[str]] | None,
    copy_function: Callable[[Any, Any], object],
    ignore_dangling_symlinks: bool,
    dirs_exist_ok: bool,
) -> Any:
    ignored: Iterable[str] = (
        ignore(os.fspath(src), [e.name for e in entries]) if ignore is not None else ()
    )
    os.makedirs(dst, exist_ok=dirs_exist_ok)
    errors: list[tuple[Any, Any, str]] = []
    use_entry = copy_function is copy2 or copy_function is copy
    for entry in entries:
        if entry.name in ignored:
            continue
        srcname = os.path.join(src, entry.name)
        dstname = os.path.join(dst, entry.name)
        srcobj: Any = entry if use_entry else srcname
        try:
            is_symlink = entry.is_symlink()
            linkto = os.readlink(srcname) if is_symlink else ""
            if is_symlink and symlinks:
                # Not left to copy_function: a custom one may not copy symlinks.
                os.symlink(linkto, dstname)
                copystat(srcobj, dstname, follow_symlinks=not symlinks)
            elif is_symlink and not os.path.exists(linkto) and ignore_dangling_symlinks:
                continue
            elif entry.is_dir():
                copytree(
                    srcobj,
                    dstname,
                    symlinks,
                    ignore,
                    copy_function,
                    ignore_dangling_symlinks,
                    dirs_exist_ok,
                )
            else:
                # A symlink not copied as one is copied as what it points to; a
                # SpecialFileError for what cannot be copied (a named pipe).
                copy_function(srcobj, dstname)
        except shutil.Error as err:
            errors.extend(err.args[0])
        except OSError as why:
            errors.append((srcname, dstname, str(why)))
    try:
        copystat(src, dst)
    except OSError as why:
        errors.append((src, dst, str(why)))
    if errors:
        raise shutil.Error(errors)
    return dst
