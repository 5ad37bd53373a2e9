"""Every ```python block of the README and of the documentation site (docs/) is a script under
examples/ that runs.

Each block starts with ``# examples/<name>.py`` (``readme_*`` for the README, ``docs_*`` for the
pages), and that file holds exactly the block: neither the README nor a page can drift from what
is tested. Each script then runs on its own, in a fresh interpreter in an empty directory, with
a timeout, and must print what its comments promise; the few that are not programs on their own
(a gunicorn worker class, a server that runs until stopped) are run by tests/test_docs.py.
Signatures that are not programs use ```pyi fences.
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
DOCS = ROOT / "docs"
EXAMPLES = ROOT / "examples"
HEADER = re.compile(r"# examples/((?:readme|docs)_\w+\.py)\b")

#: What each script must print (substrings of its stdout), as its comments say.
EXPECTED = {
    "readme_fd.py": ["b'hello 127.0.0.1:"],
    "readme_zerocopy.py": ["1048576 {'path': 'copy_file_range'"],
    "readme_uring.py": ["[('read', b'ping')]"],
    "readme_atomic_pipe.py": ["[100000]"],
    "readme_aio.py": ["EventLoop "],
    "docs_uvloop_engine.py": [
        "True True\nTrue\n",
        "EpollEventLoop epoll engine='epoll' was asked for",
    ],
    "docs_aio_tour.py": [
        "EventLoop ",
        "b'HELLO, RING\\n'",
        "(1048576, '",
        ") 1048576\n",
        "\n20000\n",
    ],
    "docs_fd_tour.py": [
        "greeted 127.0.0.1:",
        "b'hello\\n'",
        "1000000 []",
        "b'ping'",
        "b'take this' b'via the passed fd'",
    ],
    "docs_copy_tour.py": ["67108864 True\n", "sub/disk.img\n", "SameFileError\n"],
    "docs_zerocopy_tour.py": ["4194304 {'path': ", "61440", "7 5 b'request' b'reply'"],
    "docs_atomic_pipe_tour.py": ["100000\n1\n1\n1\n", "line 14", "burst 23", "message 10000"],
    "docs_logging_children.py": ["item 0 done", "item 99 done"],
    "docs_uring_ring.py": [
        "b'pong: ping'",
        "[('read', 'EBADF'), ('write', 'ECANCELED')]",
        "('link_timeout', 'ETIME')",
        "[('read_fixed', 0, b'fixed')]\n[] 0",
    ],
}


#: The docs' examples that are not programs on their own: tests/test_docs.py runs them, and
#: tests/test_cli_proxy_relay.py runs docs_proxy_record.py on a recording the proxy made.
RUN_BY_TEST_DOCS = {
    "docs_asgi_app.py",
    "docs_gunicorn_worker.py",
    "docs_hypercorn_serve.py",
    "docs_proxy_record.py",
    "docs_uvicorn_before_036.py",
}

#: The scripts that need io_uring (they exit saying so without it).
NEEDS_URING = {"readme_uring.py", "docs_uring_ring.py"}


def python_blocks(path: Path) -> list[str]:
    """The ```python blocks of a Markdown file, in order, each without its fences."""
    return re.findall(r"^```python\n(.*?)^```$", path.read_text(), flags=re.S | re.M)


@pytest.mark.source_tree
@pytest.mark.parametrize(
    ("prefix", "sources"),
    [("readme", [README]), ("docs", sorted(DOCS.rglob("*.md")))],
    ids=["README", "docs"],
)
def test_every_python_block_is_an_example_file_word_for_word(
    prefix: str, sources: list[Path]
) -> None:
    named = []
    for source in sources:
        where = source.relative_to(ROOT)
        for block in python_blocks(source):
            m = HEADER.match(block)
            name = m.group(1) if m else ""
            assert name.startswith(f"{prefix}_"), (
                f"a ```python block of {where} does not start with "
                f"'# examples/{prefix}_NAME.py':\n{block[:200]}"
            )
            named.append(name)
            assert (EXAMPLES / name).read_text() == block, f"{where}'s block and {name} differ"
    assert named, f"no ```python block in {prefix}"
    files = sorted(p.name for p in EXAMPLES.glob(f"{prefix}_*.py"))
    assert sorted(named) == files, f"every examples/{prefix}_*.py is shown once, in {prefix}"
    assert all(f in EXPECTED or f in RUN_BY_TEST_DOCS for f in files)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name: str, tmp_path: Path) -> None:
    if name in NEEDS_URING:
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
