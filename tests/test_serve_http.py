"""`fdkit serve` run as a user runs it, and what it answers: starting it (the start line,
``--engine auto``, arguments and directories it refuses, the Python API), files with their
types, the 4xx answers to requests it will not serve or cannot parse, HEAD, If-Modified-Since
and Range, and the same seen through ``curl`` when it is on the PATH.

These are the answers a client gets to one request at a time, checked with real HTTP clients
on loopback (``http.client``, raw sockets, ``curl``); how connections live and end is in
tests/test_serve_connections.py, what a request may reach on disk in
tests/test_serve_filesystem.py.

The server (``--port 0``, stopped by pid with its workers), the site (with ``secret.txt``
beside it, which no answer may contain) and the response reader are in ``helpers/serve.py``;
most tests run against both engines, ``--engine uring`` skipped where io_uring is not
available.
"""

from __future__ import annotations

import email.utils
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
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
    STARTUP,
    SUB_INDEX,
    URING_OK,
    Serve,
    Wire,
    check_common_headers,
    exchange,
    fdkit_serve,
    get,
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


# ------------------------------------------------------------------------------ curl


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
