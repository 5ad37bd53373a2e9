"""fdkit: Linux I/O at kernel speed, from Python.

Submodules:
    fdkit.fd    fd-native syscalls on plain integer fds (sockets, files, pipes, accept_many).
"""

from fdkit import fd
from fdkit._fdkit import __version__

__all__ = ["__version__", "fd"]
