"""io_uring: whether it works on this machine, which operations the kernel supports, and
:class:`Ring`, a safe ring to drive from Python.

Callers use :func:`available` to choose between io_uring and the epoll fallback, and
``fdkit doctor`` prints :func:`probe`.

:class:`Ring` queues operations (``nop``, ``socket``, ``accept`` (multishot, or with the peer's
address, too), ``connect``, ``recv``, ``recv_multishot`` (with :meth:`Ring.provide_buffers`),
``send``, ``send_zc``, ``read``, ``write``, ``splice``, ``tee``, ``shutdown``, ``close_fd``,
``poll_add``, ``timeout``, ``cancel``, ``link_timeout``, ``openat``, ``statx``, ``fsync``,
``sendmsg``, ``recvmsg``, ``read_fixed``, ``write_fixed``), each with an integer ``user_data`` of
your choosing, and :meth:`Ring.wait` returns :class:`Completion` objects carrying it (``op`` is
the method's name, ``fd`` the fd it was on)::

    with Ring() as ring:
        ring.recv(fd, 4096, user_data=1)
        for c in ring.wait():
            if c.error is not None:
                raise c.error
            print(c.user_data, c.data)

Every operation takes the submission flags ``link``, ``hardlink``, ``drain``, ``async_`` and
``skip_success`` as keywords (:class:`fdkit.types.SqeFlags`), and those on an fd take
``fixed=True`` (the fd is then an index into :meth:`Ring.register_files`). Linked operations run
in order; when one fails the rest of its chain completes with ``ECANCELED`` (``hardlink`` goes
on); ``link_timeout`` bounds the operation before it. A ``skip_success`` operation posts no
completion when it succeeds (and, if it fails, the operations linked after it post none either:
the kernel skips them); the ring still knows when it is done, so ``in_flight`` drops to 0.
:meth:`Ring.register_buffers` gives the ring buffers for ``read_fixed``/``write_fixed``, copied
in and out, never lent to Python.

``wait()`` returning ``[]`` means the timeout passed if ``ring.in_flight`` is still non-zero, or
that nothing was left to wait for; ``wait(..., timeout_error=True)`` raises ``TimeoutError`` on
a timeout instead, so ``[]`` then only means "nothing in flight".

The ring keeps every buffer an operation uses until the operation completes; misuse raises
(``ValueError``, ``TypeError``, ``OSError``), it never crashes the interpreter. Closing a ring
cancels what is in flight and waits (at most 2 s) for it.
"""

from __future__ import annotations

from typing import TypedDict

from fdkit._fdkit import Completion, Ring
from fdkit._fdkit import uring_probe as _uring_probe


class ProbeResult(TypedDict):
    """What :func:`probe` reports."""

    available: bool
    reason: str | None
    ops: dict[str, bool]
    defer_taskrun: bool
    skip_success: bool


_cached: ProbeResult | None = None


def probe() -> ProbeResult:
    """Set up a small ring and ask the kernel (``IORING_REGISTER_PROBE``) what it supports.

    The answer is cached: the kernel does not change under a running process.
    """
    global _cached
    if _cached is None:
        raw = _uring_probe()
        _cached = ProbeResult(
            available=bool(raw["available"]),
            reason=raw["reason"],
            ops=dict(raw["ops"]),
            defer_taskrun=bool(raw["defer_taskrun"]),
            skip_success=bool(raw["skip_success"]),
        )
    return _cached


def available() -> tuple[bool, str | None]:
    """``(True, None)`` when io_uring works here, else ``(False, reason)``.

    The reason names the errno and its likely cause (``ENOSYS``: kernel too old or built without
    io_uring; ``EPERM``: a seccomp filter or the ``kernel.io_uring_disabled`` sysctl).
    """
    p = probe()
    return p["available"], p["reason"]


__all__ = ["Completion", "ProbeResult", "Ring", "available", "probe"]
