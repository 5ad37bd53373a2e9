#!/usr/bin/env python3
"""Accepting connections: drain a pre-filled backlog with socket.accept(), selectors,
fd.accept, fd.accept_many and a C accept4 loop (reset and live connections).

Run: .venv/bin/python bench/accept.py [--quick] [--json]  (same as `fdkit bench accept`).
The code lives in fdkit.benchmarks.accept so the installed `fdkit bench` carries it.
"""

from fdkit.benchmarks._cli import main

if __name__ == "__main__":
    raise SystemExit(main(names=["accept"]))
