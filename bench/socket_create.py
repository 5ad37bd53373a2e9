#!/usr/bin/env python3
"""Socket creation: socket.socket() + close vs fd.socket() + fd.close() vs C, per CPU-second.

Run: .venv/bin/python bench/socket_create.py [--quick] [--json]
(same as `fdkit bench socket_create`).
The code lives in fdkit.benchmarks.socket_create so the installed `fdkit bench` carries it.
"""

from fdkit.benchmarks._cli import main

if __name__ == "__main__":
    raise SystemExit(main(names=["socket_create"]))
