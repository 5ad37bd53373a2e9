"""The versions the project claims, checked against what it locks and builds.

- Rust: every workspace crate's `rust-version` is at least the highest `rust-version` that any
  crate it builds with declares (Cargo.lock, as `cargo metadata --locked` resolves it), and the
  test-only minimum in `[workspace.metadata.fdkit] test-rust-version` covers what `cargo test`
  adds (the dev-dependencies).
- Python: the Makefile's WHEEL_PYTHONS (the interpreters the wheels are built and tested on),
  pyproject's version classifiers and its `requires-python` name the same versions.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The targets the wheels are built for: a dependency only another platform uses does not count.
TARGETS = ("x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu")

pytestmark = pytest.mark.source_tree


def _version(text: str | None) -> tuple[int, ...]:
    return tuple(int(part) for part in (text or "0").split("."))


def _show(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


@pytest.fixture(scope="module")
def metadata() -> dict[str, Any]:
    cargo = shutil.which("cargo")
    assert cargo, "cargo is not on PATH"
    platforms = [arg for t in TARGETS for arg in ("--filter-platform", t)]
    out = subprocess.run(
        [cargo, "metadata", "--format-version", "1", "--locked", *platforms],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def _closure(meta: dict[str, Any], roots: Iterable[str]) -> set[str]:
    """The package ids that building `roots` compiles: normal and build dependencies, down."""
    nodes = {node["id"]: node for node in meta["resolve"]["nodes"]}
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        pkg = todo.pop()
        if pkg in seen:
            continue
        seen.add(pkg)
        for dep in nodes[pkg]["deps"]:
            if any(kind["kind"] in (None, "build") for kind in dep["dep_kinds"]):
                todo.append(dep["pkg"])
    return seen


def _dev_roots(meta: dict[str, Any], member: str) -> list[str]:
    node = next(n for n in meta["resolve"]["nodes"] if n["id"] == member)
    return [d["pkg"] for d in node["deps"] if any(k["kind"] == "dev" for k in d["dep_kinds"])]


def _too_new(meta: dict[str, Any], ids: set[str], limit: tuple[int, ...]) -> list[str]:
    packages = {p["id"]: p for p in meta["packages"]}
    return sorted(
        f"{packages[i]['name']} {packages[i]['version']} needs {packages[i]['rust_version']}"
        for i in ids
        if _version(packages[i]["rust_version"]) > limit
    )


def test_every_crate_declares_the_rust_its_dependencies_need(metadata: dict[str, Any]) -> None:
    packages = {p["id"]: p for p in metadata["packages"]}
    for member in metadata["workspace_members"]:
        crate = packages[member]
        declared = _version(crate["rust_version"])
        assert declared > (0,), f"{crate['name']} declares no rust-version"
        needed = [
            i for i in _closure(metadata, [member]) - {member} if packages[i]["source"] is not None
        ]
        assert needed, f"{crate['name']}: no locked crates.io dependency found"
        too_new = _too_new(metadata, set(needed), declared)
        assert not too_new, (
            f"{crate['name']} declares rust-version {_show(declared)}, but Cargo.lock has "
            f"{', '.join(too_new)}: raise rust-version in Cargo.toml (and the README's line) "
            "or lock older versions (cargo update -p NAME --precise VERSION)"
        )


def test_the_test_only_rust_version_covers_the_dev_dependencies(
    metadata: dict[str, Any],
) -> None:
    declared_text = (metadata.get("metadata") or {}).get("fdkit", {}).get("test-rust-version")
    assert declared_text, "Cargo.toml has no [workspace.metadata.fdkit] test-rust-version"
    declared = _version(declared_text)
    packages = {p["id"]: p for p in metadata["packages"]}
    library = max(_version(packages[m]["rust_version"]) for m in metadata["workspace_members"])
    assert declared >= library, "the tests cannot need less Rust than the library"
    roots = [r for m in metadata["workspace_members"] for r in _dev_roots(metadata, m)]
    everything = _closure(metadata, [*metadata["workspace_members"], *roots])
    too_new = _too_new(metadata, everything, declared)
    assert not too_new, (
        f"`cargo test` needs more than test-rust-version {declared_text}: {', '.join(too_new)}"
    )
    # The figure is the dev-dependencies' real need, not a guess above it.
    highest = max(_version(packages[i]["rust_version"]) for i in everything)
    assert declared == max(highest, library), (
        f"test-rust-version {declared_text}, but the highest any test dependency declares is "
        f"{_show(highest)}"
    )


def _wheel_pythons() -> list[str]:
    text = (ROOT / "Makefile").read_text()
    m = re.search(r"^WHEEL_PYTHONS := (.+)$", text, flags=re.M)
    assert m, "no `WHEEL_PYTHONS :=` line in the Makefile"
    return m.group(1).split()


def test_the_tested_pythons_are_named_alike_everywhere() -> None:
    tested = _wheel_pythons()
    assert tested == sorted(tested, key=_version), tested
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    prefix = "Programming Language :: Python :: "
    classified = [
        c.removeprefix(prefix)
        for c in project["classifiers"]
        if c.startswith(prefix) and re.fullmatch(r"3\.\d+", c.removeprefix(prefix))
    ]
    assert classified == tested, (classified, tested)
    # The lowest tested Python is the floor; the one after the newest is the ceiling, so pip on
    # an untested CPython refuses rather than building from the sdist.
    newest = _version(tested[-1])
    after = _show((newest[0], newest[1] + 1))
    assert project["requires-python"] == f">={tested[0]},<{after}", project["requires-python"]


@pytest.mark.parametrize(
    "page",
    [
        "README.md",
        "crates/fdkit/README.md",
    ],
)
def test_the_readmes_name_the_declared_rust(metadata: dict[str, Any], page: str) -> None:
    packages = {p["id"]: p for p in metadata["packages"]}
    library = max(_version(packages[m]["rust_version"]) for m in metadata["workspace_members"])
    tests = metadata["metadata"]["fdkit"]["test-rust-version"]
    text = (ROOT / page).read_text()
    named = re.findall(r"\b(1\.\d\d) or later", text)
    assert named, f"{page} names no Rust version"
    assert {_version(v) for v in named} == {library}, (page, named, _show(library))
    for v in re.findall(r"\bneed(?:s)? (1\.\d\d)\b", text):
        assert v == tests, (page, v, tests)
