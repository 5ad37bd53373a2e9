"""``fdkit copy SRC DST``: copy a file by the best kernel path, safely.

What happens depends on what DST is, following GNU ``cp`` (see ``DST_KINDS`` for the words
``--help`` prints):

* absent, or a regular file: the bytes go to a temporary file beside it, which is renamed
  over it only once complete and flushed (``fsync``): an interrupted copy never leaves a
  half-written DST. SRC's permission bits are kept. (``cp`` overwrites a regular file in
  place; the atomic replace is deliberate, and it means other hard links to the old DST keep
  the old bytes.)
* a character or block device or a FIFO: opened for writing (no ``O_CREAT``) and written
  into, never replaced: a device node stays a device node, a FIFO's reader gets the bytes.
* a socket: refused, as ``cp`` refuses it.
* a symlink: written through to its target by the rules above; a regular target is replaced
  in the target's directory, so the link stays a link. A dangling symlink is refused
  ("not writing through dangling symlink", as ``cp`` says).
* a directory: the copy goes to ``DST/basename(SRC)``, by the same rules.

A sparse SRC (fewer blocks allocated than its size) keeps its holes in a regular DST: only
the data extents found with ``lseek(SEEK_DATA/SEEK_HOLE)`` are copied, and ``ftruncate``
sets the size (measured: ``copy_file_range`` on ext4 fills the holes). See lseek(2).

When stdout is a terminal, a progress line shows bytes, throughput, elapsed time, the ETA and
the path the kernel took (copy_file_range, sendfile, splice, read/write), and a final line
stays; otherwise (a pipe, a file, a script's capture) nothing is printed but errors, as ``cp``
does. ``-q`` silences the terminal too; ``-v`` logs the details and the summary on stderr.
Every error names the paths as typed, on stderr.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import stat
import sys
import time
from typing import Any, TextIO

from fdkit import fd, zerocopy
from fdkit.cli import _log

#: Notices (a FIFO waiting for its reader) and, with ``-v``, the details and the summary.
log = logging.getLogger("fdkit.cli.copy")

# Bytes per transfer call: large enough that the call overhead vanishes, small enough that the
# progress line moves several times a second on a slow disk.
CHUNK = 64 << 20

SEEK_DATA = 3
SEEK_HOLE = 4

# Errnos of a transfer that can only come from the writing side: the message names DST.
_WRITE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EPIPE, errno.ENXIO}
)

DST_KINDS = """\
what happens for each kind of DST (as GNU cp does, except where noted):
  absent or a regular file  written to a temporary file beside DST, fsync'd, then renamed
                            over it: DST is never half-written (cp writes in place; other
                            hard links to the old DST keep the old bytes); SRC's mode is kept
  device node or FIFO       opened for writing and written into, never replaced (a device
                            stays a device; a FIFO with no reader waits for one, as cp does:
                            a line says so, Ctrl-C stops)
  socket                    refused
  symlink                   written through to its target by these rules (a regular target
                            is replaced beside the target, the link stays); a dangling
                            symlink is refused, as cp refuses it
  directory                 the copy goes to DST/basename(SRC)
  sparse SRC                holes are kept in a regular DST (only data extents are copied,
                            found with SEEK_DATA/SEEK_HOLE); a device or FIFO gets the zeros
"""


class CopyError(OSError):
    """A copy that failed: ``strerror`` is the whole one-line message, naming the paths as the
    user typed them (never a temporary name); ``errno`` is the kernel's, or 0."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, message)


def _failed(e: OSError, what: str) -> CopyError:
    """``what`` (an action and a path, as typed) with the kernel's reason."""
    return CopyError(e.errno or 0, f"{what}: {e.strerror or e}")


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _clock(seconds: float) -> str:
    """``H:MM:SS``, as rsync and pv show elapsed time and ETA."""
    s = max(0, int(seconds + 0.5))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class Progress:
    """A one-line progress display on stdout, redrawn in place, and a final line: only when
    stdout is a terminal and not ``quiet``. Otherwise silent, as ``cp`` and ``rsync`` are:
    ``fdkit copy a b > log`` or a script's capture gets nothing (``-v`` logs the summary on
    stderr instead). Errors never come through here."""

    def __init__(
        self, total: int, out: TextIO | None = None, quiet: bool = False, now: float | None = None
    ) -> None:
        self.total = total
        self.out = sys.stdout if out is None else out
        self.quiet = quiet
        self.live = not quiet and _isatty(self.out)
        self.start = time.monotonic() if now is None else now
        self.last_draw = 0.0
        self.showing = False  # a live line is on the terminal, not yet ended by a newline

    def line(self, done: int, path: str, now: float | None = None) -> str:
        """``42.0%  1.3 GiB / 3.0 GiB  812.5 MiB/s  elapsed 0:00:01  ETA 0:00:02  via PATH``;
        the ETA is left out once complete (or when the size is unknown)."""
        elapsed = max((time.monotonic() if now is None else now) - self.start, 1e-9)
        rate = done / elapsed
        eta = ""
        if done > self.total:
            # procfs and sysfs files report a size (0, 4096) that is not their length.
            head = f"     ?  {_human(done)}"
        else:
            pct = f"{100 * done / self.total:5.1f}%" if self.total else "100.0%"
            head = f"{pct}  {_human(done)} / {_human(self.total)}"
            if done < self.total:
                eta = "  ETA " + (_clock((self.total - done) / rate) if done else "?")
        return f"{head}  {_human(rate)}/s  elapsed {_clock(elapsed)}{eta}  via {path}"

    def update(self, done: int, path: str) -> None:
        now = time.monotonic()
        if self.live and now - self.last_draw >= 0.1:
            self.last_draw = now
            self.out.write("\r" + self.line(done, path, now) + "\x1b[K")
            self.out.flush()
            self.showing = True

    def finish(self, done: int, path: str) -> None:
        # Complete: what was copied is the whole file, whatever its stat size said.
        self.total = done
        elapsed = max(time.monotonic() - self.start, 1e-9)
        log.debug(
            "copied %s in %.3f s (%s/s) via %s", _human(done), elapsed, _human(done / elapsed), path
        )
        if self.live:
            self.out.write("\r\x1b[K" + self.line(done, path) + "\n")
            self.out.flush()
            self.showing = False

    def end(self) -> None:
        """After a failure: the live line stays as it was, and the error goes below it."""
        if self.showing:
            self.showing = False
            self.out.write("\n")
            self.out.flush()


def _isatty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (ValueError, OSError):  # closed, or no fd behind it
        return False


def copy_file(src: str, dst: str, *, quiet: bool = False, out: TextIO | None = None) -> int:
    """Copy ``src`` to ``dst`` (see the module doc for each kind of DST); return the bytes
    copied (holes included). Raises :class:`CopyError` naming ``src``/``dst`` as given.
    Progress goes to ``out`` (default: stdout) when it is a terminal and not ``quiet``;
    notices to the ``fdkit.cli.copy`` logger."""
    if not dst:
        raise CopyError(errno.ENOENT, "DST is an empty path: give a file or directory")
    if not src:
        raise CopyError(errno.ENOENT, "SRC is an empty path: give a file")
    try:
        src_fd = fd.open(src, fd.O_RDONLY)
    except OSError as e:
        raise _failed(e, f"cannot open {src!r}") from None
    progress: Progress | None = None
    try:
        st = fd.fstat(src_fd)
        if not stat.S_ISREG(st.st_mode):
            raise CopyError(errno.EINVAL, f"{src!r} is not a regular file")
        if os.path.isdir(dst):
            dst = os.path.join(dst, os.path.basename(src.rstrip("/")))
        target, dst_st = _resolve(dst)
        log.debug(
            "copying %r (%s%s) to %r (%s)",
            src,
            _human(st.st_size),
            ", sparse" if st.st_blocks * 512 < st.st_size else "",
            dst,
            _kind(dst, target, dst_st),
        )
        progress = Progress(st.st_size, out, quiet)
        if dst_st is None or stat.S_ISREG(dst_st.st_mode):
            if dst_st is not None and (dst_st.st_dev, dst_st.st_ino) == (st.st_dev, st.st_ino):
                raise CopyError(errno.EINVAL, f"{src!r} and {dst!r} are the same file")
            return _replace(src, src_fd, st, dst, target, exists=dst_st is not None, p=progress)
        if stat.S_ISDIR(dst_st.st_mode):
            raise CopyError(errno.EISDIR, f"cannot overwrite directory {dst!r} with a file")
        if stat.S_ISSOCK(dst_st.st_mode):
            raise CopyError(errno.ENXIO, f"cannot write into {dst!r}: it is a socket")
        return _write_into(src, src_fd, st, dst, target, dst_st, progress)
    finally:
        fd.close(src_fd)
        if progress is not None:
            progress.end()


def _kind(dst: str, target: str, st: os.stat_result | None) -> str:
    """What DST is, for the ``-v`` log."""
    if st is None:
        what = "new file"
    elif stat.S_ISREG(st.st_mode):
        what = "regular file, replaced"
    elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        what = "device, written into"
    elif stat.S_ISFIFO(st.st_mode):
        what = "FIFO, written into"
    else:
        what = "not writable"
    return what if target == dst else f"{what}, through symlink to {target!r}"


def _resolve(dst: str) -> tuple[str, os.stat_result | None]:
    """The path to write (a symlink's final target) and what is there now (None: nothing)."""
    try:
        lst = os.lstat(dst)
    except FileNotFoundError:
        return dst, None
    except OSError as e:
        raise _failed(e, f"cannot access {dst!r}") from None
    if not stat.S_ISLNK(lst.st_mode):
        return dst, lst
    try:
        st = os.stat(dst)
    except FileNotFoundError:
        raise CopyError(errno.ENOENT, f"not writing through dangling symlink {dst!r}") from None
    except OSError as e:
        raise _failed(e, f"cannot follow symlink {dst!r}") from None
    return os.path.realpath(dst), st


def _replace(
    src: str, src_fd: int, st: fd.StatResult, dst: str, target: str, *, exists: bool, p: Progress
) -> int:
    """A regular (or absent) DST: temporary file beside ``target``, fsync, rename over it."""
    dst_dir = os.path.dirname(os.path.abspath(target))
    try:
        tmp_fd, tmp_path = fd.mkstemp(
            prefix=f".{os.path.basename(target)}.", suffix=".fdkit-tmp", dir=dst_dir
        )
    except OSError as e:
        if exists:
            raise _failed(e, f"cannot replace {dst!r} (no temporary file in {dst_dir!r})") from None
        raise _failed(e, f"cannot create {dst!r}") from None
    try:
        done = _copy_into(src, src_fd, dst, tmp_fd, st, sparse_ok=True, p=p)
        try:
            os.fchmod(tmp_fd, stat.S_IMODE(st.st_mode))
            os.fsync(tmp_fd)
            # close(2) can report a late write error (NFS); the fd is gone either way.
            closing, tmp_fd = tmp_fd, -1
            fd.close(closing)
        except OSError as e:
            raise _failed(e, f"writing {dst!r}") from None
        try:
            os.rename(tmp_path, target)
        except OSError as e:
            verb = "replace" if exists else "create"
            raise _failed(e, f"cannot {verb} {dst!r}") from None
    except BaseException:
        if tmp_fd >= 0:
            fd.close(tmp_fd)
        os.unlink(tmp_path)
        raise
    return done


def _write_into(
    src: str,
    src_fd: int,
    st: fd.StatResult,
    dst: str,
    target: str,
    dst_st: os.stat_result,
    p: Progress,
) -> int:
    """A device node or FIFO: open it for writing (no O_CREAT, no temporary, no rename) and
    write the bytes into it, as cp does."""
    flags = fd.O_WRONLY | os.O_NOCTTY
    try:
        if stat.S_ISFIFO(dst_st.st_mode):
            # A FIFO with no reader blocks open(2) (cp waits there, silently); say so first.
            try:
                out_fd = fd.open(target, flags | fd.O_NONBLOCK)
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
                log.info("waiting for a reader on FIFO %r (Ctrl-C to stop)", dst)
                out_fd = fd.open(target, flags)
            else:
                try:
                    fd.set_blocking(out_fd, True)
                except OSError:
                    fd.close(out_fd)
                    raise
        else:
            out_fd = fd.open(target, flags)
    except OSError as e:
        raise _failed(e, f"cannot open {dst!r} for writing") from None
    try:
        now = fd.fstat(out_fd)
        if not (
            stat.S_ISCHR(now.st_mode) or stat.S_ISBLK(now.st_mode) or stat.S_ISFIFO(now.st_mode)
        ):
            # Replaced between lstat and open: nothing was written (no O_TRUNC).
            raise CopyError(errno.EAGAIN, f"{dst!r} changed while opening it; try again")
        done = _copy_into(src, src_fd, dst, out_fd, st, sparse_ok=False, p=p)
        if stat.S_ISBLK(now.st_mode):
            try:
                os.fsync(out_fd)
            except OSError as e:
                raise _failed(e, f"writing {dst!r}") from None
    finally:
        fd.close(out_fd)
    return done


def _copy_into(
    src: str,
    src_fd: int,
    dst: str,
    dst_fd: int,
    st: fd.StatResult,
    *,
    sparse_ok: bool,
    p: Progress,
) -> int:
    """Every byte of ``src_fd`` into ``dst_fd`` (holes kept when ``sparse_ok`` and the source
    has fewer blocks than its size), errors named after ``src`` and ``dst``."""
    try:
        if sparse_ok and st.st_size > 0 and st.st_blocks * 512 < st.st_size:
            done = _copy_sparse(src_fd, dst_fd, st.st_size, p)
            if done is not None:
                return done
        return _copy_dense(src_fd, dst_fd, p)
    except OSError as e:
        if isinstance(e, CopyError):
            raise
        if e.errno in _WRITE_ERRNOS:
            raise _failed(e, f"writing {dst!r}") from None
        raise _failed(e, f"copying {src!r} to {dst!r}") from None


def _copy_dense(src_fd: int, dst_fd: int, p: Progress) -> int:
    """From the file position to the end of the source (which, on procfs and sysfs, is not
    its stat size: ``transfer`` reads until a read says 0)."""
    done = 0
    path = "read_write"
    while True:
        n = zerocopy.transfer(src_fd, dst_fd, CHUNK)
        stats = zerocopy.transfer_stats()
        if stats is not None and n:
            path = stats["path"]
        done += n
        if n == 0:
            break
        p.update(done, path)
    p.finish(done, path)
    return done


def _copy_sparse(src_fd: int, dst_fd: int, size: int, p: Progress) -> int | None:
    """Copy only the data extents, each at its own offset, then ``ftruncate`` to ``size`` so
    the holes stay holes in the (new, empty) destination. None: the filesystem cannot tell
    data from holes (lseek EINVAL/EOPNOTSUPP at the start), copy densely instead. Returns
    ``size``. See lseek(2) SEEK_DATA, SEEK_HOLE; ftruncate(2)."""
    pos = 0
    path = "ftruncate"
    while pos < size:
        try:
            data = fd.lseek(src_fd, pos, SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:  # no data after pos: the rest is a hole
                break
            if pos == 0 and e.errno in (errno.EINVAL, errno.EOPNOTSUPP):
                return None
            raise
        if data >= size:
            break
        end = min(fd.lseek(src_fd, data, SEEK_HOLE), size)
        off = data
        while off < end:
            n = zerocopy.transfer(
                src_fd, dst_fd, min(CHUNK, end - off), src_offset=off, dst_offset=off
            )
            if n == 0:  # the source shrank under us: the rest reads as a hole
                break
            stats = zerocopy.transfer_stats()
            if stats is not None:
                path = stats["path"]
            off += n
            p.update(off, f"{path}, holes kept")
        pos = end
    os.ftruncate(dst_fd, size)
    p.finish(size, f"{path}, holes kept")
    return size


def run(args: argparse.Namespace) -> int:
    _log.setup("copy", args)
    try:
        copy_file(args.src, args.dst, quiet=args.quiet)
    except CopyError as e:
        print(f"fdkit copy: {e.strerror}", file=sys.stderr)
        return 1
    except OSError as e:  # not expected: every step names its paths; still one line
        where = f": {e.filename}" if e.filename else ""
        print(f"fdkit copy: {e.strerror or e}{where}", file=sys.stderr)
        return 1
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "copy",
        help="copy a file by the best kernel path (copy_file_range, sendfile, splice)",
        description="Copy SRC to DST through the kernel. On a terminal, a progress line shows "
        "bytes, throughput, elapsed time, the ETA and the path taken (copy_file_range, "
        "sendfile, splice, read_write); when stdout is not a terminal only errors are printed "
        "(on stderr).",
        epilog=DST_KINDS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("src", metavar="SRC", help="the file to copy (a regular file)")
    p.add_argument(
        "dst", metavar="DST", help="the destination: a file, device, FIFO, symlink or directory"
    )
    _log.add_verbosity(p, quiet="no progress line and no notices")
    p.set_defaults(run=run)
