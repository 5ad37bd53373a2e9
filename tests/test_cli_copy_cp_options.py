"""`fdkit copy` with GNU cp as the oracle, one command line for each option of `cp --help`
but the SELinux ones: each runs cp and fdkit on the same sources and destinations and
compares the tree they leave (contents, modes, times, owners, symlink targets, shared inodes,
backups, extended attributes), their stdout, their stderr (the program's name aside) and their
exit status; also the mistakes on the command line cp refuses, the environment cp reads
(VERSION_CONTROL, SIMPLE_BACKUP_SUFFIX, POSIXLY_CORRECT), -i's prompts, and -x at a mount
point. Then fdkit's own options: --debug, --log, --help, and the options cp lacks, which never
make one of cp's abbreviations ambiguous.

fdkit copy does as cp 9.10 does. A case whose outcome a later cp changed names the change
(:class:`helpers.cp_oracle.Since`): with an older cp here, fdkit is compared with that cp's
outcome amended by the change, given explicitly; with cp 9.10, with cp's own.

Whole trees are in test_cli_copy_cp_trees.py, destinations already there in
test_cli_copy_cp_destinations.py; what they share is in helpers/cli_copy_cp.py."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import socket
import stat
import subprocess
from pathlib import Path
from typing import cast

import pytest

from helpers.cli_copy_cp import (
    CP,
    DECLINED,
    FDKIT,
    FILE_OVER_DIRECTORY,
    T_NEW,
    T_OLD,
    T_SRC,
    as_nobody,
    cp,
    run,
    shared_dir_fixture,  # noqa: F401  (the fixture shared_dir)
    snapshot,
    unshare_mount,
)
from helpers.cp_oracle import Since, assert_same, both

pytestmark = pytest.mark.skipif(CP is None, reason="no cp to compare with")


# --- every option of cp --help, one command line each -------------------------------------


def sources(root: Path) -> None:
    """What the command lines copy: files with modes, times and an extended attribute, a
    setuid file, symlinks (one dangling, one to a directory), a directory, a file with a block
    of zeros, a sparse file, a deep path for --parents."""
    (root / "f1").write_bytes(b"one\n")
    (root / "f1").chmod(0o640)
    with contextlib.suppress(OSError):
        os.setxattr(root / "f1", "user.fdkit", b"from f1")
    (root / "f2").write_bytes(b"two two\n")
    (root / "f2").chmod(0o604)
    (root / "exe").write_bytes(b"#!/bin/sh\n")
    (root / "exe").chmod(0o4755)
    (root / "lf").symlink_to("f1")
    (root / "dang").symlink_to("nowhere")
    (root / "d" / "sub").mkdir(parents=True)
    (root / "d" / "f1").write_bytes(b"d's one\n")
    (root / "d" / "sub" / "g").write_bytes(b"g\n")
    with contextlib.suppress(PermissionError):
        os.mknod(root / "d" / "null", stat.S_IFCHR | 0o644, os.makedev(1, 3))
    (root / "ld").symlink_to("d")
    (root / "zeros").write_bytes(b"z" * 5000 + bytes(64 << 10) + b"z")
    with (root / "sparse").open("wb") as f:
        f.write(b"data")
        f.truncate(4 << 20)
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "a" / "b" / "c" / "file").write_bytes(b"deep\n")
    (root / "a" / "b").chmod(0o750)
    for name in ("f1", "exe", "zeros", "sparse", "a/b/c/file"):
        os.utime(root / name, ns=(T_SRC, T_SRC))
    os.utime(root / "f2", ns=(T_OLD, T_OLD))
    for name in ("d/sub", "d", "a/b/c", "a/b", "a"):
        os.utime(root / name, ns=(T_SRC, T_SRC))


def destinations(root: Path) -> None:
    """What is there before: a file with a second hard link, a read-only file, files newer
    and older than the sources, a directory, a socket, a dangling symlink, a symlink to a
    file, a symlink to the directory, a set-group-ID directory, an earlier numbered backup."""
    (root / "old").write_bytes(b"old contents, longer than the new\n")
    (root / "old").chmod(0o600)
    os.link(root / "old", root / "old-link")
    (root / "ro").write_bytes(b"read-only\n")
    (root / "ro").chmod(0o444)
    (root / "newer").write_bytes(b"newer\n")
    os.utime(root / "newer", ns=(T_NEW, T_NEW))
    (root / "older").write_bytes(b"older\n")
    os.utime(root / "older", ns=(T_OLD, T_OLD))
    (root / "dir").mkdir()
    (root / "dir" / "f1").write_bytes(b"dir's f1\n")
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(root / "sock"))
    s.close()
    (root / "dang2").symlink_to("nowhere")
    (root / "to-old").symlink_to("old")
    (root / "dir-link").symlink_to("dir")
    (root / "sgid").mkdir()
    (root / "sgid").chmod(0o2755)
    (root / "numbered").write_bytes(b"numbered\n")
    (root / "numbered.~3~").write_bytes(b"an earlier backup\n")


#: Command lines run by cp and fdkit copy on the trees above (``@``: the destination tree),
#: with what they read on stdin and the environment they get.
COMMAND_LINES: list[tuple[str, ...]] = [
    # In place: the other hard link sees the new bytes, the mode stays.
    ("f1", "@/old"),
    ("-v", "f1", "@/old"),
    ("f1", "@/to-old"),
    ("f2", "@/ro"),
    ("f1", "f2", "exe", "@/dir"),
    # -p, --preserve, --no-preserve
    ("-p", "f1", "@/new"),
    ("-p", "f1", "@/old"),
    ("-p", "exe", "@/new"),
    ("--preserve", "f1", "@/old"),
    ("--preserve=mode", "exe", "@/new"),
    ("--preserve=timestamps", "f1", "@/new"),
    ("--preserve=ownership", "f1", "@/new"),
    ("--preserve=xattr", "f1", "@/new"),
    ("--preserve=links", "f1", "@/new"),
    ("--preserve=all", "f1", "@/old"),
    ("--preserve=mode,timestamps", "f1", "@/new"),
    ("--no-preserve=mode", "exe", "@/new"),
    ("-r", "--no-preserve=mode", "d", "@/sgid"),  # new directories keep set-group-ID
    ("-a", "--no-preserve=timestamps", "f1", "@/new"),
    ("-a", "--no-preserve=all", "f1", "@/new"),
    ("-a", "f1", "exe", "lf", "dang", "@/dir"),
    # -f, -n, -i, -u
    ("-f", "f1", "@/sock"),
    ("f1", "@/sock"),
    ("-vf", "f1", "@/ro"),
    ("-n", "f1", "@/old"),
    ("-n", "-v", "f1", "@/new"),
    ("-u", "f1", "@/newer"),
    ("-uv", "f1", "@/older"),
    ("-u", "f1", "@/new"),
    ("-ni", "f1", "@/old"),
    ("-in", "f1", "@/old"),
    # -t, -T
    ("-t", "@/dir", "f1", "f2"),
    ("-vt@/dir", "f1"),
    ("--target-directory=@/dir", "f1"),
    ("-t", "@/nope", "f1"),
    ("-t", "@/old", "f1"),
    ("-T", "f1", "@/dir"),
    ("-T", "f1", "@/new"),
    ("-rT", "d", "@/dir"),
    ("-rvT", "d", "@/new"),
    ("-t", "@/dir", "-T", "f1"),
    ("-t", "@/dir", "-t", "@/dir", "f1"),
    ("-T", "f1", "f2", "@/new"),
    # -l, -s
    ("-l", "f1", "@/new"),
    ("-lv", "f1", "@/old"),
    ("-lf", "f1", "@/old"),
    ("-rl", "d", "@/new"),
    ("-s", "f1", "@/sym"),
    ("-sv", "f1", "f2", "@/dir"),
    # -L, -P, -H, -d
    ("lf", "@/new"),
    ("-L", "lf", "@/new"),
    ("-P", "lf", "@/new"),
    ("-d", "lf", "@/new"),
    ("-dv", "lf", "@/old"),
    ("-P", "dang", "@/new"),
    ("dang", "@/new"),
    ("-r", "ld", "@/new"),
    ("-rH", "ld", "@/new"),
    ("-rL", "ld", "@/new"),
    # -x, --copy-contents, --strip-trailing-slashes
    ("-rx", "d", "@/new"),
    ("-r", "--copy-contents", "d", "@/new"),
    ("-r", "d/", "@/new"),
    ("-rv", "--strip-trailing-slashes", "d///", "@/dir"),
    # --parents
    ("--parents", "-v", "a/b/c/file", "@/dir"),
    ("--parents", "-p", "a/b/c/file", "@/dir"),
    ("--parents", "-rv", "a/b", "@/dir"),
    ("--parents", "a/b/c/file", "@/old"),
    ("--parents", "a/b/c/file", "@/nope"),
    ("--path", "f1", "@/dir"),
    # --remove-destination
    ("--remove-destination", "-v", "f1", "@/old"),
    ("--remove-destination", "f1", "@/dang2"),
    # -b, --backup, -S, --suffix
    ("-b", "-v", "f1", "@/old"),
    ("-b", "f1", "@/numbered"),
    ("--backup=numbered", "-v", "f1", "@/old"),
    ("--backup=t", "f1", "@/numbered"),
    ("--backup=existing", "-v", "f1", "@/numbered"),
    ("--backup=nil", "f1", "@/old"),
    ("--backup=simple", "f1", "@/old"),
    ("--backup=never", "f1", "@/numbered"),
    ("--backup=off", "f1", "@/old"),
    ("--backup=none", "-v", "f1", "@/old"),
    ("--backup=nu", "f1", "@/old"),
    ("-S", ".bak", "-v", "f1", "@/old"),
    ("--suffix=.orig", "f1", "@/old"),
    ("-S", "a/b", "f1", "@/old"),
    ("-bv", "f1", "f2", "@/dir"),
    ("-fb", "@/old", "@/old"),
    ("-fbv", "--backup=numbered", "@/numbered", "@/numbered"),
    # --sparse, --reflink, --attributes-only
    ("--sparse=always", "zeros", "@/new"),
    ("--sparse=auto", "sparse", "@/new"),
    ("--sparse=never", "sparse", "@/new"),
    ("--sparse=al", "sparse", "@/new"),
    ("--reflink=auto", "f1", "@/old"),
    ("--reflink=never", "f1", "@/old"),
    ("--attributes-only", "f1", "@/new"),
    ("--attributes-only", "-p", "f1", "@/old"),
    ("--attributes-only", "--preserve=xattr", "f1", "@/old"),
    # the same file, symlinks at the destination
    ("@/old", "@/old"),
    ("@/old", "@/old-link"),
    ("@/old", "@/to-old"),
    ("f1", "@/dang2"),
    ("-f", "f1", "@/dang2"),
    # several sources, and a source named twice
    ("f1", "f1", "./f1", "@/dir"),
    ("f1", "f2", "@/old"),
    ("d", "f1", "@/dir"),
    ("-r", "d", "f1", "d", "@/dir"),
    # mistakes, with cp's words and exit status 1
    ("-k", "f1", "@/new"),
    ("--bogus", "f1", "@/new"),
    ("--bogus=1", "f1", "@/new"),
    ("--re", "f1", "@/new"),
    ("--v", "f1", "@/new"),
    ("--rec", "f1", "@/new"),
    ("--recursive=yes", "f1", "@/new"),
    ("-S",),
    ("--suffix",),
    ("--backup=foo", "f1", "@/new"),
    ("--backup=n", "f1", "@/new"),
    ("--preserve=foo", "f1", "@/new"),
    ("--preserve=mode,foo", "f1", "@/new"),
    ("--no-preserve", "f1", "@/new"),
    ("--sparse=foo", "f1", "@/new"),
    ("--sparse", "f1", "@/new"),
    ("--reflink=maybe", "f1", "@/new"),
    (),
    ("f1",),
    ("-ls", "f1", "@/new"),
    ("-nb", "f1", "@/new"),
    ("--reflink", "--sparse=never", "f1", "@/new"),
    ("--preserve=context", "f1", "@/new"),
    ("--", "-v", "@/new"),
    # later cp's: --update=WHEN apart from -i and -n, --debug's "skipped" lines, --backup
    # between a file and a directory, --keep-directory-symlink (see CHANGED)
    ("--update", "f1", "@/older"),
    ("--update=all", "f1", "@/newer"),
    ("--update=older", "f1", "@/newer"),
    ("--update=older", "-v", "f1", "@/older"),
    ("--update=none", "f1", "@/old"),
    ("--update=none-fail", "f1", "@/old"),
    ("--update=none-fail", "f1", "@/new"),
    ("--update=none", "-i", "f1", "@/old"),
    ("-i", "--update=none-fail", "f1", "@/old"),
    ("-n", "--update=all", "f1", "@/old"),
    ("-u", "-n", "f1", "@/older"),
    ("--update=no", "f1", "@/new"),
    ("--update=sometimes", "f1", "@/new"),
    ("-b", "--update=none", "f1", "@/new"),
    ("-uv", "f1", "@/newer"),
    ("--debug", "-u", "f1", "@/newer"),
    ("--debug", "-n", "f1", "@/old"),
    ("--debug", "-i", "f1", "@/old"),
    ("--d", "f1", "@/new"),
    ("-bT", "f1", "@/dir"),
    ("-rT", "d", "@/old"),
    ("-rT", "--copy-contents", "d", "@/dir-link"),
    ("-rT", "--keep-directory-symlink", "d", "@/dir-link"),
    ("-rT", "--copy-contents", "--keep-directory-symlink", "d", "@/dir-link"),
    ("--k", "f1", "@/new"),
]

_TRY = "Try 'fdkit copy --help' for more information.\n"
_UPDATE_WORDS = "Valid arguments are:\n  - 'all'\n  - 'none'\n  - 'none-fail'\n  - 'older'\n"
_NOT_REPLACING = "fdkit copy: not replacing '@/old'\n"
_UPDATE = "--update apart from -i and -n"

#: The command lines whose outcome changed after cp 9.1, each with its change (the cp version,
#: what changed, and with an older cp here what fdkit does instead: see ``Since``).
CHANGED: dict[tuple[str, ...], Since] = {
    ("-ni", "f1", "@/old"): DECLINED,
    ("-T", "f1", "@/dir"): dataclasses.replace(
        FILE_OVER_DIRECTORY,
        stderr="fdkit copy: cannot overwrite directory '@/dir' with non-directory 'f1'\n",
    ),
    ("-nb", "f1", "@/new"): Since(
        (9, 5),
        "words for --backup with -n",
        stderr="fdkit copy: --backup is mutually exclusive with -n or --update=none-fail\n" + _TRY,
    ),
    ("--update=all", "f1", "@/newer"): Since((9, 3), "--update=WHEN", older=("f1", "@/newer")),
    ("--update=older", "f1", "@/newer"): Since(
        (9, 3), "--update=WHEN", older=("-u", "f1", "@/newer")
    ),
    ("--update=older", "-v", "f1", "@/older"): Since(
        (9, 3), "--update=WHEN", older=("-uv", "f1", "@/older")
    ),
    ("--update=none", "f1", "@/old"): Since((9, 3), "--update=none", older=("-n", "f1", "@/old")),
    ("--update=none-fail", "f1", "@/old"): Since(
        (9, 6), "--update=none-fail", older=("-n", "f1", "@/old"), code=1, stderr=_NOT_REPLACING
    ),
    ("--update=none-fail", "f1", "@/new"): Since(
        (9, 6), "--update=none-fail", older=("f1", "@/new")
    ),
    ("--update=none", "-i", "f1", "@/old"): Since((9, 6), _UPDATE, older=("-n", "f1", "@/old")),
    ("-i", "--update=none-fail", "f1", "@/old"): Since(
        (9, 6), _UPDATE, older=("-n", "f1", "@/old"), code=1, stderr=_NOT_REPLACING
    ),
    ("-n", "--update=all", "f1", "@/old"): Since((9, 6), _UPDATE, older=("-n", "f1", "@/old")),
    # Refused, as an option cp 9.1 lacks (-k) is: the tree stays.
    ("--update=no", "f1", "@/new"): Since(
        (9, 6),
        "--update=none-fail, which makes --update=no ambiguous",
        older=("-k", "f1", "@/new"),
        stderr="fdkit copy: ambiguous argument 'no' for '--update'\n" + _UPDATE_WORDS + _TRY,
    ),
    ("--update=sometimes", "f1", "@/new"): Since(
        (9, 6),
        "--update=WHEN's words",
        older=("-k", "f1", "@/new"),
        stderr="fdkit copy: invalid argument 'sometimes' for '--update'\n" + _UPDATE_WORDS + _TRY,
    ),
    ("-b", "--update=none", "f1", "@/new"): Since(
        (9, 5),
        "words for --backup with --update=none",
        older=("-k", "f1", "@/new"),
        stderr="fdkit copy: --backup is mutually exclusive with -n or --update=none-fail\n" + _TRY,
    ),
    ("--debug", "-u", "f1", "@/newer"): Since(
        (9, 3),
        "'skipped' line of --debug",
        older=("-u", "f1", "@/newer"),
        stdout="skipped '@/newer'\n",
    ),
    ("--debug", "-n", "f1", "@/old"): Since(
        (9, 5),
        "'skipped' line of --debug for -n",
        older=("-n", "f1", "@/old"),
        stdout="skipped '@/old'\n",
    ),
    ("--debug", "-i", "f1", "@/old"): Since(
        (9, 3),
        "'skipped' line of --debug",
        older=("-i", "f1", "@/old"),
        code=1,
        stdout="skipped '@/old'\n",
    ),
    ("--d", "f1", "@/new"): Since(
        (9, 2),
        "--debug, which makes --d ambiguous",
        older=("-k", "f1", "@/new"),
        stderr="fdkit copy: option '--d' is ambiguous; possibilities: '--debug' '--dereference'\n"
        + _TRY,
    ),
    ("-bT", "f1", "@/dir"): Since(
        (9, 5),
        "--backup letting a file over a directory through to open(2)",
        stderr="fdkit copy: cannot create regular file '@/dir': Is a directory\n",
    ),
    ("-rT", "--keep-directory-symlink", "d", "@/dir-link"): Since(
        (9, 5), "--keep-directory-symlink", older=("-rT", "d", "@/dir-link")
    ),
    ("-rT", "--copy-contents", "--keep-directory-symlink", "d", "@/dir-link"): Since(
        (9, 5), "--keep-directory-symlink", older=("-rT", "--copy-contents", "d", "@/dir")
    ),
    ("--k", "f1", "@/new"): Since((9, 5), "--keep-directory-symlink", older=("f1", "@/new")),
}


def test_each_changed_case_is_a_command_line() -> None:
    assert set(CHANGED) <= set(COMMAND_LINES)


@pytest.mark.parametrize("args", COMMAND_LINES, ids=lambda a: " ".join(a) or "(none)")
def test_command_line_as_cp(tmp_path: Path, args: tuple[str, ...]) -> None:
    since = CHANGED.get(args)
    theirs, ours = both(tmp_path, sources, *args, dest=destinations, owners=True, since=since)
    assert_same(theirs, ours)


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (("-b", "f1", "@/old"), {"VERSION_CONTROL": "numbered"}),
        (("--backup", "f1", "@/numbered"), {"VERSION_CONTROL": "never"}),
        (("--backup", "f1", "@/old"), {"VERSION_CONTROL": "bogus"}),
        (("--backup=simple", "f1", "@/old"), {"VERSION_CONTROL": "bogus"}),
        (("-b", "f1", "@/old"), {"SIMPLE_BACKUP_SUFFIX": ".was"}),
        (("-b", "-S", ".bak", "f1", "@/old"), {"SIMPLE_BACKUP_SUFFIX": ".was"}),
        (("f1", "@/dang2"), {"POSIXLY_CORRECT": "1"}),
        (("f1", "@/new", "-v"), {"POSIXLY_CORRECT": "1"}),
    ],
    ids=lambda v: (
        " ".join(v) if isinstance(v, tuple) else ",".join(f"{k}={x}" for k, x in v.items())
    ),
)
def test_environment_as_cp(tmp_path: Path, args: tuple[str, ...], env: dict[str, str]) -> None:
    """VERSION_CONTROL, SIMPLE_BACKUP_SUFFIX, POSIXLY_CORRECT (options after the operands
    are operands; a dangling symlink destination is written through)."""
    theirs, ours = both(tmp_path, sources, *args, dest=destinations, env=env)
    assert_same(theirs, ours)


@pytest.mark.parametrize(
    ("args", "answer"),
    [
        (("-i", "f1", "@/old"), "y\n"),
        (("-i", "f1", "@/old"), "n\n"),
        (("-i", "f1", "@/ro"), "y\n"),
        (("-iv", "--backup=numbered", "f1", "@/numbered"), "y\n"),
        (("-ri", "d", "@/dir"), "y\ny\n"),
        (("-i", "-l", "f1", "@/old"), "y\n"),
        (("-i", "-s", "f1", "@/old"), "y\n"),
        (("-if", "f1", "@/sock"), "y\n"),
        (("-iu", "f1", "@/older"), "y\n"),
        (("-iu", "f1", "@/newer"), "y\n"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else v.strip(),
)
def test_interactive_as_cp(tmp_path: Path, args: tuple[str, ...], answer: str) -> None:
    since = DECLINED if answer == "n\n" else None
    theirs, ours = both(tmp_path, sources, *args, dest=destinations, stdin=answer, since=since)
    assert_same(theirs, ours)


def test_an_unwritable_file_prompts_as_cp_for_a_user(shared_dir: Path) -> None:
    """cp -i names the mode of a file its user may not write ("unwritable 'ro' (mode 0444,
    r--r--r--); try anyway?"; with -f "replace ... overriding mode"); root writes any file.
    Declined, the file stays and the status is 1."""
    prefix = as_nobody()
    for flags in (("-i",), ("-if",)):
        for d in ("cp", "fdkit"):
            (shared_dir / d).mkdir()
            (shared_dir / d / "ro").write_bytes(b"read-only\n")
            (shared_dir / d / "ro").chmod(0o444)
            (shared_dir / d / "new").write_bytes(b"new\n")
            if prefix:
                for p in (shared_dir / d, shared_dir / d / "ro", shared_dir / d / "new"):
                    os.chown(p, 65534, 65534)
        want = cp(*flags, "new", "ro", cwd=shared_dir / "cp", stdin="n\n", prefix=prefix)
        got = run(*flags, "new", "ro", cwd=shared_dir / "fdkit", stdin="n\n", prefix=prefix)
        assert got.returncode == 1  # declined
        if not DECLINED.predated:
            assert got.returncode == want.returncode
        assert got.stdout == want.stdout
        assert got.stderr.replace("fdkit copy: ", "cp: ") == want.stderr
        assert "(mode 0444, r--r--r--)" in got.stderr or "overriding mode 0444" in got.stderr
        shutil.rmtree(shared_dir / "cp")
        shutil.rmtree(shared_dir / "fdkit")


def test_backup_lets_a_directory_replace_a_file_as_cp(tmp_path: Path) -> None:
    """`cp -rb DIR FILE` backs FILE up and makes DIR in its place (cp 9.5; before, a directory
    never replaced a file). With an older cp here, fdkit's tree is compared with the tree of
    cp's copy of DIR to a new name, that name and FILE's then renamed as cp 9.10 leaves them:
    DIR where FILE was, FILE at its backup name (the same inode as its other hard link)."""
    since = Since((9, 5), "--backup letting a directory replace a file")
    (tmp_path / "a").mkdir()
    theirs, ours = both(tmp_path / "a", sources, "-rb", "d", "@/old", dest=destinations)
    if since.predated:
        (tmp_path / "b").mkdir()
        made, _ = both(tmp_path / "b", sources, "-r", "d", "@/new", dest=destinations)
        names = {"old": "old~", "new": "old"}

        def moved(name: str) -> str:
            head, sep, tail = name.partition("/")
            return names.get(head, head) + sep + tail

        tree = {}
        for name, row in made.tree.items():
            linked = cast("tuple[str, ...]", row[-1])  # the names of its inode, last
            tree[moved(name)] = (*row[:-1], tuple(sorted(map(moved, linked))))
        theirs = dataclasses.replace(made, tree=tree, note=since.reason)
    assert_same(theirs, ours)
    assert (ours.code, ours.stdout, ours.stderr) == (0, "", "")
    assert ours.tree["old"][0] == stat.S_IFDIR
    assert ours.tree["old/sub/g"][2] == (b"g\n", False)
    assert ours.tree["old~"][2] == (b"old contents, longer than the new\n", False)
    assert ours.tree["old~"][-1] == ("old-link", "old~")


def test_parents_p_with_an_absolute_source_as_cp(tmp_path: Path) -> None:
    """`cp --parents -p /ABS/a/b/f DIR` makes DIR/ABS/a/b with the modes and times of the
    directories on the way (cp 9.4; cp 9.1 fails: "'ABS/a/b': No such file or directory")."""
    since = Since((9, 4), "--parents -p with an absolute source")
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "f").write_bytes(b"f\n")
    (src / "a").chmod(0o750)
    os.utime(src / "a", ns=(T_OLD, T_OLD))
    results = {}
    for who, program in (("cp", cp), ("fdkit", run)):
        (tmp_path / who).mkdir()
        results[who] = program("--parents", "-p", str(src / "a" / "b" / "f"), who, cwd=tmp_path)
    got = results["fdkit"]
    assert (got.returncode, got.stdout, got.stderr) == (0, "", "")
    # Below tmp_path: the directories above it change as other tests run.
    made = {who: snapshot(tmp_path / who / str(src)[1:], times=True) for who in results}
    assert made["fdkit"]["a"][:2] == (stat.S_IFDIR, 0o750)
    assert made["fdkit"]["a"][3] == T_OLD
    assert made["fdkit"]["a/b/f"][2] == (b"f\n", False)
    if not since.predated:
        want = results["cp"]
        assert (got.returncode, got.stdout) == (want.returncode, want.stdout)
        assert got.stderr == want.stderr
        assert made["fdkit"] == made["cp"]


# --- fdkit's own: --debug, -q, --log, --help; and -x --------------------------------------


def test_debug_says_how_each_file_was_copied(tmp_path: Path) -> None:
    """--debug (cp 9.2's) implies -v and adds cp's line for each file."""
    (tmp_path / "src").write_bytes(b"x" * 10_000)
    with (tmp_path / "sparse").open("wb") as f:
        f.write(b"x")
        f.truncate(1 << 20)
    r = run("--debug", "src", "sparse", "--reflink=never", "dir", cwd=tmp_path)
    assert r.returncode == 1  # dir does not exist: a usage error, nothing copied
    (tmp_path / "dir").mkdir()
    r = run("--debug", "--reflink=never", "src", "sparse", "dir", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "'src' -> 'dir/src'",
        "copy offload: yes, reflink: no, sparse detection: no",
        "'sparse' -> 'dir/sparse'",
        "copy offload: yes, reflink: no, sparse detection: SEEK_HOLE",
    ]
    assert r.stderr == ""


def test_log_lines_go_to_stderr_time_stamped_never_into_verbose_stdout(tmp_path: Path) -> None:
    (tmp_path / "src").write_bytes(b"x" * 100_000)
    r = run("-v", "--log", "src", "dst", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "'src' -> 'dst'\n"
    lines = r.stderr.splitlines()
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d fdkit copy: "
    assert re.fullmatch(stamp + r"copying 'src' \(97\.7 KiB\) to 'dst' \(new file\)", lines[0])
    assert re.fullmatch(stamp + r"copied 97\.7 KiB in \d+\.\d{3} s \(.+/s\) via \w+", lines[-1])
    plain = run("-v", "src", "dst", cwd=tmp_path)
    assert (plain.stdout, plain.stderr) == ("'src' -> 'dst'\n", "")
    again = run("--log", "src", "dst", cwd=tmp_path)
    assert "(regular file, written in place)" in again.stderr


def test_help_and_version(tmp_path: Path) -> None:
    r = run("--help")
    assert r.returncode == 0
    assert r.stdout.startswith("Usage: fdkit copy [OPTION]... [-T] SOURCE DEST\n")
    cp_help = subprocess.run(
        ["cp", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "LC_ALL": "C"},
        check=False,
    ).stdout
    # cp 9.10 marks each option up (a hyperlink to its manual, bold) even into a pipe.
    cp_help = re.sub(r"\x1b\]8;;[^\x1b]*\x1b\\|\x1b\[[0-9;]*m", "", cp_help)
    # Every option cp lists, but the SELinux ones, is listed in fdkit's help.
    options = []
    for line in cp_help.splitlines():
        m = re.match(r" {2,6}(-\w)?(?:, )?(--[\w-]+(?:\[?=[\w_]+\]?)?)?", line)
        if m:
            options += [o for o in m.groups() if o and o not in ("-Z", "--context[=CTX]")]
    assert "--reflink[=WHEN]" in options
    for option in options:
        assert re.search(rf"^ +(-\w, )?{re.escape(option)}", r.stdout, re.M), option
    for own in ("--atomic", "--log", "-q, --quiet", "--debug", "--update[=UPDATE]"):
        assert re.search(rf"^ +{re.escape(own)}$", r.stdout, re.M), own
    for later in ("--keep-directory-symlink", "UPDATE={all,none,none-fail,older(default)}"):
        assert later in r.stdout
    v = run("--version")
    assert v.returncode == 0
    assert v.stdout.startswith("fdkit copy (fdkit) ")
    # --help wins over what follows it, as getopt reads one option at a time.
    assert run("--help", "--bogus").returncode == 0
    assert run("--bogus", "--help").returncode == 1


def test_options_cp_lacks_are_never_abbreviated(tmp_path: Path) -> None:
    """--at is cp's --attributes-only, --l its --link: fdkit's --atomic and --log do not make
    them ambiguous (--d is, between cp's --debug and --dereference)."""
    (tmp_path / "f").write_bytes(b"f\n")
    for abbrev, want in (("--at", b""), ("--l", b"f\n"), ("--deb", b"f\n")):
        r = run(abbrev, "f", f"g{abbrev}", cwd=tmp_path)
        assert r.returncode == 0, (abbrev, r.stderr)
        assert (tmp_path / f"g{abbrev}").read_bytes() == want
    assert os.stat(tmp_path / "g--l").st_ino == os.stat(tmp_path / "f").st_ino
    r = run("--atom", "f", "h", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.splitlines()[0] == "fdkit copy: unrecognized option '--atom'"


def test_one_file_system_makes_a_mount_point_and_does_not_enter_it(tmp_path: Path) -> None:
    """-x: a directory on another filesystem is made (empty), not copied into, as cp makes
    it. A tmpfs mounted inside the source, in a private mount namespace."""
    prefix = unshare_mount()
    src = tmp_path / "src"
    (src / "mnt").mkdir(parents=True)
    (src / "here").write_bytes(b"on this filesystem\n")
    script = (
        "mount -t tmpfs fdkit-x src/mnt && echo elsewhere > src/mnt/there && "
        'cp -rvx src cp && "$0" copy -rvx src fdkit'
    )
    r = subprocess.run(
        [*prefix, "sh", "-c", script, FDKIT],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "LC_ALL": "C"},
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    half = len(lines) // 2
    assert [line.replace("'fdkit", "'cp") for line in lines[half:]] == lines[:half]
    for out in ("cp", "fdkit"):
        assert sorted(os.listdir(tmp_path / out)) == ["here", "mnt"]
        assert os.listdir(tmp_path / out / "mnt") == []
