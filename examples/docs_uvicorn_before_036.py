# examples/docs_uvicorn_before_036.py: python docs_uvicorn_before_036.py (PORT=8000 by default)
import os

import uvicorn
from docs_asgi_app import app  # the app: examples/docs_asgi_app.py

import fdkit.aio

# uvicorn before 0.36 knows no loop factory; with loop="asyncio" it runs asyncio.run, which
# takes its loop from asyncio's policy: make that policy fdkit's.
fdkit.aio.install()
uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8000")), loop="asyncio")
