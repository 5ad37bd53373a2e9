"""The package as a user installs it: which fdkit this run tests, its version, licences, types.

`make test` runs these in the source tree on the editable build of python/; `make test-wheels`
runs them outside the tree on each wheel installed in a fresh venv.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import fdkit

ROOT = Path(__file__).resolve().parent.parent
SOURCE_TREE = (ROOT / "Makefile").is_file()  # a checkout; an unpacked sdist has none


def test_the_fdkit_under_test_is_the_one_this_run_means() -> None:
    where = Path(fdkit.__file__).resolve()
    if SOURCE_TREE:
        # the editable build: a stale wheel in the venv would hide this tree's changes
        assert where.is_relative_to(ROOT / "python"), where
    else:
        site = {Path(sysconfig.get_path(k)).resolve() for k in ("purelib", "platlib")}
        assert any(where.is_relative_to(s) for s in site), (where, site)


def test_version_is_the_installed_distribution_version() -> None:
    # __version__ is compiled into the extension, the distribution's from the same Cargo.toml:
    # they differ when the extension is stale or came from another build
    assert fdkit.__version__ == importlib.metadata.version("fdkit")


def test_the_distribution_carries_both_licences() -> None:
    dist = importlib.metadata.distribution("fdkit")
    licences = {Path(str(f)).name for f in dist.files or () if "/licenses/" in str(f)}
    assert {"LICENSE-MIT", "LICENSE-APACHE"} <= licences, sorted(map(str, dist.files or ()))
    licenses = f"{dist.name}-{dist.version}.dist-info/licenses"
    for name, words in (("LICENSE-MIT", "the fdkit developers"), ("LICENSE-APACHE", "Version 2.0")):
        assert words in Path(str(dist.locate_file(f"{licenses}/{name}"))).read_text(), name
    assert set(dist.metadata.get_all("License-File") or ()) >= {"LICENSE-MIT", "LICENSE-APACHE"}


def test_the_licence_is_in_the_field_every_pip_shows() -> None:
    # `pip show` of pip 23 reads License only; License-Expression may not stand beside it
    metadata = importlib.metadata.metadata("fdkit")
    assert metadata["License"] == "MIT OR Apache-2.0"
    assert "License-Expression" not in metadata


def test_the_package_ships_its_types() -> None:
    pkg = Path(fdkit.__file__).parent
    assert (pkg / "py.typed").is_file()
    assert (pkg / "_fdkit.pyi").is_file()


def test_a_daemon_thread_in_a_native_call_survives_interpreter_exit() -> None:
    """CPython before 3.14 ends a daemon thread that wants the GIL back during finalization with
    pthread_exit; its forced unwind runs through the extension's Rust frames. It must unwind
    with the system's libgcc_s: a wheel linked with a second, static unwinder (zig's libunwind)
    died here with SIGSEGV after the program had finished."""
    code = textwrap.dedent(
        """
        import gc, os, threading, time
        from fdkit import fd

        r, w = os.pipe()

        class SlowTeardown:
            def __del__(self, sleep=time.sleep, write=os.write):
                sleep(1.0)  # finalizing: meanwhile the poll below returns and wants the GIL
                write(1, b"finalized\\n")

        gc.disable()
        slow = SlowTeardown()
        slow.cycle = slow  # collected (so __del__ runs) only by finalization's last collection
        del slow
        threading.Thread(target=lambda: fd.poll([(r, fd.POLLIN)], 0.3), daemon=True).start()
        time.sleep(0.1)
        print("exiting", flush=True)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert (proc.returncode, proc.stdout) == (0, "exiting\nfinalized\n"), proc.stderr
