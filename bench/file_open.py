"""Opening files: ``open`` + ``close`` of an existing file, per CPU-second.

Contenders, alternating in rounds: ``open(path, 'rb').close()`` (a buffered file object),
``os.close(os.open(path, os.O_RDONLY))``, ``fd.close(fd.open(path, fd.O_RDONLY))`` and a C
loop of ``open(path, O_RDONLY | O_CLOEXEC)`` + ``close`` (called once through ctypes). All four
open close-on-exec, read-only, the same small file in a temporary directory.
"""

from __future__ import annotations

import ctypes
import os
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
    temp_file,
    time_c_loop,
)
from fdkit import fd

BENCH = "file_open"
GOAL_OS = 1.0
GOAL_VS_C = 0.9
METRIC = "open+close per CPU-second"
UNIT = "ops/s"
LABELS = {
    "builtin": "open(path, 'rb').close()",
    "os": "os.open() + os.close()",
    "fdkit": "fd.open() + fd.close()",
    "c": "C open+close loop",
}


def _builtin(path: str, n: int) -> Sample:
    opener = open
    t = Timer()
    with t:
        for _ in range(n):
            opener(path, "rb").close()
    return t.sample(n)


def _os(path: str, n: int) -> Sample:
    opener, close, flags = os.open, os.close, os.O_RDONLY
    t = Timer()
    with t:
        for _ in range(n):
            close(opener(path, flags))
    return t.sample(n)


def _fdkit(path: str, n: int) -> Sample:
    opener, close, flags = fd.open, fd.close, fd.O_RDONLY
    t = Timer()
    with t:
        for _ in range(n):
            close(opener(path, flags))
    return t.sample(n)


def _c(lib: ctypes.CDLL) -> Callable[[str, int], Sample]:
    loop = lib.open_loop
    loop.argtypes = (ctypes.c_char_p, ctypes.c_int)
    loop.restype = ctypes.c_int

    def run(path: str, n: int) -> Sample:
        raw = os.fsencode(path)
        return time_c_loop(lambda: int(loop(raw, n)), n, path)

    return run


def run(quick: bool) -> list[Result]:
    """Open and close one file with each contender, alternating; rates per CPU-second."""
    n = pick(quick, 20000, 10000, 500)
    rounds = pick(quick, 15, 7, 1)
    warmup = pick(quick, 1, 1, 0)
    loops: dict[str, Callable[[str, int], Sample]] = {
        "builtin": _builtin,
        "os": _os,
        "fdkit": _fdkit,
    }
    lib = load_c("open_loop")
    if lib is not None:
        loops["c"] = _c(lib)
    with temp_file() as path:
        samples = alternate({k: partial(f, path, n) for k, f in loops.items()}, rounds, warmup)

    def rate(key: str) -> float:
        return median_of(samples[key], lambda s: s.cpu_rate)

    where = f"{LABELS['fdkit']} [x{n}]"
    results = [
        compare(
            "file_open",
            BENCH,
            where,
            METRIC,
            UNIT,
            rate("fdkit"),
            rate("os"),
            LABELS["os"],
            GOAL_OS,
        )
    ]
    if "c" in loops:
        results.append(
            compare(
                "file_vs_c",
                BENCH,
                where,
                METRIC,
                UNIT,
                rate("fdkit"),
                rate("c"),
                LABELS["c"],
                GOAL_VS_C,
            )
        )
    results.append(
        compare(
            "file_open_builtin",
            BENCH,
            where,
            METRIC,
            UNIT,
            rate("fdkit"),
            rate("builtin"),
            LABELS["builtin"],
        )
    )
    return results
