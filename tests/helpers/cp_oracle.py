"""GNU cp as the oracle of ``fdkit copy``: the same command line run by both, each in its own
copy of one tree, and what they did compared (the tree, stdout, stderr, the exit status).

A test builds the tree with a function of one directory; :func:`both` builds it twice
(``cp/`` and ``fdkit/`` side by side), runs each program inside its own directory with the
same relative operands, and returns both results with cp's name in its words replaced by
fdkit's, so that ``assert ours == theirs`` compares everything at once.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

FDKIT = shutil.which("fdkit", path=os.path.dirname(sys.executable)) or "fdkit"
CP = shutil.which("cp")

Build = Callable[[Path], object]


@dataclass(frozen=True)
class Outcome:
    """What one program did: its exit status, its words and the tree it left."""

    code: int
    stdout: str
    stderr: str
    tree: dict[str, tuple[object, ...]]


def command(
    argv: Sequence[str],
    cwd: Path | None = None,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
    prefix: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """``argv`` (after ``prefix``: setpriv, unshare...) in ``cwd``, in the C locale."""
    return subprocess.run(
        [*prefix, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
        input=stdin if stdin is not None else "",
        env={**os.environ, "LC_ALL": "C", **(env or {})},
    )


def cp(*args: str, cwd: Path | None = None, **kw: object) -> subprocess.CompletedProcess[str]:
    """GNU cp, found on PATH as ``cp``: its messages start with ``cp: ``."""
    return command(["cp", *args], cwd, **kw)  # type: ignore[arg-type]


def fdkit(*args: str, cwd: Path | None = None, **kw: object) -> subprocess.CompletedProcess[str]:
    return command([FDKIT, "copy", *args], cwd, **kw)  # type: ignore[arg-type]


def as_fdkit(text: str) -> str:
    """cp's words as fdkit says them: its name at the head of a line, in its hint."""
    lines = []
    for line in text.splitlines(keepends=True):
        if line.startswith("cp: "):
            line = "fdkit copy: " + line[4:]
        lines.append(line.replace("Try 'cp --help'", "Try 'fdkit copy --help'"))
    return "".join(lines).replace(
        "cp makes a backup of SOURCE", "fdkit copy makes a backup of SOURCE"
    )


def snapshot(
    root: Path, *, times: bool | str = False, owners: bool = False
) -> dict[str, tuple[object, ...]]:
    """Every entry under ``root``: kind, mode and what makes it that entry (bytes and whether
    it has holes, link target, device number), the names sharing its inode, its ``user.``
    extended attributes; with ``times`` its mtime (``times="dst"``: of the entries under
    ``dst`` only, where the rest's change with the run), with ``owners`` its owner."""
    out: dict[str, tuple[object, ...]] = {}
    inodes: dict[int, list[str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            st = os.lstat(path)
            inodes.setdefault(st.st_ino, []).append(rel)
            what: object = None
            if stat.S_ISREG(st.st_mode):
                what = (path.read_bytes(), st.st_blocks * 512 < st.st_size)
            elif stat.S_ISLNK(st.st_mode):
                what = os.readlink(path)
            elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                what = st.st_rdev
            try:
                xattrs = tuple(
                    sorted(
                        (n, os.getxattr(path, n, follow_symlinks=False))
                        for n in os.listxattr(path, follow_symlinks=False)
                        if n.startswith("user.")
                    )
                )
            except OSError:
                xattrs = ()
            row: tuple[object, ...] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), what)
            row += (xattrs,)
            if times is True or (isinstance(times, str) and rel.startswith(times)):
                row += (st.st_mtime_ns,)
            if owners:
                row += (st.st_uid, st.st_gid)
            out[rel] = row
    for names in inodes.values():
        for rel in names:
            out[rel] += (tuple(sorted(names)),)
    return out


def both(
    tmp_path: Path,
    build: Build,
    *args: str,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
    prefix: Sequence[str] = (),
    times: bool | str = False,
    owners: bool = False,
) -> tuple[Outcome, Outcome]:
    """Build the tree in ``tmp_path/cp`` and ``tmp_path/fdkit``, run ``cp ARGS`` and
    ``fdkit copy ARGS`` each in its own, and return (cp's outcome in fdkit's words, fdkit's)."""
    results = []
    for name in ("cp", "fdkit"):
        root = tmp_path / name
        root.mkdir()
        build(root)
    for name, program in (("cp", cp), ("fdkit", fdkit)):
        root = tmp_path / name
        r = program(*args, cwd=root, stdin=stdin, env=env, prefix=prefix)
        results.append(
            Outcome(
                r.returncode,
                r.stdout,
                r.stderr,
                snapshot(root, times=times, owners=owners),
            )
        )
    theirs, ours = results
    theirs = Outcome(theirs.code, as_fdkit(theirs.stdout), as_fdkit(theirs.stderr), theirs.tree)
    return theirs, ours
