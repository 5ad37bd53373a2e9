"""``fdkit doctor``: what this kernel and process allow, checked by trying it.

Each check performs the real call (a small splice, a copy_file_range between two temporary
files, an io_uring setup) rather than trusting the kernel version: containers and seccomp
filters can forbid what the version promises.

``--json`` prints one object whose fields keep one type each, whatever the machine: a number is
a JSON number, a yes/no a boolean, and what cannot be known here (a sysctl that is not
readable, a limit that is unlimited) is ``null``, never a string in its place:

* ``fdkit``, ``python``, ``kernel``, ``machine``: strings; ``cpus``: int or null;
* ``io_uring``: ``available`` (bool), ``reason`` (string or null), ``ops`` (op name → bool),
  ``defer_taskrun`` and ``skip_success`` (bools);
* ``pipe_default_size``, ``pipe_max_size`` (``fs.pipe-max-size``), in bytes, and ``somaxconn``
  (``net.core.somaxconn``): int or null;
* ``rlimit_nofile``: ``soft`` and ``hard``, int, or null for unlimited;
* ``checks``: check name → ``ok`` (bool) and ``detail`` (string);
* ``aio``: ``engine`` (``"io_uring"``, ``"epoll"`` or null when no loop can be made),
  ``reason`` (string, or null on io_uring) and ``ring_wait`` (on io_uring: ``"epoll_wait"``,
  the ring reads the epoll instance, Linux 6.15; ``"poll"``, it polls the epoll fd; else null).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from fdkit import __version__, fd, uring
from fdkit._fdkit import ENGINE_NAMES
from fdkit.cli import _log

#: With ``-v``: each check, its result and how long it took.
log = logging.getLogger("fdkit.cli.doctor")


def _read_sysctl(path: str) -> int | None:
    """A numeric sysctl's value; None when it cannot be read here (no /proc, a sandbox)."""
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _limit(value: int) -> int | None:
    """An rlimit as JSON gives it: the number, or None for unlimited."""
    return None if value == resource.RLIM_INFINITY else value


def _try(check: Callable[[], object]) -> tuple[bool, str]:
    """Run a check; (True, detail) when it works, (False, the error) when it does not."""
    t0 = time.monotonic()
    try:
        detail = check()
    except OSError as e:
        result = False, f"{type(e).__name__}: {e}"
    else:
        result = True, str(detail) if detail is not None else "works"
    log.debug(
        "%s: %s (%.1f ms)",
        check.__name__.removeprefix("_check_"),
        result[1],
        (time.monotonic() - t0) * 1e3,
    )
    return result


def _check_splice() -> str:
    with tempfile.TemporaryFile() as src:
        src.write(b"x" * 4096)
        src.flush()
        r, w = fd.pipe()
        try:
            n = os.splice(src.fileno(), w, 4096, offset_src=0)
            if n != 4096:
                raise OSError(0, f"splice moved {n} of 4096 bytes")
        finally:
            fd.close(r)
            fd.close(w)
    return "file → pipe works"


def _check_copy_file_range() -> str:
    with tempfile.TemporaryFile() as src, tempfile.TemporaryFile() as dst:
        src.write(b"y" * 65536)
        src.flush()
        n = os.copy_file_range(src.fileno(), dst.fileno(), 65536, 0, 0)
        if n != 65536:
            raise OSError(0, f"copy_file_range moved {n} of 65536 bytes")
    return f"works on {tempfile.gettempdir()}"


def _check_sendfile() -> str:
    with tempfile.TemporaryFile() as src:
        src.write(b"z" * 4096)
        src.flush()
        a, b = fd.socketpair()
        try:
            n = fd.sendfile(a, src.fileno(), 0, 4096)
            if n != 4096:
                raise OSError(0, f"sendfile moved {n} of 4096 bytes")
        finally:
            fd.close(a)
            fd.close(b)
    return "file → socket works"


def _pipe_default_size() -> int | None:
    """A new pipe's size in bytes; None when a pipe cannot be made here."""
    try:
        r, w = fd.pipe()
    except OSError:
        return None
    try:
        return fd.fcntl(w, 1032)  # F_GETPIPE_SZ
    except OSError:
        return None
    finally:
        fd.close(r)
        fd.close(w)


def collect() -> dict[str, Any]:
    """Everything doctor reports, as a dict (``--json`` prints it as is; the module doc gives
    each field's type)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    t0 = time.monotonic()
    probe = uring.probe()
    log.debug(
        "io_uring probe: %s (%.1f ms)",
        "available" if probe["available"] else probe["reason"],
        (time.monotonic() - t0) * 1e3,
    )
    checks = {
        "splice": _try(_check_splice),
        "copy_file_range": _try(_check_copy_file_range),
        "sendfile": _try(_check_sendfile),
    }
    return {
        "fdkit": __version__,
        "python": sys.version.split()[0],
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "io_uring": probe,
        "pipe_default_size": _pipe_default_size(),
        "pipe_max_size": _read_sysctl("/proc/sys/fs/pipe-max-size"),
        "rlimit_nofile": {"soft": _limit(soft), "hard": _limit(hard)},
        "somaxconn": _read_sysctl("/proc/sys/net/core/somaxconn"),
        "checks": {name: {"ok": ok, "detail": d} for name, (ok, d) in checks.items()},
        "aio": _aio_engine(),
    }


def _aio_engine() -> dict[str, Any]:
    """fdkit.aio here: the engine a new loop gets and why not io_uring (``engine``,
    ``reason``), and whether a loop asked for io_uring could run (``uring_reason``: None where
    it can) and how its ring would wait (``ring_wait``, None where it cannot run)."""
    from fdkit.aio import EventLoop, UringEventLoop, engine_unavailable

    aio: dict[str, Any] = {"uring_reason": None, "ring_wait": None}
    try:
        uring = UringEventLoop()
    except OSError as exc:  # the reason without the error's prefix; else the error itself
        aio["uring_reason"] = engine_unavailable("io_uring") or str(exc)
    else:
        aio["ring_wait"] = uring.ring_wait
        uring.close()
    try:
        loop = EventLoop()
    except (OSError, ValueError) as exc:  # FDKIT_AIO_ENGINE names no engine, or one not here
        return {"engine": None, "reason": str(exc), **aio}
    try:
        return {"engine": loop.engine, "reason": loop.engine_reason, **aio}
    finally:
        loop.close()


def _aio_line(aio: dict[str, Any]) -> str:
    from fdkit.aio._loop import DEFAULT_REASON

    if aio["engine"] is None:
        return f"fdkit.aio         NO LOOP   {aio['reason']}"
    if aio["ring_wait"] is None:
        uring = f"io_uring engine unavailable: {aio['uring_reason']}"
    else:
        how = {
            "epoll_wait": "the ring reads epoll: IORING_OP_EPOLL_WAIT",
            "poll": "the ring polls epoll's fd",
        }[aio["ring_wait"]]
        uring = f"registrations in epoll; {how}"
    if aio["engine"] == "io_uring":
        return f"fdkit.aio         io_uring  ({uring})"
    why = "default" if aio["reason"] == DEFAULT_REASON else aio["reason"]
    if aio["ring_wait"] is not None:
        uring = f"io_uring on request ({uring})"
    return f"fdkit.aio         epoll     {why}; {uring}"


def _or(value: int | None, missing: str) -> str:
    return missing if value is None else str(value)


def _bytes(value: int | None) -> str:
    return "unknown" if value is None else f"{value} bytes"


def _mark(ok: bool) -> str:
    return "yes" if ok else "NO "


def _no_uring_line(reason: str) -> str:
    return f"io_uring          NO   {reason} (fdkit serve and fdkit.aio run on epoll)"


def render(info: dict[str, Any]) -> str:
    lines = [
        f"fdkit {info['fdkit']}  python {info['python']}  "
        f"kernel {info['kernel']} ({info['machine']}, {info['cpus']} cpus)",
    ]
    u = info["io_uring"]
    if u["available"]:
        ops = u["ops"]
        have = [name for name, ok in ops.items() if ok]
        missing = [name for name, ok in ops.items() if not ok]
        lines.append(f"io_uring          yes  ops: {' '.join(have)}")
        if missing:
            lines.append(f"                       missing: {' '.join(missing)}")
        lines.append(
            f"                       SINGLE_ISSUER|DEFER_TASKRUN: "
            f"{'yes' if u['defer_taskrun'] else 'no'}"
        )
    else:
        lines.append(_no_uring_line(u["reason"]))
    lines.append(
        f"pipes             default {_bytes(info['pipe_default_size'])}, "
        f"max {_bytes(info['pipe_max_size'])} (fs.pipe-max-size)"
    )
    nofile = info["rlimit_nofile"]
    lines.append(
        f"RLIMIT_NOFILE     soft {_or(nofile['soft'], 'unlimited')}, "
        f"hard {_or(nofile['hard'], 'unlimited')}"
    )
    lines.append(f"somaxconn         {_or(info['somaxconn'], 'unknown')}")
    for name, c in info["checks"].items():
        lines.append(f"{name:<17} {_mark(c['ok'])}  {c['detail']}")
    lines.append(_aio_line(info["aio"]))
    return "\n".join(lines)


def problems(info: dict[str, Any]) -> list[str]:
    """What does not work here, one line each, as :func:`render` words it (``-q``)."""
    lines = []
    u = info["io_uring"]
    if not u["available"]:
        lines.append(_no_uring_line(u["reason"]))
    else:
        missing = [name for name, ok in u["ops"].items() if not ok]
        if missing:
            lines.append(f"io_uring          ops missing: {' '.join(missing)}")
    for name, c in info["checks"].items():
        if not c["ok"]:
            lines.append(f"{name:<17} {_mark(c['ok'])}  {c['detail']}")
    if u["available"] and info["aio"]["uring_reason"] is not None:
        lines.append(_aio_line(info["aio"]))
    return lines


def unmet(info: dict[str, Any], required: list[str]) -> list[str]:
    """What of ``required`` (``--require``) this machine does not give, one line each."""
    lines = []
    if "io_uring" in required:
        u = info["io_uring"]
        if not u["available"]:
            lines.append(f"io_uring is required and unavailable: {u['reason']}")
        elif info["aio"]["uring_reason"] is not None:
            lines.append(
                "io_uring is required and fdkit.aio's io_uring engine cannot run: "
                f"{info['aio']['uring_reason']}"
            )
    return lines


def run(args: argparse.Namespace) -> int:
    _log.setup("doctor", args)
    info = collect()
    if args.json:
        print(json.dumps(info, indent=2))
    elif args.quiet:
        for line in problems(info):
            print(line)
    else:
        print(render(info))
    failed = unmet(info, args.require or [])
    for line in failed:
        log.error("%s", line)
    return 1 if failed else 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "doctor",
        help="report kernel features fdkit uses (io_uring ops, pipe limits, splice…)",
        description="Check what this kernel and process allow: io_uring and its ops, pipe "
        "sizes, RLIMIT_NOFILE, and whether splice, copy_file_range and sendfile work here.",
    )
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument(
        "--require",
        action="append",
        choices=["io_uring"],
        type=lambda v: ENGINE_NAMES.get(v, v),
        metavar="FEATURE",
        help="exit 1 (saying why on stderr) unless FEATURE works here; io_uring (alias uring): "
        "the probe's syscalls and fdkit.aio's io_uring engine (repeatable)",
    )
    _log.add_verbosity(
        p, quiet="print only what does not work here (nothing when all works; not with --json)"
    )
    p.set_defaults(run=run)
