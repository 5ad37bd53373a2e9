#!/usr/bin/env python3
"""Static file serving, server CPU per request under wrk: `fdkit serve` (io_uring and epoll)
vs nginx and an asyncio static server on 6 B, 4 KiB and 1 MiB files, and the Python `Ring`
hello server (examples/hello_server.py) vs an asyncio Protocol hello server.

Run: .venv/bin/python bench/serve.py [--quick] [--json]  (same as `fdkit bench serve`).
The code lives in fdkit.benchmarks.serve so the installed `fdkit bench` carries it.
"""

from fdkit.benchmarks._cli import main

if __name__ == "__main__":
    raise SystemExit(main(names=["serve"]))
