#!/usr/bin/env python3
"""Memory per held socket: RSS growth over 10,000 socket.socket objects vs fdkit int fds.

Run: .venv/bin/python bench/memory.py [--quick] [--json]  (same as `fdkit bench memory`).
The code lives in fdkit.benchmarks.memory so the installed `fdkit bench` carries it.
"""

from fdkit.benchmarks._cli import main

if __name__ == "__main__":
    raise SystemExit(main(names=["memory"]))
