"""io_uring: whether it works on this machine, and which operations the kernel supports.

The ring API and the native servers build on this; callers use :func:`available` to choose
between io_uring and the epoll fallback, and ``fdkit doctor`` prints :func:`probe`.
"""

from __future__ import annotations

from typing import TypedDict

from fdkit._fdkit import uring_probe as _uring_probe


class ProbeResult(TypedDict):
    """What :func:`probe` reports."""

    available: bool
    reason: str | None
    ops: dict[str, bool]
    defer_taskrun: bool


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
        )
    return _cached


def available() -> tuple[bool, str | None]:
    """``(True, None)`` when io_uring works here, else ``(False, reason)``.

    The reason names the errno and its likely cause (``ENOSYS``: kernel too old or built without
    io_uring; ``EPERM``: a seccomp filter or the ``kernel.io_uring_disabled`` sysctl).
    """
    p = probe()
    return p["available"], p["reason"]


__all__ = ["ProbeResult", "available", "probe"]
