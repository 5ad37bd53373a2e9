"""Where the benchmark harness lives: ``bench/`` of the source tree, run as ``python -m bench``
or ``make bench``, with its child programs as files beside it; the package (what the wheel
carries) never imports it and has no command that runs it."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.bench import MAKE, REPO, fake_bin, missing_packages, python_m_bench

# isort: split
# (bench/ is importable once helpers.bench has put the source tree on sys.path)
import bench as benchmarks
from bench._common import TINY_ENV

pytestmark = pytest.mark.source_tree


def _as_installed(tmp_path: Path) -> dict[str, str]:
    """An environment importing fdkit from a copy of ``python/fdkit`` alone (what the wheel
    carries: the library and the CLI) under ``tmp_path/site``."""
    site = tmp_path / "site"
    shutil.copytree(
        REPO / "python" / "fdkit", site / "fdkit", ignore=shutil.ignore_patterns("__pycache__")
    )
    return dict(os.environ, PYTHONPATH=str(site))


def _fdkit(
    env: dict[str, str], cwd: Path, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fdkit", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _imported_modules(path: Path) -> set[str]:
    """The top-level names of every module ``path`` imports (absolute imports only)."""
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_the_package_never_reaches_for_the_harness(tmp_path: Path) -> None:
    """The package carries no harness and no command that runs one: no module of python/fdkit
    imports `bench`, or looks for a source tree to import it from; installed alone (here: a
    copy of python/fdkit), `fdkit bench` is an invalid choice, inside a clone as outside."""
    for path in sorted((REPO / "python" / "fdkit").rglob("*.py")):
        assert "bench" not in _imported_modules(path), path
        assert 'importlib.import_module("bench' not in path.read_text(), path
    env = _as_installed(tmp_path)
    for cwd in (tmp_path, REPO):
        r = _fdkit(env, cwd, "bench", "--list")
        assert r.returncode == 2, (cwd, r.stdout, r.stderr)
        assert "invalid choice: 'bench'" in r.stderr
        helped = _fdkit(env, cwd, "--help")
        assert helped.returncode == 0
        assert "bench" not in helped.stdout


def test_python_dash_m_bench_is_the_same_front_end() -> None:
    """`python -m bench` from the repository root: --list, and one line for an unknown name."""
    listed = python_m_bench("--list")
    assert listed.returncode == 0, listed.stderr
    assert [ln.split()[0] for ln in listed.stdout.splitlines()] == list(benchmarks.BENCHES)
    bad = python_m_bench("no-such-bench")
    assert bad.returncode == 2
    assert bad.stdout == ""
    (line,) = bad.stderr.splitlines()
    assert line.startswith("python -m bench: unknown benchmark no-such-bench (known: accept,")


def test_child_programs_are_files_of_the_harness() -> None:
    """The asyncio servers, the asyncio proxy, the endpoint and the memory holder are modules
    in bench/child/ (linted and type-checked), run by path; none is kept in a string."""
    from bench import child

    for name in ("asyncio_servers", "asyncio_proxy", "endpoint", "memory_holder", "aio_servers",
                 "aio_uvicorn", "aio_tls_servers"):  # fmt: skip
        assert Path(child.script(name)) == REPO / "bench" / "child" / f"{name}.py"
    with pytest.raises(FileNotFoundError, match="no child program"):
        child.script("no_such_child")


VENV_PY = REPO / ".venv" / "bin" / "python"


@pytest.mark.skipif(MAKE is None or not VENV_PY.exists(), reason="no make, or no .venv here")
def test_make_bench_json_prints_the_document_alone(tmp_path: Path) -> None:
    """`make bench JSON=1` prints the JSON document alone on stdout: no command echoed by make,
    and bench-tools' words (here: installing the missing tools with a fake apt-get) on
    stderr. The set-up stamps are taken as done (-o) so that nothing is rebuilt here."""
    assert MAKE is not None
    bin_ = fake_bin(tmp_path, uid=0)
    stamps = ["-o", ".venv/.fdkit-built-release", "-o", ".venv/.deps-installed"]
    stamps += ["-o", ".venv/.bench-deps-installed"]
    proc = subprocess.run(
        [MAKE, *stamps, "bench", "BENCH=memory", "JSON=1"],
        cwd=REPO,  # as a user types it there (`make -C DIR` makes make print its directory)
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": str(bin_), "HOME": os.environ.get("HOME", "/"), TINY_ENV: "1"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # the whole of stdout, nothing before or after
    assert [r["id"] for r in doc["results"]] == ["fd_memory"]
    assert set(doc) == {"machine", "results"}
    if missing_packages():
        assert "bench-tools: installing" in proc.stderr
        assert (tmp_path / "calls").exists()
