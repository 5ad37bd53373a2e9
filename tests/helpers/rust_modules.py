"""The module graph of a Rust crate's source tree, read from its `use` lines and paths.

A file is a module: ``lib.rs`` is the crate root, ``a/mod.rs`` is ``a``, ``a/b.rs`` is ``a::b``.
Module ``A`` depends on ``B`` when a path written in ``A`` (a ``use`` item, or a path in code such
as ``crate::fd::poll(...)`` or ``super::held::sweep()``) names ``B`` or an item defined in ``B``.
A path is resolved to the longest prefix that is a module, and then through the re-exports of
that module (``pub use child::Item`` in a ``mod.rs``) to the file that defines the item: a
re-export is a name, not a dependency, so a facade's ``pub use`` lines are no edges of its own,
and a file that imports an item through a facade depends on the file that defines it.

Comments (doc links included) and string literals are not read. ``super`` inside an inline
``mod tests { ... }`` names the file's own module. Paths into other crates are not edges.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

Module = tuple[str, ...]

_LEXEMES = re.compile(
    r"""
      (?P<block>/\*.*?\*/)
    | (?P<line>//[^\n]*)
    | (?P<raw>b?r(?P<hashes>\#*)".*?"(?P=hashes))
    | (?P<string>b?"(?:\\.|[^"\\])*")
    | (?P<char>b?'(?:\\u\{[0-9a-fA-F]+\}|\\.|[^'\\])')
    """,
    re.DOTALL | re.VERBOSE,
)
_USE = re.compile(r"\b(?P<vis>pub(?:\s*\([^)]*\))?\s+)?use\s+(?P<tree>[^;]+);")
_PATH = re.compile(r"(?<![\w:])(?:crate|super|self)(?:\s*::\s*\w+)+")
_INLINE_MOD = re.compile(r"\bmod\s+\w+\s*\{")


def strip_comments_and_strings(source: str) -> str:
    """The source with comments and literals blanked out (newlines kept, so offsets hold)."""

    def blank(m: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))

    return _LEXEMES.sub(blank, source)


def expand_use_tree(tree: str) -> Iterator[tuple[list[str], str | None]]:
    """``a::{b, c::{self, D as E}}`` → (path, alias): ``[a, b]``, ``[a, c]``, ``[a, c, D]``."""
    tree = re.sub(r"\s+", " ", tree).strip()

    def split_top(s: str) -> list[str]:
        parts: list[str] = []
        depth, start = 0, 0
        for i, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(s[start:i])
                start = i + 1
        parts.append(s[start:])
        return [p.strip() for p in parts if p.strip()]

    def walk(prefix: list[str], s: str) -> Iterator[tuple[list[str], str | None]]:
        s = s.strip().removeprefix("::").strip()
        brace = s.find("{")
        if brace >= 0:
            head = [p.strip() for p in s[:brace].split("::") if p.strip()]
            for part in split_top(s[brace + 1 : s.rindex("}")]):
                yield from walk(prefix + head, part)
            return
        alias = None
        if " as " in s:
            s, alias = (x.strip() for x in s.split(" as ", 1))
        segs = [p.strip() for p in s.split("::") if p.strip()]
        if segs == ["self"]:
            yield prefix, alias
        else:
            yield prefix + segs, alias

    yield from walk([], tree)


@dataclass
class Reference:
    """A path written in a module: where, and what it says."""

    line: int
    path: list[str]
    inline_depth: int
    reexport: bool = False


@dataclass
class Edge:
    """``source`` depends on ``target`` because of the path on ``line`` of ``file``."""

    source: Module
    target: Module
    file: str
    line: int
    text: str


@dataclass
class CrateGraph:
    """The modules of one crate and the dependencies between them."""

    root: Path
    files: dict[Module, Path] = field(default_factory=dict)
    refs: dict[Module, list[Reference]] = field(default_factory=dict)
    # Names a module re-exports: name → the absolute path it stands for.
    reexports: dict[Module, dict[str, list[str]]] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)

    @classmethod
    def read(cls, src: Path) -> CrateGraph:
        graph = cls(root=src)
        for f in sorted(src.rglob("*.rs")):
            rel = f.relative_to(src).with_suffix("").parts
            if rel in (("lib",), ("main",)):
                module: Module = ()
            elif rel[-1] == "mod":
                module = rel[:-1]
            else:
                module = rel
            graph.files[module] = f
        for module, f in graph.files.items():
            graph._scan(module, strip_comments_and_strings(f.read_text()))
        for module in graph.files:
            for ref in graph.refs[module]:
                if ref.reexport and ref.inline_depth == 0:
                    continue
                path = graph.absolute(module, ref)
                target = None if path is None else graph.resolve(path, set())
                if target is not None and target != module:
                    graph.edges.append(
                        Edge(
                            module,
                            target,
                            str(graph.files[module].relative_to(src)),
                            ref.line,
                            "::".join(ref.path),
                        )
                    )
        return graph

    def _scan(self, module: Module, code: str) -> None:
        # Inline `mod x { ... }` blocks: where each starts and ends.
        spans: list[tuple[int, int]] = []
        for m in _INLINE_MOD.finditer(code):
            depth, i = 0, m.end() - 1
            while i < len(code):
                if code[i] == "{":
                    depth += 1
                elif code[i] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                i += 1
            spans.append((m.start(), i))

        def depth_at(pos: int) -> int:
            return sum(1 for a, b in spans if a <= pos <= b)

        def line_at(pos: int) -> int:
            return code.count("\n", 0, pos) + 1

        refs: list[Reference] = []
        reexports: dict[str, list[str]] = {}
        used: list[tuple[int, int]] = []
        for m in _USE.finditer(code):
            used.append((m.start(), m.end()))
            public = m.group("vis") is not None
            depth = depth_at(m.start())
            for path, alias in expand_use_tree(m.group("tree")):
                if not path or path == ["*"]:
                    continue
                ref = Reference(line_at(m.start()), path, depth, reexport=public)
                refs.append(ref)
                target = self.absolute(module, ref)
                if public and depth == 0 and path[-1] != "*" and target is not None:
                    reexports[alias or path[-1]] = target
        for m in _PATH.finditer(code):
            if any(a <= m.start() < b for a, b in used):
                continue
            path = [p.strip() for p in m.group(0).split("::")]
            refs.append(Reference(line_at(m.start()), path, depth_at(m.start())))
        self.refs[module] = refs
        self.reexports[module] = reexports

    def absolute(self, module: Module, ref: Reference) -> list[str] | None:
        """The path from the crate root (without ``crate``), or None for another crate's."""
        path = list(ref.path)
        here = list(module)
        inline = ref.inline_depth
        if path[0] == "crate":
            return path[1:]
        if path[0] not in ("self", "super"):
            # A path relative to this module (a child module's name), else another crate's.
            if inline == 0 and (*module, path[0]) in self.files:
                return here + path
            return None
        if path[0] == "self":
            return here + path[1:]
        while path and path[0] == "super":
            path.pop(0)
            if inline > 0:
                inline -= 1
            elif here:
                here.pop()
        return here + path

    def resolve(self, path: list[str], seen: set[tuple[str, ...]]) -> Module | None:
        """The module that defines what `path` names (following re-exports)."""
        for n in range(len(path), -1, -1):
            prefix = tuple(path[:n])
            if prefix in self.files:
                rest = path[n:]
                if rest and rest[0] in self.reexports[prefix] and tuple(path) not in seen:
                    seen.add(tuple(path))
                    target = self.reexports[prefix][rest[0]] + rest[1:]
                    return self.resolve(target, seen)
                return prefix
        return None

    def module_cycles(self) -> list[list[Edge]]:
        """One cycle of edges for every strongly connected set of modules."""
        return find_cycles(self.edges)

    def folder_cycles(self) -> list[list[Edge]]:
        """Cycles between the sibling subtrees of each folder: ``a::x::*`` and ``a::y::*``
        depending on each other through any of their files (a cycle of single files is the
        module graph's, and is reported there)."""
        folders = {
            m for m in self.files if any(len(o) > len(m) and o[: len(m)] == m for o in self.files)
        }
        cycles: list[list[Edge]] = []
        for folder in sorted(folders):
            n = len(folder)
            lifted = [
                Edge(e.source[: n + 1], e.target[: n + 1], e.file, e.line, e.text)
                for e in self.edges
                if len(e.source) > n
                and len(e.target) > n
                and e.source[:n] == folder
                and e.target[:n] == folder
                and e.source[n] != e.target[n]
            ]
            for cycle in find_cycles(lifted):
                if any(c.source in folders for c in cycle):
                    cycles.append(cycle)
        return cycles


def find_cycles(edges: Iterable[Edge]) -> list[list[Edge]]:
    """For each strongly connected component with more than one node, one cycle in it."""
    out: dict[Module, list[Edge]] = {}
    for e in edges:
        out.setdefault(e.source, []).append(e)
    nodes = sorted(out)
    index: dict[Module, int] = {}
    low: dict[Module, int] = {}
    stack: list[Module] = []
    on_stack: set[Module] = set()
    components: list[set[Module]] = []
    counter = 0

    def strongconnect(v: Module) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for e in out.get(v, []):
            w = e.target
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: set[Module] = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(comp)

    for v in nodes:
        if v not in index:
            strongconnect(v)

    cycles: list[list[Edge]] = []
    for comp in components:
        start = min(comp)
        # Breadth-first from `start` back to itself, inside the component: a shortest cycle.
        back: dict[Module, Edge] = {}
        frontier = [start]
        found: Edge | None = None
        while frontier and found is None:
            nxt: list[Module] = []
            for v in frontier:
                for e in out.get(v, []):
                    if e.target not in comp:
                        continue
                    if e.target == start:
                        found = e
                        break
                    if e.target not in back:
                        back[e.target] = e
                        nxt.append(e.target)
                if found is not None:
                    break
            frontier = nxt
        assert found is not None
        cycle = [found]
        while cycle[0].source != start:
            cycle.insert(0, back[cycle[0].source])
        cycles.append(cycle)
    return cycles


def describe(cycle: list[Edge]) -> str:
    """``a → b → a``, then the line behind each step."""

    def name(m: Module) -> str:
        return "::".join(m) or "crate"

    head = " → ".join([name(e.source) for e in cycle] + [name(cycle[0].source)])
    lines = [f"  {name(e.source)} → {name(e.target)}: {e.file}:{e.line} {e.text}" for e in cycle]
    return "\n".join([head, *lines])
