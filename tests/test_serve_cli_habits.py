"""`fdkit serve` as a drop-in for ``python -m http.server``: the positional port, ``-b/--bind``,
``-d/--directory``, the current directory by default, ``--list`` (an HTML listing for a
directory without index.html: names escaped, never anything outside the directory) and
``--access-log`` (common log format on stderr, written in batches), on both engines, with the
real command in a subprocess on loopback, stopped by its pid.
"""

from __future__ import annotations

import calendar
import contextlib
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
START = re.compile(
    r"fdkit serve: serving (.+) on http://(\S+):(\d+)/ \(engine: (io_uring|epoll), "
    r"(\d+) worker"
)
URING_OK, URING_REASON = uring.available()
SECRET = b"SECRET-9a1f-never-listed"
LOG_LINE = re.compile(
    r"^(?P<host>\S+) - - \[(?P<date>\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} \+0000)\] "
    r'"(?P<request>[^"]*)" (?P<status>\d{3}) (?P<bytes>\d+|-)$'
)


class Server:
    """A running ``fdkit serve`` and what its start line said."""

    def __init__(self, proc: subprocess.Popen[bytes], err: Path, m: re.Match[str]) -> None:
        self.proc, self.err = proc, err
        self.directory, self.host, self.port = m.group(1), m.group(2), int(m.group(3))
        self.engine = m.group(4)

    def get(self, target: str, method: str = "GET") -> tuple[int, bytes]:
        c = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            c.request(method, target)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def log_lines(self) -> list[str]:
        return [line for line in self.stderr().splitlines() if not line.startswith("fdkit ")]


@contextlib.contextmanager
def serving(argv: list[str], cwd: Path, logs: Path) -> Iterator[Server]:
    """Runs ``fdkit serve ARGV`` in ``cwd`` until its start line; stops it by pid (SIGTERM,
    which must exit 0) at the end."""
    err = logs / f"serve-{time.monotonic_ns()}.err"
    with open(err, "wb") as e:
        proc = subprocess.Popen(
            [FDKIT, "serve", *argv],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=e,
        )
    try:
        deadline = time.monotonic() + 15
        while not (m := START.search(err.read_text(errors="replace"))):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"no start line (exit {proc.poll()}): {err.read_text()!r}")
            time.sleep(0.01)
        yield Server(proc, err, m)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(10) == 0, err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FDKIT, "serve", *argv], cwd=cwd, capture_output=True, text=True, timeout=20, check=False
    )


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """``tmp/www``: a file, a directory without index.html whose names need escaping, a
    directory with one, symlinks in and out; ``tmp/secret.txt`` and ``tmp/outside/`` beside
    it."""
    (tmp_path / "secret.txt").write_bytes(SECRET)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret-inside.txt").write_bytes(SECRET)
    www = tmp_path / "www"
    (www / "sub").mkdir(parents=True)
    (www / "sub" / "index.html").write_bytes(b"<p>sub index</p>\n")
    (www / "hallo.txt").write_bytes(b"hallo\n")
    files = www / "files"
    (files / "Zdir").mkdir(parents=True)
    for name in ("<script>alert(1).txt", "a&b.txt", "with space.txt", "100%.txt"):
        (files / name).write_bytes(b"x")
    (files / "link-out").symlink_to(tmp_path / "secret.txt")
    (files / "link-out-rel").symlink_to("../../secret.txt")
    (files / "link-outside-dir").symlink_to(tmp_path / "outside")
    (files / "link-in").symlink_to("../hallo.txt")
    (www / "outside-dir").symlink_to(tmp_path / "outside")
    (tmp_path / "logs").mkdir()
    return www


ENGINES = ["epoll", "uring"]


def engine_args(engine: str) -> list[str]:
    if engine == "uring" and not URING_OK:
        pytest.skip(f"io_uring unavailable: {URING_REASON}")
    return ["--engine", engine]


# ------------------------------------------------------------------------- the command line


def test_positional_port_and_the_current_directory(site: Path) -> None:
    """``fdkit serve 0`` in DIR serves DIR on port 0, as ``python -m http.server 0`` does."""
    with serving(["0"], site, site.parent / "logs") as s:
        assert Path(s.directory) == site
        assert (s.host, s.get("/hallo.txt")) == ("127.0.0.1", (200, b"hallo\n"))


def test_directory_and_bind_options(site: Path, tmp_path: Path) -> None:
    """``-d DIR -b ADDRESS PORT``, from another directory; ``--directory`` and ``--bind``."""
    with serving(["-d", str(site), "-b", "127.0.0.1", "0"], tmp_path, tmp_path / "logs") as s:
        assert s.directory == str(site)
        assert s.host == "127.0.0.1"
        assert s.get("/hallo.txt") == (200, b"hallo\n")
    with serving(
        ["--directory", str(site), "--bind", "127.0.0.1", "--port", "0"],
        tmp_path,
        tmp_path / "logs",
    ) as s:
        assert s.get("/hallo.txt") == (200, b"hallo\n")


def test_bind_ipv6_loopback(site: Path) -> None:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as e:
        pytest.skip(f"no IPv6 loopback here: {e}")
    with serving(["-b", "::1", "0"], site, site.parent / "logs") as s:
        assert s.host == "[::1]"
        c = socket.create_connection(("::1", s.port), timeout=10)
        with c:
            c.sendall(b"GET /hallo.txt HTTP/1.0\r\n\r\n")
            data = b""
            while chunk := c.recv(4096):
                data += chunk
        assert data.startswith(b"HTTP/1.1 200 ")
        assert data.endswith(b"hallo\n")


def test_dir_positional_and_host_port_still_work(site: Path, tmp_path: Path) -> None:
    with serving(
        [str(site), "--host", "127.0.0.1", "--port", "0"], tmp_path, tmp_path / "logs"
    ) as s:
        assert s.directory == str(site)
        assert s.get("/hallo.txt") == (200, b"hallo\n")


def test_a_directory_named_like_a_port(tmp_path: Path) -> None:
    """All digits is a port; ``./NAME`` or ``-d NAME`` serves the directory; the error says
    so."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "70000").mkdir()
    (tmp_path / "70000" / "f.txt").write_bytes(b"numbered\n")
    r = run(["70000"], tmp_path)
    assert r.returncode == 1
    assert r.stderr == (
        "fdkit serve: port must be 0..65535, got '70000' "
        "(to serve the directory '70000': -d 70000 or ./70000)\n"
    )
    for argv in (["./70000", "--port", "0"], ["-d", "70000", "0"]):
        with serving(argv, tmp_path, tmp_path / "logs") as s:
            assert s.get("/f.txt") == (200, b"numbered\n")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["0", "--port", "0"], "fdkit serve: the port is given twice: 0 and --port 0\n"),
        (
            ["{dir}", "-d", "{dir}"],
            "fdkit serve: the directory is given twice: {dir} and --directory {dir}\n",
        ),
        (["--port", "x"], "fdkit serve: --port must be 0..65535, got 'x'\n"),
        (["99999"], "fdkit serve: port must be 0..65535, got '99999'\n"),
    ],
)
def test_conflicts_and_bad_ports_say_what(site: Path, argv: list[str], message: str) -> None:
    r = run([a.format(dir=site) for a in argv], site)
    assert r.returncode == 1
    assert r.stderr == message.format(dir=site)


def test_help_has_the_shape_of_http_server() -> None:
    """Every option ``python -m http.server --help`` names for port, bind and directory is
    in ``fdkit serve --help``, with ``--host``/``--port`` and the new ones."""
    ours = subprocess.run(
        [FDKIT, "serve", "--help"], capture_output=True, text=True, timeout=20, check=True
    ).stdout
    theirs = subprocess.run(
        [sys.executable, "-m", "http.server", "--help"],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    ).stdout
    for opt in ("-b", "--bind", "-d", "--directory"):
        assert re.search(rf"(^|[\s,\[]){opt}\b", theirs), f"http.server lost {opt}?"
        assert re.search(rf"(^|[\s,\[]){opt}\b", ours), opt
    assert "[port]" in theirs
    assert "[PORT|DIR]" in ours
    for opt in ("--host", "--port", "--list", "--access-log", "-q, --quiet", "-v, --verbose"):
        assert opt in ours, opt


def test_quiet_and_verbose(site: Path) -> None:
    """``-q``/``-v`` as every fdkit subcommand takes them: one or the other; ``-v`` logs the
    settings on stderr with a timestamp."""
    both = run(["0", "-q", "-v"], site)
    assert both.returncode == 2
    assert both.stderr.splitlines()[-1] == (
        "fdkit serve: error: argument -v/--verbose: not allowed with argument -q/--quiet"
    )
    with serving(["0", "-v", "--list"], site, site.parent / "logs") as s:
        assert s.get("/hallo.txt")[0] == 200
    assert re.search(
        r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d fdkit serve: engine auto, 1 worker, idle timeout 30 s, "
        r"at most 10000 connections, listings on, access log off$",
        s.stderr(),
        re.MULTILINE,
    ), s.stderr()


# --------------------------------------------------------------------------------- listings


@pytest.mark.parametrize("engine", ENGINES)
def test_listing_escapes_names_and_never_shows_the_outside(site: Path, engine: str) -> None:
    with serving(
        [str(site), "--port", "0", "--list", *engine_args(engine)],
        site.parent,
        site.parent / "logs",
    ) as s:
        status, body = s.get("/files/")
        page = body.decode()
        assert status == 200
        items = [line for line in page.splitlines() if line.startswith("<li>")]
        assert items == [
            '<li><a href="100%25.txt">100%.txt</a></li>',
            '<li><a href="%3Cscript%3Ealert%281%29.txt">&lt;script&gt;alert(1).txt</a></li>',
            '<li><a href="a%26b.txt">a&amp;b.txt</a></li>',
            '<li><a href="link-in">link-in</a></li>',
            '<li><a href="with%20space.txt">with space.txt</a></li>',
            '<li><a href="Zdir/">Zdir/</a></li>',
        ]
        assert "<script>" not in page
        assert "link-out" not in page
        assert "secret" not in page
        # Each link leads where it says.
        assert s.get("/files/%3Cscript%3Ealert%281%29.txt") == (200, b"x")
        assert s.get("/files/with%20space.txt") == (200, b"x")
        assert s.get("/files/link-in") == (200, b"hallo\n")
        # A directory with index.html is not listed.
        assert s.get("/sub/") == (200, b"<p>sub index</p>\n")
        # The root is listed, without the symlink to the outside.
        status, body = s.get("/")
        assert status == 200
        assert b'<a href="files/">files/</a>' in body
        assert b"outside-dir" not in body
        # A symlink to a directory outside is not followed; traversal never lists the outside.
        for target in (
            "/outside-dir/",
            "/files/link-outside-dir/",
            "/../",
            "/%2e%2e/",
            "/files/../../",
            "/files/%2e%2e/%2e%2e/",
        ):
            status, body = s.get(target)
            assert status in (400, 403, 404), (target, status)
            assert SECRET not in body, target
            assert b"secret" not in body, target


@pytest.mark.parametrize("engine", ENGINES)
def test_no_listing_without_the_option(site: Path, engine: str) -> None:
    with serving(
        [str(site), "--port", "0", *engine_args(engine)], site.parent, site.parent / "logs"
    ) as s:
        assert s.get("/files/")[0] == 404
        assert s.get("/")[0] == 404
        assert s.get("/outside-dir/")[0] == 403


# ------------------------------------------------------------------------------ access log


def _parse(line: str) -> dict[str, str]:
    m = LOG_LINE.match(line)
    assert m, f"not a common log format line: {line!r}"
    return m.groupdict()


@pytest.mark.parametrize("engine", ENGINES)
def test_access_log_lines(site: Path, engine: str) -> None:
    with serving(
        [str(site), "--port", "0", "--access-log", *engine_args(engine)],
        site.parent,
        site.parent / "logs",
    ) as s:
        assert s.get("/hallo.txt") == (200, b"hallo\n")
        # Written while serving, within a tick: not only at the stop.
        deadline = time.monotonic() + 2
        while not s.log_lines() and time.monotonic() < deadline:
            time.sleep(0.02)
        first = s.log_lines()
        assert len(first) == 1, s.stderr()
        entry = _parse(first[0])
        assert (entry["host"], entry["request"], entry["status"], entry["bytes"]) == (
            "127.0.0.1",
            "GET /hallo.txt HTTP/1.1",
            "200",
            "6",
        )
        stamp = calendar.timegm(time.strptime(entry["date"], "%d/%b/%Y:%H:%M:%S +0000"))
        assert abs(stamp - time.time()) < 120
        s.get("/hallo.txt", method="HEAD")
        missing = s.get("/no%20such.txt")
        s.get("/sub/")
    lines = [_parse(line) for line in s.log_lines()]
    assert [(e["request"], e["status"], e["bytes"]) for e in lines] == [
        ("GET /hallo.txt HTTP/1.1", "200", "6"),
        ("HEAD /hallo.txt HTTP/1.1", "200", "-"),
        ("GET /no%20such.txt HTTP/1.1", "404", str(len(missing[1]))),
        ("GET /sub/ HTTP/1.1", "200", "17"),
    ]


@pytest.mark.parametrize("engine", ENGINES)
def test_no_access_log_by_default(site: Path, engine: str) -> None:
    with serving(
        [str(site), "--port", "0", *engine_args(engine)], site.parent, site.parent / "logs"
    ) as s:
        for _ in range(5):
            s.get("/hallo.txt")
        time.sleep(0.3)
    assert s.log_lines() == [], s.stderr()


def test_access_log_of_several_workers_keeps_lines_whole(site: Path) -> None:
    """Two workers write to the same stderr: every line arrives whole, none is lost."""
    n = 200
    with serving(
        [str(site), "--port", "0", "--access-log", "--workers", "2"],
        site.parent,
        site.parent / "logs",
    ) as s:
        for i in range(n):
            assert s.get(f"/hallo.txt?{i}")[0] == 200
    lines = [_parse(line) for line in s.log_lines()]
    assert sorted(int(e["request"].split("?")[1].split()[0]) for e in lines) == list(range(n))


def test_the_summary_counts_in_the_singular_too(site: Path) -> None:
    """One request on one connection is "1 request served on 1 connection", not "1 requests
    served on 1 connections"."""
    with serving(["0"], site, site.parent / "logs") as s:
        assert s.get("/hallo.txt") == (200, b"hallo\n")
        server = s
    last = server.stderr().strip().splitlines()[-1]
    assert re.fullmatch(
        r"fdkit serve: stopped \(SIGTERM\): 1 request served on 1 connection \(0 timed out\)",
        last,
    ), last
