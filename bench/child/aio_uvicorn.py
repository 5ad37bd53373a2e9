"""uvicorn (with httptools) serving a 6-line ASGI hello app on the loop the aio bench names:
``python aio_uvicorn.py LOOP HOST PORT``, ``LOOP`` one of ``fdkit``, ``uvloop``, ``rloop``,
``asyncio``.

The loop goes to uvicorn the way a user gives it, as ``uvicorn --loop``'s value
(``Config(loop=...)``): the import string ``fdkit.aio:new_event_loop`` for fdkit (uvicorn
>= 0.36 takes a ``module:factory`` there), ``rloop:new_event_loop``, and uvicorn's own names
``uvloop`` and ``asyncio``. uvicorn's ``Server.run`` runs ``serve()`` under
``asyncio.Runner(loop_factory=config.get_loop_factory())``; this program does the same, and
first prints ``loop MODULE.CLASS ENGINE`` from inside the running loop (the aio bench checks
it). uvicorn stops on SIGTERM (exit status 0). No access log,
no lifespan; status 3 and one line on stderr when uvicorn or the loop cannot be imported.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import sys
from typing import Any

LOOP_OPTION = {
    "fdkit": "fdkit.aio:new_event_loop",
    "uvloop": "uvloop",
    "rloop": "rloop:new_event_loop",
    "asyncio": "asyncio",
}


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert scope["type"] == "http"
    headers = [(b"content-type", b"text/plain"), (b"content-length", b"6")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"hallo\n"})


def main(argv: list[str]) -> None:
    name, host, port = argv[0], argv[1], int(argv[2])
    try:
        # by name: optional (requirements-bench.txt), and a type checker need not have them
        importlib.import_module("httptools")  # http="httptools" below needs it
        uvicorn = importlib.import_module("uvicorn")
    except ImportError as e:
        print(f"cannot import uvicorn with httptools: {e}", file=sys.stderr, flush=True)
        raise SystemExit(3) from None
    config = uvicorn.Config(
        app, host=host, port=port, loop=LOOP_OPTION[name], http="httptools",
        lifespan="off", access_log=False, log_level="warning", backlog=4096,
    )  # fmt: skip
    server = uvicorn.Server(config)
    try:
        factory = config.get_loop_factory()
    except SystemExit:
        print(f"uvicorn cannot load the loop {LOOP_OPTION[name]}", file=sys.stderr, flush=True)
        raise SystemExit(3) from None

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        kind = type(loop)
        engine = getattr(loop, "engine", "-")
        print(f"loop {kind.__module__}.{kind.__qualname__} {engine}", flush=True)
        await server.serve()

    # uvicorn stops gracefully on SIGTERM, then raises the signal again with the handler that
    # was there before it: make that one end the process with status 0 (it is done by then)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve())


if __name__ == "__main__":
    main(sys.argv[1:])
