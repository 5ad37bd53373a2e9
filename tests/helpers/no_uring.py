"""Runs a command where io_uring does not exist, or is only partly allowed:
``python no_uring.py [--deny setup,enter,register] [--errno ENOSYS|EPERM|...] CMD [ARG...]``.

Installs a seccomp filter (seccomp(2), ``PR_SET_SECCOMP`` with ``SECCOMP_MODE_FILTER``) that
fails the chosen io_uring syscalls with the chosen errno, then execs CMD, which inherits the
filter. The default (no options) fails ``io_uring_setup``, ``io_uring_enter`` and
``io_uring_register`` with ENOSYS, as on a kernel built without io_uring; tests use it to see
what the suites do on such a machine: skip with the reason, or fail under
``FDKIT_REQUIRE_URING=1``. ``--deny enter --errno EPERM`` is a container's policy that lets a
ring be set up but not entered: what must not be taken for a working io_uring. Linux on x86_64
and aarch64 (the io_uring numbers 425 to 427 are the same on both); elsewhere it exits 77
without running CMD.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import sys
from collections.abc import Sequence

ARCHES = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}  # AUDIT_ARCH_*
IO_URING_SYSCALLS = (425, 426, 427)  # io_uring_setup, io_uring_enter, io_uring_register
#: ``--deny`` names: the syscalls' numbers (the same on x86_64 and aarch64)
SYSCALL_NUMBERS = {"setup": 425, "enter": 426, "register": 427}
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
BPF_LD_W_ABS, BPF_JEQ_K, BPF_RET_K = 0x20, 0x15, 0x06


def _filter(
    arch: int, syscalls: Sequence[int] = IO_URING_SYSCALLS, err: int = errno.ENOSYS
) -> bytes:
    """The BPF program: ``syscalls`` of this arch return ``err``, all else is allowed."""
    n = len(syscalls)
    prog = [
        (BPF_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (BPF_JEQ_K, 0, n + 1, arch),  # another arch: allow
        (BPF_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    for i, nr in enumerate(syscalls):
        prog.append((BPF_JEQ_K, n - i, 0, nr))  # to the ERRNO return
    prog += [
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | err),
    ]
    return b"".join(struct.pack("HBBI", *insn) for insn in prog)


def install(syscalls: Sequence[int] = IO_URING_SYSCALLS, err: int = errno.ENOSYS) -> None:
    """Installs the filter failing ``syscalls`` with ``err`` on this process (and what it
    execs); OSError when the kernel refuses, SystemExit(77) on an arch it does not know."""
    arch = ARCHES.get(os.uname().machine)
    if arch is None:
        raise SystemExit(77)
    code = _filter(arch, syscalls, err)
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


def _syscalls(names: str) -> list[int]:
    try:
        return [SYSCALL_NUMBERS[n.strip()] for n in names.split(",") if n.strip()]
    except KeyError as exc:
        raise SystemExit(
            f"no_uring.py: unknown io_uring syscall {exc.args[0]!r} (setup, enter, register)"
        ) from None


def _errno(name: str) -> int:
    value = int(name) if name.isdigit() else getattr(errno, name.upper(), None)
    if not isinstance(value, int):
        raise SystemExit(f"no_uring.py: unknown errno {name!r}")
    return value


def parse(argv: Sequence[str]) -> tuple[list[int], int, list[str]]:
    """``[--deny NAMES] [--errno NAME] [--] CMD [ARG...]`` (options only before CMD, so that
    CMD's own are left alone): the syscall numbers to deny, the errno, the command."""
    syscalls, err = list(IO_URING_SYSCALLS), errno.ENOSYS
    args = list(argv)
    while args and args[0].startswith("--"):
        opt = args.pop(0)
        if opt == "--":
            break
        name, eq, value = opt.partition("=")
        if not eq:
            if not args:
                raise SystemExit(f"no_uring.py: {name} needs a value")
            value = args.pop(0)
        if name == "--deny":
            syscalls = _syscalls(value)
        elif name == "--errno":
            err = _errno(value)
        else:
            raise SystemExit(f"no_uring.py: unknown option {name}")
    if not args or not syscalls:
        raise SystemExit("usage: no_uring.py [--deny setup,enter,register] [--errno E] CMD...")
    return syscalls, err, args


if __name__ == "__main__":
    _deny, _err, _cmd = parse(sys.argv[1:])
    install(_deny, _err)
    os.execvp(_cmd[0], _cmd)
