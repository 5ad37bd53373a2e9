"""``zerocopy.transfer`` where its first path is refused and it falls back: an O_APPEND
destination (copy_file_range, sendfile and splice all refuse it), files on two filesystems,
/proc and sysfs files that lie about their size or refuse splice. Every byte still moves, and
``transfer_stats`` names each path left and why; what worked is remembered for the pair of
files, and forgotten with them.

Every call that could hang on a bug runs under :func:`helpers.bounded`; the other ends of
pipes and sockets are threads with bounded joins.

Counts, offsets and bad arguments are in test_zerocopy_transfer_counts.py, peers that go away
and non-blocking ends in test_zerocopy_transfer_peers.py; what they share is in
helpers/zerocopy_transfer.py.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from fdkit import fd
from fdkit.types import TransferStats
from helpers import Fds, Feeder, bounded, payload
from helpers import zerocopy_transfer as zt
from helpers.zerocopy_transfer import dst_file, src_file, transfer_with_stats

pytestmark = pytest.mark.timeout(30)


# ---------------------------------------------------------------------------------------------
# Forced fallbacks: every byte still moves, and the stats say why


def check_chain(stats: TransferStats) -> list[tuple[str, int | None]]:
    chain = [f["from"] for f in stats["fallbacks"]] + [stats["path"]]
    for f, nxt in zip(stats["fallbacks"], chain[1:], strict=True):
        assert f["to"] == nxt, stats
        assert f["reason"], stats
    return [(f["from"], f["errno"]) for f in stats["fallbacks"]]


@pytest.mark.parametrize("src_kind", ["file", "tmpfs", "pipe", "tcp", "zero"])
@pytest.mark.parametrize("size", [10_000, 3 << 20], ids=["small", "3MiB"])
def test_append_only_destination(
    src_kind: str, size: int, fds: Fds, tmp_path: Path, shm_dir: Path
) -> None:
    """O_APPEND: copy_file_range says EBADF, sendfile and splice say EINVAL; bytes already
    spliced into the internal pipe are copied out, the rest goes by read/write, appended
    after what the file held."""
    data = bytes(size) if src_kind == "zero" else payload(size, seed=12)
    feeder: Feeder | None = None
    if src_kind in ("file", "tmpfs"):
        src = src_file(tmp_path if src_kind == "file" else shm_dir, data, fds)
    elif src_kind == "zero":
        src = fds.own(fd.open("/dev/zero", fd.O_RDONLY))
    else:
        src, feeder = zt.fed_stream(src_kind, data, fds)
    (tmp_path / "log").write_bytes(b"existing\n")
    dst = fds.own(fd.open(tmp_path / "log", fd.O_WRONLY | fd.O_APPEND))
    if feeder:
        feeder.start()
    out = bounded(lambda: transfer_with_stats(src, dst, size))
    if feeder:
        feeder.finish()
    n, stats = out.get()
    assert n == size
    assert (tmp_path / "log").read_bytes() == b"existing\n" + data
    if size <= 64 << 10:
        assert stats["path"] == "read_write"
        return
    assert stats["path"] == "read_write", stats
    fallbacks = check_chain(stats)
    if stats["remembered"]:
        return
    expected = {
        "file": [("copy_file_range", errno.EBADF), ("sendfile", errno.EINVAL)],
        "pipe": [("splice", errno.EINVAL)],
        "tcp": [("splice_via_pipe", errno.EINVAL)],
        "zero": [("splice_via_pipe", errno.EINVAL)],
    }
    # ext4 → tmpfs is EXDEV before O_APPEND is even looked at.
    if src_kind == "tmpfs":
        assert fallbacks[0][0] == "copy_file_range", stats
        assert fallbacks[1:] == [("sendfile", errno.EINVAL)], stats
    else:
        assert fallbacks == expected[src_kind], stats


def test_copy_file_range_across_filesystems_moves_every_byte(
    fds: Fds, tmp_path: Path, shm_dir: Path
) -> None:
    data = payload(5 << 20, seed=13)
    for src_dir, dst_dir in ((tmp_path, shm_dir), (shm_dir, tmp_path)):
        src = src_file(src_dir, data, fds, "cross-src")
        dst, path = dst_file(dst_dir, fds, "cross-dst")
        n, stats = transfer_with_stats(src, dst)
        assert n == len(data)
        assert path.read_bytes() == data
        chain = check_chain(stats)
        if stats["path"] != "copy_file_range" and not stats["remembered"]:
            assert chain[0] == ("copy_file_range", errno.EXDEV), stats
        fds.close(src)
        fds.close(dst)


def proc_and_sys_files() -> list[str]:
    candidates = [
        "/proc/self/cmdline",  # splice/sendfile: EINVAL
        "/proc/self/environ",
        "/proc/filesystems",  # seq_file: sendfile works, st_size is 0
        "/proc/version",
        "/sys/devices/system/cpu/possible",  # sysfs: sendfile returns 0, st_size is 4096
        "/sys/kernel/mm/transparent_hugepage/enabled",
    ]
    return [p for p in candidates if os.path.exists(p)]


@pytest.mark.parametrize("path", proc_and_sys_files())
@pytest.mark.parametrize("dst_kind", ["file", "tmpfs", "socketpair", "pipe"])
def test_proc_and_sys_sources(
    path: str, dst_kind: str, fds: Fds, tmp_path: Path, shm_dir: Path
) -> None:
    """/proc and sysfs files report a size of 0 or 4096 whatever they hold, and refuse
    splice or make copy_file_range/sendfile return 0 with data left: the content must still
    arrive whole, by whichever path works."""
    with open(path, "rb") as f:
        expect = f.read()
    src = fds.own(fd.open(path, fd.O_RDONLY))
    on_disk = {"file": tmp_path, "tmpfs": shm_dir}
    dst, out_path, sink = zt.drained_dst(
        "file" if dst_kind in on_disk else dst_kind, fds, on_disk.get(dst_kind)
    )
    out = bounded(lambda: transfer_with_stats(src, dst))
    n, stats = out.get()
    if sink is not None:
        got = zt.sunk(dst_kind, dst, sink, fds)
    else:
        assert out_path is not None
        got = out_path.read_bytes()
    assert got == expect, stats
    assert n == len(expect) == stats["bytes"]
    check_chain(stats)
    if dst_kind in ("file", "tmpfs") and not stats["remembered"]:
        # procfs/sysfs → a disk or tmpfs file: copy_file_range cannot work across them.
        assert stats["fallbacks"], stats
        assert stats["fallbacks"][0]["from"] == "copy_file_range"
    if path.startswith("/sys/") and dst_kind != "pipe" and not stats["remembered"]:
        # sendfile from sysfs returns 0 before the end: the reason says so.
        reasons = {f["reason"] for f in stats["fallbacks"] if f["from"] == "sendfile"}
        if reasons:
            assert any("0" in r or "refused" in r for r in reasons), stats


def test_remembered_path_does_not_outlive_the_files(tmp_path: Path) -> None:
    """What worked is remembered per (fd number, device, inode) pair. Once both files are closed
    and deleted, a new pair of files can get the same fd numbers and inodes (ext4 reuses both
    at once): it must not inherit the old pair's fallback. Here the old destination was
    O_APPEND (read/write only); the new one takes copy_file_range."""
    data = payload(100_000, seed=14)

    def once(append: bool) -> tuple[tuple[int, ...], TransferStats]:
        (tmp_path / "src").write_bytes(data)
        s = fd.open(tmp_path / "src", fd.O_RDONLY)
        t = fd.open(tmp_path / "dst", fd.O_WRONLY | fd.O_CREAT | (fd.O_APPEND if append else 0))
        try:
            ids = (s, fd.fstat(s).st_ino, t, fd.fstat(t).st_ino)
            n, stats = transfer_with_stats(s, t)
            assert n == len(data)
        finally:
            fd.close(s)
            fd.close(t)
        assert (tmp_path / "dst").read_bytes() == data
        if append:
            # Free the inodes for the next pair. The next pair's files stay: a later test
            # must not meet its memory on reused inodes in turn.
            (tmp_path / "src").unlink()
            (tmp_path / "dst").unlink()
        return ids, stats

    old_ids, old = once(append=True)
    assert old["path"] == "read_write"
    new_ids, new = once(append=False)
    if new_ids != old_ids:
        pytest.skip("the kernel did not reuse the fd numbers and inodes this time")
    assert (new["path"], new["remembered"]) == ("copy_file_range", False), (
        f"a new pair of files inherited the old pair's fallback: {new}"
    )
