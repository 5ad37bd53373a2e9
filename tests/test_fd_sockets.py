"""Happy paths of the socket half of ``fdkit.fd``, checked against the kernel and against what
Python's ``socket`` module reports for the same socket."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import socket
import struct
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from fdkit import fd
from fdkit.types import InetAddress
from helpers import Fds, wait_for


def py_view(n: int) -> socket.socket:
    """A ``socket.socket`` over a dup of ``n`` (the caller closes it; ``n`` stays ours)."""
    return socket.socket(fileno=os.dup(n))


def assert_cloexec(n: int, expected: bool = True) -> None:
    assert fd.get_cloexec(n) is expected
    assert bool(fcntl.fcntl(n, fcntl.F_GETFD) & fcntl.FD_CLOEXEC) is expected
    assert os.get_inheritable(n) is (not expected)


# ---------------------------------------------------------------------------------------------
# socket, socketpair


def test_socket_defaults_tcp_ipv4_cloexec_blocking(fds: Fds) -> None:
    s = fds.sock()
    assert_cloexec(s)
    assert fd.get_blocking(s) is True
    with py_view(s) as v:
        assert v.family == socket.AF_INET
        assert v.type == socket.SOCK_STREAM


@pytest.mark.parametrize(
    ("family", "type_"),
    [
        (socket.AF_INET, socket.SOCK_DGRAM),
        (socket.AF_UNIX, socket.SOCK_STREAM),
        (socket.AF_UNIX, socket.SOCK_DGRAM),
    ],
)
def test_socket_family_and_type(fds: Fds, family: int, type_: int) -> None:
    s = fds.sock(family, type_)
    assert fd.getsockopt(s, socket.SOL_SOCKET, socket.SO_DOMAIN) == family
    assert fd.getsockopt(s, socket.SOL_SOCKET, socket.SO_TYPE) == type_
    assert_cloexec(s)


def test_socket_nonblock_in_type(fds: Fds) -> None:
    s = fds.sock(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
    assert fd.get_blocking(s) is False
    assert fcntl.fcntl(s, fcntl.F_GETFL) & os.O_NONBLOCK
    # The flag bit is not part of the type the kernel records.
    assert fd.getsockopt(s, socket.SOL_SOCKET, socket.SO_TYPE) == socket.SOCK_STREAM


def test_socket_cloexec_false_is_inheritable(fds: Fds) -> None:
    s = fds.sock(cloexec=False)
    assert_cloexec(s, False)


def test_socket_explicit_protocol(fds: Fds) -> None:
    s = fds.sock(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    assert fd.getsockopt(s, socket.SOL_SOCKET, socket.SO_PROTOCOL) == socket.IPPROTO_TCP


def test_socketpair_exchanges_data_both_ways(fds: Fds) -> None:
    a, b = fd.socketpair()
    fds.own(a, b)
    assert a != b
    assert_cloexec(a)
    assert_cloexec(b)
    assert fd.send(a, b"ping") == 4
    assert fd.recv(b, 100) == b"ping"
    assert fd.send(b, b"pong!") == 5
    assert fd.recv(a, 100) == b"pong!"
    assert fd.getsockopt(a, socket.SOL_SOCKET, socket.SO_DOMAIN) == socket.AF_UNIX


def test_socketpair_dgram_keeps_boundaries(fds: Fds) -> None:
    a, b = fd.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    fds.own(a, b)
    fd.send(a, b"one")
    fd.send(a, b"two-two")
    assert fd.recv(b, 100) == b"one"
    assert fd.recv(b, 100) == b"two-two"


def test_socketpair_cloexec_false_and_nonblock(fds: Fds) -> None:
    a, b = fd.socketpair(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK, cloexec=False)
    fds.own(a, b)
    for n in (a, b):
        assert_cloexec(n, False)
        assert fd.get_blocking(n) is False
    with pytest.raises(BlockingIOError):
        fd.recv(a, 10)


def test_inheritance_across_exec(fds: Fds) -> None:
    """A cloexec fd is gone in an exec'd child; a ``cloexec=False`` one is still there."""
    closing = fds.sock()
    kept = fds.sock(cloexec=False)
    code = "import os, sys; print(*[os.path.lexists(f'/proc/self/fd/{a}') for a in sys.argv[1:]])"
    out = subprocess.run(
        [sys.executable, "-c", code, str(closing), str(kept)],
        close_fds=False,
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )
    assert out.stdout.split() == ["False", "True"]


# ---------------------------------------------------------------------------------------------
# bind, listen, accept, accept4, connect, getsockname, getpeername


def test_bind_listen_accept_ipv4(fds: Fds) -> None:
    lfd = fds.sock()
    fd.bind(lfd, ("127.0.0.1", 0))
    name = fd.getsockname(lfd)
    assert isinstance(name, tuple)
    assert len(name) == 2
    host, port = name
    assert host == "127.0.0.1"
    assert 0 < port < 65536
    with py_view(lfd) as v:
        assert v.getsockname() == (host, port)
    fd.listen(lfd)
    assert fd.getsockopt(lfd, socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1

    c = fds.sock()
    fd.connect(c, ("127.0.0.1", port))
    conn, addr = fd.accept(lfd)
    fds.own(conn)
    assert addr == fd.getsockname(c)
    assert fd.getpeername(conn) == addr
    assert fd.getpeername(c) == (host, port)
    assert fd.getsockname(conn) == (host, port)
    assert_cloexec(conn)
    assert fd.get_blocking(conn) is True
    with py_view(conn) as v:
        assert v.getpeername() == addr
        assert v.getsockname() == (host, port)
    fd.send(c, b"hello")
    assert fd.recv(conn, 5) == b"hello"


def test_accept_matches_socket_module_accept(fds: Fds) -> None:
    """fdkit's address for the same kind of connection is what socket.accept() gives."""
    lfd, addr = fds.listener()
    c1 = fds.client(addr)
    c2 = fds.client(addr)
    conn, peer = fd.accept(lfd)
    fds.own(conn)
    with py_view(lfd) as v:
        pconn, ppeer = v.accept()
        pconn.close()
    assert {peer, ppeer} == {fd.getsockname(c1), fd.getsockname(c2)}
    assert type(peer) is type(ppeer) is tuple
    assert [type(x) for x in peer] == [type(x) for x in ppeer]


def test_bind_empty_host_is_any_address(fds: Fds) -> None:
    s = fds.sock()
    fd.bind(s, ("", 0))
    assert fd.getsockname(s)[0] == "0.0.0.0"


def test_bind_localhost_name_resolves(fds: Fds) -> None:
    s = fds.sock()
    fd.bind(s, ("localhost", 0))
    assert fd.getsockname(s)[0] == "127.0.0.1"


def test_accept4_nonblock_flag(fds: Fds, listener: tuple[int, InetAddress]) -> None:
    lfd, addr = listener
    c = fds.client(addr)
    conn, peer = fd.accept4(lfd, socket.SOCK_NONBLOCK)
    fds.own(conn)
    assert peer == fd.getsockname(c)
    assert fd.get_blocking(conn) is False
    assert_cloexec(conn)
    with pytest.raises(BlockingIOError):
        fd.recv(conn, 10)


def test_accept4_default_blocking_and_cloexec_false(
    fds: Fds, listener: tuple[int, InetAddress]
) -> None:
    lfd, addr = listener
    fds.client(addr)
    fds.client(addr)
    a, _ = fd.accept4(lfd)
    fds.own(a)
    assert fd.get_blocking(a) is True
    assert_cloexec(a)
    b, _ = fd.accept4(lfd, 0, cloexec=False)
    fds.own(b)
    assert_cloexec(b, False)


def test_accept_cloexec_on_nonblocking_listener(
    fds: Fds, nb_listener: tuple[int, InetAddress]
) -> None:
    lfd, addr = nb_listener
    with pytest.raises(BlockingIOError):
        fd.accept(lfd)
    fds.client(addr)
    conn, _ = fd.accept(lfd)
    fds.own(conn)
    assert_cloexec(conn)
    # accept() does not inherit O_NONBLOCK from the listener on Linux.
    assert fd.get_blocking(conn) is True


def test_connect_nonblocking_in_progress_then_connected(fds: Fds) -> None:
    lfd, addr = fds.listener()
    c = fds.sock(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
    try:
        fd.connect(c, addr)
    # PT017: the call may succeed (no exception to expect), so no pytest.raises.
    except BlockingIOError as e:
        assert e.errno == 115  # EINPROGRESS  # noqa: PT017
        assert fd.poll([(c, fd.POLLOUT)], 5) == [(c, fd.POLLOUT)]
    assert fd.getsockopt(c, socket.SOL_SOCKET, socket.SO_ERROR) == 0
    conn, peer = fd.accept(lfd)
    fds.own(conn)
    assert peer == fd.getsockname(c)


def test_ipv6_addresses(fds: Fds, ipv6: None) -> None:
    lfd = fds.sock(socket.AF_INET6)
    fd.bind(lfd, ("::1", 0, 0, 0))
    name = fd.getsockname(lfd)
    assert isinstance(name, tuple)
    assert len(name) == 4
    assert name[0] == "::1"
    assert name[2:] == (0, 0)
    with py_view(lfd) as v:
        assert v.getsockname() == name
    fd.listen(lfd)
    c = fds.sock(socket.AF_INET6)
    fd.connect(c, ("::1", name[1]))  # the 2-tuple form works for IPv6 too
    conn, peer = fd.accept(lfd)
    fds.own(conn)
    assert peer == fd.getsockname(c)
    assert peer[0] == "::1"
    assert fd.getpeername(c) == name
    with py_view(conn) as v:
        assert v.getpeername() == peer


def test_ipv6_listener_fixture(fds: Fds, ipv6: None) -> None:
    lfd, addr = fds.listener(socket.AF_INET6)
    c = fds.client(addr, socket.AF_INET6)
    conn, peer = fd.accept(lfd)
    fds.own(conn)
    assert peer == fd.getsockname(c)


IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)


@pytest.mark.parametrize(
    "host",
    ["::2", "::1.2.3.4", "::ffff:1.2.3.4", "2001:db8::1:0:0:1", "64:ff9b::1.2.3.4", "1:0:0:1::1"],
)
def test_ipv6_text_form_matches_socket_module(fds: Fds, ipv6: None, host: str) -> None:
    """IPv6 addresses are spelled as the socket module (inet_ntop) spells them. The socket is
    bound with IP_FREEBIND to an address this host does not have: nothing is sent."""
    s = fds.sock(socket.AF_INET6)
    fd.setsockopt(s, socket.IPPROTO_IP, IP_FREEBIND, 1)
    fd.bind(s, (host, 0))
    with py_view(s) as v:
        expected = v.getsockname()
    assert fd.getsockname(s) == expected


def test_ipv6_scope_id_roundtrip(fds: Fds, ipv6: None) -> None:
    lo = socket.if_nametoindex("lo")
    s = fds.sock(socket.AF_INET6)
    fd.setsockopt(s, socket.IPPROTO_IP, IP_FREEBIND, 1)
    fd.bind(s, ("fe80::1", 0, 0, lo))
    name = fd.getsockname(s)
    assert isinstance(name, tuple)
    assert len(name) == 4
    assert name[0] == "fe80::1"
    assert name[3] == lo
    with py_view(s) as v:
        assert v.getsockname() == name


def test_other_families_come_back_as_raw_bytes(fds: Fds) -> None:
    try:
        s = fds.sock(socket.AF_NETLINK, socket.SOCK_DGRAM, 0)  # NETLINK_ROUTE
    except OSError as e:
        pytest.skip(f"no netlink sockets here: {e}")
    name = fd.getsockname(s)
    assert isinstance(name, bytes)
    assert len(name) == 12  # sizeof(struct sockaddr_nl)
    assert struct.unpack("=H", name[:2])[0] == socket.AF_NETLINK


def test_ipv4_mapped_address_on_dual_stack(fds: Fds, ipv6: None) -> None:
    lfd = fds.sock(socket.AF_INET6)
    fd.setsockopt(lfd, socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    fd.bind(lfd, ("::", 0))
    fd.listen(lfd)
    name = fd.getsockname(lfd)
    assert isinstance(name, tuple)
    port = name[1]
    c = fds.client(("127.0.0.1", port))
    conn, peer = fd.accept(lfd)
    fds.own(conn)
    assert peer == ("::ffff:127.0.0.1", fd.getsockname(c)[1], 0, 0)


def test_unix_path_str_and_bytes(fds: Fds, tmp_path: Path) -> None:
    path = str(tmp_path / "sock")
    lfd = fds.sock(socket.AF_UNIX)
    fd.bind(lfd, path)
    assert fd.getsockname(lfd) == path
    assert Path(path).is_socket()
    fd.listen(lfd)
    c = fds.sock(socket.AF_UNIX)
    fd.connect(c, os.fsencode(path))
    conn, peer = fd.accept(lfd)
    fds.own(conn)
    assert fd.getpeername(c) == path
    assert fd.getsockname(conn) == path
    with py_view(conn) as v:
        assert v.getsockname() == path
    # The client never bound: its address is unnamed, '' as the socket module says.
    with py_view(lfd) as v:
        c2 = fds.client(path, socket.AF_UNIX)
        pconn, ppeer = v.accept()
        pconn.close()
    assert ppeer == ""
    assert peer == ppeer
    assert fd.getsockname(c2) == ""


def test_unix_unnamed_peer_of_socketpair(fds: Fds) -> None:
    a, b = fd.socketpair()
    fds.own(a, b)
    with py_view(a) as v:
        expected = v.getpeername()
    assert expected == ""
    assert fd.getpeername(a) == expected
    assert fd.getsockname(b) == ""


def test_unix_abstract_namespace(fds: Fds) -> None:
    name = f"\0fdkit-test-{uuid.uuid4().hex}"
    lfd = fds.sock(socket.AF_UNIX)
    fd.bind(lfd, name)
    assert fd.getsockname(lfd) == name.encode()
    with py_view(lfd) as v:
        assert v.getsockname() == name.encode()
    fd.listen(lfd)
    c = fds.sock(socket.AF_UNIX)
    fd.connect(c, name.encode())
    conn, _ = fd.accept(lfd)
    fds.own(conn)
    assert fd.getpeername(c) == name.encode()
    fd.send(c, b"abstract")
    assert fd.recv(conn, 100) == b"abstract"


def test_unix_bytes_path_non_utf8(fds: Fds, tmp_path: Path) -> None:
    path = os.fsencode(tmp_path) + b"/s\xff"
    lfd = fds.sock(socket.AF_UNIX)
    fd.bind(lfd, path)
    assert os.path.exists(path)
    got = fd.getsockname(lfd)
    with py_view(lfd) as v:
        assert got == v.getsockname()
    assert isinstance(got, (str, bytes))
    assert os.fsencode(got) == path


def raw_bind_unix(n: int, path: bytes) -> None:
    """bind(2) through libc with a full-length sockaddr_un (no NUL needed at 108 bytes), as a
    C program would; neither fdkit nor the socket module is involved."""

    class SockaddrUn(ctypes.Structure):
        _fields_ = [("sun_family", ctypes.c_ushort), ("sun_path", ctypes.c_char * 108)]

    libc = ctypes.CDLL(None, use_errno=True)
    addr = SockaddrUn(socket.AF_UNIX, path)
    if libc.bind(n, ctypes.byref(addr), 2 + len(path)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def _unix_path_of_length(tmp_path: Path, length: int) -> str:
    """A path under ``tmp_path`` exactly ``length`` bytes long (skip if tmp_path is too long)."""
    base = str(tmp_path) + "/"
    if len(base) + 1 > length:
        pytest.skip(f"tmp_path is too long for a {length}-byte AF_UNIX path")
    return base + "p" * (length - len(base))


@pytest.mark.parametrize("length", [106, 107])
def test_unix_long_path_roundtrip(fds: Fds, tmp_path: Path, length: int) -> None:
    """The longest NUL-terminated paths come back exactly as bound (no trailing NUL)."""
    path = _unix_path_of_length(tmp_path, length)
    lfd = fds.sock(socket.AF_UNIX)
    fd.bind(lfd, path)
    with py_view(lfd) as v:
        assert v.getsockname() == path
    assert fd.getsockname(lfd) == path
    fd.listen(lfd)
    c = fds.client(path, socket.AF_UNIX)
    assert fd.getpeername(c) == path


def test_unix_path_filling_sun_path_does_not_panic(fds: Fds, tmp_path: Path) -> None:
    """A 108-byte path fills sun_path with no NUL; the kernel allows it (other programs bind
    such paths). Reading it back must give the path, not a Rust panic."""
    path = _unix_path_of_length(tmp_path, 108)
    lfd = fds.sock(socket.AF_UNIX)
    raw_bind_unix(lfd, path.encode())
    with py_view(lfd) as v:
        expected = v.getsockname()
    assert fd.getsockname(lfd) == expected == path


def test_accept_peer_bound_to_108_byte_path(fds: Fds, tmp_path: Path) -> None:
    """A client may bind any path the kernel allows before connecting: accept must report it
    (a local peer must not be able to make accept raise a PanicException)."""
    lpath = str(tmp_path / "l")
    lfd = fds.sock(socket.AF_UNIX)
    fd.bind(lfd, lpath)
    fd.listen(lfd)
    cpath = _unix_path_of_length(tmp_path, 108)
    c = fds.sock(socket.AF_UNIX)
    raw_bind_unix(c, cpath.encode())  # what any C program may do
    fd.connect(c, lpath)
    conn, peer = fd.accept(lfd)
    fds.own(conn)
    assert peer == cpath
    assert fd.getpeername(conn) == cpath


def test_unix_bind_empty_string_autobinds(fds: Fds) -> None:
    """As in the socket module, binding ``''`` asks the kernel for a fresh abstract name
    (autobind), so any number of sockets can do it."""
    with socket.socket(socket.AF_UNIX) as ref:
        ref.bind("")
        ref_name = ref.getsockname()
    a = fds.sock(socket.AF_UNIX)
    b = fds.sock(socket.AF_UNIX)
    fd.bind(a, "")
    fd.bind(b, "")
    na, nb = fd.getsockname(a), fd.getsockname(b)
    assert isinstance(na, bytes)
    assert na.startswith(b"\0")
    assert len(na) == len(nb) == len(ref_name) > 1
    assert na != nb


def test_shutdown_write_gives_peer_eof(fds: Fds, tcp_pair: tuple[int, int]) -> None:
    c, s = tcp_pair
    fd.send(c, b"last")
    fd.shutdown(c, fd.SHUT_WR)
    assert fd.recv(s, 100) == b"last"
    assert fd.recv(s, 100) == b""
    # The other direction still works.
    fd.send(s, b"reply")
    assert fd.recv(c, 100) == b"reply"


def test_shutdown_read_and_both(fds: Fds) -> None:
    a, b = fd.socketpair()
    fds.own(a, b)
    fd.shutdown(a, fd.SHUT_RD)
    assert fd.recv(a, 10) == b""
    fd.shutdown(b, fd.SHUT_RDWR)
    assert fd.recv(b, 10) == b""
    with pytest.raises(BrokenPipeError):
        fd.send(b, b"x")


# ---------------------------------------------------------------------------------------------
# accept_many


def test_accept_many_empty_returns_empty_list(nb_listener: tuple[int, InetAddress]) -> None:
    lfd, _ = nb_listener
    assert fd.accept_many(lfd) == []
    assert fd.accept_many(lfd, 1) == []


def test_accept_many_drains_pending(fds: Fds, nb_listener: tuple[int, InetAddress]) -> None:
    lfd, addr = nb_listener
    clients = [fds.client(addr) for _ in range(10)]
    got = fd.accept_many(lfd)
    for conn, _ in got:
        fds.own(conn)
    assert len(got) == 10
    assert sorted(peer for _, peer in got) == sorted(fd.getsockname(c) for c in clients)
    for conn, peer in got:
        assert fd.getpeername(conn) == peer
        assert_cloexec(conn)
        assert fd.get_blocking(conn) is False  # default flags: NONBLOCK | CLOEXEC
    assert fd.accept_many(lfd) == []


def test_accept_many_respects_max(fds: Fds, nb_listener: tuple[int, InetAddress]) -> None:
    lfd, addr = nb_listener
    clients = [fds.client(addr) for _ in range(7)]
    sizes = []
    peers = []
    for _ in range(5):
        batch = fd.accept_many(lfd, max=3)
        for conn, peer in batch:
            fds.own(conn)
            peers.append(peer)
        sizes.append(len(batch))
    assert sizes == [3, 3, 1, 0, 0]
    assert sorted(peers) == sorted(fd.getsockname(c) for c in clients)


def test_accept_many_flags_and_cloexec(fds: Fds, nb_listener: tuple[int, InetAddress]) -> None:
    lfd, addr = nb_listener
    fds.client(addr)
    fds.client(addr)
    [(a, _)] = fd.accept_many(lfd, 1, 0)
    fds.own(a)
    assert fd.get_blocking(a) is True
    assert_cloexec(a)
    [(b, _)] = fd.accept_many(lfd, 1, 0, cloexec=False)
    fds.own(b)
    assert_cloexec(b, False)


def test_accept_many_needs_nonblocking_listener(listener: tuple[int, InetAddress]) -> None:
    lfd, _ = listener
    # A blocking listener would hang once drained: refused up front, nothing pending or not.
    with pytest.raises(ValueError, match="non-blocking"):
        fd.accept_many(lfd)


def test_accept_many_unix(fds: Fds) -> None:
    name = f"\0fdkit-many-{uuid.uuid4().hex}"
    lfd = fds.sock(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
    fd.bind(lfd, name)
    fd.listen(lfd)
    for _ in range(3):
        fds.client(name, socket.AF_UNIX)
    got = fd.accept_many(lfd)
    for conn, _ in got:
        fds.own(conn)
    assert [peer for _, peer in got] == ["", "", ""]


# ---------------------------------------------------------------------------------------------
# socket options


def test_setsockopt_getsockopt_int(fds: Fds) -> None:
    s = fds.sock()
    assert fd.getsockopt(s, socket.SOL_SOCKET, socket.SO_REUSEADDR) == 0
    fd.setsockopt(s, socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    assert fd.getsockopt(s, socket.SOL_SOCKET, socket.SO_REUSEADDR) == 1
    with py_view(s) as v:
        assert v.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) == 1
    fd.setsockopt(s, socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
    with py_view(s) as v:
        assert v.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) == 0


def test_so_rcvbuf_matches_socket_module(fds: Fds) -> None:
    s = fds.sock()
    fd.setsockopt(s, socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    got = fd.getsockopt(s, socket.SOL_SOCKET, socket.SO_RCVBUF)
    with py_view(s) as v:
        assert got == v.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    # Linux doubles the value for bookkeeping.
    assert got == 2 * 65536


def test_so_linger_as_bytes(fds: Fds) -> None:
    s = fds.sock()
    assert fd.getsockopt(s, socket.SOL_SOCKET, socket.SO_LINGER, 8) == struct.pack("ii", 0, 0)
    fd.setsockopt(s, socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 7))
    raw = fd.getsockopt(s, socket.SOL_SOCKET, socket.SO_LINGER, 8)
    assert struct.unpack("ii", raw) == (1, 7)
    with py_view(s) as v:
        assert v.getsockopt(socket.SOL_SOCKET, socket.SO_LINGER, 8) == raw
    # Any bytes-like value works, and a bigger buffer is cut to what the kernel filled.
    fd.setsockopt(s, socket.SOL_SOCKET, socket.SO_LINGER, bytearray(struct.pack("ii", 1, 3)))
    assert fd.getsockopt(s, socket.SOL_SOCKET, socket.SO_LINGER, 64) == struct.pack("ii", 1, 3)


def test_tcp_nodelay_int_and_bytes_forms_agree(fds: Fds) -> None:
    s = fds.sock()
    fd.setsockopt(s, socket.IPPROTO_TCP, socket.TCP_NODELAY, struct.pack("i", 1))
    assert fd.getsockopt(s, socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    assert fd.getsockopt(s, socket.IPPROTO_TCP, socket.TCP_NODELAY, 4) == struct.pack("i", 1)


# ---------------------------------------------------------------------------------------------
# send, recv, recv_into


def test_send_recv_bytes_like(tcp_pair: tuple[int, int]) -> None:
    c, s = tcp_pair
    assert fd.send(c, b"ab") == 2
    assert fd.send(c, bytearray(b"cd")) == 2
    assert fd.send(c, memoryview(b"xxefxx")[2:4]) == 2
    wait_for(lambda: fd.poll([(s, fd.POLLIN)], 0) != [], what="data")
    got = b""
    while len(got) < 6:
        got += fd.recv(s, 6 - len(got))
    assert got == b"abcdef"


def test_recv_peek_flag(tcp_pair: tuple[int, int]) -> None:
    c, s = tcp_pair
    fd.send(c, b"peekaboo")
    assert fd.recv(s, 4, socket.MSG_PEEK | socket.MSG_WAITALL) == b"peek"
    assert fd.recv(s, 8, socket.MSG_WAITALL) == b"peekaboo"


def test_recv_zero_and_eof(tcp_pair: tuple[int, int], fds: Fds) -> None:
    c, s = tcp_pair
    fd.send(c, b"x")
    assert fd.recv(s, 0) == b""
    fds.close(c)
    assert fd.recv(s, 10) == b"x"
    assert fd.recv(s, 10) == b""


def test_recv_into_bytearray_and_nbytes(tcp_pair: tuple[int, int]) -> None:
    c, s = tcp_pair
    fd.send(c, b"0123456789")
    buf = bytearray(b"." * 16)
    assert fd.recv_into(s, buf, 4, socket.MSG_WAITALL) == 4
    assert buf == b"0123" + b"." * 12
    n = fd.recv_into(s, buf)  # nbytes=0: the whole buffer
    assert n == 6
    assert buf[:6] == b"456789"
    assert buf[6:] == b"." * 10


def test_recv_into_memoryview_slice(tcp_pair: tuple[int, int]) -> None:
    c, s = tcp_pair
    fd.send(c, b"abc")
    backing = bytearray(10)
    n = fd.recv_into(s, memoryview(backing)[5:], 3, socket.MSG_WAITALL)
    assert n == 3
    assert backing == bytes(5) + b"abc" + bytes(2)


def test_recv_into_matches_socket_module(fds: Fds) -> None:
    a, b = fd.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    fds.own(a, b)
    fd.send(a, b"datagram-longer-than-buffer")
    fd.send(a, b"datagram-longer-than-buffer")
    mine = bytearray(8)
    n = fd.recv_into(b, mine, 0, socket.MSG_TRUNC)
    with py_view(b) as v:
        theirs = bytearray(8)
        m = v.recv_into(theirs, 0, socket.MSG_TRUNC)
    assert (n, mine) == (m, theirs) == (27, bytearray(b"datagram"))


def test_large_transfer_through_threads(tcp_pair: tuple[int, int]) -> None:
    c, s = tcp_pair
    payload = os.urandom(2 << 20)
    sent = []

    def writer() -> None:
        view = memoryview(payload)
        while view:
            n = fd.send(c, view)
            view = view[n:]
        sent.append(True)

    t = threading.Thread(target=writer)
    t.start()
    chunks = []
    got = 0
    try:
        while got < len(payload):
            chunk = fd.recv(s, 1 << 16)
            assert chunk
            chunks.append(chunk)
            got += len(chunk)
    finally:
        t.join(10)
    assert sent == [True]
    assert b"".join(chunks) == payload


# ---------------------------------------------------------------------------------------------
# sendfile


def _recv_exactly(s: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = fd.recv(s, min(n, 1 << 20))
        assert chunk, "unexpected EOF"
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def test_sendfile_whole_file_count_none(
    fds: Fds, tcp_pair: tuple[int, int], tmp_file: Callable[[bytes], Path]
) -> None:
    c, s = tcp_pair
    data = os.urandom(3 << 20)
    f = fds.own(fd.open(tmp_file(data), fd.O_RDONLY))
    received: list[bytes] = []
    t = threading.Thread(target=lambda: received.append(_recv_exactly(s, len(data))))
    t.start()
    try:
        n = fd.sendfile(c, f)
    finally:
        t.join(10)
    assert n == len(data)
    assert received == [data]
    # Without an offset the input's position moved to the end; a second call sends nothing.
    assert fd.lseek(f, 0, os.SEEK_CUR) == len(data)
    assert fd.sendfile(c, f) == 0


def test_sendfile_offset_and_count(
    fds: Fds, tcp_pair: tuple[int, int], tmp_file: Callable[[bytes], Path]
) -> None:
    c, s = tcp_pair
    data = bytes(range(256)) * 40
    f = fds.own(fd.open(tmp_file(data), fd.O_RDONLY))
    fd.lseek(f, 17, os.SEEK_SET)
    assert fd.sendfile(c, f, 100, 1000) == 1000
    assert _recv_exactly(s, 1000) == data[100:1100]
    assert fd.lseek(f, 0, os.SEEK_CUR) == 17  # untouched
    # Asking past the end sends what there is.
    assert fd.sendfile(c, f, len(data) - 10, 1000) == 10
    assert _recv_exactly(s, 10) == data[-10:]
    # count without offset: from the file position, which then advances.
    assert fd.sendfile(c, f, None, 3) == 3
    assert _recv_exactly(s, 3) == data[17:20]
    assert fd.lseek(f, 0, os.SEEK_CUR) == 20
    assert fd.sendfile(c, f, 0, 0) == 0


def test_sendfile_to_regular_file(
    fds: Fds, tmp_file: Callable[[bytes], Path], tmp_path: Path
) -> None:
    data = os.urandom(200_000)
    src = fds.own(fd.open(tmp_file(data), fd.O_RDONLY))
    dst_path = tmp_path / "dst"
    dst = fds.own(fd.open(dst_path, fd.O_WRONLY | fd.O_CREAT, 0o600))
    assert fd.sendfile(dst, src, 0) == len(data)
    assert dst_path.read_bytes() == data


def test_sendfile_nonblocking_partial_then_eagain(
    fds: Fds, tmp_file: Callable[[bytes], Path]
) -> None:
    """A full non-blocking socket: the bytes that went out, then BlockingIOError, then the rest
    once the reader drains, all in order."""
    c, s = fds.connected()
    fd.setsockopt(c, socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
    fd.setsockopt(s, socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    fd.set_blocking(c, False)
    data = os.urandom(4 << 20)
    f = fds.own(fd.open(tmp_file(data), fd.O_RDONLY))

    first = fd.sendfile(c, f, 0)
    assert 0 < first < len(data)
    with pytest.raises(BlockingIOError) as exc:
        fd.sendfile(c, f, first)
    assert exc.value.errno == 11  # EAGAIN

    received = bytearray()
    offset = first
    while len(received) < len(data):
        wanted = [(s, fd.POLLIN)] + ([(c, fd.POLLOUT)] if offset < len(data) else [])
        ready = dict(fd.poll(wanted, 5))
        assert ready, "transfer stalled"
        if ready.get(s, 0) & fd.POLLIN:
            chunk = fd.recv(s, 1 << 16)
            assert chunk
            received += chunk
        if ready.get(c, 0) & fd.POLLOUT:
            with contextlib.suppress(BlockingIOError):
                offset += fd.sendfile(c, f, offset)
    assert offset == len(data)
    assert bytes(received) == data
    assert fd.lseek(f, 0, os.SEEK_CUR) == 0


def test_sendfile_count_none_past_the_2gib_cap(fds: Fds) -> None:
    """One sendfile(2) moves at most 2 GiB - 4 KiB: count=None loops until the end."""
    shm = "/dev/shm"
    if not os.path.isdir(shm) or fd.stat(shm).st_dev == fd.stat("/").st_dev:
        pytest.skip("no tmpfs at /dev/shm (a sparse 2 GiB read is only fast on tmpfs)")
    n, path = fd.mkstemp(dir=shm)
    fds.own(n)
    try:
        size = (2 << 30) + (1 << 20) + 5
        os.ftruncate(n, size)
        out = fds.own(fd.open("/dev/null", fd.O_WRONLY))
        assert fd.sendfile(out, n, 0) == size
        assert fd.lseek(n, 0, os.SEEK_CUR) == 0
        assert fd.sendfile(out, n, 0, size - 3) == size - 3
        assert fd.sendfile(out, n) == size
        assert fd.lseek(n, 0, os.SEEK_CUR) == size
    finally:
        os.unlink(path)
