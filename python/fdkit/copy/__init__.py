"""Copy files and trees as :mod:`shutil` does, each file's bytes by the kernel's paths.

:func:`copyfile`, :func:`copy`, :func:`copy2`, :func:`copytree`, :func:`copymode` and
:func:`copystat` take what shutil's functions take, return what they return and raise what
they raise (:class:`shutil.SameFileError`, :class:`shutil.SpecialFileError`,
:class:`shutil.Error` with its list of failures, ``IsADirectoryError``...): a program changes
``shutil.copytree(...)`` into ``fdkit.copy.copytree(...)`` and nothing else.

What differs is how the bytes move. Where shutil calls ``sendfile`` (and ``read``/``write``
after it), each file here is copied by :func:`fdkit.zerocopy.transfer`'s paths:

* the blocks are shared (``ioctl(FICLONE)``) where the filesystem can (btrfs, XFS): a copy of
  any size in one call, its blocks copied only once written;
* else ``copy_file_range`` (inside the kernel, no copy through user space), then ``sendfile``,
  ``splice`` and ``read``/``write`` as the files allow;
* a sparse source stays sparse: only the extents ``lseek(SEEK_DATA/SEEK_HOLE)`` finds are
  copied, and the holes are made with ``ftruncate`` (shutil writes the zeros);
* a file is read to its end, never sized by ``stat``: procfs and sysfs files, whose size says
  0 or 4096, copy to their content.

A destination that exists is written in place, as ``open(dst, "wb")`` writes it: its other
hard links see the new bytes, its mode and owner stay (:func:`copy2` then gives it the
source's). The ``fdkit copy`` command (GNU cp's options) runs on the same engine.

That engine, cp's semantics as a library, is importable from here too (outside ``__all__``,
which is shutil's six): ``Run(options, reporter).run(operands)`` copies as
``cp [OPTION]... OPERANDS`` does and returns cp's exit status; ``Options`` holds cp's options
once read (their ``Literal`` types: ``Backup``, ``Dereference``, ``Interactive``, ``Update``);
``Reporter`` is where a run writes cp's ``-v`` lines, errors and prompts (a subclass adds
progress, given each file's ``Copied``); ``UsageError`` is a command line cp refuses.
"""

from fdkit.copy._backup import Backup as Backup
from fdkit.copy._cp import Run as Run
from fdkit.copy._cp import UsageError as UsageError
from fdkit.copy._data import Copied as Copied
from fdkit.copy._options import Dereference as Dereference
from fdkit.copy._options import Interactive as Interactive
from fdkit.copy._options import Options as Options
from fdkit.copy._options import Reporter as Reporter
from fdkit.copy._options import Update as Update
from fdkit.copy._shutil import copy, copy2, copyfile, copymode, copystat, copytree

__all__ = ["copy", "copy2", "copyfile", "copymode", "copystat", "copytree"]
