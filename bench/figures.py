"""The published figures: each measured once, by ``make bench`` (``--json``), and read from there
by every page that quotes one.

A run's JSON document, as ``python -m bench NAME --json`` prints it, is saved under
``docs/figures/`` with the date and the command that made it (``make figures BENCH=NAME
RUNS=N``, which runs the benches N times, or ``python -m bench.figures save FILE`` for a
document already made; one file per bench). What the pages show is generated from those files only:

- the README's table of headline rows (the rows with a goal), between the markers
  ``<!-- figures:begin -->`` and ``<!-- figures:end -->``: ``python -m bench.figures readme``
  writes it, ``--check`` fails when the README's copy differs (``make test`` checks it);
- the documentation site's figures: ``{{ figures("aio") }}`` (a bench's table, every run's
  ratio) and ``{{ figure("aio_hello_vs_uvloop") }}`` (one row's figures and ratio), which the
  site's build replaces (``docs/_ext/figures_hook.py``); an id no saved run has fails the
  build.

A row measured by several runs shows each run's ratio and the figures of the first run; the
latest date's runs of a bench are the ones shown (older files stay as history).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "docs" / "figures"
README = ROOT / "README.md"
BEGIN = "<!-- figures:begin -->"
END = "<!-- figures:end -->"
_NAME = re.compile(r"^(?P<bench>[a-z_]+)-(?P<date>\d{4}-\d\d-\d\d)-(?P<n>\d+)\.json$")


@dataclass(frozen=True)
class Run:
    """One saved run of one bench."""

    bench: str
    date: str
    number: int
    command: str
    machine: dict[str, object]
    rows: dict[str, dict[str, object]]  # id -> the row as the JSON document has it


def load(directory: Path = FIGURES) -> list[Run]:
    """Every saved run, by bench, date and number."""
    runs = []
    for path in sorted(directory.glob("*.json")):
        m = _NAME.match(path.name)
        if m is None:
            raise ValueError(f"{path}: not BENCH-YYYY-MM-DD-N.json")
        doc = json.loads(path.read_text())
        rows = {r["id"]: r for r in doc["results"]}
        runs.append(Run(m["bench"], m["date"], int(m["n"]), doc.get("command", ""),
                        doc["machine"], rows))  # fmt: skip
    return sorted(runs, key=lambda r: (r.bench, r.date, r.number))


def latest(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """Per bench, the runs of its latest date."""
    out: dict[str, list[Run]] = {}
    for run in runs:
        same = out.setdefault(run.bench, [])
        if same and same[0].date < run.date:
            same.clear()
        if not same or same[0].date == run.date:
            same.append(run)
    return out


def _fig(value: object) -> str:
    """A figure as the bench's own table prints it (``bench.report.format_figure``)."""
    from bench.report import format_figure

    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    return format_figure(float(value))


def _ratios(runs: Sequence[Run], row_id: str) -> str:
    got = [r.rows[row_id].get("ratio") for r in runs if row_id in r.rows]
    return " / ".join(f"{v:.2f}" if isinstance(v, (int, float)) else "-" for v in got)


def _goal(row: dict[str, object], runs: Sequence[Run]) -> str:
    from bench._common import RETIRED_GOALS

    goal = row.get("goal")
    if not isinstance(goal, (int, float)):
        return ""
    if row["id"] in RETIRED_GOALS:
        return f"≥{goal:g} retired ({RETIRED_GOALS[str(row['id'])]})"
    met = [
        isinstance(r.rows[str(row["id"])].get("ratio"), (int, float))
        and float(r.rows[str(row["id"])]["ratio"]) >= goal  # type: ignore[arg-type]
        for r in runs
        if row["id"] in r.rows
    ]
    return f"≥{goal:g} " + ("✓" if met and all(met) else "✗")


def _where(runs: Sequence[Run]) -> str:
    m = runs[0].machine
    return (f"{len(runs)} run{'s' if len(runs) > 1 else ''} of `{runs[0].command}` on "
            f"{runs[0].date}: {m.get('cpu_count')} CPUs ({m.get('cpu_model')}), Linux "
            f"{m.get('kernel')}, CPython {m.get('python')}, fdkit {m.get('fdkit')}")  # fmt: skip


def bench_table(runs: Sequence[Run], only_goals: bool = False) -> str:
    """A bench's rows as a Markdown table: the first run's figures, every run's ratio."""
    first = runs[0]
    lines = [
        f"*{_where(runs)}.*",
        "",
        "| id | fdkit | baseline | ratio per run | goal |",
        "|---|---|---|---|---|",
    ]
    for row_id, row in first.rows.items():
        if only_goals and row.get("goal") is None:
            continue
        unit = row["unit"]
        lines.append(
            f"| `{row_id}` | {_fig(row['fdkit'])} {unit} | {row['baseline_name']} "
            f"{_fig(row['baseline'])} {unit} | {_ratios(runs, row_id)} | {_goal(row, runs)} |"
        )
    return "\n".join(lines)


def figure(runs_by_bench: dict[str, list[Run]], row_id: str) -> str:
    """One row in words: ``6.93 µs against uvloop 0.23.0's 7.19 µs (1.04 / 1.17 / 0.96x)``."""
    for runs in runs_by_bench.values():
        row = runs[0].rows.get(row_id)
        if row is not None:
            unit = row["unit"]
            return (f"{_fig(row['fdkit'])} {unit} against {row['baseline_name']}'s "
                    f"{_fig(row['baseline'])} {unit} ({_ratios(runs, row_id)}x; "
                    f"{runs[0].date})")  # fmt: skip
    raise KeyError(f"no saved run has the row {row_id!r} (docs/figures/)")


def readme_block(runs_by_bench: dict[str, list[Run]]) -> str:
    """The README's headline table, every bench's rows with a goal."""
    parts = [BEGIN, ""]
    for bench in sorted(runs_by_bench):
        parts += [f"**{bench}** — " + bench_table(runs_by_bench[bench], only_goals=True), ""]
    parts.append(END)
    return "\n".join(parts)


def replace_block(text: str, block: str) -> str:
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the README has no {BEGIN} ... {END} block")
    return text[:start] + block + text[end + len(END) :]


def save(doc_text: str, command: str, directory: Path = FIGURES) -> list[Path]:
    """Saves one run's JSON document, one file per bench it holds: ``BENCH-DATE-N.json``, N
    the next for that bench and date, with the date and the command added."""
    doc = json.loads(doc_text)
    date = datetime.datetime.now(datetime.UTC).date().isoformat()
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for bench in sorted({r["bench"] for r in doc["results"]}):
        n = 1 + sum(1 for p in directory.glob(f"{bench}-{date}-*.json"))
        path = directory / f"{bench}-{date}-{n}.json"
        rows = [r for r in doc["results"] if r["bench"] == bench]
        part = {"date": date, "command": command, "machine": doc["machine"], "results": rows}
        path.write_text(json.dumps(part, indent=2, allow_nan=False) + "\n")
        paths.append(path)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.figures", description=__doc__)
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("save", help="save a run's JSON document (FILE, - for stdin)")
    s.add_argument("file")
    s.add_argument("--command", default="make bench JSON=1")
    r = sub.add_parser("readme", help="write the README's figures block from docs/figures/")
    r.add_argument("--check", action="store_true", help="fail when the README's block differs")
    args = parser.parse_args(argv)
    if args.what == "save":
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
        for path in save(text, args.command):
            print(path.relative_to(ROOT))
        return 0
    text = README.read_text()
    new = replace_block(text, readme_block(latest(load())))
    if args.check:
        if new != text:
            print("README.md's figures differ from docs/figures/: run "
                  "`python -m bench.figures readme`", file=sys.stderr)  # fmt: skip
            return 1
        return 0
    README.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
