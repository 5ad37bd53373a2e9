"""``fdkit.serve``: the static file server whose hot loop runs in Rust (io_uring or epoll).

One worker serves in this process with the GIL released. ``workers=N`` (N > 1) forks N worker
processes that each listen on the same port (``SO_REUSEPORT``: the kernel spreads connections);
this process supervises them: it forwards SIGINT/SIGTERM, reaps them, and adds up their
counters.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import TYPE_CHECKING, Any, cast

from fdkit._fdkit import SERVE_DEFAULTS as _DEFAULTS
from fdkit._fdkit import serve_static

if TYPE_CHECKING:  # only for annotations: importing fdkit.types costs every program
    from fdkit.types import Engine, ListenInfo, ServeStats

__all__ = ["serve"]

#: How long a forked worker may take to start listening.
_START_TIMEOUT = 10.0


class _Terminated(KeyboardInterrupt):
    """Raised by the SIGTERM handler installed while serving: stops the server like Ctrl-C."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


def serve(
    directory: str | os.PathLike[str],
    *,
    host: str = _DEFAULTS["host"],
    port: int = _DEFAULTS["port"],
    workers: int = 1,
    engine: Engine = _DEFAULTS["engine"],
    idle_timeout: float = _DEFAULTS["idle_timeout"],
    max_connections: int = _DEFAULTS["max_connections"],
    quiet: bool = _DEFAULTS["quiet"],
    on_listen: Callable[[str, int], object] | None = None,
    listing: bool = _DEFAULTS["listing"],
    access_log: bool = _DEFAULTS["access_log"],
) -> ServeStats:
    """Serve the files under ``directory`` over HTTP/1.1 until SIGINT or SIGTERM.

    GET and HEAD, keep-alive and pipelining, ``Range`` (one range), ``If-Modified-Since``,
    ``index.html`` (then ``index.htm``) for directories; nothing outside ``directory`` is ever
    opened. ``listing=True``: a directory without an index file is answered with an HTML listing
    (names escaped, symlinks that lead outside ``directory`` left out). ``access_log=True``:
    one common log format line per response on stderr, written in batches. ``port=0``
    picks a free port; ``on_listen(host, port)`` is called once it listens (with every worker
    listening). ``engine`` is ``"auto"`` (io_uring where the kernel allows it, else epoll),
    ``"uring"`` or ``"epoll"``. The defaults are ``serve_static``'s (``_fdkit.SERVE_DEFAULTS``).

    Blocks until stopped (in the main thread, SIGTERM stops it like Ctrl-C), finishes the
    responses in flight, and returns the counters: ``requests``, ``connections``,
    ``timeouts``, ``refused``, ``peak_connections``, ``max_connections``, plus ``engine`` and
    ``stopped_by`` (``"SIGINT"``, ``"SIGTERM"``), and ``workers`` when ``workers > 1``
    (:class:`fdkit.types.ServeStats`).
    """

    def ready(i: dict[str, Any]) -> None:
        if on_listen is not None:
            on_listen(i["host"], i["port"])

    stats = _serve(
        directory,
        host=host,
        port=port,
        workers=workers,
        engine=engine,
        idle_timeout=idle_timeout,
        max_connections=max_connections,
        quiet=quiet,
        on_ready=ready,
        listing=listing,
        access_log=access_log,
    )
    # Built from the native server's stats dict plus the keys added here; the keys are checked
    # against ServeStats by tests/test_types.py.
    return cast("ServeStats", stats)


def _serve(
    directory: str | os.PathLike[str],
    *,
    host: str,
    port: int,
    workers: int,
    engine: Engine,
    idle_timeout: float,
    max_connections: int,
    quiet: bool,
    on_ready: Callable[[dict[str, Any]], None],
    listing: bool = _DEFAULTS["listing"],
    access_log: bool = _DEFAULTS["access_log"],
) -> dict[str, Any]:
    """``serve`` with ``on_ready(info)``: ``host``, ``port``, ``engine``, ``fallback``,
    ``workers``."""
    if not isinstance(workers, int) or isinstance(workers, bool) or not 1 <= workers <= 1024:
        raise ValueError(f"workers must be 1..=1024, got {workers!r}")
    if isinstance(host, str) and "\0" in host:  # as serve_static says it, before any fork
        raise ValueError(f"host must not contain a NUL byte: {host.strip('[]')!r}")
    kwargs: dict[str, Any] = {
        "engine": engine,
        "idle_timeout": idle_timeout,
        "max_connections": max_connections,
        "quiet": quiet,
        "listing": listing,
        "access_log": access_log,
    }
    if workers == 1:
        return _serve_here(directory, host, port, kwargs, on_ready)
    return _supervise(directory, host, port, workers, kwargs, on_ready)


def _with_sigterm(run: Callable[[], Mapping[str, Any]]) -> dict[str, Any]:
    """Runs ``run`` with SIGTERM raising (main thread only); returns its stats either way."""
    main = threading_is_main()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main else None
    try:
        stats = dict(run())
        stats["stopped_by"] = None
    except _Terminated as e:
        stats = dict(getattr(e, "serve_stats", None) or {})
        stats["stopped_by"] = "SIGTERM"
    except KeyboardInterrupt as e:
        stats = dict(getattr(e, "serve_stats", None) or {})
        stats["stopped_by"] = "SIGINT"
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
    return stats


def threading_is_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _serve_here(
    directory: str | os.PathLike[str],
    host: str,
    port: int,
    kwargs: dict[str, Any],
    on_ready: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    engine: list[str] = []

    def listening(info: ListenInfo) -> None:
        engine.append(info["engine"])
        on_ready({**info, "workers": 1})

    stats = _with_sigterm(
        lambda: serve_static(directory, host=host, port=port, on_listen=listening, **kwargs)
    )
    stats["engine"] = engine[0] if engine else None
    return stats


def _free_port(host: str) -> tuple[socket.socket, int]:
    """A socket bound (not listening) with SO_REUSEPORT to a port the kernel picked: held
    until the workers listen on the same port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((host.strip("[]"), 0))
    return s, int(s.getsockname()[1])


def _worker(
    directory: str | os.PathLike[str],
    host: str,
    port: int,
    kwargs: dict[str, Any],
    wfd: int,
) -> None:
    """A forked worker: serve with SO_REUSEPORT, report readiness and stats on ``wfd``."""
    code = 0
    try:
        stopped = [False]

        def once(signum: int, frame: FrameType | None) -> None:
            # The parent forwards signals and a terminal sends them to the whole group: the
            # first one stops the server, later ones are ignored.
            if not stopped[0]:
                stopped[0] = True
                raise _Terminated

        signal.signal(signal.SIGINT, once)
        signal.signal(signal.SIGTERM, once)

        def listening(info: ListenInfo) -> None:
            os.write(wfd, (json.dumps({"ready": info}) + "\n").encode())

        try:
            stats = dict(
                serve_static(
                    directory,
                    host=host,
                    port=port,
                    reuse_port=True,
                    on_listen=listening,
                    **kwargs,
                )
            )
        except KeyboardInterrupt as e:
            stats = dict(getattr(e, "serve_stats", None) or {})
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.write(wfd, (json.dumps({"stats": stats}) + "\n").encode())
    except BaseException as e:
        with contextlib.suppress(OSError):
            report: dict[str, Any] = {"error": str(e) or type(e).__name__}
            if isinstance(e, OSError) and e.errno is not None:  # rebuilt as is in the parent
                report.update(errno=e.errno, strerror=e.strerror, filename=e.filename)
            os.write(wfd, (json.dumps(report) + "\n").encode())
        code = 1
    finally:
        os._exit(code)


def _supervise(
    directory: str | os.PathLike[str],
    host: str,
    port: int,
    workers: int,
    kwargs: dict[str, Any],
    on_ready: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    if not os.path.isdir(directory):
        raise FileNotFoundError(2, "No such directory", os.fspath(directory))
    holder = None
    if port == 0:
        holder, port = _free_port(host)
    sys.stdout.flush()
    sys.stderr.flush()
    children: dict[int, int] = {}  # pid -> read end of its report pipe
    for _ in range(workers):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            for other in children.values():
                os.close(other)
            _worker(directory, host, port, kwargs, w)
        os.close(w)
        children[pid] = r
    buffers = {pid: b"" for pid in children}
    forwarded: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        forwarded.append(signum)
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    main = threading_is_main()
    previous = (
        {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    )
    try:
        reports = _collect_ready(children, buffers, forwarded)
        if holder is not None:
            holder.close()
            holder = None
        errors = [r for r in reports.values() if "error" in r]
        if errors:
            forward(signal.SIGTERM, None)
            _reap(children)
            if "errno" in errors[0]:
                raise OSError(errors[0]["errno"], errors[0]["strerror"], errors[0]["filename"])
            raise OSError(errors[0]["error"])
        if not forwarded:
            info = next(iter(reports.values()))["ready"]
            on_ready({**info, "workers": workers})
        _reap(children)
    finally:
        if holder is not None:
            holder.close()
        for s, h in previous.items():
            signal.signal(s, h)
    total: dict[str, Any] = {}
    engine = None
    for pid, fd in children.items():
        data = buffers[pid] + _read_all(fd)
        os.close(fd)
        for line in data.splitlines():
            msg = json.loads(line)
            if "ready" in msg:
                engine = msg["ready"]["engine"]
            for k, v in msg.get("stats", {}).items():
                total[k] = total.get(k, 0) + v  # every counter adds up across workers
    total["engine"] = engine
    total["workers"] = workers
    total["stopped_by"] = (
        {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}.get(signal.Signals(forwarded[0]))
        if forwarded
        else None
    )
    return total


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _collect_ready(
    children: dict[int, int], buffers: dict[int, bytes], forwarded: list[int]
) -> dict[int, dict[str, Any]]:
    """Waits until every worker reported (ready or error), a signal came, or the timeout."""
    reports: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + _START_TIMEOUT
    while len(reports) < len(children) and not forwarded:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("workers did not start listening in time")
        pending = [fd for pid, fd in children.items() if pid not in reports]
        readable, _, _ = select.select(pending, [], [], min(left, 0.1))
        for pid, fd in children.items():
            if fd not in readable:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                reports[pid] = {"error": f"worker {pid} exited before listening"}
                continue
            buffers[pid] += chunk
            if b"\n" in buffers[pid]:
                line, _, rest = buffers[pid].partition(b"\n")
                buffers[pid] = rest
                reports[pid] = json.loads(line)
                if "ready" in reports[pid]:
                    buffers[pid] = line + b"\n" + rest
    return reports


def _reap(children: dict[int, int]) -> None:
    """Waits for every worker (signals meanwhile are forwarded by the handler)."""
    left = set(children)
    while left:
        try:
            pid, _ = os.waitpid(-1, 0)
        except ChildProcessError:
            return
        left.discard(pid)
