"""The Reactor's defaults are written once, in the core (``ReactorOptions::DEFAULT``), and
exported as ``_fdkit.REACTOR_DEFAULTS``: the native signature and the hand-written stub say the
same."""

from __future__ import annotations

import inspect

from fdkit._fdkit import REACTOR_DEFAULTS, Reactor
from helpers.stub import keyword_defaults, stub_function


def test_the_native_signature_says_the_defaults() -> None:
    params = inspect.signature(Reactor).parameters.values()
    assert {p.name: p.default for p in params} == REACTOR_DEFAULTS


def test_the_stub_says_the_defaults() -> None:
    assert keyword_defaults(stub_function("__new__", cls="Reactor")) == REACTOR_DEFAULTS
