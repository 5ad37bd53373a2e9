"""A forwarding proxy's CPU per GiB: ``fdkit proxy`` against a small asyncio proxy.

Four kinds of process, none of them the bench itself:

* the upstream: an endpoint process (``accept-sink``) that accepts one connection per round
  and splices everything it receives into ``/dev/null`` (hashing it in the warm-up round);
* the proxies, both started once and measured alternately: ``fdkit proxy 127.0.0.1:0
  127.0.0.1:UPSTREAM`` (run as ``python -m fdkit``), and :mod:`bench.child.asyncio_proxy`, a plain
  asyncio proxy (``loop.sock_recv_into``/``loop.sock_sendall`` with a 64 KiB buffer per
  direction, half-close propagated) started the same way;
* the client: an endpoint process that connects to the proxy, sends N bytes with
  ``os.sendfile``, shuts down its write side and waits for the proxy to close.

Each round reads the proxy's ``utime + stime`` from ``/proc/PID/stat`` before and after one
connection carrying N bytes (the proxy's CPU from accept to close; in the finer steps of the
per-thread ``schedstat`` run times when they agree, see :func:`._endpoints.cpu_between`), and
the wall time from the client's command to the upstream's answer. Both proxies are stopped
with SIGTERM (SIGKILL after 5 s, with a note: the CLI promises a clean stop).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from bench._common import Result, Sample, alternate, compare, median_of, note, pick
from bench._endpoints import (
    Child,
    GiB,
    MiB,
    cpu_between,
    read_cpu,
    repeated_sha,
    stop_process,
    write_data,
)
from bench.child import script

BENCH = "proxy"
GOAL = 3.0  # fdkit proxy: at most 1/3 the CPU per GiB of the asyncio proxy
REPLY_TIMEOUT = 300.0
START_TIMEOUT = 15.0
LABELS = {"fdkit": "fdkit proxy", "asyncio": "asyncio proxy (sock_recv_into/sock_sendall, 64 KiB)"}


_ADDRESS = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d{1,3}){3}):(\d{1,5})\b")


class Server:
    """A proxy process with its output in temporary files; knows the address it bound."""

    def __init__(self, name: str, argv: Sequence[str], upstream_port: int) -> None:
        self.name = name
        self._out = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop)
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop)
        try:
            self.proc = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=self._out, stderr=self._err
            )
        except BaseException:
            self._out.close()
            self._err.close()
            raise
        self.clean_stop: bool | None = None
        try:
            self.address = self._wait_address(upstream_port)
        except BaseException:
            self.stop()
            raise

    def _output(self) -> str:
        parts = []
        for f in (self._out, self._err):
            f.seek(0)
            parts.append(f.read().decode(errors="replace"))
        return "\n".join(parts)

    def _wait_address(self, upstream_port: int) -> tuple[str, int]:
        """The first ``HOST:PORT`` in its output that is not the upstream's."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            text = self._output()
            for m in _ADDRESS.finditer(text):
                port = int(m.group(2))
                if port not in (0, upstream_port):
                    return m.group(1), port
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with status {self.proc.returncode}: {text.strip()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.name} printed no listening address in {START_TIMEOUT:g} s: "
                    f"{text.strip()!r}"
                )
            time.sleep(0.02)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s; remembers whether it stopped by itself."""
        try:
            if self.proc.poll() is None:
                status = stop_process(self.proc, signal.SIGTERM, 5.0)
                self.clean_stop = status == 0
                if status is None:
                    note(f"{self.name} ignored SIGTERM for 5 s and was killed")
                elif status != 0:
                    note(f"{self.name} exited with status {status} on SIGTERM (expected 0)")
        finally:
            self._out.close()
            self._err.close()


@dataclass
class Rig:
    """The upstream sink, the client, and the data the client sends."""

    sink: Child
    client: Child
    upstream_port: int
    data: bytes


@contextlib.contextmanager
def _rig() -> Iterator[Rig]:
    import socket

    with contextlib.ExitStack() as stack:
        d = stack.enter_context(tempfile.TemporaryDirectory(prefix="fdkit-bench-proxy-"))
        data = os.urandom(8 * MiB)
        data_path = os.path.join(d, "data")
        write_data(data_path, len(data), data)
        listener = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        port = listener.getsockname()[1]
        lfd = listener.fileno()
        sink = Child.endpoint("accept-sink", str(lfd), pass_fds=[lfd])
        stack.callback(sink.stop)
        listener.close()  # the sink holds its own copy
        client = Child.endpoint("client", data_path)
        stack.callback(client.stop)
        yield Rig(sink, client, port, data)


def _servers(rig: Rig, stack: contextlib.ExitStack) -> dict[str, Server]:
    upstream = f"127.0.0.1:{rig.upstream_port}"
    argv = {
        "fdkit": [sys.executable, "-m", "fdkit", "proxy", "127.0.0.1:0", upstream],
        "asyncio": [
            sys.executable,
            script("asyncio_proxy"),
            "127.0.0.1",
            "0",
            "127.0.0.1",
            str(rig.upstream_port),
        ],
    }
    servers: dict[str, Server] = {}
    for key, args in argv.items():
        server = Server(LABELS[key], args, rig.upstream_port)
        stack.callback(server.stop)
        servers[key] = server
    return servers


def _measure(rig: Rig, server: Server, n: int, expected: Callable[[], str]) -> Callable[[], Sample]:
    runs = [0]

    def once() -> Sample:
        runs[0] += 1
        check = runs[0] == 1
        host, port = server.address
        cpu0 = read_cpu(server.pid)
        t0 = time.perf_counter_ns()
        rig.sink.send("sha" if check else "count")
        answer = rig.client.ask(f"{host} {port} {n}", REPLY_TIMEOUT)
        got, digest = rig.sink.reply(REPLY_TIMEOUT).split()
        wall = time.perf_counter_ns() - t0
        cpu1 = read_cpu(server.pid)
        if not answer.startswith(f"sent {n} "):
            raise RuntimeError(f"{server.name}: the client answered {answer!r}")
        if int(got) != n:
            raise RuntimeError(f"{server.name}: the upstream got {got} of {n} bytes")
        if check and digest != expected():
            raise RuntimeError(f"{server.name}: the bytes that arrived differ (sha256)")
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.name} exited with status {server.proc.returncode}")
        return Sample(n, wall, round(cpu_between(cpu0, cpu1) * 1e9))

    return once


def _cpu_per_gib(s: Sample) -> float:
    return s.cpu_ns / 1e9 / (s.count / GiB)


def _mib_per_s(s: Sample) -> float:
    return s.count / MiB / (s.wall_ns / 1e9)


def run(quick: bool) -> list[Result]:
    """One connection of N bytes per round through each proxy, alternating."""
    n = pick(quick, 2 * GiB, 512 * MiB, 8 * MiB)
    rounds = pick(quick, 5, 3, 1)
    warmup = 1  # the warm-up round checks the sha256
    sha: list[str] = []
    with _rig() as rig, contextlib.ExitStack() as stack:

        def expected() -> str:
            if not sha:
                sha.append(repeated_sha(rig.data, n))
            return sha[0]

        servers = _servers(rig, stack)
        samples = alternate(
            {key: _measure(rig, s, n, expected) for key, s in servers.items()}, rounds, warmup
        )

    def cpu(key: str) -> float:
        return median_of(samples[key], _cpu_per_gib)

    def rate(key: str) -> float:
        return median_of(samples[key], _mib_per_s)

    note(
        "proxy: "
        + "; ".join(
            f"{LABELS[k]} {cpu(k):.3f} s/GiB, {rate(k):,.0f} MiB/s" for k in ("fdkit", "asyncio")
        )
    )
    case = f"fdkit proxy [tcp, 1 connection x {n // MiB} MiB]"
    return [
        compare("proxy_vs_asyncio", BENCH, case, "proxy CPU per GiB (utime+stime)", "s/GiB",
                cpu("fdkit"), cpu("asyncio"), LABELS["asyncio"], GOAL),
        compare("proxy_rate", BENCH, case, "bytes per second (wall)", "MiB/s", rate("fdkit"),
                rate("asyncio"), LABELS["asyncio"]),
    ]  # fmt: skip
