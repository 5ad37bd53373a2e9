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

from typing import Any

from fdkit import atomic_pipe, fd, uring, zerocopy
from fdkit._fdkit import __version__
from fdkit.static_server import serve

__all__ = ["__version__", "atomic_pipe", "copy", "fd", "serve", "uring", "zerocopy"]


def __getattr__(name: str) -> Any:
    """``fdkit.copy`` is imported when first used: it imports ``shutil`` (and with it zlib,
    bz2 and lzma, about 15 ms), which a program that copies nothing should not pay for."""
    if name == "copy":
        import importlib

        return importlib.import_module("fdkit.copy")
    raise AttributeError(f"module 'fdkit' has no attribute {name!r}")
