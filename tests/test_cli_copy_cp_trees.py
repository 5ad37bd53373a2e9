"""`fdkit copy` with GNU cp as the oracle, on whole trees and on what cp reads: each test runs
cp and fdkit with the same command line on the same tree and compares what they made
(contents, modes, times, symlink targets, link counts and shared inodes, special files, holes,
extended attributes), their stdout, their stderr (the program's name aside) and their exit
status. Here: `-r` with each option that changes the tree it makes, several sources into a
directory, and the mistakes cp refuses in its own words (a missing target, a directory copied
into itself, a directory without -r, unreadable files mid tree).

Also the sizes the kernel reports wrongly: sysfs and procfs files are copied by reading to the
end, never sized by stat (a sysfs attribute says 4096 bytes in no blocks and holds a few).

The destinations already there are in test_cli_copy_cp_destinations.py, every option of `cp
--help` in test_cli_copy_cp_options.py; what they share is in helpers/cli_copy_cp.py."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import stat
import threading
import time
from pathlib import Path

import pytest

from helpers.cli_copy_cp import (
    CP,
    FILE_OVER_DIRECTORY,
    as_nobody,
    cp,
    run,
    shared_dir_fixture,  # noqa: F401  (the fixture shared_dir)
    snapshot,
    words,
)
from helpers.cp_oracle import assert_same, both

pytestmark = pytest.mark.skipif(CP is None, reason="no cp to compare with")


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
