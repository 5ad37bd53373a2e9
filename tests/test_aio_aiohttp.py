"""An aiohttp server and an aiohttp client, both on the loop under test (fdkit.aio, and asyncio's
loop as the oracle): GET, a 1 MB POST echoed back intact, a streamed response, many requests at
once over keep-alive connections, and a websocket echo."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from aiohttp import web

from helpers import payload
from helpers.aio import Loop, each_loop

BIG = payload(1 << 20, seed=12)
PARTS = [f"part {i};".encode() * 1000 for i in range(6)]


async def hello(request: web.Request) -> web.Response:
    return web.Response(text=f"hello {request.match_info.get('name', 'world')}")


async def echo(request: web.Request) -> web.Response:
    return web.Response(body=await request.read())


async def stream(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    for part in PARTS:
        await resp.write(part)
        await asyncio.sleep(0.002)
    await resp.write_eof()
    return resp


async def ws_echo(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    async for msg in ws:
        if msg.type == aiohttp.WSMsgType.TEXT:
            await ws.send_str(msg.data.upper())
        elif msg.type == aiohttp.WSMsgType.BINARY:
            await ws.send_bytes(msg.data[::-1])
    return ws


@asynccontextmanager
async def serving() -> AsyncIterator[str]:
    """The aiohttp app on 127.0.0.1, port 0, on the running loop; yields its base URL."""
    app = web.Application(client_max_size=4 << 20)
    app.router.add_get("/", hello)
    app.router.add_get("/hello/{name}", hello)
    app.router.add_post("/echo", echo)
    app.router.add_get("/stream", stream)
    app.router.add_get("/ws", ws_echo)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    assert runner.addresses
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


@each_loop
def test_aiohttp_server_and_client(loop: Loop) -> None:
    async def main() -> None:
        async with serving() as base, aiohttp.ClientSession() as session:
            async with session.get(base + "/") as r:
                assert r.status == 200
                assert await r.text() == "hello world"
            async with session.get(base + "/missing") as r:
                assert r.status == 404

            async with session.post(base + "/echo", data=BIG) as r:
                assert r.status == 200
                assert await r.read() == BIG

            async with session.get(base + "/stream") as r:
                assert r.status == 200
                assert r.headers["Transfer-Encoding"] == "chunked"
                assert await r.read() == b"".join(PARTS)

            async def one(i: int) -> str:
                async with session.get(f"{base}/hello/{i}") as r:
                    return await r.text()

            got = await asyncio.gather(*(one(i) for i in range(200)))
            assert got == [f"hello {i}" for i in range(200)]

            async with session.ws_connect(base + "/ws") as ws:
                for i in range(20):
                    await ws.send_str(f"msg {i}")
                    assert await ws.receive_str() == f"MSG {i}"
                await ws.send_bytes(BIG[:100_000])
                assert await ws.receive_bytes() == BIG[:100_000][::-1]

    loop.run(main())
