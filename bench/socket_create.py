"""Socket creation: ``socket()`` + ``close()`` of a TCP socket, per CPU-second.

Contenders, alternating in rounds: ``s = socket.socket(); s.close()``,
``fd.close(fd.socket())`` and a C loop of ``socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC)`` +
``close`` (called once through ctypes). All three create close-on-exec IPv4 TCP sockets.
"""

from __future__ import annotations

import ctypes
import socket
from collections.abc import Callable
from functools import partial

from bench._common import (
    Result,
    Sample,
    Timer,
    alternate,
    compare,
    load_c,
    median_of,
    pick,
    time_c_loop,
)
from fdkit import fd

BENCH = "socket_create"
GOAL_STDLIB = 1.0
GOAL_VS_C = 0.9
METRIC = "socket+close per CPU-second"
UNIT = "ops/s"
LABELS = {
    "stdlib": "socket.socket() + .close()",
    "fdkit": "fd.socket() + fd.close()",
    "c": "C socket+close loop",
}


def _stdlib(n: int) -> Sample:
    make = socket.socket
    t = Timer()
    with t:
        for _ in range(n):
            s = make()
            s.close()
    return t.sample(n)


def _fdkit(n: int) -> Sample:
    make = fd.socket
    close = fd.close
    t = Timer()
    with t:
        for _ in range(n):
            close(make())
    return t.sample(n)


def _c(lib: ctypes.CDLL) -> Callable[[int], Sample]:
    loop = lib.socket_loop
    loop.argtypes = (ctypes.c_int,)
    loop.restype = ctypes.c_int

    def run(n: int) -> Sample:
        return time_c_loop(lambda: int(loop(n)), n)

    return run


def run(quick: bool) -> list[Result]:
    """Create and close sockets with each contender, alternating; rates per CPU-second."""
    n = pick(quick, 20000, 10000, 500)
    rounds = pick(quick, 15, 7, 1)
    warmup = pick(quick, 1, 1, 0)
    loops: dict[str, Callable[[int], Sample]] = {"stdlib": _stdlib, "fdkit": _fdkit}
    lib = load_c("socket_loop")
    if lib is not None:
        loops["c"] = _c(lib)
    samples = alternate({k: partial(f, n) for k, f in loops.items()}, rounds, warmup)

    def rate(key: str) -> float:
        return median_of(samples[key], lambda s: s.cpu_rate)

    results = [
        compare(
            "socket_create",
            BENCH,
            f"{LABELS['fdkit']} [x{n}]",
            METRIC,
            UNIT,
            rate("fdkit"),
            rate("stdlib"),
            LABELS["stdlib"],
            GOAL_STDLIB,
        )
    ]
    if "c" in loops:
        results.append(
            compare(
                "socket_vs_c",
                BENCH,
                f"{LABELS['fdkit']} [x{n}]",
                METRIC,
                UNIT,
                rate("fdkit"),
                rate("c"),
                LABELS["c"],
                GOAL_VS_C,
            )
        )
    return results
