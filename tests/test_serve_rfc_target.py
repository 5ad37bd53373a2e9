"""The request target and ``Host`` of ``fdkit serve``, judged by the RFCs, on both engines:
nginx's own ``http_uri.t`` and ``http_host.t`` (both the nginx and the freenginx versions)
ported to raw sockets on loopback, and the cases around them.

- Dot segments are removed (RFC 3986 §5.2.4, §6.2.2.3): ``/foo/bar/.`` is ``/foo/bar/`` and is
  answered as that directory is (its index, its listing, or its 404), ``%2e`` is a dot (RFC 3986
  §6.2.2.2); a ``..`` that would climb above the root is refused (403), the query and
  fragment are never part of the path.
- A request line with a control byte in its target is invalid: 400 (RFC 9112 §3).
- ``Host`` must be ``uri-host [":" port]`` by RFC 3986 §3.2.2's grammar, else 400 (RFC 9112 §3.2,
  a MUST); an absolute-form target's authority too, with a host and no userinfo (RFC 9110
  §4.2.1, §4.2.4); when valid, it names the host instead of ``Host`` (RFC 9112 §3.2.2).

Where the RFC leaves a choice (a MAY, or a SHOULD the server may weigh), the test passes either
answer and says why in its docstring; where nginx is stricter than the grammar (``a..b`` is a
``reg-name``), the grammar decides and nginx's 400 passes too.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.serve import (
    HALLO,
    INDEX,
    Response,
    Serve,
    Wire,
    _engine_args,
    exchange,
    fdkit_serve,
    make_site,
)

FOO_INDEX = b"<!doctype html><title>foo</title>foo index\n"
BAR_INDEX = b"<!doctype html><title>bar</title>bar index\n"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_site(tmp_path_factory.mktemp("target"))
    (root / "foo" / "bar").mkdir(parents=True)
    (root / "foo" / "index.html").write_bytes(FOO_INDEX)
    (root / "foo" / "bar" / "index.html").write_bytes(BAR_INDEX)
    (root / "foo" / "empty").mkdir()
    for p in (root / "foo", root / "foo" / "bar", root / "foo" / "empty"):
        p.chmod(0o755)
    return root


@pytest.fixture(scope="module")
def srv(site: Path, engine: str) -> Iterator[Serve]:
    with fdkit_serve(site, *_engine_args(engine), "--workers", "1") as s:
        yield s


def request(srv: Serve, data: bytes, method: str = "GET") -> tuple[Response, bool]:
    """``data`` on a fresh connection: the response, and whether the server then closed."""
    with srv.raw() as s:
        s.sendall(data)
        w = Wire(s)
        r = w.response(method)
        return r, w.closed(2) if r.status == 400 else False


def target(
    srv: Serve, t: bytes | str, version: str = "1.1", host: bytes = b"localhost"
) -> Response:
    """``GET t`` with a valid ``Host``."""
    raw = t.encode("latin-1") if isinstance(t, str) else t
    return exchange(srv, b"GET " + raw + f" HTTP/{version}\r\nHost: ".encode() + host + b"\r\n\r\n")


def assert_400_and_close(srv: Serve, data: bytes) -> None:
    r, closed = request(srv, data)
    assert r.status == 400, (data, r)
    assert HALLO not in r.body
    assert INDEX not in r.body
    assert closed, f"the connection stayed open after a 400 to {data!r}"


# ------------------------------------------------------------------------------ dot segments


@pytest.mark.parametrize(
    ("t", "body"),
    [
        # http_uri.t
        ("/foo/bar/.", BAR_INDEX),
        ("/foo/bar/.?args", BAR_INDEX),
        ("/foo/bar/..", FOO_INDEX),
        ("/foo/bar/..?args", FOO_INDEX),
        # around them
        ("/foo/bar/./", BAR_INDEX),
        ("/foo/./bar/", BAR_INDEX),
        ("/foo/bar/../bar/", BAR_INDEX),
        ("/foo/bar/../../", INDEX),
        ("/foo/bar/../..", INDEX),
        ("/.", INDEX),
        ("/./", INDEX),
        ("/foo/..", INDEX),
        ("/foo/bar/%2e", BAR_INDEX),
        ("/foo/bar/%2E%2e", FOO_INDEX),
        ("/foo/bar/.%2E/", FOO_INDEX),
        ("/foo/%2e/bar/", BAR_INDEX),
        ("/foo/../hallo.txt", HALLO),
        ("/foo/bar/%2e%2e/%2E%2E/hallo.txt", HALLO),
        ("/foo//bar/..//../hallo.txt", HALLO),
        ("/hallo%2etxt", HALLO),
        ("/hallo%2Etxt?x=/../..", HALLO),
        ("http://localhost/foo/bar/.", BAR_INDEX),
        ("http://localhost/foo/bar/../", FOO_INDEX),
    ],
)
def test_rfc3986_5_2_4_dot_segments_are_removed(srv: Serve, t: str, body: bytes) -> None:
    """RFC 3986 §5.2.4 (remove_dot_segments), §6.2.2.3 (a server normalises by it), §6.2.2.2
    (``%2E`` is ``.``): the target names what its normalised path names."""
    r = target(srv, t)
    assert (r.status, r.body) == (200, body), (t, r)


def test_rfc3986_5_2_4_head_of_a_dot_segment_target(srv: Serve) -> None:
    r = exchange(srv, b"HEAD /foo/bar/. HTTP/1.1\r\nHost: x\r\n\r\n", "HEAD")
    assert r.status == 200, r
    assert r.headers["content-length"] == str(len(BAR_INDEX)), r


@pytest.mark.parametrize(
    ("t", "same_as"),
    [
        ("/noindex/.", "/noindex/"),
        ("/noindex/%2e", "/noindex/"),
        ("/foo/empty/..", "/foo/"),
        ("/noindex/file.txt/..", "/noindex/"),
        ("/nope/..", "/"),
        ("/hallo.txt/.", "/hallo.txt/"),
    ],
)
def test_rfc3986_6_2_2_3_a_dot_target_is_answered_as_its_normal_form(
    srv: Serve, t: str, same_as: str
) -> None:
    """RFC 3986 §6.2.2.3: ``/d/.`` and ``/d/`` are the same resource, so they get the same
    answer, whatever today's rule for that directory is (an index, a listing, a 404). RFC
    3986 §5.2.4 removes dot segments lexically: ``/nope/..`` is ``/`` though ``nope`` does not
    exist."""
    a, b = target(srv, t), target(srv, same_as)
    assert (a.status, a.body) == (b.status, b.body), (t, a, b)


def test_rfc3986_6_2_2_3_a_dot_target_lists_as_its_directory(site: Path, engine: str) -> None:
    """With ``--list``, ``/noindex/.`` is the listing of ``/noindex/``."""
    with fdkit_serve(site, *_engine_args(engine), "--workers", "1", "--list") as s:
        a, b = target(s, "/noindex/."), target(s, "/noindex/")
        assert a.status == b.status == 200, (a, b)
        assert a.body == b.body
        assert b"file.txt" in a.body


@pytest.mark.parametrize(
    ("t", "location"),
    [
        ("/foo/./bar", "/foo/bar/"),
        ("/foo/bar/../bar", "/foo/bar/"),
        ("/x/%2e%2e/foo", "/foo/"),
        ("/sub/../foo/bar?q=1", "/foo/bar/?q=1"),
    ],
)
def test_rfc9110_10_2_2_a_redirect_names_the_normal_form(srv: Serve, t: str, location: str) -> None:
    """A directory asked for without its slash is redirected (RFC 9110 §15.4.2) to the path with
    its dot segments removed (RFC 3986 §5.2.4): the Location never carries them."""
    r = target(srv, t)
    assert r.status == 301, (t, r)
    assert r.headers["location"] == location, r
    assert target(srv, location).status == 200


@pytest.mark.parametrize(
    "t",
    [
        "/..",
        "/../",
        "/../hallo.txt",
        "/foo/../../hallo.txt",
        "/foo/bar/../../..",
        "/%2e%2e/hallo.txt",
        "/foo/%2E%2E/%2e%2e/hallo.txt",
        "/.%2e/",
        "/%2e./",
        "/./../hallo.txt",
        "http://localhost/../hallo.txt",
        "http://localhost/foo/../../",
    ],
)
def test_rfc3986_5_2_4_dot_dot_above_the_root_is_refused(srv: Serve, t: str) -> None:
    """RFC 3986 §5.2.4 would clamp a ``..`` at the root; the server refuses it instead (403,
    as before normalisation): such a target is crafted, never produced by resolving a link."""
    r = target(srv, t)
    assert r.status == 403, (t, r)
    assert HALLO not in r.body
    assert INDEX not in r.body


# ------------------------------------------------------------------------------ query, fragment


@pytest.mark.parametrize(
    ("t", "body"),
    [
        ("/foo/bar/.#frag", BAR_INDEX),
        ("/foo/bar/?#frag", BAR_INDEX),
        ("http://localhost:8080#frag", INDEX),
        ("http://localhost:8080?a#frag", INDEX),
        ("/hallo.txt#/../../x", HALLO),
    ],
)
def test_rfc9112_3_2_a_fragment_is_never_part_of_the_path(srv: Serve, t: str, body: bytes) -> None:
    """A ``#`` has no place in a request target (RFC 9112 §3.2: origin-form is ``absolute-path
    ["?" query]``). RFC 9112 §3 lets the server answer 400 to such a line (newer nginx does);
    ``fdkit serve`` cuts the fragment (RFC 3986 §3.5: it is the client's business), as nginx
    1.22 did. Either passes; what may never happen is the fragment read as part of the path."""
    r = target(srv, t)
    assert r.status in (200, 400), (t, r)
    assert r.status == 400 or r.body == body, (t, r)


def test_rfc9112_3_2_a_fragment_of_an_escaped_byte(srv: Serve) -> None:
    """``/%aa#frag`` (http_uri.t): no file is named 0xAA; 404, or 400 for the ``#``."""
    assert target(srv, "/%aa#frag").status in (400, 404)


@pytest.mark.parametrize(
    ("t", "body"),
    [
        ("http://localhost", INDEX),
        ("http://localhost/", INDEX),
        ("http://localhost?args", INDEX),
        ("http://localhost:8080", INDEX),
        ("http://localhost:8080/", INDEX),
        ("http://localhost:8080?args", INDEX),
        ("HTTP://localhost/hallo.txt", HALLO),
        ("https://localhost/hallo.txt", HALLO),
    ],
)
def test_rfc9112_3_2_2_absolute_form_paths(srv: Serve, t: str, body: bytes) -> None:
    """RFC 9112 §3.2.2: a server MUST accept the absolute-form; an empty path is ``/`` (RFC 3986
    §6.2.3), the query is not part of it, the scheme is case-insensitive (RFC 3986 §3.1)."""
    r = target(srv, t)
    assert (r.status, r.body) == (200, body), (t, r)


@pytest.mark.parametrize("t", ["/foo/bar%", "/foo/bar%1", "/foo/bar%zz", "#frag", "foo/bar"])
def test_rfc9112_3_invalid_targets_are_400(srv: Serve, t: str) -> None:
    """RFC 9112 §3: an invalid request line SHOULD get 400 (a malformed escape breaks RFC 3986
    §2.1's ``pct-encoded``; a target that is none of the four forms of RFC 9112 §3.2)."""
    r = target(srv, t)
    assert r.status == 400, (t, r)


def test_rfc9110_escaped_control_byte_is_a_name(srv: Serve) -> None:
    """``/%02`` (http_uri.t) is a valid target naming a file ``\\x02``: there is none, and the
    server may refuse to serve such names at all (403) or not find one (404)."""
    assert target(srv, "/%02").status in (403, 404)


# ------------------------------------------------------------------------------ request line


@pytest.mark.parametrize(
    "data",
    [
        b"GET /\x02 HTTP/1.0\r\n\r\n",
        b"GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /hallo.txt\x00.html HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /a\tb HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /a\x7f HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /a\x1bb HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /hallo.txt?q=\x01 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /hallo.txt#\x01 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /a\rb HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"HEAD /\x02 HTTP/1.1\r\nHost: x\r\n\r\n",
    ],
    ids=[
        "stx",
        "nul",
        "nul-inside",
        "tab",
        "del",
        "esc",
        "query",
        "fragment",
        "cr",
        "space",
        "head",
    ],
)
def test_rfc9112_3_control_bytes_in_the_target_are_400(srv: Serve, data: bytes) -> None:
    """RFC 9112 §3: the target has no control bytes (RFC 3986 §2); such a request line is
    invalid and SHOULD get 400, not be served or refused as if it named a file (403)."""
    assert_400_and_close(srv, data)


def test_rfc9112_3_a_control_byte_is_refused_before_the_head_ends(srv: Serve) -> None:
    """The target's control byte is seen in the first packet: 400 and close at once, without
    waiting for the head's deadline."""
    with srv.raw(timeout=3) as s:
        t0 = time.monotonic()
        s.sendall(b"GET /\x02")
        got = bytearray()
        with contextlib.suppress(ConnectionResetError):
            while chunk := s.recv(65536):
                got += chunk
        assert got.startswith(b"HTTP/1.1 400 Bad Request\r\n"), got[:200]
        assert time.monotonic() - t0 < 1.5


# ------------------------------------------------------------------------------ Host


def host_header(srv: Serve, host: bytes) -> tuple[Response, bool]:
    """``http_host.t``'s ``http_host_header``: ``GET /hallo.txt`` (HTTP/1.0) with ``Host``."""
    return request(srv, b"GET /hallo.txt HTTP/1.0\r\nHost: " + host + b"\r\n\r\n")


def absolute(srv: Serve, authority: bytes) -> tuple[Response, bool]:
    """``http_host.t``'s ``http_absolute_path``: ``GET http://AUTHORITY/hallo.txt``
    (HTTP/1.0) with ``Host: localhost``."""
    return request(
        srv, b"GET http://" + authority + b"/hallo.txt HTTP/1.0\r\nHost: localhost\r\n\r\n"
    )


VALID_HOSTS = [
    b"www.abcd-ef.g02.xyz",
    b"abcd-ef.g02.xyz:8080",
    b"www.abcd-ef.g02.xyz.",
    b"abcd-ef.g02.xyz.:88",
    b"AbC-d93.0.34ZhGt-s.nk.Ru",
    b"AbC-d93.0.34ZhGt-s.nk.Ru:88",
    b"example.com",
    b"EXAMPLE.com:80",
    b"foo09.example.com",
    b"_foo.example.com",
    b"-._~!$&'()*+,;=%25.example.com",
    b"123.40.56.78",
    b"123.49.0.78:987",
    b"192.0.2.1:80",
    b"[abcd::ef98:0:7654:321]",
    b"[abcd::ef98:0:7654:321]:80",
    b"[2001:DB8::1]:80",
    b"[::ffff:12.30.67.89]",
    b"[::123.45.67.89]:4321",
    b"[v0123456789aBcDeF.!$&'()*+,;=-._~AbCdEfGhIjKlMnOpQrStUvWxYz0123456789:]",
    b"[v0.1azAZ.!$&'()*+,;=-._~:]:80",
    b"example.com:",
]


@pytest.mark.parametrize("host", VALID_HOSTS, ids=[h.decode() for h in VALID_HOSTS])
def test_rfc3986_3_2_2_valid_hosts_are_served(srv: Serve, host: bytes) -> None:
    """RFC 3986 §3.2.2: a ``reg-name`` (a trailing dot, ``_``, sub-delims, escapes), an IPv4
    address, a bracketed IPv6 address (IPv4 tail included) or IPvFuture, and a port of digits
    (``port = *DIGIT``: may be empty), in ``Host`` and in an absolute-form target."""
    for r, _ in (host_header(srv, host), absolute(srv, host)):
        assert (r.status, r.body) == (200, HALLO), (host, r)


GRAMMAR_ONLY_HOSTS = [
    b"..examp-LE.com",
    b"example..com",
    b"com.exa-m.45..:",
    b"[v0.1..2]",
    b"[2001:db8::1%25en1]",
    b"[2001:db8::1%25en1]:80",
]


@pytest.mark.parametrize("host", GRAMMAR_ONLY_HOSTS, ids=[h.decode() for h in GRAMMAR_ONLY_HOSTS])
def test_rfc3986_3_2_2_hosts_only_the_grammar_admits(srv: Serve, host: bytes) -> None:
    """Empty DNS labels (``a..b``) are a valid ``reg-name`` (RFC 3986 §3.2.2 leaves DNS rules to
    names meant for DNS), and RFC 6874 adds zones (``%25en1``) to IPv6 literals; nginx answers
    some of these 400. A server that looks no name up may serve them (``fdkit serve`` does) or
    refuse them; either passes, nothing else does."""
    for r, closed in (host_header(srv, host), absolute(srv, host)):
        assert (r.status, r.body) in ((200, HALLO), (400, r.body)), (host, r)
        assert r.status == 200 or closed


INVALID_HOSTS = [
    # the seven hostile targets
    b"example.com.:1.2",
    b"123.40.56.78:9000:80",
    b"[abcd::ef98:0:7654:321",
    b"[abcd::ef98:0:7654:321]..:98",
    b"extra[abcd::ef98:0:7654:321]:98",
    b"example.com:80:80",
    b"example.com:foo",
    # http_host.t, both versions
    b"example.com/\\:552",
    b"example/com",
    b"example\\com",
    b"[abcd::e\\f98:0/:7654:321]",
    b"[ab..cd::ef98:0:7654:321]",
    b"[2001:db8::1/2]",
    b"[2001:db8::1\\2]",
    b"[2001:db8::1..2]",
    b"[2001:db8::1",
    b"[v0.1/2]",
    b"[v0.1\\2]",
    b"[v0.1",
    b"example.com\x02",
    b"example.com\xff",
    b"localhost\r\nHost: again",
    # around them
    b"",
    b":80",
    b"user@localhost",
    b"exa mple.com",
    b"ex%zzample.com",
    b"[]",
    b"[1::2::3]",
    b"[1:2:3:4:5:6:7:8:9]",
    b"[::256.1.1.1]",
    b"[127.0.0.1]",
    b"[2001:db8::1%en1]",
    b"[v.1]",
]


@pytest.mark.parametrize("host", INVALID_HOSTS, ids=[repr(h)[2:-1] for h in INVALID_HOSTS])
def test_rfc9112_3_2_an_invalid_host_is_400(srv: Serve, host: bytes) -> None:
    """RFC 9112 §3.2: a server MUST answer 400 to a request whose ``Host`` is not ``uri-host
    [":" port]`` (RFC 3986 §3.2.2, §3.2.3: a port is digits only; a bracket opens an
    IP literal that must close and end the host; IPv6 by its grammar), or that has two."""
    r, closed = host_header(srv, host)
    assert r.status == 400, (host, r)
    assert HALLO not in r.body
    assert closed


def test_rfc9112_3_2_an_invalid_host_is_400_even_with_absolute_form(srv: Serve) -> None:
    """RFC 9112 §3.2's MUST covers any request with an invalid ``Host``; RFC 9112 §3.2.2 makes
    the target's authority name the host, but the field is still part of the message."""
    assert_400_and_close(srv, b"GET http://localhost/hallo.txt HTTP/1.1\r\nHost: a:b\r\n\r\n")


INVALID_AUTHORITIES = [
    b"123.40.56.78:9000:80",
    b"[ab..cd::ef98:0:7654:321]",
    b"[abcd\\::ef98:0:7654:321/]:12",
    b"\x1b/xample.com",
    b"com.exa-m.45..:80:",
    b"example\\com",
    b"example.com:80:80",
    b"example.com:foo",
    b"[2001:db8::1/2]",
    b"[2001:db8::1\\2]",
    b"[2001:db8::1..2]",
    b"[2001:db8::1",
    b"[v0.1/2]",
    b"[v0.1\\2]",
    b"[v0.1",
    b"example.com\x02",
    b"example.com\xff",
    b"",
    b"user@localhost",
    b"user:pass@localhost",
    b"@localhost",
    b":8080",
]


@pytest.mark.parametrize(
    "authority", INVALID_AUTHORITIES, ids=[repr(a)[2:-1] for a in INVALID_AUTHORITIES]
)
def test_rfc9112_3_2_2_an_invalid_absolute_form_authority_is_400(
    srv: Serve, authority: bytes
) -> None:
    """RFC 9112 §3.2.2 (the absolute-form), RFC 3986 §3.2.2 (its authority's grammar), RFC 9110
    §4.2.1 (an ``http`` URI with an empty host MUST be rejected) and §4.2.4 (userinfo SHOULD be
    treated as an error): 400, even with a valid ``Host``."""
    r, closed = absolute(srv, authority)
    assert r.status == 400, (authority, r)
    assert HALLO not in r.body
    assert closed


def test_rfc9112_3_2_2_the_absolute_form_authority_wins_over_host(srv: Serve) -> None:
    """RFC 9112 §3.2.2: with an absolute-form target, the server uses its authority and ignores
    ``Host``'s value (which need not match): the file is served."""
    r, _ = request(srv, b"GET http://a.example:81/hallo.txt HTTP/1.1\r\nHost: b.example\r\n\r\n")
    assert (r.status, r.body) == (200, HALLO), r


def test_rfc9112_3_2_a_request_line_and_host_stay_usable_on_one_connection(srv: Serve) -> None:
    """A normalised target and a valid Host keep the connection open for the next request."""
    with srv.raw() as s:
        s.sendall(
            b"GET /foo/bar/. HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"
            b"GET http://[v1.x]/foo/bar/.. HTTP/1.1\r\nHost: h\r\n\r\n"
            b"GET /hallo%2etxt HTTP/1.1\r\nHost: h.\r\n\r\n"
        )
        w = Wire(s)
        assert w.response().body == BAR_INDEX
        assert w.response().body == FOO_INDEX
        assert w.response().body == HALLO
        s.shutdown(socket.SHUT_WR)
        assert w.closed(2)
