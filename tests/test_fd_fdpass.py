"""Passing fds over unix sockets with ``send_fds``/``recv_fds`` (SCM_RIGHTS): the signatures
and results of ``socket.send_fds``/``socket.recv_fds`` (the stdlib is the oracle on the other
end), close-on-exec received fds, ``MSG_CTRUNC`` reported, and an fd used by another
process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

from fdkit import fd
from helpers import Fds, open_fds

TIMEOUT = 10.0


def pair(fds: Fds, type_: int = socket.SOCK_STREAM) -> tuple[int, int]:
    a, b = fd.socketpair(socket.AF_UNIX, type_)
    fds.own(a, b)
    return a, b


def test_round_trip_in_process(fds: Fds) -> None:
    a, b = pair(fds)
    r, w = fds.pipe()
    assert fd.send_fds(a, [b"here", b" it is"], [w]) == 10
    data, got, flags, addr = fd.recv_fds(b, 64, 4)
    fds.own(*got)
    assert (data, len(got), flags, addr) == (b"here it is", 1, 0, None)
    assert got[0] != w
    assert fd.get_cloexec(got[0]) is True  # MSG_CMSG_CLOEXEC
    assert os.fstat(got[0]).st_ino == os.fstat(w).st_ino
    fd.write(got[0], b"through the passed fd")
    assert fd.read(r, 100) == b"through the passed fd"


def test_cloexec_false_gives_inheritable_fds(fds: Fds) -> None:
    a, b = pair(fds)
    r, w = fds.pipe()
    fd.send_fds(a, [b"x"], [r, w])
    _, got, _, _ = fd.recv_fds(b, 8, 2, cloexec=False)
    fds.own(*got)
    assert [fd.get_cloexec(n) for n in got] == [False, False]


def test_stdlib_sends_fdkit_receives_and_back(fds: Fds) -> None:
    a, b = pair(fds)
    r, w = fds.pipe()
    with socket.socket(fileno=os.dup(a)) as sa, socket.socket(fileno=os.dup(b)) as sb:
        assert socket.send_fds(sa, [b"std"], [w]) == 3
        data, got, flags, addr = fd.recv_fds(b, 16, 1)
        fds.own(*got)
        assert (data, len(got), flags, addr) == (b"std", 1, 0, None)
        assert fd.send_fds(a, [b"kit"], [r]) == 3
        py_data, py_fds, py_flags, py_addr = socket.recv_fds(sb, 16, 1)
        fds.own(*py_fds)
        assert (py_data, len(py_fds), py_flags, py_addr) == (b"kit", 1, 0, None)
        assert os.fstat(py_fds[0]).st_ino == os.fstat(r).st_ino


def test_too_many_fds_sets_ctrunc_and_leaks_none(fds: Fds) -> None:
    a, b = pair(fds)
    r, w = fds.pipe()
    before = set(open_fds())
    fd.send_fds(a, [b"three"], [r, w, r])
    data, got, flags, _ = fd.recv_fds(b, 16, 1)
    fds.own(*got)
    assert data == b"three"
    assert len(got) == 1
    assert flags & socket.MSG_CTRUNC
    # The kernel closed what did not fit: only the one fd is new.
    assert set(open_fds()) - before == set(got)


def test_no_fds_and_zero_maxfds(fds: Fds) -> None:
    a, b = pair(fds)
    r, _ = fds.pipe()
    assert fd.send_fds(a, [b"plain"], []) == 5
    assert fd.recv_fds(b, 16, 4) == (b"plain", [], 0, None)
    before = set(open_fds())
    fd.send_fds(a, [b"dropped"], [r])
    data, got, flags, _ = fd.recv_fds(b, 16, 0)
    assert (data, got) == (b"dropped", [])
    assert flags & socket.MSG_CTRUNC
    assert set(open_fds()) == before


def test_recvmsg_sees_scm_rights(fds: Fds) -> None:
    a, b = pair(fds)
    r, _ = fds.pipe()
    fd.send_fds(a, [b"m"], [r])
    data, anc, flags, _ = fd.recvmsg(b, 8, socket.CMSG_SPACE(4))
    assert (data, flags) == (b"m", 0)
    [(level, kind, raw)] = anc
    assert (level, kind, len(raw)) == (socket.SOL_SOCKET, socket.SCM_RIGHTS, 4)
    n = fds.own(int.from_bytes(raw, sys.byteorder))
    assert fd.get_cloexec(n) is True
    assert os.fstat(n).st_ino == os.fstat(r).st_ino


def test_sendmsg_with_raw_scm_rights(fds: Fds) -> None:
    a, b = pair(fds)
    r, _ = fds.pipe()
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, r.to_bytes(4, sys.byteorder))]
    assert fd.sendmsg(a, [b"raw"], anc) == 3
    data, got, _, _ = fd.recv_fds(b, 8, 1)
    fds.own(*got)
    assert data == b"raw"
    assert os.fstat(got[0]).st_ino == os.fstat(r).st_ino


def test_datagram_fd_passing_to_an_address(fds: Fds, tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "dgram")
    server = fds.sock(socket.AF_UNIX, socket.SOCK_DGRAM)
    fd.bind(server, path)
    client = fds.sock(socket.AF_UNIX, socket.SOCK_DGRAM)
    r, _ = fds.pipe()
    assert fd.send_fds(client, [b"dg"], [r], 0, path) == 2
    data, got, _, sender = fd.recv_fds(server, 8, 1)
    fds.own(*got)
    assert (data, len(got), sender) == (b"dg", 1, None)


CHILD = textwrap.dedent(
    """
    import sys
    from fdkit import fd
    sock = int(sys.argv[1])
    assert fd.poll([(sock, fd.POLLIN)], 10), "no message"
    data, fds, flags, _ = fd.recv_fds(sock, 64, 1)
    [w] = fds
    assert fd.get_cloexec(w)
    fd.write(w, b"child " + str(__import__("os").getpid()).encode() + b" got " + data)
    fd.close(w)
    """
)


def test_fd_used_in_another_process(fds: Fds) -> None:
    """The parent passes the write end of a pipe to a real child process over a unix socket;
    the child writes through it and the parent reads that from the pipe."""
    a, b = pair(fds)
    r, w = fds.pipe()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(b)], pass_fds=[b], stderr=subprocess.PIPE
    )
    try:
        fd.send_fds(a, [b"a pipe"], [w])
        fds.close(w)  # the child's copy is now the only writer
        chunks = []
        while True:
            assert fd.poll([(r, fd.POLLIN)], TIMEOUT), "the child wrote nothing"
            chunk = fd.read(r, 100)
            if not chunk:
                break
            chunks.append(chunk)
        _, err = child.communicate(timeout=TIMEOUT)
        assert child.returncode == 0, err
        assert b"".join(chunks) == f"child {child.pid} got a pipe".encode()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_bad_input(fds: Fds) -> None:
    a, _ = pair(fds)
    with pytest.raises(TypeError, match="fds"):
        fd.send_fds(a, [b"x"], 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fd must be"):
        fd.send_fds(a, [b"x"], [-1])
    with pytest.raises(ValueError, match="at most 253"):
        fd.send_fds(a, [b"x"], [0] * 254)
    with pytest.raises(ValueError, match="maxfds"):
        fd.recv_fds(a, 8, 1 << 40)
    with pytest.raises(OSError, match="Errno") as e:
        fd.send_fds(a, [b"x"], [2**31 - 1])  # not an open fd
    assert e.value.errno == 9  # EBADF
    r, _ = fds.pipe()
    with pytest.raises(OSError, match="Errno") as e2:
        fd.send_fds(r, [b"x"], [r])
    assert e2.value.errno == 88  # ENOTSOCK
