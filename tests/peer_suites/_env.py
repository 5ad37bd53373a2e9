"""Where a suite runs: its sdist (downloaded once), unpacked, and a venv with its test deps.

Everything lives under the cache directory (``.peer/`` at the repository root, gitignored;
``FDKIT_PEER_DIR`` moves it):

- ``sdists/``: ``pip download --no-binary PROJECT --no-deps PROJECT==VERSION`` (the sdist of that
  one project; the tools pip builds its metadata with come as wheels, which saves minutes);
- ``src/<project>-<version>/``: the unpacked sdist, where the suite's pytest runs;
- ``venv-<suite>/``: a venv made from the harness's own Python (the project's ``.venv``), with
  the suite's wheel and test deps, and a ``.pth`` file naming the directory that holds the fdkit
  the harness itself imports (the checkout's ``python/``, with the compiled ``_fdkit*.so``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ._suites import Suite

REPO = Path(__file__).resolve().parents[2]
PLUGIN_DIR = Path(__file__).resolve().parent / "plugin"


class SetupError(RuntimeError):
    """A suite could not be made ready (download, unpack, install): the message says which step."""


def cache_dir() -> Path:
    return Path(os.environ.get("FDKIT_PEER_DIR") or REPO / ".peer").resolve()


def say(msg: str) -> None:
    print(f"peer-tests: {msg}", file=sys.stderr, flush=True)


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SetupError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    return proc.stdout


def fdkit_dir() -> Path:
    """The directory holding the ``fdkit`` package this Python imports (the checkout's python/)."""
    import fdkit

    return Path(fdkit.__file__).resolve().parent.parent


def fdkit_commit() -> str:
    """The commit of the checkout fdkit comes from (``+dirty`` with local changes), or ``?``."""
    top = fdkit_dir().parent
    try:
        head = subprocess.run(
            ["git", "-C", str(top), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(top), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return head + ("+dirty" if dirty else "")


def fdkit_built() -> str:
    """When the compiled extension was last written (UTC): the commit may be newer than it."""
    found = sorted(fdkit_dir().glob("fdkit/_fdkit*.so"), key=lambda p: p.stat().st_mtime)
    if not found:
        return "?"
    when = datetime.fromtimestamp(found[-1].stat().st_mtime, UTC)
    return when.isoformat(timespec="seconds")


@dataclass(frozen=True)
class SuiteEnv:
    suite: Suite
    src: Path  # the unpacked sdist: pytest's working directory
    python: Path  # the venv's interpreter


def fetch_sdist(suite: Suite, cache: Path) -> Path:
    want = f"{suite.project}-{suite.version}.tar.gz"
    dest = cache / "sdists" / want
    if dest.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    say(f"downloading the {suite.label} sdist (pip download --no-binary {suite.project})")
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--no-binary",
                suite.project,
                "--dest",
                tmp,
                f"{suite.project}=={suite.version}",
            ],
            f"downloading the {suite.label} sdist",
        )
        got = [p for p in Path(tmp).iterdir() if p.name.lower() == want.lower()]
        if not got:
            found = ", ".join(p.name for p in Path(tmp).iterdir()) or "nothing"
            raise SetupError(f"pip download of {suite.label} gave {found}, not {want}")
        got[0].replace(dest)
    return dest


def unpack(suite: Suite, tarball: Path, cache: Path) -> Path:
    dest = cache / "src" / f"{suite.project}-{suite.version}"
    stamp = dest / ".peer-unpacked"
    label = f"{tarball.name} without {', '.join(suite.drop) or 'nothing'}\n"
    if stamp.is_file() and stamp.read_text(encoding="utf-8") == label:
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp, tarfile.open(tarball) as tar:
        tar.extractall(tmp, filter="data")
        tops = list(Path(tmp).iterdir())
        if len(tops) != 1 or not tops[0].is_dir():
            raise SetupError(f"{tarball.name} does not hold one top directory")
        for name in suite.drop:
            shutil.rmtree(tops[0] / name)
        tops[0].replace(dest)
    stamp.write_text(label, encoding="utf-8")
    return dest


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def make_venv(suite: Suite, src: Path, cache: Path) -> Path:
    venv = cache / f"venv-{suite.name}"
    python = _venv_python(venv)
    spec = json.dumps(
        {
            "python": sys.version,
            "base": getattr(sys, "_base_executable", sys.executable),
            "install": suite.install,
            "constraints": suite.constraints,
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(spec.encode()).hexdigest()[:16]
    stamp = venv / ".peer-installed"
    if not (python.exists() and stamp.is_file() and stamp.read_text().strip() == digest):
        shutil.rmtree(venv, ignore_errors=True)
        say(f"creating {venv} ({len(suite.install)} requirements; a minute or two)")
        _run([sys.executable, "-m", "venv", str(venv)], f"creating the {suite.name} venv")
        cmd = [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            *suite.install,
        ]
        if suite.constraints:
            cmd += ["-c", str(src / suite.constraints)]
        _run(cmd, f"installing the {suite.name} suite's test deps")
        stamp.write_text(digest + "\n", encoding="utf-8")
    link_fdkit(python)
    return python


def link_fdkit(python: Path) -> None:
    """Make the harness's fdkit importable in the venv (rewritten each run: it may move)."""
    purelib = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        "asking the venv for its site-packages",
    ).strip()
    pth = Path(purelib) / "fdkit-checkout.pth"
    line = f"{fdkit_dir()}\n"
    if not pth.is_file() or pth.read_text(encoding="utf-8") != line:
        pth.write_text(line, encoding="utf-8")
    _run(
        [str(python), "-c", "import fdkit.aio"],
        f"importing fdkit.aio in {python.parent.parent} (from {fdkit_dir()})",
    )


def prepare(suite: Suite) -> SuiteEnv:
    cache = cache_dir()
    tarball = fetch_sdist(suite, cache)
    src = unpack(suite, tarball, cache)
    python = make_venv(suite, src, cache)
    return SuiteEnv(suite, src, python)
