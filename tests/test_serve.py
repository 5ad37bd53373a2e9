"""`fdkit serve` run as a user runs it: a subprocess serving a temporary directory, checked
with real HTTP clients on loopback (``http.client``, raw sockets, and ``curl`` when it is on
the PATH).

Every server is started with ``--port 0``; its port comes from the start line it prints on
stderr (``fdkit serve: serving DIR on http://HOST:PORT/ (engine: ..., N worker(s))``), and it
is stopped by its pid in a ``finally`` (its workers too). Beside the served directory lies
``secret.txt``: no answer may ever contain its content. Most tests run against both engines
(``--engine epoll`` and ``--engine uring``; the latter skipped with the reason
``fdkit.uring.available()`` gives).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import email.utils
import hashlib
import os
import random
import re
import resource
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.serve import (  # noqa: F401  (the fixtures site, srv)
    CURL,
    DATA,
    ENGINES,
    FDKIT,
    HALLO,
    INDEX,
    SECRET,
    START,
    STARTUP,
    SUB_INDEX,
    URING_OK,
    Response,
    Serve,
    Wire,
    _engine_args,
    _tree,
    check_common_headers,
    exchange,
    fdkit_serve,
    get,
    make_site,
    raw_reply,
    site_fixture,
    srv_fixture,
)

# ------------------------------------------------------------------------------ start, CLI


def test_start_line_names_the_directory_engine_and_workers(srv: Serve, engine: str) -> None:
    assert srv.engine == ENGINES[engine]
    assert srv.workers == 1
    assert srv.host == "127.0.0.1"
    assert srv.port > 0
    assert srv.directory.rstrip("/").endswith("www")


def test_auto_engine_prefers_io_uring(site: Path) -> None:
    with fdkit_serve(site, "--engine", "auto") as s:
        assert s.engine == ("io_uring" if URING_OK else "epoll")
        assert get(s, "/hallo.txt").body == HALLO


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{missing}"], "no such directory: {missing}"),
        (["-d", "{missing}"], "no such directory: {missing}"),
        (["{file}"], "not a directory: {file}"),
    ],
)
def test_a_directory_that_cannot_be_served_is_named(
    site: Path, args: list[str], message: str
) -> None:
    """What is wrong with the directory, in its own words: missing, or not a directory."""
    subst = {"{missing}": str(site / "nope"), "{file}": str(site / "hallo.txt")}
    r = subprocess.run(
        [FDKIT, "serve", *(subst.get(a, a) for a in args)],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert r.returncode != 0
    want = message.replace("{missing}", subst["{missing}"]).replace("{file}", subst["{file}"])
    assert want in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["{missing}"], "a directory that does not exist"),
        (["{file}"], "a file, not a directory"),
        (["{dir}", "--engine", "bogus"], "an unknown engine"),
        (["{dir}", "--port", "70000"], "a port out of range"),
    ],
)
def test_bad_arguments_fail_with_a_message(site: Path, args: list[str], why: str) -> None:
    subst = {
        "{missing}": str(site / "nope"),
        "{file}": str(site / "hallo.txt"),
        "{dir}": str(site),
    }
    r = subprocess.run(
        [FDKIT, "serve", *(subst.get(a, a) for a in args)],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert r.returncode != 0, (why, r.stdout, r.stderr)
    assert r.stderr.strip(), why
    assert "Traceback" not in r.stderr, r.stderr
    assert "panicked" not in r.stderr, r.stderr


def test_an_address_in_use_fails_cleanly(site: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        r = subprocess.run(
            [FDKIT, "serve", str(site), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    assert r.returncode != 0
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip(), r.stderr


def test_help() -> None:
    r = subprocess.run([FDKIT, "serve", "--help"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0
    for opt in ("--host", "--port", "--workers", "--engine", "--idle-timeout"):
        assert opt in r.stdout, opt


def test_python_api_serves_and_stops_on_sigterm(site: Path, tmp_path: Path) -> None:
    """``fdkit.serve(...)`` in a process of its own; ``on_listen`` tells the address."""
    code = (
        "import sys, fdkit\n"
        "fdkit.serve(sys.argv[1], host='127.0.0.1', port=0, workers=1,\n"
        "            on_listen=lambda *a: print('LISTEN', repr(a), flush=True))\n"
    )
    err = tmp_path / "api.err"
    with open(err, "wb") as e:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, str(site)], stdout=subprocess.PIPE, stderr=e
        )
    try:
        assert proc.stdout is not None
        line = b""
        deadline = time.monotonic() + STARTUP
        while b"\n" not in line and time.monotonic() < deadline and proc.poll() is None:
            if select.select([proc.stdout], [], [], 0.1)[0]:
                line += os.read(proc.stdout.fileno(), 4096)
        assert line.startswith(b"LISTEN"), (line, err.read_text())
        ports = [int(p) for p in re.findall(rb"\b(\d{2,5})\b", line) if 0 < int(p) < 65536]
        port = ports[-1]
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
            r = Wire(s).response()
        assert (r.status, r.body) == (200, HALLO)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(10) == 0, err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


# ------------------------------------------------------------------------------ 200, types


def test_get_a_file(srv: Serve, site: Path) -> None:
    conn = srv.http()
    try:
        conn.request("GET", "/data.bin")
        r = conn.getresponse()
        body = r.read()
        assert (r.status, r.reason) == (200, "OK")
        assert body == DATA
        assert r.getheader("Content-Length") == str(len(DATA))
        assert r.getheader("Content-Type", "").startswith("application/octet-stream")
        mtime = (site / "data.bin").stat().st_mtime
        last = email.utils.parsedate_to_datetime(r.getheader("Last-Modified", ""))
        assert abs(last.timestamp() - int(mtime)) < 1.0
        assert email.utils.parsedate_to_datetime(r.getheader("Date", "")) is not None
        assert r.getheader("Server")
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("target", "ctype"),
    [
        ("/hallo.txt", "text/plain"),
        ("/index.html", "text/html"),
        ("/page.htm", "text/html"),
        ("/style.css", "text/css"),
        ("/app.js", ("text/javascript", "application/javascript")),
        ("/data.json", "application/json"),
        ("/image.png", "image/png"),
        ("/photo.jpg", "image/jpeg"),
        ("/data.bin", "application/octet-stream"),
        ("/noext", ("application/octet-stream", "text/plain")),
    ],
)
def test_content_type_by_extension(srv: Serve, target: str, ctype: str | tuple[str]) -> None:
    r = get(srv, target)
    assert r.status == 200, r
    assert r.headers["content-type"].split(";")[0].strip().lower() in (
        (ctype,) if isinstance(ctype, str) else ctype
    ), r


def test_empty_file(srv: Serve) -> None:
    r = get(srv, "/empty.txt")
    assert (r.status, r.headers["content-length"], r.body) == (200, "0", b"")


@pytest.mark.parametrize(
    ("target", "body"),
    [
        ("/", INDEX),
        ("/index.html", INDEX),
        ("/sub/", SUB_INDEX),
        ("/sub/page.txt", b"sub page\n"),
        ("/with%20space.txt", b"spaced\n"),
        ("/hallo.txt?x=1&y=../../etc/passwd", HALLO),
        ("/%68allo.txt", HALLO),  # an encoded ordinary letter
        ("/noindex/file.txt", b"in noindex\n"),
    ],
)
def test_paths_that_resolve(srv: Serve, target: str, body: bytes) -> None:
    r = get(srv, target)
    assert (r.status, r.body) == (200, body), r
    check_common_headers(r)


def test_a_directory_without_slash_redirects(srv: Serve) -> None:
    r = get(srv, "/sub")
    assert r.status == 301, r
    assert r.headers["location"].endswith("/sub/"), r
    assert int(r.headers["content-length"]) == len(r.body)


def test_a_directory_without_index_is_not_listed(srv: Serve) -> None:
    r = get(srv, "/noindex/")
    assert r.status in (403, 404), r
    assert b"file.txt" not in r.body


def test_a_symlink_inside_the_root(srv: Serve) -> None:
    r = get(srv, "/link_in")
    # Following a link that stays inside DIR is allowed; refusing every link is too.
    assert r.status in (200, 403, 404), r
    if r.status == 200:
        assert r.body == HALLO


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    "target", ["/nope.txt", "/sub/nope", "/nope/", "/hallo.txt/", "/hallo.txt/."]
)
def test_404(srv: Serve, target: str) -> None:
    r = get(srv, target)
    assert r.status == 404, r
    check_common_headers(r)
    assert len(r.body) < 1024
    assert int(r.headers["content-length"]) == len(r.body)


def test_an_error_keeps_the_connection_usable(srv: Serve) -> None:
    with srv.raw() as s:
        w = Wire(s)
        s.sendall(b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")
        assert w.response().status == 404
        s.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
        r = w.response()
        assert (r.status, r.body) == (200, HALLO)


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "TRACE"])
def test_405_for_other_methods(srv: Serve, method: str) -> None:
    r = exchange(srv, f"{method} /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert r.status == 405, r
    allow = {m.strip() for m in r.headers["allow"].split(",")}
    assert {"GET", "HEAD"} <= allow, r
    assert HALLO not in r.body


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789",
        b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n0\r\n\r\n",
    ],
    ids=["content-length", "chunked"],
)
def test_413_for_a_request_with_a_body(srv: Serve, request_bytes: bytes) -> None:
    r = exchange(srv, request_bytes)
    if b"chunked" in request_bytes:
        assert r.status in (400, 413, 501), r  # a body; or a framing the server does not do
    else:
        assert r.status == 413, r
    assert HALLO not in r.body


def test_a_post_with_a_body_is_refused(srv: Serve) -> None:
    r = exchange(srv, b"POST /hallo.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
    assert r.status in (405, 413), r


def test_content_length_zero_is_no_body(srv: Serve) -> None:
    r = exchange(srv, b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    assert (r.status, r.body) == (200, HALLO), r


@pytest.mark.parametrize(
    "headers",
    [
        [f"X-Big: {'a' * 9000}"],  # one header line over 8 KiB
        [f"X-H{i}: {'b' * 100}" for i in range(90)],  # 90 lines, ~9.5 KiB together
        [f"X-H{i}: v" for i in range(150)],  # more than 100 lines, small
    ],
    ids=["one-9k-line", "9k-in-90-lines", "150-lines"],
)
def test_431_for_large_headers(srv: Serve, headers: list[str]) -> None:
    r = get(srv, "/hallo.txt", *headers)
    assert r.status == 431, r
    assert HALLO not in r.body


def test_headers_within_the_limits_are_fine(srv: Serve) -> None:
    r = get(srv, "/hallo.txt", f"X-Big: {'a' * 4000}", *[f"X-H{i}: v" for i in range(50)])
    assert (r.status, r.body) == (200, HALLO), r


def test_a_huge_head_without_end_does_not_grow_forever(srv: Serve) -> None:
    with srv.raw() as s:
        s.sendall(b"GET /hallo.txt HTTP/1.1\r\nX: ")
        try:
            for _ in range(64):  # 1 MiB of one header line, never terminated
                s.sendall(b"a" * 16384)
        except (BrokenPipeError, ConnectionResetError):
            return  # closed on us: fine
        got = Wire(s)
        try:
            r = got.response()
        except (ConnectionError, TimeoutError):
            return
        assert r.status in (400, 431), r


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GARBAGE\r\n\r\n",
        b"GET\r\n\r\n",
        b"GET /hallo.txt\r\n\r\n",
        b"GET /hallo.txt HTTP/1.1 extra\r\n\r\n",
        b"GET /hallo.txt FOO/1.1\r\n\r\n",
        b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n",
        b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n: no name\r\n\r\n",
        b"GET /hallo.txt HTTP/1.1\r\nHost : x\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # a TLS hello
    ],
)
def test_400_for_malformed_requests(srv: Serve, request_bytes: bytes) -> None:
    reply = raw_reply(srv, request_bytes)
    assert reply.startswith(b"HTTP/1.1 400 "), reply[:200]
    assert HALLO not in reply
    assert srv.alive()


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
        b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
        b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    ],
)
def test_a_bad_content_length_is_refused(srv: Serve, request_bytes: bytes) -> None:
    reply = raw_reply(srv, request_bytes)
    assert reply.split(b" ", 2)[1] in (b"400", b"413"), reply[:200]
    assert HALLO not in reply


@pytest.mark.parametrize("target", ["/hallo.txt", "/nope"])
def test_errors_and_files_carry_date_and_server(srv: Serve, target: str) -> None:
    check_common_headers(get(srv, target))


# ------------------------------------------------------------------------------ HEAD, 304, Range


def test_head_has_the_headers_of_get_and_no_body(srv: Serve) -> None:
    with srv.raw() as s:
        w = Wire(s)
        # HEAD then GET in one write: a body after the HEAD would corrupt the GET's answer.
        s.sendall(
            b"HEAD /data.bin HTTP/1.1\r\nHost: x\r\n\r\nGET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        head = w.response("HEAD")
        after = w.response()
    assert head.status == 200
    assert head.body == b""
    assert head.headers["content-length"] == str(len(DATA))
    assert head.headers["content-type"].startswith("application/octet-stream")
    assert "last-modified" in head.headers
    assert (after.status, after.body) == (200, HALLO)
    full = get(srv, "/data.bin")
    for k in ("content-length", "content-type", "last-modified"):
        assert head.headers[k] == full.headers[k], k


def test_head_of_a_missing_file(srv: Serve) -> None:
    with srv.raw() as s:
        w = Wire(s)
        s.sendall(
            b"HEAD /nope HTTP/1.1\r\nHost: x\r\n\r\nGET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        assert w.response("HEAD").status == 404
        assert w.response().body == HALLO


def test_if_modified_since(srv: Serve) -> None:
    last = get(srv, "/data.bin").headers["last-modified"]
    with srv.raw() as s:
        w = Wire(s)
        s.sendall(
            f"GET /data.bin HTTP/1.1\r\nHost: x\r\nIf-Modified-Since: {last}\r\n\r\n".encode()
        )
        r = w.response()
        assert (r.status, r.body) == (304, b""), r
        assert r.headers.get("content-length", "0") in ("0", str(len(DATA)))
        # The connection goes on after a 304 (no body was sent).
        s.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
        assert w.response().body == HALLO
    later = email.utils.formatdate(time.time() + 3600, usegmt=True)
    assert get(srv, "/data.bin", f"If-Modified-Since: {later}").status == 304
    older = email.utils.formatdate(time.time() - 10 * 86400 - 1e6, usegmt=True)
    assert get(srv, "/data.bin", f"If-Modified-Since: {older}").body == DATA
    assert get(srv, "/data.bin", "If-Modified-Since: not a date").body == DATA


@pytest.mark.parametrize(
    ("spec", "start", "end"),
    [
        ("bytes=0-4", 0, 4),
        ("bytes=10-", 10, len(DATA) - 1),
        ("bytes=-7", len(DATA) - 7, len(DATA) - 1),
        ("bytes=99990-200000", 99990, len(DATA) - 1),  # the end is clamped
        ("bytes=0-0", 0, 0),
        ("bytes=0-99999", 0, len(DATA) - 1),
        ("bytes=-200000", 0, len(DATA) - 1),  # a suffix longer than the file
    ],
)
def test_range_206(srv: Serve, spec: str, start: int, end: int) -> None:
    r = get(srv, "/data.bin", f"Range: {spec}")
    assert r.status == 206, r
    assert r.headers["content-range"] == f"bytes {start}-{end}/{len(DATA)}"
    assert r.headers["content-length"] == str(end - start + 1)
    assert r.body == DATA[start : end + 1]


@pytest.mark.parametrize("spec", ["bytes=100000-", "bytes=200000-300000", "bytes=100000-100001"])
def test_range_416(srv: Serve, spec: str) -> None:
    r = get(srv, "/data.bin", f"Range: {spec}")
    assert r.status == 416, r
    assert r.headers["content-range"] == f"bytes */{len(DATA)}"
    assert DATA[:100] not in r.body


@pytest.mark.parametrize("spec", ["bytes=5-2", "bytes=abc", "items=0-5"])
def test_range_unsatisfiable_or_ignored(srv: Serve, spec: str) -> None:
    """Odd ranges: a server may ignore them (the whole file) or refuse them; nothing else."""
    r = get(srv, "/data.bin", f"Range: {spec}")
    assert r.status in (200, 400, 416), r
    if r.status == 200:
        assert r.body == DATA


def test_range_with_http_client(srv: Serve) -> None:
    conn = srv.http()
    try:
        conn.request("GET", "/data.bin", headers={"Range": "bytes=1000-1999"})
        r = conn.getresponse()
        assert r.status == 206
        assert r.read() == DATA[1000:2000]
        conn.request("HEAD", "/data.bin", headers={"Range": "bytes=0-9"})
        r = conn.getresponse()
        assert r.status in (200, 206)
        assert r.read() == b""
    finally:
        conn.close()


# ------------------------------------------------------------------------------ keep-alive


def test_keep_alive_with_http_client(srv: Serve) -> None:
    conn = srv.http()
    try:
        socks = set()
        for method, target, status, body in [
            ("GET", "/hallo.txt", 200, HALLO),
            ("GET", "/nope", 404, None),
            ("HEAD", "/data.bin", 200, b""),
            ("GET", "/data.bin", 200, DATA),
            ("GET", "/", 200, INDEX),
        ]:
            conn.request(method, target)
            r = conn.getresponse()
            got = r.read()
            assert r.status == status, (target, r.status)
            if body is not None:
                assert got == body
            socks.add(id(conn.sock))
        assert len(socks) == 1, "the connection was not kept alive"
    finally:
        conn.close()


def test_pipelined_requests_are_answered_in_order(srv: Serve) -> None:
    with srv.raw() as s:
        s.sendall(
            b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /data.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=5-9\r\n\r\n"
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        w = Wire(s)
        first, second, third = w.response(), w.response(), w.response()
    assert (first.status, first.body) == (200, HALLO)
    assert (second.status, second.body) == (206, DATA[5:10])
    assert (third.status, third.body) == (200, INDEX)


def test_many_pipelined_requests_mixed(srv: Serve) -> None:
    kinds = [
        ("GET", "/hallo.txt", 200, HALLO),
        ("HEAD", "/data.bin", 200, b""),
        ("GET", "/nope", 404, None),
        ("GET", "/data.bin", 200, DATA),
        ("GET", "/sub/page.txt", 200, b"sub page\n"),
    ]
    plan = kinds * 20
    blob = b"".join(f"{m} {t} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for m, t, _, _ in plan)
    with srv.raw(10) as s:
        w = Wire(s)
        sender = threading.Thread(target=s.sendall, args=(blob,), daemon=True)
        sender.start()  # the answers (2 MB) are read while the requests are still going out
        for m, t, status, body in plan:
            r = w.response(m)
            assert r.status == status, (m, t, r)
            if body is not None:
                assert r.body == body, (m, t)
        sender.join(10)


def test_a_request_trickled_in_pieces(srv: Serve) -> None:
    req = b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n"
    with srv.raw() as s:
        for i in range(len(req)):
            s.sendall(req[i : i + 1])
            time.sleep(0.002)
        assert Wire(s).response().body == HALLO


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET /hallo.txt HTTP/1.0\r\n\r\n",
    ],
    ids=["connection-close", "http-1.0"],
)
def test_the_connection_ends_when_asked(srv: Serve, request_bytes: bytes) -> None:
    with srv.raw() as s:
        s.sendall(request_bytes)
        w = Wire(s)
        r = w.response()
        assert r.body == HALLO
        assert w.closed(5), "the server kept the connection open"


@pytest.mark.parametrize(
    ("request_bytes", "answered"),
    [
        (b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n", True),
        (
            b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\nGET /data.bin HTTP/1.1\r\nHost: x\r\n\r\n",
            True,
        ),
        (b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n", False),  # the head never completes
        (b"", False),
    ],
    ids=["one-request", "two-requests", "incomplete-head", "nothing"],
)
def test_a_client_half_close_ends_the_connection(
    srv: Serve, request_bytes: bytes, answered: bool
) -> None:
    """After the client's FIN no request can come: the server answers what it has (complete
    requests, in order), then closes, without waiting for the idle timeout (30 s here)."""
    with srv.raw() as s:
        s.sendall(request_bytes)
        s.shutdown(socket.SHUT_WR)
        w = Wire(s)
        if answered:
            assert w.response().body == HALLO
            if b"data.bin" in request_bytes:
                assert w.response().body == DATA
        assert w.closed(3), "the connection stayed open 3 s after the client's FIN"


def test_http_1_0_keep_alive_if_asked(srv: Serve) -> None:
    with srv.raw() as s:
        s.sendall(b"GET /hallo.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        w = Wire(s)
        assert w.response().body == HALLO
        # Either kept (and says so) or closed; never anything else.
        s.sendall(b"GET /hallo.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        with contextlib.suppress(ConnectionError, BrokenPipeError):
            assert w.response().body == HALLO


# ------------------------------------------------------------------------------ hostile targets

HOSTILE = [
    "/../etc/passwd",
    "/../../../../etc/passwd",
    "/../../../../",
    "/..",
    "/../secret.txt",
    "/%2e%2e/secret.txt",
    "/%2E%2E/secret.txt",
    "/%2E%2E%2Fsecret.txt",
    "/..%2fsecret.txt",
    "/..%2Fsecret.txt",
    "/.%2e/secret.txt",
    "/%2e%2e%5csecret.txt",
    "/..%5csecret.txt",
    "/..\\secret.txt",
    "/\\..\\secret.txt",
    "/foo/../../secret.txt",
    "/sub/../../secret.txt",
    "/sub/%2e%2e/%2e%2e/secret.txt",
    "//etc/passwd",
    "///etc/passwd",
    "/%2fetc%2fpasswd",
    "/%2Fetc/passwd",
    "/%00",
    "/hal\x00lo.txt",
    "/hallo.txt\x00.html",
    "/index.html%00.txt",
    "/hallo.txt%00",
    "/%c0%ae%c0%ae/secret.txt",  # overlong UTF-8 dots
    "/%c0%af..%c0%afsecret.txt",
    "/%e0%80%ae%e0%80%ae/secret.txt",
    "/%252e%252e/secret.txt",  # double encoding
    "/%252e%252e%252fsecret.txt",
    "/..;/secret.txt",
    "/....//secret.txt",
    "/%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "/link_out",
    "/link_abs_out",
    "/link_dir_out/secret.txt",
    "/link_parent/secret.txt",
    "/link_etc/passwd",
    "/link_passwd",
    "/link_etc/",
    "http://evil/etc/passwd",
    "http://evil/../secret.txt",
    "http://localhost/../../etc/passwd",
    "*",
    "etc/passwd",
    "../secret.txt",
    "/%",
    "/%zz",
    "/%2",
]


def _forbidden_content(reply: bytes) -> list[str]:
    found = []
    if SECRET in reply:
        found.append("the secret beside DIR")
    if re.search(rb"root:[^:\r\n]*:0:0:", reply):
        found.append("/etc/passwd")
    if b"in noindex" in reply and b"file.txt" in reply:
        found.append("a directory listing")
    return found


def test_the_hostile_table_is_large_enough() -> None:
    assert len(HOSTILE) >= 20


class OpenWatch:
    """inotify on the files beside DIR: every open or read of them, by anyone, shows up.

    Nothing else opens them while the tests run, so an event means the server followed a
    request out of its root, whatever it then answered.
    """

    IN_ACCESS, IN_OPEN = 0x01, 0x20
    HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len

    def __init__(self, paths: list[Path]) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.names: dict[int, Path] = {}
        for p in paths:
            wd = self.libc.inotify_add_watch(self.fd, bytes(p), self.IN_ACCESS | self.IN_OPEN)
            if wd < 0:
                err = ctypes.get_errno()
                os.close(self.fd)
                raise OSError(err, "inotify_add_watch", str(p))
            self.names[wd] = p

    def events(self) -> list[str]:
        out: list[str] = []
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return out
            off = 0
            while off < len(data):
                wd, mask, _, n = self.HEADER.unpack_from(data, off)
                name = data[off + self.HEADER.size : off + self.HEADER.size + n].rstrip(b"\0")
                off += self.HEADER.size + n
                what = "open" if mask & self.IN_OPEN else "read"
                out.append(f"{what} {self.names[wd] / name.decode(errors='replace')}")

    def close(self) -> None:
        os.close(self.fd)


@pytest.fixture(scope="module")
def outside(site: Path) -> Iterator[OpenWatch]:
    base = site.parent
    watch = OpenWatch([base / "secret.txt", base / "secretdir", base / "secretdir" / "secret.txt"])
    try:
        yield watch
    finally:
        watch.close()


@pytest.mark.parametrize("target", HOSTILE)
def test_hostile_targets_read_nothing_outside(srv: Serve, outside: OpenWatch, target: str) -> None:
    outside.events()  # drain
    request = f"GET {target} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode("latin-1")
    reply = raw_reply(srv, request)
    assert not _forbidden_content(reply), (target, _forbidden_content(reply), reply[:300])
    status = reply.split(b"\r\n", 1)[0]
    assert re.fullmatch(rb"HTTP/1\.1 (400|403|404) .*", status), (target, reply[:300])
    assert srv.alive()
    assert not outside.events(), f"{target}: the server opened files outside DIR"


def test_the_outside_watch_sees_an_open(site: Path, outside: OpenWatch) -> None:
    """The watch itself works: opening the secret shows up."""
    outside.events()
    assert (site.parent / "secret.txt").read_bytes() == SECRET
    assert outside.events()


@pytest.mark.parametrize("target", ["/../secret.txt", "/%2e%2e/secret.txt", "/link_out"])
def test_hostile_head_and_range(srv: Serve, target: str) -> None:
    for extra, method in [("", "HEAD"), ("Range: bytes=0-5\r\n", "GET")]:
        req = f"{method} {target} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode()
        reply = raw_reply(srv, req, method=method)
        assert reply.split(b" ", 2)[1] in (b"400", b"403", b"404"), reply[:200]
        assert not _forbidden_content(reply)
        assert f"Content-Length: {len(SECRET)}\r\n".encode() not in reply


def test_hostile_targets_in_one_pipelined_stream(srv: Serve, outside: OpenWatch) -> None:
    """The whole table down one connection (as far as the server keeps it open): nothing
    outside DIR in everything it sends back, nothing outside DIR opened."""
    outside.events()
    targets = [t for t in HOSTILE if t[0] == "/"]
    blob = b"".join(f"GET {t} HTTP/1.1\r\nHost: x\r\n\r\n".encode("latin-1") for t in targets)
    reply = raw_reply(srv, blob, count=len(targets))
    assert reply, "no answer at all"
    assert not _forbidden_content(reply)
    assert not outside.events()


def test_random_garbage_never_hurts_the_server(srv: Serve, outside: OpenWatch) -> None:
    """300 requests made of noise and of valid requests with bytes flipped, cut or repeated,
    each on its own connection, which the client then half-closes: every answer is an HTTP/1.1
    response or nothing, the connection ends promptly, nothing outside DIR is opened, and
    the server serves on."""
    rnd = random.Random(5)
    seeds = [
        b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n",
        b"HEAD /sub/ HTTP/1.1\r\nRange: bytes=0-3\r\n\r\n",
        b"GET /../secret.txt HTTP/1.1\r\nIf-Modified-Since: Mon, 01 Jan 2024 00:00:00 GMT\r\n\r\n",
    ]
    outside.events()
    for i in range(300):
        if i % 5 == 0:
            req = rnd.randbytes(rnd.randrange(1, 300))
        else:
            buf = bytearray(rnd.choice(seeds))
            for _ in range(rnd.randrange(1, 6)):
                k = rnd.randrange(len(buf))
                op = rnd.randrange(4)
                if op == 0:
                    buf[k] = rnd.randrange(256)
                elif op == 1:
                    buf[k:k] = rnd.choice([b"\r\n", b"%", b"..", b"/", b"\0", b" ", b":"])
                elif op == 2:
                    del buf[k : k + rnd.randrange(1, 8)]
                else:
                    buf[k:k] = buf[k : k + 40] * rnd.randrange(1, 4)
            req = bytes(buf)
        with srv.raw(timeout=5) as s:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                s.sendall(req)
                s.shutdown(socket.SHUT_WR)
            got = bytearray()
            t0 = time.monotonic()
            while True:
                try:
                    chunk = s.recv(65536)
                except ConnectionResetError:
                    break
                except TimeoutError:
                    pytest.fail(f"request {i} {req!r}: the connection hung for 5 s after EOF")
                if not chunk:
                    break
                got += chunk
            assert time.monotonic() - t0 < 5
        assert not got or got.startswith(b"HTTP/1.1 "), (req, bytes(got[:200]))
        assert not _forbidden_content(bytes(got)), req
    assert not outside.events()
    assert srv.alive()
    assert get(srv, "/hallo.txt").body == HALLO


def test_a_fifo_is_not_opened_blocking(site: Path, engine: str, tmp_path: Path) -> None:
    root = make_site(tmp_path)
    os.mkfifo(root / "fifo")
    with fdkit_serve(root, *_engine_args(engine)) as s:
        reply = raw_reply(s, b"GET /fifo HTTP/1.1\r\nHost: x\r\n\r\n")
        assert reply.split(b" ", 2)[1] in (b"403", b"404"), reply[:200]
        # ... and the server was not stuck on it.
        assert get(s, "/hallo.txt").body == HALLO


def test_403_for_an_unreadable_file(engine: str, tmp_path: Path) -> None:
    root = make_site(tmp_path)
    (root / "locked.txt").write_bytes(b"locked")
    (root / "locked.txt").chmod(0)
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:
        # root reads a mode-000 file anyway: serve without the capabilities that let it.
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root and setpriv (util-linux) is not installed")
        prefix = (setpriv, "--bounding-set=-dac_override,-dac_read_search")
    with fdkit_serve(root, *_engine_args(engine), prefix=prefix) as s:
        r = get(s, "/locked.txt")
        assert r.status == 403, r
        assert b"locked" not in r.body
        assert get(s, "/hallo.txt").body == HALLO


@pytest.mark.skipif(CURL is None, reason="curl is not on the PATH")
class TestCurl:
    def curl(self, srv: Serve, *args: str) -> subprocess.CompletedProcess[bytes]:
        assert CURL is not None
        return subprocess.run(
            [CURL, "-sS", "--max-time", "10", *args],
            capture_output=True,
            timeout=20,
            check=False,
        )

    def url(self, srv: Serve, path: str) -> str:
        return f"http://{srv.host}:{srv.port}{path}"

    def test_get_and_status_codes(self, srv: Serve) -> None:
        r = self.curl(srv, "-o", "-", self.url(srv, "/data.bin"))
        assert r.returncode == 0
        assert r.stdout == DATA
        for path, code in [("/nope", "404"), ("/sub", "301"), ("/hallo.txt", "200")]:
            r = self.curl(srv, "-o", "/dev/null", "-w", "%{http_code}", self.url(srv, path))
            assert r.stdout.decode() == code, path
        r = self.curl(srv, "-X", "DELETE", "-o", "/dev/null", "-w", "%{http_code}",
                      self.url(srv, "/hallo.txt"))  # fmt: skip
        assert r.stdout == b"405"

    def test_head_and_range(self, srv: Serve) -> None:
        r = self.curl(srv, "-I", self.url(srv, "/data.bin"))
        head = r.stdout.decode().lower()
        assert head.startswith("http/1.1 200")
        assert f"content-length: {len(DATA)}" in head
        r = self.curl(srv, "-r", "100-199", "-o", "-", self.url(srv, "/data.bin"))
        assert r.stdout == DATA[100:200]
        r = self.curl(srv, "-r", "200000-", "-o", "/dev/null", "-w", "%{http_code}",
                      self.url(srv, "/data.bin"))  # fmt: skip
        assert r.stdout == b"416"
        r = self.curl(srv, "-L", "-o", "-", self.url(srv, "/sub"))
        assert r.stdout == SUB_INDEX

    def test_keep_alive_reuses_the_connection(self, srv: Serve) -> None:
        r = self.curl(srv, "-v", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null",
                      self.url(srv, "/hallo.txt"), self.url(srv, "/data.bin"),
                      self.url(srv, "/nope"))  # fmt: skip
        assert r.returncode == 0, r.stderr
        # curl 7.88: "Re-using existing connection", 8.x: "Reusing existing connection",
        # 8.23: "Reusing existing http: connection".
        assert re.search(rb"Re-?using existing (\w+: )?connection", r.stderr), r.stderr[-800:]

    def test_if_modified_since(self, srv: Serve, site: Path) -> None:
        r = self.curl(srv, "-z", str(site / "data.bin"), "-o", "/dev/null", "-w",
                      "%{http_code}", self.url(srv, "/data.bin"))  # fmt: skip
        assert r.stdout == b"304"

    @pytest.mark.parametrize(
        "path", ["/../secret.txt", "/%2e%2e/secret.txt", "/link_out", "/..%2fsecret.txt"]
    )
    def test_traversal_as_is(self, srv: Serve, path: str) -> None:
        r = self.curl(srv, "--path-as-is", "-o", "-", "-w", "\n%{http_code}",
                      self.url(srv, path))  # fmt: skip
        assert SECRET not in r.stdout
        assert r.stdout.rsplit(b"\n", 1)[-1] in (b"400", b"403", b"404")


# ------------------------------------------------------------------------------ slow clients


@pytest.fixture(scope="module")
def idle_srv(site: Path, engine: str) -> Iterator[Serve]:
    with fdkit_serve(site, *_engine_args(engine), "--idle-timeout", "1") as s:
        yield s


def _closed_after(s: socket.socket, limit: float) -> float | None:
    """Seconds until the server closes ``s`` (reading and discarding), None past ``limit``."""
    t0 = time.monotonic()
    s.settimeout(0.2)
    while time.monotonic() - t0 < limit:
        try:
            if s.recv(65536) == b"":
                return time.monotonic() - t0
        except TimeoutError:
            continue
        except ConnectionResetError:
            return time.monotonic() - t0
    return None


def test_a_silent_connection_is_dropped(idle_srv: Serve) -> None:
    with idle_srv.raw() as s:
        took = _closed_after(s, 5)
    assert took is not None, "still open 5 s after connecting with --idle-timeout 1"
    assert took > 0.5, f"closed after {took:.2f} s, before the idle timeout"


def test_an_idle_keep_alive_connection_is_dropped(idle_srv: Serve) -> None:
    with idle_srv.raw() as s:
        s.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
        assert Wire(s).response().body == HALLO
        took = _closed_after(s, 5)
    assert took is not None, took
    assert took > 0.5, took


def test_slowloris_a_header_trickled_byte_by_byte_is_dropped(idle_srv: Serve) -> None:
    """One byte every 0.2 s, forever: never idle for a second, yet never a request. The
    server must drop it soon after the idle timeout, not keep it while bytes trickle."""
    head = b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10_000
    with idle_srv.raw() as s:
        t0 = time.monotonic()
        dropped = None
        for b in head:
            try:
                s.sendall(bytes([b]))
            except (BrokenPipeError, ConnectionResetError):
                dropped = time.monotonic() - t0
                break
            readable, _, _ = select.select([s], [], [], 0.2)
            if readable:
                try:
                    data = s.recv(65536)
                except ConnectionResetError:
                    data = b""
                if not data or data.startswith(b"HTTP/1.1 4"):
                    dropped = time.monotonic() - t0
                    break
                pytest.fail(f"unexpected answer to a partial head: {data[:200]!r}")
            if time.monotonic() - t0 > 6:
                break
    assert dropped is not None, "a trickling client kept its connection for 6 s"
    assert dropped > 0.5, dropped


def test_an_active_client_is_not_dropped(idle_srv: Serve) -> None:
    """Requests every 0.3 s for 2 s: the connection is never idle for a second."""
    with idle_srv.raw() as s:
        w = Wire(s)
        t0 = time.monotonic()
        n = 0
        while time.monotonic() - t0 < 2.0:
            s.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
            assert w.response().body == HALLO, n
            n += 1
            time.sleep(0.3)
        assert n >= 6


def test_a_slow_reader_of_a_large_body_is_not_cut_while_it_reads(idle_srv: Serve) -> None:
    """A client that reads a 100 kB body slowly (in 2 s) but steadily is not idle."""
    with idle_srv.raw() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(b"GET /data.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        got = bytearray()
        t0 = time.monotonic()
        s.settimeout(5)
        while len(got) < len(DATA) + 100 and time.monotonic() - t0 < 10:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
            if time.monotonic() - t0 < 2.0:
                time.sleep(0.08)
            if b"\r\n\r\n" in got and len(got) - got.index(b"\r\n\r\n") - 4 >= len(DATA):
                break
        head, _, body = bytes(got).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        assert body == DATA, f"{len(body)} of {len(DATA)} bytes"


# ------------------------------------------------------------------------------ load


def test_a_thousand_concurrent_connections(site: Path, engine: str) -> None:
    n = 1000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = n + 500
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    try:
        with fdkit_serve(site, *_engine_args(engine), "--max-connections", "4096") as s:
            results = asyncio.run(_thousand(s, n))
            assert results.count(True) == n, f"{results.count(False)} of {n} answers wrong"
            assert get(s, "/hallo.txt").body == HALLO
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def _thousand(srv: Serve, n: int) -> list[bool]:
    barrier = asyncio.Barrier(n)
    want_data = hashlib.sha256(DATA).digest()

    async def read_response(r: asyncio.StreamReader) -> tuple[int, bytes]:
        head = await r.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
        body = await r.readexactly(int(m.group(1))) if m else b""
        return status, body

    async def client(i: int) -> bool:
        r, w = await asyncio.open_connection(srv.host, srv.port, limit=1 << 20)
        try:
            # Every connection is established and has been served once; then all at once.
            w.write(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
            if await read_response(r) != (200, HALLO):
                return False
            await barrier.wait()
            target = b"/data.bin" if i % 2 else b"/sub/page.txt"
            w.write(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            status, body = await read_response(r)
            if i % 2:
                return status == 200 and hashlib.sha256(body).digest() == want_data
            return status == 200 and body == b"sub page\n"
        finally:
            w.close()
            with contextlib.suppress(ConnectionError):
                await w.wait_closed()

    return await asyncio.wait_for(asyncio.gather(*(client(i) for i in range(n))), timeout=60)


def test_the_connection_cap(site: Path, engine: str) -> None:
    with fdkit_serve(site, *_engine_args(engine), "--max-connections", "2") as s:
        a, b = s.raw(), s.raw()
        try:
            for c in (a, b):
                c.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
                assert Wire(c).response().body == HALLO
            # A third connection is not served while two are open (it may wait unaccepted,
            # be closed, or get an error status).
            with s.raw() as c:
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    c.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
                c.settimeout(0.7)
                try:
                    data = c.recv(65536)
                except (TimeoutError, ConnectionResetError):
                    data = b""
                assert not data.startswith(b"HTTP/1.1 200"), data[:200]
            a.close()
            # Once one closes, a new connection is served.
            deadline = time.monotonic() + 5
            while True:
                try:
                    r = get(s, "/hallo.txt")
                    if r.status == 200:
                        break
                except (ConnectionError, TimeoutError):
                    pass
                assert time.monotonic() < deadline, "no connection served after one closed"
                time.sleep(0.1)
        finally:
            a.close()
            b.close()


# ------------------------------------------------------------------------------ changing files


FRESH_WITHIN = 3.0  # seconds a server may keep answering from its open-file cache


def consistent_get(srv: Serve, target: str, current: bytes, old: bytes | None) -> Response:
    """GET ``target`` after the file changed (between requests): the answer must be
    consistent with its Content-Length (all of it, then the connection goes on) and hold
    only the file's bytes. A server with an open-file cache may still use the size it
    cached: the body is then a prefix of the current content (rewritten in place), or the
    whole ``old`` file (replaced by a new one: the cached fd is the old file's)."""
    with srv.raw(10) as c:
        w = Wire(c)
        c.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        try:
            r = w.response()
        except ConnectionError as e:
            pytest.fail(f"an answer inconsistent with its Content-Length: {e}", pytrace=False)
        assert r.status == 200, r
        assert current.startswith(r.body) or r.body == old, "bytes that are not the file's"
        c.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
        assert w.response().body == HALLO  # the connection goes on
        return r


def fresh_get(srv: Serve, target: str, current: bytes, old: bytes | None = None) -> None:
    """Every answer consistent (see :func:`consistent_get`); the current content within
    :data:`FRESH_WITHIN` seconds."""
    deadline = time.monotonic() + FRESH_WITHIN
    while consistent_get(srv, target, current, old).body != current:
        assert time.monotonic() < deadline, f"still not the new content after {FRESH_WITHIN} s"
        time.sleep(0.1)


def test_a_file_that_changes_size_between_requests(engine: str, tmp_path: Path) -> None:
    root = make_site(tmp_path)
    path = root / "changing.bin"
    first = os.urandom(1 << 20)
    path.write_bytes(first)
    with fdkit_serve(root, *_engine_args(engine)) as s:
        assert get(s, "/changing.bin").body == first
        for size in (1000, 0, 3 << 20, 77):
            content = os.urandom(size)
            with open(path, "r+b") as f:  # the same inode, rewritten in place
                f.truncate(0)
                f.write(content)
            os.utime(path, (time.time() + size, time.time() + size))  # a new mtime
            fresh_get(s, "/changing.bin", content)
        replaced = os.urandom(5000)
        (root / "new.tmp").write_bytes(replaced)
        os.replace(root / "new.tmp", path)  # a new inode under the same name
        fresh_get(s, "/changing.bin", replaced, old=content)


def _send_slowly_then(
    srv: Serve, target: str, change: Path, action: str, size: int
) -> tuple[int, int, bytes, bool]:
    """GETs ``target`` with a small receive buffer, reads 256 kB, runs ``action`` on the file,
    reads the rest. Returns the status, the Content-Length, the body bytes received, and
    whether the server closed the connection before Content-Length bytes."""
    c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    c.settimeout(10)
    with c:
        c.connect(srv.addr)
        c.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        got = bytearray()
        while b"\r\n\r\n" not in got:
            chunk = c.recv(65536)
            assert chunk, "closed before the head"
            got += chunk
        head_bytes, _, rest = bytes(got).partition(b"\r\n\r\n")
        body = bytearray(rest)
        m = re.search(rb"(?i)content-length:\s*(\d+)", head_bytes)
        assert m is not None, head_bytes
        length = int(m.group(1))
        while len(body) < 256_000:
            chunk = c.recv(16384)
            assert chunk, f"closed after {len(body)} body bytes"
            body += chunk
            time.sleep(0.001)
        if action == "truncate":
            os.truncate(change, size)
        elif action == "grow":
            with open(change, "ab") as f:
                f.write(os.urandom(size))
        elif action == "replace":
            tmp = change.with_suffix(".new")
            tmp.write_bytes(os.urandom(size))
            os.replace(tmp, change)
        closed_early = False
        deadline = time.monotonic() + 20
        while len(body) < length:
            assert time.monotonic() < deadline, f"hung after {len(body)} of {length} bytes"
            try:
                chunk = c.recv(1 << 20)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                closed_early = True
                break
            body += chunk
        if not closed_early and len(body) == length:
            # Keep-alive goes on: the next answer on this connection parses.
            c.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
            w = Wire(c)
            w.buf += body[length:]
            body = body[:length]
            assert w.response().body == HALLO
        status = int(head_bytes.split(b" ", 2)[1])
        return status, length, bytes(body), closed_early


@pytest.mark.parametrize("action", ["truncate", "grow", "replace"])
def test_a_file_that_changes_while_it_is_sent(engine: str, tmp_path: Path, action: str) -> None:
    root = make_site(tmp_path)
    path = root / "big.bin"
    original = os.urandom(32 << 20)
    path.write_bytes(original)
    with fdkit_serve(root, *_engine_args(engine)) as s:
        status, length, body, closed_early = _send_slowly_then(s, "/big.bin", path, action, 1 << 20)
        assert status == 200
        assert length == len(original)
        assert len(body) <= length
        if action == "truncate":
            # Cut short is allowed (the connection then ends); garbage never is. Below the
            # new size every byte is the file's. Past it, bytes already handed to the socket
            # by sendfile/splice still point at the page cache, and the kernel zeroes the tail
            # of a truncated page (or large folio) in place: zeros there are the kernel's
            # zero-copy semantics, not the server's doing. Anything else is garbage.
            new_size = 1 << 20
            assert body[:new_size] == original[: min(len(body), new_size)], "not the file's"
            tail, want = body[new_size:], original[new_size : len(body)]
            bad = [
                i
                for i in range(0, len(tail), 4096)
                if tail[i : i + 4096] not in (want[i : i + 4096], bytes(len(tail[i : i + 4096])))
            ]
            assert not bad, f"garbage past the new size at offsets {bad[:5]}"
            if not closed_early:
                assert len(body) == length
        else:
            # The answer is the file as it was: Content-Length bytes of it, no more.
            assert not closed_early, f"cut after {len(body)} of {length} bytes"
            assert body == original
        assert get(s, "/hallo.txt").body == HALLO
        fresh_get(s, "/big.bin", path.read_bytes(), old=original)


# ------------------------------------------------------------------------------ stop, workers


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_graceful_stop_finishes_a_large_response(
    engine: str, tmp_path: Path, sig: signal.Signals
) -> None:
    root = make_site(tmp_path)
    big = os.urandom(24 << 20)
    (root / "big.bin").write_bytes(big)
    with fdkit_serve(root, *_engine_args(engine), check_exit=False) as s:
        idle = s.raw()
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        c.settimeout(10)
        with idle, c:
            idle.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
            assert Wire(idle).response().body == HALLO
            c.connect(s.addr)
            c.sendall(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
            got = bytearray()
            while len(got) < 200_000:
                chunk = c.recv(65536)
                assert chunk
                got += chunk
            os.kill(s.proc.pid, sig)  # the response is in flight
            deadline = time.monotonic() + 20
            while True:
                assert time.monotonic() < deadline, f"stuck at {len(got)} bytes"
                try:
                    chunk = c.recv(1 << 20)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                got += chunk
            head, _, body = bytes(got).partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), head[:100]
            assert len(body) == len(big), f"{len(body)} of {len(big)} bytes after {sig!r}"
            assert body == big
            try:
                code = s.proc.wait(10)
            except subprocess.TimeoutExpired:
                pytest.fail("the server did not exit after the in-flight response")
            assert code == 0, s.output()[-2000:]
            # The idle keep-alive connection was closed, not left hanging.
            assert Wire(idle).closed(2)
        out = s.output()
        assert "Traceback" not in out
        assert "panicked" not in out
        others = [ln for ln in out.splitlines() if ln.strip() and not START.search(ln)]
        assert others, f"no summary line: {out!r}"


def test_stop_with_only_idle_connections_is_prompt(engine: str, site: Path) -> None:
    with fdkit_serve(site, *_engine_args(engine), check_exit=False) as s:
        conns = [s.raw() for _ in range(20)]
        try:
            for c in conns[:10]:
                c.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
                assert Wire(c).response().body == HALLO
            t0 = time.monotonic()
            assert s.stop(signal.SIGTERM, timeout=10) == 0
            assert time.monotonic() - t0 < 5, "waited for idle connections (idle timeout 30 s)"
        finally:
            for c in conns:
                c.close()


def test_two_workers(engine: str, site: Path) -> None:
    with fdkit_serve(site, *_engine_args(engine), "--workers", "2", check_exit=False) as s:
        assert s.workers == 2
        deadline = time.monotonic() + 5
        while len(workers := _tree(s.proc.pid)) < 2:
            assert time.monotonic() < deadline, f"worker processes: {workers}"
            time.sleep(0.05)
        assert len(workers) == 2, workers
        # Many connections (SO_REUSEPORT spreads them), each served correctly.
        conns = [s.raw() for _ in range(64)]
        try:
            for c in conns:
                c.sendall(b"GET /data.bin HTTP/1.1\r\nHost: x\r\n\r\n")
            for c in conns:
                assert Wire(c).response().body == DATA
        finally:
            for c in conns:
                c.close()
        assert s.stop(signal.SIGTERM) == 0, s.output()[-2000:]
        deadline = time.monotonic() + 5
        while any(Path(f"/proc/{w}").exists() and _state(w) != "Z" for w in workers):
            assert time.monotonic() < deadline, "workers outlived the parent"
            time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0].decode()
    except OSError:
        return "gone"


def test_quiet_still_serves(site: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [FDKIT, "serve", str(site), "--port", str(port), "--quiet"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + STARTUP
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
                    c.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
                    assert Wire(c).response().body == HALLO
                break
            except ConnectionRefusedError:
                assert proc.poll() is None
                assert time.monotonic() < deadline
                time.sleep(0.02)
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err
        assert b"GET /hallo.txt" not in err + out  # no per-request log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
