"""Presenting results: one aligned table for people, one JSON object for machines."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence

from bench._common import Result, Skipped, headline_ids

COLUMNS = ("id", "case", "fdkit", "baseline", "baseline is", "ratio", "goal", "")


def format_figure(value: float) -> str:
    """A figure with as many digits as a noisy machine deserves: 3-4 significant."""
    if not math.isfinite(value):
        return str(value)
    a = abs(value)
    if a >= 1000:
        return f"{value:,.0f}"
    if a >= 100:
        return f"{value:.0f}"
    if a >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _verdict(r: Result) -> str:
    if r.goal is None:
        return ""
    if r.retired:
        return f"retired ({r.retired})"
    return "✓" if r.met else "✗"


def goal_counts(results: Sequence[Result]) -> tuple[int, int, int]:
    """(met, judged, retired): the goals reached, the goals judged, the goals retired."""
    goals = [r for r in results if r.goal is not None]
    judged = [r for r in goals if not r.retired]
    return sum(1 for r in judged if r.met), len(judged), len(goals) - len(judged)


def _row(r: Result) -> tuple[str, ...]:
    return (
        r.id,
        r.case,
        f"{format_figure(r.fdkit)} {r.unit}",
        f"{format_figure(r.baseline)} {r.unit}",
        r.baseline_name,
        f"{r.ratio:.2f}x" if math.isfinite(r.ratio) else str(r.ratio),
        "" if r.goal is None else f"≥{r.goal:g}x",
        _verdict(r),
    )


def format_table(results: Sequence[Result], skipped: Sequence[Skipped] = ()) -> str:
    """One aligned table: id, case, fdkit figure, baseline figure and name, ratio, goal, and
    ✓/✗ (or ``retired (why)`` for a goal no longer judged: see ``_common.RETIRED_GOALS``).

    ``case`` names the fdkit contender (and the conditions in brackets), ``baseline is`` the
    contender it is measured against; both figures are in the same unit. Rows that could not
    run here (``skipped``) follow, one line per cause, after ``skipped:``.

    Ratios are "times better than the baseline" (above 1: fdkit wins). A closing line counts
    the goals met among those judged, and the retired ones.
    """
    rows = [COLUMNS, *(_row(r) for r in results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    right = {2, 3, 5}  # numbers line up on the right
    lines = []
    for k, row in enumerate(rows):
        cells = [
            cell.rjust(w) if i in right and k > 0 else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    met, judged, retired = goal_counts(results)
    for sk in skipped:
        lines.append(
            f"skipped: {', '.join(headline_ids(sk.ids))} ({len(sk.ids)} rows of {sk.bench}): "
            f"{sk.reason}"
        )
    lines.append("")
    lines.append(
        f"ratio = times better than the baseline (above 1: fdkit wins); "
        f"goals met: {met}/{judged}"
        + (f" ({retired} retired)" if retired else "")
        + (f"; {sum(len(sk.ids) for sk in skipped)} rows skipped (see above)" if skipped else "")
    )
    return "\n".join(lines)


def _finite(value: object) -> object:
    """JSON has no NaN or infinity: a figure that could not be measured becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def to_json(results: Sequence[Result], machine: Mapping[str, object]) -> str:
    """``{"machine": {...}, "results": [{"id", "bench", "case", "metric", "unit", "fdkit",
    "baseline", "baseline_name", "ratio", "goal"}, ...]}`` as one JSON document."""
    rows = [{k: _finite(v) for k, v in dataclasses.asdict(r).items()} for r in results]
    return json.dumps({"machine": dict(machine), "results": rows}, indent=2, allow_nan=False)
