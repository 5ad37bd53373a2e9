"""``fdkit.types`` against what the native code really produces: the TypedDicts' keys equal the
runtime dicts' keys, and every Literal value seen at run time is one the Literal names (so the
types cannot drift from the binding)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, get_args

import pytest

from fdkit import fd, uring, zerocopy
from fdkit.atomic_pipe import AtomicPipe
from fdkit.types import (
    AtomicPipeMode,
    CompletionOp,
    Engine,
    EngineName,
    ListenInfo,
    MixedEvent,
    ProxyStats,
    ServeStaticStats,
    ServeStats,
    StoppedBy,
    TransferFallback,
    TransferPath,
    TransferStats,
    ZstdCodec,
)


def keys(td: Any) -> tuple[frozenset[str], frozenset[str]]:
    """A TypedDict's (required, optional) keys."""
    return frozenset(td.__required_keys__), frozenset(td.__optional_keys__)


def test_transfer_stats_keys_and_paths(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.write_bytes(b"x" * 100_000)
    s = fd.open(src, fd.O_RDONLY)
    # An O_APPEND destination: copy_file_range refuses it, so the stats carry fallbacks.
    d = fd.open(tmp_path / "dst", fd.O_WRONLY | fd.O_CREAT | fd.O_APPEND, 0o600)
    try:
        assert zerocopy.transfer(s, d) == 100_000
        stats = zerocopy.transfer_stats()
    finally:
        fd.close(s)
        fd.close(d)
    assert stats is not None
    assert (frozenset(stats), frozenset()) == keys(TransferStats)
    assert stats["path"] in get_args(TransferPath)
    assert stats["fallbacks"], stats
    for f in stats["fallbacks"]:
        assert (frozenset(f), frozenset()) == keys(TransferFallback)
        assert f["from"] in get_args(TransferPath)
        assert f["to"] in get_args(TransferPath)


# Runs each server in this child process and stops it with a signal from a timer thread once
# it listens; prints what came back. Servers are stopped by signals, which pytest's process
# must not receive: hence the child.
SERVERS = textwrap.dedent(
    """
    import json, os, signal, sys, threading
    import fdkit
    from fdkit._fdkit import serve_proxy, serve_static

    def soon(sig):
        threading.Timer(0.2, os.kill, (os.getpid(), sig)).start()

    out = {}
    root = sys.argv[1]
    for workers in (1, 2):
        stats = fdkit.serve(root, port=0, workers=workers, quiet=True,
                            on_listen=lambda h, p: soon(signal.SIGTERM))
        out[f"serve{workers}"] = stats
    infos = []

    def listening(info):
        infos.append(info)
        soon(signal.SIGINT)

    try:
        serve_static(root, port=0, quiet=True, on_listen=listening)
    except KeyboardInterrupt as e:
        out["static"] = e.serve_stats
    out["listen_info"] = infos[0]
    try:
        serve_proxy("127.0.0.1:0", "127.0.0.1:9", quiet=True,
                    on_listen=lambda a, b: soon(signal.SIGINT))
    except KeyboardInterrupt as e:
        out["proxy"] = e.proxy_stats
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def server_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    root = tmp_path_factory.mktemp("site")
    (root / "index.html").write_text("hi")
    r = subprocess.run(
        [sys.executable, "-c", SERVERS, str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert r.returncode == 0, r.stderr
    got: dict[str, dict[str, object]] = json.loads(r.stdout)
    return got


@pytest.mark.parametrize("workers", [1, 2])
def test_serve_stats_keys(server_results: dict[str, dict[str, object]], workers: int) -> None:
    stats = server_results[f"serve{workers}"]
    required, optional = keys(ServeStats)
    assert optional == {"workers"}
    assert frozenset(stats) == (required | optional if workers > 1 else required), stats
    assert stats["engine"] in get_args(EngineName)
    assert stats["stopped_by"] in get_args(StoppedBy)


def test_serve_static_stats_and_listen_info_keys(
    server_results: dict[str, dict[str, object]],
) -> None:
    assert (frozenset(server_results["static"]), frozenset()) == keys(ServeStaticStats)
    info = server_results["listen_info"]
    assert (frozenset(info), frozenset()) == keys(ListenInfo)
    assert info["engine"] in get_args(EngineName)


def test_proxy_stats_keys(server_results: dict[str, dict[str, object]]) -> None:
    assert (frozenset(server_results["proxy"]), frozenset()) == keys(ProxyStats)


@pytest.mark.parametrize("mode", get_args(AtomicPipeMode))
def test_every_atomic_pipe_mode_is_accepted(mode: AtomicPipeMode) -> None:
    r, w = os.pipe2(os.O_CLOEXEC)
    n, other = (r, w) if mode in ("r", "<&", "<&=") else (w, r)
    os.close(other)
    with AtomicPipe.from_fd(mode, n) as p:
        assert p.mode in ("r", "w")
        assert p.mode == ("r" if n == r else "w")


def test_codec_and_mixed_events_are_the_literals() -> None:
    (codec,) = get_args(ZstdCodec)
    r, w = AtomicPipe.pair(mixed_data_mode=True, compression=codec)
    with r, w:
        assert r.compression in get_args(ZstdCodec)
        w.write_message(b"m")
        assert w.write_burst(b"b") is not None
        os.write(w.fileno(), b"line\n")
        kinds = []
        for _ in range(3):
            kind, _ = r.get_line_burst_or_data(timeout=5)
            assert kind is not None
            kinds.append(kind)
    assert sorted(kinds) == sorted(get_args(MixedEvent))


@pytest.mark.parametrize("engine", get_args(Engine))
def test_every_engine_is_accepted(engine: Engine, tmp_path: Path) -> None:
    """The binding reads ``engine`` (ValueError for one it does not know) before it checks
    ``on_listen``: a known engine gets as far as the TypeError, before anything listens."""
    from fdkit._fdkit import serve_static

    with pytest.raises(TypeError, match="on_listen must be callable"):
        serve_static(tmp_path, port=0, engine=engine, on_listen=1)  # type: ignore[arg-type]  # misuse on purpose


@pytest.mark.skipif(not uring.available()[0], reason="io_uring unavailable")
def test_completion_op_is_the_literal() -> None:
    with uring.Ring(8) as ring:
        ring.nop(1)
        ring.timeout(0.001, 2)
        ops = {c.op for c in ring.wait(2, timeout=5)}
    assert ops == {"nop", "timeout"}
    assert ops <= set(get_args(CompletionOp))
