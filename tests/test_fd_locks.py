"""``fcntl`` record locks (F_GETLK/F_SETLK/F_SETLKW and the F_OFD_* forms) with
``fdkit.fd.Lock``, held across real processes."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from fdkit import fd
from helpers import Fds

TIMEOUT = 10.0

# The other process: tries the lock it is told to, reports what F_SETLK and F_GETLK said.
PROBE = textwrap.dedent(
    """
    import json, sys
    from fdkit import fd
    path, setcmd, getcmd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    n = fd.open(path, fd.O_RDWR)
    out = {}
    try:
        fd.fcntl(n, setcmd, fd.Lock(fd.F_WRLCK, fd.SEEK_SET, 0, 10))
        out["set"] = "ok"
    except OSError as e:
        out["set"] = e.errno
    out["get"] = list(fd.fcntl(n, getcmd, fd.Lock(fd.F_WRLCK, fd.SEEK_SET, 0, 10)))
    print(json.dumps(out))
    """
)


def probe(path: Path, setcmd: int, getcmd: int) -> dict[str, object]:
    r = subprocess.run(
        [sys.executable, "-c", PROBE, str(path), str(setcmd), str(getcmd)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    out: dict[str, object] = json.loads(r.stdout)
    return out


@pytest.fixture
def locked_file(fds: Fds, tmp_path: Path) -> tuple[int, Path]:
    path = tmp_path / "locked"
    path.write_bytes(b"0123456789abcdef")
    return fds.own(fd.open(path, fd.O_RDWR)), path


def test_process_lock_seen_by_another_process(locked_file: tuple[int, Path]) -> None:
    n, path = locked_file
    got = fd.fcntl(n, fd.F_SETLK, fd.Lock(fd.F_WRLCK, fd.SEEK_SET, 0, 10))
    assert isinstance(got, fd.Lock)
    out = probe(path, fd.F_SETLK, fd.F_GETLK)
    assert out["set"] in (errno.EAGAIN, errno.EACCES)
    # F_GETLK names the holder: this process.
    assert out["get"] == [fd.F_WRLCK, fd.SEEK_SET, 0, 10, os.getpid()]
    # Released, the other process gets it.
    fd.fcntl(n, fd.F_SETLK, fd.Lock(fd.F_UNLCK, fd.SEEK_SET, 0, 10))
    out = probe(path, fd.F_SETLK, fd.F_GETLK)
    assert out["set"] == "ok"
    assert out["get"][0] == fd.F_UNLCK  # type: ignore[index]


def test_ofd_lock_seen_by_another_process(locked_file: tuple[int, Path]) -> None:
    n, path = locked_file
    fd.fcntl(n, fd.F_OFD_SETLK, fd.Lock(fd.F_WRLCK, fd.SEEK_SET, 0, 10))
    out = probe(path, fd.F_OFD_SETLK, fd.F_OFD_GETLK)
    assert out["set"] in (errno.EAGAIN, errno.EACCES)
    assert out["get"] == [fd.F_WRLCK, fd.SEEK_SET, 0, 10, -1]  # OFD locks have no pid


def test_getlk_without_conflict_and_against_stdlib(locked_file: tuple[int, Path]) -> None:
    n, path = locked_file
    want = fd.Lock(fd.F_RDLCK, fd.SEEK_SET, 4, 2)
    assert fd.fcntl(n, fd.F_GETLK, want) == want._replace(type=fd.F_UNLCK)
    # The stdlib's fcntl.lockf takes the lock; fdkit's F_GETLK from another process sees it.
    fcntl.lockf(n, fcntl.LOCK_EX, 3, 1)
    out = probe(path, fd.F_SETLK, fd.F_GETLK)
    assert out["set"] in (errno.EAGAIN, errno.EACCES)
    assert out["get"] == [fd.F_WRLCK, fd.SEEK_SET, 1, 3, os.getpid()]


HOLDER = textwrap.dedent(
    """
    import sys
    from fdkit import fd
    n = fd.open(sys.argv[1], fd.O_RDWR)
    fd.fcntl(n, fd.F_SETLK, fd.Lock(fd.F_WRLCK))
    print("locked", flush=True)
    sys.stdin.read()  # hold until the parent closes our stdin
    """
)


def test_setlkw_waits_with_the_gil_released(locked_file: tuple[int, Path]) -> None:
    n, path = locked_file
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdin is not None
        assert holder.stdout.readline() == "locked\n"
        done: list[fd.Lock] = []
        t = threading.Thread(
            target=lambda: done.append(fd.fcntl(n, fd.F_SETLKW, fd.Lock(fd.F_WRLCK)))
        )
        t.start()
        # While the thread waits in F_SETLKW, this thread keeps running Python.
        spins = 0
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            spins += 1
        assert not done
        assert t.is_alive()
        assert spins > 1000
        holder.communicate(timeout=TIMEOUT)  # closes its stdin: the holder exits, the lock goes
        t.join(TIMEOUT)
        assert not t.is_alive()
        assert done[0].type == fd.F_WRLCK
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate(timeout=TIMEOUT)


def test_bad_lock_arguments(locked_file: tuple[int, Path], fds: Fds) -> None:
    n, _ = locked_file
    with pytest.raises(ValueError, match="takes a lock"):
        fd.fcntl(n, fd.F_GETLK, 0)
    with pytest.raises(ValueError, match="5 items"):
        fd.fcntl(n, fd.F_GETLK, (1, 0, 0, 0))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="type out of range"):
        fd.fcntl(n, fd.F_GETLK, fd.Lock(1 << 20))
    with pytest.raises(TypeError):
        fd.fcntl(n, fd.F_GETLK, ("a", 0, 0, 0, 0))  # type: ignore[arg-type]
    with pytest.raises(OSError, match="Errno") as e:
        fd.fcntl(n, fd.F_SETLK, fd.Lock(99))  # not a lock type
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError, match="Errno") as e:
        fd.fcntl(n, fd.F_OFD_SETLK, fd.Lock(fd.F_WRLCK, pid=1))  # OFD locks want pid 0
    assert e.value.errno == errno.EINVAL
    r, _ = fds.pipe()
    with pytest.raises(OSError, match="Errno") as e:
        fd.fcntl(r, fd.F_SETLK, fd.Lock(fd.F_WRLCK))  # a read-only fd cannot take a write lock
    assert e.value.errno == errno.EBADF
    with pytest.raises(TypeError):
        fd.fcntl(n, fcntl.F_GETFL, fd.Lock(fd.F_WRLCK))
