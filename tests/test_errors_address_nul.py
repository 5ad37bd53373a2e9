"""A NUL inside a host name or a unix socket path is refused with ValueError by every parser
of addresses, naming the address as typed.

getaddrinfo(3) takes a C string: `fd.connect(s, ('127.0.0.1\\0.example.com', port))` used to
reach 127.0.0.1, which defeats a suffix allow-list ("ends with .example.com"). Each test below
proves nothing was bound or connected, on a real loopback listener.
"""

from __future__ import annotations

import os
import socket
import uuid

import pytest

import fdkit
from fdkit import fd, uring
from fdkit._fdkit import serve_proxy, serve_static
from helpers import Fds, ipv6_loopback

HOSTS = [
    "127.0.0.1\0.example.com",
    "localhost\0.example.com",
    "127.0.0.1\0",
    "\0",
]


def _no_connection_waiting(lfd: int) -> bool:
    """Whether the listener's backlog is empty (nothing reached it)."""
    return fd.poll([(lfd, fd.POLLIN)], 0) == []


@pytest.mark.parametrize("host", HOSTS, ids=repr)
def test_connect_refuses_a_nul_in_the_host(fds: Fds, host: str) -> None:
    lfd, addr = fds.listener()
    assert isinstance(addr, tuple)
    port = addr[1]
    s = fds.sock()
    with pytest.raises(ValueError, match="NUL") as e:
        fd.connect(s, (host, port))
    assert repr(host) in str(e.value)
    assert fd.getsockname(s) == ("0.0.0.0", 0)  # never bound, never connected
    assert _no_connection_waiting(lfd)


@pytest.mark.parametrize("host", HOSTS, ids=repr)
def test_bind_refuses_a_nul_in_the_host(fds: Fds, host: str) -> None:
    s = fds.sock()
    with pytest.raises(ValueError, match="NUL") as e:
        fd.bind(s, (host, 0))
    assert repr(host) in str(e.value)
    assert fd.getsockname(s) == ("0.0.0.0", 0)


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 on loopback")
@pytest.mark.parametrize("call", ["bind", "connect"])
def test_ipv6_tuple_refuses_a_nul_in_the_host(fds: Fds, call: str) -> None:
    lfd, addr = fds.listener(socket.AF_INET6)
    assert isinstance(addr, tuple)
    port = addr[1]
    s = fds.sock(socket.AF_INET6)
    with pytest.raises(ValueError, match="NUL"):
        getattr(fd, call)(s, ("::1\0.example.com", port, 0, 0))
    assert fd.getsockname(s)[:2] == ("::", 0)
    assert _no_connection_waiting(lfd)


@pytest.mark.parametrize("path", ["/tmp/fdkit\0x", b"/tmp/fdkit\0x", "rel\0"], ids=repr)
@pytest.mark.parametrize("call", ["bind", "connect"])
def test_unix_path_with_a_nul_is_refused_by_name(fds: Fds, path: str | bytes, call: str) -> None:
    s = fds.sock(socket.AF_UNIX)
    with pytest.raises(ValueError, match="null byte") as e:
        getattr(fd, call)(s, path)
    assert repr(path) in str(e.value)
    assert fd.getsockname(s) == ""


def test_abstract_names_keep_their_nul_bytes(fds: Fds) -> None:
    """The one place a NUL belongs: an abstract name starts with one and may hold more."""
    name = b"\0fdkit-" + uuid.uuid4().hex.encode() + b"\0tail"
    lfd = fds.sock(socket.AF_UNIX)
    fd.bind(lfd, name)
    fd.listen(lfd, 1)
    assert fd.getsockname(lfd) == name
    c = fds.sock(socket.AF_UNIX)
    fd.connect(c, name)
    fds.own(fd.accept(lfd)[0])


@pytest.mark.skipif(
    not uring.available()[0], reason=f"io_uring unavailable: {uring.available()[1]}"
)
def test_ring_connect_refuses_a_nul_in_the_host(fds: Fds) -> None:
    lfd, addr = fds.listener()
    assert isinstance(addr, tuple)
    port = addr[1]
    s = fds.sock()
    with uring.Ring(8) as ring:
        with pytest.raises(ValueError, match="NUL"):
            ring.connect(s, ("127.0.0.1\0.example.com", port), 1)
        assert ring.wait(0, timeout=0) == []  # nothing was queued
    assert _no_connection_waiting(lfd)


@pytest.mark.parametrize("host", ["127.0.0.1\0.example.com", "[::1\0]"], ids=repr)
def test_serve_static_refuses_a_nul_in_the_host(tmp_path: os.PathLike[str], host: str) -> None:
    with pytest.raises(ValueError, match="NUL") as e:
        serve_static(str(tmp_path), host=host, port=0)
    assert repr(host.strip("[]")) in str(e.value)
    for workers in (1, 2):
        with pytest.raises(ValueError, match="NUL") as e:
            fdkit.serve(tmp_path, host=host, port=0, workers=workers)
        assert repr(host.strip("[]")) in str(e.value)


@pytest.mark.parametrize(
    ("listen", "upstream"),
    [
        ("127.0.0.1\0.example.com:0", "127.0.0.1:9"),
        ("127.0.0.1:0", "127.0.0.1\0.example.com:9"),
        ("127.0.0.1:0", "localhost\0.example.com:9"),
        ("[::1\0]:0", "127.0.0.1:9"),
        ("unix:/tmp/fdkit\0x", "127.0.0.1:9"),
        ("127.0.0.1:0", "unix:@fdkit\0x"),
    ],
    ids=repr,
)
def test_serve_proxy_refuses_a_nul_in_an_address(listen: str, upstream: str) -> None:
    """`fdkit proxy`'s addresses (the command line cannot carry a NUL; the function can)."""
    with pytest.raises(ValueError, match="has a NUL byte") as e:
        serve_proxy(listen, upstream, quiet=True)
    assert "\\0" in str(e.value) or "\\x00" in str(e.value)  # the address, as typed
