"""``fdkit copy SRC DST``, ``fdkit copy SRC... DIR``: copy files and trees by the best kernel
path, with GNU ``cp``'s habits.

Sources and destination are read as ``cp`` reads them: one SRC and a DST that is not a
directory copies SRC to DST; otherwise each SRC goes to ``DIR/basename(SRC)`` (several SRCs
need an existing directory: "target 'X': Not a directory"). A directory SRC needs ``-r``
("-r not specified; omitting directory 'X'", exit 1, the other SRCs still copied); a directory
is never copied into itself. A failed SRC (or a failed file inside a tree) is named in one
line on stderr, the rest is still copied, and the exit status is 1.

What happens depends on what each destination is, following ``cp`` (see ``DST_KINDS`` for
the words ``--help`` prints):

* absent, or a regular file: the bytes go to a temporary file beside it, which is renamed
  over it only once complete (and, for a file named on the command line or one that existed,
  flushed with ``fsync``): an interrupted copy never leaves a half-written DST. A new file
  gets SRC's permission bits less the umask, a replaced one keeps its own, as with ``cp``;
  ``-p`` gives SRC's mode, owner (as root) and times. (``cp`` overwrites a regular file in
  place; the atomic replace is deliberate, and it means other hard links to the old DST keep
  the old bytes.)
* a character or block device or a FIFO: opened for writing (no ``O_CREAT``) and written
  into, never replaced: a device node stays a device node, a FIFO's reader gets the bytes.
* a socket: refused, as ``cp`` refuses it.
* a symlink: written through to its target by the rules above; a regular target is replaced
  in the target's directory, so the link stays a link. A dangling symlink is refused
  ("not writing through dangling symlink", as ``cp`` says).
* a directory: the copy goes to ``DST/basename(SRC)``, by the same rules.

With ``-r``, a tree is copied as ``cp -r`` copies it: directories made (and their modes set
once their contents are in), symlinks copied as symlinks (a symlink SRC too), FIFOs made with
``mkfifo``, device nodes and sockets with ``mknod``, and a file hard-linked twice inside the
copied sources is hard-linked twice in the copy (as ``cp -a`` does; plain ``cp -r`` makes two
files). ``-n`` skips an existing destination, ``-i`` asks first (on stderr, reading a line from
stdin, as ``cp -i`` does whatever stdin is; the last of ``-n``/``-i`` wins).

Regular files go through the kernel: ``--reflink=auto`` (the default, as in ``cp`` 9) first
asks the filesystem to share the blocks (``ioctl(FICLONE)``, btrfs, XFS), then copies with
:func:`fdkit.zerocopy.transfer` (copy_file_range, sendfile, splice, read/write);
``--reflink=never`` splices through a pipe within one filesystem instead, since
copy_file_range may share blocks there as FICLONE does. A file is read
to its end, never sized by ``stat`` alone: procfs and sysfs files report a size (0, 4096) that
is not their length. A file with fewer blocks than its size is only copied sparsely once
``lseek(SEEK_DATA/SEEK_HOLE)`` finds a hole in it (sysfs reports all data, procfs refuses the
question: both are read to the end); then only the data extents are copied and ``ftruncate``
makes the trailing hole, to the length the source has when SEEK_DATA finds no more data.
See lseek(2), ioctl_ficlone(2).

When stdout is a terminal, a progress line shows bytes, throughput, elapsed time, the ETA and
the path the kernel took (copy_file_range, sendfile, splice, read_write, ficlone), and a final
line stays; otherwise (a pipe, a file, a script's capture) nothing is printed but errors, as
``cp`` does. ``-q`` silences the terminal too; ``-v`` prints ``'SRC' -> 'DST'`` for each file
on stdout (as ``cp -v``) and logs the details and the summary on stderr. Every error names the
paths as typed, on stderr.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import logging
import os
import stat
import sys
import time
from dataclasses import dataclass
from typing import Any, Literal, TextIO

from fdkit import fd, zerocopy
from fdkit.cli import _log

#: Notices (a FIFO waiting for its reader) and, with ``-v``, the details and the summary.
log = logging.getLogger("fdkit.cli.copy")

# Bytes per transfer call: large enough that the call overhead vanishes, small enough that the
# progress line moves several times a second on a slow disk.
CHUNK = 64 << 20

SEEK_DATA = 3
SEEK_HOLE = 4

#: ``ioctl_ficlone(2)``: make the destination share the source's blocks (``_IOW(0x94, 9, int)``).
FICLONE = 0x40049409

# Errnos of FICLONE meaning "this filesystem (pair) cannot share blocks": auto copies instead.
_NO_CLONE_ERRNOS = frozenset(
    {errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.EBADF, errno.ETXTBSY}
)

# Errnos of a transfer that can only come from the writing side: the message names DST.
_WRITE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EPIPE, errno.ENXIO}
)

DST_KINDS = """\
what happens for each kind of DST (as GNU cp does, except where noted):
  absent or a regular file  written to a temporary file beside DST, then renamed over it:
                            DST is never half-written (cp writes in place; other hard links
                            to the old DST keep the old bytes); fsync'd when named on the
                            command line or replacing a file; a new file gets SRC's mode
                            less the umask, a replaced one keeps its mode (-p: SRC's)
  device node or FIFO       opened for writing and written into, never replaced (a device
                            stays a device; a FIFO with no reader waits for one, as cp does:
                            a line says so, Ctrl-C stops)
  socket                    refused
  symlink                   written through to its target by these rules (a regular target
                            is replaced beside the target, the link stays); a dangling
                            symlink is refused, as cp refuses it
  directory                 the copy goes to DST/basename(SRC)
  several SRCs              DST must be a directory; each goes to DST/basename(SRC)

what is copied (as GNU cp does, except where noted):
  regular file              by the kernel: FICLONE first (--reflink=auto), then
                            copy_file_range, sendfile, splice or read/write (--reflink=never:
                            splice through a pipe, so that no block is shared); read to its
                            end (procfs, sysfs: never sized by stat alone)
  sparse SRC                holes are kept in a regular DST once SEEK_DATA/SEEK_HOLE find
                            one (only data extents are copied); a device or FIFO gets zeros
  directory                 only with -r; never into itself
  with -r                   symlinks stay symlinks, FIFOs made with mkfifo, devices and
                            sockets with mknod; files hard-linked together stay linked
                            together (cp -r makes separate files; cp -a links them)
  without -r                a symlink SRC is followed; a FIFO or device SRC is read (as
                            cp does: /dev/null gives an empty file)
"""

Clobber = Literal["yes", "no", "ask"]
Reflink = Literal["auto", "always", "never"]


@dataclass(frozen=True)
class Options:
    """What the command line asked for (``cp``'s flags)."""

    recursive: bool = False
    #: ``yes``: overwrite; ``no``: ``-n``, skip an existing destination; ``ask``: ``-i``.
    clobber: Clobber = "yes"
    preserve: bool = False
    reflink: Reflink = "auto"
    #: ``-v``: ``'SRC' -> 'DST'`` on stdout for each file made.
    verbose: bool = False
    quiet: bool = False


class CopyError(OSError):
    """A copy that failed: ``strerror`` is the whole one-line message, naming the paths as the
    user typed them (never a temporary name); ``errno`` is the kernel's, or 0."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, message)


def _failed(e: OSError, what: str) -> CopyError:
    """``what`` (an action and a path, as typed) with the kernel's reason."""
    return CopyError(e.errno or 0, f"{what}: {e.strerror or e}")


def _stat_of(dst: str, follow: bool = False) -> os.stat_result | None:
    """What is at ``dst`` now (``lstat``, or ``stat`` when ``follow``), None when nothing is;
    any other failure is cp's ``cannot stat 'DST'``."""
    try:
        return os.stat(dst) if follow else os.lstat(dst)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _failed(e, f"cannot stat {dst!r}") from None


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
    stderr instead). Errors never come through here.

    One display covers the whole command: each file adds its size to the total when it
    starts (:meth:`begin`) and its real length once done (:meth:`done_file`), so a tree's
    line counts every byte copied so far."""

    def __init__(
        self,
        total: int = 0,
        out: TextIO | None = None,
        quiet: bool = False,
        now: float | None = None,
    ) -> None:
        self.total = total
        self.out = sys.stdout if out is None else out
        self.quiet = quiet
        self.live = not quiet and _isatty(self.out)
        self.start = time.monotonic() if now is None else now
        self.last_draw = 0.0
        self.showing = False  # a live line is on the terminal, not yet ended by a newline
        self.base = 0  # bytes of the files already done
        self.files = 0
        self.paths: list[str] = []  # the kernel paths taken, in order of first use
        self.holes = False  # a sparse file kept its holes

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

    def begin(self, size: int) -> None:
        """A file of stat size ``size`` starts."""
        self.total += size

    def update(self, done: int, path: str) -> None:
        """``done`` bytes of the current file are copied, by ``path``."""
        now = time.monotonic()
        if self.live and now - self.last_draw >= 0.1:
            self.last_draw = now
            self.out.write("\r" + self.line(self.base + done, path, now) + "\x1b[K")
            self.out.flush()
            self.showing = True

    def done_file(self, size: int, done: int, path: str, *, holes: bool = False) -> None:
        """The current file (stat size ``size``) is complete at ``done`` bytes: what was
        copied is the whole file, whatever its stat size said. ``holes``: copied sparsely."""
        self.total += done - size
        self.base += done
        self.files += 1
        self.holes = self.holes or holes
        if path not in self.paths:
            self.paths.append(path)

    def finish(self) -> None:
        """The command is done: the summary in the log, the final line on the terminal."""
        if not self.files:
            return
        path = ", ".join(self.paths + (["holes kept"] if self.holes else []))
        self.total = self.base
        elapsed = max(time.monotonic() - self.start, 1e-9)
        what = _human(self.base) if self.files == 1 else f"{self.files} files, {_human(self.base)}"
        log.debug(
            "copied %s in %.3f s (%s/s) via %s", what, elapsed, _human(self.base / elapsed), path
        )
        if self.live:
            self.out.write("\r\x1b[K" + self.line(self.base, path) + "\n")
            self.out.flush()
            self.showing = False

    def say(self, text: str) -> None:
        """A line of output (``-v``'s ``'SRC' -> 'DST'``) on stdout, above the live line."""
        if self.showing:
            self.out.write("\r\x1b[K")
            self.showing = False
        self.out.write(text + "\n")
        self.out.flush()

    def end(self) -> None:
        """Before an error or a prompt: the live line stays as it was, and what follows goes
        below it."""
        if self.showing:
            self.showing = False
            self.out.write("\n")
            self.out.flush()


def _isatty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (ValueError, OSError):  # closed, or no fd behind it
        return False


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _ask(question: str, p: Progress) -> bool:
    """``cp -i``'s prompt: the question on stderr, a line from stdin (whatever it is), yes
    when it starts with ``y`` or ``Y``; end of input is no."""
    p.end()
    sys.stderr.write(f"fdkit copy: {question}? ")
    sys.stderr.flush()
    answer = sys.stdin.readline() if sys.stdin is not None else ""
    return answer[:1] in ("y", "Y")


class Copier:
    """One run of the command: the options, the shared progress display, the hard links seen
    (source (dev, inode) to the path of its first copy) and whether anything failed."""

    def __init__(self, opts: Options, out: TextIO | None = None) -> None:
        self.opts = opts
        self.p = Progress(0, out, opts.quiet)
        self.links: dict[tuple[int, int], str] = {}
        self.made_dirs: set[tuple[int, int]] = set()
        self.umask = _umask()
        self.failed = False

    # --- the command line ------------------------------------------------------------------

    def run(self, sources: list[str], dest: str) -> int:
        """Copy ``sources`` to ``dest`` as ``cp SRC... DEST`` does; errors on stderr, one
        line each; returns the exit status."""
        try:
            self._run(sources, dest)
            self.p.finish()
        finally:
            self.p.end()
        return 1 if self.failed else 0

    def _run(self, sources: list[str], dest: str) -> None:
        if not dest:
            return self._error(
                CopyError(errno.ENOENT, "DST is an empty path: give a file or directory")
            )
        into = os.path.isdir(dest)
        if len(sources) > 1 and not into:
            try:
                os.stat(dest)
            except OSError as e:
                return self._error(_failed(e, f"target {dest!r}"))
            return self._error(CopyError(errno.ENOTDIR, f"target {dest!r}: Not a directory"))
        seen: set[tuple[int, int]] = set()
        for src in sources:
            if not src:
                self._error(CopyError(errno.ENOENT, "SRC is an empty path: give a file"))
                continue
            if into and self._again(src, seen):
                continue
            dst = os.path.join(dest, os.path.basename(src.rstrip("/")) or src) if into else dest
            try:
                self._top(src, dst)
            except CopyError as e:
                self._error(e)

    def _again(self, src: str, seen: set[tuple[int, int]]) -> bool:
        """A SRC named twice for one directory is copied once, with cp's warning."""
        try:
            st = os.stat(src) if not self.opts.recursive else os.lstat(src)
        except OSError:
            return False  # the copy names the error
        key = (st.st_dev, st.st_ino)
        if key not in seen:
            seen.add(key)
            return False
        what = "directory" if stat.S_ISDIR(st.st_mode) else "file"
        self.p.end()
        print(
            f"fdkit copy: warning: source {what} {src!r} specified more than once", file=sys.stderr
        )
        return True

    def _error(self, e: CopyError) -> None:
        self.p.end()
        print(f"fdkit copy: {e.strerror}", file=sys.stderr)
        self.failed = True

    def _top(self, src: str, dst: str) -> None:
        """One SRC from the command line: followed when it is a symlink, unless ``-r``."""
        follow = not self.opts.recursive
        try:
            st = os.stat(src) if follow else os.lstat(src)
        except OSError as e:
            raise _failed(e, f"cannot stat {src!r}") from None
        if stat.S_ISDIR(st.st_mode):
            if not self.opts.recursive:
                raise CopyError(errno.EISDIR, f"-r not specified; omitting directory {src!r}")
            _not_into_itself(src, dst)
        self._one(src, dst, st, top=True)

    # --- one entry -------------------------------------------------------------------------

    def _one(self, src: str, dst: str, st: os.stat_result, *, top: bool) -> None:
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            self._dir(src, dst, st)
        elif stat.S_ISLNK(mode) or (self.opts.recursive and not stat.S_ISREG(mode)):
            # Under -r (or a symlink not followed): made anew, as cp -r makes it.
            self._special(src, dst, st)
        else:
            self._file(src, dst, st, top=top)

    def _verbose(self, src: str, dst: str) -> None:
        if self.opts.verbose:
            self.p.say(f"{src!r} -> {dst!r}")

    def _may_replace(self, dst: str) -> bool:
        """``-n``/``-i`` for an existing ``dst``: False to leave it as it is."""
        if self.opts.clobber == "no":
            log.debug("not overwriting %r (-n)", dst)
            return False
        if self.opts.clobber == "ask":
            return _ask(f"overwrite {dst!r}", self.p)
        return True

    def _linked(self, src: str, dst: str, st: os.stat_result) -> bool:
        """Under ``-r``, a file already copied under another name (hard links): link ``dst``
        to that copy. False when this is the first name seen."""
        if not self.opts.recursive or st.st_nlink < 2:
            return False
        first = self.links.get((st.st_dev, st.st_ino))
        if first is None:
            return False
        old = _stat_of(dst)
        if old is not None:
            if stat.S_ISDIR(old.st_mode):
                raise CopyError(
                    errno.EISDIR, f"cannot overwrite directory {dst!r} with non-directory"
                )
            if not self._may_replace(dst):
                return True
            _unlink(dst)
        try:
            os.link(first, dst)
        except OSError as e:
            raise _failed(e, f"cannot create hard link {dst!r} to {first!r}") from None
        self._verbose(src, dst)
        return True

    def _remember(self, dst: str, st: os.stat_result) -> None:
        if self.opts.recursive and st.st_nlink > 1:
            self.links.setdefault((st.st_dev, st.st_ino), dst)

    def _dir(self, src: str, dst: str, st: os.stat_result) -> None:
        """``cp -r``: make ``dst`` (or merge into it), copy each entry, then set its mode (and
        with ``-p`` its owner and times: after the entries, which change its mtime)."""
        if (st.st_dev, st.st_ino) in self.made_dirs:
            raise CopyError(errno.ELOOP, f"cannot copy a directory, {src!r}, into itself")
        old = _stat_of(dst, follow=True)
        if old is not None and not stat.S_ISDIR(old.st_mode):
            raise CopyError(
                errno.ENOTDIR, f"cannot overwrite non-directory {dst!r} with directory {src!r}"
            )
        if old is None:
            try:
                # Owner-writable while filling it (a read-only SRC directory stays copyable).
                os.mkdir(dst, stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
            except OSError as e:
                raise _failed(e, f"cannot create directory {dst!r}") from None
            self._verbose(src, dst)
            made = os.stat(dst)
            self.made_dirs.add((made.st_dev, made.st_ino))
        try:
            names = sorted(os.listdir(src))
        except OSError as e:
            self._error(_failed(e, f"cannot access {src!r}"))
            names = []
        for name in names:
            s, d = os.path.join(src, name), os.path.join(dst, name)
            try:
                est = os.lstat(s)
            except OSError as e:
                self._error(_failed(e, f"cannot stat {s!r}"))
                continue
            try:
                self._one(s, d, est, top=False)
            except CopyError as e:
                self._error(e)
        try:
            if self.opts.preserve:
                _chown(dst, st, follow=True)
                os.chmod(dst, stat.S_IMODE(st.st_mode))
                os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
            elif old is None:
                os.chmod(dst, stat.S_IMODE(st.st_mode) & ~self.umask & 0o777)
        except OSError as e:
            raise _failed(e, f"preserving the attributes of {dst!r}") from None

    def _special(self, src: str, dst: str, st: os.stat_result) -> None:
        """A symlink, FIFO, device node or socket made anew at ``dst``, as ``cp -r`` makes
        it (an existing non-directory there is replaced)."""
        if self._linked(src, dst, st):
            return
        old = _stat_of(dst)
        if old is not None:
            _refuse_replacing(src, dst, st, old)
            if not self._may_replace(dst):
                return
            _unlink(dst)
        mode = st.st_mode
        try:
            if stat.S_ISLNK(mode):
                try:
                    target = os.readlink(src)
                except OSError as e:
                    raise _failed(e, f"cannot read symbolic link {src!r}") from None
                os.symlink(target, dst)
                what = "symbolic link"
            elif stat.S_ISFIFO(mode):
                what = "fifo"
                os.mkfifo(dst, stat.S_IMODE(mode))
            else:
                what = "special file"
                os.mknod(dst, mode, st.st_rdev)
        except CopyError:
            raise
        except OSError as e:
            raise _failed(e, f"cannot create {what} {dst!r}") from None
        self._verbose(src, dst)
        self._remember(dst, st)
        if self.opts.preserve:
            try:
                link = stat.S_ISLNK(mode)
                _chown(dst, st, follow=not link)
                if not link:
                    os.chmod(dst, stat.S_IMODE(mode))
                os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=not link)
            except OSError as e:
                raise _failed(e, f"preserving the attributes of {dst!r}") from None

    # --- the bytes of one file -------------------------------------------------------------

    def _file(self, src: str, dst: str, st: os.stat_result, *, top: bool) -> None:
        """The bytes of ``src`` (a regular file, or what a FIFO or device gives) into ``dst``
        by the rules of the module doc."""
        if self._linked(src, dst, st):
            return
        target, dst_st = _resolve(dst)
        if dst_st is not None:
            _refuse_replacing(src, dst, st, dst_st)
            if stat.S_ISSOCK(dst_st.st_mode):
                raise CopyError(errno.ENXIO, f"cannot write into {dst!r}: it is a socket")
            if not self._may_replace(dst):
                return
            if stat.S_ISREG(dst_st.st_mode) and not os.access(target, os.W_OK):
                # cp opens DST for writing: a read-only DST is refused (root may write).
                raise CopyError(
                    errno.EACCES, f"cannot create regular file {dst!r}: Permission denied"
                )
        try:
            src_fd = fd.open(src, fd.O_RDONLY | os.O_NOCTTY)
        except OSError as e:
            raise _failed(e, f"cannot open {src!r} for reading") from None
        try:
            fst = fd.fstat(src_fd)
            log.debug(
                "copying %r (%s%s) to %r (%s)",
                src,
                _human(fst.st_size),
                ", sparse" if fst.st_blocks * 512 < fst.st_size else "",
                dst,
                _kind(dst, target, dst_st),
            )
            if dst_st is None or stat.S_ISREG(dst_st.st_mode):
                self._replace(src, src_fd, fst, dst, target, dst_st, durable=top)
            else:
                self._write_into(src, src_fd, fst, dst, target, dst_st)
        finally:
            fd.close(src_fd)
        self._verbose(src, dst)
        self._remember(target, st)

    def _replace(
        self,
        src: str,
        src_fd: int,
        st: fd.StatResult,
        dst: str,
        target: str,
        old: os.stat_result | None,
        *,
        durable: bool,
    ) -> None:
        """A regular (or absent) DST: temporary file beside ``target``, the bytes, the mode
        (and with ``-p`` owner and times), fsync when ``durable`` or replacing, rename."""
        dst_dir = os.path.dirname(os.path.abspath(target))
        exists = old is not None
        try:
            tmp_fd, tmp_path = fd.mkstemp(
                prefix=f".{os.path.basename(target)}.", suffix=".fdkit-tmp", dir=dst_dir
            )
        except OSError as e:
            if exists:
                raise _failed(
                    e, f"cannot replace {dst!r} (no temporary file in {dst_dir!r})"
                ) from None
            raise _failed(e, f"cannot create {dst!r}") from None
        try:
            self._copy_into(src, src_fd, dst, tmp_fd, st, regular=True)
            try:
                if self.opts.preserve:
                    _chown(tmp_fd, st, follow=True)
                    os.fchmod(tmp_fd, stat.S_IMODE(st.st_mode))
                elif old is not None:
                    _chown(tmp_fd, old, follow=True)
                    os.fchmod(tmp_fd, stat.S_IMODE(old.st_mode))
                else:
                    os.fchmod(tmp_fd, stat.S_IMODE(st.st_mode) & ~self.umask & 0o777)
                if self.opts.preserve:
                    os.utime(tmp_fd, ns=(st.st_atime_ns, st.st_mtime_ns))
                if durable or exists:
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

    def _write_into(
        self,
        src: str,
        src_fd: int,
        st: fd.StatResult,
        dst: str,
        target: str,
        dst_st: os.stat_result,
    ) -> None:
        """A device node or FIFO: open it for writing (no O_CREAT, no temporary, no rename)
        and write the bytes into it, as cp does."""
        flags = fd.O_WRONLY | os.O_NOCTTY
        try:
            if stat.S_ISFIFO(dst_st.st_mode):
                # A FIFO with no reader blocks open(2) (cp waits there, silently); say so first.
                try:
                    out_fd = fd.open(target, flags | fd.O_NONBLOCK)
                except OSError as e:
                    if e.errno != errno.ENXIO:
                        raise
                    self.p.end()
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
            self._copy_into(src, src_fd, dst, out_fd, st, regular=False)
            if stat.S_ISBLK(now.st_mode):
                try:
                    os.fsync(out_fd)
                except OSError as e:
                    raise _failed(e, f"writing {dst!r}") from None
        finally:
            fd.close(out_fd)

    def _copy_into(
        self, src: str, src_fd: int, dst: str, dst_fd: int, st: fd.StatResult, *, regular: bool
    ) -> None:
        """Every byte of ``src_fd`` into ``dst_fd`` (a new, empty regular file when
        ``regular``: then shared blocks and holes are possible), errors named after ``src``
        and ``dst``."""
        p = self.p
        p.begin(st.st_size)
        try:
            done: int | None = None
            path = ""
            holes = False
            never = self.opts.reflink == "never"
            if regular and stat.S_ISREG(st.st_mode):
                if not never:
                    done = _clone(src_fd, dst_fd, always=self.opts.reflink == "always")
                    path = "ficlone"
            elif self.opts.reflink == "always":
                raise CopyError(
                    errno.EOPNOTSUPP,
                    f"failed to clone {dst!r} from {src!r}: Operation not supported",
                )
            if done is None:
                # Blocks can only be shared within one filesystem.
                mover = _Mover(unshared=never and fd.fstat(dst_fd).st_dev == st.st_dev)
                try:
                    if regular and stat.S_ISREG(st.st_mode) and _has_holes(src_fd, st):
                        done, path = _copy_sparse(src_fd, dst_fd, p, mover)
                        holes = True
                    else:
                        done, path = _copy_dense(src_fd, dst_fd, p, mover)
                finally:
                    mover.close()
        except OSError as e:
            if isinstance(e, CopyError):
                raise
            if e.errno in _WRITE_ERRNOS:
                raise _failed(e, f"writing {dst!r}") from None
            raise _failed(e, f"copying {src!r} to {dst!r}") from None
        except _CloneError as e:
            raise _failed(e.error, f"failed to clone {dst!r} from {src!r}") from None
        p.done_file(st.st_size, done, path, holes=holes)


class _CloneError(Exception):
    """``--reflink=always`` and the filesystem cannot share blocks."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error)
        self.error = error


def _clone(src_fd: int, dst_fd: int, *, always: bool) -> int | None:
    """``ioctl(dst, FICLONE, src)``: the new file shares the source's blocks. Returns the
    length cloned, or None when the filesystem cannot (auto: copy instead). See
    ioctl_ficlone(2)."""
    try:
        fcntl.ioctl(dst_fd, FICLONE, src_fd)
    except OSError as e:
        if always:
            raise _CloneError(e) from None
        if e.errno in _NO_CLONE_ERRNOS or e.errno == errno.EPERM:
            return None
        raise
    return os.fstat(dst_fd).st_size


def _has_holes(src_fd: int, st: fd.StatResult) -> bool:
    """True when the source has a hole before ``size``, as ``lseek(SEEK_DATA/SEEK_HOLE)``
    says. Blocks fewer than the size are not enough: sysfs files report 4096 bytes in no
    blocks, and all of it data (read to the end, they hold a few bytes); procfs refuses the
    question (EINVAL). See lseek(2)."""
    size = st.st_size
    if size <= 0 or st.st_blocks * 512 >= size:
        return False
    try:
        data = fd.lseek(src_fd, 0, SEEK_DATA)
    except OSError as e:
        if e.errno == errno.ENXIO:  # no data at all: one hole
            return True
        if e.errno in (errno.EINVAL, errno.EOPNOTSUPP, errno.ESPIPE):
            return False
        raise
    try:
        return data > 0 or fd.lseek(src_fd, 0, SEEK_HOLE) < size
    finally:
        # The questions moved the file position; a dense copy reads from it.
        fd.lseek(src_fd, 0, os.SEEK_SET)


class _Mover:
    """How one file's bytes move: :func:`fdkit.zerocopy.transfer` (copy_file_range first),
    or with ``unshared`` splice through a pipe. On btrfs and XFS copy_file_range within one
    filesystem may share blocks, as FICLONE does; ``--reflink=never`` promises a copy that
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
        end of the source."""
        if self.pipe is None:
            if off is None:
                n = zerocopy.transfer(src_fd, dst_fd, count)
            else:
                n = zerocopy.transfer(src_fd, dst_fd, count, src_offset=off, dst_offset=off)
            stats = zerocopy.transfer_stats()
            if stats is not None and n:
                self.path = stats["path"]
            return n
        n = self.pipe.read_from(src_fd, min(count, self.pipe.size), offset=off)
        left = n
        while left:
            w = self.pipe.write_to(dst_fd, left, offset=None if off is None else off + n - left)
            left -= w
        if n:
            self.path = "splice_via_pipe"
        return n


#: Bytes per splice through the pipe of ``--reflink=never`` (the pipe's size, or the most a
#: pipe may hold here).
CHUNK_UNSHARED = 1 << 20


def _copy_dense(src_fd: int, dst_fd: int, p: Progress, mover: _Mover) -> tuple[int, str]:
    """From the file position to the end of the source (which, on procfs and sysfs, is not
    its stat size: ``transfer`` reads until a read says 0). Returns the bytes and the path."""
    done = 0
    while True:
        n = mover.move(src_fd, dst_fd, CHUNK, None)
        done += n
        if n == 0:
            break
        p.update(done, mover.path)
    return done, mover.path


def _copy_sparse(src_fd: int, dst_fd: int, p: Progress, mover: _Mover) -> tuple[int, str]:
    """Copy only the data extents, each at its own offset, into a new, empty ``dst_fd``, so
    the holes stay holes. Data is read to its real end; the length after the last extent
    comes from ``lseek``: a trailing hole (SEEK_DATA finds no more data) is made with
    ``ftruncate`` to the end SEEK_END gives then, never to a size taken from stat. Returns
    the length and the path. See lseek(2) SEEK_DATA, SEEK_HOLE; ftruncate(2)."""
    pos = 0
    path = "ftruncate"  # until a data extent is copied: a file that is all hole
    while True:
        try:
            data = fd.lseek(src_fd, pos, SEEK_DATA)
        except OSError as e:
            if e.errno != errno.ENXIO:
                raise
            # No data after pos: the rest, to the current end, is a hole.
            end = fd.lseek(src_fd, 0, os.SEEK_END)
            if end > pos:
                os.ftruncate(dst_fd, end)
                pos = end
            break
        hole = fd.lseek(src_fd, data, SEEK_HOLE)
        off = data
        short = False
        while off < hole:
            n = mover.move(src_fd, dst_fd, min(CHUNK, hole - off), off)
            if n == 0:  # the source ended before its extent did: it is shorter than it said
                short = True
                break
            path = mover.path
            off += n
            p.update(off, f"{path}, holes kept")
        pos = off
        if short:
            break
    return pos, path


def _chown(target: int | str, st: os.stat_result | fd.StatResult, *, follow: bool) -> None:
    """Give ``target`` the owner of ``st``; as a non-root user only what is permitted (cp
    -p drops the owner silently where it may not set it)."""
    try:
        if isinstance(target, int):
            os.fchown(target, st.st_uid, st.st_gid)
        else:
            os.chown(target, st.st_uid, st.st_gid, follow_symlinks=follow)
    except PermissionError:
        pass


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise _failed(e, f"cannot remove {path!r}") from None


def _refuse_replacing(src: str, dst: str, st: os.stat_result, old: os.stat_result) -> None:
    """What cp refuses before it replaces ``dst`` (``old``: its stat) with a copy of ``src``
    (``st``) that is not a directory: the same file, or a directory there."""
    if (old.st_dev, old.st_ino) == (st.st_dev, st.st_ino):
        raise CopyError(errno.EINVAL, f"{src!r} and {dst!r} are the same file")
    if stat.S_ISDIR(old.st_mode):
        raise CopyError(errno.EISDIR, f"cannot overwrite directory {dst!r} with non-directory")


def _not_into_itself(src: str, dst: str) -> None:
    """``cp -r a a/b``: refused, naming both as typed."""
    real_src = os.path.realpath(src)
    real_dst = os.path.join(
        os.path.realpath(os.path.dirname(os.path.abspath(dst))), os.path.basename(dst)
    )
    if real_dst == real_src:
        raise CopyError(errno.EINVAL, f"{src!r} and {dst!r} are the same file")
    if os.path.commonpath([real_src, real_dst]) == real_src:
        raise CopyError(errno.EINVAL, f"cannot copy a directory, {src!r}, into itself, {dst!r}")


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
    lst = _stat_of(dst)
    if lst is None or not stat.S_ISLNK(lst.st_mode):
        return dst, lst
    try:
        st = os.stat(dst)
    except FileNotFoundError:
        raise CopyError(errno.ENOENT, f"not writing through dangling symlink {dst!r}") from None
    except OSError as e:
        raise _failed(e, f"cannot follow symlink {dst!r}") from None
    return os.path.realpath(dst), st


def copy(
    sources: list[str], dest: str, opts: Options | None = None, out: TextIO | None = None
) -> int:
    """``cp SRC... DEST`` with ``opts``: errors on stderr (one line each), progress on
    ``out`` (default: stdout) when it is a terminal; returns the exit status (0 or 1)."""
    return Copier(opts or Options(), out).run(sources, dest)


def run(args: argparse.Namespace) -> int:
    _log.setup("copy", args)
    opts = Options(
        recursive=args.recursive,
        clobber=args.clobber,
        preserve=args.preserve,
        reflink=args.reflink,
        verbose=args.verbose,
        quiet=args.quiet,
    )
    return copy(args.src, args.dst, opts)


def spell_bare_reflink(argv: list[str]) -> list[str]:
    """``argv`` (copy's arguments) with a bare ``--reflink`` before ``--`` spelled
    ``--reflink=always``: cp reads a value only after ``=``, so ``cp --reflink a b`` copies
    ``a`` to ``b``, where argparse would take ``a`` for the value."""
    out: list[str] = []
    for i, a in enumerate(argv):
        if a == "--":
            return out + argv[i:]
        out.append("--reflink=always" if a == "--reflink" else a)
    return out


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "copy",
        help="copy files and trees by the best kernel path (cp's habits)",
        description="Copy SRC to DST, or each SRC into the directory DST, through the kernel, "
        "as GNU cp does. On a terminal, a progress line shows bytes, throughput, elapsed "
        "time, the ETA and the path taken (ficlone, copy_file_range, sendfile, splice, "
        "read_write); when stdout is not a terminal only errors are printed (on stderr).",
        epilog=DST_KINDS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "src", metavar="SRC", nargs="+", help="a file to copy (with -r, also a directory)"
    )
    p.add_argument(
        "dst",
        metavar="DST",
        help="the destination: a file, device, FIFO, symlink or directory (a directory when "
        "there are several SRCs)",
    )
    p.add_argument(
        "-r", "-R", "--recursive", action="store_true", help="copy directories recursively"
    )
    # -n and -i: the last one given wins, as with cp.
    p.add_argument(
        "-n",
        "--no-clobber",
        dest="clobber",
        action="store_const",
        const="no",
        help="do not overwrite an existing file",
    )
    p.add_argument(
        "-i",
        "--interactive",
        dest="clobber",
        action="store_const",
        const="ask",
        help="ask before overwriting (on stderr, answer read from stdin)",
    )
    p.set_defaults(clobber="yes")
    p.add_argument(
        "-p",
        dest="preserve",
        action="store_true",
        help="keep mode, ownership (as root) and timestamps",
    )
    p.add_argument(
        "--reflink",
        nargs="?",
        metavar="WHEN",
        choices=("auto", "always", "never"),
        const="always",
        default="auto",
        help="share blocks with FICLONE: auto (default: where the filesystem can, else "
        "copy), always (fail where it cannot), never",
    )
    _log.add_verbosity(
        p,
        quiet="no progress line and no notices",
        verbose="print 'SRC' -> 'DST' for each file (as cp -v); details on stderr",
    )
    p.set_defaults(run=run)
