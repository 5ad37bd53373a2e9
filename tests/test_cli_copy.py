"""`fdkit copy`, run as a user runs it."""

from __future__ import annotations

import hashlib
import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

from fdkit.cli.copy import Progress
from helpers.terminal import final_line, run_on_terminal

FDKIT = shutil.which("fdkit", path=os.path.dirname(sys.executable)) or "fdkit"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FDKIT, "copy", *args], capture_output=True, text=True, timeout=60, check=False
    )


def digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_copies_bytes_and_mode_and_reports_the_path(tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(3 << 20) + b"tail")
    src.chmod(0o640)
    dst = tmp_path / "dst.bin"
    code, terminal, err = run_on_terminal(str(src), str(dst))
    assert code == 0, err
    assert digest(dst) == digest(src)
    assert dst.stat().st_mode & 0o777 == 0o640
    # On a terminal: a final progress line stays, naming the kernel path used.
    line = final_line(terminal)
    assert line.startswith("100.0%")
    assert "via " in line
    assert line.split("via ")[1] in {
        "copy_file_range",
        "sendfile",
        "splice",
        "read_write",
        "ficlone",  # btrfs, XFS: the blocks are shared
    }
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".fdkit-tmp")]
    assert err == ""


def test_into_a_directory_and_over_an_existing_file(tmp_path: Path) -> None:
    src = tmp_path / "a.txt"
    src.write_bytes(b"new contents\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_bytes(b"old contents that are longer\n")
    r = run(str(src), str(out))
    assert r.returncode == 0, r.stderr
    assert (out / "a.txt").read_bytes() == b"new contents\n"


def test_empty_file(tmp_path: Path) -> None:
    src = tmp_path / "empty"
    src.write_bytes(b"")
    r = run(str(src), str(tmp_path / "copy"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "copy").read_bytes() == b""


def test_errors_are_one_line_and_leave_nothing_behind(tmp_path: Path) -> None:
    cases = [
        ([str(tmp_path / "missing"), str(tmp_path / "x")], "No such file or directory"),
        ([str(tmp_path), str(tmp_path / "x")], "-r not specified; omitting directory"),
        ([str(tmp_path / "f"), "/nonexistent-dir/x"], "No such file or directory"),
        ([str(tmp_path / "f"), str(tmp_path / "f")], "are the same file"),
    ]
    (tmp_path / "f").write_bytes(b"data")
    for args, message in cases:
        r = run(*args)
        assert r.returncode == 1, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert message in r.stderr
        assert r.stderr.startswith("fdkit copy: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]
    assert (tmp_path / "f").read_bytes() == b"data"


# ---------------------------------------------------------------------------------------------
# Progress shows elapsed time and ETA, and only on a terminal

LIVE = re.compile(
    r"\r *(\d+\.\d%)  [^\r]+ / [^\r]+  [^\r]+/s  elapsed (\d+:\d\d:\d\d)"
    r"(  ETA \d+:\d\d:\d\d)?  via [\w, ]+"
)


def test_silent_when_stdout_is_not_a_terminal(tmp_path: Path) -> None:
    """As cp: `fdkit copy a b > log`, a pipe or a script's capture gets nothing, and nothing
    goes to stderr but errors (it used to print the final line on stderr, always)."""
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(3 << 20))
    r = run(str(src), str(tmp_path / "dst.bin"))
    assert r.returncode == 0, r.stderr
    assert (r.stdout, r.stderr) == ("", "")
    assert digest(tmp_path / "dst.bin") == digest(src)


def test_the_live_line_shows_elapsed_and_eta_and_the_final_line_elapsed(tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(130 << 20))  # three transfer calls of at most 64 MiB
    # --reflink=never: on btrfs or XFS a clone would take one step, with nothing to draw.
    code, terminal, err = run_on_terminal("--reflink=never", str(src), str(tmp_path / "dst.bin"))
    assert code == 0, err
    draws = list(LIVE.finditer(terminal))
    assert draws, repr(terminal[:500])
    live = [m for m in draws if m.group(1) != "100.0%"]
    assert live, repr(terminal[:500])
    assert all(m.group(3) for m in live), [m.group(0) for m in live]  # an ETA while copying
    final = final_line(terminal)
    assert final.startswith("100.0%  130.0 MiB / 130.0 MiB  "), final
    assert " elapsed " in final, final
    assert "ETA" not in final, final


def test_a_failure_ends_the_live_line_before_the_error(tmp_path: Path) -> None:
    """The first 64 MiB go, the next write fails (RLIMIT_FSIZE: EFBIG): the live line stays on
    the terminal, ended by a newline, and the error is one line on stderr."""
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(70 << 20))
    dst = tmp_path / "dst.bin"
    code, terminal, err = run_on_terminal(
        "--reflink=never",  # the bytes are written, not shared (btrfs, XFS)
        str(src),
        str(dst),
        sh='trap "" XFSZ; ulimit -f 67584',  # 66 MiB in 1 KiB blocks
    )
    assert code == 1
    # cp's words for a failed write(2) (--reflink=never: no copy_file_range).
    assert err == f"fdkit copy: error writing {str(dst)!r}: File too large\n"
    assert LIVE.match(terminal), repr(terminal)
    assert terminal.endswith("\x1b[K\r\n"), repr(terminal)  # the tty turns \n into \r\n
    assert dst.stat().st_size == 67584 << 10  # written in place up to the limit, as cp leaves it


def test_quiet_is_silent_on_a_terminal_too(tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(b"data\n" * 1000)
    code, terminal, err = run_on_terminal("-q", str(src), str(tmp_path / "dst.bin"))
    assert (code, terminal, err) == (0, "", "")
    assert (tmp_path / "dst.bin").read_bytes() == src.read_bytes()


def test_log_writes_the_details_and_summary_on_stderr_with_a_timestamp(tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(1 << 20))
    r = run("-v", "--log", str(src), str(tmp_path / "dst.bin"))
    assert r.returncode == 0, r.stderr
    # As cp -v: each copy on stdout; the log, time-stamped, on stderr only.
    assert r.stdout == f"{str(src)!r} -> {str(tmp_path / 'dst.bin')!r}\n"
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d fdkit copy: "
    first, last = r.stderr.splitlines()
    assert re.fullmatch(
        stamp + r"copying '.+src.bin' \(1\.0 MiB\) to '.+dst.bin' \(new file\)", first
    )
    assert re.fullmatch(stamp + r"copied 1\.0 MiB in \d+\.\d{3} s \(.+/s\) via \w+", last), last
    # -v alone: cp's lines, no log.
    r = run("-v", str(src), str(tmp_path / "dst.bin"))
    assert (r.stdout.count(" -> "), r.stderr) == (1, "")


def test_eta_is_the_rest_at_the_rate_so_far() -> None:
    mib = 1 << 20
    p = Progress(100 * mib, now=1000.0)
    # 25 MiB in 5 s: 5 MiB/s, 75 MiB to go: 15 s.
    assert p.line(25 * mib, "splice", now=1005.0) == (
        " 25.0%  25.0 MiB / 100.0 MiB  5.0 MiB/s  elapsed 0:00:05  ETA 0:00:15  via splice"
    )
    # An hour and more.
    assert p.line(1 * mib, "splice", now=1000.0 + 3600) == (
        "  1.0%  1.0 MiB / 100.0 MiB  291 B/s  elapsed 1:00:00  ETA 99:00:00  via splice"
    )
    # Nothing copied yet: no rate to guess from.
    assert "ETA ?" in p.line(0, "splice", now=1001.0)
    # Done: no ETA.
    assert p.line(100 * mib, "splice", now=1010.0).endswith("elapsed 0:00:10  via splice")


def test_not_a_terminal_means_not_live() -> None:
    with open(os.devnull, "w") as null:
        assert not Progress(10, null).live
    master, slave = pty.openpty()
    try:
        with open(slave, "w", closefd=False) as term:
            assert Progress(10, term).live
            assert not Progress(10, term, quiet=True).live
    finally:
        os.close(master)
        os.close(slave)
