"""`fdkit.copy` with `shutil` as the oracle: each call runs with shutil on one tree and with
fdkit.copy on an identical tree beside it, and what they return, what they raise and the trees
they leave must be the same (bytes, modes, times to the nanosecond where copy2/copystat copy
them, symlinks, inodes shared, extended attributes). Then what fdkit does better: holes kept,
blocks shared where the filesystem can, procfs files read to their end.

A property test (hypothesis) does the same for copytree on random small trees."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fdkit
import fdkit.copy
from helpers.cp_oracle import snapshot

T_SRC = 1_500_000_000_987_654_321


def make_files(root: Path) -> None:
    """Files, links and special files the calls below copy (the same each time)."""
    (root / "f").write_bytes(b"file bytes\n" * 100)
    (root / "f").chmod(0o751)
    os.utime(root / "f", ns=(T_SRC - 5, T_SRC))
    with contextlib.suppress(OSError):
        os.setxattr(root / "f", "user.fdkit", b"from f")
    (root / "g").write_bytes(b"g\n")
    (root / "old").write_bytes(b"old contents, longer than the new ones\n" * 10)
    (root / "old").chmod(0o600)
    os.link(root / "old", root / "old-link")
    (root / "lf").symlink_to("f")
    (root / "dang").symlink_to("nowhere")
    (root / "to-old").symlink_to("old")
    (root / "dir").mkdir()
    (root / "dir" / "f").write_bytes(b"dir's f\n")
    os.mkfifo(root / "fifo")
    with (root / "sparse").open("wb") as f:
        f.write(b"data")
        f.truncate(4 << 20)
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(root / "sock"))
    s.close()
    tree = root / "tree"
    (tree / "sub" / "deeper").mkdir(parents=True)
    (tree / "a").write_bytes(b"a\n")
    (tree / "sub" / "b").write_bytes(b"b\n" * 1000)
    (tree / "sub" / "deeper" / "c").write_bytes(b"")
    (tree / "link").symlink_to("a")
    (tree / "dirlink").symlink_to("sub")
    (tree / "dangling").symlink_to("nowhere")
    os.link(tree / "a", tree / "sub" / "a-hardlink")
    (tree / "skip.tmp").write_bytes(b"ignored")
    (tree / "sub" / "deeper").chmod(0o750)
    os.utime(tree / "sub" / "b", ns=(T_SRC, T_SRC))


def outcome(root: Path, call: Callable[[], Any]) -> tuple[object, dict[str, tuple[object, ...]]]:
    """What ``call`` returned or raised, with ``root`` written as ``ROOT``, and the tree."""
    here = os.getcwd()
    os.chdir(root)
    try:
        result: object = ("returned", _relative(call(), root))
    except shutil.Error as e:
        result = ("raised", "shutil.Error", sorted(str(_relative(x, root)) for x in e.args[0]))
    except OSError as e:
        result = ("raised", type(e).__name__, e.errno, _relative(str(e), root))
    finally:
        os.chdir(here)
    return result, snapshot(root, times=True)


def _relative(value: object, root: Path) -> object:
    if isinstance(value, (tuple, list)):
        return type(value)(_relative(v, root) for v in value)
    if isinstance(value, os.PathLike):
        return (type(value).__name__, _relative(os.fspath(value), root))
    if isinstance(value, str):
        return value.replace(str(root), "ROOT")
    return value


def same(tmp_path: Path, build: Callable[[Path], None], call: Callable[[Any], Any]) -> object:
    """``call(shutil)`` in one tree and ``call(fdkit.copy)`` in another; both outcomes must
    be equal. Returns fdkit's."""
    results = []
    for name, module in (("shutil", shutil), ("fdkit", fdkit.copy)):
        root = tmp_path / name
        root.mkdir()
        build(root)
        results.append(outcome(root, functools.partial(call, module)))
    theirs, ours = results
    assert ours[0] == theirs[0]
    differ = {k for k in set(ours[1]) | set(theirs[1]) if ours[1].get(k) != theirs[1].get(k)}
    assert not differ, {k: (theirs[1].get(k), ours[1].get(k)) for k in sorted(differ)}
    return ours[0]


def entry(name: str) -> os.DirEntry[str]:
    """The ``os.DirEntry`` of ``name`` in the current directory (copytree passes these)."""
    with os.scandir(".") as it:
        return next(e for e in it if e.name == name)


CALLS: dict[str, Callable[[Any], Any]] = {
    "copyfile new": lambda m: m.copyfile("f", "new"),
    "copyfile over a file with a hard link": lambda m: m.copyfile("f", "old"),
    "copyfile through a symlink": lambda m: m.copyfile("g", "to-old"),
    "copyfile to a dangling symlink": lambda m: m.copyfile("g", "dang"),
    "copyfile into a directory": lambda m: m.copyfile("f", "dir"),
    "copyfile a directory": lambda m: m.copyfile("dir", "new"),
    "copyfile a missing file": lambda m: m.copyfile("missing", "new"),
    "copyfile to a missing directory": lambda m: m.copyfile("f", "nope/new"),
    "copyfile to a trailing slash": lambda m: m.copyfile("f", "nope/"),
    "copyfile the same file": lambda m: m.copyfile("f", "f"),
    "copyfile a hard link onto itself": lambda m: m.copyfile("old", "old-link"),
    "copyfile onto a symlink to it": lambda m: m.copyfile("f", "lf"),
    "copyfile a fifo": lambda m: m.copyfile("fifo", "new"),
    "copyfile onto a fifo": lambda m: m.copyfile("f", "fifo"),
    "copyfile a socket": lambda m: m.copyfile("sock", "new"),
    "copyfile onto a socket": lambda m: m.copyfile("f", "sock"),
    "copyfile a symlink, followed": lambda m: m.copyfile("lf", "new"),
    "copyfile a symlink, kept": lambda m: m.copyfile("lf", "new", follow_symlinks=False),
    "copyfile a dangling symlink": lambda m: m.copyfile("dang", "new"),
    "copyfile paths": lambda m: m.copyfile(Path("f"), Path("new")),
    "copyfile an absolute path": lambda m: m.copyfile(os.path.abspath("f"), "new"),
    "copyfile a DirEntry": lambda m: m.copyfile(entry("f"), "new"),
    "copy2 a DirEntry": lambda m: m.copy2(entry("lf"), "dir"),
    "copyfile an empty file": lambda m: m.copyfile("dir/f", "dir/f2") and m.copyfile("new", "x"),
    "copy": lambda m: m.copy("f", "new"),
    "copy into a directory": lambda m: m.copy("f", "dir"),
    "copy over": lambda m: m.copy("f", "old"),
    "copy a symlink, kept": lambda m: m.copy("lf", "new", follow_symlinks=False),
    "copy the same file": lambda m: m.copy("f", "."),
    "copy2": lambda m: m.copy2("f", "new"),
    "copy2 into a directory": lambda m: m.copy2("f", Path("dir")),
    "copy2 over": lambda m: m.copy2("f", "old"),
    "copy2 a symlink, kept": lambda m: m.copy2("lf", "new", follow_symlinks=False),
    "copy2 a missing file": lambda m: m.copy2("missing", "new"),
    "copymode": lambda m: m.copymode("f", "old"),
    "copystat": lambda m: m.copystat("f", "old"),
    "copystat, symlinks": lambda m: m.copystat("lf", "to-old", follow_symlinks=False),
    "copytree": lambda m: m.copytree("tree", "copy"),
    "copytree, symlinks": lambda m: m.copytree("tree", "copy", symlinks=True),
    "copytree, dangling ignored": lambda m: m.copytree(
        "tree", "copy", ignore_dangling_symlinks=True
    ),
    "copytree, ignore": lambda m: m.copytree(
        "tree", Path("copy"), symlinks=True, ignore=shutil.ignore_patterns("*.tmp", "deeper")
    ),
    "copytree, copy": lambda m: m.copytree("tree", "copy", symlinks=True, copy_function=m.copy),
    "copytree, shutil's copy2": lambda m: m.copytree("tree", "copy", copy_function=shutil.copy2),
    "copytree onto a directory": lambda m: m.copytree("tree", "dir"),
    "copytree, dirs_exist_ok": lambda m: (
        m.copytree("tree", "copy", symlinks=True),
        m.copytree("tree", "copy", symlinks=True, dirs_exist_ok=True),
    ),
    "copytree of a file": lambda m: m.copytree("f", "copy"),
    "copytree with a fifo and a socket": lambda m: m.copytree(
        ".", os.getcwd() + "-all", ignore=shutil.ignore_patterns("sparse")
    ),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_as_shutil(tmp_path: Path, name: str) -> None:
    same(tmp_path, make_files, CALLS[name])


def test_a_destination_with_other_hard_links_is_written_in_place(tmp_path: Path) -> None:
    """As open(dst, "wb") writes it: the inode stays, its other names see the new bytes."""
    make_files(tmp_path)
    ino = os.stat(tmp_path / "old").st_ino
    assert fdkit.copy.copy2(tmp_path / "f", tmp_path / "old") == tmp_path / "old"
    assert os.stat(tmp_path / "old").st_ino == ino
    assert (tmp_path / "old-link").read_bytes() == (tmp_path / "f").read_bytes()
    assert os.stat(tmp_path / "old-link").st_mtime_ns == T_SRC


def test_errors_of_a_tree_are_collected_as_shutil_collects_them(tmp_path: Path) -> None:
    result = same(tmp_path, make_files, CALLS["copytree with a fifo and a socket"])
    assert isinstance(result, tuple)
    assert result[:2] == ("raised", "shutil.Error")
    errors = " ".join(map(str, result[2]))
    assert "is a named pipe" in errors
    assert "No such device or address" in errors  # the socket


def test_a_sparse_file_stays_sparse(tmp_path: Path) -> None:
    """shutil writes the zeros of a hole; fdkit.copy keeps it a hole."""
    make_files(tmp_path)
    if (tmp_path / "sparse").stat().st_blocks * 512 >= 4 << 20:
        pytest.skip("this filesystem does not keep holes")
    fdkit.copy.copyfile(tmp_path / "sparse", tmp_path / "ours")
    shutil.copyfile(tmp_path / "sparse", tmp_path / "theirs")
    assert (tmp_path / "ours").read_bytes() == (tmp_path / "theirs").read_bytes()
    assert (tmp_path / "ours").stat().st_blocks < (tmp_path / "theirs").stat().st_blocks
    assert (tmp_path / "ours").stat().st_blocks <= (tmp_path / "sparse").stat().st_blocks + 16


def test_procfs_files_copy_to_their_content(tmp_path: Path) -> None:
    src = Path("/proc/version")
    if not src.exists():
        pytest.skip("no /proc/version")
    assert fdkit.copy.copyfile(src, tmp_path / "version") == tmp_path / "version"
    assert (tmp_path / "version").read_bytes() == src.read_bytes() != b""


def test_the_package_exports_the_module() -> None:
    assert fdkit.copy.copytree.__module__.startswith("fdkit.copy")
    assert "copy" in fdkit.__all__
    assert sorted(fdkit.copy.__all__) == [
        "copy",
        "copy2",
        "copyfile",
        "copymode",
        "copystat",
        "copytree",
    ]


# --- random small trees --------------------------------------------------------------------

NAMES = st.sampled_from(["a", "b", "c", "d.tmp", "e"])

#: A tree: a dict of name to a file (bytes, some with a block of zeros), a directory (dict)
#: or a symlink (``("link", target)``: a sibling, maybe a directory, maybe nothing).
TREES = st.recursive(
    st.dictionaries(
        NAMES,
        st.one_of(
            st.binary(max_size=3000).map(lambda b: b + bytes(8192) * (len(b) % 3 == 1)),
            # Siblings only (a file, a directory, nothing): "." or ".." would make a loop
            # that copytree without symlinks=True follows until the names grow too long.
            st.sampled_from(["a", "b", "nowhere"]).map(lambda t: ("link", t)),
        ),
        max_size=4,
    ),
    lambda children: st.dictionaries(NAMES, children, max_size=4),
    max_leaves=12,
)


def build_tree(root: Path, tree: dict[str, Any], mode_seed: int) -> None:
    root.mkdir(exist_ok=True)
    for i, (name, entry) in enumerate(sorted(tree.items())):
        path = root / name
        if isinstance(entry, dict):
            build_tree(path, entry, mode_seed + i)
        elif isinstance(entry, tuple):
            path.symlink_to(entry[1])
        else:
            path.write_bytes(entry)
            path.chmod(0o600 | ((mode_seed + i) % 8) << 3)
            os.utime(path, ns=(T_SRC + i, T_SRC + mode_seed))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    tree=TREES,
    mode_seed=st.integers(0, 7),
    symlinks=st.booleans(),
    ignore_dangling=st.booleans(),
    ignore_tmp=st.booleans(),
    existing=st.booleans(),
)
def test_copytree_as_shutil_on_random_trees(
    tmp_path_factory: pytest.TempPathFactory,
    tree: dict[str, Any],
    mode_seed: int,
    symlinks: bool,
    ignore_dangling: bool,
    ignore_tmp: bool,
    existing: bool,
) -> None:
    tmp_path = tmp_path_factory.mktemp("tree")

    def build(root: Path) -> None:
        build_tree(root / "src", tree, mode_seed)
        if existing:
            (root / "dst").mkdir()

    ignore = shutil.ignore_patterns("*.tmp") if ignore_tmp else None
    same(
        tmp_path,
        build,
        lambda m: m.copytree(
            "src",
            "dst",
            symlinks=symlinks,
            ignore=ignore,
            ignore_dangling_symlinks=ignore_dangling,
            dirs_exist_ok=existing,
        ),
    )
