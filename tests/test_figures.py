"""The published figures are read from the saved runs of ``make bench`` (``docs/figures/``),
never typed: the README's table of headline rows is what ``bench.figures`` makes of them, the
site's ``{{ figure(...) }}`` and ``{{ figures(...) }}`` are expanded from them, and an id no
saved run has is an error."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if not (ROOT / "bench" / "figures.py").is_file():  # a wheel's suite runs outside the repository
    pytest.skip(f"no bench/ harness beside {ROOT / 'tests'}", allow_module_level=True)

from bench import figures  # noqa: E402

pytestmark = pytest.mark.source_tree


def _doc(ratios: dict[str, float], goal: float | None = 1.0) -> str:
    rows = [
        {"id": i, "bench": i.split("_")[0], "case": "c", "metric": "m", "unit": "us/req",
         "fdkit": 2.0, "baseline": 2.0 * r, "baseline_name": "peer 1.0", "ratio": r,
         "goal": goal}
        for i, r in ratios.items()
    ]  # fmt: skip
    machine = {"cpu_count": 2, "kernel": "6.1", "python": "3.11.7", "fdkit": "0.2.0",
               "cpu_model": "cpu"}  # fmt: skip
    return json.dumps({"machine": machine, "results": rows})


def test_runs_are_saved_one_file_per_bench_and_read_back(tmp_path: Path) -> None:
    paths = figures.save(_doc({"aio_x": 1.2, "serve_y": 0.9}), "make bench JSON=1", tmp_path)
    assert sorted(p.name.rsplit("-", 4)[0] for p in paths) == ["aio", "serve"]
    figures.save(_doc({"aio_x": 0.8}), "make bench BENCH=aio JSON=1", tmp_path)
    runs = figures.latest(figures.load(tmp_path))
    assert [r.number for r in runs["aio"]] == [1, 2]
    assert runs["aio"][1].command == "make bench BENCH=aio JSON=1"
    table = figures.bench_table(runs["aio"])
    assert "| `aio_x` | 2.00 us/req | peer 1.0 2.40 us/req | 1.20 / 0.80 | ≥1 ✗ |" in table
    assert "2 runs of `make bench JSON=1`" in table
    assert figures.figure(runs, "serve_y").startswith("2.00 us/req against peer 1.0's 1.80")


def test_only_the_latest_dates_runs_are_shown(tmp_path: Path) -> None:
    old = json.loads(_doc({"aio_x": 9.0}))
    (tmp_path / "aio-2020-01-01-1.json").write_text(json.dumps({**old, "date": "2020-01-01"}))
    figures.save(_doc({"aio_x": 1.5}), "make bench JSON=1", tmp_path)
    (only,) = figures.latest(figures.load(tmp_path))["aio"]
    assert only.rows["aio_x"]["ratio"] == 1.5


def test_an_unknown_row_is_an_error(tmp_path: Path) -> None:
    figures.save(_doc({"aio_x": 1.5}), "make bench JSON=1", tmp_path)
    with pytest.raises(KeyError, match="no saved run has the row 'aio_nope'"):
        figures.figure(figures.latest(figures.load(tmp_path)), "aio_nope")


def test_a_misnamed_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "aio.json").write_text(_doc({"aio_x": 1.0}))
    with pytest.raises(ValueError, match=r"not BENCH-YYYY-MM-DD-N\.json"):
        figures.load(tmp_path)


def test_the_readme_table_is_the_saved_runs() -> None:
    """``make test``'s check: the README's figures block is what the saved runs give."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.figures", "readme", "--check"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = (ROOT / "README.md").read_text()
    block = text[text.index(figures.BEGIN) : text.index(figures.END)]
    assert "| `aio_hello_vs_uvloop` |" in block


def test_the_pages_quote_only_saved_rows() -> None:
    """Every ``{{ figure("ID") }}`` and ``{{ figures("BENCH") }}`` of the docs names a saved
    row or bench (the build would fail on it too)."""
    runs = figures.latest(figures.load())
    found = 0
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for kind, name in figures_calls(page.read_text()):
            found += 1
            if kind == "figure":
                figures.figure(runs, name)
            else:
                assert name in runs, f"{page}: no saved run of {name!r}"
    assert found, "no page quotes a figure"


def figures_calls(text: str) -> list[tuple[str, str]]:
    return re.findall(r"\{\{\s*(figures|figure)\(\s*\"([a-z0-9_]+)\"\s*\)\s*\}\}", text)
