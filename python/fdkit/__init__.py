"""fdkit: Linux I/O at kernel speed, from Python.

Submodules:
    fdkit.atomic_pipe  whole messages from many writers over one pipe (Perl Atomic::Pipe format).
    fdkit.copy   shutil's copyfile, copy, copy2, copytree..., each file by the kernel's paths.
    fdkit.fd     fd-native syscalls on plain integer fds (sockets, files, pipes, accept_many).
    fdkit.logging  log records from child processes to the parent through one atomic pipe.
    fdkit.uring  io_uring: availability, the ops this kernel supports, and the Ring API.
    fdkit.serve(dir, ...)  the static file server (fdkit.static_server), hot loop in Rust.
    fdkit.types  Literal and TypedDict types for annotating code that uses fdkit.
    fdkit.zerocopy  transfer (the best kernel path between two fds), Pipe, proxy, relay.
"""

from fdkit import atomic_pipe, copy, fd, uring, zerocopy
from fdkit._fdkit import __version__
from fdkit.static_server import serve

__all__ = ["__version__", "atomic_pipe", "copy", "fd", "serve", "uring", "zerocopy"]
