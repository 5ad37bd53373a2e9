"""The Starlette app the uvicorn tests serve (in-process and as ``uvicorn helpers.asgi_app:app``):
``GET /`` names the loop it runs on, ``POST /echo`` answers with the body it got,
``GET /stream?n=N`` streams N numbered chunks with a loop turn between them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

#: the size of each streamed chunk
CHUNK = 10_000


def chunk(i: int) -> bytes:
    """Chunk ``i`` of the stream: its number, then filler up to :data:`CHUNK` bytes."""
    head = f"chunk {i:04d};".encode()
    return head + bytes([65 + i % 26]) * (CHUNK - len(head))


async def index(request: Request) -> Response:
    loop = asyncio.get_running_loop()
    # The loop's class and its bases: fdkit.aio.EventLoop() is a UringEventLoop or an
    # EpollEventLoop, both EventLoops.
    classes = [f"{k.__module__}.{k.__qualname__}" for k in type(loop).__mro__]
    return JSONResponse({"loop": classes, "engine": getattr(loop, "engine", None)})


async def echo(request: Request) -> Response:
    body = await request.body()
    return Response(body, media_type="application/octet-stream")


async def stream(request: Request) -> Response:
    n = int(request.query_params.get("n", "8"))

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(n):
            yield chunk(i)
            await asyncio.sleep(0.005)

    return StreamingResponse(chunks(), media_type="application/octet-stream")


app = Starlette(
    routes=[
        Route("/", index),
        Route("/echo", echo, methods=["POST"]),
        Route("/stream", stream),
    ]
)
