"""Runs a command where io_uring does not exist: ``python no_uring.py CMD [ARG...]``.

Installs a seccomp filter (seccomp(2), ``PR_SET_SECCOMP`` with ``SECCOMP_MODE_FILTER``) that
fails ``io_uring_setup``, ``io_uring_enter`` and ``io_uring_register`` with ENOSYS, as on a
kernel built without io_uring, then execs CMD, which inherits the filter. Tests use it to see
what the suites do on such a machine: skip with the reason, or fail under
``FDKIT_REQUIRE_URING=1``. Linux on x86_64 and aarch64 (the io_uring numbers 425 to 427 are
the same on both); elsewhere it exits 77 without running CMD.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import sys

ARCHES = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}  # AUDIT_ARCH_*
IO_URING_SYSCALLS = (425, 426, 427)  # io_uring_setup, io_uring_enter, io_uring_register
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
BPF_LD_W_ABS, BPF_JEQ_K, BPF_RET_K = 0x20, 0x15, 0x06


def _filter(arch: int) -> bytes:
    """The BPF program: io_uring syscalls of this arch return ENOSYS, all else is allowed."""
    n = len(IO_URING_SYSCALLS)
    prog = [
        (BPF_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (BPF_JEQ_K, 0, n + 1, arch),  # another arch: allow
        (BPF_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    for i, nr in enumerate(IO_URING_SYSCALLS):
        prog.append((BPF_JEQ_K, n - i, 0, nr))  # to the ERRNO return
    prog += [
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS),
    ]
    return b"".join(struct.pack("HBBI", *insn) for insn in prog)


def install() -> None:
    """Installs the filter on this process (and what it execs); OSError when the kernel
    refuses, SystemExit(77) on an arch it does not know."""
    arch = ARCHES.get(os.uname().machine)
    if arch is None:
        raise SystemExit(77)
    code = _filter(arch)
    buf = ctypes.create_string_buffer(code, len(code))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = SockFprog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [
        ctypes.c_int,
        ctypes.c_ulong,
        ctypes.c_void_p,
        ctypes.c_ulong,
        ctypes.c_ulong,
    ]
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


if __name__ == "__main__":
    install()
    os.execvp(sys.argv[1], sys.argv[1:])
