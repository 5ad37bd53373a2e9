#!/usr/bin/env python3
"""A forwarding proxy's CPU per GiB: `fdkit proxy` vs a small asyncio proxy
(loop.sock_recv_into/sock_sendall, 64 KiB), each in its own process, between a client and
an upstream that are processes too.

Run: .venv/bin/python bench/proxy.py [--quick] [--json]  (same as `fdkit bench proxy`).
The code lives in fdkit.benchmarks.proxy so the installed `fdkit bench` carries it.
"""

from fdkit.benchmarks._cli import main

if __name__ == "__main__":
    raise SystemExit(main(names=["proxy"]))
