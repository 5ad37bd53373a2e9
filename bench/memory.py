"""Memory per held socket: RSS growth while holding N open TCP sockets.

Each measurement runs in a fresh Python process, :mod:`bench.child.memory_holder` (so one
contender's freed memory cannot be reused by the other): it imports both ``socket`` and
``fdkit.fd``, warms up, reads its RSS from ``/proc/self/statm``, builds a list of N sockets
(``socket.socket`` objects, or the plain int fds ``fd.socket()`` returns), reads RSS again and
reports the growth divided by N. The list's own storage counts in both. Kernel-side socket
memory is not in RSS and is the same for both. Processes alternate between the contenders,
round after round.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from bench._common import Result, alternate, compare, median, pick
from bench.child import script

BENCH = "memory"
GOAL = 3.0
LABELS = {"stdlib": "socket.socket objects", "fdkit": "int fds"}


def _child(kind: str, n: int) -> float:
    """Bytes of RSS per held socket, measured in a fresh process."""
    proc = subprocess.Popen(
        [sys.executable, script("memory_holder"), kind, str(n)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise RuntimeError(f"memory child ({kind}) took over 60 s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"memory child ({kind}) failed: {err.strip()}")
    data = json.loads(out)
    return float(data["bytes"]) / int(data["n"])


def run(quick: bool) -> list[Result]:
    """Bytes per held socket for each contender: medians over alternating fresh processes."""
    # RSS moves in pages, and a few thousand ints can fit in memory the process already had:
    # the smoke size holds as many as the others, so the growth it reads spans many pages.
    n = pick(quick, 10000, 10000, 10000)
    rounds = pick(quick, 7, 5, 1)
    per = alternate(
        {"stdlib": lambda: _child("stdlib", n), "fdkit": lambda: _child("fdkit", n)},
        rounds,
        warmup=0,
    )
    return [
        compare(
            "fd_memory",
            BENCH,
            f"{LABELS['fdkit']} [{n} held]",
            "memory per held socket",
            "B/socket",
            median(per["fdkit"]),
            median(per["stdlib"]),
            LABELS["stdlib"],
            GOAL,
        )
    ]
