"""Happy paths of the file, pipe and fd-housekeeping half of ``fdkit.fd``, checked against the
kernel and against ``os``."""

from __future__ import annotations

import array
import fcntl
import os
import select
import stat as stat_mod
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fdkit import fd
from helpers import Fds, is_open


def assert_cloexec(n: int, expected: bool = True) -> None:
    assert fd.get_cloexec(n) is expected
    assert bool(fcntl.fcntl(n, fcntl.F_GETFD) & fcntl.FD_CLOEXEC) is expected


# ---------------------------------------------------------------------------------------------
# open, read, write, close


@pytest.mark.parametrize("kind", ["str", "bytes", "pathlike"])
def test_open_path_kinds(fds: Fds, tmp_file: Callable[[bytes], Path], kind: str) -> None:
    p = tmp_file(b"contents")
    kinds: dict[str, str | bytes | Path] = {"str": str(p), "bytes": os.fsencode(p), "pathlike": p}
    arg = kinds[kind]
    n = fds.own(fd.open(arg, fd.O_RDONLY))
    assert_cloexec(n)
    assert fd.read(n, 100) == b"contents"
    assert os.fstat(n).st_ino == p.stat().st_ino


def test_open_pathlike_bytes(fds: Fds, tmp_file: Callable[[bytes], Path]) -> None:
    class BytesPath:
        def __init__(self, p: bytes) -> None:
            self.p = p

        def __fspath__(self) -> bytes:
            return self.p

    p = tmp_file(b"xyz")
    n = fds.own(fd.open(BytesPath(os.fsencode(p)), fd.O_RDONLY))
    assert fd.read(n, 10) == b"xyz"


def test_open_non_utf8_name(fds: Fds, tmp_path: Path) -> None:
    raw = os.fsencode(tmp_path) + b"/name-\xff"
    n = fds.own(fd.open(raw, fd.O_WRONLY | fd.O_CREAT, 0o600))
    fd.write(n, b"1")
    assert os.path.exists(raw)
    # The same file through str with surrogateescape, as os.fsdecode spells it.
    m = fds.own(fd.open(os.fsdecode(raw), fd.O_RDONLY))
    assert fd.read(m, 5) == b"1"


def test_open_create_mode_and_flags(fds: Fds, tmp_path: Path) -> None:
    p = tmp_path / "new"
    old = os.umask(0o022)
    try:
        n = fds.own(fd.open(p, fd.O_WRONLY | fd.O_CREAT | fd.O_EXCL, 0o640))
    finally:
        os.umask(old)
    assert stat_mod.S_IMODE(p.stat().st_mode) == 0o640
    assert fcntl.fcntl(n, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY
    assert_cloexec(n)
    assert fd.write(n, b"hello") == 5
    assert p.read_bytes() == b"hello"


def test_open_append_and_trunc(fds: Fds, tmp_file: Callable[[bytes], Path]) -> None:
    p = tmp_file(b"abc")
    n = fds.own(fd.open(p, fd.O_WRONLY | fd.O_APPEND))
    fd.write(n, b"def")
    assert p.read_bytes() == b"abcdef"
    m = fds.own(fd.open(p, fd.O_RDWR | fd.O_TRUNC))
    assert p.read_bytes() == b""
    fd.write(m, b"z")
    assert p.read_bytes() == b"z"


def test_open_nonblock_and_cloexec_false(fds: Fds, tmp_file: Callable[[bytes], Path]) -> None:
    p = tmp_file(b"")
    n = fds.own(fd.open(p, fd.O_RDONLY | fd.O_NONBLOCK, cloexec=False))
    assert_cloexec(n, False)
    assert fd.get_blocking(n) is False


def test_open_default_mode_0777_minus_umask(fds: Fds, tmp_path: Path) -> None:
    p = tmp_path / "m"
    old = os.umask(0o027)
    try:
        fds.own(fd.open(p, fd.O_WRONLY | fd.O_CREAT))
    finally:
        os.umask(old)
    assert stat_mod.S_IMODE(p.stat().st_mode) == 0o750


def test_read_eof_and_partial(fds: Fds, tmp_file: Callable[[bytes], Path]) -> None:
    n = fds.own(fd.open(tmp_file(b"0123456789"), fd.O_RDONLY))
    assert fd.read(n, 4) == b"0123"
    assert fd.read(n, 0) == b""
    assert fd.read(n, 100) == b"456789"
    assert fd.read(n, 100) == b""


def test_write_bytes_like(fds: Fds, tmp_path: Path) -> None:
    p = tmp_path / "w"
    n = fds.own(fd.open(p, fd.O_WRONLY | fd.O_CREAT, 0o600))
    assert fd.write(n, b"a") == 1
    assert fd.write(n, bytearray(b"bc")) == 2
    assert fd.write(n, memoryview(b"--de--")[2:4]) == 2
    assert fd.write(n, b"") == 0
    assert p.read_bytes() == b"abcde"


def test_write_any_bytes_like_like_os_write(fds: Fds) -> None:
    """``os.write`` takes any C-contiguous buffer, whatever its item format."""
    r, w = fds.pipe()
    for obj in (array.array("i", [1, 2]), memoryview(bytearray(b"xyzw")).cast("H")):
        expected = bytes(obj)
        assert fd.write(w, obj) == len(expected)
        assert fd.read(r, 100) == expected


def test_readinto_any_writable_buffer(fds: Fds) -> None:
    """``os.readv``/``socket.recv_into`` fill any writable C-contiguous buffer, e.g. an array."""
    r, w = fds.pipe()
    fd.write(w, struct.pack("=ii", 1, 2))
    buf = array.array("i", [0, 0])
    assert fd.readinto(r, buf) == 8
    assert buf.tolist() == [1, 2]


def test_readinto_bytearray_and_memoryview(fds: Fds, tmp_file: Callable[[bytes], Path]) -> None:
    n = fds.own(fd.open(tmp_file(b"abcdefgh"), fd.O_RDONLY))
    buf = bytearray(3)
    assert fd.readinto(n, buf) == 3
    assert buf == b"abc"
    backing = bytearray(b"........")
    assert fd.readinto(n, memoryview(backing)[2:6]) == 4
    assert backing == b"..defg.."
    assert fd.readinto(n, bytearray(10)) == 1
    assert fd.readinto(n, bytearray(10)) == 0
    assert fd.readinto(n, bytearray(0)) == 0


def test_close_really_closes(fds: Fds) -> None:
    r, w = fd.pipe()
    fd.close(w)
    assert not is_open(w)
    assert fd.read(r, 10) == b""  # the writer is gone: EOF
    fd.close(r)
    assert not is_open(r)


# ---------------------------------------------------------------------------------------------
# pread, pwrite, lseek


def test_pread_pwrite_leave_position(fds: Fds, tmp_file: Callable[[bytes], Path]) -> None:
    p = tmp_file(b"0123456789")
    n = fds.own(fd.open(p, fd.O_RDWR))
    fd.lseek(n, 2)
    assert fd.pread(n, 3, 5) == b"567"
    assert fd.pread(n, 100, 8) == b"89"
    assert fd.pread(n, 10, 100) == b""
    assert fd.pwrite(n, b"AB", 0) == 2
    assert fd.lseek(n, 0, os.SEEK_CUR) == 2
    assert p.read_bytes() == b"AB23456789"
    # pwrite past the end leaves a hole of zeros.
    assert fd.pwrite(n, b"Z", 12) == 1
    assert p.read_bytes() == b"AB23456789\0\0Z"
    assert fd.read(n, 2) == b"23"


def test_lseek_whences(fds: Fds, tmp_file: Callable[[bytes], Path]) -> None:
    n = fds.own(fd.open(tmp_file(b"x" * 100), fd.O_RDONLY))
    assert fd.lseek(n, 10, os.SEEK_SET) == 10
    assert fd.lseek(n, 5, os.SEEK_CUR) == 15
    assert fd.lseek(n, -5, os.SEEK_CUR) == 10
    assert fd.lseek(n, 0, os.SEEK_END) == 100
    assert fd.lseek(n, -1, os.SEEK_END) == 99
    assert fd.lseek(n, 7) == 7  # whence defaults to SEEK_SET
    assert os.lseek(n, 0, os.SEEK_CUR) == 7
    assert fd.lseek(n, 1000, os.SEEK_SET) == 1000  # past the end is allowed


def test_lseek_data_and_hole(fds: Fds, tmp_path: Path) -> None:
    p = tmp_path / "sparse"
    n = fds.own(fd.open(p, fd.O_RDWR | fd.O_CREAT, 0o600))
    fd.pwrite(n, b"d" * 4096, 1 << 20)
    try:
        data = fd.lseek(n, 0, os.SEEK_DATA)
        hole = fd.lseek(n, 0, os.SEEK_HOLE)
    except OSError as e:
        pytest.skip(f"SEEK_DATA/SEEK_HOLE unsupported here: {e}")
    assert data == os.lseek(n, 0, os.SEEK_DATA)
    assert hole == os.lseek(n, 0, os.SEEK_HOLE)


# ---------------------------------------------------------------------------------------------
# pipe, dup, dup2


def test_pipe_roundtrip_cloexec(fds: Fds) -> None:
    r, w = fds.pipe()
    assert_cloexec(r)
    assert_cloexec(w)
    assert fd.get_blocking(r) is True
    assert fcntl.fcntl(r, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
    assert fcntl.fcntl(w, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY
    assert fd.write(w, b"through the pipe") == 16
    assert fd.read(r, 100) == b"through the pipe"


def test_pipe_nonblock_and_cloexec_false(fds: Fds) -> None:
    r, w = fds.pipe(os.O_NONBLOCK, cloexec=False)
    for n in (r, w):
        assert fd.get_blocking(n) is False
        assert_cloexec(n, False)
    with pytest.raises(BlockingIOError):
        fd.read(r, 1)


def test_pipe_write_fills_then_eagain(fds: Fds) -> None:
    _, w = fds.pipe(os.O_NONBLOCK)
    size = fd.fcntl(w, fcntl.F_GETPIPE_SZ)
    total = 0
    # PT012: the loop runs until the write that raises.
    with pytest.raises(BlockingIOError):  # noqa: PT012
        while True:
            total += fd.write(w, b"\0" * 65536)
    assert total == size


def test_dup_cloexec_default_and_false(fds: Fds) -> None:
    r, w = fds.pipe()
    d = fds.own(fd.dup(w))
    assert d not in (r, w)
    assert_cloexec(d)
    e = fds.own(fd.dup(w, cloexec=False))
    assert_cloexec(e, False)
    fd.write(d, b"1")
    fd.write(e, b"2")
    assert fd.read(r, 10) == b"12"
    assert os.fstat(d).st_ino == os.fstat(w).st_ino


def test_dup2_replaces_target(fds: Fds) -> None:
    r1, w1 = fds.pipe()
    r2, w2 = fds.pipe()
    assert fd.dup2(w1, w2) == w2  # w2 now writes to pipe 1, pipe 2's writer is closed
    assert_cloexec(w2, False)  # inheritable by default, as os.dup2
    fd.write(w2, b"via w2")
    assert fd.read(r1, 100) == b"via w2"
    # Pipe 2 lost its only writer: EOF on its reader.
    assert fd.read(r2, 100) == b""


def test_dup2_cloexec_false_and_free_target(fds: Fds) -> None:
    r, w = fds.pipe()
    target = fds.own(fd.dup(w))
    fds.close(target)  # a free number
    assert fd.dup2(r, target, cloexec=False) == target
    fds.own(target)
    assert_cloexec(target, False)
    assert os.fstat(target).st_ino == os.fstat(r).st_ino


def test_dup2_same_fd_is_noop(fds: Fds) -> None:
    r, w = fds.pipe()
    fd.set_cloexec(w, False)
    assert fd.dup2(w, w) == w
    assert fd.dup2(w, w, cloexec=False) == w
    assert is_open(w)
    fd.write(w, b"still open")
    assert fd.read(r, 100) == b"still open"


# ---------------------------------------------------------------------------------------------
# fcntl, blocking, cloexec


def test_fcntl_getfl_setfl(fds: Fds) -> None:
    r, _ = fds.pipe()
    flags = fd.fcntl(r, fcntl.F_GETFL)
    assert flags == fcntl.fcntl(r, fcntl.F_GETFL)
    assert fd.fcntl(r, fcntl.F_SETFL, flags | os.O_NONBLOCK) == 0
    assert fcntl.fcntl(r, fcntl.F_GETFL) & os.O_NONBLOCK
    assert fd.get_blocking(r) is False


def test_fcntl_pipe_size(fds: Fds) -> None:
    r, _ = fds.pipe()
    assert fd.fcntl(r, fcntl.F_GETPIPE_SZ) == fcntl.fcntl(r, fcntl.F_GETPIPE_SZ)
    got = fd.fcntl(r, fcntl.F_SETPIPE_SZ, 1 << 18)
    assert got >= 1 << 18
    assert fd.fcntl(r, fcntl.F_GETPIPE_SZ) == got


def test_fcntl_getfd_and_dupfd_cloexec(fds: Fds) -> None:
    r, _ = fds.pipe()
    assert fd.fcntl(r, fcntl.F_GETFD) == fcntl.FD_CLOEXEC
    d = fds.own(fd.fcntl(r, fcntl.F_DUPFD_CLOEXEC, 100))
    assert d >= 100
    assert_cloexec(d)


@pytest.mark.parametrize(
    "cmd", [fcntl.F_GETLK, fcntl.F_SETLK, fcntl.F_SETLKW, fcntl.F_OFD_GETLK, 9999]
)
def test_fcntl_pointer_commands_refused(fds: Fds, cmd: int) -> None:
    """An int where a pointer goes is refused; the lock commands take a `fd.Lock` instead
    (tests/test_fd_locks.py)."""
    r, _ = fds.pipe()
    with pytest.raises(ValueError, match="fcntl command"):
        fd.fcntl(r, cmd, 12345)


def test_set_and_get_blocking(fds: Fds) -> None:
    r, _ = fds.pipe()
    assert fd.get_blocking(r) is True
    fd.set_blocking(r, False)
    assert fd.get_blocking(r) is False
    assert os.get_blocking(r) is False
    fd.set_blocking(r, False)  # already so: unchanged
    assert fd.get_blocking(r) is False
    fd.set_blocking(r, True)
    assert os.get_blocking(r) is True


def test_set_and_get_cloexec(fds: Fds) -> None:
    r, _ = fds.pipe()
    fd.set_cloexec(r, False)
    assert_cloexec(r, False)
    assert os.get_inheritable(r) is True
    fd.set_cloexec(r)  # default True
    assert_cloexec(r)
    assert os.get_inheritable(r) is False


# ---------------------------------------------------------------------------------------------
# mkstemp, mkdtemp


def test_mkstemp_defaults(fds: Fds, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    n, path = fd.mkstemp()
    fds.own(n)
    assert isinstance(path, str)
    assert os.path.dirname(path) == str(tmp_path)
    assert os.path.basename(path).startswith("tmp")
    st = os.stat(path)
    assert stat_mod.S_ISREG(st.st_mode)
    assert stat_mod.S_IMODE(st.st_mode) == 0o600
    assert os.fstat(n).st_ino == st.st_ino
    assert fcntl.fcntl(n, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDWR
    assert_cloexec(n)
    fd.write(n, b"tmp")
    assert fd.pread(n, 10, 0) == b"tmp"


def test_mkstemp_prefix_suffix_dir(fds: Fds, tmp_path: Path) -> None:
    names = set()
    for _ in range(20):
        n, path = fd.mkstemp(suffix=".dat", prefix="pre-", dir=tmp_path)
        fds.own(n)
        base = os.path.basename(path)
        assert os.path.dirname(path) == str(tmp_path)
        assert base.startswith("pre-")
        assert base.endswith(".dat")
        assert len(base) > len("pre-.dat")
        names.add(base)
    assert len(names) == 20


def test_mkstemp_non_utf8_dir(fds: Fds, tmp_path: Path) -> None:
    d = os.fsencode(tmp_path) + b"/dir-\xff"
    os.mkdir(d)
    n, path = fd.mkstemp(dir=d, prefix=b"p-")
    fds.own(n)
    raw = os.fsencode(path)
    assert os.path.dirname(raw) == d
    assert os.path.basename(raw).startswith(b"p-")
    assert os.stat(raw).st_ino == os.fstat(n).st_ino


def test_mkstemp_cloexec_false_and_mode_despite_umask(fds: Fds, tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        n, path = fd.mkstemp(dir=str(tmp_path), cloexec=False)
    finally:
        os.umask(old)
    fds.own(n)
    assert_cloexec(n, False)
    assert stat_mod.S_IMODE(os.stat(path).st_mode) == 0o600


def test_mkdtemp(tmp_path: Path) -> None:
    path = fd.mkdtemp(suffix="-d", prefix="dir-", dir=tmp_path)
    assert os.path.isdir(path)
    assert os.path.dirname(path) == str(tmp_path)
    base = os.path.basename(path)
    assert base.startswith("dir-")
    assert base.endswith("-d")
    assert stat_mod.S_IMODE(os.stat(path).st_mode) == 0o700
    other = fd.mkdtemp(dir=tmp_path)
    assert other != path
    assert os.path.basename(other).startswith("tmp")


# ---------------------------------------------------------------------------------------------
# stat, fstat, lstat

FIELDS = (
    "st_dev",
    "st_ino",
    "st_mode",
    "st_nlink",
    "st_uid",
    "st_gid",
    "st_rdev",
    "st_size",
    "st_blksize",
    "st_blocks",
    "st_atime_ns",
    "st_mtime_ns",
    "st_ctime_ns",
)


def assert_same_stat(mine: fd.StatResult, theirs: os.stat_result) -> None:
    assert isinstance(mine, fd.StatResult)
    assert mine._fields == FIELDS
    for name in FIELDS:
        assert getattr(mine, name) == getattr(theirs, name), name
        assert type(getattr(mine, name)) is int, name


def test_stat_matches_os_stat(tmp_file: Callable[[bytes], Path]) -> None:
    p = tmp_file(b"x" * 12345)
    os.utime(p, ns=(1_600_000_000_123_456_789, 1_700_000_000_987_654_321))
    st = fd.stat(p)
    assert_same_stat(st, os.stat(p))
    assert st.st_size == 12345
    assert st.st_atime_ns == 1_600_000_000_123_456_789
    assert st.st_mtime_ns == 1_700_000_000_987_654_321
    assert fd.stat(str(p)) == fd.stat(os.fsencode(p)) == st


def test_stat_times_before_the_epoch(tmp_file: Callable[[bytes], Path]) -> None:
    p = tmp_file(b"")
    os.utime(p, ns=(-1_500_000_000, -1))
    st = fd.stat(p)
    assert st.st_atime_ns == os.stat(p).st_atime_ns == -1_500_000_000
    assert st.st_mtime_ns == os.stat(p).st_mtime_ns == -1


def test_fstat_and_lstat(fds: Fds, tmp_file: Callable[[bytes], Path], tmp_path: Path) -> None:
    p = tmp_file(b"abc")
    link = tmp_path / "link"
    link.symlink_to(p)
    n = fds.own(fd.open(p, fd.O_RDONLY))
    assert_same_stat(fd.fstat(n), os.fstat(n))
    assert_same_stat(fd.lstat(link), os.lstat(link))
    assert stat_mod.S_ISLNK(fd.lstat(link).st_mode)
    assert fd.stat(link).st_ino == fd.fstat(n).st_ino
    assert_same_stat(fd.stat(link), os.stat(link))


def test_stat_directory_and_device(fds: Fds, tmp_path: Path) -> None:
    assert_same_stat(fd.stat(tmp_path), os.stat(tmp_path))
    assert stat_mod.S_ISDIR(fd.stat(tmp_path).st_mode)
    dev = fd.stat("/dev/null")
    assert stat_mod.S_ISCHR(dev.st_mode)
    assert dev.st_rdev == os.stat("/dev/null").st_rdev != 0
    r, _ = fds.pipe()
    assert stat_mod.S_ISFIFO(fd.fstat(r).st_mode)


def test_stat_sparse_file_over_4gib(fds: Fds, tmp_path: Path) -> None:
    p = tmp_path / "big"
    size = (5 << 30) + 7
    n = fds.own(fd.open(p, fd.O_RDWR | fd.O_CREAT, 0o600))
    try:
        os.ftruncate(n, size)
    except OSError as e:
        pytest.skip(f"this filesystem cannot hold a sparse 5 GiB file: {e}")
    assert fd.stat(p).st_size == size
    assert fd.fstat(n).st_size == size
    assert fd.lseek(n, 0, os.SEEK_END) == size
    assert fd.pwrite(n, b"end", size) == 3
    assert fd.pread(n, 10, size) == b"end"
    assert fd.pread(n, 4, (4 << 30) + 1) == b"\0\0\0\0"
    assert_same_stat(fd.fstat(n), os.fstat(n))


# ---------------------------------------------------------------------------------------------
# poll


def test_poll_timeout_zero_returns_empty(fds: Fds) -> None:
    r, _ = fds.pipe()
    start = time.monotonic()
    assert fd.poll([(r, fd.POLLIN)], 0) == []
    assert time.monotonic() - start < 0.5


def test_poll_readable_and_writable(fds: Fds) -> None:
    r, w = fds.pipe()
    assert fd.poll([(r, fd.POLLIN), (w, fd.POLLOUT)], 0) == [(w, fd.POLLOUT)]
    fd.write(w, b"x")
    assert fd.poll([(r, fd.POLLIN), (w, fd.POLLOUT)], 0) == [
        (r, fd.POLLIN),
        (w, fd.POLLOUT),
    ]
    assert fd.poll(iter([(r, fd.POLLIN)])) == [(r, fd.POLLIN)]  # any iterable; None: no limit


def test_poll_hup_and_err(fds: Fds) -> None:
    r, w = fds.pipe()
    fds.close(w)
    assert fd.poll([(r, fd.POLLIN)], 0) == [(r, select.POLLHUP)]
    r2, w2 = fds.pipe()
    fds.close(r2)
    assert fd.poll([(w2, fd.POLLOUT)], 0) == [(w2, fd.POLLOUT | fd.POLLERR)]


def test_poll_timeout_is_in_seconds(fds: Fds) -> None:
    r, _ = fds.pipe()
    start = time.monotonic()
    assert fd.poll([(r, fd.POLLIN)], 0.25) == []
    elapsed = time.monotonic() - start
    assert 0.2 <= elapsed < 2.0


def test_poll_empty_list_sleeps(fds: Fds) -> None:
    start = time.monotonic()
    assert fd.poll([], 0.1) == []
    assert time.monotonic() - start >= 0.09


def test_poll_closed_fd_reports_nval(fds: Fds) -> None:
    r, w = fd.pipe()
    fd.close(r)
    fd.close(w)
    assert fd.poll([(r, fd.POLLIN)], 0) == [(r, select.POLLNVAL)]


def test_poll_matches_select_poll(fds: Fds, tcp_pair: tuple[int, int]) -> None:
    c, s = tcp_pair
    fd.send(c, b"x")
    fd.shutdown(c, fd.SHUT_WR)
    p = select.poll()
    for n in (c, s):
        p.register(n, select.POLLIN | select.POLLOUT)
    expected = sorted(p.poll(1000))
    mine = sorted(fd.poll([(c, fd.POLLIN | fd.POLLOUT), (s, fd.POLLIN | fd.POLLOUT)], 1))
    assert mine == expected
