"""The tour of ``make demo`` (``python -m bench --tour``): one line per capability, each a
headline row of its bench, within 100 columns whatever the figures; and ``make demo`` runs it.
How the tour shows each bench's real rows is checked on that bench's run
(:class:`helpers.bench.RowContract`)."""

from __future__ import annotations

import math
import os
import subprocess

import pytest

from helpers.bench import HEADLINES, MAKE, REPO, check_tour, python_m_bench, tiny_env

# isort: split
# (bench/ is importable once helpers.bench has put the source tree on sys.path)
import bench as benchmarks
from bench import _common, tour
from bench._common import is_rate

pytestmark = pytest.mark.source_tree


def test_tour_stops_are_headline_rows_of_their_benches() -> None:
    """Each line of the tour is a headline row (a row with a goal) of a registered bench,
    each row once, and the tour runs only the benches its lines need."""
    rows = [s.row for s in tour.STOPS]
    assert len(rows) == len(set(rows))
    for stop in tour.STOPS:
        assert stop.bench in benchmarks.BENCHES, stop
        assert stop.row in HEADLINES[stop.bench], stop
    assert tour.benches() == list(dict.fromkeys(s.bench for s in tour.STOPS))
    assert set(tour.benches()) < set(benchmarks.BENCHES)


@pytest.mark.parametrize("ratio", [0.0123, 0.5, 0.999, 1.0, 1.234, 9.99, 123.4, math.nan])
def test_tour_lines_fit_whatever_the_figures(ratio: float) -> None:
    """Every stop's line fits in 100 columns without being cut, for a row far behind, just
    under or over its goal, far ahead, or without a figure; a cost behind its peer reads
    "more", ahead "less" (or the stop's own words)."""
    rows = []
    for stop in tour.STOPS:
        unit = "msg/s" if stop.bench == "atomic_pipe" else "us/req"
        fdkit = 100.0 * ratio if is_rate(unit) else 100.0 / ratio
        rows.append(_common.compare(stop.row, stop.bench, "c", "m", unit, fdkit, 100.0, "b",
                                    goal=1.25))  # fmt: skip
    lines = check_tour(tour.format_tour(rows))
    for stop, line in zip(tour.STOPS, lines, strict=True):
        assert "…" not in line, line
        if stop.bench != "atomic_pipe" and math.isfinite(ratio):
            word = (stop.better or "less") if ratio >= 1 else (stop.worse or "more")
            assert f"x {word} " in line, line


def test_tour_line_of_a_skipped_row_says_why() -> None:
    stop = tour.STOPS[0]
    reason = "wrk is not installed; `apt-get install wrk` adds these rows " + "x" * 200
    line = tour.tour_line(stop, None, [_common.Skipped(stop.bench, (stop.row,), reason)])
    assert len(line) == tour.WIDTH
    assert line.endswith("…")
    assert "not measured here: wrk is not installed" in line
    assert "see `make bench`" in tour.tour_line(stop, None)


def test_tour_takes_no_names() -> None:
    bad = python_m_bench("--tour", "accept")
    assert bad.returncode == 2
    assert "--tour takes no NAME" in bad.stderr


@pytest.mark.skipif(MAKE is None, reason="no make")
def test_make_demo_runs_the_tour() -> None:
    assert MAKE is not None
    stamps = ["-o", ".venv/.fdkit-built", "-o", ".venv/.deps-installed"]
    stamps += ["-o", ".venv/.bench-deps-installed", "-o", "bench-tools"]
    # As a user types it: not as a sub-make of `make test` (whose MAKEFLAGS and MAKELEVEL
    # would make this one print the directories it enters).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    plan = subprocess.run(
        [MAKE, "-n", *stamps, "demo"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.strip().endswith("-m bench --tour"), plan.stdout


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_tour_runs_end_to_end() -> None:
    """`python -m bench --tour` (what `make demo` runs) at smoke-test size: the tour alone on
    stdout, in shape; on stderr only its short progress lines."""
    proc = python_m_bench("--tour", timeout=580, env=tiny_env())
    assert proc.returncode == 0, proc.stderr
    check_tour(proc.stdout)
    for line in proc.stderr.splitlines():
        assert len(line) <= tour.WIDTH, line


def test_tour_ratios_keep_as_many_digits_as_a_quick_run_deserves() -> None:
    got = [tour.times(r) for r in (0.5, 1.234, 1.996, 2.04, 9.96, 31.4)]
    assert got == ["0.50x", "1.23x", "2.0x", "2.0x", "10x", "31x"]
