# examples/docs_asgi_app.py: the smallest ASGI app, naming the loop that serves it
import asyncio
from typing import Any


async def app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    loop = asyncio.get_running_loop()
    body = f"{type(loop).__name__} {getattr(loop, 'engine', None)}\n".encode()
    headers = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
