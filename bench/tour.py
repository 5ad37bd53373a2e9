"""The tour ``make demo`` prints: one line per capability, its headline row in words.

Each :class:`Stop` names a capability, the row of the full table that is its headline figure
(against the best-known peer that runs on the machine), and the words that say what the
ratio means. The benches run in quick mode; the tour then prints a line per stop, each within
:data:`WIDTH` columns, marked ✓ (goal met), ✗ (goal missed, with the goal) or ○ (goal
retired, with why: ``_common.RETIRED_GOALS``), and a last line saying where the full table is.
A stop whose row could not run here says why in its line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bench._common import Result, Skipped, is_rate

WIDTH = 100
"""No line of the tour is wider than this."""

FULL_TABLE = "full table: make bench (BENCH=name for one, JSON=1 for JSON)"
"""The tour's last line."""

MARKS = {"met": "✓", "missed": "✗", "retired": "○", "none": " "}


@dataclass(frozen=True)
class Stop:
    """One line of the tour: ``label`` (the capability), the ``row`` of ``bench`` that is its
    headline, and the words around the ratio: "2.3x less ``noun`` than ``peer`` ``where``" for
    a cost (``better``/``worse`` replace "less ``noun``"/"more ``noun``" when given), "30x the
    ``noun`` of ``peer`` ``where``" for a rate."""

    label: str
    bench: str
    row: str
    noun: str
    peer: str
    where: str = ""
    better: str = ""
    worse: str = ""
    full_row: str = ""
    """The row a full-size run gives instead of ``row`` (a quick run's), where they differ."""
    full_where: str = ""


STOPS: tuple[Stop, ...] = (
    Stop("fd.accept_many", "accept", "accept_cpu", "CPU per accept",
         "selectors + socket.accept()"),
    Stop("int fds", "memory", "fd_memory", "memory per socket", "socket.socket objects"),
    Stop("transfer", "zerocopy", "transfer_tcp_tcp_1m", "CPU per GiB",
         "a recv_into/sendall loop", "(TCP to TCP)"),
    Stop("copy", "zerocopy", "copy_file_128m", "", "shutil.copyfile", "on a 128 MiB file",
         better="faster", worse="slower", full_row="copy_file_1g", full_where="on a 1 GiB file"),
    Stop("fdkit proxy", "proxy", "proxy_vs_asyncio", "CPU per GiB", "an asyncio proxy"),
    Stop("AtomicPipe", "atomic_pipe", "atomic_pipe_batch_100b", "messages per second",
         "multiprocessing.Queue", "(100 B each)"),
    Stop("io_uring Ring", "serve", "ring_hello_vs_asyncio", "CPU per request",
         "an asyncio Protocol server", "(hello)"),
    Stop("fdkit serve", "serve", "serve_vs_nginx_6b", "CPU per request", "nginx",
         "on a 6-byte file"),
    Stop("fdkit serve", "serve", "serve_vs_h2o_6b", "CPU per request", "h2o", "on a 6-byte file"),
    Stop("fdkit.aio", "aio", "aio_uvicorn_vs_uvloop", "CPU per request", "uvloop",
         "under uvicorn"),
    Stop("fdkit.aio", "aio", "aio_hello_vs_asyncio", "CPU per request", "asyncio", "(hello)"),
    Stop("fdkit.aio TLS", "aio_tls", "aio_tls_hello_vs_uvloop", "CPU per request", "uvloop",
         "(HTTPS hello)"),
)  # fmt: skip


def benches() -> list[str]:
    """The benches the tour runs, in the order of its stops."""
    return list(dict.fromkeys(s.bench for s in STOPS))


def times(ratio: float) -> str:
    """A ratio in as many digits as a quick run deserves: ``1.03x``, ``2.3x``, ``31x``."""
    if ratio >= 9.95:  # what rounds to 10 or more
        return f"{ratio:.0f}x"
    return f"{ratio:.1f}x" if ratio >= 1.995 else f"{ratio:.2f}x"


def _status(r: Result) -> str:
    if r.goal is None:
        return "none"
    if r.retired:
        return "retired"
    return "met" if r.met else "missed"


def _words(stop: Stop, r: Result) -> str:
    """What the row's ratio means, in words."""
    where = f" {stop.where}" if stop.where else ""
    if not math.isfinite(r.ratio) or r.ratio <= 0:
        return f"no figure against {stop.peer}{where} in this run"
    if is_rate(r.unit):
        return f"{times(r.ratio)} the {stop.noun} of {stop.peer}{where}"
    if r.ratio >= 1:
        return f"{times(r.ratio)} {stop.better or 'less ' + stop.noun} than {stop.peer}{where}"
    return f"{times(1 / r.ratio)} {stop.worse or 'more ' + stop.noun} than {stop.peer}{where}"


def _fit(line: str) -> str:
    return line if len(line) <= WIDTH else line[: WIDTH - 1].rstrip() + "…"


def tour_line(stop: Stop, row: Result | None, skipped: Sequence[Skipped] = ()) -> str:
    """The stop's line: mark, capability, the ratio in words, and the goal when it was
    missed or retired; without its row, why it did not run here."""
    head = f"{{mark}} {stop.label:<14} "
    if row is None:
        why = next((sk.reason for sk in skipped if stop.row in sk.ids), "")
        text = f"not measured here: {why}" if why else "not measured here (see `make bench`)"
        return _fit(head.format(mark=MARKS["none"]) + text)
    status = _status(row)
    tail = ""
    if status == "missed":
        tail = f" (goal {row.goal:g}x)"
    elif status == "retired":
        tail = f" (goal retired: {row.retired})"
    return _fit(head.format(mark=MARKS[status]) + _words(stop, row) + tail)


def format_tour(results: Sequence[Result], skipped: Sequence[Skipped] = ()) -> str:
    """A headline, one line per stop, and :data:`FULL_TABLE` last."""
    by_id = {r.id: r for r in results}
    rows = [by_id.get(s.row) for s in STOPS]
    count = {k: sum(1 for r in rows if r is not None and _status(r) == k) for k in MARKS}
    judged = count["met"] + count["missed"]
    head = (
        f"fdkit, one capability a line (quick runs: ratios move between runs): "
        f"{count['met']}/{judged} goals met"
        + (f", {count['retired']} retired" if count["retired"] else "")
    )
    lines = [_fit(head), *(tour_line(s, r, skipped) for s, r in zip(STOPS, rows, strict=True))]
    return "\n".join([*lines, FULL_TABLE])
