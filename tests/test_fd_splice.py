"""``splice``/``tee`` as single syscalls on int fds, ``ioctl`` for int-argument requests, and
the small additions to the fd API: ``accept(cloexec=)``, ``accept_many(max=None)``, ``dup2``
inheritable by default, the SEEK_*/POLL* constants."""

from __future__ import annotations

import errno
import os
import select
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fdkit import fd
from helpers import Fds, wait_for


def test_splice_constants_match_os() -> None:
    for name in ("SPLICE_F_MOVE", "SPLICE_F_NONBLOCK", "SPLICE_F_MORE"):
        if hasattr(os, name):
            assert getattr(fd, name) == getattr(os, name)
    assert (fd.SPLICE_F_MOVE, fd.SPLICE_F_NONBLOCK, fd.SPLICE_F_MORE, fd.SPLICE_F_GIFT) == (
        1,
        2,
        4,
        8,
    )


def test_splice_file_to_pipe_to_file_with_offsets(fds: Fds, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.write_bytes(b"0123456789" * 10)
    n = fds.own(fd.open(src, fd.O_RDONLY))
    r, w = fds.pipe()
    assert fd.splice(n, w, 20, off_in=5) == 20
    assert fd.lseek(n, 0, fd.SEEK_CUR) == 0  # the offset form leaves the position alone
    dst = fds.own(fd.open(tmp_path / "dst", fd.O_RDWR | fd.O_CREAT, 0o600))
    assert fd.splice(r, dst, 20, off_out=3, flags=fd.SPLICE_F_MOVE) == 20
    assert fd.pread(dst, 100, 0) == b"\0\0\0" + (b"0123456789" * 3)[5:25]
    # Without offsets, the file position moves; 0 at the end of the input.
    fd.lseek(n, 95, fd.SEEK_SET)
    assert fd.splice(n, w, 100) == 5
    assert fd.splice(n, w, 100) == 0
    assert fd.read(r, 10) == b"56789"


def test_splice_socket_to_pipe_and_tee(fds: Fds, tcp_pair: tuple[int, int]) -> None:
    a, b = tcp_pair
    fd.send(a, b"over tcp")
    fd.poll([(b, fd.POLLIN)], 5)
    r1, w1 = fds.pipe()
    r2, w2 = fds.pipe()
    assert fd.splice(b, w1, 64) == 8
    assert fd.tee(r1, w2, 64) == 8  # copied, not consumed
    assert fd.read(r2, 64) == b"over tcp"
    assert fd.splice(r1, a, 64, flags=fd.SPLICE_F_MORE) == 8  # pipe to socket
    fd.poll([(b, fd.POLLIN)], 5)
    assert fd.recv(b, 64) == b"over tcp"


def test_splice_and_tee_errors(fds: Fds, tmp_path: Path) -> None:
    r, w = fds.pipe()
    _, w2 = fds.pipe()
    with pytest.raises(BlockingIOError):
        fd.splice(r, w2, 10, flags=fd.SPLICE_F_NONBLOCK)  # empty pipe, no wait
    with pytest.raises(OSError, match="Errno") as e:
        fd.splice(r, w, 10)  # a pipe into itself
    assert e.value.errno == errno.EINVAL
    with pytest.raises(BlockingIOError):
        fd.tee(r, w2, 10, fd.SPLICE_F_NONBLOCK)
    f = tmp_path / "f"
    f.write_bytes(b"x")
    a = fds.own(fd.open(f, fd.O_RDONLY))
    b = fds.own(fd.open(tmp_path / "g", fd.O_WRONLY | fd.O_CREAT, 0o600))
    with pytest.raises(OSError, match="Errno") as e:
        fd.splice(a, b, 1)  # neither end is a pipe
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError, match="Errno") as e:
        fd.splice(r, w2, 1, off_in=0)  # a pipe has no offset
    assert e.value.errno == errno.ESPIPE
    with pytest.raises(ValueError, match="non-negative"):
        fd.splice(r, w, -1)
    with pytest.raises(ValueError, match="non-negative"):
        fd.tee(-1, w, 1)


def test_ioctl_int_requests(fds: Fds, tcp_pair: tuple[int, int]) -> None:
    a, b = tcp_pair
    assert fd.ioctl(b, fd.FIONREAD) == 0
    fd.send(a, b"12345")
    fd.poll([(b, fd.POLLIN)], 5)
    assert fd.ioctl(b, fd.SIOCINQ) == 5
    # The sender's queue counts what the peer has not acknowledged (SIOCOUTQ) and what was not
    # sent yet (SIOCOUTQNSD): the 5 bytes arrived, so nothing is left unsent, and the
    # acknowledgement (maybe delayed) empties the queue.
    assert fd.ioctl(a, fd.SIOCOUTQNSD) == 0
    wait_for(lambda: fd.ioctl(a, fd.SIOCOUTQ) == 0, what="the peer's acknowledgement")
    r, w = fds.pipe()
    fd.write(w, b"abc")
    assert fd.ioctl(r, fd.FIONREAD) == 3
    assert fd.ioctl(r, fd.FIONBIO, 1) == 0
    assert fd.get_blocking(r) is False
    fd.ioctl(r, fd.FIONBIO, 0)
    assert fd.get_blocking(r) is True
    fd.ioctl(r, fd.FIONCLEX)
    assert fd.get_cloexec(r) is False
    fd.ioctl(r, fd.FIOCLEX)
    assert fd.get_cloexec(r) is True
    with pytest.raises(OSError, match="Errno") as e:
        fd.ioctl(r, fd.TIOCOUTQ)  # a tty request on a pipe
    assert e.value.errno == errno.ENOTTY


@pytest.mark.parametrize("request_", [0x5401, 0x5413, 0x8915, 0xDEADBEEF, -1, 1 << 70])
def test_ioctl_struct_requests_refused(fds: Fds, request_: int) -> None:
    r, _ = fds.pipe()
    with pytest.raises(ValueError, match=r"ioctl request|out of range"):
        fd.ioctl(r, request_, 12345)


def test_ioctl_refusal_names_the_request(fds: Fds) -> None:
    r, _ = fds.pipe()
    import termios

    with pytest.raises(ValueError, match="TCGETS"):
        fd.ioctl(r, termios.TCGETS)
    with pytest.raises(ValueError, match="TIOCGWINSZ"):
        fd.ioctl(r, termios.TIOCGWINSZ)


def test_constants() -> None:
    for name in ("SEEK_SET", "SEEK_CUR", "SEEK_END", "SEEK_DATA", "SEEK_HOLE"):
        assert getattr(fd, name) == getattr(os, name)
    for name in ("POLLIN", "POLLOUT", "POLLERR", "POLLHUP", "POLLPRI", "POLLRDHUP", "POLLNVAL"):
        assert getattr(fd, name) == getattr(select, name)
        assert name in fd.__all__


def test_poll_nval_for_a_closed_fd(fds: Fds) -> None:
    r, _ = fds.pipe()
    d = fd.dup(r)
    fd.close(d)
    assert fd.poll([(d, fd.POLLIN)], 0) == [(d, fd.POLLNVAL)]


def test_accept_cloexec_switch(fds: Fds) -> None:
    lfd, addr = fds.listener()
    c1 = fds.client(addr)
    c2 = fds.client(addr)
    s1, peer = fd.accept(lfd)
    fds.own(s1)
    assert fd.get_cloexec(s1) is True
    s2, _ = fd.accept(lfd, cloexec=False)
    fds.own(s2)
    assert fd.get_cloexec(s2) is False
    assert peer == fd.getsockname(c1) or peer == fd.getsockname(c2)


def test_accept_many_none_drains_everything(fds: Fds) -> None:
    lfd, addr = fds.listener(blocking=False, backlog=512)
    clients = [fds.client(addr) for _ in range(300)]
    got: list[int] = []
    while len(got) < len(clients):
        assert fd.poll([(lfd, fd.POLLIN)], 5)
        batch = fd.accept_many(lfd, None)
        fds.own(*(c for c, _ in batch))
        got.extend(c for c, _ in batch)
    assert len(got) == 300  # more than the default max of 64, in as few calls as arrived
    assert fd.accept_many(lfd, None) == []
    with pytest.raises(ValueError, match="max must be at least 1"):
        fd.accept_many(lfd, 0)


def test_dup2_inheritable_by_default(fds: Fds) -> None:
    r, w = fds.pipe()
    target = fds.own(fd.dup(w))
    assert fd.dup2(r, target) == target
    assert fd.get_cloexec(target) is False
    assert os.get_inheritable(target) is True
    assert fd.dup2(w, target, cloexec=True) == target
    assert fd.get_cloexec(target) is True


CHILD = (
    "import os, sys\n"
    "from fdkit import fd\n"
    "fd.dup2(int(sys.argv[1]), 1)\n"
    "os.execv(sys.executable, [sys.executable, '-c', 'print(\"stdout survived exec\")'])\n"
)


def test_dup2_onto_stdout_survives_exec(fds: Fds) -> None:
    """``dup2(w, 1)`` before an exec leaves the child its stdout: the new fd 1 is not
    close-on-exec, whatever ``w`` was."""
    r, w = fds.pipe()
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(w)],
        pass_fds=[w],
        stdout=subprocess.DEVNULL,
        timeout=30,
        check=False,
    )
    assert child.returncode == 0
    fds.close(w)
    assert fd.read(r, 100) == b"stdout survived exec\n"


def test_sendto_on_socket_from_accept_with_socket_module(fds: Fds) -> None:
    # A datagram socketpair: sendto with an address on a connected socket is EISCONN.
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with a, b:
        with pytest.raises(OSError, match="Errno") as e:
            fd.sendto(a.fileno(), b"x", "/nonexistent/fdkit")
        assert e.value.errno in (errno.EISCONN, errno.ENOENT)
