"""Comparing the traces of a differential fuzzer's program on asyncio's loop (the oracle) and
on another: one assertion for the socket fuzzer (``aio_fuzz``) and the TLS one
(``aio_tls_fuzz``), each passing its own trace format."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Trace = Sequence[Any]


def _first_difference(oracle: Trace, got: Trace, unit: str) -> str:
    for a, b in zip(oracle, got, strict=False):
        if a != b:
            return f"step {a[0]!r}"
    return f"the end: {len(oracle)} {unit} against {len(got)}"


def assert_same_traces(
    oracle_name: str,
    oracle: Any,
    name: str,
    got: Any,
    *,
    format_trace: Callable[[Any], str],
    hung: Callable[[Any], str | None],
    unit: str,
) -> None:
    """``got`` (loop ``name``'s trace) equals ``oracle`` (loop ``oracle_name``'s), else the
    error says where they part, or that a loop hung (``hung``), with both traces
    (``format_trace``); a trace is a sequence of ``unit`` whose first item names the step."""
    both = f"--- {oracle_name}\n{format_trace(oracle)}\n--- {name}\n{format_trace(got)}"
    stuck = hung(oracle)
    if stuck is not None:  # the driver's own fault: asyncio's loop must never be stuck
        raise AssertionError(f"{oracle_name}: {stuck}\n{both}")
    if got == oracle:
        return
    stuck = hung(got)
    said = f"{name}: {stuck}; " if stuck is not None else ""
    part = _first_difference(oracle, got, unit)
    raise AssertionError(f"{said}the traces part at {part}\n{both}")
