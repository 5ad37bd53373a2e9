"""``fdkit copy SRC DST``: copy a file by the best kernel path, safely.

The bytes go to a temporary file next to the destination, which is renamed over it only once
complete and flushed (``fsync``): an interrupted copy never leaves a half-written DST. The
source's permission bits are kept. A progress line on a terminal shows bytes, throughput and
the path the kernel took (copy_file_range, sendfile, splice, read/write).
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
import time
from typing import Any, TextIO

from fdkit import fd, zerocopy

# Bytes per transfer call: large enough that the call overhead vanishes, small enough that the
# progress line moves several times a second on a slow disk.
CHUNK = 64 << 20


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


class Progress:
    """A one-line progress display, redrawn in place on a terminal, silent otherwise."""

    def __init__(self, total: int, out: TextIO) -> None:
        self.total = total
        self.out = out
        self.live = out.isatty()
        self.start = time.monotonic()
        self.last_draw = 0.0

    def line(self, done: int, path: str) -> str:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        pct = f"{100 * done / self.total:5.1f}%" if self.total else "100.0%"
        return (
            f"{pct}  {_human(done)} / {_human(self.total)}  {_human(done / elapsed)}/s  via {path}"
        )

    def update(self, done: int, path: str) -> None:
        now = time.monotonic()
        if self.live and now - self.last_draw >= 0.1:
            self.last_draw = now
            self.out.write("\r" + self.line(done, path) + "\x1b[K")
            self.out.flush()

    def finish(self, done: int, path: str) -> None:
        if self.live:
            self.out.write("\r\x1b[K")
        self.out.write(self.line(done, path) + "\n")
        self.out.flush()


def copy_file(src: str, dst: str, *, quiet: bool = False, out: TextIO = sys.stderr) -> int:
    """Copy ``src`` to ``dst`` (a file path or an existing directory); return bytes copied."""
    if os.path.isdir(dst):
        dst = os.path.join(dst, os.path.basename(src.rstrip("/")))
    src_fd = fd.open(src, fd.O_RDONLY)
    try:
        st = fd.fstat(src_fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(0, f"{src} is not a regular file")
        if os.path.exists(dst) and os.path.samefile(src, dst):
            raise OSError(0, f"{src} and {dst} are the same file")
        dst_dir = os.path.dirname(os.path.abspath(dst))
        tmp_fd, tmp_path = fd.mkstemp(
            prefix=f".{os.path.basename(dst)}.", suffix=".fdkit-tmp", dir=dst_dir
        )
        try:
            done = _copy_into(src_fd, tmp_fd, st.st_size, quiet, out)
            os.fchmod(tmp_fd, stat.S_IMODE(st.st_mode))
            os.fsync(tmp_fd)
            fd.close(tmp_fd)
            tmp_fd = -1
            os.rename(tmp_path, dst)
        except BaseException:
            if tmp_fd >= 0:
                fd.close(tmp_fd)
            os.unlink(tmp_path)
            raise
    finally:
        fd.close(src_fd)
    return done


def _copy_into(src_fd: int, dst_fd: int, size: int, quiet: bool, out: TextIO) -> int:
    progress = Progress(size, out)
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
        if not quiet:
            progress.update(done, path)
    if not quiet:
        progress.finish(done, path)
    return done


def run(args: argparse.Namespace) -> int:
    try:
        copy_file(args.src, args.dst, quiet=args.quiet)
    except OSError as e:
        what = e.strerror or str(e)
        where = f": {e.filename}" if e.filename else ""
        print(f"fdkit copy: {what}{where}", file=sys.stderr)
        return 1
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "copy",
        help="copy a file by the best kernel path (copy_file_range, sendfile, splice)",
        description="Copy SRC to DST (a file or a directory) through the kernel, with a "
        "progress line; DST appears only when complete (temporary file + rename), with "
        "SRC's permissions.",
    )
    p.add_argument("src", metavar="SRC", help="the file to copy")
    p.add_argument("dst", metavar="DST", help="the destination file or directory")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    p.set_defaults(run=run)
