"""Datagrams and ancillary data on int fds: ``sendto``, ``recvfrom``, ``recvfrom_into``,
``sendmsg`` and ``recvmsg``, on real UDP sockets on loopback (IPv4 and IPv6) and unix
datagram sockets, checked against what Python's ``socket`` module sees on the other end."""

from __future__ import annotations

import os
import socket
import uuid

import pytest

from fdkit import fd
from fdkit.types import Address
from helpers import Fds

TIMEOUT = 5.0


def udp(fds: Fds, family: int = socket.AF_INET) -> tuple[int, Address]:
    """A bound UDP socket on loopback: ``(fd, address)``."""
    s = fds.sock(family, socket.SOCK_DGRAM)
    fd.bind(s, ("127.0.0.1", 0) if family == socket.AF_INET else ("::1", 0))
    return s, fd.getsockname(s)


def ready(n: int) -> None:
    assert fd.poll([(n, fd.POLLIN)], TIMEOUT), "nothing arrived"


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_udp_round_trip(fds: Fds, family: int, request: pytest.FixtureRequest) -> None:
    if family == socket.AF_INET6:
        request.getfixturevalue("ipv6")
    server, server_addr = udp(fds, family)
    client, client_addr = udp(fds, family)
    assert fd.sendto(client, b"ping", server_addr) == 4
    ready(server)
    data, sender = fd.recvfrom(server, 100)
    assert data == b"ping"
    assert sender == client_addr
    # The reply goes back to the address recvfrom reported.
    assert fd.sendto(server, memoryview(b"pong!"), sender) == 5
    ready(client)
    assert fd.recvfrom(client, 100) == (b"pong!", server_addr)


def test_udp_against_stdlib(fds: Fds) -> None:
    server, server_addr = udp(fds)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as py:
        py.bind(("127.0.0.1", 0))
        py.settimeout(TIMEOUT)
        fd.sendto(server, b"to stdlib", py.getsockname())
        data, sender = py.recvfrom(100)
        assert (data, sender) == (b"to stdlib", server_addr)
        py.sendto(b"to fdkit", server_addr)
        ready(server)
        assert fd.recvfrom(server, 100) == (b"to fdkit", py.getsockname())


def test_recvfrom_into(fds: Fds) -> None:
    server, server_addr = udp(fds)
    client, client_addr = udp(fds)
    fd.sendto(client, b"0123456789", server_addr)
    ready(server)
    buf = bytearray(16)
    n, sender = fd.recvfrom_into(server, buf)
    assert (n, sender) == (10, client_addr)
    assert bytes(buf[:n]) == b"0123456789"
    # nbytes limits the write; the rest of the datagram is discarded (UDP), MSG_TRUNC reports
    # its length, as socket.recvfrom_into does.
    fd.sendto(client, b"abcdefgh", server_addr)
    ready(server)
    buf = bytearray(b"." * 8)
    n, _ = fd.recvfrom_into(server, buf, 3, socket.MSG_TRUNC)
    assert n == 8
    assert buf == bytearray(b"abc.....")


def test_recvfrom_datagram_cut_to_n(fds: Fds) -> None:
    server, server_addr = udp(fds)
    client, _ = udp(fds)
    fd.sendto(client, b"x" * 1000, server_addr)
    ready(server)
    data, _ = fd.recvfrom(server, 10)
    assert data == b"x" * 10  # the rest of the datagram is gone, as with socket.recvfrom
    with pytest.raises(BlockingIOError):
        fd.recvfrom(server, 10, socket.MSG_DONTWAIT)


def test_recvfrom_connected_stream_has_no_address(fds: Fds, tcp_pair: tuple[int, int]) -> None:
    a, b = tcp_pair
    fd.send(a, b"hi")
    ready(b)
    assert fd.recvfrom(b, 10) == (b"hi", None)  # as socket.recvfrom says for TCP


@pytest.mark.parametrize("kind", ["path", "abstract"])
def test_unix_datagrams(fds: Fds, tmp_path: object, kind: str) -> None:
    name = uuid.uuid4().hex
    if kind == "path":
        server_addr: str | bytes = os.path.join(str(tmp_path), "srv")
        client_addr: str | bytes = os.path.join(str(tmp_path), "cli")
    else:
        server_addr, client_addr = b"\0fdkit-s-" + name.encode(), b"\0fdkit-c-" + name.encode()
    server = fds.sock(socket.AF_UNIX, socket.SOCK_DGRAM)
    client = fds.sock(socket.AF_UNIX, socket.SOCK_DGRAM)
    fd.bind(server, server_addr)
    fd.bind(client, client_addr)
    assert fd.sendto(client, b"over unix", server_addr) == 9
    ready(server)
    assert fd.recvfrom(server, 64) == (b"over unix", client_addr)
    # An unbound sender has no address: None, as socket.recvfrom gives it.
    anon = fds.sock(socket.AF_UNIX, socket.SOCK_DGRAM)
    fd.sendto(anon, b"anon", server_addr)
    ready(server)
    assert fd.recvfrom(server, 64) == (b"anon", None)


def test_sendmsg_gathers_buffers_to_an_address(fds: Fds) -> None:
    server, server_addr = udp(fds)
    client, client_addr = udp(fds)
    bufs: list[bytes | bytearray | memoryview] = [b"one ", bytearray(b"two "), memoryview(b"x")]
    sent = fd.sendmsg(client, bufs, (), 0, server_addr)
    assert sent == 9
    ready(server)
    data, anc, flags, sender = fd.recvmsg(server, 100)
    assert (data, anc, flags, sender) == (b"one two x", [], 0, client_addr)


def test_recvmsg_reports_truncation(fds: Fds) -> None:
    server, server_addr = udp(fds)
    client, _ = udp(fds)
    fd.sendto(client, b"y" * 50, server_addr)
    ready(server)
    data, _, flags, _ = fd.recvmsg(server, 20)
    assert data == b"y" * 20
    assert flags & socket.MSG_TRUNC


def test_recvmsg_ancillary_matches_stdlib(fds: Fds) -> None:
    """IP_PKTINFO-style ancillary data: SO_TIMESTAMPNS is on every kernel; fdkit must return
    the same (level, type, length) triple as socket.recvmsg for the same message kind."""
    server, server_addr = udp(fds)
    client, _ = udp(fds)
    so_timestampns = getattr(socket, "SO_TIMESTAMPNS", 35)
    fd.setsockopt(server, socket.SOL_SOCKET, so_timestampns, 1)
    fd.sendto(client, b"stamped", server_addr)
    ready(server)
    data, anc, flags, _ = fd.recvmsg(server, 64, 256)
    assert data == b"stamped"
    assert flags == 0
    assert [(lvl, typ, len(d)) for lvl, typ, d in anc] == [(socket.SOL_SOCKET, so_timestampns, 16)]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as py:
        py.bind(("127.0.0.1", 0))
        py.setsockopt(socket.SOL_SOCKET, so_timestampns, 1)
        fd.sendto(client, b"stamped", py.getsockname())
        py.settimeout(TIMEOUT)
        _, py_anc, py_flags, _ = py.recvmsg(64, 256)
    assert [(lvl, typ, len(d)) for lvl, typ, d in py_anc] == [
        (lvl, typ, len(d)) for lvl, typ, d in anc
    ]
    assert py_flags == flags


def test_recvmsg_control_truncated(fds: Fds) -> None:
    server, server_addr = udp(fds)
    client, _ = udp(fds)
    fd.setsockopt(server, socket.SOL_SOCKET, getattr(socket, "SO_TIMESTAMPNS", 35), 1)
    fd.sendto(client, b"z", server_addr)
    ready(server)
    _, anc, flags, _ = fd.recvmsg(server, 8, 4)  # no room for even a header
    assert flags & socket.MSG_CTRUNC
    assert anc == []


def test_bad_input(fds: Fds) -> None:
    server, server_addr = udp(fds)
    with pytest.raises(TypeError):
        fd.sendto(server, "text", server_addr)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        fd.sendto(server, b"x", 12345)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="port"):
        fd.sendto(server, b"x", ("127.0.0.1", 70000))
    with pytest.raises(TypeError, match="iterable of bytes-like"):
        fd.sendmsg(server, b"not a list", (), 0, server_addr)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        fd.sendmsg(server, [b"x", "str"], (), 0, server_addr)  # type: ignore[list-item]
    with pytest.raises(TypeError, match="ancdata"):
        fd.sendmsg(server, [b"x"], [(1, 2)], 0, server_addr)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="ancbufsize"):
        fd.recvmsg(server, 8, 1 << 40)
    with pytest.raises(ValueError, match="non-negative"):
        fd.recvmsg(server, -1)
    with pytest.raises(TypeError, match="writable"):
        fd.recvfrom_into(server, b"read-only")
    with pytest.raises(ValueError, match="larger than the buffer"):
        fd.recvfrom_into(server, bytearray(4), 8)
    # The kernel's refusals keep their errno.
    with pytest.raises(OSError, match="Errno") as e:
        fd.sendmsg(server, [b"x"], [(socket.SOL_SOCKET, 9999, b"junk")], 0, server_addr)
    assert e.value.errno is not None
    r, _ = fds.pipe()
    with pytest.raises(OSError, match="Errno") as e2:
        fd.recvfrom(r, 10)
    assert e2.value.errno == 88  # ENOTSOCK
