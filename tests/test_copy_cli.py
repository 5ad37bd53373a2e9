"""`fdkit copy`, run as a user runs it."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

FDKIT = shutil.which("fdkit", path=os.path.dirname(sys.executable)) or "fdkit"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FDKIT, "copy", *args], capture_output=True, text=True, timeout=60, check=False
    )


def digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_copies_bytes_and_mode_and_reports_the_path(tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(3 << 20) + b"tail")
    src.chmod(0o640)
    dst = tmp_path / "dst.bin"
    r = run(str(src), str(dst))
    assert r.returncode == 0, r.stderr
    assert digest(dst) == digest(src)
    assert dst.stat().st_mode & 0o777 == 0o640
    # Not a terminal: one final progress line, naming the kernel path used.
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("100.0%") and "via " in line
    assert line.split("via ")[1] in {"copy_file_range", "sendfile", "splice", "read_write"}
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".fdkit-tmp")]


def test_into_a_directory_and_over_an_existing_file(tmp_path: Path) -> None:
    src = tmp_path / "a.txt"
    src.write_bytes(b"new contents\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_bytes(b"old contents that are longer\n")
    r = run(str(src), str(out))
    assert r.returncode == 0, r.stderr
    assert (out / "a.txt").read_bytes() == b"new contents\n"


def test_empty_file(tmp_path: Path) -> None:
    src = tmp_path / "empty"
    src.write_bytes(b"")
    r = run(str(src), str(tmp_path / "copy"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "copy").read_bytes() == b""


def test_errors_are_one_line_and_leave_nothing_behind(tmp_path: Path) -> None:
    cases = [
        ([str(tmp_path / "missing"), str(tmp_path / "x")], "No such file or directory"),
        ([str(tmp_path), str(tmp_path / "x")], "is not a regular file"),
        ([str(tmp_path / "f"), "/nonexistent-dir/x"], "No such file or directory"),
        ([str(tmp_path / "f"), str(tmp_path / "f")], "are the same file"),
    ]
    (tmp_path / "f").write_bytes(b"data")
    for args, message in cases:
        r = run(*args)
        assert r.returncode == 1, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert message in r.stderr and r.stderr.startswith("fdkit copy: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]
    assert (tmp_path / "f").read_bytes() == b"data"
