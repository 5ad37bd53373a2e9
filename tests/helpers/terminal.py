"""``fdkit copy`` on a pseudo-terminal, as in an interactive shell, and the line it leaves there."""

from __future__ import annotations

import errno
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time

FDKIT = shutil.which("fdkit", path=os.path.dirname(sys.executable)) or "fdkit"


def run_on_terminal(*args: str, sh: str = "", timeout: float = 60) -> tuple[int, str, str]:
    """``fdkit copy ARGS`` with stdout on a pseudo-terminal (as in an interactive shell),
    after the bash commands ``sh`` when given; returns the exit code, what reached the
    terminal and stderr."""
    cmd = [FDKIT, "copy", *args]
    if sh:
        cmd = ["bash", "-c", f'{sh}; exec "$0" copy "$@"', FDKIT, *args]
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(cmd, stdout=slave, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    finally:
        os.close(slave)
    seen = bytearray()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError as e:  # EIO: every writer of the terminal is gone
                if e.errno != errno.EIO:
                    raise
                break
            if not data:
                break
            seen += data
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        os.close(master)
    return proc.returncode, seen.decode(), err.decode()


def final_line(terminal: str) -> str:
    """The line left on the terminal at the end (the live line is redrawn over with \r)."""
    lines = [part.replace("\x1b[K", "") for part in re.split(r"[\r\n]+", terminal)]
    return [line for line in lines if line][-1]
