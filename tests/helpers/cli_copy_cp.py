"""What the tests of ``fdkit copy`` beside GNU cp share (``tests/test_cli_copy_cp_*.py``):
both programs run with the same command line (:func:`run`, :func:`cp`), their stderr without
the program's name, a snapshot of a tree to compare, the changes of later cp versions that
cases in more than one module name, the times the cases give their files, and the ways to run
as an unprivileged user or in a private mount namespace (each skips, saying why, where it
cannot).

The fixture ``shared_dir`` is imported by the modules whose tests take it: ``from
helpers.cli_copy_cp import shared_dir_fixture``.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.cp_oracle import Since

FDKIT = shutil.which("fdkit", path=os.path.dirname(sys.executable)) or "fdkit"
CP = shutil.which("cp")


#: A declined ``-i`` prompt fails (status 1) from cp 9.2; cp 9.1 exits 0.
DECLINED = Since((9, 2), "exit status 1 for a declined -i prompt", code=1)

#: cp 9.5 names the source too: "cannot overwrite directory 'd' with non-directory 'f'".
FILE_OVER_DIRECTORY = Since((9, 5), "naming the file that cannot overwrite a directory")

#: Times the cases give their files (ns since the epoch).
T_OLD = 946_684_800_123_456_789  # 2000-01-01, and some nanoseconds
T_SRC = 1_500_000_000_987_654_321  # 2017
T_NEW = 4_102_444_800_000_000_001  # 2100


def _command(
    argv: list[str], cwd: Path | None, stdin: str | None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
        input=stdin if stdin is not None else "",
        env=env,
    )


def run(
    *args: str, cwd: Path | None = None, stdin: str | None = None, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return _command([*prefix, FDKIT, "copy", *args], cwd, stdin)


def cp(
    *args: str, cwd: Path | None = None, stdin: str | None = None, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    assert CP is not None
    # "cp" found on PATH: its messages start with "cp: "; LC_ALL=C for its English words.
    return _command([*prefix, "cp", *args], cwd, stdin, {**os.environ, "LC_ALL": "C"})


def words(r: subprocess.CompletedProcess[str], prog: str) -> list[str]:
    """stderr's lines without the program's name."""
    return [line.removeprefix(prog) for line in r.stderr.splitlines()]


def snapshot(root: Path, *, times: bool = False) -> dict[str, tuple[object, ...]]:
    """Every entry under ``root``: kind, mode, and what makes it that entry (bytes, link
    target, device number), its allocation (sparse or not), the group of names sharing its
    inode, and with ``times`` its mtime and owner."""
    out: dict[str, tuple[object, ...]] = {}
    inodes: dict[int, list[str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            st = os.lstat(path)
            inodes.setdefault(st.st_ino, []).append(rel)
            kind = stat.S_IFMT(st.st_mode)
            what: object = None
            if stat.S_ISREG(st.st_mode):
                what = (path.read_bytes(), st.st_blocks * 512 < st.st_size)
            elif stat.S_ISLNK(st.st_mode):
                what = os.readlink(path)
            elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                what = st.st_rdev
            row: tuple[object, ...] = (kind, stat.S_IMODE(st.st_mode), what)
            if times:
                row += (st.st_mtime_ns, st.st_uid, st.st_gid)
            out[rel] = row
    for names in inodes.values():
        for rel in names:
            out[rel] += (tuple(sorted(names)),)
    return out


def as_nobody() -> tuple[str, ...]:
    """A prefix that runs a command as an unprivileged user (root reads every file)."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("root, and no setpriv to drop privileges")
    prefix = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--")
    probe = subprocess.run(
        [*prefix, FDKIT, "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"fdkit cannot run as nobody from here: {probe.stderr.strip()[-200:]}")
    return prefix


# The fixture a module gets by importing it: ``from helpers.cli_copy_cp import
# shared_dir_fixture``. Named ``shared_dir`` for the tests that take it.


@pytest.fixture(name="shared_dir")
def shared_dir_fixture(tmp_path: Path) -> Iterator[Path]:
    """A directory an unprivileged user can use: tmp_path itself when not root (pytest's
    base directory is private to its user), else a fresh one in /tmp given to nobody."""
    if os.geteuid() != 0:
        yield tmp_path
        return
    d = Path(tempfile.mkdtemp(prefix="fdkit-copy-"))
    try:
        os.chown(d, 65534, 65534)
        yield d
    finally:
        for dirpath, _, _ in os.walk(d):
            os.chmod(dirpath, 0o755)
        shutil.rmtree(d)


def unshare_mount() -> tuple[str, ...]:
    """A prefix that runs a command in a private mount namespace, or skip saying why."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare command to make a private mount namespace")
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount --bind / /mnt"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(f"mounts are not permitted here: {probe.stderr.strip()}")
    return ("unshare", "-m")
