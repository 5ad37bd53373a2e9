"""GNU cp as the oracle of ``fdkit copy``: the same command line run by both, each in its own
copy of one tree, and what they did compared (the tree, stdout, stderr, the exit status).

A test builds the tree with a function of one directory; :func:`both` builds it twice
(``cp/`` and ``fdkit/`` side by side), runs each program inside its own directory with the
same relative operands, and returns both results with cp's name in its words replaced by
fdkit's, so that ``assert ours == theirs`` compares everything at once.

fdkit copy does what GNU cp 9.10 does. Where the cp here is older than a change a case
shows (:class:`Since`: the version and what changed), that case compares fdkit with the older
cp's outcome amended by the change, given explicitly; with cp 9.10 here it is compared with
cp's own outcome alone.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

FDKIT = shutil.which("fdkit", path=os.path.dirname(sys.executable)) or "fdkit"
CP = shutil.which("cp")

Build = Callable[[Path], object]


def _version() -> tuple[int, ...]:
    """The version GNU cp here says (``cp (GNU coreutils) 9.1``: ``(9, 1)``); ``()`` when it
    says none."""
    if CP is None:
        return ()
    out = subprocess.run([CP, "--version"], capture_output=True, text=True, check=False)
    words = out.stdout.splitlines()[0].split() if out.stdout else []
    try:
        return tuple(int(n) for n in words[-1].split("."))
    except (IndexError, ValueError):
        return ()


#: The version of the cp here, read once.
CP_VERSION = _version()


def dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version)) or "of unknown version"


@dataclass(frozen=True)
class Since:
    """What GNU cp ``version`` changed (``what``) in a case's outcome: fdkit copy does as cp
    does after it. Where the cp here predates the change (:attr:`predated`), the case's oracle
    is the older cp's outcome with what changed given here explicitly: ``code``, ``stdout``
    and ``stderr`` in fdkit's words (``@``: the destination, as in the command line), and
    ``older``, the command line the older cp runs to leave the tree the later cp leaves (by
    default the case's own; for an option the older cp lacks, its equivalent then, or a
    command line it refuses too)."""

    version: tuple[int, ...]
    what: str
    older: tuple[str, ...] | None = None
    code: int | None = None
    stdout: str | None = None
    stderr: str | None = None

    @property
    def predated(self) -> bool:
        """Whether the cp here is older than the change."""
        return self.version > CP_VERSION

    @property
    def reason(self) -> str:
        """``cp 9.1 predates 9.2's exit status 1 for a declined -i prompt``."""
        return f"cp {dotted(CP_VERSION)} predates {dotted(self.version)}'s {self.what}"


@dataclass(frozen=True)
class Outcome:
    """What one program did: its exit status, its words and the tree it left."""

    code: int
    stdout: str
    stderr: str
    tree: dict[str, tuple[object, ...]]
    #: For cp's outcome amended by a :class:`Since`: its reason.
    note: str = field(default="", compare=False)


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
    # At the head of a line, or after a prompt (which ends in "? " and no newline).
    text = re.sub(r"(?m)(^|\? )cp: ", r"\1fdkit copy: ", text)
    return text.replace("Try 'cp --help'", "Try 'fdkit copy --help'")


def snapshot(
    root: Path, *, times: bool | str = False, owners: bool = False
) -> dict[str, tuple[object, ...]]:
    """Every entry under ``root``: kind, mode and what makes it that entry (bytes and whether
    it has holes, link target, device number), the names sharing its inode, its ``user.``
    extended attributes; with ``times`` its mtime (``times="dst"``: of the entries under
    ``dst`` only; a time of the last hour is "now"), with ``owners`` its owner."""
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
                # A time of the last hour is "now": made or changed by this run, or by the
                # build (the two programs ran a few milliseconds apart).
                recent = abs(time.time_ns() - st.st_mtime_ns) < 3600 * 10**9
                row += ("now" if recent else st.st_mtime_ns,)
            if owners:
                row += (st.st_uid, st.st_gid)
            out[rel] = row
    for names in inodes.values():
        for rel in names:
            out[rel] += (tuple(sorted(names)),)
    return out


def both(
    tmp_path: Path,
    build: Build | None,
    *args: str,
    dest: Build | None = None,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
    prefix: Sequence[str] = (),
    times: bool | str = True,
    owners: bool = False,
    since: Since | None = None,
) -> tuple[Outcome, Outcome]:
    """Run ``cp ARGS`` and ``fdkit copy ARGS`` on one tree and compare: returns (cp's outcome
    in fdkit's words, fdkit's).

    ``build`` makes the sources once, in ``tmp_path/shared``, where both programs run: both
    read the same inodes, so they walk a directory in the same order (cp reads in inode order)
    and ``-v`` prints the same lines. ``dest`` makes what is already at the destination, once
    in ``tmp_path/cp`` and once in ``tmp_path/fdkit``; ``@`` in an argument is that directory
    (``../cp`` or ``../fdkit``), and each outcome's tree is its own. ``since``: a change of
    cp's after the cp here, which amends its outcome (see :class:`Since`)."""
    change = since if since is not None and since.predated else None
    shared = tmp_path / "shared"
    shared.mkdir()
    if build is not None:
        build(shared)
    for name in ("cp", "fdkit"):
        root = tmp_path / name
        root.mkdir()
        if dest is not None:
            dest(root)
    results = []
    older = change.older if change is not None and change.older is not None else args
    for name, program, line in (("cp", cp, older), ("fdkit", fdkit, args)):
        argv = [a.replace("@", f"../{name}") for a in line]
        r = program(*argv, cwd=shared, stdin=stdin, env=env, prefix=prefix)
        tree = snapshot(tmp_path / name, times=times, owners=owners)
        results.append(Outcome(r.returncode, r.stdout, r.stderr, tree))
    theirs, ours = results

    def words(text: str) -> str:
        return as_fdkit(text).replace("../cp", "../fdkit")

    theirs = Outcome(theirs.code, words(theirs.stdout), words(theirs.stderr), theirs.tree)
    if change is not None:

        def given(text: str | None, otherwise: str) -> str:
            return otherwise if text is None else text.replace("@", "../fdkit")

        theirs = replace(
            theirs,
            code=theirs.code if change.code is None else change.code,
            stdout=given(change.stdout, theirs.stdout),
            stderr=given(change.stderr, theirs.stderr),
            note=change.reason,
        )
    return theirs, ours


def assert_same(theirs: Outcome, ours: Outcome) -> None:
    """``ours == theirs``, failing with what differs: the words first, then each entry of the
    trees that differs."""
    amended = f" ({theirs.note}: its outcome amended)" if theirs.note else ""
    for what in ("code", "stdout", "stderr"):
        mine, want = getattr(ours, what), getattr(theirs, what)
        assert mine == want, f"{what}: fdkit {mine!r} != cp {want!r}{amended}"
    differ = {
        name: (theirs.tree.get(name), ours.tree.get(name))
        for name in sorted(set(theirs.tree) | set(ours.tree))
        if theirs.tree.get(name) != ours.tree.get(name)
    }
    assert not differ, f"entries that differ (cp's{amended}, fdkit's):\n" + "\n".join(
        f"  {name}: {pair[0]!r:.300}\n  {' ' * len(name)}  {pair[1]!r:.300}"
        for name, pair in differ.items()
    )
