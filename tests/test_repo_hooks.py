"""The repository's git hooks (``.githooks``, installed by ``make setup``): ``commit-msg``
refuses a subject over 72 characters, as the project's history keeps them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HOOK = REPO / ".githooks" / "commit-msg"
if not HOOK.is_file():  # a wheel's suite runs outside the repository
    pytest.skip(f"no .githooks beside {REPO / 'tests'}", allow_module_level=True)


def run_hook(tmp_path: Path, message: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message)
    return subprocess.run([str(HOOK), str(path)], capture_output=True, text=True, check=False)


@pytest.mark.parametrize(
    "message",
    [
        "aio: read max_size from a class cache\n\nA body line may be as long as it needs to be "
        "to say why, with figures: 7,053 -> 6,980 instructions per request.\n",
        "x" * 72 + "\n",
        "# a comment git strips, longer than seventy-two characters, is not the subject line\n"
        "\nshort subject after comments and a blank line\n",
        "é" * 72 + "\n",  # characters, not bytes
    ],
)
def test_a_subject_of_at_most_72_characters_is_accepted(tmp_path: Path, message: str) -> None:
    done = run_hook(tmp_path, message)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_a_longer_subject_is_refused_saying_its_length(tmp_path: Path) -> None:
    subject = "aio: " + "a" * 68  # 73 characters
    done = run_hook(tmp_path, subject + "\n\nbody\n")
    assert done.returncode == 1
    assert "73 characters, more than 72" in done.stderr
    assert subject in done.stderr


def test_make_setup_installs_the_hooks() -> None:
    makefile = (REPO / "Makefile").read_text()
    setup = makefile.split("\nsetup: ", 1)[1].split("\n\n", 1)[0]
    assert "git config core.hooksPath .githooks" in setup
    assert HOOK.stat().st_mode & 0o111
