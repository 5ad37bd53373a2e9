"""A griffe extension for fdkit's API reference (mkdocs.yml loads it for mkdocstrings).

griffe inspects the compiled module ``fdkit._fdkit`` (its docstrings are the Rust doc comments,
present at run time only) and merges in its stub, ``_fdkit.pyi``, for the types. A stub function
that is only ``@overload``s (``transfer``, ``socket``, ``accept``...) is kept aside by griffe, so
the merged function would show no signature: this extension makes each such name a function
that carries its overloads, which the reference then shows. It also turns the Sphinx roles of
the package's docstrings (``:class:`Ring```) into code spans, since Markdown has no roles, and
reads ``#: text`` comments above a module attribute as its docstring, as Sphinx does.

Last, it refuses to build a reference with a public name that has no docstring: the native
functions' docstrings exist only in the compiled module, and a build run where ``fdkit._fdkit``
cannot be imported (the extension not built in place) would otherwise drop them silently.
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
        undocumented = sorted(_undocumented(pkg))
        if undocumented:
            raise RuntimeError(
                f"{len(undocumented)} public names of fdkit have no docstring, "
                f"{', '.join(undocumented[:8])}{', ...' if len(undocumented) > 8 else ''}: "
                "when they are native functions, fdkit._fdkit could not be imported "
                "(build the extension in place: make setup, or maturin develop)"
            )

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


def _undocumented(module: griffe.Module) -> list[str]:
    """The functions and classes (and the classes' public methods) each public module of
    ``module``'s tree exports (``__all__``) that have no docstring, as dotted paths."""
    out: list[str] = []
    if not module.name.startswith("_") and module.exports:
        for name in module.exports:
            member: Any = module.get_member(name) if name in module.members else None
            try:
                target = member.final_target if isinstance(member, griffe.Alias) else member
            except griffe.AliasResolutionError:
                target = None
            if target is None:
                out.append(f"{module.path}.{name}")
                continue
            if not isinstance(target, (griffe.Function, griffe.Class)):
                continue  # constants and submodules: documented on their pages
            if not _documented(target):
                out.append(f"{module.path}.{name}")
            if isinstance(target, griffe.Class):
                out += [
                    f"{module.path}.{name}.{m.name}"
                    for m in target.members.values()
                    if not m.name.startswith("_")
                    and not m.is_alias
                    and isinstance(m, griffe.Function)
                    and not _documented(m)
                ]
    for sub in module.modules.values():
        if not sub.name.startswith("_") and not sub.is_alias:
            out += _undocumented(sub)
    return out


def _documented(obj: griffe.Object) -> bool:
    return obj.docstring is not None and bool(obj.docstring.value.strip())
