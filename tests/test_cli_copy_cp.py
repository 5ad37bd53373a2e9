"""`fdkit copy` with GNU cp as the oracle: each test runs cp and fdkit with the same command
line on the same tree and compares what they made (contents, modes, times, symlink targets,
link counts and shared inodes, special files, holes, backups, extended attributes), their
stdout, their stderr (the program's name aside) and their exit status: every option of `cp
--help` but the SELinux ones, the mistakes cp refuses, and the destinations where writing in
place matters (a bind mount, a writable file in a directory the user cannot write, a file with
other hard links).

fdkit copy does as cp 9.10 does. A case whose outcome a later cp changed names the change
(:class:`helpers.cp_oracle.Since`): with an older cp here, fdkit is compared with that cp's
outcome amended by the change, given explicitly; with cp 9.10, with cp's own.

Also the sizes the kernel reports wrongly: sysfs and procfs files are copied by reading to the
end, never sized by stat (a sysfs attribute says 4096 bytes in no blocks and holds a few)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pty
import random
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from helpers.cp_oracle import Since, assert_same, both

FDKIT = shutil.which("fdkit", path=os.path.dirname(sys.executable)) or "fdkit"
CP = shutil.which("cp")

pytestmark = pytest.mark.skipif(CP is None, reason="no cp to compare with")


#: A declined ``-i`` prompt fails (status 1) from cp 9.2; cp 9.1 exits 0.
DECLINED = Since((9, 2), "exit status 1 for a declined -i prompt", code=1)

#: ``--reflink=always`` removes the destination it made and could not clone into from cp 9.2;
#: cp 9.1 leaves it empty.
UNCLONED = Since((9, 2), "removal of a destination --reflink=always made but could not clone")

#: cp 9.5 names the source too: "cannot overwrite directory 'd' with non-directory 'f'".
FILE_OVER_DIRECTORY = Since((9, 5), "naming the file that cannot overwrite a directory")


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


def make_tree(root: Path) -> Path:
    """A tree with every kind of entry cp -r knows, the same bytes each time."""
    src = root / "src"
    (src / "sub" / "deeper").mkdir(parents=True)
    (src / "a.txt").write_bytes(b"alpha\n")
    (src / "a.txt").chmod(0o640)
    (src / "empty").write_bytes(b"")
    (src / "sub" / "b.bin").write_bytes(random.Random(25).randbytes(200_000))
    # A block of zeros between data: a hole with --sparse=always.
    (src / "zeros").write_bytes(b"z" * 5000 + bytes(64 << 10) + b"z")
    (src / "sub" / "deeper" / "c").write_bytes(b"c" * 10)
    os.link(src / "a.txt", src / "sub" / "a-hardlink")
    (src / "link").symlink_to("a.txt")
    (src / "sub" / "uplink").symlink_to("../a.txt")
    (src / "dangling").symlink_to("nowhere")
    (src / "dirlink").symlink_to("sub")
    os.mkfifo(src / "fifo", 0o600)
    with (src / "sparse").open("wb") as f:  # data, then a hole to the end
        f.write(b"head")
        f.truncate(8 << 20)
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(src / "sock"))
    s.close()
    with contextlib.suppress(PermissionError):
        os.mknod(src / "nulldev", stat.S_IFCHR | 0o644, os.makedev(1, 3))
    with contextlib.suppress(OSError):  # kept by -a and --preserve=xattr
        os.setxattr(src / "a.txt", "user.fdkit", b"kept")
    (src / "sub" / "deeper").chmod(0o750)
    (src / "sub").chmod(0o755)
    os.utime(src / "a.txt", ns=(1_000_000_000_123_456_789, 1_100_000_000_987_654_321))
    os.utime(src / "sub" / "deeper", ns=(1_000_000_000, 1_200_000_000_000_000_001))
    os.utime(src / "link", ns=(1_000_000_000, 1_300_000_000_000_000_000), follow_symlinks=False)
    return src


# --- the sizes stat gets wrong -----------------------------------------------------------


def sysfs_attribute() -> Path:
    """A readable sysfs file that says 4096 bytes in no blocks and holds fewer."""
    for path in (
        Path("/sys/kernel/mm/transparent_hugepage/enabled"),
        Path("/sys/kernel/mm/transparent_hugepage/defrag"),
        Path("/sys/power/state"),
        Path("/sys/kernel/uevent_seqnum"),
        Path("/sys/devices/system/cpu/online"),
    ):
        try:
            st = path.stat()
            content = path.read_bytes()
        except OSError:
            continue
        if st.st_size > len(content) and st.st_blocks == 0 and content:
            return path
    pytest.skip("no readable sysfs attribute with a stat size larger than its content")


def test_sysfs_file_copies_its_content_not_its_stat_size(tmp_path: Path) -> None:
    """It used to become 4096 bytes: the content and NULs to the stat size (the sparse path
    trusted st_blocks < st_size and truncated to st_size)."""
    src = sysfs_attribute()
    r = run(str(src), str(tmp_path / "fdkit"))
    assert r.returncode == 0, r.stderr
    assert cp(str(src), str(tmp_path / "cp")).returncode == 0
    got = (tmp_path / "fdkit").read_bytes()
    assert b"\0" not in got
    assert got == (tmp_path / "cp").read_bytes() == src.read_bytes()


@pytest.mark.parametrize("reflink", ["auto", "never"])
def test_procfs_files_copy_to_their_content(tmp_path: Path, reflink: str) -> None:
    for src in (Path("/proc/version"), Path("/proc/sys/kernel/ostype"), Path("/proc/self/limits")):
        try:
            want = src.read_bytes()
        except OSError:
            continue
        assert src.stat().st_size == 0
        dst = tmp_path / src.name
        r = run(f"--reflink={reflink}", str(src), str(dst))
        assert r.returncode == 0, r.stderr
        if src.name == "limits":  # the copier's own limits: the same as the test's here
            assert dst.read_bytes().splitlines()[0] == want.splitlines()[0]
        else:
            assert dst.read_bytes() == want


def test_sparse_file_with_a_hole_at_the_end_stays_that_long_and_sparse(tmp_path: Path) -> None:
    src = tmp_path / "sparse"
    with src.open("wb") as f:
        f.write(os.urandom(5000))
        f.truncate(16 << 20)
    if src.stat().st_blocks * 512 >= src.stat().st_size:
        pytest.skip("this filesystem does not keep holes")
    assert run(str(src), str(tmp_path / "fdkit")).returncode == 0
    assert cp(str(src), str(tmp_path / "cp")).returncode == 0
    for out in ("fdkit", "cp"):
        st = (tmp_path / out).stat()
        assert st.st_size == 16 << 20
        assert (tmp_path / out).read_bytes() == src.read_bytes()
    assert (tmp_path / "fdkit").stat().st_blocks <= (tmp_path / "cp").stat().st_blocks + 16


def test_a_file_that_grows_while_copied_does_not_hang(tmp_path: Path) -> None:
    src = tmp_path / "growing"
    src.write_bytes(os.urandom(8 << 20))
    stop = time.monotonic() + 1.5

    def grow() -> None:
        with src.open("ab") as f:
            while time.monotonic() < stop:
                f.write(os.urandom(64 << 10))
                f.flush()
                time.sleep(0.01)

    writer = threading.Thread(target=grow)
    writer.start()
    try:
        r = run(str(src), str(tmp_path / "copy"))
    finally:
        writer.join()
    assert r.returncode == 0, r.stderr
    got = (tmp_path / "copy").read_bytes()
    assert len(got) >= 8 << 20
    assert src.read_bytes().startswith(got)


# --- trees -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags",
    [
        ["-r"],
        ["-R", "--preserve=links"],
        ["-rv"],
        ["-a"],
        ["-av"],
        ["-dR"],
        ["-rP"],
        ["-rH"],
        ["-rl"],
        ["-rlP"],
        ["-rsv"],
        ["-rx"],
        ["-r", "--sparse=never"],
        ["-r", "--sparse=always"],
        ["-a", "--no-preserve=mode"],
        ["-r", "--attributes-only"],
        ["-a", "--attributes-only"],
        ["-rp"],
        ["-r", "--preserve=all"],
        ["-r", "--reflink=never"],
    ],
    ids=" ".join,
)
def test_recursive_tree_matches_cp(tmp_path: Path, flags: list[str]) -> None:
    """Every kind of entry, as cp makes it with the same flags: stdout line for line (both
    read the same directories, in inode order), stderr, the tree, the status."""
    theirs, ours = both(tmp_path, make_tree, *flags, "src", "@/dst")
    assert_same(theirs, ours)
    if flags == ["-r"]:
        assert ours.code == 0, ours.stderr
        assert ours.tree["dst/sparse"][2] == (b"head" + bytes((8 << 20) - 4), True)
        assert ours.tree["dst/fifo"][0] == stat.S_IFIFO
        assert ours.tree["dst/sock"][0] == stat.S_IFSOCK
        # Plain -r makes two files of two hard links, as cp -r does; -a keeps them linked.
        assert ours.tree["dst/sub/a-hardlink"][-1] == ("dst/sub/a-hardlink",)
    if flags == ["-a"]:
        assert ours.tree["dst/sub/a-hardlink"][-1] == ("dst/a.txt", "dst/sub/a-hardlink")
        assert ours.tree["dst/a.txt"][3] == (("user.fdkit", b"kept"),)


def test_recursive_tree_twice_merges_into_the_copy(tmp_path: Path) -> None:
    """The second `cp -r src dst` copies into dst/src: the same lines and trees again."""

    def dest(root: Path) -> None:
        make_tree(root / "prev")
        (root / "prev" / "src").rename(root / "dst")
        shutil.rmtree(root / "prev")

    theirs, ours = both(tmp_path, make_tree, "-rv", "src", "@/dst", dest=dest)
    assert_same(theirs, ours)
    assert "'src/a.txt' -> '../fdkit/dst/src/a.txt'" in ours.stdout.splitlines()


def test_recursive_with_p_keeps_times_modes_and_owners_as_cp(tmp_path: Path) -> None:
    def build(root: Path) -> None:
        src = make_tree(root)
        if os.geteuid() == 0:
            os.chown(src / "a.txt", 1234, 5678)
            os.chown(src / "link", 4321, 8765, follow_symlinks=False)

    theirs, ours = both(
        tmp_path, build, "-rp", "--preserve=links", "src", "@/dst", times=True, owners=True
    )
    assert_same(theirs, ours)
    assert ours.code == 0, ours.stderr
    dst = tmp_path / "fdkit" / "dst"
    a = os.lstat(dst / "a.txt")
    assert a.st_mtime_ns == 1_100_000_000_987_654_321
    assert stat.S_IMODE(a.st_mode) == 0o640
    assert os.lstat(dst / "link").st_mtime_ns == 1_300_000_000_000_000_000
    assert os.stat(dst / "sub" / "deeper").st_mtime_ns == 1_200_000_000_000_000_001
    if os.geteuid() == 0:
        assert (a.st_uid, a.st_gid) == (1234, 5678)


def test_into_an_existing_directory_and_merging(tmp_path: Path) -> None:
    def dest(root: Path) -> None:
        (root / "src" / "sub").mkdir(parents=True)
        (root / "src" / "sub" / "kept").write_bytes(b"was here")
        (root / "src" / "sub" / "b.bin").write_bytes(b"old, to be overwritten\n")
        (root / "src" / "sub" / "b.bin").chmod(0o600)

    theirs, ours = both(tmp_path, make_tree, "-rv", "src", "@", dest=dest)
    assert_same(theirs, ours)
    assert ours.code == 0, ours.stderr
    assert (tmp_path / "fdkit" / "src" / "sub" / "kept").read_bytes() == b"was here"
    assert stat.S_IMODE((tmp_path / "fdkit" / "src" / "sub" / "b.bin").stat().st_mode) == 0o600


def test_read_only_source_directory_is_copied_and_stays_read_only(tmp_path: Path) -> None:
    src = tmp_path / "ro"
    src.mkdir()
    (src / "f").write_bytes(b"x")
    src.chmod(0o555)
    try:
        want = cp("-r", str(src), str(tmp_path / "cp"))
        got = run("-r", str(src), str(tmp_path / "fdkit"))
        assert got.returncode == want.returncode == 0, got.stderr
        assert snapshot(tmp_path / "fdkit") == snapshot(tmp_path / "cp")
        assert stat.S_IMODE((tmp_path / "fdkit").stat().st_mode) == 0o555
    finally:
        for d in ("ro", "cp", "fdkit"):
            if (tmp_path / d).exists():
                (tmp_path / d).chmod(0o755)


def test_symlink_argument_followed_without_r_kept_with_r(tmp_path: Path) -> None:
    (tmp_path / "target").write_bytes(b"target bytes")
    (tmp_path / "link").symlink_to("target")
    for flags, out in (((), "plain"), (("-r",), "rec")):
        want = cp(*flags, "link", f"cp-{out}", cwd=tmp_path)
        got = run(*flags, "link", f"fdkit-{out}", cwd=tmp_path)
        assert got.returncode == want.returncode == 0, got.stderr
    assert (tmp_path / "fdkit-plain").read_bytes() == b"target bytes"
    assert not (tmp_path / "fdkit-plain").is_symlink()
    assert os.readlink(tmp_path / "fdkit-rec") == os.readlink(tmp_path / "cp-rec") == "target"


def test_special_files_without_r_are_read(tmp_path: Path) -> None:
    """/dev/null gives an empty file, as with cp; a socket cannot be opened."""
    want = cp("/dev/null", str(tmp_path / "cp-null"))
    got = run("/dev/null", str(tmp_path / "fdkit-null"))
    assert got.returncode == want.returncode == 0, got.stderr
    assert (tmp_path / "fdkit-null").read_bytes() == b""
    assert stat.S_ISREG((tmp_path / "fdkit-null").lstat().st_mode)
    assert stat.S_IMODE((tmp_path / "fdkit-null").stat().st_mode) == stat.S_IMODE(
        (tmp_path / "cp-null").stat().st_mode
    )
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(tmp_path / "sock"))
    s.close()
    want = cp("sock", "cp-sock", cwd=tmp_path)
    got = run("sock", "fdkit-sock", cwd=tmp_path)
    assert got.returncode == want.returncode == 1
    assert words(got, "fdkit copy: ") == words(want, "cp: ")
    assert words(got, "fdkit copy: ") == [
        "cannot open 'sock' for reading: No such device or address"
    ]


# --- several sources, and the errors cp names -------------------------------------------


def test_several_sources_into_a_directory(tmp_path: Path) -> None:
    for name in ("one", "two", "three"):
        (tmp_path / name).write_bytes(name.encode() * 100)
    for out in ("cp", "fdkit"):
        (tmp_path / out).mkdir()
    want = cp("one", "two", "three", "cp", cwd=tmp_path)
    got = run("one", "two", "three", "fdkit", cwd=tmp_path)
    assert got.returncode == want.returncode == 0, got.stderr
    assert snapshot(tmp_path / "fdkit") == snapshot(tmp_path / "cp")
    assert sorted(os.listdir(tmp_path / "fdkit")) == ["one", "three", "two"]


def test_a_source_named_twice_is_copied_once_with_cps_warning(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "d").mkdir()
    for out in ("cp", "fdkit"):
        (tmp_path / out).mkdir()
    args = ["-r", "a", "d", "./a", "d", "a"]
    want = cp(*args, "cp", cwd=tmp_path)
    got = run(*args, "fdkit", cwd=tmp_path)
    assert got.returncode == want.returncode == 0
    assert words(got, "fdkit copy: ") == words(want, "cp: ")
    assert words(got, "fdkit copy: ") == [
        "warning: source file './a' specified more than once",
        "warning: source directory 'd' specified more than once",
        "warning: source file 'a' specified more than once",
    ]
    assert snapshot(tmp_path / "fdkit") == snapshot(tmp_path / "cp")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["one", "two", "missing"], "target 'missing': No such file or directory"),
        (["one", "two", "one"], "target 'one': Not a directory"),
        (["one", "one"], "'one' and 'one' are the same file"),
        (["one", "."], "'one' and './one' are the same file"),
        (["nope", "x"], "cannot stat 'nope': No such file or directory"),
        (["dangling", "x"], "cannot stat 'dangling': No such file or directory"),
        (["-r", "dir", "dir"], "cannot copy a directory, 'dir', into itself, 'dir/dir'"),
        (["-r", "dir", "dir/sub"], "cannot copy a directory, 'dir', into itself, 'dir/sub/dir'"),
        (["-r", "dir", "one"], "cannot overwrite non-directory 'one' with directory 'dir'"),
        (["one", "hasdir"], "cannot overwrite directory 'hasdir/one' with non-directory 'one'"),
    ],
)
def test_errors_say_what_cp_says(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "one").write_bytes(b"1")
    (tmp_path / "two").write_bytes(b"2")
    (tmp_path / "dangling").symlink_to("nowhere")
    (tmp_path / "dir" / "sub").mkdir(parents=True)
    (tmp_path / "hasdir" / "one").mkdir(parents=True)
    before = snapshot(tmp_path)
    want = cp(*args, cwd=tmp_path)
    assert want.returncode == 1
    # What cp made (nothing, or for a directory into itself, whatever it got to) is undone.
    for rel in set(snapshot(tmp_path)) - set(before):
        p = tmp_path / rel
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        elif p.exists() or p.is_symlink():
            p.unlink()
    got = run(*args, cwd=tmp_path)
    assert got.returncode == 1
    ours = words(got, "fdkit copy: ")
    assert ours == [message], got.stderr
    if not (args == ["one", "hasdir"] and FILE_OVER_DIRECTORY.predated):
        assert ours == words(want, "cp: ")
    assert snapshot(tmp_path) == before


def test_a_directory_without_r_is_omitted_and_the_rest_copied(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "f").write_bytes(b"f")
    for out in ("cp", "fdkit"):
        (tmp_path / out).mkdir()
    want = cp("dir", "f", "cp", cwd=tmp_path)
    got = run("dir", "f", "fdkit", cwd=tmp_path)
    assert got.returncode == want.returncode == 1
    assert words(got, "fdkit copy: ") == words(want, "cp: ")
    assert words(got, "fdkit copy: ") == ["-r not specified; omitting directory 'dir'"]
    assert os.listdir(tmp_path / "fdkit") == os.listdir(tmp_path / "cp") == ["f"]


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


@pytest.fixture
def shared_dir(tmp_path: Path) -> Iterator[Path]:
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


def test_unreadable_files_mid_tree_are_named_and_the_rest_copied(shared_dir: Path) -> None:
    prefix = as_nobody()
    tmp_path = shared_dir
    src = tmp_path / "src"
    (src / "closed").mkdir(parents=True)
    (src / "a").write_bytes(b"a")
    (src / "secret").write_bytes(b"s")
    (src / "z").write_bytes(b"z")
    (src / "closed" / "inner").write_bytes(b"i")
    (src / "secret").chmod(0)
    (src / "closed").chmod(0)
    if prefix:
        for p in (src, src / "a", src / "secret", src / "z", src / "closed"):
            os.chown(p, 65534, 65534)
    try:
        want = cp("-r", "src", "cp", cwd=tmp_path, prefix=prefix)
        got = run("-r", "src", "fdkit", cwd=tmp_path, prefix=prefix)
    finally:
        (src / "closed").chmod(0o755)
    assert got.returncode == want.returncode == 1
    assert sorted(words(got, "fdkit copy: ")) == sorted(words(want, "cp: "))
    assert sorted(words(got, "fdkit copy: ")) == [
        "cannot access 'src/closed': Permission denied",
        "cannot open 'src/secret' for reading: Permission denied",
    ]
    for out in ("cp", "fdkit"):
        assert (tmp_path / out / "a").read_bytes() == b"a"
        assert (tmp_path / out / "z").read_bytes() == b"z"
        assert not (tmp_path / out / "secret").exists()
    assert not [p for p in (tmp_path / "fdkit").iterdir() if p.name.endswith(".fdkit-tmp")]


# --- -n, -i, -v, --reflink, and the destination's own mode ------------------------------


def two_dsts(tmp_path: Path) -> Path:
    """``new`` to copy, and ``cp/dst`` and ``fdkit/dst`` to copy it over (each program runs
    in its own directory, so both name ``dst`` alike)."""
    src = tmp_path / "new"
    src.write_bytes(b"new bytes\n")
    for out in ("cp", "fdkit"):
        (tmp_path / out).mkdir()
        (tmp_path / out / "dst").write_bytes(b"old bytes, kept?\n")
    return src


def test_no_clobber_leaves_the_destination(tmp_path: Path) -> None:
    two_dsts(tmp_path)
    want = cp("-n", "../new", "dst", cwd=tmp_path / "cp")
    got = run("-n", "../new", "dst", cwd=tmp_path / "fdkit")
    assert (got.returncode, got.stderr) == (want.returncode, want.stderr)
    assert (tmp_path / "fdkit" / "dst").read_bytes() == b"old bytes, kept?\n"


@pytest.mark.parametrize(
    ("flags", "answer", "replaced"),
    [
        (["-i"], "y\n", True),
        (["-i"], "Yes please\n", True),
        (["-i"], "n\n", False),
        (["-i"], "", False),  # end of input: no
        (["-n", "-i"], "y\n", True),  # the last of -n/-i wins
        (["-i", "-n"], "y\n", False),  # -n: no question, and no failure
    ],
)
def test_interactive_asks_on_stderr_and_reads_stdin_as_cp(
    tmp_path: Path, flags: list[str], answer: str, replaced: bool
) -> None:
    two_dsts(tmp_path)
    want = cp(*flags, "../new", "dst", cwd=tmp_path / "cp", stdin=answer)
    got = run(*flags, "../new", "dst", cwd=tmp_path / "fdkit", stdin=answer)
    declined = flags[-1] == "-i" and not replaced
    assert got.returncode == (1 if declined else 0)
    if not (declined and DECLINED.predated):
        assert got.returncode == want.returncode
    assert got.stderr.replace("fdkit copy: ", "") == want.stderr.replace("cp: ", "")
    assert ((tmp_path / "fdkit" / "dst").read_bytes() == b"new bytes\n") is replaced
    assert (tmp_path / "fdkit" / "dst").read_bytes() == (tmp_path / "cp" / "dst").read_bytes()


def test_read_only_destination_file_as_cp(tmp_path: Path) -> None:
    two_dsts(tmp_path)
    for out in ("cp", "fdkit"):
        (tmp_path / out / "dst").chmod(0o444)
    want = cp("../new", "dst", cwd=tmp_path / "cp")
    got = run("../new", "dst", cwd=tmp_path / "fdkit")
    assert got.returncode == want.returncode
    assert words(got, "fdkit copy: ") == words(want, "cp: ")
    assert snapshot(tmp_path / "fdkit") == snapshot(tmp_path / "cp")
    assert stat.S_IMODE((tmp_path / "fdkit" / "dst").stat().st_mode) == 0o444


def test_an_existing_destination_keeps_its_mode_a_new_one_takes_srcs(tmp_path: Path) -> None:
    src = two_dsts(tmp_path)
    src.chmod(0o4770)
    for out in ("cp", "fdkit"):
        (tmp_path / out / "dst").chmod(0o604)
    assert cp("../new", "dst", "made", cwd=tmp_path / "cp").returncode == 1  # not a directory
    assert cp("../new", "dst", cwd=tmp_path / "cp").returncode == 0
    assert cp("../new", "made", cwd=tmp_path / "cp").returncode == 0
    assert run("../new", "dst", cwd=tmp_path / "fdkit").returncode == 0
    assert run("../new", "made", cwd=tmp_path / "fdkit").returncode == 0
    assert snapshot(tmp_path / "fdkit") == snapshot(tmp_path / "cp")
    assert stat.S_IMODE((tmp_path / "fdkit" / "dst").stat().st_mode) == 0o604
    # A new file: SRC's mode less the umask, and no set-user-ID bit (as cp without -p).
    assert stat.S_IMODE((tmp_path / "fdkit" / "made").stat().st_mode) & 0o7000 == 0


def test_reflink_always_fails_as_cp_where_blocks_cannot_be_shared(tmp_path: Path) -> None:
    """The destination --reflink=always made for the clone is removed once the clone fails;
    one that was there before stays, emptied (it was opened with O_TRUNC)."""
    (tmp_path / "f").write_bytes(b"data")
    for out in ("cp", "fdkit"):
        (tmp_path / out).mkdir()
        (tmp_path / out / "there").write_bytes(b"old bytes\n")
    want = cp("--reflink=always", "../f", "dst", cwd=tmp_path / "cp")
    if want.returncode == 0:
        pytest.skip("this filesystem shares blocks (FICLONE works)")
    got = run("--reflink=always", "../f", "dst", cwd=tmp_path / "fdkit")
    assert got.returncode == want.returncode == 1
    assert words(got, "fdkit copy: ") == words(want, "cp: ")
    assert words(got, "fdkit copy: ") == [
        "failed to clone 'dst' from '../f': Operation not supported"
    ]
    assert os.listdir(tmp_path / "fdkit") == ["there"]
    if not UNCLONED.predated:
        assert os.listdir(tmp_path / "cp") == ["there"]
    want = cp("--reflink=always", "../f", "there", cwd=tmp_path / "cp")
    got = run("--reflink=always", "../f", "there", cwd=tmp_path / "fdkit")
    assert got.returncode == want.returncode == 1
    assert words(got, "fdkit copy: ") == words(want, "cp: ")
    assert (tmp_path / "fdkit" / "there").read_bytes() == b""
    assert (tmp_path / "cp" / "there").read_bytes() == b""
    # --atomic leaves nothing behind.
    got = run("--atomic", "--reflink=always", "f", "atomic", cwd=tmp_path)
    assert got.returncode == 1
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".fdkit-tmp")]
    assert not (tmp_path / "atomic").exists()
    for how in ("auto", "never"):
        r = run(f"--reflink={how}", "f", how, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert (tmp_path / how).read_bytes() == b"data"


def test_a_bare_reflink_means_always_and_takes_no_operand(tmp_path: Path) -> None:
    """cp reads ``--reflink``'s value only after ``=``: ``cp --reflink f g`` copies f to g
    with ``always``. fdkit's argument parser must not take ``f`` for the value."""
    (tmp_path / "f").write_bytes(b"data")
    for out in ("cp", "fdkit"):
        (tmp_path / out).mkdir()
    want = cp("--reflink", "../f", "g", cwd=tmp_path / "cp")
    got = run("--reflink", "../f", "g", cwd=tmp_path / "fdkit")
    assert got.returncode == want.returncode, (got.stderr, want.stderr)
    assert words(got, "fdkit copy: ") == words(want, "cp: ")
    # Where blocks can be shared both made g; elsewhere both failed to clone and made none.
    made = tmp_path / "fdkit" / "g"
    assert made.exists() is (got.returncode == 0)
    if got.returncode == 0:
        assert made.read_bytes() == (tmp_path / "cp" / "g").read_bytes() == b"data"
    elif not UNCLONED.predated:
        assert not (tmp_path / "cp" / "g").exists()
    # After ``--`` it is an operand (a file named --reflink), as for cp.
    (tmp_path / "--reflink").write_bytes(b"odd name")
    got = run("--", "--reflink", "h", cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "h").read_bytes() == b"odd name"


def test_reflink_where_the_filesystem_shares_blocks(tmp_path: Path) -> None:
    """On btrfs or XFS (TMPDIR there): FICLONE is the path, and the bytes are the same."""
    src = tmp_path / "f"
    src.write_bytes(os.urandom(1 << 20))
    if cp("--reflink=always", str(src), str(tmp_path / "probe")).returncode != 0:
        pytest.skip("the filesystem of the temporary directory cannot share blocks")
    r = run("--log", "--reflink=always", str(src), str(tmp_path / "clone"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "clone").read_bytes() == src.read_bytes()
    assert "via ficlone" in r.stderr
    # never: a copy that owns its blocks, as cp's (copy_file_range would share them here).
    r = run("--log", "--reflink=never", str(src), str(tmp_path / "own"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "own").read_bytes() == src.read_bytes()
    assert "via ficlone" not in r.stderr
    if shutil.which("filefrag") is not None:
        os.sync()
        frags = subprocess.run(
            ["filefrag", "-v", str(tmp_path / "clone"), str(tmp_path / "own")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        clone, own = frags.split("File size of")[1:]
        assert "shared" in clone, frags
        assert "shared" not in own, frags


def test_reflink_never_copies_dense_and_sparse_files(tmp_path: Path) -> None:
    dense = tmp_path / "dense"
    dense.write_bytes(os.urandom((3 << 20) + 17))
    sparse = tmp_path / "sparse"
    with sparse.open("wb") as f:
        f.seek(5 << 20)
        f.write(os.urandom(70_000))
        f.truncate(12 << 20)
    for src in (dense, sparse):
        dst = tmp_path / f"{src.name}.copy"
        r = run("--reflink=never", str(src), str(dst))
        assert r.returncode == 0, r.stderr
        assert dst.read_bytes() == src.read_bytes()
        assert dst.stat().st_blocks <= src.stat().st_blocks + 16


@pytest.mark.parametrize(("answer", "replaced"), [(b"y\n", True), (b"n\n", False)])
def test_interactive_on_a_terminal(tmp_path: Path, answer: bytes, replaced: bool) -> None:
    """-i with stdin on a terminal, as a user at a shell types the answer."""
    two_dsts(tmp_path)
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [FDKIT, "copy", "-i", "../new", "dst"],
            cwd=tmp_path / "fdkit",
            stdin=slave,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert proc.stderr is not None
        assert proc.stderr.read(len(b"fdkit copy: overwrite 'dst'? ")) == (
            b"fdkit copy: overwrite 'dst'? "
        )
        os.write(master, answer)
        assert proc.wait(timeout=30) == (0 if replaced else 1)
        assert proc.stderr.read() == b""
        proc.stderr.close()
    finally:
        os.close(master)
        os.close(slave)
    want = b"new bytes\n" if replaced else b"old bytes, kept?\n"
    assert (tmp_path / "fdkit" / "dst").read_bytes() == want


# --- every option of cp --help, one command line each -------------------------------------

T_OLD = 946_684_800_123_456_789  # 2000-01-01, and some nanoseconds
T_SRC = 1_500_000_000_987_654_321  # 2017
T_NEW = 4_102_444_800_000_000_001  # 2100


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


# --- writing in place: where a replace fails and cp succeeds ------------------------------


def test_a_file_with_other_hard_links_is_updated_under_every_name(tmp_path: Path) -> None:
    """`ln h1 h2; cp src h1` writes into the file h1 and h2 both name (it used to replace h1
    with a new file, leaving h2 with the old bytes)."""

    def dest(root: Path) -> None:
        (root / "h1").write_bytes(b"old bytes, and more of them\n")
        os.link(root / "h1", root / "h2")

    def src(root: Path) -> None:
        (root / "src").write_bytes(b"new bytes\n")

    theirs, ours = both(tmp_path, src, "src", "@/h1", dest=dest)
    assert_same(theirs, ours)
    assert ours.code == 0, ours.stderr
    h1, h2 = tmp_path / "fdkit" / "h1", tmp_path / "fdkit" / "h2"
    assert h2.read_bytes() == b"new bytes\n"
    assert os.stat(h1).st_ino == os.stat(h2).st_ino
    assert os.stat(h1).st_nlink == 2
    # --atomic replaces h1: h2 keeps the old bytes (that is what it is for).
    (tmp_path / "fdkit" / "h1").write_bytes(b"old again\n")
    r = run("--atomic", "shared/src", "fdkit/h1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert h1.read_bytes() == b"new bytes\n"
    assert h2.read_bytes() == b"old again\n"
    assert os.stat(h1).st_nlink == 1


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


def test_a_bind_mounted_destination_is_written_into(tmp_path: Path) -> None:
    """A file bind-mounted onto another (as a container's /etc/resolv.conf is): cp writes
    into it; renaming over a mount point fails with EBUSY. Run in a private mount namespace,
    each program with its own mount."""
    prefix = unshare_mount()
    (tmp_path / "src").write_bytes(b"nameserver 10.0.0.1\n")
    for who in ("cp", "fdkit"):
        (tmp_path / f"{who}-backing").write_bytes(b"nameserver 192.0.2.1\n")
        (tmp_path / f"{who}-mountpoint").write_bytes(b"underneath\n")
    script = (
        'mount --bind "$1-backing" "$1-mountpoint" && shift && "$@"; rc=$?; '
        'cat "$WHO-mountpoint"; exit $rc'
    )
    results = {}
    for who, program in (("cp", ["cp"]), ("fdkit", [FDKIT, "copy"])):
        r = subprocess.run(
            [*prefix, "sh", "-c", script, "sh", who, *program, "src", f"{who}-mountpoint"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=tmp_path,
            env={**os.environ, "WHO": who, "LC_ALL": "C"},
        )
        results[who] = r
    assert results["fdkit"].returncode == results["cp"].returncode == 0, results
    assert results["fdkit"].stdout == results["cp"].stdout == "nameserver 10.0.0.1\n"
    assert results["fdkit"].stderr == ""
    # The mount's file got the bytes; the file underneath the mount point did not.
    assert (tmp_path / "fdkit-backing").read_bytes() == b"nameserver 10.0.0.1\n"
    assert (tmp_path / "fdkit-mountpoint").read_bytes() == b"underneath\n"
    # --atomic cannot replace a mount point, and says so as cp would say it.
    r = subprocess.run(
        [
            *prefix,
            "sh",
            "-c",
            script,
            "sh",
            "fdkit",
            FDKIT,
            "copy",
            "--atomic",
            "src",
            "fdkit-mountpoint",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "WHO": "fdkit"},
    )
    assert r.returncode == 1
    assert r.stderr == (
        "fdkit copy: cannot create regular file 'fdkit-mountpoint': Device or resource busy\n"
    )
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".fdkit-tmp")]


def test_a_writable_file_in_a_directory_the_user_cannot_write(shared_dir: Path) -> None:
    """A user may write a file whose directory they may not: cp writes into it; a temporary
    file beside it cannot be made."""
    prefix = as_nobody()
    for who in ("cp", "fdkit"):
        d = shared_dir / who
        d.mkdir()
        (d / "target").write_bytes(b"old\n")
        (d / "target").chmod(0o666)
        d.chmod(0o555)
    (shared_dir / "src").write_bytes(b"new\n")
    (shared_dir / "src").chmod(0o644)
    try:
        want = cp("src", "cp/target", cwd=shared_dir, prefix=prefix)
        got = run("src", "fdkit/target", cwd=shared_dir, prefix=prefix)
        atomic = run("--atomic", "src", "fdkit/target", cwd=shared_dir, prefix=prefix)
    finally:
        for who in ("cp", "fdkit"):
            (shared_dir / who).chmod(0o755)
    assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr)
    assert got.returncode == 0, got.stderr
    assert (shared_dir / "fdkit" / "target").read_bytes() == b"new\n"
    assert sorted(os.listdir(shared_dir / "fdkit")) == ["target"]
    if prefix:
        assert atomic.returncode == 1
        assert atomic.stderr == (
            "fdkit copy: cannot create regular file 'fdkit/target': Permission denied\n"
        )


# --- fdkit's own: --atomic, --debug, -q, --log ---------------------------------------------


def test_atomic_never_leaves_a_half_written_destination(tmp_path: Path) -> None:
    """A write that fails half way (RLIMIT_FSIZE: EFBIG): in place, the destination is left
    as far as it got, as cp leaves it; --atomic leaves the old file whole and nothing else."""
    src = tmp_path / "src"
    src.write_bytes(random.Random(1).randbytes(3 << 20))
    for name in ("inplace", "atomic"):
        (tmp_path / name).write_bytes(b"the old bytes\n")
    limit = 'trap "" XFSZ; ulimit -f 1024; exec "$@"'
    inplace = subprocess.run(
        ["sh", "-c", limit, "sh", FDKIT, "copy", "src", "inplace"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    atomic = subprocess.run(
        ["sh", "-c", limit, "sh", FDKIT, "copy", "--atomic", "src", "atomic"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert inplace.returncode == atomic.returncode == 1
    assert 0 < (tmp_path / "inplace").stat().st_size < 3 << 20
    assert (tmp_path / "atomic").read_bytes() == b"the old bytes\n"
    assert sorted(os.listdir(tmp_path)) == ["atomic", "inplace", "src"]
    assert "File too large" in atomic.stderr


def test_atomic_keeps_the_destinations_mode_and_gives_a_new_one_srcs(tmp_path: Path) -> None:
    (tmp_path / "src").write_bytes(b"new\n")
    (tmp_path / "src").chmod(0o751)
    (tmp_path / "kept").write_bytes(b"old\n")
    (tmp_path / "kept").chmod(0o604)
    os.utime(tmp_path / "src", ns=(T_SRC, T_SRC))
    for args in (
        ("--atomic", "src", "kept"),
        ("--atomic", "src", "made"),
        ("--atomic", "-p", "src", "timed"),
    ):
        r = run(*args, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    assert stat.S_IMODE((tmp_path / "kept").stat().st_mode) == 0o604
    assert stat.S_IMODE((tmp_path / "made").stat().st_mode) == 0o751 & ~_umask()
    assert (tmp_path / "timed").stat().st_mtime_ns == T_SRC
    assert stat.S_IMODE((tmp_path / "timed").stat().st_mode) == 0o751
    for name in ("kept", "made", "timed"):
        assert (tmp_path / name).read_bytes() == b"new\n"
    assert sorted(os.listdir(tmp_path)) == ["kept", "made", "src", "timed"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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
