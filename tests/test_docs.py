"""The documentation site: it builds with no warning, its API reference names every public name
of every module, every link of the built site leads to a page and an anchor that exist, the
README's links lead to files that exist, and the deployment recipes of
docs/deploy.md serve an app on fdkit.aio's loop for real (gunicorn with the worker class of
examples/docs_gunicorn_worker.py, hypercorn from examples/docs_hypercorn_serve.py, uvicorn
before 0.36 from examples/docs_uvicorn_before_036.py).

`make docs` builds the same site; `make test` runs it before this suite.
"""

from __future__ import annotations

import importlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
PACKAGE = ROOT / "python" / "fdkit"

#: Every public module, each with its page under docs/reference/ (`fdkit` is reference/fdkit.md).
MODULES = [
    "fdkit",
    "fdkit.fd",
    "fdkit.zerocopy",
    "fdkit.copy",
    "fdkit.uring",
    "fdkit.atomic_pipe",
    "fdkit.aio",
    "fdkit.types",
    "fdkit.logging",
]

#: Modules of the package that are not in the reference, and why.
NOT_REFERENCED = {
    "fdkit.cli": "the command line, documented by docs/cli.md and `fdkit COMMAND --help`",
    "fdkit.static_server": "its one public name is re-exported as fdkit.serve",
}


def page(site: Path, module: str) -> Path:
    """The built reference page of ``module``."""
    return site / "reference" / (module.partition(".")[2] or "fdkit") / "index.html"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as `make docs` builds it (--strict: a warning fails the build)."""
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", "mkdocs.yml", "-d", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "WARNING" not in r.stderr, r.stderr
    return out


@pytest.mark.source_tree
def test_every_public_module_has_a_reference_page() -> None:
    found = {"fdkit"}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not any(p.startswith("_") for p in parts):
            found.add(".".join(parts))
    public = {m for m in found if not any(m.startswith(f"{n}.") for n in NOT_REFERENCED)}
    assert public - set(NOT_REFERENCED) == set(MODULES)
    for module in MODULES:
        md = ROOT / "docs" / "reference" / f"{module.partition('.')[2] or 'fdkit'}.md"
        assert f"::: {module}\n" in md.read_text(), md


@pytest.mark.source_tree
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("module", MODULES)
def test_reference_documents_every_name_of_all(site: Path, module: str) -> None:
    """Each name of the module's ``__all__`` has its entry (an anchor ``module.name``) on the
    module's reference page, or is a submodule with a page of its own."""
    mod = importlib.import_module(module)
    html = page(site, module).read_text()
    anchors = set(re.findall(r'id="([^"]+)"', html))
    missing = []
    for name in mod.__all__:
        if f"{module}.{name}" in anchors:
            continue
        if f"{module}.{name}" in MODULES and page(site, f"{module}.{name}").is_file():
            continue
        missing.append(name)
    assert not missing, f"{module}: not in the API reference: {missing}"


@pytest.mark.source_tree
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_reference_gives_native_functions_their_docstrings_and_types(site: Path) -> None:
    """The native module's docstrings reach the reference (from the runtime objects), with the
    stub's types, overloads included."""
    html = re.sub(r"<[^>]+>", "", page(site, "fdkit.zerocopy").read_text())
    assert "by the\nbest kernel path for the two fds" in html
    assert "nonblocking: Literal[True]" in html
    assert ":class:" not in html
    assert ":func:" not in html


@pytest.mark.source_tree
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_site_links_lead_to_pages_and_anchors_that_exist(site: Path) -> None:
    """Every link within the built site (nav, pages, the reference's cross-references, assets)
    leads to a file of the site, and its #anchor to an id on that page. mkdocs --strict checks
    the Markdown's links; this checks the HTML that came out, generated parts included."""
    ids: dict[Path, set[str]] = {}
    bad = []
    for html in sorted(site.rglob("*.html")):
        here = "/" + html.relative_to(site).as_posix()
        for link in re.findall(r'\b(?:href|src)="([^"]*)"', html.read_text()):
            if urlsplit(link).scheme or link.startswith("//"):
                continue  # the theme's own links out of the site
            target = urlsplit(urljoin(here, link))
            path = site / unquote(target.path).lstrip("/")
            if target.path.endswith("/") or path.is_dir():
                path /= "index.html"
            if not path.is_file():
                bad.append(f"{here}: {link}")
            elif target.fragment and path.suffix == ".html":
                if path not in ids:
                    ids[path] = set(re.findall(r'\bid="([^"]+)"', path.read_text()))
                if unquote(target.fragment) not in ids[path]:
                    bad.append(f"{here}: {link}")
    assert ids, "no link with an anchor: the check found nothing to check"
    assert not bad, "\n".join(bad)


@pytest.mark.source_tree
def test_readme_links_lead_to_files_that_exist() -> None:
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert links
    for link in links:
        if re.match(r"[a-z]+:", link):
            continue
        assert (ROOT / link).exists(), link


# --- the deployment recipes, run for real -------------------------------------------------------


#: gunicorn with one worker of the worker class that docs/deploy.md shows
GUNICORN = [sys.executable, "-m", "gunicorn", "-w", "1", "-k", "docs_gunicorn_worker.FdkitWorker"]


def server_env() -> dict[str, str]:
    """The examples importable, and every DeprecationWarning an error: on 3.14 and later, where
    asyncio deprecates its policies, the recipes serve on fdkit's loop warning of nothing."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(EXAMPLES)
    env["PYTHONWARNINGS"] = "error::DeprecationWarning"
    return env


def started_port(proc: subprocess.Popen[str], pattern: str, deadline: float) -> int:
    """The port a server prints in its start line (matched by ``pattern``)."""
    assert proc.stderr is not None
    seen = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        m = re.search(pattern, line)
        if m:
            return int(m.group(1))
    proc.kill()
    raise AssertionError("the server did not start:\n" + "".join(seen))


def get(port: int) -> bytes:
    """``GET /`` on a fresh connection, the body."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        raw = bytearray()
        while data := s.recv(65536):
            raw += data
    head, _, body = bytes(raw).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return body


def reaped(proc: subprocess.Popen[str]) -> None:
    """Kills ``proc`` if it still runs, waits for it and closes its stderr pipe."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    assert proc.stderr is not None
    proc.stderr.close()


def stopped(proc: subprocess.Popen[str], sig: signal.Signals) -> int:
    proc.send_signal(sig)
    try:
        return proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def gunicorn() -> Iterator[subprocess.Popen[str]]:
    pytest.importorskip("gunicorn")
    pytest.importorskip("uvicorn_worker")
    proc = subprocess.Popen(
        [*GUNICORN, "-b", "127.0.0.1:0", "--no-control-socket", "docs_asgi_app:app"],
        cwd=EXAMPLES,
        env=server_env(),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        yield proc
    finally:
        reaped(proc)


@pytest.mark.slow
def test_gunicorn_worker_serves_on_fdkit_aio(gunicorn: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    port = started_port(gunicorn, r"Listening at: http://127\.0\.0\.1:(\d+)", deadline)
    # The worker boots after the arbiter listens: retry until it answers.
    while True:
        try:
            body = get(port)
            break
        except (ConnectionError, AssertionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    assert body in (b"UringEventLoop io_uring\n", b"EpollEventLoop epoll\n"), body
    assert stopped(gunicorn, signal.SIGTERM) == 0


@pytest.mark.slow
def test_hypercorn_recipe_serves_on_fdkit_aio() -> None:
    pytest.importorskip("hypercorn")
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "docs_hypercorn_serve.py")],
        cwd=EXAMPLES,
        env={**server_env(), "PORT": "0"},
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        port = started_port(proc, r"Running on http://127\.0\.0\.1:(\d+)", time.monotonic() + 30)
        body = get(port)
        assert body in (b"UringEventLoop io_uring\n", b"EpollEventLoop epoll\n"), body
        stopped(proc, signal.SIGINT)
    finally:
        reaped(proc)


#: uvicorn 0.35, installed by `make setup` beside the current one (requirements-uvicorn-0.35.txt)
OLD_UVICORN = ROOT / ".venv" / "uvicorn-0.35"


def old_uvicorn_env() -> dict[str, str]:
    if not (OLD_UVICORN / "uvicorn").is_dir():
        pytest.skip(f"no uvicorn 0.35 in {OLD_UVICORN} (make setup installs it)")
    env = server_env()
    env["PYTHONPATH"] = f"{OLD_UVICORN}:{env['PYTHONPATH']}"
    return env


def test_uvicorn_before_036_refuses_a_loop_factory() -> None:
    """What the recipe is for: uvicorn 0.35 refuses ``--loop fdkit.aio:new_event_loop``."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--loop",
            "fdkit.aio:new_event_loop",
            "docs_asgi_app:app",
        ],
        cwd=EXAMPLES,
        env=old_uvicorn_env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2, done
    assert "Invalid value for '--loop'" in done.stderr


def test_uvicorn_before_036_recipe_serves_on_fdkit_aio() -> None:
    env = {**old_uvicorn_env(), "PORT": "0"}
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "docs_uvicorn_before_036.py")],
        cwd=EXAMPLES,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    try:
        port = started_port(proc, r"Uvicorn running on http://127\.0\.0\.1:(\d+)",
                            time.monotonic() + 30)  # fmt: skip
        body = get(port)
        assert body in (b"UringEventLoop io_uring\n", b"EpollEventLoop epoll\n"), body
        stopped(proc, signal.SIGINT)
    finally:
        reaped(proc)


BLOCK_NATIVE = """
import sys


class _NoNative:
    def find_spec(self, name, path=None, target=None):
        if name == "fdkit._fdkit":
            raise ImportError("fdkit._fdkit is kept from this build by the test")
        return None


sys.meta_path.insert(0, _NoNative())
"""


@pytest.mark.source_tree
def test_a_build_without_the_native_docstrings_fails_naming_them(tmp_path: Path) -> None:
    """Where ``fdkit._fdkit`` cannot be imported (an extension not built in place), the
    native functions' docstrings are not there to read: the build fails, saying so, instead
    of publishing a reference without them."""
    block = tmp_path / "block"
    block.mkdir()
    (block / "sitecustomize.py").write_text(BLOCK_NATIVE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(block)
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", "mkdocs.yml",
         "-d", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert r.returncode != 0, r.stderr[-2000:]
    assert "public names of fdkit have no docstring" in r.stderr, r.stderr[-2000:]
    assert "fdkit.atomic_pipe.AtomicPipe" in r.stderr
    assert "build the extension in place" in r.stderr
