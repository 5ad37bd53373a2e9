"""What every benchmark shares: the result row, timers, alternating rounds, medians, and the
small C contenders compiled on the fly.

Conventions every bench follows:

* A contender is a callable that does one measurement (set-up untimed, the timed section,
  clean-up untimed) and returns a :class:`Sample` for the timed section only.
* :func:`alternate` runs the contenders round-robin (A B C, B C A, C A B, ...), never all of A
  then all of B, so a noisy neighbour hurts every contender alike; figures are medians.
* ``ratio`` is always "times better than the baseline": baseline cost / fdkit cost, or fdkit
  rate / baseline rate, so above 1 means fdkit wins. Rates are the units ending in ``/s``.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self, TypeVar

T = TypeVar("T")

C_DIR = Path(__file__).resolve().parent / "c"
"""The C contenders' sources (``bench/c/<name>.c``)."""

TINY_ENV = "FDKIT_BENCH_TINY"
"""Set to 1 to shrink every bench to a smoke test (for the test suite; figures meaningless)."""


@dataclass(frozen=True)
class Result:
    """One row of the benchmark table and of ``python -m bench --json``.

    ``fdkit`` and ``baseline`` are figures in ``unit``; ``ratio`` is "times better than the
    baseline" (above 1: fdkit wins); ``goal`` is the ratio fdkit sets out to reach, ``None``
    for rows that only show a figure. A goal listed in :data:`RETIRED_GOALS` stays in the row
    (the JSON keeps one shape) but is no longer judged.
    """

    id: str
    bench: str
    case: str
    metric: str
    unit: str
    fdkit: float
    baseline: float
    baseline_name: str
    ratio: float
    goal: float | None = None

    @property
    def met(self) -> bool | None:
        """Whether ``ratio`` reaches ``goal``; ``None`` when the row has no goal."""
        return None if self.goal is None else self.ratio >= self.goal

    @property
    def retired(self) -> str | None:
        """Why the row's goal is no longer judged (:data:`RETIRED_GOALS`), or ``None``."""
        return RETIRED_GOALS.get(self.id) if self.goal is not None else None


RETIRED_GOALS: dict[str, str] = {
    # asyncio's hello request costs ~9 us of CPU, ~5 of them in the kernel's TCP path, the same
    # for every loop (the C epoll floor spends ~5.5 in all): 1.6x would mean spending less than
    # the floor. The user-space row (aio_hello_user_vs_uvloop) carries the ambition instead.
    "aio_hello_vs_asyncio": "kernel-bound",
    # A held int fd is a Python int in a list: a 28-byte int object (32 in pymalloc's size
    # class) and an 8-byte slot; a socket.socket object and its slot come to less than three
    # times that, so no API returning ints reaches 3x. Runs that read less than 40 bytes per
    # int did so while the ints fitted in arena pages the process had already touched.
    "fd_memory": "int size",
}
"""Row id -> why its goal was retired: goals that a floor no implementation passes (the
kernel's share of the work, the size of a Python object) puts out of reach. The table and the
tour show such a row as ``retired``, not ✗, and leave it out of the count of goals met."""


def is_rate(unit: str) -> bool:
    """Whether higher is better for figures in ``unit`` (rates end in ``/s``)."""
    return unit.endswith("/s")


def ratio_of(unit: str, fdkit: float, baseline: float) -> float:
    """Times better than the baseline: fdkit/baseline for rates, baseline/fdkit for costs."""
    num, den = (fdkit, baseline) if is_rate(unit) else (baseline, fdkit)
    if den <= 0 or not math.isfinite(num) or not math.isfinite(den):
        return math.nan
    return num / den


def compare(
    id: str,
    bench: str,
    case: str,
    metric: str,
    unit: str,
    fdkit: float,
    baseline: float,
    baseline_name: str,
    goal: float | None = None,
) -> Result:
    """A :class:`Result` with its ratio computed the one way the contract defines."""
    return Result(
        id=id,
        bench=bench,
        case=case,
        metric=metric,
        unit=unit,
        fdkit=fdkit,
        baseline=baseline,
        baseline_name=baseline_name,
        ratio=ratio_of(unit, fdkit, baseline),
        goal=goal,
    )


@dataclass(frozen=True)
class Skipped:
    """Rows a bench could not produce on this machine (a tool it needs is missing): their ids
    and why. The table lists them under the rows; the JSON leaves them out, as it always has
    for rows that cannot run here, so its ``results`` keep one shape."""

    bench: str
    ids: tuple[str, ...]
    reason: str


_skipped: list[Skipped] = []


def skip(bench: str, ids: Sequence[str], reason: str) -> None:
    """Records ``ids`` of ``bench`` as skipped for ``reason``, and says so on stderr."""
    if not ids:
        return
    _skipped.append(Skipped(bench, tuple(ids), reason))
    note(f"{bench}: skipping {len(ids)} rows ({', '.join(headline_ids(ids))}...): {reason}")


def take_skipped() -> list[Skipped]:
    """The rows recorded as skipped since the last call (and forgets them)."""
    out = list(_skipped)
    _skipped.clear()
    return out


def headline_ids(ids: Sequence[str]) -> list[str]:
    """The main rows among ``ids``: those that are not a ``_rps``/``_p99``/``_rate``
    companion of another (to name a skipped group briefly)."""
    return [i for i in ids if not any(f"{k}_vs_" in i for k in ("_rps", "_p99"))]


_quiet = False


def note(message: str) -> None:
    """A remark for the person running the bench (stderr, so ``--json`` stays clean); dropped
    inside :func:`quiet`."""
    if not _quiet:
        print(f"bench: {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Drops the remarks :func:`note` would print (``-q``, and the tour of ``make demo``):
    what was skipped still shows under the table, and errors still say so."""
    global _quiet
    before, _quiet = _quiet, True
    try:
        yield
    finally:
        _quiet = before


def tiny() -> bool:
    """Whether the smoke-test size was asked for (environment variable ``FDKIT_BENCH_TINY``)."""
    return os.environ.get(TINY_ENV, "") not in ("", "0")


def pick(quick: bool, full: T, short: T, smoke: T) -> T:
    """The size for this run: ``full``, ``short`` under ``--quick``, ``smoke`` when tiny."""
    if tiny():
        return smoke
    return short if quick else full


def raise_nofile() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# --- timing ------------------------------------------------------------------------------


@dataclass
class Sample:
    """One timed section: ``count`` operations in ``wall_ns`` wall time and ``cpu_ns`` of
    process CPU time (user + system, all threads)."""

    count: int
    wall_ns: int
    cpu_ns: int

    @property
    def wall_rate(self) -> float:
        """Operations per wall-clock second."""
        return self.count * 1e9 / self.wall_ns if self.wall_ns > 0 else math.nan

    @property
    def cpu_rate(self) -> float:
        """Operations per CPU second."""
        return self.count * 1e9 / self.cpu_ns if self.cpu_ns > 0 else math.nan

    @property
    def cpu_us_per_op(self) -> float:
        """Microseconds of CPU per operation."""
        return self.cpu_ns / 1e3 / self.count if self.count > 0 else math.nan


class Timer:
    """Times a ``with`` block in wall and process CPU time::

    t = Timer()
    with t:
        work()
    sample = t.sample(count)
    """

    wall_ns: int = 0
    cpu_ns: int = 0

    def __enter__(self) -> Self:
        self._cpu0 = time.process_time_ns()
        self._wall0 = time.perf_counter_ns()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_ns = time.perf_counter_ns() - self._wall0
        self.cpu_ns = time.process_time_ns() - self._cpu0

    def sample(self, count: int) -> Sample:
        """The block's timings as a :class:`Sample` of ``count`` operations."""
        return Sample(count, self.wall_ns, self.cpu_ns)


def time_c_loop(call: Callable[[], int], n: int, what: str | None = None) -> Sample:
    """Time one call of a C loop that did ``n`` operations and returns 0 or ``-errno``."""
    t = Timer()
    with t:
        rc = call()
    if rc < 0:
        if what is None:
            raise OSError(-rc, os.strerror(-rc))
        raise OSError(-rc, os.strerror(-rc), what)
    return t.sample(n)


def alternate(
    contenders: dict[str, Callable[[], T]], rounds: int, warmup: int = 1
) -> dict[str, list[T]]:
    """Run every contender once per round, round-robin, rotating who goes first.

    ``warmup`` extra rounds run first and are discarded (imports, page faults, caches).
    Returns each contender's measurements in round order.
    """
    names = list(contenders)
    out: dict[str, list[T]] = {name: [] for name in names}
    for r in range(warmup + rounds):
        k = r % len(names) if names else 0
        for name in names[k:] + names[:k]:
            value = contenders[name]()
            if r >= warmup:
                out[name].append(value)
    return out


def median(values: Sequence[float]) -> float:
    """The median, ignoring NaNs (NaN when nothing is left)."""
    clean = [v for v in values if not math.isnan(v)]
    return statistics.median(clean) if clean else math.nan


def median_of(samples: Sequence[Sample], metric: Callable[[Sample], float]) -> float:
    """The median of ``metric`` over ``samples``."""
    return median([metric(s) for s in samples])


# --- C contenders ------------------------------------------------------------------------

_GCC_FLAGS = ("-O2", "-shared", "-fPIC")
_notes_given: set[str] = set()


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = Path(base) / "fdkit-bench"
    try:
        path.mkdir(parents=True, exist_ok=True)
        if os.access(path, os.W_OK):
            return path
    except OSError:
        pass
    path = Path(tempfile.gettempdir()) / f"fdkit-bench-{os.getuid()}"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def _note_once(key: str, message: str) -> None:
    if key not in _notes_given:
        _notes_given.add(key)
        note(message)


def compile_c(name: str, source: str) -> ctypes.CDLL | None:
    """Compile ``source`` with ``gcc -O2 -shared -fPIC`` and load it with ctypes.

    The shared object is cached under ``~/.cache/fdkit-bench/`` keyed by a hash of the source
    and flags, so a second run does not compile again. Returns ``None`` (after a note on
    stderr) when gcc is missing or the compile fails: the C contender is then skipped.
    """
    key = hashlib.sha256((" ".join(_GCC_FLAGS) + "\0" + source).encode()).hexdigest()[:16]
    try:
        cache = _cache_dir()
    except OSError as e:
        _note_once(name, f"no cache directory for the C contender {name} ({e}); skipping it")
        return None
    so = cache / f"{name}-{key}.so"
    if not so.exists():
        gcc = shutil.which("gcc") or shutil.which("cc")
        if gcc is None:
            _note_once("gcc", "gcc not found: skipping the C contenders")
            return None
        fd, tmp_so = tempfile.mkstemp(prefix=f"{name}-", suffix=".so.tmp", dir=cache)
        os.close(fd)
        c_file = Path(tmp_so).with_suffix(".c")
        try:
            c_file.write_text(source)
            proc = subprocess.run(
                [gcc, *_GCC_FLAGS, "-o", tmp_so, str(c_file)],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            if proc.returncode != 0:
                _note_once(name, f"gcc failed on {name}.c, skipping it:\n{proc.stderr.strip()}")
                return None
            os.replace(tmp_so, so)  # atomic: a concurrent run sees the old file or the new
        except (OSError, subprocess.SubprocessError) as e:
            _note_once(name, f"could not compile {name}.c ({e}); skipping it")
            return None
        finally:
            for leftover in (tmp_so, str(c_file)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(leftover)
    try:
        return ctypes.CDLL(str(so))
    except OSError as e:
        _note_once(name, f"could not load {so} ({e}); skipping the C contender")
        return None


def load_c(name: str) -> ctypes.CDLL | None:
    """Compile and load ``bench/c/<name>.c`` (see :func:`compile_c`)."""
    source = (C_DIR / f"{name}.c").read_text()
    return compile_c(name, source)


@contextlib.contextmanager
def temp_file(size: int = 4096) -> Iterator[str]:
    """An existing regular file of ``size`` bytes in a fresh temporary directory."""
    with tempfile.TemporaryDirectory(prefix="fdkit-bench-") as d:
        path = os.path.join(d, "data")
        with open(path, "wb") as f:
            f.write(b"\0" * size)
        yield path
