"""The benchmark harness's contract, across benches: the registry, row ids unique over every
bench, how a ratio and a goal are read and shown (table, JSON), the round-robin of contenders,
the C contenders' compile cache, and ``python -m bench``'s output.

Each bench's own rows are checked in the file that runs it (``helpers.bench.RUN_BY``): the
contract every row keeps there is :class:`helpers.bench.RowContract`.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from helpers.bench import (
    CONTENDED_RUN_BY,
    HAVE_GCC,
    HEADLINES,
    RESULTS_TIMEOUT,
    RUN_ALONE,
    RUN_BY,
    TESTS,
    bench_rows,
    planned_ids,
    python_m_bench,
    tiny_env,
)

# isort: split
# (bench/ is importable once helpers.bench has put the source tree on sys.path)
import bench as benchmarks
from bench import _common, report

# The harness is a tool of the source tree, not of the package: `make test` checks its contract
# once; the runs against each installed wheel leave it out (the fdkit code it drives has tests
# of its own there).
pytestmark = pytest.mark.source_tree


def test_registry_lists_every_bench() -> None:
    """Every bench is registered under its name with a description, and one test file runs it
    and checks its rows (one more its --contended variant, where it has one)."""
    assert set(HEADLINES) <= set(benchmarks.BENCHES)
    for name, b in benchmarks.BENCHES.items():
        assert b.name == name
        assert b.description
    assert set(RUN_BY) == set(benchmarks.BENCHES)
    assert set(CONTENDED_RUN_BY) == set(benchmarks.contended_names())
    for name, file in [*RUN_BY.items(), *CONTENDED_RUN_BY.items()]:
        assert (TESTS / f"{file}.py").is_file(), name


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_ids_unique_across_benches() -> None:
    """No two benches make the same row id. The costly benches are run by their own files only
    (RUN_ALONE): here every id they can make stands for their rows (their files check that
    their rows keep to those)."""
    ids = [i for name in RUN_BY if name not in RUN_ALONE for i in {r.id for r in bench_rows(name)}]
    ids += [i for name in RUN_ALONE for i in planned_ids(name)]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


def test_a_retired_goal_is_shown_and_not_counted() -> None:
    """A goal in RETIRED_GOALS keeps its row and its goal (the JSON keeps one shape) but is
    shown as retired, with why, and left out of the count of goals met."""
    assert _common.RETIRED_GOALS, "nothing retired: this test has nothing to check"
    row_id, why = next(iter(_common.RETIRED_GOALS.items()))
    assert row_id in {i for v in HEADLINES.values() for i in v}  # a goal that exists
    retired = _common.compare(row_id, "b", "c", "m", "us/op", 2.0, 1.0, "base", goal=1.6)
    missed = _common.compare("x", "b", "c", "m", "us/op", 2.0, 1.0, "base", goal=1.6)
    assert retired.retired == why
    assert missed.retired is None
    assert _common.compare(row_id, "b", "c", "m", "us/op", 2.0, 1.0, "base").retired is None
    lines = report.format_table([retired, missed]).splitlines()
    assert lines[2].endswith(f"retired ({why})"), lines[2]
    assert lines[3].endswith("✗"), lines[3]
    assert lines[-1].endswith("goals met: 0/1 (1 retired)"), lines[-1]
    assert json.loads(report.to_json([retired], {}))["results"][0]["goal"] == 1.6


def test_json_has_no_nan() -> None:
    bad = _common.compare("x", "b", "c", "m", "us/op", math.nan, 1.0, "base")
    doc = json.loads(report.to_json([bad], {}))
    assert doc["results"][0]["fdkit"] is None
    assert doc["results"][0]["ratio"] is None


def test_ratio_direction() -> None:
    rate = _common.compare("r", "b", "c", "m", "ops/s", 300.0, 100.0, "base")
    cost = _common.compare("c", "b", "c", "m", "us/op", 1.0, 4.0, "base", goal=3.0)
    assert rate.ratio == 3.0
    assert cost.ratio == 4.0
    assert cost.met


def test_alternate_is_round_robin() -> None:
    calls: list[str] = []
    contenders: dict[str, Callable[[], None]] = {k: partial(calls.append, k) for k in "abc"}
    out = _common.alternate(contenders, rounds=3, warmup=1)
    assert calls == list("abc" + "bca" + "cab" + "abc")
    assert {k: len(v) for k, v in out.items()} == {"a": 3, "b": 3, "c": 3}


def test_unknown_bench_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown benchmark"):
        benchmarks.run_benches(["no-such-bench"], quick=True)


# ------------------------------------------------------------------- the C contenders


def test_missing_gcc_skips_the_c_contender(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert _common.compile_c("never_built", "int f(void) { return 1; }") is None
    assert "gcc not found" in capsys.readouterr().err


def test_bad_c_source_is_skipped_not_fatal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if not HAVE_GCC:
        pytest.skip("gcc not installed")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _common.compile_c("broken", "this is not C") is None
    assert "gcc failed" in capsys.readouterr().err
    assert list((tmp_path / "fdkit-bench").iterdir()) == []


def test_compile_c_caches(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if not HAVE_GCC:
        pytest.skip("gcc not installed")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    lib = _common.compile_c("answer", "int answer(void) { return 42; }")
    assert lib is not None
    assert lib.answer() == 42
    (so,) = (tmp_path / "fdkit-bench").iterdir()
    monkeypatch.setattr(shutil, "which", lambda name: None)  # a cache hit needs no gcc
    again = _common.compile_c("answer", "int answer(void) { return 42; }")
    assert again is not None
    assert again.answer() == 42
    assert list((tmp_path / "fdkit-bench").iterdir()) == [so]


# ------------------------------------------------------------------ python -m bench's output


def test_bench_script_prints_json() -> None:
    proc = python_m_bench("memory", "--json", env=tiny_env())
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [r["id"] for r in doc["results"]] == ["fd_memory"]


def test_quiet_drops_the_remarks_not_the_output() -> None:
    """`python -m bench -q` (what `fdkit bench -q` did): nothing on stderr while running, the
    output all there; an error still says so."""
    loud = python_m_bench("memory", "--json", env=tiny_env())
    assert "smoke-test sizes" in loud.stderr  # a remark, which -q drops
    quiet = python_m_bench("-q", "memory", "--json", env=tiny_env())
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""
    assert [r["id"] for r in json.loads(quiet.stdout)["results"]] == ["fd_memory"]
    bad = python_m_bench("-q", "no-such-bench")
    assert bad.returncode == 2
    assert "unknown benchmark no-such-bench" in bad.stderr
