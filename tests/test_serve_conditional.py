"""Conditional requests to `fdkit serve` (RFC 9110 §13), on both engines, with the real server
on loopback: the strong ``ETag`` (inode, size, mtime in ns), ``If-None-Match`` and
``If-Modified-Since`` (304), ``If-Match`` and ``If-Unmodified-Since`` (412), their order
(RFC 9110 §13.2.2), and ``If-Range`` (RFC 9110 §13.1.5): a resumed download of a file that
changed gets the whole new file (200), never new bytes spliced onto old ones.

The answers are compared with nginx's on the same files where nginx is installed (skipped
otherwise).
"""

from __future__ import annotations

import contextlib
import email.utils
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.serve import (  # noqa: F401  (the fixtures site, srv)
    Response,
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

OLD = 1_600_000_000  # 2020-09-13: a modification time well in the past (a strong date)
BODY = bytes(range(256)) * 40  # 10,240 bytes


def http_date(secs: float) -> str:
    return email.utils.formatdate(secs, usegmt=True)


def etag_of(path: Path) -> str:
    st = os.stat(path)
    return f'"{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}"'


_counter = iter(range(1_000_000))


@pytest.fixture
def file(site: Path) -> Path:
    """A fresh file (its own name: nothing cached) of ``BODY``, modified at ``OLD``."""
    path = site / f"cond-{next(_counter)}-{os.getpid()}.bin"
    path.write_bytes(BODY)
    os.utime(path, ns=(OLD * 10**9, OLD * 10**9 + 123_456_789))
    return path


def url(path: Path) -> str:
    return "/" + path.name


# ------------------------------------------------------------------------------ ETag


def test_etag_on_200_206_and_304(srv: Serve, file: Path) -> None:
    tag = etag_of(file)
    assert tag.endswith(f'-{OLD * 10**9 + 123_456_789:x}"'), tag
    r = get(srv, url(file))
    assert (r.status, r.body) == (200, BODY), r
    assert r.headers["etag"] == tag
    assert r.headers["last-modified"] == http_date(OLD)
    r = get(srv, url(file), "Range: bytes=10-19")
    assert (r.status, r.body, r.headers["etag"]) == (206, BODY[10:20], tag), r
    r = get(srv, url(file), f"If-None-Match: {tag}")
    assert r.status == 304, r
    assert r.headers["etag"] == tag, r
    r = get(srv, url(file), method="HEAD")
    assert r.status == 200, r
    assert r.headers["etag"] == tag, r


def test_etag_changes_with_the_file(srv: Serve, file: Path) -> None:
    first = get(srv, url(file)).headers["etag"]
    # Same size, same second: only the nanoseconds differ.
    os.utime(file, ns=(OLD * 10**9, OLD * 10**9 + 123_456_790))
    second = get(srv, url(file)).headers["etag"]
    assert second != first
    assert second == etag_of(file)
    # Rewritten in place with one byte more: same inode, new size.
    file.write_bytes(BODY + b"!")
    third = get(srv, url(file)).headers["etag"]
    assert third not in (first, second)
    assert third == etag_of(file)
    # Replaced by another file (new inode) with the same size and times.
    st = os.stat(file)
    other = file.with_suffix(".new")
    other.write_bytes(BODY + b"?")
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    other.replace(file)
    deadline = time.monotonic() + 3  # a rename is seen at the next path check (1 s)
    while (tag := get(srv, url(file)).headers["etag"]) == third and time.monotonic() < deadline:
        time.sleep(0.1)
    assert tag == etag_of(file) != third


# ------------------------------------------------------------------------------ 304


@pytest.mark.parametrize(
    "value",
    ["{tag}", '"other", {tag}', "W/{tag}", "*", ' , "x" ,{tag} , '],
    ids=["exact", "in-a-list", "weak", "star", "odd-spacing"],
)
def test_if_none_match_304(srv: Serve, file: Path, value: str) -> None:
    tag = etag_of(file)
    for method in ("GET", "HEAD"):
        r = get(srv, url(file), f"If-None-Match: {value.format(tag=tag)}", method=method)
        assert (r.status, r.body) == (304, b""), r
        assert r.headers["etag"] == tag
        assert r.headers["last-modified"] == http_date(OLD)
        assert "content-type" not in r.headers
        assert r.headers.get("content-length", "0") in ("0", str(len(BODY)))


@pytest.mark.parametrize("value", ['"other"', "{bare}", "{tag}x", "garbage", '"a", "b"'])
def test_if_none_match_no_match_200(srv: Serve, file: Path, value: str) -> None:
    tag = etag_of(file)
    r = get(srv, url(file), f"If-None-Match: {value.format(tag=tag, bare=tag.strip(chr(34)))}")
    assert (r.status, r.body) == (200, BODY), r


def test_if_none_match_on_two_lines(srv: Serve, file: Path) -> None:
    r = get(srv, url(file), 'If-None-Match: "a"', f"If-None-Match: {etag_of(file)}")
    assert r.status == 304, r


def test_if_none_match_overrides_if_modified_since(srv: Serve, file: Path) -> None:
    # RFC 9110 §13.1.3: If-Modified-Since is ignored when If-None-Match is present.
    r = get(srv, url(file), 'If-None-Match: "other"', f"If-Modified-Since: {http_date(OLD)}")
    assert (r.status, r.body) == (200, BODY), r


def test_a_304_keeps_the_connection(srv: Serve, file: Path) -> None:
    tag = etag_of(file)
    with srv.raw() as s:
        s.sendall(
            f"GET {url(file)} HTTP/1.1\r\nHost: x\r\nIf-None-Match: {tag}\r\n\r\n"
            f"GET {url(file)} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
        w = Wire(s)
        assert w.response().status == 304
        r = w.response()
        assert (r.status, r.body) == (200, BODY), r


# ------------------------------------------------------------------------------ 412


@pytest.mark.parametrize(
    ("value", "status"),
    [
        ("{tag}", 200),
        ("*", 200),
        ('"x", {tag}', 200),
        ('"x"', 412),
        ("W/{tag}", 412),
        ("garbage", 412),
    ],
)
def test_if_match(srv: Serve, file: Path, value: str, status: int) -> None:
    r = get(srv, url(file), f"If-Match: {value.format(tag=etag_of(file))}")
    assert r.status == status, r
    if status == 412:
        assert BODY[:64] not in r.body
        assert r.body == b"412 Precondition Failed\n"
    else:
        assert r.body == BODY


@pytest.mark.parametrize(
    ("when", "status"), [(OLD, 200), (OLD + 3600, 200), (OLD - 1, 412), (None, 200)]
)
def test_if_unmodified_since(srv: Serve, file: Path, when: int | None, status: int) -> None:
    value = http_date(when) if when is not None else "not a date"
    r = get(srv, url(file), f"If-Unmodified-Since: {value}")
    assert r.status == status, r


def test_if_match_wins_over_if_unmodified_since(srv: Serve, file: Path) -> None:
    # RFC 9110 §13.1.4: If-Unmodified-Since is ignored when If-Match is present.
    r = get(srv, url(file), f"If-Match: {etag_of(file)}", f"If-Unmodified-Since: {http_date(1)}")
    assert r.status == 200, r


def test_412_comes_before_304(srv: Serve, file: Path) -> None:
    r = get(srv, url(file), 'If-Match: "x"', "If-None-Match: *")
    assert r.status == 412, r
    r = get(srv, url(file), f"If-Unmodified-Since: {http_date(1)}", "If-None-Match: *")
    assert r.status == 412, r


def test_a_412_keeps_the_connection(srv: Serve, file: Path) -> None:
    with srv.raw() as s:
        s.sendall(
            f'GET {url(file)} HTTP/1.1\r\nHost: x\r\nIf-Match: "x"\r\n\r\n'
            f"GET {url(file)} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
        w = Wire(s)
        assert w.response().status == 412
        assert w.response().body == BODY


# ------------------------------------------------------------------------------ If-Range


def test_if_range_with_an_older_date_sends_the_whole_new_file(srv: Serve, file: Path) -> None:
    """A download resumed with the date of the old version of a file that has changed since
    gets the whole new file (200), not new bytes at the old offset."""
    old_date = http_date(OLD)
    assert get(srv, url(file), "Range: bytes=0-1", f"If-Range: {old_date}").status == 206
    new = bytes(reversed(BODY))
    file.write_bytes(new)
    os.utime(file, (OLD + 7200, OLD + 7200))
    r = get(srv, url(file), "Range: bytes=0-1", f"If-Range: {old_date}")
    assert (r.status, r.body) == (200, new), r
    assert "content-range" not in r.headers


@pytest.mark.parametrize(
    ("value", "status"),
    [
        ("{tag}", 206),
        ("{date}", 206),
        ('"other"', 200),
        ("W/{tag}", 200),  # a weak tag never matches strongly
        ("{older}", 200),
        ("{newer}", 200),  # only an exact match of Last-Modified
        ("not a date", 200),
    ],
)
def test_if_range(srv: Serve, file: Path, value: str, status: int) -> None:
    v = value.format(
        tag=etag_of(file), date=http_date(OLD), older=http_date(OLD - 1), newer=http_date(OLD + 1)
    )
    r = get(srv, url(file), "Range: bytes=100-199", f"If-Range: {v}")
    assert r.status == status, r
    if status == 206:
        assert r.body == BODY[100:200]
        assert r.headers["content-range"] == f"bytes 100-199/{len(BODY)}"
    else:
        assert r.body == BODY


def test_if_range_with_an_old_etag_after_a_change(srv: Serve, file: Path) -> None:
    old_tag = etag_of(file)
    file.write_bytes(BODY[::-1])
    os.utime(file, (OLD, OLD))  # same size, same second: only the tag can tell
    r = get(srv, url(file), "Range: bytes=0-9", f"If-Range: {old_tag}")
    assert (r.status, r.body) == (200, BODY[::-1]), r


def test_if_range_with_the_date_of_a_file_changed_this_second(srv: Serve, file: Path) -> None:
    """A Last-Modified in the current second is not a strong validator (the file may change
    again within it, RFC 9110 §8.8.2.2): the whole file is sent."""
    now = int(time.time())
    os.utime(file, (now, now))
    r = get(srv, url(file), "Range: bytes=0-9", f"If-Range: {http_date(now)}")
    assert (r.status, r.body) == (200, BODY), r
    # The ETag still works.
    r = get(srv, url(file), "Range: bytes=0-9", f"If-Range: {etag_of(file)}")
    assert (r.status, r.body) == (206, BODY[:10]), r


def test_if_range_without_range_is_ignored(srv: Serve, file: Path) -> None:
    r = get(srv, url(file), 'If-Range: "other"')
    assert (r.status, r.body) == (200, BODY), r


def test_if_range_does_not_turn_a_304_into_a_200(srv: Serve, file: Path) -> None:
    r = get(srv, url(file), "Range: bytes=0-9", 'If-Range: "x"', "If-None-Match: *")
    assert r.status == 304, r


def test_if_range_false_skips_an_unsatisfiable_range(srv: Serve, file: Path) -> None:
    r = get(srv, url(file), "Range: bytes=99999999-", 'If-Range: "other"')
    assert (r.status, r.body) == (200, BODY), r


# ------------------------------------------------------------------------------ nginx


NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)


@contextlib.contextmanager
def nginx_serving(root: Path, tmp: Path) -> Iterator[int]:
    """nginx in the foreground (``daemon off``) on a free loopback port, serving ``root``;
    stopped by its pid."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (tmp / "tmp").mkdir(exist_ok=True)
    conf = tmp / "nginx.conf"
    # As root, nginx's workers would run as nobody, who cannot read pytest's temp dirs.
    user = f"user {pwd.getpwuid(os.geteuid()).pw_name};" if os.geteuid() == 0 else ""
    conf.write_text(
        f"""{user} worker_processes 1; daemon off; pid {tmp}/nginx.pid; error_log {tmp}/error.log;
events {{ worker_connections 64; }}
http {{ access_log off; client_body_temp_path {tmp}/tmp; proxy_temp_path {tmp}/tmp;
  fastcgi_temp_path {tmp}/tmp; uwsgi_temp_path {tmp}/tmp; scgi_temp_path {tmp}/tmp;
  server {{ listen 127.0.0.1:{port}; root {root}; }} }}
"""
    )
    proc = subprocess.Popen(
        [NGINX or "nginx", "-c", str(conf), "-p", str(tmp)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if proc.poll() is not None:
                err = proc.stderr.read() if proc.stderr else b""
                pytest.skip(f"nginx did not start: {err.decode(errors='replace')[:300]}")
            if time.monotonic() > deadline:
                pytest.fail("nginx did not listen within 10 s")
            time.sleep(0.05)
        yield port
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        if proc.stderr:
            proc.stderr.close()


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed")
def test_the_same_answers_as_nginx(srv: Serve, site: Path, file: Path, tmp_path: Path) -> None:
    """Each server's own ETag and the shared Last-Modified, in the same request shapes: the
    same status and the same body. (Not compared: If-Modified-Since with a later date, which
    nginx's default ``if_modified_since exact`` answers 200 and RFC 9110 §13.1.3 304.)"""
    cases = [
        ("If-None-Match: {tag}",),
        ("If-None-Match: W/{tag}",),
        ("If-None-Match: *",),
        ('If-None-Match: "nope"',),
        ("If-Match: {tag}",),
        ('If-Match: "nope"',),
        ("If-Match: *",),
        ("If-Unmodified-Since: {date}",),
        ("If-Unmodified-Since: {older}",),
        ("If-Modified-Since: {date}",),
        ("If-Modified-Since: {older}",),
        ('If-Match: "nope"', "If-None-Match: *"),
        ('If-None-Match: "nope"', "If-Modified-Since: {date}"),
        ("Range: bytes=0-9", "If-Range: {tag}"),
        ("Range: bytes=0-9", 'If-Range: "nope"'),
        ("Range: bytes=0-9", "If-Range: {date}"),
        ("Range: bytes=0-9", "If-Range: {older}"),
        ("Range: bytes=0-9", "If-Range: {newer}"),
    ]
    with nginx_serving(site, tmp_path) as port:
        ng = Serve.__new__(Serve)
        ng.host, ng.port = "127.0.0.1", port
        plain = {"fdkit": get(srv, url(file)), "nginx": get(ng, url(file))}
        assert plain["nginx"].status == 200, plain["nginx"]
        tags = {name: r.headers["etag"] for name, r in plain.items()}
        dates = {"date": http_date(OLD), "older": http_date(OLD - 60), "newer": http_date(OLD + 60)}
        for case in cases:
            answers: dict[str, Response] = {}
            for name, server in (("fdkit", srv), ("nginx", ng)):
                headers = [h.format(tag=tags[name], **dates) for h in case]
                answers[name] = get(server, url(file), *headers)
            ours, theirs = answers["fdkit"], answers["nginx"]
            assert ours.status == theirs.status, (case, ours, theirs)
            if ours.status in (200, 206):
                assert ours.body == theirs.body, case


def test_an_http_1_0_conditional_request(srv: Serve, file: Path) -> None:
    """HTTP/1.0 needs no Host; its preconditions are evaluated the same."""
    r = exchange(srv, f"GET {url(file)} HTTP/1.0\r\nIf-None-Match: *\r\n\r\n".encode())
    assert r.status == 304, r
