"""Backups of a destination about to be replaced, named as GNU cp names them (``--backup``,
``-b``, ``-S``; the ``VERSION_CONTROL`` and ``SIMPLE_BACKUP_SUFFIX`` variables).

``simple``: ``FILE~`` (or ``FILE`` and the suffix); ``numbered``: ``FILE.~N~``, one more than the
highest number there; ``existing``: numbered when a numbered backup of FILE exists, else simple.
"""

from __future__ import annotations

import errno
import os
import re
from typing import Literal

Backup = Literal["none", "simple", "numbered", "existing"]

#: The words ``--backup=CONTROL`` and ``VERSION_CONTROL`` take, in cp's order, and the kind each
#: means.
CONTROLS: dict[str, Backup] = {
    "none": "none",
    "off": "none",
    "simple": "simple",
    "never": "simple",
    "existing": "existing",
    "nil": "existing",
    "numbered": "numbered",
    "t": "numbered",
}


def simple_suffix(suffix: str | None) -> str:
    """The suffix of a simple backup: ``suffix`` (``-S``), else ``SIMPLE_BACKUP_SUFFIX``, else
    ``~``; one that is empty or holds a ``/`` is ``~``, as cp has it."""
    if suffix is None:
        suffix = os.environ.get("SIMPLE_BACKUP_SUFFIX")
    if not suffix or "/" in suffix:
        return "~"
    return suffix


def _highest(directory: str, base: str) -> int:
    """The highest N of the ``BASE.~N~`` names in ``directory`` (0: none)."""
    pattern = re.compile(re.escape(base) + r"\.~([1-9][0-9]*)~")
    highest = 0
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return 0
    for name in names:
        m = pattern.fullmatch(name)
        if m:
            highest = max(highest, int(m.group(1)))
    return highest


def backup_name(path: str, kind: Backup, suffix: str) -> str:
    """The name the backup of ``path`` gets (``path`` as typed, its directory part kept)."""
    head, base = os.path.split(path)
    if kind in ("numbered", "existing"):
        n = _highest(head, base)
        if kind == "numbered" or n:
            return path[: len(path) - len(base)] + f"{base}.~{n + 1}~"
    return path + suffix


def make_backup(path: str, kind: Backup, suffix: str) -> str | None:
    """Rename ``path`` to its backup name; the name, or None when ``path`` has gone. Other
    failures raise ``OSError``."""
    while True:
        name = backup_name(path, kind, suffix)
        try:
            if kind == "simple" or (kind == "existing" and name == path + suffix):
                os.rename(path, name)
            else:
                # A numbered backup never replaces another: another cp may race for N.
                os.link(path, name, follow_symlinks=False)
                os.unlink(path)
        except FileNotFoundError:
            if os.path.lexists(path):
                raise
            return None
        except FileExistsError:
            continue
        except OSError as e:
            if e.errno in (errno.EPERM, errno.EMLINK, errno.EXDEV) and kind != "simple":
                # No hard links here (a directory, vfat): rename, as cp does then.
                os.rename(path, name)
                return name
            raise
        return name
