"""Compares fdkit's runs with asyncio's and prints what differs.

A **difference** is a test that passed on asyncio's loop and did not pass on fdkit's (failed,
error, hung, crashed, skipped, or not run). Each one is run again, alone: twice more on
asyncio's loop (if it does not pass both times there, it is flaky on asyncio, not fdkit's
problem: listed apart, not counted) and once more on the fdkit engine (if it passes there, it
stays a difference, marked intermittent). Tests that fail on asyncio's loop too are never
differences.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from ._run import OUTCOMES, RunResult, TestResult

#: Counts printed per suite and loop (``not run`` only appears when a budget cut a run short).
COLUMNS = ("passed", "failed", "error", "skipped", "hung")
#: A deselection group with at most this many tests is listed test by test.
LIST_AT_MOST = 12


@dataclass(frozen=True)
class Difference:
    nodeid: str
    outcome: str  # on fdkit's loop
    detail: str
    rerun: str  # what the rerun on the same engine gave: "failed again: ...", "passed", ""

    @property
    def intermittent(self) -> bool:
        return self.rerun == "passed"


def candidates(base: RunResult, other: RunResult) -> list[str]:
    """Tests that passed on ``base`` (asyncio's loop) and not on ``other``, in ``other``'s order."""
    return [
        nodeid
        for nodeid, res in other.results.items()
        if res.outcome != "passed"
        and nodeid in base.results
        and base.results[nodeid].outcome == "passed"
    ] + [
        nodeid
        for nodeid, res in base.results.items()
        if res.outcome == "passed" and nodeid not in other.results
    ]


def flaky_on_base(nodeids: Iterable[str], base_reruns: list[RunResult]) -> dict[str, TestResult]:
    """Of ``nodeids``, those that did not pass in a rerun on asyncio's loop (with that result)."""
    flaky: dict[str, TestResult] = {}
    for nodeid in nodeids:
        for rerun in base_reruns:
            res = rerun.results.get(nodeid)
            if res is None or res.outcome != "passed":
                flaky[nodeid] = res or TestResult(nodeid, "not run", "missing from the rerun")
                break
    return flaky


def differences(
    base: RunResult,
    other: RunResult,
    flaky: dict[str, TestResult],
    rerun: RunResult | None,
) -> list[Difference]:
    out = []
    for nodeid in candidates(base, other):
        if nodeid in flaky:
            continue
        res = other.results.get(nodeid) or TestResult(nodeid, "not run", "missing from the run")
        again = "" if rerun is None else _rerun_word(rerun.results.get(nodeid))
        out.append(Difference(nodeid, res.outcome, res.detail, again))
    return out


def _rerun_word(res: TestResult | None) -> str:
    if res is None:
        return ""
    if res.outcome == "passed":
        return "passed"
    return f"{res.outcome} again" + (f": {res.detail}" if res.detail else "")


def _duration(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


def suite_doc(
    *,
    label: str,
    collected: int,
    deselected: dict[str, list[str]],
    collect_errors: list[tuple[str, str]],
    runs: dict[str, RunResult],
    baseline_from: str | None,
    unavailable: dict[str, str],
    diffs: dict[str, list[Difference]],
    flaky: dict[str, TestResult],
) -> dict[str, Any]:
    """One suite's part of the JSON document (the text report is printed from it)."""
    return {
        "sdist": label,
        "collected": collected,
        "deselected": deselected,
        "collect_errors": [{"nodeid": n, "detail": d} for n, d in collect_errors],
        "loops": {
            loop: {
                "counts": run.counts(),
                "seconds": round(run.seconds, 1),
                "restarts": run.restarts,
                "cut": run.cut,
                "fdkit_loops": run.fdkit_loops,
                "tests_on_fdkit_loop": sum(1 for r in run.results.values() if r.loops),
                **({"baseline_from": baseline_from} if loop == "asyncio" and baseline_from else {}),
                "hung": [
                    {"nodeid": r.nodeid, "detail": r.detail}
                    for r in run.results.values()
                    if r.outcome == "hung"
                ],
            }
            for loop, run in runs.items()
        },
        "unavailable": unavailable,
        "differences": {loop: [asdict(d) for d in ds] for loop, ds in diffs.items()},
        "flaky_on_asyncio": [
            {"nodeid": r.nodeid, "outcome": r.outcome, "detail": r.detail} for r in flaky.values()
        ],
    }


def format_report(doc: dict[str, Any]) -> str:
    lines: list[str] = []
    fd = doc["fdkit"]
    lines.append(
        f"fdkit from {fd['path']} at commit {fd['commit']} (extension built "
        f"{fd.get('built', '?')}), Python {fd['python']}; per-test timeout: {doc['timeouts']}"
    )
    lines.append("")
    head = f"{'suite':<8} {'loop':<9}" + "".join(f"{c:>8}" for c in COLUMNS) + f"{'time':>9}"
    lines.append(head)
    for name, s in doc["suites"].items():
        for loop, info in s["loops"].items():
            c = info["counts"]
            row = f"{name:<8} {loop:<9}" + "".join(f"{c[k]:>8}" for k in COLUMNS)
            row += f"{_duration(info['seconds']):>9}"
            notes = []
            if c.get("not run"):
                notes.append(f"{c['not run']} not run")
            if info["cut"]:
                notes.append("budget ran out")
            if info["restarts"]:
                notes.append(f"pytest restarted {info['restarts']}x")
            if loop != "asyncio":
                notes.append(f"{info['tests_on_fdkit_loop']} tests made an fdkit loop")
            if info.get("baseline_from"):
                notes.append(f"saved run of {info['baseline_from']}")
            lines.append(row + (f"   ({'; '.join(notes)})" if notes else ""))
        for loop, why in s["unavailable"].items():
            lines.append(f"{name:<8} {loop:<9}   not run: {why}")
    lines.append("")

    lines.append("Tests that pass on asyncio's loop and not on fdkit's:")
    for loop in doc["engines"]:
        per_suite = {n: s["differences"].get(loop) for n, s in doc["suites"].items()}
        ran = {n: d for n, d in per_suite.items() if d is not None}
        if not ran:
            continue
        total = sum(len(d) for d in ran.values())
        parts = ", ".join(f"{n} {len(d)}" for n, d in ran.items())
        lines.append(f"  {loop}: {total or 'none'}" + (f" ({parts})" if total else ""))
        for n, ds in ran.items():
            for d in ds:
                why = f"{d['outcome']}" + (f": {d['detail']}" if d["detail"] else "")
                mark = " [intermittent: passed when run again]" if d["rerun"] == "passed" else ""
                lines.append(f"    {n}: {d['nodeid']}{mark}")
                lines.append(f"        {why}")
    flaky = [(n, f) for n, s in doc["suites"].items() for f in s["flaky_on_asyncio"]]
    if flaky:
        lines.append("")
        lines.append("Flaky on asyncio's loop (did not pass when run again there; not counted):")
        for n, f in flaky:
            lines.append(f"    {n}: {f['nodeid']} ({f['outcome']} on rerun)")

    lines.append("")
    lines.append("Left out on every loop (deselected before the loop is chosen):")
    for n, s in doc["suites"].items():
        for reason, ids in s["deselected"].items():
            lines.append(f"  {n}: {len(ids)} tests: {reason}")
            if len(ids) <= LIST_AT_MOST:
                lines.extend(f"      {i}" for i in ids)
        for e in s["collect_errors"]:
            lines.append(f"  {n}: could not collect {e['nodeid']}: {e['detail']}")
    lines.append("")
    lines.append(doc["verdict"])
    return "\n".join(lines)


def verdict(doc: dict[str, Any]) -> tuple[str, bool]:
    """The closing line and whether the run is clean (no difference and no hang on fdkit)."""
    diffs = sum(len(d) for s in doc["suites"].values() for d in s["differences"].values())
    hung = sum(
        info["counts"]["hung"]
        for s in doc["suites"].values()
        for loop, info in s["loops"].items()
        if loop != "asyncio"
    )
    cut = [
        f"{n}/{loop}"
        for n, s in doc["suites"].items()
        for loop, info in s["loops"].items()
        if info["cut"]
    ]
    clean = diffs == 0 and hung == 0 and not cut
    text = f"peer-tests: {diffs} differences, {hung} hung on fdkit's loop"
    if cut:
        text += f", budget ran out in {', '.join(cut)}"
    return text + (" — clean" if clean else ""), clean


__all__ = [
    "OUTCOMES",
    "Difference",
    "candidates",
    "differences",
    "flaky_on_base",
    "format_report",
    "suite_doc",
    "verdict",
]
