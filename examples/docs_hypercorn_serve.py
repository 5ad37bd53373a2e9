# examples/docs_hypercorn_serve.py: python docs_hypercorn_serve.py (PORT=8000 by default)
import asyncio
import os

from docs_asgi_app import app  # the app: examples/docs_asgi_app.py
from hypercorn.asyncio import serve
from hypercorn.config import Config

import fdkit.aio

config = Config()
config.bind = [f"127.0.0.1:{os.environ.get('PORT', '8000')}"]

with asyncio.Runner(loop_factory=fdkit.aio.new_event_loop) as runner:
    runner.run(serve(app, config))  # Ctrl-C or SIGTERM stops it
