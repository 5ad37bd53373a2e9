"""uvicorn + Starlette on fdkit.aio and on asyncio's loop, the same app and the same requests:
a GET, a 1 MB POST echoed back intact, a streaming response in several HTTP chunks.

Two ways in: ``uvicorn --loop fdkit.aio:new_event_loop`` in a subprocess (uvicorn ≥ 0.36 takes an
import string for a loop factory; the app reports the loop it runs on), and in-process, where
uvicorn's own ``Config.get_loop_factory()`` resolves the same string and the test's aiohttp
client shares the server's loop. The subprocess runs with every DeprecationWarning an error
(``PYTHONWARNINGS``), as the in-process run does under pytest's ``filterwarnings``: on 3.14
and later, where asyncio deprecates its policies, serving on fdkit's loop warns of nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import re
import socket
import subprocess
import time
from collections.abc import Iterator

import aiohttp
import pytest
import uvicorn

from helpers import payload
from helpers.aio import PYTHON, Loop, each_loop, python_env, stop
from helpers.asgi_app import CHUNK, app, chunk

STARTED = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")
BIG = payload(1 << 20, seed=11)
N_CHUNKS = 8


# --- a raw HTTP/1.1 client (blocking, bounded): the answer as the wire carried it ---------------


def http(
    port: int, method: str, path: str, body: bytes = b""
) -> tuple[int, dict[str, str], list[bytes]]:
    """One request on a fresh connection (``Connection: close``); returns the status, the headers
    (lower-case names) and the body as its HTTP chunks (one element when not chunked)."""
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head + body)
        raw = bytearray()
        while data := s.recv(1 << 16):
            raw += data
    top, _, rest = bytes(raw).partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:])}
    if headers.get("transfer-encoding") != "chunked":
        assert len(rest) == int(headers["content-length"])
        return status, headers, [rest]
    chunks = []
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        chunks.append(rest[:size])
        assert rest[size : size + 2] == b"\r\n"
        rest = rest[size + 2 :]
    return status, headers, chunks


def check_stream(chunks: list[bytes]) -> None:
    """The streamed body arrived whole and in order, in more than one HTTP chunk."""
    assert b"".join(chunks) == b"".join(chunk(i) for i in range(N_CHUNKS))
    assert len(chunks) > 1, "the streaming response came as one chunk"


# --- uvicorn in a subprocess -----------------------------------------------------------------


@pytest.fixture
def uvicorn_server(loop: Loop) -> Iterator[int]:
    """``python -m uvicorn --loop <loop> helpers.asgi_app:app`` on 127.0.0.1, port 0; yields
    the port; stopped by pid."""
    child = subprocess.Popen(
        [PYTHON, "-m", "uvicorn", "--loop", loop.uvicorn_loop, "--http", "h11",
         "--host", "127.0.0.1", "--port", "0", "--lifespan", "off", "--no-access-log",
         "helpers.asgi_app:app"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**python_env(), **loop.env, "PYTHONWARNINGS": "error::DeprecationWarning"},
    )  # fmt: skip
    try:
        assert child.stderr is not None
        deadline = time.monotonic() + 15
        seen = []
        port = None
        while port is None and time.monotonic() < deadline:
            line = child.stderr.readline()
            if not line:
                break
            seen.append(line)
            if m := STARTED.search(line):
                port = int(m.group(1))
        assert port is not None, (
            f"uvicorn --loop {loop.uvicorn_loop} did not start: {''.join(seen)}"
        )
        yield port
    finally:
        stop(child)


@each_loop
def test_uvicorn_subprocess(loop: Loop, uvicorn_server: int) -> None:
    port = uvicorn_server
    status, _, body = http(port, "GET", "/")
    assert status == 200
    info = json.loads(body[0])
    assert f"{loop.cls.__module__}.{loop.cls.__qualname__}" in info["loop"], info
    if loop.name != "asyncio":
        assert info["engine"] == loop.cls.engine  # type: ignore[attr-defined]

    status, headers, body = http(port, "POST", "/echo", BIG)
    assert status == 200
    assert int(headers["content-length"]) == len(BIG)
    assert hashlib.sha256(body[0]).digest() == hashlib.sha256(BIG).digest()

    status, headers, chunks = http(port, "GET", f"/stream?n={N_CHUNKS}")
    assert status == 200
    assert headers["transfer-encoding"] == "chunked"
    check_stream(chunks)


# --- uvicorn in-process, an aiohttp client on the same loop -----------------------------------


@each_loop
def test_uvicorn_in_process(loop: Loop, monkeypatch: pytest.MonkeyPatch) -> None:
    # log_config=None: uvicorn's default logging config goes through dictConfig, which closes
    # every logging handler of this process (pytest's among them)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, loop=loop.uvicorn_loop, http="h11", lifespan="off",
        log_config=None, log_level="warning", access_log=False,
    )  # fmt: skip
    factory = config.get_loop_factory()
    assert factory is not None
    # uvicorn resolved the import string to the loop factory itself (Loop.run checks the class
    # of the loop it makes)
    if loop.name != "asyncio":
        import fdkit.aio

        assert factory is fdkit.aio.new_event_loop
    for name, value in loop.env.items():
        monkeypatch.setenv(name, value)
    loop = dataclasses.replace(loop, factory=factory)
    server = uvicorn.Server(config)

    async def main() -> None:
        serving = asyncio.create_task(server.serve())
        while not server.started:
            assert not serving.done(), serving
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        base = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(base + "/") as r:
                    assert r.status == 200
                    info = await r.json()
                    assert f"{loop.cls.__module__}.{loop.cls.__qualname__}" in info["loop"]

                async def post() -> None:
                    async with session.post(base + "/echo", data=BIG) as r:
                        assert r.status == 200
                        assert await r.read() == BIG

                await asyncio.gather(*(post() for _ in range(4)))  # 4 at once, each intact

                async with session.get(f"{base}/stream?n={N_CHUNKS}") as r:
                    assert r.status == 200
                    chunks: list[bytes] = []
                    part = bytearray()
                    async for data, end in r.content.iter_chunks():
                        part += data
                        if end:
                            chunks.append(bytes(part))
                            part.clear()
                    if part:
                        chunks.append(bytes(part))
                    assert all(len(c) <= CHUNK for c in chunks)
                    check_stream(chunks)
        finally:
            server.should_exit = True
            await asyncio.wait_for(serving, 10)

    loop.run(main())
