"""`fdkit copy` with GNU cp as the oracle, onto destinations that are already there: each test
runs cp and fdkit with the same command line and compares the destination they leave, their
stdout, their stderr (the program's name aside) and their exit status. Here: -n and -i (from a
pipe and from a terminal), a read-only destination, the mode an existing destination keeps and
a new one takes, --reflink where blocks can and cannot be shared, and the destinations where
writing in place matters (a bind mount, a writable file in a directory the user cannot write,
a file with other hard links), with fdkit's own --atomic, which replaces the file instead and
never leaves it half written.

Whole trees and the mistakes cp refuses are in test_cli_copy_cp_trees.py, every option of `cp
--help` in test_cli_copy_cp_options.py; what they share is in helpers/cli_copy_cp.py."""

from __future__ import annotations

import os
import pty
import random
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from helpers.cli_copy_cp import (
    CP,
    DECLINED,
    FDKIT,
    T_SRC,
    as_nobody,
    cp,
    run,
    shared_dir_fixture,  # noqa: F401  (the fixture shared_dir)
    snapshot,
    unshare_mount,
    words,
)
from helpers.cp_oracle import Since, assert_same, both

pytestmark = pytest.mark.skipif(CP is None, reason="no cp to compare with")


#: ``--reflink=always`` removes the destination it made and could not clone into from cp 9.2;
#: cp 9.1 leaves it empty.
UNCLONED = Since((9, 2), "removal of a destination --reflink=always made but could not clone")


# --- -n, -i, -v, --reflink, and the destination's own mode ------------------------------


def two_dsts(tmp_path: Path) -> Path:
    """``new`` to copy, and ``cp/dst`` and ``fdkit/dst`` to copy it over (each program runs
    in its own directory, so both name ``dst`` alike)."""
    src = tmp_path / "new"
    src.write_bytes(b"new bytes\n")
    for out in ("cp", "fdkit"):
        (tmp_path / out).mkdir()
        (tmp_path / out / "dst").write_bytes(b"old bytes, kept?\n")
    return src


def test_no_clobber_leaves_the_destination(tmp_path: Path) -> None:
    two_dsts(tmp_path)
    want = cp("-n", "../new", "dst", cwd=tmp_path / "cp")
    got = run("-n", "../new", "dst", cwd=tmp_path / "fdkit")
    assert (got.returncode, got.stderr) == (want.returncode, want.stderr)
    assert (tmp_path / "fdkit" / "dst").read_bytes() == b"old bytes, kept?\n"


@pytest.mark.parametrize(
    ("flags", "answer", "replaced"),
    [
        (["-i"], "y\n", True),
        (["-i"], "Yes please\n", True),
        (["-i"], "n\n", False),
        (["-i"], "", False),  # end of input: no
        (["-n", "-i"], "y\n", True),  # the last of -n/-i wins
        (["-i", "-n"], "y\n", False),  # -n: no question, and no failure
    ],
)
def test_interactive_asks_on_stderr_and_reads_stdin_as_cp(
    tmp_path: Path, flags: list[str], answer: str, replaced: bool
) -> None:
    two_dsts(tmp_path)
    want = cp(*flags, "../new", "dst", cwd=tmp_path / "cp", stdin=answer)
    got = run(*flags, "../new", "dst", cwd=tmp_path / "fdkit", stdin=answer)
    declined = flags[-1] == "-i" and not replaced
    assert got.returncode == (1 if declined else 0)
    if not (declined and DECLINED.predated):
        assert got.returncode == want.returncode
    assert got.stderr.replace("fdkit copy: ", "") == want.stderr.replace("cp: ", "")
    assert ((tmp_path / "fdkit" / "dst").read_bytes() == b"new bytes\n") is replaced
    assert (tmp_path / "fdkit" / "dst").read_bytes() == (tmp_path / "cp" / "dst").read_bytes()


def test_read_only_destination_file_as_cp(tmp_path: Path) -> None:
    two_dsts(tmp_path)
    for out in ("cp", "fdkit"):
        (tmp_path / out / "dst").chmod(0o444)
    want = cp("../new", "dst", cwd=tmp_path / "cp")
    got = run("../new", "dst", cwd=tmp_path / "fdkit")
    assert got.returncode == want.returncode
    assert words(got, "fdkit copy: ") == words(want, "cp: ")
    assert snapshot(tmp_path / "fdkit") == snapshot(tmp_path / "cp")
    assert stat.S_IMODE((tmp_path / "fdkit" / "dst").stat().st_mode) == 0o444


def test_an_existing_destination_keeps_its_mode_a_new_one_takes_srcs(tmp_path: Path) -> None:
    src = two_dsts(tmp_path)
    src.chmod(0o4770)
    for out in ("cp", "fdkit"):
        (tmp_path / out / "dst").chmod(0o604)
    assert cp("../new", "dst", "made", cwd=tmp_path / "cp").returncode == 1  # not a directory
    assert cp("../new", "dst", cwd=tmp_path / "cp").returncode == 0
    assert cp("../new", "made", cwd=tmp_path / "cp").returncode == 0
    assert run("../new", "dst", cwd=tmp_path / "fdkit").returncode == 0
    assert run("../new", "made", cwd=tmp_path / "fdkit").returncode == 0
    assert snapshot(tmp_path / "fdkit") == snapshot(tmp_path / "cp")
    assert stat.S_IMODE((tmp_path / "fdkit" / "dst").stat().st_mode) == 0o604
    # A new file: SRC's mode less the umask, and no set-user-ID bit (as cp without -p).
    assert stat.S_IMODE((tmp_path / "fdkit" / "made").stat().st_mode) & 0o7000 == 0


def test_reflink_always_fails_as_cp_where_blocks_cannot_be_shared(tmp_path: Path) -> None:
    """The destination --reflink=always made for the clone is removed once the clone fails;
    one that was there before stays, emptied (it was opened with O_TRUNC)."""
    (tmp_path / "f").write_bytes(b"data")
    for out in ("cp", "fdkit"):
        (tmp_path / out).mkdir()
        (tmp_path / out / "there").write_bytes(b"old bytes\n")
    want = cp("--reflink=always", "../f", "dst", cwd=tmp_path / "cp")
    if want.returncode == 0:
        pytest.skip("this filesystem shares blocks (FICLONE works)")
    got = run("--reflink=always", "../f", "dst", cwd=tmp_path / "fdkit")
    assert got.returncode == want.returncode == 1
    assert words(got, "fdkit copy: ") == words(want, "cp: ")
    assert words(got, "fdkit copy: ") == [
        "failed to clone 'dst' from '../f': Operation not supported"
    ]
    assert os.listdir(tmp_path / "fdkit") == ["there"]
    if not UNCLONED.predated:
        assert os.listdir(tmp_path / "cp") == ["there"]
    want = cp("--reflink=always", "../f", "there", cwd=tmp_path / "cp")
    got = run("--reflink=always", "../f", "there", cwd=tmp_path / "fdkit")
    assert got.returncode == want.returncode == 1
    assert words(got, "fdkit copy: ") == words(want, "cp: ")
    assert (tmp_path / "fdkit" / "there").read_bytes() == b""
    assert (tmp_path / "cp" / "there").read_bytes() == b""
    # --atomic leaves nothing behind.
    got = run("--atomic", "--reflink=always", "f", "atomic", cwd=tmp_path)
    assert got.returncode == 1
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".fdkit-tmp")]
    assert not (tmp_path / "atomic").exists()
    for how in ("auto", "never"):
        r = run(f"--reflink={how}", "f", how, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert (tmp_path / how).read_bytes() == b"data"


def test_a_bare_reflink_means_always_and_takes_no_operand(tmp_path: Path) -> None:
    """cp reads ``--reflink``'s value only after ``=``: ``cp --reflink f g`` copies f to g
    with ``always``. fdkit's argument parser must not take ``f`` for the value."""
    (tmp_path / "f").write_bytes(b"data")
    for out in ("cp", "fdkit"):
        (tmp_path / out).mkdir()
    want = cp("--reflink", "../f", "g", cwd=tmp_path / "cp")
    got = run("--reflink", "../f", "g", cwd=tmp_path / "fdkit")
    assert got.returncode == want.returncode, (got.stderr, want.stderr)
    assert words(got, "fdkit copy: ") == words(want, "cp: ")
    # Where blocks can be shared both made g; elsewhere both failed to clone and made none.
    made = tmp_path / "fdkit" / "g"
    assert made.exists() is (got.returncode == 0)
    if got.returncode == 0:
        assert made.read_bytes() == (tmp_path / "cp" / "g").read_bytes() == b"data"
    elif not UNCLONED.predated:
        assert not (tmp_path / "cp" / "g").exists()
    # After ``--`` it is an operand (a file named --reflink), as for cp.
    (tmp_path / "--reflink").write_bytes(b"odd name")
    got = run("--", "--reflink", "h", cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "h").read_bytes() == b"odd name"


def test_reflink_where_the_filesystem_shares_blocks(tmp_path: Path) -> None:
    """On btrfs or XFS (TMPDIR there): FICLONE is the path, and the bytes are the same."""
    src = tmp_path / "f"
    src.write_bytes(os.urandom(1 << 20))
    if cp("--reflink=always", str(src), str(tmp_path / "probe")).returncode != 0:
        pytest.skip("the filesystem of the temporary directory cannot share blocks")
    r = run("--log", "--reflink=always", str(src), str(tmp_path / "clone"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "clone").read_bytes() == src.read_bytes()
    assert "via ficlone" in r.stderr
    # never: a copy that owns its blocks, as cp's (copy_file_range would share them here).
    r = run("--log", "--reflink=never", str(src), str(tmp_path / "own"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "own").read_bytes() == src.read_bytes()
    assert "via ficlone" not in r.stderr
    if shutil.which("filefrag") is not None:
        os.sync()
        frags = subprocess.run(
            ["filefrag", "-v", str(tmp_path / "clone"), str(tmp_path / "own")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        clone, own = frags.split("File size of")[1:]
        assert "shared" in clone, frags
        assert "shared" not in own, frags


def test_reflink_never_copies_dense_and_sparse_files(tmp_path: Path) -> None:
    dense = tmp_path / "dense"
    dense.write_bytes(os.urandom((3 << 20) + 17))
    sparse = tmp_path / "sparse"
    with sparse.open("wb") as f:
        f.seek(5 << 20)
        f.write(os.urandom(70_000))
        f.truncate(12 << 20)
    for src in (dense, sparse):
        dst = tmp_path / f"{src.name}.copy"
        r = run("--reflink=never", str(src), str(dst))
        assert r.returncode == 0, r.stderr
        assert dst.read_bytes() == src.read_bytes()
        assert dst.stat().st_blocks <= src.stat().st_blocks + 16


@pytest.mark.parametrize(("answer", "replaced"), [(b"y\n", True), (b"n\n", False)])
def test_interactive_on_a_terminal(tmp_path: Path, answer: bytes, replaced: bool) -> None:
    """-i with stdin on a terminal, as a user at a shell types the answer."""
    two_dsts(tmp_path)
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [FDKIT, "copy", "-i", "../new", "dst"],
            cwd=tmp_path / "fdkit",
            stdin=slave,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert proc.stderr is not None
        assert proc.stderr.read(len(b"fdkit copy: overwrite 'dst'? ")) == (
            b"fdkit copy: overwrite 'dst'? "
        )
        os.write(master, answer)
        assert proc.wait(timeout=30) == (0 if replaced else 1)
        assert proc.stderr.read() == b""
        proc.stderr.close()
    finally:
        os.close(master)
        os.close(slave)
    want = b"new bytes\n" if replaced else b"old bytes, kept?\n"
    assert (tmp_path / "fdkit" / "dst").read_bytes() == want


# --- writing in place: where a replace fails and cp succeeds ------------------------------


def test_a_file_with_other_hard_links_is_updated_under_every_name(tmp_path: Path) -> None:
    """`ln h1 h2; cp src h1` writes into the file h1 and h2 both name (it used to replace h1
    with a new file, leaving h2 with the old bytes)."""

    def dest(root: Path) -> None:
        (root / "h1").write_bytes(b"old bytes, and more of them\n")
        os.link(root / "h1", root / "h2")

    def src(root: Path) -> None:
        (root / "src").write_bytes(b"new bytes\n")

    theirs, ours = both(tmp_path, src, "src", "@/h1", dest=dest)
    assert_same(theirs, ours)
    assert ours.code == 0, ours.stderr
    h1, h2 = tmp_path / "fdkit" / "h1", tmp_path / "fdkit" / "h2"
    assert h2.read_bytes() == b"new bytes\n"
    assert os.stat(h1).st_ino == os.stat(h2).st_ino
    assert os.stat(h1).st_nlink == 2
    # --atomic replaces h1: h2 keeps the old bytes (that is what it is for).
    (tmp_path / "fdkit" / "h1").write_bytes(b"old again\n")
    r = run("--atomic", "shared/src", "fdkit/h1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert h1.read_bytes() == b"new bytes\n"
    assert h2.read_bytes() == b"old again\n"
    assert os.stat(h1).st_nlink == 1


def test_a_bind_mounted_destination_is_written_into(tmp_path: Path) -> None:
    """A file bind-mounted onto another (as a container's /etc/resolv.conf is): cp writes
    into it; renaming over a mount point fails with EBUSY. Run in a private mount namespace,
    each program with its own mount."""
    prefix = unshare_mount()
    (tmp_path / "src").write_bytes(b"nameserver 10.0.0.1\n")
    for who in ("cp", "fdkit"):
        (tmp_path / f"{who}-backing").write_bytes(b"nameserver 192.0.2.1\n")
        (tmp_path / f"{who}-mountpoint").write_bytes(b"underneath\n")
    script = (
        'mount --bind "$1-backing" "$1-mountpoint" && shift && "$@"; rc=$?; '
        'cat "$WHO-mountpoint"; exit $rc'
    )
    results = {}
    for who, program in (("cp", ["cp"]), ("fdkit", [FDKIT, "copy"])):
        r = subprocess.run(
            [*prefix, "sh", "-c", script, "sh", who, *program, "src", f"{who}-mountpoint"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=tmp_path,
            env={**os.environ, "WHO": who, "LC_ALL": "C"},
        )
        results[who] = r
    assert results["fdkit"].returncode == results["cp"].returncode == 0, results
    assert results["fdkit"].stdout == results["cp"].stdout == "nameserver 10.0.0.1\n"
    assert results["fdkit"].stderr == ""
    # The mount's file got the bytes; the file underneath the mount point did not.
    assert (tmp_path / "fdkit-backing").read_bytes() == b"nameserver 10.0.0.1\n"
    assert (tmp_path / "fdkit-mountpoint").read_bytes() == b"underneath\n"
    # --atomic cannot replace a mount point, and says so as cp would say it.
    r = subprocess.run(
        [
            *prefix,
            "sh",
            "-c",
            script,
            "sh",
            "fdkit",
            FDKIT,
            "copy",
            "--atomic",
            "src",
            "fdkit-mountpoint",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "WHO": "fdkit"},
    )
    assert r.returncode == 1
    assert r.stderr == (
        "fdkit copy: cannot create regular file 'fdkit-mountpoint': Device or resource busy\n"
    )
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".fdkit-tmp")]


def test_a_writable_file_in_a_directory_the_user_cannot_write(shared_dir: Path) -> None:
    """A user may write a file whose directory they may not: cp writes into it; a temporary
    file beside it cannot be made."""
    prefix = as_nobody()
    for who in ("cp", "fdkit"):
        d = shared_dir / who
        d.mkdir()
        (d / "target").write_bytes(b"old\n")
        (d / "target").chmod(0o666)
        d.chmod(0o555)
    (shared_dir / "src").write_bytes(b"new\n")
    (shared_dir / "src").chmod(0o644)
    try:
        want = cp("src", "cp/target", cwd=shared_dir, prefix=prefix)
        got = run("src", "fdkit/target", cwd=shared_dir, prefix=prefix)
        atomic = run("--atomic", "src", "fdkit/target", cwd=shared_dir, prefix=prefix)
    finally:
        for who in ("cp", "fdkit"):
            (shared_dir / who).chmod(0o755)
    assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr)
    assert got.returncode == 0, got.stderr
    assert (shared_dir / "fdkit" / "target").read_bytes() == b"new\n"
    assert sorted(os.listdir(shared_dir / "fdkit")) == ["target"]
    if prefix:
        assert atomic.returncode == 1
        assert atomic.stderr == (
            "fdkit copy: cannot create regular file 'fdkit/target': Permission denied\n"
        )


# --- --atomic, fdkit's own: a replace, never a half-written destination --------------------


def test_atomic_never_leaves_a_half_written_destination(tmp_path: Path) -> None:
    """A write that fails half way (RLIMIT_FSIZE: EFBIG): in place, the destination is left
    as far as it got, as cp leaves it; --atomic leaves the old file whole and nothing else."""
    src = tmp_path / "src"
    src.write_bytes(random.Random(1).randbytes(3 << 20))
    for name in ("inplace", "atomic"):
        (tmp_path / name).write_bytes(b"the old bytes\n")
    limit = 'trap "" XFSZ; ulimit -f 1024; exec "$@"'
    inplace = subprocess.run(
        ["sh", "-c", limit, "sh", FDKIT, "copy", "src", "inplace"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    atomic = subprocess.run(
        ["sh", "-c", limit, "sh", FDKIT, "copy", "--atomic", "src", "atomic"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert inplace.returncode == atomic.returncode == 1
    assert 0 < (tmp_path / "inplace").stat().st_size < 3 << 20
    assert (tmp_path / "atomic").read_bytes() == b"the old bytes\n"
    assert sorted(os.listdir(tmp_path)) == ["atomic", "inplace", "src"]
    assert "File too large" in atomic.stderr


def test_atomic_keeps_the_destinations_mode_and_gives_a_new_one_srcs(tmp_path: Path) -> None:
    (tmp_path / "src").write_bytes(b"new\n")
    (tmp_path / "src").chmod(0o751)
    (tmp_path / "kept").write_bytes(b"old\n")
    (tmp_path / "kept").chmod(0o604)
    os.utime(tmp_path / "src", ns=(T_SRC, T_SRC))
    for args in (
        ("--atomic", "src", "kept"),
        ("--atomic", "src", "made"),
        ("--atomic", "-p", "src", "timed"),
    ):
        r = run(*args, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    assert stat.S_IMODE((tmp_path / "kept").stat().st_mode) == 0o604
    assert stat.S_IMODE((tmp_path / "made").stat().st_mode) == 0o751 & ~_umask()
    assert (tmp_path / "timed").stat().st_mtime_ns == T_SRC
    assert stat.S_IMODE((tmp_path / "timed").stat().st_mode) == 0o751
    for name in ("kept", "made", "timed"):
        assert (tmp_path / name).read_bytes() == b"new\n"
    assert sorted(os.listdir(tmp_path)) == ["kept", "made", "src", "timed"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
