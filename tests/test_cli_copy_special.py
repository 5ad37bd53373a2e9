"""`fdkit copy` into device nodes, FIFOs, sockets, symlinks; sparse sources; error messages.

Each case is compared with what GNU cp does. Device nodes are
scratch nodes made with mknod in tmp_path (1,3 is the null device, 1,7 the full device);
the tests that need one skip where mknod is not permitted.
"""

from __future__ import annotations

import hashlib
import os
import selectors
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.terminal import final_line, run_on_terminal

FDKIT = shutil.which("fdkit", path=os.path.dirname(sys.executable)) or "fdkit"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FDKIT, "copy", *args], capture_output=True, text=True, timeout=60, check=False, cwd=cwd
    )


def mknod_chr(path: Path, minor: int) -> None:
    """A character device node (major 1: mem), or skip where mknod is not permitted."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except PermissionError as e:
        pytest.skip(f"mknod not permitted here ({e.strerror})")


def one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 1, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("fdkit copy: "), r.stderr
    assert ".fdkit-tmp" not in r.stderr, r.stderr
    return lines[0]


def no_temp_files(*dirs: Path) -> None:
    for d in dirs:
        assert not [p.name for p in d.iterdir() if p.name.endswith(".fdkit-tmp")]


def sha(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


@pytest.fixture
def small(tmp_path: Path) -> Path:
    src = tmp_path / "small.txt"
    src.write_bytes(b"hello from fdkit copy\n")
    return src


# --- device nodes ------------------------------------------------------------------------


def test_char_device_dst_is_written_into_not_replaced(tmp_path: Path, small: Path) -> None:
    node = tmp_path / "nulldev"
    mknod_chr(node, 3)
    r = run(str(small), str(node))
    assert r.returncode == 0, r.stderr
    st = os.lstat(node)
    assert stat.S_ISCHR(st.st_mode)
    assert st.st_rdev == os.makedev(1, 3)
    no_temp_files(tmp_path)


def test_directory_dst_whose_entry_is_a_device(tmp_path: Path, small: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    mknod_chr(out / small.name, 3)
    r = run(str(small), str(out))
    assert r.returncode == 0, r.stderr
    assert stat.S_ISCHR(os.lstat(out / small.name).st_mode)
    no_temp_files(out)


def test_directory_dst_whose_entry_is_a_directory_is_refused(tmp_path: Path, small: Path) -> None:
    out = tmp_path / "out"
    (out / small.name).mkdir(parents=True)
    line = one_line_error(run(str(small), str(out)))
    # cp 9.10: "cannot overwrite directory 'out/small.txt' with non-directory 'small.txt'"
    assert line == (
        f"fdkit copy: cannot overwrite directory {str(out / small.name)!r} "
        f"with non-directory {str(small)!r}"
    )
    assert (out / small.name).is_dir()
    assert not list((out / small.name).iterdir())
    no_temp_files(out)


def test_full_device_names_dst_and_stays_a_device(tmp_path: Path, small: Path) -> None:
    node = tmp_path / "fulldev"
    mknod_chr(node, 7)
    line = one_line_error(run(str(small), str(node)))
    assert line == f"fdkit copy: error writing {str(node)!r}: No space left on device"
    assert stat.S_ISCHR(os.lstat(node).st_mode)


# --- FIFOs -------------------------------------------------------------------------------


def reader(fifo: Path, out: Path) -> subprocess.Popen[bytes]:
    """`cat FIFO > out`: cat blocks in open until a writer comes; `timeout` bounds it if none
    ever does. (Into a file, not a pipe to this process, which reads only at the end.)"""
    with out.open("wb") as f:
        return subprocess.Popen(["timeout", "20", "cat", str(fifo)], stdout=f)


def test_fifo_reader_receives_the_bytes(tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(3 << 20))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cat = reader(fifo, tmp_path / "got")
    try:
        r = run(str(src), str(fifo))
        cat.wait(timeout=30)
    finally:
        cat.kill()
        cat.wait()
    assert r.returncode == 0, r.stderr
    got = (tmp_path / "got").read_bytes()
    assert got == src.read_bytes()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    no_temp_files(tmp_path)


def test_fifo_without_reader_says_it_waits_then_delivers(tmp_path: Path, small: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [FDKIT, "copy", str(small), str(fifo)], stderr=subprocess.PIPE, text=True
    )
    cat = None
    try:
        assert proc.stderr is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stderr, selectors.EVENT_READ)
        assert sel.select(timeout=20), "no 'waiting for a reader' line"
        first = proc.stderr.readline()
        want = f"fdkit copy: waiting for a reader on FIFO {str(fifo)!r} (Ctrl-C to stop)"
        # A notice: the command's name, then its words (time-stamped only with -v).
        assert first.strip() == want
        cat = reader(fifo, tmp_path / "got")
        cat.wait(timeout=30)
        assert proc.wait(timeout=30) == 0
        assert (tmp_path / "got").read_bytes() == small.read_bytes()
    finally:
        for p in (proc, cat):
            if p is not None:
                p.kill()
                p.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def test_fifo_without_reader_stops_on_ctrl_c(tmp_path: Path, small: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [FDKIT, "copy", str(small), str(fifo)], stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stderr, selectors.EVENT_READ)
        assert sel.select(timeout=20), "no 'waiting for a reader' line"
        assert "waiting for a reader" in proc.stderr.readline()
        time.sleep(0.1)  # into the blocking open(2)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 130
        assert proc.stderr.read().strip() == "fdkit: interrupted"
    finally:
        proc.kill()
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    no_temp_files(tmp_path)


def test_fifo_reader_leaving_early_ends_the_copy_as_sigpipe_ends_cp(tmp_path: Path) -> None:
    """cp dies of SIGPIPE there, silently, with status 141 (128 + 13): fdkit copy, which
    gets EPIPE instead, stops the same way."""
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(8 << 20))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    results = []
    for argv in (["cp"], [FDKIT, "copy"]):
        head = subprocess.Popen(
            ["timeout", "20", "head", "-c", "10", str(fifo)], stdout=subprocess.DEVNULL
        )
        try:
            r = subprocess.run(
                [*argv, str(src), str(fifo)], capture_output=True, text=True, timeout=60
            )
        finally:
            head.kill()
            head.wait()
        results.append((r.returncode, r.stdout, r.stderr))
    # cp is killed by the signal (the shell says 141); fdkit copy exits with 141.
    assert results[0] == (-signal.SIGPIPE, "", "")
    assert results[1] == (128 + signal.SIGPIPE, "", "")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


# --- sockets -----------------------------------------------------------------------------


def test_socket_dst_is_refused_and_kept(tmp_path: Path, small: Path) -> None:
    path = tmp_path / "sock"
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(path))
        line = one_line_error(run(str(small), str(path)))
    finally:
        s.close()
    # As cp: open(2) of a socket fails with ENXIO.
    assert line == (
        f"fdkit copy: cannot create regular file {str(path)!r}: No such device or address"
    )
    assert stat.S_ISSOCK(os.lstat(path).st_mode)


# --- symlinks ----------------------------------------------------------------------------


def test_symlink_dst_writes_through_and_stays_a_link(tmp_path: Path, small: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    target = b / "target.txt"
    target.write_bytes(b"old target contents, longer than the new ones\n")
    link = a / "link"
    link.symlink_to(Path("..") / "b" / "target.txt")
    r = run(str(small), str(link))
    assert r.returncode == 0, r.stderr
    assert link.is_symlink()
    assert os.readlink(link) == os.path.join("..", "b", "target.txt")
    assert target.read_bytes() == small.read_bytes()
    assert sorted(p.name for p in a.iterdir()) == ["link"]
    assert sorted(p.name for p in b.iterdir()) == ["target.txt"]
    # The target copied onto a link to itself is one file, as cp says.
    line = one_line_error(run(str(target), str(link)))
    assert "are the same file" in line
    assert link.is_symlink()


def test_symlink_to_a_device_writes_into_the_device(tmp_path: Path, small: Path) -> None:
    node = tmp_path / "nulldev"
    mknod_chr(node, 3)
    link = tmp_path / "link"
    link.symlink_to("nulldev")
    r = run(str(small), str(link))
    assert r.returncode == 0, r.stderr
    assert link.is_symlink()
    assert stat.S_ISCHR(os.lstat(node).st_mode)


def test_dangling_symlink_is_refused_as_cp_does(tmp_path: Path, small: Path) -> None:
    link = tmp_path / "dangling"
    link.symlink_to("nowhere")
    line = one_line_error(run(str(small), str(link)))
    assert line == f"fdkit copy: not writing through dangling symlink {str(link)!r}"
    assert link.is_symlink()
    assert os.readlink(link) == "nowhere"
    assert not (tmp_path / "nowhere").exists()
    no_temp_files(tmp_path)


# --- sparse files ------------------------------------------------------------------------


def sparse_source(path: Path, size: int, data: list[tuple[int, bytes]]) -> os.stat_result:
    with path.open("wb") as f:
        f.truncate(size)
        for off, chunk in data:
            f.seek(off)
            f.write(chunk)
    st = path.stat()
    if st.st_blocks * 512 >= size:
        pytest.skip(f"the filesystem of {path.parent} does not keep holes")
    return st


def test_sparse_2g_file_copies_to_no_blocks(tmp_path: Path) -> None:
    src = tmp_path / "sparse"
    size = 2 << 30
    src_st = sparse_source(src, size, [])
    dst = tmp_path / "copy"
    code, terminal, err = run_on_terminal(str(src), str(dst))
    assert code == 0, err
    st = dst.stat()
    assert st.st_size == size
    # cp gives 0 blocks; allow a few for filesystems that allocate a block at EOF.
    assert st.st_blocks <= src_st.st_blocks + 16, st.st_blocks
    # Where the filesystem shares blocks (btrfs, XFS), the clone keeps the holes itself.
    line = final_line(terminal)
    assert "holes kept" in line or line.endswith("via ficlone"), line


@pytest.mark.parametrize(
    "layout",
    [
        # hole, data, hole, data up to EOF (no trailing hole)
        [(5 << 20, 1 << 20), (40 << 20, (2 << 20) + 7), ((63 << 20) - 5, (1 << 20) + 5)],
        # data at 0, then odd lengths at odd offsets, trailing hole
        [(0, 4096), ((17 << 20) + 4093, (3 << 20) + 11)],
    ],
)
def test_mixed_data_and_holes_copy_byte_identical_and_sparse(
    tmp_path: Path, layout: list[tuple[int, int]]
) -> None:
    size = 64 << 20
    data = [(off, os.urandom(n)) for off, n in layout]
    src = tmp_path / "mixed"
    src_st = sparse_source(src, size, data)
    dst = tmp_path / "copy"
    r = run(str(src), str(dst))
    assert r.returncode == 0, r.stderr
    assert dst.stat().st_size == size
    assert sha(dst) == sha(src)
    # The data blocks and no more (a little slack for extent rounding).
    assert dst.stat().st_blocks <= src_st.st_blocks + 64, (dst.stat().st_blocks, src_st.st_blocks)
    assert stat.S_IMODE(dst.stat().st_mode) == stat.S_IMODE(src_st.st_mode)


def test_sparse_source_into_a_fifo_gets_the_zeros(tmp_path: Path) -> None:
    size = 3 << 20
    chunk = os.urandom(1000)
    src = tmp_path / "mixed"
    sparse_source(src, size, [(1 << 20, chunk)])
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cat = reader(fifo, tmp_path / "got")
    try:
        r = run(str(src), str(fifo))
        cat.wait(timeout=30)
    finally:
        cat.kill()
        cat.wait()
    assert r.returncode == 0, r.stderr
    got = (tmp_path / "got").read_bytes()
    assert got == src.read_bytes()


# --- procfs and error messages -----------------------------------------------------------


def test_procfs_source_copies_its_real_content(tmp_path: Path) -> None:
    # /proc files say st_size 0; the copy must read to the real end (and not be taken for
    # a sparse file: SEEK_DATA there is EINVAL).
    src = Path("/proc/version")
    if not src.exists():
        pytest.skip("no /proc/version")
    dst = tmp_path / "version"
    code, terminal, err = run_on_terminal(str(src), str(dst))
    assert code == 0, err
    want = src.read_bytes()
    assert dst.read_bytes() == want
    assert want
    # The size the kernel reported (0) is not the size shown as the total.
    line = final_line(terminal)
    assert line.startswith("100.0%"), line
    assert "/ 0 B" not in line, line


def test_empty_dst_is_refused_as_cp_refuses_it(tmp_path: Path, small: Path) -> None:
    line = one_line_error(run(str(small), "", cwd=tmp_path))
    assert line == "fdkit copy: cannot create regular file '': No such file or directory"
    assert sorted(p.name for p in tmp_path.iterdir()) == [small.name]


def test_dst_in_a_directory_that_cannot_hold_files_names_dst(small: Path) -> None:
    line = one_line_error(run(str(small), "/proc/fdkit-no-such.txt"))
    assert line == (
        "fdkit copy: cannot create regular file '/proc/fdkit-no-such.txt': "
        "No such file or directory"
    )


def test_missing_src_names_src(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")
    line = one_line_error(run(missing, str(tmp_path / "x")))
    assert line == f"fdkit copy: cannot stat {missing!r}: No such file or directory"


def test_file_too_large_names_both_files_as_cp(tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(3 << 20))
    dst = tmp_path / "dst.bin"
    # RLIMIT_FSIZE below the source size: the write fails with EFBIG (SIGXFSZ ignored).
    r = subprocess.run(
        [
            "sh",
            "-c",
            'trap "" XFSZ; ulimit -f 1024; exec "$0" copy "$1" "$2"',
            FDKIT,
            str(src),
            str(dst),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    line = one_line_error(r)
    # cp's words when copy_file_range fails: it does not say which side.
    assert line == f"fdkit copy: error copying {str(src)!r} to {str(dst)!r}: File too large"
    assert dst.stat().st_size > 0  # written in place as far as it got, as cp leaves it
    no_temp_files(tmp_path)


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Path:
    """A directory a 1 MiB tmpfs will be mounted on, inside a private mount namespace."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if shutil.which("unshare") is None:
        pytest.skip("no unshare command")
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=1m fdkit-test {mnt}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(f"no private tmpfs mount here ({probe.stderr.strip()})")
    return mnt


def test_no_space_left_names_dst(tmp_path: Path, tiny_fs: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(3 << 20))
    dst = tiny_fs / "dst.bin"
    script = (
        'mount -t tmpfs -o size=1m fdkit-test "$3" && "$0" copy "$1" "$2"; rc=$?; '
        'ls -A "$3"; exit $rc'
    )
    r = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, FDKIT, str(src), str(dst), str(tiny_fs)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    line = one_line_error(r)
    # copy_file_range refuses two filesystems: sendfile's write failed (cp: write(2)'s).
    assert line == f"fdkit copy: error writing {str(dst)!r}: No space left on device"
    assert r.stdout == "dst.bin\n"  # written in place as far as it got, as cp leaves it


def test_help_says_what_happens_for_each_dst_kind() -> None:
    r = subprocess.run([FDKIT, "copy", "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    for words in (
        "absent made, with SOURCE's mode less the umask",
        "regular file opened and written in place (truncated first)",
        "other hard links, mode and owner stay, a bind mount stays mounted",
        "device node or FIFO opened and written into, never replaced",
        "a FIFO with no reader waits for one",
        "socket cannot be opened: refused",
        "symlink written through to its target; a dangling symlink is refused",
        "directory the copy goes to DIRECTORY/basename(SOURCE)",
        "--atomic write each regular file to a temporary file beside DEST",
    ):
        assert words in text, words
