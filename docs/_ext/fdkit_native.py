"""A griffe extension for fdkit's API reference: the native module's docstrings and overloads.

griffe reads ``fdkit._fdkit`` from its stub, ``_fdkit.pyi``, which carries the types and no
docstrings: the docstrings are the Rust doc comments, at run time only. This extension gives
each stub object without a docstring the one its runtime object has, and turns a stub function
that is only ``@overload``s (griffe keeps those aside, so ``transfer`` would vanish) into a
function whose overloads the reference shows. Sphinx roles in the package's docstrings
(``:class:`Ring```) become code spans, since Markdown has no such roles.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|exc|obj):`~?([^`]+)`")
_NATIVE = "fdkit._fdkit"


def _runtime_doc(obj: object) -> str | None:
    doc = getattr(obj, "__doc__", None)
    if not isinstance(doc, str) or not doc.strip():
        return None
    if type(doc) is not str:
        return None
    return inspect.cleandoc(doc)


class FdkitNative(griffe.Extension):
    """Fill ``fdkit._fdkit``'s stub with the runtime docstrings; rewrite Sphinx roles."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.path != "fdkit":
            return
        native = pkg.get_member("_fdkit")
        runtime = importlib.import_module(_NATIVE)
        assert isinstance(native, griffe.Module)
        self._promote_overloads(native)
        self._fill(native, runtime)
        self._comments(pkg)
        self._roles(pkg)

    def _promote_overloads(self, obj: griffe.Module | griffe.Class) -> None:
        for name, overloads in list(obj.overloads.items()):
            if name in obj.members or not overloads:
                continue
            last = overloads[-1]
            func = griffe.Function(
                name,
                lineno=last.lineno,
                endlineno=last.endlineno,
                parameters=last.parameters,
                returns=last.returns,
                parent=obj,
            )
            func.overloads = list(overloads)
            obj.set_member(name, func)
        for member in obj.members.values():
            if isinstance(member, griffe.Class):
                self._promote_overloads(member)

    def _fill(self, obj: griffe.Object, runtime: object) -> None:
        for name, member in obj.members.items():
            if member.is_alias or name.startswith("_") and name != "__init__":
                continue
            target = getattr(runtime, name, None)
            if target is None:
                continue
            if member.docstring is None:
                doc = _runtime_doc(target)
                if doc is not None and not (isinstance(member, griffe.Attribute) and doc == _runtime_doc(type(target))):
                    member.docstring = griffe.Docstring(doc, parent=member)
            if isinstance(member, griffe.Class):
                self._fill(member, target)

    def _comments(self, obj: griffe.Object) -> None:
        # `#: text` lines just above an attribute are its docstring, as Sphinx reads them.
        for member in obj.members.values():
            if member.is_alias:
                continue
            if isinstance(member, griffe.Attribute) and member.docstring is None and member.lineno:
                try:
                    lines = member.lines_collection[member.filepath]
                except KeyError:  # the native module, inspected: no source lines
                    continue
                found: list[str] = []
                i = min(member.lineno, len(lines)) - 2
                while i >= 0 and lines[i].lstrip().startswith("#:"):
                    found.insert(0, lines[i].lstrip()[2:].strip())
                    i -= 1
                if found:
                    member.docstring = griffe.Docstring("\n".join(found), parent=member)
            elif isinstance(member, (griffe.Module, griffe.Class)):
                self._comments(member)

    def _roles(self, obj: griffe.Object) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(r"`\1`", obj.docstring.value)
        for member in obj.members.values():
            if not member.is_alias:
                self._roles(member)
