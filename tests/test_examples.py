"""Every ```python block of the README is a script under examples/ that runs.

Each block starts with ``# examples/<name>.py``, and that file holds exactly the block: the
README cannot drift from what is tested. Each script then runs on its own, in a fresh
interpreter in an empty directory, with a timeout, and must print what its comments promise.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from fdkit import uring

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
EXAMPLES = ROOT / "examples"
HEADER = re.compile(r"# examples/(readme_\w+\.py)\b")

#: What each script must print (substrings of its stdout), as its comments say.
EXPECTED = {
    "readme_aio_tour.py": [
        "EventLoop ",
        "b'HELLO, RING\\n'",
        "(1048576, '",
        ") 1048576\n",
        "\n20000\n",
    ],
    "readme_fd_tour.py": [
        "greeted 127.0.0.1:",
        "b'hello\\n'",
        "1000000 []",
        "b'ping'",
        "b'take this' b'via the passed fd'",
    ],
    "readme_zerocopy_tour.py": ["4194304 {'path': ", "61440", "7 5 b'request' b'reply'"],
    "readme_atomic_pipe_tour.py": ["100000\n1\n1\n1\n", "line 14", "burst 23", "message 10000"],
    "readme_logging_children.py": ["item 0 done", "item 99 done"],
    "readme_uring_ring.py": [
        "b'pong: ping'",
        "[('read', 'EBADF'), ('write', 'ECANCELED')]",
        "('link_timeout', 'ETIME')",
        "[('read_fixed', 0, b'fixed')]\n[] 0",
    ],
}


def readme_blocks() -> list[str]:
    """The README's ```python blocks, in order, each without its fences."""
    text = README.read_text()
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


@pytest.mark.source_tree
def test_every_readme_block_is_an_example_file_word_for_word() -> None:
    blocks = readme_blocks()
    assert blocks, "no ```python block in the README"
    named = []
    for block in blocks:
        m = HEADER.match(block)
        assert m, f"a README block does not start with '# examples/readme_NAME.py':\n{block[:200]}"
        name = m.group(1)
        named.append(name)
        assert (EXAMPLES / name).read_text() == block, f"README block and examples/{name} differ"
    files = sorted(p.name for p in EXAMPLES.glob("readme_*.py"))
    assert sorted(named) == files, "every examples/readme_*.py is in the README, once"
    assert sorted(EXPECTED) == files


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name: str, tmp_path: Path) -> None:
    if name == "readme_uring_ring.py":
        ok, why = uring.available()
        if not ok:
            pytest.skip(f"io_uring unavailable: {why}")
    r = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=45,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    for want in EXPECTED[name]:
        assert want in r.stdout + r.stderr, (want, r.stdout[-2000:], r.stderr[-2000:])
    assert list(tmp_path.iterdir()) == [], "the example left files behind"
