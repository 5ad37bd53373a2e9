"""The core crate's modules import one another in one direction only.

A module (a file of ``crates/fdkit/src``) that imports one which imports it back, directly or
through others, is a circle: neither file can be read, changed or tested without the other.
Shared types go in a leaf module both can take them from (``zerocopy/job.rs``, ``uring/sqe.rs``).
The graph is read from the ``use`` lines and paths of the sources (``helpers/rust_modules.py``
says how), at two grains: files, and the sibling folders of each folder (``atomic_pipe/`` and
``fd/`` as wholes).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.rust_modules import CrateGraph, describe

pytestmark = pytest.mark.source_tree

SRC = Path(__file__).resolve().parent.parent / "crates" / "fdkit" / "src"


@pytest.fixture(scope="module")
def graph() -> CrateGraph:
    return CrateGraph.read(SRC)


def test_graph_is_read(graph: CrateGraph) -> None:
    # Guards the check itself: a parser that found no modules or no edges would pass anything.
    assert ("zerocopy", "transfer") in graph.files
    assert ("uring",) in graph.files
    edges = {(e.source, e.target) for e in graph.edges}
    # `use super::copy_loops;` in transfer.rs, and `crate::fd::poll(...)` in code.
    assert (("zerocopy", "transfer"), ("zerocopy", "copy_loops")) in edges
    assert any(s == ("zerocopy", "wait") and t[0] == "fd" for s, t in edges)
    # Through a facade's re-export to the defining file: `super::OpKind` in uring/ring.rs.
    assert (("uring", "ring"), ("uring", "completion")) in edges


def test_no_module_imports_one_that_imports_it_back(graph: CrateGraph) -> None:
    cycles = graph.module_cycles()
    assert not cycles, "circles between modules of crates/fdkit:\n" + "\n".join(
        describe(c) for c in cycles
    )


def test_no_folder_imports_a_sibling_that_imports_it_back(graph: CrateGraph) -> None:
    cycles = graph.folder_cycles()
    assert not cycles, "circles between folders of crates/fdkit:\n" + "\n".join(
        describe(c) for c in cycles
    )


def test_the_check_finds_a_circle(tmp_path: Path) -> None:
    # Two files that import each other, one through `super::`, the other through `crate::`
    # and a facade's re-export; a third that only imports is no part of the circle.
    (tmp_path / "a").mkdir()
    (tmp_path / "lib.rs").write_text("pub mod a;\npub mod c;\n")
    (tmp_path / "a" / "mod.rs").write_text("mod x;\nmod y;\npub use y::Why;\n")
    (tmp_path / "a" / "x.rs").write_text(
        "// use super::y::Why; (a comment: not an import)\nuse crate::a::Why;\npub struct Ex;\n"
    )
    (tmp_path / "a" / "y.rs").write_text(
        'pub struct Why;\nfn f() { let _ = "super::x::Ex"; let _ = super::x::Ex; }\n'
    )
    (tmp_path / "c.rs").write_text("use crate::a::Why;\n")
    cycles = CrateGraph.read(tmp_path).module_cycles()
    assert len(cycles) == 1
    assert {e.source for e in cycles[0]} == {("a", "x"), ("a", "y")}
    assert "a::x → a::y" in describe(cycles[0])
