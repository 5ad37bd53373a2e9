"""Every web address the project's front pages and manifests give points somewhere that exists.

fdkit has no public repository, no docs.rs page and no release tags: an address under one of
those would send a reader to a 404. No network here: an address passes when its host is one of
a short list of sites that are known to exist and are cited for what they hold (man pages, the
Python and Rust docs, standards, the formats the changelog follows), or an example host in a
sample request.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Sites cited for what they hold, each one that exists whatever becomes of fdkit.
KNOWN_HOSTS = frozenset(
    {
        "man7.org",  # Linux man pages
        "docs.python.org",
        "peps.python.org",
        "doc.rust-lang.org",
        "pypi.org",  # dependencies' project pages
        "crates.io",  # dependencies' crate pages
        "www.rfc-editor.org",
        "datatracker.ietf.org",
        "keepachangelog.com",
        "semver.org",
        "spdx.org",
    }
)
# Hosts of sample requests and commands (`GET http://host/path`), not links.
EXAMPLE_HOSTS = frozenset({"host", "localhost", "127.0.0.1", "[::1]", "example.com"})

URL = re.compile(r"https?://[^\s)\]>\"'`]+")

FILES = ("README.md", "CHANGELOG.md", "Cargo.toml", "pyproject.toml", "mkdocs.yml")
CRATE_FILES = ("README.md", "Cargo.toml")

pytestmark = pytest.mark.source_tree


def _pages() -> list[Path]:
    """The pages checked: the root's, each crate's and the documentation site's (those that
    exist: a wheel's test tree has none of them, and then there is nothing to check)."""
    pages = [ROOT / name for name in FILES]
    crates = ROOT / "crates"
    if crates.is_dir():
        pages += sorted(c / name for c in sorted(crates.iterdir()) for name in CRATE_FILES)
    docs = ROOT / "docs"
    if docs.is_dir():
        pages += sorted(docs.rglob("*.md"))
    return [p for p in pages if p.is_file()]


def _unknown(text: str) -> list[str]:
    found = []
    for url in URL.findall(text):
        host = urlsplit(url).netloc.lower()
        if host not in KNOWN_HOSTS and host not in EXAMPLE_HOSTS:
            found.append(url)
    return found


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_address_is_on_a_known_site(page: Path) -> None:
    unknown = _unknown(page.read_text())
    assert not unknown, f"{page.relative_to(ROOT)} links where nothing is known to exist: {unknown}"


def test_the_check_sees_what_it_should() -> None:
    assert _unknown("see https://github.com/fdkit/fdkit.") == ["https://github.com/fdkit/fdkit."]
    assert _unknown("[0.1.0]: https://github.com/fdkit/fdkit/releases/tag/v0.1.0\n")
    assert _unknown('documentation = "https://docs.rs/fdkit"') == ["https://docs.rs/fdkit"]
    assert not _unknown("accept4(2): <https://man7.org/linux/man-pages/man2/accept4.2.html>")
    assert not _unknown("an absolute-form target (`GET http://host/path`)")
