"""Every command the README and the docs tell a reader to type exists: each ``fdkit COMMAND``
is a subcommand of the ``fdkit`` command, each ``make TARGET`` a target of the Makefile. A
command removed or renamed fails here until the pages that name it are changed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fdkit.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
if not (ROOT / "Makefile").is_file():  # a wheel's suite runs outside the repository
    pytest.skip(f"no Makefile beside {ROOT / 'tests'}", allow_module_level=True)

#: A command as the pages write it: in inline code (`fdkit serve ...`), or at the start of a
#: line of a shell block (after an optional `$ ` prompt).
INLINE = re.compile(r"`(fdkit|make) ([a-z][a-z0-9-]*)")
BLOCK = re.compile(r"^```(?:sh|shell|bash|console)\n(.*?)^```$", re.S | re.M)
LINE = re.compile(r"^(?:\$ )?(fdkit|make) ([a-z][a-z0-9-]*)", re.M)


def named(page: Path) -> set[tuple[str, str]]:
    text = page.read_text()
    found = set(INLINE.findall(text))
    for block in BLOCK.findall(text):
        found |= set(LINE.findall(block))
    return found


def subcommands() -> set[str]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    return set(sub.choices)  # type: ignore[arg-type]


def targets() -> set[str]:
    return set(re.findall(r"^([a-z0-9-]+):", (ROOT / "Makefile").read_text(), re.M))


def test_the_pages_name_commands_at_all() -> None:
    """The scan finds what it looks for (a scan that finds nothing checks nothing)."""
    every = set().union(*(named(p) for p in PAGES))
    assert ("make", "test") in every
    assert ("fdkit", "serve") in every


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_a_page_names_exists(page: Path) -> None:
    have = {"fdkit": subcommands(), "make": targets()}
    missing = sorted(f"{tool} {name}" for tool, name in named(page) if name not in have[tool])
    assert not missing, f"{page.relative_to(ROOT)} names commands that do not exist: {missing}"
