"""Hostile request shapes against `fdkit serve`, on both engines, with the real server on
loopback:

- the directory redirect never becomes an open redirect: ``GET //sub`` must not answer
  ``Location: //sub/`` (a browser reads that as the host ``sub``);
- ``Host`` (RFC 9112 §3.2): an HTTP/1.1 request without one, or any request with two, is
  refused with 400 (as nginx does); HTTP/1.0 may go without;
- request lines that can never become valid (HTTP/0.9 ``GET /``, a TLS ClientHello sent to
  the plain-HTTP port) get 400 and the connection closes at once, not after the header
  deadline (30 s by default).
"""

from __future__ import annotations

import socket
import ssl
import time
import urllib.parse

import pytest

from helpers.serve import (  # noqa: F401  (the fixtures site, srv)
    HALLO,
    SUB_INDEX,
    Serve,
    Wire,
    _engine_args,
    exchange,
    fdkit_serve,
    get,
    make_site,
    site_fixture,
    srv_fixture,
)

# ------------------------------------------------------------------------------ redirects


@pytest.mark.parametrize(
    ("target", "location"),
    [
        ("/sub", "/sub/"),
        ("//sub", "/sub/"),
        ("///sub", "/sub/"),
        ("////sub", "/sub/"),
        ("http://x//sub", "/sub/"),
        ("http://evil.example///sub", "/sub/"),
        ("//sub?next=//evil.example", "/sub/?next=//evil.example"),
        ("/sub?a=1&b=2", "/sub/?a=1&b=2"),
        ("/%73ub", "/%73ub/"),
    ],
)
def test_a_redirect_never_leaves_the_host(srv: Serve, target: str, location: str) -> None:
    r = get(srv, target)
    assert r.status == 301, r
    loc = r.headers["location"]
    assert loc == location, r
    assert not loc.startswith("//")
    assert not loc.startswith("/\\")
    base = f"http://127.0.0.1:{srv.port}/"
    followed = urllib.parse.urlsplit(urllib.parse.urljoin(base, loc))
    assert followed.netloc == f"127.0.0.1:{srv.port}", loc
    # Following it lands on the directory's index.
    assert get(srv, loc).body == SUB_INDEX


# ------------------------------------------------------------------------------ Host


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /hallo.txt HTTP/1.1\r\n\r\n",
        b"GET /hallo.txt HTTP/1.1\r\nConnection: keep-alive\r\n\r\n",
        b"GET http://x/hallo.txt HTTP/1.1\r\n\r\n",
        b"GET /hallo.txt HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET /hallo.txt HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n",
        b"GET /hallo.txt HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET /hallo.txt HTTP/1.1\r\nHost:\r\n\r\n",
        b"GET /hallo.txt HTTP/1.1\r\nHost: a/b\r\n\r\n",
        b"GET /hallo.txt HTTP/1.1\r\nHost: a b\r\n\r\n",
        b"HEAD /hallo.txt HTTP/1.1\r\n\r\n",
    ],
    ids=[
        "no-host",
        "no-host-keep-alive",
        "absolute-form-no-host",
        "two-hosts",
        "two-hosts-same",
        "two-hosts-http-1.0",
        "empty-host",
        "slash-in-host",
        "space-in-host",
        "head-no-host",
    ],
)
def test_host_is_required_once(srv: Serve, request_bytes: bytes) -> None:
    with srv.raw() as s:
        s.sendall(request_bytes)
        w = Wire(s)
        r = w.response("HEAD" if request_bytes.startswith(b"HEAD") else "GET")
        assert r.status == 400, r
        assert HALLO not in r.body
        assert w.closed(2), "the connection stayed open after a 400"


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /hallo.txt HTTP/1.0\r\n\r\n",
        b"GET /hallo.txt HTTP/1.1\r\nHost: localhost\r\n\r\n",
        b"GET /hallo.txt HTTP/1.1\r\nhOsT: 127.0.0.1:8080\r\n\r\n",
        b"GET /hallo.txt HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
        b"GET http://other/hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n",
    ],
)
def test_a_good_host_or_http_1_0_is_served(srv: Serve, request_bytes: bytes) -> None:
    r = exchange(srv, request_bytes)
    assert (r.status, r.body) == (200, HALLO), r


def test_a_pipelined_request_without_host_after_a_good_one(srv: Serve) -> None:
    with srv.raw() as s:
        s.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\nGET /hallo.txt HTTP/1.1\r\n\r\n")
        w = Wire(s)
        assert w.response().body == HALLO
        assert w.response().status == 400
        assert w.closed(2)


# ------------------------------------------------------------------------------ 0.9 and TLS


def client_hello() -> bytes:
    """A real TLS ClientHello, as ``ssl`` would send it to an https:// URL (memory BIOs, no
    socket)."""
    ctx = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    assert hello[0] == 0x16, hello[:8]  # a handshake record
    return hello


def answer_and_close(srv: Serve, data: bytes, limit: float = 2.0) -> tuple[bytes, float]:
    """Sends ``data``, keeps the sending side open, and reads until the server closes: what
    came back and how long it took (fails past ``limit``)."""
    with srv.raw(timeout=limit) as s:
        t0 = time.monotonic()
        s.sendall(data)
        got = bytearray()
        while True:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                pytest.fail(f"no close within {limit} s of {data[:40]!r}; got {bytes(got)[:200]!r}")
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
        return bytes(got), time.monotonic() - t0


@pytest.mark.parametrize(
    "data",
    [
        b"GET /\r\n",
        b"GET /hallo.txt\r\n",
        b"GET /hallo.txt\n",
        b"\r\nGET /hallo.txt\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
        b"\x16",
        b"SSH-2.0-OpenSSH_9.6\r\n",
        b"GET / FTP/1.0",
    ],
    ids=[
        "0.9-root",
        "0.9-file",
        "0.9-lf",
        "0.9-after-blank",
        "tls-record",
        "tls-byte",
        "ssh",
        "not-http",
    ],
)
def test_hopeless_request_lines_get_400_at_once(srv: Serve, data: bytes) -> None:
    got, took = answer_and_close(srv, data)
    assert got.startswith(b"HTTP/1.1 400 Bad Request\r\n"), got[:200]
    assert HALLO not in got
    assert took < 1.5, took


def test_a_tls_client_hello_gets_400_at_once(srv: Serve) -> None:
    got, took = answer_and_close(srv, client_hello())
    assert got.startswith(b"HTTP/1.1 400 Bad Request\r\n"), got[:200]
    assert took < 1.5, took


def test_an_https_client_fails_fast(srv: Serve) -> None:
    """What a user sees who types https:// for the plain port: an SSL error at once."""
    ctx = ssl.create_default_context()
    t0 = time.monotonic()
    with (
        socket.create_connection(srv.addr, timeout=5) as raw,
        pytest.raises((ssl.SSLError, ConnectionResetError, OSError)),
        ctx.wrap_socket(raw, server_hostname="localhost"),
    ):
        pass
    assert time.monotonic() - t0 < 1.5


def test_a_valid_line_still_waits_for_the_rest(srv: Serve) -> None:
    """The early refusal never cuts a request that is only slow: a request line, then its
    headers a moment later, is served."""
    with srv.raw() as s:
        s.sendall(b"GET /hallo.txt HTTP/1.1\r\n")
        time.sleep(0.3)
        s.sendall(b"Host: x\r\n")
        time.sleep(0.3)
        s.sendall(b"\r\n")
        assert Wire(s).response().body == HALLO
