"""Backups of a destination about to be replaced, named as GNU cp names them (``--backup``,
``-b``, ``-S``; the command line reads those and the ``VERSION_CONTROL`` and
``SIMPLE_BACKUP_SUFFIX`` variables into :class:`~fdkit.copy._options.Options`).

``simple``: ``FILE~`` (or ``FILE`` and the suffix); ``numbered``: ``FILE.~N~``, one more than the
highest number there; ``existing``: numbered when a numbered backup of FILE exists, else simple.
"""

from __future__ import annotations

import errno
import os
import re
from typing import Literal

Backup = Literal["none", "simple", "numbered", "existing"]


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
