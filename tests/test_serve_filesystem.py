"""What a request to `fdkit serve` can reach on disk: hostile targets (``..``, encoded and
overlong dots, NUL bytes, absolute URIs, symlinks out of the root) and random garbage must
never read anything outside the served directory, special and unreadable files (a FIFO, a
mode-000 file) are refused without blocking the server, and a file that changes between or
during requests is never answered with bytes that are not the file's.

An inotify watch on the files beside the served directory sees every open of them, so a
request that made the server look outside its root fails even when its answer hid it.

Like every file of serve tests, this one runs most tests against both engines, and takes its
server (``--port 0``, stopped by pid with its workers), its site (with ``secret.txt`` beside it,
which no answer may contain) and its response reader from ``helpers/serve.py``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import re
import shutil
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.serve import (  # noqa: F401  (the fixtures site, srv)
    HALLO,
    SECRET,
    Response,
    Serve,
    Wire,
    _engine_args,
    fdkit_serve,
    get,
    make_site,
    raw_reply,
    site_fixture,
    srv_fixture,
)

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
