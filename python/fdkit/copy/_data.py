"""The bytes of one file, from an open source to an open destination, by the kernel's paths.

:func:`copy_data` is the one entry: it shares the source's blocks where the filesystem can
(``ioctl(FICLONE)``, btrfs, XFS), else moves the bytes with :func:`fdkit.zerocopy.transfer`
(copy_file_range, sendfile, splice, read/write), keeping the source's holes where
``lseek(SEEK_DATA/SEEK_HOLE)`` finds them, or making holes of zero blocks when asked
(``sparse="always"``). A file is read to its end, never sized by ``stat`` alone: procfs and
sysfs files report a size (0, 4096) that is not their length. See lseek(2), ioctl_ficlone(2),
copy_file_range(2).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Callable
from typing import Literal, NamedTuple

from fdkit import zerocopy

Reflink = Literal["auto", "always", "never"]
Sparse = Literal["auto", "always", "never"]

#: Called as the bytes move: the bytes of this file done so far, and the kernel path.
Progress = Callable[[int, str], None]

# Bytes per transfer call: large enough that the call overhead vanishes, small enough that a
# progress line moves several times a second on a slow disk.
CHUNK = 64 << 20

#: Bytes per splice through the pipe of ``reflink="never"`` (the pipe's size, or the most a
#: pipe may hold here).
CHUNK_UNSHARED = 1 << 20

#: Bytes per read when looking for zero blocks (``sparse="always"``).
CHUNK_ZEROS = 1 << 20

SEEK_DATA = 3
SEEK_HOLE = 4

#: ``ioctl_ficlone(2)``: make the destination share the source's blocks (``_IOW(0x94, 9, int)``).
FICLONE = 0x40049409

#: Errnos of FICLONE that mean the copy itself failed, not that these files cannot share
#: blocks: ``reflink="auto"`` fails on these (as cp 9.3 does), and copies instead on any other.
CLONE_FAILURE_ERRNOS = frozenset({errno.EIO, errno.ENOMEM, errno.ENOSPC, errno.EDQUOT})

#: Errnos that only the writing side of a move gives.
WRITE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EPIPE, errno.ENXIO}
)


class Copied(NamedTuple):
    """What :func:`copy_data` did: the bytes copied (the source's real length), the last kernel
    path taken (``ficlone``, ``copy_file_range``, ``sendfile``, ``splice``,
    ``splice_via_pipe``, ``read_write``, ``ftruncate``), whether holes were kept or made, and
    whether the blocks are shared (a clone)."""

    length: int
    path: str
    holes: bool
    cloned: bool


class DataError(Exception):
    """A kernel error while moving the bytes, with the step that failed: ``clone`` (FICLONE
    under ``reflink="always"``, or with an errno of :data:`CLONE_FAILURE_ERRNOS`), ``read``,
    ``write``, ``copy`` (a move whose failing side the kernel does not say), ``lseek`` (the
    source's extents) or ``extend`` (the trailing hole)."""

    def __init__(self, step: str, error: OSError) -> None:
        super().__init__(step, error)
        self.step = step
        self.error = error


def copy_data(
    src_fd: int,
    dst_fd: int,
    *,
    reflink: Reflink = "auto",
    sparse: Sparse = "auto",
    progress: Progress | None = None,
) -> Copied:
    """Every byte of ``src_fd`` (from its position; a regular file's from 0) into ``dst_fd``
    at its position. When ``dst_fd`` is an empty regular file, blocks may be shared
    (``reflink``) and holes kept (``sparse="auto"``: where SEEK_DATA finds them) or made
    (``sparse="always"``: every block of zeros); ``sparse="never"`` writes the holes' zeros.
    Raises :class:`DataError`."""
    st = os.fstat(src_fd)
    dst_st = os.fstat(dst_fd)
    regular = stat.S_ISREG(st.st_mode) and stat.S_ISREG(dst_st.st_mode)
    report = progress or _ignore
    if reflink == "always" or (reflink == "auto" and regular):
        try:
            fcntl.ioctl(dst_fd, FICLONE, src_fd)
        except OSError as e:
            if reflink == "always" or e.errno in CLONE_FAILURE_ERRNOS:
                raise DataError("clone", e) from None
        else:
            length = os.fstat(dst_fd).st_size
            report(length, "ficlone")
            return Copied(length, "ficlone", False, True)
    # Blocks can only be shared within one filesystem; between regular files sparse="never"
    # writes every zero, which copy_file_range may leave as a hole (cp 9.4 avoids it then too).
    unshared = (reflink == "never" and dst_st.st_dev == st.st_dev) or (
        sparse == "never" and regular
    )
    mover = _Mover(unshared=unshared)
    try:
        if regular and sparse == "always":
            return _copy_zeros_as_holes(src_fd, dst_fd, dst_st.st_blksize or 4096, report)
        if regular and sparse == "auto" and has_holes(src_fd, st):
            return _copy_sparse(src_fd, dst_fd, report, mover)
        return _copy_dense(src_fd, dst_fd, report, mover)
    finally:
        mover.close()


def _ignore(done: int, path: str) -> None:
    pass


def has_holes(src_fd: int, st: os.stat_result) -> bool:
    """True when the source has a hole before its size, as ``lseek(SEEK_DATA/SEEK_HOLE)``
    says. Blocks fewer than the size are not enough: sysfs files report 4096 bytes in no
    blocks, and all of it data (read to the end, they hold a few bytes); procfs refuses the
    question (EINVAL). See lseek(2)."""
    size = st.st_size
    if size <= 0 or st.st_blocks * 512 >= size:
        return False
    try:
        data = os.lseek(src_fd, 0, SEEK_DATA)
    except OSError as e:
        if e.errno == errno.ENXIO:  # no data at all: one hole
            return True
        if e.errno in (errno.EINVAL, errno.EOPNOTSUPP, errno.ESPIPE):
            return False
        raise DataError("lseek", e) from None
    try:
        return data > 0 or os.lseek(src_fd, 0, SEEK_HOLE) < size
    except OSError as e:
        raise DataError("lseek", e) from None
    finally:
        # The questions moved the file position; a dense copy reads from it.
        os.lseek(src_fd, 0, os.SEEK_SET)


class _Mover:
    """How one file's bytes move: :func:`fdkit.zerocopy.transfer` (copy_file_range first),
    or with ``unshared`` splice through a pipe. On btrfs and XFS copy_file_range within one
    filesystem may share blocks, as FICLONE does; ``reflink="never"`` promises a copy that
    owns its blocks (as ``cp --reflink=never`` makes), so it never takes that path there.
    ``path`` is the path the last move took."""

    def __init__(self, *, unshared: bool) -> None:
        self.pipe: zerocopy.Pipe | None = None
        if unshared:
            self.pipe = zerocopy.Pipe()
            self.pipe.resize_or_max(CHUNK_UNSHARED)
        self.path = "read_write"

    def close(self) -> None:
        if self.pipe is not None:
            self.pipe.close()

    def move(self, src_fd: int, dst_fd: int, count: int, off: int | None) -> int:
        """Up to ``count`` bytes (at ``off`` in both files, or at their positions); 0 at the
        end of the source. A failure is a :class:`DataError`: ``copy`` when copy_file_range
        failed (the kernel does not say which side), else ``read`` or ``write``."""
        if self.pipe is None:
            try:
                if off is None:
                    n = zerocopy.transfer(src_fd, dst_fd, count)
                else:
                    n = zerocopy.transfer(src_fd, dst_fd, count, src_offset=off, dst_offset=off)
            except OSError as e:
                stats = zerocopy.transfer_stats()
                path = stats["path"] if stats is not None else "read_write"
                if path == "copy_file_range":
                    raise DataError("copy", e) from None
                raise DataError("write" if e.errno in WRITE_ERRNOS else "read", e) from None
            stats = zerocopy.transfer_stats()
            if stats is not None and n:
                self.path = stats["path"]
            return n
        try:
            n = self.pipe.read_from(src_fd, min(count, self.pipe.size), offset=off)
        except OSError as e:
            raise DataError("read", e) from None
        left = n
        try:
            while left:
                where = None if off is None else off + n - left
                left -= self.pipe.write_to(dst_fd, left, offset=where)
        except OSError as e:
            raise DataError("write", e) from None
        if n:
            self.path = "splice_via_pipe"
        return n


def _copy_dense(src_fd: int, dst_fd: int, report: Progress, mover: _Mover) -> Copied:
    """From the file position to the end of the source (which, on procfs and sysfs, is not
    its stat size: ``transfer`` reads until a read says 0)."""
    done = 0
    while True:
        n = mover.move(src_fd, dst_fd, CHUNK, None)
        done += n
        if n == 0:
            break
        report(done, mover.path)
    return Copied(done, mover.path, False, False)


def _copy_sparse(src_fd: int, dst_fd: int, report: Progress, mover: _Mover) -> Copied:
    """Copy only the data extents, each at its own offset, into an empty ``dst_fd``, so the
    holes stay holes. Data is read to its real end; the length after the last extent comes
    from ``lseek``: a trailing hole (SEEK_DATA finds no more data) is made with ``ftruncate``
    to the end SEEK_END gives then, never to a size taken from stat. See lseek(2) SEEK_DATA,
    SEEK_HOLE; ftruncate(2)."""
    pos = 0
    path = "ftruncate"  # until a data extent is copied: a file that is all hole
    while True:
        try:
            data = os.lseek(src_fd, pos, SEEK_DATA)
        except OSError as e:
            if e.errno != errno.ENXIO:
                raise DataError("lseek", e) from None
            # No data after pos: the rest, to the current end, is a hole.
            end = os.lseek(src_fd, 0, os.SEEK_END)
            if end > pos:
                try:
                    os.ftruncate(dst_fd, end)
                except OSError as e:
                    raise DataError("extend", e) from None
                pos = end
            break
        try:
            hole = os.lseek(src_fd, data, SEEK_HOLE)
        except OSError as e:
            raise DataError("lseek", e) from None
        off = data
        short = False
        while off < hole:
            n = mover.move(src_fd, dst_fd, min(CHUNK, hole - off), off)
            if n == 0:  # the source ended before its extent did: it is shorter than it said
                short = True
                break
            path = mover.path
            off += n
            report(off, path)
        pos = off
        if short:
            break
    # The destination's position, for a caller that writes on: the end of what was copied.
    os.lseek(dst_fd, pos, os.SEEK_SET)
    return Copied(pos, path, True, False)


def _copy_zeros_as_holes(src_fd: int, dst_fd: int, block: int, report: Progress) -> Copied:
    """``cp --sparse=always``: read everything, write the blocks that hold a byte, seek over
    those that are all zeros (each ``block`` bytes, the destination's ``st_blksize``), and end
    with ``ftruncate`` when the last block was a hole."""
    done = 0
    hole_at_end = False
    zeros = bytes(block)
    size = max(block, CHUNK_ZEROS - CHUNK_ZEROS % block)
    while True:
        try:
            buf = os.read(src_fd, size)
        except OSError as e:
            raise DataError("read", e) from None
        if not buf:
            break
        view = memoryview(buf)
        start = 0
        while start < len(buf):
            end = min(start + block, len(buf))
            piece = view[start:end]
            try:
                if piece == zeros[: end - start]:
                    os.lseek(dst_fd, end - start, os.SEEK_CUR)
                    hole_at_end = True
                else:
                    _write_all(dst_fd, piece)
                    hole_at_end = False
            except OSError as e:
                raise DataError("write", e) from None
            start = end
        done += len(buf)
        report(done, "read_write")
    if hole_at_end:
        try:
            os.ftruncate(dst_fd, done)
        except OSError as e:
            raise DataError("extend", e) from None
    return Copied(done, "read_write", True, False)


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        n = os.write(fd, data)
        data = data[n:]
