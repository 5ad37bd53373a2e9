"""``fdkit serve`` as a subprocess (started with ``--port 0``, its port read from the start line,
stopped by pid with its workers), the site it serves (with ``secret.txt`` beside it, which no
answer may contain), and a reader of raw HTTP/1.1 responses."""

from __future__ import annotations

import contextlib
import email.utils
import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fdkit import uring

FDKIT = shutil.which("fdkit", path=os.path.dirname(sys.executable)) or "fdkit"
CURL = shutil.which("curl")
START = re.compile(
    r"fdkit serve: serving (.+) on http://(\S+):(\d+)/ \(engine: (io_uring|epoll), "
    r"(\d+) worker"
)
ENGINES = {"epoll": "epoll", "uring": "io_uring"}
URING_OK, URING_REASON = uring.available()

SECRET = b"TOP-SECRET-b6f1c0de-never-served"
HALLO = b"hallo\n"
INDEX = b"<!doctype html><title>index</title>root index\n"
SUB_INDEX = b"<!doctype html><title>sub</title>sub index\n"
DATA = os.urandom(100_000)
STARTUP = 15.0


# ------------------------------------------------------------------------------ the server


class Serve:
    """A running ``fdkit serve`` process and what its start line said."""

    def __init__(self, proc: subprocess.Popen[bytes], out: Path, err: Path, m: re.Match[str]):
        self.proc = proc
        self.out_path, self.err_path = out, err
        self.directory = m.group(1)
        self.host = m.group(2)
        self.port = int(m.group(3))
        self.engine = m.group(4)
        self.workers = int(m.group(5))

    @property
    def addr(self) -> tuple[str, int]:
        return self.host, self.port

    def http(self, timeout: float = 5) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def raw(self, timeout: float = 5) -> socket.socket:
        return socket.create_connection(self.addr, timeout=timeout)

    def output(self) -> str:
        return self.out_path.read_text(errors="replace") + self.err_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> int:
        """Sends ``sig`` by pid and waits (bounded); returns the exit status."""
        os.kill(self.proc.pid, sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"fdkit serve did not exit within {timeout:g} s of {sig!r}")


def _tree(pid: int) -> list[int]:
    """``pid``'s live descendants (not ``pid`` itself), by the bench harness's walk of
    ``/proc``: bench/ sits beside tests/ in the source tree and in the wheel test tree, and it,
    not the tests, owns the walk (it sums CPU over it). Imported here, on first use, so that
    only the tests that look for workers need bench/."""
    repo = str(Path(__file__).resolve().parents[2])
    if repo not in sys.path:
        sys.path.insert(0, repo)
    from bench._endpoints import process_tree

    return process_tree(pid)[1:]


@contextlib.contextmanager
def fdkit_serve(
    directory: Path, *args: str, prefix: tuple[str, ...] = (), check_exit: bool = True
) -> Iterator[Serve]:
    """Starts ``[PREFIX] fdkit serve DIRECTORY --port 0 ARGS`` (a prefix must exec the
    command in its own process), parses its start line, and stops it
    by pid at the end (SIGTERM, which must exit 0 when ``check_exit``; SIGKILL for what is
    left, workers included)."""
    logs = directory.parent / "logs"
    logs.mkdir(exist_ok=True)
    stamp = time.monotonic_ns()
    out, err = logs / f"serve-{stamp}.out", logs / f"serve-{stamp}.err"
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen(
            [*prefix, FDKIT, "serve", str(directory), "--port", "0", *args],
            stdin=subprocess.DEVNULL,
            stdout=o,
            stderr=e,
        )
    workers: list[int] = []
    try:
        deadline = time.monotonic() + STARTUP
        while not (m := START.search(err.read_text(errors="replace"))):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"fdkit serve printed no start line (exit {proc.poll()}): "
                    f"{err.read_text()!r} {out.read_text()!r}",
                    pytrace=False,
                )
            time.sleep(0.01)
        srv = Serve(proc, out, err, m)
        yield srv
        workers = _tree(proc.pid)
        if check_exit:
            assert srv.alive(), f"fdkit serve died: {srv.output()[-2000:]}"
            code = srv.stop(signal.SIGTERM)
            assert code == 0, f"exit status {code} on SIGTERM: {srv.output()[-2000:]}"
            assert "Traceback" not in srv.output()
            assert "panicked" not in srv.output()
    finally:
        workers = workers or _tree(proc.pid)
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def make_site(base: Path) -> Path:
    """``base/www`` (returned) with the files the tests ask for, ``base/secret.txt`` beside
    it, and symlinks that point in and out."""
    base.chmod(0o755)
    (base / "secret.txt").write_bytes(SECRET)
    (base / "secretdir").mkdir()
    (base / "secretdir" / "secret.txt").write_bytes(SECRET)
    root = base / "www"
    root.mkdir()
    root.chmod(0o755)
    (root / "index.html").write_bytes(INDEX)
    (root / "hallo.txt").write_bytes(HALLO)
    (root / "data.bin").write_bytes(DATA)
    (root / "empty.txt").write_bytes(b"")
    for name in ("style.css", "app.js", "data.json", "image.png", "photo.jpg", "page.htm"):
        (root / name).write_bytes(b"x" * 10)
    (root / "noext").write_bytes(b"plain")
    (root / "with space.txt").write_bytes(b"spaced\n")
    (root / "sub").mkdir()
    (root / "sub" / "index.html").write_bytes(SUB_INDEX)
    (root / "sub" / "page.txt").write_bytes(b"sub page\n")
    (root / "noindex").mkdir()
    (root / "noindex" / "file.txt").write_bytes(b"in noindex\n")
    (root / "link_out").symlink_to("../secret.txt")
    (root / "link_abs_out").symlink_to(base / "secret.txt")
    (root / "link_dir_out").symlink_to("../secretdir")
    (root / "link_parent").symlink_to("..")
    (root / "link_etc").symlink_to("/etc")
    (root / "link_passwd").symlink_to("/etc/passwd")
    (root / "link_in").symlink_to("hallo.txt")
    for p in (root, *root.rglob("*")):
        if not p.is_symlink():
            p.chmod(0o755 if p.is_dir() else 0o644)
    return root


# The fixtures a module gets by importing them: ``from helpers.serve import site_fixture,
# srv_fixture``. Named ``site`` and ``srv`` for the tests that take them.


@pytest.fixture(scope="module", name="site")
def site_fixture(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """A module's site (:func:`make_site`), in a directory named after the module."""
    return make_site(tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2]))


@pytest.fixture(scope="module", name="srv")
def srv_fixture(site: Path, engine: str) -> Iterator[Serve]:
    """One server of the module's site per engine, one worker, the default idle timeout
    (30 s, which is also the header deadline: an answer within a second cannot be that
    deadline firing). It must survive the module's tests and exit 0 on SIGTERM at the end."""
    with fdkit_serve(site, *_engine_args(engine), "--workers", "1") as s:
        yield s


def _engine_args(engine: str) -> list[str]:
    if engine == "uring" and not URING_OK:
        pytest.skip(f"io_uring unavailable: {URING_REASON}")
    return ["--engine", engine]


# ------------------------------------------------------------------------------ the wire


class Response:
    def __init__(self, status: int, reason: str, headers: dict[str, str], body: bytes):
        self.status, self.reason, self.headers, self.body = status, reason, headers, body

    def __repr__(self) -> str:
        return f"Response({self.status} {self.reason}, {self.headers}, {self.body[:80]!r})"


class Wire:
    """Reads HTTP/1.1 responses off a raw socket, framed by Content-Length."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.seen = bytearray()  # everything received, for checks on the raw bytes

    def _more(self) -> bool:
        try:
            chunk = self.sock.recv(1 << 20)
        except ConnectionResetError:
            chunk = b""
        self.buf += chunk
        self.seen += chunk
        return bool(chunk)

    def response(self, method: str = "GET") -> Response:
        while (i := self.buf.find(b"\r\n\r\n")) < 0:
            assert len(self.buf) < 65536, "a response head larger than 64 KiB"
            if not self._more():
                raise ConnectionError(f"closed before a full head: {bytes(self.buf)[:200]!r}")
        lines = bytes(self.buf[:i]).decode("latin-1").split("\r\n")
        del self.buf[: i + 4]
        version, status, reason = [*lines[0].split(" ", 2), ""][:3]
        assert version == "HTTP/1.1", lines[0]
        headers: dict[str, str] = {}
        for line in lines[1:]:
            k, sep, v = line.partition(":")
            assert sep, f"bad header line {line!r}"
            assert k == k.strip(), f"bad header line {line!r}"
            assert k.lower() not in headers, f"header {k} twice"
            headers[k.lower()] = v.strip()
        code = int(status)
        length = int(headers.get("content-length", "0"))
        if method == "HEAD" or code == 304 or 100 <= code < 200 or code == 204:
            length = 0
        while len(self.buf) < length:
            if not self._more():
                raise ConnectionError(f"closed after {len(self.buf)} of {length} body bytes")
        body = bytes(self.buf[:length])
        del self.buf[:length]
        return Response(code, reason, headers, body)

    def closed(self, within: float = 5.0) -> bool:
        """Whether the server closes the connection (EOF or reset) within ``within`` s, with
        nothing more sent; False when it is still open then."""
        self.sock.settimeout(within)
        try:
            extra = self.sock.recv(65536)
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
        assert extra == b"", f"unexpected bytes after the response: {extra[:200]!r}"
        return True


def exchange(srv: Serve, request: bytes, method: str = "GET") -> Response:
    """One raw request on a fresh connection; its response."""
    with srv.raw() as s:
        s.sendall(request)
        return Wire(s).response(method)


def get(srv: Serve, target: str, *headers: str, method: str = "GET") -> Response:
    head = "".join(f"{h}\r\n" for h in headers)
    req = f"{method} {target} HTTP/1.1\r\nHost: localhost\r\n{head}\r\n".encode("latin-1")
    return exchange(srv, req, method)


def raw_reply(
    srv: Serve, request: bytes, count: int = 1, timeout: float = 5.0, method: str = "GET"
) -> bytes:
    """Every byte the server sends back to ``request`` (raw, possibly several pipelined
    requests) until ``count`` responses have arrived or it closes the connection."""
    with srv.raw(timeout) as s:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(request)
        w = Wire(s)
        for _ in range(count):
            try:
                w.response(method)
            except ConnectionError:
                break
        return bytes(w.seen)


def check_common_headers(r: Response) -> None:
    assert "date" in r.headers, r
    assert email.utils.parsedate_to_datetime(r.headers["date"]) is not None
    assert r.headers.get("server"), r
