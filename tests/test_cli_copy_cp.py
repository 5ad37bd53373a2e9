"""`fdkit copy` beyond one file, with GNU cp as the oracle: each test runs cp and fdkit with
the same flags on the same tree and compares what they made (contents, modes, times with -p,
symlink targets, hard links, special files, holes), their exit status and their words.

Also the sizes the kernel reports wrongly: sysfs and procfs files are copied by reading to the
end, never sized by stat (a sysfs attribute says 4096 bytes in no blocks and holds a few)."""

from __future__ import annotations

import contextlib
import os
import pty
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

import pytest

FDKIT = shutil.which("fdkit", path=os.path.dirname(sys.executable)) or "fdkit"
CP = shutil.which("cp")

pytestmark = pytest.mark.skipif(CP is None, reason="no cp to compare with")


def _cp_version() -> tuple[int, ...]:
    """GNU cp's version here (``cp (GNU coreutils) 9.1``), () when it says none."""
    if CP is None:
        return ()
    out = subprocess.run([CP, "--version"], capture_output=True, text=True, check=False)
    words = out.stdout.splitlines()[0].split() if out.stdout else []
    try:
        return tuple(int(n) for n in words[-1].split("."))
    except (IndexError, ValueError):
        return ()


#: The cp whose words and statuses fdkit copy gives: GNU coreutils 9.1 (Debian 12's). Where a
#: later cp says or exits otherwise (9.10: a declined ``-i`` exits 1, a file over a directory
#: names the file too), the case compares with nothing fdkit claims, and skips.
CP_FDKIT_SPEAKS = (9, 1)
as_cp_9_1 = pytest.mark.skipif(
    _cp_version() > CP_FDKIT_SPEAKS,
    reason=f"cp {'.'.join(map(str, _cp_version()))} here; fdkit copy answers as cp 9.1 does",
)


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
    """A tree with every kind of entry cp -r knows."""
    src = root / "src"
    (src / "sub" / "deeper").mkdir(parents=True)
    (src / "a.txt").write_bytes(b"alpha\n")
    (src / "a.txt").chmod(0o640)
    (src / "empty").write_bytes(b"")
    (src / "sub" / "b.bin").write_bytes(os.urandom(200_000))
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


def test_recursive_tree_matches_cp(tmp_path: Path) -> None:
    """Every kind of entry, as cp -r makes it; hard links kept as cp keeps them when asked
    (--preserve=links; fdkit keeps them always)."""
    src = make_tree(tmp_path)
    want = cp("-r", "--preserve=links", str(src), str(tmp_path / "cp"))
    got = run("-r", str(src), str(tmp_path / "fdkit"))
    assert (got.returncode, got.stderr) == (want.returncode, want.stderr) == (0, "")
    theirs, ours = snapshot(tmp_path / "cp"), snapshot(tmp_path / "fdkit")
    assert ours == theirs
    assert ours["sub/a-hardlink"][-1] == ("a.txt", "sub/a-hardlink")
    assert ours["sparse"][2] == (b"head" + bytes((8 << 20) - 4), True)
    assert ours["fifo"][0] == stat.S_IFIFO
    assert ours["sock"][0] == stat.S_IFSOCK


def test_recursive_with_p_keeps_times_modes_and_owners_as_cp(tmp_path: Path) -> None:
    src = make_tree(tmp_path)
    if os.geteuid() == 0:
        os.chown(src / "a.txt", 1234, 5678)
        os.chown(src / "link", 4321, 8765, follow_symlinks=False)
    want = cp("-rp", "--preserve=links", str(src), str(tmp_path / "cp"))
    # cp's read may have moved the source's atime (relatime): the one fdkit sees is this.
    atime = os.stat(src / "a.txt").st_atime_ns
    got = run("-rp", str(src), str(tmp_path / "fdkit"))
    assert (got.returncode, got.stderr) == (want.returncode, want.stderr) == (0, "")
    a = os.lstat(tmp_path / "fdkit" / "a.txt")
    assert a.st_atime_ns == atime  # before the snapshot reads it
    theirs, ours = snapshot(tmp_path / "cp", times=True), snapshot(tmp_path / "fdkit", times=True)
    assert ours == theirs
    assert a.st_mtime_ns == 1_100_000_000_987_654_321
    assert stat.S_IMODE(a.st_mode) == 0o640
    assert os.lstat(tmp_path / "fdkit" / "link").st_mtime_ns == 1_300_000_000_000_000_000
    assert os.stat(tmp_path / "fdkit" / "sub" / "deeper").st_mtime_ns == 1_200_000_000_000_000_001
    if os.geteuid() == 0:
        assert (a.st_uid, a.st_gid) == (1234, 5678)


def test_into_an_existing_directory_and_merging(tmp_path: Path) -> None:
    src = make_tree(tmp_path)
    for out in ("cp", "fdkit"):
        (tmp_path / out / "src" / "sub").mkdir(parents=True)
        (tmp_path / out / "src" / "sub" / "kept").write_bytes(b"was here")
        (tmp_path / out / "src" / "sub" / "b.bin").write_bytes(b"old, to be overwritten\n")
        (tmp_path / out / "src" / "sub" / "b.bin").chmod(0o600)
    want = cp("-r", "--preserve=links", str(src), str(tmp_path / "cp"))
    got = run("-r", str(src), str(tmp_path / "fdkit"))
    assert got.returncode == want.returncode == 0, got.stderr
    assert snapshot(tmp_path / "fdkit") == snapshot(tmp_path / "cp")
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
        pytest.param(
            ["one", "hasdir"],
            "cannot overwrite directory 'hasdir/one' with non-directory",
            marks=as_cp_9_1,
        ),
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
        pytest.param(["-i"], "n\n", False, marks=as_cp_9_1),
        pytest.param(["-i"], "", False, marks=as_cp_9_1),  # end of input: no
        (["-n", "-i"], "y\n", True),  # the last of -n/-i wins
        (["-i", "-n"], "y\n", False),
    ],
)
def test_interactive_asks_on_stderr_and_reads_stdin_as_cp(
    tmp_path: Path, flags: list[str], answer: str, replaced: bool
) -> None:
    two_dsts(tmp_path)
    want = cp(*flags, "../new", "dst", cwd=tmp_path / "cp", stdin=answer)
    got = run(*flags, "../new", "dst", cwd=tmp_path / "fdkit", stdin=answer)
    assert got.returncode == want.returncode == 0
    assert got.stderr.replace("fdkit copy: ", "") == want.stderr.replace("cp: ", "")
    assert ((tmp_path / "fdkit" / "dst").read_bytes() == b"new bytes\n") is replaced
    assert (tmp_path / "fdkit" / "dst").read_bytes() == (tmp_path / "cp" / "dst").read_bytes()


def test_verbose_prints_each_copy_as_cp(tmp_path: Path) -> None:
    src = make_tree(tmp_path)
    want = cp("-rv", "--preserve=links", src.name, "cp", cwd=tmp_path)
    got = run("-rv", src.name, "fdkit", cwd=tmp_path)
    assert got.returncode == want.returncode == 0, got.stderr
    # cp walks in directory order, fdkit by name: the same lines.
    assert sorted(got.stdout.replace("'fdkit", "'cp").splitlines()) == sorted(
        want.stdout.splitlines()
    )
    assert "'src/a.txt' -> 'fdkit/a.txt'" in got.stdout.splitlines()


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
    (tmp_path / "f").write_bytes(b"data")
    for out in ("cp", "fdkit"):
        (tmp_path / out).mkdir()
    want = cp("--reflink=always", "../f", "dst", cwd=tmp_path / "cp")
    if want.returncode == 0:
        pytest.skip("this filesystem shares blocks (FICLONE works)")
    got = run("--reflink=always", "../f", "dst", cwd=tmp_path / "fdkit")
    assert got.returncode == want.returncode == 1
    assert words(got, "fdkit copy: ") == words(want, "cp: ")
    assert words(got, "fdkit copy: ") == [
        "failed to clone 'dst' from '../f': Operation not supported"
    ]
    assert os.listdir(tmp_path / "fdkit") == []
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".fdkit-tmp")]
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
    # Where blocks can be shared both made g; elsewhere both failed to clone (cp leaves an
    # empty g behind, fdkit nothing).
    assert ((tmp_path / "fdkit" / "g").exists()) == (want.returncode == 0)
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
    r = run("-v", "--reflink=always", str(src), str(tmp_path / "clone"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "clone").read_bytes() == src.read_bytes()
    assert "via ficlone" in r.stderr
    # never: a copy that owns its blocks, as cp's (copy_file_range would share them here).
    r = run("-v", "--reflink=never", str(src), str(tmp_path / "own"))
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
        assert proc.wait(timeout=30) == 0
        assert proc.stderr.read() == b""
        proc.stderr.close()
    finally:
        os.close(master)
        os.close(slave)
    want = b"new bytes\n" if replaced else b"old bytes, kept?\n"
    assert (tmp_path / "fdkit" / "dst").read_bytes() == want
