#!/usr/bin/env python3
"""Atomic pipe messages from writer processes into one reader: fdkit's AtomicPipe (batched
and one call per message, mixed mode, zstd) against multiprocessing.Queue,
multiprocessing.Pipe and the unframed pipe, 100 B and 10 KB messages, 1 and 4 writers; msg/s.

Run: .venv/bin/python bench/atomic_pipe.py [--quick] [--json]  (same as `fdkit bench atomic_pipe`).
The code lives in fdkit.benchmarks.atomic_pipe so the installed `fdkit bench` carries it.
"""

from fdkit.benchmarks._cli import main

if __name__ == "__main__":
    raise SystemExit(main(names=["atomic_pipe"]))
