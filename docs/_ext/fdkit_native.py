"""A griffe extension for fdkit's API reference (mkdocs.yml loads it for mkdocstrings).

griffe inspects the compiled module ``fdkit._fdkit`` (its docstrings are the Rust doc comments,
present at run time only) and merges in its stub, ``_fdkit.pyi``, for the types. A stub function
that is only ``@overload``s (``transfer``, ``socket``, ``accept``...) is kept aside by griffe, so
the merged function would show no signature: this extension makes each such name a function
that carries its overloads, which the reference then shows. It also turns the Sphinx roles of
the package's docstrings (``:class:`Ring```) into code spans, since Markdown has no roles, and
reads ``#: text`` comments above a module attribute as its docstring, as Sphinx does.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|exc|obj):`~?([^`]+)`")


class FdkitNative(griffe.Extension):
    """Overloads of ``fdkit._fdkit``'s stub, Sphinx roles, ``#:`` attribute comments."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.path != "fdkit":
            return
        native = pkg.get_member("_fdkit")
        if isinstance(native, griffe.Module):
            self._promote_overloads(native)
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

    def _comments(self, obj: griffe.Object) -> None:
        for member in obj.members.values():
            if isinstance(member, griffe.Alias):
                continue
            if isinstance(member, griffe.Attribute) and member.docstring is None and member.lineno:
                path = member.filepath
                if isinstance(path, list) or path not in member.lines_collection:
                    continue  # an inspected object (the native module): no source lines
                lines = member.lines_collection[path]
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
            if not isinstance(member, griffe.Alias):
                self._roles(member)
