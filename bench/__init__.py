"""fdkit's benchmarks: every capability against its standard-library baseline (and C).

This harness lives in the source tree only (``bench/``), never in the wheel: run it from a
checkout with ``make bench`` (or ``python -m bench`` from the repository root); ``make demo``
runs its tour (:mod:`bench.tour`). The installed ``fdkit`` command has no bench subcommand.

``BENCHES`` is the registry ``python -m bench`` runs. A bench is a module
with a function ``run(quick: bool) -> list[Result]``; adding one is one line in ``BENCHES``
below. Modules are imported only when their bench runs, so ``--list`` stays instant. A bench
with a ``--contended`` variant (a CPU burner on the load's CPU) is registered with
``contended=True`` and takes ``run(quick, contended=True)``.

Every result row follows one contract (see :class:`Result`): ``ratio`` is "times better than
the baseline", above 1 means fdkit wins, and ``goal`` is the ratio fdkit sets out to reach.
"""

from __future__ import annotations

import importlib
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from bench._common import TINY_ENV, Result, note, tiny

__all__ = ["BENCHES", "Bench", "Result", "machine_info", "run_benches"]


@dataclass(frozen=True)
class Bench:
    """A registered benchmark: ``module`` is imported lazily and its ``run`` called."""

    name: str
    description: str
    module: str
    contended: bool = False  # whether it has a --contended variant

    def run(self, quick: bool, contended: bool = False) -> list[Result]:
        """Run the bench (``quick``: the short tour; ``contended``: its --contended variant)
        and return its result rows."""
        if contended and not self.contended:
            raise ValueError(f"{self.name} has no --contended variant")
        mod = importlib.import_module(self.module)
        if contended:
            return cast(Callable[..., list[Result]], mod.run)(quick, contended=True)
        fn = cast(Callable[[bool], list[Result]], mod.run)
        return fn(quick)


def _bench(name: str, description: str, contended: bool = False) -> tuple[str, Bench]:
    return name, Bench(name, description, f"bench.{name}", contended)


BENCHES: dict[str, Bench] = dict(
    [
        _bench("accept", "drain a pre-filled backlog: stdlib accept/selectors vs fdkit vs C"),
        _bench("socket_create", "socket create+close per CPU-second: socket.socket vs fdkit vs C"),
        _bench("memory", "RSS per held socket: socket.socket objects vs fdkit int fds"),
        _bench("file_open", "file open+close per CPU-second: open(), os.open, fdkit, C"),
        _bench("fd", "IPv6/unix socket create, listen(4096), pipe and socket read/write vs stdlib"),
        _bench("zerocopy", "relay CPU per GiB and MiB/s: transfer vs recv/sendall, splice, C"),
        _bench("proxy", "proxy CPU per GiB: fdkit proxy vs an asyncio proxy"),
        _bench("atomic_pipe", "whole messages from writer processes: AtomicPipe vs mp.Queue/Pipe"),
        _bench("serve", "static files under wrk, CPU per request: fdkit serve vs nginx, asyncio"),
        _bench(
            "aio",
            "asyncio event loops under load, CPU per request: fdkit.aio vs uvloop, ...",
            contended=True,
        ),
        _bench("aio_anatomy", "Python calls per hello request: fdkit.aio's engines, asyncio, ..."),
        _bench("aio_tls", "TLS under load, CPU per request: fdkit.aio vs uvloop, asyncio"),
    ]
)


def contended_names() -> list[str]:
    """The benches that have a ``--contended`` variant."""
    return [name for name, b in BENCHES.items() if b.contended]


def run_benches(names: list[str] | None, quick: bool, contended: bool = False) -> list[Result]:
    """Run the named benches (all when ``names`` is empty or None), in registry order;
    ``contended``: their --contended variants (all that have one when ``names`` is empty).

    Progress goes to stderr so stdout carries only the table or the JSON.
    """
    default = contended_names() if contended else list(BENCHES)
    chosen = default if not names else list(dict.fromkeys(names))
    unknown = [n for n in chosen if n not in BENCHES]
    if unknown:
        raise ValueError(f"unknown benchmark {', '.join(unknown)} (known: {', '.join(BENCHES)})")
    plain = [n for n in chosen if contended and not BENCHES[n].contended]
    if plain:
        raise ValueError(f"no --contended variant for {', '.join(plain)} "
                         f"(only {', '.join(contended_names())})")  # fmt: skip
    if tiny():
        note(f"{TINY_ENV} is set: smoke-test sizes, the figures mean nothing")
    results: list[Result] = []
    for name in chosen:
        t0 = time.monotonic()
        rows = BENCHES[name].run(quick, contended)
        note(f"{name}: {len(rows)} rows in {time.monotonic() - t0:.1f} s")
        results.extend(rows)
    return results


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Hardware", "cpu model"):
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, object]:
    """Where the figures were measured: kernel, CPUs, Python and fdkit versions."""
    from fdkit import __version__

    return {
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "fdkit": __version__,
    }
