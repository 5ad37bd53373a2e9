"""fdkit: Linux I/O at kernel speed, from Python.

Submodules:
    fdkit.atomic_pipe  whole messages from many writers over one pipe (Perl Atomic::Pipe format).
    fdkit.fd     fd-native syscalls on plain integer fds (sockets, files, pipes, accept_many).
    fdkit.uring  io_uring availability and the operations this kernel supports.
    fdkit.zerocopy  transfer (the best kernel path between two fds), Pipe, proxy, relay.
"""

from fdkit import atomic_pipe, fd, uring, zerocopy
from fdkit._fdkit import __version__
from fdkit.serve import serve

__all__ = ["__version__", "atomic_pipe", "fd", "serve", "uring", "zerocopy"]
