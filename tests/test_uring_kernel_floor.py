"""The kernel floor of the io_uring engines (Linux 6.0) and the parsing of the kernel's release
are the core's (``KernelVersion::check_min``), exported as ``_fdkit.uring_kernel_check``:
``fdkit.aio`` asks it instead of reading ``uname`` itself."""

from __future__ import annotations

import os
import re

import pytest

from fdkit import _fdkit
from fdkit.aio import EventLoop, _loop, engine_unavailable


def test_the_check_passes_exactly_from_linux_6_0() -> None:
    release = os.uname().release
    major, minor = (int(n) for n in re.findall(r"\d+", release)[:2])
    reason = _fdkit.uring_kernel_check("the io_uring engine")
    if (major, minor) >= (6, 0):
        assert reason is None
    else:
        assert reason == f"the io_uring engine needs Linux 6.0; this kernel is {release}"


def test_fdkit_aio_refuses_io_uring_for_the_reason_the_core_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reason = "the io_uring engine needs Linux 6.0; this kernel is 5.15.0-test"
    monkeypatch.setattr(_fdkit, "uring_kernel_check", lambda what: reason)
    assert _loop._make_reactor({}) == (None, reason)
    assert engine_unavailable("io_uring") == reason
    with pytest.raises(OSError, match=f"^.*io_uring engine unavailable: {re.escape(reason)}$"):
        EventLoop(engine="io_uring")
