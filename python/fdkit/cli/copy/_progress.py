"""The progress line of ``fdkit copy`` on a terminal: bytes, throughput, elapsed time, the ETA
and the kernel paths taken, redrawn in place; a final line stays. Nothing when stdout is not a
terminal, as ``cp`` and ``rsync`` print nothing there."""

from __future__ import annotations

import logging
import sys
import time
from typing import TextIO

#: The summary line of ``--log``.
log = logging.getLogger("fdkit.cli.copy")


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
