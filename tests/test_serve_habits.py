"""`fdkit serve` with ``python -m http.server``'s habits, and nginx's http_method and index
cases ported to raw sockets, on both engines, judged by RFC 9110.

- Index files: ``index.html``, then ``index.htm`` (http.server's pair; nginx-tests index.t
  "default index", "many", "not found", "not a directory"). A directory without either answers
  404 (RFC 9110 §15.5.5) whose body says that listings are off and that ``--list`` turns them
  on; the start line says the same. Listings stay off by default.
- Content-Type (RFC 9110 §8.3): source and configuration files are text, with
  ``charset=utf-8``, so that a browser shows them.
- Methods (RFC 9110 §9.1, §15.5.6): any method but GET, HEAD and OPTIONS gets 405 with
  ``Allow``, even with a body announced (never read: the 405 comes at once and the connection
  closes after it, never a hang); nothing pipelined behind a refused TRACE or CONNECT is
  answered (nginx-tests http_method.t). OPTIONS (§9.3.7) is answered with ``Allow``.
- The docs (docs/uring.md, and the README's list of commands) document the real command line.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.serve import Serve, Wire, _engine_args, fdkit_serve, get

INDEX_HTML = b"<!doctype html><title>html</title>index.html\n"
INDEX_HTM = b"<!doctype html><title>htm</title>index.htm\n"
HALLO = b"hallo\n"
REPO = Path(__file__).resolve().parent.parent

#: The methods the server allows, as `Allow` lists them.
ALLOWED = {"GET", "HEAD", "OPTIONS"}

#: File name -> the media type it is served with (its charset checked apart).
TYPES = {
    "app.py": "text/x-python",
    "run.sh": "text/plain",
    "ci.yaml": "text/plain",
    "ci.yml": "text/plain",
    "pyproject.toml": "text/plain",
    "README.md": "text/markdown",
    "lib.rs": "text/plain",
    "main.c": "text/plain",
    "fdkit.h": "text/plain",
    "tox.ini": "text/plain",
    "setup.cfg": "text/plain",
    "notes.txt": "text/plain",
    "table.csv": "text/csv",
    "server.log": "text/plain",
    "data.json": "application/json",
    "blob.bin": "application/octet-stream",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("habits")
    base.chmod(0o755)
    root = base / "www"
    root.mkdir(mode=0o755)
    (root / "index.html").write_bytes(INDEX_HTML)
    (root / "hallo.txt").write_bytes(HALLO)
    (root / "htm").mkdir()
    (root / "htm" / "index.htm").write_bytes(INDEX_HTM)
    (root / "both").mkdir()
    (root / "both" / "index.html").write_bytes(INDEX_HTML)
    (root / "both" / "index.htm").write_bytes(INDEX_HTM)
    (root / "none").mkdir()
    (root / "none" / "file.txt").write_bytes(b"listed only with --list\n")
    (root / "forbidden").mkdir()
    for name in TYPES:
        (root / name).write_bytes(b"x = 1\n")
    for p in (root, *root.rglob("*")):
        p.chmod(0o755 if p.is_dir() else 0o644)
    (root / "forbidden").chmod(0)
    yield root
    (root / "forbidden").chmod(0o755)  # so that the temporary tree can be removed


@pytest.fixture(scope="module")
def srv(site: Path, engine: str) -> Iterator[Serve]:
    with fdkit_serve(site, *_engine_args(engine)) as s:
        yield s


def request(srv: Serve, data: bytes, method: str = "GET") -> tuple[Wire, list[int]]:
    """Sends ``data`` (whole requests, possibly pipelined) on a fresh connection and reads
    responses until the server closes it; returns the wire and the statuses in order."""
    with srv.raw() as s:
        s.sendall(data)
        w = Wire(s)
        statuses = []
        while True:
            try:
                statuses.append(w.response(method).status)
            except ConnectionError:
                return w, statuses


def allow(headers: dict[str, str]) -> set[str]:
    return {m.strip() for m in headers["allow"].split(",")}


# ------------------------------------------------------------------------------ index files


@pytest.mark.parametrize(
    ("target", "body"),
    [
        ("/", INDEX_HTML),  # nginx-tests index.t "default index"
        ("/htm/", INDEX_HTM),  # index.t "many": the first name missing, the second there
        ("/both/", INDEX_HTML),  # index.html first
    ],
)
def test_index_htm_is_tried_after_index_html(srv: Serve, target: str, body: bytes) -> None:
    """RFC 9110 §15.3.1: a directory is answered 200 by its index file, ``index.html`` else
    ``index.htm``, as text/html."""
    r = get(srv, target)
    assert (r.status, r.body) == (200, body), r
    assert r.headers["content-type"] == "text/html; charset=utf-8", r
    h = get(srv, target, method="HEAD")
    assert (h.status, h.body) == (200, b""), h
    assert h.headers["content-length"] == str(len(body))
    assert h.headers["etag"] == r.headers["etag"]


def test_a_directory_of_index_htm_without_slash_redirects(srv: Serve) -> None:
    """RFC 9110 §15.4.2: ``/htm`` is a directory: 301 to ``/htm/``."""
    r = get(srv, "/htm?a=1")
    assert r.status == 301, r
    assert r.headers["location"] == "/htm/?a=1", r


@pytest.mark.parametrize("target", ["/missing/", "/index.html/", "/htm/index.htm/"])
def test_not_found_and_not_a_directory(srv: Serve, target: str) -> None:
    """RFC 9110 §15.5.5 (nginx-tests index.t "not found", "not a directory"): 404 with the
    plain body, no listing hint: the target is no directory."""
    r = get(srv, target)
    assert (r.status, r.body) == (404, b"404 Not Found\n"), r


def test_a_directory_without_an_index_says_how_to_list_it(srv: Serve) -> None:
    """RFC 9110 §15.5.5: a directory with neither index file gets 404 (nginx-tests index.t
    "no index"; nginx says 403, either is allowed). Its body says listings are off and that
    ``--list`` turns them on; nothing of the directory is listed; the connection stays."""
    with srv.raw() as s:
        w = Wire(s)
        s.sendall(b"GET /none/ HTTP/1.1\r\nHost: x\r\n\r\n")
        r = w.response()
        assert r.status == 404, r
        text = r.body.decode()
        assert text.startswith("404 Not Found\n"), text
        assert "listings are off" in text, text
        assert "--list" in text, text
        assert b"file.txt" not in r.body
        assert r.headers["content-type"] == "text/plain; charset=utf-8"
        assert r.headers["content-length"] == str(len(r.body))
        s.sendall(b"HEAD /none/ HTTP/1.1\r\nHost: x\r\n\r\n")
        h = w.response("HEAD")
        assert (h.status, h.body) == (404, b""), h
        assert h.headers["content-length"] == str(len(r.body))
        s.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
        assert w.response().body == HALLO


def test_an_unreadable_directory_is_forbidden(srv: Serve) -> None:
    """RFC 9110 §15.5.4 (nginx-tests index.t "directory access denied"): a directory the
    server may not search answers 403."""
    if os.geteuid() == 0:
        pytest.skip("root searches a mode-000 directory all the same")
    assert get(srv, "/forbidden/").status == 403


def test_the_start_line_says_listings_are_off_and_how_to_turn_them_on(srv: Serve) -> None:
    """http.server lists directories; `fdkit serve` says at start that it does not."""
    line = next(x for x in srv.output().splitlines() if "serving" in x)
    assert line.endswith("; listings off, --list turns them on)"), line


def test_with_list_the_directory_is_listed_and_the_start_line_says_so(
    site: Path, engine: str
) -> None:
    with fdkit_serve(site, *_engine_args(engine), "--list") as s:
        r = get(s, "/none/")
        assert r.status == 200, r
        assert b"file.txt" in r.body, r
        assert get(s, "/htm/").body == INDEX_HTM  # an index file still wins
        line = next(x for x in s.output().splitlines() if "serving" in x)
        assert line.endswith("; listings on)"), line


# ------------------------------------------------------------------------------ content types


@pytest.mark.parametrize(("name", "media_type"), list(TYPES.items()))
def test_source_and_config_files_are_text(srv: Serve, name: str, media_type: str) -> None:
    """RFC 9110 §8.3: source and configuration files are served as text (a browser shows
    them, as it does those of http.server), every text type with ``charset=utf-8``; JSON
    stays application/json (UTF-8 by definition, RFC 8259 §8.1)."""
    r = get(srv, f"/{name}")
    assert r.status == 200, r
    ctype = r.headers["content-type"]
    assert ctype.split(";")[0] == media_type, ctype
    if media_type.startswith("text/"):
        assert ctype == f"{media_type}; charset=utf-8", ctype
    else:
        assert "charset" not in ctype, ctype


# ------------------------------------------------------------------------------ methods


@pytest.mark.parametrize(
    "method", ["POST", "PUT", "DELETE", "PATCH", "TRACE", "CONNECT", "PROPFIND", "BREW"]
)
def test_other_methods_get_405_with_allow(srv: Serve, method: str) -> None:
    """RFC 9110 §15.5.6: 405 with an ``Allow`` naming the methods the resource supports; the
    connection closes after it (what follows an unknown method need not be a request)."""
    w, statuses = request(srv, f"{method} /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert statuses == [405], statuses
    assert b"Allow: GET, HEAD, OPTIONS\r\n" in w.seen
    assert HALLO not in w.seen


@pytest.mark.parametrize("method", ["TRACE", "CONNECT"])
def test_nothing_pipelined_behind_a_refused_method_is_answered(srv: Serve, method: str) -> None:
    """nginx-tests http_method.t ("trace", "connect"): ``405 Not Allowed`` and no 200 for the
    GET pipelined behind it. RFC 9110 §9.3.6: after a CONNECT the bytes are tunnel data, not
    requests; §9.3.8: TRACE is refused."""
    w, statuses = request(
        srv,
        f"{method} / HTTP/1.1\r\nHost: localhost\r\n\r\n"
        "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode(),
    )
    assert statuses == [405], statuses
    assert b"200 OK" not in w.seen


@pytest.mark.parametrize(
    "data",
    [
        b"PUT /up.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789",
        b"POST /hallo.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n0\r\n\r\n",
        b"DELETE /hallo.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
    ],
    ids=["put-content-length", "post-chunked", "delete-with-body"],
)
def test_405_wins_over_a_body(srv: Serve, data: bytes) -> None:
    """RFC 9110 §15.5.6: the method is refused whatever the body (it used to be 413)."""
    w, statuses = request(srv, data)
    assert statuses == [405], statuses
    assert b"Allow: GET, HEAD, OPTIONS\r\n" in w.seen


def test_405_comes_at_once_for_a_body_never_sent(srv: Serve) -> None:
    """RFC 9110 §15.5.6, RFC 9112 §9.6: a PUT announcing 1 MiB (with ``Expect:
    100-continue``) and sending none gets its 405 at once, not after a wait for the body,
    and the connection closes."""
    with srv.raw(timeout=5) as s:
        t0 = time.monotonic()
        s.sendall(
            b"PUT /big HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n"
            b"Expect: 100-continue\r\n\r\n"
        )
        w = Wire(s)
        r = w.response()
        assert r.status == 405, r
        assert allow(r.headers) == ALLOWED
        assert w.closed(within=5.0)
        assert time.monotonic() - t0 < 3.0


def test_405_for_a_large_body_sent_whole_is_read_not_reset(srv: Serve) -> None:
    """RFC 9112 §9.6: a client that sends a 4 MiB body after its head still reads the 405:
    the server answers, then drops what it is sent (lingering close), never a reset that
    loses the answer, never a hang."""
    body = b"z" * (4 << 20)
    with srv.raw(timeout=10) as s:
        s.sendall(b"POST /hallo.txt HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body))
        s.sendall(body)
        s.shutdown(socket.SHUT_WR)
        w = Wire(s)
        r = w.response()
        assert r.status == 405, r
        assert w.closed(within=5.0)


@pytest.mark.parametrize("target", ["*", "/hallo.txt", "/none/"])
def test_options_is_answered_with_allow(srv: Serve, target: str) -> None:
    """RFC 9110 §9.3.7: OPTIONS (``*`` for the server as a whole) answers 200 with ``Allow``
    and ``Content-Length: 0``; the connection stays open for the next request."""
    with srv.raw() as s:
        w = Wire(s)
        s.sendall(f"OPTIONS {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        r = w.response()
        assert r.status == 200, r
        assert r.headers["allow"] == "GET, HEAD, OPTIONS"
        assert (r.headers["content-length"], r.body) == ("0", b"")
        assert "connection" not in r.headers, r
        s.sendall(b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n")
        assert w.response().body == HALLO


def test_options_with_a_body_is_answered_then_closed(srv: Serve) -> None:
    """RFC 9110 §9.3.7: OPTIONS is answered even with a body, which is never read, so the
    connection closes after the answer (RFC 9112 §9.6 ``Connection: close``)."""
    w, statuses = request(
        srv,
        b"OPTIONS * HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody"
        b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    assert statuses == [200], statuses
    assert b"Connection: close\r\n" in w.seen
    assert b"Allow: GET, HEAD, OPTIONS\r\n" in w.seen


def test_get_and_head_still_refuse_a_body(srv: Serve) -> None:
    """GET and HEAD with a body keep their 413 (RFC 9110 §9.3.1: a GET body has no meaning
    here, and it is never read), and the connection closes."""
    _, statuses = request(srv, b"GET /hallo.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx")
    assert statuses == [413], statuses


# ------------------------------------------------------------------------------ the README


def _serve_options() -> list[tuple[str, ...]]:
    """The option strings of each of ``fdkit serve``'s options (``--help`` left out)."""
    from fdkit.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    actions = sub.choices["serve"]._actions
    return [tuple(a.option_strings) for a in actions if a.option_strings and a.dest != "help"]


@pytest.mark.source_tree
def test_docs_document_the_serve_command_line() -> None:
    """The serve section of docs/uring.md documents the command line as it is: `fdkit serve
    [PORT]`, and each option of ``fdkit serve`` under one of its names (not the old ``DIR
    [--host] [--port]`` alone); the README's list of commands includes `fdkit serve`."""
    readme = (REPO / "README.md").read_text()
    page = (REPO / "docs" / "uring.md").read_text().split("## `fdkit serve`", 1)[1]
    for text in (readme, page):
        assert "fdkit serve DIR [--host] [--port]" not in text  # the old, partial synopsis
        assert "fdkit serve [PORT]" in text
    for names in _serve_options():
        assert any(re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", page) for n in names), names
    for short in ("-d DIR", "-b ADDR", "--list", "--access-log", "--workers", "--engine"):
        assert short in page, short
    commands = readme.split("## The command", 1)[1].split("```", 2)[1]
    assert re.search(r"^fdkit serve ", commands, re.M), commands
