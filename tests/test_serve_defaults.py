"""serve's defaults are written once, in the native module (``_fdkit.SERVE_DEFAULTS``): the
native signature, the hand-written stub, ``fdkit.serve`` and ``fdkit serve`` all say the same."""

from __future__ import annotations

import argparse
import inspect
from typing import Any, get_type_hints

import fdkit
from fdkit import _fdkit
from fdkit._fdkit import SERVE_DEFAULTS
from fdkit.cli import serve as serve_cli
from fdkit.types import ServeDefaults
from helpers.stub import keyword_defaults as keyword_defaults_of
from helpers.stub import stub_function

#: Keywords with a default that is not a setting: the callback.
NOT_SETTINGS = {"on_listen"}


def keyword_defaults(sig: inspect.Signature) -> dict[str, Any]:
    return {
        name: p.default
        for name, p in sig.parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in NOT_SETTINGS
    }


def stub_keyword_defaults(name: str) -> dict[str, Any]:
    """The keyword-only defaults of function ``name`` in ``_fdkit.pyi``, read with ``ast``."""
    defaults = keyword_defaults_of(stub_function(name))
    return {k: v for k, v in defaults.items() if k not in NOT_SETTINGS}


def test_the_table_has_the_keys_its_type_says() -> None:
    assert set(SERVE_DEFAULTS) == set(get_type_hints(ServeDefaults))


def test_the_native_signature_says_the_table() -> None:
    assert keyword_defaults(inspect.signature(_fdkit.serve_static)) == SERVE_DEFAULTS


def test_the_stub_says_the_table() -> None:
    assert stub_keyword_defaults("serve_static") == SERVE_DEFAULTS


def test_fdkit_serve_takes_the_table() -> None:
    own = keyword_defaults(inspect.signature(fdkit.serve))
    shared = {k: v for k, v in own.items() if k in SERVE_DEFAULTS}
    assert shared == {k: v for k, v in SERVE_DEFAULTS.items() if k in own}
    assert set(own) - set(SERVE_DEFAULTS) == {"workers"}


def test_the_command_line_takes_the_table() -> None:
    parser = argparse.ArgumentParser()
    serve_cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["serve"])
    port, _ = serve_cli._port_and_dir(args)
    assert args.host == SERVE_DEFAULTS["host"]
    assert port == SERVE_DEFAULTS["port"]
    assert args.engine == SERVE_DEFAULTS["engine"]
    assert float(args.idle_timeout) == SERVE_DEFAULTS["idle_timeout"]
    assert int(args.max_connections) == SERVE_DEFAULTS["max_connections"]
    assert args.list == SERVE_DEFAULTS["listing"]
    assert args.access_log == SERVE_DEFAULTS["access_log"]
