"""The hand-written stub ``fdkit/_fdkit.pyi`` read with ``ast``, for the tests that hold it to
what the native module says of itself (``SERVE_DEFAULTS``, ``RING_OPS``, a signature)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Any

import fdkit


@functools.cache
def stub_tree() -> ast.Module:
    return ast.parse(Path(fdkit.__file__).with_name("_fdkit.pyi").read_text())


def stub_function(name: str, cls: str | None = None) -> ast.FunctionDef:
    """The stub's function ``name`` (a method of class ``cls`` when given)."""
    body = stub_tree().body
    if cls is not None:
        (klass,) = [n for n in body if isinstance(n, ast.ClassDef) and n.name == cls]
        body = klass.body
    (func,) = [n for n in body if isinstance(n, ast.FunctionDef) and n.name == name]
    return func


def stub_methods(cls: str) -> list[ast.FunctionDef]:
    """Every method the stub declares in class ``cls``, in order."""
    (klass,) = [n for n in stub_tree().body if isinstance(n, ast.ClassDef) and n.name == cls]
    return [n for n in klass.body if isinstance(n, ast.FunctionDef)]


def positional(func: ast.FunctionDef) -> list[str]:
    """The names of ``func``'s positional parameters, ``self`` and ``cls`` left out."""
    return [a.arg for a in func.args.args if a.arg not in ("self", "cls")]


def keyword_defaults(func: ast.FunctionDef) -> dict[str, Any]:
    """``func``'s keyword-only parameters that have a default, and the default's value."""
    args = func.args
    return {
        a.arg: ast.literal_eval(d)
        for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
        if d is not None
    }
