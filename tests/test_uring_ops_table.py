"""Ring's io_uring ops are written once, in the core's op table (``fdkit::ring_ops!``), which
the native module exports as ``_fdkit.RING_OPS``: the core's op methods and Ring's are made
from it, and the hand-written stub must offer the same ops with the same parameters."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from fdkit._fdkit import RING_OPS, Ring
from helpers.stub import keyword_defaults, positional, stub_methods

OPS = {name: (list(args), keywords, fixed) for name, args, keywords, fixed in RING_OPS}


def table_signature(name: str) -> tuple[list[str], dict[str, Any]]:
    """What the table says op ``name`` takes: its positional parameters, and its keyword
    parameters with their defaults (``fixed=False`` for those that offer it)."""
    args, keywords, fixed = OPS[name]
    return args, {**keywords, **({"fixed": False} if fixed else {})}


def native_signature(name: str) -> tuple[list[str], dict[str, Any], list[str]]:
    params = [p for p in inspect.signature(getattr(Ring, name)).parameters.values()]
    kind = inspect.Parameter
    return (
        [p.name for p in params if p.kind is kind.POSITIONAL_OR_KEYWORD and p.name != "self"],
        {p.name: p.default for p in params if p.kind is kind.KEYWORD_ONLY},
        [p.name for p in params if p.kind is kind.VAR_KEYWORD],
    )


def is_op(method: Any) -> bool:
    """An op is a method that takes the SQE flags (``**sqe``)."""
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind is inspect.Parameter.VAR_KEYWORD and p.name == "sqe" for p in params)


def test_the_table_names_each_op_once() -> None:
    assert RING_OPS
    assert len(OPS) == len(RING_OPS)
    assert all(args[-1] == "user_data" for args, _, _ in OPS.values())


def test_ring_has_a_method_for_each_op_and_no_other_op() -> None:
    assert {name for name, m in vars(Ring).items() if is_op(m)} == set(OPS)


@pytest.mark.parametrize("name", sorted(OPS))
def test_the_native_method_takes_the_table_parameters(name: str) -> None:
    assert native_signature(name) == (*table_signature(name), ["sqe"])


def test_the_stub_declares_the_table_ops_in_order() -> None:
    stub_ops = [f.name for f in stub_methods("Ring") if f.args.kwarg and f.args.kwarg.arg == "sqe"]
    assert stub_ops == [name for name, *_ in RING_OPS]


@pytest.mark.parametrize("name", sorted(OPS))
def test_the_stub_method_takes_the_table_parameters(name: str) -> None:
    (func,) = [f for f in stub_methods("Ring") if f.name == name]
    args, keywords = table_signature(name)
    assert positional(func) == args
    assert [a.arg for a in func.args.kwonlyargs] == list(keywords)
    assert keyword_defaults(func) == keywords
