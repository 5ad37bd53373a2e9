"""fdkit: Linux I/O at kernel speed, from Python.

Submodules:
    fdkit.fd     fd-native syscalls on plain integer fds (sockets, files, pipes, accept_many).
    fdkit.uring  io_uring availability and the operations this kernel supports.
"""

from fdkit import fd, uring
from fdkit._fdkit import __version__

__all__ = ["__version__", "fd", "uring"]
